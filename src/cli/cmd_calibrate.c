/* `meshinfer calibrate`: every rank measures its own device and every link
 * it has, and rank 0 writes a cluster file the planners read (Voltron
 * §4.2.1: computation time from a regression on the device, layer type,
 * precision, input length and KV length; communication time from the size
 * of the data and the link). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/cost.h"
#include "meshinfer/hwinfo.h"
#include "meshinfer/model_file.h"
#include "meshinfer/output.h"
#include "meshinfer/plan.h"
#include "meshinfer/runtime.h"

static void help(void)
{
    printf("usage: mpirun -np N meshinfer calibrate --out CLUSTER.json [options]\n\n"
           "Every rank measures the device it runs on and every link between ranks, and rank 0\n"
           "writes a cluster file for --cluster: per device its description (hwloc: cores, caches,\n"
           "NUMA nodes, memory cross-checked with the kernel's figure, CPU quota, binding), the\n"
           "time of a matrix product per weight element for each dtype (fp32 fp16 q8_0 q4_0 q6_K\n"
           "q5_K q4_K; the k-quants on rows rounded to whole super-blocks of 256) at\n"
           "1, 4, 16 and 64 positions (fitted as one pass plus a cost per further position), of\n"
           "attention per cached position, and per op; per pair of ranks the latency and\n"
           "bandwidth (ping-pong of 8 bytes and of --link-bytes). Ranks on one host measure in\n"
           "turn, so that none measures another's load. Under a cgroup CPU quota of at most a core\n"
           "(one thread) the compute is timed on the CPU clock (the unthrottled speed) and the quota\n"
           "and its period are written beside it; with several ranks, also a wait's and a message's\n"
           "CPU and the set-up of a communicator and a window (for meshinfer simulate). Use the file\n"
           "on the same ranks and hosts.\n"
           "  -o, --out FILE        the cluster file to write (required)\n"
           "  --cluster FILE        names and memory budgets (mem_mb) of the devices, and what calibrate\n"
           "                        does not measure (description, gflops, eager_bytes, storage_mbs),\n"
           "                        kept in the output (default: rank i is \"<host>-<i>\" with the\n"
           "                        kernel's MemTotal, or its cgroup's limit, shared among the host's\n"
           "                        ranks)\n"
           "  -m, --model FILE      measure matrices of this model's shape (default stories15M's)\n"
           "  --seconds S           time per measurement (default 0.05; about 20 per device)\n"
           "  --link-bytes N        the large ping-pong message (default 1048576)\n"
           "  --threads N           compute threads per rank, as for generate (default 1)\n"
           "  --no-bind             do not bind each rank to its own cores\n"
           "  -h, --help\n");
}

/* What each rank sends rank 0: its measured device (name, budget and speed
 * are filled in there) and what its budget defaults to. */
typedef struct {
    mi_device d;
    double mem_bytes;
    int local_size;
} rank_result;

/* The input cluster file's "description" (kept in the output), or "". */
static void read_description(const char *path, char *out, size_t n)
{
    char err[MI_ERRLEN];
    size_t len;
    char *text = mi_read_text_file(path, "cluster file", 64L << 20, &len, err);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *d = root ? cJSON_GetObjectItemCaseSensitive(root, "description") : NULL;
    if (cJSON_IsString(d))
        snprintf(out, n, "%s", d->valuestring);
    cJSON_Delete(root);
    free(text);
}

typedef struct {
    const mi_calib_options *co;
    mi_device *d;
} measure_job;

static void measure(void *ctx)
{
    measure_job *j = ctx;
    char err[MI_ERRLEN];
    if (mi_calibrate_compute(j->co, j->d, err))
        mi_fatal("calibrate: %s", err); /* the shape came from a checked model: cannot fail */
}

/* The command's options. */
typedef struct {
    const char *out, *cluster, *model;
    double seconds;
    long link_bytes, threads;
    int bind;
} calib_opts;

/* Returns 1 when --help was printed (the command is done), else 0. */
static int parse_options(int argc, char **argv, calib_opts *op)
{
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},     {"cluster", required_argument, 0, 'c'},
        {"model", required_argument, 0, 'm'},   {"seconds", required_argument, 0, 's'},
        {"link-bytes", required_argument, 0, 'b'}, {"threads", required_argument, 0, 't'},
        {"no-bind", no_argument, 0, 'B'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *op = (calib_opts){.seconds = 0.05, .link_bytes = 1L << 20, .threads = 1, .bind = 1};
    int o;
    while ((o = getopt_long(argc, argv, ":o:c:m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'o': op->out = optarg; break;
        case 'c': op->cluster = optarg; break;
        case 'm': op->model = optarg; break;
        case 's': op->seconds = mi_parse_double("--seconds", optarg, 1e-3, 60); break;
        case 'b': op->link_bytes = mi_parse_long("--link-bytes", optarg, 1024, 1L << 26); break;
        case 't': op->threads = mi_parse_long("--threads", optarg, 1, 256); break;
        case 'B': op->bind = 0; break;
        case 'h': help(); return 1;
        default: cli_bad_option("calibrate", o, argv);
        }
    }
    cli_no_positional("calibrate", optind, argc, argv);
    if (!op->out)
        mi_fatal("calibrate: --out is required (see meshinfer calibrate --help)");
    return 0;
}

/* Rank 0's checks before anything is measured: the output, the input
 * cluster file (into in and its description into desc; one device per
 * rank) and the model whose layer shape is measured (into co). Returns
 * nonzero with err. */
static int read_inputs(const calib_opts *op, int size, mi_cluster *in, char *desc, size_t desc_n,
                       mi_calib_options *co, char *err)
{
    const char *inputs[] = {op->cluster, op->model};
    int failed = mi_output_check(op->out, "cluster file", inputs, 2, err);
    if (!failed && op->cluster) {
        failed = mi_cluster_load(op->cluster, in, err);
        if (!failed)
            read_description(op->cluster, desc, desc_n);
        if (!failed && in->n_devices != size)
            failed = mi_set_error(err, "cluster file %s lists %d devices but the job has %d rank%s (one rank "
                                       "per device)", op->cluster, in->n_devices, size, size == 1 ? "" : "s");
    }
    if (!failed && op->model) {
        mi_config c;
        mi_model_file *mf = mi_model_open(op->model, &c, err);
        failed = !mf;
        if (mf) {
            mi_model_close(mf);
            mi_calib_defaults(co, &c);
        }
    }
    return failed;
}

/* Probes this rank's device into hw and binds the rank to its share of the
 * host's cores (bind: unless --no-bind); *local_size: the ranks sharing
 * this host, which measure in turn and split its cores. */
static void probe_and_bind(int bind, int size, mi_hwinfo *hw, int *local_size, char *err)
{
    int local_rank = 0;
    *local_size = 1;
    mi_world_host(&local_rank, local_size);
    int failed = mi_hwinfo_probe(hw, err);
    /* each rank its own cores, so that its threads never run on another
     * rank's; with more ranks than cores (an emulated testbed of CPU-quota
     * cgroups) a binding would stack quotas on one core: leave them free */
    bind = bind && *local_size <= hw->allowed_cores;
    if (!failed && bind)
        failed = mi_hwinfo_bind(local_rank, *local_size, err);
    if (!failed && bind)
        failed = mi_hwinfo_probe(hw, err); /* the binding, as it now is */
    if (size > 1)
        mi_check_all(failed, err);
    else if (failed)
        mi_fatal("calibrate: %s", err);
}

/* This rank's measurement (in turn with the other ranks of its host) into
 * *mine; returns its device description as JSON (the caller frees it). */
static char *measure_rank(const mi_calib_options *co, const mi_hwinfo *hw, int local_size, rank_result *mine)
{
    memset(mine, 0, sizeof *mine);
    measure_job job = {co, &mine->d};
    mi_world_host_turns(measure, &job);
    if (co->cpu_clock) { /* measured unthrottled: the quota beside it (simulate.h models it) */
        mine->d.cpu_quota = hw->cpu_quota;
        mine->d.cpu_period_s = hw->cpu_period_s;
    }
    snprintf(mine->d.host, sizeof mine->d.host, "%.63s", hw->hostname);
    mine->mem_bytes = (double)hw->mem_bytes;
    mine->local_size = local_size;
    char *hwjson = NULL;
    size_t hwlen = 0;
    FILE *mf = open_memstream(&hwjson, &hwlen);
    mi_hwinfo_json(hw, mf);
    fclose(mf);
    return hwjson;
}

/* What rank 0 collects: every rank's result and device description, and
 * per pair of ranks (size x size) the round trip and the bandwidth. */
typedef struct {
    rank_result *all;
    char **hws;
    double *rtt, *bw;
    double spin_s, *msg_s, *poll, *rt_cpu; /* the runtime's wait spin for these links; per rank, a
                                              message's CPU, a wait's share of the CPU past the spin and
                                              an 8-byte round trip's CPU */
    double comm_s[2], win_s[2];   /* creating a communicator and a window of two ranks and of all */
} gathered;

/* Collects every rank's measurement on rank 0 (g is empty on the others)
 * and measures the links between ranks. */
static void gather_and_measure_links(const rank_result *mine, const char *hwjson, long link_bytes, int rank,
                                     int size, gathered *g)
{
    g->all = rank == 0 ? mi_calloc((size_t)size, sizeof *g->all, "calibration") : NULL;
    g->hws = rank == 0 ? mi_calloc((size_t)size, sizeof(char *), "calibration") : NULL;
    g->rtt = rank == 0 ? mi_calloc((size_t)size * size, sizeof(double), "calibration") : NULL;
    g->bw = rank == 0 ? mi_calloc((size_t)size * size, sizeof(double), "calibration") : NULL;
    g->msg_s = rank == 0 ? mi_calloc(3 * (size_t)size, sizeof(double), "calibration") : NULL;
    g->poll = g->msg_s ? g->msg_s + size : NULL;
    g->rt_cpu = g->msg_s ? g->msg_s + 2 * size : NULL;
    if (size > 1) {
        mi_world_gather(mine, sizeof *mine, g->all);
        char **got = mi_world_gather_strings(hwjson);
        if (rank == 0) {
            memcpy(g->hws, got, (size_t)size * sizeof *g->hws);
            free(got);
        }
        if (rank == 0)
            fprintf(stderr, "calibrate: measuring %d link%s (ping-pong of 8 and %ld bytes)...\n",
                    size * (size - 1) / 2, size * (size - 1) / 2 == 1 ? "" : "s", link_bytes);
        mi_calibrate_links((size_t)link_bytes, g->rtt, g->bw);
        /* the waits' CPU as the runtime will wait on these links (its spin rule), and what a
         * re-placement's rebuild of communicators and windows costs */
        double rtt_max = 0;
        for (int i = 0; rank == 0 && i < size * size; i++)
            rtt_max = g->rtt[i] > rtt_max ? g->rtt[i] : rtt_max;
        mi_world_bcast(&rtt_max, sizeof rtt_max);
        g->spin_s = mi_runtime_spin_for(rtt_max);
        if (rank == 0)
            fprintf(stderr, "calibrate: measuring messages' CPU and communicator set-up...\n");
        mi_calibrate_cpu_costs(g->spin_s, g->msg_s, g->poll, g->rt_cpu);
        mi_calibrate_setup(g->comm_s, g->win_s);
    } else {
        g->all[0] = *mine;
        g->hws[0] = strdup(hwjson);
    }
}

/* Fills cl (made by mi_cluster_default) with the measurements; names and
 * budgets come from the input cluster file `in` when there is one, else
 * from the hosts. cl takes g's link tables when there are links. Returns
 * the number of pairs of ranks. */
static int fill_cluster(mi_cluster *cl, const mi_cluster *in, gathered *g, int size)
{
    if (in) {
        /* what calibrate does not measure comes from the input */
        cl->latency_s = in->latency_s;
        cl->bandwidth = in->bandwidth;
        cl->gflops = in->gflops;
        cl->eager_bytes = in->eager_bytes;
        cl->storage_bw = in->storage_bw;
    }
    const rank_result *all = g->all;
    double lat = 0, bsum = 0;
    int pairs = 0;
    for (int r = 0; r < size; r++) {
        mi_device *d = &cl->dev[r];
        *d = all[r].d; /* the measurement and its host */
        if (in)
            snprintf(d->name, sizeof d->name, "%s", in->dev[r].name);
        else
            snprintf(d->name, sizeof d->name, "%.40s-%d", all[r].d.host, r);
        d->mem_bytes = in ? in->dev[r].mem_bytes : all[r].mem_bytes / all[r].local_size;
        d->calibrated = 1;
        if (size > 1) {
            d->msg_s = g->msg_s[r];
            d->spin_s = g->spin_s;
            d->poll = g->poll[r];
        }
        /* the HeadSplit planners weigh devices by speed: decode fp32 relative to rank 0 */
        d->speed = all[0].d.pass_s[MI_F32] / all[r].d.pass_s[MI_F32];
        for (int q = r + 1; q < size; q++) {
            lat += g->rtt[r * size + q] / 2;
            bsum += g->bw[r * size + q];
            pairs++;
        }
    }
    cl->mem_bw = 4.0 / all[0].d.pass_s[MI_F32];
    if (pairs) {
        cl->latency_s = lat / pairs;
        cl->bandwidth = bsum / pairs;
        cl->rtt_s = g->rtt;
        cl->bw = g->bw;
        g->rtt = g->bw = NULL;
    }
    cl->calib_ranks = size;
    cl->comm_setup_s = g->comm_s[0];
    cl->win_setup_s = g->win_s[0];
    cl->comm_setup_all_s = g->comm_s[1];
    cl->win_setup_all_s = g->win_s[1];
    return pairs;
}

static void print_cluster(const mi_cluster *cl, int size, int pairs, const mi_calib_options *co, const double *rt_cpu,
                          const char *out)
{
    printf("rank  device                 host              fp32 GB/s  q4_0 GB/s  fp32 Gflop/s  attn ns/pos\n");
    for (int r = 0; r < size; r++) {
        const mi_device *d = &cl->dev[r];
        printf("%4d  %-22.22s %-16.16s %10.2f %10.2f %13.2f %12.3f\n", r, d->name, d->host,
               4.0 / d->pass_s[MI_F32] / 1e9, 0.5625 / d->pass_s[MI_Q4_0] / 1e9,
               2.0 / d->pos_s[MI_F32] / 1e9, d->kv_s * 1e9 * co->head_dim);
    }
    if (pairs)
        printf("links: mean one-way latency %.3f ms, mean bandwidth %.1f Mbit/s (%d pairs)\n",
               cl->latency_s * 1e3, cl->bandwidth * 8 / 1e6, pairs);
    for (int r = 0; r < size; r++) {
        const mi_device *d = &cl->dev[r];
        char q[48] = "none";
        if (d->cpu_quota > 0)
            snprintf(q, sizeof q, "%.0f%% of %.1f ms", d->cpu_quota * 100, d->cpu_period_s * 1e3);
        if (d->cpu_quota > 0 || d->msg_s > 0)
            printf("rank %d: CPU quota %s; a wait %.0f us spinning, then %.1f%% of the CPU; an 8-byte round trip %.1f "
                   "us of CPU, a message %.1f us beyond its wait\n", r, q, d->spin_s * 1e6, d->poll * 100,
                   rt_cpu ? rt_cpu[r] * 1e6 : 0, d->msg_s * 1e6);
    }
    if (cl->comm_setup_s > 0)
        printf("set-up: a communicator %.2f ms, a window %.2f ms (of two ranks); %.2f and %.2f ms of all %d\n",
               cl->comm_setup_s * 1e3, cl->win_setup_s * 1e3, cl->comm_setup_all_s * 1e3, cl->win_setup_all_s * 1e3,
               size);
    printf("wrote %s\n", out);
}

/* Rank 0: the cluster file from what was gathered, and its table. Returns
 * nonzero with err. */
static int write_cluster(const calib_opts *op, const mi_cluster *in, const char *in_desc,
                         const mi_calib_options *co, gathered *g, int size, char *err)
{
    mi_cluster cl;
    mi_cluster_default(&cl, size, 0);
    int pairs = fill_cluster(&cl, op->cluster ? in : NULL, g, size);
    char desc[1024];
    snprintf(desc, sizeof desc, "%s%smeasured by meshinfer calibrate on %d rank%s", in_desc, in_desc[0] ? "; " : "",
             size, size > 1 ? "s" : "");
    int rc = mi_cluster_save(&cl, (const char *const *)g->hws, desc, op->out, err);
    if (!rc)
        print_cluster(&cl, size, pairs, co, g->rt_cpu, op->out);
    mi_cluster_free(&cl);
    for (int r = 0; r < size; r++)
        free(g->hws[r]);
    return rc;
}

int cmd_calibrate(int argc, char **argv)
{
    calib_opts op;
    if (parse_options(argc, argv, &op))
        return 0;

    mi_world_init(&argc, &argv);
    int rank = mi_world_rank(), size = mi_world_size();
    char err[MI_ERRLEN] = "";
    mi_cluster in;
    memset(&in, 0, sizeof in);
    char in_desc[768] = "";
    mi_calib_options co;
    mi_calib_defaults(&co, NULL);
    int failed = rank == 0 ? read_inputs(&op, size, &in, in_desc, sizeof in_desc, &co, err) : 0;
    if (size > 1) {
        mi_check_all(failed, err);
        mi_world_bcast(&co, sizeof co);
    } else if (failed) {
        mi_fatal("%s", err);
    }
    co.min_seconds = op.seconds;

    int local_size;
    mi_hwinfo hw;
    probe_and_bind(op.bind, size, &hw, &local_size, err);
    mi_set_threads((int)op.threads);
    /* under a CPU quota of at most a core, one compute thread: time by its CPU clock, so the file
     * states the unthrottled speed and the quota beside it (the simulator throttles it) */
    co.cpu_clock = hw.cpu_quota > 0 && hw.cpu_quota <= 1 && op.threads == 1;
    if (hw.cpu_quota > 0 && hw.cpu_quota <= 1 && op.threads > 1 && rank == 0)
        fprintf(stderr, "calibrate: a CPU quota of %.2f cores with %ld threads: measured by the wall clock, no "
                        "quota written (the simulator models one thread under a quota)\n", hw.cpu_quota, op.threads);

    if (rank == 0)
        fprintf(stderr, "calibrate: %d rank%s; measuring devices (%s layer: dim %d, hidden %d; %.2g s each)...\n",
                size, size > 1 ? "s" : "", op.model ? "the model's" : "stories15M's", co.dim, co.hidden_dim,
                op.seconds);
    rank_result mine;
    char *hwjson = measure_rank(&co, &hw, local_size, &mine);
    gathered g;
    gather_and_measure_links(&mine, hwjson, op.link_bytes, rank, size, &g);
    free(hwjson);

    int rc = rank == 0 ? write_cluster(&op, &in, in_desc, &co, &g, size, err) : 0;
    free(g.hws);
    free(g.all);
    free(g.rtt);
    free(g.bw);
    free(g.msg_s);
    mi_cluster_free(&in);
    if (size > 1)
        mi_check_all(rc, err);
    else if (rc)
        mi_fatal("%s", err);
    mi_world_finalize();
    return 0;
}
