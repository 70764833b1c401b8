/* Llama SentencePiece-style BPE tokenizer (encode/decode) with byte fallback.
 *
 * The vocabulary is the llama2.c tokenizer.bin content: for each id a score
 * (float) and a byte string. Ids 3..258 are the byte-fallback tokens; in the
 * stories15M tokenizer they are stored as the raw single byte rather than as
 * "<0xXX>" text, so a naive lookup would match the byte token for "," instead
 * of the merged piece. We therefore only match vocabulary strings against ids
 * >= MI_TOK_FIRST_PIECE and use (byte + 3) for fallback. */
#ifndef MESHINFER_TOKENIZER_H
#define MESHINFER_TOKENIZER_H

#include <stddef.h>

#define MI_TOK_BOS 1
#define MI_TOK_EOS 2
#define MI_TOK_BYTE0 3          /* id of byte 0x00 fallback token */
#define MI_TOK_FIRST_PIECE 259  /* first id that is a real merge piece */

typedef struct {
    int vocab_size;
    int max_token_length;
    char **pieces;       /* [vocab_size] NUL-terminated bytes (may contain no NUL inside) */
    int *piece_len;      /* [vocab_size] byte length of each piece */
    float *scores;       /* [vocab_size] merge priority, higher merges first */
    /* sorted index for lookup of pieces with id >= MI_TOK_FIRST_PIECE */
    int *sorted_ids;     /* [n_sorted] */
    int n_sorted;
} mi_tokenizer;

/* Build from in-memory arrays (copied). pieces[i] has lens[i] bytes.
 * Returns 0, or -1 with a message in err (MI_ERRLEN) when the vocabulary is
 * too small (< 259 entries) or a piece is empty/oversized. */
int mi_tokenizer_init(mi_tokenizer *t, int vocab_size, const char *const *pieces,
                      const int *lens, const float *scores, char *err);

/* Read a llama2.c tokenizer.bin (int32 max_token_length, then per id: f32 score,
 * int32 len, bytes). Returns 0, or -1 with err set on missing/truncated/corrupt file. */
int mi_tokenizer_load_bin(mi_tokenizer *t, const char *path, int vocab_size, char *err);

void mi_tokenizer_free(mi_tokenizer *t);

/* Encode UTF-8 text to ids. Prepends BOS if bos; a leading space is added to
 * non-empty text as SentencePiece's add_dummy_prefix does. out must hold
 * strlen(text) + 3 ids. Returns the number of ids, or -1 with err set when text
 * is not valid UTF-8. */
int mi_tokenizer_encode(const mi_tokenizer *t, const char *text, int bos, int *out, char *err);

/* Bytes of one token as it should be printed after token prev: strips the
 * leading space after BOS and maps byte-fallback ids to their raw byte.
 * *len receives the byte count; the returned pointer stays valid while t lives. */
const char *mi_tokenizer_decode(const mi_tokenizer *t, int prev, int id, int *len);

#endif
