/* mi_plan_make's entry and the exact planner's (planner.h mi_plan_exact):
 * a search the time limit stopped is compared with the placements greedy
 * and layer-wise make that lie in its space, by the cost model's decode
 * step, and the fastest kept. A search stopped at its limit may hold a
 * placement slower than a heuristic's; the paper's comparison ("within 15
 * to 20 percent of an exact solver") and any user of exact assume it never
 * is. Apart from placement.c so that the planners do not call in a circle
 * (the candidates are made through mi_plan_make_with). */
#include "planners.h"

#include <math.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"

/* 1 when plan is a placement of the exact program's: the vocabulary whole on rank 0, every layer's projection
 * on one rank and its FFN whole on one, rank 0 holding nothing unless it works, nothing pruned. */
static int in_space(const mi_plan *plan, int cw)
{
    const mi_config *c = &plan->cfg;
    if (plan->split_vocab || plan->n_cls != 1 || plan->n_cols || plan->ffn_shard)
        return 0;
    int H = mi_plan_ffn_units(c), lo = cw ? 0 : 1;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        if (lp->proj_rank < lo || lp->n_ffn != 1 || lp->ffn[0].v0 != 0 || lp->ffn[0].n != H || lp->ffn[0].rank < lo ||
            lp->ffn_pruned)
            return 0;
        for (int k = 0; k < c->n_kv_heads; k++)
            if (lp->kv_rank[k] < lo)
                return 0;
    }
    return 1;
}

/* The cost model's decode step of plan as the exact planner's (its programs: head-level), or INFINITY. */
static double step_as_exact(mi_plan *plan, const mi_cluster *cl)
{
    mi_planner was = plan->planner;
    plan->planner = MI_PLANNER_EXACT;
    mi_programs prog;
    char err[MI_ERRLEN];
    double t = INFINITY;
    if (mi_plan_validate(plan, cl, err) == 0 && mi_programs_compile(plan, &prog, err) == 0) {
        mi_prediction pr;
        mi_predict(plan, &prog, cl, plan->kv_positions / 2, &pr);
        t = pr.token_s;
        mi_programs_free(&prog);
    }
    plan->planner = was;
    return t;
}

void mi_plan_exact_seed(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, mi_plan *plan,
                        mi_exact_info *info)
{
    double best = step_as_exact(plan, cl);
    const int cw_max = plan->controller_works; /* *plan is replaced as candidates win */
    const mi_planner heur[2] = {MI_PLANNER_GREEDY, MI_PLANNER_LAYERWISE};
    for (int h = 0; h < 2; h++)
        for (int cw = 0; cw <= cw_max; cw++) {
            mi_plan_options o = *opt;
            o.planner = heur[h];
            o.controller_works = cw;
            o.split_vocab = 0;
            mi_plan cand;
            char err[MI_ERRLEN];
            if (mi_plan_make_with(c, cl, &o, 0, NULL, &cand, err))
                continue;
            double t = INFINITY;
            if (cand.kv_positions == plan->kv_positions && in_space(&cand, cw_max))
                t = step_as_exact(&cand, cl);
            if (t < best * (1 - 1e-9)) { /* the candidate, as the exact planner's plan */
                best = t;
                cand.planner = MI_PLANNER_EXACT;
                cand.plan_seconds = plan->plan_seconds;
                mi_plan_free(plan);
                *plan = cand;
                info->source = heur[h];
                info->objective_s = t;
                if (info->bound_s > t)
                    info->bound_s = t;
            } else {
                mi_plan_free(&cand);
            }
        }
}

int mi_plan_make(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, mi_plan *plan, char *err)
{
    return opt->planner == MI_PLANNER_EXACT ? mi_plan_exact(c, cl, opt, 0, plan, NULL, err)
                                            : mi_plan_make_with(c, cl, opt, 0, NULL, plan, err);
}

int mi_plan_exact(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, double time_limit_s,
                  mi_plan *plan, mi_exact_info *info, char *err)
{
    mi_plan_options o = *opt;
    o.planner = MI_PLANNER_EXACT;
    mi_exact_info own;
    if (!info)
        info = &own;
    memset(info, 0, sizeof *info);
    int rc = mi_plan_make_with(c, cl, &o, time_limit_s, info, plan, err);
    info->source = MI_PLANNER_EXACT;
    if (rc == 0 && !info->optimal && plan->n_ranks > 1)
        mi_plan_exact_seed(c, cl, opt, plan, info);
    return rc;
}
