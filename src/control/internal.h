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

/* Rank 0: the model file to open for path. A GGUF file or a Hugging Face
 * folder is converted once (import.h, context ctx; 0: the model's, at most
 * 4096) into the model cache (MESHINFER_CACHE, else ./models/cache when it
 * exists, else ~/.cache/meshinfer), named by the source's path, time and ctx,
 * and that file is used; anything else is path itself. Writes the path into
 * out[n]. Returns 0, or -1 with err set (the conversion failed). */
int session_resolve_model(const char *path, int ctx, char *out, size_t n, char *err);

#endif
