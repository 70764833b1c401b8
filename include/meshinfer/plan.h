/* Placement plans: pure data saying which rank holds which shard of every
 * layer, the cluster it is made for, validation and serialization. The
 * planners that produce plans are planner.h; what each rank then computes
 * and sends is partition.h (programs); time and bytes are cost.h. No MPI
 * and no policy here.
 *
 * Units: bytes, seconds, bytes/second. Rank 0 is the controller (embeddings,
 * final norm, sampling, the token loop); HeadSplit "Splitting by heads". */
#ifndef MESHINFER_PLAN_H
#define MESHINFER_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "meshinfer/config.h"
#include "meshinfer/model.h"
#include "meshinfer/tensor.h"

#define MI_MAX_RANKS 256

/* ------------------------------------------------------------- cluster */

#define MI_MAX_FREQ 16 /* DVFS levels per device */

typedef struct {
    char name[64];
    double mem_bytes;  /* budget for weights + KV cache on this device */
    double speed;      /* relative compute speed; 1.0 = reference device */
    /* The compute model of the cost model (cost.h), per device. A calibrated
     * device (`meshinfer calibrate`, Voltron §4.2.1 "a regression model based
     * on ... device type, layer type, precision, input token length, and the
     * number of tokens accumulated in the KV cache") has them measured; for
     * the others mi_cluster_finish derives them from mem_bw, speed and gflops
     * (a roofline: weights streamed once per pass, 2 flops per weight per
     * position). A matrix product of E weight elements of dtype d over T
     * positions takes op_s + E * (pass_s[d] + (T - 1) * pos_s[d]); attention
     * at T positions after ctx cached ones takes kv_s * head_dim *
     * (T * ctx + T * (T + 1) / 2) per query head when calibrated (attention
     * is then dot products, one set per query head) and per KV head in the
     * roofline (each KV head's cache streamed once). */
    char host[64];     /* host the calibration was measured on ("": unknown) */
    int calibrated;    /* 1: the figures below were measured on the device */
    double pass_s[MI_N_DTYPES];  /* [MI_N_DTYPES] seconds per weight element of a one-position pass */
    double pos_s[MI_N_DTYPES];  /* [MI_N_DTYPES] seconds per weight element per further position */
    double kv_s;       /* seconds per head_dim element of a cached position (per query or KV head, above) */
    double op_s;       /* fixed seconds per compute op (dispatch) */
    double vec_s;      /* seconds per output element per position of an op's elementwise work (norms,
                          RoPE, SwiGLU, residual adds): what a prompt's many positions add up */
    /* Energy (HeadSplit, Voltron §4.4; cost.h mi_predict_energy): watts drawn idle and while
     * computing at the top frequency, and the DVFS levels the device offers as fractions of its
     * top frequency, descending, freq[0] = 1. A level f stretches compute by 1/f and draws
     * idle_w + (active_w - idle_w) * f^3 while computing (dynamic power ~ f V^2, V ~ f).
     * Defaults: HeadSplit's Raspberry Pi 4 (3.8 W idle, 4.9 W active) at one level. */
    double idle_w, active_w;
    int n_freq;
    double freq[MI_MAX_FREQ];
    int power_given;   /* the cluster file gave "power" (else the defaults) */
    /* A CPU quota as Linux's CFS bandwidth control applies it (cgroup v2 cpu.max, v1
     * cpu.cfs_quota_us / cpu.cfs_period_us): the device computes at full speed until it has used
     * cpu_quota * cpu_period_s in the current period, then waits for the next one; unused quota
     * does not carry over. speed and compute are then the unthrottled figures. Only the simulator
     * (simulate.h) models it; the cost model and the planners do not. */
    double cpu_quota;    /* fraction of one core in (0, 1]; 0: no quota */
    double cpu_period_s; /* the period, seconds (0 without a quota) */
    double msg_s;        /* CPU seconds a message costs its sender and its receiver each (the MPI
                            calls, the TCP stack): compute in the simulator, so a quota throttles it
                            too; 0: none */
    double spin_s, poll; /* a wait for a message: it spins (full CPU) for spin_s, then polls, taking
                            the fraction poll of the CPU (rt_waitall's naps between tests); under a
                            quota that CPU is quota used while waiting. 0, 0: free waits */
} mi_device;

/* The devices of a job (device i runs rank i) and their links. */
typedef struct {
    int n_devices;
    mi_device *dev;       /* [n_devices] */
    double latency_s;     /* one-way per-message link latency */
    double bandwidth;     /* link bandwidth, bytes/s */
    double mem_bw;        /* weight bytes/s streamed by a speed-1.0 device while decoding */
    double gflops;        /* matrix-product Gflop/s of a speed-1.0 device (uncalibrated prefill) */
    double storage_bw;    /* bytes/s a device reads weights from storage when it re-places (default
                             100 MB/s: a Raspberry Pi's SD card; an SSD or the page cache is faster) */
    double eager_bytes;   /* a message larger than this takes one more round trip before its data
                             (MPI's rendezvous: Open MPI's TCP transport sends 64 KiB eagerly) */
    double *rtt_s;        /* optional [n_devices * n_devices] measured round-trip times, NULL if unmeasured */
    double *bw;           /* optional [n_devices * n_devices] measured link bandwidths, bytes/s; NULL: bandwidth */
    int calib_ranks;      /* > 0: measured by `meshinfer calibrate` on a job of this many ranks, which
                             must be the job that uses it (hosts in dev[].host) */
    /* What only the simulator (simulate.h) draws on; the cost model and the planners see the mean
     * link ("link": {"jitter_ms", "loss_pct", "shared_medium"} in the cluster file): */
    double jitter_s;      /* a message's one-way latency varies uniformly by +-jitter_s (clamped at 0) */
    double loss;          /* probability in [0, 1) that a message is lost and sent again */
    int shared_medium;    /* 1: every transfer shares one medium of `bandwidth` bytes/s (WiFi), one
                             transfer at a time; 0: each pair has its own link */
    /* What a re-placement pays to rebuild the runtime's exchanges (cost.h mi_plan_switch_s):
     * seconds to create (and free) one communicator and one one-sided window of two ranks and of
     * all n_devices, as `meshinfer calibrate` measures them ("comm_setup_ms", "win_setup_ms":
     * [two, all]); a group of m members costs in proportion between them; 0: not charged. */
    double comm_setup_s, win_setup_s, comm_setup_all_s, win_setup_all_s;
} mi_cluster;

/* HeadSplit's Raspberry Pi 4 power figures (3.8 W idle, 4.9 W active) at one
 * DVFS level: what a device without "power" in its cluster file gets. */
void mi_device_power_defaults(mi_device *d);

/* Default cluster of n equal devices with mem_each bytes each, links of
 * shared memory (20 us, 5 GB/s) and 20 GB/s weight streaming. */
void mi_cluster_default(mi_cluster *cl, int n, double mem_each);

/* Parse a cluster file (JSON, see hostfiles/cluster-5pi.json):
 *   {"link": {"latency_ms": 5, "bandwidth_mbit": 300},
 *    "mem_bandwidth_gbs": 4,
 *    "devices": [{"name": "pi0", "mem_mb": 3500, "speed": 1.0}, ...]}
 * "link" and "mem_bandwidth_gbs" are optional (defaults as above); each device
 * needs mem_mb > 0; speed defaults to 1. Returns 0, or -1 with one line in err
 * naming the field (malformed JSON with its position, missing or non-numeric
 * field, non-positive value). */
int mi_cluster_parse(const char *json, mi_cluster *cl, char *err);

/* Read and parse a cluster file; also -1 when it cannot be read. */
int mi_cluster_load(const char *path, mi_cluster *cl, char *err);

/* Use measured round-trip times (seconds, [n*n], copied) plus a safety
 * margin (0.15 = 15%, HeadSplit "WiFi needs margins") for the link latency
 * model: latency(i,j) = rtt(i,j) * (1 + margin) / 2. */
void mi_cluster_set_rtt(mi_cluster *cl, const double *rtt_s, double margin);

/* One-way latency between two devices (from measured RTTs when present). */
double mi_cluster_latency(const mi_cluster *cl, int a, int b);

/* Bandwidth of the link a -> b, bytes/s (measured when present; Voltron
 * 4.2.1: communication time from the data's size and the link). */
double mi_cluster_bandwidth(const mi_cluster *cl, int a, int b);

/* Fill the compute model of every uncalibrated device from mem_bw, speed
 * and gflops (the roofline above); calibrated devices are left as measured.
 * mi_cluster_default and the parser call it; call it again after changing
 * speed or mem_bw. */
void mi_cluster_finish(mi_cluster *cl);

/* Write cl as a cluster file (`meshinfer calibrate`, Voltron §4.2.1; the
 * format of mi_cluster_parse, with the
 * calibration when present; hw: optional [n_devices] JSON objects describing
 * each device (hwinfo.h), written under "hwloc", or NULL). Returns 0 or -1
 * with err. The write goes through output.h (temporary name, then rename). */
int mi_cluster_save(const mi_cluster *cl, const char *const *hw, const char *description, const char *path,
                    char *err);

void mi_cluster_free(mi_cluster *cl);

/* A heterogeneous cluster drawn from stated distributions (`meshinfer
 * cluster-gen`, the simulator's studies: HeadSplit's 25 heterogeneous
 * devices). Each range is [lo, hi]; lo = hi gives that value to all. */
typedef struct {
    int n_devices;              /* 1..MI_MAX_RANKS */
    uint64_t seed;              /* the draws (splitmix64); the same seed gives the same file */
    double speed[2];            /* relative compute speed, uniform */
    double mem_mb[2];           /* budget, MB (1e6 bytes), uniform */
    double controller_mem_mb;   /* > 0: device 0's budget (the controller: embeddings, classifier) instead */
    double latency_ms[2];       /* one-way latency per pair, uniform, the same both ways */
    double bandwidth_mbit[2];   /* per pair, log-uniform (a decade is as likely as the next), both ways */
    double mem_bandwidth_gbs;   /* weight streaming of a speed-1.0 device, GB/s */
    double jitter_ms, loss_pct; /* the link block's (0: none) */
    int shared_medium;          /* the link block's: one medium of link.bandwidth_mbit = bandwidth_mbit[0] */
} mi_cluster_gen;

/* 25 devices, seed 1, speed 0.5-2, 1000-4000 MB, 0.05-0.5 ms, 1-10 Gbit/s
 * (HeadSplit's simulation: "1 to 10 Gbps links"), 4 GB/s, no jitter or loss. */
void mi_cluster_gen_defaults(mi_cluster_gen *g);

/* Draw the cluster g describes into cl (device i "dev<i>"; links as
 * per-pair matrices, except on a shared medium, which has one bandwidth).
 * Returns 0, or -1 with one line in err naming the field: a count outside
 * 1..MI_MAX_RANKS, a range with lo > hi, a value the cluster parser would
 * refuse (mi_cluster_parse's ranges). */
int mi_cluster_generate(const mi_cluster_gen *g, mi_cluster *cl, char *err);

/* ---------------------------------------------------------------- plan */

typedef enum {
    MI_PLANNER_LAYERWISE = 0, /* contiguous blocks of whole layers per worker (pipeline baseline) */
    MI_PLANNER_ROUNDROBIN,    /* heads, projection, FFN dealt to workers in turn */
    MI_PLANNER_RANDOM,        /* every unit on a random worker (seeded) */
    MI_PLANNER_GREEDY,        /* HeadSplit: FFN and projection first, then heads, balancing time under budgets */
    MI_PLANNER_TP,            /* tensor parallel: every layer's heads and FFN split over all workers */
    MI_PLANNER_SOMEGATHER,    /* CATS: the residual stream split by columns over all ranks, each with its
                                 heads, FFN units and rows of wo and w2; every exchange an allgather */
    MI_PLANNER_HYBRID,        /* Voltron Voltron: per layer and sublayer, model or tensor parallelism,
                                 whichever the cost model predicts faster for the phase (prefill or decode) */
    MI_PLANNER_EXACT,         /* HeadSplit's units placed by a mixed-integer program (GLPK) minimising the
                                 predicted decode step: a few devices (planner.h MI_EXACT_MAX_RANKS) */
    MI_N_PLANNERS
} mi_planner;

/* CATS's exchanges of a layer (and the last one before the classifier):
 * what pruning and message loss act on. */
typedef enum {
    MI_XCH_NONE = -1,
    MI_XCH_ATTN_IN = 0,  /* the residual before attention (then normalised locally) */
    MI_XCH_HEADS,        /* head outputs before wo */
    MI_XCH_FFN_IN,       /* the post-attention residual before the FFN (normalised locally again) */
    MI_XCH_HIDDEN,       /* hidden activations before w2 */
    MI_XCH_FINAL,        /* the last residual before the classifier (never pruned) */
    MI_N_XCH
} mi_xch_kind;
#define MI_N_PRUNED_XCH 4 /* the four exchanges of a layer */

/* Names as on the command line and in plan files: attn_in heads ffn_in hidden final. */
const char *mi_xch_name(int k);
/* The kind of a name, or -1. */
int mi_xch_parse(const char *name);

/* CATS "communication-aware pruning" and the baseline it is compared with. */
typedef enum {
    MI_PRUNE_AWARE = 0,     /* a rank's columns ranked by the absolute weights they feed on the other ranks;
                               the lowest are never sent, their owner still uses them */
    MI_PRUNE_MAGNITUDE = 1, /* ordinary magnitude pruning: ranked by all the absolute weights they feed; the
                               lowest are dropped for every rank, owner included (same bytes on the wire) */
} mi_prune_mode;

/* The columns one rank sends in one exchange, ascending, inside its own. */
typedef struct {
    int n;
    int *cols;
} mi_keep;

/* A contiguous slice [v0, v0+n) of FFN units or vocabulary rows on one rank. */
typedef struct {
    int rank, v0, n;
} mi_slice;

typedef struct {
    int kv_rank[MI_MAX_KV_HEADS]; /* rank holding each KV head and its query heads */
    int proj_rank;                /* >= 0: holds all of wo and gathers the head outputs;
                                     -1: wo split with the heads, partial outputs reduced */
    int n_ffn;                    /* FFN slices; 1 = the whole FFN on one rank */
    mi_slice *ffn;                /* [n_ffn], ascending, covering [0, mi_plan_ffn_units): hidden units, or
                                     (a mixture of experts, expert parallelism) experts [v0, v0+n) of
                                     n_experts; every expert slice's rank holds the router and runs it, the
                                     slice with v0 = 0 also holds the shared expert and its gate */
    int speculate;                /* HeadSplit inter-layer speculation from this layer to the next:
                                     Z goes to the next layer's head ranks before the FFN runs */
    int accept_permille;          /* expected acceptance of that speculation (profile), for the cost model */
    int wire;                     /* Voltron §4.3.2 per layer: this layer's messages go in the narrower of
                                     this and the plan's wire (mi_plan_wire); MI_F32: the plan's */
    uint64_t ffn_pruned;          /* Voltron §4.3.1 shard-wise pruning at run time: bit s set = FFN units
                                     [s*ffn_shard, (s+1)*ffn_shard) output zero and are not computed */
} mi_layer_plan;

typedef struct {
    mi_config cfg;
    int n_ranks;
    mi_planner planner;
    int controller_works;   /* rank 0 also holds layer shards */
    mi_layer_plan *layers;  /* [n_layers] */
    int n_cls;              /* classifier slices over the vocabulary */
    mi_slice *cls;          /* [n_cls], ascending, covering [0, vocab_size) */
    int split_vocab;        /* head-level plans: the token embeddings are held by vocabulary rows, each rank
                               the rows of its classifier slice (a tied table: the same rows serve both), not
                               whole on rank 0; their rows reach rank 0 by a gather (docs/guide/vocabulary.md) */
    int logits_k;           /* what rank 0 needs of the logits per wanted position: 0: every logit (each
                               classifier slice sends its logits whole); K > 0: each slice's K best (logit,
                               token id) pairs (sampler.h mi_logit_candidates: 1 greedy, top_k for top-k
                               sampling). Not a placement: the session sets it from the sampler */
    int kv_positions;       /* KV-cache positions the memory budgets were checked for (<= seq_len) */
    int wire;               /* mi_dtype of every activation message (Voltron "communication scaling"):
                               MI_F32 (exact), MI_F16 or MI_Q8_0 */
    double plan_seconds;    /* time the planner took */
    int ffn_shard;          /* FFN units per pruning shard of layers[].ffn_pruned (0: nothing pruned) */
    /* CATS somegather (MI_PLANNER_SOMEGATHER; other planners: n_cols = 0, keep = NULL). The layers'
     * kv_rank say each rank's heads, their ffn slices its units, proj_rank is -1. */
    int n_cols;             /* residual-column slices, one per rank */
    mi_slice *cols;         /* [n_cols], ascending, covering [0, dim) */
    double prune[MI_N_PRUNED_XCH]; /* fraction of a rank's columns of each exchange it never sends */
    int prune_mode;         /* mi_prune_mode */
    mi_keep *keep;          /* NULL: nothing pruned; else [n_layers][MI_N_PRUNED_XCH][n_ranks] (mi_plan_keep) */
} mi_plan;

/* The wire dtype of layer l's activation messages (l = -1: the messages of
 * no layer, embeddings and logits): the narrower (fewer bytes) of the plan's
 * wire and the layer's own (Voltron §4.3.2: communication scaling lowers the
 * messages of the least important layers first). */
int mi_plan_wire(const mi_plan *plan, int l);

/* Voltron §4.3.1, shard-wise pruning at run time: the FFN units of layer l
 * in [u0, u0+n) that are not pruned, as ascending runs [r0[i], r0[i]+rn[i])
 * (r0, rn: room for MI_MAX_PRUNE_RUNS). A layer with nothing pruned gives
 * the one run [u0, u0+n) (none when n = 0). Returns the number of runs; the
 * units kept are their summed lengths (mi_plan_ffn_kept_units). */
#define MI_MAX_PRUNE_RUNS 33 /* at most 64 shards: 32 kept runs between pruned ones, plus one */
int mi_plan_ffn_kept(const mi_plan *plan, int l, int u0, int n, int *r0, int *rn);
int mi_plan_ffn_kept_units(const mi_plan *plan, int l, int u0, int n);

/* The send list of `rank` in exchange kind x of layer l (NULL: it sends all it owns). */
const mi_keep *mi_plan_keep(const mi_plan *plan, int l, int x, int rank);

/* Send lists with n < 0 (left out of a plan file) become every column
 * their rank owns. */
void mi_plan_fill_keep(mi_plan *plan);

/* The columns [*c0, *c0 + *n) that `rank` owns in exchange kind x of a
 * somegather plan (its residual columns, its heads' output columns, its FFN
 * units). */
void mi_plan_owned(const mi_plan *plan, int l, int x, int rank, int *c0, int *n);

/* What the FFN slices of c's layers count: hidden units (hidden_dim), or for
 * a mixture of experts whole experts (n_experts: expert parallelism places
 * experts, never a part of one). */
int mi_plan_ffn_units(const mi_config *c);

/* Planner names as on the command line: layerwise roundrobin random greedy tp somegather hybrid exact. */
const char *mi_planner_name(mi_planner p);
/* Returns 0 and sets *p, or -1 for an unknown name. */
int mi_planner_parse(const char *name, mi_planner *p);

/* Check structure (ranks in range, slices covering their ranges, one slice
 * per rank per layer) and, when cl != NULL, the memory budgets. Returns 0 or
 * -1 with one line in err. */
int mi_plan_validate(const mi_plan *plan, const mi_cluster *cl, char *err);

/* plan->layers: n_layers zeroed entries of plan->cfg (exits on out of memory). */
void mi_plan_alloc_layers(mi_plan *plan);
void mi_plan_free(mi_plan *plan);
/* Drop the send lists (nothing pruned any more). */
void mi_plan_free_keep(mi_plan *plan);

/* The vocabulary rows [*v0, *v0 + *n) of the token embeddings `rank` holds
 * in a plan that splits the vocabulary (its classifier rows); 0 rows for a
 * rank without a classifier slice or a plan that does not split. */
void mi_plan_emb_rows(const mi_plan *plan, int rank, int *v0, int *n);

/* Write plan's placement as one JSON object on one line, no newline:
 *   {"layers": [{"layer": l, "kv_rank": [rank of each KV head (n_kv_heads)],
 *                "proj_rank": rank holding wo (-1: split with the heads),
 *                "ffn": [[rank, v0, n], ...] FFN units [v0, v0+n) of hidden_dim,
 *                "speculate": inter-layer speculation into layer l+1}, ...],
 *    "classifier": [[rank, v0, n], ...] vocabulary rows,
 *    "embedding_rows": [[rank, v0, n], ...] the token embeddings' vocabulary rows ([[0, 0, vocab_size]]
 *                      when whole on rank 0; [] for somegather, whose ranks hold columns),
 *    "columns": [[rank, v0, n], ...] somegather's residual columns of dim ([] otherwise)}
 * The shapes are the plan file's (mi_plan_save_json) without somegather's
 * send lists. `plan --json` and generate's metrics both print it, as
 * "placement". Returns 0, or -1 when out of memory or the write fails. */
int mi_plan_placement_json(const mi_plan *plan, FILE *f);

/* What `rank` holds: fills spec (spec->layers must hold n_layers entries). */
void mi_plan_shard(const mi_plan *plan, int rank, mi_shard_spec *spec);

/* Bytes of weights and of KV cache (plan->kv_positions positions) that `rank` holds. */
void mi_plan_rank_memory(const mi_plan *plan, int rank, size_t *weight_bytes, size_t *kv_bytes);

/* Bytes `rank` holds once its KV cache has n_pos positions: weights plus
 * n_pos positions of its KV heads (the runtime allocates the cache for
 * seq_len but the pages are touched only as positions are written). The
 * memory account of HeadSplit "Memory needs active management". */
double mi_plan_rank_bytes_at(const mi_plan *plan, int rank, int n_pos);

/* HeadSplit "Memory needs active management": the rank whose weights plus KV
 * cache for n_pos positions are the largest fraction of its budget, and that
 * fraction in *frac (devices with no budget count as 0). */
int mi_plan_fullest_rank(const mi_plan *plan, const mi_cluster *cl, int n_pos, double *frac);

/* HeadSplit: a re-placement is due when a device crosses 85% of its budget. */
#define MI_REPLACE_THRESHOLD 0.85

/* The memory account of a plan: per rank its weight bytes (mem_w) and KV
 * bytes per cached position (mem_kv, every KV slot counted), [plan->n_ranks]
 * each: what the check below reads, made once per plan. */
void mi_plan_mem_account(const mi_plan *plan, double *mem_w, double *mem_kv);

/* HeadSplit "Memory needs active management", before a forward pass that
 * takes the KV cache from pos0 to need positions, under a plan of n_ranks
 * with account mem_w, mem_kv made for kv_positions: due when a device's
 * share of its budget (cl) crosses MI_REPLACE_THRESHOLD in this pass (below
 * it at pos0, at or above it at need: the lowest such rank), or else when
 * need outgrows kv_positions (then the fullest device). Returns 1 with
 * *rank, *frac (its share at need) and *outgrown (0: the crossing, 1: the
 * horizon), or 0. The runtime's re-placement (control) and the simulator
 * share it; the new plan is planner.h mi_plan_remake. */
int mi_replace_due(const mi_cluster *cl, int n_ranks, const double *mem_w, const double *mem_kv, int kv_positions,
                   int pos0, int need, int *rank, double *frac, int *outgrown);

/* Without re-placement: the lowest rank whose weights plus need positions
 * would exceed its whole budget, its share in *frac; -1 when all fit. */
int mi_mem_over_budget(const mi_cluster *cl, int n_ranks, const double *mem_w, const double *mem_kv, int need,
                       double *frac);

/* 1 when a and b place every unit on the same ranks (speculation marks and
 * the KV horizon aside): re-placing a into b would move nothing, so a
 * memory-triggered re-placement (HeadSplit) can skip the move. */
int mi_plan_same_placement(const mi_plan *a, const mi_plan *b);

/* Flatten a plan to ints (for MPI_Bcast) and back. The buffer from
 * serialize is malloc'ed; deserialize returns -1 with err if it is malformed
 * or does not match c. */
int *mi_plan_serialize(const mi_plan *plan, size_t *n_ints);
int mi_plan_deserialize(const int *buf, size_t n_ints, const mi_config *c, mi_plan *plan, char *err);

/* Plans as JSON files (researchers' custom placements):
 *   {"planner": "greedy", "n_ranks": 5, "controller_works": false,
 *    "model": {"n_layers": 22, "n_kv_heads": 4, "hidden_dim": 5632, "vocab_size": 32000},
 *    "layers": [{"kv_rank": [1,2,3,4], "proj_rank": 1, "ffn": [[2, 0, 5632]]}, ...],
 *    "classifier": [[0, 0, 32000]], "split_vocab": false}
 * ("split_vocab": optional, true when the embeddings follow the classifier's
 * rows: mi_plan.split_vocab; written only when true). Loading checks the
 * model block against c ("plan has 4 KV heads per layer but the model has
 * 6") and validates the structure: the layout must be the named planner's
 * kind (plan_io.c: layerwise, head-level, tp) and leave rank 0 without layer
 * shards when controller_works is false. Returns 0 or -1 with err. */
int mi_plan_save_json(const mi_plan *plan, const char *path, char *err);
int mi_plan_load_json(const char *path, const mi_config *c, mi_plan *plan, char *err);

#endif
