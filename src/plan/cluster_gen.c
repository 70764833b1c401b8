/* Heterogeneous clusters drawn from stated distributions (plan.h
 * mi_cluster_generate; `meshinfer cluster-gen`): HeadSplit's simulation of
 * "25 heterogeneous devices" with "1 to 10 Gbps links", or WiFi-like ones. */
#include "meshinfer/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

void mi_cluster_gen_defaults(mi_cluster_gen *g)
{
    *g = (mi_cluster_gen){.n_devices = 25,
                          .seed = 1,
                          .speed = {0.5, 2.0},
                          .mem_mb = {1000, 4000},
                          .latency_ms = {0.05, 0.5},
                          .bandwidth_mbit = {1000, 10000},
                          .mem_bandwidth_gbs = 4};
}

/* splitmix64: a uniform double in [0, 1) */
static double uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* lo + u * (hi - lo), or log-uniform */
static double draw(uint64_t *s, const double *r, int log_scale)
{
    double u = uniform(s);
    if (r[0] == r[1])
        return r[0];
    return log_scale ? exp(log(r[0]) + u * (log(r[1]) - log(r[0]))) : r[0] + u * (r[1] - r[0]);
}

/* A range [lo, hi] inside what the cluster parser accepts. */
static int check_range(const double *r, const char *name, int allow_zero, char *err)
{
    for (int i = 0; i < 2; i++)
        if (!isfinite(r[i]) || r[i] < 0 || (!allow_zero && r[i] == 0) || r[i] > 1e9 || (r[i] > 0 && r[i] < 1e-6))
            return mi_set_error(err, "cluster generator: %s must be %s (got %g)", name,
                                allow_zero ? "0 or a number from 1e-6 to 1e9" : "a number from 1e-6 to 1e9", r[i]);
    if (r[0] > r[1])
        return mi_set_error(err, "cluster generator: %s range %g:%g runs downwards (give LO:HI, LO <= HI)", name, r[0],
                            r[1]);
    return 0;
}

int mi_cluster_generate(const mi_cluster_gen *g, mi_cluster *cl, char *err)
{
    memset(cl, 0, sizeof *cl);
    if (g->n_devices < 1 || g->n_devices > MI_MAX_RANKS)
        return mi_set_error(err, "cluster generator: %d devices; give 1 to %d", g->n_devices, MI_MAX_RANKS);
    double gbs[2] = {g->mem_bandwidth_gbs, g->mem_bandwidth_gbs}, jit[2] = {g->jitter_ms, g->jitter_ms};
    if (check_range(g->speed, "speed", 0, err) || check_range(g->mem_mb, "mem_mb", 0, err) ||
        check_range(g->latency_ms, "latency_ms", 1, err) || check_range(g->bandwidth_mbit, "bandwidth_mbit", 0, err) ||
        check_range(gbs, "mem_bandwidth_gbs", 0, err) || check_range(jit, "jitter_ms", 1, err))
        return -1;
    double cm[2] = {g->controller_mem_mb, g->controller_mem_mb};
    if (g->controller_mem_mb != 0 && check_range(cm, "controller mem_mb", 0, err))
        return -1;
    if (!(g->loss_pct >= 0 && g->loss_pct < 100))
        return mi_set_error(err, "cluster generator: loss_pct must be in [0, 100) (got %g)", g->loss_pct);
    if (g->jitter_ms > 10000)
        return mi_set_error(err, "cluster generator: jitter_ms must be at most 10000 (got %g)", g->jitter_ms);
    int n = g->n_devices;
    mi_cluster_default(cl, n, 0);
    cl->mem_bw = g->mem_bandwidth_gbs * 1e9;
    cl->latency_s = g->latency_ms[0] * 1e-3;
    cl->bandwidth = g->bandwidth_mbit[0] * 1e6 / 8;
    cl->jitter_s = g->jitter_ms * 1e-3;
    cl->loss = g->loss_pct / 100;
    cl->shared_medium = g->shared_medium;
    uint64_t s = g->seed;
    for (int i = 0; i < n; i++) {
        cl->dev[i].speed = draw(&s, g->speed, 0);
        cl->dev[i].mem_bytes = draw(&s, g->mem_mb, 0) * 1e6;
    }
    if (g->controller_mem_mb > 0)
        cl->dev[0].mem_bytes = g->controller_mem_mb * 1e6;
    size_t nn = (size_t)n * (size_t)n;
    cl->rtt_s = mi_calloc(nn, sizeof(double), "link latencies");
    if (!g->shared_medium)
        cl->bw = mi_calloc(nn, sizeof(double), "link bandwidths");
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            /* a round trip is twice the one-way latency (mi_cluster_latency halves it) */
            double lat = draw(&s, g->latency_ms, 0) * 1e-3, bw = draw(&s, g->bandwidth_mbit, 1) * 1e6 / 8;
            cl->rtt_s[(size_t)a * n + b] = cl->rtt_s[(size_t)b * n + a] = 2 * lat;
            if (cl->bw)
                cl->bw[(size_t)a * n + b] = cl->bw[(size_t)b * n + a] = bw;
        }
    mi_cluster_finish(cl);
    return 0;
}
