/* MPI test: for every planner, the distributed runtime on this job's ranks
 * produces the same greedy tokens as a single device, with logits within
 * 1e-4 (bit-identical logits for the head-level planners and somegather,
 * whose arithmetic per output row is unchanged by partitioning; somegather
 * is refused, saying why, where the ranks do not divide the KV heads;
 * somegather pruning the heads and hidden exchanges by magnitude gives bit
 * for bit one device whose wo and w2 lack the columns nobody sends); the
 * bytes every
 * rank moves per decode step equal the plan's prediction, both as the
 * runtime counts them and as counted at the MPI layer (mpi_bytes.c, the
 * profiling interface: for every pair of ranks); head-level
 * placement moves more bytes than layer-wise; and with the real model each
 * rank's resident memory growth while loading is within 10% of its shard.
 * With inter-layer speculation on every eligible transition (HeadSplit),
 * tolerance 0 gives bit-identical tokens and logits to running without it,
 * and an infinite tolerance accepts every test. The same for the real model
 * in q8_0 and q4_0 and the small one in q4_0 (each against one device with
 * the same weights); with q8_0 (real model) and fp16 (small one) messages,
 * every rank's bytes equal the prediction and are at most 30% (52%) of fp32's;
 * with q8_0 messages in the first half of the layers only (Voltron's
 * communication scaling per layer), between all-fp32's and all-q8_0's.
 * Voltron's computation scaling: a layer-wise run that lowers layers 2-3 to
 * q8_0 and 5 to q4_0 after the prompt (a re-placement to the same shards)
 * gives bit for bit the logits of one device converting the same layers at
 * the same point, and raising them again (reloaded from the file) gives the
 * fp32 run's logits bit for bit. A re-placement that moves each rank's
 * classifier slice to other rows of the same size, and back, gives one
 * device's logits (greedy with the vocabulary split: its embedding rows move
 * too, bit for bit; tp: the classifier alone, within 1e-4).
 * Voltron's hybrid planner on a heterogeneous, memory-tight cluster runs the
 * prompt on its prefill placement, re-places to its decode placement (the KV
 * heads that change owner moved and counted) and gives one device's tokens.
 * Large vocabularies (vocab.c): the embeddings split by vocabulary rows with
 * the classifier's, and each classifier slice sending rank 0 only its best
 * (logit, token id) pairs, give one device's greedy and top-k sampled tokens
 * on stories15M and every family's tiny model, with the bytes predicted.
 *
 * usage: mpirun -np N test_distributed REAL_MODEL.h5 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/forward.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/runtime.h"
#include "meshinfer/sampler.h"
#include "meshinfer/quantize.h"
#include "meshinfer/synth.h"

#include "distributed.h"
#include "mpi_bytes.h"

int g_rank, g_size, g_pass, g_fail;
static double g_vocab_s; /* seconds the vocabulary checks took (the suite's time budget) */

/* The plan's prediction as a matrix: m[from * g_size + to] = bytes per
 * position from world rank `from` to `to` over the exchanges phase ph's
 * programs use (mi_exchange_bytes; the same exchanges mi_programs_bytes sums). */
static void predicted_matrix(const mi_programs *p, int ph, double *m)
{
    memset(m, 0, (size_t)g_size * g_size * sizeof(double));
    for (int x = 0; x < p->n_xchg; x++) {
        int used = 0;
        for (int r = 0; r < p->n_ranks && !used; r++)
            for (int i = 0; i < p->prog[ph][r].n_ops && !used; i++)
                used = p->prog[ph][r].ops[i].xid == x;
        const mi_comm *cm = &p->comms[p->xchg[x].comm];
        for (int a = 0; used && a < cm->n_members; a++)
            for (int b = 0; b < cm->n_members; b++)
                m[cm->members[a] * g_size + cm->members[b]] += mi_exchange_bytes(p, x, a, b);
    }
}

/* the bytes MPI itself was handed on the exchanges'
 * communicators and windows (mpi_bytes.c, counted since the runtime's
 * metrics reset) equal, for every pair of ranks, steps times the
 * prediction of programs p's decode phase. Collective; returns (rank 0) the
 * counted bytes per step. */
double check_mpi_bytes(const char *what, const mi_programs *p, int steps)
{
    size_t nn = (size_t)g_size * g_size;
    double *got = calloc(nn, sizeof(double)), *want = calloc(nn, sizeof(double)), total = 0;
    mpib_matrix(MPIB_DATA, got);
    if (g_rank != 0)
        goto done;
    predicted_matrix(p, MI_PHASE_DECODE, want);
    double ps[MI_MAX_RANKS], pr[MI_MAX_RANKS];
    mi_programs_bytes(p, MI_PHASE_DECODE, ps, pr);
    int bad = 0;
    for (int a = 0; a < g_size; a++) {
        double s = 0, r = 0, ws = 0, wr = 0;
        for (int b = 0; b < g_size; b++) {
            s += got[a * g_size + b], r += got[b * g_size + a];
            ws += want[a * g_size + b], wr += want[b * g_size + a];
            if (got[a * g_size + b] != want[a * g_size + b] * steps && bad++ < 4)
                fprintf(stderr, "  %s: MPI moved %.0f bytes/token from rank %d to %d, plan predicts %.0f\n", what,
                        got[a * g_size + b] / steps, a, b, want[a * g_size + b]);
        }
        total += s / steps;
        CHECK(ws == ps[a] && wr == pr[a], "%s rank %d: the prediction's matrix sums to %.0f / %.0f, "
              "mi_programs_bytes %.0f / %.0f", what, a, ws, wr, ps[a], pr[a]);
        CHECK(s == ps[a] * steps && r == pr[a] * steps,
              "%s rank %d: MPI was handed %.0f bytes/token to send, %.0f addressed to it; plan predicts %.0f / %.0f",
              what, a, s / steps, r / steps, ps[a], pr[a]);
    }
    CHECK(bad == 0, "%s: %d rank pairs moved other bytes than predicted at the MPI layer", what, bad);
done:
    free(got);
    free(want);
    return total;
}


/* The columns of W [rows, cols] (fp32) outside every rank's send list of
 * exchange x in layer l of plan set to zero. */
static void zero_unsent(mi_tensor *W, const mi_plan *plan, int l, int x)
{
    unsigned char *sent = calloc((size_t)W->cols, 1);
    for (int r = 0; r < plan->n_ranks; r++) {
        const mi_keep *k = mi_plan_keep(plan, l, x, r);
        for (int i = 0; i < k->n; i++)
            sent[k->cols[i]] = 1;
    }
    for (int i = 0; i < W->rows; i++)
        for (int j = 0; j < W->cols; j++)
            if (!sent[j])
                ((float *)W->q)[(size_t)i * W->cols + j] = 0.0f;
    free(sent);
}

/* One device's greedy run. With masked (a somegather plan pruning the heads
 * and hidden exchanges by magnitude, which leaves a pruned column out for
 * its owner too), the model's wo and w2 lose the columns nobody sends. */
void reference(const char *path, run_result *r, const int *prompt, const mi_plan *masked)
{
    mi_model m;
    mi_model_load_path(&m, path, NULL);
    const mi_config *c = &m.cfg;
    for (int l = 0; masked && l < c->n_layers; l++) {
        zero_unsent(&m.layers[l].wo, masked, l, MI_XCH_HEADS);
        zero_unsent(&m.layers[l].w2, masked, l, MI_XCH_HIDDEN);
    }
    mi_scratch s;
    mi_scratch_init(&s, c, CHUNK);
    float *lg = NULL;
    for (int i = 0; i < N_PROMPT; i += CHUNK) {
        int T = N_PROMPT - i < CHUNK ? N_PROMPT - i : CHUNK;
        lg = mi_forward(&m, &s, prompt + i, T, i, 0);
    }
    memcpy(r->tokens, prompt, N_PROMPT * sizeof(int));
    for (int k = 0; k <= N_DECODE; k++) {
        memcpy(r->logits + (size_t)k * c->vocab_size, lg, (size_t)c->vocab_size * sizeof(float));
        int next = mi_argmax(lg, c->vocab_size);
        r->tokens[N_PROMPT + k] = next;
        if (k < N_DECODE)
            lg = mi_forward(&m, &s, &next, 1, N_PROMPT + k, 0);
    }
    mi_scratch_free(&s);
    mi_model_free(&m);
}

/* Run the same tokens with speculation on every eligible transition. */
static void spec_run(const char *path, const mi_config *c, const mi_plan *plan, double tol, const int *prompt,
                     run_result *out, double *accepted, double *decided, int *n_spec)
{
    mi_plan sp;
    size_t n;
    int *buf = mi_plan_serialize(plan, &n);
    char err[MI_ERRLEN];
    mi_plan_deserialize(buf, n, c, &sp, err);
    free(buf);
    *n_spec = 0;
    for (int l = 0; l + 1 < c->n_layers; l++)
        if (sp.layers[l].proj_rank >= 0 && sp.layers[l].n_ffn == 1) {
            sp.layers[l].speculate = 1;
            (*n_spec)++;
        }
    mi_runtime_options ro = {.model_path = path, .max_T = CHUNK, .tolerance = tol};
    mi_runtime *rt = mi_runtime_create(&sp, NULL, &ro);
    mi_rank_metrics *all = g_rank == 0 ? calloc((size_t)g_size, sizeof *all) : NULL;
    size_t V = (size_t)c->vocab_size;
    if (g_rank == 0) {
        float *lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
        for (int k = 0; k <= N_DECODE; k++) {
            memcpy(out->logits + (size_t)k * V, lg, V * sizeof(float));
            int next = mi_argmax(lg, c->vocab_size);
            out->tokens[N_PROMPT + k] = next;
            if (k < N_DECODE)
                lg = mi_runtime_forward(rt, &next, 1, N_PROMPT + k, MI_FORWARD_DECODE);
        }
        mi_runtime_stop(rt);
    } else {
        mi_runtime_serve(rt);
    }
    mi_runtime_metrics(rt, all);
    *accepted = *decided = 0;
    if (g_rank == 0)
        for (int r = 0; r < g_size; r++)
            for (int l = 0; l < c->n_layers; l++) {
                *accepted += all[r].spec_accepted[l];
                *decided += all[r].spec_decided[l];
            }
    free(all);
    mi_runtime_free(rt);
    mi_plan_free(&sp);
}

static void check_speculation(const char *path, const mi_config *c, const mi_plan *plan, const int *prompt,
                              const run_result *exact)
{
    size_t V = (size_t)c->vocab_size;
    run_result sr = {{0}, NULL};
    if (g_rank == 0)
        sr.logits = malloc((1 + N_DECODE) * V * sizeof(float));
    double acc, dec;
    int n_spec;
    spec_run(path, c, plan, 0.0, prompt, &sr, &acc, &dec, &n_spec);
    if (g_rank == 0) {
        int same = memcmp(sr.logits, exact->logits, (1 + N_DECODE) * V * sizeof(float)) == 0 &&
                   memcmp(sr.tokens + N_PROMPT, exact->tokens + N_PROMPT, (N_DECODE + 1) * sizeof(int)) == 0;
        CHECK(same, "%s on %d ranks, %s: tolerance 0 speculation is not bit-identical to exact execution",
              mi_planner_name(plan->planner), g_size, c->name);
        CHECK(acc == 0 && dec == (double)n_spec * (1 + N_DECODE + (N_PROMPT + CHUNK - 1) / CHUNK - 1),
              "tolerance 0: %.0f of %.0f accepted (want 0 of %d transitions x forwards)", acc, dec, n_spec);
    }
    spec_run(path, c, plan, 1e30, prompt, &sr, &acc, &dec, &n_spec);
    if (g_rank == 0) {
        int finite = 1;
        for (size_t i = 0; i < (1 + N_DECODE) * V; i++)
            finite &= isfinite(sr.logits[i]) != 0;
        CHECK(finite && acc == dec && dec > 0, "infinite tolerance: %.0f of %.0f accepted, finite %d", acc, dec,
              finite);
        printf("  %-10s %d ranks %-14s speculation on %d transitions: tolerance 0 bit-identical, "
               "infinite tolerance accepts %.0f/%.0f\n", mi_planner_name(plan->planner), g_size, c->name, n_spec,
               acc, dec);
    }
    free(sr.logits);
}

/* Decode N_DECODE tokens after the prompt under plan with runtime options
 * ro; logits of every step into out (rank 0), metrics into all (rank 0). */
static void run_plan(const mi_plan *plan, const mi_runtime_options *ro_in, const mi_config *c, const int *prompt,
                     run_result *out, mi_rank_metrics *all, const mi_programs *pred, const char *what)
/* pred: the programs whose decode prediction the bytes at the MPI layer must equal (NULL: not checked) */
{
    mi_runtime_options ro = *ro_in;
    ro.on_reset_metrics = mpib_reset_cb;
    mi_runtime *rt = mi_runtime_create(plan, NULL, &ro);
    size_t V = (size_t)c->vocab_size;
    if (g_rank == 0) {
        float *lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
        mi_runtime_reset_metrics(rt);
        memcpy(out->tokens, prompt, N_PROMPT * sizeof(int));
        for (int k = 0; k <= N_DECODE; k++) {
            memcpy(out->logits + (size_t)k * V, lg, V * sizeof(float));
            int next = mi_argmax(lg, c->vocab_size);
            out->tokens[N_PROMPT + k] = next;
            if (k < N_DECODE)
                lg = mi_runtime_forward(rt, &next, 1, N_PROMPT + k, MI_FORWARD_DECODE);
        }
        mi_runtime_stop(rt);
    } else {
        mi_runtime_serve(rt);
    }
    if (pred)
        check_mpi_bytes(what, pred, N_DECODE);
    mi_runtime_metrics(rt, all);
    mi_runtime_free(rt);
}

/* Bytes per token of the four pruned exchange kinds of a somegather plan. */
static double pruned_kinds_bytes(const mi_programs *p)
{
    double b = 0;
    for (int x = 0; x < p->n_xchg; x++) {
        const mi_exchange *e = &p->xchg[x];
        if (e->kind != MI_OP_ALLGATHERV || e->what >= MI_N_PRUNED_XCH)
            continue;
        int n = p->comms[e->comm].n_members;
        for (int a = 0; a < n; a++)
            for (int bb = 0; bb < n; bb++)
                b += mi_exchange_bytes(p, x, a, bb);
    }
    return b;
}

/* CATS on this job's ranks (when they divide the KV heads): pruning at
 * r = 0.9 moves exactly the predicted bytes, at most 10% of r = 0's in the
 * four pruned exchanges, and a plan file carries the send lists (same
 * tokens after a save and load); message loss is deterministic for a seed,
 * lost at about the asked rate in each mode, total in sender mode at P = 1,
 * and absent at P = 0 (bit-identical to no loss); in each mode the prompt in
 * passes of CHUNK and one position per pass lose the same columns at the
 * same positions (bit-identical logits after it). */
static void check_somegather(const char *path, const mi_config *c, const int *prompt, const run_result *exact)
/* exact: one device's tokens (rank 0), to report whether loss changed them */
{
    if (g_size < 2 || c->n_kv_heads % g_size)
        return;
    size_t V = (size_t)c->vocab_size;
    char err[MI_ERRLEN] = "";
    mi_cluster cl;
    mi_cluster_default(&cl, g_size, 1e12);
    mi_plan_options po = {MI_PLANNER_SOMEGATHER, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_plan plan;
    CHECK(mi_plan_make(c, &cl, &po, &plan, err) == 0, "somegather: %s", err);
    mi_programs p0, p9;
    mi_programs_compile(&plan, &p0, err);
    double r9[MI_N_PRUNED_XCH] = {0.9, 0.9, 0.9, 0.9};
    CHECK(mi_plan_prune(&plan, path, r9, MI_PRUNE_AWARE, err) == 0, "prune: %s", err);
    mi_programs_compile(&plan, &p9, err);
    double b0 = pruned_kinds_bytes(&p0), b9 = pruned_kinds_bytes(&p9);
    CHECK(b9 <= 0.1 * b0 && b9 > 0, "r = 0.9 moves %.0f bytes/token in the pruned exchanges, r = 0 %.0f (%.1f%%)", b9,
          b0, 100 * b9 / b0);
    double pred_sent[MI_MAX_RANKS], pred_recv[MI_MAX_RANKS];
    mi_programs_bytes(&p9, MI_PHASE_DECODE, pred_sent, pred_recv);
    run_result a = {{0}, NULL}, b = {{0}, NULL};
    mi_rank_metrics *all = g_rank == 0 ? calloc((size_t)g_size, sizeof *all) : NULL;
    if (g_rank == 0) {
        a.logits = malloc((1 + N_DECODE) * V * sizeof(float));
        b.logits = malloc((1 + N_DECODE) * V * sizeof(float));
    }
    mi_runtime_options ro = {.model_path = path, .max_T = CHUNK};
    run_plan(&plan, &ro, c, prompt, &a, all, &p9, "somegather r = 0.9");
    for (int r = 0; g_rank == 0 && r < g_size; r++)
        CHECK(all[r].bytes_sent == pred_sent[r] * N_DECODE && all[r].bytes_recv == pred_recv[r] * N_DECODE,
              "somegather r = 0.9 rank %d: sent %.0f recv %.0f bytes per token, plan predicts %.0f / %.0f", r,
              all[r].bytes_sent / N_DECODE, all[r].bytes_recv / N_DECODE, pred_sent[r], pred_recv[r]);
    /* the send lists survive a plan file */
    char file[600];
    snprintf(file, sizeof file, "%s.plan.json", path);
    mi_plan back;
    int saved = g_rank == 0 ? mi_plan_save_json(&plan, file, err) : 0;
    MPI_Bcast(&saved, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(saved == 0, "saving the pruned plan: %s", err);
    CHECK(mi_plan_load_json(file, c, &back, err) == 0, "loading the pruned plan: %s", err);
    run_plan(&back, &ro, c, prompt, &b, all, &p9, "somegather r = 0.9 (plan file)");
    if (g_rank == 0) {
        CHECK(!memcmp(a.logits, b.logits, (1 + N_DECODE) * V * sizeof(float)),
              "a pruned plan saved and loaded gives other logits");
    }
    mi_plan_free(&back);
    /* magnitude pruning of the heads and hidden exchanges only: a pruned
     * column is absent for every rank, its owner too, so the run is one
     * device's whose wo and w2 lack those columns, bit for bit (each
     * residual column one whole dot product, absent terms exactly zero);
     * the send lists are runs of scattered columns, packed and unpacked */
    if (c->dtype[0][MI_WO] == MI_F32 && c->dtype[0][MI_W2] == MI_F32) {
        double rm[MI_N_PRUNED_XCH] = {0, 0.5, 0, 0.5};
        mi_plan mp;
        CHECK(mi_plan_load_json(file, c, &mp, err) == 0, "loading the pruned plan: %s", err);
        mi_plan_free_keep(&mp);
        CHECK(mi_plan_prune(&mp, path, rm, MI_PRUNE_MAGNITUDE, err) == 0, "magnitude prune: %s", err);
        run_plan(&mp, &ro, c, prompt, &a, all, NULL, "somegather pruned by magnitude");
        if (g_rank == 0) {
            reference(path, &b, prompt, &mp);
            CHECK(!memcmp(a.logits, b.logits, (1 + N_DECODE) * V * sizeof(float)) &&
                      !memcmp(a.tokens, b.tokens, sizeof a.tokens),
                  "somegather on %d ranks pruning heads and hidden by magnitude (r = 0.5) is not one device "
                  "without those columns of wo and w2", g_size);
        }
        mi_plan_free(&mp);
    }
    if (g_rank == 0)
        unlink(file);
    /* message loss */
    mi_plan_free_keep(&plan);
    memset(plan.prune, 0, sizeof plan.prune);
    run_plan(&plan, &ro, c, prompt, &b, all, &p0, "somegather");
    ro.loss = 0;
    ro.loss_seed = 7;
    ro.loss_mode = MI_LOSS_SENDER;
    run_plan(&plan, &ro, c, prompt, &a, all, &p0, "somegather with loss");
    if (g_rank == 0)
        CHECK(!memcmp(a.logits, b.logits, (1 + N_DECODE) * V * sizeof(float)),
              "somegather with loss 0 is not bit-identical to running without loss");
    /* the prompt one position per pass gives the same bits as in passes of CHUNK (every row's
     * arithmetic is its own): the reference for where loss strikes inside a pass, below */
    mi_runtime_options ro1 = ro;
    ro1.max_T = 1;
    run_plan(&plan, &ro1, c, prompt, &a, all, NULL, "somegather one position per pass");
    if (g_rank == 0)
        CHECK(!memcmp(a.logits, b.logits, (1 + N_DECODE) * V * sizeof(float)),
              "somegather with the prompt one position per pass is not bit-identical to passes of %d", CHUNK);
    for (int mode = 0; mode < 3; mode++) {
        ro.loss_mode = mode;
        ro.loss = 0.2;
        run_plan(&plan, &ro, c, prompt, &a, all, &p0, "somegather with loss");
        double got = 0, lost = 0;
        for (int r = 0; g_rank == 0 && r < g_size; r++) {
            got += all[r].msgs_recv;
            lost += all[r].msgs_lost;
        }
        run_plan(&plan, &ro, c, prompt, &b, all, &p0, "somegather");
        if (g_rank == 0)
            CHECK(!memcmp(a.logits, b.logits, (1 + N_DECODE) * V * sizeof(float)),
                  "loss mode %s with one seed gave two results", mi_loss_mode_name(mode));
        /* a message's loss belongs to its position, not to the pass that carries it: the prompt
         * one position per pass loses the same columns at the same positions (a loss read at
         * the pass's first position, or zeroed in its first row, differs in the KV cache) */
        ro1 = ro;
        ro1.max_T = 1;
        run_plan(&plan, &ro1, c, prompt, &b, all, NULL, "somegather with loss, one position per pass");
        if (g_rank == 0) {
            CHECK(!memcmp(a.logits, b.logits, (1 + N_DECODE) * V * sizeof(float)),
                  "loss mode %s: the prompt in passes of %d and one position per pass lost other columns",
                  mi_loss_mode_name(mode), CHUNK);
            /* correlated modes lose messages in groups: a loose bound */
            CHECK(got > 0 && lost > 0.05 * got && lost < 0.4 * got, "loss mode %s at 0.2: %.0f of %.0f messages lost",
                  mi_loss_mode_name(mode), lost, got);
            printf("  somegather %d ranks %-14s loss %-8s 0.2: %.0f of %.0f messages lost (%.1f%%), %s\n", g_size,
                   c->name, mi_loss_mode_name(mode), lost, got, 100 * lost / got,
                   memcmp(a.tokens, exact->tokens, sizeof a.tokens) ? "tokens changed" : "same tokens");
        }
    }
    ro.loss_mode = MI_LOSS_SENDER;
    ro.loss = 1.0;
    run_plan(&plan, &ro, c, prompt, &a, all, &p0, "somegather with loss");
    double got = 0, lost = 0;
    for (int r = 0; g_rank == 0 && r < g_size; r++) {
        got += all[r].msgs_recv;
        lost += all[r].msgs_lost;
    }
    if (g_rank == 0)
        CHECK(got > 0 && lost == got, "sender mode at P = 1 lost %.0f of %.0f messages", lost, got);
    free(a.logits);
    free(b.logits);
    free(all);
    mi_programs_free(&p0);
    mi_programs_free(&p9);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
}

/* Voltron hybrid parallelism on a heterogeneous, memory-tight cluster
 * (speeds 1, 1/2, 1/3, ...; rank 0 with room for the embeddings and about a
 * third of the layers, the others less): the prefill placement runs the
 * prompt, the runtime re-places to the decode placement (KV heads moved to
 * their decode owners), and the tokens equal one device's; logits within
 * tp's bounds (sublayers under tensor parallelism sum partial products in
 * another order). On 3 ranks with the fp32 model the two placements must
 * differ, so that the phase switch is exercised. */
static void check_hybrid(const char *path, const mi_config *c, const int *prompt, const run_result *ref)
{
    mi_cluster cl;
    mi_cluster_default(&cl, g_size, 0);
    double cls = (double)mi_classifier_bytes(c, c->vocab_size);
    double layers = (double)mi_decode_weight_bytes(c) - cls + (double)mi_kv_cache_bytes(c, c->seq_len);
    double head = (double)mi_embedding_bytes(c) + (c->shared_classifier ? 0 : cls);
    for (int r = 0; r < g_size; r++) {
        mi_device *d = &cl.dev[r];
        d->mem_bytes = r == 0 ? head + 0.35 * layers + 1e6 : (g_size == 2 ? 0.9 : 0.5) * layers;
        d->calibrated = 1;
        for (int t = 0; t < MI_N_DTYPES; t++) {
            d->pass_s[t] = 0.14e-9 * (1 + r);
            d->pos_s[t] = 0.027e-9 * (1 + r);
        }
        d->kv_s = 0.23e-9 * (1 + r);
        d->op_s = 2e-6;
    }
    cl.latency_s = 1e-3;
    cl.bandwidth = 100e6 / 8;
    mi_plan_options po = {MI_PLANNER_HYBRID, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, CHUNK, 0, NULL, 0, 0};
    mi_plan dec, pre;
    char err[MI_ERRLEN];
    int ok = mi_plan_make(c, &cl, &po, &dec, err) == 0;
    CHECK(ok, "hybrid (decode) on %d ranks, %s: %s", g_size, c->name, err);
    po.prefill = 1;
    int ok2 = ok && mi_plan_make(c, &cl, &po, &pre, err) == 0;
    CHECK(!ok || ok2, "hybrid (prefill) on %d ranks, %s: %s", g_size, c->name, err);
    if (!ok2) {
        if (ok)
            mi_plan_free(&dec);
        mi_cluster_free(&cl);
        return;
    }
    int differ = !mi_plan_same_placement(&dec, &pre);
    int fp32 = c->dtype[0][MI_WQ] == MI_F32;
    if (g_size == 3 && fp32)
        CHECK(differ, "hybrid on 3 ranks, %s: prefill and decode placements are the same (the test needs them apart)",
              c->name);
    int spread = 0;
    for (int k = 0; k < c->n_kv_heads; k++)
        spread |= dec.layers[c->n_layers - 1].kv_rank[k] != 0 || pre.layers[c->n_layers - 1].kv_rank[k] != 0;
    CHECK(g_size == 1 || spread, "hybrid on %d ranks, %s: everything stayed on rank 0 (the cluster should not allow it)",
          g_size, c->name);
    mi_runtime_options ro = {.model_path = path, .max_T = CHUNK, .tolerance = 0.05};
    mpib_reset(); /* KV moves at the MPI layer: counted from here (every rank) */
    mi_runtime *rt = mi_runtime_create(&pre, NULL, &ro);
    mi_rank_metrics *all = g_rank == 0 ? calloc((size_t)g_size, sizeof *all) : NULL;
    if (g_rank == 0) {
        size_t V = (size_t)c->vocab_size;
        /* the logits live in the runtime's buffers, which a re-placement replaces */
        float *first = malloc(V * sizeof(float)), *lg = first;
        memcpy(first, mi_runtime_prefill(rt, prompt, N_PROMPT, 0), V * sizeof(float));
        mi_runtime_replan(rt, &dec, NULL, N_PROMPT);
        double worst = 0, scale = 0;
        int same = 1;
        for (int k = 0; k <= N_DECODE; k++) {
            for (size_t i = 0; i < V; i++) {
                worst = fmax(worst, fabs((double)lg[i] - ref->logits[(size_t)k * V + i]));
                scale = fmax(scale, fabs(ref->logits[(size_t)k * V + i]));
            }
            int next = mi_argmax(lg, c->vocab_size);
            same &= next == ref->tokens[N_PROMPT + k];
            if (k < N_DECODE)
                lg = mi_runtime_forward(rt, &next, 1, N_PROMPT + k, MI_FORWARD_DECODE);
        }
        mi_runtime_stop(rt);
        free(first);
        int blocked = mi_dtype_blocked(c->dtype[0][MI_WQ]);
        double limit = blocked ? 0.05 * scale : 1e-4;
        CHECK(same, "hybrid on %d ranks, %s: tokens differ from one device", g_size, c->name);
        CHECK(worst <= limit, "hybrid on %d ranks, %s: max logit difference %.3g > %g", g_size, c->name, worst, limit);
        printf("  hybrid     %d ranks %-14s prefill and decode placements %s, max |logit diff| %.3g\n", g_size,
               c->name, differ ? "apart (re-placed after the prompt)" : "the same", worst);
    } else {
        mi_runtime_serve(rt);
    }
    size_t nn = (size_t)g_size * g_size;
    double *kv = calloc(nn, sizeof(double));
    mpib_matrix(MPIB_KV, kv);
    mi_runtime_metrics(rt, all);
    if (g_rank == 0) {
        /* at the MPI layer: each KV head that changes owner, its keys and
         * values of the prompt's positions from the old owner to the new */
        double *want = calloc(nn, sizeof(double));
        for (int l = 0; l < c->n_layers; l++)
            for (int k = 0; k < c->n_kv_heads; k++)
                if (pre.layers[l].kv_rank[k] != dec.layers[l].kv_rank[k])
                    want[pre.layers[l].kv_rank[k] * g_size + dec.layers[l].kv_rank[k]] +=
                        2.0 * N_PROMPT * c->head_dim * sizeof(float);
        int bad = 0;
        for (size_t i = 0; i < nn; i++)
            bad += kv[i] != want[i];
        CHECK(bad == 0, "hybrid phase switch on %d ranks, %s: KV bytes at the MPI layer differ from the heads that "
              "changed owner in %d rank pairs", g_size, c->name, bad);
        free(want);
    }
    free(kv);
    if (g_rank == 0 && differ) {
        /* KV heads whose owner differs between the phases travel, and are counted */
        int moved_heads = 0;
        for (int l = 0; l < c->n_layers; l++)
            for (int k = 0; k < c->n_kv_heads; k++)
                moved_heads += pre.layers[l].kv_rank[k] != dec.layers[l].kv_rank[k];
        double sent = 0;
        for (int r = 0; r < g_size; r++)
            sent += all[r].moved_bytes_sent;
        double expect = (double)moved_heads * 2.0 * N_PROMPT * c->head_dim * sizeof(float);
        CHECK(sent == expect, "hybrid phase switch on %d ranks, %s: %.0f KV bytes moved, %d heads changed owner "
              "(expected %.0f)", g_size, c->name, sent, moved_heads, expect);
    }
    free(all);
    mi_runtime_free(rt);
    mi_plan_free(&dec);
    mi_plan_free(&pre);
    mi_cluster_free(&cl);
}

/* A re-placement that moves each rank's classifier slice to other
 * vocabulary rows of the same size: the plan's slices in reverse rank order.
 * A rank must load its new rows, not keep the old ones because the size
 * matched; the logits after the move, and after moving back, are one
 * device's (teacher-forced with its tokens): bit for bit under greedy with
 * the vocabulary split (its embedding rows move with the slice), within
 * tp's 1e-4 under tp (the embeddings whole on rank 0, only the classifier
 * moves). */
static void check_cls_move(const char *path, const mi_config *c, const int *prompt, const run_result *ref,
                           mi_planner pl)
{
    mi_cluster cl;
    mi_cluster_default(&cl, g_size, 1e12);
    int split = pl != MI_PLANNER_TP;
    double limit = split ? 0.0 : 1e-4;
    mi_plan_options po = {pl, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, split, 0};
    mi_plan a, b;
    char err[MI_ERRLEN];
    if (mi_plan_make(c, &cl, &po, &a, err)) {
        CHECK(0, "%s for moving classifier slices: %s", mi_planner_name(pl), err);
        mi_cluster_free(&cl);
        return;
    }
    mi_cluster_free(&cl);
    if (a.n_cls < 2 || a.split_vocab != split) { /* one slice (greedy on 2 ranks): nothing to move */
        mi_plan_free(&a);
        return;
    }
    size_t n;
    int *buf = mi_plan_serialize(&a, &n);
    CHECK(mi_plan_deserialize(buf, n, c, &b, err) == 0, "plan copy: %s", err);
    free(buf);
    for (int i = 0, v0 = 0; i < a.n_cls; i++) {
        b.cls[i] = a.cls[a.n_cls - 1 - i];
        b.cls[i].v0 = v0;
        v0 += b.cls[i].n;
    }
    CHECK(!mi_plan_same_placement(&a, &b), "classifier slices in reverse rank order: the same placement");
    mi_runtime_options ro = {.model_path = path, .max_T = CHUNK};
    mi_runtime *rt = mi_runtime_create(&a, NULL, &ro);
    if (g_rank == 0) {
        size_t V = (size_t)c->vocab_size;
        double worst = 0;
        float *lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
        for (int k = 0; k <= N_DECODE; k++) {
            if (k == 1)
                mi_runtime_replan(rt, &b, NULL, N_PROMPT);
            if (k == N_DECODE / 2)
                mi_runtime_replan(rt, &a, NULL, N_PROMPT + k - 1);
            if (k > 0)
                lg = mi_runtime_forward(rt, &ref->tokens[N_PROMPT + k - 1], 1, N_PROMPT + k - 1, MI_FORWARD_DECODE);
            for (size_t i = 0; i < V; i++)
                worst = fmax(worst, fabs((double)lg[i] - ref->logits[(size_t)k * V + i]));
        }
        mi_runtime_stop(rt);
        CHECK(worst <= limit, "%s on %d ranks, %s: classifier slices moved (same sizes) and back: max logit "
              "difference %.3g from one device (limit %g)", mi_planner_name(pl), g_size, c->name, worst, limit);
        printf("  %-10s %d ranks %-14s classifier slices moved to other rows of the same size and back: "
               "max |logit diff| %.3g\n", mi_planner_name(pl), g_size, c->name, worst);
    } else {
        mi_runtime_serve(rt);
    }
    mi_runtime_free(rt);
    mi_plan_free(&b);
    mi_plan_free(&a);
}

/* Voltron §4.3.1 computation scaling through the runtime (see the header). */
#define LOWERED "2-3:q8_0,5:q4_0"
static void check_lowering(const char *path, const mi_config *c, const int *prompt, const run_result *ref)
{
    size_t V = (size_t)c->vocab_size;
    float *want = NULL;
    char err[MI_ERRLEN];
    mi_config low_cfg = *c;
    if (mi_dtypes_apply(&low_cfg, NULL, LOWERED, NULL, err)) {
        CHECK(0, "%s", err);
        return;
    }
    if (g_rank == 0) {
        /* one device: the prompt in fp32, then the layers converted in place */
        mi_model m;
        mi_model_load_path(&m, path, NULL);
        mi_scratch s;
        mi_scratch_init(&s, c, CHUNK);
        float *lg = NULL;
        for (int i = 0; i < N_PROMPT; i += CHUNK)
            lg = mi_forward(&m, &s, prompt + i, N_PROMPT - i < CHUNK ? N_PROMPT - i : CHUNK, i, 0);
        for (int l = 0; l < c->n_layers; l++)
            if (memcmp(low_cfg.dtype[l], c->dtype[l], sizeof c->dtype[l]))
                CHECK(mi_layer_convert(&m.layers[l], c->dim, low_cfg.dtype[l], err) == 0, "%s", err);
        want = malloc((1 + N_DECODE) * V * sizeof(float));
        for (int k = 0; k <= N_DECODE; k++) {
            memcpy(want + (size_t)k * V, lg, V * sizeof(float));
            int next = ref->tokens[N_PROMPT + k];
            if (k < N_DECODE)
                lg = mi_forward(&m, &s, &next, 1, N_PROMPT + k, 0);
        }
        mi_scratch_free(&s);
        mi_model_free(&m);
    }
    mi_cluster cl;
    mi_cluster_default(&cl, g_size, 1e12);
    mi_plan_options po = {MI_PLANNER_LAYERWISE, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_plan plan;
    if (mi_plan_make(c, &cl, &po, &plan, err)) {
        CHECK(0, "layerwise: %s", err);
        mi_cluster_free(&cl);
        free(want);
        return;
    }
    mi_plan low = plan; /* the same shards; the runtime copies what it is given */
    low.cfg = low_cfg;
    mi_runtime_options ro = {.model_path = path, .max_T = CHUNK};
    mi_runtime *rt = mi_runtime_create(&plan, NULL, &ro);
    if (g_rank == 0) {
        double worst_low = 0, worst_back = 0;
        /* the logits live in the runtime's buffers, which a re-placement replaces */
        float *first = malloc(V * sizeof(float)), *lg = first;
        memcpy(first, mi_runtime_prefill(rt, prompt, N_PROMPT, 0), V * sizeof(float));
        mi_runtime_replan(rt, &low, NULL, N_PROMPT);
        for (int k = 0; k <= N_DECODE; k++) {
            if (k > 0)
                lg = mi_runtime_forward(rt, &ref->tokens[N_PROMPT + k - 1], 1, N_PROMPT + k - 1, MI_FORWARD_DECODE);
            for (size_t i = 0; i < V; i++)
                worst_low = fmax(worst_low, fabs((double)lg[i] - want[(size_t)k * V + i]));
        }
        /* back to the file's dtypes: reloaded, so exactly the fp32 run */
        mi_runtime_reset(rt);
        mi_runtime_replan(rt, &plan, NULL, 0);
        lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
        for (int k = 0; k <= N_DECODE; k++) {
            if (k > 0)
                lg = mi_runtime_forward(rt, &ref->tokens[N_PROMPT + k - 1], 1, N_PROMPT + k - 1, MI_FORWARD_DECODE);
            for (size_t i = 0; i < V; i++)
                worst_back = fmax(worst_back, fabs((double)lg[i] - ref->logits[(size_t)k * V + i]));
        }
        mi_runtime_stop(rt);
        free(first);
        CHECK(worst_low == 0, "layers lowered to %s after the prompt on %d ranks: max logit difference %.3g from one "
              "device converting them (expected bit-identical)", LOWERED, g_size, worst_low);
        CHECK(worst_back == 0, "layers raised back to fp32 on %d ranks: max logit difference %.3g from the fp32 run "
              "(expected bit-identical)", g_size, worst_back);
        printf("  lowering   %d ranks layers %s after the prompt: max |logit diff| %.3g, raised back: %.3g\n", g_size,
               LOWERED, worst_low, worst_back);
    } else {
        mi_runtime_serve(rt);
    }
    mi_runtime_free(rt);
    mi_plan_free(&plan);
    mi_cluster_free(&cl);
    free(want);
}

/* wire: the dtype of activation messages. With fp32 the distributed run
 * must reproduce one device (bit-identical for head-level planners); with a
 * lossy one only the bytes are checked (the plan's prediction, and at most
 * fp32_share of what fp32 messages move), and the tokens that agree with
 * one device are reported. */
/* Decode bytes per token of plan's programs with every message in dtype
 * wire (the layers' own wire dtypes set aside for it). */
static double uniform_bytes(mi_plan *plan, int wire)
{
    int keep_wire = plan->wire, L = plan->cfg.n_layers, *lw = malloc((size_t)L * sizeof(int));
    for (int l = 0; l < L; l++)
        lw[l] = plan->layers[l].wire, plan->layers[l].wire = MI_F32;
    plan->wire = wire;
    mi_programs p;
    char err[MI_ERRLEN];
    double t = mi_programs_compile(plan, &p, err) ? -1 : mi_programs_bytes(&p, MI_PHASE_DECODE, NULL, NULL);
    if (t >= 0)
        mi_programs_free(&p);
    plan->wire = keep_wire;
    for (int l = 0; l < L; l++)
        plan->layers[l].wire = lw[l];
    free(lw);
    return t;
}

/* mixed: Voltron's communication scaling per layer: the plan's wire is
 * fp32 and only the first half of the layers send in `wire`; the bytes must
 * fall strictly between all-fp32 and all-`wire` and still be what the
 * runtime moves. */
static void check_model(const char *path, const mi_config *c, int real, int wire, double fp32_share, int mixed)
{
    char dts[160];
    mi_config_dtype_summary(c, dts, sizeof dts);
    int prompt[N_PROMPT];
    uint64_t st = 11;
    prompt[0] = MI_TOK_BOS;
    for (int i = 1; i < N_PROMPT; i++)
        prompt[i] = 3 + (int)(mi_rand_f32(&st) * (c->vocab_size - 3));
    size_t V = (size_t)c->vocab_size;
    run_result ref = {{0}, NULL}, got = {{0}, NULL};
    if (g_rank == 0) {
        ref.logits = malloc((1 + N_DECODE) * V * sizeof(float));
        got.logits = malloc((1 + N_DECODE) * V * sizeof(float));
        reference(path, &ref, prompt, NULL);
    }
    double layerwise_bytes = -1, headlevel_bytes = -1;
    for (int pl = 0; pl < MI_N_PLANNERS; pl++) {
        if (pl == MI_PLANNER_EXACT) /* its plans are greedy's kind; its search on equal devices takes seconds */
            continue;
        mi_cluster cl;
        mi_cluster_default(&cl, g_size, 1e12);
        mi_plan_options po = {(mi_planner)pl, 3, -1, 0, NULL, 0.7, 0, mixed ? MI_F32 : wire, 0, 0, 0, NULL, 0, 0};
        mi_plan plan;
        char err[MI_ERRLEN];
        if (pl == MI_PLANNER_SOMEGATHER && c->n_kv_heads % g_size) {
            /* CATS needs equal shares of whole heads: refused, saying why */
            CHECK(mi_plan_make(c, &cl, &po, &plan, err) != 0 &&
                      (strstr(err, "does not divide") || strstr(err, "the model has only")),
                  "somegather on %d ranks of %d KV heads was not refused: %s", g_size, c->n_kv_heads, err);
            mi_cluster_free(&cl);
            continue;
        }
        if (pl == MI_PLANNER_SOMEGATHER && c->post_norms) {
            /* a post-norm needs whole block outputs: refused when compiled, saying why */
            mi_programs pg;
            CHECK(mi_plan_make(c, &cl, &po, &plan, err) == 0 && mi_programs_compile(&plan, &pg, err) != 0 &&
                      strstr(err, "whole output") != NULL,
                  "somegather on %s was not refused: %s", c->name, err);
            mi_plan_free(&plan);
            mi_cluster_free(&cl);
            continue;
        }
        if (mi_plan_make(c, &cl, &po, &plan, err)) {
            CHECK(0, "%s: %s", mi_planner_name((mi_planner)pl), err);
            mi_cluster_free(&cl);
            continue;
        }
        for (int l = 0; mixed && l < c->n_layers / 2; l++)
            plan.layers[l].wire = wire;
        mi_programs prog;
        CHECK(mi_programs_compile(&plan, &prog, err) == 0, "%s: %s", mi_planner_name((mi_planner)pl), err);
        double pred_sent[MI_MAX_RANKS], pred_recv[MI_MAX_RANKS];
        double total = mi_programs_bytes(&prog, MI_PHASE_DECODE, pred_sent, pred_recv);
        if (wire != MI_F32 && g_rank == 0) {
            double t32 = uniform_bytes(&plan, MI_F32), tlow = uniform_bytes(&plan, wire);
            if (mixed)
                CHECK(total < t32 && total > tlow, "%s on %d ranks, %s: %s messages in half the layers move %.0f "
                      "bytes/token, not between all-%s's %.0f and fp32's %.0f", mi_planner_name((mi_planner)pl),
                      g_size, c->name, mi_dtype_name(wire), total, mi_dtype_name(wire), tlow, t32);
            else
                CHECK(total <= fp32_share * t32, "%s on %d ranks, %s: %s messages move %.0f bytes/token, %.1f%% of "
                      "fp32's %.0f (limit %.0f%%)", mi_planner_name((mi_planner)pl), g_size, c->name,
                      mi_dtype_name(wire), total, 100 * total / t32, t32, 100 * fp32_share);
        }
        if (pl == MI_PLANNER_LAYERWISE)
            layerwise_bytes = total;
        if (pl == MI_PLANNER_GREEDY)
            headlevel_bytes = total;
        /* exercise --weights scatter too, each shard in pieces of 4093 bytes (a prime: the last piece of
         * every tensor short), so that a misplaced piece changes the logits */
        mi_runtime_options ro = {.model_path = path, .scatter = pl == MI_PLANNER_RANDOM, .scatter_piece = 4093,
                                 .max_T = CHUNK, .tolerance = 0.05, .on_reset_metrics = mpib_reset_cb};
        mi_runtime *rt = mi_runtime_create(&plan, NULL, &ro);
        mi_rank_metrics *all = g_rank == 0 ? calloc((size_t)g_size, sizeof *all) : NULL;
        if (g_rank == 0) {
            float *lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
            memcpy(got.tokens, prompt, sizeof prompt);
            mi_runtime_reset_metrics(rt);
            /* teacher forcing: every pass gets the reference's tokens, so the
             * logits compare position by position even where a planner that
             * sums in another order (tp) picks another token at a near tie */
            for (int k = 0; k <= N_DECODE; k++) {
                memcpy(got.logits + (size_t)k * V, lg, V * sizeof(float));
                got.tokens[N_PROMPT + k] = mi_argmax(lg, c->vocab_size);
                int next = ref.tokens[N_PROMPT + k];
                if (k < N_DECODE)
                    lg = mi_runtime_forward(rt, &next, 1, N_PROMPT + k, MI_FORWARD_DECODE);
            }
            mi_runtime_stop(rt);
            double worst = 0, worst_decode = 0;
            for (size_t i = 0; i < (1 + N_DECODE) * V; i++) {
                double e = fabs((double)got.logits[i] - ref.logits[i]);
                if (e > worst)
                    worst = e;
                if (i >= V && e > worst_decode)
                    worst_decode = e;
            }
            int same = 0;
            for (int k = N_PROMPT; k <= N_PROMPT + N_DECODE; k++)
                same += got.tokens[k] == ref.tokens[k];
            if (wire == MI_F32) {
                /* head-level planners compute every row as one device does.
                 * So does somegather (it gathers the logits, never sums
                 * them), except that with fp32 weights prefill's BLAS sgemm
                 * on a rank's rows of wo and w2 may round a last bit
                 * differently from sgemm on all rows (1e-4; our own kernels,
                 * used for every other dtype, do not depend on the rows). tp
                 * sums partial products in another order (1e-4); with block
                 * dtypes the residual's last-bit differences also flip the
                 * rounding of an activation to int8 here and there (a step of
                 * 1/127 of its block's largest value), which the layers carry
                 * on: 5% of the largest logit (measured up to 0.40 of 15, 2.7%;
                 * a misplaced block or slice gives differences of the logits'
                 * own size). */
                double scale = 0;
                for (size_t i = 0; i < (1 + N_DECODE) * V; i++)
                    scale = fmax(scale, fabs(ref.logits[i]));
                int blocked = mi_dtype_blocked(c->dtype[0][MI_WQ]) || mi_dtype_blocked(c->cls_dtype);
                int f32 = c->dtype[0][MI_WO] == MI_F32;
                double limit = pl == MI_PLANNER_TP || pl == MI_PLANNER_HYBRID ? (blocked ? 0.05 * scale : 1e-4)
                               : pl == MI_PLANNER_SOMEGATHER ? (f32 ? 1e-4 : 0.0)
                                                             : 0.0;
                CHECK(worst <= limit, "%s on %d ranks, %s (%s): max logit difference %.3g > %g",
                      mi_planner_name((mi_planner)pl), g_size, c->name, dts, worst, limit);
                /* the same token, or one whose reference logit is within the
                 * limit of the reference's own (exact planners: limit 0) */
                int far = 0;
                for (int k = 0; k <= N_DECODE; k++) {
                    const float *rl = ref.logits + (size_t)k * V;
                    int a = ref.tokens[N_PROMPT + k], b = got.tokens[N_PROMPT + k];
                    far += a != b && (double)rl[a] - rl[b] > 2 * limit;
                }
                CHECK(far == 0, "%s on %d ranks, %s (%s): %d tokens differ from one device's beyond a near tie",
                      mi_planner_name((mi_planner)pl), g_size, c->name, dts, far);
            } else {
                int finite = 1;
                for (size_t i = 0; i < (1 + N_DECODE) * V; i++)
                    finite &= isfinite(got.logits[i]) != 0;
                CHECK(finite, "%s messages: non-finite logits", mi_dtype_name(wire));
            }
            printf("  %-10s %d ranks %-14s %-5s weights, %-4s messages%s: max |logit diff| %.3g (decode %.3g), "
                   "%d/%d tokens as one device\n", mi_planner_name((mi_planner)pl), g_size, c->name, dts,
                   mi_dtype_name(wire), mixed ? " (first half of the layers)" : "", worst, worst_decode, same,
                   N_DECODE + 1);
        } else {
            mi_runtime_serve(rt);
        }
        char what[200];
        snprintf(what, sizeof what, "%s on %d ranks, %s, %s messages%s", mi_planner_name((mi_planner)pl), g_size,
                 c->name, mi_dtype_name(wire), mixed ? " (first half of the layers)" : "");
        double at_mpi = check_mpi_bytes(what, &prog, N_DECODE);
        if (g_rank == 0)
            printf("  %-10s %d ranks %-14s %-4s messages%s: %.0f bytes/token counted at the MPI layer (plan %.0f)\n",
                   mi_planner_name((mi_planner)pl), g_size, c->name, mi_dtype_name(wire), mixed ? " (half)" : "",
                   at_mpi, total);
        mi_runtime_metrics(rt, all);
        if (g_rank == 0) {
            for (int r = 0; r < g_size; r++) {
                double fw = (double)all[r].forwards;
                CHECK(fw == N_DECODE, "rank %d ran %.0f decode forwards, expected %d", r, fw, N_DECODE);
                CHECK(all[r].bytes_sent == pred_sent[r] * N_DECODE && all[r].bytes_recv == pred_recv[r] * N_DECODE,
                      "%s rank %d: moved sent %.0f recv %.0f bytes per token, plan predicts %.0f / %.0f",
                      mi_planner_name((mi_planner)pl), r, all[r].bytes_sent / fw, all[r].bytes_recv / fw,
                      pred_sent[r], pred_recv[r]);
                size_t wb;
                mi_plan_rank_memory(&plan, r, &wb, NULL);
                CHECK(all[r].weight_bytes == (double)wb, "rank %d holds %.0f weight bytes, plan says %zu", r,
                      all[r].weight_bytes, wb);
                /* resident growth: only meaningful for shards of several MB
                 * (heap reuse between the planners of this one process blurs small ones) */
                if (real && wb >= (16u << 20))
                    CHECK(fabs(all[r].rss_weights - (double)wb) <= 0.10 * (double)wb,
                          "%s rank %d: resident growth %.0f bytes vs shard %zu (more than 10%% apart)",
                          mi_planner_name((mi_planner)pl), r, all[r].rss_weights, wb);
            }
        }
        free(all);
        mi_runtime_free(rt);
        mi_programs_free(&prog);
        if (pl != MI_PLANNER_TP && pl != MI_PLANNER_SOMEGATHER && pl != MI_PLANNER_HYBRID && wire == MI_F32 &&
            !c->post_norms)
            check_speculation(path, c, &plan, prompt, &got);
        mi_plan_free(&plan);
        mi_cluster_free(&cl);
    }
    if (wire == MI_F32 && real && !mi_dtype_blocked(c->dtype[0][MI_WQ]))
        check_somegather(path, c, prompt, &ref);
    if (wire == MI_F32 && real && g_size > 1)
        check_hybrid(path, c, prompt, &ref);
    if (wire == MI_F32 && real && c->dtype[0][MI_WQ] == MI_F32) {
        check_lowering(path, c, prompt, &ref);
        check_cls_move(path, c, prompt, &ref, MI_PLANNER_GREEDY);
        check_cls_move(path, c, prompt, &ref, MI_PLANNER_TP);
    }
    /* the split vocabulary and the logit candidates: stories15M in fp32 and every family's tiny model */
    if (wire == MI_F32 && !mixed &&
        ((real && c->dtype[0][MI_WQ] == MI_F32) || c->family != MI_FAMILY_LLAMA || !strcmp(c->name, "tiny-llama3"))) {
        double t0 = mi_now();
        check_vocab(path, c, prompt, &ref, real);
        g_vocab_s += mi_now() - t0;
    }
    if (g_rank == 0 && g_size >= 3 && wire == MI_F32)
        CHECK(headlevel_bytes > layerwise_bytes, "%s: head-level moves %.0f bytes/token, layer-wise %.0f", c->name,
              headlevel_bytes, layerwise_bytes);
    if (g_rank == 0)
        printf("  %s on %d ranks: bytes moved per decoded token: layer-wise %.0f, greedy head-level %.0f\n", c->name,
               g_size, layerwise_bytes, headlevel_bytes);
    free(ref.logits);
    free(got.logits);
}

/* Expert parallelism's sparse dispatch (partition.h DISPATCH, COMBINE) on
 * this job's ranks, tiny-qwen2moe in fp32 with fp32 messages, with each
 * planner that spreads the experts: the logits of the prompt and of every
 * decode step (teacher forcing) equal one device's bit for bit where the
 * attention is whole on one rank (roundrobin, greedy: the router's rank adds
 * the expert rows in the one-device order; tp also sums the attention's
 * partial projections in another order, 1e-4 as in check_model); and since
 * the dispatch's messages follow the routing (the plan predicts only their
 * expectation), the bytes MPI was handed in the decode steps, per rank sent
 * and addressed to it, equal the runtime's own counters exactly. */
static void check_moe(const char *path, const mi_config *c)
{
    int prompt[N_PROMPT];
    uint64_t st = 13;
    prompt[0] = MI_TOK_BOS;
    for (int i = 1; i < N_PROMPT; i++)
        prompt[i] = 3 + (int)(mi_rand_f32(&st) * (c->vocab_size - 3));
    size_t V = (size_t)c->vocab_size, nn = (size_t)g_size * g_size;
    run_result ref = {{0}, NULL};
    if (g_rank == 0) {
        ref.logits = malloc((1 + N_DECODE) * V * sizeof(float));
        reference(path, &ref, prompt, NULL);
    }
    static const mi_planner pls[] = {MI_PLANNER_ROUNDROBIN, MI_PLANNER_GREEDY, MI_PLANNER_TP};
    for (size_t i = 0; i < sizeof pls / sizeof pls[0]; i++) {
        mi_cluster cl;
        mi_cluster_default(&cl, g_size, 1e12);
        mi_plan_options po = {pls[i], 3, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
        mi_plan plan;
        mi_programs prog;
        char err[MI_ERRLEN];
        if (mi_plan_make(c, &cl, &po, &plan, err) || mi_programs_compile(&plan, &prog, err)) {
            CHECK(0, "%s on %s: %s", mi_planner_name(pls[i]), c->name, err);
            mi_cluster_free(&cl);
            continue;
        }
        int dispatches = 0;
        for (int x = 0; x < prog.n_xchg; x++)
            dispatches += prog.xchg[x].kind == MI_OP_DISPATCH;
        mi_runtime_options ro = {.model_path = path, .max_T = CHUNK, .on_reset_metrics = mpib_reset_cb};
        mi_runtime *rt = mi_runtime_create(&plan, NULL, &ro);
        mi_rank_metrics *all = g_rank == 0 ? calloc((size_t)g_size, sizeof *all) : NULL;
        double worst = 0;
        if (g_rank == 0) {
            float *lg = mi_runtime_prefill(rt, prompt, N_PROMPT, 0);
            mi_runtime_reset_metrics(rt);
            for (int k = 0; k <= N_DECODE; k++) {
                for (size_t v = 0; v < V; v++)
                    worst = fmax(worst, fabs((double)lg[v] - ref.logits[(size_t)k * V + v]));
                int next = ref.tokens[N_PROMPT + k];
                if (k < N_DECODE)
                    lg = mi_runtime_forward(rt, &next, 1, N_PROMPT + k, MI_FORWARD_DECODE);
            }
            mi_runtime_stop(rt);
        } else {
            mi_runtime_serve(rt);
        }
        double *got = calloc(nn, sizeof(double));
        mpib_matrix(MPIB_DATA, got);
        mi_runtime_metrics(rt, all);
        if (g_rank == 0) {
            double limit = pls[i] == MI_PLANNER_TP ? 1e-4 : 0.0;
            CHECK(worst <= limit, "%s on %d ranks, %s: max logit difference %.3g > %g with the experts dispatched",
                  mi_planner_name(pls[i]), g_size, c->name, worst, limit);
            double moved = 0;
            for (int a = 0; a < g_size; a++) {
                double sa = 0, ra = 0;
                for (int b = 0; b < g_size; b++)
                    sa += got[a * g_size + b], ra += got[b * g_size + a];
                moved += sa;
                CHECK(sa == all[a].bytes_sent && ra == all[a].bytes_recv,
                      "%s on %d ranks, %s rank %d: MPI was handed %.0f bytes to send and %.0f addressed to it in "
                      "the decode steps; the runtime counted %.0f / %.0f", mi_planner_name(pls[i]), g_size, c->name,
                      a, sa, ra, all[a].bytes_sent, all[a].bytes_recv);
            }
            printf("  %-10s %d ranks %s: %d expert dispatches, max |logit diff| %.3g, %.0f bytes/token at the MPI "
                   "layer (plan's uniform-routing expectation %.0f)\n", mi_planner_name(pls[i]), g_size, c->name,
                   dispatches, worst, moved / N_DECODE, mi_programs_bytes(&prog, MI_PHASE_DECODE, NULL, NULL));
        }
        free(got);
        free(all);
        mi_runtime_free(rt);
        mi_programs_free(&prog);
        mi_plan_free(&plan);
        mi_cluster_free(&cl);
    }
    free(ref.logits);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mi_world_init(&argc, &argv); /* MPI already runs: this registers mi_fatal's stop-every-rank hook */
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mi_set_threads(1);
    if (argc < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: test_distributed REAL_MODEL.h5\n");
        MPI_Finalize();
        return 2;
    }
    /* a small grouped-query model, and the real one in q8_0 and q4_0, written
     * by rank 0 where every rank can read them */
    char dir[256] = "", gqa[512], gqa4[512], q8[512], q4[512];
    if (g_rank == 0) {
        snprintf(dir, sizeof dir, "%s/mi_mpi.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            MPI_Abort(MPI_COMM_WORLD, 1);
        snprintf(gqa, sizeof gqa, "%s/tiny-gqa.h5", dir);
        snprintf(gqa4, sizeof gqa4, "%s/tiny-gqa-q4_0.h5", dir);
        snprintf(q8, sizeof q8, "%s/real-q8_0.h5", dir);
        snprintf(q4, sizeof q4, "%s/real-q4_0.h5", dir);
        mi_config gc, rc;
        mi_config_from_shape("tiny-gqa", &gc);
        char err[MI_ERRLEN];
        int bad = mi_synth_write(&gc, 5, gqa, 0, err);
        if (!bad)
            bad = mi_dtypes_apply(&gc, "q4_0", NULL, NULL, err) || mi_synth_write(&gc, 5, gqa4, 0, err);
        mi_model_file *mf = bad ? NULL : mi_model_open(argv[1], &rc, err);
        if (mf) {
            mi_model_close(mf);
            mi_config t8 = rc, t4 = rc;
            bad = mi_dtypes_apply(&t8, "q8_0", NULL, NULL, err) || mi_model_quantize(argv[1], q8, &t8, 0, err) ||
                  mi_dtypes_apply(&t4, "q4_0", NULL, NULL, err) || mi_model_quantize(argv[1], q4, &t4, 0, err);
        }
        if (bad || !mf) {
            fprintf(stderr, "%s\n", err);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    /* one small synthetic model of each family (config.h): every planner
     * on each, against the one-device pass of the same blocks */
    static const char *const fams[] = {"tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-gpt2",
                                       "tiny-qwen2moe"};
    enum { N_FAMS = sizeof fams / sizeof fams[0] };
    char fam_path[N_FAMS][512];
    for (int i = 0; i < N_FAMS; i++) {
        snprintf(fam_path[i], sizeof fam_path[i], "%s/%s.h5", dir, fams[i]);
        if (g_rank == 0) {
            mi_config fc;
            char err[MI_ERRLEN];
            if (mi_config_from_shape(fams[i], &fc) || mi_synth_write(&fc, 7, fam_path[i], 0, err)) {
                fprintf(stderr, "%s: %s\n", fams[i], err);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        MPI_Bcast(fam_path[i], sizeof fam_path[i], MPI_CHAR, 0, MPI_COMM_WORLD);
    }
    MPI_Bcast(gqa, sizeof gqa, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(gqa4, sizeof gqa4, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(q8, sizeof q8, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(q4, sizeof q4, MPI_CHAR, 0, MPI_COMM_WORLD);
    /* model, real, wire dtype, share of fp32's bytes allowed, wire in half the layers only */
    struct { const char *path; int real, wire; double share; int mixed; } runs[] = {
        {argv[1], 1, MI_F32, 1.0, 0}, {gqa, 0, MI_F32, 1.0, 0},       {q8, 1, MI_F32, 1.0, 0},
        {q4, 1, MI_F32, 1.0, 0},      {gqa4, 0, MI_F32, 1.0, 0},      {argv[1], 1, MI_Q8_0, 0.30, 0},
        {gqa, 0, MI_F16, 0.52, 0},    {argv[1], 1, MI_Q8_0, 1.0, 1},
        {fam_path[0], 0, MI_F32, 1.0, 0}, {fam_path[1], 0, MI_F32, 1.0, 0}, {fam_path[2], 0, MI_F32, 1.0, 0},
        {fam_path[3], 0, MI_F32, 1.0, 0}, {fam_path[4], 0, MI_F32, 1.0, 0},
    };
    {
        mi_config c;
        char err[MI_ERRLEN];
        mi_model_file *mf = mi_model_open(fam_path[5], &c, err);
        if (!mf) {
            fprintf(stderr, "%s\n", err);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        mi_model_close(mf);
        check_moe(fam_path[5], &c);
    }
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        mi_config c;
        char err[MI_ERRLEN];
        mi_model_file *mf = mi_model_open(runs[i].path, &c, err);
        if (!mf) {
            fprintf(stderr, "%s\n", err);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        mi_model_close(mf);
        /* lossy messages need more than one rank to mean anything */
        if (runs[i].wire != MI_F32 && g_size < 2)
            continue;
        check_model(runs[i].path, &c, runs[i].real, runs[i].wire, runs[i].share, runs[i].mixed);
    }
    int counts[2] = {g_pass, g_fail}, sum[2];
    MPI_Reduce(counts, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        unlink(gqa);
        unlink(gqa4);
        unlink(q8);
        unlink(q4);
        for (int i = 0; i < N_FAMS; i++)
            unlink(fam_path[i]);
        rmdir(dir);
        printf("vocabulary checks: %.1f s\n", g_vocab_s);
        printf("%d passed, %d failed\n", sum[0], sum[1]);
    }
    MPI_Bcast(sum, 2, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return sum[1] != 0;
}
