/* Shared by the libFuzzer harnesses: parsers that take a path get the input
 * through a scratch file (one per process, rewritten each run). */
#ifndef MESHINFER_FUZZ_UTIL_H
#define MESHINFER_FUZZ_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path[256];
static void fuzz_file_remove(void) { unlink(fuzz_path); }

__attribute__((unused)) static const char *fuzz_file(const uint8_t *data, size_t size, const char *tag)
{
    char *path = fuzz_path;
    if (!path[0]) {
        /* tmpfs where there is one: a run is one file write, and a disk makes
         * that most of the time */
        snprintf(path, sizeof fuzz_path, "%s/meshinfer-fuzz-%s-%ld", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", tag,
                 (long)getpid());
        atexit(fuzz_file_remove);
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    return path;
}

/* A NUL-terminated copy (the caller frees it). */
__attribute__((unused)) static char *fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}
#endif
