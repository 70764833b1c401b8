/* Per-rank counters and the Chrome trace (see runtime.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"

void rt_record(mi_runtime *rt, int kind, int layer, double t0, double t1)
{
    if (!rt->trace)
        return;
    if (rt->n_ev == rt->cap_ev) {
        if (rt->cap_ev >= (size_t)4 << 20)
            return; /* bounded: keep the first 4M events */
        rt->cap_ev = rt->cap_ev ? 2 * rt->cap_ev : 4096;
        trace_event *ne = realloc(rt->ev, rt->cap_ev * sizeof *ne);
        if (!ne)
            mi_fatal("out of memory recording the trace");
        rt->ev = ne;
    }
    rt->ev[rt->n_ev++] = (trace_event){(short)kind, (short)layer, t0 - rt->t_origin, t1 - rt->t_origin, -1};
}

const mi_rank_metrics *mi_runtime_metrics(mi_runtime *rt, mi_rank_metrics *all)
{
    int n = (int)(sizeof(mi_rank_metrics) / sizeof(double));
    (void)n;
    if (rt->size == 1) {
        if (all)
            *all = rt->m;
        return &rt->m;
    }
    MPI_Gather(&rt->m, (int)sizeof(mi_rank_metrics), MPI_BYTE, all, (int)sizeof(mi_rank_metrics), MPI_BYTE, 0,
               MPI_COMM_WORLD);
    return &rt->m;
}

void rt_reset_metrics_local(mi_runtime *rt)
{
    double w = rt->m.weight_bytes, kv = rt->m.kv_bytes, rss = rt->m.rss_weights;
    memset(&rt->m, 0, sizeof rt->m);
    rt->m.weight_bytes = w;
    rt->m.kv_bytes = kv;
    rt->m.rss_weights = rss;
    rt->n_ev = 0;
    rt->idle_since = mi_now();
    if (rt->opt.on_reset_metrics)
        rt->opt.on_reset_metrics(rt->opt.on_reset_arg);
}

static const char *trace_name(int k)
{
    switch (k) {
    case TRACE_FORWARD: return "forward";
    case TRACE_IDLE: return "idle";
    case TRACE_REPLAN: return "re-placement (load shard, move KV cache)";
    default: return mi_op_name(k);
    }
}

int mi_runtime_write_trace(mi_runtime *rt, const char *path, char *err)
{
    int n = (int)rt->n_ev;
    int *counts = NULL, *displs = NULL;
    if (rt->rank == 0) {
        counts = mi_calloc((size_t)rt->size, sizeof(int), "trace counts");
        displs = mi_calloc((size_t)rt->size, sizeof(int), "trace displacements");
    }
    if (rt->size > 1)
        MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    else
        counts[0] = n;
    int total = 0;
    if (rt->rank == 0)
        for (int r = 0; r < rt->size; r++) {
            displs[r] = total * (int)sizeof(trace_event);
            total += counts[r];
            counts[r] *= (int)sizeof(trace_event);
        }
    trace_event *all = rt->rank == 0 ? mi_malloc((size_t)total * sizeof(trace_event) + 1, "trace") : NULL;
    if (rt->size > 1)
        MPI_Gatherv(rt->ev, n * (int)sizeof(trace_event), MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    else if (n)
        memcpy(all, rt->ev, (size_t)n * sizeof(trace_event));
    int rc = 0;
    if (rt->rank == 0) {
        mi_output out;
        FILE *f = mi_output_open(&out, path, err);
        if (!f) {
            rc = -1;
        } else {
            fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
            for (int r = 0; r < rt->size; r++)
                fprintf(f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": "
                           "\"rank %d%s\"}},\n", r, r, r == 0 ? " (controller)" : "");
            int r = 0, left = rt->size > 0 ? counts[0] / (int)sizeof(trace_event) : 0;
            for (int e = 0; e < total; e++) {
                while (left == 0 && r + 1 < rt->size) {
                    r++;
                    left = counts[r] / (int)sizeof(trace_event);
                }
                left--;
                const trace_event *ev = &all[e];
                char routed[48] = ""; /* an experts step's load (runtime.h expert_load) */
                if (ev->routed >= 0)
                    snprintf(routed, sizeof routed, ", \"routed\": %.0f", ev->routed);
                fprintf(f, "{\"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"name\": \"%s\", \"cat\": \"%s\", "
                           "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"layer\": %d%s}}%s\n",
                        r, trace_name(ev->kind), ev->kind >= TRACE_FORWARD ? "token" : "step", ev->t0 * 1e6,
                        (ev->t1 - ev->t0) * 1e6, ev->layer, routed, e + 1 < total ? "," : "");
            }
            fprintf(f, "]}\n");
            rc = mi_output_commit(&out, err);
        }
        free(all);
        free(counts);
        free(displs);
    }
    return rc;
}

