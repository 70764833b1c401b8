/* A generation as event walks (simulate.h mi_simulate): the prompt's
 * prefill passes, one decode pass per token, the memory account before
 * every pass (plan.h mi_replace_due, as the runtime's controller checks it)
 * and the re-placements' moves. */
#include "meshinfer/simulate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

typedef struct {
    const mi_cluster *cl;
    const mi_sim_request *rq;
    const mi_plan *plan;     /* in force: the caller's, or own */
    mi_plan own;
    int owned, horizon;      /* KV positions the plan in force budgets */
    int seg;                 /* the first decode token not yet walked (they run under the plan in force) */
    mi_programs prog;
    double mem_w[MI_MAX_RANKS], mem_kv[MI_MAX_RANKS];
    uint64_t rng;
    int n;
    double *pass_bytes, *pass_msgs; /* [n * n] one walk's */
    mi_sim_result *out;
    int cap_replans;
    /* quota'd devices (mi_sim_cluster_cpu): every pass walked in order on the run's clock, each
     * re-placement's move on it too, the quotas' state carried from pass to pass */
    int cpu_on;
    mi_sim_cpu cpu;
    double clock;            /* when the next pass starts, seconds since the run's start */
    double *sw;              /* [n_tokens] the moves charged before each token's passes */
} gen;

/* Walk one pass; add its links to the run's when `count` (else the caller
 * scales a decode pass's). */
static int walk(gen *g, int ph, int T, int T_logits, int ctx, int count, mi_sim_pass_out *po, char *err)
{
    size_t nn = (size_t)g->n * g->n;
    memset(g->pass_bytes, 0, nn * sizeof(double));
    memset(g->pass_msgs, 0, nn * sizeof(double));
    g->cpu.t0 = g->clock;
    /* a batch's decode pass (every row with logits) in the request's micro-batches */
    int micro = T > 1 && T_logits == T && g->rq->micro > 1;
    if (micro ? mi_sim_pass_micro(g->plan, &g->prog, g->cl, &g->rq->links, T, g->rq->micro, ctx, &g->rng,
                                  g->pass_bytes, g->pass_msgs, &g->cpu, po, err)
              : mi_sim_pass(g->plan, &g->prog, g->cl, &g->rq->links, ph, T, T_logits, ctx, &g->rng, g->pass_bytes,
                            g->pass_msgs, &g->cpu, po, err))
        return -1;
    g->clock += po->token_s;
    mi_sim_result *o = g->out;
    o->walks++;
    o->events += po->events;
    if (count) {
        for (size_t i = 0; i < nn; i++) {
            o->link_bytes[i] += g->pass_bytes[i];
            o->link_msgs[i] += g->pass_msgs[i];
        }
        o->bytes += po->bytes;
        o->messages += (double)po->sends;
    }
    return 0;
}

/* Decode passes are B rows of the prefill program, or one of the decode program. */
static int decode_walk(gen *g, int k, int count, char *err)
{
    mi_sim_pass_out po;
    int B = g->rq->batch;
    if (g->cpu_on) /* (walked in order: the move before token k is on the clock first) */
        g->clock += g->sw[k];
    if (walk(g, B == 1 ? MI_PHASE_DECODE : MI_PHASE_PREFILL, B, B, g->out->ctx[k], count, &po, err))
        return -1;
    g->out->token_s[k] = po.token_s;
    memcpy(g->out->busy_s + (size_t)k * g->n, po.busy_s, (size_t)g->n * sizeof(double));
    return 0;
}

/* Tokens (k0, k1) between two walked ones: exact where the pass time is
 * linear in the context (simulate.h: convex, so linear when the middle
 * lies on the chord), else both halves walked apart. */
static int interpolate(gen *g, int k0, int k1, char *err)
{
    if (k1 - k0 < 2)
        return 0;
    mi_sim_result *o = g->out;
    int m = k0 + (k1 - k0) / 2, n = g->n;
    if (decode_walk(g, m, 0, err))
        return -1;
    double a = o->token_s[k0], b = o->token_s[k1], chord = a + (b - a) * (m - k0) / (double)(k1 - k0);
    if (fabs(o->token_s[m] - chord) > 1e-10 * fabs(chord))
        return interpolate(g, k0, m, err) || interpolate(g, m, k1, err) ? -1 : 0;
    for (int k = k0 + 1; k < k1; k++) {
        double f = (k - k0) / (double)(k1 - k0);
        o->token_s[k] = a + (b - a) * f;
        for (int r = 0; r < n; r++) /* compute is affine in the context */
            o->busy_s[(size_t)k * n + r] =
                o->busy_s[(size_t)k0 * n + r] + (o->busy_s[(size_t)k1 * n + r] - o->busy_s[(size_t)k0 * n + r]) * f;
        o->interpolated += k != m;
    }
    return 0;
}

/* The decode passes [k0, k1) under the plan in force. */
static int flush(gen *g, int k0, int k1, char *err)
{
    if (k0 >= k1)
        return 0;
    mi_sim_result *o = g->out;
    size_t nn = (size_t)g->n * g->n;
    if (g->rq->every_step || !mi_sim_links_exact(&g->rq->links) || g->cpu_on) {
        for (int k = k0; k < k1; k++)
            if (decode_walk(g, k, 1, err))
                return -1;
        return 0;
    }
    /* every decode pass of one plan moves the same messages */
    if (decode_walk(g, k0, 1, err))
        return -1;
    double steps = k1 - k0 - 1, bytes = 0, msgs = 0;
    for (size_t i = 0; i < nn; i++) {
        o->link_bytes[i] += steps * g->pass_bytes[i];
        o->link_msgs[i] += steps * g->pass_msgs[i];
        bytes += g->pass_bytes[i];
        msgs += g->pass_msgs[i];
    }
    o->bytes += steps * bytes;
    o->messages += steps * msgs;
    if (k1 - 1 > k0 && decode_walk(g, k1 - 1, 0, err))
        return -1;
    return interpolate(g, k0, k1 - 1, err);
}

static int install(gen *g, mi_plan *np, char *err)
{
    mi_programs prog;
    if (mi_programs_compile(np, &prog, err))
        return -1;
    mi_programs_free(&g->prog);
    g->prog = prog;
    if (g->owned)
        mi_plan_free(&g->own);
    g->own = *np;
    g->plan = &g->own;
    g->owned = 1;
    mi_plan_mem_account(g->plan, g->mem_w, g->mem_kv);
    return 0;
}

static void stop(gen *g, const char *fmt, const char *what)
{
    g->out->stopped = 1;
    snprintf(g->out->stop_reason, sizeof g->out->stop_reason, fmt, what);
}

/* The memory account before token k's pass from pos0 to need positions:
 * 1 to go on (with *switch_s charged), 0 when the run stops, -1 on error. */
static int memory(gen *g, int k, int pos0, int need, double *switch_s, char *err)
{
    const mi_cluster *cl = g->cl;
    mi_sim_result *o = g->out;
    char why[MI_ERRLEN];
    if (!g->rq->replan) {
        double frac;
        int r = mi_mem_over_budget(cl, g->n, g->mem_w, g->mem_kv, need, &frac);
        if (r < 0)
            return 1;
        snprintf(why, sizeof why, "at position %d (token %d) device %s (rank %d) would hold %.0f bytes, %.0f%% of its "
                                  "budget; the placement budgets %d positions and nothing re-places it", need, k,
                 cl->dev[r].name, r, g->mem_w[r] + g->mem_kv[r] * need, 100 * frac, g->horizon);
        stop(g, "%s", why);
        return flush(g, g->seg, k, err) ? -1 : 0;
    }
    mi_sim_replan ev = {.token = k, .position = need};
    if (!mi_replace_due(cl, g->n, g->mem_w, g->mem_kv, g->horizon, pos0, need, &ev.rank, &ev.frac, &ev.outgrown))
        return 1;
    mi_plan np;
    char perr[MI_ERRLEN] = "";
    if (g->rq->replan(g->rq->replan_ctx, g->plan, need, &np, &ev.horizon, perr)) {
        snprintf(why, sizeof why, "token %d: %s", k, perr);
        stop(g, "%s", why);
        return flush(g, g->seg, k, err) ? -1 : 0;
    }
    g->horizon = ev.horizon;
    ev.moved = !mi_plan_same_placement(g->plan, &np);
    if (ev.moved) {
        for (int l = 0; l < np.cfg.n_layers; l++)
            for (int h = 0; h < np.cfg.n_kv_heads; h++)
                ev.kv_heads_moved += g->plan->layers[l].kv_rank[h] != np.layers[l].kv_rank[h];
        ev.switch_s = mi_plan_switch_s(g->plan, &np, cl, pos0);
        *switch_s += ev.switch_s;
        if (k > 0 && flush(g, g->seg, k, err)) {
            mi_plan_free(&np);
            return -1;
        }
        g->seg = k > 0 ? k : 1;
        if (install(g, &np, err)) {
            mi_plan_free(&np);
            return -1;
        }
    } else {
        mi_plan_free(&np);
    }
    if (o->n_replans == g->cap_replans) {
        g->cap_replans = g->cap_replans ? 2 * g->cap_replans : 8;
        mi_sim_replan *a = realloc(o->replans, (size_t)g->cap_replans * sizeof *a);
        if (!a)
            mi_fatal("out of memory (simulator re-placements)");
        o->replans = a;
    }
    o->replans[o->n_replans++] = ev;
    return 1;
}

static void record_memory(gen *g, int k, int n_pos)
{
    for (int r = 0; r < g->n; r++)
        g->out->mem_bytes[(size_t)k * g->n + r] = g->mem_w[r] + g->mem_kv[r] * n_pos;
}

/* Token 0: every prompt's prefill passes (B prompts one after another). */
static int prefill(gen *g, double *sw, char *err)
{
    const mi_sim_request *rq = g->rq;
    mi_sim_result *o = g->out;
    double t = 0;
    for (int b = 0; b < rq->batch; b++)
        for (int i = 0; i < rq->n_prompt; i += rq->chunk) {
            int T = rq->n_prompt - i < rq->chunk ? rq->n_prompt - i : rq->chunk;
            /* the account counts every slot at the fullest one's positions: the first prompt's */
            double sw0 = *sw;
            int rc = b == 0 ? memory(g, 0, i, i + T, sw, err) : 1;
            if (rc <= 0)
                return rc;
            g->clock += *sw - sw0; /* a move before this chunk */
            mi_sim_pass_out po;
            if (walk(g, MI_PHASE_PREFILL, T, 1, i, 1, &po, err))
                return -1;
            t += po.token_s;
            for (int r = 0; r < g->n; r++)
                o->busy_s[r] += po.busy_s[r];
        }
    o->token_s[0] = t;
    o->ctx[0] = rq->n_prompt;
    record_memory(g, 0, rq->n_prompt);
    return 1;
}

static int check_request(const mi_plan *plan, const mi_sim_request *rq, char *err)
{
    const mi_config *c = &plan->cfg;
    if (rq->n_prompt < 1 || rq->n_tokens < 1 || rq->batch < 1 || rq->chunk < 1)
        return mi_set_error(err, "simulator: prompt tokens, tokens, batch and chunk must be at least 1 (got %d, %d, "
                                 "%d, %d)", rq->n_prompt, rq->n_tokens, rq->batch, rq->chunk);
    if ((long)rq->n_prompt + rq->n_tokens > c->seq_len)
        return mi_set_error(err, "simulator: %d prompt tokens and %d generated ones are %ld positions, more than the "
                                 "model's context (%d)", rq->n_prompt, rq->n_tokens, (long)rq->n_prompt + rq->n_tokens,
                            c->seq_len);
    if (mi_config_kv_slots(c) < rq->batch)
        return mi_set_error(err, "simulator: a batch of %d needs %d KV cache slots; the plan's config holds %d",
                            rq->batch, rq->batch, mi_config_kv_slots(c));
    if (!(rq->links.loss >= 0 && rq->links.loss < 1) || !(rq->links.jitter_s >= 0) || !(rq->links.rto_s >= 0))
        return mi_set_error(err, "simulator: loss must be in [0, 1), jitter and the retransmission timeout at least 0");
    return 0;
}

int mi_simulate(const mi_plan *plan, const mi_cluster *cl, const mi_sim_request *rq, mi_sim_result *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (check_request(plan, rq, err))
        return -1;
    if (plan->n_ranks > cl->n_devices)
        return mi_set_error(err, "simulator: the plan has %d ranks but the cluster %d devices", plan->n_ranks,
                            cl->n_devices);
    int n = plan->n_ranks, N = rq->n_tokens;
    gen g = {.cl = cl, .rq = rq, .plan = plan, .n = n, .out = out, .rng = rq->links.seed,
             .horizon = plan->kv_positions > 0 ? plan->kv_positions : plan->cfg.seq_len, .seg = 1};
    if (mi_programs_compile(plan, &g.prog, err))
        return -1;
    mi_plan_mem_account(plan, g.mem_w, g.mem_kv);
    size_t nn = (size_t)n * n;
    out->n_ranks = n;
    out->token_s = mi_calloc((size_t)N, sizeof(double), "simulated tokens");
    out->t_s = mi_calloc((size_t)N, sizeof(double), "simulated tokens");
    out->ctx = mi_calloc((size_t)N, sizeof(int), "simulated tokens");
    out->busy_s = mi_calloc((size_t)N * n, sizeof(double), "simulated compute");
    out->mem_bytes = mi_calloc((size_t)N * n, sizeof(double), "simulated memory");
    out->link_bytes = mi_calloc(nn, sizeof(double), "simulated links");
    out->link_msgs = mi_calloc(nn, sizeof(double), "simulated links");
    g.pass_bytes = mi_calloc(2 * nn, sizeof(double), "simulated links");
    g.pass_msgs = g.pass_bytes + nn;
    double *sw = mi_calloc((size_t)N, sizeof(double), "simulated re-placements");
    g.sw = sw;
    g.cpu_on = mi_sim_cluster_cpu(cl, n);
    uint64_t ph = rq->links.seed ^ 0x5157A5EEDull; /* the periods' phases, apart from the links' draws */
    for (int r = 0; r < MI_MAX_RANKS; r++) {
        g.cpu.idle_since[r] = -1;
        uint64_t z = (ph += 0x9E3779B97F4A7C15ull); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        g.cpu.phase[r] = r < cl->n_devices && !rq->aligned_periods
                             ? (double)(z >> 11) * 0x1.0p-53 * cl->dev[r].cpu_period_s : 0;
    }
    int rc = prefill(&g, &sw[0], err), done = rc > 0 ? N : 0;
    for (int k = 1; rc > 0 && k < N; k++) {
        int ctx = rq->n_prompt + k - 1;
        out->ctx[k] = ctx;
        rc = memory(&g, k, ctx, ctx + 1, &sw[k], err);
        if (rc > 0)
            record_memory(&g, k, ctx + 1);
        else
            done = k;
    }
    if (rc > 0 && flush(&g, g.seg, N, err))
        rc = -1;
    if (rc >= 0) {
        out->n_tokens = done;
        for (int k = 0; k < done; k++) {
            out->token_s[k] += sw[k];
            out->t_s[k] = (k ? out->t_s[k - 1] : 0) + out->token_s[k];
        }
        out->ttft_s = done ? out->token_s[0] : 0;
        out->total_s = done ? out->t_s[done - 1] : 0;
        out->tpot_s = done > 1 ? (out->total_s - out->ttft_s) / (done - 1) : 0;
        snprintf(out->planner, sizeof out->planner, "%s", mi_planner_name(g.plan->planner));
    }
    free(sw);
    free(g.pass_bytes);
    mi_programs_free(&g.prog);
    if (g.owned)
        mi_plan_free(&g.own);
    if (rc < 0)
        mi_sim_result_free(out);
    return rc < 0 ? -1 : 0;
}

void mi_sim_result_free(mi_sim_result *r)
{
    free(r->token_s);
    free(r->t_s);
    free(r->ctx);
    free(r->busy_s);
    free(r->mem_bytes);
    free(r->link_bytes);
    free(r->link_msgs);
    free(r->replans);
    memset(r, 0, sizeof *r);
}
