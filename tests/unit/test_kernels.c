/* CUnit tests of the element types and of every kernel family this CPU runs
 * (tensor.h, src/kernels/family.h): fp16 conversion, block quantization
 * round trips within each format's error bound, wire encodings, and each
 * family's products against the scalar reference on random and edge inputs
 * (all-zero blocks, maximum magnitudes, sizes that are not a multiple of the
 * SIMD width, odd row counts), with row subsets bit-identical to the whole.
 * Needs only the kernel library, so it also runs cross-compiled under
 * qemu-aarch64 (jobs/dev/cross_kernels.sh).
 *
 * usage: test_kernels */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/kernels/family.h"
#include "meshinfer/tensor.h"
#include "test_kernels.h"

static uint64_t g_rng = 0x1234567887654321ull;

static float frand(void) /* uniform in [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* ------------------------------------------------------------- fp16 */

static double f16_value(uint16_t h) /* from the IEEE definition, in double */
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_fp16_decode_all(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mi_f32_from_fp16((uint16_t)h);
        int e = (h >> 10) & 31;
        if (e == 31) {
            bad += (h & 1023) ? !isnan(f) : !(isinf(f) && (f > 0) == !(h >> 15));
            continue;
        }
        bad += (double)f != f16_value((uint16_t)h);
        /* encode(decode(h)) == h for every finite half (both zeros included) */
        bad += mi_fp16_from_f32(f) != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Encoding rounds to the nearest half, ties to the even one; overflow
 * saturates to infinity (at 65520 and above). */
static void test_fp16_encode_nearest(void)
{
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float f = ldexpf(frand(), (int)(frand() * 40.0f) - 12); /* magnitudes 2^-52 .. 2^28 */
        uint16_t h = mi_fp16_from_f32(f);
        if (fabsf(f) >= 65520.0f) {
            bad += (h & 0x7fff) != 0x7c00;
            continue;
        }
        double err = fabs(f16_value(h) - f);
        for (int dlt = -1; dlt <= 1; dlt += 2) {
            uint16_t n = (uint16_t)(h + dlt);
            if (((n >> 10) & 31) == 31 || (n ^ h) >> 15)
                continue;
            double en = fabs(f16_value(n) - f);
            bad += en < err || (en == err && (h & 1));
        }
    }
    /* ties and specials */
    bad += mi_fp16_from_f32(1.0f + 0x1p-11f) != 0x3c00;          /* tie: to even (1.0) */
    bad += mi_fp16_from_f32(1.0f + 3 * 0x1p-11f) != 0x3c02;      /* tie: to even (up) */
    bad += mi_fp16_from_f32(0x1p-25f) != 0x0000;                 /* half the smallest subnormal: to 0 */
    bad += mi_fp16_from_f32(0x1.8p-25f) != 0x0001;
    bad += mi_fp16_from_f32(65504.0f) != 0x7bff;
    bad += mi_fp16_from_f32(65520.0f) != 0x7c00;
    bad += mi_fp16_from_f32(-INFINITY) != 0xfc00;
    bad += !isnan(mi_f32_from_fp16(mi_fp16_from_f32(NAN)));
    CU_ASSERT_EQUAL(bad, 0);
}

/* ------------------------------------------------------- quantization */

static void fill_block_cases(float *x, int n, int kind)
{
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = frand(); break;                                   /* random */
        case 1: x[i] = 0.0f; break;                                       /* all zero */
        case 2: x[i] = (i % 3 ? 1.0f : -1.0f) * 60000.0f * frand(); break; /* near fp16's maximum */
        case 3: x[i] = i % 32 == 5 ? 100.0f : 1e-3f * frand(); break;     /* one outlier per block */
        case 4: x[i] = 1e-6f * frand(); break;                            /* scales near fp16's smallest */
        default: x[i] = (i % 2 ? 1.0f : -1.0f) * (float)(i % 32); break;  /* exact levels, both signs */
        }
    }
}

static void test_quantize_round_trip_bounds(void)
{
    enum { N = 1024 };
    float x[N], y[N];
    uint16_t q[N]; /* fp16 needs two bytes a value */
    uint16_t d[N / MI_QK];
    int bad = 0;
    for (int kind = 0; kind < 6; kind++) {
        fill_block_cases(x, N, kind);
        for (int t = MI_F16; t <= MI_Q4_0; t++) {
            mi_quantize_row(t, x, N, q, d);
            mi_dequantize_row(t, q, d, N, y);
            for (int i = 0; i < N; i++) {
                double e = fabs((double)y[i] - x[i]), bound;
                if (t == MI_F16) {
                    bound = fabs(x[i]) * 0x1p-11 + 0x1p-25; /* half an ulp, or a subnormal step */
                } else {
                    double s = fabs(mi_f32_from_fp16(d[i / MI_QK]));
                    /* q8_0: half a step; q4_0: one step (the far side of the extreme value can be
                     * clamped); plus the scale's own fp16 rounding times the largest level, which
                     * matters when the scale is an fp16 subnormal */
                    double ds = fmax(s * 0x1p-11, 0x1p-25);
                    bound = (t == MI_Q8_0 ? 0.5 * s + 128 * ds : s + 9 * ds) * (1 + 1e-6);
                    /* q4_0 rounds to the nearest level too: half a step wherever no clamp applies
                     * (x / d strictly inside (-8.5, 7.5) in units of the stored scale) */
                    float sd = mi_f32_from_fp16(d[i / MI_QK]), v = sd != 0.0f ? x[i] * (1.0f / sd) : 0.0f;
                    if (t == MI_Q4_0 && v > -8.5f + 1e-3f && v < 7.5f - 1e-3f)
                        bound = (0.5 * s + 9 * ds) * (1 + 1e-5);
                    /* an fp16 scale that underflows to zero loses the block: then |x| is below fp16's reach */
                    if (s == 0.0)
                        bound = 127.0 * 0x1p-24;
                }
                if (e > bound) {
                    if (bad < 5)
                        printf("\n  %s kind %d i %d: x %g y %g bound %g", mi_dtype_name(t), kind, i, x[i], y[i],
                               bound);
                    bad++;
                }
            }
            if (kind == 1 && t != MI_F16) /* all-zero blocks: zero scale (q4_0: -0, as llama.cpp), exact zeros */
                for (int b = 0; b < N / MI_QK; b++)
                    bad += (d[b] & 0x7fff) != 0;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* q4_0 puts the extreme value at level 0 exactly: -8 * d == m */
    float e[MI_QK] = {0};
    e[7] = -3.0f;
    e[9] = 1.0f;
    uint8_t q4[16];
    mi_quantize_row(MI_Q4_0, e, MI_QK, q4, d);
    mi_dequantize_row(MI_Q4_0, q4, d, MI_QK, y);
    CU_ASSERT_EQUAL(y[7], -3.0f);
    CU_ASSERT_EQUAL(q4[7] & 15, 0);
    /* the nibble order of a block: byte j holds elements j (low) and j+16 (high) */
    for (int i = 0; i < MI_QK; i++)
        e[i] = (float)(i - 8) * 0.5f;
    mi_quantize_row(MI_Q4_0, e, MI_QK, q4, d);
    mi_dequantize_row(MI_Q4_0, q4, d, MI_QK, y);
    CU_ASSERT(fabs(mi_f32_from_fp16(d[0]) - (11.5 / -8)) < 1e-3);
    CU_ASSERT(((q4[0] & 15) != (q4[0] >> 4)));
}

static void test_non_finite_gives_nan_scale(void)
{
    float x[64];
    int8_t q[64];
    uint16_t d[2];
    fill_block_cases(x, 64, 0);
    x[40] = NAN;
    mi_quantize_row(MI_Q8_0, x, 64, q, d);
    CU_ASSERT(!isnan(mi_f32_from_fp16(d[0])));
    CU_ASSERT(isnan(mi_f32_from_fp16(d[1])));
}

/* Voltron §4.3.1 pruning at run time packs the kept rows (w1, w3) and
 * columns (w2) in place: each kept value decodes to what it was, for every
 * dtype, and blocked columns cut inside a block are refused untouched. */
static void test_tensor_keep(void)
{
    enum { R = 5, C = 128 };
    float w[R * C], before[C], after[C];
    for (int i = 0; i < R * C; i++)
        w[i] = cosf(0.11f * (float)i) * (1 + i % 5);
    mi_tensor f = {MI_F32, R, C, w, NULL};
    int runs0[] = {32, 96}, runsn[] = {32, 32}; /* columns [32, 64) and [96, 128) */
    int rows0[] = {1, 4}, rowsn[] = {2, 1};      /* rows 1, 2 and 4 */
    for (int t = MI_F32; t <= MI_Q4_0; t++) {
        void *m = aligned_alloc(64, 8192), *m2 = aligned_alloc(64, 8192);
        mi_tensor a, ref;
        CU_ASSERT_EQUAL_FATAL(mi_tensor_convert(&f, t, m, &a), 0);
        CU_ASSERT_EQUAL_FATAL(mi_tensor_convert(&f, t, m2, &ref), 0);
        mi_tensor_keep_rows(&a, 2, rows0, rowsn);
        CU_ASSERT_EQUAL(a.rows, 3);
        int from[] = {1, 2, 4};
        for (int r = 0; r < 3; r++) {
            mi_tensor_row_f32(&ref, from[r], before);
            mi_tensor_row_f32(&a, r, after);
            CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
        }
        CU_ASSERT_EQUAL_FATAL(mi_tensor_keep_cols(&a, 2, runs0, runsn), 0);
        CU_ASSERT_EQUAL(a.cols, 64);
        for (int r = 0; r < 3; r++) {
            mi_tensor_row_f32(&ref, from[r], before);
            mi_tensor_row_f32(&a, r, after);
            CU_ASSERT_EQUAL(memcmp(before + 32, after, 32 * sizeof(float)), 0);
            CU_ASSERT_EQUAL(memcmp(before + 96, after + 32, 32 * sizeof(float)), 0);
        }
        int cut0[] = {16}, cutn[] = {32};
        CU_ASSERT_EQUAL(mi_tensor_keep_cols(&a, 1, cut0, cutn), mi_dtype_blocked(t) ? -1 : 0);
        CU_ASSERT_EQUAL(a.cols, mi_dtype_blocked(t) ? 64 : 32);
        free(m);
        free(m2);
    }
}

/* Voltron computation scaling re-encodes a held tensor: row by row the
 * same bytes as quantizing its fp32 values, q8_0 -> q4_0 through fp32 too,
 * and a blocked dtype refused where the columns are not whole blocks. */
static void test_tensor_convert(void)
{
    enum { R = 3, C = 64 };
    float w[R * C], row[C];
    for (int i = 0; i < R * C; i++)
        w[i] = sinf(0.37f * (float)i) * (1 + i % 7);
    mi_tensor f = {MI_F32, R, C, w, NULL};
    void *m8 = aligned_alloc(64, 4096), *m4 = aligned_alloc(64, 4096);
    mi_tensor t8, t4;
    CU_ASSERT_EQUAL_FATAL(mi_tensor_convert(&f, MI_Q8_0, m8, &t8), 0);
    CU_ASSERT_EQUAL(t8.dtype, MI_Q8_0);
    CU_ASSERT_EQUAL(t8.rows, R);
    int8_t q[C];
    uint16_t d[C / MI_QK];
    for (int r = 0; r < R; r++) {
        mi_quantize_row(MI_Q8_0, w + r * C, C, q, d);
        CU_ASSERT_EQUAL(memcmp(q, (int8_t *)t8.q + r * C, sizeof q), 0);
        CU_ASSERT_EQUAL(memcmp(d, t8.d + r * (C / MI_QK), sizeof d), 0);
    }
    /* q8_0 -> q4_0: the q8_0 values, decoded, are what gets quantized */
    CU_ASSERT_EQUAL_FATAL(mi_tensor_convert(&t8, MI_Q4_0, m4, &t4), 0);
    uint8_t q4[C / 2];
    mi_tensor_row_f32(&t8, 1, row);
    mi_quantize_row(MI_Q4_0, row, C, q4, d);
    CU_ASSERT_EQUAL(memcmp(q4, (uint8_t *)t4.q + C / 2, sizeof q4), 0);
    CU_ASSERT_EQUAL(memcmp(d, t4.d + C / MI_QK, sizeof d), 0);
    /* 48 columns (one stories15M head of wo in a tensor-parallel shard) are not whole blocks */
    mi_tensor odd = {MI_F32, 2, 48, w, NULL}, out = t8;
    CU_ASSERT_EQUAL(mi_tensor_convert(&odd, MI_Q4_0, m4, &out), -1);
    CU_ASSERT_EQUAL(mi_tensor_convert(&f, MI_Q4_K, m4, &out), -1); /* 64 columns: no whole super-block */
    CU_ASSERT_EQUAL(out.q, t8.q);
    CU_ASSERT_EQUAL(mi_tensor_convert(&odd, MI_F16, m4, &out), 0);
    CU_ASSERT_EQUAL(out.dtype, MI_F16);
    CU_ASSERT_EQUAL(mi_f32_from_fp16(((uint16_t *)out.q)[47]), mi_f32_from_fp16(mi_fp16_from_f32(w[47])));
    free(m8);
    free(m4);
}

static void test_sizes(void)
{
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_F32, 288), 1152);
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_F16, 288), 576);
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_Q8_0, 288), 288 + 18);
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_Q4_0, 288), 144 + 18);
    CU_ASSERT_EQUAL(mi_tensor_bytes(MI_Q4_0, 2048, 5632), (size_t)2048 * (2816 + 352));
    mi_dtype t;
    CU_ASSERT_EQUAL(mi_dtype_parse("q4_0", &t), 0);
    CU_ASSERT_EQUAL(t, MI_Q4_0);
    CU_ASSERT_EQUAL(mi_dtype_parse("int4", &t), -1);
    CU_ASSERT_STRING_EQUAL(mi_dtype_name(MI_Q8_0), "q8_0");
    /* the k-quants' super-blocks, as ggml's block_q4_K, block_q5_K, block_q6_K */
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_Q4_K, 2048), 8 * 144);
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_Q5_K, 2048), 8 * 176);
    CU_ASSERT_EQUAL(mi_dtype_row_bytes(MI_Q6_K, 2048), 8 * 210);
    CU_ASSERT_EQUAL(mi_dtype_block(MI_Q6_K), 256);
    CU_ASSERT_EQUAL(mi_dtype_block(MI_Q4_0), 32);
    CU_ASSERT_EQUAL(mi_dtype_block(MI_F16), 1);
    CU_ASSERT_EQUAL(mi_dtype_parse("q5_K", &t), 0);
    CU_ASSERT_EQUAL(t, MI_Q5_K);
    mi_tensor k = mi_tensor_shape(MI_Q4_K, 3, 512);
    CU_ASSERT_EQUAL(mi_tensor_place_bytes(MI_Q4_K, 3, 512), 896); /* 864 rounded to 64, no scale array */
    void *mem = aligned_alloc(64, 1024);
    mi_tensor_place(&k, mem);
    CU_ASSERT_PTR_NULL(k.d);
    mi_tensor r1 = mi_tensor_rows(&k, 1, 2);
    CU_ASSERT_EQUAL((char *)r1.q - (char *)k.q, 288);
    free(mem);
}

/* Hand-made super-blocks decode as ggml's layouts say: scale and min
 * packing of q4_K (sub-blocks 0 and 5), q5_K's fifth bits, q6_K's split
 * nibbles and its signed scales. */
static void test_kquant_layouts(void)
{
    uint8_t b[210] = {0};
    int8_t q[MI_QK_K];
    int sc[16], m[16];
    float d, dmin, out[MI_QK_K];
    uint16_t one = mi_fp16_from_f32(1.0f), half = mi_fp16_from_f32(0.5f);
    /* q4_K: d 1, dmin 0.5; sub-block 0 scale 3 min 2; sub-block 5 scale 0x2a (low nibble 10 in byte 9,
     * top bits 2 in byte 1's bits 6-7), min 0x15 (5 in byte 9's high nibble, 1 in byte 5's top bits) */
    memcpy(b, &one, 2);
    memcpy(b + 2, &half, 2);
    b[4 + 0] = 3;
    b[4 + 4] = 2;
    b[4 + 9] = 0x5a;
    b[4 + 1] |= 2 << 6;
    b[4 + 5] |= 1 << 6;
    b[16 + 0] = 0x97;  /* element 0: 7, element 32: 9 */
    b[16 + 64 + 1] = 0xc0; /* group 2 (elements 128..191), byte 1: element 129 low 0, element 161 high 12 */
    CU_ASSERT_EQUAL(mi_kquant_unpack(MI_Q4_K, b, q, sc, m, &d, &dmin), 8);
    CU_ASSERT_EQUAL(sc[0], 3);
    CU_ASSERT_EQUAL(m[0], 2);
    CU_ASSERT_EQUAL(sc[5], 0x2a);
    CU_ASSERT_EQUAL(m[5], 0x15);
    CU_ASSERT_EQUAL(q[0], 7);
    CU_ASSERT_EQUAL(q[32], 9);
    CU_ASSERT_EQUAL(q[161], 12);
    mi_dequantize_row(MI_Q4_K, b, NULL, MI_QK_K, out);
    CU_ASSERT_EQUAL(out[0], 1.0f * 3 * 7 - 0.5f * 2);
    CU_ASSERT_EQUAL(out[161], 1.0f * 0x2a * 12 - 0.5f * 0x15);
    /* q5_K: qh bit 2g+1 of byte l is the fifth bit of group g's element l + 32 */
    uint8_t b5[176] = {0};
    memcpy(b5, b, 16);
    b5[16 + 1] = 1 << 5;  /* group 2, element 2*64 + 32 + 1 = 161 */
    b5[48 + 64 + 1] = 0xc0;
    mi_kquant_unpack(MI_Q5_K, b5, q, sc, m, &d, &dmin);
    CU_ASSERT_EQUAL(q[161], 28);
    CU_ASSERT_EQUAL(q[129], 0);
    /* q6_K: element 64 + 128 = 192: low nibble in byte 64 + 0's high half, top bits in qh[32]'s bits 4-5 */
    memset(b, 0, sizeof b);
    b[64] = 0x50;          /* element 192's low 4 bits: 5 */
    b[128 + 32] = 3 << 4;  /* its top 2 bits: 3 -> level 53 - 32 = 21 */
    b[192 + 12] = (uint8_t)-3; /* sub-block 12 = elements 192..207: scale -3 */
    uint16_t two = mi_fp16_from_f32(2.0f);
    memcpy(b + 208, &two, 2);
    CU_ASSERT_EQUAL(mi_kquant_unpack(MI_Q6_K, b, q, sc, m, &d, &dmin), 16);
    CU_ASSERT_EQUAL(q[192], 21);
    CU_ASSERT_EQUAL(q[0], -32);
    CU_ASSERT_EQUAL(sc[12], -3);
    mi_dequantize_row(MI_Q6_K, b, NULL, MI_QK_K, out);
    CU_ASSERT_EQUAL(out[192], 2.0f * -3 * 21);
    CU_ASSERT_EQUAL(out[191], 0.0f);
    /* a row quantized and decoded again: levels and scales survive the packing */
    float x[512], y[512];
    uint8_t qb[2 * 210];
    for (int t = MI_Q4_K; t <= MI_Q6_K; t++) {
        int bad = 0;
        for (int i = 0; i < 512; i++)
            x[i] = sinf(0.1f * (float)i) * (1.0f + (float)(i % 7));
        mi_quantize_row(t, x, 512, qb, NULL);
        mi_dequantize_row(t, qb, NULL, 512, y);
        double err = 0;
        for (int i = 0; i < 512; i++) {
            double e = fabs(y[i] - x[i]);
            if (e > err)
                err = e;
        }
        /* one step of the level grid at most: 7/15, 7/31, 7/32 of the range, with room for the
         * 6-bit scales' rounding */
        double step = t == MI_Q4_K ? 14.0 / 15 : t == MI_Q5_K ? 14.0 / 31 : 7.0 / 32;
        bad += !(err <= step * 0.75);
        CU_ASSERT_EQUAL(bad, 0);
        if (bad)
            printf("\n  %s: largest error %g (step %g)", mi_dtype_name(t), err, step);
    }
}

/* A seeded N(0, 1) matrix, n values: xorshift64 and Box-Muller in double. */
static void kq_gaussian(float *x, int n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            u[k] = ((double)(s >> 11) + 0.5) * 0x1p-53;
        }
        double r = sqrt(-2.0 * log(u[0]));
        x[i] = (float)(r * cos(6.283185307179586 * u[1]));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(6.283185307179586 * u[1]));
    }
}

/* The k-quant encoders' error on a seeded N(0, 1) matrix (64 x 1024): RMSE
 * below llama.cpp's reference quantizers' on the same values plus 2%
 * (llama.cpp's quantize_row_q4_K_ref, _q5_K_ref, _q6_K_ref, Feb 2025, gave
 * 0.071288, 0.036125, 0.017734 here; ours 0.070322, 0.034840, 0.017556;
 * jobs/experiments/kquant_error.sh compares them on stories15M too); a
 * NaN or infinity in a super-block gives it NaN scales, so it decodes to
 * NaN rather than to plausible numbers. */
static void test_kquant_error(void)
{
    enum { R = 64, C = 1024 };
    static float x[R * C], y[C];
    static unsigned char q[C];
    kq_gaussian(x, R * C);
    const double bound[3] = {0.071288 * 1.02, 0.036125 * 1.02, 0.017734 * 1.02};
    for (int t = MI_Q4_K; t <= MI_Q6_K; t++) {
        double e = 0;
        for (int r = 0; r < R; r++) {
            mi_quantize_row(t, x + r * C, C, q, NULL);
            mi_dequantize_row(t, q, NULL, C, y);
            for (int i = 0; i < C; i++)
                e += ((double)y[i] - x[r * C + i]) * ((double)y[i] - x[r * C + i]);
        }
        double rmse = sqrt(e / (R * C));
        CU_ASSERT(rmse < bound[t - MI_Q4_K]);
        CU_ASSERT(rmse > 0.5 * bound[t - MI_Q4_K]); /* a real encoding, not a copy */
        if (!(rmse < bound[t - MI_Q4_K]))
            printf("\n  %s: RMSE %g, bound %g", mi_dtype_name(t), rmse, bound[t - MI_Q4_K]);
        /* non-finite input: the second super-block's scales are NaN, the first's are not */
        float z[512];
        memcpy(z, x, sizeof z);
        z[300] = t == MI_Q5_K ? INFINITY : NAN;
        mi_quantize_row(t, z, 512, q, NULL);
        mi_dequantize_row(t, q, NULL, 512, y);
        int nan_second = 1, finite_first = 1;
        for (int i = 0; i < 256; i++) {
            finite_first &= isfinite(y[i]) != 0;
            nan_second &= isnan(y[256 + i]) != 0;
        }
        CU_ASSERT(finite_first && nan_second);
        int8_t lv[MI_QK_K];
        int sc[16], m[16];
        float d, dmin;
        mi_kquant_unpack(t, q + mi_dtype_q_row_bytes(t, 256), lv, sc, m, &d, &dmin);
        CU_ASSERT(isnan(d));
    }
}

/* ---------------------------------------------------------- wire */

static void test_wire_round_trip(void)
{
    const size_t ns[] = {1, 31, 32, 33, 48, 288, 1000};
    int bad = 0;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        size_t n = ns[k], rows = 3, ld = n + 5;
        float *x = calloc(rows * ld, sizeof(float)), *y = calloc(rows * ld, sizeof(float));
        for (size_t i = 0; i < rows * ld; i++)
            x[i] = 10.0f * frand();
        x[2] = 1e6f; /* saturates in fp16 */
        for (int t = MI_F32; t <= MI_Q8_0; t++) {
            size_t rb = mi_wire_row_bytes(t, n);
            bad += rb != (t == MI_F32 ? 4 * n : t == MI_F16 ? 2 * n : n + 2 * ((n + 31) / 32));
            unsigned char *buf = malloc(rows * rb + 1);
            mi_wire_pack(t, x, rows, n, ld, buf + 1); /* unaligned on purpose */
            mi_wire_unpack(t, buf + 1, rows, n, ld, y);
            for (size_t r = 0; r < rows; r++)
                for (size_t i = 0; i < n; i++) {
                    float a = x[r * ld + i], b = y[r * ld + i];
                    double amax = 0;
                    for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32 && j < n; j++) {
                        double v = fabs(x[r * ld + j]);
                        if (v > amax)
                            amax = v;
                    }
                    double bound = t == MI_F32 ? 0 : t == MI_F16 ? (fabs(a) > 65504 ? fabs(a) - 65504 : fabs(a) * 0x1p-11)
                                                                 : amax / 127 * 0.57;
                    bad += fabs((double)a - b) > bound;
                }
            free(buf);
        }
        free(x);
        free(y);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ------------------------------------------------------ kernel families */

typedef struct {
    mi_tensor W;
    void *mem;
} test_tensor;

/* A rows x cols tensor of dtype t quantized from w (kind: see fill_block_cases). */
static test_tensor make_tensor(int t, int rows, int cols, int kind)
{
    test_tensor tt;
    tt.W = mi_tensor_shape((mi_dtype)t, rows, cols);
    size_t bytes = mi_tensor_place_bytes(t, (size_t)rows, (size_t)cols);
    if (posix_memalign(&tt.mem, 64, bytes ? bytes : 64) != 0)
        abort();
    mi_tensor_place(&tt.W, tt.mem);
    float *row = malloc((size_t)cols * sizeof(float));
    for (int r = 0; r < rows; r++) {
        fill_block_cases(row, cols, kind == 6 ? (r % 6) : kind); /* 6: a different case per row */
        size_t qb = mi_dtype_q_row_bytes(t, (size_t)cols);
        mi_quantize_row(t, row, cols, (char *)tt.W.q + (size_t)r * qb,
                        tt.W.d ? tt.W.d + (size_t)r * (cols / MI_QK) : NULL);
    }
    free(row);
    return tt;
}

/* y = W x with family f (rows [r0, r1) only). */
static void run_family(const mi_kernel_family *f, const mi_tensor *W, const float *x, int r0, int r1, float *y)
{
    mi_prep_fn prep = f->prep[W->dtype];
    mi_rows_fn rows = f->rows[W->dtype];
    if (!rows) {
        prep = mi_kernels_scalar.prep[W->dtype];
        rows = mi_kernels_scalar.rows[W->dtype];
    }
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, MI_ACT_BYTES(W->cols)) != 0)
        abort();
    mi_act a;
    memset(&a, 0, sizeof a);
    a.n = W->cols;
    a.x = x;
    if (prep)
        prep(x, W->cols, scratch, &a);
    rows(y, W, r0, r1, &a, 0);
    free(scratch);
}

/* Sum over the row of |w * x| (dequantized): the scale of the rounding
 * error. q4_0 kernels compute sum(q * x) - 8 sum(x) per block, whose terms can
 * be much larger than the result, so their magnitude counts too. */
double abs_dot(const mi_tensor *W, int r, const float *x)
{
    float *w = malloc((size_t)W->cols * sizeof(float));
    mi_tensor_row_f32(W, r, w);
    double s = 0;
    for (int i = 0; i < W->cols; i++) {
        s += fabs((double)w[i] * x[i]);
        if (W->dtype == MI_Q4_0)
            s += 16.0 * fabs(mi_f32_from_fp16(W->d[(size_t)r * (W->cols / MI_QK) + i / MI_QK]) * x[i]);
    }
    if (mi_dtype_kquant(W->dtype)) { /* q4_K/q5_K: d sc sum(q x) and dmin m sum(x) apart */
        size_t bb = mi_dtype_q_row_bytes(W->dtype, MI_QK_K);
        for (int k = 0; k < W->cols / MI_QK_K; k++) {
            int8_t q[MI_QK_K];
            int sc[16], m[16];
            float d, dmin;
            mi_kquant_unpack(W->dtype, (const char *)W->q + ((size_t)r * (W->cols / MI_QK_K) + k) * bb, q, sc, m,
                             &d, &dmin);
            for (int i = 0; i < MI_QK_K; i++)
                s += 2.0 * fabs((double)dmin * m[i / 32] * x[k * MI_QK_K + i]);
        }
    }
    free(w);
    return s;
}

static int g_checked[8];

/* The quantized test matrices, made once and shared by every family's check
 * (the k-quant encoders' searches dominated the test's time, most of all
 * under qemu); freed by test_families. */
static test_tensor g_shared[MI_N_DTYPES][10][4][7];

static const test_tensor *shared_tensor(int t, int ci, int ri, int kind, int rows, int cols)
{
    test_tensor *tt = &g_shared[t][ci][ri][kind];
    if (!tt->mem)
        *tt = make_tensor(t, rows, cols, kind);
    return tt;
}

/* Rows [0, m) of W x with family f against the scalar reference within the
 * float-summation-order bound, and every row subset bit-identical to the
 * whole; returns the rows out of bound and adds the subsets that differ to
 * *bits. */
static int compare_family(const mi_kernel_family *f, const mi_tensor *W, const float *x, int *bits,
                          const char *what, int kind)
{
    int m = W->rows, n = W->cols, bad = 0;
    float *ref = malloc((size_t)m * sizeof(float)), *got = malloc((size_t)m * sizeof(float));
    run_family(&mi_kernels_scalar, W, x, 0, m, ref);
    run_family(f, W, x, 0, m, got);
    for (int r = 0; r < m; r++) {
        double tol = 2e-6 * abs_dot(W, r, x) * (1.0 + log2((double)n)) + 1e-30;
        if (!(fabs((double)got[r] - ref[r]) <= tol)) {
            if (bad < 4)
                printf("\n  %s %s %s %dx%d kind %d row %d: %.9g vs scalar %.9g (tol %.3g)", f->name,
                       mi_dtype_name(W->dtype), what, m, n, kind, r, got[r], ref[r], tol);
            bad++;
        }
    }
    /* every row subset reproduces the same bits */
    for (int a = 0; a < m; a++)
        for (int b = a + 1; b <= m; b += (m > 8 ? 7 : 1)) {
            float part[40];
            run_family(f, W, x, a, b, part);
            *bits += memcmp(part, got + a, (size_t)(b - a) * sizeof(float)) != 0;
        }
    free(ref);
    free(got);
    return bad;
}

static void check_family_dtype(const mi_kernel_family *f, int fi, int t)
{
    const int rows_list[] = {1, 3, 7, 33};
    const int cols_q[] = {32, 64, 96, 128, 160, 224, 288, 320, 768, 2080};
    const int cols_f[] = {1, 7, 13, 16, 31, 33, 77, 131, 288, 1000};
    const int cols_k[] = {256, 512, 768, 1280, 2304}; /* super-blocks: 1 to 9 */
    const int *cols = mi_dtype_kquant(t) ? cols_k : mi_dtype_blocked(t) ? cols_q : cols_f;
    int n_cols = mi_dtype_kquant(t) ? 5 : 10;
    int bad = 0, bits = 0;
    for (int ci = 0; ci < n_cols; ci++)
        for (int ri = 0; ri < 4; ri++)
            for (int kind = 0; kind < 7; kind++) {
                int n = cols[ci], m = rows_list[ri];
                if (!mi_dtype_blocked(t) && (kind == 2 || kind == 4))
                    continue; /* fp16 range cases are for the block scales */
                const test_tensor *tt = shared_tensor(t, ci, ri, kind, m, n);
                float *x = malloc((size_t)n * sizeof(float));
                fill_block_cases(x, n, (kind + 3) % 6);
                bad += compare_family(f, &tt->W, x, &bits, "quantized", kind);
                free(x);
            }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(bits, 0);
    g_checked[fi]++;
}

/* A random finite fp16 (any sign and exponent, subnormals included). */
static uint16_t rand_finite_half(void)
{
    uint16_t h = (uint16_t)(g_rng >> 17);
    frand();
    return ((h >> 10) & 31) == 31 ? (uint16_t)(h & ~0x4000) : h;
}

/* One k-quant super-block of dtype t in the edge case `kind`, written as
 * bytes (any byte pattern is a valid block once d and dmin are finite):
 * 0 all zero; 1 the largest scales and mins (sc = m = 63; q6_K's -128 and
 * 127) with the top levels and d = dmin = 65504, fp16's largest; 2 the same
 * scales with the bottom levels and d = dmin = -65504; 3 random bytes with
 * d the smallest subnormal and dmin the smallest normal; 4 random bytes with
 * random finite d and dmin; 5 random bytes with d and dmin near 1. */
static void fill_kquant_block(int t, uint8_t *blk, int kind)
{
    size_t bb = mi_dtype_q_row_bytes(t, MI_QK_K);
    for (size_t i = 0; i < bb; i++) {
        blk[i] = kind == 0 || kind == 2 ? 0x00 : kind == 1 ? 0xff : (uint8_t)(g_rng >> 23);
        frand();
    }
    uint16_t d, dmin;
    switch (kind) {
    case 0: d = dmin = 0; break;
    case 1: d = dmin = 0x7bff; break;
    case 2: d = dmin = 0xfbff; break;
    case 3: d = 0x0001, dmin = 0x0400; break;
    case 4: d = rand_finite_half(), dmin = rand_finite_half(); break;
    default:
        d = mi_fp16_from_f32(frand() + 1.5f), dmin = mi_fp16_from_f32(frand() * 0.5f);
        break;
    }
    if (t == MI_Q6_K) {
        if (kind == 1 || kind == 2)
            for (int j = 0; j < 16; j++)
                blk[192 + j] = j % 2 ? 127 : 0x80; /* scales 127 and -128 */
        memcpy(blk + 208, &d, 2);
    } else {
        if (kind == 2)
            memset(blk + 4, 0xff, 12); /* sc = m = 63 with the levels at 0 */
        memcpy(blk, &d, 2);
        memcpy(blk + 2, &dmin, 2);
    }
}

/* The k-quants' super-block edge cases (fill_kquant_block) in every
 * available family against the scalar reference: 1 to 9 super-blocks a row
 * (every row is whole super-blocks, so these are the widths that are not a
 * multiple of a SIMD loop's step), odd and even row counts, each case alone
 * and mixed per super-block, with several kinds of activations; all-zero
 * blocks give exactly 0 in every family. */
static void check_family_kquant_edges(const mi_kernel_family *f)
{
    const int rows_list[] = {1, 2, 5, 8};
    int bad = 0, bits = 0, zeros = 0;
    for (int t = MI_Q4_K; t <= MI_Q6_K; t++) {
        size_t bb = mi_dtype_q_row_bytes(t, MI_QK_K);
        for (int ns = 1; ns <= 9; ns++)
            for (int kind = 0; kind < 7; kind++) {
                int n = ns * MI_QK_K, m = rows_list[(ns + kind) % 4];
                test_tensor tt;
                tt.W = mi_tensor_shape((mi_dtype)t, m, n);
                if (posix_memalign(&tt.mem, 64, mi_tensor_place_bytes(t, (size_t)m, (size_t)n)) != 0)
                    abort();
                mi_tensor_place(&tt.W, tt.mem);
                for (int r = 0; r < m; r++)
                    for (int k = 0; k < ns; k++) /* 6: a different case per super-block */
                        fill_kquant_block(t, (uint8_t *)tt.W.q + ((size_t)r * ns + k) * bb,
                                          kind == 6 ? (r + k) % 6 : kind);
                float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)m * sizeof(float));
                for (int xk = 0; xk < 6; xk += (kind == 6 ? 1 : 2)) {
                    fill_block_cases(x, n, xk);
                    bad += compare_family(f, &tt.W, x, &bits, "edge", kind);
                    if (kind == 0) {
                        run_family(f, &tt.W, x, 0, m, y);
                        for (int r = 0; r < m; r++)
                            zeros += y[r] != 0.0f;
                    }
                }
                free(x);
                free(y);
                free(tt.mem);
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(bits, 0);
    CU_ASSERT_EQUAL(zeros, 0);
}

/* Every family's activation preparation gives the scalar family's scales
 * and offset terms exactly (family.h's shared rule). */
static void check_family_prep(const mi_kernel_family *f)
{
    int bad = 0;
    for (int t = MI_Q8_0; t < MI_N_DTYPES; t++) {
        if (!f->prep[t])
            continue;
        for (int kind = 0; kind < 6; kind++) {
            int n = 2080;
            float *x = malloc((size_t)n * sizeof(float));
            fill_block_cases(x, n, kind);
            void *s1, *s2;
            if (posix_memalign(&s1, 64, MI_ACT_BYTES(n)) || posix_memalign(&s2, 64, MI_ACT_BYTES(n)))
                abort();
            mi_act a, b;
            mi_kernels_scalar.prep[t](x, n, s1, &a);
            f->prep[t](x, n, s2, &b);
            bad += memcmp(a.d, b.d, (size_t)(n / MI_QK) * sizeof(float)) != 0;
            bad += memcmp(a.s, b.s, (size_t)(n / MI_QK) * sizeof(float)) != 0;
            free(s1);
            free(s2);
            free(x);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* A NaN or an infinity in the activations gives a non-finite value for every row that reads
 * its block, in every family and dtype, and NaN scales in the same places as
 * the scalar family (family.h): never a plausible finite number. */
static void check_family_non_finite(const mi_kernel_family *f)
{
    int bad = 0;
    for (int t = 0; t < MI_N_DTYPES; t++) {
        int n = mi_dtype_kquant(t) ? 512 : 320, m = 5;
        test_tensor tt = make_tensor(t, m, n, 0);
        float *x = malloc((size_t)n * sizeof(float)), y[5];
        for (int v = 0; v < 3; v++) {
            fill_block_cases(x, n, 0);
            x[100] = v == 0 ? NAN : v == 1 ? INFINITY : -INFINITY;
            run_family(f, &tt.W, x, 0, m, y);
            for (int r = 0; r < m; r++)
                bad += isfinite(y[r]) != 0;
            if (mi_dtype_blocked(t) && f->prep[t]) {
                void *s1, *s2;
                if (posix_memalign(&s1, 64, MI_ACT_BYTES(n)) || posix_memalign(&s2, 64, MI_ACT_BYTES(n)))
                    abort();
                mi_act a, b;
                mi_kernels_scalar.prep[t](x, n, s1, &a);
                f->prep[t](x, n, s2, &b);
                bad += !isnan(a.d[3]) || !isnan(b.d[3]) || isnan(a.d[2]) || isnan(b.d[4]);
                bad += memcmp(a.d, b.d, (size_t)(n / MI_QK) * sizeof(float)) != 0;
                bad += memcmp(a.s, b.s, (size_t)(n / MI_QK) * sizeof(float)) != 0;
                free(s1);
                free(s2);
            }
        }
        free(x);
        free(tt.mem);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_families(void)
{
    int n;
    const mi_kernel_family *const *fs = mi_kernel_families(&n);
    for (int i = 0; i < n && i < 8; i++) {
        if (!fs[i]->available()) {
            printf("\n    %s: not supported by this CPU, skipped", fs[i]->name);
            continue;
        }
        check_family_prep(fs[i]);
        check_family_non_finite(fs[i]);
        check_family_kquant_edges(fs[i]);
        for (int t = 0; t < MI_N_DTYPES; t++)
            check_family_dtype(fs[i], i, t);
        /* how many of them the family computes itself (a NULL slot falls back
         * to the scalar kernels, which would pass unnoticed) */
        int own = 0;
        for (int t = 0; t < MI_N_DTYPES; t++)
            own += fs[i]->rows[t] != NULL;
        printf("\n    %s: %d dtypes against the scalar reference, %d its own kernels", fs[i]->name, g_checked[i],
               own);
    }
    for (size_t k = 0; k < sizeof g_shared / sizeof g_shared[0][0][0][0]; k++)
        free((&g_shared[0][0][0][0])[k].mem);
}

/* The scalar reference itself against an exact dot product of the
 * dequantized weights: what remains is the activations' int8 rounding, at
 * most half a step (d_x / 2) per element. */
static void test_scalar_vs_exact(void)
{
    int bad = 0;
    for (int t = 0; t < MI_N_DTYPES; t++) {
        int n = mi_dtype_kquant(t) ? 512 : 320, m = 9;
        test_tensor tt = make_tensor(t, m, n, 6);
        float *x = malloc((size_t)n * sizeof(float)), *w = malloc((size_t)n * sizeof(float)), y[9];
        fill_block_cases(x, n, 0);
        run_family(&mi_kernels_scalar, &tt.W, x, 0, m, y);
        for (int r = 0; r < m; r++) {
            mi_tensor_row_f32(&tt.W, r, w);
            double exact = 0, bound = 1e-5 * abs_dot(&tt.W, r, x);
            for (int i = 0; i < n; i++)
                exact += (double)w[i] * x[i];
            if (mi_dtype_blocked(t))
                for (int b = 0; b < n / MI_QK; b++) {
                    double amax = 0, sw = 0;
                    for (int i = b * MI_QK; i < (b + 1) * MI_QK; i++) {
                        amax = fmax(amax, fabs(x[i]));
                        sw += fabs(w[i]);
                    }
                    bound += sw * amax / 127.0 * 0.5;
                }
            bad += !(fabs(y[r] - exact) <= bound);
        }
        free(x);
        free(w);
        free(tt.mem);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("tensor", NULL, NULL);
    CU_add_test(s, "fp16 decode of all 65536 halves, encode(decode) identity", test_fp16_decode_all);
    CU_add_test(s, "fp16 encode: nearest, ties to even, overflow, NaN", test_fp16_encode_nearest);
    CU_add_test(s, "q8_0 / q4_0 / fp16 round trips within each format's bound", test_quantize_round_trip_bounds);
    CU_add_test(s, "non-finite input gives a NaN block scale", test_non_finite_gives_nan_scale);
    CU_add_test(s, "row sizes and dtype names", test_sizes);
    CU_add_test(s, "k-quant super-blocks: ggml's layouts by hand, round trip", test_kquant_layouts);
    CU_add_test(s, "k-quant encoders: RMSE within llama.cpp's + 2% on a Gaussian; NaN scales for non-finite input",
                test_kquant_error);
    CU_add_test(s, "tensor re-encoded in another dtype (computation scaling)", test_tensor_convert);
    CU_add_test(s, "pruned rows and columns packed in place, every dtype", test_tensor_keep);
    CU_add_test(s, "wire encodings: sizes, short last block, error bounds", test_wire_round_trip);
    CU_pSuite k = CU_add_suite("kernel families", NULL, NULL);
    CU_add_test(k, "scalar reference vs exact dot (activation rounding bound)", test_scalar_vs_exact);
    CU_add_test(k, "every available family vs the scalar reference, row subsets bit-identical", test_families);
    CU_add_test(k, "tile kernels: every row of T = 1..9 bit-identical to T = 1, every family and dtype",
                test_kernel_tiles);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    return fails != 0;
}
