/* CUnit tests of programs (src/partition/) and the cost model (src/cost/),
 * linked without MPI: that they link at all is part of the test.
 *
 * For every planner and 1..7 ranks of the stories15M shape (and the
 * grouped-query tiny-gqa shape), in fp32 and q8_0 messages:
 *   - every exchange is executed by exactly its members, once each, and the
 *     cost model runs every program to its end (communication ops match);
 *   - layer-wise placement moves the residual three times per token;
 *   - somegather moves, per token, (D-1) copies of every exchanged vector
 *     (4 per layer: dim, n_heads*head_dim, dim, hidden_dim; then dim) plus
 *     the logits of the other ranks' vocabulary rows, and its shards add up
 *     to the whole model with only the norms held more than once;
 *   - somegather is refused, naming the reason, where D does not divide the
 *     KV heads or exceeds them;
 *   - the cost model counts the link delays a token's dependencies need
 *     (layer-wise 3, tp 14, somegather 27 on 3 ranks), and a rank holding
 *     nothing adds no time;
 *   - greedy and tp place what can be stated in advance (the projection by
 *     its FFN over slow links, heads where the layer finishes first, shares
 *     rounded to the nearest unit), and speculation is marked exactly where
 *     it saves time, its acceptance kept in permille;
 *   - the vocabulary is split by rows when the table does not fit rank 0 (or
 *     when asked; never for somegather): every byte held once, rank 0 none,
 *     embedding rows gathered at rank 0 and one logit candidate per slice.
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

static int make(const char *shape, int planner, int n, int wire, mi_config *c, mi_plan *plan, mi_programs *p,
                char *err)
{
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape(shape, c), 0);
    mi_cluster cl;
    mi_cluster_default(&cl, n, 1e12);
    mi_plan_options po = {(mi_planner)planner, 3, -1, 0, NULL, 0.7, 0, wire, 0, 0, 0, NULL, 0, 0};
    int rc = mi_plan_make(c, &cl, &po, plan, err);
    if (rc == 0)
        rc = mi_programs_compile(plan, p, err);
    mi_cluster_free(&cl);
    return rc;
}

/* Each exchange a phase uses appears once in each member's program of that
 * phase and nowhere else; a window's root exposes it once (POST), before. */
static void check_matching(const mi_programs *p)
{
    for (int ph = 0; ph < MI_N_PHASES; ph++)
        for (int x = 0; x < p->n_xchg; x++) {
            const mi_exchange *e = &p->xchg[x];
            const mi_comm *cm = &p->comms[e->comm];
            int used = 0;
            for (int r = 0; r < p->n_ranks; r++)
                for (int i = 0; i < p->prog[ph][r].n_ops; i++)
                    used |= p->prog[ph][r].ops[i].xid == x;
            if (!used)
                continue; /* the other phase's */
            for (int r = 0; r < p->n_ranks; r++) {
                int seen = 0, posts = 0, post_at = -1, put_at = -1;
                for (int i = 0; i < p->prog[ph][r].n_ops; i++) {
                    const mi_op *op = &p->prog[ph][r].ops[i];
                    if (op->xid != x)
                        continue;
                    if (op->kind == MI_OP_POST) {
                        posts++;
                        post_at = i;
                    } else {
                        seen++;
                        put_at = i;
                    }
                }
                CU_ASSERT_EQUAL(seen, mi_comm_index(cm, r) >= 0 ? 1 : 0);
                int root = e->kind == MI_OP_PUT && cm->n_members > 1 && cm->members[e->root] == r;
                CU_ASSERT_EQUAL(posts, root);
                if (root)
                    CU_ASSERT(post_at < put_at);
            }
        }
}

static void test_every_planner(void)
{
    const char *shapes[] = {"stories15M", "tiny-gqa"};
    char err[MI_ERRLEN];
    for (int s = 0; s < 2; s++)
        for (int pl = 0; pl < MI_N_PLANNERS; pl++)
            for (int n = 1; n <= 7; n++)
                for (int w = 0; w < 2; w++) {
                    if (pl == MI_PLANNER_EXACT) /* its plans are greedy's kind; its search takes seconds (unit_exact) */
                        continue;
                    mi_config c;
                    mi_plan plan;
                    mi_programs p;
                    int wire = w ? MI_Q8_0 : MI_F32;
                    if (make(shapes[s], pl, n, wire, &c, &plan, &p, err)) {
                        /* only somegather refuses, and only where D does not fit the heads */
                        CU_ASSERT(pl == MI_PLANNER_SOMEGATHER && (n > c.n_kv_heads || c.n_kv_heads % n));
                        continue;
                    }
                    check_matching(&p);
                    mi_cluster cl;
                    mi_cluster_default(&cl, n, 1e12);
                    mi_prediction pr;
                    mi_predict(&plan, &p, &cl, 100, &pr); /* aborts if the programs cannot all finish */
                    CU_ASSERT(pr.token_s > 0);
                    double sent[MI_MAX_RANKS], recv[MI_MAX_RANKS], ts = 0, tr = 0;
                    double total = mi_programs_bytes(&p, MI_PHASE_DECODE, sent, recv);
                    for (int r = 0; r < n; r++) {
                        ts += sent[r];
                        tr += recv[r];
                    }
                    CU_ASSERT(fabs(ts - total) < 1e-6 && fabs(tr - total) < 1e-6);
                    if (pl == MI_PLANNER_HYBRID) {
                        /* hybrid keeps a sublayer on one device when the cost model says so: it
                         * moves nothing exactly when every unit is on the controller */
                        int alone = 1;
                        for (int l = 0; l < c.n_layers; l++) {
                            alone &= plan.layers[l].proj_rank == 0 && plan.layers[l].n_ffn == 1 &&
                                     plan.layers[l].ffn[0].rank == 0;
                            for (int k = 0; k < c.n_kv_heads; k++)
                                alone &= plan.layers[l].kv_rank[k] == 0;
                        }
                        CU_ASSERT_EQUAL(alone, total == 0);
                    } else {
                        CU_ASSERT_EQUAL(n == 1, total == 0);
                    }
                    mi_cluster_free(&cl);
                    mi_programs_free(&p);
                    mi_plan_free(&plan);
                }
}

static void test_layerwise_bytes(void)
{
    mi_config c;
    mi_plan plan;
    mi_programs p;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(make("stories15M", MI_PLANNER_LAYERWISE, 3, MI_F32, &c, &plan, &p, err), 0);
    /* controller -> first worker -> second worker -> controller (logits) */
    CU_ASSERT_EQUAL(mi_programs_bytes(&p, MI_PHASE_DECODE, NULL, NULL), 3.0 * 4 * c.dim);
    mi_programs_free(&p);
    mi_plan_free(&plan);
}

/* Voltron §4.3.2 per layer: one layer's messages in fp16 cost half as many
 * bytes, the others' are unchanged; a layer never goes wider than the plan;
 * the layers' wire dtypes travel with the plan and are validated. */
static void test_layer_wire(void)
{
    mi_config c;
    mi_plan plan;
    mi_programs p;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(make("stories15M", MI_PLANNER_LAYERWISE, 3, MI_F32, &c, &plan, &p, err), 0);
    mi_programs_free(&p);
    /* layers 0-2 on rank 1, 3-5 on rank 2: layer 3's input is the message from rank 1 to rank 2 */
    CU_ASSERT_EQUAL(plan.layers[3].ffn[0].rank, 2);
    CU_ASSERT_EQUAL(plan.layers[2].ffn[0].rank, 1);
    CU_ASSERT_EQUAL(mi_wire_lower(MI_F32), MI_F16);
    CU_ASSERT_EQUAL(mi_wire_lower(MI_F16), MI_Q8_0);
    CU_ASSERT_EQUAL(mi_wire_lower(MI_Q8_0), -1);
    CU_ASSERT_EQUAL(mi_wire_narrower(MI_F16, MI_Q8_0), MI_Q8_0);
    plan.layers[3].wire = MI_F16;
    CU_ASSERT_EQUAL(mi_plan_wire(&plan, 3), MI_F16);
    CU_ASSERT_EQUAL(mi_plan_wire(&plan, 2), MI_F32);
    CU_ASSERT_EQUAL(mi_plan_wire(&plan, -1), MI_F32);
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&plan, &p, err), 0);
    CU_ASSERT_EQUAL(mi_programs_bytes(&p, MI_PHASE_DECODE, NULL, NULL), 2.0 * 4 * c.dim + 2.0 * c.dim);
    mi_programs_free(&p);
    plan.wire = MI_Q8_0; /* the narrower of the two: q8_0 everywhere */
    CU_ASSERT_EQUAL(mi_plan_wire(&plan, 3), MI_Q8_0);
    CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&plan, &p, err), 0);
    CU_ASSERT_EQUAL(mi_programs_bytes(&p, MI_PHASE_DECODE, NULL, NULL), 3.0 * mi_wire_row_bytes(MI_Q8_0, c.dim));
    mi_programs_free(&p);
    plan.wire = MI_F32;
    size_t n;
    int *b = mi_plan_serialize(&plan, &n);
    mi_plan back;
    CU_ASSERT_EQUAL_FATAL(mi_plan_deserialize(b, n, &c, &back, err), 0);
    CU_ASSERT_EQUAL(back.layers[3].wire, MI_F16);
    CU_ASSERT_EQUAL(back.layers[2].wire, MI_F32);
    back.layers[1].wire = MI_Q4_0;
    CU_ASSERT_NOT_EQUAL(mi_plan_validate(&back, NULL, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layer 1: wire dtype q4_0"));
    free(b);
    mi_plan_free(&back);
    mi_plan_free(&plan);
}

/* Voltron §4.3.1 pruning at run time: the kept runs of a slice, cut at
 * shard boundaries and merged across kept neighbours; the masks travel with
 * the plan; more than half of a layer's shards, or shards outside it,
 * refused; the cost model charges the FFN for the kept units only. */
static void test_ffn_pruned(void)
{
    mi_config c;
    mi_plan plan;
    mi_programs p;
    char err[MI_ERRLEN];
    CU_ASSERT_EQUAL_FATAL(make("stories15M", MI_PLANNER_TP, 2, MI_F32, &c, &plan, &p, err), 0);
    mi_cluster cl;
    mi_cluster_default(&cl, 2, 1e9);
    mi_prediction full, pruned;
    mi_predict(&plan, &p, &cl, 64, &full);
    int r0[MI_MAX_PRUNE_RUNS], rn[MI_MAX_PRUNE_RUNS];
    CU_ASSERT_EQUAL(mi_plan_ffn_kept(&plan, 1, 100, 300, r0, rn), 1); /* nothing pruned: the slice whole */
    CU_ASSERT_EQUAL(r0[0], 100);
    CU_ASSERT_EQUAL(rn[0], 300);
    plan.ffn_shard = 64; /* 12 shards of 768 */
    plan.layers[1].ffn_pruned = (1u << 2) | (1u << 3) | (1u << 6);
    /* [100, 400): kept [100, 128), pruned [128, 256), kept [256, 384), pruned [384, 400) */
    CU_ASSERT_EQUAL_FATAL(mi_plan_ffn_kept(&plan, 1, 100, 300, r0, rn), 2);
    CU_ASSERT_EQUAL(r0[0], 100);
    CU_ASSERT_EQUAL(rn[0], 28);
    CU_ASSERT_EQUAL(r0[1], 256);
    CU_ASSERT_EQUAL(rn[1], 128);
    CU_ASSERT_EQUAL(mi_plan_ffn_kept_units(&plan, 1, 0, 768), 768 - 3 * 64);
    CU_ASSERT_EQUAL(mi_plan_ffn_kept_units(&plan, 0, 0, 768), 768);
    CU_ASSERT_EQUAL(mi_plan_validate(&plan, NULL, err), 0);
    mi_predict(&plan, &p, &cl, 64, &pruned);
    CU_ASSERT(pruned.token_s < full.token_s);
    size_t n;
    int *b = mi_plan_serialize(&plan, &n);
    mi_plan back;
    CU_ASSERT_EQUAL_FATAL(mi_plan_deserialize(b, n, &c, &back, err), 0);
    CU_ASSERT_EQUAL(back.ffn_shard, 64);
    CU_ASSERT_EQUAL(back.layers[1].ffn_pruned, plan.layers[1].ffn_pruned);
    CU_ASSERT_EQUAL(back.layers[0].ffn_pruned, 0);
    back.layers[2].ffn_pruned = 0x7f; /* 7 of 12 */
    CU_ASSERT_NOT_EQUAL(mi_plan_validate(&back, NULL, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layer 2 prunes FFN shards"));
    back.layers[2].ffn_pruned = 1u << 12; /* past the last shard */
    CU_ASSERT_NOT_EQUAL(mi_plan_validate(&back, NULL, err), 0);
    back.layers[2].ffn_pruned = 0;
    back.ffn_shard = 48;
    CU_ASSERT_NOT_EQUAL(mi_plan_validate(&back, NULL, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "shards of 48 units"));
    free(b);
    mi_plan_free(&back);
    mi_programs_free(&p);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
}

static void test_somegather_bytes_and_shards(void)
{
    int Ds[] = {2, 3, 6};
    char err[MI_ERRLEN];
    for (int i = 0; i < 3; i++)
        for (int w = 0; w < 2; w++) {
            int D = Ds[i], wire = w ? MI_Q8_0 : MI_F32;
            mi_config c;
            mi_plan plan;
            mi_programs p;
            CU_ASSERT_EQUAL_FATAL(make("stories15M", MI_PLANNER_SOMEGATHER, D, wire, &c, &plan, &p, err), 0);
            int nq = c.n_heads * c.head_dim;
            /* every rank's slice of each vector reaches the D-1 others */
            double per_rank = 0;
            int widths[4] = {c.dim, nq, c.dim, c.hidden_dim};
            for (int l = 0; l < c.n_layers; l++)
                for (int x = 0; x < 4; x++)
                    per_rank += (double)mi_wire_row_bytes(wire, (size_t)(widths[x] / D));
            per_rank += (double)mi_wire_row_bytes(wire, (size_t)(c.dim / D));
            double logits = 0;
            for (int k = 0; k < plan.n_cls; k++)
                if (plan.cls[k].rank != 0)
                    logits += (double)mi_wire_row_bytes(wire, (size_t)plan.cls[k].n);
            CU_ASSERT_EQUAL(mi_programs_bytes(&p, MI_PHASE_DECODE, NULL, NULL), per_rank * D * (D - 1) + logits);
            /* ops per rank: 4 allgathers per layer and one before the classifier */
            for (int r = 0; r < D; r++) {
                int ag = 0, norms = 0;
                for (int k = 0; k < p.prog[MI_PHASE_DECODE][r].n_ops; k++) {
                    ag += p.prog[MI_PHASE_DECODE][r].ops[k].kind == MI_OP_ALLGATHERV;
                    norms += p.prog[MI_PHASE_DECODE][r].ops[k].kind == MI_OP_NORM_LOCAL;
                }
                CU_ASSERT_EQUAL(ag, 4 * c.n_layers + 1);
                CU_ASSERT_EQUAL(norms, 2 * c.n_layers + 1);
            }
            /* the shards' layer weights add up to the model's, norms held by every rank */
            size_t sum = 0, full = 0;
            for (int r = 0; r < D; r++) {
                size_t wb;
                mi_plan_rank_memory(&plan, r, &wb, NULL);
                sum += wb;
            }
            mi_plan one;
            mi_programs p1;
            CU_ASSERT_EQUAL_FATAL(make("stories15M", MI_PLANNER_SOMEGATHER, 1, wire, &c, &one, &p1, err), 0);
            mi_plan_rank_memory(&one, 0, &full, NULL);
            /* D copies of 2 norms per layer and the final norm; the embeddings (split by
             * columns) and the tied classifier (split by rows) each add up once, but on
             * more than one rank the classifier is no longer a view of the embeddings */
            size_t norms = (size_t)(2 * c.n_layers + 1) * c.dim * 4;
            CU_ASSERT_EQUAL(sum, full + (size_t)(D - 1) * norms + mi_classifier_bytes(&c, c.vocab_size));
            mi_programs_free(&p1);
            mi_plan_free(&one);
            mi_programs_free(&p);
            mi_plan_free(&plan);
        }
}

static void test_somegather_refusals(void)
{
    mi_config c;
    mi_plan plan;
    mi_programs p;
    char err[MI_ERRLEN];
    CU_ASSERT_NOT_EQUAL(make("stories15M", MI_PLANNER_SOMEGATHER, 4, MI_F32, &c, &plan, &p, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "4 does not divide the model's 6 heads"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "1, 2, 3, 6"));
    CU_ASSERT_NOT_EQUAL(make("stories15M", MI_PLANNER_SOMEGATHER, 7, MI_F32, &c, &plan, &p, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "has only 6 heads"));
    CU_ASSERT_NOT_EQUAL(make("tiny-gqa", MI_PLANNER_SOMEGATHER, 3, MI_F32, &c, &plan, &p, err), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "KV-head groups"));
}

/* One-way link delays on the critical path of a decoded token, stories15M on
 * 3 ranks: layer-wise hands the residual 0 -> 1 -> 2 -> 0; tp (controller
 * working) needs the command, one round per reduction (12) and the logits
 * gather; somegather the command, 4 allgathers per layer, the final one and
 * the logits gather. */
static void test_critical_path_delays(void)
{
    struct { int planner; double delays; } want[] = {
        {MI_PLANNER_LAYERWISE, 3}, {MI_PLANNER_TP, 1 + 2 * 6 + 1}, {MI_PLANNER_SOMEGATHER, 1 + 4 * 6 + 1 + 1}};
    char err[MI_ERRLEN];
    for (int i = 0; i < 3; i++) {
        mi_config c;
        mi_plan plan;
        mi_programs p;
        CU_ASSERT_EQUAL_FATAL(make("stories15M", want[i].planner, 3, MI_F32, &c, &plan, &p, err), 0);
        CU_ASSERT_EQUAL(mi_predict_delays(&plan, &p), want[i].delays);
        mi_programs_free(&p);
        mi_plan_free(&plan);
    }
}

/* Planner placements a test can state in advance (stories15M, controller
 * not working, memory plentiful):
 *   - greedy keeps a layer's projection with its FFN when a link costs more
 *     than the projection's time (1 ms links: every layer), and spreads it
 *     for balance when links are cheap (20 us: at least one layer apart);
 *   - greedy gives each KV head to the worker where the layer's attention
 *     finishes first: with workers of speed 1 and 0.25 the fast one takes 5
 *     of 6 heads (5 t against 4 t; 4 heads there would finish at 8 t);
 *   - the speed split rounds each share to the nearest unit: 10 units over
 *     3 equal parts are 3, 4, 3 (ends 3.33 -> 3, 6.67 -> 7), and tp's
 *     classifier over 3 equal ranks 10667, 10666, 10667 rows of 32000. */
static void test_planner_placements(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    char err[MI_ERRLEN];
    mi_plan_options po = {MI_PLANNER_GREEDY, 1, 0, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    const double lat[2] = {1e-3, 20e-6};
    for (int i = 0; i < 2; i++) {
        mi_cluster cl;
        mi_cluster_default(&cl, 4, 1e12);
        cl.latency_s = lat[i];
        mi_plan p;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
        int with_ffn = 0;
        for (int l = 0; l < c.n_layers; l++)
            with_ffn += p.layers[l].proj_rank == p.layers[l].ffn[0].rank;
        CU_ASSERT(i == 0 ? with_ffn == c.n_layers : with_ffn < c.n_layers);
        mi_plan_free(&p);
        mi_cluster_free(&cl);
    }
    mi_cluster cl;
    mi_cluster_default(&cl, 3, 1e12);
    cl.dev[2].speed = 0.25;
    mi_cluster_finish(&cl);
    mi_plan p;
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
    for (int l = 0; l < c.n_layers; l++) {
        int fast = 0;
        for (int k = 0; k < c.n_kv_heads; k++)
            fast += p.layers[l].kv_rank[k] == 1;
        CU_ASSERT_EQUAL(fast, 5);
    }
    mi_plan_free(&p);
    mi_cluster_free(&cl);

    int count[3];
    CU_ASSERT_EQUAL(mi_split_units(10, NULL, 3, count), 3);
    CU_ASSERT(count[0] == 3 && count[1] == 4 && count[2] == 3);
    mi_cluster_default(&cl, 3, 1e12);
    po.planner = MI_PLANNER_TP;
    po.controller_works = 1;
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
    CU_ASSERT_EQUAL_FATAL(p.n_cls, 3);
    CU_ASSERT(p.cls[0].n == 10667 && p.cls[1].n == 10666 && p.cls[2].n == 10667);
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

/* A rank that holds nothing costs nothing: rank 0 with every layer on two
 * ranks over 10 ms links predicts the time of rank 0 alone (the idle
 * worker's command arrives after 10 ms, but it has nothing to do). */
static void test_idle_rank_costs_nothing(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    char err[MI_ERRLEN];
    mi_plan_options po = {MI_PLANNER_LAYERWISE, 1, 1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    double t[2];
    for (int n = 1; n <= 2; n++) {
        mi_cluster cl;
        mi_cluster_default(&cl, n, 1e12);
        cl.latency_s = 10e-3;
        mi_plan p;
        mi_programs prog;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
        for (int l = 0; l < c.n_layers; l++) {
            p.layers[l].proj_rank = p.layers[l].ffn[0].rank = 0;
            for (int k = 0; k < c.n_kv_heads; k++)
                p.layers[l].kv_rank[k] = 0;
        }
        CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&p, &prog, err), 0);
        mi_prediction pr;
        mi_predict(&p, &prog, &cl, 10, &pr);
        t[n - 1] = pr.token_s;
        CU_ASSERT_DOUBLE_EQUAL(pr.token_s, pr.busy_s[0], 1e-12);
        mi_programs_free(&prog);
        mi_plan_free(&p);
        mi_cluster_free(&cl);
    }
    CU_ASSERT(t[0] > 0 && t[0] < 5e-3);
    CU_ASSERT_DOUBLE_EQUAL(t[1], t[0], 1e-12);
}

/* HeadSplit's speculation marks (layer-wise, stories15M on a controller and
 * three workers): with the default links every transition whose profiled
 * acceptance reaches the minimum is marked, its acceptance kept in permille
 * (0.9 -> 900), one below the minimum (0.5 < 0.7) and the last layer never;
 * over links of 1 kB/s the exact residual's message costs more than any
 * overlap saves, so none is. */
static void test_speculation_marks(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    char err[MI_ERRLEN];
    double acc[5] = {0.9, 0.9, 0.5, 0.9, 0.9};
    mi_plan_options po = {MI_PLANNER_LAYERWISE, 1, 0, 1, acc, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    for (int slow = 0; slow < 2; slow++) {
        mi_cluster cl;
        mi_cluster_default(&cl, 4, 1e12);
        if (slow)
            cl.bandwidth = 1e3;
        mi_plan p;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
        for (int l = 0; l < c.n_layers; l++) {
            int want = !slow && l < c.n_layers - 1 && l != 2;
            CU_ASSERT_EQUAL(p.layers[l].speculate, want);
            CU_ASSERT_EQUAL(p.layers[l].accept_permille, want ? 900 : 0);
            if (l < c.n_layers - 1)
                CU_ASSERT(slow ? mi_plan_spec_saving(&p, &cl, l, 1.0) < 0 : mi_plan_spec_saving(&p, &cl, l, 1.0) > 0);
        }
        mi_plan_free(&p);
        mi_cluster_free(&cl);
    }
}

static void test_wire_slices(void)
{
    for (int dim = 1; dim < 300; dim += 37)
        for (int n = 1; n <= 7; n++) {
            int next = 0;
            for (int j = 0; j < n; j++) {
                int c0, len;
                mi_wire_slice(dim, n, j, &c0, &len);
                CU_ASSERT_EQUAL(c0, next);
                CU_ASSERT(c0 % MI_QK == 0);
                next = c0 + len;
            }
            CU_ASSERT_EQUAL(next, dim);
        }
}

/* Bytes per decoded token of the decode programs' exchanges of one kind
 * (GATHERV of buf, by_token or not) over all members. */
static double gather_bytes(const mi_programs *p, int buf)
{
    double b = 0;
    for (int x = 0; x < p->n_xchg; x++) {
        int used = 0;
        for (int r = 0; r < p->n_ranks; r++)
            for (int i = 0; i < p->prog[MI_PHASE_DECODE][r].n_ops; i++)
                used |= p->prog[MI_PHASE_DECODE][r].ops[i].xid == x;
        const mi_exchange *e = &p->xchg[x];
        for (int a = 0; used && e->kind == MI_OP_GATHERV && e->buf == buf && a < p->comms[e->comm].n_members; a++)
            b += mi_exchange_bytes(p, x, a, e->root);
    }
    return b;
}

static double total_weights(const mi_plan *p)
{
    double t = 0;
    for (int r = 0; r < p->n_ranks; r++) {
        size_t w;
        mi_plan_rank_memory(p, r, &w, NULL);
        t += (double)w;
    }
    return t;
}

/* The vocabulary split by rows (docs/guide/vocabulary.md): made when the table
 * does not fit rank 0 (and only then, unless asked), each worker holding
 * the embedding rows of its classifier rows (a tied table's rows once, an
 * untied one's twice), rank 0 none; the programs embed on those ranks and
 * gather dim columns per position from each, and the logits travel as one
 * candidate (8 bytes) per slice. */
static void test_split_vocab(void)
{
    const char *shapes[2] = {"stories15M", "tiny-gqa"}; /* tied, untied */
    for (int s = 0; s < 2; s++) {
        mi_config c;
        CU_ASSERT_EQUAL_FATAL(mi_config_from_shape(shapes[s], &c), 0);
        char err[MI_ERRLEN];
        mi_cluster cl;
        mi_cluster_default(&cl, 3, 4e9);
        mi_plan_options po = {MI_PLANNER_GREEDY, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 1};
        mi_plan whole, split;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &whole, err), 0);
        CU_ASSERT_EQUAL(whole.split_vocab, 0);
        size_t w0;
        mi_plan_rank_memory(&whole, 0, &w0, NULL);
        /* rank 0 one byte short of its table: the planner splits */
        cl.dev[0].mem_bytes = (double)w0 - 1;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &split, err), 0);
        CU_ASSERT_EQUAL(split.split_vocab, 1);
        mi_plan_rank_memory(&split, 0, &w0, NULL);
        CU_ASSERT_EQUAL(w0, 0);
        int rows = 0;
        for (int i = 0; i < split.n_cls; i++) {
            int v0, n;
            mi_plan_emb_rows(&split, split.cls[i].rank, &v0, &n);
            CU_ASSERT(split.cls[i].rank != 0 && v0 == split.cls[i].v0 && n == split.cls[i].n);
            rows += n;
        }
        CU_ASSERT_EQUAL(rows, c.vocab_size);
        /* every byte once, but the final norm on each classifier rank */
        CU_ASSERT_EQUAL(total_weights(&split), total_weights(&whole) + 4.0 * c.dim * (split.n_cls - 1));
        mi_programs p;
        CU_ASSERT_EQUAL_FATAL(mi_programs_compile(&split, &p, err), 0);
        check_matching(&p);
        CU_ASSERT_EQUAL(p.embed_all, 1);
        CU_ASSERT_EQUAL(gather_bytes(&p, MI_BUF_X), 4.0 * c.dim * split.n_cls);
        CU_ASSERT_EQUAL(gather_bytes(&p, MI_BUF_LOGITS), 8.0 * split.n_cls);
        for (int i = 0; i < split.n_cls; i++) {
            const mi_op *first = p.prog[MI_PHASE_DECODE][split.cls[i].rank].ops;
            while (first->kind == MI_OP_POST) /* windows exposed ahead */
                first++;
            CU_ASSERT(first->kind == MI_OP_EMBED && first->variant == MI_OPV_EMBED_ROWS &&
                      first->i0 == split.cls[i].v0 && first->ni == split.cls[i].n);
        }
        mi_prediction pr;
        mi_predict(&split, &p, &cl, 8, &pr);
        CU_ASSERT(pr.token_s > 0 && pr.bytes_per_token == mi_programs_bytes(&p, MI_PHASE_DECODE, NULL, NULL));
        mi_programs_free(&p);
        /* asked for, with room: split too; somegather never (its ranks hold columns) */
        mi_plan asked;
        cl.dev[0].mem_bytes = 4e9;
        po.split_vocab = 1;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &asked, err), 0);
        CU_ASSERT_EQUAL(asked.split_vocab, 1);
        mi_plan_free(&asked);
        po.planner = MI_PLANNER_SOMEGATHER;
        if (c.n_kv_heads % 3 == 0) {
            CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &asked, err), 0);
            CU_ASSERT_EQUAL(asked.split_vocab, 0);
            asked.split_vocab = 1;
            CU_ASSERT(mi_plan_validate(&asked, NULL, err) != 0 && strstr(err, "somegather") != NULL);
            asked.split_vocab = 0;
            mi_plan_free(&asked);
        }
        mi_plan_free(&whole);
        mi_plan_free(&split);
        mi_cluster_free(&cl);
    }
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("partition", NULL, NULL);
    CU_add_test(s, "every planner: exchanges match, programs finish, bytes balance", test_every_planner);
    CU_add_test(s, "layer-wise moves the residual three times", test_layerwise_bytes);
    CU_add_test(s, "a layer's own wire dtype: its messages only, never wider, carried", test_layer_wire);
    CU_add_test(s, "pruned FFN shards: kept runs, carried, validated, cheaper", test_ffn_pruned);
    CU_add_test(s, "somegather bytes, ops and shards", test_somegather_bytes_and_shards);
    CU_add_test(s, "somegather refuses D that does not fit the heads", test_somegather_refusals);
    CU_add_test(s, "reduction slices are whole blocks covering dim", test_wire_slices);
    CU_add_test(s, "link delays on the critical path", test_critical_path_delays);
    CU_add_test(s, "greedy and tp placements: projection by its FFN, heads by finish, shares rounded",
                test_planner_placements);
    CU_add_test(s, "a rank holding nothing adds no time", test_idle_rank_costs_nothing);
    CU_add_test(s, "speculation marked where it saves time, acceptance in permille", test_speculation_marks);
    CU_add_test(s, "the vocabulary split when rank 0 cannot hold it, or when asked", test_split_vocab);
    CU_basic_set_mode(CU_BRM_NORMAL);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
