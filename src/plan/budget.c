/* The memory account against the devices' budgets (plan.h): when a
 * re-placement is due (HeadSplit "Memory needs active management"). The
 * runtime's controller (control/replace.c) and the simulator
 * (cost/simulate.c) both ask here, so that they re-place at the same token. */
#include "meshinfer/plan.h"

void mi_plan_mem_account(const mi_plan *plan, double *mem_w, double *mem_kv)
{
    for (int r = 0; r < plan->n_ranks; r++) {
        mem_w[r] = mi_plan_rank_bytes_at(plan, r, 0);
        mem_kv[r] = mi_plan_rank_bytes_at(plan, r, 1) - mem_w[r];
    }
}

/* Rank r's share of its budget at n_pos positions (0 without a budget). */
static double share(const mi_cluster *cl, const double *w, const double *kv, int r, int n_pos)
{
    double b = cl->dev[r].mem_bytes;
    return b > 0 ? (w[r] + kv[r] * n_pos) / b : 0.0;
}

int mi_replace_due(const mi_cluster *cl, int n_ranks, const double *mem_w, const double *mem_kv, int kv_positions,
                   int pos0, int need, int *rank, double *frac, int *outgrown)
{
    int n = n_ranks < cl->n_devices ? n_ranks : cl->n_devices;
    for (int r = 0; r < n; r++)
        if (share(cl, mem_w, mem_kv, r, need) >= MI_REPLACE_THRESHOLD &&
            share(cl, mem_w, mem_kv, r, pos0) < MI_REPLACE_THRESHOLD) {
            *rank = r;
            *frac = share(cl, mem_w, mem_kv, r, need);
            *outgrown = 0;
            return 1;
        }
    if (need <= kv_positions)
        return 0;
    int best = 0;
    double bf = -1;
    for (int r = 0; r < n; r++) {
        double f = share(cl, mem_w, mem_kv, r, need);
        if (f > bf)
            bf = f, best = r;
    }
    *rank = best;
    *frac = bf;
    *outgrown = 1;
    return 1;
}

int mi_mem_over_budget(const mi_cluster *cl, int n_ranks, const double *mem_w, const double *mem_kv, int need,
                       double *frac)
{
    int n = n_ranks < cl->n_devices ? n_ranks : cl->n_devices;
    for (int r = 0; r < n; r++)
        if (share(cl, mem_w, mem_kv, r, need) > 1.0) {
            *frac = share(cl, mem_w, mem_kv, r, need);
            return r;
        }
    return -1;
}
