/* Hugging Face tokenizer.json (with tokenizer_config.json) -> the BPE kinds'
 * description (tokenizer_impl.h). The components the families use are read
 * (normalizer, pre_tokenizer, decoder and post_processor Sequences of
 * Prepend, Replace, NFC.., Strip, Split, ByteLevel, Metaspace, Digits,
 * ByteFallback, Fuse, TemplateProcessing; model BPE); any other component
 * type is one error naming it. Keys the reader does not need are left
 * alone: the format grows keys from version to version. */
#include "tokenizer_impl.h"

#include "../util/json_keys.h"
#include "meshinfer/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tokenizer.json of Gemma 3 is 33 MB; ten times that is surely not one. */
#define MAX_JSON_BYTES ((size_t)512 << 20)

typedef struct {
    mi_tokenizer *t;
    const char *name;
    char *err;
    tok_strmap map; /* token string -> id, once the pieces are in */
} loader;

static int fail(loader *ld, const char *fmt, ...) MI_PRINTF(2, 3);
static int fail(loader *ld, const char *fmt, ...)
{
    char msg[MI_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mi_set_error(ld->err, "%s: %s", ld->name, msg);
}

static const char *type_of(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static int get_bool(const cJSON *o, const char *key, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static const char *get_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A Split/Replace pattern: {"String": s} or {"Regex": r}. */
static const char *pattern_of(const cJSON *o, int *is_regex)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const char *s = get_str(p, "String");
    *is_regex = s == NULL;
    return s ? s : get_str(p, "Regex");
}

static int lookup(loader *ld, const char *s)
{
    return s ? tok_strmap_find(&ld->map, s, (int)strlen(s)) : -1;
}

/* A step of the description; its error (too many steps, not UTF-8) named after the file. */
static int add_op(loader *ld, int pre, int kind, const char *s1, const char *s2, int flag, int a, int b)
{
    char why[MI_ERRLEN];
    return tok_add_op(ld->t, pre, kind, s1, s2, flag, a, b, why) ? 0 : fail(ld, "%s", why);
}

static int add_dec_replace(loader *ld, const char *from, const char *to)
{
    char why[MI_ERRLEN];
    return tok_add_dec_replace(ld->t, from, to, why) ? fail(ld, "%s", why) : 0;
}

/* ------------------------------------------------------------ components */

static int read_normalizer(loader *ld, const cJSON *o, int depth)
{
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return fail(ld, "normalizer without a type");
    if (!strcmp(ty, "Sequence") && depth < 4) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "normalizers"), *it;
        if (!cJSON_IsArray(arr))
            return fail(ld, "normalizer Sequence has no 'normalizers' list");
        cJSON_ArrayForEach(it, arr) if (read_normalizer(ld, it, depth + 1)) return -1;
        return 0;
    }
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int f = 0; f < 4; f++)
        if (!strcmp(ty, forms[f]))
            return add_op(ld, 0, TOK_N_UNICODE, NULL, NULL, 0, f, 0);
    if (!strcmp(ty, "Prepend")) {
        const char *s = get_str(o, "prepend");
        if (!s)
            return fail(ld, "normalizer Prepend has no 'prepend' string");
        return add_op(ld, 0, TOK_N_PREPEND, s, NULL, 0, 0, 0);
    }
    if (!strcmp(ty, "Replace")) {
        int rx;
        const char *pat = pattern_of(o, &rx), *to = get_str(o, "content");
        if (!pat || !*pat || !to)
            return fail(ld, "normalizer Replace needs a non-empty pattern and a content");
        return add_op(ld, 0, TOK_N_REPLACE, pat, to, rx, 0, 0);
    }
    if (!strcmp(ty, "Strip"))
        return add_op(ld, 0, TOK_N_STRIP, NULL, NULL, 0, get_bool(o, "strip_left", 1), get_bool(o, "strip_right", 1));
    return fail(ld, "normalizer type '%s' is not supported", ty);
}

static int read_pre(loader *ld, const cJSON *o, int depth)
{
    static const char *const behaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return fail(ld, "pre_tokenizer without a type");
    if (!strcmp(ty, "Sequence") && depth < 4) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"), *it;
        if (!cJSON_IsArray(arr))
            return fail(ld, "pre_tokenizer Sequence has no 'pretokenizers' list");
        cJSON_ArrayForEach(it, arr) if (read_pre(ld, it, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(ty, "Split")) {
        int rx, behavior = -1;
        const char *pat = pattern_of(o, &rx), *bs = get_str(o, "behavior");
        for (int b = 0; b < 5 && bs; b++)
            if (!strcmp(bs, behaviors[b]))
                behavior = b;
        if (!pat || !*pat || behavior < 0)
            return fail(ld, "pre_tokenizer Split needs a non-empty pattern and a known behavior (not '%s')",
                        bs ? bs : "");
        return add_op(ld, 1, TOK_P_SPLIT, pat, NULL, rx, behavior, get_bool(o, "invert", 0));
    }
    if (!strcmp(ty, "ByteLevel"))
        return add_op(ld, 1, TOK_P_BYTELEVEL, NULL, NULL, 0, get_bool(o, "add_prefix_space", 1),
                      get_bool(o, "use_regex", 1));
    if (!strcmp(ty, "Digits"))
        return add_op(ld, 1, TOK_P_DIGITS, NULL, NULL, 0, get_bool(o, "individual_digits", 0), 0);
    if (!strcmp(ty, "Metaspace")) {
        const char *rep = get_str(o, "replacement"), *scheme = get_str(o, "prepend_scheme");
        int prepend = get_bool(o, "add_prefix_space", 1) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        if (scheme)
            prepend = !strcmp(scheme, "first") ? TOK_PREPEND_FIRST : !strcmp(scheme, "never") ? TOK_PREPEND_NEVER
                                                                                                : TOK_PREPEND_ALWAYS;
        if (!rep || !*rep)
            return fail(ld, "pre_tokenizer Metaspace has no replacement");
        return add_op(ld, 1, TOK_P_METASPACE, rep, NULL, 0, prepend, get_bool(o, "split", 1));
    }
    return fail(ld, "pre_tokenizer type '%s' is not supported", ty);
}

static int read_decoder(loader *ld, const cJSON *o, int depth)
{
    mi_tok_bpe *bp = ld->t->bpe;
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return fail(ld, "decoder without a type");
    if (!strcmp(ty, "Sequence") && depth < 4) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "decoders"), *it;
        if (!cJSON_IsArray(arr))
            return fail(ld, "decoder Sequence has no 'decoders' list");
        cJSON_ArrayForEach(it, arr) if (read_decoder(ld, it, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(ty, "Replace")) {
        int rx;
        const char *pat = pattern_of(o, &rx), *to = get_str(o, "content");
        if (!pat || rx || !*pat || !to)
            return fail(ld, "decoder Replace needs a non-empty String pattern and a content");
        return add_dec_replace(ld, pat, to);
    }
    if (!strcmp(ty, "ByteFallback")) {
        bp->dec_byte_fallback = 1;
        return 0;
    }
    if (!strcmp(ty, "Fuse"))
        return 0; /* joining the pieces: what printing them one by one does */
    if (!strcmp(ty, "ByteLevel")) {
        bp->dec_byte_level = 1;
        return 0;
    }
    if (!strcmp(ty, "Strip")) {
        /* only the start: a token printed as it comes cannot know the end */
        const char *c = get_str(o, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(o, "start");
        if (!c || strcmp(c, " ") || !cJSON_IsNumber(start) || start->valuedouble < 0 || start->valuedouble > 8)
            return fail(ld, "decoder Strip is supported for content ' ' and start 0..8 only");
        bp->dec_strip = (int)start->valuedouble;
        return 0;
    }
    if (!strcmp(ty, "Metaspace")) {
        const char *rep = get_str(o, "replacement"), *scheme = get_str(o, "prepend_scheme");
        if (!rep || !*rep)
            return fail(ld, "decoder Metaspace has no replacement");
        bp->dec_strip = scheme ? strcmp(scheme, "never") != 0 : get_bool(o, "add_prefix_space", 1);
        return add_dec_replace(ld, rep, " ");
    }
    return fail(ld, "decoder type '%s' is not supported", ty);
}

/* TemplateProcessing's "single": the special tokens before and after A. */
static int read_template(loader *ld, const cJSON *o)
{
    mi_tok_bpe *bp = ld->t->bpe;
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single"),
                *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens"), *it;
    if (!cJSON_IsArray(single))
        return fail(ld, "post_processor TemplateProcessing has no 'single' list");
    int after = 0;
    cJSON_ArrayForEach(it, single)
    {
        if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
            after = 1;
            continue;
        }
        const char *name = get_str(cJSON_GetObjectItemCaseSensitive(it, "SpecialToken"), "id");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(specials, name ? name : ""),
                                                           "ids"),
                    *id;
        if (!name || !cJSON_IsArray(ids))
            return fail(ld, "post_processor template token '%s' is not in its special_tokens", name);
        cJSON_ArrayForEach(id, ids)
        {
            int *n = after ? &bp->n_suffix : &bp->n_prefix;
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= TOK_MAX_VOCAB ||
                *n == TOK_MAX_TEMPLATE)
                return fail(ld, "post_processor template token '%s' has a bad id or too many ids", name);
            (after ? bp->suffix : bp->prefix)[(*n)++] = (int)id->valuedouble;
        }
    }
    return 0;
}

static int read_post(loader *ld, const cJSON *o, int depth)
{
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return fail(ld, "post_processor without a type");
    if (!strcmp(ty, "Sequence") && depth < 4) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "processors"), *it;
        if (!cJSON_IsArray(arr))
            return fail(ld, "post_processor Sequence has no 'processors' list");
        cJSON_ArrayForEach(it, arr) if (read_post(ld, it, depth + 1)) return -1;
        return 0;
    }
    if (!strcmp(ty, "TemplateProcessing"))
        return read_template(ld, o);
    if (!strcmp(ty, "ByteLevel"))
        return 0; /* offsets only */
    return fail(ld, "post_processor type '%s' is not supported", ty);
}

/* ------------------------------------------------------------ the model */

/* The vocabulary's ids and the added tokens' run 0..V-1: V is the largest + 1. */
static int count_ids(loader *ld, const cJSON *vocab, const cJSON *added, int *V)
{
    const cJSON *it;
    long max = -1, n = 0;
    cJSON_ArrayForEach(it, vocab)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= TOK_MAX_VOCAB ||
            it->valuedouble != (double)(long)it->valuedouble)
            return fail(ld, "vocab entry '%.60s' has an id that is not an integer in 0..2^24-1", it->string);
        max = (long)it->valuedouble > max ? (long)it->valuedouble : max;
        n++;
    }
    cJSON_ArrayForEach(it, added)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= TOK_MAX_VOCAB ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "content")))
            return fail(ld, "an added token has no content or no id in 0..2^24-1");
        max = (long)id->valuedouble > max ? (long)id->valuedouble : max;
        n++;
    }
    if (max < 0)
        return fail(ld, "model.vocab is empty");
    if (max >= n)
        return fail(ld, "vocab id %ld out of range 0..%ld (ids run from 0 without gaps)", max, n - 1);
    *V = (int)max + 1;
    return 0;
}

static int read_added(loader *ld, const cJSON *added)
{
    mi_tokenizer *t = ld->t;
    const cJSON *it;
    cJSON_ArrayForEach(it, added)
    {
        const int id = (int)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *s = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        /* the added token's content is the id's text (as Hugging Face and
         * transformers.js take it, also over a differing vocab entry) */
        if (t->pieces[id] && strcmp(t->pieces[id], s) != 0) {
            free(t->pieces[id]);
            t->pieces[id] = NULL;
        }
        if (!t->pieces[id] && tok_set_piece(t, id, s, strlen(s), ld->name, ld->err))
            return -1;
        const int special = get_bool(it, "special", 0);
        t->bpe->flags[id] = (unsigned char)(TOKF_MATCH | (special ? TOKF_SPECIAL : TOKF_ADDED) |
                                            (get_bool(it, "lstrip", 0) ? TOKF_LSTRIP : 0) |
                                            (get_bool(it, "rstrip", 0) ? TOKF_RSTRIP : 0) |
                                            (get_bool(it, "normalized", !special) ? TOKF_NORMALIZED : 0));
    }
    return 0;
}

/* One merge: "left right" (first space) or ["left", "right"]. */
static int read_merge(loader *ld, const cJSON *m, int k)
{
    char buf[2 * TOK_MAX_PIECE + 2];
    const char *l = NULL, *r = NULL;
    if (cJSON_IsString(m) && strlen(m->valuestring) < sizeof buf) {
        strcpy(buf, m->valuestring);
        char *sp = strchr(buf, ' ');
        if (sp) {
            *sp = '\0';
            l = buf;
            r = sp + 1;
        }
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
        l = m->child->valuestring;
        r = m->child->next->valuestring;
    }
    if (!l)
        return fail(ld, "merge %d is neither \"left right\" nor [left, right]", k);
    const int a = lookup(ld, l), b = lookup(ld, r);
    if (a < 0 || b < 0)
        return fail(ld, "merge %d names token '%.60s', which is not in the vocabulary", k, a < 0 ? l : r);
    ld->t->bpe->merges[2 * k] = a;
    ld->t->bpe->merges[2 * k + 1] = b;
    return 0;
}

static int read_model(loader *ld, const cJSON *model, const cJSON *added)
{
    mi_tokenizer *t = ld->t;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *it;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const char *ty = type_of(model);
    if (!cJSON_IsObject(model) || !ty)
        return fail(ld, "no model object with a type");
    if (strcmp(ty, "BPE") != 0)
        return fail(ld, "model type '%s' is not supported (only BPE)", ty);
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || (added && !cJSON_IsArray(added)))
        return fail(ld, "model BPE needs a vocab object and a merges list");
    for (int k = 0; k < 2; k++) {
        const char *s = get_str(model, k ? "end_of_word_suffix" : "continuing_subword_prefix");
        if (s && *s)
            return fail(ld, "model BPE with %s '%s' is not supported", k ? "end_of_word_suffix" : "continuing_subword_prefix", s);
    }
    int V = 0;
    if (count_ids(ld, vocab, added, &V) || tok_alloc(t, V, ld->name, ld->err))
        return -1;
    cJSON_ArrayForEach(it, vocab) if (tok_set_piece(t, (int)it->valuedouble, it->string, strlen(it->string),
                                                    ld->name, ld->err)) return -1;
    if (read_added(ld, added))
        return -1;
    if (tok_strmap_build(&ld->map, t->pieces, t->piece_len, V))
        return fail(ld, "out of memory");
    mi_tok_bpe *bp = t->bpe;
    bp->n_merges = cJSON_GetArraySize(merges);
    bp->merges = malloc(((size_t)bp->n_merges + 1) * 2 * sizeof *bp->merges);
    if (!bp->merges)
        return fail(ld, "out of memory");
    int k = 0;
    cJSON_ArrayForEach(it, merges) if (read_merge(ld, it, k++)) return -1;
    bp->byte_fallback = get_bool(model, "byte_fallback", 0);
    bp->ignore_merges = get_bool(model, "ignore_merges", 0);
    bp->fuse_unk = get_bool(model, "fuse_unk", 0);
    const char *unk = get_str(model, "unk_token");
    bp->unk_id = lookup(ld, unk);
    if (unk && bp->unk_id < 0)
        return fail(ld, "model unk_token '%s' is not in the vocabulary", unk);
    return 0;
}

/* ------------------------------------------------------------ top level */

/* bos_token / eos_token of tokenizer_config.json: a string or {"content": s}. */
static const char *config_token(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsString(v) ? v->valuestring : get_str(v, "content");
}

/* Put id in front of (or at the end of) a template list, or take it out. */
static void template_set(int *list, int *n, int id, int want, int at_end)
{
    int has = 0;
    for (int i = 0; i < *n; i++)
        has |= list[i] == id;
    if (want && !has && *n < TOK_MAX_TEMPLATE) {
        if (!at_end)
            memmove(list + 1, list, (size_t)*n * sizeof *list);
        list[at_end ? *n : 0] = id;
        (*n)++;
    } else if (!want && has) {
        int k = 0;
        for (int i = 0; i < *n; i++)
            if (list[i] != id)
                list[k++] = list[i];
        *n = k;
    }
}

static int read_specials(loader *ld, const cJSON *cfg)
{
    mi_tokenizer *t = ld->t;
    mi_tok_bpe *bp = t->bpe;
    const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
    t->bos_id = bos ? lookup(ld, bos) : bp->n_prefix > 0 ? bp->prefix[0] : -1;
    t->eos_id = eos ? lookup(ld, eos) : bp->n_suffix > 0 ? bp->suffix[bp->n_suffix - 1] : -1;
    if ((bos && t->bos_id < 0) || (eos && t->eos_id < 0))
        return fail(ld, "tokenizer_config's bos_token or eos_token ('%s') is not in the vocabulary",
                    bos && t->bos_id < 0 ? bos : eos);
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
    if (cJSON_IsBool(ab) && t->bos_id >= 0)
        template_set(bp->prefix, &bp->n_prefix, t->bos_id, cJSON_IsTrue(ab), 0);
    if (cJSON_IsBool(ae) && t->eos_id >= 0)
        template_set(bp->suffix, &bp->n_suffix, t->eos_id, cJSON_IsTrue(ae), 1);
    for (int i = 0; i < bp->n_prefix; i++)
        t->add_bos |= bp->prefix[i] == t->bos_id && t->bos_id >= 0;
    return 0;
}

static int load_tree(loader *ld, const cJSON *root, const cJSON *cfg)
{
    static const char *const parts[] = {"normalizer", "pre_tokenizer", "decoder", "post_processor"};
    if (!cJSON_IsObject(root))
        return fail(ld, "not a tokenizer.json (no top-level object)");
    if (read_model(ld, cJSON_GetObjectItemCaseSensitive(root, "model"),
                   cJSON_GetObjectItemCaseSensitive(root, "added_tokens")))
        return -1;
    for (int p = 0; p < 4; p++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, parts[p]);
        if (!o || cJSON_IsNull(o))
            continue;
        const int rc = p == 0 ? read_normalizer(ld, o, 0) : p == 1 ? read_pre(ld, o, 0)
                                                       : p == 2    ? read_decoder(ld, o, 0)
                                                                   : read_post(ld, o, 0);
        if (rc)
            return -1;
    }
    if (read_specials(ld, cfg) || tok_finalize(ld->t, ld->name, ld->err))
        return -1;
    return tok_set_eog(ld->t, NULL, 0, ld->err);
}

int mi_tokenizer_load_json_mem(mi_tokenizer *t, const char *json, size_t json_len, const char *config,
                               size_t config_len, const char *name, char *err)
{
    memset(t, 0, sizeof *t);
    loader ld = {t, name ? name : "tokenizer.json", err, {0}};
    char *text = tok_strndup(json, json_len);
    cJSON *root = text ? mi_json_parse(text, json_len, ld.name, err) : NULL, *cfg = NULL;
    int rc = root ? 0 : text ? -1 : fail(&ld, "out of memory");
    free(text);
    if (rc == 0 && config) {
        char what[300];
        snprintf(what, sizeof what, "%s's tokenizer_config", ld.name);
        text = tok_strndup(config, config_len);
        cfg = text ? mi_json_parse(text, config_len, what, err) : NULL;
        rc = cfg ? 0 : text ? -1 : fail(&ld, "out of memory");
        free(text);
    }
    if (rc == 0)
        rc = load_tree(&ld, root, cfg);
    tok_strmap_free(&ld.map);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (rc)
        mi_tokenizer_free(t);
    return rc;
}

int mi_tokenizer_load_json(mi_tokenizer *t, const char *json_path, const char *config_path, char *err)
{
    memset(t, 0, sizeof *t);
    size_t n = 0, cn = 0;
    char *json = mi_read_text_file(json_path, "tokenizer.json", MAX_JSON_BYTES, &n, err);
    if (!json)
        return -1;
    char *cfg = config_path ? mi_read_text_file(config_path, "tokenizer_config.json", MAX_JSON_BYTES, &cn, err) : NULL;
    int rc = -1;
    if (!config_path || cfg)
        rc = mi_tokenizer_load_json_mem(t, json, n, cfg, cn, json_path, err);
    free(json);
    free(cfg);
    return rc;
}
