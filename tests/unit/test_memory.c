/* CUnit tests of the memory and traffic model of CATS Q1
 * (src/planner/memory_model.c), linked without MPI:
 *   - somegather at r = 0 equals the compiled programs exactly (bytes sent
 *     and received per rank per decoded token, the total) and the plan's
 *     weight and KV-cache bytes per rank, for stories15M on D = 1, 2, 3, 6
 *     (fp32 and q8_0 weights, fp32 and q8_0 messages) and TinyLlama on
 *     D = 1, 2, 4;
 *   - with send lists cut by the model's rule (r = 0.5, 0.9) the compiled
 *     programs still move exactly the modelled bytes;
 *   - r = 0.9 moves at most 10% of the four per-layer exchanges plus the
 *     unpruned final exchange and the logits, and needs fewer weights;
 *   - token split stores the whole model on every device at every D, and
 *     sends the K and V rows of a decoded token to the D-1 others;
 *   - the head-split formula equals our tp planner's programs and shards;
 *   - one small model computed by hand;
 *   - bad queries are refused with a message.
 *
 * Exit status: 0 when every test passed, 1 otherwise. */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/config.h"
#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"

static void set_all_dtypes(mi_config *c, int t)
{
    for (int l = 0; l < c->n_layers; l++)
        for (int m = 0; m < MI_N_LAYER_MATS; m++)
            c->dtype[l][m] = (unsigned char)t;
    c->emb_dtype = c->cls_dtype = (unsigned char)t;
}

static mi_mem_model *model(const mi_config *c, int scheme, int D, double r, int wire, int n_pos)
{
    static mi_mem_model m;
    char err[MI_ERRLEN];
    mi_mem_query q = {scheme, D, r, wire, n_pos, 0};
    int rc = mi_mem_model_make(c, &q, &m, err);
    if (rc)
        fprintf(stderr, "model: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return &m;
}

static void make_plan(const mi_config *c, int planner, int D, int wire, int n_pos, mi_plan *plan)
{
    mi_cluster cl;
    mi_cluster_default(&cl, D, 1e15);
    mi_plan_options po = {(mi_planner)planner, 1, -1, 0, NULL, 0.0, n_pos, wire, 0, 0, 0, NULL, 0, 0};
    char err[MI_ERRLEN];
    int rc = mi_plan_make(c, &cl, &po, plan, err);
    if (rc)
        fprintf(stderr, "plan: %s\n", err);
    mi_cluster_free(&cl);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* Bytes per rank and in total of the compiled decode programs against the
 * model, exactly. */
static void check_bytes(const mi_plan *plan, const mi_mem_model *m)
{
    mi_programs p;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(plan, &p, err), 0);
    double sent[MI_MAX_RANKS], recv[MI_MAX_RANKS];
    double total = mi_programs_bytes(&p, MI_PHASE_DECODE, sent, recv);
    CU_ASSERT_EQUAL(total, m->moved_bytes);
    for (int r = 0; r < plan->n_ranks; r++) {
        CU_ASSERT_EQUAL(sent[r], m->dev[r].sent_bytes);
        CU_ASSERT_EQUAL(recv[r], m->dev[r].recv_bytes);
    }
    mi_programs_free(&p);
}

/* Weights and KV cache per rank against the plan's shards, exactly. */
static void check_memory(const mi_plan *plan, const mi_mem_model *m, int check_kv)
{
    for (int r = 0; r < plan->n_ranks; r++) {
        size_t w, kv;
        mi_plan_rank_memory(plan, r, &w, &kv);
        CU_ASSERT_EQUAL((double)w, m->dev[r].weight_bytes);
        if (check_kv)
            CU_ASSERT_EQUAL((double)kv, m->dev[r].kv_bytes);
    }
}

static void somegather_vs_programs(const char *shape, int weights, const int *Ds, int nD)
{
    static const int wires[] = {MI_F32, MI_Q8_0};
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape(shape, &c), 0);
    set_all_dtypes(&c, weights);
    for (int i = 0; i < nD; i++)
        for (int w = 0; w < 2; w++)
            for (int np = 0; np < 2; np++) {
                int D = Ds[i], N = np ? 100 : c.seq_len;
                mi_plan plan;
                make_plan(&c, MI_PLANNER_SOMEGATHER, D, wires[w], N, &plan);
                mi_mem_model *m = model(&c, MI_MEM_SOMEGATHER, D, 0.0, wires[w], N);
                CU_ASSERT_TRUE(m->runnable);
                check_bytes(&plan, m);
                check_memory(&plan, m, 1);
                for (int r = 0; r < D; r++)
                    CU_ASSERT_EQUAL(m->dev[r].weight_needed_bytes, m->dev[r].weight_bytes);
                mi_plan_free(&plan);
            }
}

static void test_somegather_equals_programs(void)
{
    static const int stories[] = {1, 2, 3, 6}, tiny[] = {1, 2, 4};
    somegather_vs_programs("stories15M", MI_F32, stories, 4);
    somegather_vs_programs("stories15M", MI_Q8_0, stories, 4);
    somegather_vs_programs("tinyllama-1.1b", MI_F32, tiny, 3);
    somegather_vs_programs("tinyllama-1.1b", MI_Q4_0, tiny, 3);
}

/* Send lists of the first columns each rank keeps under the pruning rule
 * (prune.c: ceil(r * owned) left out). */
static void cut_send_lists(mi_plan *plan, double r)
{
    int n = plan->n_ranks;
    plan->keep = mi_calloc((size_t)plan->cfg.n_layers * MI_N_PRUNED_XCH * (size_t)n, sizeof(mi_keep), "keep");
    for (int x = 0; x < MI_N_PRUNED_XCH; x++)
        plan->prune[x] = r;
    for (int l = 0; l < plan->cfg.n_layers; l++)
        for (int x = 0; x < MI_N_PRUNED_XCH; x++)
            for (int k = 0; k < n; k++) {
                mi_keep *kp = &plan->keep[((size_t)l * MI_N_PRUNED_XCH + (size_t)x) * (size_t)n + (size_t)k];
                int c0, own;
                mi_plan_owned(plan, l, x, k, &c0, &own);
                kp->n = own - (int)ceil(r * own - 1e-9);
                kp->cols = mi_malloc((size_t)(own ? own : 1) * sizeof(int), "cols");
                for (int i = 0; i < kp->n; i++)
                    kp->cols[i] = c0 + i;
            }
}

static void test_pruned_equals_programs(void)
{
    static const double ratios[] = {0.5, 0.9};
    static const char *shapes[] = {"stories15M", "tiny-gqa"};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 2; i++)
            for (int D = 1; D <= 6; D++) {
                mi_config c;
                CU_ASSERT_EQUAL_FATAL(mi_config_from_shape(shapes[s], &c), 0);
                if (!mi_mem_runnable(&c, MI_MEM_SOMEGATHER, D))
                    continue;
                mi_plan plan;
                make_plan(&c, MI_PLANNER_SOMEGATHER, D, MI_Q8_0, 0, &plan);
                cut_send_lists(&plan, ratios[i]);
                check_bytes(&plan, model(&c, MI_MEM_SOMEGATHER, D, ratios[i], MI_Q8_0, c.seq_len));
                mi_plan_free(&plan);
            }
}

/* Bytes that pruning never touches: every device's final residual columns
 * to the D-1 others and the logits of devices 1.. to device 0. */
static double unpruned_bytes(const mi_config *c, int D, int wire)
{
    double n = 0;
    for (int i = 0; i < D && D > 1; i++) {
        int nc = (int)((long)c->dim * (i + 1) / D - (long)c->dim * i / D);
        int nv = (int)((long)c->vocab_size * (i + 1) / D - (long)c->vocab_size * i / D);
        n += (D - 1) * (double)mi_wire_row_bytes(wire, (size_t)nc) + (i ? (double)mi_wire_row_bytes(wire, (size_t)nv) : 0);
    }
    return n;
}

static void test_prune_bound(void)
{
    static const char *shapes[] = {"stories15M", "tinyllama-1.1b"};
    for (int s = 0; s < 2; s++)
        for (int D = 1; D <= 16; D++) {
            mi_config c;
            CU_ASSERT_EQUAL_FATAL(mi_config_from_shape(shapes[s], &c), 0);
            mi_mem_model full = *model(&c, MI_MEM_SOMEGATHER, D, 0.0, MI_F32, 64);
            mi_mem_model cut = *model(&c, MI_MEM_SOMEGATHER, D, 0.9, MI_F32, 64);
            double u = unpruned_bytes(&c, D, MI_F32);
            CU_ASSERT(cut.moved_bytes - u <= 0.1 * (full.moved_bytes - u) + 1e-6);
            CU_ASSERT(cut.moved_bytes <= full.moved_bytes);
            for (int r = 0; r < D; r++) {
                CU_ASSERT_EQUAL(cut.dev[r].weight_bytes, full.dev[r].weight_bytes);
                CU_ASSERT_EQUAL(full.dev[r].weight_needed_bytes, full.dev[r].weight_bytes);
                if (D > 1)
                    CU_ASSERT(cut.dev[r].weight_needed_bytes < cut.dev[r].weight_bytes);
                CU_ASSERT(cut.dev[r].act_bytes <= full.dev[r].act_bytes);
            }
        }
}

static void test_token_split(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("tinyllama-1.1b", &c), 0);
    double whole = 4.0 * (double)mi_model_params(&c); /* fp32, classifier not tied */
    for (int s = MI_MEM_TOKEN_SPLIT; s <= MI_MEM_TOKEN_SPLIT_4BIT; s++)
        for (int D = 1; D <= 16; D++) {
            mi_mem_model *m = model(&c, s, D, 0.0, MI_F32, c.seq_len);
            CU_ASSERT_FALSE(m->runnable);
            for (int r = 0; r < D; r++) {
                CU_ASSERT_EQUAL(m->dev[r].weight_bytes, whole);
                CU_ASSERT_EQUAL(m->dev[r].weight_needed_bytes, whole);
            }
            /* a decoded token's K and V rows, every layer, to the D-1 others */
            double row = s == MI_MEM_TOKEN_SPLIT ? 4.0 * 256 : 8 * 18.0;
            CU_ASSERT_EQUAL(m->moved_bytes, 22.0 * 2 * (D - 1) * row);
            CU_ASSERT_EQUAL(m->max.kv_bytes, 22.0 * 2 * c.seq_len * row);
        }
}

static void head_split_vs_programs(const char *shape, int weights, int wire)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape(shape, &c), 0);
    set_all_dtypes(&c, weights);
    for (int D = 1; D <= 8; D++) {
        if (!mi_mem_runnable(&c, MI_MEM_HEAD_SPLIT, D))
            continue;
        mi_mem_model real = *model(&c, MI_MEM_HEAD_SPLIT, D, 0.0, wire, 64);
        CU_ASSERT_TRUE(real.from_programs);
        mi_mem_query q = {MI_MEM_HEAD_SPLIT, D, 0.0, wire, 64, 1};
        mi_mem_model f;
        char err[MI_ERRLEN];
        CU_ASSERT_EQUAL_FATAL(mi_mem_model_make(&c, &q, &f, err), 0);
        CU_ASSERT_FALSE(f.from_programs);
        CU_ASSERT_EQUAL(f.moved_bytes, real.moved_bytes);
        for (int r = 0; r < D; r++) {
            CU_ASSERT_EQUAL(f.dev[r].sent_bytes, real.dev[r].sent_bytes);
            CU_ASSERT_EQUAL(f.dev[r].recv_bytes, real.dev[r].recv_bytes);
            CU_ASSERT_EQUAL(f.dev[r].weight_bytes, real.dev[r].weight_bytes);
            CU_ASSERT_EQUAL(f.dev[r].kv_bytes, real.dev[r].kv_bytes);
        }
    }
}

static void test_head_split_formula(void)
{
    head_split_vs_programs("stories15M", MI_F32, MI_F32);
    head_split_vs_programs("stories15M", MI_Q8_0, MI_Q8_0);
    head_split_vs_programs("tinyllama-1.1b", MI_F32, MI_F16);
    head_split_vs_programs("tiny-gqa", MI_F32, MI_Q8_0);
}

/* dim 64, hidden 128, 2 layers, 4 heads of 16 in 2 KV groups, vocab 300
 * (the least a tokenizer with byte fallback allows is 259), untied
 * classifier, fp32 everywhere. */
static mi_config small_config(void)
{
    mi_config c;
    memset(&c, 0, sizeof c);
    c.dim = 64;
    c.hidden_dim = 128;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 300;
    c.seq_len = 32;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    strcpy(c.name, "hand");
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL(mi_config_validate(&c, err), 0);
    return c;
}

static void test_hand_computed(void)
{
    mi_config c = small_config();
    /* somegather D = 2: 32 residual columns, 2 heads (1 KV group), 64 FFN
     * units, 150 classifier rows each. Weights: embeddings 300*32*4 = 38400,
     * final norm 256, classifier 150*64*4 = 38400; per layer norms 2*256,
     * wq 32*64*4 = 8192, wk+wv 2*16*64*4 = 8192, wo rows 32*64*4 = 8192,
     * w1+w3 2*64*64*4 = 32768, w2 rows 32*128*4 = 16384: 74240. */
    mi_mem_model *m = model(&c, MI_MEM_SOMEGATHER, 2, 0.0, MI_F32, 8);
    CU_ASSERT_TRUE(m->runnable);
    CU_ASSERT_EQUAL(m->dev[0].weight_bytes, 38400 + 256 + 38400 + 2 * 74240.0);
    CU_ASSERT_EQUAL(m->dev[1].weight_bytes, 225536.0);
    /* per layer 32 + 32 + 32 + 64 floats, final 32: 2*640 + 128; rank 1
     * also sends its 150 logits */
    CU_ASSERT_EQUAL(m->dev[0].sent_bytes, 1408.0);
    CU_ASSERT_EQUAL(m->dev[1].sent_bytes, 2008.0);
    CU_ASSERT_EQUAL(m->moved_bytes, 3416.0);
    /* N = 8: KV 2 layers * 2 * 16 * 8 * 4; residual 8*32, widest step FFN up
     * or down 8*128, all 300 logits on rank 0 */
    CU_ASSERT_EQUAL(m->dev[0].kv_bytes, 2048.0);
    CU_ASSERT_EQUAL(m->dev[0].act_bytes, 4.0 * (8 * (32 + 128) + 300));
    CU_ASSERT_EQUAL(m->dev[1].act_bytes, 4.0 * (8 * (32 + 128) + 150));

    /* r = 0.5: 16, 16, 16 and 32 columns per layer travel; the receiver
     * uses 48/64 of wq, wk, wv, wo, w1, w3 and 96/128 of w2 */
    m = model(&c, MI_MEM_SOMEGATHER, 2, 0.5, MI_F32, 8);
    CU_ASSERT_EQUAL(m->dev[0].sent_bytes, 2 * 320 + 128.0);
    CU_ASSERT_EQUAL(m->dev[1].sent_bytes, 2 * 320 + 128 + 600.0);
    CU_ASSERT_EQUAL(m->dev[0].recv_bytes, 2 * 320 + 128 + 600.0);
    CU_ASSERT_EQUAL(m->dev[0].weight_bytes, 225536.0);
    CU_ASSERT_EQUAL(m->dev[0].weight_needed_bytes, 38400 + 256 + 38400 + 2 * (512 + 12288 + 6144 + 24576 + 12288.0));
    /* widest step: FFN up, 32 own + 16 received + 64 units */
    CU_ASSERT_EQUAL(m->dev[0].act_bytes, 4.0 * (8 * (32 + 112) + 300));

    /* token split D = 2: the whole model, 112448 fp32 parameters; a decoded
     * token's K and V rows of 32 to the other device in both layers */
    m = model(&c, MI_MEM_TOKEN_SPLIT, 2, 0.0, MI_F32, 8);
    CU_ASSERT_EQUAL(m->dev[0].weight_bytes, 4 * 112448.0);
    CU_ASSERT_EQUAL(m->moved_bytes, 2 * 2 * 32 * 4.0);
    CU_ASSERT_EQUAL(m->dev[1].sent_bytes, 512.0);
    CU_ASSERT_EQUAL(m->dev[0].kv_bytes, 2 * 2 * 8 * 32 * 4.0);
    /* 4 tokens: residual 4*64, widest FFN up 64 + 128; rank 1 decodes */
    CU_ASSERT_EQUAL(m->dev[0].act_bytes, 4.0 * 4 * (64 + 192));
    CU_ASSERT_EQUAL(m->dev[1].act_bytes, 4.0 * (4 * (64 + 192) + 300));
    m = model(&c, MI_MEM_TOKEN_SPLIT_4BIT, 2, 0.0, MI_F32, 8);
    CU_ASSERT_EQUAL(m->moved_bytes, 2 * 2 * 18.0);
    CU_ASSERT_EQUAL(m->dev[0].kv_bytes, 2 * 2 * 8 * 18.0);

    /* head split D = 2 (our tp): rank 0 embeds (76800 + norm 256) and
     * broadcasts x (256 bytes); two swaps of 64 floats per layer; rank 1
     * sends 150 logits. Each holds 150 classifier rows (38400); per layer
     * norms 512, wq 8192, wk+wv 8192, wo columns 64*32*4 = 8192, w1+w3
     * 32768, w2 columns 64*64*4 = 16384. */
    m = model(&c, MI_MEM_HEAD_SPLIT, 2, 0.0, MI_F32, 8);
    CU_ASSERT_TRUE(m->from_programs);
    CU_ASSERT_EQUAL(m->dev[0].sent_bytes, 256 + 2 * 2 * 256.0);
    CU_ASSERT_EQUAL(m->dev[1].sent_bytes, 2 * 2 * 256 + 600.0);
    CU_ASSERT_EQUAL(m->moved_bytes, 2904.0);
    CU_ASSERT_EQUAL(m->dev[0].weight_bytes, 76800 + 256 + 38400 + 2 * 74240.0);
    CU_ASSERT_EQUAL(m->dev[1].weight_bytes, 256 + 38400 + 2 * 74240.0);
}

static void test_refusals(void)
{
    mi_config c = small_config();
    mi_mem_model m;
    char err[MI_ERRLEN];
    const mi_mem_query bad[] = {
        {MI_MEM_SOMEGATHER, 2, 1.0, MI_F32, 8, 0},  {MI_MEM_SOMEGATHER, 2, -0.1, MI_F32, 8, 0},
        {MI_MEM_SOMEGATHER, 0, 0.0, MI_F32, 8, 0},  {MI_MEM_SOMEGATHER, MI_MAX_RANKS + 1, 0.0, MI_F32, 8, 0},
        {MI_MEM_SOMEGATHER, 2, 0.0, MI_F32, 0, 0},  {MI_MEM_TOKEN_SPLIT, 2, 0.5, MI_F32, 8, 0},
        {MI_MEM_SOMEGATHER, 2, 0.0, MI_Q4_0, 8, 0}, {MI_MEM_N_SCHEMES, 2, 0.0, MI_F32, 8, 0},
        {MI_MEM_SOMEGATHER, 2, NAN, MI_F32, 8, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CU_ASSERT_EQUAL(mi_mem_model_make(&c, &bad[i], &m, err), -1);
        CU_ASSERT(strlen(err) > 10);
    }
    /* fractional shares run where our runtime cannot: D = 16 on 6 heads */
    mi_config s;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &s), 0);
    mi_mem_query q = {MI_MEM_SOMEGATHER, 16, 0.9, MI_F16, 256, 0};
    CU_ASSERT_EQUAL(mi_mem_model_make(&s, &q, &m, err), 0);
    CU_ASSERT_FALSE(m.runnable);
    CU_ASSERT(m.max.weight_bytes > 0 && m.moved_bytes > 0);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("memory model", NULL, NULL);
    CU_add_test(s, "somegather r = 0 equals the compiled programs and shards", test_somegather_equals_programs);
    CU_add_test(s, "pruned send lists: programs move the modelled bytes", test_pruned_equals_programs);
    CU_add_test(s, "r = 0.9 moves at most 10% of the pruned exchanges", test_prune_bound);
    CU_add_test(s, "token split keeps the whole model everywhere", test_token_split);
    CU_add_test(s, "head-split formula equals the tp programs", test_head_split_formula);
    CU_add_test(s, "a small model by hand", test_hand_computed);
    CU_add_test(s, "bad queries are refused", test_refusals);
    CU_basic_set_mode(CU_BRM_NORMAL);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
