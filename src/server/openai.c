/* OpenAI's request and response shapes (see internal.h): the fields of
 * /v1/completions and /v1/chat/completions checked strictly, as OpenAI's own
 * API does (an unknown field is a 400 naming it), except fields clients send
 * by habit that change nothing here (user, n = 1, presence and frequency
 * penalties of 0, ...); responses, stream chunks and errors. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_keys.h"
#include "internal.h"
#include "meshinfer/common.h"

int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD(e, param, ...) srv_fail(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* The fields of each route; the second list: accepted and ignored when they
 * ask for nothing this server does differently (checked in ignored_ok). */
static const char *const common_fields[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop",
                                            "stream", "stream_options", "n", "user", "presence_penalty",
                                            "frequency_penalty", "logit_bias", "logprobs", NULL};
static const char *const completion_fields[] = {"prompt", "echo", "suffix", "best_of", NULL};
static const char *const chat_fields[] = {"messages", "max_completion_tokens", "chat_template_kwargs", "top_logprobs",
                                          "response_format", "tools", "tool_choice", "parallel_tool_calls", "store",
                                          "metadata", "service_tier", NULL};

static int in_list(const char *k, const char *const *l)
{
    for (; *l; l++)
        if (!strcmp(k, *l))
            return 1;
    return 0;
}

static const char *type_name(const cJSON *v)
{
    return cJSON_IsNull(v) ? "null" : cJSON_IsBool(v) ? "a boolean" : cJSON_IsNumber(v) ? "a number"
         : cJSON_IsString(v) ? "a string" : cJSON_IsArray(v) ? "an array" : "an object";
}

/* An integer field within [lo, hi]. */
static int get_int(const cJSON *v, const char *name, double lo, double hi, double *out, srv_error *e)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return BAD(e, name, "'%s' must be an integer, not %s", name, cJSON_IsNumber(v) ? "a fraction" : type_name(v));
    if (v->valuedouble < lo || v->valuedouble > hi)
        /* whole numbers as integers: a seed's bounds are 2^64 - 1 and -2^63, not 1.8446744073709552e+19 */
        return BAD(e, name, "'%s' is %.17g; it must be within [%.0f, %.0f]", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int get_num(const cJSON *v, const char *name, double lo, double hi, double *out, srv_error *e)
{
    if (!cJSON_IsNumber(v))
        return BAD(e, name, "'%s' must be a number, not %s", name, type_name(v));
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return BAD(e, name, "'%s' is %g; it must be within [%g, %g]", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *v, const char *name, int *out, srv_error *e)
{
    if (!cJSON_IsBool(v))
        return BAD(e, name, "'%s' must be a boolean, not %s", name, type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int valid_utf8(const char *s)
{
    srv_buf b = {0};
    size_t n = strlen(s);
    srv_utf8_append(&b, s, n);
    int ok = b.len == n;
    srv_buf_free(&b);
    return ok;
}

static char *dup_str(const char *s)
{
    char *d = strdup(s);
    if (!d)
        mi_fatal("serve: out of memory");
    return d;
}

/* A field accepted and ignored must not ask for what this server does not do. */
static int ignored_ok(const char *k, const cJSON *v, srv_error *e)
{
    if (!strcmp(k, "n") || !strcmp(k, "best_of"))
        return cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == 1)
                   ? 0 : BAD(e, k, "'%s' must be 1: one choice per request", k);
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty"))
        return cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == 0)
                   ? 0 : BAD(e, k, "'%s' is not supported (only 0)", k);
    if (!strcmp(k, "logit_bias"))
        return cJSON_IsNull(v) || (cJSON_IsObject(v) && !v->child) ? 0 : BAD(e, k, "'logit_bias' is not supported");
    if (!strcmp(k, "logprobs") || !strcmp(k, "echo"))
        return cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0)
                   ? 0 : BAD(e, k, "'%s' is not supported", k);
    if (!strcmp(k, "top_logprobs") || !strcmp(k, "suffix") || !strcmp(k, "tools") || !strcmp(k, "tool_choice"))
        return cJSON_IsNull(v) || (cJSON_IsArray(v) && !v->child) || (cJSON_IsString(v) && !strcmp(k, "tool_choice") &&
                                                                       !strcmp(v->valuestring, "none"))
                   ? 0 : BAD(e, k, "'%s' is not supported", k);
    if (!strcmp(k, "response_format")) {
        const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
        return cJSON_IsNull(v) || (cJSON_IsString(t) && !strcmp(t->valuestring, "text"))
                   ? 0 : BAD(e, k, "'response_format' other than {\"type\": \"text\"} is not supported");
    }
    if (!strcmp(k, "user") || !strcmp(k, "service_tier"))
        return cJSON_IsNull(v) || cJSON_IsString(v) ? 0 : BAD(e, k, "'%s' must be a string", k);
    return 0; /* store, metadata, parallel_tool_calls: nothing to do */
}

static int parse_stop(const cJSON *v, srv_params *p, srv_error *e)
{
    if (cJSON_IsNull(v))
        return 0;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v))
        return BAD(e, "stop", "'stop' must be a string or an array of strings, not %s", type_name(v));
    int n = one ? 1 : cJSON_GetArraySize(v);
    if (n > SRV_MAX_STOP)
        return BAD(e, "stop", "'stop' has %d strings; at most %d", n, SRV_MAX_STOP);
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s))
            return BAD(e, "stop", "'stop[%d]' must be a string, not %s", i, type_name(s));
        size_t L = strlen(s->valuestring);
        if (L == 0 || L > SRV_MAX_STOP_LEN)
            return BAD(e, "stop", "'stop' strings must have 1 to %d bytes (stop[%d] has %zu)", SRV_MAX_STOP_LEN, i, L);
        if (!valid_utf8(s->valuestring))
            return BAD(e, "stop", "'stop[%d]' is not valid UTF-8", i);
        p->stop[p->n_stop++] = dup_str(s->valuestring);
    }
    return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined). */
static int parse_content(const cJSON *c, int i, srv_params *p, srv_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) {
        p->contents[i] = dup_str(c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c))
        return BAD(e, param, "'%s' must be a string or an array of text parts, not %s", param, type_name(c));
    srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x)) {
            srv_buf_free(&b);
            return BAD(e, param, "'%s': only parts {\"type\": \"text\", \"text\": STRING} are supported", param);
        }
        srv_buf_str(&b, x->valuestring);
    }
    p->contents[i] = b.p;
    return 0;
}

static int parse_messages(const cJSON *v, srv_params *p, srv_error *e)
{
    if (!cJSON_IsArray(v))
        return BAD(e, "messages", "'messages' must be an array, not %s", type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return BAD(e, "messages", "'messages' is empty: give at least one message");
    p->roles = calloc((size_t)n, sizeof *p->roles);
    p->contents = calloc((size_t)n, sizeof *p->contents);
    if (!p->roles || !p->contents)
        mi_fatal("serve: out of memory");
    p->n_msgs = n;
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(v, i), *k;
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m))
            return BAD(e, param, "'%s' must be an object, not %s", param, type_name(m));
        const cJSON *role = NULL, *content = NULL;
        cJSON_ArrayForEach(k, m) {
            if (!strcmp(k->string, "role"))
                role = k;
            else if (!strcmp(k->string, "content"))
                content = k;
            else if (strcmp(k->string, "name"))
                return BAD(e, param, "'%s' has the field '%s': only role, content and name are supported", param,
                           k->string);
            else if (!cJSON_IsString(k))
                return BAD(e, param, "'%s.name' must be a string, not %s", param, type_name(k));
        }
        if (!cJSON_IsString(role))
            return BAD(e, param, "'%s.role' must be a string", param);
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) /* OpenAI's newer name of the system role */
            r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return BAD(e, param, "'%s.role' is '%s': only system (or developer), user and assistant are supported",
                       param, role->valuestring);
        p->roles[i] = dup_str(r);
        if (!content)
            return BAD(e, param, "'%s' has no content", param);
        if (parse_content(content, i, p, e))
            return -1;
    }
    return 0;
}

static int parse_prompt(const cJSON *v, srv_params *p, srv_error *e)
{
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child))
        v = v->child; /* ["text"]: one prompt */
    if (!cJSON_IsString(v))
        return BAD(e, "prompt", "'prompt' must be a string (or an array of one string), not %s", type_name(v));
    p->prompt = dup_str(v->valuestring);
    return 0;
}

static int parse_field(const char *k, const cJSON *v, int route, const srv_limits *lim, srv_params *p, srv_error *e)
{
    double d;
    if (!strcmp(k, "model")) {
        if (!cJSON_IsString(v))
            return BAD(e, "model", "'model' must be a string, not %s", type_name(v));
        if (strcmp(v->valuestring, lim->model_id))
            return srv_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                            "The model '%s' does not exist: this server serves '%s'", v->valuestring, lim->model_id);
        return 0;
    }
    if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
        if (cJSON_IsNull(v))
            return 0;
        if (get_int(v, k, -INFINITY, INFINITY, &d, e)) /* the range below names this server's cap */
            return -1;
        if (d < 1 || d > lim->max_tokens)
            return BAD(e, k, "'%s' is %.0f; it must be within [1, %d] (this server's --max-tokens, at most the "
                       "model's context less one prompt token)", k, d, lim->max_tokens);
        int key = !strcmp(k, "max_tokens") ? 1 : 2;
        if (p->max_tokens_keys && !(p->max_tokens_keys & key) && p->max_tokens != (int)d) /* two names, one limit */
            return BAD(e, k, "'max_tokens' and 'max_completion_tokens' name one limit and were given %d and %.0f: "
                       "give one", p->max_tokens, d);
        p->max_tokens_keys |= key;
        p->max_tokens = (int)d;
        return 0;
    }
    if (!strcmp(k, "temperature"))
        return cJSON_IsNull(v) ? 0 : get_num(v, k, 0, 2, &p->temperature, e);
    if (!strcmp(k, "top_p")) {
        if (cJSON_IsNull(v))
            return 0;
        if (!cJSON_IsNumber(v))
            return BAD(e, k, "'top_p' must be a number, not %s", type_name(v));
        if (!(v->valuedouble > 0 && v->valuedouble <= 1))
            return BAD(e, k, "'top_p' is %g; it must be within (0, 1]", v->valuedouble);
        p->top_p = v->valuedouble;
        return 0;
    }
    if (!strcmp(k, "top_k")) {
        if (cJSON_IsNull(v))
            return 0;
        if (get_int(v, k, -1, 1 << 24, &d, e))
            return -1;
        p->top_k = d < 0 ? 0 : (int)d; /* -1: off, as vLLM */
        return 0;
    }
    if (!strcmp(k, "seed")) {
        if (cJSON_IsNull(v))
            return 0;
        /* the largest double below 2^64 (2^64 - 1 rounds up to 2^64, past a uint64_t) */
        if (get_int(v, k, -9223372036854775808.0, 18446744073709549568.0, &d, e))
            return -1;
        p->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
        p->seed_set = 1;
        return 0;
    }
    if (!strcmp(k, "stop"))
        return parse_stop(v, p, e);
    if (!strcmp(k, "stream"))
        return cJSON_IsNull(v) ? 0 : get_bool(v, k, &p->stream, e);
    if (!strcmp(k, "stream_options")) {
        if (cJSON_IsNull(v))
            return 0;
        if (!cJSON_IsObject(v))
            return BAD(e, k, "'stream_options' must be an object, not %s", type_name(v));
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            if (strcmp(x->string, "include_usage"))
                return BAD(e, k, "'stream_options' has the field '%s': only include_usage is supported", x->string);
            if (get_bool(x, "stream_options.include_usage", &p->include_usage, e))
                return -1;
        }
        return 0;
    }
    if (!strcmp(k, "prompt"))
        return parse_prompt(v, p, e);
    if (!strcmp(k, "messages"))
        return parse_messages(v, p, e);
    if (!strcmp(k, "chat_template_kwargs")) {
        if (cJSON_IsNull(v))
            return 0;
        const cJSON *x;
        if (!cJSON_IsObject(v))
            return BAD(e, k, "'chat_template_kwargs' must be an object, not %s", type_name(v));
        cJSON_ArrayForEach(x, v) {
            int on = 1;
            if (strcmp(x->string, "enable_thinking"))
                return BAD(e, k, "'chat_template_kwargs' has '%s': only enable_thinking is supported", x->string);
            if (get_bool(x, "chat_template_kwargs.enable_thinking", &on, e))
                return -1;
            p->no_thinking = !on;
        }
        return 0;
    }
    (void)route;
    return ignored_ok(k, v, e);
}

int srv_parse_request(const char *body, size_t len, int route, const srv_limits *lim, srv_params *p, srv_error *e)
{
    memset(p, 0, sizeof *p);
    p->route = route;
    p->temperature = 1.0, p->top_p = 1.0;
    char err[MI_ERRLEN];
    if (len == 0)
        return BAD(e, NULL, "the request has no body: send a JSON object");
    if (memmem(body, len, "\\u0000", 6))
        return BAD(e, NULL, "the body holds \\u0000: NUL characters are not supported");
    cJSON *j = mi_json_parse(body, len, "request body", err);
    if (!j)
        return BAD(e, NULL, "%s (we could not parse the JSON body of your request)", err);
    int rc = 0;
    if (!cJSON_IsObject(j))
        rc = BAD(e, NULL, "the body must be a JSON object, not %s", type_name(j));
    const cJSON *v;
    cJSON_ArrayForEach(v, j) {
        if (rc)
            break;
        const char *k = v->string;
        for (const cJSON *w = v->next; w && !rc; w = w->next)
            if (!strcmp(w->string, k))
                rc = BAD(e, k, "the field '%s' is given twice", k);
        if (rc)
            break;
        if (!in_list(k, common_fields) && !in_list(k, route == SRV_CHAT ? chat_fields : completion_fields))
            rc = BAD(e, k, "Unrecognized request argument supplied: %s", k);
        else
            rc = parse_field(k, v, route, lim, p, e);
    }
    if (!rc && route == SRV_CHAT && !p->roles)
        rc = BAD(e, "messages", "'messages' is required");
    if (!rc && route == SRV_COMPLETIONS && !p->prompt)
        rc = BAD(e, "prompt", "'prompt' is required");
    if (!rc && route == SRV_CHAT && !lim->has_chat)
        rc = BAD(e, "messages", "the model '%s' has no chat template: use /v1/completions (or start the server "
                                "with --chat-template NAME)", lim->model_id);
    if (!rc && p->include_usage && !p->stream)
        rc = BAD(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    cJSON_Delete(j);
    if (rc)
        srv_params_free(p);
    return rc;
}

void srv_params_free(srv_params *p)
{
    free(p->prompt);
    for (int i = 0; i < p->n_msgs; i++) {
        free(p->roles ? p->roles[i] : NULL);
        free(p->contents ? p->contents[i] : NULL);
    }
    free(p->roles);
    free(p->contents);
    for (int i = 0; i < p->n_stop; i++)
        free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

void srv_json_error(srv_buf *out, const srv_error *e)
{
    srv_buf_str(out, "{\"error\": {\"message\": ");
    srv_buf_json(out, e->message, strlen(e->message));
    srv_buf_str(out, ", \"type\": ");
    srv_buf_json(out, e->type, strlen(e->type));
    srv_buf_str(out, ", \"param\": ");
    if (e->param[0])
        srv_buf_json(out, e->param, strlen(e->param));
    else
        srv_buf_str(out, "null");
    srv_buf_str(out, ", \"code\": ");
    if (e->code)
        srv_buf_json(out, e->code, strlen(e->code));
    else
        srv_buf_str(out, "null");
    srv_buf_str(out, "}}");
}

static void head(srv_buf *out, const char *object, const char *id, long created, const char *model)
{
    srv_buf_printf(out, "{\"id\": \"%s\", \"object\": \"%s\", \"created\": %ld, \"model\": ", id, object, created);
    srv_buf_json(out, model, strlen(model));
}

static void usage(srv_buf *out, int n_prompt, int n_gen)
{
    srv_buf_printf(out, "\"usage\": {\"prompt_tokens\": %d, \"completion_tokens\": %d, \"total_tokens\": %d}",
                   n_prompt, n_gen, n_prompt + n_gen);
}

void srv_json_completion(srv_buf *out, int route, const char *id, long created, const char *model, const char *text,
                         size_t n, const char *finish, int n_prompt, int n_gen)
{
    head(out, route == SRV_CHAT ? "chat.completion" : "text_completion", id, created, model);
    srv_buf_str(out, ", \"choices\": [{\"index\": 0, ");
    if (route == SRV_CHAT) {
        srv_buf_str(out, "\"message\": {\"role\": \"assistant\", \"content\": ");
        srv_buf_json(out, text, n);
        srv_buf_str(out, "}");
    } else {
        srv_buf_str(out, "\"text\": ");
        srv_buf_json(out, text, n);
    }
    srv_buf_printf(out, ", \"logprobs\": null, \"finish_reason\": \"%s\"}], ", finish);
    usage(out, n_prompt, n_gen);
    srv_buf_str(out, "}\n");
}

void srv_sse_chunk(srv_buf *out, int route, const char *id, long created, const char *model, const char *text,
                   size_t n, const char *finish, int role)
{
    srv_buf_str(out, "data: ");
    head(out, route == SRV_CHAT ? "chat.completion.chunk" : "text_completion", id, created, model);
    srv_buf_str(out, ", \"choices\": [{\"index\": 0, ");
    if (route == SRV_CHAT) {
        srv_buf_str(out, "\"delta\": {");
        if (role)
            srv_buf_str(out, "\"role\": \"assistant\"");
        if (!finish) {
            srv_buf_str(out, role ? ", \"content\": " : "\"content\": ");
            srv_buf_json(out, text, n);
        }
        srv_buf_str(out, "}");
    } else {
        srv_buf_str(out, "\"text\": ");
        srv_buf_json(out, text, finish ? 0 : n);
    }
    srv_buf_str(out, ", \"logprobs\": null, \"finish_reason\": ");
    if (finish)
        srv_buf_printf(out, "\"%s\"", finish);
    else
        srv_buf_str(out, "null");
    srv_buf_str(out, "}]}\n\n");
}

void srv_sse_usage(srv_buf *out, int route, const char *id, long created, const char *model, int n_prompt, int n_gen)
{
    srv_buf_str(out, "data: ");
    head(out, route == SRV_CHAT ? "chat.completion.chunk" : "text_completion", id, created, model);
    srv_buf_str(out, ", \"choices\": [], ");
    usage(out, n_prompt, n_gen);
    srv_buf_str(out, "}\n\n");
}

void srv_json_models(srv_buf *out, const char *model, long created)
{
    srv_buf_str(out, "{\"object\": \"list\", \"data\": [{\"id\": ");
    srv_buf_json(out, model, strlen(model));
    srv_buf_printf(out, ", \"object\": \"model\", \"created\": %ld, \"owned_by\": \"meshinfer\"}]}\n", created);
}
