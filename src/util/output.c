/* One path for every output file (see output.h). */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/output.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshinfer/common.h"

/* The directory part of path ("." when it has none). */
static void dir_of(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
}

int mi_output_check(const char *path, const char *what, const char *const *inputs, int n_inputs, char *err)
{
    if (!path || !*path)
        return mi_set_error(err, "the %s path is empty", what);
    if (strlen(path) >= sizeof ((mi_output *)0)->path)
        return mi_set_error(err, "%s: the %s path is too long", path, what);
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return mi_set_error(err, "%s: the %s is a directory; give a file name", path, what);
    if (exists && !S_ISREG(st.st_mode))
        return mi_set_error(err, "%s: the %s exists and is not a regular file (a device or FIFO); refusing to "
                                 "replace it", path, what);
    for (int i = 0; exists && i < n_inputs; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
            return mi_set_error(err, "%s: the %s is the same file as the input %s; refusing to overwrite it", path,
                                what, inputs[i]);
    }
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mi_set_error(err, "%s: cannot write the %s: directory %s does not exist", path, what, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return mi_set_error(err, "%s: cannot write the %s: directory %s is not writable", path, what, dir);
    return 0;
}

int mi_output_begin(mi_output *o, const char *path, char *err)
{
    memset(o, 0, sizeof *o);
    int n = snprintf(o->path, sizeof o->path, "%s", path);
    int t = snprintf(o->tmp, sizeof o->tmp, "%s.partial.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof o->path || t < 0 || (size_t)t >= sizeof o->tmp)
        return mi_set_error(err, "%s: path too long", path);
    mi_temp_file_set(o->tmp);
    return 0;
}

FILE *mi_output_open(mi_output *o, const char *path, char *err)
{
    if (mi_output_begin(o, path, err))
        return NULL;
    o->f = fopen(o->tmp, "w");
    if (!o->f) {
        mi_set_error(err, "%s: cannot create it (%s)", path, strerror(errno));
        mi_output_abort(o);
        return NULL;
    }
    return o->f;
}

int mi_output_commit(mi_output *o, char *err)
{
    int bad = 0, e = 0;
    if (o->f) {
        bad = ferror(o->f) || fflush(o->f) != 0;
        /* EINVAL/EROFS: a pipe or a file system without fsync; the rename still orders it */
        if (!bad && fsync(fileno(o->f)) != 0 && errno != EINVAL && errno != EROFS)
            bad = 1;
        e = errno;
        if (fclose(o->f) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        o->f = NULL;
    }
    if (!bad && rename(o->tmp, o->path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(o->tmp);
        mi_temp_file_clear();
        return mi_set_error(err, "%s: cannot write it (%s); nothing was written", o->path,
                            e ? strerror(e) : "I/O error");
    }
    mi_temp_file_clear();
    return 0;
}

void mi_output_abort(mi_output *o)
{
    if (o->f)
        fclose(o->f);
    o->f = NULL;
    if (o->tmp[0])
        unlink(o->tmp);
    mi_temp_file_clear();
}
