/* GGUF tokenizer metadata (mi_tok_spec) -> the BPE kinds' description.
 *
 * "llama" (SentencePiece: Llama 2, TinyLlama, Gemma 3) stores scores, not
 * merges: a pair of pieces merges when their concatenation is a normal
 * token, highest score of that token first and, on equal scores, the
 * leftmost pair, as SentencePiece and llama.cpp do; the pairs are turned
 * into merges with equal ranks for equal scores. "gpt2" (byte-level) stores
 * the merges, and tokenizer.ggml.pre names the family's pre-tokenizer. */
#include "tokenizer_impl.h"

#include "meshinfer/common.h"

#include <stdlib.h>
#include <string.h>

enum { GGUF_NORMAL = 1, GGUF_UNKNOWN, GGUF_CONTROL, GGUF_USER_DEFINED, GGUF_UNUSED, GGUF_BYTE };

#define WHAT "GGUF tokenizer"

/* A step of the description; its error named after the source. */
static int add_op(mi_tokenizer *t, int pre, int kind, const char *s1, const char *s2, int flag, int a, int b,
                  char *err)
{
    char why[MI_ERRLEN];
    return tok_add_op(t, pre, kind, s1, s2, flag, a, b, why) ? 0 : mi_set_error(err, WHAT ": %s", why);
}

typedef struct {
    float score;
    int left, right;
} score_merge;

static int cmp_score_merge(const void *pa, const void *pb)
{
    const score_merge *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->left != b->left ? (a->left > b->left) - (a->left < b->left) : (a->right > b->right) - (a->right < b->right);
}

/* Every split of a normal token into two normal tokens, ranked by the
 * token's score. */
static int merges_from_scores(mi_tokenizer *t, const mi_tok_spec *sp, const int *type, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    tok_strmap map;
    if (tok_strmap_build(&map, t->pieces, t->piece_len, t->vocab_size))
        return mi_set_error(err, WHAT ": out of memory");
    size_t n = 0, cap = (size_t)t->vocab_size * 2 + 16;
    score_merge *m = malloc(cap * sizeof *m);
    for (int v = 0; m && v < t->vocab_size; v++) {
        const char *s = t->pieces[v];
        const int len = t->piece_len[v];
        if (type[v] != GGUF_NORMAL)
            continue;
        for (int k = mi_utf8_len((const unsigned char *)s, (size_t)len); k > 0 && k < len;) {
            const int a = tok_strmap_find(&map, s, k), b = tok_strmap_find(&map, s + k, len - k);
            if (a >= 0 && b >= 0 && type[a] == GGUF_NORMAL && type[b] == GGUF_NORMAL) {
                if (n == cap) {
                    score_merge *nm = realloc(m, cap * 2 * sizeof *m);
                    if (!nm) {
                        free(m);
                        m = NULL;
                        break;
                    }
                    m = nm;
                    cap *= 2;
                }
                m[n++] = (score_merge){sp->scores[v], a, b};
            }
            const int step = mi_utf8_len((const unsigned char *)s + k, (size_t)(len - k));
            k += step > 0 ? step : 1;
        }
    }
    tok_strmap_free(&map);
    if (!m || n > (size_t)INT32_MAX / 2) {
        free(m);
        return mi_set_error(err, WHAT ": out of memory for the merges");
    }
    qsort(m, n, sizeof *m, cmp_score_merge);
    bp->n_merges = (int)n;
    bp->merges = malloc((n + 1) * 2 * sizeof *bp->merges);
    bp->merge_rank = malloc((n + 1) * sizeof *bp->merge_rank);
    if (!bp->merges || !bp->merge_rank) {
        free(m);
        return mi_set_error(err, WHAT ": out of memory for the merges");
    }
    int rank = 0;
    for (size_t i = 0; i < n; i++) {
        rank += i > 0 && m[i].score != m[i - 1].score;
        bp->merges[2 * i] = m[i].left;
        bp->merges[2 * i + 1] = m[i].right;
        bp->merge_rank[i] = rank;
    }
    free(m);
    return 0;
}

/* "left right": the split at a space whose two sides are tokens. */
static int merges_from_strings(mi_tokenizer *t, const mi_tok_spec *sp, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    tok_strmap map;
    bp->n_merges = sp->n_merges;
    bp->merges = malloc(((size_t)sp->n_merges + 1) * 2 * sizeof *bp->merges);
    if (!bp->merges || tok_strmap_build(&map, t->pieces, t->piece_len, t->vocab_size))
        return mi_set_error(err, WHAT ": out of memory for the merges");
    int rc = 0;
    for (int k = 0; k < sp->n_merges && rc == 0; k++) {
        const char *s = sp->merges[k];
        const int len = s ? sp->merge_len[k] : 0;
        int found = 0;
        for (int i = 1; i + 1 < len && !found; i++) {
            if (s[i] != ' ')
                continue;
            const int a = tok_strmap_find(&map, s, i), b = tok_strmap_find(&map, s + i + 1, len - i - 1);
            if (a >= 0 && b >= 0) {
                bp->merges[2 * k] = a;
                bp->merges[2 * k + 1] = b;
                found = 1;
            }
        }
        if (!found)
            rc = mi_set_error(err, WHAT ": merge %d ('%.*s') is not two tokens of the vocabulary joined by a space", k,
                              len > 80 ? 80 : len, s ? s : "");
    }
    tok_strmap_free(&map);
    return rc;
}

static int set_pieces(mi_tokenizer *t, const mi_tok_spec *sp, int *type, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    for (int i = 0; i < sp->n_tokens; i++) {
        if (!sp->tokens[i] || sp->token_len[i] < 0)
            return mi_set_error(err, WHAT ": token %d has no text", i);
        if (tok_set_piece(t, i, sp->tokens[i], (size_t)sp->token_len[i], WHAT, err))
            return -1;
        type[i] = sp->token_type ? sp->token_type[i] : GGUF_NORMAL;
        static const unsigned char flags[] = {0, 0, TOKF_SPECIAL, TOKF_SPECIAL | TOKF_MATCH, TOKF_ADDED | TOKF_MATCH,
                                              TOKF_SPECIAL, 0};
        if (type[i] < GGUF_NORMAL || type[i] > GGUF_BYTE)
            return mi_set_error(err, WHAT ": token %d has type %d (must be 1..6)", i, type[i]);
        bp->flags[i] = flags[type[i]];
        if (type[i] == GGUF_UNKNOWN && bp->unk_id < 0)
            bp->unk_id = i;
    }
    if (sp->unk_id >= 0)
        bp->unk_id = sp->unk_id;
    return 0;
}

/* SentencePiece: "▁" for space (with a leading one unless add_space_prefix
 * is 0: Gemma), merges by score, byte fallback, "▁" back to space. */
static int init_llama(mi_tokenizer *t, const mi_tok_spec *sp, const int *type, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    const char *meta = "\xE2\x96\x81";
    if (!sp->scores)
        return mi_set_error(err, WHAT ": model 'llama' needs tokenizer.ggml.scores");
    const int prefix = sp->add_space_prefix != 0;
    if ((prefix && add_op(t, 0, TOK_N_PREPEND, meta, NULL, 0, 0, 0, err)) ||
        add_op(t, 0, TOK_N_REPLACE, " ", meta, 0, 0, 0, err) || tok_add_dec_replace(t, meta, " ", err))
        return -1;
    bp->byte_fallback = bp->dec_byte_fallback = 1;
    bp->fuse_unk = 1;
    bp->dec_strip = prefix;
    return merges_from_scores(t, sp, type, err);
}

/* Byte-level: the family's pre-tokenizer (Qwen2 also normalizes to NFC, as
 * its tokenizer.json does), GPT-2's byte map both ways. */
static int init_gpt2(mi_tokenizer *t, const mi_tok_spec *sp, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    const char *pre = sp->pre ? sp->pre : "gpt-2";
    const char *re = NULL;
    if (!sp->merges || !sp->merge_len)
        return mi_set_error(err, WHAT ": model 'gpt2' needs tokenizer.ggml.merges");
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3")) {
        re = tok_re_llama3;
        bp->ignore_merges = 1;
    } else if (!strcmp(pre, "qwen2")) {
        re = tok_re_qwen2;
        if (add_op(t, 0, TOK_N_UNICODE, NULL, NULL, 0, 0, 0, err))
            return -1;
    } else if (strcmp(pre, "gpt-2") && strcmp(pre, "gpt2") && strcmp(pre, "default")) {
        return mi_set_error(err, WHAT ": pre-tokenizer '%.60s' is not supported (gpt-2, llama-bpe, qwen2)", pre);
    }
    if ((re && add_op(t, 1, TOK_P_SPLIT, re, NULL, 1, TOK_SPLIT_ISOLATED, 0, err)) ||
        add_op(t, 1, TOK_P_BYTELEVEL, NULL, NULL, 0, 0, re == NULL, err))
        return -1;
    bp->dec_byte_level = 1;
    return merges_from_strings(t, sp, err);
}

int mi_tokenizer_init_spec(mi_tokenizer *t, const mi_tok_spec *sp, char *err)
{
    memset(t, 0, sizeof *t);
    if (!sp || !sp->model || !sp->tokens || !sp->token_len || sp->n_tokens < 1)
        return mi_set_error(err, WHAT ": no model name or no tokens");
    const int llama = !strcmp(sp->model, "llama"), gpt2 = !strcmp(sp->model, "gpt2");
    if (!llama && !gpt2)
        return mi_set_error(err, WHAT ": model '%.60s' is not supported (llama, gpt2)", sp->model);
    if (tok_alloc(t, sp->n_tokens, WHAT, err))
        return -1;
    int *type = malloc((size_t)sp->n_tokens * sizeof *type);
    int rc = type ? set_pieces(t, sp, type, err) : mi_set_error(err, WHAT ": out of memory");
    if (rc == 0)
        rc = llama ? init_llama(t, sp, type, err) : init_gpt2(t, sp, err);
    free(type);
    if (rc == 0) {
        t->bos_id = sp->bos_id >= 0 ? sp->bos_id : -1;
        t->eos_id = sp->eos_id >= 0 ? sp->eos_id : -1;
        const int add_bos = sp->add_bos >= 0 ? sp->add_bos : llama || (sp->pre && !strncmp(sp->pre, "llama", 5));
        if (add_bos && t->bos_id >= 0) {
            t->bpe->prefix[t->bpe->n_prefix++] = t->bos_id;
            t->add_bos = 1;
        }
        rc = tok_finalize(t, WHAT, err);
    }
    if (rc == 0) {
        const int extra[] = {sp->eot_id};
        rc = tok_set_eog(t, extra, 1, err);
    }
    if (rc)
        mi_tokenizer_free(t);
    return rc;
}
