/* The cost model: time, bytes and memory of a plan's programs on a cluster,
 * predicted without running them (no MPI), for the planners, `meshinfer
 * plan` and the simulator.
 *
 * Units: seconds, bytes, bytes/second. */
#ifndef MESHINFER_COST_H
#define MESHINFER_COST_H

#include <stddef.h>

#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

typedef struct {
    double token_s;                /* predicted time of the pass (one decode step: a token) */
    double busy_s[MI_MAX_RANKS];   /* compute time per rank per token */
    double bytes_per_token;        /* total payload moved */
    size_t weight_bytes[MI_MAX_RANKS];
    size_t kv_bytes[MI_MAX_RANKS];
} mi_prediction;

/* Seconds a compute op of `rank`'s programs takes at T positions after ctx
 * cached ones, on the device's compute model (Voltron §4.2.1's regression,
 * plan.h mi_device: weights of each dtype over T positions, attention over
 * the cached and new positions, elementwise work per output column and
 * position, a fixed cost per op; logits for the last position only).
 * Communication ops cost 0 here (see mi_predict_pass). */
double mi_op_compute_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int rank, int T, int ctx);

/* Predict one forward pass of phase ph (mi_phase) over T positions at
 * context position ctx by running every rank's program on a clock per rank,
 * message by message, as the runtime sends them (HeadSplit's cost model, on
 * programs): the command reaches each worker one link latency after rank 0
 * sends it; a compute op advances its rank's clock (mi_op_compute_s); sends
 * are eager (the sender goes on) and a receiver waits for latency + T *
 * bytes per position / bandwidth of that link after the sender reached the
 * op: broadcasts from the root to each member directly, puts after the
 * root's post has arrived, gathers at the root, allgathers and one-round
 * reductions every member from every other (two-round reductions twice).
 * The pass's time (token_s) is when rank 0 has its logits, or later if a
 * worker would still be busy when its next command arrives. */
void mi_predict_pass(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ph, int T, int ctx,
                     mi_prediction *out);

/* Seconds of one decode pass of a batch of B sequences (batch.h), one row
 * each at about context position ctx: the program a pass of B rows runs
 * (prefill's; decode's for B = 1), every row's logits. B / it is the
 * aggregate tokens/s. Modelled as one pass: pipelined micro-batches
 * (runtime.h) are not, so for layer-wise it is an upper bound. */
double mi_predict_batch_step(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, int B);

/* One decode step at context position ctx: mi_predict_pass(decode, T = 1). */
void mi_predict(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, mi_prediction *out);

/* Seconds to the first token (TTFT, Voltron): the prefill program over a
 * prompt of n_prompt tokens in passes of at most `chunk` positions, as
 * mi_runtime_prefill runs it. */
double mi_predict_ttft(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int n_prompt, int chunk);

/* Mean seconds per output token (TPOT, Voltron) over n_steps decode steps
 * from context position ctx0. */
double mi_predict_tpot(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx0, int n_steps);

/* Seconds to re-place from plan `from` to plan `to` with n_pos positions
 * cached (HeadSplit "Memory needs active management"'s move, used for seed
 * 003's phase switch), as the runtime does it (migrate.c): per rank, the weights it does
 * not already hold in the same layout read from storage at cl->storage_bw,
 * and the KV heads it newly owns received from their old owners, and the
 * communicators and windows of the new placement's exchanges it is a member
 * of rebuilt (cl->comm_setup_s and win_setup_s each, as calibrate measures
 * them; not counted when 0); the slowest rank's time. */
double mi_plan_switch_s(const mi_plan *from, const mi_plan *to, const mi_cluster *cl, int n_pos);

/* ------------------------------------------------------------ calibration
 *
 * Voltron §4.2.1: computation time from "a regression model based on ...
 * device type, layer type, precision, input token length, and the number of
 * tokens accumulated in the KV cache", measured on the device itself. No MPI: `meshinfer calibrate` runs it on every rank. */

typedef struct {
    int dim, hidden_dim;  /* a layer's matrices measured: wq [q_dim, dim], wk and wv [kv_dim, dim], */
    int q_dim, kv_dim;    /* wo [dim, q_dim], w1 and w3 [hidden_dim, dim], w2 [dim, hidden_dim] */
    int head_dim, group;  /* attention: query heads per KV head, head size */
    double min_seconds;   /* per measurement (the median of 5 runs of a fifth each) */
    double work_bytes;    /* weights one pass streams, at least (memory, not a cache) */
    int cpu_clock;        /* 1: timed by the thread's CPU clock (a device under a CPU quota: its
                             unthrottled speed; one compute thread); 0: the wall clock */
} mi_calib_options;

/* Shapes of model c (NULL: stories15M's; every width rounded up to whole
 * blocks of 32, so any model's shape can be measured), 0.05 s per
 * measurement, 48 MB. */
void mi_calib_defaults(mi_calib_options *o, const mi_config *c);

/* Measure this device's compute model into d (plan.h mi_device: pass_s and
 * pos_s per dtype from one layer's matrix products (copies of it up to
 * work_bytes) over T = 1, 4, 16, 64 positions,
 * kv_s from attention over 512 cached positions, op_s from a 32x32 product;
 * calibrated = 1; the rest of d untouched). Takes about 20 * min_seconds
 * plus the weights' set-up. Returns 0, or -1 with err for a shape whose
 * columns are not whole blocks of 32. */
int mi_calibrate_compute(const mi_calib_options *o, mi_device *d, char *err);

/* One-way link delays on a decoded token's critical path under the programs
 * (mi_predict with free compute and bandwidth and one unit of latency per
 * link): the minimum the programs' data dependencies allow, to hold against
 * what a testbed measures (TPOT's growth per millisecond of link delay). */
double mi_predict_delays(const mi_plan *plan, const mi_programs *p);

/* ------------------------------------------------------------ energy
 *
 * HeadSplit (energy and energy-delay product per run, from power drawn idle
 * and active) and Voltron §4.4 (spend the latency margin under a TPOT
 * constraint on lower DVFS levels of devices that are not critical). The
 * power model is plan.h mi_device's: idle watts always, plus active - idle
 * scaled by f^3 while computing at level f. No MPI. */

/* Watts device d draws while computing at DVFS level f (fraction of its top
 * frequency, in (0, 1]). */
double mi_device_power_w(const mi_device *d, double f);

/* A copy of cl (its own device array; links shared with cl, so free it with
 * mi_cluster_at_free, not mi_cluster_free) whose device i computes at level
 * freq[i]: every compute coefficient divided by freq[i]. freq NULL: all 1. */
void mi_cluster_at(const mi_cluster *cl, const double *freq, mi_cluster *out);
void mi_cluster_at_free(mi_cluster *out);

/* Joules per decoded token at context position ctx with device i at level
 * freq[i] (NULL: top): every device draws idle power for the whole step
 * (token_s) and active - idle (at its level) while it computes (busy_s of
 * mi_predict at that level). Also the step's time into *token_s and each
 * rank's joules into per_rank_j[n_devices] (either may be NULL). */
double mi_predict_energy(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const double *freq, int ctx,
                         double *token_s, double *per_rank_j);

typedef struct {
    double freq[MI_MAX_RANKS];  /* the chosen level of each device (fraction of its top frequency) */
    double token_s, joules;     /* predicted TPOT and energy per token at those levels */
    double top_token_s, top_joules; /* ... with every device at its top level */
    int evaluated;              /* predictions made */
    double seconds;             /* the search's time */
} mi_energy_result;

/* Voltron §4.4: from every device at its top level, lower one device by one
 * DVFS level at a time, always the step that saves the most joules per token,
 * while the predicted TPOT stays at most tpot_limit_s; devices on the
 * critical path keep their level because lowering them breaks the limit.
 * Returns 0 with *out (levels all top when the limit leaves no margin), or
 * -1 with err when even the top levels miss the limit (naming the predicted
 * TPOT). */
int mi_energy_plan(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, double tpot_limit_s,
                   mi_energy_result *out, char *err);

#endif
