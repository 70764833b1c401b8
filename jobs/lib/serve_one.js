// One client, one request at a time, against an OpenAI-style server (jobs/experiments/serve_reference.sh):
// N streamed requests of the same prompt, greedy, each after the previous one ended. Per request: the
// wall time, TTFT (to the first event with text), TPOT (from the first to the last event with text, per
// later token) and the text. Prints one JSON object: {"requests": [...]}.
// KIND completions: POST /v1/completions {"prompt": TEXT}; chat: POST /v1/chat/completions with one user
// message TEXT. MAX_TOKENS is every request's max_tokens; TOKENS the count it must produce (the check run
// found it: the text has no early stop), used for TPOT and tokens/s since events and tokens need not
// match one to one.
// usage: node serve_one.js BASE_URL completions|chat TEXT MAX_TOKENS TOKENS N [check]
//   check: one request without streaming instead; prints {"text", "prompt_tokens", "completion_tokens"}
"use strict";
const [base, kind, text, maxTok, nTok, n, mode] = process.argv.slice(2);
const route = kind === "chat" ? "/v1/chat/completions" : "/v1/completions";
const body = extra => JSON.stringify(Object.assign(kind === "chat" ? { messages: [{ role: "user", content: text }] }
    : { prompt: text }, { max_tokens: Number(maxTok), temperature: 0, seed: 1 }, extra));
const piece = ch => (ch.delta ? ch.delta.content : ch.text) || "";

async function check() {
    const r = await fetch(base + route, { method: "POST", body: body({}), headers: { "Content-Type": "application/json" } });
    if (r.status !== 200) throw new Error(`${route} answered ${r.status}: ${(await r.text()).slice(0, 200)}`);
    const j = await r.json(), c = j.choices[0];
    return { text: c.message ? c.message.content : c.text, prompt_tokens: j.usage.prompt_tokens,
        completion_tokens: j.usage.completion_tokens };
}

async function one() {
    const t0 = performance.now();
    const r = await fetch(base + route, { method: "POST", body: body({ stream: true }),
        headers: { "Content-Type": "application/json" } });
    if (r.status !== 200) throw new Error(`${route} answered ${r.status}: ${(await r.text()).slice(0, 200)}`);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "", first = 0, last = 0, out = "", events = 0;
    for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r/g, ""); // dllama ends lines with CRLF (SSE allows both)
        let k;
        while ((k = buf.indexOf("\n\n")) >= 0) {
            const ev = buf.slice(0, k).trim();
            buf = buf.slice(k + 2);
            if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
            const j = JSON.parse(ev.slice(6));
            const p = j.choices && j.choices.length ? piece(j.choices[0]) : "";
            if (!p) continue;
            const t = performance.now();
            if (!first) first = t;
            last = t;
            out += p;
            events++;
        }
    }
    const t1 = performance.now(), tok = Number(nTok);
    return { wall_ms: t1 - t0, ttft_ms: first - t0, tpot_ms: (last - first) / (tok - 1), tokens_per_s: tok / ((t1 - t0) / 1000),
        events, text: out };
}

(async () => {
    if (mode === "check") {
        console.log(JSON.stringify(await check()));
        return;
    }
    const requests = [];
    for (let i = 0; i < Number(n); i++) requests.push(await one());
    console.log(JSON.stringify({ requests }));
})().catch(e => { console.error("serve_one: " + e.message); process.exit(1); });
