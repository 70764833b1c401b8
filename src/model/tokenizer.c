/* llama2.c's SentencePiece-style BPE tokenizer with byte fallback, and the
 * public API over it and the BPE kinds (tokenizer_bpe.c, tokenizer_encode.c).
 *
 * Encoding llama2.c's kind follows llama2.c (dummy prefix, one piece per code point, byte
 * fallback, greedy best-pair merging), with two deliberate differences that
 * make it agree with llama-tokenizer-js, our reference:
 *
 *  - Merging uses a heap over a linked list instead of rescanning all pairs
 *    after each merge, so a long prompt costs O(n log n) rather than O(n^2)
 *    vocabulary look-ups.
 *  - Ties in score are broken by (left id, right id, position) instead of
 *    position alone. The reference ranks pairs by the Hugging Face merge
 *    list, whose order is exactly (score desc, left id, right id) over this
 *    vocabulary (checked for all 61249 merges); ties matter because every
 *    run-of-spaces piece has the same score (-1e9). We found no input where
 *    llama2.c's leftmost rule changes the ids, but using the reference's
 *    order removes the question rather than relying on that.
 */
#include "meshinfer/tokenizer.h"

#include "meshinfer/common.h"
#include "tokenizer_impl.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Generous bound on one piece: real vocabularies stay below 64 bytes, so
 * anything larger means a corrupt file rather than a legitimate token. */
#define MI_TOK_MAX_PIECE_BYTES 4096
/* Bound on vocab_size so index arithmetic in int can never overflow. */
#define MI_TOK_MAX_VOCAB (1 << 24)

/* Decoding byte-fallback ids must return a pointer that outlives the call, and
 * the file's own piece is not the raw byte for 0x80..0xFF (it stores the
 * UTF-8 encoding of U+0080..U+00FF). A constant table avoids per-tokenizer
 * storage and any mutable global state. */
#define MI_B4(n) (char)(n), (char)((n) + 1), (char)((n) + 2), (char)((n) + 3)
#define MI_B16(n) MI_B4(n), MI_B4((n) + 4), MI_B4((n) + 8), MI_B4((n) + 12)
#define MI_B64(n) MI_B16(n), MI_B16((n) + 16), MI_B16((n) + 32), MI_B16((n) + 48)
static const char k_byte_table[256] = {MI_B64(0), MI_B64(64), MI_B64(128), MI_B64(192)};

/* ---------------------------------------------------------------- lookup */

typedef struct {
    const char *s;
    int len;
    int id;
} sort_entry;

/* Byte-wise (unsigned) order, shorter first on a common prefix. The same
 * order must be used by qsort and bsearch or look-ups silently fail. */
static int cmp_bytes(const char *a, int alen, const char *b, int blen)
{
    const int n = alen < blen ? alen : blen;
    const int c = memcmp(a, b, (size_t)n);
    if (c != 0)
        return c;
    return (alen > blen) - (alen < blen);
}

static int cmp_sort_entry(const void *pa, const void *pb)
{
    const sort_entry *a = pa;
    const sort_entry *b = pb;
    const int c = cmp_bytes(a->s, a->len, b->s, b->len);
    if (c != 0)
        return c;
    /* Equal strings sorted by id so the look-up can return the lowest id
     * deterministically instead of whichever qsort left first. */
    return (a->id > b->id) - (a->id < b->id);
}

/* bsearch gives the comparator no context pointer, so the key carries the
 * tokenizer; this keeps the index a plain int array without globals. */
typedef struct {
    const mi_tokenizer *t;
    const char *s;
    int len;
} lookup_key;

static int cmp_lookup(const void *pk, const void *pe)
{
    const lookup_key *k = pk;
    const int id = *(const int *)pe;
    return cmp_bytes(k->s, k->len, k->t->pieces[id], k->t->piece_len[id]);
}

/* Id of the piece with exactly these bytes among ids >= MI_TOK_FIRST_PIECE,
 * or -1. Byte-fallback ids are excluded on purpose (see tokenizer.h). */
static int find_piece(const mi_tokenizer *t, const char *s, int len)
{
    if (len <= 0 || len > t->max_token_length || t->n_sorted <= 0)
        return -1;
    const lookup_key key = {t, s, len};
    const int *hit = bsearch(&key, t->sorted_ids, (size_t)t->n_sorted, sizeof(int), cmp_lookup);
    if (!hit)
        return -1;
    while (hit > t->sorted_ids && cmp_lookup(&key, hit - 1) == 0)
        hit--;
    return *hit;
}

/* ---------------------------------------------------------- construction */

void mi_tokenizer_free(mi_tokenizer *t)
{
    if (!t)
        return;
    if (t->bpe) {
        tok_bpe_free(t);
        return;
    }
    free(t->eog_ids);
    /* All piece bytes live in one block that starts at pieces[0]. */
    if (t->pieces && t->vocab_size > 0)
        free(t->pieces[0]);
    free(t->pieces);
    free(t->piece_len);
    free(t->scores);
    free(t->sorted_ids);
    memset(t, 0, sizeof *t);
}

int mi_tokenizer_init(mi_tokenizer *t, int vocab_size, const char *const *pieces,
                      const int *lens, const float *scores, char *err)
{
    if (!t)
        return mi_set_error(err, "tokenizer: no tokenizer object given");
    memset(t, 0, sizeof *t);
    if (vocab_size < MI_TOK_FIRST_PIECE || vocab_size > MI_TOK_MAX_VOCAB)
        return mi_set_error(err, "tokenizer: vocabulary has %d entries, need %d..%d", vocab_size,
                            MI_TOK_FIRST_PIECE, MI_TOK_MAX_VOCAB);
    if (!pieces || !lens || !scores)
        return mi_set_error(err, "tokenizer: missing pieces, lengths or scores");

    size_t total = 0;
    int max_len = 0;
    for (int i = 0; i < vocab_size; i++) {
        if (!pieces[i])
            return mi_set_error(err, "tokenizer: token %d has no bytes", i);
        if (lens[i] <= 0 || lens[i] > MI_TOK_MAX_PIECE_BYTES)
            return mi_set_error(err, "tokenizer: token %d has invalid length %d (must be 1..%d)", i,
                                lens[i], MI_TOK_MAX_PIECE_BYTES);
        /* A NaN score would make the merge order depend on comparison
         * accidents; infinities have no meaning as merge priorities. */
        if (!isfinite(scores[i]))
            return mi_set_error(err, "tokenizer: token %d has a non-finite score", i);
        total += (size_t)lens[i] + 1;
        if (lens[i] > max_len)
            max_len = lens[i];
    }

    char *arena = malloc(total);
    t->pieces = malloc((size_t)vocab_size * sizeof *t->pieces);
    t->piece_len = malloc((size_t)vocab_size * sizeof *t->piece_len);
    t->scores = malloc((size_t)vocab_size * sizeof *t->scores);
    const int n_sorted = vocab_size - MI_TOK_FIRST_PIECE;
    t->sorted_ids = malloc((size_t)(n_sorted > 0 ? n_sorted : 1) * sizeof *t->sorted_ids);
    sort_entry *tmp = malloc((size_t)(n_sorted > 0 ? n_sorted : 1) * sizeof *tmp);
    t->eog_ids = malloc(2 * sizeof *t->eog_ids);
    if (!arena || !t->pieces || !t->piece_len || !t->scores || !t->sorted_ids || !tmp || !t->eog_ids) {
        free(arena);
        free(tmp);
        /* pieces[0] is not set yet, so free() must not look at it. */
        free(t->pieces);
        t->pieces = NULL;
        mi_tokenizer_free(t);
        return mi_set_error(err, "tokenizer: out of memory for %d tokens", vocab_size);
    }

    char *p = arena;
    for (int i = 0; i < vocab_size; i++) {
        memcpy(p, pieces[i], (size_t)lens[i]);
        p[lens[i]] = '\0';
        t->pieces[i] = p;
        t->piece_len[i] = lens[i];
        t->scores[i] = scores[i];
        p += lens[i] + 1;
    }
    t->vocab_size = vocab_size;
    t->max_token_length = max_len;
    t->kind = MI_TOK_LLAMA2C;
    t->bos_id = MI_TOK_BOS;
    t->eos_id = MI_TOK_EOS;
    t->add_bos = 1;

    for (int i = 0; i < n_sorted; i++) {
        const int id = MI_TOK_FIRST_PIECE + i;
        tmp[i] = (sort_entry){t->pieces[id], t->piece_len[id], id};
    }
    /* a story ends at EOS or at the BOS of the next one */
    t->eog_ids[0] = MI_TOK_BOS;
    t->eog_ids[1] = MI_TOK_EOS;
    t->n_eog = 2;
    qsort(tmp, (size_t)n_sorted, sizeof *tmp, cmp_sort_entry);
    for (int i = 0; i < n_sorted; i++)
        t->sorted_ids[i] = tmp[i].id;
    t->n_sorted = n_sorted;
    free(tmp);
    return 0;
}

/* Whole file in memory: tokenizer files are small, and parsing a buffer with
 * explicit bounds checks is simpler to get right than a chain of freads. */
static int read_file(const char *path, unsigned char **data, size_t *size, char *err)
{
    *data = NULL;
    *size = 0;
    if (mi_check_input_file(path, "tokenizer file", err))
        return -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mi_set_error(err, "cannot open tokenizer file '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return mi_set_error(err, "out of memory reading tokenizer file '%s'", path);
    }
    for (;;) {
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return mi_set_error(err, "out of memory reading tokenizer file '%s'", path);
            }
            buf = nb;
            cap *= 2;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    const int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return mi_set_error(err, "error reading tokenizer file '%s'", path);
    }
    *data = buf;
    *size = n;
    return 0;
}

/* The format is native-endian int32/float32 as written by llama2.c's export;
 * memcpy avoids unaligned access since records have no alignment. */
static int32_t get_i32(const unsigned char *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static float get_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A file that is some other format people hold beside a tokenizer.bin (a
 * model, a GGUF file, a tokenizer.json) is named as what it is, before its
 * first bytes are read as a piece length ("invalid max_token_length
 * 1178880137" says nothing). 0 when it may be a tokenizer.bin. */
static int other_format(const char *path, char *err)
{
    unsigned char sig[8] = {0};
    size_t n = mi_read_head(path, sig, sizeof sig); /* 0: read_file names the failure */
    if (n == sizeof sig && !memcmp(sig, "\x89HDF\r\n\x1a\n", sizeof sig))
        return mi_set_error(err, "tokenizer '%s' is an HDF5 file (a meshinfer model?), not a llama2.c tokenizer.bin: "
                                 "a model carries its own tokenizer: give the model itself (-m/--model)", path);
    if (n >= 4 && !memcmp(sig, "GGUF", 4))
        return mi_set_error(err, "tokenizer '%s' is a GGUF file, not a llama2.c tokenizer.bin: convert it with "
                                 "`meshinfer convert --input` and give the model (-m/--model)", path);
    size_t i = 0;
    while (i < n && (sig[i] == ' ' || sig[i] == '\t' || sig[i] == '\n' || sig[i] == '\r'))
        i++;
    if (i < n && sig[i] == '{')
        return mi_set_error(err, "tokenizer '%s' starts like JSON (a tokenizer.json?), not a llama2.c tokenizer.bin: "
                                 "`meshinfer tokenize --tokenizer` reads a Hugging Face tokenizer.json", path);
    return 0;
}

int mi_tokenizer_load_bin(mi_tokenizer *t, const char *path, int vocab_size, char *err)
{
    if (!t)
        return mi_set_error(err, "tokenizer: no tokenizer object given");
    memset(t, 0, sizeof *t);
    if (!path)
        return mi_set_error(err, "tokenizer: no file name given");
    if (vocab_size < MI_TOK_FIRST_PIECE || vocab_size > MI_TOK_MAX_VOCAB)
        return mi_set_error(err, "tokenizer '%s': vocabulary size %d out of range %d..%d", path,
                            vocab_size, MI_TOK_FIRST_PIECE, MI_TOK_MAX_VOCAB);

    if (other_format(path, err))
        return -1;
    unsigned char *data;
    size_t size;
    if (read_file(path, &data, &size, err) != 0)
        return -1;

    int rc = -1;
    const char **pieces = malloc((size_t)vocab_size * sizeof *pieces);
    int *lens = malloc((size_t)vocab_size * sizeof *lens);
    float *scores = malloc((size_t)vocab_size * sizeof *scores);
    if (!pieces || !lens || !scores) {
        mi_set_error(err, "tokenizer '%s': out of memory", path);
        goto done;
    }
    if (size < 4) {
        mi_set_error(err, "tokenizer '%s' is truncated: %zu bytes, no header", path, size);
        goto done;
    }
    const int32_t max_len = get_i32(data);
    if (max_len <= 0 || max_len > MI_TOK_MAX_PIECE_BYTES) {
        mi_set_error(err, "tokenizer '%s': invalid max_token_length %ld (must be 1..%d)", path,
                     (long)max_len, MI_TOK_MAX_PIECE_BYTES);
        goto done;
    }
    size_t off = 4;
    for (int i = 0; i < vocab_size; i++) {
        if (size - off < 8) {
            mi_set_error(err, "tokenizer '%s' is truncated at token %d of %d (byte offset %zu)",
                         path, i, vocab_size, off);
            goto done;
        }
        scores[i] = get_f32(data + off);
        const int32_t len = get_i32(data + off + 4);
        off += 8;
        if (len <= 0 || len > max_len) {
            mi_set_error(err, "tokenizer '%s': token %d has invalid length %ld (must be 1..%ld)",
                         path, i, (long)len, (long)max_len);
            goto done;
        }
        if (size - off < (size_t)len) {
            mi_set_error(err, "tokenizer '%s' is truncated inside token %d of %d (byte offset %zu)",
                         path, i, vocab_size, off);
            goto done;
        }
        pieces[i] = (const char *)(data + off);
        lens[i] = len;
        off += (size_t)len;
    }
    /* Leftover bytes mean the file holds more tokens than the model's
     * vocabulary: ids would silently mean different pieces. */
    if (off != size) {
        mi_set_error(err,
                     "tokenizer '%s' has %zu bytes after %d tokens: vocabulary size mismatch?",
                     path, size - off, vocab_size);
        goto done;
    }
    if (mi_tokenizer_init(t, vocab_size, pieces, lens, scores, err) != 0) {
        /* Prefix the file name, keeping init's reason. */
        char why[MI_ERRLEN];
        snprintf(why, sizeof why, "%s", err ? err : "");
        mi_set_error(err, "tokenizer '%s': %s", path, why);
        goto done;
    }
    rc = 0;
done:
    free(pieces);
    free(lens);
    free(scores);
    free(data);
    return rc;
}

/* ---------------------------------------------------------------- encode */

/* A candidate merge of node left with its current successor right. The ids
 * are kept so a stale entry (either side changed since it was pushed) can be
 * recognised when popped instead of being removed eagerly. */
typedef struct {
    float score;
    int left_id, right_id, merged_id;
    int left, right;
} merge_cand;

/* True if a should be merged before b; see the file comment for why ties go
 * to the lower (left id, right id) before position. */
static int cand_before(const merge_cand *a, const merge_cand *b)
{
    if (a->score != b->score)
        return a->score > b->score;
    if (a->left_id != b->left_id)
        return a->left_id < b->left_id;
    if (a->right_id != b->right_id)
        return a->right_id < b->right_id;
    return a->left < b->left;
}

static void heap_push(merge_cand *h, int *n, merge_cand c)
{
    int i = (*n)++;
    while (i > 0) {
        const int parent = (i - 1) / 2;
        if (!cand_before(&c, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = c;
}

static merge_cand heap_pop(merge_cand *h, int *n)
{
    const merge_cand top = h[0];
    const merge_cand last = h[--(*n)];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && cand_before(&h[child + 1], &h[child]))
            child++;
        if (!cand_before(&h[child], &last))
            break;
        h[i] = h[child];
        i = child;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Push the merge of nodes l and r if their concatenation is a vocabulary
 * piece. Byte-fallback tokens never merge: in SentencePiece they stand for
 * bytes, not text, and in this file their stored bytes could spuriously
 * concatenate into a real piece. */
static void try_pair(const mi_tokenizer *t, const int *ids, int l, int r, char *buf,
                     merge_cand *heap, int *heap_n)
{
    const int a = ids[l], b = ids[r];
    if (a < MI_TOK_FIRST_PIECE || b < MI_TOK_FIRST_PIECE)
        return;
    const int la = t->piece_len[a], lb = t->piece_len[b];
    if (la + lb > t->max_token_length)
        return;
    memcpy(buf, t->pieces[a], (size_t)la);
    memcpy(buf + la, t->pieces[b], (size_t)lb);
    const int m = find_piece(t, buf, la + lb);
    if (m < 0)
        return;
    heap_push(heap, heap_n, (merge_cand){t->scores[m], a, b, m, l, r});
}

/* llama2.c's encode of valid UTF-8 text[0..n) into out (room for n + 2 ids). */
static int llama2c_encode(const mi_tokenizer *t, const char *text, size_t n, int bos, int *out, char *err)
{
    const unsigned char *u = (const unsigned char *)text;
    int n_out = 0;
    if (bos)
        out[n_out++] = MI_TOK_BOS;
    if (n == 0)
        return n_out;

    /* Worst case one token per byte plus the dummy prefix: n + 1 nodes. */
    const int cap = (int)n + 1;
    int *ids = out + n_out;
    int *next = malloc((size_t)cap * sizeof *next);
    int *prev = malloc((size_t)cap * sizeof *prev);
    /* Each merge adds at most two candidates to the initial cap - 1. */
    merge_cand *heap = malloc((size_t)cap * 3 * sizeof *heap);
    char *buf = malloc((size_t)t->max_token_length * 2 + 1);
    if (!next || !prev || !heap || !buf) {
        free(next);
        free(prev);
        free(heap);
        free(buf);
        return mi_set_error(err, "tokenizer: out of memory encoding %zu bytes", n);
    }

    /* SentencePiece's add_dummy_prefix: a word at the start of the text is
     * tokenized like one in the middle (" Once" rather than "Once"). */
    int m = 0;
    const int space_piece = find_piece(t, " ", 1);
    const int space = space_piece >= 0 ? space_piece : MI_TOK_BYTE0 + ' ';
    ids[m++] = space;
    for (size_t i = 0; i < n;) {
        const int len = mi_utf8_len(u + i, n - i);
        /* SentencePiece turns spaces into U+2581 before tokenizing, so a
         * literal U+2581 in the text is indistinguishable from a space; the
         * reference (llama-tokenizer-js) does the same. */
        const int is_meta_space = len == 3 && memcmp(text + i, "\xE2\x96\x81", 3) == 0;
        const int id = is_meta_space ? space : find_piece(t, text + i, len);
        if (id >= 0) {
            ids[m++] = id;
        } else {
            for (int k = 0; k < len; k++)
                ids[m++] = MI_TOK_BYTE0 + u[i + (size_t)k];
        }
        i += (size_t)len;
    }

    int heap_n = 0;
    for (int i = 0; i < m; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < m ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < m; i++)
        try_pair(t, ids, i, i + 1, buf, heap, &heap_n);

    while (heap_n > 0) {
        const merge_cand c = heap_pop(heap, &heap_n);
        /* Merged nodes keep the left index, and a merge always yields a
         * longer (hence different) piece, so matching link and ids prove
         * the candidate still describes the current pair. */
        if (ids[c.left] != c.left_id || next[c.left] != c.right || ids[c.right] != c.right_id)
            continue;
        ids[c.left] = c.merged_id;
        ids[c.right] = -1; /* dead: can never equal a candidate's id */
        next[c.left] = next[c.right];
        if (next[c.left] >= 0)
            prev[next[c.left]] = c.left;
        if (prev[c.left] >= 0)
            try_pair(t, ids, prev[c.left], c.left, buf, heap, &heap_n);
        if (next[c.left] >= 0)
            try_pair(t, ids, c.left, next[c.left], buf, heap, &heap_n);
    }

    /* Compact the surviving list in place; node 0 is never a right side,
     * so it always survives and heads the list. */
    int k = 0;
    for (int i = 0; i >= 0; i = next[i])
        ids[k++] = ids[i];
    n_out += k;

    free(next);
    free(prev);
    free(heap);
    free(buf);
    return n_out;
}

int mi_tokenizer_encode_n(const mi_tokenizer *t, const char *text, int bos, int *out, int cap, char *err)
{
    return mi_tokenizer_encode_guarded(t, text, bos, out, cap, NULL, 0, err);
}

int mi_tokenizer_encode_guarded(const mi_tokenizer *t, const char *text, int bos, int *out, int cap,
                                const size_t *guard, int n_guard, char *err)
{
    if (!t || !t->pieces || !text || !out)
        return mi_set_error(err, "tokenizer: encode called without tokenizer, text or output");
    const size_t n = strlen(text);
    for (size_t i = 0; i < n;) {
        const int len = mi_utf8_len((const unsigned char *)text + i, n - i);
        if (len == 0)
            return mi_set_error(err, "text is not valid UTF-8 (byte offset %zu)", i);
        i += (size_t)len;
    }
    if (n > (size_t)INT32_MAX / 4)
        return mi_set_error(err, "text too long (%zu bytes)", n);
    if (t->bpe)
        return tok_bpe_encode(t, text, n, bos, out, cap, guard, n_guard, err);
    if ((size_t)cap >= n + 2)
        return llama2c_encode(t, text, n, bos, out, err);
    /* llama2.c's encoder writes up to n + 2 ids: a smaller out gets a copy */
    int *tmp = malloc((n + 2) * sizeof *tmp);
    if (!tmp)
        return mi_set_error(err, "tokenizer: out of memory encoding %zu bytes", n);
    int k = llama2c_encode(t, text, n, bos, tmp, err);
    if (k > cap)
        k = mi_set_error(err, "text needs more than %d token ids", cap);
    if (k > 0)
        memcpy(out, tmp, (size_t)k * sizeof *out);
    free(tmp);
    return k;
}

int mi_tokenizer_encode(const mi_tokenizer *t, const char *text, int bos, int *out, char *err)
{
    const size_t n = text ? strlen(text) : 0;
    if (n > (size_t)INT32_MAX / 4)
        return mi_set_error(err, "text too long (%zu bytes)", n);
    return mi_tokenizer_encode_n(t, text, bos, out, (int)n + 3, err);
}

int mi_tokenizer_is_eog(const mi_tokenizer *t, int id)
{
    for (int i = 0; t && i < t->n_eog; i++)
        if (t->eog_ids[i] == id)
            return 1;
    return 0;
}

int mi_tokenizer_doc_start(const mi_tokenizer *t) { return t->bos_id >= 0 ? t->bos_id : t->eos_id; }

/* ---------------------------------------------------------------- decode */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

const char *mi_tokenizer_decode(const mi_tokenizer *t, int prev, int id, int *len)
{
    int dummy;
    if (!len)
        len = &dummy;
    *len = 0;
    if (t && t->bpe)
        return tok_bpe_decode(t, prev, id, len);
    /* Control tokens (<unk>, <s>, </s>) carry no text; in this file they are
     * stored as "\n<s>\n" etc., which must not leak into the output. */
    if (!t || !t->pieces || id < MI_TOK_BYTE0 || id >= t->vocab_size)
        return "";

    const char *s = t->pieces[id];
    int n = t->piece_len[id];
    if (id < MI_TOK_FIRST_PIECE) {
        s = &k_byte_table[id - MI_TOK_BYTE0];
        n = 1;
    } else if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex_digit(s[3]) >= 0 &&
               hex_digit(s[4]) >= 0) {
        s = &k_byte_table[hex_digit(s[3]) * 16 + hex_digit(s[4])];
        n = 1;
    }
    /* Undo the dummy prefix: only the first piece of the text carries it. */
    if (prev == MI_TOK_BOS && n > 0 && s[0] == ' ') {
        s++;
        n--;
    }
    *len = n;
    return s;
}

int mi_tokenizer_check_rows(const mi_tokenizer *t, int rows, const char *where, char *err)
{
    for (int id = rows; id < t->vocab_size; id++) {
        int len = 0;
        mi_tokenizer_decode(t, -1, id, &len);
        if (len > 0)
            return mi_set_error(err, "%s: the tokenizer has %d tokens but the embeddings only %d rows (token %d "
                                     "'%.40s' has no row)", where, t->vocab_size, rows, id, t->pieces[id]);
    }
    return 0;
}
