/* Key checking of the plan module's JSON readers (see json_keys.h). */
#include "json_keys.h"

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
