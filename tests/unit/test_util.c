/* Scratch-directory helpers of the CUnit programs (see test_util.h). */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tu_make_scratch(char *dir, size_t n, const char *prog)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, n, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prog);
    return mkdtemp(dir) ? 0 : -1;
}

void tu_path(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

int tu_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int tu_dir_has_partial(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".partial."))
            found = 1;
    closedir(d);
    return found;
}

int tu_rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    char p[8192];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            tu_rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    return rmdir(dir);
}

int tu_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    return fclose(f) != 0 || bad ? -1 : 0;
}
