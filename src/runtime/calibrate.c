/* How fast this rank's device computes its share (see runtime.h
 * mi_runtime_stream_rate): the cost model's compute time is weight bytes
 * over a streaming rate, so measure that rate on the rank's own weights. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/hwinfo.h"
#include "meshinfer/kernels.h"

/* One matrix-vector product over every weight matrix this rank holds (what
 * one decoded token reads of its shard). Returns the bytes read. */
static double one_pass(mi_runtime *rt, float *x, float *y)
{
    const mi_model *m = &rt->model;
    double bytes = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const mi_layer *L = &m->layers[l];
        const mi_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w3, &L->w2};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if (ts[i]->rows > 0 && ts[i]->cols > 0) {
                double t0 = mi_now();
                mi_matmul(y, x, ts[i], 1);
                mi_slowdown_pay(t0);
                bytes += (double)mi_tensor_bytes(ts[i]->dtype, (size_t)ts[i]->rows, (size_t)ts[i]->cols);
            }
    }
    if (m->cls_nv > 0) {
        double t0 = mi_now();
        mi_matmul(y, x, &m->classifier, 1);
        mi_slowdown_pay(t0);
        bytes += (double)mi_tensor_bytes(m->classifier.dtype, (size_t)m->classifier.rows,
                                         (size_t)m->classifier.cols);
    }
    return bytes;
}

/* Median of n values (sorts v). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

double mi_runtime_stream_rate(mi_runtime *rt, double min_seconds, double *all, double *all_cpu)
{
    const mi_config *c = &rt->plan.cfg;
    size_t wide = (size_t)(c->hidden_dim > c->vocab_size ? c->hidden_dim : c->vocab_size);
    if ((size_t)c->n_heads * c->head_dim > wide)
        wide = (size_t)c->n_heads * c->head_dim;
    if ((size_t)c->dim > wide)
        wide = (size_t)c->dim;
    float *x = mi_calloc(wide, sizeof(float), "calibration"), *y = mi_calloc(wide, sizeof(float), "calibration");
    for (size_t i = 0; i < wide; i++)
        x[i] = 0.01f * (float)(i % 17);
    /* every rank measures at once, after all have loaded: a neighbour still
     * reading its shard must not slow this one's passes */
    if (rt->size > 1)
        MPI_Barrier(MPI_COMM_WORLD);
    one_pass(rt, x, y); /* warm: pages touched, caches as in steady decoding */
    /* the median pass of at least three and min_seconds: one pass that a
     * neighbour's burst stretched must not set a device's rate (a single
     * window's mean put a testbed prediction 92% off). Each pass follows an
     * idle gap, as a decoded token's compute follows its wait for messages:
     * under a CPU quota (cgroup cpu.max, the emulated testbed's 40% of 5 ms
     * periods) passes back to back ran out of quota and measured its share
     * of the core, or not, as the window fell: 3 to 19 GB/s for one rank's
     * same 37 MB, which decoding read in 3.1-5.0 ms a token every time
     * (results.md, the simulator against the testbed); after a gap of two
     * such periods a pass starts with its quota whole, as decoding does */
    double r[64], rc[64], t0 = mi_now(), busy = 0;
    const double gap = 10e-3;
    int n = 0;
    /* the same passes on the thread's CPU clock too: the unthrottled rate under a CPU quota,
     * whatever the periods did (what the simulator's quota model takes; an emulated slowdown
     * sleeps, so its factor is applied); with more compute threads than this one, the wall rate */
    double (*clock)(void) = mi_threads() == 1 ? mi_cpu_now : mi_now, stretch = mi_threads() == 1 ? mi_slowdown() : 1;
    do {
        struct timespec ts = {0, (long)(gap * 1e9)};
        nanosleep(&ts, NULL);
        double c0 = clock(), p0 = mi_now(), bytes = one_pass(rt, x, y), dt = mi_now() - p0;
        double dc = (clock() - c0) * stretch;
        if (bytes <= 0 || dt <= 0)
            break;
        rc[n] = dc > 0 ? bytes / dc : bytes / dt;
        r[n++] = bytes / dt;
        busy += dt;
    } while (n < 64 && (n < 3 || (busy < min_seconds && mi_now() - t0 < 0.2)));
    free(x);
    free(y);
    double rate[2] = {n > 0 ? median(r, n) : 0, n > 0 ? median(rc, n) : 0};
    double *both = rt->size > 1 && rt->rank == 0 ? mi_calloc(2 * (size_t)rt->size, sizeof(double), "rates") : NULL;
    if (rt->size > 1)
        MPI_Gather(rate, 2, MPI_DOUBLE, both, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    for (int i = 0; i < rt->size && (rt->size == 1 || both); i++) {
        if (all)
            all[i] = rt->size > 1 ? both[2 * i] : rate[0];
        if (all_cpu)
            all_cpu[i] = rt->size > 1 ? both[2 * i + 1] : rate[1];
    }
    free(both);
    return rate[0];
}

/* Round trips of `bytes` between this rank and `peer` (the initiator when
 * first), median of reps after one warm-up. */
static double ping_pong(int peer, int first, char *buf, int bytes, int reps)
{
    double t[16];
    for (int k = 0; k <= reps; k++) {
        double t0 = mi_now();
        MPI_Request q;
        for (int leg = 0; leg < 2; leg++) {
            if ((leg == 0) == first)
                MPI_Isend(buf, bytes, MPI_BYTE, peer, 12, MPI_COMM_WORLD, &q);
            else
                MPI_Irecv(buf, bytes, MPI_BYTE, peer, 12, MPI_COMM_WORLD, &q);
            rt_waitall(1, &q);
        }
        if (k > 0)
            t[k - 1] = mi_now() - t0;
    }
    return median(t, reps);
}

void mi_calibrate_links(size_t big, double *rtt_s, double *bw)
{
    int rank = mi_world_rank(), n = mi_world_size();
    if (big > (1u << 26))
        big = 1u << 26;
    char *buf = mi_calloc(big > 8 ? big : 8, 1, "link calibration");
    double *mine = mi_calloc((size_t)n * 2, sizeof(double), "link calibration");
    rt_set_spin(20e-6);
    /* one pair at a time, so that no two measurements share a medium */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank != a && rank != b)
                continue;
            int peer = rank == a ? b : a;
            /* a new connection's first messages are slow (set-up, slow start): warm it with
             * the large size, and measure again when the large message came out no slower
             * than the small one's round trip allows */
            double small = 0, large = 0, extra = -1;
            ping_pong(peer, rank == a, buf, (int)big, 1);
            for (int tries = 0; tries < 3 && extra <= 0; tries++) {
                small = ping_pong(peer, rank == a, buf, 8, 9);
                large = ping_pong(peer, rank == a, buf, (int)big, 5);
                /* the large message's extra time over a small one is its transfer, both ways,
                 * and (past MPI's eager limit) one more round trip each way for the
                 * receiver's go-ahead */
                extra = large - (big > 65536 ? 3 : 1) * small;
                double e = extra;
                MPI_Sendrecv_replace(&e, 1, MPI_DOUBLE, peer, 13, peer, 13, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (rank != a)
                    extra = e; /* the initiator's figure decides for both whether to try again */
            }
            if (rank == a) {
                mine[2 * b] = small;
                mine[2 * b + 1] = extra > 0 ? 2.0 * (double)big / extra : -1; /* -1: not measurable */
            }
        }
    double *all = rank == 0 ? mi_calloc((size_t)n * n * 2, sizeof(double), "link calibration") : NULL;
    MPI_Gather(mine, 2 * n, MPI_DOUBLE, all, 2 * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double ok[MI_MAX_RANKS * 4];
        int n_ok = 0;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                double r = all[(size_t)a * 2 * n + 2 * b], w = all[(size_t)a * 2 * n + 2 * b + 1];
                rtt_s[a * n + b] = rtt_s[b * n + a] = r;
                bw[a * n + b] = bw[b * n + a] = w;
                if (w > 0 && n_ok < (int)(sizeof ok / sizeof ok[0]))
                    ok[n_ok++] = w;
            }
        /* a link whose large messages never came out slower than its small ones has no
         * bandwidth to measure at this size: it gets the median of the others (or shared
         * memory's order of magnitude), said so, not a made-up figure */
        double fill = n_ok ? median(ok, n_ok) : 5e9;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++)
                if (bw[a * n + b] <= 0) {
                    bw[a * n + b] = bw[b * n + a] = fill;
                    fprintf(stderr, "calibrate: link %d-%d: a %zu-byte message was no slower than its round trip "
                                    "allows in 3 tries; its bandwidth is taken as %.0f Mbit/s (the other links' "
                                    "median)\n", a, b, big, fill * 8 / 1e6);
                }
    }
    if (rank == 0)
        for (int a = 0; a < n; a++)
            rtt_s[a * n + a] = bw[a * n + a] = 0;
    free(all);
    free(mine);
    free(buf);
}

/* The ranks on this rank's host (calibrate's turns). */
static MPI_Comm g_host = MPI_COMM_NULL;

void mi_world_host(int *local_rank, int *local_size)
{
    *local_rank = 0;
    *local_size = 1;
    if (mi_world_size() < 2)
        return;
    if (g_host == MPI_COMM_NULL)
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mi_world_rank(), MPI_INFO_NULL, &g_host);
    MPI_Comm_rank(g_host, local_rank);
    MPI_Comm_size(g_host, local_size);
}

void mi_world_host_turns(void (*fn)(void *ctx), void *ctx)
{
    int me, n;
    mi_world_host(&me, &n);
    rt_set_spin(20e-6);
    for (int turn = 0; turn < n; turn++) {
        if (turn == me)
            fn(ctx);
        if (n > 1) {
            /* the others wait asleep: a rank spinning in MPI_Barrier would
             * take a core from the one measuring */
            MPI_Request q;
            MPI_Ibarrier(g_host, &q);
            rt_waitall(1, &q);
        }
    }
}

double mi_runtime_spin_for(double rtt_max_s)
{
    return rtt_max_s > 1e-3 ? 100e-6 : 0;
}

/* Rank `waiter` waits (rt_waitall) for 8 bytes its peer sends after a 20 ms
 * sleep; returns the waiter's CPU seconds over wall seconds in *wall. */
static double timed_wait(int peer, int me_waits, char *buf, double *wall)
{
    *wall = 0;
    if (!me_waits) {
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
        MPI_Send(buf, 8, MPI_BYTE, peer, 14, MPI_COMM_WORLD);
        return 0;
    }
    MPI_Request q;
    MPI_Irecv(buf, 8, MPI_BYTE, peer, 14, MPI_COMM_WORLD, &q);
    double c0 = mi_cpu_now(), w0 = mi_now();
    rt_waitall(1, &q);
    *wall = mi_now() - w0;
    return mi_cpu_now() - c0;
}

void mi_calibrate_cpu_costs(double spin_s, double *msg_s, double *poll, double *rt_cpu_s)
{
    int rank = mi_world_rank(), n = mi_world_size();
    char buf[64] = {0};
    double m[MI_MAX_RANKS], p[MI_MAX_RANKS], u[MI_MAX_RANKS], mine[3] = {0, 0, 0};
    int k = 0;
    /* the runtime's waits: spin_s, then naps between tests (0: spin until the message comes) */
    rt_set_spin(spin_s > 0 ? spin_s : -1);
    for (int r = 1; r < n; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank != 0 && rank != r)
            continue;
        int peer = rank == 0 ? r : 0;
        /* the share of the CPU a wait past its spin takes: each side waits once */
        double duty = 1, wall = 0;
        for (int turn = 0; turn < 2; turn++) {
            double c = timed_wait(peer, (turn == 0) == (rank == 0), buf, &wall);
            if (wall > 0)
                duty = spin_s > 0 ? (c - (wall < spin_s ? wall : spin_s)) / (wall - spin_s) : 1;
        }
        duty = duty < 0 ? 0 : duty > 1 ? 1 : duty;
        /* a message's own CPU: a round trip's CPU on this side, less its wait's, over its two messages */
        const int reps = 20;
        ping_pong(peer, rank == 0, buf, 8, 2); /* warm */
        double c0 = mi_cpu_now(), w0 = mi_now();
        for (int i = 0; i < reps; i++)
            ping_pong(peer, rank == 0, buf, 8, 1);
        /* (ping_pong runs a warm-up round trip too: 2 per call) */
        double per = (mi_cpu_now() - c0) / (2.0 * reps), rt = (mi_now() - w0) / (2.0 * reps);
        double waited = spin_s > 0 ? (rt < spin_s ? rt : spin_s + duty * (rt - spin_s)) : rt;
        m[k] = per > waited ? (per - waited) / 2 : 0;
        u[k] = per;
        p[k++] = duty;
    }
    if (k > 0)
        mine[0] = median(m, k), mine[1] = median(p, k), mine[2] = median(u, k);
    rt_set_spin(20e-6);
    double *all = rank == 0 ? mi_calloc(3 * (size_t)n, sizeof(double), "CPU costs") : NULL;
    MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    for (int r = 0; rank == 0 && r < n; r++)
        msg_s[r] = all[3 * r], poll[r] = all[3 * r + 1], rt_cpu_s[r] = all[3 * r + 2];
    free(all);
}

/* Set-up of a communicator of ranks [0, m) and a window on it (rank 0's figures). */
static void setup_of(int m, double *comm_s, double *win_s)
{
    int rank = mi_world_rank();
    MPI_Group world, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int members[MI_MAX_RANKS];
    for (int i = 0; i < m; i++)
        members[i] = i;
    MPI_Group_incl(world, m, members, &g);
    double tc[5], tw[5];
    char slot[64];
    int failed = 0;
    for (int k = 0; k < 5; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank >= m)
            continue;
        MPI_Comm c;
        double t0 = mi_now();
        MPI_Comm_create_group(MPI_COMM_WORLD, g, 15, &c);
        double t1 = mi_now();
        MPI_Win win;
        /* as rt_build_comms: a transport without one-sided support reports, not aborts */
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        if (MPI_Win_create(slot, rank == 0 ? (MPI_Aint)sizeof slot : 0, 1, MPI_INFO_NULL, c, &win) == MPI_SUCCESS)
            MPI_Win_free(&win);
        else
            failed = 1;
        double t2 = mi_now();
        MPI_Comm_free(&c);
        tc[k] = t1 - t0 + (mi_now() - t2);
        tw[k] = t2 - t1;
    }
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    if (rank == 0) {
        *comm_s = median(tc, 5);
        *win_s = failed ? 0 : median(tw, 5);
    }
}

void mi_calibrate_setup(double *comm_s, double *win_s)
{
    int n = mi_world_size();
    comm_s[0] = comm_s[1] = win_s[0] = win_s[1] = 0;
    if (n < 2)
        return;
    /* two members and all of them: a group's set-up grows with its members (collectives) */
    setup_of(2, &comm_s[0], &win_s[0]);
    if (n > 2)
        setup_of(n, &comm_s[1], &win_s[1]);
    else
        comm_s[1] = comm_s[0], win_s[1] = win_s[0];
}
