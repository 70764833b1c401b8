/* CUnit tests of expert parallelism without MPI: how each head-level planner
 * splits a mixture of experts' FFN into expert slices (tp by speed, round
 * robin in turn, greedy by predicted time, hybrid by the cost model, layer-
 * wise whole), what a rank then holds (its experts, the shared expert with
 * the first slice) and its memory, the compiled experts ops, and the cost
 * model's k/E share of the experts a rank holds. Shape tiny-qwen2moe: dim
 * 128, 8 experts of width 64, top 2, a shared expert of width 128, 4 layers,
 * fp32. Exit status: 0 when every test passed. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/cost.h"
#include "meshinfer/model.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEAR(a, b, rel) CU_ASSERT(fabs((double)(a) - (double)(b)) <= (rel) * fabs((double)(b)))

static mi_config g_c;

static int plan_with(mi_planner pl, mi_cluster *cl, mi_plan *plan)
{
    char err[MI_ERRLEN] = "";
    mi_plan_options po = {pl, 3, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    int rc = mi_plan_make(&g_c, cl, &po, plan, err);
    if (rc)
        fprintf(stderr, "plan: %s\n", err);
    return rc;
}

/* layer l's slices are exactly want[0..n) of {rank, v0, n} */
static void expect_slices(const mi_plan *plan, int l, const mi_slice *want, int n)
{
    const mi_layer_plan *lp = &plan->layers[l];
    CU_ASSERT_EQUAL_FATAL(lp->n_ffn, n);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(lp->ffn[i].rank, want[i].rank);
        CU_ASSERT_EQUAL(lp->ffn[i].v0, want[i].v0);
        CU_ASSERT_EQUAL(lp->ffn[i].n, want[i].n);
    }
}

static void test_split(void)
{
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("tiny-qwen2moe", &g_c), 0);
    CU_ASSERT_EQUAL(mi_plan_ffn_units(&g_c), 8);
    mi_cluster cl;
    mi_plan plan;
    /* tp, devices of speeds 1, 1, 2: experts by speed, 2 + 2 + 4 (the controller works) */
    mi_cluster_default(&cl, 3, 1e12);
    cl.dev[2].speed = 2.0;
    mi_cluster_finish(&cl);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_TP, &cl, &plan), 0);
    for (int l = 0; l < g_c.n_layers; l++)
        expect_slices(&plan, l, (const mi_slice[]){{0, 0, 2}, {1, 2, 2}, {2, 4, 4}}, 3);
    /* what rank 2 holds of layer 0: experts 4-7, the router, not the shared expert; rank 0 holds it */
    mi_layer_spec ls[4];
    mi_shard_spec sp = {.layers = ls};
    mi_plan_shard(&plan, 2, &sp);
    CU_ASSERT_EQUAL(ls[0].n_experts, 4);
    CU_ASSERT(ls[0].experts[0] == 4 && ls[0].experts[3] == 7 && ls[0].no_shared == 1 && ls[0].nf == g_c.hidden_dim);
    mi_plan_shard(&plan, 0, &sp);
    CU_ASSERT(ls[0].n_experts == 2 && ls[0].experts[1] == 1 && ls[0].no_shared == 0);
    /* the memory account counts every expert held: rank 0's shard less the same without its experts
     * is its 2 experts per layer */
    size_t w_all = mi_shard_weight_bytes(&g_c, &sp);
    for (int l = 0; l < 4; l++)
        ls[l].n_experts = 0;
    size_t w_none = mi_shard_weight_bytes(&g_c, &sp);
    CU_ASSERT_EQUAL(w_all - w_none, 4 * 2 * (size_t)(3 * 64 * 128 * 4)); /* 4 layers x 2 experts, fp32 */
    mi_plan_free(&plan);
    mi_cluster_free(&cl);

    /* round robin on 4 ranks (workers 1-3): layer 0's 2 KV heads to 1, 2, its wo to 3, then its experts
     * dealt in three runs of 3, 2, 3 to the next workers: 1, 2, 3 */
    mi_cluster_default(&cl, 4, 1e12);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_ROUNDROBIN, &cl, &plan), 0);
    expect_slices(&plan, 0, (const mi_slice[]){{1, 0, 3}, {2, 3, 2}, {3, 5, 3}}, 3);
    mi_plan_free(&plan);
    /* layer-wise keeps each layer whole: every expert with the layer */
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_LAYERWISE, &cl, &plan), 0);
    for (int l = 0; l < g_c.n_layers; l++)
        CU_ASSERT(plan.layers[l].n_ffn == 1 && plan.layers[l].ffn[0].n == 8);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);

    /* greedy on 3 equal ranks (workers 1, 2): layer 0's shared expert (with the router and one expert) to
     * rank 1, then each expert where it finishes first: a shared expert of width 128 streams 196608 bytes
     * per token, an expert's expected 2/8 of 98304 bytes 24576, so rank 2 takes all 7 others
     * (4096 + 7 x 24576 < 4096 + 196608 + 24576) */
    mi_cluster_default(&cl, 3, 1e12);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_GREEDY, &cl, &plan), 0);
    expect_slices(&plan, 0, (const mi_slice[]){{1, 0, 1}, {2, 1, 7}}, 2);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);

    /* greedy under budgets: two workers with 0.6 of what the whole model's layers need each: the
     * experts spread so that both fit (every expert counted where it is held) */
    mi_cluster_default(&cl, 3, 1e12);
    mi_plan_options po = {MI_PLANNER_GREEDY, 3, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    char err[MI_ERRLEN];
    mi_layer_spec full[4];
    mi_shard_spec all = mi_shard_spec_full(&g_c, full);
    all.embeddings = 0;
    all.cls_nv = 0;
    double need = (double)mi_shard_weight_bytes(&g_c, &all) + (double)mi_shard_kv_bytes(&g_c, &all);
    cl.dev[1].mem_bytes = cl.dev[2].mem_bytes = 0.6 * need;
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&g_c, &cl, &po, &plan, err), 0);
    int split = 0, held[3] = {0};
    for (int l = 0; l < g_c.n_layers; l++) {
        split += plan.layers[l].n_ffn > 1;
        for (int i = 0; i < plan.layers[l].n_ffn; i++)
            held[plan.layers[l].ffn[i].rank] += plan.layers[l].ffn[i].n;
    }
    CU_ASSERT(split >= 1 && held[0] == 0 && held[1] + held[2] == 32 && held[1] > 0 && held[2] > 0);
    for (int r = 1; r < 3; r++) {
        size_t w, kv;
        mi_plan_rank_memory(&plan, r, &w, &kv);
        CU_ASSERT((double)(w + kv) <= 0.6 * need);
    }
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
}

/* hybrid: fast memory keeps each layer's experts on one device (MP: one device reads k experts, no
 * reduction); memory 1000x slower makes reading k/E of the experts on each device (EP) win */
static void test_hybrid(void)
{
    mi_cluster cl;
    mi_plan plan;
    mi_cluster_default(&cl, 4, 1e12);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_HYBRID, &cl, &plan), 0);
    CU_ASSERT_EQUAL(plan.layers[0].n_ffn, 1);
    mi_plan_free(&plan);
    cl.mem_bw = 1e6;
    mi_cluster_finish(&cl);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_HYBRID, &cl, &plan), 0);
    expect_slices(&plan, 0, (const mi_slice[]){{0, 0, 2}, {1, 2, 2}, {2, 4, 2}, {3, 6, 2}}, 4);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
}

/* the compiled experts ops and their predicted seconds: a rank's experts, the shared expert with the
 * first slice, and k * n / E experts' weights per position */
static void test_programs_cost(void)
{
    mi_cluster cl;
    mi_plan plan;
    mi_programs p;
    char err[MI_ERRLEN];
    mi_cluster_default(&cl, 2, 1e12);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_TP, &cl, &plan), 0);
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&plan, &p, err), 0);
    const mi_op *moe[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < p.prog[MI_PHASE_DECODE][r].n_ops && !moe[r]; i++)
            if (p.prog[MI_PHASE_DECODE][r].ops[i].kind == MI_OP_MOE)
                moe[r] = &p.prog[MI_PHASE_DECODE][r].ops[i];
    CU_ASSERT_FATAL(moe[0] && moe[1]);
    CU_ASSERT(moe[0]->i0 == 0 && moe[0]->ni == 4 && (moe[0]->flags & MI_OPF_SHARED));
    CU_ASSERT(moe[1]->i0 == 4 && moe[1]->ni == 4 && !(moe[1]->flags & MI_OPF_SHARED));
    /* rank 0 minus rank 1: the shared expert alone (same experts count); rank 1 minus an op with no
     * experts: 2 * 4 / 8 = 1 expert's weights, one position */
    double t0 = mi_op_compute_s(&plan, moe[0], &cl, 0, 1, 0), t1 = mi_op_compute_s(&plan, moe[1], &cl, 1, 1, 0);
    const mi_device *d = &cl.dev[0];
    NEAR(t0 - t1, 3.0 * 128 * 128 * d->pass_s[MI_F32], 1e-9);
    mi_op none = *moe[1];
    none.ni = 0;
    NEAR(t1 - mi_op_compute_s(&plan, &none, &cl, 1, 1, 0), 1.0 * 3 * 64 * 128 * d->pass_s[MI_F32], 1e-9);
    mi_programs_free(&p);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
}

/* the sparse dispatch on 2 ranks (tp: rank 0 holds experts 0-3 and the shared expert, rank 1 experts
 * 4-7): rank 0 routes, a dispatch and a combine per layer, and the expected bytes of uniform routing:
 * rank 1 gets a position's row when one of its 4 experts is among the top 2 of 8 (1 - C(4,2)/C(8,2) =
 * 22/28), 128 fp32 columns and 2 (id, weight) pairs, and returns 2 * 4 / 8 = 1 expert row */
static void test_dispatch(void)
{
    mi_cluster cl;
    mi_plan plan;
    mi_programs p;
    char err[MI_ERRLEN];
    mi_cluster_default(&cl, 2, 1e12);
    CU_ASSERT_EQUAL_FATAL(plan_with(MI_PLANNER_TP, &cl, &plan), 0);
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&plan, &p, err), 0);
    int route[2] = {0, 0}, disp = 0, comb = 0, allreduce = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < p.prog[MI_PHASE_DECODE][r].n_ops; i++) {
            const mi_op *op = &p.prog[MI_PHASE_DECODE][r].ops[i];
            route[r] += op->kind == MI_OP_ROUTE;
            if (op->kind == MI_OP_MOE)
                CU_ASSERT(op->flags & MI_OPF_ROUTED);
        }
    CU_ASSERT(route[0] == 4 && route[1] == 0);
    for (int x = 0; x < p.n_xchg; x++) {
        const mi_exchange *e = &p.xchg[x];
        if (e->kind != MI_OP_DISPATCH && e->kind != MI_OP_COMBINE) {
            allreduce += e->kind == MI_OP_ALLREDUCE;
            continue;
        }
        disp += e->kind == MI_OP_DISPATCH;
        comb += e->kind == MI_OP_COMBINE;
        CU_ASSERT(e->root == 0 && e->shared == 0 && e->top_k == 2 && e->n_experts == 8);
        CU_ASSERT(e->own[0].count == 4 && e->own[0].c0[0] == 0 && e->own[1].count == 4 && e->own[1].c0[0] == 4);
        double want = e->kind == MI_OP_DISPATCH ? 22.0 / 28.0 * (128 * 4 + 16) : 1.0 * 128 * 4;
        NEAR(mi_exchange_bytes(&p, x, e->kind == MI_OP_DISPATCH ? 0 : 1, e->kind == MI_OP_DISPATCH ? 1 : 0), want,
             1e-12);
        CU_ASSERT(mi_exchange_bytes(&p, x, e->kind == MI_OP_DISPATCH ? 1 : 0, e->kind == MI_OP_DISPATCH ? 0 : 1) == 0);
    }
    /* both phases: 4 layers each; the only reductions are the attention's (wo split by heads) */
    CU_ASSERT(disp == 8 && comb == 8 && allreduce == 8);
    mi_programs_free(&p);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("experts", NULL, NULL);
    if (!s || !CU_add_test(s, "planners' expert slices, shards and budgets", test_split) ||
        !CU_add_test(s, "hybrid: model or expert parallelism", test_hybrid) ||
        !CU_add_test(s, "experts ops and their cost", test_programs_cost) ||
        !CU_add_test(s, "sparse dispatch: ops and expected bytes", test_dispatch)) {
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    int failed = (int)CU_get_number_of_failures();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
