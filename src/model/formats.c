/* Files people bring that are not ours (see model_file.h mi_foreign_format):
 * recognised by their first bytes or layout, so that the error names what
 * the file is instead of calling it a corrupt HDF5 file or checkpoint. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "meshinfer/common.h"
#include "meshinfer/model_file.h"

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* A Hugging Face model folder: config.json or *.safetensors inside. */
static int hf_folder(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = !strcmp(e->d_name, "config.json") || ends_with(e->d_name, ".safetensors");
    closedir(d);
    return found;
}

/* safetensors: an 8-byte little-endian header length, then a JSON object. */
static int safetensors_head(const unsigned char *b, size_t n)
{
    if (n < 9)
        return 0;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | b[i];
    return len > 1 && len < ((uint64_t)1 << 32) && b[8] == '{';
}

int mi_foreign_format(const char *path, char *err)
{
    const char *what = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
        if (hf_folder(path)) {
            if (stat(cfg, &st) != 0)
                return mi_set_error(err, "%s is a folder of safetensors without its config.json: a Hugging Face "
                                         "model folder needs config.json (and tokenizer.json) to be converted", path), 1;
            what = "a Hugging Face model folder (config.json, safetensors)";
        }
    } else {
        unsigned char b[16] = {0};
        size_t n = mi_read_head(path, b, sizeof b);
        if (n >= 4 && !memcmp(b, "GGUF", 4))
            what = "a GGUF file";
        else if (safetensors_head(b, n))
            what = "a safetensors file";
        else if (ends_with(path, ".gguf"))
            what = "named like a GGUF file";
        else if (ends_with(path, ".safetensors"))
            what = "named like a safetensors file";
    }
    if (!what)
        return 0;
    mi_set_error(err, "%s is %s: meshinfer reads its own HDF5 model files; `meshinfer convert --input %s --out "
                      "MODEL.h5` makes one (generate, chat, bench and perplexity do it themselves)", path, what, path);
    return 1;
}
