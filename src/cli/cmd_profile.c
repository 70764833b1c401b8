/* `meshinfer profile`: offline acceptance profiling for inter-layer
 * speculation (HeadSplit, "Not every layer deserves it"). Runs the model on
 * one device over a corpus and records, for every layer transition l -> l+1,
 * the ratio ||FFN(Z)|| / ||Z|| at every position; the percentiles give the
 * acceptance at any tolerance, and the cost model gives the expected saving
 * under a placement. The result is a JSON side file for --spec-profile. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/forward.h"
#include "meshinfer/model_file.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"

static void help(void)
{
    printf("usage: meshinfer profile --model MODEL.h5 --text CORPUS --out PROFILE.json [options]\n\n"
           "Measures, for every layer transition, the ratio ||FFN(Z)||/||Z|| that decides whether\n"
           "speculative attention is kept, over the corpus (windows of the context length, BOS first),\n"
           "and writes its percentiles plus the acceptance and expected saving at --tolerance under\n"
           "a placement (default: greedy on 5 equal devices). Use the file with --spec-profile.\n"
           "  --max-tokens N        tokens of the corpus to use (default 4096)\n"
           "  --tolerance T         tolerance for the summary (default 0.05)\n"
           "  --min-acceptance A    transitions below this do not speculate (default 0.7)\n"
           "  --ranks N | --cluster FILE   devices for the expected saving (default 5 equal devices)\n"
           "  --planner NAME        placement for the expected saving (default greedy)\n"
           "  --json                print the profile to stdout as well\n");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The command's options. */
typedef struct {
    const char *model, *path, *out, *cluster, *planner;
    long max_tokens;
    double tol, min_acc;
    int ranks, json;
    mi_planner pl; /* --planner, parsed */
} profile_opts;

/* Returns 1 when --help was printed (the command is done), else 0. */
static int parse_options(int argc, char **argv, profile_opts *op)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},    {"text", required_argument, 0, 'f'},
        {"out", required_argument, 0, 'o'},      {"max-tokens", required_argument, 0, 'M'},
        {"tolerance", required_argument, 0, 't'}, {"min-acceptance", required_argument, 0, 'a'},
        {"ranks", required_argument, 0, 'n'},    {"cluster", required_argument, 0, 'c'},
        {"planner", required_argument, 0, 'p'},  {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    *op = (profile_opts){.planner = "greedy", .max_tokens = 4096, .tol = 0.05, .min_acc = 0.7};
    int o;
    while ((o = getopt_long(argc, argv, ":m:f:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': op->model = optarg; break;
        case 'f': op->path = optarg; break;
        case 'o': op->out = optarg; break;
        case 'M': op->max_tokens = mi_parse_long("--max-tokens", optarg, 2, 1L << 30); break;
        case 't': op->tol = mi_parse_double("--tolerance", optarg, 0.0, 1e9); break;
        case 'a': op->min_acc = mi_parse_double("--min-acceptance", optarg, 0.0, 1.0); break;
        case 'n': op->ranks = (int)mi_parse_long("--ranks", optarg, 1, MI_MAX_RANKS); break;
        case 'c': op->cluster = optarg; break;
        case 'p': op->planner = optarg; break;
        case 'j': op->json = 1; break;
        case 'h': help(); return 1;
        default: cli_bad_option("profile", o, argv);
        }
    }
    cli_no_positional("profile", optind, argc, argv);
    if (!op->model || !op->path || !op->out)
        mi_fatal("profile: --model, --text and --out are required (see meshinfer profile --help)");
    if (op->ranks && op->cluster)
        mi_fatal("profile: give --ranks or --cluster, not both");
    if (mi_planner_parse(op->planner, &op->pl))
        mi_fatal("profile: unknown planner '%s'", op->planner);
    return 0;
}

/* Checks the output, reads the corpus (returned, *len bytes) and the
 * devices of the expected saving into cl. */
static char *read_inputs(const profile_opts *op, size_t *len, mi_cluster *cl)
{
    char err[MI_ERRLEN];
    const char *inputs[] = {op->model, op->path, op->cluster};
    if (mi_output_check(op->out, "profile file", inputs, 3, err))
        mi_fatal("%s", err);
    char *text = mi_read_text_nonempty(op->path, len, err);
    if (!text)
        mi_fatal("%s", err);
    if (op->cluster) {
        if (mi_cluster_load(op->cluster, cl, err))
            mi_fatal("%s", err);
    } else {
        mi_cluster_default(cl, op->ranks ? op->ranks : 5, 1e12);
    }
    return text;
}

/* The corpus's tokens, at most --max-tokens of them (*n); frees text. */
static int *tokenize_corpus(const profile_opts *op, mi_tokenizer *tok, char *text, size_t len, int *n)
{
    char err[MI_ERRLEN];
    int *ids = mi_malloc((len + 3) * sizeof(int), "corpus tokens");
    int n_text = mi_tokenizer_encode(tok, text, 0, ids, err);
    free(text);
    if (n_text < 0)
        mi_fatal("%s: %s", op->path, err);
    if (n_text > op->max_tokens)
        n_text = (int)op->max_tokens;
    if (n_text < 1)
        mi_fatal("%s: no tokens", op->path);
    *n = n_text;
    return ids;
}

/* One chunk of T positions from pos0 through every layer: the same blocks
 * as the forward pass, with the FFN output (tmp) kept apart so that each
 * transition's ratio ||FFN(Z)|| / ||Z|| goes to ratios[l * cap + at + t]. */
static void profile_chunk(mi_model *m, mi_scratch *s, float *tmp, const int *tokens, int T, int pos0,
                          double *ratios, size_t cap, size_t at)
{
    const mi_config *c = &m->cfg;
    int L = c->n_layers, d = c->dim;
    for (int t = 0; t < T; t++)
        mi_tensor_row_f32(&m->tok_embeddings, tokens[t], s->x + (size_t)t * d);
    for (int l = 0; l < L; l++) {
        mi_layer *Ly = &m->layers[l];
        mi_rmsnorm(s->xn, s->x, Ly->attention_norm, T, d, c->norm_eps);
        mi_attn_block(m, l, s, s->xn, T, pos0, s->heads);
        mi_proj_block(m, l, s->heads, T, s->x, 1);
        mi_rmsnorm(s->xn, s->x, Ly->ffn_norm, T, d, c->norm_eps);
        mi_ffn_block(m, l, s, s->xn, T, tmp, 0);
        for (int t = 0; t < T; t++) {
            double fz = 0, zz = 0;
            for (int k = 0; k < d; k++) {
                double f = tmp[(size_t)t * d + k], z = s->x[(size_t)t * d + k];
                fz += f * f;
                zz += z * z;
            }
            if (l < L - 1)
                ratios[(size_t)l * cap + at + t] = zz > 0 ? sqrt(fz / zz) : INFINITY;
        }
        for (size_t k = 0; k < (size_t)T * d; k++)
            s->x[k] += tmp[k];
    }
}

/* The long pass: the corpus in windows of the context (BOS first), the
 * ratios of every position into ratios (cap per transition). Returns the
 * number of positions. */
static size_t measure_ratios(mi_model *m, const int *ids, int n_text, int bos, double *ratios, size_t cap)
{
    const mi_config *c = &m->cfg;
    int W = c->seq_len, chunk = 64;
    size_t n_pos = 0;
    mi_scratch s;
    mi_scratch_init(&s, c, chunk);
    float *tmp = mi_malloc((size_t)chunk * c->dim * sizeof(float), "FFN output");
    int *win = mi_malloc((size_t)W * sizeof(int), "window");
    for (int start = 0; start < n_text; start += W - 1) {
        int mlen = n_text - start < W - 1 ? n_text - start : W - 1;
        win[0] = bos;
        memcpy(win + 1, ids + start, (size_t)mlen * sizeof(int));
        mi_model_reset(m);
        for (int i = 0; i < mlen + 1; i += chunk) {
            int T = mlen + 1 - i < chunk ? mlen + 1 - i : chunk;
            profile_chunk(m, &s, tmp, win + i, T, i, ratios, cap, n_pos);
            n_pos += (size_t)T;
        }
        fprintf(stderr, "%sprofile: %zu positions%s", isatty(fileno(stderr)) ? "\r" : "", n_pos,
                isatty(fileno(stderr)) ? "   " : "\n");
    }
    if (isatty(fileno(stderr)))
        fputc('\n', stderr);
    free(win);
    free(tmp);
    mi_scratch_free(&s);
    return n_pos;
}

/* The profile to f and its table to stdout: per transition its acceptance
 * at --tolerance, mean and percentiles of the ratio (sorting ratios), the
 * expected saving under plan and whether it speculates. */
static void write_profile(FILE *f, const profile_opts *op, const mi_config *c, const mi_plan *plan,
                          const mi_cluster *cl, double *ratios, size_t cap, size_t n_pos)
{
    int L = c->n_layers;
    fprintf(f, "{\"model\": ");
    cli_json_string(f, c->name, strlen(c->name));
    fprintf(f, ", \"synthetic_weights\": %s, \"corpus\": ", c->synthetic ? "true" : "false");
    cli_json_string(f, op->path, strlen(op->path));
    fprintf(f, ", \"positions\": %zu, \"n_layers\": %d, \"tolerance\": %g, \"min_acceptance\": %g, "
               "\"planner\": \"%s\", \"n_ranks\": %d, \"transitions\": [\n",
            n_pos, L, op->tol, op->min_acc, mi_planner_name(op->pl), cl->n_devices);
    printf("transition  acceptance@%g  mean ratio  median  p90     saving_us  speculates\n", op->tol);
    for (int l = 0; l < L - 1; l++) {
        double *r = ratios + (size_t)l * cap;
        qsort(r, n_pos, sizeof(double), cmp_double);
        size_t below = 0;
        double sum = 0;
        for (size_t k = 0; k < n_pos; k++) {
            below += r[k] < op->tol;
            sum += r[k];
        }
        double acc = (double)below / (double)n_pos, mean = sum / (double)n_pos;
        double saving = mi_plan_spec_saving(plan, cl, l, acc);
        int spec = acc >= op->min_acc && saving > 0;
        fprintf(f, " {\"from_layer\": %d, \"to_layer\": %d, \"acceptance\": %.5f, \"mean_ratio\": %.6f, "
                   "\"expected_saving_ms\": %.6f, \"speculate\": %s, \"ratio_percentiles\": [",
                l, l + 1, acc, mean, saving * 1e3, spec ? "true" : "false");
        for (int q = 0; q <= 100; q++)
            fprintf(f, "%s%.6g", q ? ", " : "", r[(size_t)((double)q / 100.0 * (double)(n_pos - 1) + 0.5)]);
        fprintf(f, "]}%s\n", l + 1 < L - 1 ? "," : "");
        printf("%4d -> %-4d %12.3f  %10.4f  %6.4f  %6.4f  %9.2f  %s\n", l, l + 1, acc, mean, r[n_pos / 2],
               r[(size_t)(0.9 * (double)(n_pos - 1))], saving * 1e6, spec ? "yes" : "no");
    }
    fprintf(f, "]}\n");
}

int cmd_profile(int argc, char **argv)
{
    profile_opts op;
    if (parse_options(argc, argv, &op))
        return 0;
    char err[MI_ERRLEN];
    size_t len;
    mi_cluster cl;
    char *text = read_inputs(&op, &len, &cl);
    mi_model m;
    mi_tokenizer tok;
    mi_model_load_path(&m, op.model, &tok);
    const mi_config *c = &m.cfg;
    if (c->synthetic)
        fprintf(stderr, "meshinfer: profile: %s has synthetic weights: acceptance rates from it are meaningless\n",
                op.model);
    if (c->n_layers < 2)
        mi_fatal("profile: the model has one layer: there is no transition to speculate");
    int n_text;
    int *ids = tokenize_corpus(&op, &tok, text, len, &n_text);

    /* placement and output first: a bad --out must fail before the long pass */
    mi_plan_options po = {op.pl, 1, -1, 0, NULL, op.min_acc, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_plan plan;
    if (mi_plan_make(c, &cl, &po, &plan, err))
        mi_fatal("profile: %s", err);
    mi_output of; /* a profile killed during its long pass leaves nothing (output.h) */
    FILE *f = mi_output_open(&of, op.out, err);
    if (!f)
        mi_fatal("%s", err);
    int W = c->seq_len;
    size_t cap = (size_t)n_text + (size_t)(n_text / (W - 1) + 1); /* the corpus and a BOS per window */
    double *ratios = mi_malloc((size_t)(c->n_layers - 1) * cap * sizeof(double), "ratios");
    double t0 = mi_now();
    size_t n_pos = measure_ratios(&m, ids, n_text, mi_tokenizer_doc_start(&tok), ratios, cap);

    write_profile(f, &op, c, &plan, &cl, ratios, cap, n_pos);
    if (mi_output_commit(&of, err))
        mi_fatal("%s", err);
    printf("profile: %zu positions of %s in %.1f s -> %s%s\n", n_pos, op.path, mi_now() - t0, op.out,
           c->synthetic ? " (synthetic weights)" : "");
    if (op.json) {
        size_t n;
        char e2[MI_ERRLEN];
        char *j = mi_read_text_nonempty(op.out, &n, e2);
        if (j)
            fputs(j, stdout);
        free(j);
    }
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
    free(ratios);
    free(ids);
    mi_tokenizer_free(&tok);
    mi_model_free(&m);
    return 0;
}
