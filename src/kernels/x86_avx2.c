/* x86-64 AVX2/FMA/F16C family: placeholder until implemented (see family.h). */
#include "family.h"

static int available(void)
{
    return 0;
}

const mi_kernel_family mi_kernels_avx2 = {"avx2", available, {NULL, NULL, NULL, NULL}, {NULL, NULL, NULL, NULL}};
