/* The messages of each communication op kind (see partition.h for what each
 * moves). Every message carries activations encoded in its exchange's wire
 * dtype (tensor.h; the plan's, or lower for a layer communication scaling
 * lowered); a rank always keeps its own values exactly. Byte counters count
 * what is handed to MPI, so tests can hold them against the plan's
 * prediction (mi_exchange_bytes). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "meshinfer/common.h"

/* How long a wait spins before it starts releasing the CPU between tests
 * (mi_runtime_options.spin_s; MESHINFER_SPIN_US overrides it). */
static double g_spin = -1;

void rt_set_spin(double s)
{
    const char *e = getenv("MESHINFER_SPIN_US");
    g_spin = e && *e ? atof(e) * 1e-6 : s;
}

static double spin_s(void)
{
    return g_spin < 0 ? 1e30 : g_spin;
}

double rt_spin_limit(void)
{
    return spin_s();
}

void rt_waitall(int n, MPI_Request *req)
{
    if (n <= 0)
        return;
    double t0 = mi_now(), spin = spin_s();
    struct timespec nap = {0, 20000};
    for (;;) {
        int done = 0;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done)
            return;
        if (mi_now() - t0 > spin)
            nanosleep(&nap, NULL);
    }
}

/* Finish the non-blocking broadcast this rank started as root, before its
 * next communication (the buffer and MPI's ordering rules need it). */
double rt_complete_pending(mi_runtime *rt)
{
    if (rt->n_pend == 0)
        return 0.0;
    double t0 = mi_now();
    rt_waitall(rt->n_pend, rt->pend);
    rt->n_pend = 0;
    return mi_now() - t0;
}

/* ob1 has no asynchronous progress: a pending send only advances inside MPI
 * calls, so long computations poke it between chunks. */
void rt_poke(mi_runtime *rt)
{
    if (rt->n_pend > 0) {
        int done = 0;
        MPI_Testall(rt->n_pend, rt->pend, &done, MPI_STATUSES_IGNORE);
        if (done)
            rt->n_pend = 0;
    }
}

/* Gather the columns of set s from T rows of buf (row width W) into dense
 * out [T, s->count]. */
static void gather_cols(const float *buf, int W, int T, const mi_colset *s, float *out)
{
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * s->count;
        for (int i = 0; i < s->n_runs; i++) {
            memcpy(o, buf + (size_t)t * W + s->c0[i], (size_t)s->len[i] * sizeof(float));
            o += s->len[i];
        }
    }
}

/* The inverse: dense in [T, s->count] into the columns of set s. */
static void scatter_cols(const float *in, int T, const mi_colset *s, float *buf, int W)
{
    for (int t = 0; t < T; t++) {
        const float *p = in + (size_t)t * s->count;
        for (int i = 0; i < s->n_runs; i++) {
            memcpy(buf + (size_t)t * W + s->c0[i], p, (size_t)s->len[i] * sizeof(float));
            p += s->len[i];
        }
    }
}

/* Encode T rows of set s of buf as one message: the set's columns, dense,
 * one wire row per position. Returns its bytes. */
size_t rt_pack_set(mi_runtime *rt, int wire, const float *buf, int W, int T, const mi_colset *s, void *out)
{
    size_t rb = mi_wire_row_bytes(wire, (size_t)s->count);
    if (s->n_runs == 1) {
        mi_wire_pack(wire, buf + s->c0[0], (size_t)T, (size_t)s->count, (size_t)W, out);
    } else {
        gather_cols(buf, W, T, s, rt->wtmp);
        mi_wire_pack(wire, rt->wtmp, (size_t)T, (size_t)s->count, (size_t)s->count, out);
    }
    return (size_t)T * rb;
}

void rt_unpack_set(mi_runtime *rt, int wire, const void *in, int T, const mi_colset *s, float *buf, int W)
{
    if (s->n_runs == 1) {
        mi_wire_unpack(wire, in, (size_t)T, (size_t)s->count, (size_t)W, buf + s->c0[0]);
    } else {
        mi_wire_unpack(wire, in, (size_t)T, (size_t)s->count, (size_t)s->count, rt->wtmp);
        scatter_cols(rt->wtmp, T, s, buf, W);
    }
}

/* ------------------------------------------------------------ broadcast */

/* The root's columns of buf (and with x->flag one float after the T rows,
 * the speculation decision, always exact) to the other members: the root
 * sends to each directly, so every member has them one link latency after
 * the root sends (MPI_Bcast's binomial tree takes log2(n) hops). A
 * non-blocking broadcast sends from its own copy and stays pending at the
 * root (rt_complete_pending); the receivers wait for it. */
/* A root's broadcast while rank 0 pipelines micro-batches: the message from
 * a copy of its own (the buffers are the next micro-batch's), sends not
 * waited for. */
static void bcast_deferred(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f, size_t rows,
                           size_t bytes)
{
    const mi_colset *s = &x->send[x->root];
    float *buf = rt->buf[x->buf];
    int W = rt->width[x->buf], n = rt->prog.comms[x->comm].n_members;
    if (rt->n_dreq + n > rt->cap_d || rt->n_dbuf + 1 > rt->cap_d) {
        rt->cap_d = 2 * rt->cap_d + n + 8;
        MPI_Request *r = realloc(rt->dreq, (size_t)rt->cap_d * sizeof *rt->dreq);
        void **b = realloc(rt->dbuf, (size_t)rt->cap_d * sizeof *rt->dbuf);
        if (!r || !b)
            mi_fatal("out of memory for deferred sends");
        rt->dreq = r, rt->dbuf = b;
    }
    unsigned char *msg = mi_malloc(bytes, "deferred message");
    rt->dbuf[rt->n_dbuf++] = msg;
    rt_pack_set(rt, x->wire, buf, W, f->T, s, msg);
    if (x->flag)
        memcpy(msg + rows, buf + (size_t)f->T * W, 4);
    for (int j = 0; j < n; j++)
        if (j != x->root)
            MPI_Isend(msg, (int)bytes, MPI_BYTE, j, TAG_XCHG, xr->comm, &rt->dreq[rt->n_dreq++]);
    rt->m.bytes_sent += (double)bytes * (n - 1);
}

double rt_complete_deferred(mi_runtime *rt)
{
    double t0 = mi_now();
    rt_waitall(rt->n_dreq, rt->dreq);
    for (int i = 0; i < rt->n_dbuf; i++)
        free(rt->dbuf[i]);
    rt->n_dreq = rt->n_dbuf = 0;
    return mi_now() - t0;
}

double rt_bcast(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, int nonblocking, const fwd *f)
{
    const mi_colset *s = &x->send[x->root];
    float *buf = rt->buf[x->buf];
    int W = rt->width[x->buf], T = f->T, root = xr->me == x->root;
    int n = rt->prog.comms[x->comm].n_members;
    size_t rows = (size_t)T * mi_wire_row_bytes(x->wire, (size_t)s->count);
    size_t bytes = rows + (x->flag ? 4 : 0);
    /* whole fp32 rows are the message as they lie (the flag sits right after them) */
    int in_place = !nonblocking && x->wire == MI_F32 && s->n_runs == 1 && s->count == W;
    unsigned char *msg = in_place ? (unsigned char *)buf : nonblocking ? rt->zwire : rt->wbuf;
    double t0 = mi_now();
    if (root && rt->defer) {
        bcast_deferred(rt, x, xr, f, rows, bytes);
        return mi_now() - t0;
    }
    if (root) {
        if (!in_place) {
            rt_pack_set(rt, x->wire, buf, W, T, s, msg);
            if (x->flag)
                memcpy(msg + rows, buf + (size_t)T * W, 4);
        }
        MPI_Request local[MI_MAX_RANKS], *req = nonblocking ? rt->pend : local;
        int k = 0;
        for (int j = 0; j < n; j++)
            if (j != x->root)
                MPI_Isend(msg, (int)bytes, MPI_BYTE, j, TAG_XCHG, xr->comm, &req[k++]);
        if (nonblocking)
            rt->n_pend = k;
        else
            rt_waitall(k, req);
    } else {
        MPI_Request rq;
        MPI_Irecv(msg, (int)bytes, MPI_BYTE, x->root, TAG_XCHG, xr->comm, &rq);
        rt_waitall(1, &rq);
        if (!in_place) {
            rt_unpack_set(rt, x->wire, msg, T, s, buf, W);
            if (x->flag)
                memcpy(buf + (size_t)T * W, msg + rows, 4);
        }
    }
    if (root)
        rt->m.bytes_sent += (double)bytes * (n - 1);
    else
        rt->m.bytes_recv += (double)bytes;
    return mi_now() - t0;
}

/* ------------------------------------------------------------ RMA put */

/* HeadSplit: head outputs go to the projection rank by RMA. Each head rank
 * puts its [T, its heads] outputs, encoded in the wire dtype, into its own
 * slot of the root's window (one MPI_Put); the root then decodes every slot
 * into place in HEADS. The root's own heads are copied exactly. */
double rt_put(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f)
{
    const mi_programs *p = &rt->prog;
    const mi_comm *cm = &p->comms[x->comm];
    int T = f->T, Wl = rt->width[MI_BUF_HEADS_LOCAL], W = rt->width[MI_BUF_HEADS];
    const float *local = rt->buf[MI_BUF_HEADS_LOCAL];
    float *heads = rt->buf[MI_BUF_HEADS];
    double t0 = mi_now();
    if (xr->me != x->root) {
        const mi_colset *s = &x->send[xr->me];
        size_t bytes = (size_t)T * mi_wire_row_bytes(x->wire, (size_t)s->count);
        MPI_Win_start(xr->peers, 0, xr->win);
        mi_wire_pack(x->wire, local, (size_t)T, (size_t)s->count, (size_t)Wl, rt->wbuf);
        MPI_Put(rt->wbuf, (int)bytes, MPI_BYTE, x->root, (MPI_Aint)xr->slot_off[xr->me], (int)bytes, MPI_BYTE,
                xr->win);
        MPI_Win_complete(xr->win);
        rt->m.bytes_sent += (double)bytes;
        return mi_now() - t0;
    }
    /* (the window was exposed by this exchange's POST, earlier) */
    /* its own heads, packed in HEADS_LOCAL, go to their columns exactly */
    const mi_colset *own = &x->send[xr->me];
    for (int t = 0; t < T; t++) {
        const float *src = local + (size_t)t * Wl;
        for (int i = 0; i < own->n_runs; i++) {
            memcpy(heads + (size_t)t * W + own->c0[i], src, (size_t)own->len[i] * sizeof(float));
            src += own->len[i];
        }
    }
    if (xr->win == MPI_WIN_NULL)
        return 0.0;
    /* MPI_Win_wait, releasing the CPU while the origins' puts travel */
    double w0 = mi_now();
    for (int done = 0; !done;) {
        MPI_Win_test(xr->win, &done);
        if (!done && mi_now() - w0 > spin_s()) {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
    for (int j = 0; j < cm->n_members; j++) {
        if (j == x->root)
            continue;
        const mi_colset *s = &x->send[j];
        rt_unpack_set(rt, x->wire, xr->slots + xr->slot_off[j], T, s, heads, W);
        rt->m.bytes_recv += (double)T * (double)mi_wire_row_bytes(x->wire, (size_t)s->count);
    }
    return mi_now() - t0;
}

/* ------------------------------------------------------------ all to all */

/* Every member sends sbuf + sdispls[j] (scounts[j] bytes) to member j and
 * receives rcounts[j] bytes from j at rbuf + rdispls[j], all messages posted
 * at once: one round of link latency. (MPI_Alltoallv and MPI_Allgatherv
 * proceed in up to n-1 pairwise rounds; with 5 ms links that made a lossy
 * reduction slower than an fp32 MPI_Allreduce.) */
static void exchange_all(MPI_Comm comm, int n, int me, const unsigned char *sbuf, const int *scounts,
                         const int *sdispls, unsigned char *rbuf, const int *rcounts, const int *rdispls)
{
    MPI_Request req[2 * MI_MAX_RANKS];
    int nr = 0;
    for (int j = 0; j < n; j++)
        if (j != me && rcounts[j] > 0)
            MPI_Irecv(rbuf + rdispls[j], rcounts[j], MPI_BYTE, j, TAG_XCHG, comm, &req[nr++]);
    for (int j = 0; j < n; j++)
        if (j != me && scounts[j] > 0)
            MPI_Isend(sbuf + sdispls[j], scounts[j], MPI_BYTE, j, TAG_XCHG, comm, &req[nr++]);
    rt_waitall(nr, req);
}

/* X[:, c0:c0+n] += the sum over members of TMP, with the same sums on every
 * member, in every wire dtype (partition.h, mi_wire_slice). In one round
 * (two members, or the exchange says so): every member sends its encoded
 * partial to every other, and all add the decoded partials (their own
 * decoded too) in member order. In two rounds, a reduce-scatter then an
 * allgather: member j receives the others' encoded partials of its
 * columns, sums them with its own in fp32 in member order, encodes the sum
 * once, and every member decodes the same sums. So residuals stay identical
 * across ranks (MPI_Allreduce does not promise that), no partial is quantized
 * twice, and the reduction takes two rounds of link latency where
 * MPI_Allreduce's recursive doubling takes up to log2(n) + 1 and
 * Alltoallv/Allgatherv up to n - 1 each (measured on 5 ms links: tp over 5
 * ranks 27.2 s with MPI_Allreduce, 21.9 s like this). A user-defined MPI_Op
 * inside MPI_Allreduce would re-quantize at every step of the reduction tree,
 * differently on different ranks. */
double rt_allreduce(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const mi_op *op, const fwd *f)
{
    const int d = op->n, ld = rt->width[MI_BUF_X], T = f->T, w = x->wire;
    float *tmp = rt->buf[MI_BUF_TMP] + op->c0, *xx = rt->buf[MI_BUF_X] + op->c0;
    int *counts = rt->counts, *displs = counts + MI_MAX_RANKS, *counts2 = displs + MI_MAX_RANKS,
        *displs2 = counts2 + MI_MAX_RANKS;
    double comm_t = 0;
    const int M = rt->prog.comms[x->comm].n_members, me = xr->me;
    if (xr->comm != MPI_COMM_NULL && (M == 2 || x->rounds == 1)) {
        size_t rb = mi_wire_row_bytes(w, (size_t)d), bytes = (size_t)T * rb;
        unsigned char *all = rt->wbuf; /* member j's encoded partial at j * bytes */
        mi_wire_pack(w, tmp, (size_t)T, (size_t)d, (size_t)ld, all + (size_t)me * bytes);
        for (int j = 0; j < M; j++) {
            counts[j] = counts2[j] = j == me ? 0 : (int)bytes;
            displs[j] = (int)((size_t)me * bytes);
            displs2[j] = (int)((size_t)j * bytes);
        }
        double t0 = mi_now();
        exchange_all(xr->comm, M, me, all, counts, displs, all, counts2, displs2);
        comm_t += mi_now() - t0;
        float *part = rt->wtmp;
        for (int t = 0; t < T; t++)
            memset(tmp + (size_t)t * ld, 0, (size_t)d * sizeof(float));
        for (int j = 0; j < M; j++) {
            mi_wire_unpack(w, all + (size_t)j * bytes, (size_t)T, (size_t)d, (size_t)d, part);
            for (int t = 0; t < T; t++)
                for (int k = 0; k < d; k++)
                    tmp[(size_t)t * ld + k] += part[(size_t)t * d + k];
        }
        rt->m.bytes_sent += (double)bytes * (M - 1);
        rt->m.bytes_recv += (double)bytes * (M - 1);
    } else if (xr->comm != MPI_COMM_NULL) {
        int c0[MI_MAX_RANKS] = {0}, len[MI_MAX_RANKS] = {0};
        for (int j = 0; j < M; j++)
            mi_wire_slice(d, M, j, &c0[j], &len[j]);
        size_t mine = (size_t)T * mi_wire_row_bytes(w, (size_t)len[me]), off = 0;
        unsigned char *send = rt->wbuf, *recv;
        /* reduce-scatter: my partial's columns of member j go to j */
        for (int j = 0; j < M; j++) {
            size_t b = j == me ? 0 : (size_t)T * mi_wire_row_bytes(w, (size_t)len[j]);
            if (b)
                mi_wire_pack(w, tmp + c0[j], (size_t)T, (size_t)len[j], (size_t)ld, send + off);
            counts[j] = (int)b;
            displs[j] = (int)off;
            off += b;
        }
        recv = send + off;
        for (int j = 0; j < M; j++) {
            counts2[j] = j == me ? 0 : (int)mine;
            displs2[j] = j * (int)mine;
        }
        double t0 = mi_now();
        exchange_all(xr->comm, M, me, send, counts, displs, recv, counts2, displs2);
        comm_t += mi_now() - t0;
        /* my columns: the members' partials summed in member order */
        float *sum = rt->wtmp, *part = rt->wtmp + (size_t)T * len[me];
        memset(sum, 0, (size_t)T * len[me] * sizeof(float));
        for (int j = 0; j < M; j++) {
            if (j == me) {
                for (int t = 0; t < T; t++)
                    for (int k = 0; k < len[me]; k++)
                        sum[(size_t)t * len[me] + k] += tmp[(size_t)t * ld + c0[me] + k];
                continue;
            }
            mi_wire_unpack(w, recv + displs2[j], (size_t)T, (size_t)len[me], (size_t)len[me], part);
            for (size_t k = 0; k < (size_t)T * len[me]; k++)
                sum[k] += part[k];
        }
        /* allgather the encoded sums; every member decodes all of them */
        unsigned char *all = recv + (size_t)M * mine;
        size_t aoff = 0;
        for (int j = 0; j < M; j++) {
            counts[j] = (int)((size_t)T * mi_wire_row_bytes(w, (size_t)len[j]));
            displs[j] = (int)aoff;
            aoff += (size_t)counts[j];
        }
        mi_wire_pack(w, sum, (size_t)T, (size_t)len[me], (size_t)len[me], all + displs[me]);
        for (int j = 0; j < M; j++) { /* my encoded sum to everyone */
            counts2[j] = j == me ? 0 : (int)mine;
            displs2[j] = displs[me];
        }
        t0 = mi_now();
        exchange_all(xr->comm, M, me, all, counts2, displs2, all, counts, displs);
        comm_t += mi_now() - t0;
        for (int j = 0; j < M; j++)
            mi_wire_unpack(w, all + displs[j], (size_t)T, (size_t)len[j], (size_t)ld, tmp + c0[j]);
        double b = (double)(off + (size_t)(M - 1) * mine); /* what I send; I receive as much */
        rt->m.bytes_sent += b;
        rt->m.bytes_recv += b;
    }
    if (op->flags & MI_OPF_SUM) /* a post-norm joins it to X next */
        return comm_t;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < d; k++)
            xx[(size_t)t * ld + k] += tmp[(size_t)t * ld + k];
    return comm_t;
}

/* ------------------------------------------------------------ allgatherv */

/* splitmix64: the loss generator's mixing step */
static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* CATS message loss: is the message of sender s (world rank) to receiver
 * r at position pos of this exchange lost? Keyed by what the mode says must
 * agree: link (s, r), receiver (r: nothing reaches it), sender (s: it reaches
 * nobody), so every rank decides the same without talking. */
static int lost(const mi_runtime *rt, const mi_exchange *x, int pos, int s, int r)
{
    const mi_runtime_options *o = &rt->opt;
    if (o->loss <= 0 || s == r)
        return 0;
    uint64_t h = mix(o->loss_seed ^ 0x5eed);
    h = mix(h ^ (uint64_t)pos);
    h = mix(h ^ ((uint64_t)(x->layer + 1) << 8 | (uint64_t)x->what));
    if (o->loss_mode != MI_LOSS_RECEIVER)
        h = mix(h ^ ((uint64_t)s << 1 | 1));
    if (o->loss_mode != MI_LOSS_SENDER)
        h = mix(h ^ ((uint64_t)r << 1));
    return (double)(h >> 11) * 0x1.0p-53 < o->loss;
}

static void mark(unsigned char *held, int W, int T0, int T, const mi_colset *s, unsigned char v)
{
    for (int t = T0; t < T0 + T; t++)
        for (int i = 0; i < s->n_runs; i++)
            memset(held + (size_t)t * W + s->c0[i], v, (size_t)s->len[i]);
}

static void zero_cols(float *buf, int W, int t, const mi_colset *s)
{
    for (int i = 0; i < s->n_runs; i++)
        memset(buf + (size_t)t * W + s->c0[i], 0, (size_t)s->len[i] * sizeof(float));
}

/* Columns of own not in sent (both ascending sets) are absent at row t:
 * not held, and zero unless they are the owner's own residual values, which
 * must survive (only the norm and the products leave them out). */
static void mark_pruned(float *buf, unsigned char *held, int W, int t, const mi_colset *own, const mi_colset *sent,
                        int keep_values)
{
    int si = 0, sc = sent->n_runs ? sent->c0[0] : -1, send_end = sent->n_runs ? sent->c0[0] + sent->len[0] : -1;
    for (int i = 0; i < own->n_runs; i++)
        for (int c = own->c0[i]; c < own->c0[i] + own->len[i]; c++) {
            while (si < sent->n_runs && c >= send_end) {
                si++;
                if (si < sent->n_runs) {
                    sc = sent->c0[si];
                    send_end = sc + sent->len[si];
                }
            }
            if (si < sent->n_runs && c >= sc)
                continue; /* sent */
            if (held)
                held[(size_t)t * W + c] = 0;
            if (!keep_values)
                buf[(size_t)t * W + c] = 0.0f;
        }
}

/* CATS somegather: each member sends its kept columns of buf (all it
 * owns when nothing is pruned), encoded, to every other member, all messages
 * posted at once (one round of link latency; MPI_Allgatherv's ring or Bruck
 * takes up to n - 1 or log2 n rounds). What a rank does not hold afterwards
 * (pruned columns, lost messages) is absent: zero in buf, and for the
 * residual not held in rt->held, so the next device-local norm leaves it out. */
double rt_allgatherv(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f)
{
    const mi_comm *cm = &rt->prog.comms[x->comm];
    const int M = cm->n_members, me = xr->me, T = f->T, W = rt->width[x->buf];
    float *buf = rt->buf[x->buf];
    int *counts = rt->counts, *displs = counts + MI_MAX_RANKS, *counts2 = displs + MI_MAX_RANKS,
        *displs2 = counts2 + MI_MAX_RANKS;
    double t0 = mi_now();
    unsigned char *send = rt->wbuf;
    size_t mine = M > 1 ? rt_pack_set(rt, x->wire, buf, W, T, &x->send[me], send) : 0, off = mine;
    for (int j = 0; j < M; j++) {
        counts[j] = j == me ? 0 : (int)mine;
        displs[j] = 0;
        counts2[j] = j == me ? 0 : (int)((size_t)T * mi_wire_row_bytes(x->wire, (size_t)x->send[j].count));
        displs2[j] = (int)off;
        off += (size_t)counts2[j];
    }
    if (xr->comm != MPI_COMM_NULL)
        exchange_all(xr->comm, M, me, send, counts, displs, send, counts2, displs2);
    double comm_t = mi_now() - t0;
    int is_x = x->buf == MI_BUF_X;
    unsigned char *held = is_x ? rt->held : NULL;
    int pruned = 0;
    for (int j = 0; j < M; j++)
        pruned |= x->own && x->own[j].count != x->send[j].count;
    int any_absent = pruned;
    for (int j = 0; j < M; j++) {
        if (j == me)
            continue;
        rt_unpack_set(rt, x->wire, send + displs2[j], T, &x->send[j], buf, W);
        rt->m.bytes_sent += (double)mine;
        rt->m.bytes_recv += (double)counts2[j];
        for (int t = 0; t < T; t++) {
            rt->m.msgs_recv += 1;
            if (lost(rt, x, fwd_pos(f, t), cm->members[j], rt->rank)) {
                rt->m.msgs_lost += 1;
                any_absent = 1;
            }
        }
    }
    if (held)
        rt->held_all = !any_absent;
    if (!any_absent)
        return comm_t;
    /* absent columns: the others' pruned ones, a lost message's, and with
     * ordinary magnitude pruning the owner's own pruned ones too */
    if (held)
        memset(held, 1, (size_t)T * W);
    for (int j = 0; j < M; j++) {
        const mi_colset *own = &x->own[j];
        int is_me = j == me;
        for (int t = 0; t < T; t++) {
            int gone = !is_me && lost(rt, x, fwd_pos(f, t), cm->members[j], rt->rank);
            if (gone) {
                /* nothing of j's arrived at this position */
                if (held)
                    mark(held, W, t, 1, own, 0);
                zero_cols(buf, W, t, own);
            } else if (own->count != x->send[j].count && (!is_me || x->mask_own)) {
                mark_pruned(buf, held, W, t, own, &x->send[j], is_me && is_x);
            }
        }
    }
    return comm_t;
}
