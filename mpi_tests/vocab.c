/* The MPI test's checks of large vocabularies (docs/guide/vocabulary.md): the
 * token embeddings split by vocabulary rows with the classifier's
 * (--split-vocab), and each classifier slice sending rank 0 its best
 * (logit, token id) pairs instead of its logits whole.
 *
 * On this job's ranks (2 or more), for the model given:
 *   - greedy (rank 0 holds nothing of the vocabulary) and tp (every rank a
 *     share) with the vocabulary split and one candidate per slice decode
 *     one device's greedy tokens; somegather with one candidate too (where
 *     it runs); the logits rank 0 gets hold exactly one finite value per
 *     slice (the exchange ran), every rank holds the weight bytes the plan
 *     says (rank 0 none under greedy), and the bytes every rank moves equal
 *     the plan's prediction, as the runtime counts them and at the MPI layer;
 *   - greedy with the vocabulary split and 40 candidates per slice, sampling
 *     at temperature 0.8 with top-k 40 and top-p 0.9 from a fixed seed,
 *     gives the tokens one device samples from its whole logits;
 *   - on stories15M (a vocabulary of 32000), tp's logits cost at most 1% of
 *     the whole logits' bytes per decoded token with one candidate. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "distributed.h"
#include "meshinfer/common.h"
#include "meshinfer/forward.h"
#include "meshinfer/planner.h"
#include "meshinfer/runtime.h"
#include "meshinfer/sampler.h"
#include "mpi_bytes.h"

enum { TOP_K = 40 };
#define SAMPLE_T 0.8f
#define SAMPLE_P 0.9f
#define SAMPLE_SEED 17

/* One device's tokens after prompt, chosen by a sampler at temperature temp
 * with top_k from its whole logits (rank 0). */
static void reference_sampled(const char *path, const int *prompt, float temp, int top_k, int *tokens)
{
    mi_model m;
    mi_model_load_path(&m, path, NULL);
    mi_scratch s;
    mi_scratch_init(&s, &m.cfg, CHUNK);
    mi_sampler smp;
    mi_sampler_init(&smp, m.cfg.vocab_size, temp, SAMPLE_P, SAMPLE_SEED);
    smp.top_k = top_k;
    float *lg = NULL;
    for (int i = 0; i < N_PROMPT; i += CHUNK)
        lg = mi_forward(&m, &s, prompt + i, N_PROMPT - i < CHUNK ? N_PROMPT - i : CHUNK, i, 0);
    memcpy(tokens, prompt, N_PROMPT * sizeof(int));
    for (int k = 0; k <= N_DECODE; k++) {
        int next = mi_sample(&smp, lg);
        tokens[N_PROMPT + k] = next;
        if (k < N_DECODE)
            lg = mi_forward(&m, &s, &next, 1, N_PROMPT + k, 0);
    }
    mi_sampler_free(&smp);
    mi_scratch_free(&s);
    mi_model_free(&m);
}

/* The same under plan: tokens (rank 0), the fewest finite logits any pass
 * gave rank 0 (*finite), every rank's metrics (all, rank 0); the bytes at
 * the MPI layer are checked against prog's decode prediction. */
static void run_sampled(const char *path, const mi_plan *plan, const mi_programs *prog, const int *prompt, float temp,
                        int top_k, int *tokens, int *finite, mi_rank_metrics *all, const char *what)
{
    int V = plan->cfg.vocab_size;
    mi_runtime_options ro = {.model_path = path, .max_T = CHUNK, .on_reset_metrics = mpib_reset_cb};
    mi_runtime *rt = mi_runtime_create(plan, NULL, &ro);
    if (g_rank == 0) {
        mi_sampler smp;
        mi_sampler_init(&smp, V, temp, SAMPLE_P, SAMPLE_SEED);
        smp.top_k = top_k;
        float *lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
        mi_runtime_reset_metrics(rt);
        memcpy(tokens, prompt, N_PROMPT * sizeof(int));
        *finite = V;
        for (int k = 0; k <= N_DECODE; k++) {
            int n = 0;
            for (int i = 0; i < V; i++)
                n += isfinite(lg[i]) != 0;
            if (n < *finite)
                *finite = n;
            int next = mi_sample(&smp, lg);
            tokens[N_PROMPT + k] = next;
            if (k < N_DECODE)
                lg = mi_runtime_forward(rt, &next, 1, N_PROMPT + k, MI_FORWARD_DECODE);
        }
        mi_sampler_free(&smp);
        mi_runtime_stop(rt);
    } else {
        mi_runtime_serve(rt);
    }
    check_mpi_bytes(what, prog, N_DECODE);
    mi_runtime_metrics(rt, all);
    mi_runtime_free(rt);
}

/* Finite logits rank 0 should see: each slice's best k when a slice is off
 * rank 0 (candidates travel), else all of them. */
static int expected_finite(const mi_plan *plan, int k)
{
    int away = 0, n = 0;
    for (int i = 0; i < plan->n_cls; i++) {
        away |= plan->cls[i].rank != 0;
        n += k < plan->cls[i].n ? k : plan->cls[i].n;
    }
    return away ? n : plan->cfg.vocab_size;
}

/* The plan's every rank: bytes as predicted, weights as planned. */
static void check_ranks(const mi_plan *plan, const mi_programs *prog, const mi_rank_metrics *all, const char *what)
{
    double sent[MI_MAX_RANKS], recv[MI_MAX_RANKS];
    mi_programs_bytes(prog, MI_PHASE_DECODE, sent, recv);
    for (int r = 0; r < g_size; r++) {
        CHECK(all[r].bytes_sent == sent[r] * N_DECODE && all[r].bytes_recv == recv[r] * N_DECODE,
              "%s rank %d: moved %.0f / %.0f bytes per token, the plan predicts %.0f / %.0f", what, r,
              all[r].bytes_sent / N_DECODE, all[r].bytes_recv / N_DECODE, sent[r], recv[r]);
        size_t wb;
        mi_plan_rank_memory(plan, r, &wb, NULL);
        CHECK(all[r].weight_bytes == (double)wb, "%s rank %d holds %.0f weight bytes, the plan says %zu", what, r,
              all[r].weight_bytes, wb);
    }
    if (plan->planner == MI_PLANNER_GREEDY && plan->split_vocab) {
        /* what every rank holds whatever its shard (Llama 3's RoPE factors) */
        const mi_config *c = &plan->cfg;
        mi_layer_spec *ls = calloc((size_t)c->n_layers, sizeof *ls);
        mi_shard_spec none = {.layers = ls};
        size_t base = mi_shard_weight_bytes(c, &none);
        free(ls);
        CHECK(all[0].weight_bytes == (double)base, "%s: rank 0 holds %.0f weight bytes with the vocabulary split "
              "over the workers (want %zu: no embeddings, no classifier)", what, all[0].weight_bytes, base);
    }
}

/* Bytes per decoded token of the logits' gather (0 when there is none):
 * the exchange the decode programs run. */
static double logits_bytes(const mi_programs *p)
{
    double b = 0;
    for (int x = 0; x < p->n_xchg; x++) {
        const mi_exchange *e = &p->xchg[x];
        int used = 0;
        for (int r = 0; r < p->n_ranks; r++)
            for (int i = 0; i < p->prog[MI_PHASE_DECODE][r].n_ops; i++)
                used |= p->prog[MI_PHASE_DECODE][r].ops[i].xid == x;
        if (!used || e->kind != MI_OP_GATHERV || e->buf != MI_BUF_LOGITS)
            continue;
        int n = p->comms[e->comm].n_members;
        for (int a = 0; a < n; a++)
            b += mi_exchange_bytes(p, x, a, e->root);
    }
    return b;
}

/* tp's logits on this job: whole, and with 1 and TOP_K candidates per slice. */
static void check_logit_bytes(const mi_config *c)
{
    mi_cluster cl;
    mi_cluster_default(&cl, g_size, 1e12);
    double b[3] = {0};
    int ks[3] = {0, 1, TOP_K};
    for (int i = 0; i < 3; i++) {
        mi_plan_options po = {MI_PLANNER_TP, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, ks[i]};
        mi_plan plan;
        mi_programs p;
        char err[MI_ERRLEN];
        if (mi_plan_make(c, &cl, &po, &plan, err) || mi_programs_compile(&plan, &p, err)) {
            CHECK(0, "tp for the logits' bytes: %s", err);
            mi_cluster_free(&cl);
            return;
        }
        b[i] = logits_bytes(&p);
        mi_programs_free(&p);
        mi_plan_free(&plan);
    }
    mi_cluster_free(&cl);
    CHECK(b[0] > 0 && b[1] <= 0.01 * b[0], "%s on %d ranks: logits cost %.0f bytes per token with one candidate per "
          "slice, %.2f%% of the whole logits' %.0f (limit 1%%)", c->name, g_size, b[1], 100 * b[1] / b[0], b[0]);
    if (g_rank == 0)
        printf("  tp         %d ranks %-14s logits per decoded token: whole %.0f B, 1 candidate per slice %.0f B "
               "(%.3f%%), %d candidates %.0f B (%.2f%%)\n", g_size, c->name, b[0], b[1], 100 * b[1] / b[0], TOP_K,
               b[2], 100 * b[2] / b[0]);
}

void check_vocab(const char *path, const mi_config *c, const int *prompt, const run_result *ref, int real)
{
    if (g_size < 2)
        return;
    int sampled[N_PROMPT + N_DECODE + 1];
    if (g_rank == 0)
        reference_sampled(path, prompt, SAMPLE_T, TOP_K, sampled);
    /* planner, candidates per slice, temperature */
    struct { mi_planner pl; int k; float temp; } cases[] = {
        {MI_PLANNER_GREEDY, 1, 0.0f}, {MI_PLANNER_TP, 1, 0.0f}, {MI_PLANNER_SOMEGATHER, 1, 0.0f},
        {MI_PLANNER_GREEDY, TOP_K, SAMPLE_T}};
    mi_cluster cl;
    mi_cluster_default(&cl, g_size, 1e12);
    mi_rank_metrics *all = g_rank == 0 ? calloc((size_t)g_size, sizeof *all) : NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int sg = cases[i].pl == MI_PLANNER_SOMEGATHER;
        if (sg && (c->n_kv_heads % g_size || c->post_norms)) /* refused there (check_model says why) */
            continue;
        mi_plan_options po = {cases[i].pl, 3, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 1, cases[i].k};
        mi_plan plan;
        mi_programs prog;
        char err[MI_ERRLEN], what[200];
        snprintf(what, sizeof what, "%s on %d ranks, %s, %s, %d candidate%s per slice%s", mi_planner_name(cases[i].pl),
                 g_size, c->name, sg ? "embeddings by columns" : "vocabulary split", cases[i].k,
                 cases[i].k == 1 ? "" : "s", cases[i].temp > 0 ? ", sampled" : "");
        if (mi_plan_make(c, &cl, &po, &plan, err) || mi_programs_compile(&plan, &prog, err)) {
            CHECK(0, "%s: %s", what, err);
            continue;
        }
        CHECK(plan.split_vocab == !sg && plan.logits_k == cases[i].k, "%s: the plan has split_vocab %d, logits_k %d",
              what, plan.split_vocab, plan.logits_k);
        int tokens[N_PROMPT + N_DECODE + 1], finite = 0;
        run_sampled(path, &plan, &prog, prompt, cases[i].temp, cases[i].temp > 0 ? TOP_K : 0, tokens, &finite, all,
                    what);
        if (g_rank == 0) {
            const int *want = cases[i].temp > 0 ? sampled : ref->tokens;
            int same = 0;
            for (int k = N_PROMPT; k <= N_PROMPT + N_DECODE; k++)
                same += tokens[k] == want[k];
            CHECK(same == N_DECODE + 1, "%s: %d of %d tokens as one device", what, same, N_DECODE + 1);
            CHECK(finite == expected_finite(&plan, cases[i].k), "%s: rank 0 got %d finite logits, want %d", what,
                  finite, expected_finite(&plan, cases[i].k));
            check_ranks(&plan, &prog, all, what);
            double moved = 0;
            for (int r = 0; r < g_size; r++)
                moved += all[r].bytes_sent / N_DECODE;
            printf("  %s: %d/%d tokens as one device, %d finite logits at rank 0, %.0f bytes per token (plan %.0f)\n",
                   what, same, N_DECODE + 1, finite, moved, mi_programs_bytes(&prog, MI_PHASE_DECODE, NULL, NULL));
        }
        mi_programs_free(&prog);
        mi_plan_free(&plan);
    }
    free(all);
    mi_cluster_free(&cl);
    if (real)
        check_logit_bytes(c);
}
