/* IEEE binary16 conversion (see tensor.h). */
#include <string.h>

#include "meshinfer/tensor.h"

uint16_t mi_fp16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00u; /* NaN */
    if (ax >= 0x47800000u)
        return sign | 0x7c00u; /* 2^16 and above, and infinity */
    int e = (int)(ax >> 23) - 127;
    uint32_t m = ax & 0x7fffffu;
    if (e >= -14) {
        /* normal: keep 10 of 23 mantissa bits; a carry out of the mantissa
         * correctly bumps the exponent (and 65520.. rounds up to infinity) */
        uint32_t h = ((uint32_t)(e + 15) << 10) | (m >> 13), rest = m & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
            h++;
        return sign | (uint16_t)h;
    }
    if (e < -25)
        return sign;
    /* subnormal: the value in units of 2^-24, rounded to nearest even */
    m |= 0x800000u;
    int shift = -e - 1;
    uint32_t h = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u)))
        h++;
    return sign | (uint16_t)h;
}

float mi_f32_from_fp16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        float v = (float)m * 0x1p-24f; /* zero or subnormal: exact in fp32 */
        memcpy(&x, &v, sizeof x);
        x |= sign;
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

