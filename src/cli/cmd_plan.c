/* `meshinfer plan`: make a placement plan and show its predicted memory,
 * bytes moved and time, without running the model (no MPI needed); with
 * --memory-model, CATS's memory and traffic model of somegather and its
 * baselines over D = 1..N devices (planner.h mi_mem_model_make) as a table,
 * CSV and a gnuplot figure. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_plan.h"
#include "meshinfer/quality.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/model_file.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/sampler.h"

static void help(void)
{
    printf("usage: meshinfer plan (--model MODEL.h5 | --shape SHAPE) (--ranks N | --cluster FILE) [options]\n\n"
           "Makes a placement plan and prints, per layer, which rank holds each KV-head group, the\n"
           "output projection and the FFN; per device, the predicted weight and KV-cache memory\n"
           "against its budget and the predicted compute time per token; and the predicted time\n"
           "and bytes moved per decoded token. Nothing is loaded or run.\n"
           "  --planner NAME        layerwise | roundrobin | random | greedy | tp | somegather | hybrid\n"
           "                        | exact | all | auto (default greedy). exact: HeadSplit's units (KV\n"
           "                        heads, each layer's projection and whole FFN) placed by a mixed-integer\n"
           "                        program (GLPK) minimising the predicted decode step at half the KV\n"
           "                        positions budgeted;\n"
           "                        at most 8 devices, dense language models, 20 s (then the best found).\n"
           "                        hybrid (Voltron) chooses model or\n"
           "                        tensor parallelism per layer and sublayer, for prefill and decode\n"
           "                        apart; all prints every plan (but exact), then a table of every scheme's\n"
           "                        predicted TTFT and TPOT; auto prints the table and the fastest plan\n"
           "  --exact-seconds S     the exact planner's time limit (default 20); a search it stops warns\n"
           "                        with the best placement found and the bound\n"
           "  --ppl-budget PCT      with all or auto: somegather at the largest pruning ratio r whose\n"
           "                        perplexity, measured on this cluster's rank count, is within PCT%%\n"
           "                        of the unpruned one (CATS's pruning; needs --somegather-quality)\n"
           "  --somegather-quality FILE   those perplexities (jobs/experiments/somegather_quality.sh writes it)\n"
           "  --prompt-tokens N     prompt length of the predicted TTFT (default 32, or a quarter of a\n"
           "                        shorter context)\n"
           "  --steps N             decoded tokens of the predicted TPOT (default 128, or the rest)\n"
           "  --importance FILE     Voltron's precision search (file from `meshinfer importance`):\n"
           "                        lower layers down the ladder fp16, q8_0, q6_K, q5_K, q4_K, q4_0\n"
           "                        (the k-quants where dims are whole 256s and FILE measured them),\n"
           "                        rung by rung, least important first, as few as make the plan fit\n"
           "                        and meet --ttft-ms and --tpot-ms (binary search), then (if FILE\n"
           "                        ranks FFN shards) prune shards from every layer; prints the\n"
           "                        `meshinfer quantize` options that make the file\n"
           "  --ttft-ms T, --tpot-ms T   the search's targets (default: none, fitting is enough)\n"
           "  --text FILE           with --importance: measure the choice's perplexity on FILE on this\n"
           "                        device (--max-tokens N, default 1024) and the model's as it is\n"
           "  --energy              with --tpot-ms T: the DVFS levels generate --energy would choose\n"
           "                        (Voltron 4.4: lower levels while the predicted TPOT stays under\n"
           "                        90%% of T) and the predicted joules per token (cluster \"power\")\n"
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
           "  --split-vocab         head-level planners: the token embeddings held by vocabulary rows with the\n"
           "                        classifier's, spread over the workers (as generate --split-vocab; done\n"
           "                        anyway when the whole table does not fit rank 0)\n"
           "  --temperature T, --top-k N   the sampler the run uses (generate's options and defaults: greedy):\n"
           "                        greedy and top-k sampling need each classifier slice's best 1 or N (logit,\n"
           "                        token id) pairs at rank 0, --top-k 0 with T > 0 (and perplexity) its\n"
           "                        logits whole\n"
           "  --prune SPEC          somegather (CATS): leave out this fraction of each rank's columns\n"
           "                        in every exchange (R, or per kind: 0.5,hidden=0.9); needs --model,\n"
           "                        whose weights rank the columns; the send lists go into --out\n"
           "  --prune-mode M        aware (default) or magnitude (the ordinary-pruning baseline)\n"
           "  --programs            print every rank's program: its ops in order, with the\n"
           "                        communicators and what each exchange sends\n"
           "  --explain             print who holds what per layer, then every rank's program in words,\n"
           "                        decode then prefill: each op's weights (layer, matrix, heads, rows,\n"
           "                        FFN units, columns), whom it sends to and waits for, and the bytes\n"
           "                        per token (per position in prefill)\n"
           "  --speculate           mark layers for HeadSplit's inter-layer speculation where the cost\n"
           "                        model predicts a saving (as generate --speculate does; acceptance 1)\n"
           "  --out FILE            save the plan as JSON (use with --plan-file)\n"
           "  --json                print the prediction as JSON\n"
           "Besides time and bytes, the plan reports the one-way link delays on a decoded token's\n"
           "critical path (what its data dependencies need; the testbed measures the same).\n"
           "Bytes per token, here and in generate --metrics and --json: the payload of the activation\n"
           "messages all ranks send in one decode pass (one new token at one position), in the wire\n"
           "dtype, plus 4 bytes per speculation decision; not the prompt's prefill passes, the\n"
           "controller's per-pass commands or MPI's headers. sent_B/tok is each rank's share.\n"
           "A run under mpirun plans again with its measured round trips and free memory (unless\n"
           "given --cluster or --plan-file), so its placement may differ from this one: generate\n"
           "--json and --explain say which ran; plan --cluster FILE --out P, generate --plan-file P\n"
           "run this one.\n\n"
           "usage: meshinfer plan --memory-model (--model MODEL.h5 | --shape SHAPE) [options]\n\n"
           "CATS's memory and traffic model (Q1, Fig. 4): for D = 1..max devices, per device the\n"
           "weights stored (MB), the weights still multiplied with once other devices' pruned columns\n"
           "never arrive, the KV cache and activations for N positions (KB), the KB it sends per\n"
           "decoded token, and the KB moved per token by all devices, for somegather at each pruning\n"
           "ratio and three baselines: token split with whole weights (hu2024edge), the same with\n"
           "4-bit K/V (liu2025communication) and head split with allreduces (bochem2025distributed,\n"
           "our tp planner). Per-device figures are the busiest device's; '*' marks D our runtime\n"
           "runs (somegather: D divides the KV heads; head split: the tp planner's compiled programs).\n"
           "With --model only the config is read.\n"
           "  --max-devices N       D = 1..N (default 16, at most 256)\n"
           "  --prune R[,R...]      somegather pruning ratios in [0, 1) (default 0,0.9)\n"
           "  --positions N         positions of KV cache and activations (default seq_len)\n"
           "  --dim F               the shape at feature size F (heads and layers kept, FFN in proportion;\n"
           "                        CATS Fig. 5)\n"
           "  --wire-dtype T        activation messages in fp32 (default), fp16 or q8_0\n"
           "  --dtype T, --layer-dtype SPEC, --embeddings-dtype T   weights in these dtypes\n"
           "  --csv FILE            also write the table as CSV (bytes; one row per scheme and D)\n"
           "  --png FILE            draw RAM and traffic per token against D (gnuplot,\n"
           "                        jobs/lib/memory_model.gp)\n");
}

/* Where the classifier's and the token embeddings' vocabulary rows are, and
 * what of the logits reaches rank 0. */
static void print_vocab(const mi_plan *p)
{
    const mi_config *c = &p->cfg;
    printf("  classifier rows");
    for (int i = 0; i < p->n_cls; i++)
        printf(" %d[%d+%d]", p->cls[i].rank, p->cls[i].v0, p->cls[i].n);
    int away = 0; /* a slice off rank 0: its logits travel */
    for (int i = 0; i < p->n_cls; i++)
        away |= p->cls[i].rank != 0;
    if (away && p->logits_k == 1)
        printf("  (each slice sends rank 0 its best logit and its token id)");
    else if (away && p->logits_k > 0)
        printf("  (each slice sends rank 0 its %d best logits with their token ids)", p->logits_k);
    else if (away)
        printf("  (each slice sends rank 0 its logits whole)");
    printf("\n  embedding rows ");
    if (p->split_vocab)
        for (int i = 0; i < p->n_cls; i++)
            printf(" %d[%d+%d]", p->cls[i].rank, p->cls[i].v0, p->cls[i].n);
    else if (p->n_cols > 0)
        printf(" every rank: all %d rows, its residual columns", c->vocab_size);
    else
        printf(" 0[0+%d]", c->vocab_size);
    printf("%s\n", p->split_vocab ? c->shared_classifier ? "  (split with the classifier: tied, the same rows)"
                                                          : "  (split with the classifier)"
                                  : "");
}

/* Units (KV heads, wo, FFN slices, classifier slices) that rank r holds. */
static int rank_units(const mi_plan *p, const mi_config *c, int r)
{
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &p->layers[l];
        for (int k = 0; k < c->n_kv_heads; k++)
            n += lp->kv_rank[k] == r;
        n += lp->proj_rank == r;
        for (int i = 0; i < lp->n_ffn; i++)
            n += lp->ffn[i].rank == r;
    }
    for (int i = 0; i < p->n_cls; i++)
        n += p->cls[i].rank == r;
    return n;
}

/* Why rank r holds nothing: a budget below a unit's size (estimated as the
 * least bytes per unit of any rank that holds units), else more ranks than
 * the planner's units (layer-wise: layers), else the planner's choice. */
static void idle_reason(const mi_plan *p, const mi_config *c, const mi_cluster *cl, const mi_prediction *pr, int r,
                        char *out, size_t n)
{
    double unit = INFINITY;
    for (int q = 0; q < p->n_ranks; q++) {
        int u = rank_units(p, c, q);
        double need = (double)pr->weight_bytes[q] + (double)pr->kv_bytes[q];
        if (u > 0 && need > 0 && need / u < unit)
            unit = need / u;
    }
    int total = 0;
    for (int q = 0; q < p->n_ranks; q++)
        total += rank_units(p, c, q);
    if (isfinite(unit) && cl->dev[r].mem_bytes < unit)
        snprintf(out, n, "idle (its budget, %.3g MB, is below a unit's size here, about %.3g MB)",
                 cl->dev[r].mem_bytes / 1e6, unit / 1e6);
    else if (p->planner == MI_PLANNER_LAYERWISE && p->n_ranks > c->n_layers)
        snprintf(out, n, "idle (more ranks than layers)");
    else if (total < p->n_ranks)
        snprintf(out, n, "idle (more ranks than units: %d)", total);
    else
        snprintf(out, n, "idle (the planner left it empty)");
}

/* pass_T: 0 for a decode step, else the positions of the prefill pass pr predicts. */
static void print_plan(const mi_plan *p, const mi_programs *prog, const mi_cluster *cl, const mi_prediction *pr,
                       int verbose, int pass_T)
{
    const mi_config *c = &p->cfg;
    /* each rank's share of the bytes per token (or per prefill position): the cost model's figure */
    double sent[MI_MAX_RANKS];
    mi_programs_bytes(prog, pass_T > 0 ? MI_PHASE_PREFILL : MI_PHASE_DECODE, sent, NULL);
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
            const char *ffn = mi_config_is_moe(c) ? "experts" : "ffn"; /* rank[first+count] */
            if (lp->proj_rank >= 0)
                printf("]  proj %d  %s", lp->proj_rank, ffn);
            else if (p->n_cols > 0)
                printf("]  wo, w2 rows: each rank's columns  %s", ffn);
            else
                printf("]  proj split  %s", ffn);
            for (int i = 0; i < lp->n_ffn; i++)
                printf(" %d[%d+%d]", lp->ffn[i].rank, lp->ffn[i].v0, lp->ffn[i].n);
            if (lp->speculate)
                printf("  speculates into layer %d (acceptance %.2f assumed; a run measures its own)", l + 1,
                       lp->accept_permille / 1000.0);
            printf("\n");
        }
        print_vocab(p);
        if (p->n_cols > 0) {
            printf("  residual columns");
            for (int i = 0; i < p->n_cols; i++)
                printf(" %d[%d+%d]", p->cols[i].rank, p->cols[i].v0, p->cols[i].n);
            printf("  (4 allgathers per layer on all ranks)\n");
            if (p->keep)
                printf("  pruning (%s): attn_in %.2f, heads %.2f, ffn_in %.2f, hidden %.2f of each rank's columns "
                       "never sent\n", p->prune_mode == MI_PRUNE_MAGNITUDE ? "ordinary magnitude" : "communication-aware",
                       p->prune[0], p->prune[1], p->prune[2], p->prune[3]);
        }
    }
    printf("  KV cache budgeted for %d of %d positions\n", p->kv_positions, c->seq_len);
    printf("  rank  device            weights_MB    kv_MB   budget_MB   use  busy_ms/token  %s  holds\n",
           pass_T > 0 ? "sent_B/pos" : "sent_B/tok");
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
        char holds[128] = "";
        size_t n = 0;
#define HOLDS(...) (n += (size_t)snprintf(holds + n, sizeof holds - n, n ? ", " : ""), \
                    n += (size_t)snprintf(holds + n, sizeof holds - n, __VA_ARGS__))
        if (p->n_cols > 0 || (r == 0 && !p->split_vocab))
            HOLDS("%s", p->n_cols > 0 ? "embedding columns" : "embeddings");
        if (p->split_vocab && cls)
            HOLDS("embedding rows");
        if (heads)
            HOLDS("%d KV heads", heads);
        if (proj)
            HOLDS("%d wo", proj);
        if (ffn && mi_config_is_moe(c)) {
            int ne = 0;
            for (int l = 0; l < c->n_layers; l++)
                for (int i = 0; i < p->layers[l].n_ffn; i++)
                    ne += p->layers[l].ffn[i].rank == r ? p->layers[l].ffn[i].n : 0;
            HOLDS("%d experts in %d layers", ne, ffn);
        } else if (ffn)
            HOLDS("%d FFN%s", ffn, p->layers[0].n_ffn > 1 ? " slices" : "");
        if (cls)
            HOLDS("classifier");
#undef HOLDS
        if (n == 0)
        {
            if (r == 0 && p->split_vocab)
                snprintf(holds, sizeof holds, "nothing: samples (the vocabulary is split)");
            else
                idle_reason(p, c, cl, pr, r, holds, sizeof holds);
        }
        printf("  %4d  %-16s  %10.2f  %7.2f  %10.2f  %3.0f%%  %8.3f       %10.0f  %s\n", r, cl->dev[r].name,
               pr->weight_bytes[r] / 1e6, pr->kv_bytes[r] / 1e6, cl->dev[r].mem_bytes / 1e6,
               100.0 * need / cl->dev[r].mem_bytes, pr->busy_s[r] * 1e3, sent[r], holds);
    }
    if (pass_T > 0)
        printf("  predicted %.3f ms per prefill pass of %d positions, %.0f bytes moved per position, planned in "
               "%.3f ms\n", pr->token_s * 1e3, pass_T, pr->bytes_per_token, p->plan_seconds * 1e3);
    else
        printf("  predicted %.3f ms/token (%.1f tokens/s), %.0f bytes per token (one decode pass, all ranks' "
               "payload), planned in %.3f ms\n", pr->token_s * 1e3, 1.0 / pr->token_s, pr->bytes_per_token,
               p->plan_seconds * 1e3);
}

/* One plan as a JSON object; `extra` (may be NULL) is more ", key: value" members. */
static void print_json(const mi_plan *p, const mi_programs *prog, const mi_prediction *pr, double delays, int first,
                       const char *extra)
{
    double sent[MI_MAX_RANKS], recv[MI_MAX_RANKS];
    mi_programs_bytes(prog, MI_PHASE_DECODE, sent, recv);
    printf("%s{\"planner\": \"%s\", \"ranks\": %d, \"wire_dtype\": \"%s\", \"plan_ms\": %.4f, "
           "\"predicted_token_ms\": %.4f, \"predicted_bytes_per_token\": %.0f, \"critical_path_delays\": %.0f, "
           "\"devices\": [", first ? "" : ",\n ", mi_planner_name(p->planner), p->n_ranks, mi_dtype_name(p->wire),
           p->plan_seconds * 1e3, pr->token_s * 1e3, pr->bytes_per_token, delays);
    for (int r = 0; r < p->n_ranks; r++)
        printf("%s{\"rank\": %d, \"weight_bytes\": %zu, \"kv_cache_bytes\": %zu, \"busy_ms\": %.4f, "
               "\"bytes_sent_per_token\": %.0f, \"bytes_recv_per_token\": %.0f}", r ? ", " : "", r,
               pr->weight_bytes[r], pr->kv_bytes[r], pr->busy_s[r] * 1e3, sent[r], recv[r]);
    printf("], \"placement\": ");
    if (mi_plan_placement_json(p, stdout))
        mi_fatal("plan: cannot write the placement as JSON");
    printf("%s}", extra ? extra : "");
}



/* ------------------------------------------------ placement plans */

/* Every option of `plan`, both modes. */
typedef struct {
    const char *model, *shape, *cluster, *planner, *out;
    const char *importance, *check_text, *sg_quality;
    const char *prune_arg;             /* --prune: ratios of the memory model, or somegather's send lists */
    const char *plan_only, *memory_only; /* an option of the other mode, for the error */
    cli_dtypes dt;
    int ranks, ctx, json, cw, kvpos, n_prompt, n_steps;
    int memory_model, show_programs, explain, speculate, prune_mode, energy;
    int split_vocab, top_k;            /* --split-vocab; --top-k (with --temperature: the logits rank 0 needs) */
    int prune_mode_set, mem_mb_set, seed_set, top_k_set; /* given: each qualifies another option */
    double temperature;
    long max_tokens;
    double ppl_budget, ttft_ms, tpot_ms, mem_mb;
    double exact_s;                    /* --exact-seconds (0: MI_EXACT_TIME_S) */
    mi_dtype wire;
    uint64_t seed;
    mem_opts mo;
    double prune[MI_N_PRUNED_XCH];
} plan_opts;

/* What the plan modes share once the options are checked. */
typedef struct {
    mi_config c;
    mi_cluster cl;
    int all, autop, chunk;
    mi_planner which;
    double sg_r, sg_ppl, sg_ppl0; /* somegather's pruning within --ppl-budget */
} plan_ctx;

/* Parse argv into o; returns 1 when --help was printed. */
static int parse_opts(int argc, char **argv, plan_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"shape", required_argument, 0, 's'},
        {"ranks", required_argument, 0, 'n'},     {"cluster", required_argument, 0, 'c'},
        {"planner", required_argument, 0, 'p'},   {"mem-mb", required_argument, 0, 'M'},
        {"plan-seed", required_argument, 0, 'S'}, {"controller-works", required_argument, 0, 'w'},
        {"ctx", required_argument, 0, 'x'},       {"out", required_argument, 0, 'o'},
        {"kv-positions", required_argument, 0, 'K'}, {"exact-seconds", required_argument, 0, 3040},
        {"json", no_argument, 0, 'j'},            {"help", no_argument, 0, 'h'},
        {"wire-dtype", required_argument, 0, 'W'}, CLI_DTYPE_LONG_OPTS,
        {"memory-model", no_argument, 0, 3000},   {"max-devices", required_argument, 0, 3001},
        {"prune", required_argument, 0, 3002},    {"positions", required_argument, 0, 3003},
        {"csv", required_argument, 0, 3004},      {"png", required_argument, 0, 3005},
        {"prune-mode", required_argument, 0, 3006}, {"programs", no_argument, 0, 3007},
        {"prompt-tokens", required_argument, 0, 3008}, {"steps", required_argument, 0, 3009},
        {"importance", required_argument, 0, 3010}, {"ttft-ms", required_argument, 0, 3011},
        {"tpot-ms", required_argument, 0, 3012},  {"energy", no_argument, 0, 3013},
        {"text", required_argument, 0, 3014},     {"max-tokens", required_argument, 0, 3015},
        {"ppl-budget", required_argument, 0, 3016}, {"somegather-quality", required_argument, 0, 3017},
        {"dim", required_argument, 0, 3018},      {"explain", no_argument, 0, 3019},
        {"speculate", no_argument, 0, 3020},     {"split-vocab", no_argument, 0, 3021},
        {"temperature", required_argument, 0, 3022}, {"top-k", required_argument, 0, 3023},
        {0, 0, 0, 0}};
    int k;
    while ((k = getopt_long(argc, argv, ":m:s:n:c:p:h", opts, NULL)) != -1) {
        const char *given = argv[optind - (optarg && optarg == argv[optind - 1] ? 2 : 1)];
        if ((k >= 3001 && k <= 3005 && k != 3002) || k == 3018)
            o->memory_only = given;
        else if (k != 3000 && k != 3002 && k != 'm' && k != 's' && k != 'W' && k != 'h' && !(k >= 2000 && k <= 2002))
            o->plan_only = given;
        switch (k) {
        case 3000: o->memory_model = 1; break;
        case 3001: o->mo.max_devices = (int)mi_parse_long("--max-devices", optarg, 1, MI_MAX_RANKS); break;
        case 3002:
            /* a second --prune joins the first (as --layer-dtype does): kinds or ratios added, a kind
             * given twice refused by the parser; never the first dropped */
            if (o->prune_arg) {
                size_t n = strlen(o->prune_arg) + strlen(optarg) + 2;
                char *joined = mi_malloc(n, "--prune");
                snprintf(joined, n, "%s,%s", o->prune_arg, optarg);
                o->prune_arg = joined;
            } else {
                o->prune_arg = optarg;
            }
            break;
        case 3006:
            if (strcmp(optarg, "aware") && strcmp(optarg, "magnitude"))
                mi_fatal("--prune-mode: '%s' is not aware or magnitude", optarg);
            o->prune_mode = !strcmp(optarg, "magnitude") ? MI_PRUNE_MAGNITUDE : MI_PRUNE_AWARE;
            o->prune_mode_set = 1;
            break;
        case 3007: o->show_programs = 1; break;
        case 3008: o->n_prompt = (int)mi_parse_long("--prompt-tokens", optarg, 1, 1 << 24); break;
        case 3009: o->n_steps = (int)mi_parse_long("--steps", optarg, 1, 1 << 24); break;
        case 3010: o->importance = optarg; break;
        case 3011: o->ttft_ms = mi_parse_double("--ttft-ms", optarg, 1e-3, 1e9); break;
        case 3012: o->tpot_ms = mi_parse_double("--tpot-ms", optarg, 1e-3, 1e9); break;
        case 3013: o->energy = 1; break;
        case 3014: o->check_text = optarg; break;
        case 3015: o->max_tokens = mi_parse_long("--max-tokens", optarg, 2, 1L << 24); break;
        case 3016: o->ppl_budget = mi_parse_double("--ppl-budget", optarg, 0, 1e6); break;
        case 3017: o->sg_quality = optarg; break;
        case 3003: o->mo.n_pos = (int)mi_parse_long("--positions", optarg, 1, 1 << 24); break;
        case 3004: o->mo.csv = optarg; break;
        case 3005: o->mo.png = optarg; break;
        case 3018: o->mo.dim = (int)mi_parse_long("--dim", optarg, 1, 1 << 16); break;
        case 3019: o->explain = 1; break;
        case 3020: o->speculate = 1; break;
        case 3021: o->split_vocab = 1; break;
        case 3022: o->temperature = mi_parse_double("--temperature", optarg, 0.0, 100.0); break;
        case 3023: o->top_k = (int)mi_parse_long("--top-k", optarg, 0, 1 << 24); o->top_k_set = 1; break;
        case 'm': o->model = optarg; break;
        case 's': o->shape = optarg; break;
        case 'n': o->ranks = (int)mi_parse_long("--ranks", optarg, 1, MI_MAX_RANKS); break;
        case 'c': o->cluster = optarg; break;
        case 'p': o->planner = optarg; break;
        case 'M': o->mem_mb = mi_parse_double("--mem-mb", optarg, 1e-3, 1e9); o->mem_mb_set = 1; break;
        case 'S': o->seed = mi_parse_u64("--plan-seed", optarg); o->seed_set = 1; break;
        case 'w':
            if (strcmp(optarg, "yes") && strcmp(optarg, "no"))
                mi_fatal("--controller-works: '%s' is not yes or no", optarg);
            o->cw = !strcmp(optarg, "yes");
            break;
        case 'x': o->ctx = (int)mi_parse_long("--ctx", optarg, 0, 1 << 24); break;
        case 'o': o->out = optarg; break;
        case 'K': o->kvpos = (int)mi_parse_long("--kv-positions", optarg, 1, 1 << 24); break;
        case 3040: o->exact_s = mi_parse_double("--exact-seconds", optarg, 0.01, 1e6); break;
        case 'j': o->json = 1; break;
        case 'W': o->wire = cli_wire_dtype(optarg); break;
        case 'h': help(); return 1;
        default:
            if (!cli_dtype_opt(&o->dt, k, optarg))
                cli_bad_option("plan", k, argv);
        }
    }
    cli_no_positional("plan", optind, argc, argv);
    return 0;
}

/* The checks that need the model's config, and the cluster; fills x. */
static void plan_setup(plan_opts *o, plan_ctx *x)
{
    char err[MI_ERRLEN];
    if (o->prune_arg) {
        cli_parse_prune(o->prune_arg, o->prune);
        if (strcmp(o->planner, "somegather"))
            mi_fatal("plan: --prune applies to --planner somegather (CATS's exchanges)");
        if (!o->model)
            mi_fatal("plan: --prune ranks columns by the weights they feed: give --model, not --shape");
    }
    if (o->prune_mode_set && !o->prune_arg)
        mi_fatal("plan: --prune-mode says how --prune ranks the columns it leaves out: give --prune too");
    if ((!o->ranks) == (!o->cluster))
        mi_fatal("plan: give exactly one of --ranks or --cluster (see meshinfer plan --help)");
    if (o->mem_mb_set && o->cluster)
        mi_fatal("plan: --mem-mb is the memory of each of --ranks N devices: the cluster file %s gives its own",
                 o->cluster);
    if (o->seed_set && strcmp(o->planner, "random") && strcmp(o->planner, "all"))
        mi_fatal("plan: --plan-seed seeds --planner random (or all, which includes it); --planner %s draws nothing",
                 o->planner);
    if (o->exact_s > 0 && strcmp(o->planner, "exact"))
        mi_fatal("plan: --exact-seconds limits --planner exact's search; --planner %s has none", o->planner);
    if (o->top_k_set && o->temperature <= 0)
        mi_fatal("plan: --top-k shapes sampling: greedy decoding (--temperature 0, the default) sends rank 0 one "
                 "candidate per slice whatever N is (give --temperature T > 0)");
    const char *inputs[] = {o->model, o->cluster, o->importance, o->sg_quality, o->check_text};
    if (o->out && mi_output_check(o->out, "plan file", inputs, 5, err))
        mi_fatal("%s", err);
    mi_config *c = &x->c;
    plan_load_config(o->model, o->shape, &o->dt, c);
    if (o->cluster) {
        if (mi_cluster_load(o->cluster, &x->cl, err))
            mi_fatal("%s", err);
    } else {
        mi_cluster_default(&x->cl, o->ranks, o->mem_mb * 1e6);
    }
    if (o->ctx < 0)
        o->ctx = c->seq_len / 2;
    if (o->ctx >= c->seq_len)
        mi_fatal("plan: --ctx %d is past the model's context (%d positions)", o->ctx, c->seq_len);
    if (o->kvpos > c->seq_len)
        mi_fatal("plan: --kv-positions %d is more than the model's context (%d)", o->kvpos, c->seq_len);
    x->all = !strcmp(o->planner, "all");
    x->autop = !strcmp(o->planner, "auto");
    x->which = MI_PLANNER_GREEDY;
    if (!x->all && !x->autop && mi_planner_parse(o->planner, &x->which))
        mi_fatal("plan: unknown planner '%s' (layerwise, roundrobin, random, greedy, tp, somegather, hybrid, exact, "
                 "all, auto)", o->planner);
    if (x->all && o->out)
        mi_fatal("plan: --out needs one planner, not 'all'");
    int want_prompt = o->n_prompt, want_steps = o->n_steps;
    if (want_prompt >= c->seq_len)
        mi_fatal("plan: --prompt-tokens %d leaves no room for a token in the model's context (%d)", want_prompt,
                 c->seq_len);
    mi_request_defaults(c->seq_len, &o->n_prompt, &o->n_steps);
    if ((want_prompt && want_prompt != o->n_prompt) || (want_steps && want_steps != o->n_steps)) /* given, not cut */
        mi_fatal("plan: --prompt-tokens %d plus --steps %d is more than the model's context (%d)",
                 want_prompt ? want_prompt : o->n_prompt, want_steps ? want_steps : o->n_steps, c->seq_len);
    x->chunk = 64; /* the runtime's prefill pass (generate, bench) */
    if (o->check_text && !o->importance)
        mi_fatal("plan: --text checks the precision search's choice: give --importance FILE too");
    if (o->max_tokens != 1024 && !o->check_text)
        mi_fatal("plan: --max-tokens is the length of --text's check: give --text FILE too");
    if (o->importance && (o->out || o->show_programs || o->explain))
        mi_fatal("plan: with --importance the search prints a configuration, not a plan: make the file with the "
                 "quantize command it prints, then run plan on that file with %s",
                 o->out ? "--out" : o->show_programs ? "--programs" : "--explain");
    if (o->energy && (!o->tpot_ms || o->importance || o->ttft_ms > 0 || x->all))
        mi_fatal("plan: --energy chooses DVFS levels for one plan under --tpot-ms T (no --importance, --ttft-ms or "
                 "--planner all)");
    if ((o->ttft_ms > 0 || o->tpot_ms > 0) && !o->importance && !o->energy)
        mi_fatal("plan: --ttft-ms and --tpot-ms are the precision search's targets: give --importance FILE too (or "
                 "--energy with --tpot-ms)");
    if (o->explain && o->json)
        mi_fatal("plan: --explain prints text; --json already has the placement (\"placement\")");
    if (o->speculate && (x->all || x->autop || x->which == MI_PLANNER_SOMEGATHER || x->which == MI_PLANNER_TP))
        mi_fatal("plan: --speculate needs one planner that puts a layer's projection on one rank (layerwise, "
                 "roundrobin, random, greedy, hybrid): %s", x->which == MI_PLANNER_TP
                 ? "tp splits every projection over the ranks" : x->which == MI_PLANNER_SOMEGATHER
                 ? "somegather has no projection rank to speculate from" : "all and auto compare without it");
    if (x->cl.n_devices == 1 && o->cw == 0)
        mi_fatal("plan: --controller-works no leaves the layers to the workers: one device has only the controller");
    if (o->split_vocab && (x->cl.n_devices == 1 || x->which == MI_PLANNER_SOMEGATHER))
        mi_fatal("plan: --split-vocab spreads the vocabulary over the workers %s", x->cl.n_devices == 1
                 ? "of several devices: one device has none"
                 : "for the head-level planners: somegather already holds it by columns on every rank");
    if ((o->ppl_budget >= 0) != (o->sg_quality != NULL))
        mi_fatal("plan: --ppl-budget and --somegather-quality go together (the budget is judged on the file's "
                 "measured perplexities)");
    if (o->sg_quality) {
        /* CATS's pruning within a perplexity budget, for somegather in the comparison */
        if (!x->all && !x->autop)
            mi_fatal("plan: --ppl-budget chooses somegather's pruning for --planner all or auto (give --prune R "
                     "with --planner somegather)");
        if (!o->model)
            mi_fatal("plan: --ppl-budget prunes columns by the weights they feed: give --model, not --shape");
        mi_sg_quality q;
        if (mi_sg_quality_load(o->sg_quality, c, &q, err))
            mi_fatal("%s", err);
        if (q.ranks != x->cl.n_devices)
            mi_fatal("plan: somegather quality file %s was measured on %d ranks but the cluster has %d (pruning "
                     "keeps different columns on another rank count)", o->sg_quality, q.ranks, x->cl.n_devices);
        x->sg_r = mi_sg_quality_best(&q, o->ppl_budget / 100, &x->sg_ppl);
        x->sg_ppl0 = q.perplexity[0];
    }
}

/* --text: perplexity of the model as it is and as the search chose it
 * (the search sums importances measured one at a time; this measures the
 * sum's truth). */
static void precision_check(const plan_opts *o, const mi_config *c, const mi_importance *imp,
                            const mi_precision_result *r, double *base, double *chosen, int *n_text)
{
    mi_model m;
    mi_tokenizer tok;
    mi_model_load_path(&m, o->model, &tok);
    int *ids = mi_text_ids(o->check_text, &tok, o->max_tokens, n_text);
    mi_scratch s;
    mi_scratch_init(&s, &m.cfg, 64);
    *base = mi_window_perplexity(&m, &s, ids, *n_text, mi_tokenizer_doc_start(&tok));
    int *keep = NULL;
    if (r->prune_k) {
        keep = mi_malloc((size_t)c->n_layers * (size_t)r->cfg.hidden_dim * sizeof(int), "kept channels");
        mi_prune_keep(imp, c->hidden_dim, r->prune_k, keep);
    }
    mi_model_apply(&m, &r->cfg, keep, r->cfg.hidden_dim);
    *chosen = mi_window_perplexity(&m, &s, ids, *n_text, mi_tokenizer_doc_start(&tok));
    free(keep);
    free(ids);
    mi_scratch_free(&s);
    mi_model_free(&m);
    mi_tokenizer_free(&tok);
}

/* --importance: Voltron's precision search for one planner; prints its own object or text. */
static int precision_main(const plan_opts *o, plan_ctx *x)
{
    char err[MI_ERRLEN];
    const mi_config *c = &x->c;
    if (x->all || x->autop)
        mi_fatal("plan: --importance searches the precision for one planner, not '%s'", o->planner);
    if (!o->model)
        mi_fatal("plan: --importance needs --model (the importance file names the model)");
    mi_importance *imp = mi_malloc(sizeof *imp, "importance");
    if (mi_importance_load(o->importance, c, imp, err))
        mi_fatal("%s", err);
    mi_plan_options po = {x->which, o->seed, o->cw, 0, NULL, 0.0, o->kvpos, o->wire, 0, 0, 0, NULL, o->split_vocab,
                          mi_logit_candidates((float)o->temperature, o->top_k)};
    mi_precision_query q = {o->ttft_ms / 1e3, o->tpot_ms / 1e3, o->n_prompt, o->n_steps, x->chunk};
    mi_precision_result *r = mi_malloc(sizeof *r, "precision search");
    if (mi_precision_search(c, &x->cl, &po, imp, &q, r, err))
        mi_fatal("%s", err);
    /* the file the choice is made from: quantize starts from fp32 weights only */
    mi_config fc;
    mi_model_file *mf = mi_model_open(o->model, &fc, err);
    if (!mf)
        mi_fatal("%s", err);
    mi_model_close(mf);
    int from_fp32 = fc.emb_dtype == MI_F32 && (fc.shared_classifier || fc.cls_dtype == MI_F32);
    for (int l = 0; l < fc.n_layers; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            from_fp32 &= fc.dtype[l][m] == MI_F32;
    if (o->check_text && (c->emb_dtype != fc.emb_dtype || c->cls_dtype != fc.cls_dtype))
        mi_fatal("plan: --text checks layer dtypes and pruning with the file's embeddings: make the file with "
                 "--embeddings-dtype first, then search and check it");
    double ppl_base = 0, ppl_chosen = 0;
    int n_text = 0;
    char chk[256] = "", chkt[256] = "";
    if (o->check_text) {
        precision_check(o, c, imp, r, &ppl_base, &ppl_chosen, &n_text);
        snprintf(chk, sizeof chk, ", \"check_tokens\": %d, \"base_perplexity\": %.4f, \"measured_perplexity\": "
                 "%.4f, \"measured_perplexity_rise\": %.4f", n_text, ppl_base, ppl_chosen, ppl_chosen - ppl_base);
        snprintf(chkt, sizeof chkt, "  measured on %d tokens of %s: perplexity %.3f -> %.3f (rise %.3f; expected "
                 "%.3f)\n", n_text, o->check_text, ppl_base, ppl_chosen, ppl_chosen - ppl_base, r->rise);
    }
    /* pruning, when the search went that far, and the embeddings' dtype the search assumed
     * are part of the file to make */
    char pr[8400] = "", prt[160] = "", qm[4200], qi[4200];
    size_t po_ = 0;
    if (c->emb_dtype != MI_F32)
        po_ += (size_t)snprintf(pr, sizeof pr, " --embeddings-dtype %s", mi_dtype_name(c->emb_dtype));
    if (r->prune_k) {
        snprintf(pr + po_, sizeof pr - po_, " --prune-ffn %d --importance %s", r->prune_k,
                 cli_shell_word(o->importance, qi, sizeof qi));
        snprintf(prt, sizeof prt, "  and %d of every layer's %d FFN shards pruned (hidden_dim %d of %d)\n",
                 r->prune_k, imp->n_shards, r->cfg.hidden_dim, c->hidden_dim);
    }
    if (o->json) {
        printf("{\"model\": \"%s\", \"planner\": \"%s\", \"layer_dtype\": \"%s\", \"embeddings_dtype\": \"%s\", "
               "\"from_fp32\": %s, \"prune_ffn_shards\": %d, "
               "\"ffn_shard\": %d, \"hidden_dim\": %d, \"downgrades\": %d, "
               "\"evaluated\": %d, \"predicted_ttft_ms\": %.4f, \"predicted_tpot_ms\": %.4f, "
               "\"expected_perplexity_rise\": %.4f, \"search_ms\": %.3f, \"kquant_layers\": %d, "
               "\"kquant_note\": \"%s\"%s}\n", c->name, mi_planner_name(x->which),
               r->spec, mi_dtype_name(c->emb_dtype), from_fp32 ? "true" : "false", r->prune_k, r->ffn_shard,
               r->cfg.hidden_dim, r->steps, r->evaluated, r->ttft_s * 1e3,
               r->tpot_s * 1e3, r->rise, r->seconds * 1e3, r->kquant_layers, r->kquant_note, chk);
    } else {
        char tt[32] = "none", tp[32] = "none";
        if (o->ttft_ms > 0)
            snprintf(tt, sizeof tt, "%g ms", o->ttft_ms);
        if (o->tpot_ms > 0)
            snprintf(tp, sizeof tp, "%g ms", o->tpot_ms);
        printf("precision search (Voltron 4.2.2), planner %s, targets TTFT %s, TPOT %s, for a %d-token "
               "prompt and %d steps:\n  weights: %s\n%s  %d downgrades, %d configurations planned in %.2f ms\n"
               "  predicted TTFT %.2f ms, TPOT %.3f ms; expected perplexity rise %.3f (sum of the layers' "
               "and shards' importances)\n%s%s%s%s  make it%s: meshinfer quantize -m %s --layer-dtype %s%s --out "
               "MODEL-mixed.h5\n",
               mi_planner_name(x->which), tt, tp, o->n_prompt, o->n_steps, r->spec, prt, r->steps, r->evaluated,
               r->seconds * 1e3, r->ttft_s * 1e3, r->tpot_s * 1e3, r->rise, r->kquant_note[0] ? "  " : "",
               r->kquant_note, r->kquant_note[0] ? "\n" : "", chkt,
               from_fp32 ? "" : " from the fp32 model this one was made from (quantize starts from fp32)",
               from_fp32 ? cli_shell_word(o->model, qm, sizeof qm) : "FP32_MODEL.h5", r->spec, pr);
    }
    free(r);
    free(imp);
    mi_cluster_free(&x->cl);
    return 0;
}

/* One plan, its prefill placement when hybrid keeps one apart, their programs and predictions. */
typedef struct {
    mi_plan p, pre;
    mi_programs prog, prog_pre;
    int two, pays;
    mi_prediction pr;
    double delays, gain, sw, ttft, tpot;
    mi_energy_result en;
} one_plan;

/* Make, compile and predict planner pl; returns -1 when --planner all skips it. */
static int one_plan_make(const plan_opts *o, const plan_ctx *x, mi_planner pl, one_plan *op)
{
    char err[MI_ERRLEN];
    memset(op, 0, sizeof *op);
    mi_plan_options po = {pl, o->seed, o->cw, o->speculate, NULL, 0.7, o->kvpos, o->wire, 0, 0, x->sg_r, o->model,
                          o->split_vocab, mi_logit_candidates((float)o->temperature, o->top_k)};
    mi_exact_info exact = {0};
    int failed = pl == MI_PLANNER_EXACT ? mi_plan_exact(&x->c, &x->cl, &po, o->exact_s, &op->p, &exact, err)
                                        : mi_plan_make(&x->c, &x->cl, &po, &op->p, err);
    if (!failed && pl == MI_PLANNER_EXACT)
        cli_exact_report(&exact, &op->p, "");
    if (failed) {
        if (x->all) {
            fprintf(stderr, "plan: %s skipped: %s\n", mi_planner_name(pl), err);
            return -1;
        }
        /* somegather's errors name it already */
        if (!strncmp(err, mi_planner_name(pl), strlen(mi_planner_name(pl))))
            mi_fatal("%s", err);
        mi_fatal("%s: %s", mi_planner_name(pl), err);
    }
    if (o->prune_arg && mi_plan_prune(&op->p, o->model, o->prune, o->prune_mode, err))
        mi_fatal("%s", err);
    if (pl == MI_PLANNER_HYBRID) {
        po.prefill = 1;
        po.prefill_T = x->chunk;
        if (mi_plan_make(&x->c, &x->cl, &po, &op->pre, err)) {
            /* the prefill packing can fail where the decode one fits: one placement serves both */
            if (!o->json)
                printf("(no prefill placement: %s; the decode placement serves both phases)\n", err);
        } else {
            op->two = !mi_plan_same_placement(&op->p, &op->pre);
            if (!op->two)
                mi_plan_free(&op->pre);
        }
    }
    if (mi_programs_compile(&op->p, &op->prog, err) || (op->two && mi_programs_compile(&op->pre, &op->prog_pre, err)))
        mi_fatal("%s: %s", mi_planner_name(pl), err);
    mi_predict(&op->p, &op->prog, &x->cl, o->ctx, &op->pr);
    op->delays = mi_predict_delays(&op->p, &op->prog);
    op->pays = op->two && mi_plan_phases_pay(&op->p, &op->prog, &op->pre, &op->prog_pre, &x->cl, o->n_prompt,
                                             x->chunk, &op->gain, &op->sw);
    op->ttft = mi_predict_ttft(op->pays ? &op->pre : &op->p, op->pays ? &op->prog_pre : &op->prog, &x->cl,
                               o->n_prompt, x->chunk);
    op->tpot = mi_predict_tpot(&op->p, &op->prog, &x->cl, o->n_prompt, o->n_steps);
    /* Voltron 4.4, as generate --energy chooses them: the margin under 90% of T (room for
     * noise) spent on lower DVFS levels, at the middle of the context */
    if (o->energy && mi_energy_plan(&op->p, &op->prog, &x->cl, x->c.seq_len / 2, 0.9 * o->tpot_ms / 1e3, &op->en, err))
        mi_fatal("%s", err);
    return 0;
}

static void one_plan_free(one_plan *op)
{
    mi_programs_free(&op->prog);
    mi_plan_free(&op->p);
    if (op->two) {
        mi_programs_free(&op->prog_pre);
        mi_plan_free(&op->pre);
    }
}

/* One plan as a member of --json's "plans". */
static void one_plan_json(const plan_opts *o, const plan_ctx *x, const one_plan *op, int first)
{
    char en_json[1024] = "";
    if (o->energy) {
        size_t n = (size_t)snprintf(en_json, sizeof en_json, ", \"energy\": {\"tpot_target_ms\": %g, \"freq\": [",
                                    o->tpot_ms);
        for (int r = 0; r < x->cl.n_devices && n < sizeof en_json; r++)
            n += (size_t)snprintf(en_json + n, sizeof en_json - n, "%s%.3f", r ? ", " : "", op->en.freq[r]);
        if (n < sizeof en_json)
            snprintf(en_json + n, sizeof en_json - n, "], \"predicted_j_per_token\": %.6f, "
                     "\"predicted_tpot_ms\": %.4f, \"top_j_per_token\": %.6f, \"top_tpot_ms\": %.4f, "
                     "\"choose_ms\": %.3f}", op->en.joules, op->en.token_s * 1e3, op->en.top_joules,
                     op->en.top_token_s * 1e3, op->en.seconds * 1e3);
    }
    char extra[1600];
    snprintf(extra, sizeof extra, ", \"predicted_ttft_ms\": %.4f, \"predicted_tpot_ms\": %.4f, "
             "\"phases_differ\": %s, \"phases_apart\": %s, \"prefill_gain_ms\": %.4f, \"replacement_ms\": %.4f%s",
             op->ttft * 1e3, op->tpot * 1e3, op->two ? "true" : "false", op->pays ? "true" : "false",
             op->gain * 1e3, op->sw * 1e3, en_json);
    print_json(&op->p, &op->prog, &op->pr, op->delays, first, extra);
}

/* One plan as text. */
static void one_plan_text(const plan_opts *o, const plan_ctx *x, one_plan *op)
{
    const mi_cluster *cl = &x->cl;
    if (op->two) {
        mi_prediction pp;
        int T0 = x->chunk < o->n_prompt ? x->chunk : o->n_prompt;
        mi_predict_pass(&op->pre, &op->prog_pre, cl, MI_PHASE_PREFILL, T0, 0, &pp);
        printf("prefill ");
        print_plan(&op->pre, &op->prog_pre, cl, &pp, !x->all, T0);
        printf("decode ");
    }
    print_plan(&op->p, &op->prog, cl, &op->pr, !x->all, 0);
    printf("  critical path: %.0f one-way link delays per decoded token\n", op->delays);
    if (op->two)
        printf("  phases apart: the prefill placement gains %.3f ms of TTFT, the two re-placements per "
               "request cost %.3f ms: %s\n", op->gain * 1e3, op->sw * 1e3,
               op->pays ? "apart" : "the decode placement serves both (generate --phase-plans both forces them apart)");
    printf("  predicted TTFT %.3f ms for a %d-token prompt%s, TPOT %.3f ms over %d steps\n", op->ttft * 1e3,
           o->n_prompt, op->pays ? " (prefill placement)" : "", op->tpot * 1e3, o->n_steps);
    if (o->energy) {
        const mi_energy_result *en = &op->en;
        printf("  energy (Voltron 4.4) under TPOT %g ms: DVFS levels", o->tpot_ms);
        for (int r = 0; r < cl->n_devices; r++)
            printf(" %s %.2f", cl->dev[r].name, en->freq[r]);
        printf("\n    predicted at context position %d: %.4f J and %.3f ms per token (%.4f J and %.3f ms "
               "at top frequencies: %.0f%% less energy); chosen in %.2f ms; generate --tpot-ms %g --energy "
               "runs them\n", x->c.seq_len / 2, en->joules, en->token_s * 1e3, en->top_joules, en->top_token_s * 1e3,
               en->top_joules > 0 ? 100 * (1 - en->joules / en->top_joules) : 0, en->seconds * 1e3, o->tpot_ms);
    }
    if (o->show_programs)
        mi_programs_print(&op->prog, &x->c, stdout);
    if (o->explain) {
        printf("\n");
        if (op->pays) { /* hybrid keeps the phases apart: each phase's programs come from its own placement */
            printf("prefill placement:\n");
            mi_programs_explain(&op->pre, &op->prog_pre, MI_PHASE_PREFILL, stdout);
            printf("\ndecode placement:\n");
            mi_programs_explain(&op->p, &op->prog, MI_PHASE_DECODE, stdout);
        } else {
            mi_programs_explain(&op->p, &op->prog, -1, stdout);
        }
    }
}

/* --planner all or auto: every scheme's predicted TTFT and TPOT. */
static void print_comparison(const plan_opts *o, const plan_ctx *x, const mi_compare_row *rows, int n_rows, int best)
{
    if (o->json) {
        printf("], \"comparison\": [");
        for (int i = 0; i < n_rows; i++) {
            const mi_compare_row *r = &rows[i];
            printf("%s{\"planner\": \"%s\", \"fits\": %s", i ? ", " : "", mi_planner_name(r->planner),
                   r->fits ? "true" : "false");
            if (r->fits)
                printf(", \"predicted_ttft_ms\": %.4f, \"predicted_tpot_ms\": %.4f, \"predicted_total_ms\": %.3f, "
                       "\"bytes_per_token\": %.0f, \"plan_ms\": %.4f, \"phases_differ\": %s", r->ttft_s * 1e3,
                       r->tpot_s * 1e3, r->total_s * 1e3, r->bytes_per_token, r->plan_ms,
                       r->phases_differ ? "true" : "false");
            if (r->fits && r->planner == MI_PLANNER_SOMEGATHER && o->sg_quality)
                printf(", \"prune\": %g, \"measured_perplexity\": %.4f, \"unpruned_perplexity\": %.4f", r->prune,
                       x->sg_ppl, x->sg_ppl0);
            else {
                printf(", \"why\": ");
                cli_json_string(stdout, r->why, strlen(r->why));
            }
            printf("}");
        }
        printf("], \"auto\": \"%s\"", mi_planner_name(rows[best].planner));
        printf("}\n");
        return;
    }
    printf("\nschemes compared for a %d-token prompt and %d decoded tokens (Voltron's TTFT and TPOT):\n",
           o->n_prompt, o->n_steps);
    printf("  planner       TTFT_ms    TPOT_ms   total_ms   vs_best  bytes/token  plan_ms  note\n");
    for (int i = 0; i < n_rows; i++) {
        const mi_compare_row *r = &rows[i];
        if (!r->fits) {
            printf("  %-10s  does not fit: %s\n", mi_planner_name(r->planner), r->why);
            continue;
        }
        char note[160] = "";
        if (r->planner == MI_PLANNER_SOMEGATHER && o->sg_quality)
            snprintf(note, sizeof note, "%sr = %g (perplexity %.3f, %+.1f%%; budget %g%%)", i == best ? "; " : "",
                     r->prune, x->sg_ppl, 100 * (x->sg_ppl / x->sg_ppl0 - 1), o->ppl_budget);
        printf("  %-10s %9.3f %10.4f %10.2f %8.2fx %12.0f %8.3f  %s%s%s\n", mi_planner_name(r->planner),
               r->ttft_s * 1e3, r->tpot_s * 1e3, r->total_s * 1e3, r->total_s / rows[best].total_s,
               r->bytes_per_token, r->plan_ms, i == best ? "auto's choice" : "",
               r->phases_differ ? (i == best ? "; prefill and decode placed apart" : "prefill and decode placed apart")
                                : "",
               note);
    }
}

/* The plan mode: one planner, every planner (all) or the fastest (auto). */
static int plans_main(const plan_opts *o, plan_ctx *x)
{
    char err[MI_ERRLEN], dts[160];
    const mi_config *c = &x->c;
    if (o->json)
        printf("{\"model\": \"%s\", \"synthetic_weights\": %s, \"weights\": \"%s\", \"prompt_tokens\": %d, "
               "\"steps\": %d, \"plans\": [", c->name, c->synthetic ? "true" : "false",
               mi_config_dtype_summary(c, dts, sizeof dts), o->n_prompt, o->n_steps);
    mi_compare_row rows[MI_COMPARE_MAX];
    int n_rows = 0, best = -1;
    if (x->all || x->autop) {
        mi_plan_options base = {MI_PLANNER_GREEDY, o->seed, -1, 0, NULL, 0.0, o->kvpos, o->wire, 0, 0, x->sg_r,
                                o->model, o->split_vocab, mi_logit_candidates((float)o->temperature, o->top_k)};
        best = mi_plan_compare(c, &x->cl, &base, o->n_prompt, o->n_steps, x->chunk, rows, &n_rows);
        if (best < 0)
            mi_fatal("plan: no scheme fits this cluster (%s: %s)", mi_planner_name(rows[0].planner), rows[0].why);
        x->which = rows[best].planner;
    }
    for (int i = 0, shown = 0; i < MI_N_PLANNERS; i++) {
        mi_planner pl = x->all ? (mi_planner)i : x->which;
        if (!x->all && i > 0)
            break;
        if (x->all && pl == MI_PLANNER_EXACT) /* a search of up to 20 s: asked for by name only */
            continue;
        one_plan *op = mi_malloc(sizeof *op, "plan");
        if (one_plan_make(o, x, pl, op)) {
            free(op);
            continue;
        }
        if (o->json)
            one_plan_json(o, x, op, shown == 0);
        else
            one_plan_text(o, x, op);
        shown++;
        if (o->out && mi_plan_save_json(&op->p, o->out, err))
            mi_fatal("%s", err);
        one_plan_free(op);
        free(op);
    }
    if (x->all || x->autop)
        print_comparison(o, x, rows, n_rows, best);
    else if (o->json)
        printf("]}\n");
    mi_cluster_free(&x->cl);
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    plan_opts o = {.planner = "greedy", .ctx = -1, .cw = -1, .max_tokens = 1024, .ppl_budget = -1, .top_k = 40,
                   .wire = MI_F32, .mem_mb = 4000, .seed = 1, .prune_mode = MI_PRUNE_AWARE,
                   .mo = {.max_devices = 16, .wire = MI_F32, .n_prune = 2, .prune = {0.0, 0.9}}};
    if (parse_opts(argc, argv, &o))
        return 0;
    if ((!o.model) == (!o.shape))
        mi_fatal("plan: give exactly one of --model or --shape (see meshinfer plan --help)");
    if (o.memory_model && o.plan_only)
        mi_fatal("plan: %s does not apply to --memory-model (see meshinfer plan --help)", o.plan_only);
    if (!o.memory_model && o.memory_only)
        mi_fatal("plan: %s needs --memory-model (see meshinfer plan --help)", o.memory_only);
    if (o.memory_model) {
        if (o.prune_arg)
            plan_parse_prune_list(o.prune_arg, &o.mo);
        return plan_memory_model(o.model, o.shape, &o.dt, o.wire, &o.mo);
    }
    plan_ctx x;
    memset(&x, 0, sizeof x);
    plan_setup(&o, &x);
    return o.importance ? precision_main(&o, &x) : plans_main(&o, &x);
}
