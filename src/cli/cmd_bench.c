/* `meshinfer bench`: prefill and decode speed, against baselines measured in
 * the same run: the STREAM triad bandwidth, OpenBLAS sgemv in place of our
 * decode kernel (one rank), and a single-device pass (several ranks). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/kernels.h"
#include "meshinfer/sampler.h"
#include "meshinfer/stream.h"
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
           "%s", SESSION_HELP);
}

typedef struct {
    double ttft, tpot;
    int n_decode;
} pass_result;

typedef float *(*fwd_fn)(void *ctx, const int *tokens, int T, int pos0);

static float *fwd_dist(void *ctx, const int *tokens, int T, int pos0)
{
    return mi_runtime_forward(ctx, tokens, T, pos0, 0);
}

typedef struct {
    mi_model m;
    mi_scratch s;
} single;

static float *fwd_single(void *ctx, const int *tokens, int T, int pos0)
{
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
        logits = f(ctx, prompt + i, T, i);
    }
    int next = mi_argmax(logits, vocab);
    double t_first = mi_now();
    if (ss)
        session_phase(ss, 0, n_prompt); /* the logits were read: a re-placement may replace them */
    double t1 = mi_now();
    for (int pos = n_prompt; pos < steps; pos++) {
        logits = f(ctx, &next, 1, pos);
        next = mi_argmax(logits, vocab);
    }
    double t2 = mi_now();
    r.ttft = t_first - t0;
    r.n_decode = steps - n_prompt;
    r.tpot = r.n_decode > 0 ? (t2 - t1) / r.n_decode : 0.0;
    return r;
}

int cmd_bench(int argc, char **argv)
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
                                         {"help", no_argument, 0, 'h'},
                                         SESSION_LONG_OPTS,
                                         {0, 0, 0, 0}};
    const char *model = NULL, *prompt = "Once upon a time", *base_model = NULL;
    long steps = 0, stream_mb = 128;
    int repeat = 3, threads = 1, json = 0, baseline = 1, o;
    session_opts so;
    session_opts_init(&so);
    while ((o = getopt_long(argc, argv, ":m:n:p:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'n': steps = mi_parse_long("--steps", optarg, 2, 1 << 20); break;
        case 'p': prompt = optarg; break;
        case 'r': repeat = (int)mi_parse_long("--repeat", optarg, 1, 1000); break;
        case 'S': stream_mb = mi_parse_long("--stream-mb", optarg, 1, 16384); break;
        case 'B': baseline = 0; break;
        case 'M': base_model = optarg; break;
        case 'T': threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        default:
            if (!session_opt(&so, o, optarg))
                cli_bad_option("bench", o, argv);
        }
    }
    cli_no_positional("bench", optind, argc, argv);
    if (!model)
        mi_fatal("bench: --model is required (see meshinfer bench --help)");
    if (base_model && !baseline)
        mi_fatal("bench: --baseline-model and --no-baseline contradict each other");
    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    mi_session ss;
    const int chunk = 64;
    if (so.tpot_ms > 0 || (so.importance && !so.prune_ffn) || so.energy) /* they act on generate's decode steps; ignored they mislead */
        mi_fatal("bench: --tpot-ms, --importance (without --prune-ffn) and --energy shape a generation at run time: they apply to generate");
    session_open(&ss, "bench", model, &so, chunk, threads);
    const mi_config *c = &ss.cfg;
    int n_prompt;
    int *ids = session_encode_prompt(&ss, prompt, &n_prompt);
    char msg[MI_ERRLEN] = "";
    int bad = 0;
    if (steps == 0)
        steps = c->seq_len < 256 ? c->seq_len : 256;
    if (steps > c->seq_len)
        bad = snprintf(msg, sizeof msg, "bench: --steps %ld exceeds the model's context of %d", steps, c->seq_len);
    else if (rank == 0 && steps <= n_prompt)
        bad = snprintf(msg, sizeof msg, "bench: --steps %ld leaves no decode steps after the %d-token prompt", steps,
                       n_prompt);
    /* a baseline model must be the same model in other dtypes, checked before
     * anything is timed (a shorter context would overrun its KV cache) */
    if (!bad && rank == 0 && base_model) {
        mi_config bc;
        char err[MI_ERRLEN];
        mi_model_file *bf = mi_model_open(base_model, &bc, err);
        if (!bf)
            bad = snprintf(msg, sizeof msg, "bench: --baseline-model: %s", err);
        else if (bc.dim != c->dim || bc.hidden_dim != c->hidden_dim || bc.n_layers != c->n_layers ||
                 bc.n_heads != c->n_heads || bc.n_kv_heads != c->n_kv_heads || bc.vocab_size != c->vocab_size ||
                 bc.seq_len != c->seq_len)
            bad = snprintf(msg, sizeof msg, "bench: --baseline-model %s is not the same model in other dtypes (dim %d, "
                                            "%d layers, %d heads, vocab %d, context %d; the model: %d, %d, %d, %d, %d)",
                           base_model, bc.dim, bc.n_layers, bc.n_heads, bc.vocab_size, bc.seq_len, c->dim,
                           c->n_layers, c->n_heads, c->vocab_size, c->seq_len);
        mi_model_close(bf);
    }
    mi_check_all(bad, msg);

    /* The bandwidth the job's streams get together: every rank runs the triad
     * with its threads at the same time (not rank 0 alone while the others
     * spin in MPI), and rank 0 adds them up. */
    if (rank == 0 && !json)
        fprintf(stderr, "bench: measuring STREAM triad (%ld MB arrays, %d rank%s x %d thread%s)...\n", stream_mb,
                size, size > 1 ? "s" : "", threads, threads > 1 ? "s" : "");
    mi_world_barrier();
    double triad = mi_world_sum(mi_stream_triad_gbs((size_t)stream_mb * 1000000 / sizeof(float), 5, threads));
    int streams = size * threads;

    if (rank != 0) {
        mi_runtime_serve(ss.rt);
        if (json)
            session_metrics_json(&ss, stdout);
        else
            session_metrics_table(&ss);
        session_close(&ss, &so);
        mi_world_finalize();
        return 0;
    }
    double bytes_per_token = (double)mi_decode_weight_bytes(c);
    char dts[160];
    mi_config_dtype_summary(c, dts, sizeof dts);
    int all_fp32 = !strcmp(dts, "fp32");

    pass_result best = {1e30, 1e30, 0}, base = {1e30, 1e30, 0};
    for (int r = 0; r < repeat; r++) {
        if (!json)
            fprintf(stderr, "bench: decode pass %d/%d (%ld positions, %d rank%s)...\n", r + 1, repeat, steps, size,
                    size > 1 ? "s" : "");
        mi_runtime_reset(ss.rt);
        if (r == repeat - 1)
            mi_runtime_reset_metrics(ss.rt); /* report the last pass only */
        pass_result p = run_pass(fwd_dist, ss.rt, &ss, c->vocab_size, ids, n_prompt, (int)steps, chunk);
        if (p.tpot < best.tpot)
            best = p;
    }
    mi_runtime_stop(ss.rt);
    const char *base_kind = base_model ? "baseline-model" : size > 1 ? "single-device" : "sgemv";
    if (!base_model && size == 1 && !all_fp32)
        baseline = 0; /* sgemv needs fp32 weights */
    if (baseline) {
        single sg;
        mi_model_load_path(&sg.m, base_model ? base_model : model, NULL);
        mi_scratch_init(&sg.s, &sg.m.cfg, chunk);
        if (size == 1 && !base_model)
            mi_use_blas_matvec(1);
        for (int r = 0; r < repeat; r++) {
            if (!json)
                fprintf(stderr, "bench: %s baseline pass %d/%d...\n", base_kind, r + 1, repeat);
            mi_model_reset(&sg.m);
            pass_result p = run_pass(fwd_single, &sg, NULL, c->vocab_size, ids, n_prompt, (int)steps, chunk);
            if (p.tpot < base.tpot)
                base = p;
        }
        mi_use_blas_matvec(0);
        mi_scratch_free(&sg.s);
        mi_model_free(&sg.m);
    }
    double tps = 1.0 / best.tpot, gbs = bytes_per_token * tps / 1e9;
    double roof_tps = triad * 1e9 / bytes_per_token;
    double base_tps = baseline ? 1.0 / base.tpot : 0.0;
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, model, strlen(model));
        printf(", \"name\": \"%s\", \"synthetic_weights\": %s, \"n_ranks\": %d, \"threads\": %d, \"precision\": "
               "\"%s\", \"wire_dtype\": \"%s\", \"kernels\": \"%s\", \"triad_threads\": %d, \"prompt_tokens\": %d, \"steps\": %ld, \"decode_tokens\": %d, \"ttft_ms\": %.3f, "
               "\"tpot_ms\": %.4f, \"decode_tokens_per_s\": %.2f, \"weight_bytes_per_token\": %.0f, "
               "\"effective_gbs\": %.3f, \"stream_triad_gbs\": %.3f, \"fraction_of_triad\": %.4f, "
               "\"triad_ceiling_tokens_per_s\": %.2f, \"baseline\": \"%s\", \"baseline_tokens_per_s\": %.2f, "
               "\"speedup_vs_baseline\": %.4f, \"baseline_model\": ",
               c->name, c->synthetic ? "true" : "false", size, threads, dts, mi_dtype_name(ss.plan.wire),
               mi_kernels_name(), streams, n_prompt, steps, best.n_decode,
               best.ttft * 1e3, best.tpot * 1e3, tps, bytes_per_token, gbs, triad, gbs / triad, roof_tps,
               baseline ? base_kind : "none", base_tps, baseline ? tps / base_tps : 0.0);
        if (base_model)
            cli_json_string(stdout, base_model, strlen(base_model));
        else
            printf("null");
        printf(", ");
        session_metrics_json(&ss, stdout);
        printf("}\n");
    } else {
        printf("model            %s (%s)%s\n", model, c->name, c->synthetic ? "  [synthetic weights]" : "");
        printf("ranks            %d, planner %s (predicted %.3f ms/token, %.0f bytes/token moved)\n", size,
               mi_planner_name(ss.plan.planner), ss.pred.token_s * 1e3, ss.pred.bytes_per_token);
        printf("positions        %ld (prompt %d, decode %d), %d thread(s) per rank\n", steps, n_prompt,
               best.n_decode, threads);
        printf("precision        weights %s, messages %s, kernels %s\n", dts, mi_dtype_name(ss.plan.wire),
               mi_kernels_name());
        printf("TTFT             %.2f ms\n", best.ttft * 1e3);
        printf("TPOT             %.3f ms\n", best.tpot * 1e3);
        printf("decode           %.1f tokens/s\n", tps);
        printf("weights/token    %.1f MB\n", bytes_per_token / 1e6);
        printf("effective BW     %.2f GB/s = %.0f%% of STREAM triad %.2f GB/s with %d thread%s (ceiling %.1f "
               "tokens/s)\n", gbs, 100.0 * gbs / triad, triad, streams, streams > 1 ? "s" : "", roof_tps);
        if (baseline)
            printf("%-16s %.1f tokens/s (this run %.2fx)\n", base_model ? "baseline model" : size > 1 ? "1-device base"
                                                                                                 : "sgemv baseline",
                   base_tps, tps / base_tps);
        session_metrics_table(&ss);
    }
    free(ids);
    session_close(&ss, &so);
    mi_world_finalize();
    return 0;
}
