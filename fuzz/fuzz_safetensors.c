/* libFuzzer harness: safetensors files and folder indexes (mi_st_open). An
 * input starting with '{' is a model.safetensors.index.json in a scratch
 * folder that also holds two fixed valid shards; any other input is one
 * .safetensors file. When it opens: every tensor's bytes; aborts when a size
 * is not product(shape) * dtype size or a look-up by name finds another
 * tensor than the index gives. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/safetensors.h"

static volatile unsigned sink; /* keeps the reads */
static char folder[256];

static void folder_remove(void)
{
    char p[400];
    const char *names[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", folder, names[i]);
        unlink(p);
    }
    rmdir(folder);
}

/* A shard: header json padded to 8 bytes, then n data bytes. */
static void write_shard(const char *name, const char *json, size_t n)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", folder, name);
    FILE *f = fopen(p, "wb");
    uint64_t len = (strlen(json) + 7) / 8 * 8;
    if (!f || fwrite(&len, 8, 1, f) != 1 || fwrite(json, 1, strlen(json), f) != strlen(json))
        abort();
    for (size_t i = strlen(json); i < len + n; i++)
        fputc(i < len ? ' ' : (int)(i & 0xff), f);
    if (fclose(f))
        abort();
}

/* The folder with the two shards, once per process; returns the index path. */
static const char *index_file(const uint8_t *data, size_t size)
{
    static char path[400];
    if (!folder[0]) {
        snprintf(folder, sizeof folder, "%s/meshinfer-fuzz-st-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(folder))
            abort();
        atexit(folder_remove);
        write_shard("model-00001-of-00002.safetensors",
                    "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                    "\"b.bias\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]}}", 22);
        write_shard("model-00002-of-00002.safetensors",
                    "{\"c.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 12);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", folder);
    }
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f))
        abort();
    return folder;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[MI_ERRLEN];
    mi_st *st;
    const char *path = size && data[0] == '{' ? index_file(data, size) : fuzz_file(data, size, "st");
    if (mi_st_open(path, &st, err) != 0)
        return 0;
    for (size_t i = 0; i < mi_st_n_tensors(st); i++) {
        const mi_st_tensor *t = mi_st_tensor_at(st, i);
        uint64_t n = mi_st_dtype_size(t->dtype);
        for (int d = 0; d < t->n_dims; d++)
            n *= (uint64_t)t->shape[d];
        if (mi_st_find(st, t->name) != t || n != t->size || !mi_st_shard_path(st, t->shard))
            abort();
        for (size_t k = 0; k < t->size; k++)
            sink += ((const unsigned char *)t->data)[k];
    }
    mi_st_close(st);
    return 0;
}
