// node jobs/lib/json.js FILE|- EXPR [ARG...]: the job scripts' one JSON reader.
// Prints the JavaScript expression EXPR, where j is FILE's parsed JSON (- reads
// stdin) and a the extra ARGs: numbers and strings as they are, anything else as
// JSON. A file that is missing or not JSON is one error line and exit 1.
'use strict';
const fs = require('fs');
const [file, expr, ...a] = process.argv.slice(2);
if (!file || !expr) {
    console.error('json.js: usage: node jobs/lib/json.js FILE|- EXPR [ARG...]');
    process.exit(2);
}
let j;
try {
    j = JSON.parse(fs.readFileSync(file === '-' ? 0 : file, 'utf8'));
} catch (e) {
    console.error(`json.js: error: ${file === '-' ? 'stdin' : file}: ${e.code === 'ENOENT' ? 'no such file' : 'not JSON (' + e.message + ')'}`);
    process.exit(1);
}
let v;
try {
    v = new Function('j', 'a', `return (${expr});`)(j, a);
} catch (e) {
    console.error(`json.js: error: ${expr}: ${e.message}`);
    process.exit(1);
}
console.log(v !== null && typeof v === 'object' ? JSON.stringify(v) : String(v));
