/* A GGUF file or Hugging Face folder given where a model file is expected:
 * converted once into the model cache (import.h), then used from there (see
 * control.h session_resolve_model). */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/import.h"

/* MESHINFER_CACHE, else models/cache when the working folder has it (the
 * repository), else ~/.cache/meshinfer. */
static void cache_dir(char *dir, size_t n)
{
    struct stat st;
    const char *env = getenv("MESHINFER_CACHE"), *home = getenv("HOME");
    if (env && env[0])
        snprintf(dir, n, "%s", env);
    else if (stat("models/cache", &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(dir, n, "models/cache");
    else
        snprintf(dir, n, "%s/.cache/meshinfer", home && home[0] ? home : "/tmp");
}

/* The newest modification time of path (a folder: of its files). */
static long long newest(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    long long t = (long long)st.st_mtime;
    if (S_ISDIR(st.st_mode)) {
        static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                            "tokenizer.json", "tokenizer_config.json"};
        char p[PATH_MAX + 64];
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(p, sizeof p, "%s/%s", path, files[i]);
            if (stat(p, &st) == 0 && (long long)st.st_mtime > t)
                t = (long long)st.st_mtime;
        }
    }
    return t;
}

int session_resolve_model(const char *path, int ctx, char *out, size_t n, char *err)
{
    int kind = mi_import_kind(path);
    if (kind == MI_IMPORT_NONE) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    char real[PATH_MAX], dir[PATH_MAX];
    if (!realpath(path, real))
        return mi_set_error(err, "%s: %s", path, strerror(errno));
    struct stat rs;
    if (kind == MI_IMPORT_HF && stat(real, &rs) == 0 && !S_ISDIR(rs.st_mode) && strrchr(real, '/'))
        *strrchr(real, '/') = 0; /* a .safetensors file: its folder */
    /* the name says what it came from; the hash which file, when, and the context */
    uint64_t h = 1469598103934665603ull;
    char key[PATH_MAX + 64];
    snprintf(key, sizeof key, "%s|%lld|%d", real, newest(real), ctx);
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    const char *base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
    char stem[128];
    snprintf(stem, sizeof stem, "%.100s", base);
    char *dot = strrchr(stem, '.');
    if (dot && kind == MI_IMPORT_GGUF)
        *dot = 0;
    cache_dir(dir, sizeof dir);
    snprintf(out, n, "%s/%s-%08llx.h5", dir, stem, (unsigned long long)(h & 0xffffffffu));
    struct stat st;
    if (stat(out, &st) == 0)
        return 0; /* converted before */
    for (char *p = dir + 1;; p++) /* with its parents, as mkdir -p */
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                return mi_set_error(err, "cannot create the model cache %s: %s (set MESHINFER_CACHE)", dir,
                                    strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mi_set_error(err, "the model cache %s is not a directory (set MESHINFER_CACHE to one)", dir);
    /* the import names source and output when it starts writing (after its checks) */
    mi_import_options io = {ctx, NULL, stderr, stderr};
    return mi_import(path, out, &io, err);
}
