/* What the two files of the kernel unit test share (test_kernels.c, test_kernel_tiles.c). */
#ifndef MESHINFER_TEST_KERNELS_H
#define MESHINFER_TEST_KERNELS_H

#include "meshinfer/tensor.h"

/* Sum over row r of |w * x| (dequantized weights; with q4_0's offset and the
 * k-quants' mins): the scale of a product's rounding error. */
double abs_dot(const mi_tensor *W, int r, const float *x);

/* The tile kernels of every family this CPU runs against their row kernels
 * (test_kernel_tiles.c). */
void test_kernel_tiles(void);

#endif
