/* Helpers shared by the subcommands (see cli.h). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"

void cli_no_positional(const char *cmd, int optind_, int argc, char **argv)
{
    if (optind_ < argc)
        mi_fatal("%s: unexpected argument '%s' (see meshinfer %s --help)", cmd, argv[optind_], cmd);
}

void cli_bad_option(const char *cmd, int code, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (code == ':')
        mi_fatal("%s: option '%s' needs a value (see meshinfer %s --help)", cmd, arg, cmd);
    if (optopt && optopt != '?')
        mi_fatal("%s: unknown option '-%c' (see meshinfer %s --help)", cmd, optopt, cmd);
    mi_fatal("%s: unknown option '%s' (see meshinfer %s --help)", cmd, arg, cmd);
}

char *cli_read_text_err(const char *path, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        mi_set_error(err, "%s: cannot open text file (no such file or not readable)", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = mi_malloc(cap, "text file");
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                mi_fatal("%s: out of memory reading the file", path);
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    buf[n] = '\0';
    if (bad)
        mi_set_error(err, "%s: read error (a directory?)", path);
    else if (strlen(buf) != n)
        mi_set_error(err, "%s: contains a NUL byte (not a text file)", path);
    else if (n == 0)
        mi_set_error(err, "%s: text file is empty", path);
    if (bad || strlen(buf) != n || n == 0) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

void cli_json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}
