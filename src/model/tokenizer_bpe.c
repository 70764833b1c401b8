/* The BPE kinds' description and tables (tokenizer_impl.h): the loaders fill
 * a description (pieces, flags, merges, steps, decoder), tok_finalize checks
 * it and builds the hash tables, the added-token tries, the compiled regexes
 * and every id's decoded bytes; decoding one token is then a look-up. */
#include "tokenizer_impl.h"

#include "meshinfer/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The families' pre-tokenizer patterns, as their tokenizer.json files spell
 * them: GPT-2's (also the ByteLevel pre-tokenizer's use_regex), Llama 3's
 * (three-digit numbers) and Qwen2's (single digits). */
const char tok_re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char tok_re_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char tok_re_qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                            "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------- the description */

static char *dup_str(const char *s)
{
    if (!s)
        return NULL;
    const size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

int tok_alloc(mi_tokenizer *t, int vocab_size, const char *what, char *err)
{
    memset(t, 0, sizeof *t);
    t->bos_id = t->eos_id = -1;
    if (vocab_size < 1 || vocab_size > TOK_MAX_VOCAB)
        return mi_set_error(err, "%s: vocabulary of %d tokens (must be 1..%d)", what, vocab_size, TOK_MAX_VOCAB);
    t->vocab_size = vocab_size;
    t->kind = MI_TOK_SPM;
    t->pieces = calloc((size_t)vocab_size, sizeof *t->pieces);
    t->piece_len = calloc((size_t)vocab_size, sizeof *t->piece_len);
    t->bpe = calloc(1, sizeof *t->bpe);
    if (t->bpe)
        t->bpe->flags = calloc((size_t)vocab_size, 1);
    if (!t->pieces || !t->piece_len || !t->bpe || !t->bpe->flags) {
        tok_bpe_free(t);
        return mi_set_error(err, "%s: out of memory for a vocabulary of %d tokens", what, vocab_size);
    }
    t->bpe->unk_id = -1;
    return 0;
}

int tok_set_piece(mi_tokenizer *t, int id, const char *s, size_t len, const char *what, char *err)
{
    if (id < 0 || id >= t->vocab_size)
        return mi_set_error(err, "%s: token id %d out of range 0..%d", what, id, t->vocab_size - 1);
    if (t->pieces[id])
        return mi_set_error(err, "%s: token id %d is given twice", what, id);
    if (len == 0 || len > TOK_MAX_PIECE || memchr(s, 0, len))
        return mi_set_error(err, "%s: token %d is empty, longer than %d bytes or holds a NUL byte", what, id,
                            TOK_MAX_PIECE);
    char *p = malloc(len + 1);
    if (!p)
        return mi_set_error(err, "%s: out of memory", what);
    memcpy(p, s, len);
    p[len] = '\0';
    t->pieces[id] = p;
    t->piece_len[id] = (int)len;
    return 0;
}

tok_op *tok_add_op(mi_tokenizer *t, int pre, int kind, const char *s1, const char *s2, int flag, int a, int b,
                   char *err)
{
    mi_tok_bpe *bp = t->bpe;
    int *n = pre ? &bp->n_pre : &bp->n_norm;
    if (*n == TOK_MAX_OPS) {
        mi_set_error(err, "more than %d %s steps", TOK_MAX_OPS, pre ? "pre-tokenizer" : "normalizer");
        return NULL;
    }
    /* the regexes run on text these strings become part of, unchecked */
    if ((s1 && !tok_utf8_valid(s1, strlen(s1))) || (s2 && !tok_utf8_valid(s2, strlen(s2)))) {
        mi_set_error(err, "a %s step's string is not valid UTF-8", pre ? "pre-tokenizer" : "normalizer");
        return NULL;
    }
    tok_op *op = &(pre ? bp->pre : bp->norm)[(*n)++];
    *op = (tok_op){kind, dup_str(s1), dup_str(s2), flag, a, b, NULL};
    if ((s1 && !op->s1) || (s2 && !op->s2)) {
        mi_set_error(err, "out of memory");
        return NULL;
    }
    return op;
}

int tok_add_dec_replace(mi_tokenizer *t, const char *from, const char *to, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    if (bp->n_dec == TOK_MAX_OPS)
        return mi_set_error(err, "more than %d decoder replacements", TOK_MAX_OPS);
    if (!*from)
        return mi_set_error(err, "decoder Replace of an empty pattern");
    if (!tok_utf8_valid(from, strlen(from)) || !tok_utf8_valid(to, strlen(to)))
        return mi_set_error(err, "a decoder Replace string is not valid UTF-8");
    bp->dec_from[bp->n_dec] = dup_str(from);
    bp->dec_to[bp->n_dec] = dup_str(to);
    if (!bp->dec_from[bp->n_dec++] || !bp->dec_to[bp->n_dec - 1])
        return mi_set_error(err, "out of memory");
    return 0;
}

static void free_op(tok_op *op)
{
    free(op->s1);
    free(op->s2);
    pcre2_code_free(op->re);
}

void tok_bpe_free(mi_tokenizer *t)
{
    mi_tok_bpe *bp = t->bpe;
    if (t->pieces)
        for (int i = 0; i < t->vocab_size; i++)
            free(t->pieces[i]);
    free(t->pieces);
    free(t->piece_len);
    free(t->eog_ids);
    if (bp) {
        free(bp->flags);
        free(bp->merges);
        free(bp->merge_rank);
        free(bp->merge_out);
        for (int i = 0; i < bp->n_norm; i++)
            free_op(&bp->norm[i]);
        for (int i = 0; i < bp->n_pre; i++)
            free_op(&bp->pre[i]);
        for (int i = 0; i < bp->n_dec; i++) {
            free(bp->dec_from[i]);
            free(bp->dec_to[i]);
        }
        tok_strmap_free(&bp->vocab);
        tok_u64map_free(&bp->merge_map);
        tok_trie_free(&bp->raw);
        tok_trie_free(&bp->normalized);
        free(bp->dec);
        free(bp->dec_off);
        free(bp);
    }
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ finalize */

static int compile_op(tok_op *op, const char *what, char *err)
{
    const char *pat = op->s1;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP;
    if (op->kind == TOK_P_BYTELEVEL) {
        if (!op->b)
            return 0;
        pat = tok_re_gpt2;
    } else if (op->kind == TOK_P_DIGITS) {
        pat = "\\p{N}";
    } else if (op->kind == TOK_P_SPLIT || (op->kind == TOK_N_REPLACE && op->flag)) {
        if (!op->flag) /* PCRE2 takes no Unicode-property option with a literal */
            opts = PCRE2_UTF | PCRE2_LITERAL;
    } else {
        return 0;
    }
    int code;
    PCRE2_SIZE at;
    op->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    if (!op->re) {
        char msg[160];
        pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg);
        return mi_set_error(err, "%s: pattern '%.80s' does not compile: %s at offset %zu", what, pat, msg,
                            (size_t)at);
    }
    pcre2_jit_compile(op->re, PCRE2_JIT_COMPLETE); /* the interpreter stays when JIT is unavailable */
    return 0;
}

static int build_merges(mi_tokenizer *t, const char *what, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    if (bp->n_merges == 0)
        return 0;
    bp->merge_out = malloc((size_t)bp->n_merges * sizeof *bp->merge_out);
    if (!bp->merge_out || tok_u64map_init(&bp->merge_map, (size_t)bp->n_merges) != 0)
        return mi_set_error(err, "%s: out of memory for %d merges", what, bp->n_merges);
    char buf[2 * TOK_MAX_PIECE];
    for (int k = 0; k < bp->n_merges; k++) {
        const int l = bp->merges[2 * k], r = bp->merges[2 * k + 1];
        if (l < 0 || r < 0 || l >= t->vocab_size || r >= t->vocab_size)
            return mi_set_error(err, "%s: merge %d names id %d, outside the vocabulary", what, k, l < 0 || l >= t->vocab_size ? l : r);
        memcpy(buf, t->pieces[l], (size_t)t->piece_len[l]);
        memcpy(buf + t->piece_len[l], t->pieces[r], (size_t)t->piece_len[r]);
        const int m = tok_strmap_find(&bp->vocab, buf, t->piece_len[l] + t->piece_len[r]);
        if (m < 0)
            return mi_set_error(err, "%s: merge %d ('%.60s' '%.60s') makes a token not in the vocabulary", what, k,
                                t->pieces[l], t->pieces[r]);
        bp->merge_out[k] = m;
        /* a merge given twice keeps its last rank, as Hugging Face's map does */
        if (tok_u64map_put(&bp->merge_map, ((uint64_t)l << 32 | (uint32_t)r) + 1, k, 0) < 0)
            return mi_set_error(err, "%s: out of memory for %d merges", what, bp->n_merges);
    }
    return 0;
}

static int build_tries(mi_tokenizer *t, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    if (tok_trie_init(&bp->raw) != 0 || tok_trie_init(&bp->normalized) != 0)
        return mi_set_error(err, "out of memory for the added tokens");
    for (int id = 0; id < t->vocab_size; id++) {
        if (!(bp->flags[id] & TOKF_MATCH))
            continue;
        const int norm = (bp->flags[id] & TOKF_NORMALIZED) != 0;
        bp->has_normalized |= norm;
        if (tok_trie_add(norm ? &bp->normalized : &bp->raw, t->pieces[id], t->piece_len[id], id) != 0)
            return mi_set_error(err, "out of memory for the added tokens");
    }
    return 0;
}

/* Append the literal replacement of every from by to in s[0..n) to out. */
static size_t replace_all(const char *s, size_t n, const char *from, const char *to, char *out)
{
    const size_t lf = strlen(from), lt = strlen(to);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (lf && i + lf <= n && memcmp(s + i, from, lf) == 0) {
            memcpy(out + o, to, lt);
            o += lt;
            i += lf;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

static int hex_val(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "<0xXX>": the byte, else -1. */
static int fallback_byte(const char *s, int n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || hex_val(s[3]) < 0 || hex_val(s[4]) < 0)
        return -1;
    return hex_val(s[3]) * 16 + hex_val(s[4]);
}

/* Decoded bytes of one id into out (room: 4 x its length x the largest
 * replacement growth, see build_decoded); returns the byte count. */
static size_t decode_piece(const mi_tokenizer *t, int id, char *out, char *tmp)
{
    const mi_tok_bpe *bp = t->bpe;
    const char *s = t->pieces[id];
    const size_t n = (size_t)t->piece_len[id];
    if (bp->flags[id] & TOKF_SPECIAL)
        return 0;
    if (bp->dec_byte_level && !(bp->flags[id] & TOKF_ADDED)) {
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            int len = mi_utf8_len((const unsigned char *)s + i, n - i);
            if (len == 0)
                len = 1;
            const int b = tok_cp_to_byte(tok_utf8_decode((const unsigned char *)s + i, len));
            if (b >= 0) {
                out[o++] = (char)b;
            } else {
                memcpy(out + o, s + i, (size_t)len);
                o += (size_t)len;
            }
            i += (size_t)len;
        }
        return o;
    }
    const int byte = bp->dec_byte_fallback ? fallback_byte(s, (int)n) : -1;
    if (byte >= 0) {
        out[0] = (char)byte;
        return 1;
    }
    memcpy(out, s, n);
    size_t o = n;
    for (int k = 0; k < bp->n_dec; k++) {
        o = replace_all(out, o, bp->dec_from[k], bp->dec_to[k], tmp);
        memcpy(out, tmp, o);
    }
    return o;
}

static int build_decoded(mi_tokenizer *t, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    /* each replacement can grow a piece by its ratio of lengths, in turn */
    size_t grow = 1;
    for (int k = 0; k < bp->n_dec; k++) {
        grow *= strlen(bp->dec_to[k]) / strlen(bp->dec_from[k]) + 1;
        if (grow > 64)
            return mi_set_error(err, "decoder Replace steps grow a token more than 64 times");
    }
    size_t room = (size_t)t->max_token_length * grow * 4 + 8, cap = 1 << 16, used = 0;
    char *out = malloc(room), *tmp = malloc(room);
    bp->dec = malloc(cap);
    bp->dec_off = malloc(((size_t)t->vocab_size + 1) * sizeof *bp->dec_off);
    int rc = 0;
    for (int id = 0; id < t->vocab_size && rc == 0; id++) {
        if (!out || !tmp || !bp->dec || !bp->dec_off) {
            rc = -1;
            break;
        }
        const size_t n = decode_piece(t, id, out, tmp);
        if (used + n + 1 > cap) {
            while (used + n + 1 > cap)
                cap *= 2;
            char *nd = realloc(bp->dec, cap);
            if (!nd) {
                rc = -1;
                break;
            }
            bp->dec = nd;
        }
        bp->dec_off[id] = used;
        memcpy(bp->dec + used, out, n);
        bp->dec[used + n] = '\0';
        used += n + 1;
    }
    if (rc == 0 && bp->dec_off)
        bp->dec_off[t->vocab_size] = used;
    free(out);
    free(tmp);
    return rc == 0 ? 0 : mi_set_error(err, "out of memory decoding the vocabulary");
}

static int finalize_ops(mi_tokenizer *t, const char *what, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    for (int i = 0; i < bp->n_pre; i++) {
        if (bp->pre[i].kind == TOK_P_BYTELEVEL) {
            /* the model sees bytes from here on: a later step would split
             * GPT-2's characters, which this implementation does not keep */
            if (i != bp->n_pre - 1)
                return mi_set_error(err, "%s: ByteLevel must be the last pre-tokenizer step", what);
            bp->byte_level = 1;
        }
        if (compile_op(&bp->pre[i], what, err))
            return -1;
    }
    for (int i = 0; i < bp->n_norm; i++)
        if (compile_op(&bp->norm[i], what, err))
            return -1;
    return 0;
}

int tok_finalize(mi_tokenizer *t, const char *what, char *err)
{
    mi_tok_bpe *bp = t->bpe;
    int max_len = 0;
    for (int id = 0; id < t->vocab_size; id++) {
        if (!t->pieces[id])
            return mi_set_error(err, "%s: no token has id %d (ids must run 0..%d without gaps)", what, id,
                                t->vocab_size - 1);
        max_len = t->piece_len[id] > max_len ? t->piece_len[id] : max_len;
    }
    t->max_token_length = max_len;
    if (finalize_ops(t, what, err))
        return -1;
    t->kind = bp->byte_level ? MI_TOK_BYTE_BPE : MI_TOK_SPM;
    if (tok_strmap_build(&bp->vocab, t->pieces, t->piece_len, t->vocab_size) != 0)
        return mi_set_error(err, "%s: out of memory indexing %d tokens", what, t->vocab_size);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        bp->fallback_id[b] = tok_strmap_find(&bp->vocab, s, 6);
        bp->byte_id[b] = -1;
        if (bp->byte_level) {
            const int n = tok_utf8_encode(tok_byte_to_cp((unsigned char)b), s);
            bp->byte_id[b] = tok_strmap_find(&bp->vocab, s, n);
            if (bp->byte_id[b] < 0)
                return mi_set_error(err, "%s: byte-level vocabulary has no token for byte 0x%02X ('%.*s')", what, b,
                                    n, s);
        }
    }
    if (bp->unk_id >= t->vocab_size)
        return mi_set_error(err, "%s: unknown-token id %d outside the vocabulary", what, bp->unk_id);
    for (int i = 0; i < bp->n_prefix + bp->n_suffix; i++) {
        const int id = i < bp->n_prefix ? bp->prefix[i] : bp->suffix[i - bp->n_prefix];
        if (id < 0 || id >= t->vocab_size)
            return mi_set_error(err, "%s: token id %d, put around every text (BOS or EOS), is outside the vocabulary "
                                     "of %d", what, id, t->vocab_size);
    }
    if (t->bos_id >= t->vocab_size || t->eos_id >= t->vocab_size)
        return mi_set_error(err, "%s: bos id %d or eos id %d outside the vocabulary", what, t->bos_id, t->eos_id);
    if (build_merges(t, what, err) || build_tries(t, err) || build_decoded(t, err))
        return -1;
    return 0;
}

int tok_set_eog(mi_tokenizer *t, const int *extra, int n_extra, char *err)
{
    /* the end-of-turn tokens of the families (Llama 3, Qwen, Gemma, GPT-2) */
    static const char *const names[] = {"<|eot_id|>",    "<|eom_id|>",      "<|im_end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|end_of_text|>", "<eos>"};
    const int n_names = (int)(sizeof names / sizeof names[0]);
    free(t->eog_ids);
    t->n_eog = 0;
    t->eog_ids = malloc((size_t)(1 + n_extra + n_names) * sizeof *t->eog_ids);
    if (!t->eog_ids)
        return mi_set_error(err, "out of memory");
    for (int i = -1; i < n_extra + n_names; i++) {
        int id = i < 0 ? t->eos_id : i < n_extra ? extra[i] : -1;
        if (i >= n_extra)
            id = tok_strmap_find(&t->bpe->vocab, names[i - n_extra], (int)strlen(names[i - n_extra]));
        if (id < 0 || id >= t->vocab_size)
            continue;
        int seen = 0;
        for (int k = 0; k < t->n_eog; k++)
            seen |= t->eog_ids[k] == id;
        if (!seen)
            t->eog_ids[t->n_eog++] = id;
    }
    return 0;
}

/* ---------------------------------------------------------------- decode */

const char *tok_bpe_decode(const mi_tokenizer *t, int prev, int id, int *len)
{
    const mi_tok_bpe *bp = t->bpe;
    *len = 0;
    if (id < 0 || id >= t->vocab_size)
        return "";
    const char *s = bp->dec + bp->dec_off[id];
    int n = (int)(bp->dec_off[id + 1] - bp->dec_off[id] - 1);
    /* the decoder's Strip: the text's first piece loses its leading space
     * (Llama 2's "▁Hello" after BOS prints "Hello") */
    if (prev < 0 || (prev == t->bos_id && prev >= 0))
        for (int k = 0; k < bp->dec_strip && n > 0 && s[0] == ' '; k++) {
            s++;
            n--;
        }
    *len = n;
    return s;
}
