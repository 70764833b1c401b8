/* CUnit tests for Voltron's pieces without MPI: calibrated cluster files
 * (compute model, link matrices, calibration block: parse, save, round
 * trip, errors), the cost model's phases (a prefill pass and TTFT against
 * the regression's own arithmetic), the hybrid planner's choices (model
 * parallelism when one device is much faster or links are slow, tensor
 * parallelism for the FFN when devices are equal and links fast, memory
 * budgets forcing a spread), and the scheme comparison behind --planner
 * auto. Exit status: 0 when every test passed. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_dir[4096];

#define NEAR(a, b, rel) CU_ASSERT(fabs((double)(a) - (double)(b)) <= (rel) * fabs((double)(b)))

static const char *calibrated_json =
    "{\"devices\": ["
    " {\"name\": \"a\", \"mem_mb\": 100, \"host\": \"h0\", \"compute\": {\"pass_ns\": {\"fp32\": 0.2, \"fp16\": 0.1,"
    "  \"q8_0\": 0.06, \"q4_0\": 0.04}, \"pos_ns\": {\"fp32\": 0.02, \"fp16\": 0.03, \"q8_0\": 0.03, \"q4_0\": 0.03},"
    "  \"kv_ns\": 0.25, \"op_us\": 3}, \"hwloc\": {\"cores\": 2}},"
    " {\"name\": \"b\", \"mem_mb\": 50, \"speed\": 0.5}],"
    " \"links\": {\"latency_ms\": [[0, 2], [2, 0]], \"bandwidth_mbit\": [[0, 80], [80, 0]]},"
    " \"calibration\": {\"n_ranks\": 2, \"tool\": \"test\"}}";

static void test_parse_calibrated(void)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL_FATAL(mi_cluster_parse(calibrated_json, &cl, err), 0);
    CU_ASSERT_EQUAL(cl.calib_ranks, 2);
    CU_ASSERT(cl.dev[0].calibrated && !cl.dev[1].calibrated);
    CU_ASSERT_STRING_EQUAL(cl.dev[0].host, "h0");
    NEAR(cl.dev[0].pass_s[MI_F32], 0.2e-9, 1e-12);
    NEAR(cl.dev[0].pos_s[MI_Q4_0], 0.03e-9, 1e-12);
    NEAR(cl.dev[0].kv_s, 0.25e-9, 1e-12);
    NEAR(cl.dev[0].op_s, 3e-6, 1e-12);
    /* the uncalibrated device gets the roofline: 4 bytes over mem_bw * speed */
    NEAR(cl.dev[1].pass_s[MI_F32], 4.0 / (20e9 * 0.5), 1e-12);
    NEAR(cl.dev[1].pass_s[MI_Q4_0], 18.0 / 32 / (20e9 * 0.5), 1e-12);
    NEAR(cl.dev[1].pos_s[MI_F32], 2.0 / (10e9 * 0.5), 1e-12);
    /* links: one-way latency from the matrix, bandwidth in bytes/s */
    NEAR(mi_cluster_latency(&cl, 0, 1), 2e-3, 1e-12);
    NEAR(mi_cluster_bandwidth(&cl, 1, 0), 80e6 / 8, 1e-12);
    NEAR(mi_cluster_bandwidth(&cl, 0, 0), cl.bandwidth, 1e-12);

    /* save and parse back: the same model */
    char path[4200];
    tu_path(path, sizeof path, g_dir, "saved.json");
    const char *hw[] = {"{\"cores\": 2}", NULL};
    CU_ASSERT_EQUAL_FATAL(mi_cluster_save(&cl, hw, "round trip", path, err), 0);
    mi_cluster back;
    CU_ASSERT_EQUAL_FATAL(mi_cluster_load(path, &back, err), 0);
    CU_ASSERT_EQUAL(back.calib_ranks, 2);
    CU_ASSERT_STRING_EQUAL(back.dev[0].name, "a");
    for (int t = 0; t < MI_N_DTYPES; t++) {
        NEAR(back.dev[0].pass_s[t], cl.dev[0].pass_s[t], 1e-9);
        NEAR(back.dev[0].pos_s[t], cl.dev[0].pos_s[t], 1e-9);
        NEAR(back.dev[1].pass_s[t], cl.dev[1].pass_s[t], 1e-9);
    }
    NEAR(mi_cluster_latency(&back, 1, 0), 2e-3, 1e-9);
    NEAR(mi_cluster_bandwidth(&back, 0, 1), 80e6 / 8, 1e-9);
    CU_ASSERT(!tu_dir_has_partial(g_dir));
    mi_cluster_free(&back);
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
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
}

static void test_calibrated_errors(void)
{
    const char *dev = "{\"name\": \"a\", \"mem_mb\": 1";
    char buf[1024];
    /* a compute block missing a dtype, a negative time, an unknown key */
    snprintf(buf, sizeof buf, "{\"devices\": [%s, \"compute\": {\"pass_ns\": {\"fp32\": 1, \"fp16\": 1, \"q8_0\": 1},"
                              " \"pos_ns\": {\"fp32\": 1, \"fp16\": 1, \"q8_0\": 1, \"q4_0\": 1}, \"kv_ns\": 1}}]}", dev);
    expect_error(buf, "q4_0 is missing");
    snprintf(buf, sizeof buf, "{\"devices\": [%s, \"compute\": {\"pass_ns\": {\"fp32\": -1, \"fp16\": 1, \"q8_0\": 1, "
                              "\"q4_0\": 1}, \"pos_ns\": {\"fp32\": 1, \"fp16\": 1, \"q8_0\": 1, \"q4_0\": 1}, \"kv_ns\": 1}}]}", dev);
    expect_error(buf, "pass_ns");
    snprintf(buf, sizeof buf, "{\"devices\": [%s, \"compute\": {\"flops\": 1}}]}", dev);
    expect_error(buf, "flops");
    /* link matrices of the wrong size, a zero bandwidth */
    const char *dev_b = "{\"name\": \"b\", \"mem_mb\": 1";
    snprintf(buf, sizeof buf, "{\"devices\": [%s}, %s}], \"links\": {\"latency_ms\": [[0, 1]]}}", dev, dev_b);
    expect_error(buf, "2 rows of 2");
    snprintf(buf, sizeof buf, "{\"devices\": [%s}, %s}], \"links\": {\"bandwidth_mbit\": [[0, 0], [1, 0]]}}", dev,
             dev_b);
    expect_error(buf, "links.bandwidth_mbit[0][1] must be a number from 1e-6 to 1e9 (got 0)");
    /* two devices of one name: a name identifies its device */
    snprintf(buf, sizeof buf, "{\"devices\": [%s}, %s}]}", dev, dev);
    expect_error(buf, "devices[1].name 'a' is also devices[0]'s");
    /* a calibration made on another number of ranks than the devices listed */
    snprintf(buf, sizeof buf, "{\"devices\": [%s}], \"calibration\": {\"n_ranks\": 3}}", dev);
    expect_error(buf, "n_ranks");
}

/* A two-rank plan: every layer whole on rank w (rank 0 embeds and classifies). */
static void worker_plan(const mi_config *c, mi_plan *p, int w)
{
    memset(p, 0, sizeof *p);
    p->cfg = *c;
    p->n_ranks = 2;
    p->planner = MI_PLANNER_LAYERWISE;
    p->kv_positions = c->seq_len;
    p->layers = calloc((size_t)c->n_layers, sizeof *p->layers);
    for (int l = 0; l < c->n_layers; l++) {
        for (int k = 0; k < c->n_kv_heads; k++)
            p->layers[l].kv_rank[k] = w;
        p->layers[l].proj_rank = w;
        p->layers[l].n_ffn = 1;
        p->layers[l].ffn = malloc(sizeof(mi_slice));
        p->layers[l].ffn[0] = (mi_slice){w, 0, c->hidden_dim};
    }
    p->n_cls = 1;
    p->cls = malloc(sizeof(mi_slice));
    p->cls[0] = (mi_slice){0, 0, c->vocab_size};
}

static void test_prefill_cost(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    mi_cluster cl;
    mi_cluster_default(&cl, 2, 1e12);
    for (int r = 0; r < 2; r++) {
        mi_device *d = &cl.dev[r];
        d->calibrated = 1;
        for (int t = 0; t < MI_N_DTYPES; t++) {
            d->pass_s[t] = 1e-9;
            d->pos_s[t] = 0.1e-9;
        }
        d->kv_s = 0.5e-9;
        d->op_s = 0;
    }
    mi_plan p;
    worker_plan(&c, &p, 1);
    mi_programs prog;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    /* rank 1's compute in a pass of T positions at context ctx is the
     * regression applied to its weights and attention */
    double D = c.dim, H = c.hidden_dim, hd = c.head_dim, nq = c.n_heads;
    double wl = nq * hd * D * 3 /* wq wk wv (no GQA) */ + D * nq * hd /* wo */ + 3 * H * D /* w1 w3 w2 */;
    int T = 16, ctx = 32;
    mi_prediction pr;
    mi_predict_pass(&p, &prog, &cl, MI_PHASE_PREFILL, T, ctx, &pr);
    double cached = (double)T * ctx + T * (T + 1) / 2.0;
    double expect = c.n_layers * (wl * (1e-9 + (T - 1) * 0.1e-9) + nq * 0.5e-9 * hd * cached);
    NEAR(pr.busy_s[1], expect, 1e-9);
    /* a decode step: one position */
    mi_predict(&p, &prog, &cl, ctx, &pr);
    NEAR(pr.busy_s[1], c.n_layers * (wl * 1e-9 + nq * 0.5e-9 * hd * (ctx + 1)), 1e-9);
    /* TTFT of 100 tokens = passes of 64 and 36 */
    mi_prediction a, b;
    mi_predict_pass(&p, &prog, &cl, MI_PHASE_PREFILL, 64, 0, &a);
    mi_predict_pass(&p, &prog, &cl, MI_PHASE_PREFILL, 36, 64, &b);
    NEAR(mi_predict_ttft(&p, &prog, &cl, 100, 64), a.token_s + b.token_s, 1e-12);
    /* TPOT over 9 steps from 10 = the step at context 14 */
    mi_predict(&p, &prog, &cl, 14, &a);
    NEAR(mi_predict_tpot(&p, &prog, &cl, 10, 9), a.token_s, 1e-12);
    /* a batched decode pass: B = 1 is the decode step; B = 8 rows stream the
     * weights once (pos_s a tenth of pass_s here) and rank 0 computes every
     * row's logits: dearer than one step, far cheaper than eight */
    NEAR(mi_predict_batch_step(&p, &prog, &cl, 14, 1), a.token_s, 1e-12);
    double b8 = mi_predict_batch_step(&p, &prog, &cl, 14, 8);
    mi_predict_pass(&p, &prog, &cl, MI_PHASE_PREFILL, 8, 14, &b);
    CU_ASSERT(b8 > b.token_s); /* ... the logits of 8 rows, not of the last one */
    CU_ASSERT(b8 > 1.5 * a.token_s && b8 < 3 * a.token_s);
    /* KV cache slots multiply the KV cache a shard holds, and the plan's account of it */
    size_t w1, kv1, w2, kv2;
    mi_plan_rank_memory(&p, 1, &w1, &kv1);
    p.cfg.kv_slots = 3;
    mi_plan_rank_memory(&p, 1, &w2, &kv2);
    p.cfg.kv_slots = 0;
    CU_ASSERT_EQUAL(w2, w1);
    CU_ASSERT_EQUAL(kv2, 3 * kv1);
    mi_programs_free(&prog);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

/* n calibrated devices: speed[r] relative, budgets mem[r] bytes, links lat/bw. */
static void cluster_of(mi_cluster *cl, int n, const double *speed, const double *mem, double lat, double bw)
{
    mi_cluster_default(cl, n, 1e12);
    for (int r = 0; r < n; r++) {
        mi_device *d = &cl->dev[r];
        d->calibrated = 1;
        d->mem_bytes = mem ? mem[r] : 1e12;
        d->speed = speed[r];
        for (int t = 0; t < MI_N_DTYPES; t++) {
            d->pass_s[t] = 0.15e-9 / speed[r];
            d->pos_s[t] = 0.03e-9 / speed[r];
        }
        d->kv_s = 0.2e-9 / speed[r];
        d->op_s = 2e-6;
    }
    cl->latency_s = lat;
    cl->bandwidth = bw;
}

/* HeadSplit's energy and Voltron §4.4's DVFS levels under a TPOT limit. */
static void test_energy(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    const double speed[2] = {1, 1};
    mi_cluster cl;
    cluster_of(&cl, 2, speed, NULL, 1e-4, 1e9);
    mi_plan p;
    worker_plan(&c, &p, 1);
    mi_programs prog;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    /* joules per token: idle power for the whole step, the active excess while computing */
    mi_prediction pr;
    mi_predict(&p, &prog, &cl, 100, &pr);
    double per[2], t = 0, j = mi_predict_energy(&p, &prog, &cl, NULL, 100, &t, per);
    CU_ASSERT_DOUBLE_EQUAL(t, pr.token_s, 1e-15);
    for (int r = 0; r < 2; r++)
        CU_ASSERT_DOUBLE_EQUAL(per[r], 3.8 * pr.token_s + (4.9 - 3.8) * pr.busy_s[r], 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(j, per[0] + per[1], 1e-12);
    CU_ASSERT(pr.busy_s[0] > 0 && pr.busy_s[1] > 0); /* rank 0 embeds and classifies, rank 1 the layers */
    /* at level 0.5 a device computes twice as long at 1/8 of the active excess */
    CU_ASSERT_DOUBLE_EQUAL(mi_device_power_w(&cl.dev[0], 0.5), 3.8 + 1.1 / 8, 1e-12);
    for (int r = 0; r < 2; r++) {
        cl.dev[r].n_freq = 2;
        cl.dev[r].freq[1] = 0.5;
    }
    double f[2] = {1, 0.5}, t2 = 0;
    mi_predict_energy(&p, &prog, &cl, f, 100, &t2, NULL);
    CU_ASSERT(t2 > t + 0.95 * pr.busy_s[1] && t2 < t + 1.05 * pr.busy_s[1]); /* rank 1 twice as long */
    /* no margin: every device stays at its top level */
    mi_energy_result r;
    CU_ASSERT_EQUAL(mi_energy_plan(&p, &prog, &cl, 100, t * 1.01, &r, err), 0);
    CU_ASSERT_EQUAL(r.freq[0], 1.0);
    CU_ASSERT_EQUAL(r.freq[1], 1.0);
    CU_ASSERT_DOUBLE_EQUAL(r.joules, r.top_joules, 1e-15);
    /* idle power dominating (HeadSplit's Pi), a slower device on the critical path (both are, in
     * a pipeline) costs every device's idle power for longer than it saves: even with room, none goes down */
    CU_ASSERT_EQUAL(mi_energy_plan(&p, &prog, &cl, 100, t * 3, &r, err), 0);
    CU_ASSERT_EQUAL(r.freq[0], 1.0);
    CU_ASSERT_EQUAL(r.freq[1], 1.0);
    /* dynamic power dominating, the margin goes to lower levels, within the limit */
    for (int d = 0; d < 2; d++)
        cl.dev[d].idle_w = 0.1, cl.dev[d].active_w = 8;
    CU_ASSERT_EQUAL(mi_energy_plan(&p, &prog, &cl, 100, t * 3, &r, err), 0);
    CU_ASSERT_EQUAL(r.freq[0], 0.5);
    CU_ASSERT_EQUAL(r.freq[1], 0.5);
    CU_ASSERT(r.token_s <= t * 3);
    /* with room for one of them only (rank 1 slowed adds its whole compute time), the one that saves most */
    mi_energy_result one;
    double lim = t + 1.02 * (pr.busy_s[0] > pr.busy_s[1] ? pr.busy_s[0] : pr.busy_s[1]);
    CU_ASSERT_EQUAL(mi_energy_plan(&p, &prog, &cl, 100, lim, &one, err), 0);
    CU_ASSERT_EQUAL((one.freq[0] < 1) + (one.freq[1] < 1), 1);
    CU_ASSERT(one.token_s <= lim && one.joules < one.top_joules && one.joules > r.joules);
    CU_ASSERT(r.joules < 0.5 * r.top_joules);
    CU_ASSERT(r.evaluated >= 3);
    /* a limit the top levels miss already: said, with the predicted TPOT */
    CU_ASSERT_EQUAL(mi_energy_plan(&p, &prog, &cl, 100, t * 0.5, &r, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "already over"));
    mi_programs_free(&prog);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

static int plan_hybrid(const mi_config *c, const mi_cluster *cl, int prefill, mi_plan *p)
{
    mi_plan_options po = {MI_PLANNER_HYBRID, 1, -1, 0, NULL, 0.7, 0, MI_F32, prefill, 64, 0, NULL, 0, 0};
    char err[MI_ERRLEN] = "";
    int rc = mi_plan_make(c, cl, &po, p, err);
    if (rc)
        fprintf(stderr, "\n  hybrid: %s\n", err);
    return rc;
}

static void test_hybrid_choices(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("tinyllama-1.1b", &c), 0);
    mi_plan p;
    /* one fast device with room for all and slow links: everything on it */
    double fast[] = {1, 0.25, 0.25, 0.25};
    mi_cluster cl;
    cluster_of(&cl, 4, fast, NULL, 5e-3, 10e6);
    CU_ASSERT_EQUAL_FATAL(plan_hybrid(&c, &cl, 0, &p), 0);
    for (int l = 0; l < c.n_layers; l++) {
        CU_ASSERT_EQUAL(p.layers[l].proj_rank, 0);
        CU_ASSERT(p.layers[l].n_ffn == 1 && p.layers[l].ffn[0].rank == 0);
    }
    mi_plan_free(&p);
    mi_cluster_free(&cl);
    /* equal devices on fast links while decoding: the FFN (the most weights)
     * is split, every layer alike, each device a quarter */
    double eq[] = {1, 1, 1, 1};
    cluster_of(&cl, 4, eq, NULL, 20e-6, 5e9);
    CU_ASSERT_EQUAL_FATAL(plan_hybrid(&c, &cl, 0, &p), 0);
    for (int l = 0; l < c.n_layers; l++) {
        CU_ASSERT_EQUAL(p.layers[l].n_ffn, 4);
        for (int i = 0; i < p.layers[l].n_ffn; i++)
            CU_ASSERT_EQUAL(p.layers[l].ffn[i].n, c.hidden_dim / 4);
    }
    mi_plan_free(&p);
    mi_cluster_free(&cl);
    /* budgets: no device holds more than its share; with these, the layers spread */
    double mem[] = {2.0e9, 1.2e9, 1.2e9, 1.2e9};
    cluster_of(&cl, 4, fast, mem, 5e-3, 10e6);
    CU_ASSERT_EQUAL_FATAL(plan_hybrid(&c, &cl, 0, &p), 0);
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL(mi_plan_validate(&p, &cl, err), 0);
    int used[4] = {0};
    for (int l = 0; l < c.n_layers; l++) {
        for (int k = 0; k < c.n_kv_heads; k++)
            used[p.layers[l].kv_rank[k]] = 1;
        for (int i = 0; i < p.layers[l].n_ffn; i++)
            used[p.layers[l].ffn[i].rank] = 1;
    }
    CU_ASSERT(used[0] + used[1] + used[2] + used[3] >= 3);
    mi_plan_free(&p);
    /* too little memory in all: one error naming the sublayer */
    double tiny[] = {0.3e9, 0.1e9, 0.1e9, 0.1e9};
    mi_cluster_free(&cl);
    cluster_of(&cl, 4, fast, tiny, 5e-3, 10e6);
    mi_plan_options po = {MI_PLANNER_HYBRID, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    err[0] = 0;
    CU_ASSERT_EQUAL(mi_plan_make(&c, &cl, &po, &p, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not fit"));
    mi_cluster_free(&cl);
}

/* Re-placing costs what the runtime moves: nothing between equal plans; to
 * move every layer from rank 1 to rank 0, rank 0 reads those weights from
 * storage and receives every KV head's cached positions. */
static void test_switch_cost(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    mi_cluster cl;
    mi_cluster_default(&cl, 2, 1e12);
    cl.storage_bw = 50e6;
    cl.bandwidth = 10e6;
    mi_plan a, b;
    worker_plan(&c, &a, 1);
    worker_plan(&c, &b, 0);
    CU_ASSERT(mi_plan_switch_s(&a, &a, &cl, 100) == 0.0);
    size_t wa, wb;
    mi_plan_rank_memory(&a, 0, &wa, NULL);
    mi_plan_rank_memory(&b, 0, &wb, NULL);
    double kv = (double)c.n_layers * c.n_kv_heads * 2.0 * 100 * c.head_dim * sizeof(float);
    NEAR(mi_plan_switch_s(&a, &b, &cl, 100), (double)(wb - wa) / 50e6 + kv / 10e6, 1e-9);
    mi_plan_free(&a);
    mi_plan_free(&b);
    mi_cluster_free(&cl);
}

/* An importance table with nothing measured (NAN everywhere but fp32's 0). */
static void imp_clear(mi_importance *imp, int L)
{
    memset(imp, 0, sizeof *imp);
    imp->n_layers = L;
    imp->version = 1;
    for (int l = 0; l < L; l++)
        for (int t = 0; t < MI_N_DTYPES; t++)
            imp->rise[l][t] = t == MI_F32 ? 0 : NAN;
}

/* Voltron's precision search: the fewest downgrades, least important first,
 * that fit; one fewer does not; unreachable targets name the best reachable;
 * an importance file for another model is refused. */
static void test_precision_search(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    double sp[] = {1, 0.5, 0.25, 0.25};
    double mem[] = {39e6, 3.5e6, 2e6, 2e6};
    mi_cluster cl;
    cluster_of(&cl, 4, sp, mem, 1e-3, 12.5e6);
    static mi_importance imp;
    imp_clear(&imp, c.n_layers); /* q8_0 and q4_0 measured only, as a version 1 file */
    for (int l = 0; l < c.n_layers; l++) {
        imp.rise[l][MI_Q8_0] = 0.01 * (c.n_layers - l); /* the last layers matter least */
        imp.rise[l][MI_Q4_0] = 0.1 * (l + 1);           /* ... unless lowered to q4_0 */
    }
    mi_plan_options po = {MI_PLANNER_HYBRID, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_precision_query q = {0, 0, 32, 64, 64};
    static mi_precision_result r;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL_FATAL(mi_precision_search(&c, &cl, &po, &imp, &q, &r, err), 0);
    CU_ASSERT(r.steps > c.n_layers && r.steps < 2 * c.n_layers); /* all of q8_0 and some of q4_0 */
    /* q4_0 went to the layers whose step adds least: the first ones */
    int n4 = r.steps - c.n_layers;
    for (int l = 0; l < c.n_layers; l++)
        CU_ASSERT_EQUAL(r.cfg.dtype[l][MI_W1], l < n4 ? MI_Q4_0 : MI_Q8_0);
    mi_plan p;
    CU_ASSERT_EQUAL(mi_plan_make(&r.cfg, &cl, &po, &p, err), 0);
    mi_plan_free(&p);
    mi_config fewer = r.cfg; /* one downgrade fewer does not fit */
    for (int m = 0; m < MI_N_LAYER_MATS; m++)
        fewer.dtype[n4 - 1][m] = MI_Q8_0;
    CU_ASSERT_NOT_EQUAL(mi_plan_make(&fewer, &cl, &po, &p, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.spec, "0:q4_0"));
    /* the q4_0 order is by what the step adds, not the layer's total: here
     * the increments 0.1 (L - l) favour the last layers while the totals
     * 0.5 (l + 1) + 0.1 (L - l) = 0.4 l + 0.5 + 0.1 L favour the first ones;
     * the expected rise is every layer's q8_0 rise plus the increments taken */
    int L = c.n_layers;
    for (int l = 0; l < L; l++) {
        imp.rise[l][MI_Q8_0] = 0.5 * (l + 1);
        imp.rise[l][MI_Q4_0] = imp.rise[l][MI_Q8_0] + 0.1 * (L - l);
    }
    CU_ASSERT_EQUAL_FATAL(mi_precision_search(&c, &cl, &po, &imp, &q, &r, err), 0);
    n4 = r.steps - L;
    CU_ASSERT(n4 > 0 && n4 < L);
    double want = 0;
    for (int l = 0; l < L; l++) {
        CU_ASSERT_EQUAL(r.cfg.dtype[l][MI_WQ], l >= L - n4 ? MI_Q4_0 : MI_Q8_0);
        want += imp.rise[l][MI_Q8_0] + (l >= L - n4 ? 0.1 * (L - l) : 0);
    }
    CU_ASSERT_DOUBLE_EQUAL(r.rise, want, 1e-9);
    /* equal importances everywhere: the lower layer goes first */
    for (int l = 0; l < L; l++) {
        imp.rise[l][MI_Q8_0] = 0.25;
        imp.rise[l][MI_Q4_0] = 0.75;
    }
    CU_ASSERT_EQUAL_FATAL(mi_precision_search(&c, &cl, &po, &imp, &q, &r, err), 0);
    n4 = r.steps - L;
    CU_ASSERT(n4 > 0 && n4 < L);
    for (int l = 0; l < L; l++)
        CU_ASSERT_EQUAL(r.cfg.dtype[l][MI_W2], l < n4 ? MI_Q4_0 : MI_Q8_0);
    CU_ASSERT_DOUBLE_EQUAL(r.rise, 0.25 * L + 0.5 * n4, 1e-9);
    /* a budget that every layer at q8_0 meets: only the least important go
     * down to q8_0 (rises 0.3, 0.1, 0.5, ...: layer 1 first, then 0) */
    for (int l = 0; l < L; l++) {
        imp.rise[l][MI_Q8_0] = l == 1 ? 0.1 : 0.3 + 0.2 * (l != 0) * l;
        imp.rise[l][MI_Q4_0] = 10;
    }
    double roomy[] = {39e6, 3.5e6 * 2.2, 2e6 * 2.2, 2e6 * 2.2};
    mi_cluster cq;
    cluster_of(&cq, 4, sp, roomy, 1e-3, 12.5e6);
    int rcq = mi_precision_search(&c, &cq, &po, &imp, &q, &r, err);
    if (rcq)
        printf("\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rcq, 0);
    CU_ASSERT(r.steps >= 1 && r.steps < L);
    double want8 = 0;
    for (int i = 0; i < r.steps; i++) /* the order: 1, 0, 2, 3, ... */
        want8 += imp.rise[i == 0 ? 1 : i == 1 ? 0 : i][MI_Q8_0];
    for (int l = 0; l < L; l++) {
        int rank = l == 1 ? 0 : l == 0 ? 1 : l; /* l's place in that order */
        CU_ASSERT_EQUAL(r.cfg.dtype[l][MI_WQ], rank < r.steps ? MI_Q8_0 : MI_F32);
    }
    CU_ASSERT_DOUBLE_EQUAL(r.rise, want8, 1e-9);
    mi_cluster_free(&cq);
    /* a TPOT no configuration reaches: the error names the best reachable */
    q.tpot_s = 1e-6;
    CU_ASSERT_EQUAL(mi_precision_search(&c, &cl, &po, &imp, &q, &r, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot be met"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "reaches TTFT"));
    /* Voltron's pruning after precision: with shard importances, budgets that every-layer-q4_0
     * misses are met by pruning the same number of FFN shards from every layer */
    imp.ffn_shard = 64;
    imp.n_shards = c.hidden_dim / 64; /* 12 */
    for (int l = 0; l < c.n_layers; l++)
        for (int j = 0; j < imp.n_shards; j++)
            imp.prune[l][j] = (float)((j * 5 + l) % imp.n_shards) + 1; /* each layer's order differs */
    int keep[MI_MAX_LAYERS * 768];
    /* level 2 drops the two least important of each layer: (5j + l) mod 12 in {0, 1}, costing 1 + 2 */
    CU_ASSERT_DOUBLE_EQUAL(mi_prune_keep(&imp, c.hidden_dim, 2, keep), c.n_layers * 3.0, 1e-9);
    CU_ASSERT_EQUAL(keep[0], 64);          /* layer 0 loses shard 0 ((5*0) mod 12 = 0) ... */
    CU_ASSERT_EQUAL(keep[4 * 64 - 1], 5 * 64 - 1); /* ... and shard 5 (25 mod 12 = 1): shards 1-4 kept, */
    CU_ASSERT_EQUAL(keep[4 * 64], 6 * 64);         /* then shard 6 */
    CU_ASSERT_EQUAL(mi_prune_keep(&imp, c.hidden_dim, imp.n_shards, NULL), -1);
    CU_ASSERT_EQUAL(mi_prune_keep(&imp, c.hidden_dim + 64, 1, NULL), -1);
    double mem2[] = {39e6, 1.5e6, 1.5e6, 1.4e6}; /* under q4_0 everywhere with 256 positions of KV cache */
    mi_cluster tight;
    cluster_of(&tight, 4, sp, mem2, 1e-3, 12.5e6);
    q.tpot_s = 0;
    int rc = mi_precision_search(&c, &tight, &po, &imp, &q, &r, err);
    if (rc)
        printf("\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(r.prune_k > 0 && r.prune_k <= imp.n_shards / 2);
    CU_ASSERT_EQUAL(r.ffn_shard, 64);
    CU_ASSERT_EQUAL(r.cfg.hidden_dim, c.hidden_dim - 64 * r.prune_k);
    CU_ASSERT_EQUAL(r.steps, 2 * c.n_layers + r.prune_k); /* every layer q4_0 first */
    CU_ASSERT_EQUAL(mi_plan_make(&r.cfg, &tight, &po, &p, err), 0);
    mi_plan_free(&p);
    mi_config less = r.cfg; /* one shard fewer pruned does not fit */
    less.hidden_dim += 64;
    CU_ASSERT_NOT_EQUAL(mi_plan_make(&less, &tight, &po, &p, err), 0);
    mi_cluster_free(&tight);
    /* importance files: one for another model, one malformed */
    char path[4200];
    tu_path(path, sizeof path, g_dir, "imp.json");
    tu_write_text(path, "{\"model\": \"tinyllama-1.1b\", \"n_layers\": 22, \"dim\": 2048, \"hidden_dim\": 5632, "
                        "\"layers\": []}");
    CU_ASSERT_EQUAL(mi_importance_load(path, &c, &imp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is for tinyllama-1.1b"));
    tu_write_text(path, "{\"model\": \"stories15M\"}");
    CU_ASSERT_EQUAL(mi_importance_load(path, &c, &imp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not an importance file"));
    /* pruning entries that do not fit the model: a shard that cuts hidden_dim, a short list */
    char text[4096];
    int o = snprintf(text, sizeof text, "{\"model\": \"%s\", \"n_layers\": %d, \"dim\": %d, \"hidden_dim\": %d, "
                                        "\"ffn_shard\": 48, \"layers\": [", c.name, c.n_layers, c.dim, c.hidden_dim);
    for (int l = 0; l < c.n_layers; l++)
        o += snprintf(text + o, sizeof text - (size_t)o, "%s{\"layer\": %d, \"q8_0\": 0, \"q4_0\": 0, \"prune\": "
                      "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}", l ? "," : "", l);
    snprintf(text + o, sizeof text - (size_t)o, "]}");
    tu_write_text(path, text);
    CU_ASSERT_EQUAL(mi_importance_load(path, &c, &imp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "ffn_shard must be a multiple of 32"));
    char *sh = strstr(text, "\"ffn_shard\": 48");
    memcpy(sh, "\"ffn_shard\": 64", 15);
    tu_write_text(path, text);
    CU_ASSERT_EQUAL(mi_importance_load(path, &c, &imp, err), 0);
    CU_ASSERT_EQUAL(imp.n_shards, 12);
    CU_ASSERT_DOUBLE_EQUAL(imp.prune[2][11], 12.0, 1e-9);
    memcpy(sh, "\"ffn_shard\": 32", 15); /* 24 shards: 12 listed */
    tu_write_text(path, text);
    CU_ASSERT_EQUAL(mi_importance_load(path, &c, &imp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layers[0].prune must list 24 numbers"));
    mi_cluster_free(&cl);
}

/* 1 when config c fits the one device of cl with a budget of mem bytes. */
static int fits_in(const mi_config *c, mi_cluster *cl, const mi_plan_options *po, double mem)
{
    mi_plan p;
    char err[MI_ERRLEN];
    cl->dev[0].mem_bytes = mem;
    if (mi_plan_make(c, cl, po, &p, err))
        return 0;
    mi_plan_free(&p);
    return 1;
}

/* Voltron's precision ladder with the k-quants: ordered by bytes per weight
 * (q4_K above q4_0, which ties it and measures worse), the rungs a layer can
 * hold (k-quants only where every blocked axis is whole super-blocks of 256),
 * and the search's choice on a hand-made importance table: with the budget
 * that every layer at q8_0 but one at q6_K just fits, the layer whose q6_K
 * step adds least goes to q6_K and no other; the end of the chain is q4_K
 * unless a device multiplies q4_0 faster; version 2 files read, newer ones
 * refused. */
static void test_precision_ladder(void)
{
    for (int i = 1; i < MI_N_RUNGS; i++)
        CU_ASSERT(mi_dtype_row_bytes(mi_precision_ladder[i], MI_QK_K) <=
                  mi_dtype_row_bytes(mi_precision_ladder[i - 1], MI_QK_K));
    CU_ASSERT_EQUAL(mi_precision_rung(MI_Q6_K), 3);
    CU_ASSERT_EQUAL(mi_precision_rung(MI_Q4_K), 5);
    CU_ASSERT_EQUAL(mi_precision_rung(MI_Q4_0), 6);
    mi_config s15, k;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &s15), 0);
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("tiny-kquant", &k), 0);
    CU_ASSERT(!mi_precision_holds(&s15, 0, MI_Q4_K)); /* dim 288 */
    CU_ASSERT(mi_precision_holds(&s15, 0, MI_Q4_0));
    CU_ASSERT(mi_precision_holds(&k, 0, MI_Q6_K));
    int to[MI_N_RUNGS];
    CU_ASSERT_EQUAL(mi_precision_chain(&s15, 0, NULL, 0, to), 3);
    CU_ASSERT(to[0] == MI_F16 && to[1] == MI_Q8_0 && to[2] == MI_Q4_0);
    CU_ASSERT_EQUAL(mi_precision_chain(&k, 0, NULL, 0, to), 5);
    CU_ASSERT(to[2] == MI_Q6_K && to[3] == MI_Q5_K && to[4] == MI_Q4_K);
    CU_ASSERT_EQUAL(mi_precision_chain(&k, 0, NULL, 1, to), 6);
    CU_ASSERT_EQUAL(to[5], MI_Q4_0);
    mi_config k6 = k;
    memset(k6.dtype[1], MI_Q6_K, MI_N_LAYER_MATS);
    CU_ASSERT_EQUAL(mi_precision_chain(&k6, 1, NULL, 0, to), 2);
    CU_ASSERT(to[0] == MI_Q5_K && to[1] == MI_Q4_K);
    static mi_importance imp;
    imp_clear(&imp, k.n_layers); /* a version 1 table: q8_0 and q4_0 only */
    for (int l = 0; l < k.n_layers; l++)
        imp.rise[l][MI_Q8_0] = 0.01, imp.rise[l][MI_Q4_0] = 1;
    CU_ASSERT_EQUAL(mi_precision_chain(&k, 0, &imp, 0, to), 2);
    CU_ASSERT(to[0] == MI_Q8_0 && to[1] == MI_Q4_0);
    /* the search: every rung measured; layer 2's q6_K step adds 0.01, the others' 0.19 */
    int L = k.n_layers;
    for (int l = 0; l < L; l++) {
        imp.rise[l][MI_F16] = 0.001 * (l + 1);
        imp.rise[l][MI_Q8_0] = 0.01;
        imp.rise[l][MI_Q6_K] = l == 2 ? 0.02 : 0.2;
        imp.rise[l][MI_Q5_K] = imp.rise[l][MI_Q6_K] + 0.5;
        imp.rise[l][MI_Q4_K] = imp.rise[l][MI_Q6_K] + 1;
        imp.rise[l][MI_Q4_0] = imp.rise[l][MI_Q6_K] + 2;
    }
    imp.version = 2;
    mi_config want = k;
    for (int l = 0; l < L; l++)
        memset(want.dtype[l], l == 2 ? MI_Q6_K : MI_Q8_0, MI_N_LAYER_MATS);
    double sp[] = {1};
    mi_cluster cl;
    cluster_of(&cl, 1, sp, NULL, 1e-3, 12.5e6);
    mi_plan_options po = {MI_PLANNER_HYBRID, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    double lo = 1e5, hi = 1e9; /* the least budget the wanted configuration fits */
    CU_ASSERT_FATAL(fits_in(&want, &cl, &po, hi) && !fits_in(&want, &cl, &po, lo));
    while (hi - lo > 1) {
        double mid = 0.5 * (lo + hi);
        *(fits_in(&want, &cl, &po, mid) ? &hi : &lo) = mid;
    }
    mi_config all8 = want; /* one step fewer: every layer q8_0, which that budget misses */
    memset(all8.dtype[2], MI_Q8_0, MI_N_LAYER_MATS);
    CU_ASSERT(!fits_in(&all8, &cl, &po, hi));
    cl.dev[0].mem_bytes = hi;
    mi_precision_query q = {0, 0, 32, 64, 64};
    static mi_precision_result r;
    char err[MI_ERRLEN] = "";
    int rc = mi_precision_search(&k, &cl, &po, &imp, &q, &r, err);
    if (rc)
        printf("\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(r.steps, 2 * L + 1); /* every layer to fp16, to q8_0, then one to q6_K */
    for (int l = 0; l < L; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            CU_ASSERT_EQUAL(r.cfg.dtype[l][m], want.dtype[l][m]);
    CU_ASSERT_DOUBLE_EQUAL(r.rise, 3 * 0.01 + 0.02, 1e-9);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.spec, "2:q6_K"));
    CU_ASSERT_EQUAL(r.kquant_layers, L);
    CU_ASSERT_STRING_EQUAL(r.kquant_note, "");
    /* nothing reaches the target: the chain ends at q4_K (q4_0 ties it in bytes and is no
     * faster here), or at q4_0 when the device's q4_0 product is the faster */
    q.tpot_s = 1e-9;
    CU_ASSERT_EQUAL(mi_precision_search(&k, &cl, &po, &imp, &q, &r, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "every layer q4_K"));
    cl.dev[0].pass_s[MI_Q4_0] *= 0.5;
    CU_ASSERT_EQUAL(mi_precision_search(&k, &cl, &po, &imp, &q, &r, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "every layer q4_0"));
    q.tpot_s = 0;
    cl.dev[0].mem_bytes = 1e12;
    /* stories15M (dim 288) holds no k-quant: the search says why */
    static mi_importance i15;
    imp_clear(&i15, s15.n_layers);
    for (int l = 0; l < s15.n_layers; l++)
        i15.rise[l][MI_Q8_0] = 0.01, i15.rise[l][MI_Q4_0] = 0.1;
    CU_ASSERT_EQUAL(mi_precision_search(&s15, &cl, &po, &i15, &q, &r, err), 0);
    CU_ASSERT_EQUAL(r.kquant_layers, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.kquant_note, "dim 288"));
    /* a version 2 file: k-quant rises read, null where not measured; version 3 refused */
    char path[4200], text[4096];
    tu_path(path, sizeof path, g_dir, "imp2.json");
    int o = snprintf(text, sizeof text, "{\"model\": \"%s\", \"version\": 2, \"n_layers\": %d, \"dim\": %d, "
                     "\"hidden_dim\": %d, \"layers\": [", k.name, L, k.dim, k.hidden_dim);
    for (int l = 0; l < L; l++)
        o += snprintf(text + o, sizeof text - (size_t)o, "%s{\"layer\": %d, \"fp16\": 0, \"q8_0\": 0.1, \"q6_K\": "
                      "%s, \"q5_K\": 0.3, \"q4_K\": 0.4, \"q4_0\": 0.5}", l ? "," : "", l, l == 1 ? "null" : "0.2");
    snprintf(text + o, sizeof text - (size_t)o, "]}");
    tu_write_text(path, text);
    CU_ASSERT_EQUAL_FATAL(mi_importance_load(path, &k, &imp, err), 0);
    CU_ASSERT_EQUAL(imp.version, 2);
    CU_ASSERT_DOUBLE_EQUAL(imp.rise[0][MI_Q6_K], 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(imp.rise[3][MI_Q4_K], 0.4, 1e-12);
    CU_ASSERT(isnan(imp.rise[1][MI_Q6_K]));
    CU_ASSERT_EQUAL(mi_precision_chain(&k, 1, &imp, 0, to), 4); /* fp16 q8_0 q5_K q4_K */
    CU_ASSERT_EQUAL(to[2], MI_Q5_K);
    char *v = strstr(text, "\"version\": 2");
    v[11] = '3';
    tu_write_text(path, text);
    CU_ASSERT_EQUAL(mi_importance_load(path, &k, &imp, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "version 3 is newer than this meshinfer reads"));
    mi_cluster_free(&cl);
}

/* CATS's pruning within a budget: the largest measured ratio whose
 * perplexity is within it (past a worse point: measurements are noisy), r = 0
 * when none is; quality files checked whole. */
static void test_sg_quality(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    char path[4200], err[MI_ERRLEN];
    tu_path(path, sizeof path, g_dir, "sgq.json");
    const char *head = "{\"model\": \"stories15M\", \"n_layers\": 6, \"dim\": 288, \"ranks\": 3, \"prune_mode\": "
                       "\"aware\", \"points\": ";
    char text[1024];
    snprintf(text, sizeof text, "%s[{\"r\": 0, \"perplexity\": 4}, {\"r\": 0.1, \"perplexity\": 4.1}, "
             "{\"r\": 0.2, \"perplexity\": 4.5}, {\"r\": 0.3, \"perplexity\": 4.3}, {\"r\": 0.5, \"perplexity\": 9}]}",
             head);
    tu_write_text(path, text);
    mi_sg_quality q;
    CU_ASSERT_EQUAL_FATAL(mi_sg_quality_load(path, &c, &q, err), 0);
    CU_ASSERT_EQUAL(q.ranks, 3);
    CU_ASSERT_EQUAL(q.n, 5);
    double ppl;
    CU_ASSERT_DOUBLE_EQUAL(mi_sg_quality_best(&q, 0.05, &ppl), 0.1, 1e-12); /* 4.1 <= 4.2 */
    CU_ASSERT_DOUBLE_EQUAL(ppl, 4.1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_sg_quality_best(&q, 0.1, &ppl), 0.3, 1e-12); /* 4.3 <= 4.4, past 0.2's 4.5 */
    CU_ASSERT_DOUBLE_EQUAL(mi_sg_quality_best(&q, 0.01, &ppl), 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(ppl, 4.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_sg_quality_best(&q, 10, &ppl), 0.5, 1e-12);
    struct {
        const char *points, *want;
    } bad[] = {
        {"[{\"r\": 0.1, \"perplexity\": 4}]}", "ascend in r from r = 0"},
        {"[{\"r\": 0, \"perplexity\": 4}, {\"r\": 0, \"perplexity\": 5}]}", "ascend in r from r = 0"},
        {"[{\"r\": 0, \"perplexity\": 4}, {\"r\": 1, \"perplexity\": 5}]}", "x in [0, 1)"},
        {"[{\"r\": 0, \"perplexity\": -4}]}", "a finite perplexity (at least 1)"},
        {"[{\"r\": 0, \"perplexity\": 0.5}]}", "a finite perplexity (at least 1)"},
        {"[{\"r\": 0, \"perplexity\": 4, \"seed\": 1}]}", "unknown key 'seed' in points[0]"},
        {"[]}", "0 points"},
        {"[{\"r\": 0, \"perplexity\": 4}],}", "JSON syntax error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s", head, bad[i].points);
        tu_write_text(path, text);
        CU_ASSERT_EQUAL(mi_sg_quality_load(path, &c, &q, err), -1);
        if (!strstr(err, bad[i].want))
            printf("\n  case %zu: %s\n", i, err);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].want));
    }
    tu_write_text(path, "{\"model\": \"stories15M\", \"n_layers\": 6, \"dim\": 288, \"ranks\": 3, \"prune_mode\": "
                        "\"magnitude\", \"points\": [{\"r\": 0, \"perplexity\": 4}]}");
    CU_ASSERT_EQUAL(mi_sg_quality_load(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "prune_mode must be \"aware\""));
    tu_write_text(path, "{\"model\": \"stories42M\", \"n_layers\": 8, \"dim\": 512, \"ranks\": 3, \"points\": "
                        "[{\"r\": 0, \"perplexity\": 4}]}");
    CU_ASSERT_EQUAL(mi_sg_quality_load(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is for stories42M"));
}

static void test_compare(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    double sp[] = {1, 0.5, 0.25};
    double mem[] = {45e6, 16e6, 16e6};
    mi_cluster cl;
    cluster_of(&cl, 3, sp, mem, 1e-3, 12.5e6);
    mi_plan_options base = {MI_PLANNER_GREEDY, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_compare_row rows[MI_COMPARE_MAX];
    int n = 0;
    int best = mi_plan_compare(&c, &cl, &base, 32, 100, 64, rows, &n);
    CU_ASSERT_EQUAL_FATAL(n, 5);
    CU_ASSERT_FATAL(best >= 0);
    for (int i = 0; i < n; i++) {
        if (!rows[i].fits) {
            CU_ASSERT(strlen(rows[i].why) > 0);
            continue;
        }
        NEAR(rows[i].total_s, rows[i].ttft_s + 100 * rows[i].tpot_s, 1e-12);
        CU_ASSERT(rows[best].total_s <= rows[i].total_s);
    }
    for (int i = 0; i < n && getenv("VERBOSE"); i++)
        fprintf(stderr, "%s fits %d total %g why %s\n", mi_planner_name(rows[i].planner), rows[i].fits, rows[i].total_s,
                rows[i].why);
    /* the memory-tight case: layer-wise and tp do not fit, hybrid does and wins */
    CU_ASSERT(!rows[0].fits && !rows[2].fits);
    CU_ASSERT_EQUAL(rows[best].planner, MI_PLANNER_HYBRID);
    mi_cluster_free(&cl);
}

int main(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_hybrid"))
        return 1;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("Voltron: calibration, phases, hybrid, comparison", NULL, NULL);
    if (!s || !CU_add_test(s, "calibrated cluster files: parse, roofline defaults, save, round trip", test_parse_calibrated) ||
        !CU_add_test(s, "calibrated cluster files: errors", test_calibrated_errors) ||
        !CU_add_test(s, "prefill and decode passes, TTFT and TPOT", test_prefill_cost) ||
        !CU_add_test(s, "hybrid: MP, TP and memory budgets", test_hybrid_choices) ||
        !CU_add_test(s, "re-placement cost between phases", test_switch_cost) ||
        !CU_add_test(s, "precision search: fewest downgrades, least important first", test_precision_search) ||
        !CU_add_test(s, "precision ladder with the k-quants and the search's choice", test_precision_ladder) ||
        !CU_add_test(s, "comparison of schemes (--planner all / auto)", test_compare) ||
        !CU_add_test(s, "somegather's pruning within a perplexity budget", test_sg_quality) ||
        !CU_add_test(s, "energy per token and DVFS levels under a TPOT limit", test_energy)) {
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    int failed = (int)CU_get_number_of_failures();
    CU_cleanup_registry();
    tu_rm_tree(g_dir);
    return failed ? 1 : 0;
}
