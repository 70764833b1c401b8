/* The planners: policy over plan data. Every placement planner (layer-wise,
 * round-robin, random, greedy, tensor parallel, somegather, hybrid), the
 * comparison behind `plan --planner all` and `--planner auto`, speculation's
 * choice of transitions, somegather's pruning choice, Voltron's precision
 * search, and CATS's memory and traffic model of the schemes.
 *
 * Layer: above plan, partition and cost (the hybrid planner, the comparison
 * and the precision search judge candidate plans by compiling their programs
 * and predicting them); below the runtime. No MPI.
 * Units: seconds, bytes, bytes/second unless a name says otherwise. */
#ifndef MESHINFER_PLANNER_H
#define MESHINFER_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

/* ------------------------------------------------------------ placement */

/* CATS "communication-aware pruning": fill the send lists of a somegather
 * plan from the weights in model_path (read one layer at a time). Per layer,
 * exchange kind x (ratio[x] in [0, 1), MI_N_PRUNED_XCH entries) and rank,
 * the rank's columns are ranked by the absolute weights they feed (through
 * the norm's gain for residual columns) on the other ranks (MI_PRUNE_AWARE)
 * or on all ranks (MI_PRUNE_MAGNITUDE, the seed's baseline), and the lowest
 * ceil(ratio * owned) are left out. All ratios 0: no send lists. Returns 0
 * or -1 with one line in err (not somegather, a ratio outside [0, 1), the
 * model file unreadable). */
int mi_plan_prune(mi_plan *plan, const char *model_path, const double *ratio, int mode, char *err);

/* CATS's pruning within a perplexity budget (`--planner auto`): somegather's perplexity at several pruning ratios r,
 * measured on `ranks` ranks (jobs/experiments/somegather_quality.sh writes the file:
 * {"model", "n_layers", "dim", "ranks", "prune_mode": "aware", "text",
 * "tokens", "points": [{"r": 0, "perplexity": P0}, {"r": 0.25, ...}, ...]}). */
#define MI_MAX_QUALITY_POINTS 16
typedef struct {
    int ranks;                             /* the job size the perplexities were measured on */
    int n;                                 /* points, r ascending, the first r = 0 */
    double r[MI_MAX_QUALITY_POINTS];       /* pruning ratio in [0, 1) */
    double perplexity[MI_MAX_QUALITY_POINTS];
} mi_sg_quality;

/* Load path for model c. Returns 0, or -1 with one line in err: unreadable,
 * a JSON syntax error (its position), an unknown or duplicate key, another
 * model (name, n_layers or dim), a prune_mode other than "aware", points not
 * ascending from r = 0, an r outside [0, 1), a perplexity not finite and
 * positive, more than MI_MAX_QUALITY_POINTS points. */
int mi_sg_quality_load(const char *path, const mi_config *c, mi_sg_quality *q, char *err);

/* The largest measured r whose perplexity is at most (1 + budget) times the
 * unpruned one (budget a fraction, e.g. 0.05), its perplexity in *ppl; 0 (and
 * the unpruned perplexity) when no pruned point is within the budget. */
double mi_sg_quality_best(const mi_sg_quality *q, double budget, double *ppl);

/* CATS's time-series models carry the pruning masks they were trained
 * with (model_file.h mi_model_read_masks): make a somegather plan's send
 * lists from them, for any rank count (*ranks: the count trained for).
 * Returns 1 when the model has masks, 0 when it has none (or the plan is
 * not somegather), -1 with err. */
int mi_plan_keep_from_model(mi_plan *plan, const char *model_path, int *ranks, char *err);

/* Split `total` units (heads, FFN units, vocabulary rows) over n parts in
 * proportion to weight[0..n) (NULL: equal parts), in order: part i's share
 * ends at the nearest unit to its cumulative weight, and every part gets at
 * least one unit while units remain for the parts after it. Writes count[i]
 * (0 for parts beyond total) and returns how many parts got units. Pure; the
 * tp planner and CATS's memory model share it so that the model's shards
 * are the planner's. No errors (n >= 1, total >= 0, weights > 0). */
int mi_split_units(int total, const double *weight, int n, int *count);

typedef struct {
    mi_planner planner;
    uint64_t seed;          /* for MI_PLANNER_RANDOM */
    int controller_works;   /* -1: planner's default (tp: yes, others: no) */
    int speculate;          /* mark transitions for inter-layer speculation (HeadSplit) */
    const double *acceptance; /* [n_layers-1] profiled acceptance per transition, NULL: unknown (all 1) */
    double min_acceptance;  /* a transition speculates only at or above this (HeadSplit: 0.7) */
    int kv_positions;       /* KV-cache positions to budget memory for; 0: the whole context (seq_len).
                               Fewer lets a placement start on smaller devices and be re-made as the
                               cache grows (HeadSplit "Memory needs active management") */
    int wire;               /* wire dtype of activation messages (mi_plan.wire); 0 = fp32 */
    int prefill;            /* hybrid: plan for the prefill phase (1) or for decode (0) */
    int prefill_T;          /* hybrid, prefill: positions per pass judged (0: 64, the runtime's chunk) */
    double prune;           /* somegather: this fraction of each rank's columns left out of every exchange,
                               communication-aware (mi_plan_prune from the weights at weights_path); 0: none */
    const char *weights_path;
    int split_vocab;        /* head-level planners: 1 splits the vocabulary's tables always (the classifier's
                               rows over the workers, by speed, each holding the embedding rows of its
                               classifier rows); 0 only when the plan with them whole on rank 0 does not fit
                               the budgets (docs/guide/vocabulary.md). Somegather and time-series models never */
    int logits_k;           /* mi_plan.logits_k: logit candidates per classifier slice (0: every logit) */
} mi_plan_options;

/* The exact planner (MI_PLANNER_EXACT): HeadSplit's head-level placement
 * (each KV head, each layer's projection and its whole FFN on one rank)
 * that minimises the decode step the cost model predicts at context
 * kv_positions / 2 under the budgets, as a mixed-integer program solved by
 * GLPK's branch and bound. Limits: at most MI_EXACT_MAX_RANKS devices;
 * language models with dense FFNs and the vocabulary whole on rank 0;
 * no speculation in the objective (marked afterwards, as for greedy); a
 * rank's head outputs within the eager limit; the solver stops after the
 * time limit with the best placement found (optimal = 0). */
#define MI_EXACT_MAX_RANKS 8
#define MI_EXACT_TIME_S 20.0
typedef struct {
    int optimal;          /* 1: proven optimal; 0: the time limit stopped the search */
    double objective_s;   /* the program's decode step, seconds */
    double bound_s;       /* the search's lower bound on that step, seconds (= objective_s when optimal; the
                             best open node's bound when the time limit stopped it; NAN when the limit came
                             before the root's relaxation was solved) */
    double seconds;       /* the solver's time */
    int rows, cols;       /* the program's size */
    mi_planner source;    /* whose placement the plan is: MI_PLANNER_EXACT, the search's; MI_PLANNER_GREEDY or
                             MI_PLANNER_LAYERWISE, that planner's, when a search the limit stopped had not
                             found one as fast (objective_s is then its predicted step) */
} mi_exact_info;

/* Make a plan of model c for the cluster's devices (n_ranks = n_devices).
 * A head-level plan whose token embeddings (and untied classifier) do not
 * fit rank 0 next to the rest is made again with the vocabulary split
 * (opt->split_vocab). Returns 0, or -1 with err naming the problem: no
 * workers, or a plan that cannot fit the memory budgets (the device and the
 * shortfall in bytes). */
int mi_plan_make(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, mi_plan *plan, char *err);

/* mi_plan_make with the exact planner (whatever opt->planner says), the
 * solver stopped after time_limit_s (<= 0: MI_EXACT_TIME_S), and what it
 * did in *info (may be NULL). A search the limit stopped is compared with
 * the placements greedy and layer-wise make (without the controller's
 * compute, and with it when opt asks for it) that lie in its space, by the
 * cost model's step at context kv_positions / 2: the fastest is kept (the
 * plan's planner stays exact; info->source says whose it is), so a stopped
 * search is never slower than those heuristics. mi_plan_make with MI_PLANNER_EXACT is this
 * with the default limit. Same returns. */
int mi_plan_exact(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, double time_limit_s,
                  mi_plan *plan, mi_exact_info *info, char *err);

/* HeadSplit's re-placement as the KV cache grows (plan.h mi_replace_due
 * says when): plan model c again with opt for twice the positions needed
 * (at most the context, at least need), halving the growth until a
 * placement fits. Returns 0 with *plan and the positions it budgets in
 * *horizon, or -1 with err ("at position N no placement fits the devices'
 * budgets any more: <the planner's reason>"). The runtime's controller and
 * the simulator share it. */
int mi_plan_remake(const mi_config *c, const mi_cluster *cl, const mi_plan_options *opt, int need, mi_plan *plan,
                   int *horizon, char *err);

/* HeadSplit "Not every layer deserves it": mark transition l -> l+1 for
 * speculation when its layer l keeps the projection and the FFN each on one
 * rank, its acceptance (acceptance[l], or 1 when NULL) is at least
 * min_acceptance, and the cost model's expected saving
 *   acceptance * min(FFN time of layer l, attention time of layer l+1) - extra message
 * is positive. Returns the number of transitions marked. */
int mi_plan_mark_speculation(mi_plan *plan, const mi_cluster *cl, const double *acceptance, double min_acceptance);

/* The expected saving (seconds per token) of speculating from layer l into
 * l+1 under this placement, with acceptance a (the formula above); negative
 * when the extra message costs more than the overlap can win. */
double mi_plan_spec_saving(const mi_plan *plan, const mi_cluster *cl, int l, double a);


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

/* The request a plan is judged by, fitted to a context of
 * seq_len positions: a prompt of *n_prompt tokens (<= 0: 32, or a quarter of
 * a shorter context) and *n_steps decoded tokens (<= 0: 128), each cut to
 * what the context holds. */
void mi_request_defaults(int seq_len, int *n_prompt, int *n_steps);

/* The comparison of schemes (`plan --planner all`, `--planner auto`): plan model c on
 * cluster cl with each scheme worth choosing (layerwise, greedy, tp,
 * somegather, at base->prune: its best ratio within a perplexity budget,
 * mi_sg_quality_best; hybrid with both phases), options from base (planner,
 * controller_works and speculation set per scheme), and predict a request
 * of n_prompt prompt tokens (prefill passes of `chunk`) and n_steps decoded
 * tokens. Fills rows[0..*n_rows) (MI_COMPARE_MAX room) and returns the index
 * of the fastest that fits by total_s, or -1 when none fits. */
int mi_plan_compare(const mi_config *c, const mi_cluster *cl, const mi_plan_options *base, int n_prompt,
                    int n_steps, int chunk, mi_compare_row *rows, int *n_rows);

/* Voltron's phases placed apart pay when the prompt's predicted TTFT gain
 * (decode placement's TTFT minus the prefill placement's) exceeds the two
 * re-placements per request: to the decode placement after the prompt
 * (n_prompt positions of KV cache) and back before the next prompt. Returns
 * 1 if it pays; the two figures in *gain_s, *switch_s (may be NULL). */
int mi_plan_phases_pay(const mi_plan *dec, const mi_programs *pd, const mi_plan *pre, const mi_programs *pp,
                       const mi_cluster *cl, int n_prompt, int chunk, double *gain_s, double *switch_s);

/* ------------------------------------------------ mixed precision (Voltron §4.2.2) */

#define MI_MAX_PRUNE_SHARDS 64 /* FFN shards per layer an importance file can rank */

/* Voltron's precision ladder: the dtypes a layer's seven matrices step down
 * through, by bytes per weight: fp32 4, fp16 2, q8_0 1.0625, q6_K 0.8203,
 * q5_K 0.6875, q4_K 0.5625, q4_0 0.5625. q4_K and q4_0 tie in bytes; q4_K
 * sits above q4_0 because it measures better (its 6-bit scales and mins per
 * 32 values against q4_0's one scale and no min: lower error on every
 * matrix measured, docs/guide/voltron.md). A layer takes a rung only when
 * every one of its matrices can be held in it (mi_precision_holds): the
 * k-quants need whole super-blocks of 256 along every blocked axis (dim,
 * n_heads x head_dim, hidden_dim), so a layer with one axis that is not
 * skips the k-quant rungs whole (precision stays per layer, as importance
 * is measured and `quantize --layer-dtype` writes it). */
#define MI_N_RUNGS 7
extern const int mi_precision_ladder[MI_N_RUNGS]; /* fp32 fp16 q8_0 q6_K q5_K q4_K q4_0 */

/* t's place on the ladder (0 fp32 .. 6 q4_0), -1 for a dtype not on it. */
int mi_precision_rung(int t);

/* 1 when layer l of c can hold its seven matrices in dtype t: every
 * blocked axis a multiple of mi_dtype_block(t) (a shape question: the
 * same for every layer of one config). */
int mi_precision_holds(const mi_config *c, int l, int t);

/* A model's importance side file (`meshinfer importance`): per layer, the
 * rise in perplexity when its seven matrices are lowered to each rung of the
 * ladder below the file's own dtype (NAN: not measured, or the layer cannot
 * hold that dtype), and (when measured) when each FFN shard -- ffn_shard
 * consecutive hidden channels: rows of w1 and w3, columns of w2 -- is pruned
 * (Voltron §4.3.1 "shard-wise pruning"; the seed scores channels one by one
 * and sums them per unit, we score the unit whole). Files of version 1 (no
 * "version" key) hold q8_0 and q4_0 only; version 2 adds fp16, q6_K, q5_K
 * and q4_K (null for a dtype the layer cannot hold). */
#define MI_IMPORTANCE_VERSION 2
typedef struct {
    int n_layers;
    int version;                             /* of the file read: 1 or 2 */
    double rise[MI_MAX_LAYERS][MI_N_DTYPES]; /* [layer][dtype], perplexity points; NAN: not measured */
    int ffn_shard;                 /* hidden channels per shard (0: pruning not measured) */
    int n_shards;                  /* hidden_dim / ffn_shard, at most MI_MAX_PRUNE_SHARDS */
    float prune[MI_MAX_LAYERS][MI_MAX_PRUNE_SHARDS]; /* [layer][shard]: rise when pruned, perplexity points */
} mi_importance;

/* The perplexity rise of layer l at dtype t: 0 at fp32 and at fp16 when
 * fp16 was not measured (the file's own dtype), else imp->rise[l][t] (NAN
 * when not measured). */
double mi_importance_rise(const mi_importance *imp, int l, int t);

/* Layer l's way down the ladder from its dtype now (its query matrix's,
 * c->dtype[l][MI_WQ]): the lower rungs it can hold (mi_precision_holds),
 * with imp (may be NULL) only those imp measured for it, and q4_0 below a
 * q4_K only when q4_0_last (the two tie in bytes: q4_0 is a step down only
 * where it is faster or where pruning needs 32-blocks). Writes them in
 * ladder order to to[] (MI_N_RUNGS room); returns how many. */
int mi_precision_chain(const mi_config *c, int l, const mi_importance *imp, int q4_0_last, int *to);

/* 1 when some device of cl multiplies q4_0 faster than q4_K (calibrated
 * rates: their bytes tie, so only speed can make the q4_0 rung pay). */
int mi_q4_0_faster(const mi_cluster *cl);

/* Load path for model c. Returns 0, or -1 with one line in err: unreadable,
 * not an importance file, a "version" other than 1 or 2 ("version N is newer
 * than this meshinfer reads"), or one for another model (name, layers, dim or
 * hidden_dim differ: "importance file F is for X ... but the model is Y"),
 * or pruning entries that do not fit the model (ffn_shard not a multiple of
 * 32 dividing hidden_dim into 2 to MI_MAX_PRUNE_SHARDS, a layer's list of
 * another length), a JSON syntax error (its position), an unknown or
 * duplicate key, a rise outside +-1e6 (q8_0 and q4_0 required; fp16 and the
 * k-quants optional, a number or null), or one measured on synthetic weights
 * for a model with real ones or the reverse ("synthetic", optional), a
 * "tokens" (optional) that is not a whole number of at least 2 or a
 * "base_perplexity" (optional) that is not a finite number of at least 1.
 * Pruning entries are optional. */
int mi_importance_load(const char *path, const mi_config *c, mi_importance *imp, char *err);

/* Voltron's shard-wise pruning at level k: every layer loses the same
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
    int steps;                /* layer downgrades applied (one rung each, of up to 6 x n_layers) */
    int evaluated;            /* configurations planned and predicted */
    double ttft_s, tpot_s;    /* predicted with the chosen dtypes */
    int prune_k;              /* FFN shards pruned from every layer (0: none) */
    int ffn_shard;            /* ... of this many hidden channels each */
    double rise;              /* sum of the layers' importances: the expected perplexity rise (additive) */
    double seconds;           /* the search's time */
    int kquant_layers;        /* layers whose chain offered a k-quant */
    char kquant_note[256];    /* why the others' did not ("" when all did) */
    char spec[8192];          /* the dtypes as `meshinfer quantize --layer-dtype` takes them */
} mi_precision_result;

/* Voltron's search: from model c's dtypes down the ladder, rung by rung
 * (every layer that can take fp16 to it, least important first, then to
 * q8_0, q6_K, q5_K, q4_K and q4_0, each rung's steps in the order of what the
 * step adds over the layer's previous rung; ties: the lower layer first; a
 * layer's rungs are mi_precision_chain's, q4_0 below q4_K when a device
 * multiplies q4_0 faster or pruning follows with shards not whole 256s), then -- when imp holds pruning measurements -- pruning 1, 2, ... FFN
 * shards from every layer, up to half of them: Voltron §4.3.1 prunes only
 * when precision is not enough), binary search for the fewest downgrades with
 * which the planner of `po` fits every device's budget and the predicted TTFT
 * and TPOT meet q's targets. A pruned configuration has a smaller hidden_dim
 * (out->cfg; `meshinfer quantize --prune-ffn` writes it). Returns 0 with
 * *out, or -1 with err naming the best reachable (the end of the chain) when
 * nothing meets the targets, or that nothing fits. */
int mi_precision_search(const mi_config *c, const mi_cluster *cl, const mi_plan_options *po, const mi_importance *imp,
                        const mi_precision_query *q, mi_precision_result *out, char *err);

/* ------------------------------------------------ memory and traffic model
 *
 * CATS Q1 (section 5.2.1, Fig. 4): per device, the weights it stores
 * (the seed's flash), the KV cache and activations it holds for N positions
 * (its RAM) and what it sends per decoded token, under somegather (sections
 * 4.2, 4.3) and the three baselines the seed compares it with. Pure
 * arithmetic on a config (any shape, D = 1..MI_MAX_RANKS), no MPI; what each
 * figure counts is stated in src/planner/memory_model.c. Units: bytes. */

typedef enum {
    MI_MEM_SOMEGATHER = 0,   /* CATS: dim/D residual columns, n_heads/D heads, hidden_dim/D FFN units
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
/* The seed's name of the scheme: "CATS", "hu2024edge", "liu2025communication",
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
