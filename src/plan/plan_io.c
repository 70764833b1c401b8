/* Placement plans as JSON files (see plan.h), read and written with cJSON.
 *
 *   {
 *     "planner": "greedy",
 *     "n_ranks": 5,
 *     "controller_works": false,
 *     "kv_positions": 2048,
 *     "wire_dtype": "fp32",
 *     "model": {"n_layers": 22, "n_kv_heads": 4, "hidden_dim": 5632, "vocab_size": 32000},
 *     "layers": [
 *       {"kv_rank": [1, 2, 3, 4], "proj_rank": 1, "ffn": [[2, 0, 5632]]},
 *       ...                                       one entry per layer
 *     ],
 *     "classifier": [[0, 0, 32000]]
 *   }
 *
 * ffn and classifier entries are [rank, start, count] slices (a mixture of
 * experts' ffn slices count experts of n_experts: expert parallelism; the
 * slice starting at 0 holds the shared expert too). On loading,
 * every key is checked (unknown keys are rejected so typos are caught; an
 * optional "description" string is the one free-form key), the model block
 * must match the model, each value must be an integer in range, and the
 * assembled plan must pass mi_plan_validate (coverage, one slice per rank...).
 * The layout must be the named planner's kind (layerwise: each layer whole on
 * one rank; roundrobin, random, greedy: projection and a dense FFN whole on one rank;
 * tp: projection split with the heads) and leave rank 0 without layer shards
 * when "controller_works" is false.
 * "controller_works" (default false), "kv_positions" (the KV-cache positions
 * the memory budgets hold; default the model's context) and "wire_dtype" (of
 * activation messages: fp32, fp16 or q8_0; default fp32) are optional;
 * everything else is required.
 *
 * Saving writes PATH.partial.<host>.<pid> (output.h) and renames it over PATH, so readers never
 * see a half-written plan; the temporary file is removed on failure. Save
 * does not validate: it writes what it is given, and load checks it. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/plan.h"

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "../util/json_keys.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FILE_BYTES (256L << 20)

/* --------------------------------------------------------------- save */

static cJSON *slices_json(const mi_slice *s, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++) {
        int t[3] = {s[i].rank, s[i].v0, s[i].n};
        cJSON *triple = cJSON_CreateIntArray(t, 3);
        if (!triple || !cJSON_AddItemToArray(arr, triple)) {
            cJSON_Delete(triple);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* CATS: the residual columns of each rank, the pruning and its send
 * lists (one entry per layer, exchange and rank: the columns it sends). */
static int somegather_json(cJSON *doc, const mi_plan *plan)
{
    const mi_config *c = &plan->cfg;
    cJSON *sg = cJSON_AddObjectToObject(doc, "somegather");
    cJSON *cols = sg ? slices_json(plan->cols, plan->n_cols) : NULL;
    if (!cols || !cJSON_AddItemToObject(sg, "columns", cols)) {
        cJSON_Delete(cols);
        return 0;
    }
    cJSON *pr = cJSON_AddObjectToObject(sg, "prune");
    if (!pr || !cJSON_AddStringToObject(pr, "mode", plan->prune_mode == MI_PRUNE_MAGNITUDE ? "magnitude" : "aware"))
        return 0;
    cJSON *ratio = cJSON_AddObjectToObject(pr, "ratio");
    for (int x = 0; ratio && x < MI_N_PRUNED_XCH; x++)
        if (!cJSON_AddNumberToObject(ratio, mi_xch_name(x), plan->prune[x]))
            return 0;
    if (!ratio)
        return 0;
    if (!plan->keep)
        return 1;
    cJSON *send = cJSON_AddArrayToObject(sg, "send");
    for (int l = 0; send && l < c->n_layers; l++)
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            for (int r = 0; r < plan->n_ranks; r++) {
                const mi_keep *k = mi_plan_keep(plan, l, x, r);
                cJSON *e = cJSON_CreateObject();
                cJSON *list = cJSON_CreateIntArray(k->cols, k->n);
                int ok = e && list && cJSON_AddItemToArray(send, e) && cJSON_AddNumberToObject(e, "layer", l) &&
                         cJSON_AddStringToObject(e, "exchange", mi_xch_name(x)) &&
                         cJSON_AddNumberToObject(e, "rank", r) && cJSON_AddItemToObject(e, "columns", list);
                if (!ok) {
                    cJSON_Delete(list);
                    return 0;
                }
            }
    return send != NULL;
}

/* A layer's placement into lj: "kv_rank", "proj_rank" and "ffn" slices, as
 * plan files and the placement JSON write them. 1, or 0 when out of memory. */
static int layer_json(cJSON *lj, const mi_layer_plan *lp, const mi_config *c)
{
    cJSON *kv = cJSON_CreateIntArray(lp->kv_rank, c->n_kv_heads);
    if (!kv || !cJSON_AddItemToObject(lj, "kv_rank", kv)) {
        cJSON_Delete(kv);
        return 0;
    }
    if (!cJSON_AddNumberToObject(lj, "proj_rank", lp->proj_rank))
        return 0;
    cJSON *ffn = slices_json(lp->ffn, lp->n_ffn);
    if (!ffn || !cJSON_AddItemToObject(lj, "ffn", ffn)) {
        cJSON_Delete(ffn);
        return 0;
    }
    return 1;
}

static cJSON *plan_json(const mi_plan *plan, const char *planner_name)
{
    const mi_config *c = &plan->cfg;
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return NULL;
    int ok = cJSON_AddStringToObject(doc, "planner", planner_name) != NULL &&
             cJSON_AddNumberToObject(doc, "n_ranks", plan->n_ranks) != NULL &&
             cJSON_AddBoolToObject(doc, "controller_works", plan->controller_works != 0) != NULL &&
             cJSON_AddNumberToObject(doc, "kv_positions", plan->kv_positions > 0 ? plan->kv_positions : c->seq_len) != NULL &&
             cJSON_AddStringToObject(doc, "wire_dtype", mi_dtype_name(plan->wire)) != NULL;
    cJSON *model = ok ? cJSON_AddObjectToObject(doc, "model") : NULL;
    ok = model && cJSON_AddNumberToObject(model, "dim", c->dim) &&
         cJSON_AddNumberToObject(model, "n_layers", c->n_layers) &&
         cJSON_AddNumberToObject(model, "n_kv_heads", c->n_kv_heads) &&
         cJSON_AddNumberToObject(model, "hidden_dim", c->hidden_dim) &&
         cJSON_AddNumberToObject(model, "vocab_size", c->vocab_size);
    cJSON *layers = ok ? cJSON_AddArrayToObject(doc, "layers") : NULL;
    ok = layers != NULL;
    for (int l = 0; ok && l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        cJSON *lj = cJSON_CreateObject();
        ok = lj && cJSON_AddItemToArray(layers, lj);
        if (!ok) {
            cJSON_Delete(lj);
            break;
        }
        ok = layer_json(lj, lp, c);
    }
    cJSON *cls = ok ? slices_json(plan->cls, plan->n_cls) : NULL;
    ok = cls && cJSON_AddItemToObject(doc, "classifier", cls);
    if (!ok)
        cJSON_Delete(cls);
    if (ok && plan->split_vocab) /* only when set: files of unsplit plans stay as they were */
        ok = cJSON_AddBoolToObject(doc, "split_vocab", 1) != NULL;
    if (!ok) {
        cJSON_Delete(doc);
        return NULL;
    }
    if (plan->n_cols > 0 && !somegather_json(doc, plan)) {
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

/* Print one value compactly; 0 or -1 (out of memory / write error). */
static int put_value(FILE *f, const cJSON *v)
{
    char *s = cJSON_PrintUnformatted(v);
    if (!s)
        return -1;
    int r = fputs(s, f) < 0 ? -1 : 0;
    cJSON_free(s);
    return r;
}

/* Write doc as an object with one key per line and one layer per line, so
 * plans stay readable and easy to edit by hand. */
static int write_doc(FILE *f, const cJSON *doc)
{
    if (fputs("{\n", f) < 0)
        return -1;
    for (const cJSON *it = doc->child; it; it = it->next) {
        if (fprintf(f, "  \"%s\": ", it->string) < 0)
            return -1;
        if (strcmp(it->string, "somegather") == 0) {
            /* the send lists one per line, the rest compact */
            if (fputs("{\n", f) < 0)
                return -1;
            for (const cJSON *k = it->child; k; k = k->next) {
                if (fprintf(f, "    \"%s\": ", k->string) < 0)
                    return -1;
                if (strcmp(k->string, "send") == 0) {
                    if (fputs("[\n", f) < 0)
                        return -1;
                    for (const cJSON *e = k->child; e; e = e->next)
                        if (fputs("      ", f) < 0 || put_value(f, e) || fputs(e->next ? ",\n" : "\n", f) < 0)
                            return -1;
                    if (fputs("    ]", f) < 0)
                        return -1;
                } else if (put_value(f, k)) {
                    return -1;
                }
                if (fputs(k->next ? ",\n" : "\n", f) < 0)
                    return -1;
            }
            if (fputs("  }", f) < 0)
                return -1;
        } else if (strcmp(it->string, "layers") == 0) {
            if (fputs("[\n", f) < 0)
                return -1;
            for (const cJSON *l = it->child; l; l = l->next) {
                if (fputs("    ", f) < 0 || put_value(f, l) || fputs(l->next ? ",\n" : "\n", f) < 0)
                    return -1;
            }
            if (fputs("  ]", f) < 0)
                return -1;
        } else if (put_value(f, it)) {
            return -1;
        }
        if (fputs(it->next ? ",\n" : "\n", f) < 0)
            return -1;
    }
    return fputs("}\n", f) < 0 ? -1 : 0;
}

int mi_plan_save_json(const mi_plan *plan, const char *path, char *err)
{
    const mi_config *c = &plan->cfg;
    if (c->n_layers < 1 || !plan->layers || c->n_kv_heads < 1 || c->n_kv_heads > MI_MAX_KV_HEADS ||
        plan->n_cls < 0 || (plan->n_cls > 0 && !plan->cls))
        return mi_set_error(err, "%s: cannot save an empty or malformed plan", path);
    for (int l = 0; l < c->n_layers; l++)
        if (plan->layers[l].n_ffn < 0 || (plan->layers[l].n_ffn > 0 && !plan->layers[l].ffn))
            return mi_set_error(err, "%s: cannot save a plan with malformed FFN slices in layer %d", path, l);
    const char *pname = mi_planner_name(plan->planner);
    mi_planner back;
    if (!pname || mi_planner_parse(pname, &back) != 0 || back != plan->planner)
        return mi_set_error(err, "%s: cannot save a plan with unknown planner %d", path, (int)plan->planner);

    cJSON *doc = plan_json(plan, pname);
    if (!doc)
        return mi_set_error(err, "%s: out of memory building the plan JSON", path);

    mi_output out;
    FILE *f = mi_output_open(&out, path, err);
    if (!f) {
        cJSON_Delete(doc);
        return -1;
    }
    int bad = write_doc(f, doc);
    cJSON_Delete(doc);
    if (bad) {
        mi_output_abort(&out);
        return mi_set_error(err, "cannot write plan file %s", path);
    }
    return mi_output_commit(&out, err);
}

/* The placement alone, one compact object: what plan --json and generate's
 * metrics print, so that the two can be compared key for key. Uses the plan
 * file's shapes (kv_rank, proj_rank, [rank, v0, n] slices) without the
 * somegather send lists, which run to thousands of columns. */
int mi_plan_placement_json(const mi_plan *plan, FILE *f)
{
    const mi_config *c = &plan->cfg;
    cJSON *doc = cJSON_CreateObject(), *layers = doc ? cJSON_AddArrayToObject(doc, "layers") : NULL;
    int ok = layers != NULL;
    for (int l = 0; ok && l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        cJSON *lj = cJSON_CreateObject();
        ok = lj && cJSON_AddItemToArray(layers, lj);
        if (!ok) {
            cJSON_Delete(lj);
            break;
        }
        ok = cJSON_AddNumberToObject(lj, "layer", l) && layer_json(lj, lp, c) &&
             cJSON_AddBoolToObject(lj, "speculate", lp->speculate != 0);
    }
    cJSON *cls = ok ? slices_json(plan->cls, plan->n_cls) : NULL;
    ok = cls && cJSON_AddItemToObject(doc, "classifier", cls);
    if (!ok)
        cJSON_Delete(cls);
    /* the embeddings' rows: a split vocabulary's are the classifier's; whole on rank 0 otherwise */
    mi_slice whole = {0, 0, c->vocab_size};
    cJSON *emb = ok ? plan->split_vocab ? slices_json(plan->cls, plan->n_cls)
                                        : slices_json(&whole, plan->n_cols > 0 ? 0 : 1)
                    : NULL;
    ok = emb && cJSON_AddItemToObject(doc, "embedding_rows", emb);
    if (!ok)
        cJSON_Delete(emb);
    cJSON *cols = ok ? slices_json(plan->cols, plan->n_cols) : NULL;
    ok = cols && cJSON_AddItemToObject(doc, "columns", cols);
    if (!ok)
        cJSON_Delete(cols);
    int rc = ok ? put_value(f, doc) : -1;
    cJSON_Delete(doc);
    return rc;
}

/* --------------------------------------------------------------- load */


/* 1 when v is a JSON number holding an integer that fits an int. */
static int as_int(const cJSON *v, int *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < INT_MIN || d > INT_MAX)
        return 0;
    *out = (int)d;
    return 1;
}

/* Parse an array of [rank, start, count] triples (what: "layers[3].ffn" or
 * "classifier") over [0, total) into a malloc'ed array. */
static int parse_slices(const cJSON *arr, const char *what, const char *unit, int total, int n_ranks,
                        mi_slice **out, int *n_out, const char *prefix, char *err)
{
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    if (n <= 0)
        return mi_set_error(err, "%s: '%s' must be a non-empty list of [rank, start, count] triples", prefix, what);
    if (n > total)
        return mi_set_error(err, "%s: '%s' has %d slices but there are only %d %s", prefix, what, n, total, unit);
    mi_slice *s = mi_malloc((size_t)n * sizeof *s, "plan slices");
    int i = 0;
    for (const cJSON *t = arr->child; t; t = t->next, i++) {
        int v[3];
        if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != 3 || !as_int(cJSON_GetArrayItem(t, 0), &v[0]) ||
            !as_int(cJSON_GetArrayItem(t, 1), &v[1]) || !as_int(cJSON_GetArrayItem(t, 2), &v[2])) {
            free(s);
            return mi_set_error(err, "%s: %s[%d] must be a [rank, start, count] triple of integers", prefix, what,
                                i);
        }
        if (v[0] < 0 || v[0] >= n_ranks) {
            free(s);
            return mi_set_error(err, "%s: %s[%d] has rank %d outside 0..%d (n_ranks %d)", prefix, what, i, v[0],
                                n_ranks - 1, n_ranks);
        }
        if (v[1] < 0 || v[2] < 1 || (long long)v[1] + v[2] > total) {
            free(s);
            return mi_set_error(err, "%s: %s[%d] = [%d, %d, %d] is not a non-empty range within %d %s", prefix,
                                what, i, v[0], v[1], v[2], total, unit);
        }
        s[i] = (mi_slice){.rank = v[0], .v0 = v[1], .n = v[2]};
    }
    *out = s;
    *n_out = n;
    return 0;
}

static int model_int(const cJSON *model, const char *key, int *out, const char *prefix, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, key);
    if (!v)
        return mi_set_error(err, "%s: model.%s is missing", prefix, key);
    if (!as_int(v, out))
        return mi_set_error(err, "%s: model.%s must be an integer", prefix, key);
    return 0;
}

static int as_ratio(const cJSON *v, double *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return 0;
    *out = v->valuedouble;
    return 1;
}

/* The "somegather" block: columns [[rank, c0, n], ...], prune {mode,
 * ratio {exchange: r}}, and optionally send [{layer, exchange, rank,
 * columns}] (an entry left out: that rank sends every column it owns). The
 * lists are checked against what each rank owns once the whole plan is known
 * (mi_plan_validate). */
static int parse_somegather(const cJSON *sg, const mi_config *c, mi_plan *plan, const char *prefix, char *err)
{
    static const char *const sg_keys[] = {"columns", "prune", "send", NULL};
    static const char *const prune_keys[] = {"mode", "ratio", NULL};
    static const char *const send_keys[] = {"layer", "exchange", "rank", "columns", NULL};
    if (!cJSON_IsObject(sg))
        return mi_set_error(err, "%s: 'somegather' must be an object with columns, prune and send", prefix);
    if (mi_json_check_keys(sg, sg_keys, prefix, "somegather", err))
        return -1;
    if (parse_slices(cJSON_GetObjectItemCaseSensitive(sg, "columns"), "somegather.columns", "residual columns (dim)",
                     c->dim, plan->n_ranks, &plan->cols, &plan->n_cols, prefix, err))
        return -1;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(sg, "prune");
    if (pr) {
        if (!cJSON_IsObject(pr) || mi_json_check_keys(pr, prune_keys, prefix, "somegather.prune", err))
            return cJSON_IsObject(pr) ? -1 : mi_set_error(err, "%s: somegather.prune must be an object", prefix);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(pr, "mode");
        if (m && (!cJSON_IsString(m) || (strcmp(m->valuestring, "aware") && strcmp(m->valuestring, "magnitude"))))
            return mi_set_error(err, "%s: somegather.prune.mode must be \"aware\" or \"magnitude\"", prefix);
        plan->prune_mode = m && !strcmp(m->valuestring, "magnitude") ? MI_PRUNE_MAGNITUDE : MI_PRUNE_AWARE;
        const cJSON *ra = cJSON_GetObjectItemCaseSensitive(pr, "ratio");
        if (ra && !cJSON_IsObject(ra))
            return mi_set_error(err, "%s: somegather.prune.ratio must be an object {exchange: ratio}", prefix);
        for (const cJSON *e = ra ? ra->child : NULL; e; e = e->next) {
            int x = mi_xch_parse(e->string);
            if (x < 0 || x >= MI_N_PRUNED_XCH)
                return mi_set_error(err, "%s: somegather.prune.ratio has unknown exchange '%s' (attn_in, heads, "
                                         "ffn_in, hidden)", prefix, e->string);
            if (!as_ratio(e, &plan->prune[x]) || plan->prune[x] < 0 || plan->prune[x] >= 1)
                return mi_set_error(err, "%s: somegather.prune.ratio.%s must be a number in [0, 1)", prefix,
                                    e->string);
        }
    }
    const cJSON *send = cJSON_GetObjectItemCaseSensitive(sg, "send");
    if (!send)
        return 0;
    if (!cJSON_IsArray(send))
        return mi_set_error(err, "%s: somegather.send must be a list of {layer, exchange, rank, columns}", prefix);
    size_t nk = (size_t)c->n_layers * MI_N_PRUNED_XCH * (size_t)plan->n_ranks;
    plan->keep = mi_calloc(nk, sizeof(mi_keep), "send lists");
    unsigned char *seen = mi_calloc(nk, 1, "send lists");
    int i = 0, rc = 0;
    for (const cJSON *e = send->child; e && !rc; e = e->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "somegather.send[%d]", i);
        int l, r;
        const cJSON *xj = cJSON_GetObjectItemCaseSensitive(e, "exchange");
        const cJSON *cols = cJSON_GetObjectItemCaseSensitive(e, "columns");
        int x = cJSON_IsString(xj) ? mi_xch_parse(xj->valuestring) : -1;
        if (!cJSON_IsObject(e) || mi_json_check_keys(e, send_keys, prefix, where, err)) {
            rc = cJSON_IsObject(e) ? -1 : mi_set_error(err, "%s: %s must be an object", prefix, where);
        } else if (!as_int(cJSON_GetObjectItemCaseSensitive(e, "layer"), &l) || l < 0 || l >= c->n_layers) {
            rc = mi_set_error(err, "%s: %s.layer must be a layer of the model (0..%d)", prefix, where,
                              c->n_layers - 1);
        } else if (x < 0 || x >= MI_N_PRUNED_XCH) {
            rc = mi_set_error(err, "%s: %s.exchange must be attn_in, heads, ffn_in or hidden", prefix, where);
        } else if (!as_int(cJSON_GetObjectItemCaseSensitive(e, "rank"), &r) || r < 0 || r >= plan->n_ranks) {
            rc = mi_set_error(err, "%s: %s.rank must be a rank (0..%d)", prefix, where, plan->n_ranks - 1);
        } else if (!cJSON_IsArray(cols)) {
            rc = mi_set_error(err, "%s: %s.columns must be a list of column indices", prefix, where);
        } else {
            size_t k = ((size_t)l * MI_N_PRUNED_XCH + (size_t)x) * (size_t)plan->n_ranks + (size_t)r;
            if (seen[k]++) {
                rc = mi_set_error(err, "%s: %s repeats layer %d exchange %s rank %d", prefix, where, l,
                                  mi_xch_name(x), r);
                break;
            }
            int n = cJSON_GetArraySize(cols), j = 0;
            plan->keep[k].cols = mi_malloc((size_t)(n ? n : 1) * sizeof(int), "send list");
            plan->keep[k].n = n;
            for (const cJSON *v = cols->child; v && !rc; v = v->next, j++)
                if (!as_int(v, &plan->keep[k].cols[j]))
                    rc = mi_set_error(err, "%s: %s.columns[%d] must be an integer column", prefix, where, j);
        }
    }
    /* a rank without an entry sends every column it owns (checked once the plan is whole) */
    for (size_t k = 0; k < nk && !rc; k++)
        if (!seen[k])
            plan->keep[k].n = -1;
    free(seen);
    return rc;
}

static int build_plan(const cJSON *root, const mi_config *c, mi_plan *plan, const char *prefix, char *err)
{
    static const char *const top_keys[] = {"description", "planner", "n_ranks", "controller_works",
                                           "kv_positions", "wire_dtype", "model", "layers", "classifier",
                                           "split_vocab", "somegather", NULL};
    static const char *const model_keys[] = {"dim", "n_layers", "n_kv_heads", "hidden_dim", "vocab_size", NULL};
    static const char *const layer_keys[] = {"kv_rank", "proj_rank", "ffn", NULL};

    if (!cJSON_IsObject(root))
        return mi_set_error(err, "%s: the top level must be a JSON object", prefix);
    if (mi_json_check_keys(root, top_keys, prefix, "", err))
        return -1;

    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (desc && !cJSON_IsString(desc))
        return mi_set_error(err, "%s: 'description' must be a string", prefix);

    /* planner */
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(root, "planner");
    if (!pj)
        return mi_set_error(err, "%s: 'planner' is missing", prefix);
    if (!cJSON_IsString(pj) || mi_planner_parse(pj->valuestring, &plan->planner) != 0) {
        char names[160] = "";
        for (int i = 0; i < MI_N_PLANNERS; i++) /* from the planners' own table: never a stale list */
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     mi_planner_name((mi_planner)i));
        return mi_set_error(err, "%s: 'planner' must be one of %s", prefix, names);
    }

    /* n_ranks, controller_works */
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(root, "n_ranks");
    if (!nr)
        return mi_set_error(err, "%s: 'n_ranks' is missing", prefix);
    if (!as_int(nr, &plan->n_ranks) || plan->n_ranks < 1 || plan->n_ranks > MI_MAX_RANKS)
        return mi_set_error(err, "%s: 'n_ranks' must be an integer in 1..%d", prefix, MI_MAX_RANKS);
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(root, "controller_works");
    if (cw && !cJSON_IsBool(cw))
        return mi_set_error(err, "%s: 'controller_works' must be true or false", prefix);
    plan->controller_works = cw ? cJSON_IsTrue(cw) : 0;
    const cJSON *kp = cJSON_GetObjectItemCaseSensitive(root, "kv_positions");
    plan->kv_positions = c->seq_len;
    if (kp && (!as_int(kp, &plan->kv_positions) || plan->kv_positions < 1 || plan->kv_positions > c->seq_len))
        return mi_set_error(err, "%s: 'kv_positions' must be an integer in 1..%d (the model's context)", prefix,
                            c->seq_len);
    const cJSON *wd = cJSON_GetObjectItemCaseSensitive(root, "wire_dtype");
    mi_dtype wire = MI_F32;
    if (wd && (!cJSON_IsString(wd) || mi_dtype_parse(wd->valuestring, &wire) != 0 ||
               (wire != MI_F32 && wire != MI_F16 && wire != MI_Q8_0)))
        return mi_set_error(err, "%s: 'wire_dtype' must be \"fp32\", \"fp16\" or \"q8_0\"", prefix);
    plan->wire = wire;

    /* model block */
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model)
        return mi_set_error(err, "%s: 'model' is missing", prefix);
    if (!cJSON_IsObject(model))
        return mi_set_error(err, "%s: 'model' must be an object with n_layers, n_kv_heads, hidden_dim, vocab_size",
                            prefix);
    if (mi_json_check_keys(model, model_keys, prefix, "model", err))
        return -1;
    int nl, nkv, hd, vs;
    if (model_int(model, "n_layers", &nl, prefix, err) || model_int(model, "n_kv_heads", &nkv, prefix, err) ||
        model_int(model, "hidden_dim", &hd, prefix, err) || model_int(model, "vocab_size", &vs, prefix, err))
        return -1;
    if (nl != c->n_layers)
        return mi_set_error(err, "%s: plan has %d layers but the model has %d", prefix, nl, c->n_layers);
    if (nkv != c->n_kv_heads)
        return mi_set_error(err, "%s: plan has %d KV heads per layer but the model has %d", prefix, nkv,
                            c->n_kv_heads);
    if (hd != c->hidden_dim)
        return mi_set_error(err, "%s: plan has FFN hidden_dim %d but the model has %d", prefix, hd, c->hidden_dim);
    if (vs != c->vocab_size)
        return mi_set_error(err, "%s: plan has vocab_size %d but the model has %d", prefix, vs, c->vocab_size);
    const cJSON *dj = cJSON_GetObjectItemCaseSensitive(model, "dim");
    int dim;
    if (dj && !as_int(dj, &dim))
        return mi_set_error(err, "%s: model.dim must be an integer", prefix);
    if (dj && dim != c->dim)
        return mi_set_error(err, "%s: plan has dim %d but the model has %d", prefix, dim, c->dim);

    /* layers */
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!layers)
        return mi_set_error(err, "%s: 'layers' is missing", prefix);
    if (!cJSON_IsArray(layers))
        return mi_set_error(err, "%s: 'layers' must be a list with one object per layer", prefix);
    int n_layers_json = cJSON_GetArraySize(layers);
    if (n_layers_json != c->n_layers)
        return mi_set_error(err, "%s: 'layers' has %d entries but the model has %d layers", prefix, n_layers_json,
                            c->n_layers);
    plan->layers = mi_calloc((size_t)c->n_layers, sizeof *plan->layers, "plan layers");
    int l = 0;
    for (const cJSON *lj = layers->child; lj; lj = lj->next, l++) {
        mi_layer_plan *lp = &plan->layers[l];
        char where[48];
        snprintf(where, sizeof where, "layers[%d]", l);
        if (!cJSON_IsObject(lj))
            return mi_set_error(err, "%s: %s must be an object with kv_rank, proj_rank and ffn", prefix, where);
        if (mi_json_check_keys(lj, layer_keys, prefix, where, err))
            return -1;

        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(lj, "kv_rank");
        if (!cJSON_IsArray(kv))
            return mi_set_error(err, "%s: %s.kv_rank must be a list of %d ranks (one per KV head)", prefix, where,
                                c->n_kv_heads);
        int nk = cJSON_GetArraySize(kv);
        if (nk != c->n_kv_heads)
            return mi_set_error(err, "%s: %s.kv_rank has %d entries but the model has %d KV heads", prefix, where,
                                nk, c->n_kv_heads);
        int h = 0;
        for (const cJSON *r = kv->child; r; r = r->next, h++) {
            if (!as_int(r, &lp->kv_rank[h]))
                return mi_set_error(err, "%s: %s.kv_rank[%d] must be an integer rank", prefix, where, h);
            if (lp->kv_rank[h] < 0 || lp->kv_rank[h] >= plan->n_ranks)
                return mi_set_error(err, "%s: %s.kv_rank[%d] = %d is outside 0..%d (n_ranks %d)", prefix, where, h,
                                    lp->kv_rank[h], plan->n_ranks - 1, plan->n_ranks);
        }

        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(lj, "proj_rank");
        if (!pr || !as_int(pr, &lp->proj_rank) || lp->proj_rank < -1)
            return mi_set_error(err, "%s: %s.proj_rank must be an integer >= -1 (-1: split with the heads)", prefix,
                                where);
        if (lp->proj_rank >= plan->n_ranks)
            return mi_set_error(err, "%s: %s.proj_rank = %d is outside -1..%d (n_ranks %d)", prefix, where,
                                lp->proj_rank, plan->n_ranks - 1, plan->n_ranks);

        char what[64];
        snprintf(what, sizeof what, "%s.ffn", where);
        /* a mixture of experts' slices are experts (expert parallelism), a dense FFN's hidden units */
        if (parse_slices(cJSON_GetObjectItemCaseSensitive(lj, "ffn"), what,
                         mi_config_is_moe(c) ? "experts (n_experts)" : "FFN units (hidden_dim)", mi_plan_ffn_units(c),
                         plan->n_ranks, &lp->ffn, &lp->n_ffn, prefix, err))
            return -1;
    }

    /* classifier, and the embeddings with its rows when split */
    if (parse_slices(cJSON_GetObjectItemCaseSensitive(root, "classifier"), "classifier", "vocabulary rows",
                     c->vocab_size, plan->n_ranks, &plan->cls, &plan->n_cls, prefix, err))
        return -1;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "split_vocab");
    if (sv && !cJSON_IsBool(sv))
        return mi_set_error(err, "%s: 'split_vocab' must be true or false", prefix);
    plan->split_vocab = sv && cJSON_IsTrue(sv);
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(root, "somegather");
    if ((sg != NULL) != (plan->planner == MI_PLANNER_SOMEGATHER))
        return mi_set_error(err, "%s: a 'somegather' block belongs to somegather plans, and they need one", prefix);
    if (sg && !dj)
        return mi_set_error(err, "%s: a somegather plan needs model.dim (its columns are columns of dim)", prefix);
    return sg ? parse_somegather(sg, c, plan, prefix, err) : 0;
}

/* The layout the named planner makes (src/planner/), in the structural
 * properties that tell the planners apart, and rank 0 idle when the
 * controller does not work: a layout relabelled with another planner's name
 * would run one placement and report another. */
static int check_layout(const mi_plan *plan, const mi_config *c, const char *prefix, char *err)
{
    int n = plan->n_ranks, cw = plan->controller_works, workers = cw ? n : n - 1;
    const char *name = mi_planner_name(plan->planner);
    if (n == 1 && !cw)
        return mi_set_error(err, "%s: 'controller_works' is false but the plan has one rank: rank 0 is the only one "
                                 "to hold the layers (set it true)", prefix);
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        if (!cw) {
            for (int h = 0; h < c->n_kv_heads; h++)
                if (lp->kv_rank[h] == 0)
                    return mi_set_error(err, "%s: layers[%d].kv_rank[%d] is rank 0, but 'controller_works' is false "
                                             "(rank 0, the controller, holds no layer shards)", prefix, l, h);
            if (lp->proj_rank == 0)
                return mi_set_error(err, "%s: layers[%d].proj_rank is rank 0, but 'controller_works' is false (rank 0, "
                                         "the controller, holds no layer shards)", prefix, l);
            for (int i = 0; i < lp->n_ffn; i++)
                if (lp->ffn[i].rank == 0)
                    return mi_set_error(err, "%s: layers[%d].ffn[%d] is on rank 0, but 'controller_works' is false "
                                             "(rank 0, the controller, holds no layer shards)", prefix, l, i);
        }
        switch (plan->planner) {
        case MI_PLANNER_LAYERWISE: {
            int r = lp->proj_rank, whole = r >= 0 && lp->n_ffn == 1 && lp->ffn[0].rank == r;
            for (int h = 0; h < c->n_kv_heads && whole; h++)
                whole = lp->kv_rank[h] == r;
            if (!whole)
                return mi_set_error(err, "%s: layers[%d] is split over ranks, but a layerwise plan places every layer "
                                         "whole on one rank (its heads, projection and FFN)", prefix, l);
            break;
        }
        case MI_PLANNER_ROUNDROBIN:
        case MI_PLANNER_RANDOM:
        case MI_PLANNER_GREEDY: /* an MoE layer's experts are units too (expert parallelism) */
        case MI_PLANNER_EXACT:
            if (lp->proj_rank < 0 || (lp->n_ffn != 1 && !mi_config_is_moe(c)))
                return mi_set_error(err, "%s: layers[%d] %s, but %s places each layer's projection and FFN whole on "
                                         "one rank (heads are its units; the planner that splits them is tp or "
                                         "hybrid)", prefix, l, lp->proj_rank < 0 ? "splits its projection "
                                         "(proj_rank -1)" : "splits its FFN into slices", name);
            break;
        case MI_PLANNER_TP:
            if (workers > 1 && lp->proj_rank >= 0)
                return mi_set_error(err, "%s: layers[%d].proj_rank is %d, but tp splits every layer's projection "
                                         "with its heads over the %d workers (proj_rank -1)", prefix, l,
                                    lp->proj_rank, workers);
            break;
        default: /* hybrid chooses per layer; somegather's block is checked on its own */
            break;
        }
    }
    return 0;
}

int mi_plan_load_json(const char *path, const mi_config *c, mi_plan *plan, char *err)
{
    memset(plan, 0, sizeof *plan);
    if (c->n_layers < 1 || c->n_kv_heads < 1 || c->n_kv_heads > MI_MAX_KV_HEADS || c->hidden_dim < 1 ||
        c->vocab_size < 1)
        return mi_set_error(err, "plan file %s: the model configuration is invalid", path);
    char prefix[4200];
    cJSON *root = mi_json_load(path, "plan file", MAX_FILE_BYTES, prefix, sizeof prefix, err);
    if (!root)
        return -1;

    plan->cfg = *c;
    plan->plan_seconds = 0;
    int rc = build_plan(root, c, plan, prefix, err);
    cJSON_Delete(root);
    if (rc == 0)
        rc = check_layout(plan, c, prefix, err);
    if (rc == 0 && plan->keep)
        mi_plan_fill_keep(plan);
    /* an empty send list is pruning ratio 1 for that rank, which --prune refuses (nothing of its columns
     * would reach the others): refused from a file too */
    for (int l = 0; rc == 0 && plan->keep && l < c->n_layers; l++)
        for (int x = 0; rc == 0 && x < MI_N_PRUNED_XCH; x++)
            for (int r = 0; rc == 0 && r < plan->n_ranks; r++) {
                int c0, n;
                mi_plan_owned(plan, l, x, r, &c0, &n);
                const mi_keep *k = mi_plan_keep(plan, l, x, r);
                if (k && k->n == 0 && n > 0)
                    rc = mi_set_error(err, "%s: somegather.send of layer %d exchange %s rank %d is empty: that rank "
                                           "would send none of its %d columns (pruning ratio 1, which --prune refuses; "
                                           "leave the entry out to send them all)", prefix, l, mi_xch_name(x), r, n);
            }
    if (rc == 0) {
        char verr[MI_ERRLEN];
        verr[0] = '\0';
        if (mi_plan_validate(plan, NULL, verr) != 0)
            rc = mi_set_error(err, "%s: %s", prefix, verr[0] ? verr : "invalid plan");
    }
    if (rc != 0) {
        mi_plan_free(plan);
        return -1;
    }
    return 0;
}
