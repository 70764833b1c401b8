/* Key checking of the plan module's JSON readers (see json_keys.h). */
#include "json_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

int mi_json_check_keys(const cJSON *obj, const char *const *allowed, const char *prefix, const char *where,
                       char *err)
{
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], k) == 0)
                ok = 1;
        if (!ok)
            return mi_set_error(err, "%s: unknown key '%s'%s%s", prefix, k, *where ? " in " : " at the top level",
                                where);
        for (const cJSON *p = obj->child; p != it; p = p->next)
            if (p->string && strcmp(p->string, k) == 0)
                return mi_set_error(err, "%s: duplicate key '%s'%s%s", prefix, k,
                                    *where ? " in " : " at the top level", where);
    }
    return 0;
}

static void line_col(const char *text, size_t pos, int *line, int *col)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && text[i]; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

cJSON *mi_json_parse(const char *json, size_t len, const char *prefix, char *err)
{
    const char *end = NULL;
    /* len + 1: cJSON counts the terminating NUL when it must check for
     * trailing garbage (require_null_terminated). */
    cJSON *root = cJSON_ParseWithLengthOpts(json, len + 1, &end, 1);
    if (!root) {
        size_t pos = end && end >= json ? (size_t)(end - json) : 0;
        int line, col;
        line_col(json, pos, &line, &col);
        /* cJSON stops at CJSON_NESTING_LIMIT open arrays and objects: say so, not "syntax" */
        long depth = 0;
        int in_str = 0;
        for (size_t i = 0; i < pos && i < len; i++) {
            const char ch = json[i];
            if (in_str) {
                if (ch == '\\')
                    i++; /* the escaped character, a quote included */
                else if (ch == '"')
                    in_str = 0;
            } else if (ch == '"') {
                in_str = 1;
            } else if (ch == '[' || ch == '{') {
                depth++;
            } else if (ch == ']' || ch == '}') {
                depth--;
            }
        }
        if (depth >= CJSON_NESTING_LIMIT)
            mi_set_error(err, "%s: JSON nested deeper than %d arrays and objects at byte %zu (line %d, column %d)",
                         prefix, CJSON_NESTING_LIMIT, pos, line, col);
        else
            mi_set_error(err, "%s: JSON syntax error at byte %zu (line %d, column %d)", prefix, pos, line, col);
    }
    return root;
}

cJSON *mi_json_load(const char *path, const char *what, size_t max_bytes, char *prefix, size_t prefix_n, char *err)
{
    size_t len = 0;
    char *text = mi_read_text_file(path, what, max_bytes, &len, err);
    if (!text)
        return NULL;
    snprintf(prefix, prefix_n, "%s %s", what, path);
    cJSON *root = mi_json_parse(text, len, prefix, err);
    free(text);
    return root;
}
