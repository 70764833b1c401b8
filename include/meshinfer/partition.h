/* Programs: what every rank computes and sends in one forward pass.
 *
 * A partitioning scheme compiles a plan (plan.h: which rank holds which
 * shard) into one program per rank, an ordered list of operations on named
 * activation buffers: compute on column slices of them, and communication
 * (broadcast, put into a window, allreduce, allgatherv, gatherv) on a
 * communicator of the ranks involved. The runtime (runtime.h) executes
 * programs and knows no scheme; the cost model (cost.h) walks the same
 * programs to predict time and bytes. A plan compiles to a prefill program
 * and a decode program per rank; they may differ.
 *
 * Schemes: HeadSplit's head-level units (layerwise, roundrobin, random,
 * greedy, tp, and Voltron's hybrid: one rank holds the residual stream
 * between blocks, which moves by broadcasts, RMA gathers and reductions) and
 * CATS's somegather (every rank holds a column slice of the residual stream;
 * every exchange is an allgather of activation columns, optionally pruned).
 *
 * No MPI here: programs are plain data, unit-tested without MPI. */
#ifndef MESHINFER_PARTITION_H
#define MESHINFER_PARTITION_H

#include <stdio.h>

#include "meshinfer/plan.h"

/* Activation buffers of a rank, each [T, width] row-major float32 with T <=
 * the runtime's chunk; columns are in global (whole-model) order, so a slice
 * means the same columns on every rank. */
typedef enum {
    MI_BUF_X = 0,       /* [T, dim] residual stream */
    MI_BUF_XN,          /* [T, dim] normalised input of a block */
    MI_BUF_HEADS,       /* [T, n_heads*head_dim] attention outputs of all heads, head order */
    MI_BUF_HEADS_LOCAL, /* [T, n_heads*head_dim] this rank's attention outputs packed from column 0 */
    MI_BUF_TMP,         /* [T, dim] a block's output before it joins the residual (partial sums) */
    MI_BUF_HIDDEN,      /* [T, hidden_dim] FFN hidden activations silu(w1 x) * w3 x, unit order */
    MI_BUF_LOGITS,      /* [T, vocab_size] logits, vocabulary order */
    MI_N_BUFS
} mi_buf;

/* Columns of buffer b for model c. */
int mi_buf_width(const mi_config *c, int b);
const char *mi_buf_name(int b);

typedef enum { MI_NORM_ATTN = 0, MI_NORM_FFN, MI_NORM_FINAL } mi_norm_kind;

typedef enum {
    /* compute (no messages) */
    MI_OP_EMBED = 0, /* X[:, c0:c0+n] = the tokens' embedding rows, columns [c0, c0+n) */
    MI_OP_NORM,      /* XN = RMSNorm(X) * weight (norm of `layer`, or the final one) */
    MI_OP_ATTN,      /* buf[:, c0:c0+n] = attention of this rank's heads of `layer` on XN (its heads in
                        ascending order); appends their K and V at the positions to the KV cache */
    MI_OP_PROJ,      /* buf[:, c0:c0+n] (+)= in[:, i0:i0+ni] @ wo^T, wo = this rank's [n, ni] of `layer` */
    MI_OP_FFN_UP,    /* HIDDEN[:, c0:c0+n] = silu(w1 XN) * (w3 XN), this rank's n units */
    MI_OP_FFN_DOWN,  /* buf[:, c0:c0+n] (+)= in[:, i0:i0+ni] @ w2^T, w2 = this rank's [n, ni] */
    MI_OP_ADD,       /* X[:, c0:c0+n] += TMP[:, c0:c0+n] (POSTNORM variant: += the post-norm of TMP's rows
                        of `layer`'s block `norm`, MI_NORM_ATTN or MI_NORM_FFN) */
    MI_OP_SPEC_TEST, /* HeadSplit speculation test of `layer`: accepted = max over positions of
                        ||TMP|| / ||X|| < tolerance (before the ADD) */
    MI_OP_LOGITS,    /* LOGITS[:, c0:c0+n] = classifier rows [c0, c0+n) @ XN, last positions only */
    MI_OP_NORM_LOCAL,/* CATS device-local norm: NORM with the mean square over the columns of X this
                        rank holds after the last allgather (its own and those received; not the pruned or
                        lost ones, which become 0): with every column held, NORM's result exactly */
    MI_OP_MOE,       /* buf[:, c0:c0+n] (+)= the mixture-of-experts FFN of `layer` on XN (forward.h
                        mi_moe_rows: router over all experts, top-k, of them this rank's experts [i0, i0+ni)
                        weighted, and the shared expert when SHARED; n = dim): with some of the experts a
                        partial sum (expert parallelism), reduced over the expert ranks */
    /* communication: xid names the exchange (mi_exchange) every member's matching op shares */
    MI_OP_BCAST,     /* buf's columns from the root to the other members (FLAG: with the decision) */
    MI_OP_IBCAST,    /* the same, non-blocking at the root until its next communication (HeadSplit Z) */
    MI_OP_POST,      /* the root of a PUT exposes its window (MPI_Win_post) ahead of the PUT, so the
                        origins' puts never wait for the post to travel */
    MI_OP_PUT,       /* members put their HEADS_LOCAL into the root's window; the root places them
                        into HEADS (HeadSplit "gathered by RMA at the projection rank") */
    MI_OP_ALLREDUCE, /* X[:, c0:c0+n] += sum over members of TMP, the same sums on every member, in
                        the exchange's rounds (1: every member sends its whole partial to every other;
                        2: reduce-scatter then allgather, fewer bytes) */
    MI_OP_ALLGATHERV,/* each member's sent columns of buf to every other member (CATS somegather:
                        pruned columns never travel; lost ones arrive as absent) */
    MI_OP_GATHERV,   /* each member's LOGITS columns to the root (the exchange's cand > 0: each member's
                        cand best (logit, token id) pairs of them, and the root's LOGITS rows hold those
                        candidates and -INFINITY elsewhere, sampler.h); or (by_token, a split vocabulary)
                        each member's X rows, of which the root keeps each position's token's owner's */
    MI_OP_DISPATCH,  /* expert parallelism's sparse dispatch of `layer` (the root ROUTEd XN): to each other
                        member the XN rows of the positions that selected one of its experts (all rows to
                        the member holding the shared expert), ascending, each with the position's k
                        (expert id, weight) pairs; a member with none gets an empty message */
    MI_OP_COMBINE,   /* the members' expert rows back to the root (MOE with ROUTED: per dispatched row, its
                        selections in order, then the shared expert's row), which sums each position's k
                        rows in selection order, then the shared expert's, and adds the sum to X: the
                        one-device forward's additions exactly (forward.h mi_moe_route) */
    /* compute again (after the communication kinds, which mi_op_is_comm tells by range) */
    MI_OP_ROUTE,     /* the root of a DISPATCH: the router and top-k of `layer` on every position of XN */
    MI_N_OPS
} mi_op_kind;

/* op flags */
enum {
    MI_OPF_ADD = 1,         /* PROJ, FFN_DOWN: accumulate into buf */
    MI_OPF_FLAG = 2,        /* BCAST: the speculation decision travels after the rows (4 bytes) */
    MI_OPF_IF_REJECTED = 4, /* NORM, ATTN: only when the last speculation test rejected */
    MI_OPF_LAST = 8,        /* NORM(_LOCAL), LOGITS, GATHERV: only the positions whose logits are wanted
                               (the last one, or all), written to rows 0.. */
    MI_OPF_SUM = 16,        /* ALLREDUCE: leave the sum in TMP (an ADD joins it to X through a post-norm) */
    MI_OPF_SHARED = 32,     /* MOE: this rank holds and runs the shared expert (and its gate) */
    MI_OPF_ROUTED = 64,     /* MOE: only the rows and selections the last DISPATCH gave this rank (or, at
                               its root, routed here), each selection's weighted row apart, for a COMBINE */
};

/* The model family's variant of a compute op (a family is a config plus op
 * variants and parameters): chosen once, when a plan is compiled, so that
 * the executor and the cost model branch on op fields only. */
typedef enum {
    MI_OPV_DEFAULT = 0,  /* Llama: token embedding rows, RMSNorm, SwiGLU FFN, classifier rows */
    MI_OPV_PATCHES,      /* EMBED: patch embedding of the time-series input (series.h) */
    MI_OPV_LAYERNORM,    /* NORM, NORM_LOCAL: LayerNorm with bias (mean-centred) */
    MI_OPV_GELU,         /* FFN_UP: gelu(w1 XN + b1), no gate */
    MI_OPV_GEGLU,        /* FFN_UP: gelu_tanh(w1 XN) * (w3 XN) (Gemma) */
    MI_OPV_GELU_TANH,    /* FFN_UP: gelu_tanh(w1 XN + b1), no gate (GPT-2) */
    MI_OPV_POSTNORM,     /* ADD: X += RMSNorm(TMP) * the block's post-norm (Gemma) */
    MI_OPV_SERIES_HEAD,  /* LOGITS: the forecasting head over every patch of X (one output row) */
    MI_OPV_EMBED_ROWS,   /* EMBED of a split vocabulary: X[t] = token t's embedding when it is one of the
                            vocabulary rows [i0, i0+ni) this rank holds, zeros otherwise */
} mi_op_variant;

typedef struct {
    unsigned char kind;  /* mi_op_kind */
    unsigned char buf;   /* the buffer written (compute) or moved (communication) */
    unsigned char in;    /* the buffer read by PROJ and FFN_DOWN */
    unsigned char flags; /* MI_OPF_* */
    short layer;         /* -1: none */
    short norm;          /* NORM: mi_norm_kind */
    int xid;             /* communication: index into mi_programs.xchg; -1 for compute */
    int c0, n;           /* columns written (compute) */
    int i0, ni;          /* columns read from `in` */
    unsigned char variant; /* mi_op_variant */
    int runs, n_runs;    /* FFN_UP, FFN_DOWN of a layer with pruned FFN shards (Voltron's shard-wise
                            pruning): the kept units of the op's slice as mi_programs.run_c0/run_len
                            [runs, runs + n_runs) (possibly none); runs = -1: nothing pruned */
} mi_op;

/* A set of columns, as ascending runs [c0[i], c0[i] + len[i]). */
typedef struct {
    int n_runs;
    int *c0, *len;
    int count;           /* sum of len */
} mi_colset;

/* One exchange: the messages of one communication op, matched across its
 * members (every member's program holds one op with this xid). */
typedef struct {
    int kind;            /* mi_op_kind of the ops that execute it */
    int comm;            /* index into mi_programs.comms */
    int buf;             /* the buffer moved */
    int root;            /* member index of the root (BCAST, IBCAST, PUT, GATHERV), -1 for the others */
    int layer;           /* -1: none */
    int what;            /* mi_xch_kind (ALLGATHERV), MI_XCH_NONE otherwise */
    int flag;            /* carries the 4-byte speculation decision (BCAST) */
    int rounds;          /* ALLREDUCE: 1 (latency-bound decode) or 2 (bandwidth-bound prefill) */
    int wire;            /* mi_dtype its activations travel in: plan.h mi_plan_wire for its layer */
    mi_colset *send;     /* [n_members]: the columns member j sends (BCAST: the root's; PUT, GATHERV: each
                            non-root's; ALLGATHERV: each member's kept columns; ALLREDUCE: unused) */
    mi_colset *own;      /* [n_members] ALLGATHERV: the columns member j owns (send minus own = its pruned
                            columns); GATHERV by_token: the vocabulary rows member j holds; DISPATCH,
                            COMBINE: the experts member j holds (send[root]: XN's columns, [0, dim));
                            NULL otherwise */
    int mask_own;        /* ALLGATHERV: the owner too treats its pruned columns as absent (ordinary
                            magnitude pruning, the baseline of CATS); 0: only receivers do */
    int cand;            /* GATHERV of LOGITS: 0: each member sends its columns whole (in the wire dtype);
                            K > 0: its min(K, columns) best (logit, token id) pairs per position, 8 bytes each
                            (fp32 and int32, whatever the wire dtype: greedy stays exact) */
    int shared;          /* DISPATCH, COMBINE: the member holding the shared expert (it gets every row and
                            returns its gated row after each row's selections), -1 when none; else -1 */
    int top_k, n_experts;/* DISPATCH, COMBINE: the model's k of E experts (own[j]: member j's experts) */
    int by_token;        /* GATHERV of X (a split vocabulary's embedding rows): member j sends its [T, dim]
                            rows, the embeddings of the tokens among its vocabulary rows own[j] (zeros for the
                            others); the root keeps each position's row from its token's owner */
} mi_exchange;

typedef struct {
    int n_members;
    int *members;        /* world ranks, ascending */
} mi_comm;

typedef struct {
    int n_ops, cap;
    mi_op *ops;
} mi_program;

typedef enum { MI_PHASE_PREFILL = 0, MI_PHASE_DECODE = 1, MI_N_PHASES } mi_phase;

typedef struct {
    int n_ranks;
    int wire;            /* mi_dtype of activation messages (the plan's: the widest any exchange uses) */
    int n_comms;
    mi_comm *comms;
    int n_xchg;
    mi_exchange *xchg;
    mi_program *prog[MI_N_PHASES]; /* [n_ranks] each */
    int embed_all;       /* every rank embeds (needs the tokens), not just rank 0 (somegather, a split
                            vocabulary) */
    int n_runs;          /* kept FFN units of pruned layers, as ascending runs [run_c0[i], + run_len[i]) */
    int *run_c0, *run_len; /* [n_runs], indexed by mi_op.runs */
} mi_programs;

/* Compile plan into per-rank programs with the scheme of plan->planner, then
 * set what the model and plan decide per op: the family's op variants, the
 * kept FFN units of pruned layers, and each exchange's wire dtype. The
 * programs carry all the executor needs: it looks up no plan.
 * Returns 0, or -1 with one line in err (a plan the scheme cannot run). */
int mi_programs_compile(const mi_plan *plan, mi_programs *p, char *err);
void mi_programs_free(mi_programs *p);
/* A deep copy of src into dst, which owns it (free with mi_programs_free):
 * what the runtime keeps of programs its caller compiled. Exits on out of
 * memory. */
void mi_programs_copy(const mi_programs *src, mi_programs *dst);

/* Name of an op kind ("attention", "allgatherv", ...), for traces and listings. */
const char *mi_op_name(int kind);
/* 1 for the communication kinds. */
int mi_op_is_comm(int kind);

/* Where rank 0's program g (of programs p) splits for pipelined
 * micro-batches: the index of its one receive, when every communication
 * before it is a broadcast rank 0 roots, that receive is a broadcast from
 * another rank, and only compute follows (a chain through rank 0, as
 * layer-wise's); -1 otherwise. The runtime pipelines by it and the
 * simulator models the same rule. */
int mi_program_chain_split(const mi_programs *p, const mi_program *g);
/* 1 when p has at least 2 ranks and rank 0's program of every phase splits
 * so (mi_program_chain_split >= 0). */
int mi_programs_can_pipeline(const mi_programs *p);

/* Member index of world rank `rank` in communicator comm, -1 if not a member. */
int mi_comm_index(const mi_comm *comm, int rank);

/* Payload bytes per position that member `from` sends to member `to` in
 * exchange xid (0 when it sends nothing to it), in the programs' wire dtype
 * (tensor.h mi_wire_row_bytes; the speculation flag is 4 bytes; a logit
 * candidate 8 bytes). Reductions count their messages as runtime.h
 * describes them. This is the single
 * definition of every op kind's payload: the cost model and the memory and
 * traffic tables use it, and the runtime's own byte counters must agree. */
double mi_exchange_bytes(const mi_programs *p, int xid, int from, int to);

/* DISPATCH and COMBINE move rows that depend on the routing, so their
 * mi_exchange_bytes is an expectation under uniform routing (every set of k
 * of the E experts equally likely): a member holding n experts gets a
 * position's row with probability 1 - C(E-n, k) / C(E, k) (1 with the
 * shared expert), plus 8 bytes per selection of the row (int32 id, fp32
 * weight), and returns k * n / E expert rows per position (+1 with the
 * shared expert). mi_moe_dispatch_rows gives the expected rows member j
 * receives per position (0 for the root); mi_moe_combine_rows those it
 * returns. */
double mi_moe_dispatch_rows(const mi_exchange *x, int j);
double mi_moe_combine_rows(const mi_exchange *x, int j);

/* Bytes each rank sends and receives per position in one forward pass of
 * phase ph (sent/recv: [n_ranks], may be NULL). Returns the total. For
 * LOGITS exchanges a position is a position whose logits are wanted. */
double mi_programs_bytes(const mi_programs *p, int ph, double *sent, double *recv);

/* The partial sums of an ALLREDUCE are reduced the same way in every wire
 * dtype, so that every member ends with identical values and no partial is
 * quantized twice: two members swap their encoded partials and both add the
 * decoded ones in member order (one round of messages); more members
 * reduce-scatter then allgather (one round each): member j of n owns columns
 * [c0, c0+len) of dim, whole blocks of 32 split as evenly as possible,
 * receives the others' slices of its columns, sums them in fp32 in member
 * order, encodes the sum once, and every member decodes the same sums. */
void mi_wire_slice(int dim, int n_members, int j, int *c0, int *len);

/* Write the programs as text, one line per op, for `meshinfer plan --programs`. */
void mi_programs_print(const mi_programs *p, const mi_config *c, FILE *f);

/* Write the programs p compiled from plan in words, for `meshinfer plan
 * --explain` and `generate --explain`: first who holds what per layer (query
 * heads and their KV heads, wo, FFN units [v0, v0+n) of hidden_dim,
 * classifier rows of vocab_size, somegather's residual columns of dim), then
 * per phase and rank one numbered line per op: the weights a compute op
 * multiplies with (layer, matrix, heads, rows, units or columns; matrices
 * are [out, in] as in the model file: wq/wk/wv rows are head_dim per head,
 * wo is [dim, n_heads*head_dim], w1/w3 [hidden_dim, dim], w2 [dim,
 * hidden_dim]), and what a communication op sends to which ranks or waits
 * for from which, in bytes per position (mi_exchange_bytes: payload in the
 * exchange's wire dtype plus 4-byte speculation decisions; no controller
 * commands or MPI headers). Each rank's line gives its bytes sent and
 * received per position; each phase ends with the total over ranks, which
 * for decode is mi_programs_bytes(p, MI_PHASE_DECODE), the bytes per token.
 * phases: MI_PHASE_DECODE or MI_PHASE_PREFILL for one phase, -1 for both
 * (decode first; a rank whose prefill program is the decode one's steps gets
 * one line). plan must be the plan p was compiled from (its head and unit
 * assignment names what the ops' columns are). Never fails; writes to f. */
void mi_programs_explain(const mi_plan *plan, const mi_programs *p, int phases, FILE *f);

#endif
