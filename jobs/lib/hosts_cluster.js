#!/usr/bin/env node
// The hosts testbed's reading of a cluster file (jobs/testbed/hosts.sh).
//
//   node hosts_cluster.js CLUSTER.json
//     one line per device: "cpu_pct slowdown delay_ms jitter_ms loss_pct rate_kbit name",
//     from each device's optional "emulate" block; the name comes last, so that
//     spaces in it stay in it. Defaults: a whole core, no slowdown, a link with no
//     delay, loss or limit.
//   node hosts_cluster.js --stats CLUSTER.json COUNTERS SUBNET ID EXIT_CODE
//     the --stats JSON, from COUNTERS lines "index cpu_ns sent_bytes received_bytes".
//
// The rules are meshinfer's (src/plan/cluster.c, which documents the keys): a file
// one accepts the other accepts too, and the testbed never refuses what the planners
// read -- but for one rule of its own: device names are host names here (a
// --hostfile places ranks by them), so two devices may not share one (meshinfer
// only prints them). JSON numbers as there: finite, non-negative, at most 1e9,
// and 0 or at least 1e-6 (a denormal delay is no delay anyone meant).
'use strict';
const fs = require('fs');

function fail(msg) {
    process.stderr.write(`hosts: error: ${msg}\n`);
    process.exit(2);
}

function load(path) {
    let text;
    try {
        if (fs.statSync(path).isDirectory()) fail(`cluster file ${path}: is a folder`);
        text = fs.readFileSync(path, 'utf8');
    } catch (e) {
        fail(`cluster file ${path}: cannot read it (${e.code || e.message})`);
    }
    try {
        return JSON.parse(text.replace(/^\uFEFF/, '')); // a byte-order mark, as cJSON allows
    } catch (e) {
        fail(`cluster file ${path}: not JSON (${e.message})`);
    }
}

function devices(path) {
    const j = load(path);
    if (!j || typeof j !== 'object' || Array.isArray(j) || !Array.isArray(j.devices) || j.devices.length === 0)
        fail(`cluster file ${path}: "devices" must be a non-empty list (one per host)`);
    if (j.devices.length > 200) fail(`cluster file ${path}: ${j.devices.length} devices; the hosts testbed makes at most 200`);
    // [min, max, default]; the general number rule applies first
    const keys = {cpu_pct: [1, 100, 100], slowdown: [1, 1000, 1], delay_ms: [0, 10000, 0], jitter_ms: [0, 10000, 0],
                  loss_pct: [0, 100, 0], rate_mbit: [0, 100000, 0]};
    const seen = new Map(); // name -> the first device with it
    return j.devices.map((d, i) => {
        const where = `cluster file ${path}: devices[${i}]`;
        if (!d || typeof d !== 'object' || Array.isArray(d)) fail(`${where} must be an object`);
        const name = d.name === undefined ? `dev${i}` : d.name;
        if (typeof name !== 'string' || !name || Buffer.byteLength(name) > 63)
            fail(`${where}.name must be a string of 1 to 63 bytes`);
        if (/[\x00-\x1f\x7f]/.test(name)) fail(`${where}.name contains a control character`);
        if (seen.has(name))
            fail(`${where}.name '${name}' is also devices[${seen.get(name)}]'s: every device is a host of its own and needs its own name`);
        seen.set(name, i);
        const e = d.emulate === undefined ? {} : d.emulate;
        if (!e || typeof e !== 'object' || Array.isArray(e)) fail(`${where}.emulate must be an object`);
        for (const k of Object.keys(e))
            if (!(k in keys)) fail(`${where}.emulate: unknown key '${k}' (known: ${Object.keys(keys).join(', ')})`);
        const v = {};
        for (const [k, [lo, hi, def]] of Object.entries(keys)) {
            v[k] = e[k] === undefined ? def : e[k];
            const x = v[k];
            if (typeof x !== 'number' || !Number.isFinite(x) || x < 0 || x > 1e9 || (x > 0 && x < 1e-6))
                fail(`${where}.emulate.${k} must be 0 or a number from 1e-6 to 1e9 (got ${String(e[k])})`);
            if (x < lo || x > hi || (k === 'loss_pct' && x >= 100))
                fail(`${where}.emulate.${k} must be in [${lo}, ${hi}${k === 'loss_pct' ? ')' : ']'} (got ${x})`);
        }
        if (v.jitter_ms > v.delay_ms) fail(`${where}.emulate.jitter_ms (${v.jitter_ms}) is more than delay_ms (${v.delay_ms})`);
        if (v.rate_mbit !== 0 && v.rate_mbit < 0.01)
            fail(`${where}.emulate.rate_mbit must be 0 (unlimited) or at least 0.01 (got ${v.rate_mbit})`);
        return {name, ...v, rate_kbit: Math.round(v.rate_mbit * 1000)};
    });
}

const args = process.argv.slice(2);
if (args[0] === '--stats') {
    const [, path, counters, subnet, id, rc] = args;
    const devs = devices(path);
    const hosts = fs.readFileSync(counters, 'utf8').trim().split('\n').map(l => {
        const [i, ns, sent, recv] = l.split(' ').map(Number);
        const d = devs[i];
        return {host: `mi${id}-${i}`, device: d.name, device_index: i, cpu_s: ns / 1e9, sent_bytes: sent,
                received_bytes: recv, cpu_pct: d.cpu_pct, slowdown: d.slowdown, delay_ms: d.delay_ms,
                jitter_ms: d.jitter_ms, loss_pct: d.loss_pct, rate_mbit: d.rate_mbit};
    });
    process.stdout.write(JSON.stringify({subnet, exit_code: Number(rc), hosts}, null, 1) + '\n');
} else {
    if (args.length !== 1) fail('usage: hosts_cluster.js CLUSTER.json');
    process.stdout.write(devices(args[0]).map(v =>
        [v.cpu_pct, v.slowdown, v.delay_ms, v.jitter_ms, v.loss_pct, v.rate_kbit, v.name].join(' ')).join('\n') + '\n');
}
