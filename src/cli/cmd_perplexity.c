/* `meshinfer perplexity`: mean negative log-likelihood of a text file. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "meshinfer/quality.h"
#include "meshinfer/common.h"
#include "meshinfer/runtime.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer perplexity --model MODEL.h5 --text FILE [--max-tokens N] [--json]\n\n"
           "Tokenizes FILE (UTF-8) and scores it in windows of the model's context length, each\n"
           "starting with BOS. Reports tokens scored, mean NLL (nats/token) and perplexity.\n"
           "  --max-tokens N   score at most N tokens of the file (default: all)\n"
           "  --threads N      compute threads per rank: matrix products and BLAS (default 1)\n"
           "  --json           print one JSON object\n"
           "%s"
           "A progress line is printed to stderr while long files are scored.\n",
           SESSION_HELP);
}

int cmd_perplexity(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"text", required_argument, 0, 'f'},
                                         {"max-tokens", required_argument, 0, 'M'},
                                         {"threads", required_argument, 0, 'T'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         SESSION_LONG_OPTS,
                                         {0, 0, 0, 0}};
    const char *model = NULL, *path = NULL;
    long max_tokens = 0;
    int threads = 1, json = 0, o;
    session_opts so;
    session_opts_init(&so);
    while ((o = getopt_long(argc, argv, ":m:f:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': path = optarg; break;
        case 'M': max_tokens = mi_parse_long("--max-tokens", optarg, 1, 1L << 40); break;
        case 'T': threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        default:
            if (!session_opt(&so, o, optarg))
                cli_bad_option("perplexity", o, argv);
        }
    }
    cli_no_positional("perplexity", optind, argc, argv);
    if (so.tpot_ms > 0 || (so.importance && !so.prune_ffn) || so.energy) /* they act on generate's decode steps; ignored they mislead */
        mi_fatal("perplexity: --tpot-ms, --importance (without --prune-ffn) and --energy shape a generation at run time: they apply to generate");
    if (!model || !path)
        mi_fatal("perplexity: --model and --text are required (see meshinfer perplexity --help)");
    char cerr[MI_ERRLEN];
    if (session_opts_check(&so, "perplexity", mi_world_launch_size(NULL), cerr))
        mi_fatal("%s", cerr);

    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    /* the text is the controller's: read and tokenize it before the workers load */
    char err[MI_ERRLEN] = "";
    size_t len = 0;
    char *text = NULL;
    if (rank == 0)
        text = mi_read_text_nonempty(path, &len, err);
    mi_check_all(rank == 0 && !text, err);
    so.text_input = path;
    mi_session ss;
    session_open(&ss, "perplexity", model, &so, 64, threads);
    const mi_config *c = &ss.cfg;
    int n_text = 0, *ids = NULL;
    if (rank == 0) {
        ids = mi_malloc((len + 3) * sizeof(int), "text tokens");
        n_text = mi_tokenizer_encode(&ss.tok, text, 0, ids, err);
        free(text);
        char e2[MI_ERRLEN];
        snprintf(e2, sizeof e2, "%s: %s", path, err);
        memcpy(err, e2, sizeof err);
    }
    mi_check_all(rank == 0 && n_text < 0, err);

    if (rank != 0) {
        mi_runtime_serve(ss.rt);
    } else {
        if (max_tokens > 0 && n_text > max_tokens)
            n_text = (int)max_tokens;
        int W = c->seq_len; /* window: BOS + W-1 text tokens */
        int *win = mi_malloc((size_t)W * sizeof(int), "window");
        double nll = 0.0;
        long scored = 0;
        double t0 = mi_now();
        int n_windows = (n_text + W - 2) / (W - 1);
        int tty = isatty(fileno(stderr));
        int chunk = 64;
        for (int w = 0, start = 0; start < n_text; w++, start += W - 1) {
            int m = n_text - start < W - 1 ? n_text - start : W - 1;
            win[0] = mi_tokenizer_doc_start(&ss.tok);
            memcpy(win + 1, ids + start, (size_t)m * sizeof(int));
            int T_total = m + 1;
            if (w > 0)
                mi_runtime_reset(ss.rt);
            /* the last position predicts nothing inside the window */
            for (int i = 0; i < T_total - 1; i += chunk) {
                int T = T_total - 1 - i < chunk ? T_total - 1 - i : chunk;
                float *lg = session_forward(&ss, win + i, T, i, MI_FORWARD_ALL_LOGITS);
                session_check_logits(lg, T * c->vocab_size, start + i);
                for (int t = 0; t < T; t++) {
                    nll += mi_nll(lg + (size_t)t * c->vocab_size, c->vocab_size, win[i + t + 1]);
                    scored++;
                }
            }
            /* progress: redrawn in place on a terminal, every tenth of the way in a log */
            int step = n_windows / 10 > 0 ? n_windows / 10 : 1;
            if (n_windows > 1 && (tty || (w + 1) % step == 0 || w + 1 == n_windows))
                fprintf(stderr, "%sperplexity: %ld/%d tokens (%.0f%%), perplexity so far %.3f, %.0f tokens/s%s",
                        tty ? "\r" : "", scored, n_text, 100.0 * scored / n_text, exp(nll / scored),
                        scored / (mi_now() - t0), tty ? "   " : "\n");
        }
        if (n_windows > 1 && tty)
            fputc('\n', stderr);
        mi_runtime_stop(ss.rt);
        double mean = nll / (double)scored, ppl = exp(mean);
        if (json) {
            printf("{\"model\": ");
            cli_json_string(stdout, model, strlen(model));
            printf(", \"text\": ");
            cli_json_string(stdout, path, strlen(path));
            printf(", \"synthetic_weights\": %s, \"n_ranks\": %d, \"tokens\": %ld, \"windows\": %d, "
                   "\"window_tokens\": %d, \"mean_nll\": %.6f, \"perplexity\": %.6f, \"seconds\": %.3f, ",
                   c->synthetic ? "true" : "false", size, scored, n_windows, W, mean, ppl, mi_now() - t0);
        } else {
            printf("tokens %ld  mean_nll %.6f  perplexity %.4f%s\n", scored, mean, ppl,
                   c->synthetic ? "  (synthetic weights)" : "");
        }
        free(win);
        free(ids);
    }
    if (json)
        session_metrics_json(&ss, stdout);
    if (rank == 0 && json)
        printf("}\n");
    session_close(&ss, &so);
    mi_world_finalize();
    return 0;
}
