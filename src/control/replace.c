/* Rank 0's passes under the memory check (see control.h session_forward):
 * HeadSplit's memory-triggered re-placement as the KV cache grows, Voltron's
 * phase switch between a hybrid plan's prefill and decode placements, and a
 * new generation in the same job (session_restart). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/control.h"
#include "meshinfer/runtime.h"

static double rank_bytes(const mi_session *ss, int r, int n_pos)
{
    return ss->memory.mem_w[r] + ss->memory.mem_kv[r] * n_pos;
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
    if (ss->memory.n_replans < SESSION_MAX_REPLANS)
        ss->memory.replans[ss->memory.n_replans] = *ev;
    ss->memory.n_replans++;
    ss->memory.n_replans_moved += ev->moved;
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
    mi_programs prog;
    char perr[MI_ERRLEN];
    if (mi_programs_compile(np, &prog, perr))
        mi_fatal("re-placement: %s", perr);
    double t1 = mi_now();
    mi_runtime_replan(ss->rt, np, &prog, n_pos);
    ss->phases.installed_prefill = 0; /* a re-placement installs a decode plan */
    ev->seconds = mi_now() - t1;
    ev->moved = 1;
    mi_plan_free(cur);
    *cur = *np;
    ss->scaling.busy_valid = 0; /* runtime scaling's prediction was for the old placement */
    mi_programs_free(&ss->prog);
    ss->prog = prog;
    session_memory_of_plan(ss);
}

void session_restart(mi_session *ss)
{
    mi_runtime_reset(ss->rt);
    ss->memory.pos_hi = 0;
    if (!ss->memory.replan || !ss->cl.dev || ss->plan.kv_positions == ss->memory.kv_positions0)
        return;
    mi_plan np;
    char err[MI_ERRLEN];
    double t0 = mi_now();
    ss->po.kv_positions = ss->memory.kv_positions0;
    if (mi_plan_make(&ss->plan.cfg, &ss->cl, &ss->po, &np, err))
        mi_fatal("re-placement: the first placement (%d positions) cannot be made again: %s", ss->memory.kv_positions0, err);
    session_replan ev = {0, 0, 0.0, ss->memory.kv_positions0, (mi_now() - t0) * 1e3, 0.0, 0, 0};
    install_placement(ss, &np, 0, &ev);
    fprintf(stderr, "meshinfer: re-placement at position 0: the KV cache was emptied; %s for %d positions "
                    "(planned in %.2f ms", ev.moved ? "the first placement again" : "same placement",
            ss->memory.kv_positions0, ev.plan_ms);
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
    /* Voltron: lower precision on the device before anything moves or stops */
    double limit = ss->memory.replan ? MI_REPLACE_THRESHOLD : 1.0;
    for (int r = 0; r < ss->size && ss->scaling.tpot_target_s > 0; r++)
        if (budget_fraction(ss, r, need) > limit &&
            session_scale_memory(ss, r, pos0, need, limit * ss->cl.dev[r].mem_bytes))
            session_memory_of_plan(ss);
    if (!ss->memory.replan) {
        double over;
        int r = mi_mem_over_budget(&ss->cl, ss->size, ss->memory.mem_w, ss->memory.mem_kv, need, &over);
        if (r >= 0)
            mi_fatal("memory: at position %d device %s (rank %d) would hold %.0f bytes, over its budget of %.0f; "
                     "the placement budgets the KV cache for %d positions (%s)",
                     need, ss->cl.dev[r].name, r, rank_bytes(ss, r, need), ss->cl.dev[r].mem_bytes,
                     cur->kv_positions,
                     ss->memory.from_plan_file ? "make the plan for more positions: meshinfer plan --kv-positions"
                                               : "--replan re-places as it grows");
        return;
    }
    /* when, and the new plan: shared with the simulator (plan.h, planner.h) */
    int trigger, outgrown, h;
    double frac;
    if (!mi_replace_due(&ss->cl, ss->size, ss->memory.mem_w, ss->memory.mem_kv, cur->kv_positions, pos0, need,
                        &trigger, &frac, &outgrown))
        return;
    int old_h = cur->kv_positions;
    mi_plan np;
    char err[MI_ERRLEN] = "";
    double t0 = mi_now();
    /* the plan's own dtypes: computation scaling may hold layers lower than the file */
    if (mi_plan_remake(&cur->cfg, &ss->cl, &ss->po, need, &np, &h, err))
        mi_fatal("memory: %s", err);
    ss->po.kv_positions = h;
    session_replan ev = {need, trigger, frac, h, (mi_now() - t0) * 1e3, 0.0, 0, 0};
    install_placement(ss, &np, pos0, &ev);
    char why[256];
    if (outgrown)
        snprintf(why, sizeof why, "the KV cache outgrew the %d positions the placement budgets (fullest: %s, rank %d, "
                                  "%.0f%% of its budget)", old_h, ss->cl.dev[trigger].name,
                 trigger, 100 * frac);
    else
        snprintf(why, sizeof why, "%s (rank %d) crossed %.0f%% of its budget (%.0f%%)", ss->cl.dev[trigger].name,
                 trigger, 100 * MI_REPLACE_THRESHOLD, 100 * frac);
    fprintf(stderr, "meshinfer: re-placement at position %d: %s; %s for %d positions (planned in %.2f ms%s", need, why,
            ev.moved ? "new placement" : "same placement", h, ev.plan_ms, ev.moved ? "" : ")\n");
    if (ev.moved)
        fprintf(stderr, "; %d KV heads moved in %.1f ms)\n", ev.kv_heads_moved, ev.seconds * 1e3);
    record_replan(ss, &ev);
}

float *session_forward(mi_session *ss, const int *tokens, int T, int pos0, int flags)
{
    memory_check(ss, pos0, T);
    if (pos0 + T > ss->memory.pos_hi)
        ss->memory.pos_hi = pos0 + T;
    return mi_runtime_forward(ss->rt, tokens, T, pos0, flags);
}

float *session_forward_at(mi_session *ss, const int *tokens, int T, const int *pos, const int *slot, int T_logits,
                          int n_decode, int n_micro)
{
    /* the account counts every slot at the fullest one's positions: the
     * cache a re-placement moves (runtime.h) */
    int hi = 0;
    for (int t = 0; t < T; t++)
        if (pos[t] > hi)
            hi = pos[t];
    memory_check(ss, hi, 1);
    if (hi + 1 > ss->memory.pos_hi)
        ss->memory.pos_hi = hi + 1;
    return mi_runtime_forward_at(ss->rt, tokens, T, pos, slot, T_logits, n_decode, n_micro);
}

double session_phase(mi_session *ss, int prefill, int n_pos)
{
    if (!ss->phases.has_prefill_plan || ss->phases.installed_prefill == prefill)
        return 0;
    double t0 = mi_now();
    mi_runtime_replan(ss->rt, prefill ? &ss->phases.plan_prefill : &ss->plan, prefill ? &ss->phases.prog_prefill : &ss->prog,
                      n_pos);
    double t = mi_now() - t0;
    ss->phases.installed_prefill = prefill;
    ss->phases.n_switches++;
    ss->phases.switch_s += t;
    return t;
}

void session_predict(const mi_session *ss, int n_prompt, int n_steps, double *ttft, double *tpot)
{
    int pre = ss->phases.has_prefill_plan;
    *ttft = mi_predict_ttft(pre ? &ss->phases.plan_prefill : &ss->plan, pre ? &ss->phases.prog_prefill : &ss->prog, &ss->cl, n_prompt,
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
