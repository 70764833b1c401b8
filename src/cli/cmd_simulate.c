/* `meshinfer simulate`: a discrete-event simulation of a generation on a
 * cluster (simulate.h), no MPI and no model run: per-token latency over
 * time, each device's compute and memory, bytes per link, re-placements.
 * The report (table, JSON, CSV, gnuplot figures) is sim_report.c. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/planner.h"
#include "meshinfer/sampler.h"
#include "meshinfer/simulate.h"
#include "sim_report.h"

static void help(void)
{
    printf("usage: meshinfer simulate (--model MODEL.h5 | --shape SHAPE) (--cluster FILE | --ranks N) [options]\n\n"
           "Simulates generating tokens on a cluster, event by event, without running the model: every rank's\n"
           "program (as `plan --programs` prints it) runs on its own clock, compute ops taking the cost model's\n"
           "time for the device and each message of an exchange a send the receiver waits for, over the\n"
           "cluster's links (latency and bandwidth per pair, the eager limit's extra round trip; jitter, loss\n"
           "and a shared medium when given). A generation is the prompt's prefill passes (64 positions each),\n"
           "then one decode pass per token as the KV cache grows; with --replan the memory account is checked\n"
           "before every pass as generate --replan checks it (a device crossing 85%% of its budget, or the\n"
           "cache outgrowing the positions planned for: re-planned for twice the positions), and each\n"
           "re-placement's move (weights read from storage, KV heads sent) is charged to its token.\n"
           "Prints per-token latency over time, each device's busy time and memory, the busiest links and\n"
           "totals. Nothing is loaded but the model's config.\n"
           "  --planner NAME        layerwise | roundrobin | random | greedy | tp | somegather | hybrid | exact\n"
           "                        (default greedy; hybrid's decode placement serves both phases; exact:\n"
           "                        a mixed-integer program, GLPK, at most 8 devices, see plan --help)\n"
           "  --exact-seconds S     the exact planner's time limit (default 20; then its best placement)\n"
           "  --plan-file FILE      a saved plan (meshinfer plan --out) with its pruning, speculation and\n"
           "                        precisions (not with --replan, which needs a planner)\n"
           "  --cluster FILE        devices and links (JSON, see hostfiles/; meshinfer cluster-gen draws one)\n"
           "  --ranks N, --mem-mb MB   N equal devices (default 4000 MB each) on shared memory's links\n"
           "  --prompt-tokens N     prompt length (default 32)\n"
           "  -n, --tokens N        tokens generated (default 128): the first by the prefill, then one decode\n"
           "                        pass each (as generate -n); prompt plus tokens within the context\n"
           "  --batch B             B sequences decoding together: B prompts prefilled in turn, then passes\n"
           "                        of B rows (B KV cache slots in every device's memory)\n"
           "  --micro-batches M     with --batch: each pass as M micro-batches pipelined through the ranks\n"
           "                        where the placement is a chain (layer-wise), as the runtime runs them\n"
           "                        (default the number of ranks, the runtime's; 1: one pass of B rows)\n"
           "  --kv-positions N      positions the first placement budgets (default the context; with\n"
           "                        --replan a quarter of it)\n"
           "  --replan              HeadSplit's memory-triggered re-placement; without it a device that would\n"
           "                        pass its budget stops the simulation there (reported, exit 0)\n"
           "  --speculate           mark HeadSplit's inter-layer speculation where the cost model predicts a\n"
           "                        saving, every transition at acceptance --acceptance A (default 1)\n"
           "  --spec-draws          draw each speculated transition's acceptance per pass (seeded) instead\n"
           "                        of charging its expectation as the cost model does\n"
           "  --controller-works yes|no, --plan-seed S, --split-vocab   as for plan\n"
           "  --dtype T, --layer-dtype SPEC, --embeddings-dtype T   weights in these dtypes\n"
           "  --wire-dtype T        activation messages in fp32 (default), fp16 or q8_0\n"
           "  --jitter-ms J         every message's one-way latency drawn in [lat - J, lat + J] (default:\n"
           "                        the cluster file's link.jitter_ms, else 0)\n"
           "  --loss-pct P          a message is lost with probability P%% and arrives --rto-ms later per loss\n"
           "                        (default: the cluster file's link.loss_pct, else 0)\n"
           "  --rto-ms R            the retransmission timeout (default 200, Linux TCP's least)\n"
           "  --shared-medium yes|no   every transfer on one medium of the link bandwidth, one at a time\n"
           "                        (default: the cluster file's link.shared_medium)\n"
           "  --seed S              the draws' seed (default 1)\n"
           "  --every-step          walk every decode pass (without draws the walk is exact in the context\n"
           "                        length, so by default only the passes that length's effect needs are\n"
           "                        walked and the rest interpolated exactly)\n"
           "  --json                everything as one JSON object (per token and per device)\n"
           "  --csv DIR             tokens.csv, devices.csv, links.csv, replans.csv into DIR (made if missing)\n"
           "  --plot DIR            those CSVs and latency.png, devices.png, links.png (gnuplot,\n"
           "                        jobs/lib/simulate.gp) into DIR\n"
           "Time: seconds of the simulated cluster, not of this machine. A pass's time follows the cost\n"
           "model's rule (plan's predicted ms/token): without draws, a one-device cluster's decode passes are\n"
           "its predictions exactly.\n");
}

typedef struct {
    const char *model, *shape, *cluster, *planner, *plan_file, *csv, *plot;
    cli_dtypes dt;
    int ranks, n_prompt, n_tokens, batch, micro, kvpos, replan, speculate, spec_draws, every_step, json, cw, split_vocab;
    int wire, shared, seed_set, mem_set, accept_set, plan_seed_set;
    double mem_mb, acceptance, jitter_ms, loss_pct, rto_ms, exact_s;
    uint64_t seed, plan_seed;
} sim_opts;

static void parse(int argc, char **argv, sim_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"shape", required_argument, 0, 's'},
        {"cluster", required_argument, 0, 'c'},    {"ranks", required_argument, 0, 'r'},
        {"mem-mb", required_argument, 0, 'M'},     {"planner", required_argument, 0, 'p'},
        {"plan-file", required_argument, 0, 'f'},  {"prompt-tokens", required_argument, 0, 'P'},
        {"tokens", required_argument, 0, 'n'},     {"batch", required_argument, 0, 'b'},
        {"micro-batches", required_argument, 0, 'u'},
        {"kv-positions", required_argument, 0, 'K'}, {"replan", no_argument, 0, 'R'},
        {"speculate", no_argument, 0, 'S'},        {"acceptance", required_argument, 0, 'A'},
        {"spec-draws", no_argument, 0, 'D'},       {"controller-works", required_argument, 0, 'w'},
        {"plan-seed", required_argument, 0, 'X'},  {"split-vocab", no_argument, 0, 'V'},
        {"wire-dtype", required_argument, 0, 'W'}, {"jitter-ms", required_argument, 0, 'J'},
        {"loss-pct", required_argument, 0, 'L'},   {"rto-ms", required_argument, 0, 'T'},
        {"shared-medium", required_argument, 0, 'G'}, {"seed", required_argument, 0, 'Z'},
        {"every-step", no_argument, 0, 'E'},       {"json", no_argument, 0, 'j'},
        {"csv", required_argument, 0, 'C'},        {"plot", required_argument, 0, 'O'},
        {"exact-seconds", required_argument, 0, 'x'}, {"help", no_argument, 0, 'h'},
        CLI_DTYPE_LONG_OPTS,
        {0, 0, 0, 0}};
    int k;
    while ((k = getopt_long(argc, argv, ":m:s:c:p:n:h", opts, NULL)) != -1) {
        switch (k) {
        case 'm': o->model = optarg; break;
        case 's': o->shape = optarg; break;
        case 'c': o->cluster = optarg; break;
        case 'r': o->ranks = (int)mi_parse_long("--ranks", optarg, 1, MI_MAX_RANKS); break;
        case 'M': o->mem_mb = mi_parse_double("--mem-mb", optarg, 1e-3, 1e9); o->mem_set = 1; break;
        case 'p': o->planner = optarg; break;
        case 'f': o->plan_file = optarg; break;
        case 'P': o->n_prompt = (int)mi_parse_long("--prompt-tokens", optarg, 1, 1 << 24); break;
        case 'n': o->n_tokens = (int)mi_parse_long("--tokens", optarg, 1, 1 << 24); break;
        case 'b': o->batch = (int)mi_parse_long("--batch", optarg, 1, 4096); break;
        case 'u': o->micro = (int)mi_parse_long("--micro-batches", optarg, 1, MI_MAX_RANKS); break;
        case 'K': o->kvpos = (int)mi_parse_long("--kv-positions", optarg, 1, 1 << 24); break;
        case 'R': o->replan = 1; break;
        case 'S': o->speculate = 1; break;
        case 'A': o->acceptance = mi_parse_double("--acceptance", optarg, 0, 1); o->accept_set = 1; break;
        case 'D': o->spec_draws = 1; break;
        case 'w':
            if (strcmp(optarg, "yes") && strcmp(optarg, "no"))
                mi_fatal("--controller-works: '%s' is not yes or no", optarg);
            o->cw = !strcmp(optarg, "yes");
            break;
        case 'X': o->plan_seed = mi_parse_u64("--plan-seed", optarg); o->plan_seed_set = 1; break;
        case 'V': o->split_vocab = 1; break;
        case 'W': o->wire = cli_wire_dtype(optarg); break;
        case 'J': o->jitter_ms = mi_parse_double("--jitter-ms", optarg, 0, 10000); break;
        case 'L': o->loss_pct = mi_parse_double("--loss-pct", optarg, 0, 99.999); break;
        case 'T': o->rto_ms = mi_parse_double("--rto-ms", optarg, 0, 1e6); break;
        case 'G':
            if (strcmp(optarg, "yes") && strcmp(optarg, "no"))
                mi_fatal("--shared-medium: '%s' is not yes or no", optarg);
            o->shared = !strcmp(optarg, "yes");
            break;
        case 'Z': o->seed = mi_parse_u64("--seed", optarg); o->seed_set = 1; break;
        case 'E': o->every_step = 1; break;
        case 'x': o->exact_s = mi_parse_double("--exact-seconds", optarg, 0.01, 1e6); break;
        case 'j': o->json = 1; break;
        case 'C': o->csv = optarg; break;
        case 'O': o->plot = optarg; break;
        case 'h': help(); exit(0);
        default:
            if (!cli_dtype_opt(&o->dt, k, optarg))
                cli_bad_option("simulate", k, argv);
        }
    }
    cli_no_positional("simulate", optind, argc, argv);
}

/* The options that need no model or cluster to judge. */
static void check_opts(const sim_opts *o)
{
    if ((!o->model) == (!o->shape))
        mi_fatal("simulate: give exactly one of --model or --shape (see meshinfer simulate --help)");
    if ((!o->ranks) == (!o->cluster))
        mi_fatal("simulate: give exactly one of --ranks or --cluster (see meshinfer simulate --help)");
    if (o->mem_set && o->cluster)
        mi_fatal("simulate: --mem-mb is the memory of each of --ranks N devices: the cluster file %s gives its own",
                 o->cluster);
    if (o->plan_file && (o->replan || o->speculate || o->kvpos || o->cw >= 0 || o->wire || o->split_vocab ||
                         strcmp(o->planner, "greedy") || cli_dtypes_given(&o->dt)))
        mi_fatal("simulate: --plan-file fixes the placement: --replan, --planner, --speculate, --kv-positions, "
                 "--controller-works, --wire-dtype, --split-vocab and the dtype options belong to `meshinfer plan` "
                 "when the plan is made");
    if (o->exact_s > 0 && strcmp(o->planner, "exact"))
        mi_fatal("simulate: --exact-seconds limits --planner exact's search; --planner %s has none", o->planner);
    if (o->accept_set && !o->speculate)
        mi_fatal("simulate: --acceptance is the speculated transitions' acceptance: give --speculate too");
    if (o->plan_seed_set && strcmp(o->planner, "random"))
        mi_fatal("simulate: --plan-seed seeds --planner random; --planner %s draws nothing", o->planner);
}

static void load_config(const sim_opts *o, mi_config *c)
{
    char err[MI_ERRLEN];
    if (o->model) {
        mi_model_file *mf = mi_model_open(o->model, c, err);
        if (!mf)
            mi_fatal("%s", err);
        mi_model_close(mf);
    } else if (mi_config_from_shape(o->shape, c)) {
        mi_fatal("simulate: unknown shape '%s' (known: %s)", o->shape, mi_config_shape_names());
    }
    cli_dtypes_apply(&o->dt, c, "simulate");
}

typedef struct {
    const mi_cluster *cl;
    mi_plan_options po;
} replan_ctx;

/* A re-placement's plan: the planner again for twice the positions (shared with generate --replan). */
static int replan_hook(void *ctx, const mi_plan *cur, int need, mi_plan *np, int *horizon, char *err)
{
    const replan_ctx *x = ctx;
    return mi_plan_remake(&cur->cfg, x->cl, &x->po, need, np, horizon, err);
}

int cmd_simulate(int argc, char **argv)
{
    sim_opts o = {.planner = "greedy", .n_prompt = 32, .n_tokens = 128, .batch = 1, .cw = -1, .shared = -1,
                  .mem_mb = 4000, .acceptance = 1, .jitter_ms = -1, .loss_pct = -1, .rto_ms = -1, .seed = 1,
                  .plan_seed = 1};
    parse(argc, argv, &o);
    check_opts(&o);
    char err[MI_ERRLEN];
    const char *inputs[] = {o.model, o.cluster, o.plan_file};
    if (o.csv)
        sim_check_dir(o.csv, "--csv", inputs, 3);
    if (o.plot)
        sim_check_dir(o.plot, "--plot", inputs, 3);
    mi_config c;
    load_config(&o, &c);
    mi_cluster cl;
    if (o.cluster) {
        if (mi_cluster_load(o.cluster, &cl, err))
            mi_fatal("%s", err);
    } else {
        mi_cluster_default(&cl, o.ranks, o.mem_mb * 1e6);
    }
    if ((long)o.n_prompt + o.n_tokens > c.seq_len)
        mi_fatal("simulate: --prompt-tokens %d plus --tokens %d is %ld positions, more than the model's context (%d)",
                 o.n_prompt, o.n_tokens, (long)o.n_prompt + o.n_tokens, c.seq_len);
    if (o.kvpos > c.seq_len)
        mi_fatal("simulate: --kv-positions %d is more than the model's context (%d)", o.kvpos, c.seq_len);
    if (cl.n_devices == 1 && o.cw == 0)
        mi_fatal("simulate: --controller-works no leaves the layers to the workers: one device has only the "
                 "controller");
    mi_planner which;
    if (mi_planner_parse(o.planner, &which))
        mi_fatal("simulate: unknown planner '%s' (layerwise, roundrobin, random, greedy, tp, somegather, hybrid, "
                 "exact)",
                 o.planner);
    if (o.speculate && (which == MI_PLANNER_TP || which == MI_PLANNER_SOMEGATHER))
        mi_fatal("simulate: --speculate needs a planner that puts a layer's projection on one rank (not %s)",
                 o.planner);
    c.kv_slots = o.batch; /* every sequence its own KV cache (batch.h) */
    double *acc = NULL;
    if (o.speculate) {
        acc = mi_malloc((size_t)c.n_layers * sizeof *acc, "acceptance");
        for (int l = 0; l < c.n_layers; l++)
            acc[l] = o.acceptance;
    }
    int kvpos = o.kvpos ? o.kvpos : o.replan ? (c.seq_len / 4 > 0 ? c.seq_len / 4 : 1) : 0;
    replan_ctx rx = {&cl, {which, o.plan_seed, o.cw, o.speculate, acc, 0.7, kvpos, o.wire, 0, 0, 0, NULL,
                           o.split_vocab, mi_logit_candidates(0.0f, 0)}};
    mi_plan plan;
    mi_exact_info exact = {0};
    if (o.plan_file) {
        if (mi_plan_load_json(o.plan_file, &c, &plan, err))
            mi_fatal("%s", err);
        plan.cfg.kv_slots = o.batch;
        if (plan.n_ranks != cl.n_devices)
            mi_fatal("simulate: plan file %s has %d ranks but the cluster %d devices", o.plan_file, plan.n_ranks,
                     cl.n_devices);
        if (mi_plan_validate(&plan, &cl, err))
            mi_fatal("simulate: plan file %s: %s", o.plan_file, err);
    } else if (which == MI_PLANNER_EXACT ? mi_plan_exact(&c, &cl, &rx.po, o.exact_s, &plan, &exact, err)
                                         : mi_plan_make(&c, &cl, &rx.po, &plan, err)) {
        mi_fatal("simulate: %s", err);
    }
    if (which == MI_PLANNER_EXACT && !o.plan_file)
        cli_exact_report(&exact, &plan, o.replan ? "; re-placements use the default limit" : "");
    if (o.micro > 0 && o.batch == 1)
        mi_fatal("simulate: --micro-batches goes with --batch (a pass of one row is not split)");
    mi_sim_request rq = {.n_prompt = o.n_prompt, .n_tokens = o.n_tokens, .batch = o.batch, .chunk = 64,
                         .micro = o.micro > 0 ? o.micro : plan.n_ranks,
                         .replan = o.replan ? replan_hook : NULL, .replan_ctx = &rx, .every_step = o.every_step};
    mi_sim_links_of(&cl, &rq.links);
    if (o.jitter_ms >= 0)
        rq.links.jitter_s = o.jitter_ms * 1e-3;
    if (o.loss_pct >= 0)
        rq.links.loss = o.loss_pct / 100;
    if (o.rto_ms >= 0 && rq.links.loss <= 0)
        mi_fatal("simulate: --rto-ms is the time a lost message costs: give --loss-pct (or a cluster file with "
                 "link.loss_pct)");
    if (o.rto_ms >= 0)
        rq.links.rto_s = o.rto_ms * 1e-3;
    if (o.shared >= 0)
        rq.links.shared_medium = o.shared;
    if (rq.links.shared_medium && cl.bw)
        mi_fatal("simulate: --shared-medium yes puts every transfer on one medium of the link bandwidth: the "
                 "cluster file %s gives a bandwidth per pair (links.bandwidth_mbit)", o.cluster);
    rq.links.spec_draws = o.spec_draws;
    rq.links.seed = o.seed;
    mi_sim_result res;
    double t0 = mi_now();
    if (mi_simulate(&plan, &cl, &rq, &res, err))
        mi_fatal("simulate: %s", err);
    sim_report rp = {&plan.cfg, &cl, &rq, &res, &plan, o.cluster ? o.cluster : NULL, mi_now() - t0,
                     which == MI_PLANNER_EXACT && !o.plan_file ? &exact : NULL};
    if (o.csv)
        sim_write_csv(&rp, o.csv);
    if (o.plot)
        sim_plot(&rp, o.plot);
    if (o.json)
        sim_print_json(&rp);
    else
        sim_print_table(&rp);
    if (o.csv && !o.json)
        printf("wrote %s/{tokens,devices,links,replans}.csv\n", o.csv);
    if (o.plot && !o.json)
        printf("wrote %s/{latency,devices,links}.png\n", o.plot);
    mi_sim_result_free(&res);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
    free(acc);
    return 0;
}
