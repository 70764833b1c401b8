/* Chat templates: recognise a family's Jinja template by its distinctive
 * substrings and render a conversation as that template does (chat.h).
 * Each kind is one row of a table: how a turn opens, what follows the role,
 * how it closes, the generation prompt, and a few flags for the family's
 * rules (trimming, where BOS goes, where the system prompt goes, alternation,
 * Qwen3's <think> blocks). Llama 2's [INST] pairs have their own writer.
 * Where the templates call Python string methods (strip, lstrip('\n'), split)
 * this follows Python's semantics, which transformers renders with. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/chat.h"
#include "meshinfer/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    F_TRIM = 1 << 0,       /* content | trim */
    F_BOS_FIRST = 1 << 1,  /* BOS before the first message (Llama 3) */
    F_BOS_START = 1 << 2,  /* BOS first thing (Gemma 3, Llama 3.1) */
    F_GEN_ALWAYS = 1 << 3, /* the generation prompt even without add_generation_prompt */
    F_ALTERNATE = 1 << 4,  /* user, assistant, user, ... after an optional system message */
    F_SYS_FOLD = 1 << 5,   /* the system text and "\n\n" open the first turn (Gemma 3) */
    F_SYS_DATE = 1 << 6,   /* a system header with the knowledge date, always (Llama 3.1) */
    F_DATE_TODAY = 1 << 7, /* ... and today's date in it (Llama 3.2) */
    F_THINK = 1 << 8,      /* Qwen3's <think> blocks in assistant turns */
    F_LLAMA2 = 1 << 9,     /* [INST] pairs: render_llama2 */
};

typedef struct {
    const char *name;
    const char *bos;               /* the family's BOS text, if its template writes one */
    const char *open, *mid, *close; /* a turn: open role mid content close */
    const char *gen;               /* the generation prompt */
    const char *model_role;        /* the assistant's role name in a turn, if not "assistant" */
    const char *default_sys;       /* the system prompt when the conversation has none */
    unsigned flags;
    const char *stops[4];
} chat_kind;

#define L3_TURN "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", \
                "<|start_header_id|>assistant<|end_header_id|>\n\n"
#define CHATML_TURN "<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n"

static const chat_kind KINDS[MI_CHAT_N_KINDS] = {
    [MI_CHAT_LLAMA3] = {"llama3", "<|begin_of_text|>", L3_TURN, NULL, NULL, F_TRIM | F_BOS_FIRST,
                        {"<|eot_id|>", "<|end_of_text|>", NULL}},
    [MI_CHAT_LLAMA3_ORIG] = {"llama3-orig", "<|begin_of_text|>", L3_TURN, NULL, NULL,
                             F_TRIM | F_BOS_FIRST | F_GEN_ALWAYS, {"<|eot_id|>", "<|end_of_text|>", NULL}},
    [MI_CHAT_LLAMA31] = {"llama3.1", "<|begin_of_text|>", L3_TURN, NULL, NULL, F_TRIM | F_BOS_START | F_SYS_DATE,
                         {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", NULL}},
    [MI_CHAT_LLAMA32] = {"llama3.2", "<|begin_of_text|>", L3_TURN, NULL, NULL,
                         F_TRIM | F_BOS_START | F_SYS_DATE | F_DATE_TODAY,
                         {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", NULL}},
    [MI_CHAT_CHATML_QWEN25] = {"qwen2.5", NULL, CHATML_TURN, NULL,
                               "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", 0,
                               {"<|im_end|>", "<|endoftext|>", NULL}},
    [MI_CHAT_CHATML_QWEN2] = {"qwen2", NULL, CHATML_TURN, NULL, "You are a helpful assistant.", 0,
                              {"<|im_end|>", "<|endoftext|>", NULL}},
    [MI_CHAT_QWEN3] = {"qwen3", NULL, CHATML_TURN, NULL, NULL, F_THINK, {"<|im_end|>", "<|endoftext|>", NULL}},
    [MI_CHAT_GEMMA3] = {"gemma3", "<bos>", "<start_of_turn>", "\n", "<end_of_turn>\n", "<start_of_turn>model\n",
                        "model", NULL, F_TRIM | F_BOS_START | F_ALTERNATE | F_SYS_FOLD,
                        {"<end_of_turn>", "<eos>", NULL}},
    [MI_CHAT_ZEPHYR] = {"zephyr", NULL, "<|", "|>\n", "</s>\n", "<|assistant|>\n", NULL, NULL, 0, {"</s>", NULL}},
    [MI_CHAT_LLAMA2] = {"llama2", "<s>", "", "", "", "", NULL, NULL, F_ALTERNATE | F_LLAMA2, {"</s>", NULL}},
    [MI_CHAT_CHATML] = {"chatml", NULL, CHATML_TURN, NULL, NULL, 0, {"<|im_end|>", NULL}},
};

/* Detection: the first rule whose every `all` substring is in the template
 * and none of whose `none` substrings is. Order matters: Llama 3.1's
 * template also says add_generation_prompt, Qwen's are also ChatML. */
typedef struct {
    int kind; /* -2: refuse (a family we do not render) */
    const char *all[3];
    const char *none[2];
} detect_rule;

static const detect_rule RULES[] = {
    {MI_CHAT_LLAMA32, {"<|start_header_id|>", "Cutting Knowledge Date", "strftime_now"}, {NULL}},
    {MI_CHAT_LLAMA31, {"<|start_header_id|>", "Cutting Knowledge Date", NULL}, {NULL}},
    {MI_CHAT_LLAMA3, {"<|start_header_id|>", "add_generation_prompt", NULL}, {NULL}},
    {MI_CHAT_LLAMA3_ORIG, {"<|start_header_id|>", NULL}, {NULL}},
    {MI_CHAT_QWEN3, {"<|im_start|>", "enable_thinking", "</think>"}, {NULL}},
    {MI_CHAT_CHATML_QWEN25, {"<|im_start|>", "You are Qwen, created by Alibaba Cloud.", NULL}, {NULL}},
    {MI_CHAT_CHATML_QWEN2, {"<|im_start|>", "You are a helpful assistant.", NULL}, {"think>", NULL}},
    {-2, {"<|im_start|>", "think>", NULL}, {NULL}}, /* QwQ, R1 distills: <think> rules of their own */
    {MI_CHAT_CHATML, {"<|im_start|>", NULL}, {NULL}},
    {MI_CHAT_GEMMA3, {"<start_of_turn>", NULL}, {NULL}},
    {MI_CHAT_ZEPHYR, {"<|user|>", "<|assistant|>", "eos_token"}, {"<|end|>", NULL}}, /* Phi-3 ends turns with <|end|> */
    {MI_CHAT_LLAMA2, {"[INST]", "<<SYS>>", NULL}, {NULL}},
};

static void kind_names(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < MI_CHAT_N_KINDS && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", k ? ", " : "", KINDS[k].name);
}

const char *mi_chat_kind_name(int kind)
{
    return kind >= 0 && kind < MI_CHAT_N_KINDS ? KINDS[kind].name : NULL;
}

const char *const *mi_chat_stop_texts(int kind)
{
    return kind >= 0 && kind < MI_CHAT_N_KINDS ? KINDS[kind].stops : NULL;
}

int mi_chat_kind_from_name(const char *name, char *err)
{
    for (int k = 0; name && k < MI_CHAT_N_KINDS; k++)
        if (!strcmp(name, KINDS[k].name))
            return k;
    char names[256];
    kind_names(names, sizeof names);
    return mi_set_error(err, "chat template kind '%s' is unknown; the kinds are %s", name ? name : "(null)", names);
}

int mi_chat_detect(const char *text, char *err)
{
    char names[256];
    kind_names(names, sizeof names);
    if (!text || !*text)
        return mi_set_error(err, "chat template is empty; name its kind instead (%s)", names);
    for (size_t r = 0; r < sizeof RULES / sizeof RULES[0]; r++) {
        int ok = 1;
        for (int i = 0; i < 3 && RULES[r].all[i] && ok; i++)
            ok = strstr(text, RULES[r].all[i]) != NULL;
        for (int i = 0; i < 2 && RULES[r].none[i] && ok; i++)
            ok = strstr(text, RULES[r].none[i]) == NULL;
        if (ok && RULES[r].kind >= 0)
            return RULES[r].kind;
        if (ok)
            break;
    }
    return mi_set_error(err, "chat template is not one of the known kinds (%s); name the kind to use instead",
                        names);
}

/* A growing output string; a failed allocation is reported once at the end. */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
    size_t *spans; /* [start, end) byte pairs of the messages' own text (sb_text) */
    int n_spans, cap_spans;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_put(sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

/* A message's own text (not the template's): its span is recorded, so that
 * the tokenizer reads a "<|im_end|>" in it as text, never as the token a
 * client could forge a turn with. */
static void sb_text(sbuf *b, const char *s, size_t n)
{
    if (b->failed || n == 0)
        return;
    if (b->n_spans == b->cap_spans) {
        int cap = b->cap_spans ? 2 * b->cap_spans : 16;
        size_t *p = realloc(b->spans, (size_t)cap * 2 * sizeof *p);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->spans = p, b->cap_spans = cap;
    }
    b->spans[2 * b->n_spans] = b->len;
    sb_putn(b, s, n);
    b->spans[2 * b->n_spans + 1] = b->len;
    b->n_spans++;
}

/* A piece of a message's text. */
typedef struct {
    const char *p;
    size_t n;
} span;

static span span_of(const char *s)
{
    return (span){s, strlen(s)};
}

/* One UTF-8 character at s (n bytes left): its length; *cp its code point,
 * U+FFFD for a malformed byte (which no whitespace rule then matches). */
static size_t utf8_at(const char *s, size_t n, unsigned *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = u[0] < 0x80 ? 1 : (u[0] >> 5) == 6 ? 2 : (u[0] >> 4) == 14 ? 3 : (u[0] >> 3) == 30 ? 4 : 0;
    *cp = 0xfffd;
    if (len == 0 || len > n)
        return 1;
    unsigned c = len == 1 ? u[0] : u[0] & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 1;
        c = c << 6 | (u[i] & 0x3f);
    }
    *cp = c;
    return len;
}

/* Python's str.isspace(): what str.strip() and Jinja's trim remove. */
static int py_space(unsigned c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

static span py_strip(span t)
{
    unsigned cp;
    while (t.n) {
        size_t k = utf8_at(t.p, t.n, &cp);
        if (!py_space(cp))
            break;
        t.p += k;
        t.n -= k;
    }
    while (t.n) {
        size_t st = t.n - 1; /* back to the last character's first byte */
        while (st > 0 && t.n - st < 4 && ((unsigned char)t.p[st] & 0xc0) == 0x80)
            st--;
        if (st + utf8_at(t.p + st, t.n - st, &cp) != t.n || !py_space(cp))
            break;
        t.n = st;
    }
    return t;
}

/* str.lstrip('\n') / rstrip('\n'): newlines only, unlike strip(). */
static span strip_nl(span t, int left, int right)
{
    while (left && t.n && t.p[0] == '\n') {
        t.p++;
        t.n--;
    }
    while (right && t.n && t.p[t.n - 1] == '\n')
        t.n--;
    return t;
}

/* Where pat first (or last) occurs inside t, or NULL. */
static const char *span_find(span t, const char *pat, int last)
{
    size_t m = strlen(pat);
    const char *hit = NULL;
    for (size_t i = 0; i + m <= t.n; i++)
        if (!memcmp(t.p + i, pat, m)) {
            hit = t.p + i;
            if (!last)
                break;
        }
    return hit;
}

static int has_role(const mi_chat_msg *m, const char *role)
{
    return !strcmp(m->role, role);
}

/* Qwen3's ns.last_query_index: the last user message that is not a
 * <tool_response> wrapper; the last message when there is none. */
static int last_query(const mi_chat_msg *m, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        span c = span_of(m[i].content);
        size_t a = strlen("<tool_response>"), z = strlen("</tool_response>");
        int wrapped = c.n >= a && !memcmp(c.p, "<tool_response>", a) && c.n >= z &&
                      !memcmp(c.p + c.n - z, "</tool_response>", z);
        if (has_role(&m[i], "user") && !wrapped)
            return i;
    }
    return n - 1;
}

/* An assistant turn's body in Qwen3's template: reasoning before </think>
 * is split off; turns after the last user query keep it in a <think> block
 * (the last turn always), earlier ones drop it. */
static void put_qwen3_assistant(sbuf *b, span c, int after_query, int is_last)
{
    span reasoning = {"", 0};
    const char *end_first = span_find(c, "</think>", 0);
    if (end_first) {
        const char *end_last = span_find(c, "</think>", 1) + strlen("</think>");
        span before = strip_nl((span){c.p, (size_t)(end_first - c.p)}, 0, 1);
        const char *open = span_find(before, "<think>", 1);
        if (open) {
            size_t skip = (size_t)(open - before.p) + strlen("<think>");
            before = (span){before.p + skip, before.n - skip};
        }
        reasoning = strip_nl(before, 1, 0);
        c = strip_nl((span){end_last, (size_t)(c.p + c.n - end_last)}, 1, 0);
    }
    if (after_query && (is_last || reasoning.n)) {
        reasoning = strip_nl(reasoning, 1, 1);
        sb_put(b, "<think>\n");
        sb_text(b, reasoning.p, reasoning.n);
        sb_put(b, "\n</think>\n\n");
        c = strip_nl(c, 1, 0);
    }
    sb_text(b, c.p, c.n);
}

static int alternation_error(const chat_kind *k, int i, const mi_chat_msg *m, char *err)
{
    return mi_set_error(err,
                        "chat template %s: message %d is '%s', but roles must alternate "
                        "user/assistant/user/... after an optional first system message",
                        k->name, i + 1, m->role);
}

/* Llama 3.1's system header: knowledge date, today's date, system text. */
static void put_date_header(const chat_kind *k, sbuf *b, span sys)
{
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    char date[32] = "26 Jul 2024"; /* the template's fixed date */
    if (k->flags & F_DATE_TODAY) { /* strftime_now("%d %b %Y"), English month names whatever the locale */
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm))
            snprintf(date, sizeof date, "%02d %s %d", tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900);
    }
    sb_put(b, k->open);
    sb_put(b, "system");
    sb_put(b, k->mid);
    sb_put(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
    sb_put(b, date);
    sb_put(b, "\n\n");
    sb_text(b, sys.p, sys.n);
    sb_put(b, k->close);
}

/* The kinds made of turns (all but Llama 2). */
static int render_turns(const chat_kind *k, const mi_chat_msg *m, int n, int gen, const char *bos, sbuf *b,
                        char *err)
{
    int first = 0; /* the first message of the template's loop */
    span fold = {NULL, 0};
    if (k->flags & F_BOS_START)
        sb_put(b, bos);
    if (k->flags & F_SYS_DATE) {
        first = has_role(&m[0], "system");
        put_date_header(k, b, first ? py_strip(span_of(m[0].content)) : (span){"", 0});
    } else if ((k->flags & F_SYS_FOLD) && has_role(&m[0], "system")) {
        fold = span_of(m[0].content);
        first = 1;
    } else if (k->default_sys && !has_role(&m[0], "system")) {
        sb_put(b, k->open);
        sb_put(b, "system");
        sb_put(b, k->mid);
        sb_put(b, k->default_sys);
        sb_put(b, k->close);
    }
    int query = (k->flags & F_THINK) ? last_query(m, n) : 0;
    for (int i = first; i < n; i++) {
        int j = i - first, assistant = has_role(&m[i], "assistant");
        if ((k->flags & F_ALTERNATE) && has_role(&m[i], "user") != (j % 2 == 0))
            return alternation_error(k, i, &m[i], err);
        if ((k->flags & F_BOS_FIRST) && i == 0)
            sb_put(b, bos);
        sb_put(b, k->open);
        sb_put(b, assistant && k->model_role ? k->model_role : m[i].role);
        sb_put(b, k->mid);
        if (j == 0 && fold.p) {
            sb_text(b, fold.p, fold.n);
            sb_put(b, "\n\n");
        }
        span c = span_of(m[i].content);
        if ((k->flags & F_THINK) && assistant)
            put_qwen3_assistant(b, c, i > query, i == n - 1);
        else {
            c = (k->flags & F_TRIM) ? py_strip(c) : c;
            sb_text(b, c.p, c.n);
        }
        sb_put(b, k->close);
    }
    if ((gen & MI_CHAT_GEN) || (k->flags & F_GEN_ALWAYS)) {
        sb_put(b, k->gen);
        if ((k->flags & F_THINK) && (gen & MI_CHAT_NO_THINKING))
            sb_put(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}

/* Llama 2 Chat: "<s>[INST] user [/INST] answer </s>" pairs, the system text
 * in <<SYS>> inside the first user turn; stripped as a whole there. It has
 * no generation prompt: a prompt ending with a user turn ends with [/INST]. */
static int render_llama2(const chat_kind *k, const mi_chat_msg *m, int n, const char *bos, sbuf *b, char *err)
{
    int first = has_role(&m[0], "system");
    for (int i = first; i < n; i++) {
        int j = i - first;
        if (has_role(&m[i], "user") != (j % 2 == 0))
            return alternation_error(k, i, &m[i], err);
        sbuf whole = {0};
        if (j == 0 && first) {
            sb_put(&whole, "<<SYS>>\n");
            sb_put(&whole, m[0].content);
            sb_put(&whole, "\n<</SYS>>\n\n");
        }
        sb_put(&whole, m[i].content);
        if (whole.failed) {
            b->failed = 1;
            return 0;
        }
        span c = py_strip((span){whole.s ? whole.s : "", whole.len});
        if (has_role(&m[i], "user")) {
            sb_put(b, bos);
            sb_put(b, "[INST] ");
            sb_text(b, c.p, c.n); /* <<SYS>> and its markers included: no token of Llama 2's is special there */
            sb_put(b, " [/INST]");
        } else if (has_role(&m[i], "assistant")) {
            sb_put(b, " ");
            sb_text(b, c.p, c.n);
            sb_put(b, " </s>");
        } /* a system message in an assistant's place: the template writes nothing */
        free(whole.s);
    }
    return 0;
}

int mi_chat_render(int kind, const mi_chat_msg *msgs, int n, int add_generation_prompt, const char *bos_text,
                   char **out, char *err)
{
    return mi_chat_render_spans(kind, msgs, n, add_generation_prompt, bos_text, out, NULL, NULL, err);
}

int mi_chat_render_spans(int kind, const mi_chat_msg *msgs, int n, int add_generation_prompt, const char *bos_text,
                         char **out, size_t **spans, int *n_spans, char *err)
{
    *out = NULL;
    if (spans)
        *spans = NULL, *n_spans = 0;
    if (kind < 0 || kind >= MI_CHAT_N_KINDS)
        return mi_set_error(err, "chat template kind %d is out of range (0..%d)", kind, MI_CHAT_N_KINDS - 1);
    const chat_kind *k = &KINDS[kind];
    if (!msgs || n < 1)
        return mi_set_error(err, "chat template %s: the conversation has no messages", k->name);
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return mi_set_error(err, "chat template %s: message %d has no %s", k->name, i + 1,
                                msgs[i].role ? "content" : "role");
        if (!has_role(&msgs[i], "system") && !has_role(&msgs[i], "user") && !has_role(&msgs[i], "assistant"))
            return mi_set_error(err, "chat template %s: message %d has role '%s'; the roles are system, user "
                                "and assistant", k->name, i + 1, msgs[i].role);
    }
    const char *bos = bos_text ? bos_text : k->bos ? k->bos : "";
    sbuf b = {0};
    int rc = (k->flags & F_LLAMA2) ? render_llama2(k, msgs, n, bos, &b, err)
                                   : render_turns(k, msgs, n, add_generation_prompt, bos, &b, err);
    sb_putn(&b, "", 0); /* an empty rendering is still a string */
    if (rc == 0 && b.failed)
        rc = mi_set_error(err, "chat template %s: out of memory rendering %d messages", k->name, n);
    if (rc) {
        free(b.s);
        free(b.spans);
        return -1;
    }
    *out = b.s;
    if (spans)
        *spans = b.spans, *n_spans = b.n_spans;
    else
        free(b.spans);
    return 0;
}
