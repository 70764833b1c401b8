/* The distributed options of generate, perplexity, bench and forecast
 * (see session_opts.h): their --help text, defaults and parsing into the
 * controller's session_opts. */
#include "session_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"

const char *SESSION_HELP =
    "Distribution (one rank per device; run under mpirun for several):\n"
    "      --planner NAME      layerwise | roundrobin | random | greedy | tp | somegather | hybrid |\n"
    "                          exact | auto (default greedy). exact: HeadSplit's units placed by a\n"
    "                          mixed-integer program (GLPK; at most 8 devices, 20 s, then its best).\n"
    "                          hybrid (Voltron): per layer and sublayer model\n"
    "                          or tensor parallelism, whichever the cost model predicts faster, for\n"
    "                          prefill and decode apart (the run re-places after the first token when\n"
    "                          they differ); auto: every scheme predicted, the fastest that fits run\n"
    "      --ppl-budget PCT    with auto: somegather at the largest pruning ratio r whose perplexity,\n"
    "                          measured on this rank count (--somegather-quality FILE, from\n"
    "                          jobs/experiments/somegather_quality.sh --for-auto), is within PCT% of the unpruned\n"
    "                          one (CATS's pruning)\n"
    "      --tpot-ms T         Voltron runtime scaling: when decoding runs over T ms per token, a\n"
    "                          device whose compute slowed gets the layers it holds lowered (down\n"
    "                          fp16, q8_0, q6_K, q5_K, q4_K, q4_0, the k-quants where dims are whole\n"
    "                          256s; computation scaling), else activation messages go lower\n"
    "                          (fp32 -> fp16 -> q8_0; communication scaling); undone when TPOT stays\n"
    "                          under 60% of T (decisions on stderr and in --json)\n"
    "      --importance FILE   with --tpot-ms: lower the least important layers first (from\n"
    "                          `meshinfer importance`; default: from the last layer)\n"
    "      --prune-ffn K       Voltron shard-wise pruning at load: every layer's K least important FFN\n"
    "                          shards (--importance FILE measured with --ffn-shard) are not computed,\n"
    "                          as `quantize --prune-ffn K` would make the file (the file is unchanged;\n"
    "                          at most half of the shards). With --tpot-ms, runtime scaling also\n"
    "                          prunes shards of a slowed device's layers once they are all q4_0\n"
    "      --energy            with --tpot-ms: run devices off the critical path at lower DVFS levels\n"
    "                          (the cluster file's \"power\": {\"freq\": [1, 0.8, ...]}) while the predicted\n"
    "                          TPOT stays under 90% of T (Voltron §4.4; emulated here: compute stretched\n"
    "                          by 1/f); --json reports energy and energy-delay product per run\n"
    "      --phase-plans auto|both|decode|prefill  hybrid: each phase its own placement when the\n"
    "                          prompt's predicted gain pays for the two re-placements (auto, default),\n"
    "                          always (both), or one phase's for both (to measure what each gains)\n"
    "      --cluster FILE      devices' memory budgets and speeds, links (JSON; default: equal devices\n"
    "                          sharing this machine's free memory)\n"
    "      --plan-file FILE    use a saved plan (from `meshinfer plan --out`)\n"
    "      --plan-seed S       seed of the random planner (default 1)\n"
    "      --controller-works yes|no  rank 0 also holds layer shards (default: yes for tp, else no)\n"
    "      --weights file|scatter  every rank reads its shard from the model file (default), or\n"
    "                          rank 0 reads all and sends each worker its shard\n"
    "      --trace FILE        write a Chrome trace-event JSON (one track per rank; open in Perfetto;\n"
    "                          jobs/lib/trace_gantt.sh draws it as a PNG, one row per rank)\n"
    "      --explain           before the first pass, print the placement that runs and every rank's\n"
    "                          program in words (as `meshinfer plan --explain`) to stderr, and what it\n"
    "                          was planned for: under mpirun without --cluster or --plan-file, the\n"
    "                          round trips measured at start-up and this machine's free memory, which\n"
    "                          is why it may differ from `meshinfer plan --ranks N`\n"
    "      --split-vocab       head-level planners: the token embeddings (tied: with the classifier) held\n"
    "                          by vocabulary rows on the ranks holding those classifier rows, spread over\n"
    "                          the workers, instead of whole on rank 0 (the planners also do it when the\n"
    "                          whole table does not fit rank 0); rank 0 gathers each token's row\n"
    "                          (docs/guide/vocabulary.md)\n"
    "      --wire-dtype T      activation messages between ranks in fp32 (default, exact), fp16 or\n"
    "                          q8_0 (blocks of 32 with an fp16 scale: about 27% of the fp32 bytes);\n"
    "                          partial sums are summed in fp32 so that every rank holds the same sums\n"
    "                          (a plan file carries its own wire dtype: `meshinfer plan --wire-dtype`)\n"
    "Somegather (CATS; --planner somegather, on D ranks dividing the KV heads):\n"
    "      --prune SPEC        leave out this fraction (in [0, 1)) of each rank's columns in every\n"
    "                          exchange: R for all four, or per kind, e.g. 0.5,hidden=0.9 (kinds:\n"
    "                          attn_in heads ffn_in hidden; default 0); the send lists are in the plan\n"
    "      --prune-mode M      aware (default: columns ranked by the weights they feed on other ranks;\n"
    "                          their owner keeps them) or magnitude (ordinary magnitude pruning: ranked\n"
    "                          by all the weights they feed, dropped for every rank; same bandwidth)\n"
    "      --loss P            emulated message loss: each message (sender, position) of an allgather\n"
    "                          is lost with probability P in [0, 1]; its columns count as absent\n"
    "      --loss-mode M       link (default: receiver j misses sender i), receiver (j gets nothing in\n"
    "                          that exchange) or sender (nobody gets i's message)\n"
    "      --loss-seed S       seed of the loss generator (default 1)\n"
    "Inter-layer speculation (HeadSplit; head-level planners):\n"
    "      --speculate         send each layer's Z to the next layer's head ranks before the FFN ends\n"
    "      --tolerance T       keep the speculative attention when ||FFN(Z)||/||Z|| < T (default 0.05;\n"
    "                          0 always recomputes: bit-identical to running without speculation)\n"
    "      --spec-profile FILE acceptance per transition from `meshinfer profile`; only transitions with\n"
    "                          acceptance >= --min-acceptance (default 0.7) and a positive saving speculate\n"
    "Memory (HeadSplit \"Memory needs active management\"; budgets from --cluster):\n"
    "      --kv-positions N    KV-cache positions the placement budgets memory for (default: the whole\n"
    "                          context; with --replan a quarter of it)\n"
    "      --replan            re-run the planner and move shards and KV heads when a device crosses\n"
    "                          85% of its budget or the cache outgrows the placement\n";

void session_opts_init(session_opts *o)
{
    memset(o, 0, sizeof *o);
    o->planner = "greedy";
    o->plan_seed = 1;
    o->controller_works = -1;
    o->tolerance = 0.05;
    o->min_acceptance = 0.7;
    o->loss_seed = 1;
    o->ppl_budget = -1;
}

int session_opt(session_opts *o, int code, const char *arg)
{
    switch (code) {
    case 1020: o->tpot_ms = mi_parse_double("--tpot-ms", arg, 1e-3, 1e9); return 1;
    case 1021: o->importance = arg; return 1;
    case 1022: o->energy = 1; return 1;
    case 1024: o->ppl_budget = mi_parse_double("--ppl-budget", arg, 0, 1e6); return 1;
    case 1025: o->sg_quality = arg; return 1;
    case 1023: o->prune_ffn = (int)mi_parse_long("--prune-ffn", arg, 0, MI_MAX_PRUNE_SHARDS / 2); return 1;
    case 1019:
        if (!strcmp(arg, "auto"))
            o->phase_plans = 0;
        else if (!strcmp(arg, "both"))
            o->phase_plans = 3;
        else if (!strcmp(arg, "decode"))
            o->phase_plans = 1;
        else if (!strcmp(arg, "prefill"))
            o->phase_plans = 2;
        else
            mi_fatal("--phase-plans: '%s' is not auto, both, decode or prefill", arg);
        return 1;
    case 1000: {
        mi_planner p;
        if (strcmp(arg, "auto") && mi_planner_parse(arg, &p))
            mi_fatal("--planner: unknown planner '%s' (layerwise, roundrobin, random, greedy, tp, somegather, hybrid, "
                     "exact, auto)", arg);
        o->planner = arg;
        o->placement_opts = 1;
        return 1;
    }
    case 1001: o->cluster = arg; return 1;
    case 1002: o->plan_file = arg; return 1;
    case 1003: o->trace = arg; return 1;
    case 1004:
        o->plan_seed = mi_parse_u64("--plan-seed", arg);
        o->placement_opts = 1;
        o->plan_seed_set = 1;
        return 1;
    case 1005:
        if (!strcmp(arg, "yes"))
            o->controller_works = 1;
        else if (!strcmp(arg, "no"))
            o->controller_works = 0;
        else
            mi_fatal("--controller-works: '%s' is not yes or no", arg);
        return 1;
    case 1006:
        if (!strcmp(arg, "scatter"))
            o->scatter = 1;
        else if (!strcmp(arg, "file"))
            o->scatter = 0;
        else
            mi_fatal("--weights: '%s' is not file or scatter", arg);
        return 1;
    case 1007: o->speculate = 1; return 1;
    case 1026: o->explain = 1; return 1;
    case 1027: o->split_vocab = 1; return 1;
    case 1008: o->tolerance = mi_parse_double("--tolerance", arg, 0.0, 1e9); o->spec_given = 1; return 1;
    case 1009: o->min_acceptance = mi_parse_double("--min-acceptance", arg, 0.0, 1.0); o->spec_given = 1; return 1;
    case 1010: o->spec_profile = arg; o->spec_given = 1; return 1;
    case 1011: o->replan = 1; return 1;
    case 1012: o->kv_positions = (int)mi_parse_long("--kv-positions", arg, 1, 1 << 24); return 1;
    case 1013:
        o->wire = cli_wire_dtype(arg);
        o->wire_set = 1;
        return 1;
    case 1014: {
        /* a second --prune joins the first (kinds added; one given twice refused), as --layer-dtype does */
        const char *spec = arg;
        if (o->prune_spec) {
            size_t n = strlen(o->prune_spec) + strlen(arg) + 2;
            char *joined = mi_malloc(n, "--prune");
            snprintf(joined, n, "%s,%s", o->prune_spec, arg);
            spec = joined; /* kept for the run's length, like the argv strings */
        }
        cli_parse_prune(spec, o->prune);
        o->prune_spec = spec;
        o->prune_set = o->prune_given = 1;
        return 1;
    }
    case 1015:
        if (!strcmp(arg, "aware"))
            o->prune_mode = MI_PRUNE_AWARE;
        else if (!strcmp(arg, "magnitude"))
            o->prune_mode = MI_PRUNE_MAGNITUDE;
        else
            mi_fatal("--prune-mode: '%s' is not aware or magnitude", arg);
        o->prune_set = 1;
        return 1;
    case 1016:
        o->loss = mi_parse_double("--loss", arg, 0.0, 1.0);
        o->loss_set = o->loss_given = 1;
        return 1;
    case 1017:
        o->loss_mode = mi_loss_mode_parse(arg);
        if (o->loss_mode < 0)
            mi_fatal("--loss-mode: '%s' is not link, receiver or sender", arg);
        o->loss_set = 1;
        return 1;
    case 1018:
        o->loss_seed = mi_parse_u64("--loss-seed", arg);
        o->loss_set = 1;
        return 1;
    default: return 0;
    }
}

int session_opts_check(const session_opts *o, const char *cmd, int ranks, char *err)
{
    if (o->prune_set && !o->prune_given)
        return mi_set_error(err, "%s: --prune-mode says how --prune ranks the columns it leaves out: give --prune "
                                 "too", cmd);
    if (o->loss_set && !o->loss_given)
        return mi_set_error(err, "%s: --loss-mode and --loss-seed shape the message loss of --loss P: give --loss "
                                 "too", cmd);
    if (o->spec_given && !o->speculate)
        return mi_set_error(err, "%s: --tolerance, --min-acceptance and --spec-profile tune inter-layer speculation: "
                                 "give --speculate too", cmd);
    if (o->plan_seed_set && !o->plan_file && strcmp(o->planner, "random"))
        return mi_set_error(err, "%s: --plan-seed seeds --planner random; --planner %s draws nothing", cmd,
                            o->planner);
    if (o->speculate && !strcmp(o->planner, "tp"))
        return mi_set_error(err, "%s: --speculate needs a layer's projection on one rank: --planner tp splits every "
                                 "projection over the ranks", cmd);
    if (ranks == 1 && o->scatter)
        return mi_set_error(err, "%s: --weights scatter sends each worker its shard: a one-rank job has no workers "
                                 "(start it with mpirun -np N)", cmd);
    if (ranks == 1 && o->controller_works == 0)
        return mi_set_error(err, "%s: --controller-works no leaves the layers to the workers: a one-rank job has "
                                 "only the controller", cmd);
    /* somegather refuses --split-vocab on any rank count, with its own reason (session.c) */
    if (ranks == 1 && o->split_vocab && strcmp(o->planner, "somegather"))
        return mi_set_error(err, "%s: --split-vocab spreads the vocabulary over the workers: a one-rank job has "
                                 "none", cmd);
    return 0;
}
