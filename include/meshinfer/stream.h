/* STREAM-style triad a[i] = b[i] + s*c[i], the memory-bandwidth ceiling that
 * memory-bound decoding is compared against in the same run. */
#ifndef MESHINFER_STREAM_H
#define MESHINFER_STREAM_H

#include <stddef.h>

/* Best-of-reps triad bandwidth in GB/s (1e9 bytes/s, counting 12 bytes per
 * element as STREAM does) on three arrays of n floats, split over `threads`
 * threads (a run on N ranks or threads is compared with the bandwidth N
 * streams get together, not with one core's). */
double mi_stream_triad_gbs(size_t n, int reps, int threads);

#endif
