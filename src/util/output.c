/* One path for every output file (see output.h). */
#define _GNU_SOURCE /* O_NOFOLLOW, O_CLOEXEC, realpath */
#include "meshinfer/output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshinfer/common.h"

void mi_output_dir(const char *path, char *dir, size_t n)
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

/* The file an output really writes: a symlink's target (so the link stays a
 * link and the file it names gets the content), else path itself. */
static void resolve(const char *path, char *out, size_t n)
{
    struct stat st;
    char real[PATH_MAX];
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, real))
        snprintf(out, n, "%s", real);
    else
        snprintf(out, n, "%s", path);
}

/* Create a new file exclusively, never through a link: 0 and fd, or -1. A
 * predictable temporary name must not let anyone plant a symlink there. */
static int create_new(const char *name)
{
    return open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* 1 when path starts with HDF5's signature (a model file). */
static int is_hdf5(const char *path)
{
    unsigned char sig[8] = {0};
    size_t n = mi_read_head(path, sig, sizeof sig);
    return n == sizeof sig && !memcmp(sig, "\x89HDF\r\n\x1a\n", sizeof sig);
}

int mi_output_check(const char *path, const char *what, const char *const *inputs, int n_inputs, char *err)
{
    if (!path || !*path)
        return mi_set_error(err, "the %s path is empty", what);
    if (strlen(path) >= sizeof ((mi_output *)0)->path)
        return mi_set_error(err, "%s: the %s path is too long", path, what);
    char real[sizeof ((mi_output *)0)->path];
    resolve(path, real, sizeof real);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) != 0)
        return mi_set_error(err, "%s: the %s is a symbolic link to nothing; give a file name", path, what);
    if (!strncmp(real, "/proc/", 6) || !strncmp(real, "/sys/", 5) || !strncmp(real, "/dev/", 5)) {
        char where[4096];
        mi_output_dir(real, where, sizeof where);
        return mi_set_error(err, "%s: the %s would be written into %s, which holds no ordinary files", path, what,
                            where);
    }
    int exists = stat(real, &st) == 0;
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
    /* a model is expensive to remake: only a model writer may replace one, even when it is no input */
    if (exists && strcmp(what, "model file") && is_hdf5(real))
        return mi_set_error(err, "%s is an HDF5 file (a model?); refusing to replace it with the %s", path, what);
    char dir[4096];
    mi_output_dir(real, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return mi_set_error(err, "%s: cannot write the %s: directory %s does not exist", path, what, dir);
    /* try it: access() says yes to root on a read-only mount or in /proc */
    char probe[sizeof ((mi_output *)0)->tmp + 16];
    snprintf(probe, sizeof probe, "%s.partial.%ld.probe", real, (long)getpid());
    int fd = create_new(probe);
    if (fd < 0)
        return mi_set_error(err, "%s: cannot write the %s: cannot create files in %s (%s)", path, what, dir,
                            strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

/* This host's name as it goes into a temporary name: letters, digits and '-' (others as '_'). */
static void host_tag(char *h, size_t n)
{
    if (gethostname(h, n) != 0)
        snprintf(h, n, "host");
    h[n - 1] = '\0';
    for (char *c = h; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-'))
            *c = '_';
}

/* Remove what earlier writers of `real` on this host left when they were
 * killed outright (SIGKILL, a crash: no handler ran): PATH.partial.HOST.PID
 * and PATH.partial.HOST.PID.K whose PID is no process here, regular files of
 * ours. A writer on another host (a shared folder) names its own host, and a
 * live process here keeps its file, so no write under way is touched. */
static void remove_stale(const char *real, const char *host)
{
    char dir[4096], prefix[512];
    mi_output_dir(real, dir, sizeof dir);
    const char *base = strrchr(real, '/');
    base = base ? base + 1 : real;
    int np = snprintf(prefix, sizeof prefix, "%s.partial.%s.", base, host);
    if (np <= 0 || (size_t)np >= sizeof prefix)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, (size_t)np))
            continue;
        char *end;
        long pid = strtol(e->d_name + np, &end, 10);
        if (end == e->d_name + np || pid <= 0 || (*end && *end != '.'))
            continue;
        for (const char *c = *end ? end + 1 : end; *c; c++)
            if (*c < '0' || *c > '9')
                pid = 0; /* not one of our names */
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char full[8192];
        struct stat st;
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= sizeof full ||
            lstat(full, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (unlink(full) == 0)
            fprintf(stderr, "note: removed %s, left by a writer that was killed (pid %ld)\n", full, pid);
    }
    closedir(d);
}

int mi_output_begin(mi_output *o, const char *path, char *err)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    char real[sizeof o->path];
    resolve(path, real, sizeof real);
    if ((size_t)snprintf(o->path, sizeof o->path, "%s", real) >= sizeof o->path)
        return mi_set_error(err, "%s: path too long", path);
    char host[64];
    host_tag(host, sizeof host);
    remove_stale(o->path, host);
    /* a fresh name each try: an existing file (or planted link) is never opened */
    for (int k = 0; k < 100; k++) {
        if ((size_t)snprintf(o->tmp, sizeof o->tmp, k ? "%s.partial.%s.%ld.%d" : "%s.partial.%s.%ld", o->path, host,
                             (long)getpid(), k) >= sizeof o->tmp)
            return mi_set_error(err, "%s: path too long", path);
        o->fd = create_new(o->tmp);
        if (o->fd >= 0 || errno != EEXIST)
            break;
    }
    if (o->fd < 0) {
        int e = errno;
        o->tmp[0] = '\0';
        return mi_set_error(err, "%s: cannot create it (%s)", path, strerror(e));
    }
    mi_temp_file_set(o->tmp);
    return 0;
}

FILE *mi_output_open(mi_output *o, const char *path, char *err)
{
    if (mi_output_begin(o, path, err))
        return NULL;
    o->f = fdopen(o->fd, "w");
    if (!o->f) {
        mi_set_error(err, "%s: cannot create it (%s)", path, strerror(errno));
        mi_output_abort(o);
        return NULL;
    }
    o->fd = -1; /* the stream owns it now */
    return o->f;
}

int mi_output_commit(mi_output *o, char *err)
{
    int bad = 0, e = 0;
    if (o->f) {
        bad = ferror(o->f) || fflush(o->f) != 0;
        /* EINVAL/EROFS: a file system without fsync; the rename still orders it */
        if (!bad && fsync(fileno(o->f)) != 0 && errno != EINVAL && errno != EROFS)
            bad = 1;
        e = errno;
        if (fclose(o->f) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        o->f = NULL;
    }
    if (o->fd >= 0) {
        close(o->fd);
        o->fd = -1;
    }
    /* the file keeps the mode the destination had (a read-only file stays
     * read-only); a new one gets the usual 0666 less the umask */
    struct stat st;
    mode_t mode;
    if (stat(o->path, &st) == 0) {
        mode = st.st_mode & 07777;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    if (!bad && chmod(o->tmp, mode) != 0) {
        bad = 1;
        e = errno;
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
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    if (o->tmp[0])
        unlink(o->tmp);
    o->tmp[0] = '\0';
    mi_temp_file_clear();
}

/* dir's real path and base into out[n] ("" when the directory does not resolve). */
static void canonical(const char *path, char *out, size_t n)
{
    char dir[4096], real[4096];
    mi_output_dir(path, dir, sizeof dir);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!realpath(dir, real)) {
        out[0] = 0;
        return;
    }
    snprintf(out, n, "%s/%s", real, base);
}

int mi_same_path(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ca[8300], cb[8300];
    canonical(a, ca, sizeof ca);
    canonical(b, cb, sizeof cb);
    return ca[0] && !strcmp(ca, cb);
}
