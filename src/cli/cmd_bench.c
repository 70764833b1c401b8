/* `meshinfer bench`: prefill and decode speed, against baselines measured in
 * the same run: the STREAM triad bandwidth, OpenBLAS sgemv in place of our
 * decode kernel (one rank), and a single-device pass (several ranks). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_batch.h"
#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/kernels.h"
#include "meshinfer/sampler.h"
#include "meshinfer/stream.h"
#include "meshinfer/runtime.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer bench --model MODEL.h5 [--steps N] [--prompt TEXT] [--json]\n\n"
           "Greedy decoding of N positions (llama2.c convention: prompt included; default\n"
           "min(256, seq_len)), reporting TTFT, TPOT, decode tokens/s and the effective weight\n"
           "bandwidth (weight bytes read per token x tokens/s), next to baselines measured in this\n"
           "run: the STREAM triad bandwidth; with one rank, a decode pass with OpenBLAS sgemv; with\n"
           "several ranks, a single-device pass on rank 0 (speedup = single / distributed time); with\n"
           "weights other than fp32 on one rank, none unless --baseline-model names one.\n"
           "  --repeat R       decode passes per configuration, best is reported (default 3)\n"
           "  --stream-mb MB   size of each STREAM array (default 128)\n"
           "  --baseline-model FILE  the baseline is a single-device decode of FILE instead (e.g. the fp32\n"
           "                   model, to see what a dtype gains: same prompt and steps)\n"
           "  --no-baseline    skip the baseline\n"
           "  --threads N      compute threads per rank (our kernels and BLAS; default 1); every rank\n"
           "                   runs the triad with its threads at once, and their sum is reported\n"
           "  --json           print one JSON object (with per-rank metrics)\n"
           "  --batch B        instead: B sequences (prompts of different lengths, greedy and sampled)\n"
           "                   decoded one at a time and together in a batch (serve's continuous\n"
           "                   batching), aggregate tokens/s of both in alternating rounds, and a check\n"
           "                   that batching changes no sequence's tokens (exit 1 if it does); with the\n"
           "                   last batched round's counters per rank: decode passes, decode and prompt rows\n"
           "  --micro-batches M  with --batch: decode passes as M micro-batches pipelined through the\n"
           "                   ranks where the plan is a chain (layer-wise; default: the rank count;\n"
           "                   1: one pass)\n"
           "%s", SESSION_HELP);
}

typedef struct {
    double ttft, tpot;
    int n_decode;
} pass_result;

/* decode: a decode step, not a prompt chunk (the runtime's row counters) */
typedef float *(*fwd_fn)(void *ctx, const int *tokens, int T, int pos0, int decode);

static float *fwd_dist(void *ctx, const int *tokens, int T, int pos0, int decode)
{
    return mi_runtime_forward(ctx, tokens, T, pos0, decode ? MI_FORWARD_DECODE : 0);
}

typedef struct {
    mi_model m;
    mi_scratch s;
} single;

static float *fwd_single(void *ctx, const int *tokens, int T, int pos0, int decode)
{
    (void)decode;
    single *sg = ctx;
    float *l = NULL;
    for (int i = 0; i < T; i += sg->s.max_T) {
        int n = T - i < sg->s.max_T ? T - i : sg->s.max_T;
        l = mi_forward(&sg->m, &sg->s, tokens + i, n, pos0 + i, 0);
    }
    return l;
}

/* ss: the distributed session, whose hybrid placements change between the
 * phases (the re-placement is outside both timings); NULL for one device. */
static pass_result run_pass(fwd_fn f, void *ctx, mi_session *ss, int vocab, const int *prompt, int n_prompt, int steps,
                            int chunk)
{
    pass_result r = {0};
    if (ss)
        session_phase(ss, 1, 0);
    double t0 = mi_now();
    float *logits = NULL;
    for (int i = 0; i < n_prompt; i += chunk) {
        int T = n_prompt - i < chunk ? n_prompt - i : chunk;
        logits = f(ctx, prompt + i, T, i, 0);
    }
    int next = mi_argmax(logits, vocab);
    double t_first = mi_now();
    /* timings of a model that computes NaN are no timings: the prompt's and the last step's logits
     * are checked as generate checks every step's, outside the timed spans */
    session_check_output(ss, logits, vocab, n_prompt - 1);
    if (ss)
        session_phase(ss, 0, n_prompt); /* the logits were read: a re-placement may replace them */
    double t1 = mi_now();
    for (int pos = n_prompt; pos < steps; pos++) {
        logits = f(ctx, &next, 1, pos, 1);
        next = mi_argmax(logits, vocab);
    }
    double t2 = mi_now();
    if (steps > n_prompt)
        session_check_output(ss, logits, vocab, steps - 1);
    r.ttft = t_first - t0;
    r.n_decode = steps - n_prompt;
    r.tpot = r.n_decode > 0 ? (t2 - t1) / r.n_decode : 0.0;
    return r;
}

/* The command's options. */
typedef struct {
    const char *model, *prompt, *base_model;
    long steps, stream_mb; /* steps 0: min(256, seq_len), set once the model is open */
    int repeat, threads, json, baseline, batch, micro;
    session_opts so;
} bench_opts;

/* Returns 1 when --help was printed (the command is done), else 0. */
static int parse_options(int argc, char **argv, bench_opts *op)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"repeat", required_argument, 0, 'r'},
                                         {"stream-mb", required_argument, 0, 'S'},
                                         {"no-baseline", no_argument, 0, 'B'},
                                         {"baseline-model", required_argument, 0, 'M'},
                                         {"threads", required_argument, 0, 'T'},
                                         {"json", no_argument, 0, 'j'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"micro-batches", required_argument, 0, 'u'},
                                         {"help", no_argument, 0, 'h'},
                                         SESSION_LONG_OPTS,
                                         {0, 0, 0, 0}};
    *op = (bench_opts){.prompt = "Once upon a time", .stream_mb = 128, .repeat = 3, .threads = 1, .baseline = 1};
    session_opts_init(&op->so);
    int o;
    while ((o = getopt_long(argc, argv, ":m:n:p:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': op->model = optarg; break;
        case 'n': op->steps = mi_parse_long("--steps", optarg, 2, 1 << 20); break;
        case 'p': op->prompt = optarg; break;
        case 'r': op->repeat = (int)mi_parse_long("--repeat", optarg, 1, 1000); break;
        case 'S': op->stream_mb = mi_parse_long("--stream-mb", optarg, 1, 16384); break;
        case 'B': op->baseline = 0; break;
        case 'M': op->base_model = optarg; break;
        case 'T': op->threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': op->json = 1; break;
        case 'b': op->batch = (int)mi_parse_long("--batch", optarg, 1, 64); break;
        case 'u': op->micro = (int)mi_parse_long("--micro-batches", optarg, 1, MI_MAX_RANKS); break;
        case 'h': help(); return 1;
        default:
            if (!session_opt(&op->so, o, optarg))
                cli_bad_option("bench", o, argv);
        }
    }
    cli_no_positional("bench", optind, argc, argv);
    if (!op->model)
        mi_fatal("bench: --model is required (see meshinfer bench --help)");
    if (op->batch && (op->base_model || !op->baseline || op->stream_mb != 128))
        mi_fatal("bench: --batch has its own baseline (the same sequences one at a time): drop --baseline-model, "
                 "--no-baseline and --stream-mb");
    if (op->micro && !op->batch)
        mi_fatal("bench: --micro-batches goes with --batch");
    if (op->base_model && !op->baseline)
        mi_fatal("bench: --baseline-model and --no-baseline contradict each other");
    return 0;
}

/* Sets the default --steps and checks, on every rank before anything is
 * timed, that the steps fit the model's context and leave decode steps
 * after the prompt, and that a baseline model is the same model in other
 * dtypes (a shorter context would overrun its KV cache). */
static void check_run(bench_opts *op, const mi_config *c, int rank, int n_prompt)
{
    char msg[MI_ERRLEN] = "";
    int bad = 0;
    if (op->steps == 0)
        op->steps = c->seq_len < 256 ? c->seq_len : 256;
    if (op->steps > c->seq_len)
        bad = snprintf(msg, sizeof msg, "bench: --steps %ld exceeds the model's context of %d", op->steps,
                       c->seq_len);
    else if (rank == 0 && op->steps <= n_prompt)
        bad = snprintf(msg, sizeof msg, "bench: --steps %ld leaves no decode steps after the %d-token prompt",
                       op->steps, n_prompt);
    if (!bad && rank == 0 && op->base_model) {
        mi_config bc;
        char err[MI_ERRLEN];
        mi_model_file *bf = mi_model_open(op->base_model, &bc, err);
        if (!bf)
            bad = snprintf(msg, sizeof msg, "bench: --baseline-model: %s", err);
        else if (bc.dim != c->dim || bc.hidden_dim != c->hidden_dim || bc.n_layers != c->n_layers ||
                 bc.n_heads != c->n_heads || bc.n_kv_heads != c->n_kv_heads || bc.vocab_size != c->vocab_size ||
                 bc.seq_len != c->seq_len)
            bad = snprintf(msg, sizeof msg, "bench: --baseline-model %s is not the same model in other dtypes (dim %d, "
                                            "%d layers, %d heads, vocab %d, context %d; the model: %d, %d, %d, %d, %d)",
                           op->base_model, bc.dim, bc.n_layers, bc.n_heads, bc.vocab_size, bc.seq_len, c->dim,
                           c->n_layers, c->n_heads, c->vocab_size, c->seq_len);
        mi_model_close(bf);
    }
    mi_check_all(bad, msg);
}

/* The bandwidth the job's streams get together: every rank runs the triad
 * with its threads at the same time (not rank 0 alone while the others
 * spin in MPI), and rank 0 adds them up. */
static double measure_triad(const bench_opts *op, int rank, int size)
{
    if (rank == 0 && !op->json)
        fprintf(stderr, "bench: measuring STREAM triad (%ld MB arrays, %d rank%s x %d thread%s)...\n", op->stream_mb,
                size, size > 1 ? "s" : "", op->threads, op->threads > 1 ? "s" : "");
    mi_world_barrier();
    return mi_world_sum(mi_stream_triad_gbs((size_t)op->stream_mb * 1000000 / sizeof(float), 5, op->threads));
}

/* What rank 0 measured and reports. */
typedef struct {
    pass_result best, base; /* the fastest distributed and baseline passes */
    double triad;           /* GB/s of all ranks' triads together */
    double bytes_per_token; /* weight bytes a decode step reads */
    int size, streams, n_prompt;
    int baseline;           /* 0: none was run */
    const char *base_kind;
    char dts[160];          /* the weights' dtypes */
} bench_result;

/* The fastest of --repeat distributed decode passes; the metrics are the
 * last pass's. */
static pass_result best_distributed(mi_session *ss, const bench_opts *op, const int *ids, int n_prompt, int size,
                                    int chunk)
{
    pass_result best = {1e30, 1e30, 0};
    for (int r = 0; r < op->repeat; r++) {
        if (!op->json)
            fprintf(stderr, "bench: decode pass %d/%d (%ld positions, %d rank%s)...\n", r + 1, op->repeat, op->steps,
                    size, size > 1 ? "s" : "");
        mi_runtime_reset(ss->rt);
        if (r == op->repeat - 1)
            mi_runtime_reset_metrics(ss->rt); /* report the last pass only */
        pass_result p = run_pass(fwd_dist, ss->rt, ss, ss->cfg.vocab_size, ids, n_prompt, (int)op->steps, chunk);
        if (p.tpot < best.tpot)
            best = p;
    }
    return best;
}

/* The fastest of --repeat single-device passes on rank 0: of the baseline
 * model, else of the model itself (with BLAS sgemv when alone). */
static pass_result best_baseline(const bench_opts *op, const bench_result *res, int vocab, const int *ids,
                                 int chunk)
{
    pass_result base = {1e30, 1e30, 0};
    single sg;
    mi_model_load_path(&sg.m, op->base_model ? op->base_model : op->model, NULL);
    mi_scratch_init(&sg.s, &sg.m.cfg, chunk);
    if (res->size == 1 && !op->base_model)
        mi_use_blas_matvec(1);
    for (int r = 0; r < op->repeat; r++) {
        if (!op->json)
            fprintf(stderr, "bench: %s baseline pass %d/%d...\n", res->base_kind, r + 1, op->repeat);
        mi_model_reset(&sg.m);
        pass_result p = run_pass(fwd_single, &sg, NULL, vocab, ids, res->n_prompt, (int)op->steps, chunk);
        if (p.tpot < base.tpot)
            base = p;
    }
    mi_use_blas_matvec(0);
    mi_scratch_free(&sg.s);
    mi_model_free(&sg.m);
    return base;
}

static void print_json(const bench_opts *op, mi_session *ss, const bench_result *res)
{
    const mi_config *c = &ss->cfg;
    const pass_result *best = &res->best;
    double tps = 1.0 / best->tpot, gbs = res->bytes_per_token * tps / 1e9;
    double roof_tps = res->triad * 1e9 / res->bytes_per_token;
    double base_tps = res->baseline ? 1.0 / res->base.tpot : 0.0;
    printf("{\"model\": ");
    cli_json_string(stdout, op->model, strlen(op->model));
    printf(", \"name\": \"%s\", \"synthetic_weights\": %s, \"n_ranks\": %d, \"threads\": %d, \"precision\": "
           "\"%s\", \"wire_dtype\": \"%s\", \"kernels\": \"%s\", \"triad_threads\": %d, \"prompt_tokens\": %d, \"steps\": %ld, \"decode_tokens\": %d, \"ttft_ms\": %.3f, "
           "\"tpot_ms\": %.4f, \"decode_tokens_per_s\": %.2f, \"weight_bytes_per_token\": %.0f, "
           "\"effective_gbs\": %.3f, \"stream_triad_gbs\": %.3f, \"fraction_of_triad\": %.4f, "
           "\"triad_ceiling_tokens_per_s\": %.2f, \"baseline\": \"%s\", \"baseline_tokens_per_s\": %.2f, "
           "\"speedup_vs_baseline\": %.4f, \"baseline_model\": ",
           c->name, c->synthetic ? "true" : "false", res->size, op->threads, res->dts, mi_dtype_name(ss->plan.wire),
           mi_kernels_name(), res->streams, res->n_prompt, op->steps, best->n_decode,
           best->ttft * 1e3, best->tpot * 1e3, tps, res->bytes_per_token, gbs, res->triad, gbs / res->triad, roof_tps,
           res->baseline ? res->base_kind : "none", base_tps, res->baseline ? tps / base_tps : 0.0);
    if (op->base_model)
        cli_json_string(stdout, op->base_model, strlen(op->base_model));
    else
        printf("null");
    printf(", ");
    session_metrics_json(ss, stdout);
    printf("}\n");
}

static void print_table(const bench_opts *op, mi_session *ss, const bench_result *res)
{
    const mi_config *c = &ss->cfg;
    const pass_result *best = &res->best;
    int size = res->size, streams = res->streams;
    double tps = 1.0 / best->tpot, gbs = res->bytes_per_token * tps / 1e9;
    double roof_tps = res->triad * 1e9 / res->bytes_per_token;
    double base_tps = res->baseline ? 1.0 / res->base.tpot : 0.0;
    printf("model            %s (%s)%s\n", op->model, c->name, c->synthetic ? "  [synthetic weights]" : "");
    printf("ranks            %d, planner %s (predicted %.3f ms/token, %.0f bytes/token moved)\n", size,
           mi_planner_name(ss->plan.planner), ss->pred.token_s * 1e3, ss->pred.bytes_per_token);
    printf("positions        %ld (prompt %d, decode %d), %d thread(s) per rank\n", op->steps, res->n_prompt,
           best->n_decode, op->threads);
    printf("precision        weights %s, messages %s, kernels %s\n", res->dts, mi_dtype_name(ss->plan.wire),
           mi_kernels_name());
    printf("TTFT             %.2f ms\n", best->ttft * 1e3);
    printf("TPOT             %.3f ms\n", best->tpot * 1e3);
    printf("decode           %.1f tokens/s\n", tps);
    printf("weights/token    %.1f MB\n", res->bytes_per_token / 1e6);
    printf("effective BW     %.2f GB/s = %.0f%% of STREAM triad %.2f GB/s with %d thread%s (ceiling %.1f "
           "tokens/s)\n", gbs, 100.0 * gbs / res->triad, res->triad, streams, streams > 1 ? "s" : "", roof_tps);
    if (res->baseline)
        printf("%-16s %.1f tokens/s (this run %.2fx)\n", op->base_model ? "baseline model" : size > 1 ? "1-device base"
                                                                                            : "sgemv baseline",
               base_tps, tps / base_tps);
    session_metrics_table(ss);
}

/* A worker rank: serves rank 0's passes, then reports its own metrics. */
static int serve_worker(mi_session *ss, const bench_opts *op)
{
    mi_runtime_serve(ss->rt);
    if (op->json)
        session_metrics_json(ss, stdout);
    else
        session_metrics_table(ss);
    session_close(ss, &op->so);
    mi_world_finalize();
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts op;
    if (parse_options(argc, argv, &op))
        return 0;
    if (op.so.tpot_ms > 0 || (op.so.importance && !op.so.prune_ffn) || op.so.energy) /* they act on generate's decode steps; ignored they mislead */
        mi_fatal("bench: --tpot-ms, --importance (without --prune-ffn) and --energy shape a generation at run time: they apply to generate");
    char cerr[MI_ERRLEN];
    if (session_opts_check(&op.so, "bench", mi_world_launch_size(NULL), cerr))
        mi_fatal("%s", cerr);
    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    mi_session ss;
    const int chunk = 64;
    op.so.kv_slots = op.batch;
    session_open(&ss, "bench", op.model, &op.so, chunk, op.threads);
    const mi_config *c = &ss.cfg;
    if (op.batch) {
        if (op.steps == 0)
            op.steps = c->seq_len < 128 ? c->seq_len : 128;
        if (op.steps > c->seq_len)
            mi_fatal("bench: --steps %ld exceeds the model's context of %d", op.steps, c->seq_len);
        int n_story = 0, *story = NULL;
        if (rank == 0) {
            story = bench_batch_story(&ss, op.steps, &n_story);
            bench_batch(&ss, story, n_story, op.batch, op.micro, op.steps, op.repeat, op.json);
        } else {
            mi_runtime_serve(ss.rt);
            mi_runtime_metrics(ss.rt, NULL); /* bench_batch gathers the counters */
        }
        free(story);
        session_close(&ss, &op.so);
        mi_world_finalize();
        return 0;
    }
    bench_result res = {.size = size};
    int *ids = session_encode_prompt(&ss, op.prompt, &res.n_prompt);
    check_run(&op, c, rank, res.n_prompt);

    res.triad = measure_triad(&op, rank, size);
    res.streams = size * op.threads;
    if (rank != 0)
        return serve_worker(&ss, &op);
    res.bytes_per_token = (double)mi_decode_weight_bytes(c);
    mi_config_dtype_summary(c, res.dts, sizeof res.dts);
    int all_fp32 = !strcmp(res.dts, "fp32");

    res.best = best_distributed(&ss, &op, ids, res.n_prompt, size, chunk);
    mi_runtime_stop(ss.rt);
    res.base_kind = op.base_model ? "baseline-model" : size > 1 ? "single-device" : "sgemv";
    res.baseline = op.baseline && (op.base_model || size > 1 || all_fp32); /* sgemv needs fp32 weights */
    res.base = (pass_result){1e30, 1e30, 0};
    if (res.baseline)
        res.base = best_baseline(&op, &res, c->vocab_size, ids, chunk);
    if (op.json)
        print_json(&op, &ss, &res);
    else
        print_table(&op, &ss, &res);
    free(ids);
    session_close(&ss, &op.so);
    mi_world_finalize();
    return 0;
}
