/* Parsing and key checking shared by the JSON readers of the plan module
 * (cluster files, plan files, importance files; internal header). */
#ifndef MESHINFER_JSON_KEYS_H
#define MESHINFER_JSON_KEYS_H

#include <cjson/cJSON.h>

/* Reject keys of obj that are not in allowed (NULL-terminated) and duplicate
 * keys, so a typo in a hand-written file is an error, not a silent default.
 * where: "" for the top level, else e.g. "devices[1]". Returns 0, or -1 with
 * "<prefix>: unknown key 'k' in <where>" (or "... at the top level") in err. */
int mi_json_check_keys(const cJSON *obj, const char *const *allowed, const char *prefix, const char *where,
                       char *err);

/* Parse len bytes of json strictly (nothing but white space may follow the
 * value). Returns the tree (cJSON_Delete it), or NULL with "<prefix>: JSON
 * syntax error at byte B (line L, column C)" in err. */
cJSON *mi_json_parse(const char *json, size_t len, const char *prefix, char *err);

/* Read the JSON file path (a `what`, e.g. "plan file", of at most max_bytes)
 * and parse it strictly: the one prologue of every side-file reader. prefix
 * (prefix_n bytes) receives "<what> <path>", which the caller's own errors
 * start with too. Returns the tree (cJSON_Delete it), or NULL with one line
 * in err (unreadable, too large, a syntax error and its position). */
cJSON *mi_json_load(const char *path, const char *what, size_t max_bytes, char *prefix, size_t prefix_n, char *err);

#endif
