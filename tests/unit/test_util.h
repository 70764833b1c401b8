/* Helpers the CUnit programs share: a scratch directory per program, paths in
 * it, and checks on what a write left behind (the ".partial.<pid>" temporaries
 * that every writer renames into place). Test code only. */
#ifndef MESHINFER_TEST_UTIL_H
#define MESHINFER_TEST_UTIL_H

#include <stddef.h>

/* Create $TMPDIR/<prog>.XXXXXX (or under /tmp) into dir[n]; 0 or -1. */
int tu_make_scratch(char *dir, size_t n, const char *prog);

/* buf = dir/name. */
void tu_path(char *buf, size_t n, const char *dir, const char *name);

int tu_file_exists(const char *path);

/* 1 if any entry of dir contains ".partial." in its name. */
int tu_dir_has_partial(const char *dir);

/* Remove dir and everything below it; 0 or -1. */
int tu_rm_tree(const char *dir);

/* Write text to path; 0 or -1. */
int tu_write_text(const char *path, const char *text);

#endif
