/* The cost model: time, bytes and memory of a plan's programs on a cluster,
 * predicted without running them (no MPI), for the planners, `meshinfer
 * plan` and the simulator.
 *
 * Units: seconds, bytes, bytes/second. */
#ifndef MESHINFER_COST_H
#define MESHINFER_COST_H

#include <stddef.h>

#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

typedef struct {
    double token_s;                /* predicted time of one decode step */
    double busy_s[MI_MAX_RANKS];   /* compute time per rank per token */
    double bytes_per_token;        /* total payload moved */
    size_t weight_bytes[MI_MAX_RANKS];
    size_t kv_bytes[MI_MAX_RANKS];
} mi_prediction;

/* Seconds op (of `rank`'s decode program) computes at context position ctx:
 * the bytes it reads (weights in their dtypes, the KV cache it attends over)
 * over the device's weight streaming rate mem_bw * speed. Communication ops
 * cost 0 here (see mi_predict). */
double mi_op_compute_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int rank, int ctx);

/* Predict one decode step at context position ctx by running every rank's
 * decode program on a clock per rank: a compute op advances its rank's
 * clock (mi_op_compute_s); a communication op starts when all its members
 * have reached it and takes rounds * (latency + largest message / bandwidth),
 * with log2(members) rounds for broadcasts, one for puts, gathers and
 * allgathers, and one (two members) or two for reductions. */
void mi_predict(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, mi_prediction *out);

#endif
