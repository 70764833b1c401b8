/* `meshinfer plan`: make a placement plan and show its predicted memory,
 * bytes moved and time, without running the model (no MPI needed). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

static void help(void)
{
    printf("usage: meshinfer plan (--model MODEL.h5 | --shape SHAPE) (--ranks N | --cluster FILE) [options]\n\n"
           "Makes a placement plan and prints, per layer, which rank holds each KV-head group, the\n"
           "output projection and the FFN; per device, the predicted weight and KV-cache memory\n"
           "against its budget and the predicted compute time per token; and the predicted time\n"
           "and bytes moved per decoded token. Nothing is loaded or run.\n"
           "  --planner NAME        layerwise | roundrobin | random | greedy | tp | all (default greedy)\n"
           "  --ranks N             N equal devices (default memory: 4000 MB each)\n"
           "  --cluster FILE        devices and links (JSON, see hostfiles/)\n"
           "  --mem-mb MB           memory of each device with --ranks\n"
           "  --plan-seed S         seed of the random planner (default 1)\n"
           "  --controller-works yes|no   rank 0 also holds layer shards\n"
           "  --ctx N               context position for the attention cost (default seq_len/2)\n"
           "  --kv-positions N      KV-cache positions the memory budgets must hold (default seq_len)\n"
           "  --dtype T, --layer-dtype SPEC, --embeddings-dtype T\n"
           "                        plan for weights in these dtypes (as `meshinfer quantize` takes them)\n"
           "                        instead of the file's (with --shape: fp32)\n"
           "  --wire-dtype T        activation messages in fp32 (default), fp16 or q8_0\n"
           "  --out FILE            save the plan as JSON (use with --plan-file)\n"
           "  --json                print the prediction as JSON\n");
}

static void print_plan(const mi_plan *p, const mi_cluster *cl, const mi_prediction *pr, int verbose)
{
    const mi_config *c = &p->cfg;
    char dts[160];
    printf("plan %s for %s (%d layers, %d KV heads x %d query heads, hidden %d; weights %s, messages %s) on %d "
           "ranks%s\n", mi_planner_name(p->planner), c->name, c->n_layers, c->n_kv_heads, mi_kv_group(c),
           c->hidden_dim, mi_config_dtype_summary(c, dts, sizeof dts), mi_dtype_name(p->wire), p->n_ranks,
           c->synthetic ? " [synthetic weights]" : "");
    if (verbose) {
        for (int l = 0; l < c->n_layers; l++) {
            const mi_layer_plan *lp = &p->layers[l];
            printf("  layer %2d  heads [", l);
            for (int k = 0; k < c->n_kv_heads; k++)
                printf(k ? " %d" : "%d", lp->kv_rank[k]);
            if (lp->proj_rank >= 0)
                printf("]  proj %d  ffn", lp->proj_rank);
            else
                printf("]  proj split  ffn");
            for (int i = 0; i < lp->n_ffn; i++)
                printf(" %d[%d+%d]", lp->ffn[i].rank, lp->ffn[i].v0, lp->ffn[i].n);
            if (lp->speculate)
                printf("  speculates into layer %d (acceptance %.2f)", l + 1, lp->accept_permille / 1000.0);
            printf("\n");
        }
        printf("  classifier");
        for (int i = 0; i < p->n_cls; i++)
            printf(" %d[%d+%d]", p->cls[i].rank, p->cls[i].v0, p->cls[i].n);
        printf("\n");
    }
    printf("  KV cache budgeted for %d of %d positions\n", p->kv_positions, c->seq_len);
    printf("  rank  device            weights_MB    kv_MB   budget_MB   use  busy_ms/token  holds\n");
    for (int r = 0; r < p->n_ranks; r++) {
        double need = (double)pr->weight_bytes[r] + (double)pr->kv_bytes[r];
        int heads = 0, proj = 0, ffn = 0, cls = 0;
        for (int l = 0; l < c->n_layers; l++) {
            const mi_layer_plan *lp = &p->layers[l];
            for (int k = 0; k < c->n_kv_heads; k++)
                heads += lp->kv_rank[k] == r;
            proj += lp->proj_rank == r;
            for (int i = 0; i < lp->n_ffn; i++)
                ffn += lp->ffn[i].rank == r;
        }
        for (int i = 0; i < p->n_cls; i++)
            cls += p->cls[i].rank == r;
        char holds[128];
        int n = snprintf(holds, sizeof holds, "%s", r == 0 ? "embeddings " : "");
        if (heads)
            n += snprintf(holds + n, sizeof holds - (size_t)n, "%d KV heads ", heads);
        if (proj)
            n += snprintf(holds + n, sizeof holds - (size_t)n, "%d wo ", proj);
        if (ffn)
            n += snprintf(holds + n, sizeof holds - (size_t)n, "%d FFN%s ", ffn,
                          p->layers[0].n_ffn > 1 ? " slices" : "");
        if (cls)
            n += snprintf(holds + n, sizeof holds - (size_t)n, "classifier");
        if (n == 0)
            snprintf(holds, sizeof holds, "idle (more ranks than units)");
        printf("  %4d  %-16s  %10.2f  %7.2f  %10.2f  %3.0f%%  %8.3f       %s\n", r, cl->dev[r].name,
               pr->weight_bytes[r] / 1e6, pr->kv_bytes[r] / 1e6, cl->dev[r].mem_bytes / 1e6,
               100.0 * need / cl->dev[r].mem_bytes, pr->busy_s[r] * 1e3, holds);
    }
    printf("  predicted %.3f ms/token (%.1f tokens/s), %.0f bytes moved per token, planned in %.3f ms\n",
           pr->token_s * 1e3, 1.0 / pr->token_s, pr->bytes_per_token, p->plan_seconds * 1e3);
}

static void print_json(const mi_plan *p, const mi_prediction *pr, int first)
{
    printf("%s{\"planner\": \"%s\", \"ranks\": %d, \"wire_dtype\": \"%s\", \"plan_ms\": %.4f, "
           "\"predicted_token_ms\": %.4f, \"predicted_bytes_per_token\": %.0f, \"devices\": [", first ? "" : ",\n ",
           mi_planner_name(p->planner), p->n_ranks, mi_dtype_name(p->wire), p->plan_seconds * 1e3, pr->token_s * 1e3,
           pr->bytes_per_token);
    for (int r = 0; r < p->n_ranks; r++)
        printf("%s{\"rank\": %d, \"weight_bytes\": %zu, \"kv_cache_bytes\": %zu, \"busy_ms\": %.4f}", r ? ", " : "",
               r, pr->weight_bytes[r], pr->kv_bytes[r], pr->busy_s[r] * 1e3);
    printf("]}");
}

int cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"shape", required_argument, 0, 's'},
        {"ranks", required_argument, 0, 'n'},     {"cluster", required_argument, 0, 'c'},
        {"planner", required_argument, 0, 'p'},   {"mem-mb", required_argument, 0, 'M'},
        {"plan-seed", required_argument, 0, 'S'}, {"controller-works", required_argument, 0, 'w'},
        {"ctx", required_argument, 0, 'x'},       {"out", required_argument, 0, 'o'},
        {"kv-positions", required_argument, 0, 'K'},
        {"json", no_argument, 0, 'j'},            {"help", no_argument, 0, 'h'},
        {"wire-dtype", required_argument, 0, 'W'}, CLI_DTYPE_LONG_OPTS,
        {0, 0, 0, 0}};
    const char *model = NULL, *shape = NULL, *cluster = NULL, *planner = "greedy", *out = NULL;
    cli_dtypes dt = {0};
    int ranks = 0, ctx = -1, json = 0, cw = -1, kvpos = 0, o;
    mi_dtype wire = MI_F32;
    double mem_mb = 4000;
    uint64_t seed = 1;
    while ((o = getopt_long(argc, argv, ":m:s:n:c:p:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 's': shape = optarg; break;
        case 'n': ranks = (int)mi_parse_long("--ranks", optarg, 1, MI_MAX_RANKS); break;
        case 'c': cluster = optarg; break;
        case 'p': planner = optarg; break;
        case 'M': mem_mb = mi_parse_double("--mem-mb", optarg, 1e-3, 1e9); break;
        case 'S': seed = mi_parse_u64("--plan-seed", optarg); break;
        case 'w':
            if (strcmp(optarg, "yes") && strcmp(optarg, "no"))
                mi_fatal("--controller-works: '%s' is not yes or no", optarg);
            cw = !strcmp(optarg, "yes");
            break;
        case 'x': ctx = (int)mi_parse_long("--ctx", optarg, 0, 1 << 24); break;
        case 'o': out = optarg; break;
        case 'K': kvpos = (int)mi_parse_long("--kv-positions", optarg, 1, 1 << 24); break;
        case 'j': json = 1; break;
        case 'W': wire = cli_wire_dtype(optarg); break;
        case 'h': help(); return 0;
        default:
            if (!cli_dtype_opt(&dt, o, optarg))
                cli_bad_option("plan", o, argv);
        }
    }
    cli_no_positional("plan", optind, argc, argv);
    if ((!model) == (!shape))
        mi_fatal("plan: give exactly one of --model or --shape (see meshinfer plan --help)");
    if ((!ranks) == (!cluster))
        mi_fatal("plan: give exactly one of --ranks or --cluster (see meshinfer plan --help)");
    char err[MI_ERRLEN];
    mi_config c;
    if (model) {
        mi_model_file *mf = mi_model_open(model, &c, err);
        if (!mf)
            mi_fatal("%s", err);
        mi_model_close(mf);
    } else if (mi_config_from_shape(shape, &c)) {
        mi_fatal("plan: unknown shape '%s' (known: %s)", shape, mi_config_shape_names());
    }
    cli_dtypes_apply(&dt, &c, "plan");
    mi_cluster cl;
    if (cluster) {
        if (mi_cluster_load(cluster, &cl, err))
            mi_fatal("%s", err);
    } else {
        mi_cluster_default(&cl, ranks, mem_mb * 1e6);
    }
    if (ctx < 0)
        ctx = c.seq_len / 2;
    if (kvpos > c.seq_len)
        mi_fatal("plan: --kv-positions %d is more than the model's context (%d)", kvpos, c.seq_len);
    int all = !strcmp(planner, "all");
    mi_planner which;
    if (!all && mi_planner_parse(planner, &which))
        mi_fatal("plan: unknown planner '%s' (layerwise, roundrobin, random, greedy, tp, all)", planner);
    if (all && out)
        mi_fatal("plan: --out needs one planner, not 'all'");
    char dts[160];
    if (json)
        printf("{\"model\": \"%s\", \"synthetic_weights\": %s, \"weights\": \"%s\", \"plans\": [", c.name,
               c.synthetic ? "true" : "false", mi_config_dtype_summary(&c, dts, sizeof dts));
    for (int i = 0; i < 5; i++) {
        mi_planner pl = all ? (mi_planner)i : which;
        if (!all && i > 0)
            break;
        mi_plan_options po = {pl, seed, cw, 0, NULL, 0.0, kvpos, wire};
        mi_plan p;
        if (mi_plan_make(&c, &cl, &po, &p, err))
            mi_fatal("%s: %s", mi_planner_name(pl), err);
        mi_programs prog;
        if (mi_programs_compile(&p, &prog, err))
            mi_fatal("%s: %s", mi_planner_name(pl), err);
        mi_prediction pr;
        mi_predict(&p, &prog, &cl, ctx, &pr);
        if (json)
            print_json(&p, &pr, i == 0);
        else
            print_plan(&p, &cl, &pr, !all);
        if (out && mi_plan_save_json(&p, out, err))
            mi_fatal("%s", err);
        mi_programs_free(&prog);
        mi_plan_free(&p);
    }
    if (json)
        printf("]}\n");
    mi_cluster_free(&cl);
    return 0;
}
