/* Token sampling (see sampler.h). */
#include "meshinfer/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "meshinfer/common.h"

typedef struct {
    float p;
    int i;
} prob_index;

void mi_sampler_init(mi_sampler *s, int vocab_size, float temperature, float topp, uint64_t seed)
{
    s->vocab_size = vocab_size;
    s->temperature = temperature;
    s->topp = topp;
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    s->buf = mi_malloc((size_t)vocab_size * sizeof(prob_index), "sampler buffer");
}

void mi_sampler_free(mi_sampler *s)
{
    free(s->buf);
    s->buf = NULL;
}

static uint32_t next_u32(uint64_t *st)
{
    *st ^= *st >> 12;
    *st ^= *st << 25;
    *st ^= *st >> 27;
    return (uint32_t)((*st * 0x2545F4914F6CDD1Dull) >> 32);
}

float mi_rand_f32(uint64_t *state)
{
    return (float)(next_u32(state) >> 8) / 16777216.0f;
}

int mi_argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int cmp_desc(const void *a, const void *b)
{
    float pa = ((const prob_index *)a)->p, pb = ((const prob_index *)b)->p;
    return pa > pb ? -1 : pa < pb ? 1 : 0;
}

int mi_sample(mi_sampler *s, float *logits)
{
    int n = s->vocab_size;
    int best = mi_argmax(logits, n);
    if (s->temperature <= 0.0f)
        return best;
    /* subtract the maximum before dividing: a tiny temperature then gives
     * exp(-inf) = 0 for the others instead of inf - inf = NaN */
    float mx = logits[best], sum = 0.0f;
    for (int i = 0; i < n; i++) {
        logits[i] = expf((logits[i] - mx) / s->temperature);
        sum += logits[i];
    }
    for (int i = 0; i < n; i++)
        logits[i] /= sum;
    float coin = mi_rand_f32(&s->rng);
    if (s->topp <= 0.0f || s->topp >= 1.0f) {
        float cdf = 0.0f;
        for (int i = 0; i < n; i++) {
            cdf += logits[i];
            if (coin < cdf)
                return i;
        }
        return n - 1;
    }
    /* Nucleus: only tokens above (1-topp)/(n-1) can be in the smallest set
     * whose mass reaches topp, so sorting just those is enough. */
    prob_index *pi = s->buf;
    int m = 0;
    float cutoff = (1.0f - s->topp) / (float)(n - 1);
    for (int i = 0; i < n; i++)
        if (logits[i] >= cutoff)
            pi[m++] = (prob_index){logits[i], i};
    if (m == 0)
        return best;
    qsort(pi, (size_t)m, sizeof *pi, cmp_desc);
    float cum = 0.0f;
    int last = m - 1;
    for (int i = 0; i < m; i++) {
        cum += pi[i].p;
        if (cum > s->topp) {
            last = i;
            break;
        }
    }
    float r = coin * cum, cdf = 0.0f;
    for (int i = 0; i <= last; i++) {
        cdf += pi[i].p;
        if (r < cdf)
            return pi[i].i;
    }
    return pi[last].i;
}
