#!/usr/bin/env node
// Turns the per-run JSON files of a sweep (jobs/testbed/sweep.sh, jobs/testbed/sweep.slurm) into
// one CSV row per run, a Markdown table with ratios to layer-wise, and gnuplot
// data files. The run's configuration that meshinfer cannot know (link delay,
// loss) is read from the file name: PLANNER_spec{0,1}_tol{T}_r{RANKS}_d{DELAY}_l{LOSS}.json,
// DELAY and LOSS being 'net' for runs on real links (jobs/testbed/sweep.slurm) and 'hosts' for runs
// on the hosts testbed (jobs/testbed/sweep.sh --hosts), whose per-host statistics (jobs/testbed/hosts.sh
// --stats: CPU seconds and bytes on each host's link) sit beside the run as NAME.hosts.json
//
// usage: node jobs/lib/sweep_summary.js RUNS_DIR OUT_PREFIX
//   writes OUT_PREFIX.csv, OUT_PREFIX_table.md, OUT_PREFIX_active.dat, OUT_PREFIX_rtt.dat,
//   and with hosts statistics OUT_PREFIX_hosts.dat
//
// Per-device power is not measured here (no INA260 boards); the energy column is an
// estimate that applies HeadSplit's figures ("What the speedup hides": 3.8 W idle,
// 4.8-5.0 W active, so 4.9 W) to each rank's measured compute time.
'use strict';
const fs = require('fs');
const path = require('path');

const P_IDLE_W = 3.8, P_ACTIVE_W = 4.9;

function die(msg) { process.stderr.write(`sweep_summary: error: ${msg}\n`); process.exit(1); }
process.on('uncaughtException', e => die(e.message));

const [runsDir, prefix] = process.argv.slice(2);
if (!runsDir || !prefix || runsDir === '--help' || runsDir === '-h') {
    process.stdout.write('usage: node jobs/lib/sweep_summary.js RUNS_DIR OUT_PREFIX\n');
    process.exit(runsDir === '--help' || runsDir === '-h' ? 0 : 2);
}
if (!fs.existsSync(runsDir) || !fs.statSync(runsDir).isDirectory()) die(`'${runsDir}' is not a directory`);
{
    const dir = path.dirname(prefix), base = path.basename(prefix);
    if (!base || prefix.endsWith('/') || base === '.' || base === '..')
        die(`output prefix '${prefix}' must end in a file name (e.g. results/sweep)`);
    if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) die(`output directory '${dir}' does not exist`);
}
const PLANNERS = ['layerwise', 'roundrobin', 'random', 'greedy', 'tp', 'somegather', 'hybrid'];
const isNum = v => typeof v === 'number' && Number.isFinite(v);
// What a run file must hold (a meshinfer generate --json result); names the first missing field.
function checkRun(f, j, m) {
    const bad = what => die(`${f}: not a meshinfer generate --json result (${what})`);
    if (!j || typeof j !== 'object' || Array.isArray(j)) bad('not a JSON object');
    for (const k of ['n_ranks', 'prompt_tokens', 'generated_tokens', 'ttft_ms', 'tpot_ms'])
        if (!isNum(j[k])) bad(`'${k}' missing or not a number`);
    if (j.generated_tokens < 1 || j.prompt_tokens < 1) bad('no tokens');
    if (typeof j.model !== 'string') bad("'model' missing");
    if (!Array.isArray(j.rtt_ms) || !j.rtt_ms.every(isNum)) bad("'rtt_ms' missing");
    if (!Array.isArray(j.ranks) || j.ranks.length !== j.n_ranks) bad(`'ranks' must list ${j.n_ranks} ranks`);
    for (const r of j.ranks) {
        if (!r || !isNum(r.bytes_sent) || !isNum(r.bytes_sent_per_forward) || !r.seconds) bad('a rank lacks bytes or seconds');
        for (const k of ['attention', 'projection', 'ffn', 'logits', 'communication', 'idle'])
            if (!isNum(r.seconds[k])) bad(`a rank lacks seconds.${k}`);
    }
    if (j.speculation !== undefined && (!Array.isArray(j.speculation) ||
        !j.speculation.every(x => x && isNum(x.decided) && isNum(x.accepted) && isNum(x.acceptance))))
        bad("'speculation' entries need decided, accepted, acceptance");
    if (!PLANNERS.includes(m[1])) die(`${f}: unknown planner '${m[1]}' in the file name (${PLANNERS.join(', ')})`);
    if (!(parseFloat(m[3]) >= 0) || !/^[0-9.]+([eE][+-]?[0-9]+)?$/.test(m[3])) die(`${f}: tolerance '${m[3]}' is not a number`);
    if (+m[4] !== j.n_ranks) die(`${f}: the file name says ${m[4]} ranks but the run had ${j.n_ranks}`);
}
const nameRe = /^([a-z]+)_spec([01])_tol([0-9.eE+-]+)_r(\d+)_d([0-9.]+|net|hosts)_l([0-9.]+|net|hosts)\.json$/;
const files = fs.readdirSync(runsDir).filter(f => nameRe.test(f)).sort();
if (!files.length) die(`no run files (PLANNER_specS_tolT_rN_dD_lL.json) in '${runsDir}'`);

const rows = files.map(f => {
    const m = f.match(nameRe);
    let j;
    try { j = JSON.parse(fs.readFileSync(path.join(runsDir, f), 'utf8')); }
    catch (e) { die(`${f}: not a meshinfer --json result (${e.message})`); }
    checkRun(f, j, m);
    const hostsFile = path.join(runsDir, f.replace(/\.json$/, '.hosts.json'));
    let hosts = null;
    if (fs.existsSync(hostsFile)) {
        try { hosts = JSON.parse(fs.readFileSync(hostsFile, 'utf8')).hosts; }
        catch (e) { die(`${path.basename(hostsFile)}: not a jobs/testbed/hosts.sh --stats file (${e.message})`); }
        if (!Array.isArray(hosts) || !hosts.every(h => h && isNum(h.cpu_s) && isNum(h.sent_bytes) && isNum(h.received_bytes)))
            die(`${path.basename(hostsFile)}: 'hosts' must list cpu_s, sent_bytes and received_bytes per host`);
    }
    const n = j.generated_tokens;
    // Time for the run's positions: the prompt's forward pass plus n-1 decode steps.
    const seconds = (j.ttft_ms + j.tpot_ms * (n - 1)) / 1e3;
    const compute = r => r.seconds.attention + r.seconds.projection + r.seconds.ffn + r.seconds.logits;
    const busy = r => Object.values(r.seconds).reduce((a, b) => a + b, 0);
    const active = j.ranks.map(compute);
    const frac = j.ranks.map((r, i) => busy(r) > 0 ? active[i] / busy(r) : 0);
    const rtt = j.rtt_ms.slice(1);
    const sum = k => j.ranks.reduce((s, r) => s + r.seconds[k], 0);
    const energy = j.ranks.reduce((s, r, i) => s + P_IDLE_W * seconds + (P_ACTIVE_W - P_IDLE_W) * active[i], 0);
    const spec = j.speculation || [];
    return {
        model: path.basename(j.model), synthetic: j.synthetic_weights, planner: m[1], speculate: +m[2],
        weights: typeof j.weights === 'string' ? j.weights : 'fp32',
        wire: j.plan && typeof j.plan.wire_dtype === 'string' ? j.plan.wire_dtype : 'fp32',
        tolerance: m[3], ranks: j.n_ranks, delay_ms: m[5], loss_pct: m[6],
        rtt_ms: rtt.length ? rtt.reduce((a, b) => a + b) / rtt.length : 0,
        prompt_tokens: j.prompt_tokens, tokens: n, positions: j.prompt_tokens + n, seconds,
        tpot_ms: j.tpot_ms,
        bytes_per_forward: j.ranks.reduce((s, r) => s + r.bytes_sent_per_forward, 0),
        bytes_total: j.ranks.reduce((s, r) => s + r.bytes_sent, 0),
        attention_s: sum('attention') + sum('projection'), ffn_s: sum('ffn'),
        communication_s: sum('communication'), idle_s: sum('idle'),
        active: active, active_fraction_mean: frac.reduce((a, b) => a + b, 0) / frac.length,
        energy_j: energy,
        acceptance: spec.map(s => s.acceptance), n_spec: spec.length,
        decided: spec.reduce((s, x) => s + x.decided, 0), accepted: spec.reduce((s, x) => s + x.accepted, 0),
        host_link_mb: hosts ? hosts.map(h => (h.sent_bytes + h.received_bytes) / 1e6) : [],
        host_cpu_s: hosts ? hosts.map(h => h.cpu_s) : [],
    };
});

// Order: layer-wise first, then head-level without and with speculation, as in HeadSplit's figure.
const order = { layerwise: 0, roundrobin: 1, random: 2, greedy: 3, tp: 4, somegather: 5, hybrid: 6 };
const num = x => parseFloat(x) || 0;
rows.sort((a, b) => a.ranks - b.ranks || num(a.delay_ms) - num(b.delay_ms) || num(a.loss_pct) - num(b.loss_pct) ||
    a.speculate - b.speculate || order[a.planner] - order[b.planner] || a.tolerance - b.tolerance);

const cols = ['model', 'synthetic_weights', 'planner', 'speculate', 'tolerance', 'ranks', 'delay_ms', 'loss_pct',
    'rtt_ms', 'prompt_tokens', 'tokens', 'positions', 'seconds', 'tpot_ms', 'bytes_per_forward', 'bytes_total',
    'attention_s', 'ffn_s', 'communication_s', 'idle_s', 'active_s_per_rank', 'active_fraction_mean',
    'energy_j_estimate', 'acceptance_per_layer', 'host_link_mb', 'host_cpu_s'];
const csv = [cols.join(',')].concat(rows.map(r => [r.model, r.synthetic, r.planner, r.speculate, r.tolerance, r.ranks,
    r.delay_ms, r.loss_pct, r.rtt_ms.toFixed(2), r.prompt_tokens, r.tokens, r.positions, r.seconds.toFixed(4),
    r.tpot_ms.toFixed(2), r.bytes_per_forward.toFixed(0), r.bytes_total, r.attention_s.toFixed(3), r.ffn_s.toFixed(3),
    r.communication_s.toFixed(3), r.idle_s.toFixed(3), r.active.map(a => a.toFixed(3)).join(' '),
    r.active_fraction_mean.toFixed(4), r.energy_j.toFixed(1), r.acceptance.map(a => a.toFixed(3)).join(' '),
    r.host_link_mb.map(a => a.toFixed(3)).join(' '), r.host_cpu_s.map(a => a.toFixed(3)).join(' ')].join(',')));

const name = r => r.planner === 'layerwise' ? 'layer-wise' : r.planner === 'tp' ? 'tensor-parallel'
    : r.planner === 'somegather' ? 'somegather' : r.planner === 'hybrid' ? 'hybrid (per layer pipeline or tensor)'
    : `head-level ${r.planner === 'roundrobin' ? 'round-robin' : r.planner}${r.speculate ? ` + speculation (tol ${r.tolerance})` : ''}`;
const groups = new Map();
for (const r of rows) {
    // runs compare only at the same rank count, links and length
    const k = (r.delay_ms === 'net' ? `${r.ranks} ranks, real links (measured RTT to controller ~RTT)`
        : r.delay_ms === 'hosts' ? `${r.ranks} ranks on the hosts testbed, links of the cluster file (measured RTT to controller ~RTT)`
        : `${r.ranks} ranks, ${r.delay_ms} ms one way (measured RTT to controller ~RTT), loss ${r.loss_pct}%`) +
        `, ${r.positions} positions (${r.prompt_tokens} prompt + ${r.tokens} generated)`;
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(r);
}
const label = `${rows[0].model}${rows[0].synthetic ? ' (synthetic weights)' : ''}, ${rows[0].weights} weights, ` +
              `${rows[0].wire} messages`;
let md = `# Sweep: ${label}\n\nPer-device energy is an estimate: HeadSplit's 3.8 W idle and 4.9 W active applied to each rank's measured compute time.\n`;
for (const [k, g] of groups) {
    const base = g.find(r => r.planner === 'layerwise');
    const rtt = g.reduce((s, r) => s + r.rtt_ms, 0) / g.length;
    md += `\n## ${k.replace('~RTT', rtt.toFixed(1) + ' ms')}\n\n`;
    const withHosts = g.some(r => r.host_cpu_s.length);
    md += '| configuration | seconds | vs layer-wise | MB moved | bytes per forward | compute s per device (rank 0..) | mean active fraction | energy J (est.) | acceptance |' +
        (withHosts ? ' TPOT ms | link MB per host (sent + received, host 0..) | host CPU s |' : '') + '\n';
    md += '|---|---|---|---|---|---|---|---|---|' + (withHosts ? '---|---|---|' : '') + '\n';
    for (const r of g) {
        // --speculate marks only transitions whose expected saving is positive (cost model)
        const acc = r.decided ? `${(100 * r.accepted / r.decided).toFixed(0)}% of ${r.n_spec} transitions`
            : r.speculate ? 'none eligible' : '-';
        md += `| ${name(r)} | ${r.seconds.toFixed(2)} | ${base ? (base.seconds / r.seconds).toFixed(2) + 'x' : '-'} | ` +
            `${(r.bytes_total / 1e6).toFixed(2)} | ${r.bytes_per_forward.toFixed(0)} | ${r.active.map(a => a.toFixed(2)).join(' / ')} | ` +
            `${(100 * r.active_fraction_mean).toFixed(1)}% | ${r.energy_j.toFixed(0)} | ${acc} |` +
            (withHosts ? ` ${r.tpot_ms.toFixed(1)} | ${r.host_link_mb.map(a => a.toFixed(2)).join(' / ')} | ` +
                         `${r.host_cpu_s.map(a => a.toFixed(2)).join(' / ')} |` : '') + '\n';
    }
}

// Per-device compute time of each run (one line per run, one column per rank) and
// seconds against measured RTT (one block per configuration) for gnuplot.
const active = rows.map(r => `"${name(r).replace(/head-level /, '')} r${r.ranks} d${r.delay_ms} l${r.loss_pct}" ` +
    r.active.map(a => a.toFixed(4)).join(' ')).join('\n');
const byCfg = new Map();
for (const r of rows) {
    const k = `${name(r).replace(/head-level /, '')}, ${r.ranks} ranks`;
    if (!byCfg.has(k)) byCfg.set(k, []);
    byCfg.get(k).push(r);
}
let rttDat = '';
for (const [k, g] of byCfg) {
    rttDat += `"${k}"\n` + g.filter(r => num(r.loss_pct) === 0).sort((a, b) => a.rtt_ms - b.rtt_ms)
        .map(r => `${r.rtt_ms.toFixed(2)} ${r.seconds.toFixed(3)}`).join('\n') + '\n\n\n';
}

// acceptance per layer transition of every speculating run, one block each
let accDat = '';
for (const r of rows.filter(r => r.acceptance.length))
    accDat += `"${name(r).replace(/head-level /, '')} r${r.ranks} d${r.delay_ms} l${r.loss_pct}"\n` +
        r.acceptance.map((a, i) => `${i} ${a.toFixed(4)}`).join('\n') + '\n\n\n';

// per run on the hosts testbed: label, TPOT, then link MB per host, then CPU s per host
const hostRows = rows.filter(r => r.host_cpu_s.length);
const hostsDat = hostRows.map(r => `"${name(r).replace(/head-level /, '').replace(/ \(.*\)/, '')} r${r.ranks}" ` +
    `${r.tpot_ms.toFixed(3)} ${r.host_link_mb.map(a => a.toFixed(4)).join(' ')} ${r.host_cpu_s.map(a => a.toFixed(4)).join(' ')}`).join('\n');

const write = (f, text) => {
    try { fs.writeFileSync(f + '.partial', text); fs.renameSync(f + '.partial', f); }
    catch (e) { try { fs.unlinkSync(f + '.partial'); } catch (_) { /* nothing written */ } die(`cannot write ${f}: ${e.code || e.message}`); }
};
write(`${prefix}.csv`, csv.join('\n') + '\n');
write(`${prefix}_table.md`, md);
write(`${prefix}_active.dat`, active + '\n');
write(`${prefix}_rtt.dat`, rttDat);
write(`${prefix}_acceptance.dat`, accDat);
if (hostRows.length) write(`${prefix}_hosts.dat`, hostsDat + '\n');
else if (fs.existsSync(`${prefix}_hosts.dat`)) fs.unlinkSync(`${prefix}_hosts.dat`); // an earlier summary's, not these runs'
process.stderr.write(`sweep_summary: ${rows.length} runs -> ${prefix}.csv, ${prefix}_table.md\n`);
