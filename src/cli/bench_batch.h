/* bench --batch (bench_batch.c). */
#ifndef MESHINFER_BENCH_BATCH_H
#define MESHINFER_BENCH_BATCH_H

#include "meshinfer/control.h"

/* Rank 0: the text whose prefixes are the sequences' prompts, encoded with
 * BOS and cut to steps / 2 tokens (malloc'd, *n tokens). */
int *bench_batch_story(mi_session *ss, long steps, int *n);

/* Rank 0, with the workers serving: B sequences of steps positions (the
 * longest prompt, story's n_story tokens, included) alone and batched
 * (decode passes in `micro` pipelined micro-batches; 0: the batch's default);
 * then stops the workers and gathers every rank's counters of the last
 * batched round (collective: the workers call mi_runtime_metrics after
 * serving); prints the table or one JSON object; mi_fatal when a sequence's
 * tokens differ between the two. */
void bench_batch(mi_session *ss, const int *story, int n_story, int B, int micro, long steps, int repeat, int json);

#endif
