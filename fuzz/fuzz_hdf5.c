/* libFuzzer harness: the HDF5 model loader, the path every
 * rank's shard comes through. One input is one model file: opened and checked
 * against its config (mi_model_open), loaded whole, its tokenizer read and
 * every weight checked finite, as `meshinfer check` does.
 *
 * Seeds are model files, which the repository does not hold: with
 * MESHINFER_FUZZ_SEEDS=DIR set, the harness writes small seeded synthetic
 * models there (every dtype, shared and separate classifier, mixed layer
 * dtypes) and exits; jobs/dev/fuzz.sh does this before fuzzing. fuzz/corpus/hdf5
 * keeps only inputs that once failed.
 *
 * Debian's libhdf5 is not instrumented and over-reads on some corrupt
 * attribute headers (its own bug, seen under AddressSanitizer's memcpy
 * interceptor): fuzz/hdf5.supp suppresses reports raised inside libhdf5 so
 * the search goes on into our code. Model files are trusted input where HDF5
 * itself cannot be made safe (README). */
#include "fuzz_model.h"
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/model.h"
#include "meshinfer/model_file.h"
#include "meshinfer/synth.h"
#include "meshinfer/tokenizer.h"

static void write_seeds(const char *dir)
{
    static const struct { const char *name; int shared, dtype, emb, layer1; } seeds[] = {
        {"fp32-shared", 1, MI_F32, MI_F32, MI_F32},   {"fp32-separate", 0, MI_F32, MI_F32, MI_F32},
        {"fp16", 0, MI_F16, MI_F16, MI_F16},          {"q8_0", 0, MI_Q8_0, MI_Q8_0, MI_Q8_0},
        {"q4_0", 1, MI_Q4_0, MI_Q4_0, MI_Q4_0},       {"mixed", 0, MI_Q8_0, MI_F32, MI_Q4_0},
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        mi_config c;
        fuzz_tiny_config(&c, seeds[i].shared);
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            c.dtype[0][m] = (unsigned char)seeds[i].dtype, c.dtype[1][m] = (unsigned char)seeds[i].layer1;
        c.emb_dtype = c.cls_dtype = (unsigned char)seeds[i].emb;
        char path[4096], err[MI_ERRLEN];
        snprintf(path, sizeof path, "%s/%s.h5", dir, seeds[i].name);
        if (mi_synth_write(&c, 7, path, 0, err)) {
            fprintf(stderr, "fuzz_hdf5: %s\n", err);
            exit(1);
        }
    }
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *dir = getenv("MESHINFER_FUZZ_SEEDS");
    if (dir && *dir)
        write_seeds(dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_config c;
    const char *path = fuzz_file(data, size, "hdf5");
    mi_model_file *mf = mi_model_open(path, &c, err);
    if (!mf)
        return 0;
    /* what a fuzzed config may ask to allocate is bounded by the file: the
     * loader reads every stored tensor at its checked shape */
    mi_layer_spec *layers = malloc((size_t)c.n_layers * sizeof *layers);
    if (!layers)
        abort();
    mi_shard_spec spec = mi_shard_spec_full(&c, layers);
    mi_weight_source src = mi_weight_source_file(mf);
    mi_model m;
    if (mi_model_load(&m, &src, &c, &spec, err) == 0) {
        mi_tokenizer tok;
        if (mi_model_read_tokenizer(mf, &tok, err) == 0)
            mi_tokenizer_free(&tok);
        size_t n;
        (void)mi_model_check_finite(&m, path, &n, err);
        mi_model_free(&m);
    }
    free(layers);
    mi_model_close(mf);
    return 0;
}
