/* The runtime's state, shared by its files (internal to runtime/):
 *   runtime.c   creation, the token loop's commands, workers' serve loop
 *   world.c     the MPI world, collective error checks
 *   load.c      loading this rank's shard (from the file, or streamed from rank 0)
 *   comms.c     communicators and RMA windows of a programs' exchanges
 *   exec.c      executing programs: one function per op kind
 *   collectives.c  the messages of each communication op kind
 *   gather.c    the gathers at rank 0: logits (whole or candidates), embedding rows
 *   migrate.c   re-placement: new shard, KV cache moved between ranks
 *   metrics.c   counters and the Chrome trace */
#ifndef MESHINFER_RUNTIME_INTERNAL_H
#define MESHINFER_RUNTIME_INTERNAL_H

#include <mpi.h>

#include "meshinfer/partition.h"
#include "meshinfer/runtime.h"

enum { CMD_FORWARD = 1, CMD_RESET = 2, CMD_STOP = 3, CMD_RESET_METRICS = 4, CMD_REPLAN = 5, CMD_POLL = 6,
       CMD_POLL_RSS = 7, CMD_FORWARD_AT = 8, CMD_DECODE = 9 /* CMD_FORWARD of a decode step */ };
enum { TAG_KV_MOVE = 77, TAG_XCHG = 78, TAG_CMD = 79, TAG_CLOCK = 80 };

typedef struct {
    short kind, layer;
    double t0, t1;
    double routed;  /* MOE steps: the (position, expert) selections this rank's experts ran; else -1 */
} trace_event;

/* trace kinds beyond the op kinds */
enum { TRACE_FORWARD = 100, TRACE_IDLE = 101, TRACE_REPLAN = 102 };

/* This rank's side of one exchange. */
typedef struct {
    int me;               /* member index, -1 when not a member */
    MPI_Comm comm;        /* MPI_COMM_NULL when not a member or alone */
    MPI_Win win;          /* PUT: the root's window */
    MPI_Group peers;      /* PUT: the other side of the access epoch */
    unsigned char *slots; /* PUT root: one slot per member for its encoded head outputs */
    size_t *slot_off;     /* PUT: byte offset of each member's slot */
} xchg_rt;

struct mi_runtime {
    int rank, size;
    mi_runtime_options opt;
    const unsigned char *keep_layers; /* during a re-placement: layers whose shard stays (not reloaded) */
    int keep_globals;                 /* ... and embeddings / classifier stay */
    /* the model file's weight dtypes (the first plan's): a later plan may hold a layer lower
     * (Voltron computation scaling), which loading then re-encodes from these */
    unsigned char stored_dtype[MI_MAX_LAYERS][MI_N_LAYER_MATS];
    mi_plan plan;
    mi_programs prog;
    mi_model model;
    mi_scratch s;
    int max_T;
    float *buf[MI_N_BUFS];     /* [max_T, width] each (X has one more float: the speculation flag) */
    int width[MI_N_BUFS];
    unsigned char *held;       /* [max_T, dim]: residual columns this rank holds after the last allgather */
    int held_all;              /* ... every one of them (then held is not consulted) */
    MPI_Comm *comms;           /* [n_comms], MPI_COMM_NULL where not a member */
    xchg_rt *xr;               /* [n_xchg] */
    int *tokens;               /* [max_T * in_words] the input of the current forward pass: its tokens,
                                  or (time-series family) its patches' floats, bit for bit */
    int in_words;              /* words of input per position: 1, or patch_len */
    float *patches;            /* [max_T * patch_len] the time-series input decoded from tokens (heap: the
                                  model file sets its size), NULL for a language model */
    int wire;                  /* the plan's wire dtype: the widest of its messages (buffers are sized by it) */
    unsigned char *wbuf;       /* encoded messages being sent or received */
    size_t wbuf_bytes;
    float *wtmp;               /* decoded messages */
    unsigned char *zwire;      /* a non-blocking broadcast's own copy of what it sends */
    size_t zwire_bytes;
    int *counts;               /* [4 * MI_MAX_RANKS] per-member byte counts and displacements */
    MPI_Request pend[MI_MAX_RANKS]; /* the sends of a non-blocking broadcast this rank is root of */
    int n_pend;                /* ... not yet complete */
    int *cmd;                  /* [4 + max_T * (in_words + 2)] a command, its tokens, and (CMD_FORWARD_AT)
                                  each row's position and KV slot, as received or sent */
    double tolerance;
    int accepted;              /* the last speculation decision */
    mi_rank_metrics m;
    int trace;
    trace_event *ev;
    size_t n_ev, cap_ev;
    double routed; /* the last experts step's load (exec.c op_moe), for its trace event */
    /* expert parallelism's sparse dispatch (dispatch.c), NULL for a dense FFN */
    int *moe_ids;              /* [max_T * k] the step's selections: of every position at the root, of the
                                  rows received at a member */
    float *moe_w;              /* [max_T * k] their weights */
    int moe_rows;              /* rows routed (root) or received (member) this step */
    float *moe_out;            /* [max_T * (k + 1), dim] this rank's expert rows for the combine, in order */
    int moe_nout;
    float *moe_in;             /* [max_T * (k + 1), dim] the root: the members' rows, decoded */
    unsigned char *moe_wire;   /* dispatch and combine messages */
    /* pipelined micro-batches (runtime.c forward_micro): rank 0 runs every micro-batch's ops up to its
     * first receive before any receive, so its broadcasts then must not wait: with defer set they send
     * from copies of their own, completed at the end of the pass */
    int defer;
    MPI_Request *dreq;         /* [cap_d] the deferred sends */
    void **dbuf;               /* [cap_d] their copies */
    int n_dreq, n_dbuf, cap_d;
    float *logits_all;         /* [max_T, vocab] every micro-batch's logits, in row order */
    double t_origin, idle_since;
};

/* What the current forward pass runs on: T rows at positions pos0.. of KV
 * slot 0, or (pos set: a batch of sequences, batch.h) row t at position
 * pos[t] of slot slot[t]; logits of the last T_logits rows; the last
 * n_decode rows are decode rows (for the counters; runtime.h decode_rows). */
typedef struct {
    int T, pos0, T_logits;
    const int *pos, *slot;
    int n_decode;
} fwd;

/* Row t's position. */
static inline int fwd_pos(const fwd *f, int t) { return f->pos ? f->pos[t] : f->pos0 + t; }

/* load.c */
void rt_load_shard(mi_runtime *rt);

/* comms.c */
void rt_build_comms(mi_runtime *rt);
void rt_free_comms(mi_runtime *rt);

/* exec.c */
void rt_run_program(mi_runtime *rt, const fwd *f);
/* The pieces of rt_run_program: the program a pass runs (by its T), ops
 * [i0, i1) of it, and the pass's end (pending sends, counters; sent0 and
 * recv0 the byte counters before it). */
const mi_program *rt_program_of(const mi_runtime *rt, const fwd *f);
void rt_run_ops(mi_runtime *rt, const fwd *f, int i0, int i1);
void rt_pass_done(mi_runtime *rt, const fwd *f, double sent0, double recv0);

/* collectives.c: each returns seconds spent in MPI calls */
void rt_waitall(int n, MPI_Request *req);
void rt_set_spin(double s);
double rt_complete_pending(mi_runtime *rt);
void rt_poke(mi_runtime *rt);
double rt_bcast(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, int nonblocking, const fwd *f);
/* The deferred sends of a pipelined pass complete (rt->defer). */
double rt_complete_deferred(mi_runtime *rt);
double rt_put(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f);
double rt_allreduce(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const mi_op *op, const fwd *f);
double rt_allgatherv(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f);
/* T rows of the columns of set s of buf (row width W) encoded in wire as one
 * message into out; returns its bytes. And back, into buf's columns. */
size_t rt_pack_set(mi_runtime *rt, int wire, const float *buf, int W, int T, const mi_colset *s, void *out);
void rt_unpack_set(mi_runtime *rt, int wire, const void *in, int T, const mi_colset *s, float *buf, int W);

/* dispatch.c: expert parallelism's sparse dispatch (partition.h ROUTE,
 * DISPATCH, MOE with ROUTED, COMBINE) */
void rt_route(mi_runtime *rt, const mi_op *op, const fwd *f);
double rt_moe_dispatch(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f);
void rt_moe_routed(mi_runtime *rt, const mi_op *op);
double rt_moe_combine(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f);
/* collectives.c: how long a wait spins before it naps between tests */
double rt_spin_limit(void);

/* gather.c: the gathers at the root (partition.h MI_OP_GATHERV): the
 * logits, whole or as each slice's best candidates, and a split
 * vocabulary's embedding rows */
double rt_gatherv(mi_runtime *rt, const mi_exchange *x, xchg_rt *xr, const fwd *f);

/* migrate.c */
void rt_replan_local(mi_runtime *rt, const mi_plan *np, const mi_programs *prog, int n_pos);

/* runtime.c: everything that depends on the plan (used again by re-placement) */
void rt_setup_shard(mi_runtime *rt, const mi_plan *plan, const mi_programs *prog);
void rt_setup_rest(mi_runtime *rt);
void rt_teardown(mi_runtime *rt);

/* runtime.c: rank 0 tells the workers what to do next */
void rt_send_cmd(mi_runtime *rt, int cmd, int T, int pos0, int T_logits, const int *tokens);

/* metrics.c */
void rt_record(mi_runtime *rt, int kind, int layer, double t0, double t1);
void rt_reset_metrics_local(mi_runtime *rt);

#endif
