/* What the MPI test's files share (test_distributed.c, vocab.c): the
 * counters and CHECK, the run's shape, one device's reference run and the
 * bytes check at the MPI layer. Test code only. */
#ifndef MESHINFER_MPI_DISTRIBUTED_H
#define MESHINFER_MPI_DISTRIBUTED_H

#include <stdio.h>

#include "meshinfer/config.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

extern int g_rank, g_size, g_pass, g_fail;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (cond) {                                                             \
            g_pass++;                                                           \
        } else {                                                                \
            g_fail++;                                                           \
            fprintf(stderr, "FAIL (rank %d, %s:%d): ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

enum { N_PROMPT = 9, N_DECODE = 12, CHUNK = 4 };

typedef struct {
    int tokens[N_PROMPT + N_DECODE + 1];
    float *logits; /* [(1 + N_DECODE) * vocab]: after the prompt, then after each decode step */
} run_result;

/* One device's greedy run of prompt[N_PROMPT] (rank 0); masked: NULL, or a
 * somegather plan whose unsent columns the model loses. */
void reference(const char *path, run_result *r, const int *prompt, const mi_plan *masked);

/* Collective: the bytes MPI was handed since the runtime's metrics reset
 * equal, for every pair of ranks, steps times programs p's decode
 * prediction; returns (rank 0) the bytes per step. */
double check_mpi_bytes(const char *what, const mi_programs *p, int steps);

/* vocab.c: the split vocabulary and the logit candidates on model c (path),
 * against one device's greedy run ref (rank 0); real: the model is
 * stories15M (vocabulary 32000), where the candidates' bytes are checked
 * against the whole logits'. Collective. */
void check_vocab(const char *path, const mi_config *c, const int *prompt, const run_result *ref, int real);

#endif
