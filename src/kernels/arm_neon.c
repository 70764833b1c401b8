/* ARM NEON families: placeholders until implemented (see family.h). */
#include "family.h"

static int available(void)
{
    return 0;
}

const mi_kernel_family mi_kernels_neon = {"neon", available, {NULL, NULL, NULL, NULL}, {NULL, NULL, NULL, NULL}};
const mi_kernel_family mi_kernels_neon_dot = {"neon-dotprod", available, {NULL, NULL, NULL, NULL},
                                              {NULL, NULL, NULL, NULL}};
