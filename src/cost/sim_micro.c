/* A batch pass as pipelined micro-batches (simulate.h mi_sim_pass_micro),
 * as the runtime's forward_micro runs it: rank 0 sends each micro-batch on
 * (its ops up to its first receive) before it takes any back, and each
 * worker carries the micro-batches through one after another. The walk is
 * simulate.c's, on programs that chain M copies of the pass. */
#include "meshinfer/simulate.h"

#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "sim_internal.h"

/* Append ops [i0, i1) of g to out as micro-batch k (xid + k * nx), its rows noted. */
static void append(mi_program *out, int *rows, const mi_program *g, int i0, int i1, int k, int nx, int Tk)
{
    for (int i = i0; i < i1; i++) {
        mi_op op = g->ops[i];
        if (op.xid >= 0)
            op.xid += k * nx;
        rows[out->n_ops] = Tk;
        out->ops[out->n_ops++] = op;
    }
}

int mi_sim_pass_micro(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const mi_sim_links *lk, int T,
                      int M, int ctx, uint64_t *rng, double *link_bytes, double *link_msgs, mi_sim_cpu *cpu,
                      mi_sim_pass_out *out, char *err)
{
    if (M > T)
        M = T;
    if (M <= 1 || !mi_programs_can_pipeline(p)) /* one pass of the T rows, as the runtime then runs it */
        return mi_sim_pass(plan, p, cl, lk, T > 1 ? MI_PHASE_PREFILL : MI_PHASE_DECODE, T, T, ctx, rng, link_bytes,
                           link_msgs, cpu, out, err);
    int n = p->n_ranks, nx = p->n_xchg;
    mi_programs c = *p; /* comms, send lists and pruned runs shared with p: read only */
    c.n_xchg = M * nx;
    c.xchg = mi_malloc((size_t)(c.n_xchg ? c.n_xchg : 1) * sizeof *c.xchg, "micro-batches");
    mi_sim_rows rows = {mi_calloc((size_t)n, sizeof(int *), "micro-batches"),
                        mi_malloc((size_t)(c.n_xchg ? c.n_xchg : 1) * sizeof(int), "micro-batches")};
    mi_program *chain = mi_calloc((size_t)n, sizeof *chain, "micro-batches");
    int at[MI_MAX_RANKS + 1];
    for (int k = 0; k <= M; k++) /* the runtime's split of the rows */
        at[k] = (int)((long)T * k / M);
    for (int k = 0; k < M; k++)
        for (int x = 0; x < nx; x++) {
            c.xchg[k * nx + x] = p->xchg[x];
            rows.x_rows[k * nx + x] = at[k + 1] - at[k];
        }
    for (int r = 0; r < n; r++) {
        int cap = 0;
        for (int k = 0; k < M; k++)
            cap += p->prog[at[k + 1] - at[k] == 1 ? MI_PHASE_DECODE : MI_PHASE_PREFILL][r].n_ops;
        chain[r].ops = mi_malloc((size_t)(cap ? cap : 1) * sizeof(mi_op), "micro-batches");
        chain[r].cap = cap;
        rows.op_rows[r] = mi_malloc((size_t)(cap ? cap : 1) * sizeof(int), "micro-batches");
        /* rank 0: every micro-batch's ops up to its split, then every one's rest; a worker: each whole */
        for (int half = 0; half < (r == 0 ? 2 : 1); half++)
            for (int k = 0; k < M; k++) {
                int Tk = at[k + 1] - at[k];
                const mi_program *g = &p->prog[Tk == 1 ? MI_PHASE_DECODE : MI_PHASE_PREFILL][r];
                int s = r == 0 ? mi_program_chain_split(p, g) : 0;
                if (r != 0)
                    append(&chain[r], rows.op_rows[r], g, 0, g->n_ops, k, nx, Tk);
                else
                    append(&chain[r], rows.op_rows[r], g, half ? s : 0, half ? g->n_ops : s, k, nx, Tk);
            }
    }
    c.prog[MI_PHASE_PREFILL] = chain;
    c.prog[MI_PHASE_DECODE] = chain;
    int rc = mi_sim_walk(plan, &c, cl, lk, MI_PHASE_PREFILL, T, T, ctx, rng, link_bytes, link_msgs, cpu, &rows, out,
                         err);
    for (int r = 0; r < n; r++) {
        free(chain[r].ops);
        free(rows.op_rows[r]);
    }
    free(chain);
    free(rows.op_rows);
    free(rows.x_rows);
    free(c.xchg);
    return rc;
}
