/* Shared by the libFuzzer harnesses: parsers that take a path get the input
 * through a scratch file (one per process, rewritten each run). */
#ifndef MESHINFER_FUZZ_UTIL_H
#define MESHINFER_FUZZ_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size, const char *tag)
{
    static char path[256];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/meshinfer-fuzz-%s-%ld", tag, (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    return path;
}

/* A NUL-terminated copy (the caller frees it). */
static char *fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}
#endif
