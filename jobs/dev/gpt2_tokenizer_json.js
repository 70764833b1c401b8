#!/usr/bin/env node
/* GPT-2's tokenizer.json and tokenizer_config.json, built from the r50k_base
 * ranks that gpt-tokenizer ships (data/r50k_base.tiktoken: one token per
 * line, base64 of its bytes and its rank; the rank is GPT-2's id).
 *
 *   node jobs/dev/gpt2_tokenizer_json.js R50K_BASE.tiktoken OUT_DIR
 *
 * The vocabulary spells each token's bytes in GPT-2's byte-to-unicode
 * characters. The merges are GPT-2's own: a token of rank r was made by one
 * merge, found by running byte-pair encoding on its bytes with the ranks
 * below r only, which stops at exactly two parts (the way Hugging Face
 * converts tiktoken files). ignore_merges is true because tiktoken looks a
 * whole pre-token up before merging; <|endoftext|> (50256) is the added
 * special token. Pre-tokenizer, post-processor and decoder are ByteLevel with
 * GPT-2's regex, as in Hugging Face's gpt2 tokenizer.json. */
'use strict';

const fs = require('fs');
const path = require('path');

function bytesToUnicode() {
    const bs = [];
    for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
    for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
    for (let b = 0xae; b <= 0xff; b++) bs.push(b);
    const map = new Array(256);
    for (const b of bs) map[b] = String.fromCodePoint(b);
    let n = 0;
    for (let b = 0; b < 256; b++)
        if (map[b] === undefined)
            map[b] = String.fromCodePoint(256 + n++);
    return map;
}

/* The two parts byte-pair encoding with ranks below maxRank leaves of bytes. */
function lastMerge(ranks, bytes, maxRank) {
    let parts = Array.from(bytes, (b) => Buffer.from([b]));
    for (;;) {
        let best = -1, bestRank = maxRank;
        for (let i = 0; i + 1 < parts.length; i++) {
            const r = ranks.get(Buffer.concat([parts[i], parts[i + 1]]).toString('latin1'));
            if (r !== undefined && r < bestRank) {
                best = i;
                bestRank = r;
            }
        }
        if (best < 0)
            return parts;
        parts.splice(best, 2, Buffer.concat([parts[best], parts[best + 1]]));
    }
}

function main(argv) {
    if (argv.length !== 2) {
        console.error('usage: gpt2_tokenizer_json.js R50K_BASE.tiktoken OUT_DIR');
        return 1;
    }
    const byteChar = bytesToUnicode();
    const spell = (buf) => Array.from(buf, (b) => byteChar[b]).join('');
    const tokens = [];
    const ranks = new Map();
    for (const line of fs.readFileSync(argv[0], 'utf8').split('\n')) {
        if (!line.trim())
            continue;
        const [b64, r] = line.split(' ');
        const bytes = Buffer.from(b64, 'base64');
        tokens.push([bytes, Number(r)]);
        ranks.set(bytes.toString('latin1'), Number(r));
    }
    tokens.sort((a, b) => a[1] - b[1]);
    const vocab = {};
    const merges = [];
    for (const [bytes, rank] of tokens) {
        vocab[spell(bytes)] = rank;
        if (bytes.length < 2)
            continue;
        const parts = lastMerge(ranks, bytes, rank);
        if (parts.length !== 2)
            throw new Error(`token ${rank} is not one merge of lower ranks (${parts.length} parts)`);
        merges.push([spell(parts[0]), spell(parts[1])]);
    }
    const eot = '<|endoftext|>', eotId = tokens.length;
    const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
    const json = {
        version: '1.0',
        truncation: null,
        padding: null,
        added_tokens: [{ id: eotId, content: eot, single_word: false, lstrip: false, rstrip: false,
                         normalized: false, special: true }],
        normalizer: null,
        pre_tokenizer: byteLevel,
        post_processor: byteLevel,
        decoder: byteLevel,
        model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
                 fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges },
    };
    const config = { add_bos_token: false, add_prefix_space: false, bos_token: eot, eos_token: eot, unk_token: eot,
                     model_max_length: 1024, tokenizer_class: 'GPT2Tokenizer' };
    fs.mkdirSync(argv[1], { recursive: true });
    for (const [name, obj] of [['tokenizer.json', json], ['tokenizer_config.json', config]]) {
        const file = path.join(argv[1], name);
        fs.writeFileSync(file + '.partial', JSON.stringify(obj));
        fs.renameSync(file + '.partial', file);
    }
    console.error(`gpt2_tokenizer_json: ${tokens.length + 1} tokens, ${merges.length} merges in ${argv[1]}`);
    return 0;
}

process.exitCode = main(process.argv.slice(2));
