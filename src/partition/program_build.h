/* Helpers the schemes share to fill mi_programs (internal to partition/). */
#ifndef MESHINFER_PROGRAM_BUILD_H
#define MESHINFER_PROGRAM_BUILD_H

#include "meshinfer/partition.h"

/* Empty programs for n_ranks ranks, both phases. */
void pb_init(mi_programs *p, int n_ranks, int wire);
/* Append op to rank's program of phase ph. */
void pb_op(mi_programs *p, int ph, int rank, mi_op op);
/* A compute op writing columns [c0, c0+n) of buf. */
mi_op pb_compute(int kind, int layer, int buf, int c0, int n);
/* The communicator of these world ranks (ascending), made once. */
int pb_comm(mi_programs *p, const int *members, int n);
/* A new exchange on communicator comm; its send sets start empty. */
int pb_exchange(mi_programs *p, int kind, int comm, int buf, int root, int layer);
/* Append columns [c0, c0+len) to s (ascending; adjacent runs merge). */
void pb_cols_add(mi_colset *s, int c0, int len);

int pb_compile_headlevel(const mi_plan *plan, mi_programs *p, char *err);
int pb_compile_somegather(const mi_plan *plan, mi_programs *p, char *err);

#endif
