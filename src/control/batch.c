/* Continuous batching (batch.h): sequences join and leave between forward
 * passes; sequence i lives in KV cache slot i for as long as it runs. A new
 * sequence's prompt is prefilled in passes of its own (its first token is
 * sampled from them), then every running sequence contributes one row to each
 * decode pass. Rows do not see each other (attention stays within a slot,
 * products and norms are row by row), so each sequence gets the tokens it
 * gets alone: the same logits, its own sampler. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/batch.h"
#include "meshinfer/common.h"
#include "meshinfer/sampler.h"

typedef struct {
    int running;        /* added, on_done not yet called */
    int prefilled;      /* prompt in the cache, first token chosen */
    int cancel;         /* mi_batch_cancel asked */
    int *prompt, n_prompt;
    long steps;
    int ignore_eos;
    mi_sampler smp;
    mi_seq_hooks hk;
    int next;           /* the last token chosen: the next row's input */
    int n_gen;          /* tokens reported */
    double t_add, t_first, t_last;
} seq;

struct mi_batch {
    mi_session *ss;
    int max;
    int micro;          /* micro-batches of a decode pass (pipelined where the plan allows) */
    seq *s;             /* [max]: sequence i in KV slot i */
    int *tok, *row_seq; /* [max] a decode pass's rows: tokens, their sequences */
    int *pos, *slot;    /* [max_T] a pass's rows: positions, KV slots */
    double decode_s;    /* wall time of decode passes (forward and sampling) since creation */
    long decode_tokens; /* tokens those passes chose */
};

mi_batch *mi_batch_create(mi_session *ss, int max_batch, char *err)
{
    int slots = mi_config_kv_slots(&ss->cfg);
    if (max_batch < 1 || max_batch > slots)
        return mi_set_error(err, "a batch of %d sequences needs as many KV cache slots (the session has %d)",
                            max_batch, slots), NULL;
    if (max_batch > ss->max_T)
        return mi_set_error(err, "a batch of %d sequences is more rows than a forward pass carries (%d)", max_batch,
                            ss->max_T), NULL;
    if (!mi_config_is_lm(&ss->cfg))
        return mi_set_error(err, "a time-series model cannot batch sequences"), NULL;
    mi_batch *b = mi_calloc(1, sizeof *b, "batch");
    b->ss = ss;
    b->max = max_batch;
    b->micro = mi_runtime_can_pipeline(ss->rt) ? ss->size : 1;
    b->s = mi_calloc((size_t)max_batch, sizeof *b->s, "batch sequences");
    b->tok = mi_malloc((2 * (size_t)max_batch + 2 * (size_t)ss->max_T) * sizeof(int), "batch rows");
    b->row_seq = b->tok + max_batch;
    b->pos = b->row_seq + max_batch;
    b->slot = b->pos + ss->max_T;
    return b;
}

void mi_batch_decode_totals(const mi_batch *b, double *seconds, long *tokens)
{
    *seconds = b->decode_s;
    *tokens = b->decode_tokens;
}

void mi_batch_pipeline(mi_batch *b, int n_micro) { b->micro = n_micro > 1 ? n_micro : 1; }

int mi_batch_micro(const mi_batch *b) { return mi_runtime_can_pipeline(b->ss->rt) ? b->micro : 1; }

int mi_batch_active(const mi_batch *b)
{
    int n = 0;
    for (int i = 0; i < b->max; i++)
        n += b->s[i].running;
    return n;
}

int mi_batch_free_slots(const mi_batch *b) { return b->max - mi_batch_active(b); }

int mi_batch_add(mi_batch *b, const mi_gen_request *rq, const mi_seq_hooks *hk, char *err)
{
    const mi_config *c = &b->ss->cfg;
    if (rq->n_prompt < 1 || rq->steps < 1)
        return mi_set_error(err, "a sequence needs a prompt and at least one token to generate");
    if ((long)rq->n_prompt + rq->steps > c->seq_len)
        return mi_set_error(err, "%d prompt tokens and %ld to generate do not fit the context of %d", rq->n_prompt,
                            rq->steps, c->seq_len);
    int i = 0;
    while (i < b->max && b->s[i].running)
        i++;
    if (i == b->max)
        return mi_set_error(err, "all %d sequences of the batch are running", b->max);
    seq *q = &b->s[i];
    memset(q, 0, sizeof *q);
    q->running = 1;
    q->prompt = mi_malloc((size_t)rq->n_prompt * sizeof(int), "prompt");
    memcpy(q->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof(int));
    q->n_prompt = rq->n_prompt;
    q->steps = rq->steps;
    q->ignore_eos = rq->ignore_eos;
    mi_sampler_init(&q->smp, c->vocab_size, rq->temperature, rq->topp, rq->seed);
    q->smp.top_k = rq->top_k;
    if (hk)
        q->hk = *hk;
    q->t_add = mi_now();
    return i;
}

void mi_batch_cancel(mi_batch *b, int id)
{
    if (id >= 0 && id < b->max && b->s[id].running)
        b->s[id].cancel = 1;
}

static void finish(seq *q, const char *stop)
{
    double now = mi_now();
    double ttft = q->n_gen > 0 ? q->t_first - q->t_add : now - q->t_add;
    double tpot = q->n_gen > 1 ? (q->t_last - q->t_first) / (q->n_gen - 1) : 0.0;
    q->running = 0;
    mi_sampler_free(&q->smp);
    free(q->prompt);
    q->prompt = NULL;
    if (q->hk.on_done)
        q->hk.on_done(q->hk.ctx, stop, q->n_prompt, q->n_gen, ttft, tpot);
}

/* Sequence q's next token from its logits: the end, a stop, the length, or a
 * token reported. Returns 1 while it goes on. */
static int choose(mi_batch *b, seq *q, float *logits)
{
    const mi_session *ss = b->ss;
    int n = ss->cfg.vocab_size;
    /* a non-finite logit ends this sequence, not the server (candidates
     * leave -INFINITY where no slice sent a logit) */
    for (int i = 0; i < n; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) {
            finish(q, "error");
            return 0;
        }
    int tok = mi_sample(&q->smp, logits);
    double now = mi_now();
    if (!q->ignore_eos && mi_tokenizer_is_eog(&ss->tok, tok)) {
        finish(q, "eos");
        return 0;
    }
    q->next = tok;
    if (q->n_gen++ == 0)
        q->t_first = now;
    q->t_last = now;
    if (q->hk.on_token && q->hk.on_token(q->hk.ctx, tok)) {
        finish(q, "stop");
        return 0;
    }
    if (q->n_gen >= q->steps) {
        finish(q, "length");
        return 0;
    }
    return 1;
}

/* The fullest slot's cached positions (what a phase switch moves). */
static int positions_held(const mi_batch *b)
{
    int hi = 0;
    for (int i = 0; i < b->max; i++) {
        const seq *q = &b->s[i];
        int p = q->running && q->prefilled ? q->n_prompt + q->n_gen - 1 : 0;
        if (p > hi)
            hi = p;
    }
    return hi;
}

static void prefill(mi_batch *b, int i)
{
    mi_session *ss = b->ss;
    seq *q = &b->s[i];
    session_phase(ss, 1, positions_held(b));
    float *logits = NULL;
    for (int p = 0; p < q->n_prompt;) {
        int T = q->n_prompt - p < ss->max_T ? q->n_prompt - p : ss->max_T;
        for (int t = 0; t < T; t++)
            b->pos[t] = p + t, b->slot[t] = i;
        logits = session_forward_at(ss, q->prompt + p, T, b->pos, b->slot, 1, 0, 1); /* prompt rows */
        p += T;
    }
    q->prefilled = 1;
    choose(b, q, logits);
}

int mi_batch_step(mi_batch *b)
{
    mi_session *ss = b->ss;
    for (int i = 0; i < b->max; i++) {
        seq *q = &b->s[i];
        if (q->running && q->cancel)
            finish(q, "cancelled");
        else if (q->running && !q->prefilled)
            prefill(b, i);
    }
    int T = 0;
    for (int i = 0; i < b->max; i++) {
        const seq *q = &b->s[i];
        if (!q->running)
            continue;
        b->tok[T] = q->next;
        b->pos[T] = q->n_prompt + q->n_gen - 1;
        b->slot[T] = i;
        b->row_seq[T++] = i;
    }
    if (T > 0) {
        session_phase(ss, 0, positions_held(b));
        double t0 = mi_now();
        /* every row a decode row: each running sequence's next token */
        float *logits = session_forward_at(ss, b->tok, T, b->pos, b->slot, T, T, b->micro);
        for (int t = 0; t < T; t++)
            choose(b, &b->s[b->row_seq[t]], logits + (size_t)t * ss->cfg.vocab_size);
        b->decode_s += mi_now() - t0;
        b->decode_tokens += T;
    }
    return mi_batch_active(b);
}

void mi_batch_free(mi_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->max; i++)
        if (b->s[i].running)
            finish(&b->s[i], "cancelled");
    free(b->s);
    free(b->tok);
    free(b);
}
