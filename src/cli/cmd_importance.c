/* `meshinfer importance`: seed 003 4.2.2's offline profile of how much each
 * layer matters (issue 10 item 3, first part). On one device, the model's
 * perplexity on real text is measured as it is, then with one layer's seven
 * matrices lowered one precision step at a time (to q8_0, to q4_0: each
 * matrix quantized from the file's weights and used in that dtype by the
 * same kernels a quantized file would use), one layer after the other. The
 * rise in perplexity is the layer's importance at that step; a side file
 * (JSON) keeps them for the precision search. Precision is per layer, the
 * unit our dtypes (quantize --layer-dtype) express. For seed 003 4.3.1's
 * shard-wise pruning, each FFN shard (--ffn-shard consecutive hidden
 * channels) is pruned alone, layer by layer: its rise ranks the shards that
 * quantize --prune-ffn removes. The seed prunes channels one by one and sums
 * them per shard; a shard pruned whole costs a 64th of the evaluations and
 * measures the shard's channels together. */
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
           "Seed 003's layer importance: perplexity of MODEL on FILE (windows of the context, BOS\n"
           "first) as it is, then with each layer's matrices lowered to q8_0 and then to q4_0, one\n"
           "layer at a time; the rise is the layer's importance at that step. MODEL must hold\n"
           "fp32 or fp16 weights. The JSON side file records the model's name and shape.\n"
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

int cmd_importance(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"text", required_argument, 0, 'f'},
                                         {"out", required_argument, 0, 'o'},   {"max-tokens", required_argument, 0, 'M'},
                                         {"json", no_argument, 0, 'j'},        {"help", no_argument, 0, 'h'},
                                         {"ffn-shard", required_argument, 0, 'S'}, {0, 0, 0, 0}};
    const char *model = NULL, *path = NULL, *out = NULL;
    long max_tokens = 1024;
    int json = 0, o, shard = -1;
    while ((o = getopt_long(argc, argv, ":m:f:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'f': path = optarg; break;
        case 'o': out = optarg; break;
        case 'M': max_tokens = mi_parse_long("--max-tokens", optarg, 2, 1L << 24); break;
        case 'j': json = 1; break;
        case 'S': shard = (int)mi_parse_long("--ffn-shard", optarg, 0, 1L << 20); break;
        case 'h': help(); return 0;
        default: cli_bad_option("importance", o, argv);
        }
    }
    cli_no_positional("importance", optind, argc, argv);
    if (!model || !path || !out)
        mi_fatal("importance: --model, --text and --out are required (see meshinfer importance --help)");
    char err[MI_ERRLEN];
    const char *inputs[] = {model, path};
    if (mi_output_check(out, "importance file", inputs, 2, err))
        mi_fatal("%s", err);
    mi_model m;
    mi_tokenizer tok;
    mi_model_load_path(&m, model, &tok);
    const mi_config *c = &m.cfg;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < MI_N_LAYER_MATS; k++)
            if (c->dtype[l][k] != MI_F32 && c->dtype[l][k] != MI_F16)
                mi_fatal("importance: %s holds %s weights in layer %d: lowering needs fp32 or fp16 weights to start "
                         "from", model, mi_dtype_name(c->dtype[l][k]), l);
    if (c->synthetic)
        fprintf(stderr, "meshinfer: importance: %s has synthetic weights: its importances are meaningless\n", model);
    int H = c->hidden_dim;
#define SHARD_OK(S) ((S) % MI_QK == 0 && H % (S) == 0 && H / (S) >= 2 && H / (S) <= MI_MAX_PRUNE_SHARDS)
    if (shard < 0) { /* the smallest whole-block shard of at least 64 channels that gives 2 to 64 shards,
                      * else 32 (a small or pruned FFN), else none */
        for (shard = 64; shard <= H / 2 && !SHARD_OK(shard); shard += MI_QK)
            ;
        if (shard > H / 2)
            shard = SHARD_OK(MI_QK) ? MI_QK : 0;
        if (!shard)
            fprintf(stderr, "meshinfer: importance: hidden_dim %d has no shard of whole blocks of %d giving 2 to %d "
                    "shards: FFN shards not measured\n", H, MI_QK, MI_MAX_PRUNE_SHARDS);
    }
    if (shard > 0 && !SHARD_OK(shard)) /* (an --ffn-shard given) */
        mi_fatal("importance: --ffn-shard %d must be a multiple of %d dividing hidden_dim %d into 2 to %d shards",
                 shard, MI_QK, H, MI_MAX_PRUNE_SHARDS);
    int n_shards = shard > 0 ? H / shard : 0;
    int n, *ids = mi_text_ids(path, &tok, max_tokens, &n);
    mi_scratch s;
    mi_scratch_init(&s, c, 64);
    int tty = isatty(fileno(stderr));
    double t0 = mi_now(), base = mi_window_perplexity(&m, &s, ids, n);
    static const int steps[] = {MI_Q8_0, MI_Q4_0};
    double *rise = mi_calloc((size_t)c->n_layers * 2, sizeof(double), "importance");
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m.layers[l];
        mi_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w3, &L->w2};
        for (int st = 0; st < 2; st++) {
            mi_tensor keep[7];
            void *mem[7];
            for (int k = 0; k < 7; k++) {
                keep[k] = *mats[k];
                *mats[k] = lowered(&keep[k], steps[st], &mem[k]);
            }
            rise[l * 2 + st] = mi_window_perplexity(&m, &s, ids, n) - base;
            for (int k = 0; k < 7; k++) {
                *mats[k] = keep[k];
                free(mem[k]);
            }
            if (tty) /* redrawn in place on a terminal; a log gets the summary line only */
                fprintf(stderr, "\rimportance: layer %d of %d, %s ...", l + 1, c->n_layers, mi_dtype_name(steps[st]));
        }
    }
    /* seed 003 4.3.1's pruning unit: a shard of hidden channels, pruned by zeroing its rows of w3
     * (silu(w1 x) * 0 = 0: the channels' outputs vanish, as if w1, w3 rows and w2 columns were gone) */
    double *prune = mi_calloc((size_t)c->n_layers * (size_t)(n_shards ? n_shards : 1), sizeof(double), "pruning");
    for (int l = 0; l < c->n_layers && n_shards; l++) {
        mi_tensor *w3 = &m.layers[l].w3, keep = *w3, z;
        void *mem = mi_malloc(mi_tensor_place_bytes(keep.dtype, (size_t)keep.rows, (size_t)keep.cols), "pruned w3");
        if (mi_tensor_convert(&keep, keep.dtype, mem, &z))
            mi_fatal("importance: cannot copy layer %d's w3", l);
        size_t row = mi_dtype_q_row_bytes(keep.dtype, (size_t)keep.cols);
        *w3 = z;
        for (int j = 0; j < n_shards; j++) {
            mi_zero_rows(w3, j * shard, shard);
            prune[l * n_shards + j] = mi_window_perplexity(&m, &s, ids, n) - base;
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
    fprintf(stderr, "%simportance: %d layers x 2 steps", tty ? "\r" : "", c->n_layers);
    if (n_shards)
        fprintf(stderr, " and %d FFN shards of %d channels", n_shards, shard);
    fprintf(stderr, " on %d tokens in %.1f s        \n", n, mi_now() - t0);
    mi_output of;
    FILE *f = mi_output_open(&of, out, err);
    if (!f)
        mi_fatal("%s", err);
    for (int pass = 0; pass < 1 + json; pass++) {
        FILE *g = pass ? stdout : f;
        fprintf(g, "{\"model\": \"%s\", \"synthetic\": %s, \"n_layers\": %d, \"dim\": %d, \"hidden_dim\": %d, "
                   "\"tokens\": %d, \"base_perplexity\": %.6f, ", c->name, c->synthetic ? "true" : "false",
                c->n_layers, c->dim, c->hidden_dim, n, base);
        if (n_shards)
            fprintf(g, "\"ffn_shard\": %d, ", shard);
        fprintf(g, "\"layers\": [");
        for (int l = 0; l < c->n_layers; l++) {
            fprintf(g, "%s\n  {\"layer\": %d, \"q8_0\": %.6f, \"q4_0\": %.6f", l ? "," : "", l, rise[l * 2],
                    rise[l * 2 + 1]);
            for (int j = 0; j < n_shards; j++)
                fprintf(g, "%s%.6f", j ? ", " : ", \"prune\": [", prune[l * n_shards + j]);
            fprintf(g, "%s}", n_shards ? "]" : "");
        }
        fprintf(g, "\n]}\n");
    }
    if (mi_output_commit(&of, err))
        mi_fatal("%s", err);
    if (!json) {
        printf("base perplexity %.4f on %d tokens; rise when one layer is lowered:\n  layer      q8_0      q4_0\n", base,
               n);
        for (int l = 0; l < c->n_layers; l++) {
            printf("  %5d  %8.4f  %8.4f", l, rise[l * 2], rise[l * 2 + 1]);
            if (n_shards) { /* the layer's least and most important FFN shard */
                int lo = 0, hi = 0;
                for (int j = 1; j < n_shards; j++) {
                    lo = prune[l * n_shards + j] < prune[l * n_shards + lo] ? j : lo;
                    hi = prune[l * n_shards + j] > prune[l * n_shards + hi] ? j : hi;
                }
                printf("   pruning an FFN shard: %.4f (shard %d) to %.4f (shard %d)", prune[l * n_shards + lo], lo,
                       prune[l * n_shards + hi], hi);
            }
            printf("\n");
        }
        printf("wrote %s\n", out);
    }
    free(rise);
    free(prune);
    free(ids);
    mi_scratch_free(&s);
    mi_model_free(&m);
    mi_tokenizer_free(&tok);
    return 0;
}
