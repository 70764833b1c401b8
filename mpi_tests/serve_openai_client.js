// OpenAI's npm client (openai@5) against meshinfer serve (serve_check.sh): the model list, a greedy
// completion whole and streamed (generate's text), chat on a model without a template (400) and another
// model (404), each as the client reports it. Prints "openai client: N of 5" and a line per failure.
// usage: NODE_PATH=.../node_modules node serve_openai_client.js BASE_URL API_KEY PROMPT WANT
const OpenAI = require("openai");
const [baseURL, apiKey, prompt, want] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
async function main() {
    let passed = 0;
    const check = (ok, what) => { if (ok) passed++; else console.log("FAIL: " + what); };
    const models = await client.models.list();
    const id = models.data[0].id;
    check(models.data.length === 1 && id === "stories15M", "models.list: " + JSON.stringify(models.data));
    const c = await client.completions.create({ model: id, prompt, max_tokens: 38, temperature: 0 });
    check(c.choices[0].text === want && c.usage.completion_tokens === 38, "completion: " + JSON.stringify(c));
    let text = "", finish = null;
    const stream = await client.completions.create({ model: id, prompt, max_tokens: 38, temperature: 0, stream: true });
    for await (const chunk of stream) {
        text += chunk.choices[0].text;
        finish = chunk.choices[0].finish_reason || finish;
    }
    check(text === want && finish === "length", "stream: " + JSON.stringify([text, finish]));
    try {
        await client.chat.completions.create({ model: id, messages: [{ role: "user", content: "hi" }] });
        check(false, "chat without a template answered");
    } catch (e) {
        check(e instanceof OpenAI.BadRequestError && /no chat template/.test(e.message), "chat: " + e);
    }
    try {
        await client.completions.create({ model: "gpt-4", prompt: "x" });
        check(false, "another model answered");
    } catch (e) {
        check(e instanceof OpenAI.NotFoundError && e.code === "model_not_found", "model: " + e);
    }
    console.log("openai client: " + passed + " of 5");
}
main().catch(e => { console.log("openai client: error " + e); process.exit(1); });
