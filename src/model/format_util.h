/* Internal to src/model/: what the GGUF and safetensors readers share. A
 * read-only map of a whole file, a hash table of names (tensor names,
 * metadata keys) for O(1) look-ups and duplicate checks, and quoting of names
 * taken from hostile files for error messages (one line, bounded length). */
#ifndef MESHINFER_FORMAT_UTIL_H
#define MESHINFER_FORMAT_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name; /* not owned; NULL marks an empty slot */
    size_t len;
    size_t idx;
} nt_slot;

typedef struct {
    nt_slot *slot;
    size_t mask; /* capacity - 1, a power of two minus one */
} nt_table;

/* Room for n names (the table never grows). 0, or -1 when out of memory. */
int nt_init(nt_table *t, size_t n);
void nt_free(nt_table *t);
/* Insert name[len] as entry idx. Returns idx, or the entry of an earlier
 * equal name (which stays). The name must outlive the table. */
size_t nt_insert(nt_table *t, const char *name, size_t len, size_t idx);
/* The entry of name[len], or SIZE_MAX when absent. */
size_t nt_find(const nt_table *t, const char *name, size_t len);

/* buf[n] = name[len] fit for a one-line message: bytes outside printable
 * ASCII become '?', and a long name is cut to its first 60 bytes + "...".
 * Returns buf. */
const char *nt_quote(char *buf, size_t n, const char *name, size_t len);
#define NT_QUOTE_LEN 72

/* a * b into *out; 0, or -1 when it overflows 64 bits. */
int nt_mul_u64(uint64_t a, uint64_t b, uint64_t *out);

/* A tensor's bytes: [offset, offset + size) in one file or section. */
typedef struct {
    uint64_t offset, size;
    size_t idx;
} fu_span;
/* 1 when two spans of s[n] overlap (empty spans overlap nothing), with
 * their idx in *a and *b (a's offset <= b's); 0 when none do. Sorts s. */
int fu_overlap(fu_span *s, size_t n, size_t *a, size_t *b);

/* Map the regular file at path read-only (what names its role in messages:
 * "GGUF file", "safetensors file"). An empty file gives *map NULL and *size 0.
 * 0, or -1 with one line in err. Unmap with fu_unmap. */
int fu_map_file(const char *path, const char *what, const unsigned char **map, uint64_t *size, char *err);
void fu_unmap(const unsigned char *map, uint64_t size);

#endif
