/* libFuzzer harness: Hugging Face tokenizer.json files
 * (mi_tokenizer_load_json_mem), and when one loads, encoding the input
 * itself and a fixed text with specials, whitespace and non-ASCII, decoding
 * every id, and its stored form read back (mi_tokenizer_serialize,
 * mi_tokenizer_deserialize). */
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/tokenizer.h"

static void encode_decode(const mi_tokenizer *t, const char *text)
{
    char err[MI_ERRLEN];
    const size_t n = strlen(text);
    int *ids = malloc((n + 3) * sizeof *ids);
    if (!ids)
        abort();
    const int k = mi_tokenizer_encode(t, text, 1, ids, err);
    for (int i = 0; i < k; i++) {
        int len;
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            abort(); /* an id outside the vocabulary is a bug */
        mi_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], &len);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_tokenizer t, back;
    if (mi_tokenizer_load_json_mem(&t, (const char *)data, size, NULL, 0, "fuzz", err) != 0)
        return 0;
    char *self = fuzz_string(data, size > 4096 ? 4096 : size);
    encode_decode(&t, self);
    encode_decode(&t, " Once upon\ta time,\r\n <s>\xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82 don't 12345 <|im_end|>  ");
    free(self);
    size_t len = 0;
    char *s = mi_tokenizer_serialize(&t, &len, err);
    if (s && mi_tokenizer_deserialize(&back, s, len, "fuzz", err) == 0)
        mi_tokenizer_free(&back);
    free(s);
    mi_tokenizer_free(&t);
    return 0;
}
