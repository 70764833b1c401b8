/* A discrete-event simulation of a generation on a cluster (`meshinfer
 * simulate`; HeadSplit's simulation of 25 heterogeneous devices over 1,000
 * tokens): no MPI, nothing computed. Every rank's program (partition.h)
 * runs as events on its own clock: compute ops take the cost model's time
 * (cost.h mi_op_compute_s), each message of an exchange is a send event
 * whose arrival the receiver waits for, over the cluster's links (per-pair
 * latency and bandwidth, the eager limit's extra round trip; here also
 * jitter, loss and a shared medium). A generation is the prompt's prefill
 * passes, then one decode pass per token, the KV cache growing by a
 * position each; the memory account is checked before every pass as the
 * runtime's controller checks it (plan.h mi_replace_due), and a
 * re-placement's move is charged (cost.h mi_plan_switch_s).
 *
 * Layer: cost (below the planners: a re-placement's new plan comes from a
 * hook the caller gives, planner.h mi_plan_remake in `meshinfer simulate`).
 * Units: seconds, bytes. */
#ifndef MESHINFER_SIMULATE_H
#define MESHINFER_SIMULATE_H

#include <stdint.h>

#include "meshinfer/cost.h"
#include "meshinfer/partition.h"
#include "meshinfer/plan.h"

/* What the links do beyond the cost model's mean (plan.h mi_cluster's
 * jitter_s, loss and shared_medium, which the caller may override here). */
typedef struct {
    double jitter_s;   /* each message's one-way latency is drawn uniformly in [lat - j, lat + j], at least 0 */
    double loss;       /* probability in [0, 1) that a message is lost: it arrives rto_s later per loss */
    double rto_s;      /* the retransmission timeout (Linux TCP's least: 0.2 s) */
    int shared_medium; /* 1: every payload shares one medium of the cluster's `bandwidth`, one transfer at a
                          time in the order sent (each then takes its link's latency); 0: per-pair links */
    int spec_draws;    /* 1: each speculated transition is accepted or not per pass, drawn with the plan's
                          acceptance; 0: its expectation, as the cost model (the speculative attention's time
                          times the rejection probability) */
    uint64_t seed;     /* every draw (splitmix64) */
} mi_sim_links;

/* Links as the cluster file gives them (its jitter, loss and medium), no
 * speculation draws, rto 0.2 s, seed 1. */
void mi_sim_links_of(const mi_cluster *cl, mi_sim_links *lk);

/* 1 when nothing is drawn: the walk is then a max-plus system in the
 * context length (below). */
int mi_sim_links_exact(const mi_sim_links *lk);

/* What one pass's event walk gives. */
typedef struct {
    double token_s;                /* the pass's time, mi_predict_pass's rule: when rank 0 has its logits, or
                                      later if a worker would still be busy when its next command arrives */
    double busy_s[MI_MAX_RANKS];   /* compute seconds per rank (at full speed; messages' CPU not included) */
    double bytes;                  /* payload sent (every message's, commands and window posts 0) */
    long sends, recvs;             /* messages sent and received: equal once the walk is done */
    long events;                   /* events processed */
} mi_sim_pass_out;

/* A quota'd device's CPU time between passes (plan.h mi_device cpu_quota):
 * the CFS period each rank is in and the CPU it has used there, and when
 * the pass starts on the run's clock. Each device's periods start at its
 * own phase: cgroups' period timers run apart, and nothing measured gives
 * their phases, so mi_simulate draws each uniformly in [0, period) from the
 * links' seed (unless the request aligns them). */
typedef struct {
    double t0;                     /* the pass's start, seconds since the run's start */
    double phase[MI_MAX_RANKS];    /* device r's periods are [phase + k P, phase + (k + 1) P) */
    long period[MI_MAX_RANKS];     /* index of the period each rank's quota was last used in */
    double used[MI_MAX_RANKS];     /* CPU seconds used in that period */
    double idle_since[MI_MAX_RANKS]; /* when each worker finished its last pass and began to wait for the
                                        next command (-1: before the first; set 0 in a new state only
                                        if the workers are to be charged a wait from the run's start) */
} mi_sim_cpu;

/* When work seconds of CPU started at time t finish on a device with quota q
 * (in (0, 1]) of period P seconds: full speed until q * P is used in the
 * current period [k P, (k + 1) P), then nothing until the next one, whose
 * quota is whole (none carries over). *period and *used: the state above
 * (updated). q = 0: no quota (t + work). */
double mi_sim_cfs_run(double t, double work, double q, double P, long *period, double *used);

/* A wait for a message from ts to its arrival ta on a quota'd device (q,
 * P, the state as above) that spins for spin seconds at full CPU and then
 * polls taking the fraction poll of it: that CPU uses the quota; when the
 * period's quota is gone the rank is throttled (no polling) until the next
 * period. Returns when the rank sees the message: ta, or the start of the
 * next period when it was throttled at ta. */
double mi_sim_cfs_wait(double ts, double ta, double spin, double poll, double q, double P, long *period, double *used);

/* 1 when some device of cl has a quota or a message cost: the walk is then
 * no longer affine in the context, and every pass is walked in order. */
int mi_sim_cluster_cpu(const mi_cluster *cl, int n);

/* The event walk of one forward pass of phase ph over T positions (T_logits
 * of them wanting logits: 1, or a batch's every row) at context position
 * ctx, every rank starting idle when rank 0 sends the commands. rng: the
 * draws' state (advanced). link_bytes, link_msgs: [n_ranks * n_ranks]
 * (sender-major) to add each message's payload and count to, or NULL. With
 * exact links it gives mi_predict_pass's token_s and busy_s but for
 * two-round reductions (prefill's allreduce over more than two ranks), whose
 * payload crosses each link once here and twice in the cost model. cpu: the
 * quota'd devices' state from the pass before (updated), or NULL: every
 * quota whole at the pass's start, a period starting with it. A device's
 * msg_s is CPU on its clock (throttled by its quota) for every data message
 * it sends, before the message leaves, and every one it takes in, and for
 * the pass's command on a worker; a quota'd device's waits (spin_s, poll)
 * use its quota (mi_sim_cfs_wait), a worker's wait for the command counted
 * from the end of its last pass (cpu->idle_since). Returns 0, or -1 with err when the
 * programs' exchanges do not match (a rank waits for a message no rank
 * sends). */
int mi_sim_pass(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const mi_sim_links *lk, int ph,
                int T, int T_logits, int ctx, uint64_t *rng, double *link_bytes, double *link_msgs,
                mi_sim_cpu *cpu, mi_sim_pass_out *out, char *err);

/* A pass of T rows (each with logits) in M micro-batches pipelined as the
 * runtime's batch passes run them (runtime.c forward_micro): the rows split
 * as it splits them, rank 0 computing and sending each micro-batch up to
 * its first receive before it takes the first back, every worker carrying
 * the micro-batches through in turn (a micro-batch of one row on the decode
 * program, of more on the prefill one). One command per pass (the later
 * micro-batches' commands are not walked: their data follows at once).
 * When the programs do not pipeline, or M <= 1: mi_sim_pass of the T rows.
 * Returns as mi_sim_pass. */
int mi_sim_pass_micro(const mi_plan *plan, const mi_programs *p, const mi_cluster *cl, const mi_sim_links *lk, int T,
                      int M, int ctx, uint64_t *rng, double *link_bytes, double *link_msgs, mi_sim_cpu *cpu,
                      mi_sim_pass_out *out, char *err);

/* A re-placement's new plan: what planner.h mi_plan_remake makes for the
 * plan in force (cur) and need positions. Returns 0 with *np (the caller
 * takes it over) and the positions it budgets in *horizon, or -1 with err
 * when none fits. */
typedef int (*mi_sim_replan_fn)(void *ctx, const mi_plan *cur, int need, mi_plan *np, int *horizon, char *err);

typedef struct {
    int n_prompt;         /* prompt tokens, >= 1 */
    int n_tokens;         /* tokens generated: the first by the prompt's prefill, then n_tokens - 1 decode
                             passes (as generate); n_prompt + n_tokens <= the context */
    int batch;            /* B >= 1 sequences decoding together (batch.h): B prompts prefilled one after
                             another, then passes of B rows (mi_predict_batch_step's); the plan's config must
                             hold B KV slots (memory counts every slot at the same positions) */
    int micro;            /* batch passes as this many pipelined micro-batches (mi_sim_pass_micro) where
                             the plan pipelines; <= 1: one pass of B rows */
    int chunk;            /* prefill positions per pass (the runtime's: 64) */
    mi_sim_replan_fn replan; /* NULL: no re-placement: a device that would pass its whole budget stops the
                                run (a result, not an error) */
    void *replan_ctx;
    mi_sim_links links;
    int every_step;       /* 1: walk every decode pass; 0: with exact links, walk only as many as the
                             context-length dependence needs (below) */
    int aligned_periods;  /* 1: every quota'd device's periods start with the run; 0: each at a phase
                             drawn from links.seed (mi_sim_cpu) */
} mi_sim_request;

/* One re-placement during the run. */
typedef struct {
    int token;            /* the token whose pass it preceded */
    int position;         /* KV positions after that pass (need) */
    int rank;             /* the device that crossed the threshold or was fullest */
    double frac;          /* its share of its budget at position under the old plan */
    int outgrown;         /* 1: the cache outgrew the plan's positions; 0: the 85% crossing */
    int horizon;          /* positions the new plan budgets */
    int moved;            /* 0: the same placement (nothing charged) */
    int kv_heads_moved;   /* (layer, KV head) pairs whose rank changed */
    double switch_s;      /* the move charged to the token: mi_plan_switch_s at the positions cached */
} mi_sim_replan;

typedef struct {
    int n_ranks;
    int n_tokens;         /* tokens generated: fewer than asked when the run stopped */
    double *token_s;      /* [n_tokens] each token's latency: token 0 the prefill (TTFT), then each decode
                             pass (a re-placement before it included) */
    double *t_s;          /* [n_tokens] time since the start when the token is out */
    int *ctx;             /* [n_tokens] context positions its pass attended to (the prompt's for token 0) */
    double *busy_s;       /* [n_tokens * n_ranks] compute seconds of each rank in the token's passes */
    double *mem_bytes;    /* [n_tokens * n_ranks] bytes each rank holds after the token's pass */
    double *link_bytes;   /* [n_ranks * n_ranks] payload sender -> receiver over the run */
    double *link_msgs;    /* [n_ranks * n_ranks] messages, likewise */
    double ttft_s, tpot_s, total_s; /* prefill; mean decode latency (0 with one token); the whole run */
    double bytes, messages;         /* payload and messages over the run */
    long events;          /* events processed by the walks */
    int walks;            /* passes walked event by event */
    int interpolated;     /* decode passes taken from walks at other context lengths (exact links only) */
    int n_replans;
    mi_sim_replan *replans; /* [n_replans] */
    int stopped;          /* 1: a device ran out of memory (no re-placement) or no placement fit any more */
    char stop_reason[512];
    char planner[32];     /* the planner of the plan in force at the end */
} mi_sim_result;

/* Simulate the generation rq on cl, starting from plan (not changed; the
 * re-placements' plans are the simulator's own). With exact links a decode
 * pass's time is the maximum over the walk's paths of sums of times affine
 * in the context length (convex, piecewise linear): walks at the ends of a
 * run of passes under one plan and at its middle, and where the middle lies
 * on the chord the whole run is exactly linear (a convex function on its
 * chord at an inner point is linear there), else both halves again; the
 * rest are interpolated (counted in out->interpolated). With draws (jitter,
 * loss, speculation) or a shared medium, whose order of transfers may
 * change with the context, and with a device's CPU quota or message cost
 * (mi_sim_cluster_cpu: a quota's state runs from one pass into the next),
 * every pass is walked, in order. Returns 0 with *out (free
 * with mi_sim_result_free), or -1 with err: a request out of range (a
 * prompt or batch below 1, tokens past the context, KV slots fewer than the
 * batch), programs that do not compile, or a walk that fails. */
int mi_simulate(const mi_plan *plan, const mi_cluster *cl, const mi_sim_request *rq, mi_sim_result *out, char *err);
void mi_sim_result_free(mi_sim_result *r);

#endif
