/* Voltron §4.2.2 "Importance-aware Mixed Precision": the
 * importance side file (`meshinfer importance`) and the search for the
 * highest-precision configuration that fits every device and meets the
 * TTFT/TPOT targets. See planner.h. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/planner.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "../util/json_keys.h"

/* Importances are perplexity rises: bounded, so that sums of thousands stay
 * finite and every report prints numbers. */
#define MI_MAX_RISE 1e6

/* The optional pruning entries: "ffn_shard" at the top, "prune" in every layer. */
static int load_prune(const cJSON *root, const char *path, const mi_config *c, mi_importance *imp, char *err)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(root, "ffn_shard");
    if (!sh)
        return 0;
    double S = cJSON_IsNumber(sh) ? sh->valuedouble : -1;
    /* in range before any conversion: a double past INT_MAX converted to int is undefined */
    if (!(S >= MI_QK && S <= c->hidden_dim) || S != floor(S) || (int)S % MI_QK || c->hidden_dim % (int)S ||
        c->hidden_dim / (int)S > MI_MAX_PRUNE_SHARDS || c->hidden_dim / (int)S < 2)
        return mi_set_error(err, "importance file %s: ffn_shard must be a multiple of %d that divides hidden_dim %d "
                                 "into 2 to %d shards", path, MI_QK, c->hidden_dim, MI_MAX_PRUNE_SHARDS);
    int n = c->hidden_dim / (int)S, i = 0;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    for (const cJSON *e = layers->child; e; e = e->next, i++) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(e, "prune");
        if (!cJSON_IsArray(pr) || cJSON_GetArraySize(pr) != n)
            return mi_set_error(err, "importance file %s: layers[%d].prune must list %d numbers (hidden_dim %d in "
                                     "shards of %d)", path, i, n, c->hidden_dim, (int)S);
        int j = 0;
        for (const cJSON *v = pr->child; v; v = v->next, j++) {
            if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= MI_MAX_RISE))
                return mi_set_error(err, "importance file %s: layers[%d].prune[%d] is not a perplexity rise within "
                                    "+-%g", path, i, j, MI_MAX_RISE);
            imp->prune[i][j] = (float)v->valuedouble;
        }
    }
    imp->ffn_shard = (int)S;
    imp->n_shards = n;
    return 0;
}

double mi_prune_keep(const mi_importance *imp, int hidden_dim, int k, int *keep)
{
    if (imp->ffn_shard <= 0 || k < 0 || k >= imp->n_shards || hidden_dim != imp->n_shards * imp->ffn_shard)
        return -1;
    int S = imp->ffn_shard, n = imp->n_shards, kept = hidden_dim - k * S;
    double rise = 0;
    for (int l = 0; l < imp->n_layers; l++) {
        /* the k least important shards of this layer: k passes of a minimum over n <= 64 */
        unsigned char gone[MI_MAX_PRUNE_SHARDS] = {0};
        for (int i = 0; i < k; i++) {
            int best = -1;
            for (int j = 0; j < n; j++)
                if (!gone[j] && (best < 0 || imp->prune[l][j] < imp->prune[l][best]))
                    best = j;
            gone[best] = 1;
            rise += imp->prune[l][best];
        }
        if (keep) {
            int *row = keep + (size_t)l * kept, o = 0;
            for (int j = 0; j < n; j++)
                for (int u = 0; u < S && !gone[j]; u++)
                    row[o++] = j * S + u;
        }
    }
    return rise;
}

const int mi_precision_ladder[MI_N_RUNGS] = {MI_F32, MI_F16, MI_Q8_0, MI_Q6_K, MI_Q5_K, MI_Q4_K, MI_Q4_0};

int mi_precision_rung(int t)
{
    for (int i = 0; i < MI_N_RUNGS; i++)
        if (mi_precision_ladder[i] == t)
            return i;
    return -1;
}

int mi_precision_holds(const mi_config *c, int l, int t)
{
    (void)l; /* every layer has the same axes */
    int b = mi_dtype_block(t);
    return b > 0 && c->dim % b == 0 && (c->n_heads * c->head_dim) % b == 0 && c->hidden_dim % b == 0;
}

double mi_importance_rise(const mi_importance *imp, int l, int t)
{
    if (t == MI_F32 || (t == MI_F16 && isnan(imp->rise[l][MI_F16])))
        return 0;
    return imp->rise[l][t];
}

int mi_precision_chain(const mi_config *c, int l, const mi_importance *imp, int q4_0_last, int *to)
{
    int n = 0, from = mi_precision_rung(c->dtype[l][MI_WQ]);
    for (int i = from < 0 ? MI_N_RUNGS : from + 1; i < MI_N_RUNGS; i++) {
        int t = mi_precision_ladder[i];
        if (!mi_precision_holds(c, l, t) || (imp && isnan(imp->rise[l][t])))
            continue;
        /* q4_0 below q4_K: the same bytes, worse quality */
        if (t == MI_Q4_0 && n && to[n - 1] == MI_Q4_K && !q4_0_last)
            continue;
        if (t == MI_Q4_0 && !n && c->dtype[l][MI_WQ] == MI_Q4_K && !q4_0_last)
            continue;
        to[n++] = t;
    }
    return n;
}

int mi_q4_0_faster(const mi_cluster *cl)
{
    for (int d = 0; d < cl->n_devices; d++)
        if (cl->dev[d].pass_s[MI_Q4_0] < cl->dev[d].pass_s[MI_Q4_K])
            return 1;
    return 0;
}

int mi_importance_load(const char *path, const mi_config *c, mi_importance *imp, char *err)
{
    memset(imp, 0, sizeof *imp);
    char prefix[4200];
    cJSON *root = mi_json_load(path, "importance file", 16L << 20, prefix, sizeof prefix, err);
    if (!root)
        return -1;
    static const char *const top_keys[] = {"model",     "n_layers",  "dim",    "hidden_dim", "tokens", "base_perplexity",
                                           "ffn_shard", "synthetic", "layers", "version",    NULL};
    static const char *const layer_keys[] = {"layer", "fp16", "q8_0", "q6_K", "q5_K", "q4_K", "q4_0", "prune", NULL};
    if (cJSON_IsObject(root) && mi_json_check_keys(root, top_keys, prefix, "", err)) {
        cJSON_Delete(root);
        return -1;
    }
    int rc = -1;
    const cJSON *name = root ? cJSON_GetObjectItemCaseSensitive(root, "model") : NULL;
    const cJSON *nl = root ? cJSON_GetObjectItemCaseSensitive(root, "n_layers") : NULL;
    const cJSON *dim = root ? cJSON_GetObjectItemCaseSensitive(root, "dim") : NULL;
    const cJSON *hid = root ? cJSON_GetObjectItemCaseSensitive(root, "hidden_dim") : NULL;
    const cJSON *layers = root ? cJSON_GetObjectItemCaseSensitive(root, "layers") : NULL;
    if (!cJSON_IsObject(root) || !cJSON_IsString(name) || !cJSON_IsNumber(nl) || !cJSON_IsNumber(dim) ||
        !cJSON_IsNumber(hid) || !cJSON_IsArray(layers)) {
        mi_set_error(err, "importance file %s: not an importance file (model, n_layers, dim, hidden_dim and layers "
                          "are needed; write one with meshinfer importance)", path);
        goto done;
    }
    /* version 1 (no key) holds q8_0 and q4_0; 2 adds fp16 and the k-quants: a newer file may
     * mean something else by its keys, so it is refused rather than half read */
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (ver && (!cJSON_IsNumber(ver) || !(ver->valuedouble >= 1 && ver->valuedouble <= MI_IMPORTANCE_VERSION) ||
                ver->valuedouble != floor(ver->valuedouble))) {
        if (cJSON_IsNumber(ver) && ver->valuedouble > MI_IMPORTANCE_VERSION && ver->valuedouble < 1e9)
            mi_set_error(err, "importance file %s: version %g is newer than this meshinfer reads (1 to %d): measure "
                              "it again with this meshinfer importance", path, ver->valuedouble, MI_IMPORTANCE_VERSION);
        else
            mi_set_error(err, "importance file %s: 'version' must be 1 or %d", path, MI_IMPORTANCE_VERSION);
        goto done;
    }
    imp->version = ver ? (int)ver->valuedouble : 1;
    if (strcmp(name->valuestring, c->name) || nl->valuedouble != c->n_layers || dim->valuedouble != c->dim ||
        hid->valuedouble != c->hidden_dim) {
        mi_set_error(err, "importance file %s is for %s (%g layers, dim %g, hidden_dim %g) but the model is %s (%d "
                          "layers, dim %d, hidden_dim %d%s)", path, name->valuestring, nl->valuedouble,
                     dim->valuedouble, hid->valuedouble, c->name, c->n_layers, c->dim, c->hidden_dim,
                     !strcmp(name->valuestring, c->name) && nl->valuedouble == c->n_layers && dim->valuedouble == c->dim &&
                             hid->valuedouble > c->hidden_dim ? "; a pruned model needs its own importance file" : "");
        goto done;
    }
    /* what the rises were measured against: a perplexity is at least 1, and scoring takes 2 tokens or more */
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const cJSON *ppl = cJSON_GetObjectItemCaseSensitive(root, "base_perplexity");
    if (tok && (!cJSON_IsNumber(tok) || !(tok->valuedouble >= 2 && tok->valuedouble <= 1e15) ||
                tok->valuedouble != floor(tok->valuedouble))) {
        mi_set_error(err, "importance file %s: 'tokens' must be the whole number of tokens scored, at least 2%s", path,
                     cJSON_IsNumber(tok) ? "" : " (it is not a number)");
        goto done;
    }
    if (ppl && (!cJSON_IsNumber(ppl) || !(ppl->valuedouble >= 1 && isfinite(ppl->valuedouble)))) {
        mi_set_error(err, "importance file %s: 'base_perplexity' must be a perplexity, a finite number of at least "
                          "1%s", path, cJSON_IsNumber(ppl) ? "" : " (it is not a number)");
        goto done;
    }
    const cJSON *syn = cJSON_GetObjectItemCaseSensitive(root, "synthetic");
    if (syn && !cJSON_IsBool(syn)) {
        mi_set_error(err, "importance file %s: 'synthetic' must be true or false", path);
        goto done;
    }
    if (syn && cJSON_IsTrue(syn) != (c->synthetic != 0)) {
        mi_set_error(err, "importance file %s was measured on %s weights but the model's are %s: importances carry "
                          "over only to the weights they were measured on", path, cJSON_IsTrue(syn) ? "synthetic" :
                          "real", c->synthetic ? "synthetic" : "real");
        goto done;
    }
    if (cJSON_GetArraySize(layers) != c->n_layers) {
        mi_set_error(err, "importance file %s: %d layer entries for %d layers", path, cJSON_GetArraySize(layers),
                     c->n_layers);
        goto done;
    }
    int i = 0;
    for (const cJSON *e = layers->child; e; e = e->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "layers[%d]", i);
        if (cJSON_IsObject(e) && mi_json_check_keys(e, layer_keys, prefix, where, err))
            goto done;
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(e, "layer");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "q8_0");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "q4_0");
        if (!cJSON_IsNumber(l) || l->valuedouble != i || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            !(fabs(a->valuedouble) <= MI_MAX_RISE) || !(fabs(b->valuedouble) <= MI_MAX_RISE)) {
            mi_set_error(err, "importance file %s: layers[%d] must be {\"layer\": %d, \"q8_0\": x, \"q4_0\": y} with "
                              "x and y perplexity rises within +-%g", path, i, i, MI_MAX_RISE);
            goto done;
        }
        for (int t = 0; t < MI_N_DTYPES; t++)
            imp->rise[i][t] = NAN;
        imp->rise[i][MI_F32] = 0;
        imp->rise[i][MI_Q8_0] = a->valuedouble;
        imp->rise[i][MI_Q4_0] = b->valuedouble;
        /* the optional rungs: a rise, or null where the layer cannot hold the dtype */
        static const int optional[] = {MI_F16, MI_Q6_K, MI_Q5_K, MI_Q4_K};
        for (int k = 0; k < 4; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, mi_dtype_name(optional[k]));
            if (!v || cJSON_IsNull(v))
                continue;
            if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) <= MI_MAX_RISE)) {
                mi_set_error(err, "importance file %s: layers[%d].%s must be a perplexity rise within +-%g, or null "
                                  "where the layer cannot hold %s", path, i, mi_dtype_name(optional[k]), MI_MAX_RISE,
                             mi_dtype_name(optional[k]));
                goto done;
            }
            imp->rise[i][optional[k]] = v->valuedouble;
        }
    }
    imp->n_layers = c->n_layers;
    if (load_prune(root, path, c, imp, err))
        goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

/* One downgrade: layer l's seven matrices to dtype t, costing `rise`; or
 * (layer -1) pruning one more FFN shard from every layer (dtype: the level). */
typedef struct {
    int layer, dtype;
    double rise;
} step;

static int by_rise(const void *a, const void *b)
{
    const step *x = a, *y = b;
    return x->rise < y->rise ? -1 : x->rise > y->rise ? 1 : x->layer - y->layer;
}

/* The configuration after the first k steps. */
static void apply_steps(const mi_config *c, const step *st, int k, int ffn_shard, mi_config *out, double *rise,
                        int *prune_k)
{
    *out = *c;
    *rise = 0;
    *prune_k = 0;
    for (int i = 0; i < k; i++) {
        if (st[i].layer < 0) {
            *prune_k = st[i].dtype;
            out->hidden_dim = c->hidden_dim - st[i].dtype * ffn_shard;
        } else {
            for (int m = 0; m < MI_N_LAYER_MATS; m++)
                out->dtype[st[i].layer][m] = (unsigned char)st[i].dtype;
        }
        *rise += st[i].rise;
    }
}

/* Plan and predict configuration cfg; 1 when it fits and meets the targets. */
static int judge(const mi_config *cfg, const mi_cluster *cl, const mi_plan_options *po, const mi_precision_query *q,
                 double *ttft, double *tpot)
{
    mi_plan p;
    mi_programs prog;
    char err[MI_ERRLEN];
    *ttft = *tpot = INFINITY;
    if (mi_plan_make(cfg, cl, po, &p, err))
        return 0;
    int ok = 0;
    if (!mi_programs_compile(&p, &prog, err)) {
        *ttft = mi_predict_ttft(&p, &prog, cl, q->n_prompt, q->chunk);
        *tpot = mi_predict_tpot(&p, &prog, cl, q->n_prompt, q->n_steps);
        ok = (q->ttft_s <= 0 || *ttft <= q->ttft_s) && (q->tpot_s <= 0 || *tpot <= q->tpot_s);
        mi_programs_free(&prog);
    }
    mi_plan_free(&p);
    return ok;
}

/* "every layer q4_0", or "every layer at its lowest (q4_K x4, q4_0 x2)": the
 * layers' dtypes in cfg, for the error naming the end of the chain. */
static void describe_end(const mi_config *cfg, char *out, size_t n)
{
    int count[MI_N_DTYPES] = {0}, kinds = 0, last = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        count[cfg->dtype[l][MI_WQ]]++;
    for (int t = 0; t < MI_N_DTYPES; t++)
        if (count[t])
            kinds++, last = t;
    if (kinds == 1) {
        snprintf(out, n, "every layer %s", mi_dtype_name(last));
        return;
    }
    size_t o = (size_t)snprintf(out, n, "every layer at its lowest (");
    for (int i = MI_N_RUNGS - 1, first = 1; i >= 0 && o < n; i--)
        if (count[mi_precision_ladder[i]]) {
            o += (size_t)snprintf(out + o, n - o, "%s%s x%d", first ? "" : ", ", mi_dtype_name(mi_precision_ladder[i]),
                                  count[mi_precision_ladder[i]]);
            first = 0;
        }
    if (o < n)
        snprintf(out + o, n - o, ")");
}

/* Why layers' chains offer no k-quant (out->kquant_note), or "". */
static void kquant_note(const mi_config *c, const mi_importance *imp, int n_with, char *out, size_t n)
{
    out[0] = 0;
    if (n_with == c->n_layers)
        return;
    if (!mi_precision_holds(c, 0, MI_Q4_K)) {
        snprintf(out, n, "no k-quant: dim %d, n_heads x head_dim %d and hidden_dim %d must all be multiples of %d "
                         "(the k-quants' super-blocks)", c->dim, c->n_heads * c->head_dim, c->hidden_dim, MI_QK_K);
        return;
    }
    int unmeasured = 0;
    for (int l = 0; l < c->n_layers; l++)
        unmeasured += isnan(imp->rise[l][MI_Q6_K]) && isnan(imp->rise[l][MI_Q5_K]) && isnan(imp->rise[l][MI_Q4_K]);
    if (unmeasured)
        snprintf(out, n, "no k-quant in %d layers: the importance file (version %d) has no k-quant rises for them "
                         "(measure them with meshinfer importance)", unmeasured, imp->version);
    else
        snprintf(out, n, "no k-quant in %d layers: they are at or below q4_K already", c->n_layers - n_with);
}

int mi_precision_search(const mi_config *c, const mi_cluster *cl, const mi_plan_options *po, const mi_importance *imp,
                        const mi_precision_query *q, mi_precision_result *out, char *err)
{
    double t0 = mi_now();
    memset(out, 0, sizeof *out);
    int L = c->n_layers, n = 0;
    int P = imp->ffn_shard > 0 && imp->n_layers == L ? imp->n_shards / 2 : 0; /* pruning levels: keep half */
    step *st = mi_calloc((size_t)MI_N_RUNGS * (size_t)L + (size_t)P, sizeof *st, "precision steps");
    /* q4_0 below q4_K (the same bytes) pays where a device multiplies it faster, or before
     * pruning, whose shards of 32-blocks a k-quant's super-block of 256 would hold cut */
    int q4_0_last = mi_q4_0_faster(cl) || (P > 0 && imp->ffn_shard % MI_QK_K != 0);
    int chain[MI_MAX_LAYERS][MI_N_RUNGS], len[MI_MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        len[l] = mi_precision_chain(c, l, imp, q4_0_last, chain[l]);
        for (int i = 0; i < len[l]; i++)
            if (mi_dtype_kquant(chain[l][i])) {
                out->kquant_layers++;
                break;
            }
    }
    kquant_note(c, imp, out->kquant_layers, out->kquant_note, sizeof out->kquant_note);
    /* Voltron: down the ladder rung by rung, least important first: every layer that can to
     * fp16 (ordered by its rise), then to q8_0, q6_K, ... (each by what that step adds over the
     * layer's previous rung) */
    for (int r = 1; r < MI_N_RUNGS; r++) {
        int first = n, t = mi_precision_ladder[r];
        for (int l = 0; l < L; l++)
            for (int i = 0; i < len[l]; i++)
                if (chain[l][i] == t) {
                    int prev = i ? chain[l][i - 1] : c->dtype[l][MI_WQ];
                    double from = mi_importance_rise(imp, l, prev); /* (a dtype now the file did not measure: 0) */
                    st[n++] = (step){l, t, mi_importance_rise(imp, l, t) - (isnan(from) ? 0 : from)};
                }
        qsort(st + first, (size_t)(n - first), sizeof *st, by_rise);
    }
    /* then Voltron's pruning, the same number of shards from every layer: level k's step
     * costs what its k-th shards add */
    double prev = 0;
    for (int k = 1; k <= P; k++) {
        double sum = mi_prune_keep(imp, c->hidden_dim, k, NULL);
        st[n++] = (step){-1, k, sum - prev};
        prev = sum;
    }
    /* binary search for the fewest steps that meet everything (memory and time fall as
     * precision falls: Voltron's monotonic relationship) */
    mi_config cfg;
    double rise, ttft, tpot;
    int lo = 0, hi = n, evaluated = 0, pk, S = imp->ffn_shard;
    apply_steps(c, st, n, S, &cfg, &rise, &pk);
    evaluated++;
    if (!judge(&cfg, cl, po, q, &ttft, &tpot)) {
        free(st);
        char end[192];
        describe_end(&cfg, end, sizeof end);
        if (pk)
            snprintf(end + strlen(end), sizeof end - strlen(end), " and %d of its %d FFN shards pruned", pk,
                     imp->n_shards);
        if (!isfinite(ttft))
            return mi_set_error(err, "precision search: even with %s the model does not fit the cluster's budgets",
                                end);
        char tt[32] = "none", tp[32] = "none";
        if (q->ttft_s > 0)
            snprintf(tt, sizeof tt, "%g ms", q->ttft_s * 1e3);
        if (q->tpot_s > 0)
            snprintf(tp, sizeof tp, "%g ms", q->tpot_s * 1e3);
        return mi_set_error(err, "precision search: the targets cannot be met; the lowest precision (%s) reaches "
                                 "TTFT %.1f ms and TPOT %.2f ms (targets: TTFT %s, TPOT %s)", end, ttft * 1e3,
                            tpot * 1e3, tt, tp);
    }
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        apply_steps(c, st, mid, S, &cfg, &rise, &pk);
        evaluated++;
        if (judge(&cfg, cl, po, q, &ttft, &tpot))
            hi = mid;
        else
            lo = mid + 1;
    }
    apply_steps(c, st, lo, S, &out->cfg, &out->rise, &out->prune_k);
    out->ffn_shard = out->prune_k ? S : 0;
    judge(&out->cfg, cl, po, q, &out->ttft_s, &out->tpot_s);
    out->steps = lo;
    out->evaluated = evaluated + 1;
    /* the per-layer spec for `meshinfer quantize --layer-dtype` */
    size_t o = 0;
    for (int l = 0; l < L && o < sizeof out->spec - 16; l++)
        o += (size_t)snprintf(out->spec + o, sizeof out->spec - o, "%s%d:%s", l ? "," : "", l,
                              mi_dtype_name(out->cfg.dtype[l][MI_WQ]));
    out->seconds = mi_now() - t0;
    free(st);
    return 0;
}
