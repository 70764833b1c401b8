/* libFuzzer harness: llama2.c tokenizer.bin files (mi_tokenizer_load_bin),
 * and when one loads, encoding a fixed text and decoding every piece. */
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_tokenizer t;
    if (mi_tokenizer_load_bin(&t, fuzz_file(data, size, "tok"), 64, err) == 0) {
        int ids[128];
        int n = mi_tokenizer_encode(&t, "Once upon a time, \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82.", 1, ids, err);
        for (int i = 1; i < n; i++) {
            int len;
            mi_tokenizer_decode(&t, ids[i - 1], ids[i], &len);
        }
        mi_tokenizer_free(&t);
    }
    return 0;
}
