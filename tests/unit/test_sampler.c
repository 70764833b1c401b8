/* CUnit tests of the logit candidates a split classifier sends instead of
 * its whole logits, and of top-k sampling over them (src/model/sampler.c):
 *   - a slice's k best come out in the candidate order (larger first, the
 *     lower token id on ties, NaN first), k larger than the slice gives the
 *     whole slice, an empty slice or k = 0 gives none;
 *   - the logits rebuilt from every slice's best hold those candidates and
 *     -INFINITY elsewhere; their argmax is the whole vector's (ties across
 *     slices go to the lower id, as mi_argmax);
 *   - top-k sampling (with and without top-p) over the rebuilt vector gives
 *     token for token what it gives over the whole vector, seed for seed,
 *     for every way of cutting the vocabulary into slices; and its
 *     frequencies are the renormalised top k's;
 *   - the generator's first values from seed 1 are xorshift64*'s (computed
 *     independently);
 *   - at temperatures other than 1, with and without top-p and top-k, each
 *     seeded draw is the token a double-precision reference computes from
 *     the same coin (softmax of logit / T over the candidates, the nucleus
 *     cut where the sorted mass first exceeds top-p, the coin scaled by the
 *     nucleus's mass); and T = 0.5 over log {0.5, 0.3, 0.2} samples in
 *     proportion to their squares.
 * Exit status: 0 when every test passed, 1 otherwise. */
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/sampler.h"

static void test_top_candidates(void)
{
    /* ids 10..17 */
    float l[8] = {1.0f, 5.0f, 3.0f, 5.0f, -2.0f, 3.0f, 4.0f, 5.0f};
    mi_candidate c[8];
    int n = mi_top_candidates(l, 8, 10, 4, c);
    CU_ASSERT_EQUAL(n, 4);
    /* the three 5s by id, then the 4 */
    int want_id[4] = {11, 13, 17, 16};
    float want_l[4] = {5.0f, 5.0f, 5.0f, 4.0f};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(c[i].id, want_id[i]);
        CU_ASSERT_EQUAL(c[i].logit, want_l[i]);
    }
    /* a tie at the cut keeps the lower id: k = 5 takes id 12 (3.0) before 15 (3.0) */
    n = mi_top_candidates(l, 8, 10, 5, c);
    CU_ASSERT_EQUAL(n, 5);
    CU_ASSERT_EQUAL(c[4].id, 12);
    /* k larger than the slice: the whole slice, ordered */
    n = mi_top_candidates(l, 8, 0, 100, c);
    CU_ASSERT_EQUAL(n, 8);
    CU_ASSERT_EQUAL(c[7].id, 4);
    CU_ASSERT_EQUAL(c[6].id, 0);
    /* empty slices and k = 0 give nothing */
    CU_ASSERT_EQUAL(mi_top_candidates(l, 0, 0, 3, c), 0);
    CU_ASSERT_EQUAL(mi_top_candidates(l, 8, 0, 0, c), 0);
    /* a NaN comes first, so the check on rank 0 sees it */
    float bad[3] = {1.0f, NAN, 2.0f};
    CU_ASSERT_EQUAL(mi_top_candidates(bad, 3, 0, 1, c), 1);
    CU_ASSERT_EQUAL(c[0].id, 1);
    /* greedy (k = 1) over a larger slice is its argmax with the lowest id on ties */
    float big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (float)((i * 37) % 101);
    CU_ASSERT_EQUAL(mi_top_candidates(big, 1000, 0, 1, c), 1);
    CU_ASSERT_EQUAL(c[0].id, mi_argmax(big, 1000));
    CU_ASSERT_EQUAL(c[0].logit, 100.0f);
}

/* Every slice's k best of v[V] cut at the given bounds (cuts[0] = 0 ..
 * cuts[ns] = V), merged as rank 0 does, into out[V]. */
static void rebuild(const float *v, int V, const int *cuts, int ns, int k, float *out)
{
    mi_candidate *all = malloc((size_t)V * sizeof *all);
    int n = 0;
    for (int s = 0; s < ns; s++)
        n += mi_top_candidates(v + cuts[s], cuts[s + 1] - cuts[s], cuts[s], k, all + n);
    CU_ASSERT_EQUAL(mi_logits_from_candidates(all, n, V, out), 0);
    free(all);
}

static void test_merge(void)
{
    enum { V = 12 };
    /* ties across slices: 7.0 at ids 2 (slice 0), 6 (slice 1) and 11 (slice 2) */
    float v[V] = {1, 0, 7, 3, -1, 2, 7, 5, 0, 0, 6, 7};
    int cuts[4] = {0, 4, 4, V}; /* an empty slice in the middle */
    float out[V];
    rebuild(v, V, cuts, 3, 2, out);
    /* slice 0 sends ids 2 and 3, the empty one nothing, slice 2 ids 6 and 11 */
    for (int i = 0; i < V; i++) {
        int cand = i == 2 || i == 3 || i == 6 || i == 11;
        if (cand) {
            CU_ASSERT_EQUAL(out[i], v[i]);
        } else {
            CU_ASSERT(isinf(out[i]) && out[i] < 0);
        }
    }
    CU_ASSERT_EQUAL(mi_argmax(out, V), 2);
    CU_ASSERT_EQUAL(mi_argmax(out, V), mi_argmax(v, V));
    /* k larger than every slice: the whole vector back */
    rebuild(v, V, cuts, 3, 50, out);
    CU_ASSERT_EQUAL(memcmp(out, v, sizeof v), 0);
    /* ids outside the vocabulary are skipped, not written */
    mi_candidate odd[2] = {{3.0f, 5}, {9.0f, V}};
    CU_ASSERT_EQUAL(mi_logits_from_candidates(odd, 2, V, out), 1);
    CU_ASSERT_EQUAL(out[5], 3.0f);
    CU_ASSERT_EQUAL(mi_argmax(out, V), 5);
    /* the candidates sampling needs */
    CU_ASSERT_EQUAL(mi_logit_candidates(0.0f, 40), 1);
    CU_ASSERT_EQUAL(mi_logit_candidates(0.8f, 40), 40);
    CU_ASSERT_EQUAL(mi_logit_candidates(0.8f, 0), 0);
}

/* n draws from a sampler over v (a copy per draw: sampling changes it). */
static void draws(const float *v, int V, float temp, float topp, int k, uint64_t seed, int n, int *out)
{
    mi_sampler s;
    mi_sampler_init(&s, V, temp, topp, seed);
    s.top_k = k;
    float *w = malloc((size_t)V * sizeof *w);
    for (int i = 0; i < n; i++) {
        memcpy(w, v, (size_t)V * sizeof *w);
        out[i] = mi_sample(&s, w);
    }
    free(w);
    mi_sampler_free(&s);
}

static void test_top_k_sampling(void)
{
    enum { V = 300, N = 400 };
    float v[V], r[V];
    uint64_t st = 7;
    for (int i = 0; i < V; i++) /* repeated values: ties inside and across slices */
        v[i] = (float)(int)(mi_rand_f32(&st) * 40.0f) / 8.0f;
    int whole[N], split[N];
    int cut_sets[3][5] = {{0, 100, 200, 300, 300}, {0, 1, 2, 299, 300}, {0, 150, 150, 150, 300}};
    int ks[3] = {1, 5, 40};
    float topps[2] = {1.0f, 0.7f};
    for (int ki = 0; ki < 3; ki++)
        for (int pi = 0; pi < 2; pi++) {
            draws(v, V, 0.9f, topps[pi], ks[ki], 99, N, whole);
            for (int cs = 0; cs < 3; cs++) {
                rebuild(v, V, cut_sets[cs], 4, ks[ki], r);
                draws(r, V, 0.9f, topps[pi], ks[ki], 99, N, split);
                CU_ASSERT_EQUAL(memcmp(whole, split, sizeof whole), 0);
            }
        }
    /* greedy over the rebuilt vector is the whole vector's argmax */
    rebuild(v, V, cut_sets[1], 4, 1, r);
    CU_ASSERT_EQUAL(mi_argmax(r, V), mi_argmax(v, V));
    /* top-k 2 over {0.5, 0.3, 0.15, 0.05}: 0.625 / 0.375, the others never */
    float p[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    int counts[4] = {0}, *t = malloc(20000 * sizeof(int));
    draws(p, 4, 1.0f, 1.0f, 2, 5, 20000, t);
    for (int i = 0; i < 20000; i++)
        counts[t[i]]++;
    free(t);
    CU_ASSERT(abs(counts[0] - 12500) < 500);
    CU_ASSERT(abs(counts[1] - 7500) < 500);
    CU_ASSERT_EQUAL(counts[2] + counts[3], 0);
}

/* xorshift64* from seed 1: the top 24 bits of the first three outputs
 * (x ^= x >> 12; x ^= x << 25; x ^= x >> 27; output (x * 0x2545F4914F6CDD1D)
 * >> 32), computed in Python: 4711630, 11259814, 12177677 over 2^24. */
static void test_generator(void)
{
    uint64_t st = 1;
    CU_ASSERT_EQUAL(mi_rand_f32(&st), 4711630.0f / 16777216.0f);
    CU_ASSERT_EQUAL(mi_rand_f32(&st), 11259814.0f / 16777216.0f);
    CU_ASSERT_EQUAL(mi_rand_f32(&st), 12177677.0f / 16777216.0f);
}

/* The token a sampler at temperature temp, top-p topp, top-k k draws from
 * logits v[V] with coin u, in double precision; *margin receives how close
 * the scaled coin fell to a boundary of the cumulative mass (a draw that
 * close may round the other way in float). Distinct logits assumed. */
static int ref_sample(const float *v, int V, double temp, double topp, int k, double u, double *margin)
{
    int *ids = malloc((size_t)V * sizeof *ids);
    double *p = malloc((size_t)V * sizeof *p);
    for (int i = 0; i < V; i++)
        ids[i] = i;
    /* the order the mass is summed in: the vocabulary's over the whole of it, the candidates' (largest
     * logit first) under top-k or top-p (selection sort: V is small) */
    int sorted = k > 0 || (topp > 0 && topp < 1);
    for (int i = 0; sorted && i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (v[ids[j]] > v[ids[i]]) {
                int t = ids[i];
                ids[i] = ids[j];
                ids[j] = t;
            }
    int n = k > 0 && k < V ? k : V;
    double sum = 0;
    double mx = v[ids[0]];
    for (int i = 0; i < n; i++)
        mx = fmax(mx, v[ids[i]]);
    for (int i = 0; i < n; i++)
        sum += p[i] = exp(((double)v[ids[i]] - mx) / temp);
    for (int i = 0; i < n; i++)
        p[i] /= sum;
    int last = n - 1;
    double mass = 1.0;
    if (topp > 0 && topp < 1) {
        mass = 0;
        for (int i = 0; i < n; i++) {
            mass += p[i];
            if (mass > topp) {
                last = i;
                break;
            }
        }
    }
    double r = u * mass, cdf = 0;
    int pick = ids[last];
    *margin = 1;
    for (int i = 0; i <= last; i++) {
        cdf += p[i];
        if (fabs(r - cdf) < *margin)
            *margin = fabs(r - cdf);
        if (r < cdf) {
            pick = ids[i];
            break;
        }
    }
    free(ids);
    free(p);
    return pick;
}

static void test_temperature(void)
{
    enum { V = 64, N = 300 };
    float v[V];
    for (int i = 0; i < V; i++) /* distinct, spread over about 6 units */
        v[i] = 3.0f * sinf(1.7f * (float)i) + 0.01f * (float)i;
    float temps[3] = {0.3f, 0.7f, 1.6f}, topps[3] = {1.0f, 0.8f, 0.5f};
    int ks[2] = {0, 5}, got[N];
    int checked = 0, near = 0, wrong = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int pi = 0; pi < 3; pi++)
            for (int ki = 0; ki < 2; ki++) {
                draws(v, V, temps[ti], topps[pi], ks[ki], 1234, N, got);
                uint64_t st = 1234; /* the same coins: one per draw */
                for (int i = 0; i < N; i++) {
                    double margin, u = mi_rand_f32(&st);
                    int want = ref_sample(v, V, temps[ti], topps[pi], ks[ki], u, &margin);
                    if (margin < 1e-5) {
                        near++;
                        continue;
                    }
                    checked++;
                    if (got[i] != want && wrong++ < 5)
                        printf("\n  T %.1f top-p %.1f top-k %d draw %d: token %d, reference %d", temps[ti],
                               topps[pi], ks[ki], i, got[i], want);
                }
            }
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT(near < checked / 100);
    /* T = 0.5 over log p for p = {0.5, 0.3, 0.2}: probabilities in proportion
     * to p^2 = 0.25, 0.09, 0.04 of 0.38: 0.658, 0.237, 0.105 */
    float lp[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    int counts[3] = {0}, *t = malloc(20000 * sizeof(int));
    draws(lp, 3, 0.5f, 1.0f, 0, 5, 20000, t);
    for (int i = 0; i < 20000; i++)
        counts[t[i]]++;
    free(t);
    CU_ASSERT(abs(counts[0] - 13158) < 400);
    CU_ASSERT(abs(counts[1] - 4737) < 400);
    CU_ASSERT(abs(counts[2] - 2105) < 400);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("sampler", NULL, NULL);
    CU_add_test(s, "a slice's k best: order, ties, k past the slice, empty slices", test_top_candidates);
    CU_add_test(s, "logits rebuilt from every slice's candidates", test_merge);
    CU_add_test(s, "top-k sampling over the rebuilt logits is the whole vector's", test_top_k_sampling);
    CU_add_test(s, "the generator's values from a known seed", test_generator);
    CU_add_test(s, "seeded draws at temperatures other than 1 (with top-p, top-k) as a reference's", test_temperature);
    CU_basic_set_mode(CU_BRM_NORMAL);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
