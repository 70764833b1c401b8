/* The stored form of a BPE-kind tokenizer (the JSON object described in
 * tokenizer.h), written into and read from the model file's /tokenizer/spec.
 * It holds the description, not the tables: reading it runs tok_finalize,
 * the same checks as loading tokenizer.json. Written by hand rather than
 * through cJSON's tree, which would take a node per token and per merge id
 * (millions for Gemma 3) only to print them. */
#include "tokenizer_impl.h"

#include "../util/json_keys.h"
#include "meshinfer/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "meshinfer-tokenizer-1"

static const char *const unicode_forms[] = {"nfc", "nfd", "nfkc", "nfkd"};

/* ---------------------------------------------------------------- write */

typedef struct {
    char *p;
    size_t n, cap;
    int bad;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->bad)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->bad = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void putf(sbuf *b, const char *fmt, ...) MI_PRINTF(2, 3);
static void putf(sbuf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, n > 0 ? (size_t)n : 0);
}

/* A JSON string: quotes, backslashes and control bytes escaped, the rest
 * (UTF-8) as it is. */
static void put_str(sbuf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(b, s + run, i - run);
        if (c == '"' || c == '\\') {
            const char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else {
            putf(b, "\\u%04x", c);
        }
        run = i + 1;
    }
    put(b, s + run, n - run);
    put(b, "\"", 1);
}

static void put_cstr(sbuf *b, const char *s) { put_str(b, s, strlen(s)); }
static const char *tf(int v) { return v ? "true" : "false"; }

static void put_ints(sbuf *b, const char *key, const int *v, int n)
{
    putf(b, ",\"%s\":[", key);
    for (int i = 0; i < n; i++)
        putf(b, i ? ",%d" : "%d", v[i]);
    put(b, "]", 1);
}

static void put_op(sbuf *b, const tok_op *op)
{
    switch (op->kind) {
    case TOK_N_PREPEND: put(b, "[\"prepend\",", 11); put_cstr(b, op->s1); break;
    case TOK_N_REPLACE:
        put(b, "[\"replace\",", 11);
        put_cstr(b, op->s1);
        put(b, ",", 1);
        put_cstr(b, op->s2);
        putf(b, ",%s", tf(op->flag));
        break;
    case TOK_N_UNICODE: putf(b, "[\"unicode\",\"%s\"", unicode_forms[op->a & 3]); break;
    case TOK_N_STRIP: putf(b, "[\"strip\",%s,%s", tf(op->a), tf(op->b)); break;
    case TOK_P_SPLIT:
        put(b, "[\"split\",", 9);
        put_cstr(b, op->s1);
        putf(b, ",%s,%d,%s", tf(op->flag), op->a, tf(op->b));
        break;
    case TOK_P_BYTELEVEL: putf(b, "[\"byte_level\",%s,%s", tf(op->a), tf(op->b)); break;
    case TOK_P_METASPACE:
        put(b, "[\"metaspace\",", 13);
        put_cstr(b, op->s1);
        putf(b, ",%d,%s", op->a, tf(op->b));
        break;
    default: putf(b, "[\"digits\",%s", tf(op->a)); break;
    }
    put(b, "]", 1);
}

static void put_steps(sbuf *b, const char *key, const tok_op *ops, int n)
{
    putf(b, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) {
        if (i)
            put(b, ",", 1);
        put_op(b, &ops[i]);
    }
    put(b, "]", 1);
}

char *mi_tokenizer_serialize(const mi_tokenizer *t, size_t *len, char *err)
{
    if (!t || !t->bpe)
        return mi_set_error(err, "tokenizer: only the BPE kinds have a stored form (llama2.c's is arrays)"), NULL;
    const mi_tok_bpe *bp = t->bpe;
    sbuf b = {0};
    putf(&b, "{\"format\":\"%s\",\"kind\":\"%s\",\"tokens\":[", FORMAT,
         t->kind == MI_TOK_BYTE_BPE ? "byte_bpe" : "spm");
    for (int i = 0; i < t->vocab_size; i++) {
        if (i)
            put(&b, ",", 1);
        put_str(&b, t->pieces[i], (size_t)t->piece_len[i]);
    }
    put(&b, "],\"flags\":[", 11);
    for (int i = 0, first = 1; i < t->vocab_size; i++)
        if (bp->flags[i]) {
            putf(&b, "%s[%d,%d]", first ? "" : ",", i, bp->flags[i]);
            first = 0;
        }
    put(&b, "]", 1);
    put_ints(&b, "merges", bp->merges, 2 * bp->n_merges);
    if (bp->merge_rank)
        put_ints(&b, "merge_ranks", bp->merge_rank, bp->n_merges);
    put_steps(&b, "normalizer", bp->norm, bp->n_norm);
    put_steps(&b, "pre_tokenizer", bp->pre, bp->n_pre);
    putf(&b, ",\"byte_fallback\":%s,\"ignore_merges\":%s", tf(bp->byte_fallback), tf(bp->ignore_merges));
    putf(&b, ",\"fuse_unk\":%s,\"unk\":%d", tf(bp->fuse_unk), bp->unk_id);
    putf(&b, ",\"decoder\":{\"byte_level\":%s,\"byte_fallback\":%s", tf(bp->dec_byte_level),
         tf(bp->dec_byte_fallback));
    putf(&b, ",\"strip\":%d,\"replace\":[", bp->dec_strip);
    for (int i = 0; i < bp->n_dec; i++) {
        put(&b, i ? ",[" : "[", i ? 2 : 1);
        put_cstr(&b, bp->dec_from[i]);
        put(&b, ",", 1);
        put_cstr(&b, bp->dec_to[i]);
        put(&b, "]", 1);
    }
    put(&b, "]}", 2);
    put_ints(&b, "prefix", bp->prefix, bp->n_prefix);
    put_ints(&b, "suffix", bp->suffix, bp->n_suffix);
    putf(&b, ",\"bos\":%d,\"eos\":%d,\"add_bos\":%s", t->bos_id, t->eos_id, tf(t->add_bos));
    put_ints(&b, "eog", t->eog_ids, t->n_eog);
    put(&b, "}", 1);
    if (b.bad) {
        free(b.p);
        return mi_set_error(err, "tokenizer: out of memory writing its stored form"), NULL;
    }
    *len = b.n;
    return b.p;
}

/* ----------------------------------------------------------------- read */

typedef struct {
    mi_tokenizer *t;
    const char *name;
    char *err;
} reader;

static int bad(reader *r, const char *what)
{
    return mi_set_error(r->err, "%s: stored tokenizer: %s", r->name, what);
}

/* An integer in lo..hi, or the error. */
static int get_int(const cJSON *v, int lo, int hi, int *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi || v->valuedouble != (int)v->valuedouble)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

static int get_flag(const cJSON *v, int *out)
{
    if (!cJSON_IsBool(v))
        return -1;
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Array of ints in lo..hi: its items into out (room cap); *n their count. */
static int get_ints(const cJSON *a, int lo, int hi, int *out, int cap, int *n)
{
    const cJSON *it;
    *n = 0;
    if (!cJSON_IsArray(a))
        return -1;
    cJSON_ArrayForEach(it, a) if (*n == cap || get_int(it, lo, hi, &out[(*n)++])) return -1;
    return 0;
}

static int read_op(reader *r, const cJSON *s, int pre)
{
    static const char *const names[] = {"prepend", "replace", "unicode", "strip",
                                        "split", "byte_level", "metaspace", "digits"};
    const int n = cJSON_GetArraySize(s);
    const cJSON *v[5] = {0};
    for (int i = 0; i < n && i < 5; i++)
        v[i] = cJSON_GetArrayItem(s, i);
    int kind = -1, a = 0, b = 0, flag = 0;
    for (int k = 0; k < 8 && cJSON_IsString(v[0]); k++)
        if (!strcmp(v[0]->valuestring, names[k]))
            kind = k;
    const char *s1 = cJSON_IsString(v[1]) ? v[1]->valuestring : NULL;
    const char *s2 = cJSON_IsString(v[2]) ? v[2]->valuestring : NULL;
    static const int want[] = {2, 4, 2, 3, 5, 3, 4, 2};
    int ok = cJSON_IsArray(s) && kind >= 0 && n == want[kind] && (kind >= TOK_P_SPLIT) == pre;
    if (ok && kind == TOK_N_PREPEND)
        ok = s1 != NULL;
    else if (ok && kind == TOK_N_REPLACE)
        ok = s1 && *s1 && s2 && !get_flag(v[3], &flag);
    else if (ok && kind == TOK_N_UNICODE) {
        ok = 0;
        for (int f = 0; f < 4; f++)
            if (s1 && !strcmp(s1, unicode_forms[f])) {
                a = f;
                ok = 1;
            }
    } else if (ok && (kind == TOK_N_STRIP || kind == TOK_P_BYTELEVEL))
        ok = !get_flag(v[1], &a) && !get_flag(v[2], &b);
    else if (ok && kind == TOK_P_SPLIT)
        ok = s1 && *s1 && !get_flag(v[2], &flag) && !get_int(v[3], 0, TOK_SPLIT_CONTIGUOUS, &a) && !get_flag(v[4], &b);
    else if (ok && kind == TOK_P_METASPACE)
        ok = s1 && *s1 && !get_int(v[2], 0, TOK_PREPEND_NEVER, &a) && !get_flag(v[3], &b);
    else if (ok)
        ok = !get_flag(v[1], &a);
    if (!ok)
        return bad(r, pre ? "a pre_tokenizer step is malformed" : "a normalizer step is malformed");
    if (kind == TOK_P_SPLIT || kind == TOK_P_METASPACE)
        s2 = NULL;
    char why[MI_ERRLEN];
    if (!tok_add_op(r->t, pre, kind, kind == TOK_N_STRIP || kind == TOK_N_UNICODE ? NULL : s1, s2, flag, a, b, why))
        return bad(r, why);
    return 0;
}

static int read_steps(reader *r, const cJSON *root, const char *key, int pre)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, key), *it;
    if (!cJSON_IsArray(arr))
        return bad(r, pre ? "no pre_tokenizer list" : "no normalizer list");
    cJSON_ArrayForEach(it, arr) if (read_op(r, it, pre)) return -1;
    return 0;
}

static int read_decoder(reader *r, const cJSON *d)
{
    static const char *const keys[] = {"byte_level", "byte_fallback", "strip", "replace", NULL};
    mi_tok_bpe *bp = r->t->bpe;
    const cJSON *rep = cJSON_GetObjectItemCaseSensitive(d, "replace"), *it;
    if (!cJSON_IsObject(d) || mi_json_check_keys(d, keys, r->name, "decoder", r->err))
        return cJSON_IsObject(d) ? -1 : bad(r, "no decoder object");
    if (get_flag(cJSON_GetObjectItemCaseSensitive(d, "byte_level"), &bp->dec_byte_level) ||
        get_flag(cJSON_GetObjectItemCaseSensitive(d, "byte_fallback"), &bp->dec_byte_fallback) ||
        get_int(cJSON_GetObjectItemCaseSensitive(d, "strip"), 0, 8, &bp->dec_strip) || !cJSON_IsArray(rep))
        return bad(r, "the decoder's byte_level, byte_fallback, strip or replace is malformed");
    cJSON_ArrayForEach(it, rep)
    {
        const cJSON *from = cJSON_GetArrayItem(it, 0), *to = cJSON_GetArrayItem(it, 1);
        if (cJSON_GetArraySize(it) != 2 || !cJSON_IsString(from) || !cJSON_IsString(to))
            return bad(r, "a decoder replacement is not [from, to]");
        char why[MI_ERRLEN];
        if (tok_add_dec_replace(r->t, from->valuestring, to->valuestring, why))
            return bad(r, why);
    }
    return 0;
}

static int read_vocab(reader *r, const cJSON *root)
{
    mi_tokenizer *t = r->t;
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *it;
    if (!cJSON_IsArray(tokens) || tok_alloc(t, cJSON_GetArraySize(tokens), r->name, r->err))
        return cJSON_IsArray(tokens) ? -1 : bad(r, "no tokens list");
    int id = 0;
    cJSON_ArrayForEach(it, tokens)
    {
        if (!cJSON_IsString(it))
            return bad(r, "a token is not a string");
        if (tok_set_piece(t, id++, it->valuestring, strlen(it->valuestring), r->name, r->err))
            return -1;
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "flags"))
    {
        int f[2], n;
        if (get_ints(it, 0, t->vocab_size - 1, f, 2, &n) || n != 2 || f[1] < 1 || f[1] > 63)
            return bad(r, "a flags entry is not [id, bits 1..63]");
        t->bpe->flags[f[0]] = (unsigned char)f[1];
    }
    return cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "flags")) ? 0 : bad(r, "no flags list");
}

static int read_merges(reader *r, const cJSON *root)
{
    mi_tok_bpe *bp = r->t->bpe;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "merges"),
                *rk = cJSON_GetObjectItemCaseSensitive(root, "merge_ranks");
    const int n = cJSON_GetArraySize(m);
    if (!cJSON_IsArray(m) || n % 2 || (rk && cJSON_GetArraySize(rk) != n / 2))
        return bad(r, "merges is not a list of id pairs (with as many merge_ranks)");
    bp->n_merges = n / 2;
    bp->merges = malloc(((size_t)n + 2) * sizeof *bp->merges);
    bp->merge_rank = rk ? malloc(((size_t)n / 2 + 1) * sizeof *bp->merge_rank) : NULL;
    int got;
    if (!bp->merges || (rk && !bp->merge_rank))
        return bad(r, "out of memory");
    if (get_ints(m, 0, r->t->vocab_size - 1, bp->merges, n, &got) ||
        (rk && get_ints(rk, 0, 1 << 30, bp->merge_rank, n / 2, &got)))
        return bad(r, "a merge id or rank is out of range");
    return 0;
}

static int read_root(reader *r, const cJSON *root)
{
    static const char *const keys[] = {"format", "kind", "tokens", "flags", "merges", "merge_ranks", "normalizer",
                                       "pre_tokenizer", "byte_fallback", "ignore_merges", "fuse_unk", "unk",
                                       "decoder", "prefix", "suffix", "bos", "eos", "add_bos", "eog", NULL};
    mi_tokenizer *t = r->t;
    const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "format"));
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "kind"));
    if (!cJSON_IsObject(root) || !fmt || strcmp(fmt, FORMAT) != 0)
        return bad(r, "not a '" FORMAT "' object");
    if (mi_json_check_keys(root, keys, r->name, "", r->err) || read_vocab(r, root) || read_merges(r, root) ||
        read_steps(r, root, "normalizer", 0) || read_steps(r, root, "pre_tokenizer", 1) ||
        read_decoder(r, cJSON_GetObjectItemCaseSensitive(root, "decoder")))
        return -1;
    mi_tok_bpe *bp = t->bpe;
    const int V = t->vocab_size;
#define ITEM(k) cJSON_GetObjectItemCaseSensitive(root, k)
    if (get_flag(ITEM("byte_fallback"), &bp->byte_fallback) || get_flag(ITEM("ignore_merges"), &bp->ignore_merges) ||
        get_flag(ITEM("fuse_unk"), &bp->fuse_unk) || get_int(ITEM("unk"), -1, V - 1, &bp->unk_id) ||
        get_ints(ITEM("prefix"), 0, V - 1, bp->prefix, TOK_MAX_TEMPLATE, &bp->n_prefix) ||
        get_ints(ITEM("suffix"), 0, V - 1, bp->suffix, TOK_MAX_TEMPLATE, &bp->n_suffix) ||
        get_int(ITEM("bos"), -1, V - 1, &t->bos_id) || get_int(ITEM("eos"), -1, V - 1, &t->eos_id) ||
        get_flag(ITEM("add_bos"), &t->add_bos))
        return bad(r, "a setting (byte_fallback .. add_bos) is missing or out of range");
    const cJSON *eog = ITEM("eog");
#undef ITEM
    t->eog_ids = malloc(((size_t)cJSON_GetArraySize(eog) + 1) * sizeof *t->eog_ids);
    if (!t->eog_ids || get_ints(eog, 0, V - 1, t->eog_ids, cJSON_GetArraySize(eog), &t->n_eog))
        return bad(r, "eog is not a list of ids");
    if (tok_finalize(t, r->name, r->err))
        return -1;
    if (!kind || strcmp(kind, t->kind == MI_TOK_BYTE_BPE ? "byte_bpe" : "spm") != 0)
        return bad(r, "its kind disagrees with its pre_tokenizer (ByteLevel or not)");
    return 0;
}

int mi_tokenizer_deserialize(mi_tokenizer *t, const char *text, size_t len, const char *name, char *err)
{
    memset(t, 0, sizeof *t);
    reader r = {t, name ? name : "tokenizer", err};
    char *copy = tok_strndup(text, len);
    cJSON *root = copy ? mi_json_parse(copy, len, r.name, err) : NULL;
    free(copy);
    if (!copy)
        return bad(&r, "out of memory");
    const int rc = root ? read_root(&r, root) : -1;
    cJSON_Delete(root);
    if (rc)
        mi_tokenizer_free(t);
    return rc;
}
