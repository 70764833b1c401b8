/* Planners that live in their own files (internal to the plan module). */
#ifndef MESHINFER_PLANNERS_H
#define MESHINFER_PLANNERS_H

#include "meshinfer/planner.h"

/* Voltron hybrid parallelism (hybrid.c): fills plan->layers and the
 * classifier slices of a plan whose cfg, n_ranks and kv_positions are set
 * and whose layers are allocated (zeroed), for the phase opt->prefill says.
 * Returns 0, or -1 with err when a sublayer fits nowhere. */
int mi_plan_hybrid(mi_plan *plan, const mi_cluster *cl, const mi_plan_options *opt, char *err);

#endif
