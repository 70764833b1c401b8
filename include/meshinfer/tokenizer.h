/* Tokenizers: llama2.c's SentencePiece-style BPE, and the BPE tokenizers of
 * the model families meshinfer imports (Llama 2 / TinyLlama / Gemma 3:
 * SentencePiece-style with byte fallback; GPT-2 / Llama 3 / Qwen 2.5 and 3:
 * byte-level), read from a Hugging Face tokenizer.json or from GGUF metadata.
 *
 * llama2.c (kind MI_TOK_LLAMA2C): for each id a score (float) and a byte
 * string. Ids 3..258 are the byte-fallback tokens; in the stories15M
 * tokenizer they are stored as the raw single byte rather than as "<0xXX>"
 * text, so a naive lookup would match the byte token for "," instead of the
 * merged piece. We therefore only match vocabulary strings against ids
 * >= MI_TOK_FIRST_PIECE and use (byte + 3) for fallback. BOS is 1, EOS 2.
 *
 * The BPE kinds (MI_TOK_SPM, MI_TOK_BYTE_BPE) follow Hugging Face
 * tokenizers: added and special tokens are matched in the raw text first
 * (leftmost, longest; lstrip/rstrip/normalized respected), then each other
 * section runs through the file's normalizers (Prepend, Replace, NFC/NFD/
 * NFKC/NFKD, Strip), pre-tokenizers (Split with its regex and behavior,
 * ByteLevel, Metaspace, Digits; regexes by PCRE2 with Unicode properties)
 * and the model (merges by rank, ignore_merges, byte fallback to <0xXX>,
 * unk); the post-processor's template tokens (BOS) go around the result.
 * pieces[] then holds the vocabulary's own spelling (GPT-2's characters,
 * "▁" for SentencePiece's space), scores is NULL.
 *
 * The stored form (mi_tokenizer_serialize; /tokenizer/spec of the model
 * file) is one UTF-8 JSON object, "format": "meshinfer-tokenizer-1":
 *   "kind": "spm" | "byte_bpe",
 *   "tokens": [string by id],                 vocabulary spelling
 *   "flags": [[id, bits], ...]                ids with bits: 1 special (no text),
 *                                             2 added text, 4 matched in the text,
 *                                             8 lstrip, 16 rstrip, 32 normalized
 *   "merges": [left, right, left, right, ...] ids, in rank order
 *   "merge_ranks": [rank by merge] | absent   equal ranks merge leftmost first
 *   "normalizer": [step], "pre_tokenizer": [step], each step an array:
 *       ["prepend", s] ["replace", pattern, content, is_regex] ["unicode", "nfc"|"nfd"|"nfkc"|"nfkd"]
 *       ["strip", left, right] ["split", pattern, is_regex, behavior, invert]
 *       ["byte_level", add_prefix_space, use_regex] ["metaspace", replacement, prepend, split]
 *       ["digits", individual]     (behavior 0 removed .. 4 contiguous; prepend 0 always, 1 first, 2 never)
 *   "byte_fallback", "ignore_merges", "fuse_unk": booleans, "unk": id | -1,
 *   "decoder": {"byte_level": b, "byte_fallback": b, "strip": n, "replace": [[from, to], ...]},
 *   "prefix": [ids], "suffix": [ids], "bos": id | -1, "eos": id | -1, "add_bos": b,
 *   "eog": [ids].
 * Booleans are JSON true/false; anything else (unknown keys, wrong types,
 * ids out of range) is an error. */
#ifndef MESHINFER_TOKENIZER_H
#define MESHINFER_TOKENIZER_H

#include <stddef.h>

#define MI_TOK_BOS 1 /* llama2.c's BOS and EOS ids (the BPE kinds have their own: bos_id, eos_id) */
#define MI_TOK_EOS 2
#define MI_TOK_BYTE0 3          /* id of byte 0x00 fallback token */
#define MI_TOK_FIRST_PIECE 259  /* first id that is a real merge piece */

enum {
    MI_TOK_LLAMA2C = 0,  /* llama2.c's tokenizer.bin */
    MI_TOK_SPM = 1,      /* SentencePiece-style BPE with "▁" and byte fallback */
    MI_TOK_BYTE_BPE = 2, /* GPT-2's byte-level BPE */
};

typedef struct mi_tok_bpe mi_tok_bpe; /* the BPE kinds' tables (src/model/tokenizer_impl.h) */

typedef struct {
    int vocab_size;
    int max_token_length;
    char **pieces;       /* [vocab_size] NUL-terminated bytes (may contain no NUL inside) */
    int *piece_len;      /* [vocab_size] byte length of each piece */
    float *scores;       /* [vocab_size] merge priority, higher merges first (llama2.c only) */
    /* sorted index for lookup of pieces with id >= MI_TOK_FIRST_PIECE (llama2.c only) */
    int *sorted_ids;     /* [n_sorted] */
    int n_sorted;
    int kind;            /* MI_TOK_LLAMA2C, MI_TOK_SPM or MI_TOK_BYTE_BPE */
    int bos_id, eos_id;  /* -1 when the tokenizer has none */
    int add_bos;         /* 1 when encoding with bos != 0 puts bos_id first */
    int *eog_ids;        /* [n_eog] ids that end a generation: eos and end-of-turn tokens */
    int n_eog;
    mi_tok_bpe *bpe;     /* NULL for llama2.c */
} mi_tokenizer;

/* GGUF tokenizer metadata, as the GGUF importer reads it (arrays borrowed,
 * copied by mi_tokenizer_init_spec). */
typedef struct {
    const char *model;            /* tokenizer.ggml.model: "llama" (SentencePiece, scores) or "gpt2" (byte-level) */
    const char *pre;              /* tokenizer.ggml.pre: "gpt-2", "llama-bpe" (or "llama3"), "qwen2"; NULL: "gpt-2" */
    int n_tokens;
    const char *const *tokens;    /* [n_tokens] tokenizer.ggml.tokens */
    const int *token_len;         /* [n_tokens] byte lengths */
    const float *scores;          /* [n_tokens] tokenizer.ggml.scores, or NULL (required for "llama") */
    const int *token_type;        /* [n_tokens] 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
                                     6 byte; NULL: all normal */
    int n_merges;
    const char *const *merges;    /* [n_merges] "left right" (tokenizer.ggml.merges; required for "gpt2") */
    const int *merge_len;         /* [n_merges] byte lengths */
    int bos_id, eos_id, eot_id, pad_id, unk_id; /* -1: absent */
    int add_bos;                  /* tokenizer.ggml.add_bos_token: 1, 0, or -1 (the family's default) */
    int add_space_prefix;         /* tokenizer.ggml.add_space_prefix: 1, 0, or -1 ("llama": 1) */
} mi_tok_spec;

/* Build a llama2.c tokenizer from in-memory arrays (copied). pieces[i] has
 * lens[i] bytes. Returns 0, or -1 with a message in err (MI_ERRLEN) when the
 * vocabulary is too small (< 259 entries) or a piece is empty/oversized. */
int mi_tokenizer_init(mi_tokenizer *t, int vocab_size, const char *const *pieces,
                      const int *lens, const float *scores, char *err);

/* Read a llama2.c tokenizer.bin (int32 max_token_length, then per id: f32 score,
 * int32 len, bytes). Returns 0, or -1 with err set on missing/truncated/corrupt file, or one
 * that is another format by its first bytes (HDF5, GGUF, JSON), named as such. */
int mi_tokenizer_load_bin(mi_tokenizer *t, const char *path, int vocab_size, char *err);

/* Read a Hugging Face tokenizer.json (model BPE; the components above) and,
 * when config_path is not NULL, its tokenizer_config.json (bos_token,
 * eos_token, add_bos_token, add_eos_token). Returns 0, or -1 with one line
 * in err naming the file and the problem (not JSON, an unsupported model or
 * component, a merge of tokens not in the vocabulary, ids out of range or
 * given twice, a regex that does not compile). */
int mi_tokenizer_load_json(mi_tokenizer *t, const char *json_path, const char *config_path, char *err);
/* The same from memory (json: json_len bytes; config may be NULL); name
 * starts the error messages. */
int mi_tokenizer_load_json_mem(mi_tokenizer *t, const char *json, size_t json_len, const char *config,
                               size_t config_len, const char *name, char *err);

/* Build from GGUF metadata. "llama": merges by score of the merged token
 * (ties leftmost), "▁" for space with a leading one unless add_space_prefix
 * is 0, byte fallback; "gpt2": byte-level with the merges, the pre-tokenizer
 * regex of spec->pre (Qwen2 also NFC). Control and user-defined tokens are
 * matched in the text. Returns 0, or -1 with err set (unknown model or pre,
 * missing arrays, bad ids, merges naming unknown tokens). */
int mi_tokenizer_init_spec(mi_tokenizer *t, const mi_tok_spec *spec, char *err);

/* The stored form (see above) of a BPE-kind tokenizer: malloc'ed JSON text,
 * *len its bytes; NULL with err set for llama2.c's kind (stored as arrays)
 * or out of memory. */
char *mi_tokenizer_serialize(const mi_tokenizer *t, size_t *len, char *err);
/* Read the stored form back (text: len bytes; name starts errors). 0 or -1. */
int mi_tokenizer_deserialize(mi_tokenizer *t, const char *text, size_t len, const char *name, char *err);

/* A tokenizer fits a model with `rows` embedding rows when every id it can
 * produce from text has a row: ids past them may only be control tokens
 * (Gemma 3's <image_soft_token> is one past its 262,144 rows; prompts are
 * checked for them). 0, or -1 with one line in err starting with where. */
int mi_tokenizer_check_rows(const mi_tokenizer *t, int rows, const char *where, char *err);

void mi_tokenizer_free(mi_tokenizer *t);

/* Encode UTF-8 text to ids. With bos != 0, the tokenizer's special tokens
 * go around the text as its family does (llama2.c: BOS; Llama 2, Gemma 3:
 * BOS; Llama 3 per its template; Qwen, GPT-2: none). llama2.c adds a leading
 * space to non-empty text as SentencePiece's add_dummy_prefix does; the BPE
 * kinds do what the file's normalizers say. out must hold strlen(text) + 3
 * ids (enough for every real vocabulary). Returns the number of ids, or -1
 * with err set when text is not valid UTF-8 or needs more ids. */
int mi_tokenizer_encode(const mi_tokenizer *t, const char *text, int bos, int *out, char *err);
/* The same with out holding cap ids. */
int mi_tokenizer_encode_n(const mi_tokenizer *t, const char *text, int bos, int *out, int cap, char *err);
/* The same, where no added or special token is matched in text's bytes
 * [guard[2k], guard[2k+1]) for k < n_guard: their texts there ("<|im_end|>")
 * are read as the text they are. For a chat prompt (mi_chat_render_spans):
 * the template's markers become control tokens, the messages' texts never do.
 * (llama2.c's tokenizer matches no special tokens in text: it ignores guard.) */
int mi_tokenizer_encode_guarded(const mi_tokenizer *t, const char *text, int bos, int *out, int cap,
                                const size_t *guard, int n_guard, char *err);

/* Bytes of one token as it should be printed after token prev: control
 * tokens give none; byte-fallback ids their raw byte; "▁" a space;
 * byte-level tokens their raw bytes; the first token's leading space (prev
 * is BOS, or for the BPE kinds prev < 0) is stripped where the family's
 * decoder strips it (llama2.c, Llama 2; not Gemma 3 or the byte-level ones).
 * *len receives the byte count; the returned pointer stays valid while t lives. */
const char *mi_tokenizer_decode(const mi_tokenizer *t, int prev, int id, int *len);

/* 1 when id ends a generation (eos, end-of-turn tokens; llama2.c: BOS and
 * EOS, where a story ended), else 0. */
int mi_tokenizer_is_eog(const mi_tokenizer *t, int id);

/* The token a scoring window starts with (perplexity, profile): BOS, or
 * EOS for tokenizers without one (Qwen), or -1 when neither exists. */
int mi_tokenizer_doc_start(const mi_tokenizer *t);

#endif
