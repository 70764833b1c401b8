/* What the controller's files share (internal to src/control/). */
#ifndef MESHINFER_CONTROL_INTERNAL_H
#define MESHINFER_CONTROL_INTERNAL_H

#include "meshinfer/control.h"

/* Rank 0: each rank's weight bytes and KV bytes per position under the plan
 * in force (mem_w, mem_kv), which the memory check holds every pass to. */
void session_memory_of_plan(mi_session *ss);

/* The fraction of exchange kind x's columns that a somegather plan's send
 * lists leave out (0 without send lists). */
double session_unsent_fraction(const mi_plan *plan, int x);

#endif
