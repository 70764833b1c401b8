/* Expert parallelism's sparse dispatch (partition.h MI_OP_ROUTE, DISPATCH,
 * MOE with ROUTED, COMBINE): the root routes every position, sends each
 * other expert rank only the rows of the positions that chose one of its
 * experts (with the positions' selections), the members run those
 * selections, and the root adds the rows that come back in the one-device
 * order (forward.h mi_moe_route), so the residual is bit-identical to one
 * device's when the wire dtype is fp32.
 *
 * A dispatch message's size depends on the routing: the member learns it
 * from the message itself (MPI_Iprobe, MPI_Get_count: R rows of XN in the
 * wire dtype, then R records of k int32 expert ids and k fp32 weights), and
 * the root always sends one, empty when no position chose the member's
 * experts, so every member knows when it has nothing this step. The
 * combine's sizes the root knows from its own routing, so it posts exact
 * receives; a member with no rows sends nothing. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/forward.h"

/* owner[e]: the member holding expert e */
static void owners(const mi_exchange *x, int n, int *owner)
{
    for (int e = 0; e < x->n_experts; e++)
        owner[e] = -1;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < x->own[j].n_runs; i++)
            for (int e = x->own[j].c0[i]; e < x->own[j].c0[i] + x->own[j].len[i]; e++)
                owner[e] = j;
}

/* Does member j get position t's row? */
static int wants(const mi_runtime *rt, const mi_exchange *x, const int *owner, int j, int t)
{
    if (j == x->shared)
        return 1;
    for (int i = 0; i < x->top_k; i++)
        if (owner[rt->moe_ids[(size_t)t * x->top_k + i]] == j)
            return 1;
    return 0;
}

/* Rows member j returns for the dispatched positions: its selections, and a
 * gated shared row per position when it holds the shared expert. */
static int returned(const mi_runtime *rt, const mi_exchange *x, const int *owner, int j, int T)
{
    int n = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < x->top_k; i++)
            n += owner[rt->moe_ids[(size_t)t * x->top_k + i]] == j;
        n += j == x->shared;
    }
    return n;
}

void rt_route(mi_runtime *rt, const mi_op *op, const fwd *f)
{
    const mi_config *c = &rt->model.cfg;
    int k = c->n_experts_used, W = rt->width[MI_BUF_XN];
    for (int t = 0; t < f->T; t++)
        mi_moe_route(&rt->model, op->layer, &rt->s, rt->buf[MI_BUF_XN] + (size_t)t * W, rt->moe_ids + (size_t)t * k,
                     rt->moe_w + (size_t)t * k, NULL);
    rt->moe_rows = f->T;
    rt->moe_nout = 0;
}

double rt_moe_dispatch(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f)
{
    const mi_comm *cm = &rt->prog.comms[x->comm];
    const int M = cm->n_members, me = xr->me, k = x->top_k, d = x->send[x->root].count, W = rt->width[MI_BUF_XN];
    const size_t rb = mi_wire_row_bytes(x->wire, (size_t)d), per = rb + 8 * (size_t)k;
    double t0 = mi_now();
    if (me == x->root) {
        int owner[MI_MAX_EXPERTS];
        owners(x, M, owner);
        MPI_Request req[MI_MAX_RANKS];
        int nr = 0;
        size_t off = 0;
        for (int j = 0; j < M; j++) {
            if (j == me)
                continue;
            unsigned char *msg = rt->moe_wire + off;
            int R = 0;
            for (int t = 0; t < f->T; t++)
                R += wants(rt, x, owner, j, t);
            unsigned char *rec = msg + (size_t)R * rb;
            for (int t = 0, r = 0; t < f->T; t++) {
                if (!wants(rt, x, owner, j, t))
                    continue;
                mi_wire_pack(x->wire, rt->buf[MI_BUF_XN] + (size_t)t * W, 1, (size_t)d, (size_t)d, msg + (size_t)r * rb);
                memcpy(rec + (size_t)r * 8 * k, rt->moe_ids + (size_t)t * k, 4 * (size_t)k);
                memcpy(rec + (size_t)r * 8 * k + 4 * (size_t)k, rt->moe_w + (size_t)t * k, 4 * (size_t)k);
                r++;
            }
            MPI_Isend(msg, (int)((size_t)R * per), MPI_BYTE, j, TAG_XCHG, xr->comm, &req[nr++]);
            rt->m.bytes_sent += (double)((size_t)R * per);
            off += (size_t)R * per;
        }
        rt_waitall(nr, req);
        return mi_now() - t0;
    }
    /* a member: the message's size says how many rows */
    MPI_Status st;
    int flag = 0, bytes = 0;
    double spin = rt_spin_limit();
    struct timespec nap = {0, 20000};
    for (;;) {
        MPI_Iprobe(x->root, TAG_XCHG, xr->comm, &flag, &st);
        if (flag)
            break;
        if (mi_now() - t0 > spin)
            nanosleep(&nap, NULL);
    }
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    if (bytes < 0 || (size_t)bytes % per != 0 || (size_t)bytes / per > (size_t)f->T)
        mi_fatal("expert dispatch of layer %d: a message of %d bytes is not whole rows of %zu bytes for at most %d "
                 "positions", x->layer, bytes, per, f->T);
    MPI_Recv(rt->moe_wire, bytes, MPI_BYTE, x->root, TAG_XCHG, xr->comm, MPI_STATUS_IGNORE);
    int R = (int)((size_t)bytes / per);
    mi_wire_unpack(x->wire, rt->moe_wire, (size_t)R, (size_t)d, (size_t)W, rt->buf[MI_BUF_XN]);
    const unsigned char *rec = rt->moe_wire + (size_t)R * rb;
    for (int r = 0; r < R; r++) {
        memcpy(rt->moe_ids + (size_t)r * k, rec + (size_t)r * 8 * k, 4 * (size_t)k);
        memcpy(rt->moe_w + (size_t)r * k, rec + (size_t)r * 8 * k + 4 * (size_t)k, 4 * (size_t)k);
        for (int i = 0; i < k; i++)
            if (rt->moe_ids[(size_t)r * k + i] < 0 || rt->moe_ids[(size_t)r * k + i] >= x->n_experts)
                mi_fatal("expert dispatch of layer %d: expert id %d out of range", x->layer,
                         rt->moe_ids[(size_t)r * k + i]);
    }
    rt->moe_rows = R;
    rt->moe_nout = 0;
    rt->m.bytes_recv += (double)bytes;
    return mi_now() - t0;
}

void rt_moe_routed(mi_runtime *rt, const mi_op *op)
{
    const mi_config *c = &rt->model.cfg;
    int k = c->n_experts_used, d = c->dim, W = rt->width[MI_BUF_XN], n = 0;
    for (int r = 0; r < rt->moe_rows; r++) {
        const float *x = rt->buf[MI_BUF_XN] + (size_t)r * W;
        for (int j = 0; j < k; j++) {
            int i = mi_moe_held_index(&rt->model, op->layer, rt->moe_ids[(size_t)r * k + j]);
            if (i >= 0)
                mi_moe_expert_row(&rt->model, op->layer, &rt->s, x, i, rt->moe_w[(size_t)r * k + j],
                                  rt->moe_out + (size_t)n++ * d, NULL);
        }
        if (op->flags & MI_OPF_SHARED)
            mi_moe_shared_row(&rt->model, op->layer, &rt->s, x, rt->moe_out + (size_t)n++ * d, NULL);
    }
    rt->moe_nout = n;
}

double rt_moe_combine(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f)
{
    const mi_comm *cm = &rt->prog.comms[x->comm];
    const int M = cm->n_members, me = xr->me, k = x->top_k, d = x->send[x->root].count;
    const size_t rb = mi_wire_row_bytes(x->wire, (size_t)d);
    double t0 = mi_now();
    if (me != x->root) {
        if (rt->moe_nout > 0) {
            size_t bytes = (size_t)rt->moe_nout * rb;
            mi_wire_pack(x->wire, rt->moe_out, (size_t)rt->moe_nout, (size_t)d, (size_t)d, rt->moe_wire);
            MPI_Request rq;
            MPI_Isend(rt->moe_wire, (int)bytes, MPI_BYTE, x->root, TAG_XCHG, xr->comm, &rq);
            rt_waitall(1, &rq);
            rt->m.bytes_sent += (double)bytes;
        }
        return mi_now() - t0;
    }
    int owner[MI_MAX_EXPERTS], rows[MI_MAX_RANKS], next[MI_MAX_RANKS];
    const float *from[MI_MAX_RANKS];
    owners(x, M, owner);
    MPI_Request req[MI_MAX_RANKS];
    int nr = 0;
    size_t off = 0, foff = 0;
    for (int j = 0; j < M; j++) {
        next[j] = 0;
        if (j == me) {
            rows[j] = rt->moe_nout;
            from[j] = rt->moe_out;
            continue;
        }
        rows[j] = returned(rt, x, owner, j, f->T);
        from[j] = rt->moe_in + foff;
        if (rows[j] > 0)
            MPI_Irecv(rt->moe_wire + off, (int)((size_t)rows[j] * rb), MPI_BYTE, j, TAG_XCHG, xr->comm, &req[nr++]);
        off += (size_t)rows[j] * rb;
        foff += (size_t)rows[j] * d;
    }
    rt_waitall(nr, req);
    double comm_t = mi_now() - t0;
    off = 0;
    for (int j = 0; j < M; j++) {
        if (j == me)
            continue;
        mi_wire_unpack(x->wire, rt->moe_wire + off, (size_t)rows[j], (size_t)d, (size_t)d, (float *)from[j]);
        off += (size_t)rows[j] * rb;
        rt->m.bytes_recv += (double)((size_t)rows[j] * rb);
    }
    /* each position: 0, + its k rows in selection order, + the shared row; then X += that */
    float *acc = rt->s.moe, *X = rt->buf[MI_BUF_X];
    int WX = rt->width[MI_BUF_X];
    for (int t = 0; t < f->T; t++) {
        memset(acc, 0, (size_t)d * sizeof(float));
        for (int i = 0; i < k; i++) {
            int j = owner[rt->moe_ids[(size_t)t * k + i]];
            if (next[j] >= rows[j])
                mi_fatal("expert combine of layer %d: member %d returned too few rows", x->layer, j);
            mi_moe_add_row(acc, from[j] + (size_t)next[j]++ * d, d);
        }
        if (x->shared >= 0) {
            int j = x->shared;
            if (next[j] >= rows[j])
                mi_fatal("expert combine of layer %d: member %d returned too few rows", x->layer, j);
            mi_moe_add_row(acc, from[j] + (size_t)next[j]++ * d, d);
        }
        mi_moe_add_row(X + (size_t)t * WX, acc, d);
    }
    return comm_t;
}
