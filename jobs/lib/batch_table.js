// The tables of jobs/experiments/batch_throughput.sh from its rows.jsonl (one `bench --batch --json`
// run a line): one row per place (shared memory or testbed, ranks) and planner with tokens/s and
// per-request TPOT at 1 client and at every batch measured, into summary.md and summary.csv, and
// plot.csv (gnuplot blocks: clients, tokens/s; one block per place and planner).
// A later run of the same place, planner and batch replaces an earlier one.
// usage: node batch_table.js ROWS.jsonl OUT_DIR CLUSTER_FILE
"use strict";
const fs = require("fs");
const [rowsPath, out, cluster] = process.argv.slice(2);
const lines = fs.readFileSync(rowsPath, "utf8").split("\n").filter(l => l.trim());
if (!lines.length) { console.error("batch_table: no runs in " + rowsPath); process.exit(1); }
const order = ["layerwise", "greedy", "tp", "somegather", "hybrid", "roundrobin"];
const groups = new Map(); // "where/np/planner" -> {where, np, planner, runs: Map(batch -> row)}
for (const l of lines) {
    const r = JSON.parse(l);
    const np = r.n_ranks ?? r.result.n_ranks, b = r.batch ?? r.result.batch;
    const key = `${r.where}/${np}/${r.planner}`;
    if (!groups.has(key)) groups.set(key, { where: r.where, np, planner: r.planner, runs: new Map() });
    groups.get(key).runs.set(b, r);
}
const batches = [...new Set([...groups.values()].flatMap(g => [...g.runs.keys()]))].sort((a, b) => a - b);
const sorted = [...groups.values()].sort((a, b) =>
    (a.where === b.where ? 0 : a.where === "local" ? -1 : 1) || a.np - b.np ||
    order.indexOf(a.planner) - order.indexOf(b.planner));
const place = g => (g.where === "local" ? "shared memory" : "testbed");
const f1 = x => x.toFixed(1);
let model = "";
let md = "| where | ranks | planner | micro-batches | 1 client: tokens/s | TPOT, ms |";
let sep = "|---|---|---|---|---|---|";
for (const b of batches) { md += ` ${b} clients: tokens/s (x 1 client) | TPOT, ms |`; sep += "---|---|"; }
md += "\n" + sep + "\n";
let csv = "where,ranks,planner,clients,micro_batches,tokens_per_s,tpot_ms,ratio_vs_1,ratio_min,ratio_max,skipped\n";
let plot = "";
for (const g of sorted) {
    const runs = [...g.runs.values()];
    const ok = runs.filter(r => r.result);
    if (!ok.length) {
        md += `| ${place(g)} | ${g.np} | ${g.planner} | - | ${runs[0].skipped} |` + " |".repeat(1 + 2 * batches.length) + "\n";
        csv += `${g.where},${g.np},${g.planner},,,,,,,,${runs[0].skipped}\n`;
        continue;
    }
    model = ok[0].result.model;
    const alone = ok.reduce((s, r) => s + r.result.alone_tokens_per_s, 0) / ok.length;
    const micro = [...new Set(ok.map(r => r.result.micro_batches))].join("/");
    md += `| ${place(g)} | ${g.np} | ${g.planner} | ${micro} | ${f1(alone)} | ${f1(1000 / alone)} |`;
    csv += `${g.where},${g.np},${g.planner},1,1,${alone.toFixed(2)},${(1000 / alone).toFixed(2)},1,1,1,\n`;
    plot += `"${g.where === "local" ? "1 rank" : `testbed ${g.np} ranks ${g.planner}`}"\n1,${alone.toFixed(2)}\n`; // (no comma: the separator)
    for (const b of batches) {
        const r = g.runs.get(b);
        if (!r || !r.result) { md += " - | - |"; continue; }
        const x = r.result, tpot = 1000 * b / x.batch_tokens_per_s;
        md += ` **${f1(x.batch_tokens_per_s)}** (${x.ratio.toFixed(2)}x, ${x.ratio_min.toFixed(2)}-${x.ratio_max.toFixed(2)}) | ${f1(tpot)} |`;
        csv += `${g.where},${g.np},${g.planner},${b},${x.micro_batches},${x.batch_tokens_per_s.toFixed(2)},${tpot.toFixed(2)},` +
            `${x.ratio.toFixed(4)},${x.ratio_min.toFixed(4)},${x.ratio_max.toFixed(4)},\n`;
        plot += `${b},${x.batch_tokens_per_s.toFixed(2)}\n`;
    }
    md += "\n";
    plot += "\n\n";
}
const head = `Model ${model}; testbed ${cluster.replace(/.*\/hostfiles\//, "hostfiles/")}; every sequence's tokens ` +
    "equal alone and batched (checked). 1 client: the mean of the runs' one-at-a-time rounds; B clients: " +
    "B sequences decoded together, with that run's ratio to its own one-at-a-time rounds (median, range " +
    "over rounds); TPOT per request = B / aggregate tokens/s.\n\n";
fs.writeFileSync(`${out}/summary.md`, head + md);
fs.writeFileSync(`${out}/summary.csv`, csv);
fs.writeFileSync(`${out}/plot.csv`, plot);
process.stdout.write(head + md);
