/* The tokenizer's internal pieces shared by its source files (internal header
 * of the model layer; the public API is include/meshinfer/tokenizer.h).
 *
 *   tokenizer_util.c   hash tables, the added-token trie, UTF-8, GPT-2's byte map
 *   tokenizer_bpe.c    the description of a BPE tokenizer -> its tables; decode
 *   tokenizer_encode.c encode with those tables: added tokens, normalizers,
 *                      pre-tokenizers, merges, byte fallback, template
 *   tokenizer.c        llama2.c's tokenizer and the public API over both
 *   tokenizer_json.c   tokenizer.json (+ tokenizer_config.json) -> description
 *   tokenizer_spec.c   GGUF metadata (mi_tok_spec) -> description; the stored form
 *
 * Calls go one way only (util <- bpe, encode <- tokenizer <- json, spec), which
 * the layering test's no-circle rule needs. */
#ifndef MESHINFER_TOKENIZER_IMPL_H
#define MESHINFER_TOKENIZER_IMPL_H

#include "meshinfer/tokenizer.h"
#include "meshinfer/utf8.h"

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Generous bound on one piece (real vocabularies stay below 300 bytes), so
 * anything larger means a corrupt file. */
#define TOK_MAX_PIECE 4096
/* Bound on vocab_size so index arithmetic in int can never overflow. */
#define TOK_MAX_VOCAB (1 << 24)
/* Normalizer / pre-tokenizer steps, decoder replacements, template tokens. */
#define TOK_MAX_OPS 16
#define TOK_MAX_TEMPLATE 8

/* ------------------------------------------------------------ utilities */

/* A NUL-terminated copy of s[0..n) (cJSON reads one byte past its length),
 * or NULL when out of memory. */
char *tok_strndup(const char *s, size_t n);
/* 1 when s[0..n) is well-formed UTF-8. */
int tok_utf8_valid(const char *s, size_t n);
/* Code point of the well-formed sequence of length len at s. */
uint32_t tok_utf8_decode(const unsigned char *s, int len);
/* UTF-8 encoding of cp into out[4]; returns its length. */
int tok_utf8_encode(uint32_t cp, char *out);
/* Unicode White_Space (what Hugging Face's strip and lstrip/rstrip remove). */
int tok_is_space(uint32_t cp);
/* GPT-2's byte -> code point map (printable bytes map to themselves, the
 * rest to U+0100 upwards) and its inverse (-1 for code points outside it). */
uint32_t tok_byte_to_cp(unsigned char b);
int tok_cp_to_byte(uint32_t cp);

/* Open-addressing map from byte strings (held elsewhere) to ids. */
typedef struct {
    int *slot; /* [mask + 1], id or -1 */
    size_t mask;
    char *const *str;
    const int *len;
} tok_strmap;
/* Index ids 0..n-1 whose strings are str[i] (len[i] bytes; str[i] NULL: left
 * out). On equal strings the first id stays. Returns 0 or -1 (out of memory). */
int tok_strmap_build(tok_strmap *m, char *const *str, const int *len, int n);
int tok_strmap_find(const tok_strmap *m, const char *s, int len);
void tok_strmap_free(tok_strmap *m);

/* Open-addressing map from non-zero 64-bit keys to int values. */
typedef struct {
    uint64_t *key; /* 0: empty */
    int *val;
    size_t mask, n;
} tok_u64map;
int tok_u64map_init(tok_u64map *m, size_t expected);
/* Set key -> val; returns 1 if key was new, 0 if it existed (val kept when
 * keep_old), -1 out of memory. */
int tok_u64map_put(tok_u64map *m, uint64_t key, int val, int keep_old);
int tok_u64map_get(const tok_u64map *m, uint64_t key, int *val);
void tok_u64map_free(tok_u64map *m);

/* Byte trie of the added tokens matched in the text (leftmost, longest). */
typedef struct {
    tok_u64map edge; /* (node << 8 | byte) + 1 -> child node */
    int *term;       /* [n_nodes] token id ending at the node, or -1 */
    int n_nodes, cap;
} tok_trie;
int tok_trie_init(tok_trie *tr);
int tok_trie_add(tok_trie *tr, const char *s, int len, int id);
/* Longest token starting at s[0..n): its id and *mlen, or -1. */
int tok_trie_match(const tok_trie *tr, const char *s, size_t n, int *mlen);
void tok_trie_free(tok_trie *tr);

/* ----------------------------------------------------- the description */

/* Per-id flags of the BPE kinds. */
enum {
    TOKF_SPECIAL = 1,     /* control token: decodes to no text */
    TOKF_ADDED = 2,       /* added token that is text (decoded as its content) */
    TOKF_MATCH = 4,       /* matched in the input before the model runs */
    TOKF_LSTRIP = 8,      /* eats white space on its left */
    TOKF_RSTRIP = 16,     /* eats white space on its right */
    TOKF_NORMALIZED = 32, /* matched in the normalized text, not the raw one */
};

/* Normalizer and pre-tokenizer steps, in Hugging Face's terms. */
enum {
    TOK_N_PREPEND,  /* s1 in front of non-empty text */
    TOK_N_REPLACE,  /* every s1 (regex when flag) by s2 */
    TOK_N_UNICODE,  /* a = 0 NFC, 1 NFD, 2 NFKC, 3 NFKD */
    TOK_N_STRIP,    /* a: left, b: right */
    TOK_P_SPLIT,    /* s1 (regex when flag), a: behavior (TOK_SPLIT_*), b: invert */
    TOK_P_BYTELEVEL, /* a: add_prefix_space, b: use_regex (GPT-2's) */
    TOK_P_METASPACE, /* s1: replacement, a: prepend (TOK_PREPEND_*), b: split */
    TOK_P_DIGITS,   /* a: individual digits */
};
enum { TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_PREVIOUS, TOK_SPLIT_NEXT, TOK_SPLIT_CONTIGUOUS };
enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

typedef struct {
    int kind;
    char *s1, *s2; /* NUL-terminated UTF-8, or NULL */
    int flag;      /* s1 is a regex (else literal text) */
    int a, b;
    pcre2_code *re; /* compiled s1 (split, regex replace), built by tok_finalize */
} tok_op;

/* What a BPE tokenizer is (the loaders fill it; tok_finalize builds the
 * tables from it; the stored form writes it). Token strings are the
 * vocabulary's own spelling (byte-level: GPT-2's characters; SentencePiece:
 * "▁" for space), in mi_tokenizer.pieces. */
struct mi_tok_bpe {
    unsigned char *flags; /* [V] TOKF_* */
    int n_merges;
    int *merges;          /* [2 * n_merges] left, right ids in rank order */
    int *merge_rank;      /* [n_merges] priority (NULL: the index); equal ranks go leftmost */
    int *merge_out;       /* [n_merges] id of the merged token (tok_finalize) */
    tok_op norm[TOK_MAX_OPS], pre[TOK_MAX_OPS];
    int n_norm, n_pre;
    int byte_level;       /* GPT-2 byte-level model (pre-tokenizer ByteLevel) */
    int byte_fallback, ignore_merges, fuse_unk, unk_id;
    /* decoder: ByteLevel (byte_level_dec), Replace s -> s (String patterns),
     * ByteFallback, and how many leading spaces Strip removes at the start */
    int dec_byte_level, dec_byte_fallback, dec_strip;
    char *dec_from[TOK_MAX_OPS], *dec_to[TOK_MAX_OPS];
    int n_dec;
    int prefix[TOK_MAX_TEMPLATE], suffix[TOK_MAX_TEMPLATE];
    int n_prefix, n_suffix;

    /* built by tok_finalize */
    tok_strmap vocab;
    tok_u64map merge_map; /* (left << 32 | right) + 1 -> merge index */
    int byte_id[256];     /* byte-level: id of each byte's character */
    int fallback_id[256]; /* <0xXX> ids, -1 when absent */
    tok_trie raw, normalized;
    int has_normalized;
    char *dec;            /* decoded bytes of every id, NUL-separated */
    size_t *dec_off;      /* [V + 1] */
};

/* Allocate t->bpe and the per-id arrays for vocab_size ids (pieces and
 * lengths zeroed, flags 0). Returns 0 or -1 with err set (what: the source). */
int tok_alloc(mi_tokenizer *t, int vocab_size, const char *what, char *err);
/* Set piece id (copied); -1 with err on a bad id, an empty or oversized
 * string, a NUL byte, or an id given twice. */
int tok_set_piece(mi_tokenizer *t, int id, const char *s, size_t len, const char *what, char *err);
/* Append a normalizer / pre-tokenizer step (strings copied). */
tok_op *tok_add_op(mi_tokenizer *t, int pre, int kind, const char *s1, const char *s2, int flag, int a, int b,
                   char *err);
int tok_add_dec_replace(mi_tokenizer *t, const char *from, const char *to, char *err);
/* Check the description and build the tables: every id has a piece, the
 * merges' ids exist and their concatenation is a token, regexes compile.
 * what names the source in errors. Returns 0 or -1 with err set. */
int tok_finalize(mi_tokenizer *t, const char *what, char *err);
/* The end-of-generation set: eos, extra (may be -1) and the family's
 * end-of-turn tokens present in the vocabulary. */
int tok_set_eog(mi_tokenizer *t, const int *extra, int n_extra, char *err);
void tok_bpe_free(mi_tokenizer *t);

/* guard: n_guard [start, end) byte pairs of text where added tokens are not
 * matched (mi_tokenizer_encode_guarded); NULL, 0 for none. */
int tok_bpe_encode(const mi_tokenizer *t, const char *text, size_t n, int add_special, int *out, int cap,
                   const size_t *guard, int n_guard, char *err);
const char *tok_bpe_decode(const mi_tokenizer *t, int prev, int id, int *len);

/* The GPT-2 / Llama 3 / Qwen2 pre-tokenizer patterns (GGUF tokenizer.ggml.pre). */
extern const char tok_re_gpt2[], tok_re_llama3[], tok_re_qwen2[];

#endif
