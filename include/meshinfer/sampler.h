/* Choosing the next token from logits: greedy (temperature 0), temperature,
 * top-k then nucleus (top-p) within them (llama.cpp's order), with a seeded
 * generator so runs repeat exactly. Also the logit candidates a split
 * classifier sends instead of its whole logits (runtime.h: each classifier
 * slice sends rank 0 its best (logit, token id) pairs). */
#ifndef MESHINFER_SAMPLER_H
#define MESHINFER_SAMPLER_H

#include <stdint.h>

typedef struct {
    int vocab_size;
    float temperature; /* 0: greedy argmax */
    float topp;        /* in (0, 1]; 1 disables nucleus sampling */
    int top_k;         /* keep the top_k largest logits before top-p (llama.cpp's --top-k); 0: off.
                          mi_sampler_init sets 0; a caller sets it after */
    uint64_t rng;      /* xorshift64* state, never 0 */
    void *buf;         /* [vocab_size] (prob, index) pairs for top-k and top-p */
} mi_sampler;

void mi_sampler_init(mi_sampler *s, int vocab_size, float temperature, float topp, uint64_t seed);
void mi_sampler_free(mi_sampler *s);

/* The sampler's state before any token for seed (mi_sampler_init's rng),
 * and the state after one more draw from state. mi_sample draws exactly once
 * per token when it samples (temperature > 0) and never when greedy: the
 * states after each token of a run form a chain a journal is checked by. */
uint64_t mi_sampler_first_state(uint64_t seed);
uint64_t mi_sampler_advance(uint64_t state);

/* Pick a token id from logits[vocab_size] (modified in place when sampling).
 * With top_k > 0 and temperature > 0: the top_k best logits in the
 * candidate order below, softmax(logit / temperature) over those alone (in
 * that order), then top-p within them: so a vector that holds every slice's
 * best top_k logits and -INFINITY elsewhere samples exactly what the whole
 * vector does. */
int mi_sample(mi_sampler *s, float *logits);

/* Index of the largest value (lowest index on ties). */
int mi_argmax(const float *v, int n);

/* Seeded uniform float in [0, 1) from a xorshift64* state; also used by `synth`. */
float mi_rand_f32(uint64_t *state);

/* ---------------------------------------------------- logit candidates */

/* One logit and its token id. The candidate order: NaN first (so a broken
 * logit reaches the check that stops the run), then larger logits, then
 * lower token ids (mi_argmax's tie rule): a total order, so each slice's k
 * best contain the whole vocabulary's k best. */
typedef struct {
    float logit;
    int32_t id;
} mi_candidate;

/* The logit candidates sampling needs from each classifier slice: 1 when
 * greedy (temperature <= 0), top_k when top-k sampling (top_k > 0), 0 for
 * every logit (temperature sampling over the whole vocabulary). */
int mi_logit_candidates(float temperature, int top_k);

/* The min(k, n) best of logits[0, n), whose token ids are id0 .. id0+n-1,
 * into out (room for min(k, n)), best first. Returns how many (0 when k <= 0
 * or n <= 0). O(n log k). */
int mi_top_candidates(const float *logits, int n, int id0, int k, mi_candidate *out);

/* Sort c[0, n) best first and keep the min(k, n) best (merging the
 * candidates of several slices); returns how many are kept. */
int mi_candidates_best(mi_candidate *c, int n, int k);

/* A logits vector rebuilt from candidates: logits[vocab] = -INFINITY except
 * logits[c[i].id] = c[i].logit. Ids outside [0, vocab) are skipped (returns
 * how many were: 0 for candidates from a well-formed exchange). */
int mi_logits_from_candidates(const mi_candidate *c, int n, int vocab, float *logits);

#endif
