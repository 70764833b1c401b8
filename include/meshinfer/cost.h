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
 * cached ones, on the device's compute model (seed 003 4.2.1's regression,
 * plan.h mi_device: weights of each dtype over T positions, attention over
 * the cached and new positions, elementwise work per output column and
 * position, a fixed cost per op; logits for the last position only).
 * Communication ops cost 0 here (see mi_predict_pass). */
double mi_op_compute_s(const mi_plan *plan, const mi_op *op, const mi_cluster *cl, int rank, int T, int ctx);

/* Predict one forward pass of phase ph (mi_phase) over T positions at
 * context position ctx by running every rank's program on a clock per rank,
 * message by message, as the runtime sends them (seed 000's cost model, on
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

/* One decode step at context position ctx: mi_predict_pass(decode, T = 1). */
void mi_predict(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, mi_prediction *out);

/* Seconds to the first token (TTFT, seed 003): the prefill program over a
 * prompt of n_prompt tokens in passes of at most `chunk` positions, as
 * mi_runtime_prefill runs it. */
double mi_predict_ttft(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int n_prompt, int chunk);

/* Mean seconds per output token (TPOT, seed 003) over n_steps decode steps
 * from context position ctx0. */
double mi_predict_tpot(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx0, int n_steps);

/* ------------------------------------------------- comparing schemes */

/* One scheme's plan and prediction (mi_plan_compare). */
typedef struct {
    mi_planner planner;
    int fits;              /* 0: the planner failed; why says how */
    char why[512];
    int phases_differ;     /* hybrid: its prefill placement differs from its decode one and pays for
                              the re-placements (mi_plan_phases_pay; else the decode one serves both) */
    double ttft_s;         /* predicted TTFT of the prompt (prefill plan) */
    double tpot_s;         /* predicted mean TPOT over the steps (decode plan) */
    double total_s;        /* ttft_s + n_steps * tpot_s (+ the re-placements when phases differ):
                              what the request is judged by */
    double bytes_per_token;/* decode payload per token, all ranks */
    double plan_ms;        /* planner time (both phases) */
    double prune;          /* somegather: the pruning ratio it was planned with (base->prune) */
} mi_compare_row;
#define MI_COMPARE_MAX 8

/* The request a plan is judged by (issue 10 item 6), fitted to a context of
 * seq_len positions: a prompt of *n_prompt tokens (<= 0: 32, or a quarter of
 * a shorter context) and *n_steps decoded tokens (<= 0: 128), each cut to
 * what the context holds. */
void mi_request_defaults(int seq_len, int *n_prompt, int *n_steps);

/* Issue 10 item 6 (`plan --planner all`, `--planner auto`): plan model c on
 * cluster cl with each scheme worth choosing (layerwise, greedy, tp,
 * somegather, at base->prune: its best ratio within a perplexity budget,
 * mi_sg_quality_best; hybrid with both phases), options from base (planner,
 * controller_works and speculation set per scheme), and predict a request
 * of n_prompt prompt tokens (prefill passes of `chunk`) and n_steps decoded
 * tokens. Fills rows[0..*n_rows) (MI_COMPARE_MAX room) and returns the index
 * of the fastest that fits by total_s, or -1 when none fits. */
int mi_plan_compare(const mi_config *c, const mi_cluster *cl, const mi_plan_options *base, int n_prompt,
                    int n_steps, int chunk, mi_compare_row *rows, int *n_rows);

/* Seconds to re-place from plan `from` to plan `to` with n_pos positions
 * cached (seed 000 "Memory needs active management"'s move, used for seed
 * 003's phase switch), as the runtime does it (migrate.c): per rank, the weights it does
 * not already hold in the same layout read from storage at cl->storage_bw,
 * and the KV heads it newly owns received from their old owners; the
 * slowest rank's time. */
double mi_plan_switch_s(const mi_plan *from, const mi_plan *to, const mi_cluster *cl, int n_pos);

/* Seed 003's phases placed apart pay when the prompt's predicted TTFT gain
 * (decode placement's TTFT minus the prefill placement's) exceeds the two
 * re-placements per request: to the decode placement after the prompt
 * (n_prompt positions of KV cache) and back before the next prompt. Returns
 * 1 if it pays; the two figures in *gain_s, *switch_s (may be NULL). */
int mi_plan_phases_pay(const mi_plan *dec, const mi_programs *pd, const mi_plan *pre, const mi_programs *pp,
                       const mi_cluster *cl, int n_prompt, int chunk, double *gain_s, double *switch_s);

/* ------------------------------------------------ mixed precision (seed 003 4.2.2) */

#define MI_MAX_PRUNE_SHARDS 64 /* FFN shards per layer an importance file can rank */

/* A model's importance side file (`meshinfer importance`): per layer, the
 * rise in perplexity when its seven matrices are lowered to q8_0 and to q4_0,
 * and (when measured) when each FFN shard -- ffn_shard consecutive hidden
 * channels: rows of w1 and w3, columns of w2 -- is pruned (seed 003 4.3.1
 * "shard-wise pruning"; the seed scores channels one by one and sums them per
 * unit, we score the unit whole). */
typedef struct {
    int n_layers;
    double rise[MI_MAX_LAYERS][2]; /* [layer][0: q8_0, 1: q4_0], perplexity points */
    int ffn_shard;                 /* hidden channels per shard (0: pruning not measured) */
    int n_shards;                  /* hidden_dim / ffn_shard, at most MI_MAX_PRUNE_SHARDS */
    float prune[MI_MAX_LAYERS][MI_MAX_PRUNE_SHARDS]; /* [layer][shard]: rise when pruned, perplexity points */
} mi_importance;

/* Load path for model c. Returns 0, or -1 with one line in err: unreadable,
 * not an importance file, or one for another model (name, layers, dim or
 * hidden_dim differ: "importance file F is for X ... but the model is Y"),
 * or pruning entries that do not fit the model (ffn_shard not a multiple of
 * 32 dividing hidden_dim into 2 to MI_MAX_PRUNE_SHARDS, a layer's list of
 * another length), a JSON syntax error (its position), an unknown or
 * duplicate key, a rise outside +-1e6, or one measured on synthetic weights
 * for a model with real ones or the reverse ("synthetic", optional). Pruning
 * entries are optional. */
int mi_importance_load(const char *path, const mi_config *c, mi_importance *imp, char *err);

/* Seed 003's shard-wise pruning at level k: every layer loses the same
 * number k of FFN shards, each layer its k least important (ties: the lower
 * index goes). keep (may be NULL) receives per layer the hidden channels kept,
 * ascending: n_layers rows of hidden_dim - k * ffn_shard indices into the
 * unpruned layer. Returns the summed rise of the pruned shards (the expected
 * perplexity rise, additive as the precision search's), or -1 when imp has no
 * pruning measurements or k is outside 0 .. n_shards - 1. */
double mi_prune_keep(const mi_importance *imp, int hidden_dim, int k, int *keep);

typedef struct {
    double ttft_s, tpot_s;    /* targets (0: none) */
    int n_prompt, n_steps;    /* the request they are judged on */
    int chunk;                /* prefill pass */
} mi_precision_query;

typedef struct {
    mi_config cfg;            /* the chosen weight dtypes */
    int steps;                /* layer downgrades applied (of up to 2 x n_layers) */
    int evaluated;            /* configurations planned and predicted */
    double ttft_s, tpot_s;    /* predicted with the chosen dtypes */
    int prune_k;              /* FFN shards pruned from every layer (0: none) */
    int ffn_shard;            /* ... of this many hidden channels each */
    double rise;              /* sum of the layers' importances: the expected perplexity rise (additive) */
    double seconds;           /* the search's time */
    char spec[8192];          /* the dtypes as `meshinfer quantize --layer-dtype` takes them */
} mi_precision_result;

/* Seed 003's search: from model c's dtypes down the chain (every layer to
 * q8_0, least important first, then to q4_0 in the order of what that step
 * adds, then -- when imp holds pruning measurements -- pruning 1, 2, ... FFN
 * shards from every layer, up to half of them: seed 003 4.3.1 prunes only
 * when precision is not enough), binary search for the fewest downgrades with
 * which the planner of `po` fits every device's budget and the predicted TTFT
 * and TPOT meet q's targets. A pruned configuration has a smaller hidden_dim
 * (out->cfg; `meshinfer quantize --prune-ffn` writes it). Returns 0 with
 * *out, or -1 with err naming the best reachable (the end of the chain) when
 * nothing meets the targets, or that nothing fits. */
int mi_precision_search(const mi_config *c, const mi_cluster *cl, const mi_plan_options *po, const mi_importance *imp,
                        const mi_precision_query *q, mi_precision_result *out, char *err);

/* ------------------------------------------------------------ calibration
 *
 * Seed 003 4.2.1: computation time from "a regression model based on ...
 * device type, layer type, precision, input token length, and the number of
 * tokens accumulated in the KV cache", measured on the device itself (issue
 * 10 item 1). No MPI: `meshinfer calibrate` runs it on every rank. */

typedef struct {
    int dim, hidden_dim;  /* a layer's matrices measured: wq [q_dim, dim], wk and wv [kv_dim, dim], */
    int q_dim, kv_dim;    /* wo [dim, q_dim], w1 and w3 [hidden_dim, dim], w2 [dim, hidden_dim] */
    int head_dim, group;  /* attention: query heads per KV head, head size */
    double min_seconds;   /* per measurement (the median of 5 runs of a fifth each) */
    double work_bytes;    /* weights one pass streams, at least (memory, not a cache) */
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

/* ------------------------------------------------------------ energy
 *
 * Seed 000 (energy and energy-delay product per run, from power drawn idle
 * and active) and seed 003 4.4 (spend the latency margin under a TPOT
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

/* Seed 003 4.4: from every device at its top level, lower one device by one
 * DVFS level at a time, always the step that saves the most joules per token,
 * while the predicted TPOT stays at most tpot_limit_s; devices on the
 * critical path keep their level because lowering them breaks the limit.
 * Returns 0 with *out (levels all top when the limit leaves no margin), or
 * -1 with err when even the top levels miss the limit (naming the predicted
 * TPOT). */
int mi_energy_plan(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, int ctx, double tpot_limit_s,
                   mi_energy_result *out, char *err);

#endif
