// The load of jobs/experiments/serve_load.sh: N requests to a meshinfer serve from C concurrent
// clients, prompts and max_tokens mixed (seeded), a share streamed and a share cancelled by the client
// midway (after its first event, or a moment into a whole one). Prints one JSON object: statuses,
// tokens, aggregate tokens/s, TTFT (streams: to the first text event), TPOT (streams: the time after the
// first event per later token, from the usage chunk) and latency percentiles.
// WARM 1: before the clock starts, every client sends one untimed request of one token, so that the
// client's own first-request costs (node compiling fetch, connecting: tens of ms) are not counted.
// usage: node serve_load.js BASE_URL REQUESTS CONCURRENCY STREAM_PCT CANCEL_PCT MIN_TOKENS MAX_TOKENS SEED [WARM]
"use strict";
const [base, nReq, conc, streamPct, cancelPct, minTok, maxTok, seed, warm] = process.argv.slice(2).map(
    (v, i) => i === 0 ? v : Number(v));
let rng = BigInt(seed) || 1n;
function rand() { // xorshift64*: the same mix for the same seed
    rng ^= rng >> 12n; rng ^= (rng << 25n) & 0xffffffffffffffffn; rng ^= rng >> 27n;
    return Number(((rng * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
}
const openings = ["Once upon a time", "One day, a little dog", "Lily and Ben went to the park", "The sun was hot and",
    "Tom had a red ball. He", "A small bird sat on a tree", "Mom said it was time for bed, but",
    "There was a big box in the garden"];
const plan = [];
for (let i = 0; i < nReq; i++)
    plan.push({
        prompt: openings[Math.floor(rand() * openings.length)],
        max_tokens: minTok + Math.floor(rand() * (maxTok - minTok + 1)),
        stream: rand() * 100 < streamPct, cancel: rand() * 100 < cancelPct, temperature: rand() < 0.5 ? 0 : 0.8,
    });
const status = {}, ttft = [], tpot = [], latency = [];
let tokens = 0;
const count = s => { status[s] = (status[s] || 0) + 1; };

async function one(p) {
    const ctl = new AbortController(), t0 = performance.now();
    const body = { prompt: p.prompt, max_tokens: p.max_tokens, temperature: p.temperature, seed: 1 };
    if (p.stream)
        Object.assign(body, { stream: true, stream_options: { include_usage: true } });
    let timer = null;
    if (p.cancel && !p.stream)
        timer = setTimeout(() => ctl.abort(), 20 + rand() * 80);
    try {
        const r = await fetch(base + "/v1/completions", { method: "POST", body: JSON.stringify(body), signal: ctl.signal,
            headers: { "Content-Type": "application/json" } });
        if (!p.stream || r.status !== 200) {
            const j = await r.json();
            if (timer) clearTimeout(timer);
            count(r.status);
            if (r.status === 200) {
                tokens += j.usage.completion_tokens;
                latency.push(performance.now() - t0);
            }
            return;
        }
        const reader = r.body.getReader(), dec = new TextDecoder();
        let buf = "", first = 0, n = 0;
        for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += dec.decode(value, { stream: true });
            let k;
            while ((k = buf.indexOf("\n\n")) >= 0) {
                const ev = buf.slice(0, k);
                buf = buf.slice(k + 2);
                if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
                const j = JSON.parse(ev.slice(6));
                if (j.usage) n = j.usage.completion_tokens;
                else if (!first && j.choices[0].text) first = performance.now();
            }
            if (p.cancel && first) { // leave after the first text
                ctl.abort();
                count("cancelled");
                return;
            }
        }
        count(200);
        tokens += n;
        const t1 = performance.now();
        latency.push(t1 - t0);
        if (first) {
            ttft.push(first - t0);
            if (n > 1) tpot.push((t1 - first) / (n - 1));
        }
    } catch (e) {
        if (timer) clearTimeout(timer);
        count(e.name === "AbortError" ? "cancelled" : "error: " + (e.cause ? e.cause.code || e.cause : e.message));
    }
}

function pct(a) {
    const s = [...a].sort((x, y) => x - y), at = q => s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : null;
    const r = v => v === null ? null : Math.round(v * 100) / 100;
    return { n: s.length, p50: r(at(0.5)), p90: r(at(0.9)), p99: r(at(0.99)), max: r(s.length ? s[s.length - 1] : null) };
}

(async () => {
    if (warm)
        await Promise.all(Array.from({ length: conc }, async () => {
            const r = await fetch(base + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" },
                body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 1, temperature: 0 }) });
            await r.text();
        }));
    const t0 = performance.now();
    let next = 0;
    await Promise.all(Array.from({ length: conc }, async () => {
        while (next < plan.length) await one(plan[next++]);
    }));
    const wall = (performance.now() - t0) / 1000;
    console.log(JSON.stringify({
        requests: nReq, concurrency: conc, streamed: plan.filter(p => p.stream).length,
        cancel_planned: plan.filter(p => p.cancel).length, status, generated_tokens: tokens,
        wall_s: Math.round(wall * 1000) / 1000, tokens_per_s: Math.round(tokens / wall * 10) / 10,
        ttft_ms: pct(ttft), tpot_ms: pct(tpot), latency_ms: pct(latency),
    }));
})();
