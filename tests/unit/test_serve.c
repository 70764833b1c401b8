/* CUnit tests of meshinfer serve's pure parts (src/server/text.c, openai.c,
 * metrics.c; no MPI, no HTTP):
 *   - UTF-8: the unfinished tail held back (1-3 bytes of a valid lead and
 *     continuations, nothing for complete, ASCII or impossible bytes), and
 *     bytes that cannot be UTF-8 replaced by U+FFFD one for one;
 *   - the streamer: a stop string found across token boundaries and inside
 *     one token, the earliest of several, overlapping starts ("aab" in
 *     "aaab"), text that might become a stop string held back and released
 *     when it does not, a character split over two tokens sent whole, the
 *     hold released at the end (an unfinished character as U+FFFD);
 *   - request parsing: the defaults, every field's type and range, the
 *     error's status, param and message for malformed JSON, wrong types,
 *     empty messages, max_tokens 0 or over the cap, unknown fields (named),
 *     fields ignored as harmless, another model (404), chat without a
 *     template, duplicate keys;
 *   - responses: the completion, chunk, usage and error JSON parse back with
 *     the fields OpenAI's clients read, control bytes and NUL escaped;
 *   - metrics: counters and histogram buckets in Prometheus' text.
 * Exit status: 0 when every test passed, 1 otherwise. */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/server/internal.h"

static void test_utf8(void)
{
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("abc", 3), 0);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("a\xC3", 2), 1);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("a\xC3\xA9", 3), 0);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("\xE2\x82", 2), 2);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("\xE2\x82\xAC", 3), 0);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("x\xF0\x9F\x98", 4), 3);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("\xF0\x9F\x98\x80", 4), 0);
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("\xFF", 1), 0);     /* never valid: not held */
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("\xC3(", 2), 0);    /* a lead not continued */
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("\xE0\x80", 2), 0); /* overlong: never valid */
    CU_ASSERT_EQUAL(srv_utf8_incomplete_tail("", 0), 0);
    srv_buf b = {0};
    srv_utf8_append(&b, "a\xFF" "b\xC3(\xE2\x82\xAC", 8);
    CU_ASSERT_STRING_EQUAL(b.p, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD(\xE2\x82\xAC");
    b.len = 0;
    srv_utf8_append(&b, "\xED\xA0\x80", 3); /* a surrogate: three replacements */
    CU_ASSERT_STRING_EQUAL(b.p, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    srv_buf_free(&b);
}

/* Push pieces through a streamer with stops; out[i] gets what piece i
 * released ("" none), and the final text (and the finish's release) too. */
static int run_stream(char *const *stops, int n_stop, const char *const *pieces, int n, char out[][64], char *text,
                      size_t cap)
{
    srv_stream s = {.stop = stops, .n_stop = n_stop};
    srv_buf all = {0}, o = {0};
    int stopped = -1;
    srv_buf_add(&all, "", 0);
    for (int i = 0; i < n; i++) {
        o.len = 0;
        srv_buf_add(&o, "", 0);
        int st = srv_stream_push(&s, pieces[i], strlen(pieces[i]), &o);
        snprintf(out[i], 64, "%s", o.p);
        srv_buf_add(&all, o.p, o.len);
        if (st) {
            stopped = i;
            break;
        }
    }
    srv_stream_finish(&s, &all);
    snprintf(text, cap, "%s", all.p);
    srv_buf_free(&all);
    srv_buf_free(&o);
    srv_stream_free(&s);
    return stopped;
}

static void test_stream(void)
{
    char out[8][64], text[256];
    char *end[] = {"END"};
    const char *p1[] = {"abc", "E", "N", "D", "xyz"};
    CU_ASSERT_EQUAL(run_stream(end, 1, p1, 5, out, text, sizeof text), 3);
    CU_ASSERT_STRING_EQUAL(out[0], "abc");
    CU_ASSERT_STRING_EQUAL(out[1], ""); /* "E" might become "END": held */
    CU_ASSERT_STRING_EQUAL(out[2], "");
    CU_ASSERT_STRING_EQUAL(out[3], "");
    CU_ASSERT_STRING_EQUAL(text, "abc");
    /* a false start is released once it cannot be the stop string */
    const char *p2[] = {"xE", "Nd", "!"};
    CU_ASSERT_EQUAL(run_stream(end, 1, p2, 3, out, text, sizeof text), -1);
    CU_ASSERT_STRING_EQUAL(out[0], "x");
    CU_ASSERT_STRING_EQUAL(out[1], "ENd");
    CU_ASSERT_STRING_EQUAL(text, "xENd!");
    /* inside one token; the earliest of two stops wins */
    char *two[] = {"c", "b c"};
    const char *p3[] = {"a b c d"};
    CU_ASSERT_EQUAL(run_stream(two, 2, p3, 1, out, text, sizeof text), 0);
    CU_ASSERT_STRING_EQUAL(text, "a ");
    /* overlapping starts: "aab" in "aaab" starts at 1 */
    char *aab[] = {"aab"};
    const char *p4[] = {"a", "a", "a", "b"};
    CU_ASSERT_EQUAL(run_stream(aab, 1, p4, 4, out, text, sizeof text), 3);
    CU_ASSERT_STRING_EQUAL(text, "a");
    /* a character split over two tokens goes out whole, with the second */
    const char *p5[] = {"1\xE2\x82", "\xAC" "2"};
    CU_ASSERT_EQUAL(run_stream(NULL, 0, p5, 2, out, text, sizeof text), -1);
    CU_ASSERT_STRING_EQUAL(out[0], "1");
    CU_ASSERT_STRING_EQUAL(out[1], "\xE2\x82\xAC" "2");
    /* a stop string's start held at the end comes out; so does an unfinished character, as U+FFFD */
    const char *p6[] = {"abc", "EN"};
    CU_ASSERT_EQUAL(run_stream(end, 1, p6, 2, out, text, sizeof text), -1);
    CU_ASSERT_STRING_EQUAL(text, "abcEN");
    const char *p7[] = {"ok\xF0\x9F"};
    run_stream(NULL, 0, p7, 1, out, text, sizeof text);
    CU_ASSERT_STRING_EQUAL(out[0], "ok");
    CU_ASSERT_STRING_EQUAL(text, "ok\xEF\xBF\xBD");
    /* a stop string of several characters across three tokens, text before it in the last */
    char *st[] = {"\xC3\xA9t\xC3\xA9"}; /* "été" */
    const char *p8[] = {"un \xC3", "\xA9t", "\xC3\xA9 chaud"};
    CU_ASSERT_EQUAL(run_stream(st, 1, p8, 3, out, text, sizeof text), 2);
    CU_ASSERT_STRING_EQUAL(out[0], "un ");
    CU_ASSERT_STRING_EQUAL(text, "un ");
}

static const srv_limits lim = {.model_id = "stories15M", .seq_len = 256, .max_tokens = 100, .has_chat = 1};

static int parse(const char *body, int route, srv_params *p, srv_error *e)
{
    memset(e, 0, sizeof *e);
    return srv_parse_request(body, strlen(body), route, &lim, p, e);
}

/* A body refused with status, the param named and a word of the message. */
static void refused(const char *body, int route, int status, const char *param, const char *word)
{
    srv_params p;
    srv_error e;
    int rc = parse(body, route, &p, &e);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_EQUAL(e.status, status);
    CU_ASSERT_STRING_EQUAL(e.param, param);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.message, word));
    if (rc != -1 || e.status != status || strcmp(e.param, param) || !strstr(e.message, word))
        fprintf(stderr, "\n  body %s: rc %d status %d param '%s': %s\n", body, rc, e.status, e.param, e.message);
}

static void test_parse(void)
{
    srv_params p;
    srv_error e;
    CU_ASSERT_EQUAL(parse("{\"prompt\": \"Once\"}", SRV_COMPLETIONS, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p.prompt, "Once");
    CU_ASSERT_EQUAL(p.max_tokens, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.temperature, 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.top_p, 1.0, 0);
    CU_ASSERT_EQUAL(p.stream, 0);
    CU_ASSERT_EQUAL(p.seed_set, 0);
    srv_params_free(&p);
    CU_ASSERT_EQUAL(parse("{\"model\": \"stories15M\", \"prompt\": [\"x\"], \"max_tokens\": 7, \"temperature\": 0, "
                          "\"top_p\": 0.5, \"top_k\": 3, \"seed\": 9, \"stop\": [\"a\", \"bc\"], \"stream\": true, "
                          "\"stream_options\": {\"include_usage\": true}, \"user\": \"u\", \"n\": 1, "
                          "\"presence_penalty\": 0, \"frequency_penalty\": 0, \"logprobs\": null, \"echo\": false}",
                          SRV_COMPLETIONS, &p, &e), 0);
    CU_ASSERT_STRING_EQUAL(p.prompt, "x");
    CU_ASSERT_EQUAL(p.max_tokens, 7);
    CU_ASSERT_DOUBLE_EQUAL(p.temperature, 0, 0);
    CU_ASSERT_EQUAL(p.top_k, 3);
    CU_ASSERT_EQUAL(p.seed, 9);
    CU_ASSERT_EQUAL(p.n_stop, 2);
    CU_ASSERT_STRING_EQUAL(p.stop[1], "bc");
    CU_ASSERT_EQUAL(p.stream, 1);
    CU_ASSERT_EQUAL(p.include_usage, 1);
    srv_params_free(&p);
    CU_ASSERT_EQUAL(parse("{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                          "\"content\": [{\"type\": \"text\", \"text\": \"Hi \"}, {\"type\": \"text\", \"text\": "
                          "\"there\"}], \"name\": \"ann\"}], \"max_completion_tokens\": 5, \"stop\": \"x\", "
                          "\"chat_template_kwargs\": {\"enable_thinking\": false}}", SRV_CHAT, &p, &e), 0);
    CU_ASSERT_EQUAL(p.n_msgs, 2);
    CU_ASSERT_STRING_EQUAL(p.roles[0], "system");
    CU_ASSERT_STRING_EQUAL(p.contents[1], "Hi there");
    CU_ASSERT_EQUAL(p.max_tokens, 5);
    CU_ASSERT_EQUAL(p.n_stop, 1);
    CU_ASSERT_EQUAL(p.no_thinking, 1);
    srv_params_free(&p);

    refused("{\"prompt\": \"x\",", SRV_COMPLETIONS, 400, "", "JSON syntax error at byte");
    refused("{\"prompt\": \"x\", \"seed\": 18446744073709551616}", SRV_COMPLETIONS, 400, "seed",
            "within [-9223372036854775808, 18446744073709549568]"); /* 2^64: past a uint64_t */
    { /* past cJSON's nesting limit: said so; the same brackets inside a string are text */
        char deep[3100], text[3100];
        memset(deep, '[', 3000), deep[3000] = 0;
        CU_ASSERT_FATAL(snprintf(text, sizeof text, "{\"prompt\": \"%s\",", deep) > 0);
        refused(deep, SRV_COMPLETIONS, 400, "", "JSON nested deeper than 1000 arrays and objects at byte 1000");
        refused(text, SRV_COMPLETIONS, 400, "", "JSON syntax error at byte 3014");
    }
    refused("", SRV_COMPLETIONS, 400, "", "no body");
    refused("[1]", SRV_COMPLETIONS, 400, "", "must be a JSON object");
    refused("{\"prompt\": 5}", SRV_COMPLETIONS, 400, "prompt", "must be a string");
    refused("{\"max_tokens\": 5}", SRV_COMPLETIONS, 400, "prompt", "'prompt' is required");
    refused("{\"prompt\": \"x\", \"max_tokens\": \"5\"}", SRV_COMPLETIONS, 400, "max_tokens", "must be an integer");
    refused("{\"prompt\": \"x\", \"max_tokens\": 2.5}", SRV_COMPLETIONS, 400, "max_tokens", "not a fraction");
    refused("{\"prompt\": \"x\", \"max_tokens\": 0}", SRV_COMPLETIONS, 400, "max_tokens", "[1, 100]");
    refused("{\"prompt\": \"x\", \"max_tokens\": 101}", SRV_COMPLETIONS, 400, "max_tokens", "--max-tokens");
    /* max_tokens and max_completion_tokens: one limit under two names, the same value or refused */
    CU_ASSERT_EQUAL(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 4, "
                          "\"max_completion_tokens\": 4}", SRV_CHAT, &p, &e), 0);
    CU_ASSERT_EQUAL(p.max_tokens, 4);
    srv_params_free(&p);
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 3, "
            "\"max_completion_tokens\": 4}", SRV_CHAT, 400, "max_completion_tokens", "given 3 and 4: give one");
    refused("{\"prompt\": \"x\", \"temperature\": 2.5}", SRV_COMPLETIONS, 400, "temperature", "within [0, 2]");
    refused("{\"prompt\": \"x\", \"temperature\": \"hot\"}", SRV_COMPLETIONS, 400, "temperature", "must be a number");
    refused("{\"prompt\": \"x\", \"top_p\": 0}", SRV_COMPLETIONS, 400, "top_p", "within (0, 1]");
    refused("{\"prompt\": \"x\", \"top_p\": 2}", SRV_COMPLETIONS, 400, "top_p", "within (0, 1]");
    refused("{\"prompt\": \"x\", \"max_tokens\": 1e30}", SRV_COMPLETIONS, 400, "max_tokens", "[1, 100]");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": 5}]}", SRV_CHAT, 400,
            "messages[0]", "'messages[0].name' must be a string");
    refused("{\"prompt\": \"x\", \"stream\": 1}", SRV_COMPLETIONS, 400, "stream", "must be a boolean");
    refused("{\"prompt\": \"x\", \"stop\": [\"a\", 3]}", SRV_COMPLETIONS, 400, "stop", "stop[1]");
    refused("{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", SRV_COMPLETIONS, 400, "stop",
            "at most 4");
    refused("{\"prompt\": \"x\", \"stop\": \"\"}", SRV_COMPLETIONS, 400, "stop", "1 to 512 bytes");
    refused("{\"prompt\": \"x\", \"foo\": 1}", SRV_COMPLETIONS, 400, "foo", "Unrecognized request argument supplied: foo");
    refused("{\"prompt\": \"x\", \"messages\": []}", SRV_COMPLETIONS, 400, "messages", "messages");
    refused("{\"prompt\": \"x\", \"n\": 2}", SRV_COMPLETIONS, 400, "n", "must be 1");
    refused("{\"prompt\": \"x\", \"presence_penalty\": 0.5}", SRV_COMPLETIONS, 400, "presence_penalty", "only 0");
    refused("{\"prompt\": \"x\", \"logprobs\": 3}", SRV_COMPLETIONS, 400, "logprobs", "not supported");
    refused("{\"prompt\": \"x\", \"prompt\": \"y\"}", SRV_COMPLETIONS, 400, "prompt", "given twice");
    refused("{\"prompt\": \"x\", \"model\": \"gpt-4\"}", SRV_COMPLETIONS, 404, "model", "'gpt-4' does not exist");
    refused("{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", SRV_COMPLETIONS, 400,
            "stream_options", "only allowed when 'stream' is true");
    refused("{\"prompt\": \"a\\u0000b\"}", SRV_COMPLETIONS, 400, "", "NUL");
    refused("{\"messages\": []}", SRV_CHAT, 400, "messages", "is empty");
    refused("{\"messages\": {}}", SRV_CHAT, 400, "messages", "must be an array");
    refused("{\"prompt\": \"x\"}", SRV_CHAT, 400, "prompt", "Unrecognized");
    refused("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", SRV_CHAT, 400, "messages[0]", "'tool'");
    refused("{\"messages\": [{\"role\": \"user\"}]}", SRV_CHAT, 400, "messages[0]", "no content");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", SRV_CHAT, 400, "messages[0].content",
            "must be a string");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", SRV_CHAT, 400,
            "messages[0].content", "only parts");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]}", SRV_CHAT, 400,
            "messages[0]", "tool_calls");
    refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}",
            SRV_CHAT, 400, "tools", "not supported");
    srv_limits nochat = lim;
    nochat.has_chat = 0;
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    CU_ASSERT_EQUAL(srv_parse_request(b, strlen(b), SRV_CHAT, &nochat, &p, &e), -1);
    CU_ASSERT_EQUAL(e.status, 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.message, "has no chat template"));
}

static void test_json(void)
{
    srv_buf b = {0};
    srv_json_completion(&b, SRV_COMPLETIONS, "cmpl-1", 7, "m", "a\"b\n\x01\0z", 7, "length", 3, 4);
    cJSON *j = cJSON_Parse(b.p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(c, "text")->valuestring[4], 1); /* "a\"b\n\x01" (cJSON stops at NUL) */
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\\u0000z"));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "length");
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(u, "total_tokens")->valueint, 7);
    cJSON_Delete(j);
    b.len = 0;
    srv_json_completion(&b, SRV_CHAT, "chatcmpl-1", 7, "m", "hi", 2, "stop", 1, 1);
    j = cJSON_Parse(b.p);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content")->valuestring, "hi");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    cJSON_Delete(j);
    /* chunks: "data: {...}\n\n" */
    b.len = 0;
    srv_sse_chunk(&b, SRV_CHAT, "chatcmpl-1", 7, "m", "", 0, NULL, 1);
    CU_ASSERT_EQUAL(strncmp(b.p, "data: ", 6), 0);
    CU_ASSERT_STRING_EQUAL(b.p + b.len - 2, "\n\n");
    j = cJSON_Parse(b.p + 6);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "role")->valuestring, "assistant");
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(c, "finish_reason")));
    cJSON_Delete(j);
    b.len = 0;
    srv_sse_chunk(&b, SRV_CHAT, "chatcmpl-1", 7, "m", "", 0, "stop", 0);
    j = cJSON_Parse(b.p + 6);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(c, "delta")->child);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "stop");
    cJSON_Delete(j);
    b.len = 0;
    srv_sse_usage(&b, SRV_COMPLETIONS, "cmpl-1", 7, "m", 5, 6);
    j = cJSON_Parse(b.p + 6);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 0);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 6);
    cJSON_Delete(j);
    b.len = 0;
    srv_error e;
    srv_fail(&e, 400, "invalid_request_error", NULL, "max_tokens", "bad \"%s\"", "x");
    srv_json_error(&b, &e);
    j = cJSON_Parse(b.p);
    const cJSON *er = cJSON_GetObjectItem(j, "error");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(er, "message")->valuestring, "bad \"x\"");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(er, "param")->valuestring, "max_tokens");
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(er, "code")));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(er, "type")->valuestring, "invalid_request_error");
    cJSON_Delete(j);
    b.len = 0;
    srv_json_models(&b, "stories15M", 5);
    j = cJSON_Parse(b.p);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "id")->valuestring,
                           "stories15M");
    cJSON_Delete(j);
    srv_buf_free(&b);
}

static void test_metrics(void)
{
    srv_metrics m;
    srv_metrics_init(&m, 4);
    srv_metrics_request(&m, 200, 10, 20, 0.03, 0.004, 1);
    srv_metrics_request(&m, 200, 5, 1, 0.2, 0, 1);
    srv_metrics_request(&m, 400, 0, 0, 0, 0, 0);
    srv_metrics_tokens(&m, 21);
    srv_metrics_load(&m, 3, 2);
    srv_buf b = {0};
    srv_metrics_text(&m, &b);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_requests_total{status=\"200\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_requests_total{status=\"400\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_queue_depth 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_running_sequences 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_ttft_seconds_bucket{le=\"0.025\"} 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_ttft_seconds_bucket{le=\"0.05\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_ttft_seconds_bucket{le=\"+Inf\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_ttft_seconds_count 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_tpot_seconds_count 1\n")); /* one token: no TPOT */
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_tpot_seconds_bucket{le=\"0.005\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_generated_tokens_total 21\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_prompt_tokens_total 15\n"));
    srv_buf_free(&b);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("serve", NULL, NULL);
    CU_add_test(s, "UTF-8 tails and replacement", test_utf8);
    CU_add_test(s, "stop strings and held-back text", test_stream);
    CU_add_test(s, "request parsing and validation", test_parse);
    CU_add_test(s, "response, chunk and error JSON", test_json);
    CU_add_test(s, "Prometheus text", test_metrics);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
