/* Kernel families: one implementation of the matrix-vector products per
 * instruction set (scalar reference, x86 AVX2/FMA, x86 AVX-512 VNNI, ARM
 * NEON, ARM NEON with dot products), chosen at start-up by CPU feature
 * (internal header; kernels.h is the public face).
 *
 * A product y = W x runs in two stages: prep turns x into the activation form
 * the family's kernel for W's dtype reads (once per product: for the block
 * types, x quantized to int8 in blocks of 32, because int8 dot products are
 * several times faster than dequantizing the weights), then rows computes
 * rows [r0, r1) of y. Threads split the rows.
 *
 * Rules every family keeps, which tests check:
 * - A row's result depends only on that row and the activations, never on
 *   r0, r1 or on which rows are computed together: a rank holding a subset
 *   of the rows (HeadSplit's head-level partitioning) gets bit-identical
 *   results to one device.
 * - Activation quantization is the same arithmetic in every family: per
 *   block amax, d = amax / 127 (fp32), id = d ? 1/d : 0, q = round-to-nearest-
 *   even(x * id); families may only reorder q within a block group.
 * - s[b] = (float)(-8 * sum of block b's q) * d[b] (q4_0's offset of 8:
 *   sum (w - 8) x = sum w x - 8 sum x); for the k-quants s[b] = (float)(sum
 *   of block b's q) * d[b], which the sub-block mins multiply. The k-quants
 *   use the same blocks of 32 as the others: a q4_K/q5_K sub-block is one
 *   activation block, a q6_K sub-block of 16 half of one.
 * - A block holding a NaN or an infinity gets d = NAN (the canonical quiet
 *   NaN) and q = 0, so the product is NaN as it would be in fp32: corrupt
 *   activations must not be rounded into plausible numbers, which the
 *   non-finite logit check downstream would then miss.
 * Results then differ from the scalar reference only by float summation
 * order.
 *
 * Tiles (products of T > 1 activation rows: prefill, batched decode): a
 * family's tile kernel computes weight rows [r0, r1) against nt activation
 * rows, reading and decoding each weight block once for all of them (the
 * weights stay in registers while the activation rows pass), up to the
 * family's tile height per dtype (MI_TILE_MAX at most) at a time. Each row's
 * value is made by the same operations in the same order as the family's row
 * kernel makes it (its own accumulators, the same lanes, the same reductions),
 * so it is bit-identical to the T = 1 product of that activation row,
 * whatever nt, r0, r1 or the rows computed with it: prefill equals decode,
 * and a batch of sequences equals each alone. The integer parts (exact in
 * int32) may be computed another way as long as each lane's sum is the same.
 * Each family shares its row and tile kernels' block arithmetic through
 * inline pieces (x86_avx2.h, x86_avx512.h, arm_neon.h: a k-quant super-block
 * decoded, then applied to one activation row; a row's tail blocks and
 * reductions), and the unit test holds every row of T = 1..9 (and of
 * matmul at T up to 67) to its T = 1 bits in every family and dtype.
 * Heights: scalar 8; AVX2 3 (fp, q8_0) or 4; AVX-512 8 (fp, q8_0, q4_0) or 4
 * (k-quants); NEON 4 (fp, k-quants) or 8 (q8_0, q4_0).
 *
 * Beware when changing a row kernel's arithmetic for its tile's sake: the
 * row kernel is what decoding runs, bound by streaming the weights from
 * memory, and layouts that made tiles faster decoded slower (x86_avx512.c,
 * x86_avx2.h say which). GCC contracts a multiply and an add written as
 * separate intrinsics into an FMA (C11 with GNU extensions,
 * -ffp-contract=fast), so both kernels must come from the same expressions;
 * the shared pieces make sure of it. */
#ifndef MESHINFER_KERNEL_FAMILY_H
#define MESHINFER_KERNEL_FAMILY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "meshinfer/tensor.h"

/* Prepared activations of one input vector of n elements. */
typedef struct {
    int n;
    const float *x;    /* the fp32 input (fp32 and fp16 weights read it directly) */
    const int8_t *q;   /* [n] int8 values, in the family's order for the weight dtype */
    const float *d;    /* [n/32] block scales */
    const float *s;    /* [n/32] q4_0 offset terms or k-quant block sums (see above) */
} mi_act;

/* Scratch bytes a prep may use for n elements (every family fits). */
#define MI_ACT_BYTES(n) ((size_t)(n) + 2 * 4 * ((size_t)(n) / MI_QK) + 128)

/* The layout every family's prep uses in its scratch: scales d[n/32] and
 * offset terms s[n/32], then the n int8 values at a 64-byte boundary; a is
 * set to point at them (and at x). */
static inline void mi_act_layout(void *scratch, const float *x, int n, mi_act *a, float **d, float **s, int8_t **q)
{
    int nb = n / MI_QK;
    *d = (float *)scratch;
    *s = *d + nb;
    *q = (int8_t *)(((uintptr_t)(*s + nb) + 63) & ~(uintptr_t)63);
    a->n = n;
    a->x = x;
    a->q = *q;
    a->d = *d;
    a->s = *s;
}

/* Fill a from x; scratch holds MI_ACT_BYTES(n) bytes, 64-byte aligned. */
typedef void (*mi_prep_fn)(const float *x, int n, void *scratch, mi_act *a);
/* y[r - r0] (+)= dot(row r of W, x) for r in [r0, r1). */
typedef void (*mi_rows_fn)(float *y, const mi_tensor *W, int r0, int r1, const mi_act *a, int add);
/* For t < nt and r in [r0, r1): y[t * ldy + r - r0] (+)= dot(row r of W, a[t]),
 * bit for bit what rows(y + t * ldy, W, r0, r1, &a[t], add) writes; any
 * nt >= 1 (the kernel goes through them in groups of its tile height). */
typedef void (*mi_tile_fn)(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt,
                           int add);

/* The most activation rows any family's tile kernel holds at once. */
#define MI_TILE_MAX 8

/* The family's tile entry point NAME (an mi_tile_fn) over KERNEL(y, ldy, W,
 * r0, r1, a, add, n): NT (at most MI_TILE_MAX) activation rows at a time,
 * then one group of the rest, n a constant in each call so that the kernel's
 * loops over rows unroll and its arrays may be sized by NT. ATTR: the
 * function's target attribute, or nothing. */
#define MI_DEFINE_TILE(NAME, ATTR, KERNEL, NT)                                                               \
    _Static_assert((NT) >= 1 && (NT) <= MI_TILE_MAX, "tile height");                                         \
    ATTR void NAME(float *y, int ldy, const mi_tensor *W, int r0, int r1, const mi_act *a, int nt, int add)  \
    {                                                                                                        \
        for (int t0 = 0; t0 < nt; t0 += (NT)) {                                                              \
            float *yt = y + (size_t)t0 * ldy;                                                                \
            const mi_act *at = a + t0;                                                                       \
            switch (nt - t0 < (NT) ? nt - t0 : (NT)) {                                                       \
            case 1: KERNEL(yt, ldy, W, r0, r1, at, add, 1); break;                                           \
            case 2: if ((NT) >= 2) KERNEL(yt, ldy, W, r0, r1, at, add, 2); break;                            \
            case 3: if ((NT) >= 3) KERNEL(yt, ldy, W, r0, r1, at, add, 3); break;                            \
            case 4: if ((NT) >= 4) KERNEL(yt, ldy, W, r0, r1, at, add, 4); break;                            \
            case 5: if ((NT) >= 5) KERNEL(yt, ldy, W, r0, r1, at, add, 5); break;                            \
            case 6: if ((NT) >= 6) KERNEL(yt, ldy, W, r0, r1, at, add, 6); break;                            \
            case 7: if ((NT) >= 7) KERNEL(yt, ldy, W, r0, r1, at, add, 7); break;                            \
            default: if ((NT) >= 8) KERNEL(yt, ldy, W, r0, r1, at, add, 8); break;                           \
            }                                                                                                \
        }                                                                                                    \
    }

/* y (+)= v: a tile's store, as the row kernels' y[r - r0] = add ? ... : v. */
static inline void mi_tile_put(float *y, float v, int add)
{
    *y = add ? *y + v : v;
}

typedef struct {
    const char *name;               /* "scalar", "avx2", "avx512", "neon", "neon-dotprod" */
    int (*available)(void);         /* 1 if this CPU runs it */
    mi_prep_fn prep[MI_N_DTYPES];   /* NULL: a->x only (fp32, fp16 weights) */
    mi_rows_fn rows[MI_N_DTYPES];
    mi_tile_fn tile[MI_N_DTYPES];   /* NULL: rows once per activation row */
} mi_kernel_family;

/* Every family compiled into this build, best last; the scalar one first. */
const mi_kernel_family *const *mi_kernel_families(int *n);
/* The family in use (the best available unless mi_kernels_use chose one). */
const mi_kernel_family *mi_kernel_active(void);

/* The scalar family's activation quantization of one block of 32 values
 * (the rule above); families share it for their tails. Returns d. */
float mi_act_quantize_block(const float *x, int8_t *q);

/* q4_K/q5_K's 12 bytes of packed 6-bit scales and mins (the super-block's
 * bytes 4-15, see kquants.c) unpacked eight at a time in 64-bit words: byte j
 * of *sc and *m (little-endian, as x86-64 and AArch64 are) is sub-block j's
 * scale and min. General-purpose registers do it in a few operations, which
 * leaves the vector units to the products. */
static inline void mi_kq_scales_mins(const uint8_t *p, uint64_t *sc, uint64_t *m)
{
    uint64_t u01;
    uint32_t u2;
    memcpy(&u01, p, 8);
    memcpy(&u2, p + 8, 4);
    /* sub-blocks 0-3: the low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
     * 4-7: the nibbles of bytes 8-11, the top two bits from bits 6-7 of
     * bytes 0-3 (scales) and 4-7 (mins) */
    uint64_t lo = u01 & 0x3f3f3f3f3f3f3f3full;
    uint64_t hi = (((uint64_t)u2 | (uint64_t)(u2 >> 4) << 32) & 0x0f0f0f0f0f0f0f0full) |
                  ((u01 >> 2) & 0x3030303030303030ull);
    /* lo and hi hold four scales then four mins each */
    *sc = (lo & 0xffffffffull) | hi << 32;
    *m = (lo >> 32) | (hi & 0xffffffff00000000ull);
}

extern const mi_kernel_family mi_kernels_scalar;
#if defined(__x86_64__) || defined(__i386__)
extern const mi_kernel_family mi_kernels_avx2;
extern const mi_kernel_family mi_kernels_avx512;
#endif
#if defined(__aarch64__)
extern const mi_kernel_family mi_kernels_neon;
extern const mi_kernel_family mi_kernels_neon_dot;
#endif

#endif
