/* CUnit tests of the discrete-event simulator (simulate.h) without MPI: a
 * one-device cluster's passes equal the cost model's predictions; without
 * draws every planner's walk gives mi_predict_pass's time and compute and
 * interpolated passes equal walked ones; events are conserved (every send
 * received, the payload mi_programs_bytes) with and without draws; a
 * generation crossing a budget re-places at the token the memory account
 * predicts, and without re-placement stops there; jitter, loss and a shared
 * medium only slow a pass; the cluster file's simulator keys and the
 * cluster generator; and the device model's tests (test_sim_device.c: CPU
 * quotas, message costs, rebuilds, micro-batches). Exit status: 0 when every test passed. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/simulate.h"
#include "test_util.h"
#include "sim_fixtures.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[4096];


mi_config stories(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    return c;
}

/* 5 devices, WiFi-like per-pair links (HeadSplit's 8-12 ms RTT), speeds apart. */
void cluster5(mi_cluster *cl, double mem_mb)
{
    mi_cluster_gen g;
    mi_cluster_gen_defaults(&g);
    g.n_devices = 5;
    g.seed = 7;
    g.mem_mb[0] = g.mem_mb[1] = mem_mb;
    g.latency_ms[0] = 4, g.latency_ms[1] = 6;
    g.bandwidth_mbit[0] = 20, g.bandwidth_mbit[1] = 100;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_cluster_generate(&g, cl, err), 0);
}

void make_plan(const mi_config *c, const mi_cluster *cl, mi_planner which, int kvpos, mi_plan *p)
{
    mi_plan_options po = {which, 1, -1, 0, NULL, 0.7, kvpos, 0, 0, 0, 0, NULL, 0, 1};
    char err[MI_ERRLEN] = "";
    if (mi_plan_make(c, cl, &po, p, err))
        fprintf(stderr, "\n  %s: %s\n", mi_planner_name(which), err);
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(c, cl, &po, p, err), 0);
}

mi_sim_request request(const mi_cluster *cl, int n_prompt, int n_tokens)
{
    mi_sim_request rq = {.n_prompt = n_prompt, .n_tokens = n_tokens, .batch = 1, .chunk = 64};
    mi_sim_links_of(cl, &rq.links);
    return rq;
}

/* One device: every decode token's time is mi_predict's at its context, the
 * prefill mi_predict_ttft's, the mean mi_predict_tpot's. */
static void test_one_device(void)
{
    mi_config c = stories();
    mi_cluster cl;
    mi_cluster_default(&cl, 1, 4e9);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_GREEDY, 0, &p);
    mi_programs prog;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    mi_sim_request rq = request(&cl, 10, 10); /* 9 decode passes at contexts 10..18 */
    for (int every = 0; every < 2; every++) {
        rq.every_step = every;
        mi_sim_result r;
        CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &r, err), 0);
        CU_ASSERT_EQUAL(r.n_tokens, 10);
        NEAR(r.ttft_s, mi_predict_ttft(&p, &prog, &cl, 10, 64), 1e-12);
        for (int k = 1; k < 10; k++) {
            mi_prediction pr;
            mi_predict(&p, &prog, &cl, 10 + k - 1, &pr);
            CU_ASSERT_EQUAL(r.ctx[k], 10 + k - 1);
            NEAR(r.token_s[k], pr.token_s, 1e-9);
            NEAR(r.busy_s[k], pr.busy_s[0], 1e-9);
        }
        NEAR(r.tpot_s, mi_predict_tpot(&p, &prog, &cl, 10, 9), 1e-9);
        CU_ASSERT_EQUAL(r.messages, 0);
        CU_ASSERT(every ? r.interpolated == 0 : r.interpolated > 0);
        mi_sim_result_free(&r);
    }
    mi_programs_free(&prog);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

/* Five devices, every planner that runs there: a decode walk without draws
 * is mi_predict_pass's, its events conserved, its payload the programs'. */
static void test_passes_and_conservation(void)
{
    mi_config c = stories();
    mi_cluster cl;
    cluster5(&cl, 4000);
    const mi_planner planners[] = {MI_PLANNER_LAYERWISE, MI_PLANNER_ROUNDROBIN, MI_PLANNER_GREEDY, MI_PLANNER_TP,
                                   MI_PLANNER_HYBRID};
    char err[MI_ERRLEN];
    for (size_t i = 0; i < sizeof planners / sizeof planners[0]; i++) {
        mi_plan p;
        make_plan(&c, &cl, planners[i], 0, &p);
        mi_programs prog;
        CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
        mi_sim_links lk;
        mi_sim_links_of(&cl, &lk);
        uint64_t rng = 1;
        double lb[25] = {0}, lm[25] = {0};
        mi_sim_pass_out o;
        mi_prediction pr;
        CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &lk, MI_PHASE_DECODE, 1, 1, 40, &rng, lb, lm, NULL, &o, err), 0);
        mi_predict_pass(&p, &prog, &cl, MI_PHASE_DECODE, 1, 40, &pr);
        NEAR(o.token_s, pr.token_s, 1e-12);
        for (int r = 0; r < 5; r++)
            NEAR(o.busy_s[r], pr.busy_s[r], 1e-12);
        CU_ASSERT_EQUAL(o.sends, o.recvs);
        NEAR(o.bytes, mi_programs_bytes(&prog, MI_PHASE_DECODE, NULL, NULL), 1e-12);
        double sum = 0, msgs = 0;
        for (int k = 0; k < 25; k++)
            sum += lb[k], msgs += lm[k];
        NEAR(sum, o.bytes, 1e-12);
        CU_ASSERT_EQUAL((long)msgs, o.sends);
        CU_ASSERT(o.sends >= 4); /* at least the commands to the four workers */
        /* with every draw and a shared medium: still conserved, never faster */
        mi_sim_links d = lk;
        d.jitter_s = 1e-3, d.loss = 0.2, d.rto_s = 0.05, d.shared_medium = 1, d.spec_draws = 1;
        mi_sim_pass_out od;
        CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &d, MI_PHASE_DECODE, 1, 1, 40, &rng, NULL, NULL, NULL, &od, err),
                              0);
        CU_ASSERT_EQUAL(od.sends, od.recvs);
        CU_ASSERT_EQUAL(od.sends, o.sends);
        NEAR(od.bytes, o.bytes, 1e-12);
        /* shared medium alone, no draws: transfers only wait for one another */
        mi_sim_links sm = lk;
        sm.shared_medium = 1;
        mi_sim_pass_out os;
        CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &sm, MI_PHASE_DECODE, 1, 1, 40, &rng, NULL, NULL, NULL, &os, err),
                              0);
        CU_ASSERT(os.token_s >= o.token_s * (1 - 1e-12));
        /* the generation: interpolated passes equal walked ones; bytes over the run add up */
        mi_sim_request rq = request(&cl, 16, 40);
        mi_sim_result a, b;
        CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &a, err), 0);
        rq.every_step = 1;
        CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &b, err), 0);
        CU_ASSERT_EQUAL(b.walks, 40); /* one prefill pass, 39 decode passes */
        for (int k = 0; k < 40; k++)
            NEAR(a.token_s[k], b.token_s[k], 1e-9);
        NEAR(a.bytes, b.bytes, 1e-12);
        mi_sim_pass_out op;
        CU_ASSERT_EQUAL_FATAL(mi_sim_pass(&p, &prog, &cl, &lk, MI_PHASE_PREFILL, 16, 1, 0, &rng, NULL, NULL, NULL, &op, err),
                              0);
        CU_ASSERT_EQUAL(op.sends, op.recvs);
        NEAR(b.bytes, 39 * o.bytes + op.bytes, 1e-9);
        NEAR(b.messages, 39 * o.sends + op.sends, 1e-12);
        mi_sim_result_free(&a);
        mi_sim_result_free(&b);
        mi_programs_free(&prog);
        mi_plan_free(&p);
    }
    mi_cluster_free(&cl);
}

/* Loss delays by timeouts, never speeds up; the same seed gives the same run. */
static void test_draws(void)
{
    mi_config c = stories();
    mi_cluster cl;
    cluster5(&cl, 4000);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_LAYERWISE, 0, &p);
    char err[MI_ERRLEN];
    mi_sim_request rq = request(&cl, 8, 30);
    mi_sim_result base, lossy, again;
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &base, err), 0);
    rq.links.loss = 0.3, rq.links.rto_s = 1.0, rq.links.seed = 5;
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &lossy, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &again, err), 0);
    int slower = 0;
    for (int k = 1; k < 30; k++) {
        double extra = lossy.token_s[k] - base.token_s[k];
        /* a loss can only delay (a lost command may hide behind the data its worker waits for) */
        CU_ASSERT(extra > -1e-12);
        slower += extra > 0.5;
        CU_ASSERT_EQUAL(lossy.token_s[k], again.token_s[k]);
    }
    CU_ASSERT(slower > 5);
    mi_sim_result_free(&base);
    mi_sim_result_free(&lossy);
    mi_sim_result_free(&again);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

typedef struct {
    const mi_cluster *cl;
    mi_plan_options po;
} hook_ctx;

static int hook(void *ctx, const mi_plan *cur, int need, mi_plan *np, int *horizon, char *err)
{
    const hook_ctx *x = ctx;
    return mi_plan_remake(&cur->cfg, x->cl, &x->po, need, np, horizon, err);
}

/* The least positions n at which w + kv * n is at least (strict: above) th of budget b, as budget.c judges. */
static int first_need(double w, double kv, double b, double th, int strict)
{
    int n = (int)fmax(0, floor((th * b - w) / kv) - 2);
    while (!(strict ? (w + kv * n) / b > th : (w + kv * n) / b >= th))
        n++;
    return n;
}

/* The decode token (need = n_prompt + k) whose pass the account stops or
 * re-places first under plan p: a device at th of its budget (strict: past
 * it), or the cache past horizon. */
static int predicted_token(const mi_plan *p, const mi_cluster *cl, int n_prompt, int horizon, double th, int strict)
{
    double w[MI_MAX_RANKS], kv[MI_MAX_RANKS];
    mi_plan_mem_account(p, w, kv);
    int best = horizon + 1;
    for (int r = 0; r < p->n_ranks; r++)
        if (kv[r] > 0) {
            int n = first_need(w[r], kv[r], cl->dev[r].mem_bytes, th, strict);
            if (n < best)
                best = n;
        }
    return best - n_prompt;
}

static void test_replacement(void)
{
    mi_config c = stories();
    mi_cluster cl;
    mi_cluster_default(&cl, 4, 0);
    /* the workers hold a third of the weights each and room for about 150 positions over that */
    mi_plan p0;
    mi_cluster big;
    mi_cluster_default(&big, 4, 1e12);
    make_plan(&c, &big, MI_PLANNER_GREEDY, 0, &p0);
    double w[MI_MAX_RANKS], kv[MI_MAX_RANKS];
    mi_plan_mem_account(&p0, w, kv);
    for (int r = 0; r < 4; r++)
        cl.dev[r].mem_bytes = r == 0 ? 1e12 : (w[r] + 150 * kv[r]) / 0.85 + 1e3 * r;
    mi_plan_free(&p0);
    mi_cluster_free(&big);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_GREEDY, 32, &p);
    char err[MI_ERRLEN];
    hook_ctx hx = {&cl, {MI_PLANNER_GREEDY, 1, -1, 0, NULL, 0.7, 32, 0, 0, 0, 0, NULL, 0, 1}};
    mi_sim_request rq = request(&cl, 10, 200);
    rq.replan = hook, rq.replan_ctx = &hx;
    mi_sim_result r;
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&p, &cl, &rq, &r, err), 0);
    CU_ASSERT_FALSE(r.stopped);
    CU_ASSERT_EQUAL(r.n_tokens, 200);
    CU_ASSERT_FATAL(r.n_replans >= 1);
    /* the first: the cache outgrows the 32 positions planned at token 23 (position 33) */
    CU_ASSERT_EQUAL(r.replans[0].token, predicted_token(&p, &cl, 10, 32, 0.85, 0));
    CU_ASSERT_EQUAL(r.replans[0].token, 23);
    CU_ASSERT_EQUAL(r.replans[0].position, 33);
    CU_ASSERT_EQUAL(r.replans[0].horizon, 66);
    /* a move is charged to its token, once */
    for (int i = 0; i < r.n_replans; i++) {
        const mi_sim_replan *e = &r.replans[i];
        int k = e->token;
        CU_ASSERT(e->moved || e->switch_s == 0);
        if (e->moved && k + 1 < r.n_tokens && k - 1 > 0)
            CU_ASSERT(r.token_s[k] >= e->switch_s + 0.99 * fmin(r.token_s[k - 1], r.token_s[k + 1]));
    }
    /* later ones come where the plan in force says: each at the positions its predecessor planned, or
     * where a device crossed 85% under it */
    for (int i = 1; i < r.n_replans; i++)
        CU_ASSERT(r.replans[i].position <= r.replans[i - 1].horizon + 1);
    mi_sim_result_free(&r);
    /* without re-placement, budgets for 150 positions over the weights: a plan for 120 runs until a device
     * would pass its whole budget, and stops there */
    for (int r = 1; r < 4; r++)
        cl.dev[r].mem_bytes = w[r] + 150 * kv[r] + 1e3 * r;
    mi_plan q;
    make_plan(&c, &cl, MI_PLANNER_GREEDY, 120, &q);
    rq.replan = NULL;
    CU_ASSERT_EQUAL_FATAL(mi_simulate(&q, &cl, &rq, &r, err), 0);
    CU_ASSERT(r.stopped);
    CU_ASSERT_EQUAL(r.n_tokens, predicted_token(&q, &cl, 10, 1 << 30, 1.0, 1));
    CU_ASSERT(r.n_tokens > 100 && r.n_tokens < 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.stop_reason, "nothing re-places it"));
    mi_sim_result_free(&r);
    mi_plan_free(&q);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

static void test_request_errors(void)
{
    mi_config c = stories();
    mi_cluster cl;
    mi_cluster_default(&cl, 2, 4e9);
    mi_plan p;
    make_plan(&c, &cl, MI_PLANNER_GREEDY, 0, &p);
    char err[MI_ERRLEN] = "";
    mi_sim_result r;
    mi_sim_request rq = request(&cl, 200, c.seq_len - 199);
    CU_ASSERT_EQUAL(mi_simulate(&p, &cl, &rq, &r, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than the model's context"));
    rq = request(&cl, 4, 4);
    rq.batch = 2; /* the plan's config holds one KV slot */
    CU_ASSERT_EQUAL(mi_simulate(&p, &cl, &rq, &r, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "KV cache slots"));
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

static void expect_error(const char *json, const char *word)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL(mi_cluster_parse(json, &cl, err), -1);
    if (!strstr(err, word)) {
        fprintf(stderr, "\n  expected '%s' in: %s\n", word, err);
        CU_FAIL("error lacks the expected word");
    }
}

static void test_cluster_keys_and_generator(void)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL_FATAL(mi_cluster_parse("{\"link\": {\"latency_ms\": 5, \"jitter_ms\": 2, \"loss_pct\": 1.5, "
                                           "\"shared_medium\": true}, \"devices\": [{\"mem_mb\": 1}]}", &cl, err), 0);
    NEAR(cl.jitter_s, 2e-3, 1e-12);
    NEAR(cl.loss, 0.015, 1e-12);
    CU_ASSERT_EQUAL(cl.shared_medium, 1);
    mi_sim_links lk;
    mi_sim_links_of(&cl, &lk);
    CU_ASSERT(lk.shared_medium && lk.jitter_s > 0 && !mi_sim_links_exact(&lk));
    mi_cluster_free(&cl);
    expect_error("{\"link\": {\"loss_pct\": 100}, \"devices\": [{\"mem_mb\": 1}]}", "loss_pct must be below 100");
    expect_error("{\"link\": {\"jitter_ms\": -1}, \"devices\": [{\"mem_mb\": 1}]}", "link.jitter_ms");
    expect_error("{\"link\": {\"shared_medium\": 1}, \"devices\": [{\"mem_mb\": 1}]}", "true or false");
    expect_error("{\"link\": {\"shared_medium\": true}, \"devices\": [{\"mem_mb\": 1}, {\"mem_mb\": 1}], "
                 "\"links\": {\"bandwidth_mbit\": [[0, 5], [5, 0]]}}", "contradicts");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"speed\": 0}]}", "speed");
    /* a device's CPU quota, period and message cost; the rebuild costs */
    CU_ASSERT_EQUAL_FATAL(mi_cluster_parse("{\"comm_setup_ms\": 12, \"win_setup_ms\": 7, \"devices\": [{\"mem_mb\": 1, "
                                           "\"cpu_quota\": 0.4, \"cpu_period_ms\": 5, \"msg_us\": 30}, {\"mem_mb\": 1, "
                                           "\"cpu_quota\": 1}, {\"mem_mb\": 1}]}", &cl, err), 0);
    NEAR(cl.dev[0].cpu_quota, 0.4, 1e-15);
    NEAR(cl.dev[0].cpu_period_s, 5e-3, 1e-15);
    NEAR(cl.dev[0].msg_s, 30e-6, 1e-15);
    NEAR(cl.dev[1].cpu_period_s, 0.1, 1e-15); /* the kernel's default period */
    CU_ASSERT(cl.dev[2].cpu_quota == 0 && cl.dev[2].msg_s == 0);
    NEAR(cl.comm_setup_s, 12e-3, 1e-15);
    NEAR(cl.comm_setup_all_s, 12e-3, 1e-15);
    NEAR(cl.win_setup_s, 7e-3, 1e-15);
    cl.win_setup_all_s = 9e-3;
    char qpath[4200];
    tu_path(qpath, sizeof qpath, g_dir, "quota.json");
    mi_cluster qb;
    CU_ASSERT_EQUAL_FATAL(mi_cluster_save(&cl, NULL, NULL, qpath, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_cluster_load(qpath, &qb, err), 0);
    NEAR(qb.dev[0].cpu_period_s, 5e-3, 1e-12);
    NEAR(qb.dev[0].msg_s, 30e-6, 1e-12);
    NEAR(qb.win_setup_s, 7e-3, 1e-12);
    NEAR(qb.win_setup_all_s, 9e-3, 1e-12);
    CU_ASSERT(qb.dev[2].cpu_quota == 0);
    mi_cluster_free(&qb);
    mi_cluster_free(&cl);
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"cpu_quota\": 0}]}", "devices[0].cpu_quota must be a fraction");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"cpu_quota\": 1.5}]}", "(got 1.5)");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"cpu_quota\": \"40%\"}]}", "cpu_quota must be");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"cpu_quota\": 0.4, \"cpu_period_ms\": 0}]}", "cpu_period_ms must be");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"cpu_quota\": 0.4, \"cpu_period_ms\": -5}]}", "(got -5)");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"cpu_period_ms\": 5}]}", "without cpu_quota");
    expect_error("{\"devices\": [{\"mem_mb\": 1, \"msg_us\": -1}]}", "msg_us");
    expect_error("{\"win_setup_ms\": [1], \"devices\": [{\"mem_mb\": 1}]}", "win_setup_ms must be");
    /* the generator: seeded, within its ranges, symmetric links; its file parses back the same */
    mi_cluster_gen g;
    mi_cluster_gen_defaults(&g);
    g.n_devices = 9;
    g.jitter_ms = 1, g.loss_pct = 2;
    mi_cluster a, b, back;
    CU_ASSERT_EQUAL_FATAL(mi_cluster_generate(&g, &a, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_cluster_generate(&g, &b, err), 0);
    for (int i = 0; i < 9; i++) {
        CU_ASSERT(a.dev[i].speed >= 0.5 && a.dev[i].speed <= 2 && a.dev[i].speed == b.dev[i].speed);
        CU_ASSERT(a.dev[i].mem_bytes >= 1e9 && a.dev[i].mem_bytes <= 4e9);
        for (int j = 0; j < 9; j++)
            if (i != j) {
                double lat = mi_cluster_latency(&a, i, j), bw = mi_cluster_bandwidth(&a, i, j);
                CU_ASSERT(lat >= 0.05e-3 * (1 - 1e-12) && lat <= 0.5e-3 * (1 + 1e-12));
                CU_ASSERT(bw >= 1e9 / 8 * (1 - 1e-12) && bw <= 1e10 / 8 * (1 + 1e-12));
                CU_ASSERT_EQUAL(lat, mi_cluster_latency(&a, j, i));
                CU_ASSERT_EQUAL(bw, mi_cluster_bandwidth(&a, j, i));
            }
    }
    char path[4200];
    tu_path(path, sizeof path, g_dir, "gen.json");
    CU_ASSERT_EQUAL_FATAL(mi_cluster_save(&a, NULL, "generated", path, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_cluster_load(path, &back, err), 0);
    CU_ASSERT_EQUAL(back.n_devices, 9);
    NEAR(back.jitter_s, 1e-3, 1e-12);
    NEAR(back.loss, 0.02, 1e-12);
    NEAR(mi_cluster_latency(&back, 2, 7), mi_cluster_latency(&a, 2, 7), 1e-12);
    NEAR(mi_cluster_bandwidth(&back, 7, 2), mi_cluster_bandwidth(&a, 7, 2), 1e-12);
    NEAR(back.dev[4].speed, a.dev[4].speed, 1e-12);
    g.seed = 2;
    mi_cluster_free(&b);
    CU_ASSERT_EQUAL_FATAL(mi_cluster_generate(&g, &b, err), 0);
    CU_ASSERT(b.dev[0].speed != a.dev[0].speed);
    g.speed[0] = 3; /* a range running downwards */
    CU_ASSERT_EQUAL(mi_cluster_generate(&g, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "runs downwards"));
    mi_cluster_free(&a);
    mi_cluster_free(&b);
    mi_cluster_free(&back);
}

int main(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_simulate"))
        return 1;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("simulate", NULL, NULL);
    CU_add_test(s, "one device: the cost model's predictions", test_one_device);
    CU_add_test(s, "every planner: walks, conservation, interpolation", test_passes_and_conservation);
    CU_add_test(s, "jitter and loss: drawn, seeded", test_draws);
    CU_add_test(s, "re-placement at the predicted token; out of memory without", test_replacement);
    CU_add_test(s, "requests out of range", test_request_errors);
    CU_add_test(s, "a CFS quota's periods", test_cfs_quota);
    CU_add_test(s, "a quota'd device: slowed by its quota, compute unchanged", test_quota_device);
    CU_add_test(s, "a message cost: conserved, slower within bounds", test_message_cost);
    CU_add_test(s, "a move rebuilds communicators and windows", test_rebuild_cost);
    CU_add_test(s, "pipelined micro-batches", test_micro_batches);
    CU_add_test(s, "cluster keys and generator", test_cluster_keys_and_generator);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures();
    CU_cleanup_registry();
    tu_rm_tree(g_dir);
    return failed ? 1 : 0;
}
