/* Encoding with the BPE kinds' tables (tokenizer_impl.h), in Hugging Face's
 * order: added tokens are cut out of the raw text first (leftmost, longest),
 * each remaining section is normalized, pre-tokenized into pieces, and every
 * piece merged by rank; pieces the vocabulary lacks fall back to <0xXX>
 * tokens or the unknown token; the template's tokens go around it all.
 *
 * Pieces are byte ranges of one arena per section (offsets, since the arena
 * grows); byte-level tokenizers keep raw bytes in pieces and map each byte
 * to its GPT-2 character's id only at the merge step. */
#include "tokenizer_impl.h"

#include "meshinfer/common.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

typedef struct {
    int *out;
    int n, cap;
    char *err;
} sink;

typedef struct {
    char *p;
    size_t n, cap;
} arena;

typedef struct {
    size_t off, len;
} piece;

typedef struct {
    piece *v;
    int n, cap;
} plist;

/* Per-call scratch of the merge step. */
typedef struct {
    int *id, *next, *prev;
    size_t *start;
    struct cand {
        int rank, left, right, lid, rid;
    } *heap;
    int cap;
    char *word; /* a byte-level piece spelled in GPT-2's characters */
} work;

static int emit(sink *o, int id)
{
    if (o->n == o->cap)
        return mi_set_error(o->err, "text needs more than %d token ids", o->cap);
    o->out[o->n++] = id;
    return 0;
}

static int reserve(arena *a, size_t extra)
{
    if (a->n + extra <= a->cap)
        return 0;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < a->n + extra)
        cap *= 2;
    char *p = realloc(a->p, cap);
    if (!p)
        return -1;
    a->p = p;
    a->cap = cap;
    return 0;
}

static int append(arena *a, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (reserve(a, n))
        return -1;
    memmove(a->p + a->n, s, n);
    a->n += n;
    return 0;
}

static int push_piece(plist *l, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 64;
        piece *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (piece){off, len};
    return 0;
}

/* ------------------------------------------------------------ normalizers */

/* s[0..n) with every literal from replaced by to, into a. */
static int replace_literal(arena *a, const char *s, size_t n, const char *from, const char *to)
{
    const size_t lf = strlen(from), lt = strlen(to);
    for (size_t i = 0; i < n;) {
        if (lf && i + lf <= n && memcmp(s + i, from, lf) == 0) {
            if (append(a, to, lt))
                return -1;
            i += lf;
        } else if (append(a, s + i++, 1)) {
            return -1;
        }
    }
    return 0;
}

static int replace_regex(arena *a, const char *s, size_t n, const tok_op *op)
{
    size_t cap = n * 2 + 64;
    for (int tries = 0; tries < 2; tries++) {
        if (reserve(a, cap))
            return -1;
        PCRE2_SIZE outlen = cap;
        const int rc = pcre2_substitute(op->re, (PCRE2_SPTR)s, n, 0,
                                        PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_LITERAL |
                                            PCRE2_SUBSTITUTE_OVERFLOW_LENGTH | PCRE2_NO_UTF_CHECK,
                                        NULL, NULL, (PCRE2_SPTR)op->s2, PCRE2_ZERO_TERMINATED,
                                        (PCRE2_UCHAR *)a->p + a->n, &outlen);
        if (rc >= 0) {
            a->n += outlen;
            return 0;
        }
        if (rc != PCRE2_ERROR_NOMEMORY)
            return -1;
        cap = outlen + 1;
    }
    return -1;
}

/* NFC/NFD/NFKC/NFKD through ICU (UTF-16 inside). ASCII is left as it is
 * under every form, which spares the conversions for most text. */
static int unicode_form(arena *a, const char *s, size_t n, int form)
{
    size_t i = 0;
    while (i < n && (unsigned char)s[i] < 0x80)
        i++;
    if (i == n)
        return append(a, s, n);
    UErrorCode st = U_ZERO_ERROR;
    const UNormalizer2 *nz = form == 0   ? unorm2_getNFCInstance(&st)
                             : form == 1 ? unorm2_getNFDInstance(&st)
                             : form == 2 ? unorm2_getNFKCInstance(&st)
                                         : unorm2_getNFKDInstance(&st);
    if (n > INT32_MAX / 8 || U_FAILURE(st))
        return -1;
    int32_t lu = 0, lv = 0, l8 = 0;
    UChar *u = malloc((n + 1) * sizeof *u), *v = NULL;
    int rc = -1;
    if (u)
        u_strFromUTF8(u, (int32_t)n + 1, &lu, s, (int32_t)n, &st);
    if (u && U_SUCCESS(st)) {
        /* a decomposition can be many times longer: ask ICU for the size */
        lv = unorm2_normalize(nz, u, lu, NULL, 0, &st);
        st = st == U_BUFFER_OVERFLOW_ERROR ? U_ZERO_ERROR : st;
        v = U_SUCCESS(st) ? malloc(((size_t)lv + 1) * sizeof *v) : NULL;
    }
    if (v) {
        lv = unorm2_normalize(nz, u, lu, v, lv + 1, &st);
        u_strToUTF8(NULL, 0, &l8, v, lv, &st);
        st = st == U_BUFFER_OVERFLOW_ERROR ? U_ZERO_ERROR : st;
        if (U_SUCCESS(st) && reserve(a, (size_t)l8 + 1) == 0) {
            u_strToUTF8(a->p + a->n, l8 + 1, &l8, v, lv, &st);
            if (U_SUCCESS(st)) {
                a->n += (size_t)l8;
                rc = 0;
            }
        }
    }
    free(u);
    free(v);
    return rc;
}

static size_t trim_left(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const int len = mi_utf8_len((const unsigned char *)s + i, n - i);
        if (len == 0 || !tok_is_space(tok_utf8_decode((const unsigned char *)s + i, len)))
            break;
        i += (size_t)len;
    }
    return i;
}

static size_t trim_right(const char *s, size_t n)
{
    while (n > 0) {
        size_t k = n - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
            k--;
        const int len = mi_utf8_len((const unsigned char *)s + k, n - k);
        if (len == 0 || !tok_is_space(tok_utf8_decode((const unsigned char *)s + k, len)))
            break;
        n = k;
    }
    return n;
}

/* The normalizer steps, from a->p[0..a->n) (replaced in place). */
static int normalize(const mi_tok_bpe *bp, arena *a, arena *tmp)
{
    for (int i = 0; i < bp->n_norm && a->n > 0; i++) { /* an emptied text stays empty */
        const tok_op *op = &bp->norm[i];
        tmp->n = 0;
        int rc = 0;
        if (op->kind == TOK_N_PREPEND) {
            rc = append(tmp, op->s1, strlen(op->s1)) || append(tmp, a->p, a->n);
        } else if (op->kind == TOK_N_REPLACE) {
            rc = op->flag ? replace_regex(tmp, a->p, a->n, op) : replace_literal(tmp, a->p, a->n, op->s1, op->s2);
        } else if (op->kind == TOK_N_UNICODE) {
            rc = unicode_form(tmp, a->p, a->n, op->a);
        } else if (op->kind == TOK_N_STRIP) {
            const size_t l = op->a ? trim_left(a->p, a->n) : 0, r = op->b ? trim_right(a->p, a->n) : a->n;
            rc = append(tmp, a->p + l, r > l ? r - l : 0);
        }
        if (rc)
            return -1;
        arena sw = *a;
        *a = *tmp;
        *tmp = sw;
    }
    return 0;
}

/* --------------------------------------------------------- pre-tokenizers */

/* Split piece p by re into l with Hugging Face's delimiter behaviors. */
static int split_piece(const arena *a, piece p, const pcre2_code *re, int behavior, int invert, plist *l,
                       pcre2_match_data *md)
{
    const char *s = a->p + p.off;
    size_t pos = 0, gap = 0;
    int prev_delim = 0, last = -1; /* index in l of the previous segment of this piece */
    for (;;) {
        size_t ms = p.len, me = p.len;
        if (pos <= p.len) {
            const int rc = pcre2_match(re, (PCRE2_SPTR)s, p.len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
                return -1;
            if (rc >= 0) {
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                ms = ov[0];
                me = ov[1];
                if (me == ms) { /* empty matches split nothing */
                    if (ms >= p.len)
                        ms = me = p.len;
                    else {
                        const int len = mi_utf8_len((const unsigned char *)s + ms, p.len - ms);
                        pos = ms + (size_t)(len > 0 ? len : 1);
                        continue;
                    }
                }
            }
        }
        /* two segments: the gap [gap, ms) and the match [ms, me) */
        for (int seg = 0; seg < 2; seg++) {
            const size_t b = seg ? ms : gap, e = seg ? me : ms;
            if (e <= b)
                continue;
            const int delim = seg ^ invert;
            int merge = 0;
            if (behavior == TOK_SPLIT_REMOVED && delim)
                continue;
            if (behavior == TOK_SPLIT_PREVIOUS)
                merge = delim && !prev_delim && last >= 0;
            else if (behavior == TOK_SPLIT_NEXT)
                merge = !delim && prev_delim && last >= 0;
            else if (behavior == TOK_SPLIT_CONTIGUOUS)
                merge = delim == prev_delim && last >= 0;
            if (merge) {
                l->v[last].len = p.off + e - l->v[last].off;
            } else {
                if (push_piece(l, p.off + b, e - b))
                    return -1;
                last = l->n - 1;
            }
            prev_delim = delim;
        }
        if (ms >= p.len)
            return 0;
        gap = pos = me;
    }
}

/* Metaspace: spaces become the replacement, which also goes in front of the
 * section's first piece as the scheme says; split before each one. */
static int metaspace(arena *a, const tok_op *op, plist *in, plist *out, int first_section, pcre2_match_data *md)
{
    (void)md;
    const size_t lr = strlen(op->s1);
    for (int i = 0; i < in->n; i++) {
        const size_t start = a->n;
        const piece p = in->v[i];
        const int prepend = op->a == TOK_PREPEND_ALWAYS || (op->a == TOK_PREPEND_FIRST && first_section && i == 0);
        /* (a piece that starts with a space starts with the replacement) */
        const int has = a->p[p.off] == ' ' || (p.len >= lr && memcmp(a->p + p.off, op->s1, lr) == 0);
        if (prepend && !has && append(a, op->s1, lr))
            return -1;
        for (size_t k = 0; k < p.len; k++) {
            const char c = a->p[p.off + k];
            if (c == ' ' ? append(a, op->s1, lr) : append(a, &c, 1))
                return -1;
        }
        const size_t end = a->n;
        size_t b = start;
        if (op->b) /* MergedWithNext on the replacement: "▁a▁b" -> "▁a", "▁b" */
            for (size_t k = start + 1; k + lr <= end; k++)
                if (memcmp(a->p + k, op->s1, lr) == 0) {
                    if (push_piece(out, b, k - b))
                        return -1;
                    b = k;
                }
        if (push_piece(out, b, end - b))
            return -1;
    }
    return 0;
}

static int pre_tokenize(const mi_tok_bpe *bp, arena *a, plist *l, plist *tmp, int first_section,
                        pcre2_match_data *md)
{
    for (int i = 0; i < bp->n_pre; i++) {
        const tok_op *op = &bp->pre[i];
        tmp->n = 0;
        if (op->kind == TOK_P_METASPACE) {
            if (metaspace(a, op, l, tmp, first_section, md))
                return -1;
        } else {
            for (int k = 0; k < l->n; k++) {
                piece p = l->v[k];
                if (op->kind == TOK_P_BYTELEVEL && op->a && a->p[p.off] != ' ') {
                    const size_t off = a->n;
                    if (reserve(a, p.len + 1))
                        return -1;
                    a->p[a->n] = ' ';
                    memcpy(a->p + a->n + 1, a->p + p.off, p.len);
                    a->n += p.len + 1;
                    p = (piece){off, p.len + 1};
                }
                int rc;
                if (op->kind == TOK_P_BYTELEVEL && !op->b)
                    rc = push_piece(tmp, p.off, p.len);
                else if (op->kind == TOK_P_DIGITS)
                    rc = split_piece(a, p, op->re, op->a ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS, 0, tmp, md);
                else if (op->kind == TOK_P_BYTELEVEL)
                    rc = split_piece(a, p, op->re, TOK_SPLIT_ISOLATED, 0, tmp, md);
                else
                    rc = split_piece(a, p, op->re, op->a, op->b, tmp, md);
                if (rc)
                    return -1;
            }
        }
        plist sw = *l;
        *l = *tmp;
        *tmp = sw;
    }
    return 0;
}

/* ------------------------------------------------------------- the model */

static int cand_before(const struct cand *a, const struct cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(struct cand *h, int *n, struct cand c)
{
    int i = (*n)++;
    while (i > 0 && cand_before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, int *n)
{
    const struct cand top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c]))
            c++;
        if (!cand_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

static void try_pair(const mi_tok_bpe *bp, work *w, int l, int r, int *hn)
{
    const int a = w->id[l], b = w->id[r];
    int k;
    if (a < 0 || b < 0 || !tok_u64map_get(&bp->merge_map, ((uint64_t)a << 32 | (uint32_t)b) + 1, &k))
        return;
    heap_push(w->heap, hn, (struct cand){bp->merge_rank ? bp->merge_rank[k] : k, l, r, a, b});
}

/* A symbol the vocabulary lacks: its bytes as <0xXX> tokens when all exist,
 * else the unknown token (once for a run of them with fuse_unk). */
static int emit_unknown(const mi_tokenizer *t, const char *s, size_t n, int *last_unk, sink *o)
{
    const mi_tok_bpe *bp = t->bpe;
    int all = bp->byte_fallback;
    for (size_t i = 0; all && i < n; i++)
        all = bp->fallback_id[(unsigned char)s[i]] >= 0;
    if (all) {
        for (size_t i = 0; i < n; i++)
            if (emit(o, bp->fallback_id[(unsigned char)s[i]]))
                return -1;
        *last_unk = 0;
        return 0;
    }
    if (bp->unk_id < 0)
        return mi_set_error(o->err, "text byte 0x%02X has no token and the tokenizer has no unknown token",
                            (unsigned char)s[0]);
    if (bp->fuse_unk && *last_unk)
        return 0;
    *last_unk = 1;
    return emit(o, bp->unk_id);
}

/* Whole piece as one token (ignore_merges): its id or -1. */
static int whole_piece(const mi_tokenizer *t, const char *s, size_t n, work *w)
{
    const mi_tok_bpe *bp = t->bpe;
    if (!bp->byte_level)
        return n <= (size_t)t->max_token_length ? tok_strmap_find(&bp->vocab, s, (int)n) : -1;
    size_t m = 0;
    for (size_t i = 0; i < n && m <= (size_t)t->max_token_length; i++) {
        const int id = bp->byte_id[(unsigned char)s[i]];
        memcpy(w->word + m, t->pieces[id], (size_t)t->piece_len[id]);
        m += (size_t)t->piece_len[id];
    }
    return m <= (size_t)t->max_token_length ? tok_strmap_find(&bp->vocab, w->word, (int)m) : -1;
}

static int bpe_piece(const mi_tokenizer *t, const char *s, size_t n, work *w, sink *o)
{
    const mi_tok_bpe *bp = t->bpe;
    if (bp->ignore_merges) {
        const int id = whole_piece(t, s, n, w);
        if (id >= 0)
            return emit(o, id);
    }
    int m = 0;
    for (size_t i = 0; i < n; m++) {
        int len = 1;
        if (bp->byte_level) {
            w->id[m] = bp->byte_id[(unsigned char)s[i]];
        } else {
            len = mi_utf8_len((const unsigned char *)s + i, n - i);
            len = len > 0 ? len : 1;
            w->id[m] = tok_strmap_find(&bp->vocab, s + i, len);
        }
        w->start[m] = i;
        w->prev[m] = m - 1;
        w->next[m] = i + (size_t)len < n ? m + 1 : -1;
        i += (size_t)len;
    }
    int hn = 0;
    for (int i = 0; i + 1 < m; i++)
        try_pair(bp, w, i, i + 1, &hn);
    while (hn > 0) {
        const struct cand c = heap_pop(w->heap, &hn);
        /* stale when either side changed since it was pushed: a merge always
         * makes a longer token, so equal ids and link mean the same pair */
        if (w->id[c.left] != c.lid || w->next[c.left] != c.right || w->id[c.right] != c.rid)
            continue;
        int k;
        tok_u64map_get(&bp->merge_map, ((uint64_t)c.lid << 32 | (uint32_t)c.rid) + 1, &k);
        w->id[c.left] = bp->merge_out[k];
        w->id[c.right] = -2; /* dead */
        w->next[c.left] = w->next[c.right];
        if (w->next[c.left] >= 0)
            w->prev[w->next[c.left]] = c.left;
        if (w->prev[c.left] >= 0)
            try_pair(bp, w, w->prev[c.left], c.left, &hn);
        if (w->next[c.left] >= 0)
            try_pair(bp, w, c.left, w->next[c.left], &hn);
    }
    int last_unk = 0;
    for (int i = m > 0 ? 0 : -1; i >= 0; i = w->next[i]) {
        if (w->id[i] >= 0) {
            last_unk = 0;
            if (emit(o, w->id[i]))
                return -1;
            continue;
        }
        const size_t end = w->next[i] >= 0 ? w->start[w->next[i]] : n;
        if (emit_unknown(t, s + w->start[i], end - w->start[i], &last_unk, o))
            return -1;
    }
    return 0;
}

static int work_reserve(work *w, size_t n, int max_token_length)
{
    if ((size_t)w->cap >= n + 1)
        return 0;
    if (n > (size_t)INT32_MAX / 8)
        return -1;
    w->cap = (int)n + 1;
    free(w->id);
    free(w->next);
    free(w->prev);
    free(w->start);
    free(w->heap);
    free(w->word);
    w->id = malloc((size_t)w->cap * sizeof *w->id);
    w->next = malloc((size_t)w->cap * sizeof *w->next);
    w->prev = malloc((size_t)w->cap * sizeof *w->prev);
    w->start = malloc((size_t)w->cap * sizeof *w->start);
    /* each merge pushes at most two candidates onto the first cap - 1 */
    w->heap = malloc((size_t)w->cap * 3 * sizeof *w->heap);
    w->word = malloc((size_t)max_token_length * 2 + 8);
    return w->id && w->next && w->prev && w->start && w->heap && w->word ? 0 : -1;
}

/* ------------------------------------------------------------- sections */

typedef struct {
    const mi_tokenizer *t;
    arena a, tmp;
    plist l, ltmp;
    work w;
    pcre2_match_data *md;
    sink *o;
    const size_t *guard; /* [start, end) pairs of the raw text where no added token is matched */
    int n_guard;
} encoder;

/* 1 when raw bytes [i, i + n) overlap a guarded span (a chat message's own text). */
static int guarded(const encoder *e, size_t i, size_t n)
{
    for (int k = 0; k < e->n_guard; k++)
        if (i < e->guard[2 * k + 1] && e->guard[2 * k] < i + n)
            return 1;
    return 0;
}

static int model_section(encoder *e, size_t off, size_t n, int first)
{
    const mi_tok_bpe *bp = e->t->bpe;
    e->l.n = 0;
    if (push_piece(&e->l, off, n) || pre_tokenize(bp, &e->a, &e->l, &e->ltmp, first, e->md) ||
        work_reserve(&e->w, e->a.n, e->t->max_token_length))
        return mi_set_error(e->o->err, "tokenizer: out of memory or a regex failed");
    for (int i = 0; i < e->l.n; i++)
        if (bpe_piece(e->t, e->a.p + e->l.v[i].off, e->l.v[i].len, &e->w, e->o))
            return -1;
    return 0;
}

/* Cut the added tokens of trie out of s[0..n): every token found goes to
 * the output, every text between them to section() (lstrip/rstrip trim
 * the white space next to a token off its neighbours). */
static int split_added(encoder *e, const tok_trie *tr, const char *s, size_t n, int first, int normalized);

static int text_section(encoder *e, const char *s, size_t n, int first)
{
    const mi_tok_bpe *bp = e->t->bpe;
    e->a.n = 0;
    if (append(&e->a, s, n) || normalize(bp, &e->a, &e->tmp))
        return mi_set_error(e->o->err, "tokenizer: out of memory or a normalizer failed");
    if (e->a.n == 0)
        return 0;
    if (bp->has_normalized) {
        /* tokens matched in the normalized text: cut them out of a copy */
        char *copy = malloc(e->a.n);
        if (!copy)
            return mi_set_error(e->o->err, "tokenizer: out of memory");
        memcpy(copy, e->a.p, e->a.n);
        const int rc = split_added(e, &bp->normalized, copy, e->a.n, first, 1);
        free(copy);
        return rc;
    }
    return model_section(e, 0, e->a.n, first);
}

static int split_added(encoder *e, const tok_trie *tr, const char *s, size_t n, int first, int normalized)
{
    const unsigned char *fl = e->t->bpe->flags;
    size_t start = 0, i = 0;
    int rstrip = 0;
    while (i <= n) {
        int mlen = 0, id = i < n ? tok_trie_match(tr, s + i, n - i, &mlen) : -1;
        if (id >= 0 && !normalized && guarded(e, i, (size_t)mlen))
            id = -1; /* a message's text: read as text */
        if (id < 0 && i < n) {
            i++;
            continue;
        }
        size_t b = start, end = i;
        if (rstrip)
            b += trim_left(s + b, end - b);
        if (id >= 0 && (fl[id] & TOKF_LSTRIP))
            end = b + trim_right(s + b, end - b);
        if (end > b) {
            int rc;
            if (normalized) {
                e->a.n = 0;
                rc = append(&e->a, s + b, end - b) ? mi_set_error(e->o->err, "tokenizer: out of memory")
                                                   : model_section(e, 0, e->a.n, first && b == 0);
            } else {
                rc = text_section(e, s + b, end - b, first && b == 0);
            }
            if (rc)
                return -1;
        }
        if (id < 0)
            return 0;
        if (emit(e->o, id))
            return -1;
        rstrip = (fl[id] & TOKF_RSTRIP) != 0;
        i += (size_t)mlen;
        start = i;
    }
    return 0;
}

int tok_bpe_encode(const mi_tokenizer *t, const char *text, size_t n, int add_special, int *out, int cap,
                   const size_t *guard, int n_guard, char *err)
{
    const mi_tok_bpe *bp = t->bpe;
    sink o = {out, 0, cap, err};
    encoder e = {.t = t, .o = &o, .guard = guard, .n_guard = n_guard};
    e.md = pcre2_match_data_create(4, NULL);
    int rc = e.md ? 0 : mi_set_error(err, "tokenizer: out of memory");
    for (int i = 0; rc == 0 && add_special && i < bp->n_prefix; i++)
        rc = emit(&o, bp->prefix[i]);
    if (rc == 0)
        rc = split_added(&e, &bp->raw, text, n, 1, 0);
    for (int i = 0; rc == 0 && add_special && i < bp->n_suffix; i++)
        rc = emit(&o, bp->suffix[i]);
    pcre2_match_data_free(e.md);
    free(e.a.p);
    free(e.tmp.p);
    free(e.l.v);
    free(e.ltmp.v);
    free(e.w.id);
    free(e.w.next);
    free(e.w.prev);
    free(e.w.start);
    free(e.w.heap);
    free(e.w.word);
    return rc == 0 ? o.n : -1;
}
