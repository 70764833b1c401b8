/* The k-quants' row encoders and decoders, behind mi_quantize_row and
 * mi_dequantize_row (internal to the tensor library; tensor.h documents the
 * layouts and mi_kquant_unpack). */
#ifndef MESHINFER_KQUANTS_H
#define MESHINFER_KQUANTS_H

#include "meshinfer/tensor.h"

/* One row of n values (a multiple of MI_QK_K) of k-quant t, q holding
 * mi_dtype_q_row_bytes(t, n) bytes. */
void mi_kquant_quantize_row(int t, const float *x, int n, void *q);
void mi_kquant_dequantize_row(int t, const void *q, int n, float *out);

#endif
