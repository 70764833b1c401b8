// The tables of jobs/experiments/batch_throughput.sh from its rows.jsonl, one row per place (shared
// memory or testbed, ranks) and planner with tokens/s and per-request TPOT at 1 client and at every
// client count measured, into summary.md and summary.csv, and plot.csv (gnuplot blocks: clients,
// tokens/s; one block per place and planner). Two kinds of rows:
//   bench --batch (one run a line, "batch" and "result"): 1 client is the mean of the runs'
//     one-at-a-time rounds, B clients the run's batched median with its own batched/alone ratio;
//     TPOT = B / aggregate tokens/s. A later run of the same place, planner and batch replaces an
//     earlier one.
//   --http (one round of C clients a line, "clients", "round", "session", "result": serve_load.js's
//     JSON): tokens/s and TPOT (the streams' median) are medians over rounds, "x 1 client" each
//     round's ratio to the same round's 1 client (median, range). A place and planner's latest
//     session replaces its earlier ones.
// usage: node batch_table.js ROWS.jsonl OUT_DIR CLUSTER_FILE
"use strict";
const fs = require("fs");
const [rowsPath, out, cluster] = process.argv.slice(2);
const lines = fs.readFileSync(rowsPath, "utf8").split("\n").filter(l => l.trim());
if (!lines.length) { console.error("batch_table: no runs in " + rowsPath); process.exit(1); }
const order = ["layerwise", "greedy", "tp", "somegather", "hybrid", "roundrobin"];
const median = a => { const s = [...a].sort((x, y) => x - y), n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const groups = new Map(); // "where/np/planner" -> {where, np, planner, runs: Map(batch -> row), http: [rows]}
let http = false;
for (const l of lines) {
    const r = JSON.parse(l);
    const np = r.n_ranks ?? r.result.n_ranks;
    const key = `${r.where}/${np}/${r.planner}`;
    if (!groups.has(key)) groups.set(key, { where: r.where, np, planner: r.planner, runs: new Map(), http: [] });
    const g = groups.get(key);
    if (r.clients !== undefined) {
        http = true;
        if (g.http.length && g.http[0].session !== r.session) g.http = []; // a later session of the same place and planner
        g.http.push(r);
    } else {
        g.runs.set(r.batch ?? r.result.batch, r);
    }
}
// every group's cells: clients -> {tps, tpot, ratio, rmin, rmax, micro}; or skipped
for (const g of groups.values()) {
    g.cells = new Map();
    if (g.http.length) {
        const byRound = new Map();
        for (const r of g.http) {
            if (!byRound.has(r.round)) byRound.set(r.round, new Map());
            byRound.get(r.round).set(r.clients, r);
        }
        const counts = [...new Set(g.http.map(r => r.clients))].sort((a, b) => a - b);
        for (const c of counts) {
            const rs = g.http.filter(r => r.clients === c);
            const ratios = [...byRound.values()].filter(m => m.has(c) && m.has(1))
                .map(m => m.get(c).result.tokens_per_s / m.get(1).result.tokens_per_s);
            g.cells.set(c, { tps: median(rs.map(r => r.result.tokens_per_s)), tpot: median(rs.map(r => r.result.tpot_ms.p50)),
                ttft: median(rs.map(r => r.result.ttft_ms.p50)), ratio: median(ratios), rmin: Math.min(...ratios),
                rmax: Math.max(...ratios), micro: c === 1 ? 1 : rs[0].micro_batches, rounds: rs.length });
        }
        continue;
    }
    const runs = [...g.runs.values()], ok = runs.filter(r => r.result);
    if (!ok.length) { g.skipped = runs[0].skipped; continue; }
    g.model = ok[0].result.model;
    const alone = ok.reduce((s, r) => s + r.result.alone_tokens_per_s, 0) / ok.length;
    g.cells.set(1, { tps: alone, tpot: 1000 / alone, ratio: 1, rmin: 1, rmax: 1, micro: 1 });
    for (const [b, r] of g.runs) {
        if (!r.result) continue;
        const x = r.result;
        g.cells.set(b, { tps: x.batch_tokens_per_s, tpot: 1000 * b / x.batch_tokens_per_s, ratio: x.ratio, rmin: x.ratio_min,
            rmax: x.ratio_max, micro: x.micro_batches });
    }
}
const batches = [...new Set([...groups.values()].flatMap(g => [...g.cells.keys()]))].filter(c => c > 1).sort((a, b) => a - b);
const sorted = [...groups.values()].sort((a, b) =>
    (a.where === b.where ? 0 : a.where === "local" ? -1 : 1) || a.np - b.np ||
    order.indexOf(a.planner) - order.indexOf(b.planner));
const place = g => (g.where === "local" ? "shared memory" : "testbed");
const f1 = x => x.toFixed(1);
const tpotHead = http ? "TPOT p50, ms" : "TPOT, ms";
let md = `| where | ranks | planner | micro-batches | 1 client: tokens/s | ${tpotHead} |`;
let sep = "|---|---|---|---|---|---|";
for (const b of batches) { md += ` ${b} clients: tokens/s (x 1 client) | ${tpotHead} |`; sep += "---|---|"; }
md += "\n" + sep + "\n";
let csv = "where,ranks,planner,clients,micro_batches,tokens_per_s,tpot_ms,ratio_vs_1,ratio_min,ratio_max," +
    (http ? "ttft_ms,rounds," : "") + "skipped\n";
let plot = "";
for (const g of sorted) {
    if (!g.cells.size) {
        const why = g.skipped || (g.http[0] && g.http[0].skipped) || "no run";
        md += `| ${place(g)} | ${g.np} | ${g.planner} | - | ${why} |` + " |".repeat(1 + 2 * batches.length) + "\n";
        csv += `${g.where},${g.np},${g.planner},,,,,,,,${http ? ",," : ""}${why}\n`;
        continue;
    }
    const one = g.cells.get(1);
    const micro = [...new Set([...g.cells.entries()].filter(([c]) => c > 1).map(([, x]) => x.micro))].join("/") || "1";
    md += `| ${place(g)} | ${g.np} | ${g.planner} | ${micro} | ${one ? f1(one.tps) : "-"} | ${one ? f1(one.tpot) : "-"} |`;
    plot += `"${g.where === "local" ? "1 rank" : `testbed ${g.np} ranks ${g.planner}`}"\n`; // (no comma: the separator)
    for (const [c, x] of [...g.cells.entries()].sort((a, b) => a[0] - b[0])) {
        csv += `${g.where},${g.np},${g.planner},${c},${x.micro},${x.tps.toFixed(2)},${x.tpot.toFixed(2)},` +
            `${x.ratio.toFixed(4)},${x.rmin.toFixed(4)},${x.rmax.toFixed(4)},` + (http ? `${x.ttft.toFixed(2)},${x.rounds},` : "") + "\n";
        plot += `${c},${x.tps.toFixed(2)}\n`;
    }
    for (const b of batches) {
        const x = g.cells.get(b);
        md += x ? ` **${f1(x.tps)}** (${x.ratio.toFixed(2)}x, ${x.rmin.toFixed(2)}-${x.rmax.toFixed(2)}) | ${f1(x.tpot)} |` : " - | - |";
    }
    md += "\n";
    plot += "\n\n";
}
const model = [...groups.values()].map(g => g.model).find(m => m) || "stories15M";
const tb = cluster.replace(/.*\/hostfiles\//, "hostfiles/");
const head = http
    ? `meshinfer serve over HTTP, testbed ${tb}; C concurrent streaming clients, each sending its requests one after ` +
      "another; tokens/s = completion tokens of all requests / the clients' wall time (prefill and HTTP included), " +
      "the median over rounds, with each round's ratio to its own 1-client figure (median, range); TPOT = the " +
      "median over requests of (last event - first) / (tokens - 1), then over rounds.\n\n"
    : `Model ${model}; testbed ${tb}; every sequence's tokens ` +
      "equal alone and batched (checked). 1 client: the mean of the runs' one-at-a-time rounds; B clients: " +
      "B sequences decoded together, with that run's ratio to its own one-at-a-time rounds (median, range " +
      "over rounds); TPOT per request = B / aggregate tokens/s.\n\n";
fs.writeFileSync(`${out}/summary.md`, head + md);
fs.writeFileSync(`${out}/summary.csv`, csv);
fs.writeFileSync(`${out}/plot.csv`, plot);
process.stdout.write(head + md);
