/* `meshinfer perplexity`: mean negative log-likelihood of a text file. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "session.h"

static void help(void)
{
    printf("usage: meshinfer perplexity --model MODEL.h5 --text FILE [--max-tokens N] [--json]\n\n"
           "Tokenizes FILE (UTF-8) and scores it in windows of the model's context length, each\n"
           "starting with BOS. Reports tokens scored, mean NLL (nats/token) and perplexity.\n"
           "  --max-tokens N   score at most N tokens of the file (default: all)\n"
           "  --threads N      BLAS threads (default 1)\n"
           "  --json           print one JSON object\n"
           "A progress line is printed to stderr while long files are scored.\n");
}

static int *encode_text(mi_session *ss, const char *path, const char *text, size_t len, int *n_out)
{
    char err[MI_ERRLEN];
    int *ids = mi_malloc((len + 3) * sizeof(int), "text tokens");
    *n_out = mi_tokenizer_encode(&ss->tok, text, 0, ids, err);
    if (*n_out < 0)
        mi_fatal("%s: %s", path, err);
    return ids;
}

int cmd_perplexity(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"text", required_argument, 0, 'f'},
                                         {"max-tokens", required_argument, 0, 'M'},
                                         {"threads", required_argument, 0, 'T'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *path = NULL;
    long max_tokens = 0;
    int threads = 1, json = 0, o;
    while ((o = getopt_long(argc, argv, ":m:f:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': path = optarg; break;
        case 'M': max_tokens = mi_parse_long("--max-tokens", optarg, 1, 1L << 40); break;
        case 'T': threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        default: cli_bad_option("perplexity", o, argv);
        }
    }
    cli_no_positional("perplexity", optind, argc, argv);
    if (!model || !path)
        mi_fatal("perplexity: --model and --text are required (see meshinfer perplexity --help)");
    size_t len;
    char *text = cli_read_text(path, &len);
    if (len == 0)
        mi_fatal("%s: text file is empty", path);

    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    mi_session ss;
    session_open(&ss, "perplexity", model, 128, threads);
    const mi_config *c = &ss.model.cfg;
    int n_text;
    int *ids = encode_text(&ss, path, text, len, &n_text);
    free(text);
    if (max_tokens > 0 && n_text > max_tokens)
        n_text = (int)max_tokens;
    if (n_text < 1)
        mi_fatal("%s: no tokens to score", path);

    int W = c->seq_len; /* window: BOS + W-1 text tokens */
    int *win = mi_malloc((size_t)W * sizeof(int), "window");
    double nll = 0.0;
    long scored = 0;
    double t0 = mi_now();
    int n_windows = (n_text + W - 2) / (W - 1);
    int tty = isatty(fileno(stderr));
    for (int w = 0, start = 0; start < n_text; w++, start += W - 1) {
        int m = n_text - start < W - 1 ? n_text - start : W - 1;
        win[0] = MI_TOK_BOS;
        memcpy(win + 1, ids + start, (size_t)m * sizeof(int));
        int T_total = m + 1;
        /* The last position predicts nothing inside the window; skip it. */
        for (int i = 0; i < T_total - 1; i += ss.s.max_T) {
            int T = T_total - 1 - i < ss.s.max_T ? T_total - 1 - i : ss.s.max_T;
            float *lg = mi_forward(&ss.model, &ss.s, win + i, T, i, 1);
            for (int t = 0; t < T; t++) {
                const float *l = lg + (size_t)t * c->vocab_size;
                float mx = l[0];
                for (int v = 1; v < c->vocab_size; v++)
                    if (l[v] > mx)
                        mx = l[v];
                double sum = 0.0;
                for (int v = 0; v < c->vocab_size; v++)
                    sum += exp((double)(l[v] - mx));
                int target = win[i + t + 1];
                nll += log(sum) + (double)mx - (double)l[target];
                scored++;
            }
        }
        mi_model_reset(&ss.model);
        /* progress: redrawn in place on a terminal, every tenth of the way in a log */
        int step = n_windows / 10 > 0 ? n_windows / 10 : 1;
        if (n_windows > 1 && (tty || (w + 1) % step == 0 || w + 1 == n_windows))
            fprintf(stderr, "%sperplexity: %ld/%d tokens (%.0f%%), perplexity so far %.3f, %.0f tokens/s%s",
                    tty ? "\r" : "", scored, n_text, 100.0 * scored / n_text, exp(nll / scored),
                    scored / (mi_now() - t0), tty ? "   " : "\n");
    }
    if (n_windows > 1 && tty)
        fputc('\n', stderr);
    double mean = nll / (double)scored, ppl = exp(mean);
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, model, strlen(model));
        printf(", \"text\": ");
        cli_json_string(stdout, path, strlen(path));
        printf(", \"synthetic_weights\": %s, \"tokens\": %ld, \"windows\": %d, \"window_tokens\": %d, "
               "\"mean_nll\": %.6f, \"perplexity\": %.6f, \"seconds\": %.3f}\n",
               c->synthetic ? "true" : "false", scored, n_windows, W, mean, ppl, mi_now() - t0);
    } else {
        printf("tokens %ld  mean_nll %.6f  perplexity %.4f%s\n", scored, mean, ppl,
               c->synthetic ? "  (synthetic weights)" : "");
    }
    free(win);
    free(ids);
    session_close(&ss);
    MPI_Finalize();
    return 0;
}
