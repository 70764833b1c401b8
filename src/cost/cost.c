/* The cost model over programs (see cost.h). */
#include "meshinfer/cost.h"

#include <math.h>
#include <string.h>

#include "meshinfer/common.h"

static double op_bytes_read(const mi_plan *plan, const mi_op *op, int ctx)
{
    const mi_config *c = &plan->cfg;
    int l = op->layer;
    switch (op->kind) {
    case MI_OP_ATTN: {
        int w = mi_kv_group(c) * c->head_dim, nk = (op->n + w - 1) / w;
        double share = 1.0;
        /* a checked speculative attention is recomputed only when rejected */
        if ((op->flags & MI_OPF_IF_REJECTED) && l > 0)
            share = 1.0 - plan->layers[l - 1].accept_permille / 1000.0;
        return share * nk * ((double)mi_head_group_bytes(c, l) + 4.0 * 2.0 * ctx * c->head_dim);
    }
    case MI_OP_PROJ: return (double)op->n * (double)mi_dtype_row_bytes(c->dtype[l][MI_WO], (size_t)op->ni);
    case MI_OP_FFN_UP:
        return (double)op->n * (double)(mi_dtype_row_bytes(c->dtype[l][MI_W1], (size_t)c->dim) +
                                         mi_dtype_row_bytes(c->dtype[l][MI_W3], (size_t)c->dim));
    case MI_OP_FFN_DOWN: return (double)op->n * (double)mi_dtype_row_bytes(c->dtype[l][MI_W2], (size_t)op->ni);
    case MI_OP_LOGITS: return (double)mi_classifier_bytes(c, op->n);
    default: return 0; /* norms, adds, embedding rows: negligible next to the weights */
    }
}

double mi_op_compute_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int rank, int ctx)
{
    if (mi_op_is_comm(op->kind))
        return 0;
    return op_bytes_read(plan, op, ctx) / (cl->mem_bw * cl->dev[rank].speed);
}

/* Rounds of messages an exchange takes, as the runtime sends them. */
static double rounds(const mi_exchange *x, int n)
{
    if (n < 2)
        return 0;
    switch (x->kind) {
    case MI_OP_BCAST:
    case MI_OP_IBCAST: return ceil(log2((double)n));
    case MI_OP_ALLREDUCE: return n == 2 ? 1 : 2;
    default: return 1;
    }
}

void mi_predict(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, mi_prediction *out)
{
    int n = plan->n_ranks;
    memset(out, 0, sizeof *out);
    double ready[MI_MAX_RANKS] = {0};
    int pc[MI_MAX_RANKS] = {0};
    const mi_program *prog = p->prog[MI_PHASE_DECODE];
    for (;;) {
        /* run every rank up to its next communication op */
        int left = 0;
        for (int r = 0; r < n; r++) {
            while (pc[r] < prog[r].n_ops && !mi_op_is_comm(prog[r].ops[pc[r]].kind)) {
                double t = mi_op_compute_s(plan, &prog[r].ops[pc[r]], cl, r, ctx);
                ready[r] += t;
                out->busy_s[r] += t;
                pc[r]++;
            }
            left += pc[r] < prog[r].n_ops;
        }
        if (!left)
            break;
        /* complete an exchange every member has reached (the programs come
         * from one global order, so the earliest pending one always is) */
        int done = 0;
        for (int r = 0; r < n && !done; r++) {
            if (pc[r] >= prog[r].n_ops)
                continue;
            int xid = prog[r].ops[pc[r]].xid;
            const mi_exchange *x = &p->xchg[xid];
            const mi_comm *cm = &p->comms[x->comm];
            int all = 1;
            for (int j = 0; j < cm->n_members && all; j++) {
                int m = cm->members[j];
                all = pc[m] < prog[m].n_ops && prog[m].ops[pc[m]].xid == xid;
            }
            if (!all)
                continue;
            double start = 0, lat = 0, maxb = 0;
            for (int a = 0; a < cm->n_members; a++) {
                int ma = cm->members[a];
                if (ready[ma] > start)
                    start = ready[ma];
                for (int b = 0; b < cm->n_members; b++) {
                    double by = mi_exchange_bytes(p, xid, a, b);
                    if (by <= 0)
                        continue;
                    double l = mi_cluster_latency(cl, ma, cm->members[b]);
                    if (l > lat)
                        lat = l;
                    if (by > maxb)
                        maxb = by;
                }
            }
            double end = start + rounds(x, cm->n_members) * (lat + maxb / cl->bandwidth);
            for (int j = 0; j < cm->n_members; j++) {
                int m = cm->members[j];
                ready[m] = end;
                pc[m]++;
            }
            done = 1;
        }
        if (!done)
            mi_fatal("internal error: the programs' communication ops do not match (cost model)");
    }
    double end = 0;
    for (int r = 0; r < n; r++)
        if (ready[r] > end)
            end = ready[r];
    out->token_s = end;
    out->bytes_per_token = mi_programs_bytes(p, MI_PHASE_DECODE, NULL, NULL);
    for (int r = 0; r < n && r < MI_MAX_RANKS; r++)
        mi_plan_rank_memory(plan, r, &out->weight_bytes[r], &out->kv_bytes[r]);
}
