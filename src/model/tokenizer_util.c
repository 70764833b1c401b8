/* The tokenizer's small tools: UTF-8, GPT-2's byte map, hash tables and the
 * trie of added tokens (see tokenizer_impl.h). Vocabularies reach 262,144
 * tokens and half a million merges (Gemma 3), so look-ups are hashed rather
 * than searched. */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- UTF-8 */

char *tok_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int tok_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const int len = mi_utf8_len((const unsigned char *)s + i, n - i);
        if (len == 0)
            return 0;
        i += (size_t)len;
    }
    return 1;
}

uint32_t tok_utf8_decode(const unsigned char *s, int len)
{
    if (len == 1)
        return s[0];
    uint32_t cp = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

int tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int tok_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* GPT-2 keeps the printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC,
 * U+00AE..U+00FF) as themselves and moves the other 68, in byte order, to
 * U+0100..U+0143: 0x00..0x20 first, then 0x7F..0xA0, then 0xAD. So every
 * byte is one visible character of the vocabulary. */
static int byte_is_kept(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

uint32_t tok_byte_to_cp(unsigned char b)
{
    if (byte_is_kept(b))
        return b;
    if (b <= 0x20)
        return 0x100 + b;
    if (b <= 0xA0)
        return 0x121 + (b - 0x7Fu);
    return 0x143; /* 0xAD, the soft hyphen */
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return byte_is_kept(cp) ? (int)cp : -1;
    if (cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp <= 0x142)
        return (int)(0x7F + cp - 0x121);
    return cp == 0x143 ? 0xAD : -1;
}

/* ------------------------------------------------------------ string map */

/* FNV-1a: fast on short keys, and vocabulary strings are short. */
static uint64_t hash_bytes(const char *s, int len)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static size_t table_size(size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1)
        cap *= 2;
    return cap;
}

int tok_strmap_build(tok_strmap *m, char *const *str, const int *len, int n)
{
    m->mask = table_size((size_t)n) - 1;
    m->str = str;
    m->len = len;
    m->slot = malloc((m->mask + 1) * sizeof *m->slot);
    if (!m->slot)
        return -1;
    memset(m->slot, 0xFF, (m->mask + 1) * sizeof *m->slot);
    for (int id = 0; id < n; id++) {
        if (!str[id])
            continue;
        size_t i = hash_bytes(str[id], len[id]) & m->mask;
        for (;; i = (i + 1) & m->mask) {
            const int o = m->slot[i];
            if (o < 0) {
                m->slot[i] = id;
                break;
            }
            if (len[o] == len[id] && memcmp(str[o], str[id], (size_t)len[id]) == 0)
                break; /* the first id keeps the string */
        }
    }
    return 0;
}

int tok_strmap_find(const tok_strmap *m, const char *s, int len)
{
    if (!m->slot)
        return -1;
    for (size_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
        const int o = m->slot[i];
        if (o < 0)
            return -1;
        if (m->len[o] == len && memcmp(m->str[o], s, (size_t)len) == 0)
            return o;
    }
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- u64 map */

static size_t hash_u64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

int tok_u64map_init(tok_u64map *m, size_t expected)
{
    m->mask = table_size(expected) - 1;
    m->n = 0;
    m->key = calloc(m->mask + 1, sizeof *m->key);
    m->val = malloc((m->mask + 1) * sizeof *m->val);
    if (!m->key || !m->val) {
        tok_u64map_free(m);
        return -1;
    }
    return 0;
}

static int u64map_grow(tok_u64map *m)
{
    tok_u64map bigger;
    if (tok_u64map_init(&bigger, (m->mask + 1)) != 0)
        return -1;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->key[i])
            tok_u64map_put(&bigger, m->key[i], m->val[i], 0);
    tok_u64map_free(m);
    *m = bigger;
    return 0;
}

int tok_u64map_put(tok_u64map *m, uint64_t key, int val, int keep_old)
{
    if ((m->n + 1) * 2 > m->mask + 1 && u64map_grow(m) != 0)
        return -1;
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == key) {
            if (!keep_old)
                m->val[i] = val;
            return 0;
        }
        if (m->key[i] == 0) {
            m->key[i] = key;
            m->val[i] = val;
            m->n++;
            return 1;
        }
    }
}

int tok_u64map_get(const tok_u64map *m, uint64_t key, int *val)
{
    if (!m->key)
        return 0;
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == key) {
            *val = m->val[i];
            return 1;
        }
        if (m->key[i] == 0)
            return 0;
    }
}

void tok_u64map_free(tok_u64map *m)
{
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ trie */

int tok_trie_init(tok_trie *tr)
{
    memset(tr, 0, sizeof *tr);
    tr->cap = 64;
    tr->term = malloc((size_t)tr->cap * sizeof *tr->term);
    if (!tr->term || tok_u64map_init(&tr->edge, 64) != 0) {
        tok_trie_free(tr);
        return -1;
    }
    tr->term[0] = -1;
    tr->n_nodes = 1;
    return 0;
}

int tok_trie_add(tok_trie *tr, const char *s, int len, int id)
{
    int node = 0;
    for (int i = 0; i < len; i++) {
        const uint64_t key = ((uint64_t)node << 8 | (unsigned char)s[i]) + 1;
        int child;
        if (!tok_u64map_get(&tr->edge, key, &child)) {
            if (tr->n_nodes == tr->cap) {
                int *nt = realloc(tr->term, (size_t)tr->cap * 2 * sizeof *nt);
                if (!nt)
                    return -1;
                tr->term = nt;
                tr->cap *= 2;
            }
            child = tr->n_nodes++;
            tr->term[child] = -1;
            if (tok_u64map_put(&tr->edge, key, child, 0) < 0)
                return -1;
        }
        node = child;
    }
    if (tr->term[node] < 0) /* the first of equal contents wins, as in the vocabulary */
        tr->term[node] = id;
    return 0;
}

int tok_trie_match(const tok_trie *tr, const char *s, size_t n, int *mlen)
{
    int node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        const uint64_t key = ((uint64_t)node << 8 | (unsigned char)s[i]) + 1;
        if (!tok_u64map_get(&tr->edge, key, &node))
            break;
        if (tr->term[node] >= 0) {
            best = tr->term[node];
            *mlen = (int)i + 1;
        }
    }
    return best;
}

void tok_trie_free(tok_trie *tr)
{
    tok_u64map_free(&tr->edge);
    free(tr->term);
    memset(tr, 0, sizeof *tr);
}
