#!/usr/bin/env node
// The hosts testbed's reading of a cluster file (jobs/hosts.sh): one line per
// device, "name cpu_pct slowdown delay_ms jitter_ms loss_pct rate_mbit", from
// each device's optional "emulate" block (src/plan/cluster.c documents the
// keys; meshinfer checks the same rules when it reads the file for planning).
// Defaults: a whole core, no slowdown, a link with no delay, loss or limit.
// usage: node jobs/lib/hosts_cluster.js CLUSTER.json
'use strict';
const fs = require('fs');

function fail(msg) {
    process.stderr.write(`hosts: error: ${msg}\n`);
    process.exit(2);
}

const path = process.argv[2];
if (!path) fail('usage: hosts_cluster.js CLUSTER.json');
let text;
try {
    text = fs.readFileSync(path, 'utf8');
} catch (e) {
    fail(`cluster file ${path}: cannot read it (${e.code || e.message})`);
}
let j;
try {
    j = JSON.parse(text);
} catch (e) {
    fail(`cluster file ${path}: not JSON (${e.message})`);
}
if (!j || typeof j !== 'object' || !Array.isArray(j.devices) || j.devices.length === 0)
    fail(`cluster file ${path}: "devices" must be a non-empty list (one per host)`);
if (j.devices.length > 200) fail(`cluster file ${path}: ${j.devices.length} devices; the hosts testbed makes at most 200`);

const keys = {cpu_pct: [1, 100, 100], slowdown: [1, 1000, 1], delay_ms: [0, 10000, 0], jitter_ms: [0, 10000, 0],
              loss_pct: [0, 99.999, 0], rate_mbit: [0, 1e6, 0]};
const out = [];
j.devices.forEach((d, i) => {
    const where = `cluster file ${path}: devices[${i}]`;
    if (!d || typeof d !== 'object' || Array.isArray(d)) fail(`${where} must be an object`);
    const name = d.name === undefined ? `dev${i}` : d.name;
    if (typeof name !== 'string' || !/^[A-Za-z0-9._-]{1,63}$/.test(name))
        fail(`${where}.name '${name}' must be 1-63 letters, digits, '.', '_' or '-' to name a host's device`);
    const e = d.emulate === undefined ? {} : d.emulate;
    if (!e || typeof e !== 'object' || Array.isArray(e)) fail(`${where}.emulate must be an object`);
    for (const k of Object.keys(e))
        if (!(k in keys)) fail(`${where}.emulate: unknown key '${k}' (known: ${Object.keys(keys).join(', ')})`);
    const v = {};
    for (const [k, [lo, hi, def]] of Object.entries(keys)) {
        v[k] = e[k] === undefined ? def : e[k];
        if (typeof v[k] !== 'number' || !Number.isFinite(v[k]) || v[k] < lo || v[k] > hi)
            fail(`${where}.emulate.${k} must be a number in [${lo}, ${hi}] (got ${JSON.stringify(e[k])})`);
    }
    if (v.jitter_ms > v.delay_ms) fail(`${where}.emulate.jitter_ms (${v.jitter_ms}) is more than delay_ms (${v.delay_ms})`);
    out.push([name, v.cpu_pct, v.slowdown, v.delay_ms, v.jitter_ms, v.loss_pct, v.rate_mbit].join(' '));
});
process.stdout.write(out.join('\n') + '\n');
