/* `meshinfer bench --batch B`: B sequences decoded one at a time against the
 * same B decoded together (batch.h), in alternating rounds, as aggregate
 * tokens/s; and the check that batching changes no token: every sequence's
 * tokens alone equal its tokens in a batch whose members join at different
 * steps (mixed prompt lengths, greedy and seeded sampling). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_batch.h"
#include "meshinfer/batch.h"
#include "meshinfer/common.h"
#include "meshinfer/cost.h"

/* Prompts are prefixes of this story, of different lengths. */
static const char *STORY = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                           "park with her friends. One day, she saw a big red ball under a tree.";

typedef struct {
    int *tok, n, done;
    const char *stop;
} seq_out;

static int on_token(void *ctx, int token)
{
    seq_out *o = ctx;
    o->tok[o->n++] = token;
    return 0;
}

static void on_done(void *ctx, const char *stop, int n_prompt, int n_gen, double ttft_s, double tpot_s)
{
    (void)n_prompt, (void)n_gen, (void)ttft_s, (void)tpot_s;
    seq_out *o = ctx;
    o->done = 1;
    o->stop = stop;
}

/* Sequence i's request: a prefix of 4 + 3i tokens (wrapping in the story),
 * greedy for even i, temperature 0.8 / top-p 0.9 with seed 1000 + i for odd. */
static mi_gen_request request(const int *story, int n_story, int i, int gen, int *prompt)
{
    int n = 4 + (3 * i) % (n_story - 4);
    prompt[0] = story[0]; /* BOS */
    memcpy(prompt + 1, story + 1, (size_t)(n - 1) * sizeof(int));
    mi_gen_request rq = {0};
    rq.prompt = prompt;
    rq.n_prompt = n;
    rq.steps = gen;
    rq.ignore_eos = 1;
    rq.temperature = i % 2 ? 0.8f : 0.0f;
    rq.topp = 0.9f;
    rq.seed = 1000 + (uint64_t)i;
    return rq;
}

/* Runs B sequences: alone (one after another), or batched with sequence i
 * joining at step i * stagger. Returns the wall time; *decode_tps (unless
 * NULL): the decode passes' tokens per second of wall time, prefill excluded. */
static double run(mi_session *ss, mi_batch *b, const int *story, int n_story, int B, int gen, int alone, int stagger,
                  seq_out *out, double *decode_tps)
{
    double d0;
    long n0;
    mi_batch_decode_totals(b, &d0, &n0);
    char err[MI_ERRLEN];
    int *prompt = mi_malloc((size_t)n_story * sizeof(int), "prompt");
    mi_runtime_reset(ss->rt);
    double t0 = mi_now();
    int added = 0;
    for (long step = 0; added < B || mi_batch_active(b) > 0; step++) {
        while (added < B && (alone ? mi_batch_active(b) == 0 : step >= (long)added * stagger)) {
            out[added].n = 0;
            out[added].done = 0;
            mi_gen_request rq = request(story, n_story, added, gen, prompt);
            mi_seq_hooks hk = {on_token, on_done, &out[added]};
            if (mi_batch_add(b, &rq, &hk, err) < 0)
                mi_fatal("bench --batch: %s", err);
            added++;
            if (alone)
                break;
        }
        mi_batch_step(b);
    }
    double t = mi_now() - t0, d1;
    long n1;
    mi_batch_decode_totals(b, &d1, &n1);
    if (decode_tps)
        *decode_tps = d1 > d0 ? (double)(n1 - n0) / (d1 - d0) : 0;
    free(prompt);
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int *bench_batch_story(mi_session *ss, long steps, int *n)
{
    char err[MI_ERRLEN];
    int *ids = mi_malloc((strlen(STORY) + 3) * sizeof(int), "prompt tokens");
    *n = mi_tokenizer_encode(&ss->tok, STORY, 1, ids, err);
    if (*n < 0)
        mi_fatal("bench --batch: %s", err);
    if (*n > steps / 2) /* a small context or a byte-level vocabulary: shorter prompts */
        *n = (int)(steps / 2);
    return ids;
}

void bench_batch(mi_session *ss, const int *story, int n_story, int B, int micro, long steps, int repeat, int json)
{
    int gen = (int)steps - n_story;
    if (gen < 2 || n_story < 5)
        mi_fatal("bench --batch: --steps %ld leaves too few tokens to generate after prompts of up to %d (give at "
                 "least 10)", steps, n_story);
    char err[MI_ERRLEN];
    mi_batch *b = mi_batch_create(ss, B, err);
    if (!b)
        mi_fatal("bench --batch: %s", err);
    if (micro)
        mi_batch_pipeline(b, micro);
    seq_out *alone = mi_calloc((size_t)2 * B, sizeof *alone, "sequences");
    seq_out *batched = alone + B;
    for (int i = 0; i < 2 * B; i++)
        alone[i].tok = mi_malloc((size_t)gen * sizeof(int), "tokens");
    /* the check: alone, then joining one per step */
    if (!json)
        fprintf(stderr, "bench: %d sequences of %d tokens alone, then batched joining at different steps...\n", B, gen);
    run(ss, b, story, n_story, B, gen, 1, 0, alone, NULL);
    run(ss, b, story, n_story, B, gen, 0, 1, batched, NULL);
    for (int i = 0; i < B; i++) {
        if (alone[i].n != gen || batched[i].n != gen)
            mi_fatal("bench --batch: sequence %d gave %d tokens alone and %d batched, not %d", i, alone[i].n,
                     batched[i].n, gen);
        for (int t = 0; t < gen; t++)
            if (alone[i].tok[t] != batched[i].tok[t])
                mi_fatal("bench --batch: sequence %d differs at its token %d: %d alone, %d in the batch", i, t,
                         alone[i].tok[t], batched[i].tok[t]);
    }
    /* ... and the first two (greedy, sampled) through generate's token loop,
     * whose passes run contiguous positions in KV slot 0 */
    int *prompt = mi_malloc((size_t)n_story * sizeof(int), "prompt");
    for (int i = 0; i < 2 && i < B; i++) {
        mi_gen_request rq = request(story, n_story, i, gen, prompt);
        mi_gen_result res;
        mi_runtime_reset(ss->rt);
        session_generate(ss, &rq, NULL, &res);
        for (int t = 0; t < gen; t++)
            if (res.n != gen || res.tokens[t] != alone[i].tok[t])
                mi_fatal("bench --batch: sequence %d differs from generate's at its token %d", i, t);
        free(res.tokens);
    }
    free(prompt);
    /* the timing: alternating rounds, all B at once when batched */
    double *ta = mi_malloc(5 * (size_t)repeat * sizeof(double), "timings"), *tb = ta + repeat;
    double *da = tb + repeat, *db = da + repeat, *rd = db + repeat; /* decode passes only */
    for (int r = 0; r < repeat; r++) {
        if (!json)
            fprintf(stderr, "bench: round %d/%d...\n", r + 1, repeat);
        ta[r] = run(ss, b, story, n_story, B, gen, 1, 0, alone, &da[r]);
        if (r == repeat - 1)
            mi_runtime_reset_metrics(ss->rt); /* the counters report the last batched round */
        tb[r] = run(ss, b, story, n_story, B, gen, 0, 0, batched, &db[r]);
        rd[r] = da[r] > 0 ? db[r] / da[r] : 0;
    }
    mi_runtime_stop(ss->rt);
    mi_rank_metrics *m = mi_calloc((size_t)ss->size, sizeof *m, "metrics");
    mi_runtime_metrics(ss->rt, m);
    double ra[repeat];
    for (int r = 0; r < repeat; r++)
        ra[r] = ta[r] / tb[r];
    qsort(ta, (size_t)repeat, sizeof(double), cmp_double);
    qsort(tb, (size_t)repeat, sizeof(double), cmp_double);
    qsort(ra, (size_t)repeat, sizeof(double), cmp_double);
    qsort(da, (size_t)repeat, sizeof(double), cmp_double);
    qsort(db, (size_t)repeat, sizeof(double), cmp_double);
    qsort(rd, (size_t)repeat, sizeof(double), cmp_double);
    double tokens = (double)B * gen, a = tokens / ta[repeat / 2], bt = tokens / tb[repeat / 2];
    /* the cost model's view of the same (decode steps at the sequences' mean position), on measured
     * devices only: the defaults' one Gflop/s figure for every dtype says nothing of how the rows of
     * a batch share the reading of a weight (for q4_0 on an AVX-512 core it predicted a batch of 8
     * 6x slower than one sequence) */
    int ctx = n_story / 2 + gen / 2, measured = session_devices_measured(ss);
    char p1[32] = "null", pB[32] = "null";
    if (measured) {
        snprintf(p1, sizeof p1, "%.2f", 1.0 / mi_predict_batch_step(&ss->plan, &ss->prog, &ss->cl, ctx, 1));
        snprintf(pB, sizeof pB, "%.2f", B / mi_predict_batch_step(&ss->plan, &ss->prog, &ss->cl, ctx, B));
    }
    if (json)
        printf("{\"model\": \"%s\", \"synthetic_weights\": %s, \"n_ranks\": %d, \"batch\": %d, \"tokens_per_sequence\": "
               "%d, \"rounds\": %d, \"alone_tokens_per_s\": %.2f, \"batch_tokens_per_s\": %.2f, \"ratio\": %.4f, "
               "\"ratio_min\": %.4f, \"ratio_max\": %.4f, \"micro_batches\": %d, \"predicted_alone_tokens_per_s\": %s, "
               "\"predicted_batch_tokens_per_s\": %s, \"decode_alone_tokens_per_s\": %.2f, "
               "\"decode_batch_tokens_per_s\": %.2f, \"decode_ratio\": %.4f, \"decode_ratio_min\": %.4f, "
               "\"decode_ratio_max\": %.4f, \"counters\": ",
               ss->cfg.name, ss->cfg.synthetic ? "true" : "false", ss->size, B, gen, repeat, a, bt, ra[repeat / 2],
               ra[0], ra[repeat - 1], mi_batch_micro(b), p1, pB, da[repeat / 2], db[repeat / 2], rd[repeat / 2],
               rd[0], rd[repeat - 1]);
    else {
        printf("model            %s%s, %d rank%s, planner %s\n", ss->cfg.name,
               ss->cfg.synthetic ? " [synthetic weights]" : "", ss->size, ss->size > 1 ? "s" : "",
               mi_planner_name(ss->plan.planner));
        printf("sequences        %d of %d tokens each (prompts of 4 to %d tokens; greedy and sampled)\n", B, gen,
               n_story);
        printf("decode passes    %d micro-batch%s%s\n", mi_batch_micro(b), mi_batch_micro(b) > 1 ? "es" : "",
               mi_batch_micro(b) > 1 ? ", pipelined through the ranks" : "");
        printf("alone            %.1f tokens/s (one sequence at a time; median of %d rounds)\n", a, repeat);
        printf("batch of %-7d %.1f tokens/s aggregate: %.2fx (per round %.2f-%.2fx)\n", B, bt, ra[repeat / 2], ra[0],
               ra[repeat - 1]);
        printf("decode only      %.1f tokens/s alone, %.1f batched: %.2fx (per round %.2f-%.2fx; prefill "
               "excluded)\n", da[repeat / 2], db[repeat / 2], rd[repeat / 2], rd[0], rd[repeat - 1]);
        if (measured)
            printf("predicted        %s tokens/s alone, %s batched (cost model, decode steps as one pass)\n", p1,
                   pB);
        else
            printf("predicted        - (the cost model needs measured devices: meshinfer calibrate, then "
                   "--cluster FILE)\n");
        printf("identical        yes: every sequence's tokens alone = in a batch joined at different steps = generate's\n");
        printf("counters         last batched round, per rank: ");
    }
    /* the runtime's counters of that round, per rank: passes with decode rows only, decode and prompt rows */
    const char *keys[3] = {"decode_passes", "decode_rows", "prompt_rows"};
    for (int k = 0; k < 3; k++) {
        printf(json ? "%s\"%s\": [" : "%s%s ", k ? (json ? ", " : "; ") : (json ? "{" : ""), keys[k]);
        for (int r = 0; r < ss->size; r++) {
            long v = k == 0 ? m[r].decode_forwards : k == 1 ? m[r].decode_rows : m[r].positions - m[r].decode_rows;
            printf(r ? (json ? ", %ld" : "/%ld") : "%ld", v);
        }
        printf(json ? "]" : "");
    }
    printf(json ? "}, \"identical\": true}\n" : "\n");
    free(m);
    for (int i = 0; i < 2 * B; i++)
        free(alone[i].tok);
    free(alone);
    free(ta);
    mi_batch_free(b);
}
