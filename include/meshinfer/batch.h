/* Continuous batching on rank 0 (control layer): several sequences decode
 * together, one row each per forward pass, each in its own KV cache slot
 * with its own positions and sampler. A row is computed the same whatever
 * rows surround it, so every sequence gives the tokens it gives alone.
 * `meshinfer serve` is its caller; the workers serve as for generate
 * (mi_runtime_serve). Rank 0 only, one thread (the one that calls MPI). */
#ifndef MESHINFER_BATCH_H
#define MESHINFER_BATCH_H

#include "meshinfer/control.h"

typedef struct mi_batch mi_batch;

/* What a sequence reports as it goes. Called on the stepping thread. */
typedef struct {
    /* a generated token (never an end token): return non-zero to finish the
     * sequence now with stop "stop" (a stop string matched, the client left) */
    int (*on_token)(void *ctx, int token);
    /* the sequence is over: stop is "eos", "length", "stop" (on_token asked),
     * "cancelled" (mi_batch_cancel) or "error" (its logits were not finite);
     * n_prompt and n_gen count tokens; ttft_s from mi_batch_add to its first
     * token, tpot_s the mean time per later token (0 with one token). The
     * sequence's id is free again after this returns. */
    void (*on_done)(void *ctx, const char *stop, int n_prompt, int n_gen, double ttft_s, double tpot_s);
    void *ctx;
} mi_seq_hooks;

/* A batch of up to max_batch sequences over an open session whose runtime
 * has at least max_batch KV cache slots (session_opts kv_slots). Returns
 * NULL with err set when it has fewer, or when the plan cannot batch
 * (the time-series family). */
mi_batch *mi_batch_create(mi_session *ss, int max_batch, char *err);

/* Decode passes go as n_micro micro-batches pipelined through the ranks
 * where the plan is a chain through rank 0 (runtime.h mi_runtime_forward_at:
 * layer-wise), so that different ranks work on different sequences at once;
 * 1: one pass. The default is the number of ranks where the plan allows.
 * mi_batch_micro: what decode passes use now (1 where the plan does not
 * allow it). */
void mi_batch_pipeline(mi_batch *b, int n_micro);
int mi_batch_micro(const mi_batch *b);

/* Since mi_batch_create: the wall seconds of decode passes (each pass's
 * forward and its rows' sampling; prompts' prefill passes excluded) and
 * the tokens they chose (one per running sequence a pass). */
void mi_batch_decode_totals(const mi_batch *b, double *seconds, long *tokens);

/* Sequences that could be added now (max_batch less those running). */
int mi_batch_free_slots(const mi_batch *b);
/* Sequences running (added and not yet done). */
int mi_batch_active(const mi_batch *b);

/* Add a sequence: rq's prompt (copied; BOS first, 1 <= n_prompt, n_prompt +
 * steps <= the context), steps, ignore_eos and sampler fields (temperature,
 * topp, top_k, seed) are used; forced, replay and n_cached are not. Its
 * prompt is prefilled at the next mi_batch_step. Returns its id (>= 0), or
 * -1 with err set: no free slot, or the prompt does not fit the context. */
int mi_batch_add(mi_batch *b, const mi_gen_request *rq, const mi_seq_hooks *hk, char *err);

/* Finish sequence id with stop "cancelled" at the next step (its on_done is
 * called then); an id that is not running is ignored. */
void mi_batch_cancel(mi_batch *b, int id);

/* One step: finish the cancelled, prefill the prompts of sequences added
 * since the last step (each in forward passes of its own; its first token is
 * sampled), then one decode forward pass carrying one row of every running
 * sequence. Calls the hooks. Returns the sequences still running. */
int mi_batch_step(mi_batch *b);

/* Cancels what is running (on_done "cancelled") and frees. */
void mi_batch_free(mi_batch *b);

#endif
