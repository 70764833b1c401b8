/* `meshinfer bench`: prefill and decode speed against the machine's memory
 * bandwidth, both measured in the same run. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/sampler.h"
#include "meshinfer/stream.h"
#include "session.h"

static void help(void)
{
    printf("usage: meshinfer bench --model MODEL.h5 [--steps N] [--prompt TEXT] [--json]\n\n"
           "Greedy decoding of N positions (llama2.c convention: prompt included; default\n"
           "min(256, seq_len)), reporting TTFT, TPOT, decode tokens/s and the effective weight\n"
           "bandwidth (weight bytes read per token x tokens/s), next to the STREAM triad bandwidth\n"
           "and a decode pass with OpenBLAS sgemv, both measured in this run as baselines.\n"
           "  --repeat R       decode passes per kernel, best is reported (default 3)\n"
           "  --stream-mb MB   size of each STREAM array (default 128)\n"
           "  --no-baseline    skip the sgemv baseline pass\n"
           "  --threads N      BLAS threads (default 1)\n"
           "  --json           print one JSON object\n");
}

typedef struct {
    double ttft, tpot;
    int n_decode;
} pass_result;

static pass_result run_pass(mi_session *ss, const int *prompt, int n_prompt, int steps)
{
    pass_result r = {0};
    mi_model_reset(&ss->model);
    double t0 = mi_now();
    float *logits = session_prefill(ss, prompt, n_prompt, 0);
    int next = mi_argmax(logits, ss->model.cfg.vocab_size);
    double t1 = mi_now();
    int pos = n_prompt;
    for (; pos < steps; pos++) {
        logits = mi_forward(&ss->model, &ss->s, &next, 1, pos, 0);
        next = mi_argmax(logits, ss->model.cfg.vocab_size);
    }
    double t2 = mi_now();
    r.ttft = t1 - t0;
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
                                         {"threads", required_argument, 0, 'T'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *prompt = "Once upon a time";
    long steps = 0, stream_mb = 128;
    int repeat = 3, threads = 1, json = 0, baseline = 1, o;
    while ((o = getopt_long(argc, argv, ":m:n:p:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'n': steps = mi_parse_long("--steps", optarg, 2, 1 << 20); break;
        case 'p': prompt = optarg; break;
        case 'r': repeat = (int)mi_parse_long("--repeat", optarg, 1, 1000); break;
        case 'S': stream_mb = mi_parse_long("--stream-mb", optarg, 1, 16384); break;
        case 'B': baseline = 0; break;
        case 'T': threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        default: cli_bad_option("bench", o, argv);
        }
    }
    cli_no_positional("bench", optind, argc, argv);
    if (!model)
        mi_fatal("bench: --model is required (see meshinfer bench --help)");
    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    mi_session ss;
    session_open(&ss, "bench", model, 128, threads);
    const mi_config *c = &ss.model.cfg;
    int n_prompt;
    int *ids = session_encode_prompt(&ss, prompt, &n_prompt);
    if (steps == 0)
        steps = c->seq_len < 256 ? c->seq_len : 256;
    if (steps > c->seq_len)
        mi_fatal("bench: --steps %ld exceeds the model's context of %d", steps, c->seq_len);
    if (steps <= n_prompt)
        mi_fatal("bench: --steps %ld leaves no decode steps after the %d-token prompt", steps, n_prompt);

    if (!json)
        fprintf(stderr, "bench: measuring STREAM triad (%ld MB arrays)...\n", stream_mb);
    double triad = mi_stream_triad_gbs((size_t)stream_mb * 1000000 / sizeof(float), 5);
    double bytes_per_token = (double)mi_decode_weight_elems(c) * sizeof(float);

    pass_result best = {1e30, 1e30, 0}, blas = {1e30, 1e30, 0};
    for (int k = 0; k < 1 + baseline; k++) {
        mi_use_blas_matvec(k == 1);
        pass_result *b = k ? &blas : &best;
        for (int r = 0; r < repeat; r++) {
            if (!json)
                fprintf(stderr, "bench: %s decode pass %d/%d (%ld positions)...\n", k ? "sgemv baseline" : "meshinfer",
                        r + 1, repeat, steps);
            pass_result p = run_pass(&ss, ids, n_prompt, (int)steps);
            if (p.tpot < b->tpot)
                *b = p;
        }
    }
    mi_use_blas_matvec(0);
    double tps = 1.0 / best.tpot, gbs = bytes_per_token * tps / 1e9;
    double roof_tps = triad * 1e9 / bytes_per_token;
    double blas_tps = baseline ? 1.0 / blas.tpot : 0.0;
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, model, strlen(model));
        printf(", \"name\": \"%s\", \"synthetic_weights\": %s, \"ranks\": %d, \"threads\": %d, \"precision\": "
               "\"fp32\", \"prompt_tokens\": %d, \"steps\": %ld, \"decode_tokens\": %d, \"ttft_ms\": %.3f, "
               "\"tpot_ms\": %.4f, \"decode_tokens_per_s\": %.2f, \"weight_bytes_per_token\": %.0f, "
               "\"effective_gbs\": %.3f, \"stream_triad_gbs\": %.3f, \"fraction_of_triad\": %.4f, "
               "\"triad_ceiling_tokens_per_s\": %.2f, \"sgemv_baseline_tokens_per_s\": %.2f, "
               "\"speedup_vs_sgemv\": %.4f}\n",
               c->name, c->synthetic ? "true" : "false", size, threads, n_prompt, steps, best.n_decode,
               best.ttft * 1e3, best.tpot * 1e3, tps, bytes_per_token, gbs, triad, gbs / triad, roof_tps,
               blas_tps, baseline ? tps / blas_tps : 0.0);
    } else {
        printf("model            %s (%s)%s\n", model, c->name, c->synthetic ? "  [synthetic weights]" : "");
        printf("positions        %ld (prompt %d, decode %d), fp32, %d thread(s)\n", steps, n_prompt,
               best.n_decode, threads);
        printf("TTFT             %.2f ms\n", best.ttft * 1e3);
        printf("TPOT             %.3f ms\n", best.tpot * 1e3);
        printf("decode           %.1f tokens/s\n", tps);
        printf("weights/token    %.1f MB\n", bytes_per_token / 1e6);
        printf("effective BW     %.2f GB/s = %.0f%% of STREAM triad %.2f GB/s (ceiling %.1f tokens/s)\n", gbs,
               100.0 * gbs / triad, triad, roof_tps);
        if (baseline)
            printf("sgemv baseline   %.1f tokens/s (meshinfer kernel %.2fx)\n", blas_tps, tps / blas_tps);
    }
    free(ids);
    session_close(&ss);
    MPI_Finalize();
    return 0;
}
