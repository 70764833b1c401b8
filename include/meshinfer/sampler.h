/* Choosing the next token from logits: greedy (temperature 0), temperature,
 * nucleus (top-p), with a seeded generator so runs repeat exactly. */
#ifndef MESHINFER_SAMPLER_H
#define MESHINFER_SAMPLER_H

#include <stdint.h>

typedef struct {
    int vocab_size;
    float temperature; /* 0: greedy argmax */
    float topp;        /* in (0, 1]; 1 disables nucleus sampling */
    uint64_t rng;      /* xorshift64* state, never 0 */
    void *buf;         /* [vocab_size] (prob, index) pairs for top-p */
} mi_sampler;

void mi_sampler_init(mi_sampler *s, int vocab_size, float temperature, float topp, uint64_t seed);
void mi_sampler_free(mi_sampler *s);

/* Pick a token id from logits[vocab_size] (modified in place when sampling). */
int mi_sample(mi_sampler *s, float *logits);

/* Index of the largest value (lowest index on ties). */
int mi_argmax(const float *v, int n);

/* Seeded uniform float in [0, 1) from a xorshift64* state; also used by `synth`. */
float mi_rand_f32(uint64_t *state);

#endif
