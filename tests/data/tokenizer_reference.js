#!/usr/bin/env node
/* Regenerates tests/tokenizer_expected.tsv from llama-tokenizer-js@1.2.2 (MIT),
 * the reference Llama tokenizer the C encoder must agree with.
 *
 * Usage:
 *   node tests/tokenizer_reference.js OUT.tsv [MODULE_DIR]
 *
 * MODULE_DIR is either the llama-tokenizer-js package directory or a
 * node_modules directory containing it. Without it (or if it lacks the
 * package) the directories in NODE_PATH are tried, then normal Node
 * resolution from this file. To install the package for this script:
 *   mkdir -p .cache/npm && (cd .cache/npm && npm install --no-save llama-tokenizer-js@1.2.2)
 *   node tests/tokenizer_reference.js tests/tokenizer_expected.tsv .cache/npm/node_modules
 *
 * Output: a '#' comment line, then one line per string:
 *   <hex of the UTF-8 bytes>\t<ids separated by single spaces>
 * The ids are exactly tokenizer.encode(text) with the package defaults:
 * BOS (id 1) first and SentencePiece's dummy-prefix space added. Hex keeps
 * tabs, newlines and non-ASCII out of the C parser's way.
 *
 * Exit status: 0 written, 3 reference package missing or of another version
 * (tokenizer_compare.sh reports that as a skip), 1 any other failure.
 */
'use strict';

const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

const PACKAGE = 'llama-tokenizer-js';
const VERSION = '1.2.2';

/* Empty text is left out on purpose: llama-tokenizer-js returns [] for it
 * (no BOS), while mi_tokenizer_encode returns [BOS] as llama2.c does; the C
 * test checks that case on its own. U+2581 is left out because SentencePiece
 * maps it to a space, so it cannot round-trip through decode. */
const STRINGS = [
    'Once upon a time, there was a little girl named Lily',
    'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.',
    'Hello, world!',
    'One, two, three, four, five.',
    'apples,oranges,,pears',
    'The year 2023 had 365 days and 12 months.',
    '3.14159 and 2,718,281 and -42',
    'What?! Really... (yes) [no] {maybe} <tag> "quoted" \'single\'',
    'a  b   c    d     e',
    '   leading spaces',
    'trailing spaces   ',
    ' single leading space',
    'x' + ' '.repeat(40) + 'y',
    '\ttab\tseparated\tvalues\t',
    'line one\nline two',
    '\n\n',
    'paragraph one.\n\nparagraph two.\n',
    '     \t\n  mixed whitespace \r\n',
    'caf\u00e9 r\u00e9sum\u00e9 na\u00efve',
    '\u00dcber gr\u00fcne Br\u00fccken',
    'Die Stra\u00dfe ist gro\u00df',
    '\u4f60\u597d\u4e16\u754c',
    '\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3001\u6771\u4eac\u30bf\u30ef\u30fc',
    '\uc548\ub155\ud558\uc138\uc694',
    'I am happy \u{1F600}',
    '\u{1F999}\u{1F600}\u{1F389}',
    '\ua64a\u{1F999}',
    '\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?',
    '\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5',
    'Lily said: "I can\'t!" \u2014 and ran away\u2026',
    'e-mail: lily@example.com, https://example.org/a?b=c&d=e',
    'x\u00b2 + y\u00b2 = z\u00b2; \u00bd \u00be \u20ac100',
    'The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly, ' +
        'and Lily watched from the big old tree in the garden, smiling at the funny sight of it all.',
    'grabbed',
    ' grabbed',
    '           grabbed',
    'ax\n####\nboo',
    'a',
    ',',
    ' ',
    '\n',
    '7',
    '\u00e9',
    '\u{1F600}',
    /* pieces of the vocabulary's longest length (27 bytes, ' \u0430\u0434\u043c...' id 23409) and 25 */
    '\u0430\u0434\u043c\u0438\u043d\u0438\u0441\u0442\u0440\u0430\u0442\u0438\u0432\u043d\u044b\u0439 ' +
        '\u0443\u043d\u0438\u0432\u0435\u0440\u0441\u0438\u0442\u0435\u0442\u0430 ' +
        '\u0421\u0442\u0430\u043d\u043e\u0432\u043d\u0438\u0448\u0442\u0432\u043e',
];

function findPackageDir(candidates) {
    for (const dir of candidates) {
        if (!dir)
            continue;
        for (const d of [dir, path.join(dir, PACKAGE)]) {
            const pj = path.join(d, 'package.json');
            try {
                const meta = JSON.parse(fs.readFileSync(pj, 'utf8'));
                if (meta.name === PACKAGE)
                    return { dir: d, meta };
            } catch (e) {
                /* not here: try the next candidate */
            }
        }
    }
    try {
        const pj = require.resolve(PACKAGE + '/package.json');
        return { dir: path.dirname(pj), meta: JSON.parse(fs.readFileSync(pj, 'utf8')) };
    } catch (e) {
        return null;
    }
}

async function main() {
    const out = process.argv[2];
    if (!out) {
        console.error('usage: node tokenizer_reference.js OUT.tsv [MODULE_DIR]');
        return 1;
    }
    const nodePath = (process.env.NODE_PATH || '').split(path.delimiter);
    const found = findPackageDir([process.argv[3], ...nodePath]);
    if (!found) {
        console.error(`${PACKAGE} not found (give MODULE_DIR or set NODE_PATH)`);
        return 3;
    }
    if (found.meta.version !== VERSION) {
        console.error(`${PACKAGE} ${found.meta.version} found in ${found.dir}, need ${VERSION}`);
        return 3;
    }
    /* The package is an ES module, which Node 20 cannot require(). */
    const entry = path.join(found.dir, found.meta.main || 'llama-tokenizer.js');
    const mod = await import(pathToFileURL(entry).href);
    const tokenizer = mod.default;

    const lines = [`# generated by tests/tokenizer_reference.js from ${PACKAGE}@${VERSION}; do not edit`];
    for (const s of STRINGS) {
        const ids = tokenizer.encode(s);
        if (!Array.isArray(ids) || ids.length === 0 || ids.some((x) => !Number.isInteger(x))) {
            console.error(`unexpected encode result for ${JSON.stringify(s)}: ${ids}`);
            return 1;
        }
        lines.push(Buffer.from(s, 'utf8').toString('hex') + '\t' + ids.join(' '));
    }
    fs.writeFileSync(out, lines.join('\n') + '\n');
    return 0;
}

main().then(
    (rc) => process.exit(rc),
    (e) => {
        console.error(e && e.stack ? e.stack : String(e));
        process.exit(1);
    }
);
