/* CUnit tests of the exact placement planner (planner.h mi_plan_exact,
 * GLPK) against enumeration: on a 2-layer model with 2 KV heads and 3 or 4
 * devices (2 or 3 workers), every placement of its units (each KV head,
 * each layer's projection and FFN on a worker) is compiled and predicted,
 * and the exact plan's predicted decode step is the least of them, equal
 * to the program's objective; with budgets that rule the best one out, the
 * least of those that fit. Also its refusals. Exit status: 0 when every
 * test passed. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "../../src/planner/planners.h" /* mi_plan_exact_seed, which only a stopped search reaches */

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR(a, b, rel) CU_ASSERT(fabs((double)(a) - (double)(b)) <= (rel) * fabs((double)(b)))

/* stories15M's shape cut to 2 layers and 2 KV heads (3 query heads each) */
static mi_config small_model(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    c.n_layers = 2;
    c.n_kv_heads = 2;
    return c;
}

/* n devices of different speeds, per-pair latencies and bandwidths from a seed */
static void devices(mi_cluster *cl, int n, uint64_t seed, double mem_mb)
{
    mi_cluster_gen g;
    mi_cluster_gen_defaults(&g);
    g.n_devices = n;
    g.seed = seed;
    g.mem_mb[0] = g.mem_mb[1] = mem_mb;
    g.latency_ms[0] = 0.2, g.latency_ms[1] = 3;
    g.bandwidth_mbit[0] = 50, g.bandwidth_mbit[1] = 1000;
    g.speed[0] = 0.3, g.speed[1] = 3;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_cluster_generate(&g, cl, err), 0);
}

/* The least predicted decode step (context kv_positions / 2) over every
 * placement that fits; *fits counts them. */
static double enumerate(const mi_config *c, const mi_cluster *cl, int *fits)
{
    int n = cl->n_devices, W = n - 1, per = W * W * W * W; /* 2 heads, proj, FFN per layer */
    double best = INFINITY;
    *fits = 0;
    for (int a = 0; a < per * per; a++) {
        mi_plan p;
        memset(&p, 0, sizeof p);
        p.cfg = *c;
        p.n_ranks = n;
        p.planner = MI_PLANNER_EXACT;
        p.kv_positions = c->seq_len;
        p.logits_k = 1;
        mi_plan_alloc_layers(&p);
        for (int l = 0, code = a; l < 2; l++, code /= per) {
            int v = code % per;
            mi_layer_plan *lp = &p.layers[l];
            lp->kv_rank[0] = 1 + v % W;
            lp->kv_rank[1] = 1 + v / W % W;
            lp->proj_rank = 1 + v / (W * W) % W;
            lp->n_ffn = 1;
            lp->ffn = malloc(sizeof(mi_slice));
            lp->ffn[0] = (mi_slice){1 + v / (W * W * W) % W, 0, c->hidden_dim};
        }
        p.n_cls = 1;
        p.cls = malloc(sizeof(mi_slice));
        p.cls[0] = (mi_slice){0, 0, c->vocab_size};
        char err[MI_ERRLEN];
        mi_programs prog;
        if (mi_plan_validate(&p, cl, err) == 0) {
            CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
            mi_prediction pr;
            mi_predict(&p, &prog, cl, c->seq_len / 2, &pr);
            best = fmin(best, pr.token_s);
            (*fits)++;
            mi_programs_free(&prog);
        }
        mi_plan_free(&p);
    }
    return best;
}

static double exact_step(const mi_config *c, const mi_cluster *cl, mi_exact_info *info)
{
    mi_plan_options po = {MI_PLANNER_EXACT, 1, -1, 0, NULL, 0.7, 0, 0, 0, 0, 0, NULL, 0, 1};
    mi_plan p;
    mi_programs prog;
    char err[MI_ERRLEN] = "";
    int rc = mi_plan_exact(c, cl, &po, 30, &p, info, err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
    mi_prediction pr;
    mi_predict(&p, &prog, cl, c->seq_len / 2, &pr);
    mi_programs_free(&prog);
    mi_plan_free(&p);
    return pr.token_s;
}

static void test_against_enumeration(void)
{
    mi_config c = small_model();
    for (int n = 3; n <= 4; n++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            mi_cluster cl;
            devices(&cl, n, seed, 4000);
            int fits;
            double best = enumerate(&c, &cl, &fits);
            mi_exact_info info;
            double t = exact_step(&c, &cl, &info);
            CU_ASSERT(info.optimal);
            NEAR(t, best, 1e-6);
            NEAR(info.objective_s, t, 1e-6); /* the program's objective is the cost model's step */
            CU_ASSERT_EQUAL(fits, (n - 1) * (n - 1) * (n - 1) * (n - 1) * (n - 1) * (n - 1) * (n - 1) * (n - 1));
            mi_cluster_free(&cl);
        }
}

/* Budgets that hold about half the model per worker: the best placement
 * overall (everything on the fastest worker) does not fit. */
static void test_budgets(void)
{
    mi_config c = small_model();
    mi_cluster cl;
    devices(&cl, 4, 2, 4000);
    int all;
    double unbounded = enumerate(&c, &cl, &all);
    mi_plan_options po = {MI_PLANNER_LAYERWISE, 1, -1, 0, NULL, 0.7, 0, 0, 0, 0, 0, NULL, 0, 1};
    mi_plan lw;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &lw, err), 0);
    double w1 = mi_plan_rank_bytes_at(&lw, 1, c.seq_len) + mi_plan_rank_bytes_at(&lw, 2, c.seq_len) +
                mi_plan_rank_bytes_at(&lw, 3, c.seq_len);
    mi_plan_free(&lw);
    for (int r = 1; r < 4; r++)
        cl.dev[r].mem_bytes = 0.6 * w1;
    int fits;
    double best = enumerate(&c, &cl, &fits);
    CU_ASSERT(fits > 0 && fits < all);
    CU_ASSERT(best > unbounded * (1 + 1e-9));
    mi_exact_info info;
    double t = exact_step(&c, &cl, &info);
    NEAR(t, best, 1e-6);
    /* budgets that no placement fits: one error line */
    for (int r = 1; r < 4; r++)
        cl.dev[r].mem_bytes = 1e5;
    mi_plan p;
    CU_ASSERT_EQUAL(mi_plan_exact(&c, &cl, &po, 30, &p, &info, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "plan does not fit"));
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    mi_cluster_free(&cl);
}

/* The bound a search stopped by its time limit reports: at most the
 * optimum (which a search with time to finish proves) and not vacuous; a
 * proven search's bound is its objective. stories15M's whole shape (6
 * layers, 6 KV heads) on 3 devices of 14-28 MB over Gbit-class links, as
 * jobs/experiments/exact_gap.sh draws them. */
static void test_bound(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    mi_cluster_gen g;
    mi_cluster_gen_defaults(&g);
    g.n_devices = 3;
    g.seed = 1;
    g.mem_mb[0] = 14, g.mem_mb[1] = 28;
    g.controller_mem_mb = 60;
    mi_cluster cl;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_cluster_generate(&g, &cl, err), 0);
    mi_plan_options po = {MI_PLANNER_EXACT, 1, -1, 0, NULL, 0.7, 0, 0, 0, 0, 0, NULL, 0, 1};
    mi_plan p;
    mi_exact_info full, cut;
    CU_ASSERT_EQUAL_FATAL(mi_plan_exact(&c, &cl, &po, 60, &p, &full, err), 0);
    mi_plan_free(&p);
    CU_ASSERT_FATAL(full.optimal);
    CU_ASSERT_EQUAL(full.bound_s, full.objective_s);
    CU_ASSERT_EQUAL_FATAL(mi_plan_exact(&c, &cl, &po, 0.1, &p, &cut, err), 0);
    mi_plan_free(&p);
    CU_ASSERT(!cut.optimal);
    CU_ASSERT(cut.objective_s >= full.objective_s * (1 - 1e-9));
    CU_ASSERT(isfinite(cut.bound_s));
    CU_ASSERT(cut.bound_s <= full.objective_s * (1 + 1e-9));
    CU_ASSERT(cut.bound_s >= 0.7 * full.objective_s);
    fprintf(stderr, "\n  optimum %.4f ms in %.2f s; at %.2f s: %.4f ms, bound %.4f ms\n", full.objective_s * 1e3,
            full.seconds, cut.seconds, cut.objective_s * 1e3, cut.bound_s * 1e3);
    mi_cluster_free(&cl);
}

/* plan's predicted decode step at context kv_positions / 2 with the exact
 * planner's (head-level) programs */
static double step_as_exact(mi_plan *p, const mi_cluster *cl)
{
    mi_planner was = p->planner;
    p->planner = MI_PLANNER_EXACT;
    mi_programs prog;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(p, &prog, err), 0);
    mi_prediction pr;
    mi_predict(p, &prog, cl, p->kv_positions / 2, &pr);
    mi_programs_free(&prog);
    p->planner = was;
    return pr.token_s;
}

/* A search the limit stopped keeps greedy's or layer-wise's placement when
 * the cost model predicts it faster than the search's: round-robin's
 * placement (every unit on the next worker: a message per unit over
 * 0.2-3 ms links) given as the search's becomes the faster heuristic's. A
 * proven optimum stays: no heuristic beats it in the cost model. */
static void test_seed(void)
{
    mi_config c = small_model();
    mi_cluster cl;
    devices(&cl, 4, 1, 4000);
    char err[MI_ERRLEN];
    mi_plan_options po = {MI_PLANNER_ROUNDROBIN, 1, -1, 0, NULL, 0.7, 0, 0, 0, 0, 0, NULL, 0, 1};
    mi_plan rr, h;
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &rr, err), 0);
    rr.planner = MI_PLANNER_EXACT;
    double t_rr = step_as_exact(&rr, &cl), best = t_rr;
    mi_planner which = MI_PLANNER_EXACT;
    const mi_planner heur[2] = {MI_PLANNER_GREEDY, MI_PLANNER_LAYERWISE};
    for (int i = 0; i < 2; i++) {
        po.planner = heur[i];
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &h, err), 0);
        double t = step_as_exact(&h, &cl);
        if (t < best)
            best = t, which = heur[i];
        mi_plan_free(&h);
    }
    CU_ASSERT_FATAL(best < 0.9 * t_rr); /* the case replaces the search's placement */
    mi_exact_info info = {.optimal = 0, .objective_s = t_rr, .bound_s = 0.5 * t_rr, .source = MI_PLANNER_EXACT};
    po.planner = MI_PLANNER_EXACT;
    mi_plan_exact_seed(&c, &cl, &po, &rr, &info);
    CU_ASSERT_EQUAL(info.source, which);
    CU_ASSERT_EQUAL(rr.planner, MI_PLANNER_EXACT);
    CU_ASSERT_EQUAL(mi_plan_validate(&rr, &cl, err), 0);
    NEAR(step_as_exact(&rr, &cl), best, 1e-12);
    NEAR(info.objective_s, best, 1e-12);
    NEAR(info.bound_s, 0.5 * t_rr, 1e-12);
    mi_plan_free(&rr);
    /* the proven optimum */
    mi_plan ex;
    CU_ASSERT_EQUAL_FATAL(mi_plan_exact(&c, &cl, &po, 30, &ex, &info, err), 0);
    CU_ASSERT_FATAL(info.optimal);
    double t_ex = step_as_exact(&ex, &cl);
    CU_ASSERT(t_ex <= best * (1 + 1e-9));
    mi_plan_exact_seed(&c, &cl, &po, &ex, &info);
    CU_ASSERT_EQUAL(info.source, MI_PLANNER_EXACT);
    CU_ASSERT_EQUAL(step_as_exact(&ex, &cl), t_ex);
    mi_plan_free(&ex);
    mi_cluster_free(&cl);
}

static void test_refusals(void)
{
    mi_config c = small_model();
    mi_cluster cl;
    mi_cluster_default(&cl, MI_EXACT_MAX_RANKS + 1, 4e9);
    mi_plan_options po = {MI_PLANNER_EXACT, 1, -1, 0, NULL, 0.7, 0, 0, 0, 0, 0, NULL, 0, 1};
    mi_plan p;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL(mi_plan_make(&c, &cl, &po, &p, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at most 8"));
    mi_cluster_free(&cl);
    /* one device: the only placement */
    mi_cluster_default(&cl, 1, 4e9);
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
    CU_ASSERT_EQUAL(p.layers[1].proj_rank, 0);
    CU_ASSERT_STRING_EQUAL(mi_planner_name(p.planner), "exact");
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("exact", NULL, NULL);
    CU_add_test(s, "the least of every placement", test_against_enumeration);
    CU_add_test(s, "budgets rule the best out", test_budgets);
    CU_add_test(s, "a stopped search's bound", test_bound);
    CU_add_test(s, "a stopped search keeps a faster heuristic's placement", test_seed);
    CU_add_test(s, "refusals; one device", test_refusals);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
