/* Expert parallelism: a mixture of experts' FFN placed expert by expert
 * (plan.h: an MoE layer's FFN slices are experts [v0, v0+n)). The planners
 * choose how many experts each rank holds; these helpers give the bytes and
 * work of such a piece and lay the counts out as slices. */
#include "planners.h"

#include <stdlib.h>

#include "meshinfer/common.h"

double mi_moe_piece_bytes(const mi_config *c, int l, int n, int shared)
{
    size_t router = mi_moe_common_bytes(c, l) - mi_moe_shared_bytes(c, l);
    return (double)router + 4.0 * c->dim + (double)mi_experts_bytes(c, l, n) +
           (shared ? (double)mi_moe_shared_bytes(c, l) : 0.0);
}

double mi_moe_piece_work(const mi_config *c, int l, int n, int shared)
{
    /* of the k experts a token runs, k * n / E among these n (a uniform router's expectation) */
    size_t router = mi_moe_common_bytes(c, l) - mi_moe_shared_bytes(c, l);
    return (double)router + (double)mi_experts_bytes(c, l, 1) * c->n_experts_used * n / c->n_experts +
           (shared ? (double)mi_moe_shared_bytes(c, l) : 0.0);
}

void mi_moe_set_slices(mi_plan *plan, int l, const int *ranks, const int *count, int n, int first)
{
    mi_layer_plan *lp = &plan->layers[l];
    int m = 0, next = 0;
    for (int i = 0; i < n; i++)
        m += count[i] > 0;
    lp->n_ffn = m;
    lp->ffn = mi_malloc((size_t)m * sizeof(mi_slice), "plan FFN slices");
    m = 0;
    /* the first rank's experts start at 0: it holds the shared expert */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (count[i] > 0 && (ranks[i] == first) == (pass == 0)) {
                lp->ffn[m++] = (mi_slice){ranks[i], next, count[i]};
                next += count[i];
            }
}
