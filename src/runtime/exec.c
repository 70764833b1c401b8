/* Executing programs: one function per op kind, chosen by a table. The
 * executor knows op kinds and their fields (variant, columns, kept FFN
 * runs), never partitioning schemes, model families or plans (partition.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/kernels.h"
#include "meshinfer/series.h"

/* Where an op's seconds are counted. */
static double *bucket_of(mi_runtime *rt, const mi_op *op)
{
    switch (op->kind) {
    case MI_OP_NORM:
    case MI_OP_NORM_LOCAL:
        return op->norm == MI_NORM_ATTN ? &rt->m.attn : op->norm == MI_NORM_FFN ? &rt->m.ffn : &rt->m.logits;
    case MI_OP_ATTN: return &rt->m.attn;
    case MI_OP_PROJ: return &rt->m.proj;
    case MI_OP_FFN_UP:
    case MI_OP_FFN_DOWN:
    case MI_OP_MOE:
    case MI_OP_ROUTE:
    case MI_OP_SPEC_TEST: return &rt->m.ffn;
    case MI_OP_LOGITS: return &rt->m.logits;
    default: return NULL;
    }
}

typedef double (*op_fn)(mi_runtime *rt, const mi_op *op, const fwd *f);

/* ------------------------------------------------------------ compute */

static double op_embed(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    int W = rt->width[MI_BUF_X];
    if (op->variant == MI_OPV_PATCHES) {
        memcpy(rt->patches, rt->tokens, (size_t)f->T * (size_t)rt->in_words * sizeof(float));
        mi_patch_embed(&rt->model, rt->patches, f->T, rt->buf[MI_BUF_X] + op->c0, W, op->c0, op->n);
        return 0;
    }
    for (int t = 0; t < f->T; t++) {
        float *row = rt->buf[MI_BUF_X] + (size_t)t * W + op->c0;
        int tok = rt->tokens[t];
        /* a split vocabulary: another rank's token is a row of zeros here (the gather keeps its owner's) */
        if (op->variant == MI_OPV_EMBED_ROWS && (tok < op->i0 || tok >= op->i0 + op->ni))
            memset(row, 0, (size_t)op->n * sizeof(float));
        else
            mi_model_embed(&rt->model, tok, fwd_pos(f, t), row);
    }
    return 0;
}

static const float *norm_weight(const mi_runtime *rt, const mi_op *op)
{
    return op->norm == MI_NORM_FINAL  ? rt->model.norm
           : op->norm == MI_NORM_ATTN ? rt->model.layers[op->layer].attention_norm
                                      : rt->model.layers[op->layer].ffn_norm;
}

/* The positions a norm works on: all, or (LAST) those whose logits are wanted. */
static int norm_rows(const mi_op *op, const fwd *f, int *first)
{
    *first = op->flags & MI_OPF_LAST ? f->T - f->T_logits : 0;
    return op->flags & MI_OPF_LAST ? f->T_logits : f->T;
}

static const float *norm_bias(const mi_runtime *rt, const mi_op *op)
{
    return op->norm == MI_NORM_FINAL  ? rt->model.norm_b
           : op->norm == MI_NORM_ATTN ? rt->model.layers[op->layer].attention_norm_b
                                      : rt->model.layers[op->layer].ffn_norm_b;
}

/* LayerNorm with bias (GPT-2, the time-series family; device-local with held). */
static double layernorm(mi_runtime *rt, const mi_op *op, const fwd *f, const unsigned char *held)
{
    const mi_config *c = &rt->model.cfg;
    int first, T = norm_rows(op, f, &first);
    size_t d = (size_t)c->dim;
    mi_layernorm_held(rt->buf[MI_BUF_XN], rt->buf[MI_BUF_X] + (size_t)first * d, norm_weight(rt, op),
                      norm_bias(rt, op), T, c->dim, c->norm_eps, held ? held + (size_t)first * d : NULL);
    return 0;
}

static double op_norm(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    if ((op->flags & MI_OPF_IF_REJECTED) && rt->accepted)
        return 0; /* keep the attention computed on Z */
    const mi_config *c = &rt->model.cfg;
    if (op->variant == MI_OPV_LAYERNORM)
        return layernorm(rt, op, f, NULL);
    int first, T = norm_rows(op, f, &first);
    mi_rmsnorm(rt->buf[MI_BUF_XN], rt->buf[MI_BUF_X] + (size_t)first * c->dim, norm_weight(rt, op), T, c->dim,
               c->norm_eps);
    return 0;
}

static double op_norm_local(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    const mi_config *c = &rt->model.cfg;
    if (op->variant == MI_OPV_LAYERNORM)
        return layernorm(rt, op, f, rt->held_all ? NULL : rt->held);
    int first, T = norm_rows(op, f, &first);
    size_t d = (size_t)c->dim;
    mi_rmsnorm_held(rt->buf[MI_BUF_XN], rt->buf[MI_BUF_X] + (size_t)first * d, norm_weight(rt, op), T, c->dim,
                    c->norm_eps, rt->held_all ? NULL : rt->held + (size_t)first * d);
    return 0;
}

static double op_attn(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    if ((op->flags & MI_OPF_IF_REJECTED) && rt->accepted)
        return 0;
    float *local = rt->buf[MI_BUF_HEADS_LOCAL];
    int Wl = rt->width[MI_BUF_HEADS_LOCAL];
    mi_attn_block_at(&rt->model, op->layer, &rt->s, rt->buf[MI_BUF_XN], f->T, f->pos0, f->pos, f->slot, local);
    if (op->buf != MI_BUF_HEADS_LOCAL || op->c0 != 0) {
        /* attention writes its heads packed; place them at their columns */
        int W = rt->width[op->buf];
        for (int t = f->T - 1; t >= 0; t--)
            memmove(rt->buf[op->buf] + (size_t)t * W + op->c0, local + (size_t)t * op->n, (size_t)op->n * sizeof(float));
    } else if (op->n != Wl) {
        /* packed [T, n] rows -> rows of the buffer's width */
        for (int t = f->T - 1; t > 0; t--)
            memmove(local + (size_t)t * Wl, local + (size_t)t * op->n, (size_t)op->n * sizeof(float));
    }
    return 0;
}

/* y = in @ W^T on buffer slices, for decode in row chunks with progress
 * calls between them when a non-blocking send is pending (every row is the
 * same product as unchunked, so results do not depend on the chunking).
 * The blocks (forward.h) run their products through it. */
static void product(void *ctx, const mi_tensor *Wt, float *y, int ldy, const float *x, int ldx, int T, int add)
{
    mi_runtime *rt = ctx;
    if (T > 1 || rt->n_pend == 0) {
        mi_matmul_ld(y, ldy, x, ldx, Wt, T, add);
        return;
    }
    const int chunks = 8;
    for (int k = 0; k < chunks; k++) {
        int a = Wt->rows * k / chunks, b = Wt->rows * (k + 1) / chunks;
        mi_tensor part = mi_tensor_rows(Wt, a, b - a);
        mi_matmul_ld(y + a, ldy, x, ldx, &part, 1, add);
        rt_poke(rt);
    }
}

/* An output bias (bo, b2: the time-series family's) of the rows this rank
 * computes joins the residual stream X before the product's sum does: into
 * X directly when the op adds into it, and when it writes a partial to TMP
 * (layer-wise: X += TMP next) into X now. One order of additions everywhere,
 * so that every scheme and one device round alike (bit-identical forecasts).
 * The planners that reduce partial sums over ranks (tp) are refused for
 * that family (session.c): each rank would add the bias. */
static double op_proj(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    mi_product prod = {product, rt};
    mi_proj_rows(&rt->model, op->layer, rt->buf[op->in] + op->i0, rt->width[op->in], f->T, rt->buf[op->buf] + op->c0,
                 rt->width[op->buf], op->flags & MI_OPF_ADD, rt->buf[MI_BUF_X] + op->c0, rt->width[MI_BUF_X], &prod);
    return 0;
}

/* Voltron §4.3.1: a layer whose plan prunes FFN shards holds only the kept
 * units' weights (load.c prune_layers): the up product fills the kept units
 * of the op's slice, the pruned ones are zero (as a pruned model's), and the
 * down product reads the kept units only. */
static double op_ffn_up(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    const mi_layer *L = &rt->model.layers[op->layer];
    int W = rt->width[MI_BUF_HIDDEN], d = rt->width[MI_BUF_XN];
    float *h1 = rt->buf[MI_BUF_HIDDEN] + op->c0, *h3 = rt->s.h3;
    /* pruned: the kept units' runs (none pruned: nk = n, the runs unused) */
    int k = op->n_runs, nk = op->n;
    const int *r0 = op->runs >= 0 ? rt->prog.run_c0 + op->runs : NULL;
    const int *rn = op->runs >= 0 ? rt->prog.run_len + op->runs : NULL;
    if (op->runs >= 0)
        nk = L->w1.rows;
    mi_product prod = {product, rt};
    mi_ffn_act act = op->variant == MI_OPV_GELU         ? MI_ACT_GELU
                     : op->variant == MI_OPV_GEGLU      ? MI_ACT_GEGLU
                     : op->variant == MI_OPV_GELU_TANH  ? MI_ACT_GELU_TANH
                                                        : MI_ACT_SWIGLU;
    mi_ffn_up_rows(&rt->model, op->layer, act,
                   rt->buf[MI_BUF_XN], d, f->T, h1, W, h3, &prod);
    if (nk == op->n)
        return 0;
    for (int t = 0; t < f->T; t++) {
        float *row = h1 + (size_t)t * W;
        /* kept units packed first -> their places, last run first (each moves right or stays) */
        int at = nk;
        for (int i = k - 1; i >= 0; i--) {
            at -= rn[i];
            memmove(row + (r0[i] - op->c0), row + at, (size_t)rn[i] * sizeof(float));
        }
        for (int i = 0, u = op->c0; i <= k; i++) { /* the gaps between runs, and after the last */
            int end = i < k ? r0[i] : op->c0 + op->n;
            memset(row + (u - op->c0), 0, (size_t)(end - u) * sizeof(float));
            if (i < k)
                u = r0[i] + rn[i];
        }
    }
    return 0;
}

static double op_ffn_down(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    const mi_layer *L = &rt->model.layers[op->layer];
    float *y = rt->buf[op->buf] + op->c0;
    const float *x = rt->buf[op->in] + op->i0;
    int ldx = rt->width[op->in];
    if (op->runs >= 0) {
        /* the kept units side by side (h3 is free: the up product's is used up) */
        const int *r0 = rt->prog.run_c0 + op->runs, *rn = rt->prog.run_len + op->runs;
        int k = op->n_runs;
        int nk = L->w2.cols;
        float *packed = rt->s.h3;
        for (int t = 0; t < f->T; t++)
            for (int i = 0, at = 0; i < k; at += rn[i++])
                memcpy(packed + (size_t)t * nk + at, x + (size_t)t * ldx + (r0[i] - op->i0),
                       (size_t)rn[i] * sizeof(float));
        if (nk == 0) { /* every unit of this slice pruned: it contributes nothing */
            for (int t = 0; t < f->T && !(op->flags & MI_OPF_ADD); t++)
                memset(y + (size_t)t * rt->width[op->buf], 0, (size_t)op->n * sizeof(float));
            return 0;
        }
        x = packed;
        ldx = nk;
    }
    mi_product prod = {product, rt};
    mi_ffn_down_rows(&rt->model, op->layer, x, ldx, f->T, y, rt->width[op->buf], op->flags & MI_OPF_ADD,
                     rt->buf[MI_BUF_X] + op->c0, rt->width[MI_BUF_X], &prod);
    return 0;
}

static double op_moe(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    mi_product prod = {product, rt};
    double before = rt->s.moe_routed;
    if (op->flags & MI_OPF_ROUTED)
        rt_moe_routed(rt, op); /* the dispatched rows' selections, for the combine */
    else
        mi_moe_rows(&rt->model, op->layer, &rt->s, rt->buf[MI_BUF_XN], rt->width[MI_BUF_XN], f->T,
                rt->buf[op->buf] + op->c0, rt->width[op->buf], op->flags & MI_OPF_ADD, &prod);
    rt->routed = rt->s.moe_routed - before; /* this rank's expert load of the step */
    if (op->layer < MI_SPEC_MAX_LAYERS)
        rt->m.expert_load[op->layer] += rt->routed;
    return 0;
}

static double op_route(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    rt_route(rt, op, f);
    return 0;
}

static double op_add(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    int W = rt->width[MI_BUF_X];
    float *x = rt->buf[MI_BUF_X], *tmp = rt->buf[MI_BUF_TMP];
    if (op->variant == MI_OPV_POSTNORM) { /* the block's whole output, normed (Gemma) */
        const mi_layer *L = &rt->model.layers[op->layer];
        mi_post_norm_add(&rt->model, op->norm == MI_NORM_ATTN ? L->post_attn_norm : L->post_ffn_norm, tmp, W, f->T,
                         x, W);
        return 0;
    }
    for (int t = 0; t < f->T; t++)
        for (int k = op->c0; k < op->c0 + op->n; k++)
            x[(size_t)t * W + k] += tmp[(size_t)t * W + k];
    return 0;
}

/* HeadSplit's test: is the FFN's contribution small next to Z? (TMP holds the
 * FFN's output, X the residual stream Z.) */
static double op_spec_test(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    int l = op->layer;
    double worst;
    rt->accepted = mi_spec_accept(rt->buf[MI_BUF_TMP], rt->buf[MI_BUF_X], f->T, rt->width[MI_BUF_X], rt->tolerance,
                                  &worst);
    if (l < MI_SPEC_MAX_LAYERS) {
        rt->m.spec_decided[l] += 1;
        rt->m.spec_accepted[l] += rt->accepted;
        rt->m.spec_ratio_sum[l] += worst;
    }
    return 0;
}

static double op_logits(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    if (op->variant == MI_OPV_SERIES_HEAD) { /* the head over all patches of X, one output row */
        mi_series_head(&rt->model, rt->buf[MI_BUF_X], rt->buf[MI_BUF_LOGITS] + op->c0);
        return 0;
    }
    mi_matmul_ld(rt->buf[MI_BUF_LOGITS] + op->c0, rt->width[MI_BUF_LOGITS], rt->buf[MI_BUF_XN], rt->width[MI_BUF_XN],
                 &rt->model.classifier, f->T_logits, 0);
    return 0;
}

/* ------------------------------------------------------------ communication */

static double op_bcast(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    if (op->flags & MI_OPF_FLAG)
        rt->buf[MI_BUF_X][(size_t)f->T * rt->width[MI_BUF_X]] = rt->accepted ? 1.0f : 0.0f;
    double t = rt_bcast(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], op->kind == MI_OP_IBCAST, f);
    if (op->flags & MI_OPF_FLAG)
        rt->accepted = rt->buf[MI_BUF_X][(size_t)f->T * rt->width[MI_BUF_X]] != 0.0f;
    return t;
}

static double op_post(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    (void)f;
    xchg_rt *xr = &rt->xr[op->xid];
    if (xr->win != MPI_WIN_NULL)
        MPI_Win_post(xr->peers, 0, xr->win);
    return 0;
}

static double op_put(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    return rt_put(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], f);
}

static double op_allreduce(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    return rt_allreduce(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], op, f);
}

static double op_allgatherv(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    return rt_allgatherv(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], f);
}

static double op_gatherv(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    return rt_gatherv(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], f);
}

static double op_dispatch(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    return rt_moe_dispatch(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], f);
}

static double op_combine(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    return rt_moe_combine(rt, &rt->prog.xchg[op->xid], &rt->xr[op->xid], f);
}

static const op_fn exec_table[MI_N_OPS] = {
    [MI_OP_EMBED] = op_embed,           [MI_OP_NORM] = op_norm,         [MI_OP_ATTN] = op_attn,
    [MI_OP_PROJ] = op_proj,             [MI_OP_FFN_UP] = op_ffn_up,     [MI_OP_FFN_DOWN] = op_ffn_down,
    [MI_OP_ADD] = op_add,               [MI_OP_SPEC_TEST] = op_spec_test, [MI_OP_LOGITS] = op_logits,
    [MI_OP_BCAST] = op_bcast,           [MI_OP_IBCAST] = op_bcast,      [MI_OP_PUT] = op_put,
    [MI_OP_POST] = op_post,
    [MI_OP_ALLREDUCE] = op_allreduce,   [MI_OP_GATHERV] = op_gatherv,
    /* CATS somegather */
    [MI_OP_NORM_LOCAL] = op_norm_local, [MI_OP_MOE] = op_moe, [MI_OP_ALLGATHERV] = op_allgatherv,
    /* expert parallelism's sparse dispatch */
    [MI_OP_ROUTE] = op_route,           [MI_OP_DISPATCH] = op_dispatch, [MI_OP_COMBINE] = op_combine,
};

const mi_program *rt_program_of(const mi_runtime *rt, const fwd *f)
{
    return &rt->prog.prog[f->T == 1 ? MI_PHASE_DECODE : MI_PHASE_PREFILL][rt->rank];
}

void rt_run_ops(mi_runtime *rt, const fwd *f, int i0, int i1)
{
    const mi_program *g = rt_program_of(rt, f);
    for (int i = i0; i < i1; i++) {
        const mi_op *op = &g->ops[i];
        double comm = 0;
        int is_comm = mi_op_is_comm(op->kind);
        if (is_comm && rt->xr[op->xid].comm != MPI_COMM_NULL)
            comm += rt_complete_pending(rt);
        double t0 = mi_now();
        double in_mpi = exec_table[op->kind](rt, op, f);
        double t1 = mi_now();
        if (!is_comm) {
            mi_slowdown_pay(t0); /* an emulated slower device (common.h) */
            double t2 = mi_now();
            rt->m.slowdown += t2 - t1;
            t1 = t2;
        }
        if (is_comm) {
            comm += in_mpi;
        } else {
            double *b = bucket_of(rt, op);
            if (b)
                *b += t1 - t0;
        }
        rt->m.comm += comm;
        rt_record(rt, op->kind, op->layer, t0, t1);
        if (op->kind == MI_OP_MOE && rt->trace && rt->n_ev > 0)
            rt->ev[rt->n_ev - 1].routed = rt->routed;
    }
}

void rt_pass_done(mi_runtime *rt, const fwd *f, double sent0, double recv0)
{
    rt->m.comm += rt_complete_pending(rt);
    rt->m.forwards++;
    rt->m.positions += f->T;
    /* by what the rows are, not by the pass's size: a batch's decode pass
     * has many rows, a prompt's last chunk may have one */
    if (f->n_decode > 0) {
        double share = (double)f->n_decode / f->T;
        rt->m.decode_forwards += f->n_decode == f->T;
        rt->m.decode_rows += f->n_decode;
        rt->m.decode_bytes_sent += share * (rt->m.bytes_sent - sent0);
        rt->m.decode_bytes_recv += share * (rt->m.bytes_recv - recv0);
    }
}

void rt_run_program(mi_runtime *rt, const fwd *f)
{
    double sent0 = rt->m.bytes_sent, recv0 = rt->m.bytes_recv;
    rt_run_ops(rt, f, 0, rt_program_of(rt, f)->n_ops);
    rt_pass_done(rt, f, sent0, recv0);
}
