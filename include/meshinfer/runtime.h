/* The MPI runtime that carries out a plan: every rank loads only its shard,
 * builds the communicators and RMA windows its programs need (partition.h),
 * and runs its program for every forward pass: the decode program for one
 * position, the prefill program for more. It knows no partitioning scheme,
 * only op kinds. Rank 0 (the controller) drives the token loop; the other
 * ranks serve forward passes until told to stop.
 *
 * All functions here are collective over MPI_COMM_WORLD unless noted. */
#ifndef MESHINFER_RUNTIME_H
#define MESHINFER_RUNTIME_H

#include <stdint.h>
#include <stdio.h>

#include "meshinfer/forward.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

#define MI_SPEC_MAX_LAYERS 128

/* Per-rank counters, accumulated over forward passes. Times in seconds. */
typedef struct {
    double attn, proj, ffn, logits; /* compute */
    double comm;                    /* inside MPI calls of the schedule (transfer and waiting for peers) */
    double slowdown;                /* of the compute times above, the sleeps of an emulated slower device
                                       (MESHINFER_SLOWDOWN: S-1 times each compute op's own time) */
    double idle;                    /* outside forward passes: workers waiting for the next token */
    double bytes_sent, bytes_recv;  /* payload bytes handed to MPI (partition.h mi_exchange_bytes) */
    double msgs_recv, msgs_lost;    /* CATS allgather messages (one per sender and position) received,
                                       and of them lost to the emulated message loss */
    long forwards, positions;       /* forward passes and positions processed */
    /* Decode rows: each one new token of a running sequence (generate's
     * one-position steps; every row of a batch's decode pass, batch.h), as
     * opposed to prompt rows (prefill). decode_forwards counts the passes
     * whose rows are all decode rows (on a worker each micro-batch is a
     * pass), decode_rows the decode rows of every pass, and the decode bytes
     * a pass's bytes times its share of decode rows: bytes per token is
     * decode_bytes_sent / decode_rows summed over ranks, the quantity
     * partition.h mi_programs_bytes predicts for MI_PHASE_DECODE. The totals
     * above also hold prefill passes, whose T positions each move a
     * position's bytes. */
    long decode_forwards, decode_rows;
    double decode_bytes_sent, decode_bytes_recv;
    double weight_bytes, kv_bytes;  /* held by this rank */
    double rss_weights;             /* resident memory growth while loading the shard */
    double replans, replan_s;       /* re-placements taken part in, and their seconds (load + KV moves) */
    double moved_bytes_sent, moved_bytes_recv; /* KV-cache bytes moved by re-placements */
    /* inter-layer speculation, counted by the FFN rank of each speculating layer l (l -> l+1) */
    double spec_decided[MI_SPEC_MAX_LAYERS];  /* forward passes that tested the transition */
    double spec_accepted[MI_SPEC_MAX_LAYERS]; /* of which ||FFN(Z)||/||Z|| < tolerance */
    double spec_ratio_sum[MI_SPEC_MAX_LAYERS];/* sum of the ratios (max over a pass's positions) */
    /* a mixture of experts' expert load: per layer, the (position, expert) selections of the router
     * that this rank's held experts ran (over ranks they sum to positions x n_experts_used) */
    double expert_load[MI_SPEC_MAX_LAYERS];
} mi_rank_metrics;

typedef struct mi_runtime mi_runtime;

/* CATS's three modes of message loss in an all-to-all exchange. */
typedef enum {
    MI_LOSS_LINK = 0,  /* receiver j misses sender i's message */
    MI_LOSS_RECEIVER,  /* receiver j gets nothing from anyone in that exchange */
    MI_LOSS_SENDER,    /* nobody gets sender i's message */
} mi_loss_mode;
/* Names link receiver sender; parse returns -1 for an unknown one. */
const char *mi_loss_mode_name(int m);
int mi_loss_mode_parse(const char *name);

typedef struct {
    const char *model_path;  /* HDF5 model; with scatter only rank 0 opens it */
    int scatter;             /* rank 0 reads every shard and sends it (devices without a copy) */
    size_t scatter_piece;    /* with scatter: the largest message a shard travels in, bytes (0 or more than
                                1 GiB: 1 GiB, the most an int count holds); a test sets a small one so that
                                every shard goes in many pieces, the last one short */
    int max_T;               /* positions per forward pass (prefill chunk) */
    int trace;               /* record per-step events for a Chrome trace */
    double tolerance;        /* speculation: keep the speculative attention when ||FFN(Z)||/||Z|| is
                                below this (HeadSplit: 0.05); 0 always recomputes (bit-exact) */
    /* CATS message loss in allgather exchanges, emulated: each message (sender, position) is lost
     * with probability loss, decided by a generator seeded with loss_seed and keyed by (position,
     * layer, exchange, sender, receiver) as loss_mode says, so every rank agrees where it must. A
     * lost message's columns are absent: zero, and left out of the device-local norm. */
    int loss_mode;           /* mi_loss_mode */
    double loss;             /* probability in [0, 1]; 0: no loss */
    uint64_t loss_seed;
    /* How long a wait for a message spins before it releases the CPU between tests (seconds; 0:
     * spin until it arrives). Messages over shared memory arrive within microseconds, so spinning
     * keeps their latency; a wait on a slow link (milliseconds) should sleep instead of burning the
     * device's CPU (its battery; on the testbed, its CPU quota, which would leave it throttled when
     * the data arrives). The environment variable MESHINFER_SPIN_US overrides it. */
    double spin_s;
    /* Called on this rank, with on_reset_arg, whenever its counters are reset (mi_runtime_reset_metrics
     * reaches every rank): lets a caller start counters of its own at the same point, e.g. the MPI
     * test's bytes counted at the MPI layer (mpi_tests/mpi_bytes.h). NULL: nothing is called. */
    void (*on_reset_metrics)(void *arg);
    void *on_reset_arg;
} mi_runtime_options;

/* Load this rank's shard of plan (identical on all ranks), build
 * communicators and windows. prog: the plan's programs as the caller
 * compiled them (partition.h mi_programs_compile; the runtime keeps a copy),
 * so that a plan is compiled once per rank; NULL: the runtime compiles plan
 * itself (the workers, which receive only the plan). On any rank's failure,
 * the lowest failing rank prints one error line and every rank exits with
 * status 1. */
mi_runtime *mi_runtime_create(const mi_plan *plan, const mi_programs *prog, const mi_runtime_options *opt);

/* flags of mi_runtime_forward */
enum {
    MI_FORWARD_ALL_LOGITS = 1, /* every position's logits, not only the last's */
    MI_FORWARD_DECODE = 2,     /* a decode step of one sequence: its rows count as decode rows
                                  (mi_rank_metrics decode_rows), otherwise as prompt rows */
};

/* Rank 0 only: run tokens[T] at positions pos0.. (T <= max_T). flags: a set
 * of MI_FORWARD_*. Returns the logits of the last position ([vocab_size]),
 * or of all T positions ([T, vocab_size]) with MI_FORWARD_ALL_LOGITS. When the plan asks only for candidates
 * (plan.h logits_k = K > 0) and the classifier is split, each row holds
 * every slice's K best logits (sampler.h candidate order) and -INFINITY
 * elsewhere: greedy and top-k sampling give what the whole row gives. */
float *mi_runtime_forward(mi_runtime *rt, const int *tokens, int T, int pos0, int flags);

/* Rank 0 only: a pass over the rows of several sequences (batch.h): row t is
 * tokens[t] at position pos[t] of KV cache slot slot[t] (config.h kv_slots),
 * 1 <= T <= max_T. Returns the logits of the last T_logits rows ([T_logits,
 * vocab_size]; candidates as above). The last n_decode rows (0 <= n_decode
 * <= T_logits) are decode rows (a running sequence's next token), the
 * others prompt rows: only the counters (mi_rank_metrics decode_*) use it. Each row's logits are bit for bit those
 * of the same row run alone. With n_micro > 1, T_logits = T and a plan whose
 * programs are a chain through rank 0 (mi_runtime_can_pipeline: layer-wise),
 * the rows go as n_micro micro-batches (at most T, at most MI_MAX_RANKS)
 * pipelined through the ranks: while one rank works on a micro-batch the
 * next works on the one before; otherwise as one pass. mi_fatal for a row
 * outside the context or the slots, or a time-series model. */
float *mi_runtime_forward_at(mi_runtime *rt, const int *tokens, int T, const int *pos, const int *slot,
                             int T_logits, int n_decode, int n_micro);
/* 1 if the current plan's passes can go as pipelined micro-batches. */
int mi_runtime_can_pipeline(const mi_runtime *rt);

/* Rank 0 only, CATS's time-series family (docs/patchtst.md): one
 * forward pass over all n_patches patches of one channel, patches
 * [n_patches * patch_len] (series.h mi_series_patches); returns the head's
 * outputs [horizon], still normalised. Needs max_T >= n_patches: attention
 * is not causal, so every patch must be in one pass. */
float *mi_runtime_forecast(mi_runtime *rt, const float *patches);

/* Rank 0 only: run n tokens in chunks of max_T; returns last logits. */
float *mi_runtime_prefill(mi_runtime *rt, const int *tokens, int n, int pos0);

/* Rank 0 only: switch every rank to plan (prog: its programs, as in
 * mi_runtime_create; NULL: compiled here) in the middle of a sequence whose
 * KV cache holds n_pos positions (HeadSplit "Memory needs active management").
 * A rank keeps in place the layers (weights and KV cache) and the embeddings
 * or classifier whose shard does not change, frees the rest before loading
 * what is new to it (a device never holds two placements), and each KV head
 * whose rank changes is sent, positions [0, n_pos), from its old rank to its
 * new one; the output is unchanged (the same rows, just elsewhere). With
 * --weights scatter every shard is streamed again. Metrics carry over;
 * replans, replan_s and moved_bytes_* count the move. */
void mi_runtime_replan(mi_runtime *rt, const mi_plan *plan, const mi_programs *prog, int n_pos);
/* The plan's weight dtypes (plan->cfg.dtype) may differ from the file's
 * (Voltron §4.3.1 computation scaling): a layer whose dtypes change is
 * reloaded and re-encoded from the file's weights (model.h
 * mi_layer_convert), so raising it back to the file's dtype is exact. */

/* Rank 0 only: every rank's compute seconds so far (attn + proj + ffn +
 * logits of its metrics) into compute_s[n_ranks], for Voltron's runtime
 * scaling to tell a slowed device from a slowed link between two polls.
 * Costs one command and one gather: a round trip to the farthest rank.
 * Changing a rank's weights (mi_runtime_replan) keeps its counters. */
void mi_runtime_poll_compute(mi_runtime *rt, double *compute_s);

/* Rank 0 only: every rank's resident set size now, in bytes, into
 * rss_bytes[n_ranks] (0 where /proc cannot tell): what a soak of many
 * generations in one job watches for growth. One command
 * and one gather. */
void mi_runtime_poll_rss(mi_runtime *rt, double *rss_bytes);

/* Rank 0 only: clear every rank's KV cache (a new sequence). */
void mi_runtime_reset(mi_runtime *rt);

/* Workers: serve forward passes until rank 0 calls mi_runtime_stop. */
void mi_runtime_serve(mi_runtime *rt);

/* Rank 0 only: release the workers from mi_runtime_serve. */
void mi_runtime_stop(mi_runtime *rt);

/* Collective: this rank's counters, and on rank 0 everyone's ([n_ranks], else NULL). */
const mi_rank_metrics *mi_runtime_metrics(mi_runtime *rt, mi_rank_metrics *all);

/* Collective: the rate (bytes/s) at which this rank streams its own weights
 * through the matrix-vector kernels (a device's compute speed as the cost
 * model, cost.h, counts it): the median of at least three passes over its
 * shard, passes added until they take min_seconds together or about 0.2 s
 * in all have gone, each after 10 ms idle, as a decoded token's compute
 * follows its wait (under a CPU quota a pass then starts a period whole,
 * not wherever back-to-back passes left it); on rank 0
 * every rank's rate in all ([n_ranks]; may be NULL elsewhere), and in
 * all_cpu ([n_ranks] or NULL) the same passes timed on the thread's CPU
 * clock (one compute thread; else the wall rate): the unthrottled rate
 * under a CPU quota, what the simulator's quota model takes. A rank that
 * holds no weights reports 0. */
double mi_runtime_stream_rate(mi_runtime *rt, double min_seconds, double *all, double *all_cpu);

/* Collective: ping-pong between every pair of ranks, one
 * pair at a time so that no two share a medium. On rank 0, rtt_s[a*n+b] is
 * the median round trip of 8 bytes (seconds) and bw[a*n+b] the bandwidth
 * (bytes/s) from round trips of `big` bytes (at most 64 MiB): 2 * big /
 * (rtt(big) - rtt(8)); both symmetric, 0 on the diagonal. Other ranks may
 * pass NULL. */
void mi_calibrate_links(size_t big, double *rtt_s, double *bw);

/* The spin a wait for a message makes before it naps between tests, for a
 * job whose slowest round trip is rtt_max_s: 100 us on links slower than
 * 1 ms round trip, else 0 (spin until the message comes: shared memory). */
double mi_runtime_spin_for(double rtt_max_s);

/* Collective: what messages cost the CPU, with waits that spin spin_s (0:
 * until the message comes) and then nap as the runtime's do. Rank 0 with
 * each other rank in turn: the CPU share a wait past its spin takes (each
 * side waits 20 ms for a message), and a message's own CPU (a round trip of
 * 8 bytes on this side's CPU clock, less its wait's, halved). On rank 0:
 * msg_s[r] (seconds), poll[r] (a fraction of the CPU; 1 with spin 0) and
 * rt_cpu_s[r] (the CPU seconds of a whole round trip, wait included) per
 * rank ([n_ranks]; rank 0's the median over its pairs); others may pass
 * NULL. */
void mi_calibrate_cpu_costs(double spin_s, double *msg_s, double *poll, double *rt_cpu_s);

/* Collective: seconds to create and free a communicator (MPI_Comm_create_group)
 * and a one-sided window on it (MPI_Win_create, MPI_Win_free), the median
 * of 5, as a re-placement rebuilds each exchange's (comms.c): [0] of ranks 0
 * and 1, [1] of every rank. On rank 0 (comm_s[2], win_s[2]); 0 with one
 * rank, and the windows 0 when the transport has no one-sided support. */
void mi_calibrate_setup(double *comm_s, double *win_s);

/* Collective: this rank's index among the ranks of its host and their
 * number (0 and 1 without MPI), for calibrate (Voltron §4.2.1). */
void mi_world_host(int *local_rank, int *local_size);

/* Collective: fn(ctx) on every rank, the ranks of one host one at a time
 * (a device measures itself without another's load), the waiting ones
 * asleep rather than spinning in MPI. */
void mi_world_host_turns(void (*fn)(void *ctx), void *ctx);

/* Rank 0 only: zero every rank's counters and trace (e.g. after warm-up). */
void mi_runtime_reset_metrics(mi_runtime *rt);

/* Collective: gather trace events at rank 0 and write a Chrome trace-event
 * JSON file (one track per rank; opens in Perfetto / chrome://tracing).
 * Written through output.h (temporary name, then renamed); the caller checks
 * the path with mi_output_check before the run. Returns 0, or -1 on rank 0
 * with one line in err (MI_ERRLEN) if the file cannot be written. */
int mi_runtime_write_trace(mi_runtime *rt, const char *path, char *err);

/* Collective: free windows, communicators, the shard and buffers. */
void mi_runtime_free(mi_runtime *rt);

/* The MPI world. A process started without a launcher (no mpirun or srun
 * in its environment) runs as one rank without initializing MPI at all:
 * Open MPI's singleton start-up costs about 0.45 s, longer than a short
 * generation. MESHINFER_MPI=1 forces MPI_Init, =0 forbids it.
 * mi_world_init: call once at start (MPI_Init when launched by mpirun/srun).
 *   With several ranks it then exchanges one int between every pair
 *   (MPI_Ialltoall, errors returned, a deadline of MESHINFER_PROBE_TIMEOUT
 *   seconds, default 60): a job whose hosts no MPI transport connects (an
 *   interface selection that misses a host, or reaches the wrong one) stops
 *   there with one line per rank naming the MCA fix and MPI_Abort, instead of
 *   aborting or hanging inside its first collective.
 * mi_world_rank/size: this process's rank and the job's size (0 and 1
 * without MPI; they also see an MPI_Init made by the caller, as in tests).
 * mi_world_finalize: MPI_Finalize if MPI is running.
 * mi_world_finish: every rank's exit status from rank 0's rc (a broadcast;
 *   all ranks must call it, the workers with any rc), then mi_world_finalize:
 *   a command whose rank 0 ends in an error it has already said (a refused
 *   chat message, a server that could not start) exits non-zero everywhere. */
void mi_world_init(int *argc, char ***argv);
int mi_world_rank(void);
int mi_world_size(void);
/* 1 when a launcher (mpirun, srun) started this process: its stdout and
 * stderr are then forwarded separately and may interleave. */
int mi_world_launched(void);
void mi_world_finalize(void);
int mi_world_finish(int rc);

/* The job size and this process's rank as the launcher announced them
 * (Open MPI's environment), before and without MPI_Init: 1 and rank 0 when
 * no launcher started it. rank may be NULL. Lets a one-device command refuse
 * to run N times under mpirun before it does any work. */
int mi_world_launch_size(int *rank);

/* Collectives of the whole job for set-up and reports (configs, plans,
 * options, host names, measurements; never a program's exchange), in bytes.
 * Every rank must call them in the same order. Alone, nothing moves.
 * mi_world_bcast: rank 0's bytes[0, bytes) to every rank's buf.
 * mi_world_gather: every rank's `bytes` bytes to rank 0's all[size * bytes],
 *   in rank order (all may be NULL on the other ranks).
 * mi_world_gather_strings: every rank's string to rank 0: a malloc'ed array
 *   of size malloc'ed copies, in rank order (NULL on the other ranks).
 * mi_world_barrier: returns when every rank has called it.
 * mi_world_sum: x summed over the ranks on rank 0 (the others get their x).
 * MPI errors end the job (MPI's default handler). */
void mi_world_bcast(void *buf, size_t bytes);
void mi_world_gather(const void *mine, size_t bytes, void *all);
char **mi_world_gather_strings(const char *mine);
void mi_world_barrier(void);
double mi_world_sum(double x);

/* Collective: on rank 0, rtt_s[r] = the round trip of a small message to
 * rank r (median of 9, seconds; rtt_s[0] = 0), measured without spinning so
 * that a CPU-limited device answers as it would while idle. */
void mi_world_rtt(double *rtt_s);

/* Collective error check: every rank passes whether it failed and its
 * message; if any failed, the lowest failing rank prints
 * "meshinfer: error: <msg>" and all ranks finalize MPI and exit(1). */
void mi_check_all(int failed, const char *msg);

#endif
