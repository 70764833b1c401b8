/* The gathers at the root (partition.h MI_OP_GATHERV): the logits of every
 * classifier slice, whole or as each slice's best (logit, token id) pairs
 * when that is all sampling needs, and the embedding rows of a split
 * vocabulary. Every message's size follows from the programs alone (never
 * from the tokens), so the counters equal mi_exchange_bytes. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/sampler.h"

/* Candidates member j sends per position. */
static int cand_count(const mi_exchange *x, int j)
{
    return x->cand < x->send[j].count ? x->cand : x->send[j].count;
}

/* Bytes member j sends per position (the root sends nothing). */
static size_t per_pos(const mi_exchange *x, int j)
{
    if (j == x->root)
        return 0;
    if (x->cand > 0)
        return (size_t)cand_count(x, j) * sizeof(mi_candidate);
    return mi_wire_row_bytes(x->wire, (size_t)x->send[j].count);
}

/* The best candidates of the columns s of one logits row, into out (room
 * for s->count); returns how many (min(K, s->count)). */
static int row_candidates(const float *row, const mi_colset *s, int K, mi_candidate *out)
{
    int m = 0;
    for (int i = 0; i < s->n_runs; i++)
        m += mi_top_candidates(row + s->c0[i], s->len[i], s->c0[i], K, out + m);
    return s->n_runs > 1 ? mi_candidates_best(out, m, K) : m;
}

/* A member's message: T positions of its columns, encoded, or of its best
 * candidates. Returns its bytes. */
static size_t pack_mine(mi_runtime *rt, const mi_exchange *x, int me, int T, unsigned char *out)
{
    const float *buf = rt->buf[x->buf];
    int W = rt->width[x->buf];
    if (x->cand <= 0)
        return rt_pack_set(rt, x->wire, buf, W, T, &x->send[me], out);
    size_t per = per_pos(x, me);
    mi_candidate *tmp = (mi_candidate *)rt->wtmp;
    for (int t = 0; t < T; t++) {
        int m = row_candidates(buf + (size_t)t * W, &x->send[me], x->cand, tmp);
        memcpy(out + (size_t)t * per, tmp, (size_t)m * sizeof *tmp);
    }
    return (size_t)T * per;
}

/* The root's logits rows rebuilt from its own columns' candidates and the
 * members' (sampler.h: -INFINITY for every other token). */
static void rebuild_logits(mi_runtime *rt, const mi_exchange *x, const mi_comm *cm, int T, const int *displs)
{
    int W = rt->width[x->buf];
    mi_candidate *all = (mi_candidate *)rt->wtmp;
    for (int t = 0; t < T; t++) {
        float *row = rt->buf[x->buf] + (size_t)t * W;
        int m = row_candidates(row, &x->send[x->root], x->cand, all);
        for (int j = 0; j < cm->n_members; j++) {
            if (j == x->root)
                continue;
            int k = cand_count(x, j);
            memcpy(all + m, rt->wbuf + displs[j] + (size_t)t * per_pos(x, j), (size_t)k * sizeof *all);
            m += k;
        }
        mi_logits_from_candidates(all, m, W, row);
    }
}

/* The member whose vocabulary rows (own) hold token tok, -1 if none. */
static int owner_of(const mi_exchange *x, int n, int tok)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < x->own[j].n_runs; i++)
            if (tok >= x->own[j].c0[i] && tok < x->own[j].c0[i] + x->own[j].len[i])
                return j;
    return -1;
}

/* A split vocabulary's rows at the root: each position's from its token's
 * owner (the root's own rows are in place). */
static void place_rows(mi_runtime *rt, const mi_exchange *x, const mi_comm *cm, int T, const int *displs)
{
    int W = rt->width[x->buf];
    float *X = rt->buf[x->buf], *rows = rt->wtmp;
    for (int j = 0; j < cm->n_members; j++) {
        if (j == x->root)
            continue;
        rt_unpack_set(rt, x->wire, rt->wbuf + displs[j], T, &x->send[j], rows, W);
        for (int t = 0; t < T; t++)
            if (owner_of(x, cm->n_members, rt->tokens[t]) == j)
                memcpy(X + (size_t)t * W, rows + (size_t)t * W, (size_t)W * sizeof(float));
    }
}

/* Every non-root member's message to the root, which places them (its own
 * values are in place): LOGITS for the positions whose logits are wanted,
 * X (by_token) for every position. */
double rt_gatherv(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f)
{
    const mi_comm *cm = &rt->prog.comms[x->comm];
    int T = x->by_token ? f->T : f->T_logits;
    int *counts = rt->counts, *displs = counts + MI_MAX_RANKS;
    double t0 = mi_now();
    int mine = 0, root = xr->me == x->root;
    if (root) {
        int off = 0;
        for (int j = 0; j < cm->n_members; j++) {
            counts[j] = (int)((size_t)T * per_pos(x, j));
            displs[j] = off;
            off += counts[j];
        }
    } else {
        mine = (int)pack_mine(rt, x, xr->me, T, rt->wbuf);
    }
    MPI_Request rq;
    MPI_Igatherv(root ? NULL : rt->wbuf, mine, MPI_BYTE, root ? rt->wbuf : NULL, counts, displs, MPI_BYTE, x->root,
                 xr->comm, &rq);
    rt_waitall(1, &rq);
    if (!root) {
        rt->m.bytes_sent += (double)mine;
        return mi_now() - t0;
    }
    if (x->by_token)
        place_rows(rt, x, cm, T, displs);
    else if (x->cand > 0)
        rebuild_logits(rt, x, cm, T, displs);
    for (int j = 0; j < cm->n_members; j++) {
        if (j != x->root && x->cand <= 0 && !x->by_token)
            rt_unpack_set(rt, x->wire, rt->wbuf + displs[j], T, &x->send[j], rt->buf[x->buf], rt->width[x->buf]);
        rt->m.bytes_recv += (double)counts[j];
    }
    return mi_now() - t0;
}
