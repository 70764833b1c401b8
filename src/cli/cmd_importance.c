/* `meshinfer importance`: Voltron §4.2.2's offline profile of how much each
 * layer matters. On one device, the model's perplexity on real text is
 * measured as it is, then with one layer's seven matrices lowered to each
 * rung of the precision ladder below the file's dtype (fp16 from fp32,
 * q8_0, q6_K, q5_K, q4_K, q4_0: each matrix quantized from the file's
 * weights and used in that dtype by the same kernels a quantized file would
 * use), one layer after the other. A layer whose matrices are not whole
 * super-blocks of 256 along their blocked axes cannot hold a k-quant: its
 * k-quant rises are written as null (planner.h mi_precision_holds). The rise in perplexity is the
 * layer's importance at that step; a side file (JSON) keeps them for the
 * precision search. Precision is per layer, the unit our dtypes (quantize
 * --layer-dtype) express. For Voltron §4.3.1's shard-wise pruning, each FFN
 * shard (--ffn-shard consecutive hidden channels) is pruned alone, layer by
 * layer: its rise ranks the shards that quantize --prune-ffn removes.
 * Voltron prunes channels one by one and sums them per shard; a shard
 * pruned whole costs a 64th of the evaluations and measures the shard's
 * channels together. */
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
#include "meshinfer/cost.h"
#include "meshinfer/planner.h"
#include "meshinfer/forward.h"
#include "meshinfer/model.h"
#include "meshinfer/output.h"
#include "meshinfer/tensor.h"
#include "meshinfer/tokenizer.h"

static void help(void)
{
    printf("usage: meshinfer importance -m MODEL.h5 --text FILE --out IMPORTANCE.json [options]\n\n"
           "Voltron's layer importance: perplexity of MODEL on FILE (windows of the context, BOS\n"
           "first) as it is, then with each layer's matrices lowered to each dtype of the precision\n"
           "ladder (fp16 from fp32, q8_0, q6_K, q5_K, q4_K, q4_0), one layer at a time; the rise is\n"
           "the layer's importance at that dtype. The k-quants need dim, n_heads x head_dim and\n"
           "hidden_dim in whole super-blocks of 256 (else null in the file). MODEL must hold fp32\n"
           "or fp16 weights. The JSON side file (version 2) records the model's name and shape.\n"
           "  --max-tokens N    tokens of FILE to score (default 1024)\n"
           "  --ffn-shard N     also each FFN shard's rise when pruned (its N hidden channels'\n"
           "                    outputs zero), for quantize --prune-ffn and the precision search;\n"
           "                    N a multiple of 32 dividing hidden_dim into 2 to 64 shards\n"
           "                    (default: the smallest such N of at least 64, else 32; 0: do not\n"
           "                    measure)\n"
           "  --json            print the result to stdout as well\n");
}

/* A copy of w in dtype t (rows quantized from w's values, as computation
 * scaling re-encodes them at run time), memory in *mem. */
static mi_tensor lowered(const mi_tensor *w, int t, void **mem)
{
    mi_tensor q;
    *mem = mi_malloc(mi_tensor_place_bytes(t, (size_t)w->rows, (size_t)w->cols), "lowered layer");
    if (mi_tensor_convert(w, t, *mem, &q))
        mi_fatal("importance: cannot hold a %dx%d matrix in %s", w->rows, w->cols, mi_dtype_name(t));
    return q;
}

/* The command's options. */
typedef struct {
    const char *model, *path, *out;
    long max_tokens;
    int json;
    int shard; /* --ffn-shard; -1: not given */
} importance_opts;

/* Returns 1 when --help was printed (the command is done), else 0. */
static int parse_options(int argc, char **argv, importance_opts *op)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"text", required_argument, 0, 'f'},
                                         {"out", required_argument, 0, 'o'},   {"max-tokens", required_argument, 0, 'M'},
                                         {"json", no_argument, 0, 'j'},        {"help", no_argument, 0, 'h'},
                                         {"ffn-shard", required_argument, 0, 'S'}, {0, 0, 0, 0}};
    *op = (importance_opts){.max_tokens = 1024, .shard = -1};
    int o;
    while ((o = getopt_long(argc, argv, ":m:f:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': op->model = optarg; break;
        case 'f': op->path = optarg; break;
        case 'o': op->out = optarg; break;
        case 'M': op->max_tokens = mi_parse_long("--max-tokens", optarg, 2, 1L << 24); break;
        case 'j': op->json = 1; break;
        case 'S': op->shard = (int)mi_parse_long("--ffn-shard", optarg, 0, 1L << 20); break;
        case 'h': help(); return 1;
        default: cli_bad_option("importance", o, argv);
        }
    }
    cli_no_positional("importance", optind, argc, argv);
    if (!op->model || !op->path || !op->out)
        mi_fatal("importance: --model, --text and --out are required (see meshinfer importance --help)");
    return 0;
}

/* Lowering starts from the file's weights: every layer matrix must be
 * fp32 or fp16. */
static void check_weights(const mi_config *c, const char *model)
{
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < MI_N_LAYER_MATS; k++)
            if (c->dtype[l][k] != MI_F32 && c->dtype[l][k] != MI_F16)
                mi_fatal("importance: %s holds %s weights in layer %d: lowering needs fp32 or fp16 weights to start "
                         "from", model, mi_dtype_name(c->dtype[l][k]), l);
}

/* 1 if S channels are whole blocks and split H hidden channels into 2 to
 * MI_MAX_PRUNE_SHARDS shards. */
static int shard_ok(int S, int H)
{
    return S % MI_QK == 0 && H % S == 0 && H / S >= 2 && H / S <= MI_MAX_PRUNE_SHARDS;
}

/* The FFN shard's channels: --ffn-shard (checked), or by default the
 * smallest whole-block shard of at least 64 channels that gives 2 to 64
 * shards, else 32 (a small or pruned FFN), else 0 (none, with a note). */
static int choose_shard(int shard, int H)
{
    if (shard < 0) {
        for (shard = 64; shard <= H / 2 && !shard_ok(shard, H); shard += MI_QK)
            ;
        if (shard > H / 2)
            shard = shard_ok(MI_QK, H) ? MI_QK : 0;
        if (!shard)
            fprintf(stderr, "meshinfer: importance: hidden_dim %d has no shard of whole blocks of %d giving 2 to %d "
                    "shards: FFN shards not measured\n", H, MI_QK, MI_MAX_PRUNE_SHARDS);
    }
    if (shard > 0 && !shard_ok(shard, H)) /* (an --ffn-shard given) */
        mi_fatal("importance: --ffn-shard %d must be a multiple of %d dividing hidden_dim %d into 2 to %d shards",
                 shard, MI_QK, H, MI_MAX_PRUNE_SHARDS);
    return shard;
}


/* The perplexity on ids over base when one layer's seven matrices are
 * lowered to each rung below the layer's own dtype, layer by layer:
 * rise[l * MI_N_DTYPES + t] (NAN where not measured: at or above the file's
 * dtype, or a k-quant the layer cannot hold). */
static double *layer_rises(mi_model *m, mi_scratch *s, const int *ids, int n, int bos, double base, int tty)
{
    const mi_config *c = &m->cfg;
    double *rise = mi_malloc((size_t)c->n_layers * MI_N_DTYPES * sizeof(double), "importance");
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        mi_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w3, &L->w2};
        int top = 0; /* the layer's highest rung now: fp16 is measured only from all-fp32 matrices */
        for (int k = 0; k < 7; k++)
            top = mats[k]->dtype == MI_F16 ? 1 : top;
        for (int t = 0; t < MI_N_DTYPES; t++)
            rise[l * MI_N_DTYPES + t] = NAN;
        for (int st = top + 1; st < MI_N_RUNGS; st++) {
            int t = mi_precision_ladder[st];
            if (!mi_precision_holds(c, l, t))
                continue;
            mi_tensor keep[7];
            void *mem[7];
            for (int k = 0; k < 7; k++) {
                keep[k] = *mats[k];
                *mats[k] = lowered(&keep[k], t, &mem[k]);
            }
            rise[l * MI_N_DTYPES + t] = mi_window_perplexity(m, s, ids, n, bos) - base;
            for (int k = 0; k < 7; k++) {
                *mats[k] = keep[k];
                free(mem[k]);
            }
            if (tty) /* redrawn in place on a terminal; a log gets the summary line only */
                fprintf(stderr, "\rimportance: layer %d of %d, %s ...", l + 1, c->n_layers, mi_dtype_name(t));
        }
    }
    return rise;
}

/* Voltron §4.3.1's pruning unit: a shard of hidden channels, pruned by
 * zeroing its rows of w3 (silu(w1 x) * 0 = 0: the channels' outputs vanish,
 * as if w1, w3 rows and w2 columns were gone). The perplexity's rise with
 * each shard pruned alone: prune[l * n_shards + j]. */
static double *shard_rises(mi_model *m, mi_scratch *s, const int *ids, int n, int bos, double base, int shard, int n_shards,
                           int tty)
{
    const mi_config *c = &m->cfg;
    double *prune = mi_calloc((size_t)c->n_layers * (size_t)(n_shards ? n_shards : 1), sizeof(double), "pruning");
    for (int l = 0; l < c->n_layers && n_shards; l++) {
        mi_tensor *w3 = &m->layers[l].w3, keep = *w3, z;
        void *mem = mi_malloc(mi_tensor_place_bytes(keep.dtype, (size_t)keep.rows, (size_t)keep.cols), "pruned w3");
        if (mi_tensor_convert(&keep, keep.dtype, mem, &z))
            mi_fatal("importance: cannot copy layer %d's w3", l);
        size_t row = mi_dtype_q_row_bytes(keep.dtype, (size_t)keep.cols);
        *w3 = z;
        for (int j = 0; j < n_shards; j++) {
            mi_zero_rows(w3, j * shard, shard);
            prune[l * n_shards + j] = mi_window_perplexity(m, s, ids, n, bos) - base;
            /* restore the shard's rows before the next one goes */
            memcpy((char *)z.q + (size_t)j * shard * row, (const char *)keep.q + (size_t)j * shard * row,
                   (size_t)shard * row);
            if (tty)
                fprintf(stderr, "\rimportance: layer %d of %d, FFN shard %d of %d ...", l + 1, c->n_layers, j + 1,
                        n_shards);
        }
        *w3 = keep;
        free(mem);
    }
    return prune;
}

/* What was measured, for the JSON side file and the table. */
typedef struct {
    int n;             /* tokens scored */
    double base;       /* the model's perplexity as it is */
    int shard, n_shards;
    double *rise;      /* [n_layers][MI_N_DTYPES]: each rung's rise, NAN where not measured */
    double *prune;     /* [n_layers][n_shards] */
} importance_result;

/* A rise, or null where it was not measured. */
static void rise_json(FILE *g, const char *name, double x)
{
    if (isnan(x))
        fprintf(g, ", \"%s\": null", name);
    else
        fprintf(g, ", \"%s\": %.6f", name, x);
}

static void write_json(FILE *g, const mi_config *c, const importance_result *r)
{
    fprintf(g, "{\"model\": \"%s\", \"version\": %d, \"synthetic\": %s, \"n_layers\": %d, \"dim\": %d, "
               "\"hidden_dim\": %d, \"tokens\": %d, \"base_perplexity\": %.6f, ", c->name, MI_IMPORTANCE_VERSION,
            c->synthetic ? "true" : "false", c->n_layers, c->dim, c->hidden_dim, r->n, r->base);
    if (r->n_shards)
        fprintf(g, "\"ffn_shard\": %d, ", r->shard);
    fprintf(g, "\"layers\": [");
    for (int l = 0; l < c->n_layers; l++) {
        const double *x = r->rise + (size_t)l * MI_N_DTYPES;
        fprintf(g, "%s\n  {\"layer\": %d", l ? "," : "", l);
        /* fp16 only when measured (an fp16 file's own dtype); a k-quant the layer cannot hold: null */
        for (int st = 1; st < MI_N_RUNGS; st++) {
            int t = mi_precision_ladder[st];
            if (t != MI_F16 || !isnan(x[t]))
                rise_json(g, mi_dtype_name(t), x[t]);
        }
        for (int j = 0; j < r->n_shards; j++)
            fprintf(g, "%s%.6f", j ? ", " : ", \"prune\": [", r->prune[l * r->n_shards + j]);
        fprintf(g, "%s}", r->n_shards ? "]" : "");
    }
    fprintf(g, "\n]}\n");
}

static void print_table(const mi_config *c, const importance_result *r, const char *out)
{
    int ns = r->n_shards;
    printf("base perplexity %.4f on %d tokens; rise when one layer is lowered (-: not measured):\n  layer", r->base,
           r->n);
    for (int st = 1; st < MI_N_RUNGS; st++)
        printf("  %8s", mi_dtype_name(mi_precision_ladder[st]));
    printf("\n");
    for (int l = 0; l < c->n_layers; l++) {
        printf("  %5d", l);
        for (int st = 1; st < MI_N_RUNGS; st++) {
            double x = r->rise[(size_t)l * MI_N_DTYPES + mi_precision_ladder[st]];
            if (isnan(x))
                printf("  %8s", "-");
            else
                printf("  %8.4f", x);
        }
        if (ns) { /* the layer's least and most important FFN shard */
            int lo = 0, hi = 0;
            for (int j = 1; j < ns; j++) {
                lo = r->prune[l * ns + j] < r->prune[l * ns + lo] ? j : lo;
                hi = r->prune[l * ns + j] > r->prune[l * ns + hi] ? j : hi;
            }
            printf("   pruning an FFN shard: %.4f (shard %d) to %.4f (shard %d)", r->prune[l * ns + lo], lo,
                   r->prune[l * ns + hi], hi);
        }
        printf("\n");
    }
    if (!mi_precision_holds(c, 0, MI_Q4_K))
        printf("no k-quant: dim %d, n_heads x head_dim %d and hidden_dim %d must all be multiples of %d\n", c->dim,
               c->n_heads * c->head_dim, c->hidden_dim, MI_QK_K);
    printf("wrote %s\n", out);
}

int cmd_importance(int argc, char **argv)
{
    importance_opts op;
    if (parse_options(argc, argv, &op))
        return 0;
    char err[MI_ERRLEN];
    const char *inputs[] = {op.model, op.path};
    if (mi_output_check(op.out, "importance file", inputs, 2, err))
        mi_fatal("%s", err);
    mi_model m;
    mi_tokenizer tok;
    mi_model_load_path(&m, op.model, &tok);
    const mi_config *c = &m.cfg;
    check_weights(c, op.model);
    if (c->synthetic)
        fprintf(stderr, "meshinfer: importance: %s has synthetic weights: its importances are meaningless\n",
                op.model);
    importance_result r;
    r.shard = choose_shard(op.shard, c->hidden_dim);
    r.n_shards = r.shard > 0 ? c->hidden_dim / r.shard : 0;
    int *ids = mi_text_ids(op.path, &tok, op.max_tokens, &r.n);
    mi_scratch s;
    mi_scratch_init(&s, c, 64);
    int tty = isatty(fileno(stderr));
    double t0 = mi_now();
    const int bos = mi_tokenizer_doc_start(&tok);
    r.base = mi_window_perplexity(&m, &s, ids, r.n, bos);
    r.rise = layer_rises(&m, &s, ids, r.n, bos, r.base, tty);
    r.prune = shard_rises(&m, &s, ids, r.n, bos, r.base, r.shard, r.n_shards, tty);
    int measured = 0;
    for (size_t i = 0; i < (size_t)c->n_layers * MI_N_DTYPES; i++)
        measured += !isnan(r.rise[i]);
    fprintf(stderr, "%simportance: %d layers x %d dtypes", tty ? "\r" : "", c->n_layers, measured / c->n_layers);
    if (r.n_shards)
        fprintf(stderr, " and %d FFN shards of %d channels", r.n_shards, r.shard);
    fprintf(stderr, " on %d tokens in %.1f s        \n", r.n, mi_now() - t0);
    mi_output of;
    FILE *f = mi_output_open(&of, op.out, err);
    if (!f)
        mi_fatal("%s", err);
    write_json(f, c, &r);
    if (op.json)
        write_json(stdout, c, &r);
    if (mi_output_commit(&of, err))
        mi_fatal("%s", err);
    if (!op.json)
        print_table(c, &r, op.out);
    free(r.rise);
    free(r.prune);
    free(ids);
    mi_scratch_free(&s);
    mi_model_free(&m);
    mi_tokenizer_free(&tok);
    return 0;
}
