// The table of jobs/experiments/serve_reference.sh from its rows.jsonl (one server's turn a line):
// per node count and server, medians over every request of tokens/s, TPOT and TTFT, and the ratios
// meshinfer / distributed-llama of the medians and, per round, of that round's medians (their range).
// usage: node serve_reference_table.js ROWS.jsonl OUT_DIR MAX_TOKENS PLANNER DLLAMA_COMMIT CHECK_JSON
"use strict";
const fs = require("fs");
const [rowsPath, out, maxtok, planner, dlCommit, check] = process.argv.slice(2);
const rows = fs.readFileSync(rowsPath, "utf8").trim().split("\n").map(l => JSON.parse(l));
const want = JSON.parse(check);
const med = a => { const s = [...a].sort((x, y) => x - y), m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const stat = {}, perRound = {}; // perRound["server/nodes/round"]: that turn's tokens/s

for (const { server, nodes, round, result } of rows) {
    const k = `${server}/${nodes}`;
    stat[k] = stat[k] || { server, nodes, tps: [], tpot: [], ttft: [] };
    perRound[`${k}/${round}`] = med(result.requests.map(q => q.tokens_per_s));
    for (const q of result.requests) {
        stat[k].text = stat[k].text ?? q.text; // greedy: every request of a server on a node count streams one text
        if (q.text !== stat[k].text) { console.error(`serve_reference: ${server} on ${nodes} node(s) streamed two texts`); process.exit(1); }
        stat[k].tps.push(q.tokens_per_s); stat[k].tpot.push(q.tpot_ms); stat[k].ttft.push(q.ttft_ms);
    }
}
let md = "| nodes | server | requests | tokens/s per request (range) | TPOT, ms | TTFT, ms | tokens/s meshinfer / dllama | TPOT dllama / meshinfer |\n|---|---|---|---|---|---|---|---|\n";
let csv = "nodes,server,requests,tokens_per_s_median,tokens_per_s_min,tokens_per_s_max,tpot_ms_median,ttft_ms_median\n";
for (const n of [1, 2]) {
    const m = stat[`meshinfer/${n}`], d = stat[`dllama/${n}`];
    for (const x of [m, d]) {
        const name = x.server === "dllama" ? `distributed-llama dllama-api (${dlCommit})` :
            `meshinfer serve${n > 1 ? `, --planner ${planner}, TCP` : ""}`;
        const rs = Object.keys(perRound).filter(k => k.startsWith(`meshinfer/${n}/`))
            .map(k => perRound[k] / perRound[k.replace("meshinfer/", "dllama/")]).filter(v => v > 0);
        const ratio = x === m ? `**${(med(m.tps) / med(d.tps)).toFixed(2)}x** (rounds ${Math.min(...rs).toFixed(2)}-` +
            `${Math.max(...rs).toFixed(2)}) | **${(med(d.tpot) / med(m.tpot)).toFixed(2)}x**` : " | ";
        md += `| ${n} | ${name} | ${x.tps.length} | ${med(x.tps).toFixed(1)} (${Math.min(...x.tps).toFixed(1)}-${Math.max(...x.tps).toFixed(1)}) | ` +
            `${med(x.tpot).toFixed(2)} | ${med(x.ttft).toFixed(1)} | ${ratio} |\n`;
        csv += `${n},${x.server},${x.tps.length},${med(x.tps).toFixed(2)},${Math.min(...x.tps).toFixed(2)},${Math.max(...x.tps).toFixed(2)},` +
            `${med(x.tpot).toFixed(3)},${med(x.ttft).toFixed(2)}\n`;
    }
}
let same = 0;
while (same < want.meshinfer.text.length && want.meshinfer.text[same] === want.dllama.text[same]) same++;
const head = `stories15M fp32, one request at a time, greedy, max_tokens ${maxtok} (every request produced them; ` +
    `each server streamed the same text every time; the two texts agree on their first ${same} of ` +
    `${want.meshinfer.text.length} characters), streamed; medians over every round's requests.\n\n`;
fs.writeFileSync(`${out}/summary.md`, head + md);
fs.writeFileSync(`${out}/summary.csv`, csv);
process.stdout.write(head + md);
