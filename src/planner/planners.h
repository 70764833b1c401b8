/* Planners that live in their own files (internal to the plan module). */
#ifndef MESHINFER_PLANNERS_H
#define MESHINFER_PLANNERS_H

#include "meshinfer/planner.h"

/* Voltron hybrid parallelism (hybrid.c): fills plan->layers and the
 * classifier slices of a plan whose cfg, n_ranks and kv_positions are set
 * and whose layers are allocated (zeroed), for the phase opt->prefill says.
 * Returns 0, or -1 with err when a sublayer fits nowhere. */
int mi_plan_hybrid(mi_plan *plan, const mi_cluster *cl, const mi_plan_options *opt, char *err);

/* Expert parallelism (experts.c; plan.h: an MoE layer's FFN slices count
 * experts, the slice at expert 0 holds the shared expert). */
/* Bytes a rank holding n experts of MoE layer l keeps: the FFN norm, the
 * router, the n experts, and with `shared` the shared expert and its gate. */
double mi_moe_piece_bytes(const mi_config *c, int l, int n, int shared);
/* Weight bytes such a rank streams per token, expected: the router, k * n / E
 * experts (k of E run per token; routing is not known ahead), the shared
 * expert with `shared`. */
double mi_moe_piece_work(const mi_config *c, int l, int n, int shared);
/* Layer l's FFN slices from per-rank expert counts: ranks[i] holds count[i]
 * experts (zero counts hold none), rank `first` (count > 0) the experts from
 * 0 and the shared expert, then the others in the order given. Allocates
 * plan->layers[l].ffn. */
void mi_moe_set_slices(mi_plan *plan, int l, const int *ranks, const int *count, int n, int first);

/* The exact planner (exact.c): fills the layers of a plan prepared as for
 * the hybrid planner (cfg, n_ranks, controller_works, kv_positions, wire
 * set; layers zeroed; the vocabulary whole on rank 0) with the placement
 * GLPK finds fastest under the budgets (planner.h MI_EXACT_MAX_RANKS), the
 * search stopped after time_limit_s (<= 0: MI_EXACT_TIME_S); what the solver
 * did into *info (may be NULL). Returns 0, or -1 with err: too many devices,
 * a model it does not place (experts, time series, a split vocabulary),
 * messages past the eager limit, nothing within the budgets. */
int mi_plan_exact_fill(mi_plan *plan, const mi_cluster *cl, double time_limit_s, mi_exact_info *info, char *err);

/* mi_plan_make of opt->planner as it is (placement.c; mi_plan_make and
 * mi_plan_exact in exact_seed.c call it): the exact planner's fill, when
 * that is the planner, stopped after exact_limit_s (<= 0: MI_EXACT_TIME_S)
 * and reporting into *exact_info (may be NULL). Same returns as
 * mi_plan_make. */
int mi_plan_make_with(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, double exact_limit_s,
                      mi_exact_info *exact_info, mi_plan *plan, char *err);

/* After a search the time limit stopped (exact_seed.c): greedy's and
 * layer-wise's placements (planner.h mi_plan_exact) that are in the exact
 * planner's space replace *plan when the cost model predicts them faster
 * at context kv_positions / 2; info->source and objective_s say so.
 * Nothing changes on any failure (a heuristic that does not fit is no
 * candidate). */
void mi_plan_exact_seed(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, mi_plan *plan,
                        mi_exact_info *info);

#endif
