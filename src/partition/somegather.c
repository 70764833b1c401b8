/* CATS's somegather scheme compiled to per-rank programs (see
 * partition.h).
 *
 * Every rank r owns a column slice C_r of the residual stream, whole heads
 * H_r, FFN units F_r, the rows C_r of wo and of w2, the columns C_r of the
 * embeddings and a slice of the classifier's rows. Per layer, four
 * allgathers on the communicator of all ranks:
 *
 *   X[:, C_r]      -> all   (attn_in)  then RMSNorm over the columns held
 *   heads[:, H_r]  -> all   (heads)    then X[:, C_r] += wo[C_r, :] @ heads
 *   X[:, C_r]      -> all   (ffn_in)   then RMSNorm over the columns held
 *   hidden[:, F_r] -> all   (hidden)   then X[:, C_r] += w2[C_r, :] @ hidden
 *
 * Residual adds are local (a rank computes exactly its own columns). Before
 * the classifier one more allgather of X (final, never pruned); each rank
 * computes the logits of its vocabulary rows and rank 0 gathers them
 * (gathered, not reduced: each logit is one whole dot product, as on one
 * device, so with nothing pruned or lost the logits are bit-identical), or
 * only each rank's best candidates when that is all sampling needs (plan.h
 * logits_k).
 *
 * Pruning: a rank sends only its kept columns (the plan's send lists); the
 * others are absent on the receivers (and with ordinary magnitude pruning on
 * the owner too). */
#include <string.h>

#include "meshinfer/common.h"
#include "program_build.h"

/* The exchange of kind what (layer l) of buffer buf among all ranks. */
static void exchange(const mi_plan *plan, mi_programs *p, int comm, int what, int l, int buf)
{
    int n = plan->n_ranks;
    int xid = pb_exchange(p, MI_OP_ALLGATHERV, comm, buf, -1, l);
    mi_exchange *x = &p->xchg[xid];
    x->what = what;
    x->own = mi_calloc((size_t)n, sizeof(mi_colset), "exchange");
    x->mask_own = plan->prune_mode == MI_PRUNE_MAGNITUDE;
    for (int r = 0; r < n; r++) {
        int c0, nc;
        mi_plan_owned(plan, l < 0 ? 0 : l, what, r, &c0, &nc);
        pb_cols_add(&x->own[r], c0, nc);
        const mi_keep *k = what < MI_N_PRUNED_XCH ? mi_plan_keep(plan, l, what, r) : NULL;
        if (!k) {
            pb_cols_add(&x->send[r], c0, nc);
            continue;
        }
        for (int i = 0; i < k->n; i++)
            pb_cols_add(&x->send[r], k->cols[i], 1);
    }
    mi_op op = pb_compute(MI_OP_ALLGATHERV, l, buf, 0, 0);
    op.xid = xid;
    for (int r = 0; r < n; r++)
        pb_op(p, MI_PHASE_PREFILL, r, op);
}

static mi_op norm_op(int layer, int kind, int flags)
{
    mi_op op = pb_compute(MI_OP_NORM_LOCAL, layer, MI_BUF_XN, 0, 0);
    op.norm = (short)kind;
    op.flags = (unsigned char)flags;
    return op;
}

/* A product that adds into the rank's own residual columns from the whole of
 * a gathered buffer: wo over every head output, w2 over every hidden unit
 * (the rank holds those rows of wo_t / w2_t). */
static mi_op add_into_own(int kind, int layer, const mi_slice *cols, int in, int width)
{
    mi_op op = pb_compute(kind, layer, MI_BUF_X, cols->v0, cols->n);
    op.in = in;
    op.i0 = 0;
    op.ni = width;
    op.flags = MI_OPF_ADD;
    return op;
}

int pb_compile_somegather(const mi_plan *plan, mi_programs *p, char *err)
{
    const mi_config *c = &plan->cfg;
    int n = plan->n_ranks, nq = c->n_heads * c->head_dim;
    if (plan->n_cols != n)
        return mi_set_error(err, "somegather plan has %d residual-column slices for %d ranks", plan->n_cols, n);
    pb_init(p, n, plan->wire);
    p->embed_all = 1;
    int all[MI_MAX_RANKS];
    for (int r = 0; r < n; r++)
        all[r] = r;
    int comm = pb_comm(p, all, n);
    for (int r = 0; r < n; r++) {
        const mi_slice *cr = &plan->cols[r];
        pb_op(p, MI_PHASE_PREFILL, r, pb_compute(MI_OP_EMBED, -1, MI_BUF_X, cr->v0, cr->n));
    }
    for (int l = 0; l < c->n_layers; l++) {
        exchange(plan, p, comm, MI_XCH_ATTN_IN, l, MI_BUF_X);
        for (int r = 0; r < n; r++) {
            int h0, hn;
            mi_plan_owned(plan, l, MI_XCH_HEADS, r, &h0, &hn);
            pb_op(p, MI_PHASE_PREFILL, r, norm_op(l, MI_NORM_ATTN, 0));
            pb_op(p, MI_PHASE_PREFILL, r, pb_compute(MI_OP_ATTN, l, MI_BUF_HEADS, h0, hn));
        }
        exchange(plan, p, comm, MI_XCH_HEADS, l, MI_BUF_HEADS);
        for (int r = 0; r < n; r++)
            pb_op(p, MI_PHASE_PREFILL, r, add_into_own(MI_OP_PROJ, l, &plan->cols[r], MI_BUF_HEADS, nq));
        exchange(plan, p, comm, MI_XCH_FFN_IN, l, MI_BUF_X);
        for (int r = 0; r < n; r++) {
            int f0, nf;
            mi_plan_owned(plan, l, MI_XCH_HIDDEN, r, &f0, &nf);
            pb_op(p, MI_PHASE_PREFILL, r, norm_op(l, MI_NORM_FFN, 0));
            pb_op(p, MI_PHASE_PREFILL, r, pb_compute(MI_OP_FFN_UP, l, MI_BUF_HIDDEN, f0, nf));
        }
        exchange(plan, p, comm, MI_XCH_HIDDEN, l, MI_BUF_HIDDEN);
        for (int r = 0; r < n; r++)
            pb_op(p, MI_PHASE_PREFILL, r, add_into_own(MI_OP_FFN_DOWN, l, &plan->cols[r], MI_BUF_HIDDEN, c->hidden_dim));
    }
    exchange(plan, p, comm, MI_XCH_FINAL, -1, MI_BUF_X);
    int m[MI_MAX_RANKS], k = 0;
    for (int i = 0; i < plan->n_cls; i++) {
        int r = plan->cls[i].rank;
        pb_op(p, MI_PHASE_PREFILL, r, norm_op(-1, MI_NORM_FINAL, MI_OPF_LAST));
        mi_op op = pb_compute(MI_OP_LOGITS, -1, MI_BUF_LOGITS, plan->cls[i].v0, plan->cls[i].n);
        op.flags = MI_OPF_LAST;
        pb_op(p, MI_PHASE_PREFILL, r, op);
    }
    /* logits go to the controller: the classifier's ranks and rank 0 */
    for (int r = 0; r < n; r++) {
        int has = r == 0;
        for (int i = 0; i < plan->n_cls; i++)
            has |= plan->cls[i].rank == r;
        if (has)
            m[k++] = r;
    }
    if (k > 1) {
        int gc = pb_comm(p, m, k);
        int xid = pb_exchange(p, MI_OP_GATHERV, gc, MI_BUF_LOGITS, 0, -1);
        p->xchg[xid].cand = plan->logits_k;
        for (int j = 0; j < k; j++)
            for (int i = 0; i < plan->n_cls; i++)
                if (plan->cls[i].rank == m[j])
                    pb_cols_add(&p->xchg[xid].send[j], plan->cls[i].v0, plan->cls[i].n);
        mi_op op = pb_compute(MI_OP_GATHERV, -1, MI_BUF_LOGITS, 0, 0);
        op.xid = xid;
        op.flags = MI_OPF_LAST;
        for (int j = 0; j < k; j++)
            pb_op(p, MI_PHASE_PREFILL, m[j], op);
    }
    for (int r = 0; r < n; r++)
        p->prog[MI_PHASE_DECODE][r] = p->prog[MI_PHASE_PREFILL][r];
    return 0;
}
