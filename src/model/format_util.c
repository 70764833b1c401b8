/* File maps, a hash table of names and quoting for messages (see format_util.h). */
#define _POSIX_C_SOURCE 200809L
#include "format_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshinfer/common.h"

/* FNV-1a: short names, no need for anything stronger (the table is sized
 * for at most half full, and a colliding hostile file costs only time
 * proportional to its own size). */
static uint64_t hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

int nt_init(nt_table *t, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) {
        if (cap > SIZE_MAX / 4 / sizeof(nt_slot))
            return -1;
        cap *= 2;
    }
    t->slot = calloc(cap, sizeof *t->slot);
    t->mask = cap - 1;
    return t->slot ? 0 : -1;
}

void nt_free(nt_table *t)
{
    free(t->slot);
    t->slot = NULL;
}

static size_t probe(const nt_table *t, const char *name, size_t len)
{
    size_t i = (size_t)hash(name, len) & t->mask;
    while (t->slot[i].name && !(t->slot[i].len == len && !memcmp(t->slot[i].name, name, len)))
        i = (i + 1) & t->mask;
    return i;
}

size_t nt_insert(nt_table *t, const char *name, size_t len, size_t idx)
{
    nt_slot *s = &t->slot[probe(t, name, len)];
    if (s->name)
        return s->idx;
    s->name = name;
    s->len = len;
    s->idx = idx;
    return idx;
}

size_t nt_find(const nt_table *t, const char *name, size_t len)
{
    if (!t->slot)
        return SIZE_MAX;
    const nt_slot *s = &t->slot[probe(t, name, len)];
    return s->name ? s->idx : SIZE_MAX;
}

const char *nt_quote(char *buf, size_t n, const char *name, size_t len)
{
    size_t keep = len > 60 ? 60 : len, o = 0;
    for (size_t i = 0; i < keep && o + 1 < n; i++) {
        unsigned char c = (unsigned char)name[i];
        buf[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (keep < len)
        for (int i = 0; i < 3 && o + 1 < n; i++)
            buf[o++] = '.';
    if (n)
        buf[o] = '\0';
    return buf;
}

int nt_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

int fu_map_file(const char *path, const char *what, const unsigned char **map, uint64_t *size, char *err)
{
    *map = NULL;
    *size = 0;
    if (mi_check_input_file(path, what, err))
        return -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return mi_set_error(err, "%s: cannot open %s (%s)", path, what, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mi_set_error(err, "%s: %s is not a regular file", path, what);
    }
    if (st.st_size == 0) {
        close(fd);
        return 0;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return mi_set_error(err, "%s: cannot map %s (%s)", path, what, strerror(e));
    *map = m;
    *size = (uint64_t)st.st_size;
    return 0;
}

void fu_unmap(const unsigned char *map, uint64_t size)
{
    if (map)
        munmap((void *)map, (size_t)size);
}

static int by_offset(const void *a, const void *b)
{
    const fu_span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

int fu_overlap(fu_span *s, size_t n, size_t *a, size_t *b)
{
    qsort(s, n, sizeof *s, by_offset);
    const fu_span *last = NULL; /* sorted by start: only the furthest end so far can overlap the next */
    for (size_t k = 0; k < n; k++) {
        if (!s[k].size)
            continue;
        if (last && s[k].offset < last->offset + last->size) {
            *a = last->idx;
            *b = s[k].idx;
            return 1;
        }
        if (!last || s[k].offset + s[k].size > last->offset + last->size)
            last = &s[k];
    }
    return 0;
}
