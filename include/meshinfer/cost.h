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
    double token_s;                /* predicted time of one decode step */
    double busy_s[MI_MAX_RANKS];   /* compute time per rank per token */
    double bytes_per_token;        /* total payload moved */
    size_t weight_bytes[MI_MAX_RANKS];
    size_t kv_bytes[MI_MAX_RANKS];
} mi_prediction;

/* Seconds op (of `rank`'s decode program) computes at context position ctx:
 * the bytes it reads (weights in their dtypes, the KV cache it attends over)
 * over the device's weight streaming rate mem_bw * speed. Communication ops
 * cost 0 here (see mi_predict). */
double mi_op_compute_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int rank, int ctx);

/* Predict one decode step at context position ctx by running every rank's
 * decode program on a clock per rank, message by message, as the runtime
 * sends them (seed 000's cost model, on programs): the command reaches each
 * worker one link latency after rank 0 sends it; a compute op advances its
 * rank's clock (mi_op_compute_s); sends are eager (the sender goes on) and a
 * receiver waits for latency + bytes / bandwidth after the sender reached the
 * op: broadcasts from the root to each member directly, puts after the
 * root's post has arrived, gathers at the root, allgathers and one-round
 * reductions every member from every other (two-round reductions twice).
 * The token's time is when rank 0 has its logits, or later if a worker would
 * still be busy when its next command arrives. */
void mi_predict(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, mi_prediction *out);

/* One-way link delays on a decoded token's critical path under the programs
 * (mi_predict with free compute and bandwidth and one unit of latency per
 * link): the minimum the programs' data dependencies allow, to hold against
 * what a testbed measures (TPOT's growth per millisecond of link delay). */
double mi_predict_delays(const mi_plan *plan, const mi_programs *p);

/* ------------------------------------------------ memory and traffic model
 *
 * Seed 002 Q1 (section 5.2.1, Fig. 4): per device, the weights it stores
 * (the seed's flash), the KV cache and activations it holds for N positions
 * (its RAM) and what it sends per decoded token, under somegather (sections
 * 4.2, 4.3) and the three baselines the seed compares it with. Pure
 * arithmetic on a config (any shape, D = 1..MI_MAX_RANKS), no MPI; what each
 * figure counts is stated in src/cost/memory.c. Units: bytes. */

typedef enum {
    MI_MEM_SOMEGATHER = 0,   /* seed 002: dim/D residual columns, n_heads/D heads, hidden_dim/D FFN units
                                and vocab_size/D classifier rows per device; four allgathers per layer,
                                each sending (1 - prune) of a device's columns, then a whole one and the
                                logits gathered at device 0 */
    MI_MEM_TOKEN_SPLIT,      /* hu2024edge: whole model on every device, N/D positions each; per layer
                                each device's K and V rows go to every other device */
    MI_MEM_TOKEN_SPLIT_4BIT, /* liu2025communication: the same, K and V exchanged and kept in 4-bit
                                blocks (q4_0 size: 18 bytes per 32 values); weights in the config's dtypes */
    MI_MEM_HEAD_SPLIT,       /* bochem2025distributed: weights/D as our tp planner splits them (device 0
                                also holds the embeddings), two allreduces of dim per layer (one round
                                per decoded token: every device's partial to every other) */
    MI_MEM_N_SCHEMES
} mi_mem_scheme;

/* "somegather", "token-split", "token-split-4bit", "head-split" ("?" otherwise). */
const char *mi_mem_scheme_name(int scheme);
/* The seed's name of the scheme: "seed 002", "hu2024edge", "liu2025communication",
 * "bochem2025distributed". */
const char *mi_mem_scheme_source(int scheme);

typedef struct {
    int scheme;       /* mi_mem_scheme */
    int n_devices;    /* D, 1..MI_MAX_RANKS */
    double prune;     /* somegather's pruning ratio r in [0, 1); 0 for the other schemes */
    int wire;         /* dtype of activation messages: MI_F32, MI_F16 or MI_Q8_0 (mi_wire_row_bytes) */
    int n_pos;        /* N >= 1: positions whose KV cache and activations a device holds */
    int formula_only; /* head split: 1 = never use our compiled programs (to check the formula against them) */
} mi_mem_query;

/* One device's figures, bytes. */
typedef struct {
    double weight_bytes;        /* weights stored, in the config's dtypes (what our runtime loads) */
    double weight_needed_bytes; /* of those, what it ever multiplies with: somegather with r > 0 leaves out
                                   the input columns of wq/wk/wv, wo, w1/w3, w2 that other devices' pruned
                                   columns would feed (our runtime still stores them); = weight_bytes else */
    double kv_bytes;            /* K and V of its heads (token split: of all N positions) */
    double act_bytes;           /* residual share + widest step's input and output for N positions + logits */
    double ram_bytes;           /* weight_bytes + kv_bytes + act_bytes */
    double sent_bytes;          /* payload it sends per decoded token (the README's convention) */
    double recv_bytes;          /* payload delivered to it per decoded token */
} mi_mem_device;

typedef struct {
    int scheme, n_devices, wire, n_pos;
    double prune;
    int runnable;       /* our runtime runs this scheme on D ranks (mi_mem_runnable) */
    int from_programs;  /* head split: weights from mi_plan_rank_memory and traffic from the tp planner's
                           compiled programs, not the formula */
    mi_mem_device dev[MI_MAX_RANKS]; /* [n_devices] */
    mi_mem_device max;  /* the largest value of each field over the devices (ram_bytes: of the sums) */
    double moved_bytes; /* payload moved per decoded token, all devices (sum of sent_bytes) */
} mi_mem_model;

/* 1 when our runtime can run the scheme on D ranks: somegather when D
 * divides n_kv_heads (whole KV-head groups), head split when every rank of
 * the tp planner gets at least one (aligned) KV-head group; never for token
 * split (our runtime has no token-split scheme). */
int mi_mem_runnable(const mi_config *c, int scheme, int D);

/* Fill *m for model c and query q. Somegather is the formula alone; where
 * runnable and with prune 0 it equals the compiled programs (weights per
 * rank as mi_plan_rank_memory, bytes per rank as mi_programs_bytes of the
 * decode phase; the KV cache as mi_plan_rank_memory for n_pos positions).
 * Head split uses the tp planner's plan and programs where runnable (unless
 * formula_only), else the same formula over equal fractional shares.
 * Returns 0, or -1 with one line in err: an invalid config, a scheme, D,
 * ratio (outside [0, 1), or non-zero for a baseline), wire dtype or n_pos
 * out of range, or a tp plan that cannot be made. */
int mi_mem_model_make(const mi_config *c, const mi_mem_query *q, mi_mem_model *m, char *err);

#endif
