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
    s->top_k = 0;
    s->rng = mi_sampler_first_state(seed);
    size_t each = sizeof(prob_index) > sizeof(mi_candidate) ? sizeof(prob_index) : sizeof(mi_candidate);
    s->buf = mi_malloc((size_t)vocab_size * each, "sampler buffer");
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

uint64_t mi_sampler_first_state(uint64_t seed)
{
    return seed ? seed : 0x9E3779B97F4A7C15ull; /* xorshift's state is never 0 */
}

uint64_t mi_sampler_advance(uint64_t state)
{
    next_u32(&state);
    return state;
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

/* ---------------------------------------------------- logit candidates */

int mi_logit_candidates(float temperature, int top_k)
{
    return temperature <= 0.0f ? 1 : top_k > 0 ? top_k : 0;
}

/* a before b in the candidate order (sampler.h): NaN, larger, lower id */
static int better(const mi_candidate *a, const mi_candidate *b)
{
    int an = isnan(a->logit), bn = isnan(b->logit);
    if (an != bn)
        return an;
    if (!an && a->logit != b->logit)
        return a->logit > b->logit;
    return a->id < b->id;
}

static int cmp_candidates(const void *a, const void *b)
{
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* h[0, m) a heap with the worst candidate on top: restore it from i down. */
static void sift_down(mi_candidate *h, int m, int i)
{
    for (;;) {
        int w = i, a = 2 * i + 1, b = a + 1;
        if (a < m && better(&h[w], &h[a]))
            w = a;
        if (b < m && better(&h[w], &h[b]))
            w = b;
        if (w == i)
            return;
        mi_candidate t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

int mi_top_candidates(const float *logits, int n, int id0, int k, mi_candidate *out)
{
    if (k <= 0 || n <= 0)
        return 0;
    if (k > n)
        k = n;
    int m = 0;
    for (int i = 0; i < n; i++) {
        mi_candidate c = {logits[i], id0 + i};
        if (m < k) { /* grow the heap: the new one rises while it is worse than its parent */
            int j = m++;
            while (j > 0 && better(&out[(j - 1) / 2], &c)) {
                out[j] = out[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            out[j] = c;
        } else if (better(&c, &out[0])) {
            out[0] = c;
            sift_down(out, m, 0);
        }
    }
    qsort(out, (size_t)k, sizeof *out, cmp_candidates);
    return k;
}

int mi_candidates_best(mi_candidate *c, int n, int k)
{
    if (n <= 0 || k <= 0)
        return 0;
    qsort(c, (size_t)n, sizeof *c, cmp_candidates);
    return k < n ? k : n;
}

int mi_logits_from_candidates(const mi_candidate *c, int n, int vocab, float *logits)
{
    for (int i = 0; i < vocab; i++)
        logits[i] = -INFINITY;
    int skipped = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].id < 0 || c[i].id >= vocab) {
            skipped++;
            continue;
        }
        logits[c[i].id] = c[i].logit;
    }
    return skipped;
}

/* Top-k sampling (llama.cpp: top-k, then top-p within the k): the k best in
 * the candidate order, their probabilities at the temperature over those k
 * alone, summed in that order, so that any vector holding them (the whole
 * one, or one rebuilt from every slice's k best) gives the same token. */
static int sample_top_k(mi_sampler *s, const float *logits)
{
    mi_candidate *c = s->buf;
    int k = mi_top_candidates(logits, s->vocab_size, 0, s->top_k, c);
    float mx = c[0].logit, sum = 0.0f;
    for (int i = 0; i < k; i++) {
        c[i].logit = expf((c[i].logit - mx) / s->temperature);
        sum += c[i].logit;
    }
    for (int i = 0; i < k; i++)
        c[i].logit /= sum;
    float coin = mi_rand_f32(&s->rng), cum = 1.0f;
    int last = k - 1;
    if (s->topp > 0.0f && s->topp < 1.0f) {
        cum = 0.0f;
        for (int i = 0; i < k; i++) {
            cum += c[i].logit;
            if (cum > s->topp) {
                last = i;
                break;
            }
        }
    }
    float r = coin * cum, cdf = 0.0f;
    for (int i = 0; i <= last; i++) {
        cdf += c[i].logit;
        if (r < cdf)
            return c[i].id;
    }
    return c[last].id;
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
    if (s->top_k > 0)
        return sample_top_k(s, logits);
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
