/* Energy per token and DVFS levels under a TPOT limit (see cost.h: HeadSplit's
 * energy and energy-delay product, Voltron §4.4's energy optimisation). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/cost.h"

double mi_device_power_w(const mi_device *d, double f)
{
    return d->idle_w + (d->active_w - d->idle_w) * f * f * f;
}

void mi_cluster_at(const mi_cluster *cl, const double *freq, mi_cluster *out)
{
    *out = *cl;
    out->dev = mi_malloc((size_t)(cl->n_devices > 0 ? cl->n_devices : 1) * sizeof *out->dev, "cluster devices");
    memcpy(out->dev, cl->dev, (size_t)cl->n_devices * sizeof *out->dev);
    for (int i = 0; i < cl->n_devices && freq; i++) {
        mi_device *d = &out->dev[i];
        double s = 1.0 / freq[i];
        for (int t = 0; t < MI_N_DTYPES; t++)
            d->pass_s[t] *= s, d->pos_s[t] *= s;
        d->kv_s *= s, d->op_s *= s, d->vec_s *= s;
    }
}

void mi_cluster_at_free(mi_cluster *out)
{
    free(out->dev);
    out->dev = NULL;
}

double mi_predict_energy(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const double *freq, int ctx,
                         double *token_s, double *per_rank_j)
{
    mi_cluster at;
    mi_cluster_at(cl, freq, &at);
    mi_prediction pr;
    mi_predict(plan, p, &at, ctx, &pr);
    mi_cluster_at_free(&at);
    double total = 0;
    for (int r = 0; r < cl->n_devices && r < plan->n_ranks; r++) {
        const mi_device *d = &cl->dev[r];
        double f = freq ? freq[r] : 1.0;
        double j = d->idle_w * pr.token_s + (mi_device_power_w(d, f) - d->idle_w) * pr.busy_s[r];
        if (per_rank_j)
            per_rank_j[r] = j;
        total += j;
    }
    if (token_s)
        *token_s = pr.token_s;
    return total;
}

int mi_energy_plan(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, double tpot_limit_s,
                   mi_energy_result *out, char *err)
{
    double t0 = mi_now();
    memset(out, 0, sizeof *out);
    int n = cl->n_devices < plan->n_ranks ? cl->n_devices : plan->n_ranks, level[MI_MAX_RANKS] = {0};
    for (int r = 0; r < n; r++)
        out->freq[r] = 1.0;
    out->top_joules = mi_predict_energy(plan, p, cl, out->freq, ctx, &out->top_token_s, NULL);
    out->evaluated = 1;
    out->joules = out->top_joules;
    out->token_s = out->top_token_s;
    if (out->top_token_s > tpot_limit_s) {
        out->seconds = mi_now() - t0;
        return mi_set_error(err, "energy: the plan's predicted TPOT at every device's top frequency, %.3g ms, is "
                            "already over the %.3g ms limit: no margin to spend on lower frequencies",
                            out->top_token_s * 1e3, tpot_limit_s * 1e3);
    }
    for (;;) {
        int best = -1;
        double best_j = out->joules, best_t = 0;
        for (int r = 0; r < n; r++) {
            if (level[r] + 1 >= cl->dev[r].n_freq)
                continue;
            double keep = out->freq[r], t;
            out->freq[r] = cl->dev[r].freq[level[r] + 1];
            double j = mi_predict_energy(plan, p, cl, out->freq, ctx, &t, NULL);
            out->evaluated++;
            out->freq[r] = keep;
            if (t <= tpot_limit_s && j < best_j)
                best = r, best_j = j, best_t = t;
        }
        if (best < 0)
            break;
        level[best]++;
        out->freq[best] = cl->dev[best].freq[level[best]];
        out->joules = best_j;
        out->token_s = best_t;
    }
    out->seconds = mi_now() - t0;
    return 0;
}
