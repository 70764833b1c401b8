/* Rank 0's controller for the model-running commands (see control.h):
 * start-up (the model, the cluster, making or loading the plan, its
 * programs, the runtime on every rank), the prompt, and the end of a
 * session. Re-placement and phase switches are replace.c, the metrics
 * report report.c, runtime scaling scaling.c. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/control.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/hwinfo.h"
#include "meshinfer/kernels.h"
#include "meshinfer/model_file.h"
#include "meshinfer/runtime.h"

#include <cjson/cJSON.h>

#include "internal.h"
#include "../util/json_keys.h"

int session_prune_ffn(mi_plan *plan, const mi_importance *imp, int k, char *err)
{
    const mi_config *c = &plan->cfg;
    if (!imp || imp->ffn_shard <= 0)
        return mi_set_error(err, "--prune-ffn needs --importance FILE with FFN shard measurements (`meshinfer "
                                 "importance --ffn-shard N`)%s", imp ? ": this file has none" : "");
    if (2 * k > imp->n_shards)
        return mi_set_error(err, "--prune-ffn %d: at most half of the %d FFN shards of a layer can be pruned", k,
                            imp->n_shards);
    int *keep = mi_malloc((size_t)c->n_layers * c->hidden_dim * sizeof(int), "kept units");
    mi_prune_keep(imp, c->hidden_dim, k, keep);
    int nk = c->hidden_dim - k * imp->ffn_shard;
    plan->ffn_shard = imp->ffn_shard;
    for (int l = 0; l < c->n_layers; l++) {
        uint64_t m = ((uint64_t)-1) >> (64 - imp->n_shards); /* every shard, then the kept ones cleared */
        for (int i = 0; i < nk; i++)
            m &= ~((uint64_t)1 << (keep[(size_t)l * nk + i] / imp->ffn_shard));
        plan->layers[l].ffn_pruned = m;
    }
    free(keep);
    return mi_plan_validate(plan, NULL, err);
}

void session_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    mi_world_init(argc, argv);
    *rank = mi_world_rank();
    *size = mi_world_size();
}

/* The fraction of exchange kind x's columns that the plan's send lists leave
 * out (0 without send lists). */
double session_unsent_fraction(const mi_plan *plan, int x)
{
    double owned = 0, sent = 0;
    for (int l = 0; l < plan->cfg.n_layers; l++)
        for (int r = 0; r < plan->n_ranks; r++) {
            int c0, n;
            mi_plan_owned(plan, l, x, r, &c0, &n);
            const mi_keep *k = mi_plan_keep(plan, l, x, r);
            owned += n;
            sent += k ? k->n : n;
        }
    return owned > 0 ? 1.0 - sent / owned : 0.0;
}

static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    double kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    double avail = kb > 0 ? kb * 1024.0 : 4e9;
    /* inside a memory cgroup (an emulated device) its limit is the budget */
    const char *limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int i = 0; i < 2; i++) {
        FILE *g = fopen(limits[i], "r");
        double lim = 0;
        if (g && fscanf(g, "%lf", &lim) == 1 && lim > 0 && lim < avail)
            avail = lim;
        if (g)
            fclose(g);
    }
    return avail;
}

/* The current plan's memory per rank, so the check before every forward pass
 * is arithmetic only (internal.h). */
void session_memory_of_plan(mi_session *ss)
{
    mi_plan_mem_account(&ss->plan, ss->memory.mem_w, ss->memory.mem_kv);
}

/* What the placement is made for, in words (ss->planned_with): a run
 * without a cluster file plans for what it measured (round trips at
 * start-up, this machine's free memory), not for the 20 us links and 4000
 * MB devices that `plan --ranks N` assumes, so its placement may differ;
 * a user reading --metrics, --json or --explain should see why. Called with
 * the cluster before the measured round trips are added to it. */
static void describe_planning(mi_session *ss, const session_opts *o, const mi_cluster *cl)
{
    char *s = ss->planned_with;
    size_t n = sizeof ss->planned_with;
    int rtt = ss->size > 1 && !cl->rtt_s;
    if (o->plan_file)
        snprintf(s, n, "the plan file %s (its placement as saved)", o->plan_file);
    else if (o->cluster)
        snprintf(s, n, "the cluster file %s%s", o->cluster,
                 rtt ? ", with the round trips measured at start-up (+15%)" : cl->rtt_s ? " and its measured links" : "");
    else if (rtt)
        snprintf(s, n, "measured: round trips at start-up (+15%%) and this machine's free memory, %.0f MB per rank "
                       "(plan --ranks %d assumes 20 us links and 4000 MB devices; plan --out P, then --plan-file P, "
                       "runs plan's placement)", cl->n_devices > 0 ? cl->dev[0].mem_bytes / 1e6 : 0.0, ss->size);
    else
        snprintf(s, n, "one rank with this machine's free memory (%.0f MB)",
                 cl->n_devices > 0 ? cl->dev[0].mem_bytes / 1e6 : 0.0);
}

/* --explain: the placement and programs that will run, on stderr before
 * the first pass (hybrid with both placements: each phase from its own). */
static void explain_run(const mi_session *ss)
{
    fprintf(stderr, "meshinfer: --explain: the placement below was planned for %s\n", ss->planned_with);
    if (ss->phases.has_prefill_plan) {
        fprintf(stderr, "prefill placement:\n");
        mi_programs_explain(&ss->phases.plan_prefill, &ss->phases.prog_prefill, MI_PHASE_PREFILL, stderr);
        fprintf(stderr, "decode placement:\n");
        mi_programs_explain(&ss->plan, &ss->prog, MI_PHASE_DECODE, stderr);
    } else {
        mi_programs_explain(&ss->plan, &ss->prog, -1, stderr);
    }
}

/* Rank 0's part of the set-up; returns 0 or -1 with err set. */
/* The outputs checked before anything is loaded or run (output.h), the
 * model's config and tokenizer, and the family's command and planners. */
static int open_model(mi_session *ss, const char *path, const session_opts *o, char *err)
{
    const char *inputs[] = {path, o->cluster, o->plan_file, o->spec_profile, o->text_input, o->importance,
                            o->sg_quality, o->journal};
    if (o->trace && mi_output_check(o->trace, "trace file", inputs, 8, err))
        return -1;
    /* a trace replaces only a file that could be an earlier trace: a regular,
     * non-executable file, empty or starting with '{' or '[' (JSON) */
    struct stat st;
    FILE *tf = o->trace && stat(o->trace, &st) == 0 && S_ISREG(st.st_mode) ? fopen(o->trace, "rb") : NULL;
    if (tf) {
        int first = fgetc(tf);
        fclose(tf);
        if ((st.st_mode & 0111) || (first != EOF && first != '{' && first != '['))
            return mi_set_error(err, "%s exists and is not a trace (%s); refusing to replace it with the trace file: "
                                "remove it or give another name", o->trace,
                                st.st_mode & 0111 ? "it is executable" : "it does not start with '{' or '['");
    }
    if (o->trace && o->journal && mi_same_path(o->trace, o->journal))
        return mi_set_error(err, "%s: --trace and the journal name the same file", o->trace);
    mi_model_file *mf = mi_model_open(path, &ss->cfg, err);
    if (!mf)
        return -1;
    ss->cfg.kv_slots = o->kv_slots > 1 ? o->kv_slots : 1;
    int series = ss->cfg.family == MI_FAMILY_PATCHTST;
    /* the model's family decides the command: tokens for language models, a series for the time-series one */
    if (series != o->forecast) {
        mi_model_close(mf);
        return mi_set_error(err, series ? "%s is a time-series model (docs/patchtst.md): run it with meshinfer forecast"
                                        : "%s is a language model; forecast needs a time-series model "
                                          "(docs/patchtst.md)",
                            path);
    }
    int rc = series ? 0 : mi_model_read_tokenizer(mf, &ss->tok, err);
    if (!rc && !series && mi_model_read_text(mf, "chat_template", &ss->chat_template, err) < 0)
        rc = -1;
    mi_model_close(mf);
    if (rc)
        return -1;
    /* the time-series family's output biases join the residual stream where
     * it is whole (exec.c op_proj): on its owner's columns (somegather), on
     * the rank holding the layer (layer-wise), on every copy before the
     * partial sums are reduced into it (tp). The head-level planners reduce
     * FFN slices into one rank's residual, which may hold no slice: refused */
    if (series && (o->plan_file || (strcmp(o->planner, "somegather") && strcmp(o->planner, "layerwise") &&
                                    strcmp(o->planner, "tp"))))
        return mi_set_error(err, "%s is a time-series model (docs/patchtst.md): it runs with --planner somegather, "
                                 "layerwise or tp (not %s)", path, o->plan_file ? "--plan-file" : o->planner);
    if (series && o->speculate)
        return mi_set_error(err, "--speculate applies to language models (HeadSplit's decode steps)");
    return 0;
}

/* The devices the plan is made for: the cluster file (its rank count and,
 * when calibrated, its hosts checked against the job's), or equal devices
 * sharing this machine's free memory; links as measured at start-up. */
static int job_cluster(mi_session *ss, const session_opts *o, mi_cluster *cl, char *err)
{
    if (o->cluster) {
        if (mi_cluster_load(o->cluster, cl, err))
            return -1;
        if (cl->n_devices != ss->size) {
            if (cl->calib_ranks > 0)
                mi_set_error(err, "cluster file %s was calibrated on %d ranks but the job has %d: run meshinfer "
                                  "calibrate on this job's ranks and hosts", o->cluster, cl->calib_ranks, ss->size);
            else
                mi_set_error(err, "cluster file %s lists %d devices but the job has %d rank%s (one rank per device)",
                             o->cluster, cl->n_devices, ss->size, ss->size == 1 ? "" : "s");
            mi_cluster_free(cl);
            return -1;
        }
        /* a calibration describes the devices it ran on, not whatever runs the ranks now */
        for (int r = 0; r < ss->size && cl->calib_ranks > 0; r++)
            if (cl->dev[r].host[0] && ss->hosts && strcmp(cl->dev[r].host, ss->hosts[r])) {
                mi_set_error(err, "cluster file %s was calibrated with rank %d on host '%s' but rank %d runs on '%s': "
                                  "run meshinfer calibrate on this job's hosts", o->cluster, r, cl->dev[r].host, r,
                             ss->hosts[r]);
                mi_cluster_free(cl);
                return -1;
            }
    } else {
        mi_cluster_default(cl, ss->size, mem_available() / ss->size);
    }
    describe_planning(ss, o, cl);
    if (ss->size > 1 && !cl->rtt_s) {
        /* links the planner sees: measured RTTs plus a 15% margin (HeadSplit
         * "WiFi needs margins"); worker pairs are estimated through rank 0.
         * A calibrated cluster file has every pair measured: kept. */
        int n = ss->size;
        double *rtt = mi_calloc((size_t)n * n, sizeof(double), "RTT matrix");
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++)
                rtt[a * n + b] = a == b ? 0.0 : a == 0 ? ss->rtt_s[b] : b == 0 ? ss->rtt_s[a]
                                                     : 0.5 * (ss->rtt_s[a] + ss->rtt_s[b]);
        mi_cluster_set_rtt(cl, rtt, 0.15);
        free(rtt);
    }
    return 0;
}

/* Options that cannot go together, refused before any planning. Sets the
 * KV positions the first placement budgets (*kvpos). */
static int check_placement_options(const mi_session *ss, const session_opts *o, int *kvpos, char *err)
{
    if (o->replan && o->plan_file)
        return mi_set_error(err, "--replan needs a planner: it cannot re-make a --plan-file placement");
    if (o->plan_file && (o->placement_opts || o->controller_works >= 0 || o->kv_positions || o->wire_set ||
                         o->prune_set || o->split_vocab))
        return mi_set_error(err, "--plan-file fixes the placement: --planner, --plan-seed, --controller-works, "
                                 "--kv-positions, --wire-dtype, --prune and --split-vocab belong to `meshinfer plan` "
                                 "when the plan is made");
    if (o->split_vocab && (!strcmp(o->planner, "somegather") || ss->cfg.family == MI_FAMILY_PATCHTST))
        return mi_set_error(err, "--split-vocab splits the token embeddings by vocabulary rows for the head-level "
                                 "planners of a language model (%s)", ss->cfg.family == MI_FAMILY_PATCHTST
                                 ? "a time-series model has patches, not tokens"
                                 : "somegather already holds them by columns on every rank");
    if (o->phase_plans && (o->plan_file || (strcmp(o->planner, "hybrid") && strcmp(o->planner, "auto"))))
        return mi_set_error(err, "--phase-plans applies to --planner hybrid (the one planner that places the phases "
                                 "apart) and to --planner auto when it picks hybrid");
    int sg = !o->plan_file && !strcmp(o->planner, "somegather");
    if (!o->plan_file && !sg && o->prune_set)
        return mi_set_error(err, "--prune and --prune-mode apply to --planner somegather (CATS's exchanges)");
    if (sg && o->speculate)
        return mi_set_error(err, "--speculate needs a head-level planner: somegather has no projection rank to "
                                 "speculate from");
    *kvpos = o->kv_positions;
    if (*kvpos > ss->cfg.seq_len)
        return mi_set_error(err, "--kv-positions %d is more than the model's context (%d)", *kvpos, ss->cfg.seq_len);
    if (!*kvpos && o->replan)
        *kvpos = ss->cfg.seq_len / 4 > 0 ? ss->cfg.seq_len / 4 : 1;
    return 0;
}

/* The logit candidates per classifier slice the sampler needs, at most the
 * vocabulary: --top-k past it means every token, as llama.cpp clamps it. */
static int logit_candidates(const session_opts *o, const mi_config *c)
{
    return o->logits_k > c->vocab_size ? c->vocab_size : o->logits_k;
}

/* --plan-file: the saved placement, for this job's ranks, within budgets. */
static int load_plan_file(mi_session *ss, const session_opts *o, const mi_cluster *cl, char *err)
{
    int rc = mi_plan_load_json(o->plan_file, &ss->cfg, &ss->plan, err);
    char differ[256] = "";
    for (int x = 0, n = 0; !rc && ss->plan.planner == MI_PLANNER_SOMEGATHER && x < MI_N_PRUNED_XCH; x++)
        if (fabs(session_unsent_fraction(&ss->plan, x) - ss->plan.prune[x]) > 0.05)
            n += snprintf(differ + n, sizeof differ - (size_t)n, "%s%s %.2f (lists %.2f)", n ? ", " : "",
                          mi_xch_name(x), ss->plan.prune[x], session_unsent_fraction(&ss->plan, x));
    if (differ[0]) /* a hand-edited file: say what will really run */
        mi_warn("plan file %s: prune.ratio disagrees with the send lists, which are what runs: %s", o->plan_file,
                differ);
    if (!rc && ss->plan.n_ranks != ss->size) {
        rc = mi_set_error(err, "plan file %s is for %d ranks but the job has %d (start it with mpirun -np %d)",
                          o->plan_file, ss->plan.n_ranks, ss->size, ss->plan.n_ranks);
        mi_plan_free(&ss->plan);
    }
    if (!rc) /* not a placement: what this command's sampler needs */
        ss->plan.logits_k = logit_candidates(o, &ss->cfg);
    if (!rc && mi_plan_validate(&ss->plan, cl, err)) {
        rc = -1;
        mi_plan_free(&ss->plan);
    }
    return rc;
}

/* --ppl-budget with --somegather-quality: the largest pruning ratio whose
 * measured perplexity on this rank count is within the budget, into po. */
static int somegather_budget(mi_session *ss, const char *path, const session_opts *o, mi_plan_options *po,
                             double *ppl, double *ppl0, char *err)
{
    if ((o->ppl_budget >= 0) != (o->sg_quality != NULL))
        return mi_set_error(err, "--ppl-budget and --somegather-quality go together (the budget is judged on the "
                                 "file's measured perplexities)");
    if (!o->sg_quality)
        return 0;
    if (strcmp(o->planner, "auto"))
        return mi_set_error(err, "--ppl-budget chooses somegather's pruning for --planner auto (give --prune R with "
                                 "--planner somegather)");
    mi_sg_quality q;
    if (mi_sg_quality_load(o->sg_quality, &ss->cfg, &q, err))
        return -1;
    if (q.ranks != ss->size)
        return mi_set_error(err, "somegather quality file %s was measured on %d ranks but the job has %d "
                                 "(pruning keeps different columns on another rank count)", o->sg_quality, q.ranks,
                            ss->size);
    po->prune = mi_sg_quality_best(&q, o->ppl_budget / 100, ppl);
    po->weights_path = path;
    *ppl0 = q.perplexity[0];
    return 0;
}

/* --planner auto: every scheme predicted for this cluster, the fastest that
 * fits goes into po, and the comparison is said on stderr. */
static int auto_planner(mi_session *ss, const session_opts *o, const mi_cluster *cl, mi_plan_options *po,
                        double sg_ppl, double sg_ppl0, char *err)
{
    int np = o->auto_prompt, ns = o->auto_steps;
    mi_request_defaults(ss->cfg.seq_len, &np, &ns);
    mi_compare_row rows[MI_COMPARE_MAX];
    int n_rows = 0, best = mi_plan_compare(&ss->cfg, cl, po, np, ns, ss->max_T, rows, &n_rows);
    if (best < 0)
        return mi_set_error(err, "--planner auto: no scheme fits this cluster (%s: %s)",
                            mi_planner_name(rows[0].planner), rows[0].why);
    po->planner = rows[best].planner;
    fprintf(stderr, "meshinfer: --planner auto: %s (predicted TTFT %.1f ms, TPOT %.2f ms for %d + %d tokens);",
            mi_planner_name(po->planner), rows[best].ttft_s * 1e3, rows[best].tpot_s * 1e3, np, ns);
    if (o->sg_quality)
        fprintf(stderr, " somegather at r = %g (measured perplexity %.3f, %+.1f%%; budget %g%%);", po->prune, sg_ppl,
                100 * (sg_ppl / sg_ppl0 - 1), o->ppl_budget);
    for (int i = 0; i < n_rows; i++)
        if (i != best && rows[i].fits)
            fprintf(stderr, " %s %.2fx", mi_planner_name(rows[i].planner), rows[i].total_s / rows[best].total_s);
        else if (i != best)
            fprintf(stderr, " %s does not fit", mi_planner_name(rows[i].planner));
    fprintf(stderr, "\n");
    return 0;
}

/* Voltron's phases: a hybrid plan's prefill placement, planned apart and
 * kept only when it differs (or --phase-plans says which serves both). */
static void hybrid_prefill(mi_session *ss, const session_opts *o, const mi_cluster *cl, const mi_plan_options *po)
{
    mi_plan_options pp = *po;
    pp.prefill = 1;
    pp.prefill_T = ss->max_T < ss->cfg.seq_len ? ss->max_T : ss->cfg.seq_len;
    char perr[MI_ERRLEN];
    if (mi_plan_make(&ss->cfg, cl, &pp, &ss->phases.plan_prefill, perr)) {
        /* the prefill packing can fail where the decode one fits: one placement serves both */
        fprintf(stderr, "meshinfer: hybrid: the decode placement serves both phases (no prefill placement: %s)\n",
                perr);
    } else if (mi_plan_same_placement(&ss->plan, &ss->phases.plan_prefill) || o->phase_plans == 1) {
        mi_plan_free(&ss->phases.plan_prefill);
    } else if (o->phase_plans == 2) {
        mi_plan_free(&ss->plan); /* the prefill placement for both phases */
        ss->plan = ss->phases.plan_prefill;
        memset(&ss->phases.plan_prefill, 0, sizeof ss->phases.plan_prefill);
    } else {
        ss->phases.has_prefill_plan = 1;
    }
}

/* The planner's placement (--planner NAME or auto), with speculation's
 * profiled acceptance and the KV positions to budget. */
static int make_plan(mi_session *ss, const char *path, const session_opts *o, const mi_cluster *cl, int kvpos,
                     char *err)
{
    int rc = 0;
    double *acc = NULL;
    if (o->spec_profile) {
        acc = mi_calloc((size_t)ss->cfg.n_layers, sizeof(double), "acceptance");
        rc = session_load_profile(o->spec_profile, &ss->cfg, o->tolerance, acc, err);
    }
    mi_plan_options po = {MI_PLANNER_GREEDY, o->plan_seed, o->controller_works, o->speculate, acc,
                          o->min_acceptance, kvpos, o->wire, 0, 0, 0, NULL, o->split_vocab,
                          logit_candidates(o, &ss->cfg)};
    mi_planner_parse(o->planner, &po.planner);
    double sg_ppl = 0, sg_ppl0 = 0;
    if (!rc)
        rc = somegather_budget(ss, path, o, &po, &sg_ppl, &sg_ppl0, err);
    if (!rc && !strcmp(o->planner, "auto"))
        rc = auto_planner(ss, o, cl, &po, sg_ppl, sg_ppl0, err);
    if (!rc)
        rc = mi_plan_make(&ss->cfg, cl, &po, &ss->plan, err);
    if (!rc && po.planner == MI_PLANNER_HYBRID)
        hybrid_prefill(ss, o, cl, &po);
    ss->po = po;
    ss->acc = acc;
    return rc;
}

/* What the options add to a placement: somegather's send lists (pruning, or
 * a time-series model's trained masks), speculation marks on a plan file,
 * the importance file and the FFN shards it prunes. */
static int plan_extras(mi_session *ss, const char *path, const session_opts *o, const mi_cluster *cl, char *err)
{
    int rc = 0, series = ss->cfg.family == MI_FAMILY_PATCHTST;
    if (!o->plan_file && ss->plan.planner == MI_PLANNER_SOMEGATHER && o->prune_set)
        rc = mi_plan_prune(&ss->plan, path, o->prune, o->prune_mode, err);
    else if (series && ss->plan.planner == MI_PLANNER_SOMEGATHER) {
        /* the columns the model was trained to send (CATS §4.2) */
        int trained = 0, has = mi_plan_keep_from_model(&ss->plan, path, &trained, err);
        rc = has < 0 ? -1 : 0;
        if (has == 1 && trained != ss->size)
            mi_warn("%s was trained for %d devices and runs on %d: its pruning masks apply, but its columns were "
                    "ranked for the other split", path, trained, ss->size);
    }
    if (!rc && o->loss_set && ss->plan.planner != MI_PLANNER_SOMEGATHER)
        rc = mi_set_error(err, "--loss, --loss-mode and --loss-seed apply to somegather's allgather exchanges "
                               "(--planner somegather)");
    /* a placement that splits every projection (tp) or has none (somegather) cannot speculate: --planner
     * auto's choice or a plan file's planner would drop --speculate silently */
    if (!rc && o->speculate && (ss->plan.planner == MI_PLANNER_TP || ss->plan.planner == MI_PLANNER_SOMEGATHER))
        rc = mi_set_error(err, "--speculate needs a layer's projection on one rank: the placement that runs (%s%s) "
                               "has none", mi_planner_name(ss->plan.planner),
                          o->plan_file ? ", from the plan file" : ", chosen by --planner auto");
    if (!rc && o->plan_file && o->speculate) {
        /* the profile's acceptance marks the saved placement as it does a planner's */
        double *acc = NULL;
        if (o->spec_profile) {
            acc = mi_calloc((size_t)ss->cfg.n_layers, sizeof(double), "acceptance");
            rc = session_load_profile(o->spec_profile, &ss->cfg, o->tolerance, acc, err);
        }
        if (!rc)
            mi_plan_mark_speculation(&ss->plan, cl, acc, o->min_acceptance);
        free(acc);
    }
    if (!rc && o->importance) {
        ss->scaling.imp = mi_malloc(sizeof *ss->scaling.imp, "importance");
        rc = mi_importance_load(o->importance, &ss->cfg, ss->scaling.imp, err);
    }
    if (!rc && o->prune_ffn > 0) {
        rc = session_prune_ffn(&ss->plan, ss->scaling.imp, o->prune_ffn, err);
        if (!rc && ss->phases.has_prefill_plan)
            rc = session_prune_ffn(&ss->phases.plan_prefill, ss->scaling.imp, o->prune_ffn, err);
    }
    return rc;
}

/* The plans' programs, hybrid's phases kept apart only when the prompt's
 * predicted gain pays for the two re-placements, the cost model's view, and
 * --energy's DVFS levels. */
static int compile_and_predict(mi_session *ss, const session_opts *o, const mi_cluster *cl, char *err)
{
    ss->plan_ms = ss->plan.plan_seconds * 1e3;
    int rc = mi_programs_compile(&ss->plan, &ss->prog, err);
    if (!rc && ss->phases.has_prefill_plan)
        rc = mi_programs_compile(&ss->phases.plan_prefill, &ss->phases.prog_prefill, err);
    if (!rc && ss->phases.has_prefill_plan && o->phase_plans == 0) {
        double gain = 0, sw = 0;
        int np = o->auto_prompt > 0 ? o->auto_prompt : 32;
        if (!mi_plan_phases_pay(&ss->plan, &ss->prog, &ss->phases.plan_prefill, &ss->phases.prog_prefill, cl, np, ss->max_T,
                                &gain, &sw)) {
            if (gain > 0)
                fprintf(stderr, "meshinfer: hybrid: one placement for both phases (the prefill placement would "
                                "gain %.1f ms of TTFT for a prompt of about %d tokens but re-placing costs %.1f "
                                "ms; --phase-plans both forces it)\n", gain * 1e3, np, sw * 1e3);
            else
                fprintf(stderr, "meshinfer: hybrid: one placement for both phases (the prefill placement would "
                                "gain no TTFT for a prompt of about %d tokens)\n", np);
            mi_programs_free(&ss->phases.prog_prefill);
            mi_plan_free(&ss->phases.plan_prefill);
            ss->phases.has_prefill_plan = 0;
        }
    }
    if (!rc)
        mi_predict(&ss->plan, &ss->prog, cl, ss->cfg.seq_len / 2, &ss->pred);
    session_memory_of_plan(ss);
    if (!rc && o->energy) {
        /* Voltron §4.4: the margin under the target, with room for noise, goes to lower levels */
        rc = mi_energy_plan(&ss->plan, &ss->prog, cl, ss->cfg.seq_len / 2, 0.9 * o->tpot_ms / 1e3, &ss->power.en, err);
        if (!rc) {
            ss->power.energy = 1;
            memcpy(ss->power.freq, ss->power.en.freq, sizeof ss->power.freq);
            fprintf(stderr, "meshinfer: energy: DVFS levels");
            for (int r = 0; r < cl->n_devices; r++)
                fprintf(stderr, " %s %.2f", cl->dev[r].name, ss->power.freq[r]);
            fprintf(stderr, "; predicted %.3f J and %.2f ms per token (%.3f J and %.2f ms at top frequencies; "
                            "chosen in %.2f ms)\n", ss->power.en.joules, ss->power.en.token_s * 1e3, ss->power.en.top_joules,
                    ss->power.en.top_token_s * 1e3, ss->power.en.seconds * 1e3);
        }
    }
    return rc;
}

/* Rank 0's set-up: the model, the cluster, the placement (a plan file or a
 * planner) and what the options add to it, its programs and predictions. */
static int controller_setup(mi_session *ss, const char *path, const session_opts *o, char *err)
{
    if (open_model(ss, path, o, err))
        return -1;
    mi_cluster cl;
    if (job_cluster(ss, o, &cl, err))
        return -1;
    int kvpos = 0;
    if (check_placement_options(ss, o, &kvpos, err)) {
        mi_cluster_free(&cl);
        return -1;
    }
    ss->memory.from_plan_file = o->plan_file != NULL;
    int rc = o->plan_file ? load_plan_file(ss, o, &cl, err) : make_plan(ss, path, o, &cl, kvpos, err);
    if (!rc)
        rc = plan_extras(ss, path, o, &cl, err);
    if (!rc)
        rc = compile_and_predict(ss, o, &cl, err);
    if (!rc && o->explain)
        explain_run(ss);
    ss->cl = cl;
    ss->memory.replan = o->replan;
    ss->memory.kv_positions0 = ss->plan.kv_positions;
    ss->scaling.tpot_target_s = o->tpot_ms / 1e3;
    ss->scaling.hold = 16;
    ss->scaling.poll_k = -1;
    ss->scaling.token_ms = mi_calloc(SESSION_MAX_TOKENS, sizeof(float), "token times");
    ss->scaling.undo = mi_calloc(SESSION_MAX_DECISIONS, sizeof *ss->scaling.undo, "scaling decisions");
    return rc;
}

void session_open(mi_session *ss, const char *cmd, const char *path, const session_opts *o, int chunk, int threads)
{
    memset(ss, 0, sizeof *ss);
    ss->rank = mi_world_rank();
    ss->size = mi_world_size();
    ss->max_T = chunk; /* what the planners judge a prefill pass by; clamped to the context below */
    mi_set_threads(threads);
    double t0 = mi_now();
    char err[MI_ERRLEN] = "";
    int failed = 0;
    if (ss->rank == 0 && ss->size > MI_MAX_RANKS)
        failed = mi_set_error(err, "%d ranks is more than the %d meshinfer supports", ss->size, MI_MAX_RANKS);
    /* a GGUF file or Hugging Face folder runs from its converted copy */
    static char resolved[4096];
    if (ss->rank == 0 && !failed)
        failed = session_resolve_model(path, 0, resolved, sizeof resolved, err) != 0;
    mi_check_all(failed, err);
    if (ss->size > 1 && ss->size <= MI_MAX_RANKS)
        mi_world_bcast(resolved, sizeof resolved);
    path = ss->model_file = resolved;
    if (ss->size > 1 && ss->size <= MI_MAX_RANKS) {
        mi_world_rtt(ss->rtt_s); /* HeadSplit: "measure round-trip times at startup" */
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        if (ss->rank == 0)
            ss->hosts = mi_calloc((size_t)ss->size, sizeof *ss->hosts, "host names");
        mi_world_gather(host, sizeof host, ss->hosts);
    }
    if (ss->rank == 0 && ss->size <= MI_MAX_RANKS)
        failed = controller_setup(ss, path, o, err) != 0;
    mi_check_all(failed, err);
    /* ship the config and the plan to the workers */
    size_t n = 0;
    /* a hybrid run starts on its prefill plan (a prompt comes first) */
    ss->phases.installed_prefill = ss->phases.has_prefill_plan;
    int *buf = ss->rank == 0 ? mi_plan_serialize(ss->phases.has_prefill_plan ? &ss->phases.plan_prefill : &ss->plan, &n) : NULL;
    long nl = (long)n;
    if (ss->size > 1) {
        mi_world_bcast(&ss->cfg, sizeof ss->cfg);
        mi_world_bcast(&nl, sizeof nl);
        if (ss->rank != 0)
            buf = mi_malloc((size_t)nl * sizeof(int), "plan buffer");
        mi_world_bcast(buf, (size_t)nl * sizeof(int));
    }
    /* every rank's DVFS level (1 unless --energy chose lower), emulated by stretching compute */
    if (ss->rank == 0 && !ss->power.energy)
        for (int r = 0; r < MI_MAX_RANKS; r++)
            ss->power.freq[r] = 1.0;
    mi_world_bcast(ss->power.freq, sizeof ss->power.freq);
    mi_slowdown_set_freq(ss->power.freq[ss->rank < MI_MAX_RANKS ? ss->rank : 0]);
    mi_plan plan;
    failed = mi_plan_deserialize(buf, (size_t)nl, &ss->cfg, &plan, err) != 0;
    free(buf);
    mi_check_all(failed, err);
    /* spin on fast links, sleep between tests on slow ones (runtime.h spin_s):
     * the slowest round trip measured at start-up decides, on every rank */
    double rtt_max = 0;
    for (int r = 0; r < ss->size; r++)
        if (ss->rtt_s[r] > rtt_max)
            rtt_max = ss->rtt_s[r];
    mi_world_bcast(&rtt_max, sizeof rtt_max);
    mi_runtime_options ro = {.model_path = path, .scatter = o->scatter, .max_T = chunk, .trace = o->trace != NULL,
                             .tolerance = o->tolerance, .loss_mode = o->loss_mode, .loss = o->loss,
                             .loss_seed = o->loss_seed, .spin_s = mi_runtime_spin_for(rtt_max)};
    ss->max_T = chunk < ss->cfg.seq_len ? chunk : ss->cfg.seq_len;
    ss->loss_mode = o->loss_mode;
    ss->loss = o->loss;
    ss->loss_seed = o->loss_seed;
    /* rank 0 hands the runtime the programs it compiled; the workers compile the plan they got */
    const mi_programs *prog = ss->rank != 0 ? NULL : ss->phases.installed_prefill ? &ss->phases.prog_prefill : &ss->prog;
    ss->rt = mi_runtime_create(&plan, prog, &ro);
    mi_plan_free(&plan);
    /* what each device computes per second, for the calibrated prediction
     * (the cost model with measured rates and round trips, no margins) */
    if (ss->size > 1) {
        mi_runtime_stream_rate(ss->rt, 0.03, ss->stream_rate, ss->stream_rate_cpu);
        double q[2];
        q[0] = mi_cgroup_self_cpu(&q[1]); /* reported beside the rate (the simulator's quota) */
        mi_world_gather(q, sizeof q, ss->cpu_quota);
    }
    ss->load_seconds = mi_now() - t0;
    if (ss->rank == 0 && ss->cfg.synthetic)
        fprintf(stderr, "meshinfer: %s: %s has synthetic weights (seeded random): %s are meaningless, speed "
                        "figures are valid\n", cmd, path,
                ss->cfg.family == MI_FAMILY_PATCHTST ? "its forecasts" : "text and perplexity");
}

void session_close(mi_session *ss, const session_opts *o)
{
    char err[MI_ERRLEN] = "";
    /* collective; a failure here (a full disk) still ends the job with one line and exit 1 */
    if (o->trace && mi_runtime_write_trace(ss->rt, o->trace, err) != 0)
        mi_fatal("%s", err);
    mi_runtime_free(ss->rt);
    if (ss->rank == 0) {
        mi_tokenizer_free(&ss->tok);
        free(ss->chat_template);
        ss->chat_template = NULL;
        mi_programs_free(&ss->prog);
        mi_plan_free(&ss->plan);
        if (ss->phases.has_prefill_plan) {
            mi_programs_free(&ss->phases.prog_prefill);
            mi_plan_free(&ss->phases.plan_prefill);
        }
        mi_cluster_free(&ss->cl);
        free(ss->acc);
        free(ss->hosts);
        free(ss->scaling.token_ms);
        free(ss->scaling.undo);
        free(ss->scaling.imp);
    }
}

int *session_encode_prompt(mi_session *ss, const char *prompt, int *n)
{
    char err[MI_ERRLEN] = "", msg[MI_ERRLEN + 16] = "";
    int failed = 0, *ids = NULL;
    *n = 0;
    if (ss->rank == 0) {
        if (!prompt || !*prompt) {
            failed = 1;
            snprintf(msg, sizeof msg, "prompt is empty (give some text with -p)");
        } else {
            ids = mi_malloc((strlen(prompt) + 3) * sizeof(int), "prompt tokens");
            *n = mi_tokenizer_encode(&ss->tok, prompt, 1, ids, err);
            int ctx = ss->cfg.seq_len, beyond = -1;
            for (int i = 0; i < *n && beyond < 0; i++) /* an added token past the embeddings (import.c) */
                beyond = ids[i] >= ss->cfg.vocab_size ? ids[i] : -1;
            if (*n <= 0) {
                failed = 1;
                snprintf(msg, sizeof msg, "prompt: %s", *n < 0 ? err : "the text gives no tokens");
            } else if (beyond >= 0) {
                failed = 1;
                snprintf(msg, sizeof msg, "prompt: token %d ('%.40s') has no embedding row in this model (%d rows)",
                         beyond, ss->tok.pieces[beyond], ss->cfg.vocab_size);
            } else if (*n >= ctx) {
                failed = 1;
                snprintf(msg, sizeof msg,
                         "prompt is %d tokens (with BOS) but the model's context is %d tokens; shorten it to at "
                         "most %d tokens", *n, ctx, ctx - 1);
            }
        }
    }
    mi_check_all(failed, msg);
    return ids;
}

/* A number of obj[key] that is finite and within [lo, hi] (whole when
 * whole): 0, or -1 with "<prefix>: <where>key must be ..." in err. */
static int profile_number(const cJSON *obj, const char *key, double lo, double hi, int whole, const char *prefix,
                          const char *where, double *out, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi ||
        (whole && v->valuedouble != floor(v->valuedouble))) {
        if (lo == hi)
            return mi_set_error(err, "%s: %s%s must be %g", prefix, where, key, lo);
        return mi_set_error(err, "%s: %s%s must be %s from %g to %g", prefix, where, key,
                            whole ? "a whole number" : "a number", lo, hi);
    }
    *out = v->valuedouble;
    return 0;
}

/* Index of percentile q among n sorted ratios, as `meshinfer profile` picks it. */
static size_t percentile_index(int q, double n)
{
    return (size_t)((double)q / 100.0 * (n - 1) + 0.5);
}

/* One transition l of a profile: its keys, layers, percentiles (101 finite,
 * non-negative, non-decreasing) and the summary the writer derived from them
 * (mean within the extremes, acceptance at the file's tolerance agreeing with
 * the percentiles), so a hand-edited list cannot change what speculates. */
static int profile_transition(const cJSON *t, int l, double n_pos, double tol, const char *prefix, double *pct,
                              char *err)
{
    static const char *const keys[] = {"from_layer", "to_layer", "acceptance", "mean_ratio", "expected_saving_ms",
                                       "speculate", "ratio_percentiles", NULL};
    char where[48];
    snprintf(where, sizeof where, "transitions[%d]", l);
    if (!cJSON_IsObject(t))
        return mi_set_error(err, "%s: %s must be an object", prefix, where);
    if (mi_json_check_keys(t, keys, prefix, where, err))
        return -1;
    strcat(where, ".");
    double from = 0, to = 0, acc = 0, mean = 0, saving = 0;
    if (profile_number(t, "from_layer", l, l, 1, prefix, where, &from, err) ||
        profile_number(t, "to_layer", l + 1, l + 1, 1, prefix, where, &to, err) ||
        profile_number(t, "acceptance", 0, 1, 0, prefix, where, &acc, err) ||
        profile_number(t, "mean_ratio", 0, 1e300, 0, prefix, where, &mean, err) ||
        profile_number(t, "expected_saving_ms", -1e300, 1e300, 0, prefix, where, &saving, err))
        return -1;
    if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(t, "speculate")))
        return mi_set_error(err, "%s: %sspeculate must be true or false", prefix, where);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(t, "ratio_percentiles");
    if (!cJSON_IsArray(q) || cJSON_GetArraySize(q) != 101)
        return mi_set_error(err, "%s: %sratio_percentiles must hold 101 numbers", prefix, where);
    int k = 0;
    for (const cJSON *v = q->child; v; v = v->next, k++) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
            return mi_set_error(err, "%s: %sratio_percentiles[%d] must be a finite number >= 0 (a ratio of norms)",
                                prefix, where, k);
        pct[k] = v->valuedouble;
        if (k && pct[k] < pct[k - 1])
            return mi_set_error(err, "%s: %sratio_percentiles[%d] (%g) is below ratio_percentiles[%d] (%g): "
                                "percentiles never decrease", prefix, where, k, pct[k], k - 1, pct[k - 1]);
    }
    if (pct[100] == 0)
        return mi_set_error(err, "%s: %sratio_percentiles are all 0 (the FFN would add nothing at any position): "
                            "not a measured profile", prefix, where);
    /* the percentiles are printed to 6 digits: slack of a part in 1e5 */
    if (mean < pct[0] * (1 - 1e-5) || mean > pct[100] * (1 + 1e-5))
        return mi_set_error(err, "%s: %smean_ratio %g is outside its percentiles' range [%g, %g]", prefix, where,
                            mean, pct[0], pct[100]);
    /* the share of ratios below the tolerance lies between the counts the
     * percentiles bound; one position of slack for the 6-digit rounding */
    int below = -1;
    for (k = 0; k <= 100; k++)
        if (pct[k] < tol)
            below = k;
    double lo = below < 0 ? 0 : (double)percentile_index(below, n_pos) + 1,
           hi = below == 100 ? n_pos : (double)percentile_index(below + 1, n_pos);
    if (acc * n_pos < lo - 1.5 || acc * n_pos > hi + 1.5)
        return mi_set_error(err, "%s: %sacceptance %g disagrees with its percentiles at tolerance %g (they give "
                            "%.5f to %.5f)", prefix, where, acc, tol, lo / n_pos, hi / n_pos);
    return 0;
}

int session_load_profile(const char *path, const mi_config *c, double tolerance, double *acc, char *err)
{
    char prefix[4200];
    cJSON *root = mi_json_load(path, "speculation profile", 16L << 20, prefix, sizeof prefix, err);
    if (!root)
        return -1;
    static const char *const keys[] = {"model",          "synthetic_weights", "corpus",  "positions",
                                       "n_layers",       "tolerance",         "min_acceptance", "planner",
                                       "n_ranks",        "transitions",       NULL};
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        mi_set_error(err, "%s: not a speculation profile (an object written by meshinfer profile --out)", prefix);
        goto out;
    }
    if (mi_json_check_keys(root, keys, prefix, "", err))
        goto out;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *syn = cJSON_GetObjectItemCaseSensitive(root, "synthetic_weights");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(root, "n_layers");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "transitions");
    if (!cJSON_IsString(name) || !cJSON_IsBool(syn) || !cJSON_IsNumber(nl) || !cJSON_IsArray(tr)) {
        mi_set_error(err, "%s: a speculation profile needs 'model', 'synthetic_weights' (true or false), "
                          "'n_layers' and 'transitions' (write one with meshinfer profile --out)", prefix);
        goto out;
    }
    /* compared as the number it is: cJSON's valueint would truncate 6.5 to 6 */
    if (strcmp(name->valuestring, c->name) || nl->valuedouble != c->n_layers) {
        mi_set_error(err, "%s is for %s (%g layers) but the model is %s (%d layers)", prefix,
                     name->valuestring, nl->valuedouble, c->name, c->n_layers);
        goto out;
    }
    if (cJSON_IsTrue(syn) != (c->synthetic != 0)) {
        mi_set_error(err, "%s was measured on %s weights but the model's are %s: acceptance carries over only to "
                          "the weights it was measured on", prefix, cJSON_IsTrue(syn) ? "synthetic" : "real",
                     c->synthetic ? "synthetic" : "real");
        goto out;
    }
    if (cJSON_GetArraySize(tr) != c->n_layers - 1) {
        mi_set_error(err, "%s: 'transitions' holds %d entries but a model of %d layers has %d transitions (layer l "
                          "to l+1)", prefix, cJSON_GetArraySize(tr), c->n_layers, c->n_layers - 1);
        goto out;
    }
    const cJSON *corpus = cJSON_GetObjectItemCaseSensitive(root, "corpus");
    const cJSON *planner = cJSON_GetObjectItemCaseSensitive(root, "planner");
    if (!cJSON_IsString(corpus) || !cJSON_IsString(planner)) {
        mi_set_error(err, "%s: 'corpus' and 'planner' must be strings", prefix);
        goto out;
    }
    double n_pos, tol, min_acc, n_ranks;
    if (profile_number(root, "positions", 1, 1e15, 1, prefix, "", &n_pos, err) ||
        profile_number(root, "tolerance", 0, 1e9, 0, prefix, "", &tol, err) ||
        profile_number(root, "min_acceptance", 0, 1, 0, prefix, "", &min_acc, err) ||
        profile_number(root, "n_ranks", 1, MI_MAX_RANKS, 1, prefix, "", &n_ranks, err))
        goto out;
    int l = 0;
    double pct[101];
    for (const cJSON *t = tr->child; t; t = t->next, l++) {
        if (profile_transition(t, l, n_pos, tol, prefix, pct, err))
            goto out;
        /* acceptance at any tolerance from the ratio's percentiles */
        int below = -1;
        for (int k = 0; k <= 100; k++)
            if (pct[k] < tolerance)
                below = k;
        acc[l] = below < 0 ? 0.0 : below / 100.0;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

void session_check_candidates(const float *logits, int n, int pos)
{
    int finite = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(logits[i]) || (isinf(logits[i]) && logits[i] > 0))
            mi_fatal("the model produced a non-finite logit (token %d) at position %d: the weights are corrupt or "
                     "overflow fp32", i, pos);
        finite += isfinite(logits[i]) != 0;
    }
    if (!finite)
        mi_fatal("the model produced no finite logit at position %d: the weights are corrupt or overflow fp32", pos);
}

void session_check_output(const mi_session *ss, const float *logits, int n, int pos)
{
    if (ss && ss->plan.logits_k > 0)
        session_check_candidates(logits, n, pos);
    else
        session_check_logits(logits, n, pos);
}

int session_devices_measured(const mi_session *ss)
{
    int measured = 1;
    for (int r = 0; r < ss->size; r++)
        measured &= ss->cl.dev[r].calibrated;
    return measured;
}

void session_check_logits(const float *logits, int n, int pos)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(logits[i]))
            mi_fatal("the model produced a non-finite logit (token %d) at position %d: the weights are corrupt or "
                     "overflow fp32", i, pos);
}

