/* libFuzzer harness: llama2.c checkpoint headers and sizes
 * (mi_checkpoint_open maps and validates the file). */
#include "fuzz_util.h"
#include "meshinfer/checkpoint.h"
#include "meshinfer/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_checkpoint ck;
    if (mi_checkpoint_open(&ck, fuzz_file(data, size, "ckpt"), err) == 0)
        mi_checkpoint_close(&ck);
    return 0;
}
