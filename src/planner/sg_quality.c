/* CATS's pruning ratio within a perplexity budget: the
 * perplexities somegather measured at several ratios (a side file written by
 * jobs/experiments/somegather_quality.sh), and the largest ratio a budget allows. The
 * perplexity of a pruned somegather run depends on which columns each rank
 * keeps, so it is measured on the job's rank count, not predicted. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/planner.h"
#include "../util/json_keys.h"

int mi_sg_quality_load(const char *path, const mi_config *c, mi_sg_quality *q, char *err)
{
    memset(q, 0, sizeof *q);
    char prefix[4200];
    cJSON *root = mi_json_load(path, "somegather quality file", 1L << 20, prefix, sizeof prefix, err);
    if (!root)
        return -1;
    static const char *const top_keys[] = {"model", "n_layers", "dim", "ranks", "prune_mode", "text", "tokens",
                                           "points", NULL};
    static const char *const point_keys[] = {"r", "perplexity", NULL};
    int rc = -1;
    if (cJSON_IsObject(root) && mi_json_check_keys(root, top_keys, prefix, "", err))
        goto done;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(root, "n_layers");
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(root, "dim");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(root, "ranks");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(root, "prune_mode");
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(root, "points");
    if (!cJSON_IsObject(root) || !cJSON_IsString(name) || !cJSON_IsNumber(nl) || !cJSON_IsNumber(dim) ||
        !cJSON_IsNumber(ranks) || !cJSON_IsArray(pts)) {
        mi_set_error(err, "%s: not a somegather quality file (model, n_layers, dim, ranks and points are needed; "
                          "jobs/experiments/somegather_quality.sh writes one)", prefix);
        goto done;
    }
    if (strcmp(name->valuestring, c->name) || nl->valuedouble != c->n_layers || dim->valuedouble != c->dim) {
        mi_set_error(err, "%s is for %s (%g layers, dim %g) but the model is %s (%d layers, dim %d)", prefix,
                     name->valuestring, nl->valuedouble, dim->valuedouble, c->name, c->n_layers, c->dim);
        goto done;
    }
    if (!(ranks->valuedouble >= 1 && ranks->valuedouble <= MI_MAX_RANKS) || ranks->valuedouble != floor(ranks->valuedouble)) {
        mi_set_error(err, "%s: ranks must be a whole number in [1, %d]", prefix, MI_MAX_RANKS);
        goto done;
    }
    const cJSON *txt = cJSON_GetObjectItemCaseSensitive(root, "text"), *tok = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if ((txt && !cJSON_IsString(txt)) || (tok && !(cJSON_IsNumber(tok) && tok->valuedouble >= 0 && tok->valuedouble <= 1e15 &&
                                          tok->valuedouble == floor(tok->valuedouble)))) {
        mi_set_error(err, "%s: 'text' must be a string and 'tokens' a count (a whole number)", prefix);
        goto done;
    }
    if (mode && (!cJSON_IsString(mode) || strcmp(mode->valuestring, "aware"))) {
        mi_set_error(err, "%s: prune_mode must be \"aware\" (auto runs communication-aware pruning)", prefix);
        goto done;
    }
    int n = cJSON_GetArraySize(pts);
    if (n < 1 || n > MI_MAX_QUALITY_POINTS) {
        mi_set_error(err, "%s: %d points (1 to %d, the first at r = 0)", prefix, n, MI_MAX_QUALITY_POINTS);
        goto done;
    }
    int i = 0;
    for (const cJSON *e = pts->child; e; e = e->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "points[%d]", i);
        if (cJSON_IsObject(e) && mi_json_check_keys(e, point_keys, prefix, where, err))
            goto done;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "r");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "perplexity");
        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(p) || !(r->valuedouble >= 0 && r->valuedouble < 1) ||
            !(p->valuedouble >= 1 && p->valuedouble < 1e30)) {
            mi_set_error(err, "%s: points[%d] must be {\"r\": x, \"perplexity\": p} with x in [0, 1) and p a finite "
                              "perplexity (at least 1)", prefix, i);
            goto done;
        }
        if ((i == 0 && r->valuedouble != 0) || (i > 0 && !(r->valuedouble > q->r[i - 1]))) {
            mi_set_error(err, "%s: points must ascend in r from r = 0 (points[%d] has r = %g)", prefix, i,
                         r->valuedouble);
            goto done;
        }
        q->r[i] = r->valuedouble;
        q->perplexity[i] = p->valuedouble;
    }
    q->n = n;
    q->ranks = (int)ranks->valuedouble;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

double mi_sg_quality_best(const mi_sg_quality *q, double budget, double *ppl)
{
    int best = 0;
    for (int i = 1; i < q->n; i++)
        if (q->perplexity[i] <= (1 + budget) * q->perplexity[0])
            best = i; /* the largest r within the budget, even past a worse point (noise) */
    if (ppl)
        *ppl = q->n ? q->perplexity[best] : 0;
    return q->n ? q->r[best] : 0;
}
