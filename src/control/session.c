/* Rank 0's controller for the model-running commands (see control.h):
 * start-up, making or loading the plan, the runtime, memory-triggered
 * re-placement, phase switches and the metrics report. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/control.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/kernels.h"
#include "meshinfer/model_file.h"
#include "meshinfer/runtime.h"

#include <cjson/cJSON.h>


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
static double unsent_fraction(const mi_plan *plan, int x)
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
 * is arithmetic only. */
static void memory_of_plan(mi_session *ss)
{
    for (int r = 0; r < ss->plan.n_ranks; r++) {
        ss->mem_w[r] = mi_plan_rank_bytes_at(&ss->plan, r, 0);
        ss->mem_kv[r] = mi_plan_rank_bytes_at(&ss->plan, r, 1) - ss->mem_w[r];
    }
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
    if (ss->has_prefill_plan) {
        fprintf(stderr, "prefill placement:\n");
        mi_programs_explain(&ss->plan_prefill, &ss->prog_prefill, MI_PHASE_PREFILL, stderr);
        fprintf(stderr, "decode placement:\n");
        mi_programs_explain(&ss->plan, &ss->prog, MI_PHASE_DECODE, stderr);
    } else {
        mi_programs_explain(&ss->plan, &ss->prog, -1, stderr);
    }
}

/* Rank 0's part of the set-up; returns 0 or -1 with err set. */
static int controller_setup(mi_session *ss, const char *path, const session_opts *o, char *err)
{
    /* an output is checked before anything is loaded or run (output.h) */
    const char *inputs[] = {path, o->cluster, o->plan_file, o->spec_profile, o->text_input, o->importance,
                            o->sg_quality, o->journal};
    if (o->trace && mi_output_check(o->trace, "trace file", inputs, 8, err))
        return -1;
    if (o->trace && o->journal && mi_same_path(o->trace, o->journal))
        return mi_set_error(err, "%s: --trace and the journal name the same file", o->trace);
    mi_model_file *mf = mi_model_open(path, &ss->cfg, err);
    if (!mf)
        return -1;
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
    mi_model_close(mf);
    if (rc)
        return -1;
    /* the time-series family's output biases join the residual stream where
     * it is whole (exec.c series_bias): on its owner's columns (somegather),
     * on the rank holding the layer (layer-wise), on every copy before the
     * partial sums are reduced into it (tp). The head-level planners reduce
     * FFN slices into one rank's residual, which may hold no slice: refused */
    if (series && (o->plan_file || (strcmp(o->planner, "somegather") && strcmp(o->planner, "layerwise") &&
                                    strcmp(o->planner, "tp"))))
        return mi_set_error(err, "%s is a time-series model (docs/patchtst.md): it runs with --planner somegather, "
                                 "layerwise or tp (not %s)", path, o->plan_file ? "--plan-file" : o->planner);
    if (series && o->speculate)
        return mi_set_error(err, "--speculate applies to language models (seed 000's decode steps)");
    mi_cluster cl;
    if (o->cluster) {
        if (mi_cluster_load(o->cluster, &cl, err))
            return -1;
        if (cl.n_devices != ss->size) {
            if (cl.calib_ranks > 0)
                mi_set_error(err, "cluster file %s was calibrated on %d ranks but the job has %d: run meshinfer "
                                  "calibrate on this job's ranks and hosts", o->cluster, cl.calib_ranks, ss->size);
            else
                mi_set_error(err, "cluster file %s lists %d devices but the job has %d ranks (one rank per device)",
                             o->cluster, cl.n_devices, ss->size);
            mi_cluster_free(&cl);
            return -1;
        }
        /* a calibration describes the devices it ran on, not whatever runs the ranks now */
        for (int r = 0; r < ss->size && cl.calib_ranks > 0; r++)
            if (cl.dev[r].host[0] && ss->hosts && strcmp(cl.dev[r].host, ss->hosts[r])) {
                mi_set_error(err, "cluster file %s was calibrated with rank %d on host '%s' but rank %d runs on '%s': "
                                  "run meshinfer calibrate on this job's hosts", o->cluster, r, cl.dev[r].host, r,
                             ss->hosts[r]);
                mi_cluster_free(&cl);
                return -1;
            }
    } else {
        mi_cluster_default(&cl, ss->size, mem_available() / ss->size);
    }
    describe_planning(ss, o, &cl);
    if (ss->size > 1 && !cl.rtt_s) {
        /* links the planner sees: measured RTTs plus a 15% margin (seed 000
         * "WiFi needs margins"); worker pairs are estimated through rank 0.
         * A calibrated cluster file has every pair measured: kept. */
        int n = ss->size;
        double *rtt = mi_calloc((size_t)n * n, sizeof(double), "RTT matrix");
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++)
                rtt[a * n + b] = a == b ? 0.0 : a == 0 ? ss->rtt_s[b] : b == 0 ? ss->rtt_s[a]
                                                     : 0.5 * (ss->rtt_s[a] + ss->rtt_s[b]);
        mi_cluster_set_rtt(&cl, rtt, 0.15);
        free(rtt);
    }
    if (o->replan && o->plan_file) {
        mi_cluster_free(&cl);
        return mi_set_error(err, "--replan needs a planner: it cannot re-make a --plan-file placement");
    }
    if (o->plan_file && (o->placement_opts || o->controller_works >= 0 || o->kv_positions || o->wire_set ||
                         o->prune_set)) {
        mi_cluster_free(&cl);
        return mi_set_error(err, "--plan-file fixes the placement: --planner, --plan-seed, --controller-works, "
                                 "--kv-positions, --wire-dtype and --prune belong to `meshinfer plan` when the plan "
                                 "is made");
    }
    if (o->phase_plans && (o->plan_file || (strcmp(o->planner, "hybrid") && strcmp(o->planner, "auto")))) {
        mi_cluster_free(&cl);
        return mi_set_error(err, "--phase-plans applies to --planner hybrid (the one planner that places the phases "
                                 "apart) and to --planner auto when it picks hybrid");
    }
    int sg = !o->plan_file && !strcmp(o->planner, "somegather");
    if (!o->plan_file && !sg && o->prune_set) {
        mi_cluster_free(&cl);
        return mi_set_error(err, "--prune and --prune-mode apply to --planner somegather (seed 002's exchanges)");
    }
    if (sg && o->speculate) {
        mi_cluster_free(&cl);
        return mi_set_error(err, "--speculate needs a head-level planner: somegather has no projection rank to "
                                 "speculate from");
    }
    int kvpos = o->kv_positions;
    if (kvpos > ss->cfg.seq_len) {
        mi_cluster_free(&cl);
        return mi_set_error(err, "--kv-positions %d is more than the model's context (%d)", kvpos, ss->cfg.seq_len);
    }
    if (!kvpos && o->replan)
        kvpos = ss->cfg.seq_len / 4 > 0 ? ss->cfg.seq_len / 4 : 1;
    ss->from_plan_file = o->plan_file != NULL;
    if (o->plan_file) {
        rc = mi_plan_load_json(o->plan_file, &ss->cfg, &ss->plan, err);
        char differ[256] = "";
        for (int x = 0, n = 0; !rc && ss->plan.planner == MI_PLANNER_SOMEGATHER && x < MI_N_PRUNED_XCH; x++)
            if (fabs(unsent_fraction(&ss->plan, x) - ss->plan.prune[x]) > 0.05)
                n += snprintf(differ + n, sizeof differ - (size_t)n, "%s%s %.2f (lists %.2f)", n ? ", " : "",
                              mi_xch_name(x), ss->plan.prune[x], unsent_fraction(&ss->plan, x));
        if (differ[0]) /* a hand-edited file: say what will really run */
            mi_warn("plan file %s: prune.ratio disagrees with the send lists, which are what runs: %s", o->plan_file,
                    differ);
        if (!rc && ss->plan.n_ranks != ss->size) {
            rc = mi_set_error(err, "plan file %s is for %d ranks but the job has %d", o->plan_file, ss->plan.n_ranks,
                              ss->size);
            mi_plan_free(&ss->plan);
        }
        if (!rc && mi_plan_validate(&ss->plan, &cl, err)) {
            rc = -1;
            mi_plan_free(&ss->plan);
        }
    } else {
        double *acc = NULL;
        if (o->spec_profile) {
            acc = mi_calloc((size_t)ss->cfg.n_layers, sizeof(double), "acceptance");
            rc = session_load_profile(o->spec_profile, &ss->cfg, o->tolerance, acc, err);
        }
        mi_plan_options po = {MI_PLANNER_GREEDY, o->plan_seed, o->controller_works, o->speculate, acc,
                              o->min_acceptance, kvpos, o->wire, 0, 0, 0, NULL};
        mi_planner_parse(o->planner, &po.planner);
        double sg_ppl = 0, sg_ppl0 = 0;
        if (!rc && (o->ppl_budget >= 0) != (o->sg_quality != NULL))
            rc = mi_set_error(err, "--ppl-budget and --somegather-quality go together (the budget is judged on the "
                                   "file's measured perplexities)");
        else if (!rc && o->sg_quality && strcmp(o->planner, "auto"))
            rc = mi_set_error(err, "--ppl-budget chooses somegather's pruning for --planner auto (give --prune R with "
                                   "--planner somegather)");
        else if (!rc && o->sg_quality) {
            mi_sg_quality q;
            rc = mi_sg_quality_load(o->sg_quality, &ss->cfg, &q, err);
            if (!rc && q.ranks != ss->size)
                rc = mi_set_error(err, "somegather quality file %s was measured on %d ranks but the job has %d "
                                       "(pruning keeps different columns on another rank count)", o->sg_quality,
                                  q.ranks, ss->size);
            if (!rc) {
                po.prune = mi_sg_quality_best(&q, o->ppl_budget / 100, &sg_ppl);
                po.weights_path = path;
                sg_ppl0 = q.perplexity[0];
            }
        }
        if (!rc && !strcmp(o->planner, "auto")) {
            /* issue 10 item 6: every scheme predicted for this cluster, the fastest that fits */
            int np = o->auto_prompt, ns = o->auto_steps;
            mi_request_defaults(ss->cfg.seq_len, &np, &ns);
            mi_compare_row rows[MI_COMPARE_MAX];
            int n_rows = 0, best = mi_plan_compare(&ss->cfg, &cl, &po, np, ns, ss->max_T, rows, &n_rows);
            if (best < 0) {
                rc = mi_set_error(err, "--planner auto: no scheme fits this cluster (%s: %s)",
                                  mi_planner_name(rows[0].planner), rows[0].why);
            } else {
                po.planner = rows[best].planner;
                fprintf(stderr, "meshinfer: --planner auto: %s (predicted TTFT %.1f ms, TPOT %.2f ms for %d + %d "
                                "tokens);", mi_planner_name(po.planner), rows[best].ttft_s * 1e3,
                        rows[best].tpot_s * 1e3, np, ns);
                if (o->sg_quality)
                    fprintf(stderr, " somegather at r = %g (measured perplexity %.3f, %+.1f%%; budget %g%%);",
                            po.prune, sg_ppl, 100 * (sg_ppl / sg_ppl0 - 1), o->ppl_budget);
                for (int i = 0; i < n_rows; i++)
                    if (i != best && rows[i].fits)
                        fprintf(stderr, " %s %.2fx", mi_planner_name(rows[i].planner),
                                rows[i].total_s / rows[best].total_s);
                    else if (i != best)
                        fprintf(stderr, " %s does not fit", mi_planner_name(rows[i].planner));
                fprintf(stderr, "\n");
            }
        }
        if (!rc)
            rc = mi_plan_make(&ss->cfg, &cl, &po, &ss->plan, err);
        if (!rc && po.planner == MI_PLANNER_HYBRID) {
            /* seed 003: prefill planned apart; kept only when it differs */
            mi_plan_options pp = po;
            pp.prefill = 1;
            pp.prefill_T = ss->max_T < ss->cfg.seq_len ? ss->max_T : ss->cfg.seq_len;
            char perr[MI_ERRLEN];
            int prc = mi_plan_make(&ss->cfg, &cl, &pp, &ss->plan_prefill, perr);
            if (prc) { /* the prefill packing can fail where the decode one fits: one placement serves both */
                fprintf(stderr, "meshinfer: hybrid: the decode placement serves both phases (no prefill placement: "
                                "%s)\n", perr);
            } else if (mi_plan_same_placement(&ss->plan, &ss->plan_prefill) || o->phase_plans == 1) {
                mi_plan_free(&ss->plan_prefill);
            } else if (o->phase_plans == 2) {
                mi_plan_free(&ss->plan); /* the prefill placement for both phases */
                ss->plan = ss->plan_prefill;
                memset(&ss->plan_prefill, 0, sizeof ss->plan_prefill);
            } else {
                ss->has_prefill_plan = 1;
            }
        }
        ss->po = po;
        ss->acc = acc;
    }
    if (!rc && !o->plan_file && ss->plan.planner == MI_PLANNER_SOMEGATHER && o->prune_set)
        rc = mi_plan_prune(&ss->plan, path, o->prune, o->prune_mode, err);
    else if (!rc && series && ss->plan.planner == MI_PLANNER_SOMEGATHER) {
        /* the columns the model was trained to send (seed 002 4.2) */
        int trained = 0, has = mi_plan_keep_from_model(&ss->plan, path, &trained, err);
        rc = has < 0 ? -1 : 0;
        if (has == 1 && trained != ss->size)
            mi_warn("%s was trained for %d devices and runs on %d: its pruning masks apply, but its columns were "
                    "ranked for the other split", path, trained, ss->size);
    }
    if (!rc && o->loss_set && ss->plan.planner != MI_PLANNER_SOMEGATHER)
        rc = mi_set_error(err, "--loss, --loss-mode and --loss-seed apply to somegather's allgather exchanges "
                               "(--planner somegather)");
    if (!rc && o->plan_file && o->speculate)
        mi_plan_mark_speculation(&ss->plan, &cl, NULL, o->min_acceptance);
    if (!rc && o->importance) {
        ss->imp = mi_malloc(sizeof *ss->imp, "importance");
        rc = mi_importance_load(o->importance, &ss->cfg, ss->imp, err);
    }
    if (!rc && o->prune_ffn > 0) {
        rc = session_prune_ffn(&ss->plan, ss->imp, o->prune_ffn, err);
        if (!rc && ss->has_prefill_plan)
            rc = session_prune_ffn(&ss->plan_prefill, ss->imp, o->prune_ffn, err);
    }
    if (!rc) {
        ss->plan_ms = ss->plan.plan_seconds * 1e3;
        rc = mi_programs_compile(&ss->plan, &ss->prog, err);
        if (!rc && ss->has_prefill_plan)
            rc = mi_programs_compile(&ss->plan_prefill, &ss->prog_prefill, err);
        if (!rc && ss->has_prefill_plan && o->phase_plans == 0) {
            /* apart only when the prompt's predicted gain pays for the two re-placements */
            double gain = 0, sw = 0;
            int np = o->auto_prompt > 0 ? o->auto_prompt : 32;
            if (!mi_plan_phases_pay(&ss->plan, &ss->prog, &ss->plan_prefill, &ss->prog_prefill, &cl, np, ss->max_T,
                                    &gain, &sw)) {
                if (gain > 0)
                    fprintf(stderr, "meshinfer: hybrid: one placement for both phases (the prefill placement would "
                                    "gain %.1f ms of TTFT for a prompt of about %d tokens but re-placing costs %.1f "
                                    "ms; --phase-plans both forces it)\n", gain * 1e3, np, sw * 1e3);
                else
                    fprintf(stderr, "meshinfer: hybrid: one placement for both phases (the prefill placement would "
                                    "gain no TTFT for a prompt of about %d tokens)\n", np);
                mi_programs_free(&ss->prog_prefill);
                mi_plan_free(&ss->plan_prefill);
                ss->has_prefill_plan = 0;
            }
        }
        if (!rc)
            mi_predict(&ss->plan, &ss->prog, &cl, ss->cfg.seq_len / 2, &ss->pred);
        memory_of_plan(ss);
        if (!rc && o->energy) {
            /* seed 003 4.4: the margin under the target, with room for noise, goes to lower levels */
            rc = mi_energy_plan(&ss->plan, &ss->prog, &cl, ss->cfg.seq_len / 2, 0.9 * o->tpot_ms / 1e3, &ss->en, err);
            if (!rc) {
                ss->energy = 1;
                memcpy(ss->freq, ss->en.freq, sizeof ss->freq);
                fprintf(stderr, "meshinfer: energy: DVFS levels");
                for (int r = 0; r < cl.n_devices; r++)
                    fprintf(stderr, " %s %.2f", cl.dev[r].name, ss->freq[r]);
                fprintf(stderr, "; predicted %.3f J and %.2f ms per token (%.3f J and %.2f ms at top frequencies; "
                                "chosen in %.2f ms)\n", ss->en.joules, ss->en.token_s * 1e3, ss->en.top_joules,
                        ss->en.top_token_s * 1e3, ss->en.seconds * 1e3);
            }
        }
    }
    if (!rc && o->explain)
        explain_run(ss);
    ss->cl = cl;
    ss->replan = o->replan;
    ss->kv_positions0 = ss->plan.kv_positions;
    ss->tpot_target_s = o->tpot_ms / 1e3;
    ss->hold = 16;
    ss->poll_k = -1;
    ss->token_ms = mi_calloc(SESSION_MAX_TOKENS, sizeof(float), "token times");
    ss->undo = mi_calloc(SESSION_MAX_DECISIONS, sizeof *ss->undo, "scaling decisions");
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
    if (ss->size > 1 && ss->size <= MI_MAX_RANKS) {
        mi_world_rtt(ss->rtt_s); /* seed 000: "measure round-trip times at startup" */
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
    ss->installed_prefill = ss->has_prefill_plan;
    int *buf = ss->rank == 0 ? mi_plan_serialize(ss->has_prefill_plan ? &ss->plan_prefill : &ss->plan, &n) : NULL;
    long nl = (long)n;
    if (ss->size > 1) {
        mi_world_bcast(&ss->cfg, sizeof ss->cfg);
        mi_world_bcast(&nl, sizeof nl);
        if (ss->rank != 0)
            buf = mi_malloc((size_t)nl * sizeof(int), "plan buffer");
        mi_world_bcast(buf, (size_t)nl * sizeof(int));
    }
    /* every rank's DVFS level (1 unless --energy chose lower), emulated by stretching compute */
    if (ss->rank == 0 && !ss->energy)
        for (int r = 0; r < MI_MAX_RANKS; r++)
            ss->freq[r] = 1.0;
    mi_world_bcast(ss->freq, sizeof ss->freq);
    mi_slowdown_set_freq(ss->freq[ss->rank < MI_MAX_RANKS ? ss->rank : 0]);
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
                             .loss_seed = o->loss_seed, .spin_s = rtt_max > 1e-3 ? 100e-6 : 0};
    ss->max_T = chunk < ss->cfg.seq_len ? chunk : ss->cfg.seq_len;
    ss->loss_mode = o->loss_mode;
    ss->loss = o->loss;
    ss->loss_seed = o->loss_seed;
    ss->rt = mi_runtime_create(&plan, &ro);
    mi_plan_free(&plan);
    /* what each device computes per second, for the calibrated prediction
     * (the cost model with measured rates and round trips, no margins) */
    if (ss->size > 1)
        mi_runtime_stream_rate(ss->rt, 0.03, ss->stream_rate);
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
        mi_programs_free(&ss->prog);
        mi_plan_free(&ss->plan);
        if (ss->has_prefill_plan) {
            mi_programs_free(&ss->prog_prefill);
            mi_plan_free(&ss->plan_prefill);
        }
        mi_cluster_free(&ss->cl);
        free(ss->acc);
        free(ss->hosts);
        free(ss->token_ms);
        free(ss->undo);
        free(ss->imp);
    }
}

/* ------------------------------------------------ memory management */

static double rank_bytes(const mi_session *ss, int r, int n_pos)
{
    return ss->mem_w[r] + ss->mem_kv[r] * n_pos;
}

static double budget_fraction(const mi_session *ss, int r, int n_pos)
{
    double b = ss->cl.dev[r].mem_bytes;
    return b > 0 ? rank_bytes(ss, r, n_pos) / b : 0.0;
}

/* Every re-placement is counted; the first SESSION_MAX_REPLANS are kept for
 * --json (a soak makes hundreds). */
static void record_replan(mi_session *ss, const session_replan *ev)
{
    if (ss->n_replans < SESSION_MAX_REPLANS)
        ss->replans[ss->n_replans] = *ev;
    ss->n_replans++;
    ss->n_replans_moved += ev->moved;
}

/* Put placement np (a decode plan; taken over) in force with the KV cache at
 * n_pos positions, or keep the current one with np's KV budget when it places
 * every shard alike; ev counts what moved. */
static void install_placement(mi_session *ss, mi_plan *np, int n_pos, session_replan *ev)
{
    mi_plan *cur = &ss->plan;
    if (mi_plan_same_placement(cur, np)) {
        cur->kv_positions = np->kv_positions;
        mi_plan_free(np);
        return;
    }
    for (int l = 0; l < ss->cfg.n_layers; l++)
        for (int k = 0; k < ss->cfg.n_kv_heads; k++)
            ev->kv_heads_moved += cur->layers[l].kv_rank[k] != np->layers[l].kv_rank[k];
    double t1 = mi_now();
    mi_runtime_replan(ss->rt, np, n_pos);
    ss->installed_prefill = 0; /* a re-placement installs a decode plan */
    ev->seconds = mi_now() - t1;
    ev->moved = 1;
    mi_plan_free(cur);
    *cur = *np;
    ss->busy_valid = 0; /* runtime scaling's prediction was for the old placement */
    mi_programs_free(&ss->prog);
    char perr[MI_ERRLEN];
    if (mi_programs_compile(cur, &ss->prog, perr))
        mi_fatal("re-placement: %s", perr);
    memory_of_plan(ss);
}

void session_restart(mi_session *ss)
{
    mi_runtime_reset(ss->rt);
    ss->pos_hi = 0;
    if (!ss->replan || !ss->cl.dev || ss->plan.kv_positions == ss->kv_positions0)
        return;
    mi_plan np;
    char err[MI_ERRLEN];
    double t0 = mi_now();
    ss->po.kv_positions = ss->kv_positions0;
    if (mi_plan_make(&ss->plan.cfg, &ss->cl, &ss->po, &np, err))
        mi_fatal("re-placement: the first placement (%d positions) cannot be made again: %s", ss->kv_positions0, err);
    session_replan ev = {0, 0, 0.0, ss->kv_positions0, (mi_now() - t0) * 1e3, 0.0, 0, 0};
    install_placement(ss, &np, 0, &ev);
    fprintf(stderr, "meshinfer: re-placement at position 0: the KV cache was emptied; %s for %d positions "
                    "(planned in %.2f ms", ev.moved ? "the first placement again" : "same placement",
            ss->kv_positions0, ev.plan_ms);
    if (ev.moved)
        fprintf(stderr, "; %d KV heads moved in %.1f ms)\n", ev.kv_heads_moved, ev.seconds * 1e3);
    else
        fprintf(stderr, ")\n");
    record_replan(ss, &ev);
}

static void memory_check(mi_session *ss, int pos0, int T)
{
    if (!ss->cl.dev)
        return;
    int need = pos0 + T;
    mi_plan *cur = &ss->plan;
    /* seed 003: lower precision on the device before anything moves or stops */
    double limit = ss->replan ? SESSION_REPLAN_THRESHOLD : 1.0;
    for (int r = 0; r < ss->size && ss->tpot_target_s > 0; r++)
        if (budget_fraction(ss, r, need) > limit &&
            session_scale_memory(ss, r, pos0, need, limit * ss->cl.dev[r].mem_bytes))
            memory_of_plan(ss);
    if (!ss->replan) {
        for (int r = 0; r < ss->size; r++)
            if (budget_fraction(ss, r, need) > 1.0)
                mi_fatal("memory: at position %d device %s (rank %d) would hold %.0f bytes, over its budget of %.0f; "
                         "the placement budgets the KV cache for %d positions (%s)",
                         need, ss->cl.dev[r].name, r, rank_bytes(ss, r, need), ss->cl.dev[r].mem_bytes,
                         cur->kv_positions,
                         ss->from_plan_file ? "make the plan for more positions: meshinfer plan --kv-positions"
                             : "--replan re-places as it grows");
        return;
    }
    int trigger = -1, outgrown = 0;
    for (int r = 0; r < ss->size && trigger < 0; r++)
        if (budget_fraction(ss, r, need) >= SESSION_REPLAN_THRESHOLD &&
            budget_fraction(ss, r, pos0) < SESSION_REPLAN_THRESHOLD)
            trigger = r;
    if (trigger < 0 && need <= cur->kv_positions)
        return;
    double frac;
    if (trigger < 0) {
        trigger = mi_plan_fullest_rank(cur, &ss->cl, need, &frac);
        outgrown = 1;
    }
    frac = budget_fraction(ss, trigger, need);
    int old_h = cur->kv_positions;
    /* plan for twice the positions; halve the growth until a placement fits */
    int seq = ss->cfg.seq_len, h = 2 * need < seq ? 2 * need : seq;
    if (h < need)
        h = need;
    mi_plan np;
    char err[MI_ERRLEN] = "";
    double t0 = mi_now();
    for (;;) {
        ss->po.kv_positions = h;
        /* the plan's own dtypes: computation scaling may hold layers lower than the file */
        if (mi_plan_make(&cur->cfg, &ss->cl, &ss->po, &np, err) == 0)
            break;
        if (h <= need)
            mi_fatal("memory: at position %d no placement fits the devices' budgets any more: %s", need, err);
        h = need + (h - need) / 2;
    }
    session_replan ev = {need, trigger, frac, h, (mi_now() - t0) * 1e3, 0.0, 0, 0};
    install_placement(ss, &np, pos0, &ev);
    char why[256];
    if (outgrown)
        snprintf(why, sizeof why, "the KV cache outgrew the %d positions the placement budgets (fullest: %s, rank %d, "
                                  "%.0f%% of its budget)", old_h, ss->cl.dev[trigger].name,
                 trigger, 100 * frac);
    else
        snprintf(why, sizeof why, "%s (rank %d) crossed %.0f%% of its budget (%.0f%%)", ss->cl.dev[trigger].name,
                 trigger, 100 * SESSION_REPLAN_THRESHOLD, 100 * frac);
    fprintf(stderr, "meshinfer: re-placement at position %d: %s; %s for %d positions (planned in %.2f ms%s", need, why,
            ev.moved ? "new placement" : "same placement", h, ev.plan_ms, ev.moved ? "" : ")\n");
    if (ev.moved)
        fprintf(stderr, "; %d KV heads moved in %.1f ms)\n", ev.kv_heads_moved, ev.seconds * 1e3);
    record_replan(ss, &ev);
}

float *session_forward(mi_session *ss, const int *tokens, int T, int pos0, int all_logits)
{
    memory_check(ss, pos0, T);
    if (pos0 + T > ss->pos_hi)
        ss->pos_hi = pos0 + T;
    return mi_runtime_forward(ss->rt, tokens, T, pos0, all_logits);
}

double session_phase(mi_session *ss, int prefill, int n_pos)
{
    if (!ss->has_prefill_plan || ss->installed_prefill == prefill)
        return 0;
    double t0 = mi_now();
    mi_runtime_replan(ss->rt, prefill ? &ss->plan_prefill : &ss->plan, n_pos);
    double t = mi_now() - t0;
    ss->installed_prefill = prefill;
    ss->n_switches++;
    ss->switch_s += t;
    return t;
}

void session_predict(const mi_session *ss, int n_prompt, int n_steps, double *ttft, double *tpot)
{
    int pre = ss->has_prefill_plan;
    *ttft = mi_predict_ttft(pre ? &ss->plan_prefill : &ss->plan, pre ? &ss->prog_prefill : &ss->prog, &ss->cl, n_prompt,
                            ss->max_T);
    *tpot = mi_predict_tpot(&ss->plan, &ss->prog, &ss->cl, n_prompt, n_steps);
}

float *session_prefill(mi_session *ss, const int *tokens, int n, int pos0)
{
    session_phase(ss, 1, pos0);
    float *logits = NULL;
    for (int i = 0; i < n;) {
        int T = n - i < ss->max_T ? n - i : ss->max_T;
        logits = session_forward(ss, tokens + i, T, pos0 + i, 0);
        i += T;
    }
    return logits;
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
            int ctx = ss->cfg.seq_len;
            if (*n < 0) {
                failed = 1;
                snprintf(msg, sizeof msg, "prompt: %s", err);
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

int session_load_profile(const char *path, const mi_config *c, double tolerance, double *acc, char *err)
{
    size_t len;
    char *text = mi_read_text_nonempty(path, &len, err);
    if (!text)
        return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = 0;
    if (!root) {
        rc = mi_set_error(err, "%s: speculation profile is not valid JSON", path);
        goto out;
    }
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(root, "n_layers");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "transitions");
    if (!cJSON_IsNumber(nl) || !cJSON_IsArray(tr)) {
        rc = mi_set_error(err, "%s: speculation profile needs 'n_layers' and 'transitions'", path);
        goto out;
    }
    if (nl->valueint != c->n_layers || cJSON_GetArraySize(tr) != c->n_layers - 1) {
        rc = mi_set_error(err, "%s: speculation profile is for %d layers but the model has %d", path, nl->valueint,
                          c->n_layers);
        goto out;
    }
    int l = 0;
    for (const cJSON *t = tr->child; t; t = t->next, l++) {
        /* acceptance at any tolerance from the ratio's percentiles */
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(t, "ratio_percentiles");
        if (!cJSON_IsArray(q) || cJSON_GetArraySize(q) != 101) {
            rc = mi_set_error(err, "%s: transitions[%d].ratio_percentiles must hold 101 numbers", path, l);
            goto out;
        }
        int below = -1, k = 0;
        for (const cJSON *v = q->child; v; v = v->next, k++) {
            if (!cJSON_IsNumber(v)) {
                rc = mi_set_error(err, "%s: transitions[%d].ratio_percentiles[%d] is not a number", path, l, k);
                goto out;
            }
            if (v->valuedouble < tolerance)
                below = k;
        }
        acc[l] = below < 0 ? 0.0 : below / 100.0;
    }
out:
    cJSON_Delete(root);
    return rc;
}

void session_check_logits(const float *logits, int n, int pos)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(logits[i]))
            mi_fatal("the model produced a non-finite logit (token %d) at position %d: the weights are corrupt or "
                     "overflow fp32", i, pos);
}

/* The cost model with what this job measured instead of what the plan
 * assumed: each rank's weight-streaming rate and the round trips halved
 * (no margin), at the run's mean context. 0 when not measured (one rank). */
static double calibrated_token_s(const mi_session *ss)
{
    if (ss->size < 2 || ss->stream_rate[0] <= 0)
        return 0;
    int n = ss->size;
    mi_cluster cl = ss->cl;
    cl.dev = mi_malloc((size_t)n * sizeof *cl.dev, "devices");
    memcpy(cl.dev, ss->cl.dev, (size_t)n * sizeof *cl.dev);
    cl.rtt_s = NULL;
    cl.bw = NULL;
    cl.mem_bw = 1.0;
    for (int r = 0; r < n; r++) {
        cl.dev[r].speed = ss->stream_rate[r] > 0 ? ss->stream_rate[r] : ss->stream_rate[0];
        cl.dev[r].calibrated = 0;
    }
    mi_cluster_finish(&cl);
    double *rtt = mi_calloc((size_t)n * n, sizeof(double), "RTT matrix");
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            rtt[a * n + b] = a == b ? 0.0 : a == 0 ? ss->rtt_s[b] : b == 0 ? ss->rtt_s[a]
                                                 : 0.5 * (ss->rtt_s[a] + ss->rtt_s[b]);
    mi_cluster_set_rtt(&cl, rtt, 0.0);
    free(rtt);
    mi_prediction pr;
    mi_predict(&ss->plan, &ss->prog, &cl, ss->pos_hi / 2, &pr);
    free(cl.rtt_s);
    free(cl.dev);
    return pr.token_s;
}

/* Seed 000's energy and energy-delay product of the run (run_s seconds):
 * every device draws its idle power throughout and its active power (at its
 * DVFS level) while it computes, by its measured compute seconds; beside the
 * cost model's prediction per token. Power from the cluster file, or seed
 * 000's Raspberry Pi 4 figures, said which. */
static void energy_json(const mi_session *ss, const mi_rank_metrics *all, FILE *f)
{
    int given = 1;
    double total = 0;
    fprintf(f, "\"energy\": {\"per_rank_j\": [");
    for (int r = 0; r < ss->size; r++) {
        const mi_device *d = &ss->cl.dev[r];
        double busy = all[r].attn + all[r].proj + all[r].ffn + all[r].logits;
        double j = d->idle_w * ss->run_s + (mi_device_power_w(d, ss->freq[r]) - d->idle_w) * busy;
        given &= d->power_given;
        total += j;
        fprintf(f, "%s%.4f", r ? ", " : "", j);
    }
    fprintf(f, "], \"freq\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ss->freq[r]);
    double pj = mi_predict_energy(&ss->plan, &ss->prog, &ss->cl, ss->freq, ss->pos_hi / 2, NULL, NULL);
    fprintf(f, "], \"joules\": %.4f, \"seconds\": %.4f, \"edp_js\": %.5f, \"j_per_token\": %.5f, "
               "\"predicted_j_per_token\": %.5f, \"power\": \"%s\"}, ", total, ss->run_s, total * ss->run_s,
            ss->run_tokens > 0 ? total / ss->run_tokens : 0.0, pj,
            given ? "cluster file" : "defaults: seed 000's Raspberry Pi 4, 3.8 W idle, 4.9 W active");
}

/* s as a JSON string (paths in planned_with may hold quotes or backslashes). */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Bytes per token measured: every rank's bytes sent in decode passes over
 * its decode passes, summed (runtime.h decode_bytes_sent); what the plan's
 * mi_programs_bytes(decode) predicts. 0 when no decode pass ran. */
static double measured_bytes_per_token(const mi_session *ss, const mi_rank_metrics *all, long *passes)
{
    double b = 0;
    *passes = all[0].decode_forwards;
    for (int r = 0; r < ss->size; r++)
        if (all[r].decode_forwards > 0)
            b += all[r].decode_bytes_sent / (double)all[r].decode_forwards;
    return b;
}

void session_metrics_json(mi_session *ss, FILE *f)
{
    mi_rank_metrics *all = ss->rank == 0 ? mi_calloc((size_t)ss->size, sizeof *all, "metrics") : NULL;
    mi_runtime_metrics(ss->rt, all);
    if (ss->rank != 0)
        return;
    char dts[160];
    fprintf(f, "\"scaling\": {\"tpot_target_ms\": %.3f, \"decisions\": [", ss->tpot_target_s * 1e3);
    for (int i = 0; i < ss->n_decisions; i++) {
        const session_decision *d = &ss->decisions[i];
        fprintf(f, "%s{\"token\": %d, \"kind\": \"%s\", \"restore\": %s, \"trigger\": \"%s\", "
                   "\"wire_from\": \"%s\", \"wire_to\": \"%s\", \"rank\": %d, \"slowdown\": %.3f, \"change\": \"%s\", "
                   "\"predicted_ms\": %.3f, \"poll_ms\": %.3f, \"decide_us\": %.1f, \"apply_ms\": %.3f}",
                i ? ", " : "", d->token, d->weights ? "weights" : "wire", d->restore ? "true" : "false", d->trigger,
                mi_dtype_name(d->wire_from), mi_dtype_name(d->wire_to), d->rank, d->slowdown, d->change,
                d->predicted_ms, d->poll_ms, d->decide_us, d->apply_ms);
    }
    fprintf(f, "], \"token_ms\": [");
    for (int i = 0; i < ss->n_tokens && i < SESSION_MAX_TOKENS; i++)
        fprintf(f, i ? ", %.3f" : "%.3f", ss->token_ms[i]);
    fprintf(f, "]}, ");
    fprintf(f, "\"weights\": \"%s\", \"plan\": {\"planner\": \"%s\", \"controller_works\": %s, "
               "\"wire_dtype\": \"%s\", \"plan_ms\": %.3f, \"predicted_token_ms\": %.4f, "
               "\"predicted_bytes_per_token\": %.0f, \"planned_for\": ",
            mi_config_dtype_summary(&ss->cfg, dts, sizeof dts), mi_planner_name(ss->plan.planner),
            ss->plan.controller_works ? "true" : "false", mi_dtype_name(ss->plan.wire), ss->plan_ms,
            ss->pred.token_s * 1e3, ss->pred.bytes_per_token);
    json_string(f, ss->planned_with);
    /* the placement that ran last (after any re-placement), in plan --json's shape */
    fprintf(f, ", \"placement\": ");
    if (mi_plan_placement_json(&ss->plan, f))
        mi_fatal("cannot write the placement as JSON");
    if (ss->has_prefill_plan) {
        fprintf(f, ", \"prefill_placement\": ");
        if (mi_plan_placement_json(&ss->plan_prefill, f))
            mi_fatal("cannot write the placement as JSON");
    }
    long passes = 0;
    double bpt = measured_bytes_per_token(ss, all, &passes);
    fprintf(f, "}, \"bytes_per_token\": %.0f, \"decode_passes\": %ld, ", bpt, passes);
    fprintf(f, "\"calibrated_token_ms\": %.4f, \"critical_path_delays\": %.2f, \"stream_gbs\": [",
            calibrated_token_s(ss) * 1e3, mi_predict_delays(&ss->plan, &ss->prog));
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.3f", r ? ", " : "", ss->stream_rate[r] / 1e9);
    fprintf(f, "], ");
    if (ss->plan.planner == MI_PLANNER_SOMEGATHER) {
        fprintf(f, "\"somegather\": {\"prune_mode\": \"%s\", \"prune\": {",
                ss->plan.prune_mode == MI_PRUNE_MAGNITUDE ? "magnitude" : "aware");
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            fprintf(f, "%s\"%s\": %.4f", x ? ", " : "", mi_xch_name(x), ss->plan.prune[x]);
        /* what the send lists that ran leave out, whatever ratio a (hand-edited) plan file states */
        fprintf(f, "}, \"unsent_fraction\": {");
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            fprintf(f, "%s\"%s\": %.4f", x ? ", " : "", mi_xch_name(x), unsent_fraction(&ss->plan, x));
        fprintf(f, "}, \"loss_mode\": \"%s\", \"loss\": %.6f, \"loss_seed\": %llu}, ",
                mi_loss_mode_name(ss->loss_mode), ss->loss, (unsigned long long)ss->loss_seed);
    }
    if (ss->run_s > 0)
        energy_json(ss, all, f);
    /* each transition is decided by one rank (its FFN rank): sum over ranks */
    fprintf(f, "\"rtt_ms\": [");
    for (int r = 0; r < ss->size; r++)
        fprintf(f, "%s%.4f", r ? ", " : "", ss->rtt_s[r] * 1e3);
    fprintf(f, "], \"kv_positions\": %d, \"replans_total\": %d, \"replans_moved\": %d, \"replans\": [",
            ss->plan.kv_positions, ss->n_replans, ss->n_replans_moved);
    for (int i = 0; i < ss->n_replans && i < SESSION_MAX_REPLANS; i++) {
        const session_replan *e = &ss->replans[i];
        fprintf(f, "%s{\"position\": %d, \"rank\": %d, \"budget_fraction\": %.4f, \"kv_positions\": %d, "
                   "\"plan_ms\": %.3f, \"moved\": %s, \"kv_heads_moved\": %d, \"move_ms\": %.3f}",
                i ? ", " : "", e->position, e->rank, e->fraction, e->kv_positions, e->plan_ms,
                e->moved ? "true" : "false", e->kv_heads_moved, e->seconds * 1e3);
    }
    fprintf(f, "], \"speculation\": [");
    int first = 1;
    for (int l = 0; l < ss->cfg.n_layers - 1 && l < MI_SPEC_MAX_LAYERS; l++) {
        if (!ss->plan.layers[l].speculate)
            continue;
        double dec = 0, acc = 0, ratio = 0;
        for (int r = 0; r < ss->size; r++) {
            dec += all[r].spec_decided[l];
            acc += all[r].spec_accepted[l];
            ratio += all[r].spec_ratio_sum[l];
        }
        fprintf(f, "%s{\"from_layer\": %d, \"decided\": %.0f, \"accepted\": %.0f, \"acceptance\": %.4f, "
                   "\"mean_ratio\": %.5f}", first ? "" : ", ", l, dec, acc, dec > 0 ? acc / dec : 0.0,
                dec > 0 ? ratio / dec : 0.0);
        first = 0;
    }
    fprintf(f, "], \"ranks\": [");
    for (int r = 0; r < ss->size; r++) {
        const mi_rank_metrics *m = &all[r];
        double fw = m->forwards > 0 ? (double)m->forwards : 1.0;
        double dp = m->decode_forwards > 0 ? (double)m->decode_forwards : 1.0;
        fprintf(f, "%s{\"rank\": %d, \"weight_bytes\": %.0f, \"kv_cache_bytes\": %.0f, \"rss_growth_bytes\": %.0f, "
                   "\"predicted_weight_bytes\": %zu, \"forwards\": %ld, \"positions\": %ld, \"decode_forwards\": %ld, "
                   "\"bytes_sent_per_token\": %.1f, \"bytes_recv_per_token\": %.1f, "
                   "\"bytes_sent\": %.0f, \"bytes_recv\": %.0f, \"bytes_sent_per_forward\": %.1f, "
                   "\"bytes_recv_per_forward\": %.1f, \"seconds\": {\"attention\": %.6f, \"projection\": %.6f, "
                   "\"ffn\": %.6f, \"logits\": %.6f, \"communication\": %.6f, \"idle\": %.6f, "
                   "\"replan\": %.6f, \"emulated_slowdown\": %.6f}, \"kv_bytes_moved_sent\": %.0f, \"kv_bytes_moved_recv\": %.0f, "
                   "\"messages_received\": %.0f, \"messages_lost\": %.0f}",
                r ? ", " : "", r, m->weight_bytes, m->kv_bytes, m->rss_weights, ss->pred.weight_bytes[r],
                m->forwards, m->positions, m->decode_forwards, m->decode_bytes_sent / dp, m->decode_bytes_recv / dp,
                m->bytes_sent, m->bytes_recv, m->bytes_sent / fw, m->bytes_recv / fw,
                m->attn, m->proj, m->ffn, m->logits, m->comm, m->idle, m->replan_s, m->slowdown, m->moved_bytes_sent,
                m->moved_bytes_recv, m->msgs_recv, m->msgs_lost);
    }
    fprintf(f, "]");
    free(all);
}

void session_metrics_table(mi_session *ss)
{
    mi_rank_metrics *all = ss->rank == 0 ? mi_calloc((size_t)ss->size, sizeof *all, "metrics") : NULL;
    mi_runtime_metrics(ss->rt, all);
    if (ss->rank != 0)
        return;
    char dts[160];
    fprintf(stderr, "plan %s: predicted %.3f ms/token, %.0f bytes moved per token (planned in %.3f ms); weights %s, "
                    "messages %s, kernels %s\n", mi_planner_name(ss->plan.planner), ss->pred.token_s * 1e3,
            ss->pred.bytes_per_token, ss->plan_ms, mi_config_dtype_summary(&ss->cfg, dts, sizeof dts),
            mi_dtype_name(ss->plan.wire), mi_kernels_name());
    fprintf(stderr, "placement planned for %s\n", ss->planned_with);
    long passes = 0;
    double bpt = measured_bytes_per_token(ss, all, &passes);
    if (ss->size > 1)
        fprintf(stderr, "bytes per token (one decode pass, all ranks' payload): measured %.0f over %ld decode passes, "
                        "predicted %.0f; sent_B/fwd also averages the prefill passes, which move each prompt "
                        "position's bytes\n", bpt, passes, ss->pred.bytes_per_token);
    if (ss->size > 1)
        fprintf(stderr, "calibrated prediction %.3f ms/token (measured streaming rates and round trips, no margin); "
                        "%.0f link delays on a token's critical path\n", calibrated_token_s(ss) * 1e3,
                mi_predict_delays(&ss->plan, &ss->prog));
    double dec = 0, acc = 0;
    int n_spec = 0;
    for (int l = 0; l < ss->cfg.n_layers - 1 && l < MI_SPEC_MAX_LAYERS; l++)
        if (ss->plan.layers[l].speculate) {
            n_spec++;
            for (int r = 0; r < ss->size; r++) {
                dec += all[r].spec_decided[l];
                acc += all[r].spec_accepted[l];
            }
        }
    if (n_spec)
        fprintf(stderr, "speculation: %d transitions, %.0f of %.0f tests accepted (%.1f%%)\n", n_spec, acc, dec,
                dec > 0 ? 100.0 * acc / dec : 0.0);
    if (ss->plan.planner == MI_PLANNER_SOMEGATHER) {
        double got = 0, lost = 0;
        for (int r = 0; r < ss->size; r++) {
            got += all[r].msgs_recv;
            lost += all[r].msgs_lost;
        }
        fprintf(stderr, "somegather: pruning %s attn_in %.2f heads %.2f ffn_in %.2f hidden %.2f; message loss %s %.3f "
                        "(seed %llu): %.0f of %.0f messages lost\n",
                ss->plan.prune_mode == MI_PRUNE_MAGNITUDE ? "magnitude" : "aware", ss->plan.prune[0],
                ss->plan.prune[1], ss->plan.prune[2], ss->plan.prune[3], mi_loss_mode_name(ss->loss_mode), ss->loss,
                (unsigned long long)ss->loss_seed, lost, got);
    }
    fprintf(stderr, "rank  weights_MB  kv_MB  sent_B/fwd  recv_B/fwd   attn_s   proj_s    ffn_s  logits_s   comm_s   idle_s  "
                    "sent_B/tok\n");
    for (int r = 0; r < ss->size; r++) {
        const mi_rank_metrics *m = &all[r];
        double fw = m->forwards > 0 ? (double)m->forwards : 1.0;
        double dp = m->decode_forwards > 0 ? (double)m->decode_forwards : 1.0;
        fprintf(stderr, "%4d  %10.2f  %5.1f  %10.0f  %10.0f  %7.4f  %7.4f  %7.4f  %8.4f  %7.4f  %7.4f  %10.0f\n", r,
                m->weight_bytes / 1e6, m->kv_bytes / 1e6, m->bytes_sent / fw, m->bytes_recv / fw, m->attn, m->proj,
                m->ffn, m->logits, m->comm, m->idle, m->decode_bytes_sent / dp);
    }
    free(all);
}
