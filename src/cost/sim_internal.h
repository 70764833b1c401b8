/* What simulate.c's event walk and sim_micro.c's pipelined micro-batches
 * share (simulate.h is the interface). */
#ifndef MI_SIM_INTERNAL_H
#define MI_SIM_INTERNAL_H

#include "meshinfer/simulate.h"

/* Rows per op and per exchange of programs that chain micro-batches (each
 * micro-batch a copy of the pass's exchanges, xid + k * n_xchg). */
typedef struct {
    int **op_rows;   /* [n_ranks][n_ops] the rows of the micro-batch op i belongs to */
    int *x_rows;     /* [n_xchg] likewise per exchange */
} mi_sim_rows;

/* mi_sim_pass with rows (NULL: T and T_logits for every op). */
int mi_sim_walk(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const mi_sim_links *lk, int ph,
                int T, int T_logits, int ctx, uint64_t *rng, double *link_bytes, double *link_msgs,
                mi_sim_cpu *cpu, const mi_sim_rows *rows, mi_sim_pass_out *out, char *err);

#endif
