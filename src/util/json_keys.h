/* Key checking shared by the JSON readers of the plan module (cluster files,
 * plan files; internal header). */
#ifndef MESHINFER_JSON_KEYS_H
#define MESHINFER_JSON_KEYS_H

#include <cjson/cJSON.h>

/* Reject keys of obj that are not in allowed (NULL-terminated) and duplicate
 * keys, so a typo in a hand-written file is an error, not a silent default.
 * where: "" for the top level, else e.g. "devices[1]". Returns 0, or -1 with
 * "<prefix>: unknown key 'k' in <where>" (or "... at the top level") in err. */
int mi_json_check_keys(const cJSON *obj, const char *const *allowed, const char *prefix, const char *where,
                       char *err);

#endif
