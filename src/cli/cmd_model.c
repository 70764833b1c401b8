/* Model-file commands: convert, synth, info, tokenize. None needs MPI. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/json_keys.h"
#include "cli.h"
#include "meshinfer/checkpoint.h"
#include "meshinfer/common.h"
#include "meshinfer/model.h"
#include "meshinfer/model_file.h"
#include "meshinfer/output.h"
#include "meshinfer/cost.h"
#include "meshinfer/planner.h"
#include "meshinfer/quantize.h"
#include "meshinfer/synth.h"
#include "meshinfer/tokenizer.h"

/* Refuse to write the output over one of the inputs (output.h). */
static void check_not_input(const char *out, const char *in)
{
    char err[MI_ERRLEN];
    if (mi_output_check(out, "model file", &in, 1, err))
        mi_fatal("%s", err);
}

int cmd_synth(int argc, char **argv)
{
    static const struct option opts[] = {{"shape", required_argument, 0, 's'},
                                         {"seed", required_argument, 0, 'S'},
                                         {"out", required_argument, 0, 'o'},
                                         {"layers", required_argument, 0, 'l'},
                                         {"channels", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_DTYPE_LONG_OPTS,
                                         {0, 0, 0, 0}};
    const char *shape = NULL, *out = NULL;
    cli_dtypes dt = {0};
    uint64_t seed = 1;
    int layers = 0, channels = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":s:S:o:l:h", opts, NULL)) != -1) {
        switch (o) {
        case 's': shape = optarg; break;
        case 'S': seed = mi_parse_u64("--seed", optarg); break;
        case 'o': out = optarg; break;
        case 'l': layers = (int)mi_parse_long("--layers", optarg, 1, 1024); break;
        case 'c': channels = (int)mi_parse_long("--channels", optarg, 1, 1 << 16); break;
        case 'h':
            printf("usage: meshinfer synth --shape SHAPE --out MODEL.h5 [--seed S] [--layers N] [--channels C]\n"
                   "                      [--dtype T] [--layer-dtype SPEC] [--embeddings-dtype T]\n\n"
                   "Writes a model with seeded synthetic weights in the shape of a real model, for speed\n"
                   "and scale work. The file is marked synthetic; outputs from it say \"synthetic weights\".\n"
                   "Shapes: %s\n--layers overrides the layer count (smaller test models).\n"
                   "--channels: the columns a time-series model (patchtst) forecasts (default 3).\n"
                   "Precision (default fp32; the same seed gives the same weights at any precision):\n%s",
                   mi_config_shape_names(), CLI_DTYPE_HELP);
            return 0;
        default:
            if (!cli_dtype_opt(&dt, o, optarg))
                cli_bad_option("synth", o, argv);
        }
    }
    cli_no_positional("synth", optind, argc, argv);
    if (!shape || !out)
        mi_fatal("synth: --shape and --out are required (see meshinfer synth --help)");
    mi_config c;
    if (mi_config_from_shape(shape, &c))
        mi_fatal("synth: unknown shape '%s' (known: %s)", shape, mi_config_shape_names());
    if (layers)
        c.n_layers = layers;
    if (channels && c.family != MI_FAMILY_PATCHTST)
        mi_fatal("synth: --channels applies to time-series models (--shape patchtst)");
    if (channels)
        c.n_channels = channels;
    char err[MI_ERRLEN];
    if (c.family == MI_FAMILY_PATCHTST && cli_dtypes_given(&dt))
        mi_fatal("synth: time-series models are written in float32 (docs/patchtst.md)");
    cli_dtypes_apply(&dt, &c, "synth");
    double t0 = mi_now();
    if (mi_synth_write(&c, seed, out, isatty(fileno(stderr)) ? 2 : 1, err))
        mi_fatal("%s", err);
    char dts[160];
    printf("wrote %s: synthetic weights, shape %s, seed %llu, %zu parameters, %s (%.1f s)\n", out, c.name,
           (unsigned long long)seed, mi_model_params(&c), mi_config_dtype_summary(&c, dts, sizeof dts), mi_now() - t0);
    return 0;
}

int cmd_quantize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"out", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {"prune-ffn", required_argument, 0, 4001},
                                         {"importance", required_argument, 0, 4002},
                                         CLI_DTYPE_LONG_OPTS,
                                         {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL, *importance = NULL;
    cli_dtypes dt = {0};
    int o, prune_k = 0;
    while ((o = getopt_long(argc, argv, ":m:o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 4001: prune_k = (int)mi_parse_long("--prune-ffn", optarg, 1, MI_MAX_PRUNE_SHARDS); break;
        case 4002: importance = optarg; break;
        case 'h':
            printf("usage: meshinfer quantize -m IN.h5 --out OUT.h5 [--dtype T] [--layer-dtype SPEC]\n"
                   "                         [--embeddings-dtype T] [--prune-ffn K --importance FILE]\n\n"
                   "Writes a copy of an fp32 model with its weight matrices in lower precision:\n"
                   "  fp16   IEEE half precision (2 bytes a weight)\n"
                   "  q8_0   blocks of 32: one fp16 scale and 32 int8 values (1.0625 bytes a weight)\n"
                   "  q4_0   blocks of 32: one fp16 scale and 32 4-bit values (0.5625 bytes a weight)\n"
                   "  q4_K, q5_K, q6_K  llama.cpp's k-quants: super-blocks of 256 with 6-bit (q6_K: 8-bit)\n"
                   "         sub-block scales (0.5625, 0.6875, 0.8203 bytes a weight)\n"
                   "%s"
                   "Norms stay fp32 (dim values each, and they scale every activation). Blocks run along\n"
                   "each matrix's input axis, so its length must be a multiple of 32 for q8_0/q4_0 and of\n"
                   "256 for the k-quants (--dtype falls back where it is not; the other options refuse).\n"
                   "The input must be fp32; the output appears only when complete.\n"
                   "  --prune-ffn K       Voltron's shard-wise pruning: every layer loses its K least\n"
                   "                      important FFN shards (rows of w1 and w3, columns of w2), ranked\n"
                   "                      by --importance FILE (`meshinfer importance`, which measures\n"
                   "                      shards of --ffn-shard channels); hidden_dim shrinks by K shards\n",
                   CLI_DTYPE_HELP);
            return 0;
        default:
            if (!cli_dtype_opt(&dt, o, optarg))
                cli_bad_option("quantize", o, argv);
        }
    }
    cli_no_positional("quantize", optind, argc, argv);
    if (!model || !out)
        mi_fatal("quantize: --model and --out are required (see meshinfer quantize --help)");
    if (!cli_dtypes_given(&dt) && !prune_k)
        mi_fatal("quantize: give --dtype, --layer-dtype, --embeddings-dtype or --prune-ffn (see meshinfer quantize "
                 "--help)");
    if (!prune_k != !importance)
        mi_fatal("quantize: --prune-ffn and --importance go together (the importance file ranks the shards)");
    check_not_input(out, model);
    if (importance)
        check_not_input(out, importance);
    char err[MI_ERRLEN];
    mi_config c;
    mi_model_file *mf = mi_model_open(model, &c, err);
    if (!mf)
        mi_fatal("%s", err);
    mi_model_close(mf);
    if (c.family == MI_FAMILY_PATCHTST)
        mi_fatal("quantize: %s is a time-series model: its files are float32 (docs/patchtst.md; `meshinfer plan "
                 "--memory-model --shape patchtst --dtype q8_0` counts other dtypes)", model);
    int *keep = NULL;
    double rise = 0;
    if (prune_k) {
        mi_importance *imp = mi_malloc(sizeof *imp, "importance");
        if (mi_importance_load(importance, &c, imp, err))
            mi_fatal("%s", err);
        if (!imp->ffn_shard)
            mi_fatal("importance file %s has no pruning measurements: write it with meshinfer importance "
                     "--ffn-shard N", importance);
        if (prune_k >= imp->n_shards)
            mi_fatal("quantize: --prune-ffn %d leaves no FFN shard (each layer has %d shards of %d channels)", prune_k,
                     imp->n_shards, imp->ffn_shard);
        c.hidden_dim -= prune_k * imp->ffn_shard;
        keep = mi_malloc((size_t)c.n_layers * (size_t)c.hidden_dim * sizeof(int), "kept channels");
        rise = mi_prune_keep(imp, c.hidden_dim + prune_k * imp->ffn_shard, prune_k, keep);
        free(imp);
    }
    mi_config before;
    memcpy(&before, &c, sizeof c); /* bytewise, so that memcmp sees only what the dtypes changed */
    cli_dtypes_apply(&dt, &c, "quantize");
    if (!prune_k && !memcmp(&before, &c, sizeof c)) {
        char dts[160];
        mi_fatal("quantize: %s is already %s: the options change no tensor's dtype, so the output would be a copy",
                 model, mi_config_dtype_summary(&c, dts, sizeof dts));
    }
    double t0 = mi_now();
    if (mi_model_quantize_pruned(model, out, &c, keep, isatty(fileno(stderr)) ? 2 : 1, err))
        mi_fatal("%s", err);
    free(keep);
    if (prune_k)
        printf("pruned %d FFN shards from every layer: hidden_dim %d (expected perplexity rise %.3f, the sum of "
               "their importances)\n", prune_k, c.hidden_dim, rise);
    mf = mi_model_open(out, &c, err);
    if (!mf)
        mi_fatal("quantized file does not verify: %s", err);
    mi_model_close(mf);
    char dts[160];
    struct stat a, b;
    stat(model, &a);
    stat(out, &b);
    printf("wrote %s: %s, %s, %.1f MB (input %.1f MB, %.2fx smaller) (%.1f s)\n", out, c.name,
           mi_config_dtype_summary(&c, dts, sizeof dts), (double)b.st_size / 1e6, (double)a.st_size / 1e6,
           (double)a.st_size / (double)b.st_size, mi_now() - t0);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    int o;
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'j': break; /* the output is always JSON */
        case 'h':
            printf("usage: meshinfer info --model MODEL.h5 [--json]\n\nPrints the model's config as JSON "
                   "(\"synthetic\": true marks synthetic weights),\nwith the weights' dtypes: \"dtypes\" (a "
                   "summary), \"tok_embeddings_dtype\", \"classifier_dtype\",\n\"layer_dtypes\" (per layer, "
                   "per matrix) and \"decode_weight_bytes\" (what a decoded token reads).\n");
            return 0;
        default: cli_bad_option("info", o, argv);
        }
    }
    cli_no_positional("info", optind, argc, argv);
    if (!model)
        mi_fatal("info: --model is required");
    char err[MI_ERRLEN];
    mi_config c;
    mi_model_file *mf = mi_model_open(model, &c, err);
    if (!mf)
        mi_fatal("%s", err);
    mi_model_close(mf);
    printf("{\"name\": ");
    cli_json_string(stdout, c.name, strlen(c.name));
    printf(", \"family\": \"%s\"", mi_family_name(c.family));
    if (c.family == MI_FAMILY_PATCHTST) /* docs/patchtst.md: vocab_size is the horizon, seq_len the patches */
        printf(", \"patch_len\": %d, \"patch_stride\": %d, \"lookback\": %d, \"horizon\": %d, \"n_patches\": %d, "
               "\"n_channels\": %d",
               c.patch_len, c.patch_stride, c.lookback, c.horizon, c.seq_len, c.n_channels);
    printf(", \"synthetic\": %s, \"dim\": %d, \"hidden_dim\": %d, \"n_layers\": %d, "
           "\"n_heads\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"seq_len\": %d, "
           "\"rope_theta\": %g, \"norm_eps\": %g, \"shared_classifier\": %s, \"params\": %zu, ",
           c.synthetic ? "true" : "false", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
           c.head_dim, c.vocab_size, c.seq_len, (double)c.rope_theta, (double)c.norm_eps,
           c.shared_classifier ? "true" : "false", mi_model_params(&c));
    if (mi_config_is_lm(&c)) { /* the family's traits (config.h) */
        static const char *const norms[] = {"rms", "layer"}, *const ffns[] = {"swiglu", "gelu", "geglu", "gelu_tanh"},
                                 *const ropes[] = {"pairs", "halves", "none"};
        printf("\"traits\": {\"norm\": \"%s\", \"ffn\": \"%s\", \"rope\": \"%s\", \"qkv_bias\": %s, "
               "\"out_bias\": %s, \"qk_norm\": %s, \"post_norms\": %s, \"pos_embed\": %s, \"rope_freqs\": %s, "
               "\"emb_scale\": %g, \"attn_scale\": %g, \"rope_theta_local\": %g, \"sliding_window\": %d, "
               "\"swa_period\": %d}, ",
               norms[c.norm_type], ffns[c.ffn_type], ropes[c.rope_type], c.qkv_bias ? "true" : "false",
               c.out_bias ? "true" : "false", c.qk_norm ? "true" : "false", c.post_norms ? "true" : "false",
               c.pos_embed ? "true" : "false", c.rope_freqs ? "true" : "false", (double)c.emb_scale,
               (double)c.attn_scale, (double)c.rope_theta_local, c.sliding_window, c.swa_period);
    }
    if (mi_config_is_moe(&c)) /* every layer's FFN a mixture of experts (config.h) */
        printf("\"experts\": {\"n_experts\": %d, \"n_experts_used\": %d, \"expert_hidden_dim\": %d, "
               "\"shared_hidden_dim\": %d, \"norm_topk_prob\": %s}, ",
               c.n_experts, c.n_experts_used, c.hidden_dim, c.shared_hidden_dim, c.norm_topk_prob ? "true" : "false");
    /* precision: a summary, the bytes a decoded token reads, and the table */
    char dts[160];
    printf("\"dtypes\": \"%s\", \"decode_weight_bytes\": %zu, \"tok_embeddings_dtype\": \"%s\", "
           "\"classifier_dtype\": \"%s\", \"layer_dtypes\": [",
           mi_config_dtype_summary(&c, dts, sizeof dts), mi_decode_weight_bytes(&c), mi_dtype_name(c.emb_dtype),
           mi_dtype_name(c.cls_dtype));
    for (int l = 0; l < c.n_layers; l++) {
        printf("%s{", l ? ", " : "");
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            printf("%s\"%s\": \"%s\"", m ? ", " : "",
                   mi_config_is_moe(&c) && mi_expert_mat_names[m] ? mi_expert_mat_names[m] : mi_layer_mat_names[m],
                   mi_dtype_name(c.dtype[l][m]));
        for (int m = 0; m < MI_N_MOE_MATS && mi_config_is_moe(&c); m++)
            if (m == MI_MOE_ROUTER || c.shared_hidden_dim > 0)
                printf(", \"%s\": \"%s\"", mi_moe_mat_names[m], mi_dtype_name(c.moe_dtype[l][m]));
        printf("}");
    }
    printf("]}\n");
    return 0;
}

/* --tokenizer FILE: a tokenizer.json, with the tokenizer_config.json of its
 * folder when there is one (BOS and EOS, add_bos_token). */
static void load_tokenizer_json(mi_tokenizer *tok, const char *path)
{
    char err[MI_ERRLEN], cfg[4096];
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) + 1 : 0;
    snprintf(cfg, sizeof cfg, "%.*stokenizer_config.json", dir, path);
    struct stat st;
    int has_cfg = stat(cfg, &st) == 0 && S_ISREG(st.st_mode);
    if (mi_tokenizer_load_json(tok, path, has_cfg ? cfg : NULL, err))
        mi_fatal("%s", err);
}

static void print_ids(const mi_tokenizer *tok, const char *text, int bos, const char *where)
{
    char err[MI_ERRLEN];
    int *ids = mi_malloc((strlen(text) + 3) * sizeof(int), "token ids");
    int n = mi_tokenizer_encode(tok, text, bos, ids, err);
    if (n < 0)
        mi_fatal("%s%s", where, err);
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
}

/* --lines FILE: one JSON string per line (so texts can hold newlines and
 * tabs), one line of ids out per line in. Every line is parsed and encoded
 * before the first is printed: a bad line is one error naming its number,
 * never output cut off after the lines before it. */
static void tokenize_lines(const mi_tokenizer *tok, const char *path, int bos)
{
    char err[MI_ERRLEN], where[300];
    size_t len = 0;
    char *text = mi_read_text_file(path, "lines file", (size_t)1 << 30, &len, err);
    if (!text)
        mi_fatal("%s", err);
    size_t n_lines = 0, cap = 0;
    int **ids = NULL, *n_ids = NULL;
    int line = 1;
    for (char *p = text; p < text + len; line++) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        p[n] = '\0'; /* the parser wants the line's end marked */
        if (n > 0 && p[n - 1] == '\r')
            p[--n] = '\0';
        snprintf(where, sizeof where, "%s:%d", path, line);
        size_t k = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t'))
            k++;
        if (k == n)
            mi_fatal("%s: the line is blank: every line must be one JSON string (\"\" for an empty text)", where);
        if (strstr(p, "\\u0000")) /* a C string would end there: the text after it lost unseen */
            mi_fatal("%s: the line holds \\u0000: NUL characters are not supported", where);
        cJSON *s = mi_json_parse(p, n, where, err);
        if (!s || !cJSON_IsString(s))
            mi_fatal("%s%s", s ? where : err, s ? ": not one JSON string" : "");
        if (n_lines == cap) {
            cap = cap ? 2 * cap : 64;
            ids = realloc(ids, cap * sizeof *ids);
            n_ids = realloc(n_ids, cap * sizeof *n_ids);
            if (!ids || !n_ids)
                mi_fatal("out of memory for the token ids of %s", path);
        }
        ids[n_lines] = mi_malloc((strlen(s->valuestring) + 3) * sizeof(int), "token ids");
        n_ids[n_lines] = mi_tokenizer_encode(tok, s->valuestring, bos, ids[n_lines], err);
        if (n_ids[n_lines] < 0)
            mi_fatal("%s: %s", where, err);
        n_lines++;
        cJSON_Delete(s);
        p += n + 1;
    }
    for (size_t i = 0; i < n_lines; i++) {
        for (int j = 0; j < n_ids[i]; j++)
            printf(j ? " %d" : "%d", ids[i][j]);
        printf("\n");
        free(ids[i]);
    }
    free(ids);
    free(n_ids);
    free(text);
}

int cmd_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"tokenizer-bin", required_argument, 0, 'b'},
                                         {"tokenizer", required_argument, 0, 't'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"lines", required_argument, 0, 'l'},
                                         {"no-bos", no_argument, 0, 'B'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *bin = NULL, *json = NULL, *prompt = NULL, *lines = NULL;
    int bos = 1, o;
    while ((o = getopt_long(argc, argv, ":m:b:t:p:l:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'b': bin = optarg; break;
        case 't': json = optarg; break;
        case 'p': prompt = optarg; break;
        case 'l': lines = optarg; break;
        case 'B': bos = 0; break;
        case 'h':
            printf("usage: meshinfer tokenize (--model MODEL.h5 | --tokenizer-bin tokenizer.bin |\n"
                   "                           --tokenizer tokenizer.json) (-p TEXT | --lines FILE) [--no-bos]\n\n"
                   "Prints the token ids of TEXT, space-separated (with the tokenizer's BOS first when its\n"
                   "family adds one; --no-bos: no special tokens). --tokenizer reads a Hugging Face\n"
                   "tokenizer.json and the tokenizer_config.json beside it when there is one. --lines FILE:\n"
                   "one JSON string per line, one line of ids printed per line.\n");
            return 0;
        default: cli_bad_option("tokenize", o, argv);
        }
    }
    cli_no_positional("tokenize", optind, argc, argv);
    if ((!model) + (!bin) + (!json) != 2 || (!prompt) == (!lines))
        mi_fatal("tokenize: give -p TEXT or --lines FILE, and exactly one of --model, --tokenizer-bin or --tokenizer");
    char err[MI_ERRLEN];
    mi_tokenizer tok;
    if (model) {
        mi_config c;
        mi_model_file *mf = mi_model_open(model, &c, err);
        if (!mf || mi_model_read_tokenizer(mf, &tok, err))
            mi_fatal("%s", err);
        mi_model_close(mf);
    } else if (json) {
        load_tokenizer_json(&tok, json);
    } else if (mi_tokenizer_load_bin(&tok, bin, 32000, err)) {
        mi_fatal("%s", err);
    }
    if (lines)
        tokenize_lines(&tok, lines, bos);
    else
        print_ids(&tok, prompt, bos, "");
    mi_tokenizer_free(&tok);
    return 0;
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL;
    int o;
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'h':
            printf("usage: meshinfer check --model MODEL.h5\n\n"
                   "Validates a model file whole: the config attributes against every stored tensor (layer\n"
                   "count, shapes, dtypes and block formats), the tokenizer against the vocabulary size, and\n"
                   "every weight finite (reading all of them). Prints one line and exits 0 when the file is\n"
                   "good; otherwise one error line naming the tensor and the first bad element, exit 1.\n");
            return 0;
        default: cli_bad_option("check", o, argv);
        }
    }
    cli_no_positional("check", optind, argc, argv);
    if (!model)
        mi_fatal("check: --model is required (see meshinfer check --help)");
    char err[MI_ERRLEN];
    mi_config c;
    mi_model_file *mf = mi_model_open(model, &c, err); /* config against every tensor's shape and dtype */
    if (!mf)
        mi_fatal("%s", err);
    /* a time-series model's pruning masks, as forecast reads them */
    char masks[160] = "";
    if (c.family == MI_FAMILY_PATCHTST) {
        unsigned char *mask[4];
        for (int x = 0; x < 4; x++)
            mask[x] = mi_malloc((size_t)c.n_layers * (size_t)(x == 3 ? c.hidden_dim : c.dim), "pruning mask");
        double ratio = 0;
        int magnitude = 0, ranks = 0, has = mi_model_read_masks(mf, mask, &ratio, &magnitude, &ranks, err);
        for (int x = 0; x < 4; x++)
            free(mask[x]);
        if (has < 0) {
            mi_model_close(mf);
            mi_fatal("%s", err);
        }
        if (has)
            snprintf(masks, sizeof masks, ", pruning masks (%s, r = %g, for %d devices)",
                     magnitude ? "magnitude" : "communication-aware", ratio, ranks);
    }
    mi_model_close(mf);
    double t0 = mi_now();
    mi_model m;
    mi_tokenizer tok;
    memset(&tok, 0, sizeof tok);
    int series = c.family == MI_FAMILY_PATCHTST; /* docs/patchtst.md: no tokenizer */
    mi_model_load_path(&m, model, series ? NULL : &tok); /* reads every byte, tokenizer included */
    size_t n = 0;
    if (mi_model_check_finite(&m, model, &n, err))
        mi_fatal("%s", err);
    char dts[160], moe[160] = "";
    if (mi_config_is_moe(&c))
        snprintf(moe, sizeof moe, ", %d experts (%d per token) of FFN width %d%s%.0d%s", c.n_experts,
                 c.n_experts_used, c.hidden_dim, c.shared_hidden_dim ? " + a shared expert of width " : "",
                 c.shared_hidden_dim, c.norm_topk_prob ? ", top-k weights renormalised" : "");
    if (series)
        printf("check: %s: ok: %s%s, time-series model (%d layers, dim %d, %d heads, %d patches of %d, horizon %d, "
               "%d channels%s); %zu weights (fp32), all finite; %.2f s\n",
               model, c.name, c.synthetic ? " (synthetic weights)" : "", c.n_layers, c.dim, c.n_heads, c.seq_len,
               c.patch_len, c.horizon, c.n_channels, masks, n, mi_now() - t0);
    else
        printf("check: %s: ok: %s%s, %d layers, dim %d, %d heads (%d KV), vocab %d%s; %zu weights (%s), all finite; "
               "tokenizer of %d pieces; %.2f s\n",
               model, c.name, c.synthetic ? " (synthetic weights)" : "", c.n_layers, c.dim, c.n_heads, c.n_kv_heads,
               c.vocab_size, moe, n, mi_config_dtype_summary(&c, dts, sizeof dts), tok.vocab_size, mi_now() - t0);
    mi_tokenizer_free(&tok);
    mi_model_free(&m);
    return 0;
}
