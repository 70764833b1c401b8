/* Distributed execution of a plan's schedule (see runtime.h). */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/runtime.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/kernels.h"
#include "meshinfer/model_file.h"

enum { CMD_FORWARD = 1, CMD_RESET = 2, CMD_STOP = 3, CMD_RESET_METRICS = 4, CMD_REPLAN = 5 };
enum { TAG_KV_MOVE = 77, TAG_REDUCE = 78 };

typedef struct {
    short step, layer;
    double t0, t1;
} trace_event;

typedef struct {
    MPI_Comm comm;     /* MPI_COMM_NULL when not a member or alone */
    int my_idx;        /* index of this rank among the members, -1 if not a member */
    int root_idx;      /* index of the root among the members */
    MPI_Win win;       /* GATHER steps */
    MPI_Group peers;   /* GATHER: the other side of the access epoch (origins at the root, the root at origins) */
    unsigned char *slots; /* GATHER root: the window, one slot per member for its encoded head outputs */
    size_t *slot_off;  /* GATHER: byte offset of each member's slot (by member index) */
    float *gbuf;       /* GATHER root: the decoded head outputs, [max_T, n_heads*head_dim] */
} step_rt;

struct mi_runtime {
    int rank, size;
    mi_runtime_options opt;
    const unsigned char *keep_layers; /* during a re-placement: layers whose shard stays (not reloaded) */
    int keep_globals;                 /* ... and embeddings / classifier stay */
    mi_plan plan;
    mi_schedule sched;
    mi_model model;
    mi_scratch s;
    step_rt *st;
    int max_T;
    float *x, *xn, *heads, *tmp, *logits_local, *logits_all, *logits_recv;
    float *zbuf;               /* Z in flight to the next layer's head ranks (speculation), fp32 wire */
    unsigned char *zwire;      /* ... or encoded in a lossy wire dtype */
    int wire;                  /* wire dtype of activation messages (the plan's) */
    unsigned char *wbuf;       /* encoded messages being sent or received */
    size_t wbuf_bytes;
    float *wtmp;               /* decoded messages, [max_T * max(dim, vocab)] */
    int *counts, *displs, *counts2, *displs2; /* per-member byte counts of the lossy collectives */
    MPI_Request pending;       /* a non-blocking broadcast this rank is root of, not yet complete */
    double tolerance;
    int accepted;              /* the last DECIDE's flag */
    int *recv_counts, *recv_displs;
    mi_rank_metrics m;
    int trace;
    trace_event *ev;
    size_t n_ev, cap_ev;
    double t_origin, idle_since;
};

static int mpi_running(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

/* mi_fatal's hook while MPI runs: alone we can finalize cleanly (no
 * banner); with peers only MPI_Abort guarantees they do not wait forever. */
static void fatal_stop_world(void)
{
    if (!mpi_running())
        return;
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
}

void mi_world_init(int *argc, char ***argv)
{
    const char *force = getenv("MESHINFER_MPI");
    int launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") ||
                   getenv("PMI_SIZE") || getenv("SLURM_STEP_ID");
    if (force && *force)
        launched = atoi(force) != 0;
    if (launched && !mpi_running())
        MPI_Init(argc, argv);
    if (mpi_running())
        mi_set_fatal_hook(fatal_stop_world);
}

int mi_world_rank(void)
{
    int r = 0;
    if (mpi_running())
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int mi_world_size(void)
{
    int n = 1;
    if (mpi_running())
        MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

void mi_world_finalize(void)
{
    mi_set_fatal_hook(NULL);
    if (mpi_running())
        MPI_Finalize();
}

void mi_check_all(int failed, const char *msg)
{
    int rank = mi_world_rank(), size = mi_world_size();
    if (size == 1) {
        if (!failed)
            return;
        fprintf(stderr, "meshinfer: error: %s\n", msg);
        fflush(stderr);
        mi_world_finalize();
        exit(1);
    }
    int mine = failed ? rank : size, first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size)
        return;
    if (rank == first) {
        fprintf(stderr, "meshinfer: error: %s%s\n", msg, size > 1 && rank > 0 ? " (on a worker rank)" : "");
        fflush(stderr);
    }
    mi_world_finalize();
    exit(1);
}

static void record(mi_runtime *rt, int step, int layer, double t0, double t1)
{
    if (!rt->trace)
        return;
    if (rt->n_ev == rt->cap_ev) {
        if (rt->cap_ev >= (size_t)4 << 20)
            return; /* bounded: keep the first 4M events */
        rt->cap_ev = rt->cap_ev ? 2 * rt->cap_ev : 4096;
        trace_event *ne = realloc(rt->ev, rt->cap_ev * sizeof *ne);
        if (!ne)
            mi_fatal("out of memory recording the trace");
        rt->ev = ne;
    }
    rt->ev[rt->n_ev++] = (trace_event){(short)step, (short)layer, t0 - rt->t_origin, t1 - rt->t_origin};
}

/* ------------------------------------------------------------ scatter */

typedef struct {
    mi_model_file *mf;
    int dest;
} send_ctx;

/* Shards travel as the raw stored bytes (any dtype), in pieces of at most
 * 1 GiB so that counts fit an int. */
#define PIECE ((size_t)1 << 30)

static int fetch_and_send(void *ctx, const char *name, size_t row0, size_t nrows, size_t row_bytes, void *out,
                          char *err)
{
    send_ctx *sc = ctx;
    if (mi_model_read_raw(sc->mf, name, row0, nrows, row_bytes, out, err))
        mi_fatal("%s", err); /* the receiver is blocked in MPI_Recv: abort the job */
    size_t n = nrows * row_bytes;
    for (size_t off = 0; off < n; off += PIECE)
        MPI_Send((char *)out + off, (int)(n - off < PIECE ? n - off : PIECE), MPI_BYTE, sc->dest, 7, MPI_COMM_WORLD);
    return 0;
}

static int fetch_recv(void *ctx, const char *name, size_t row0, size_t nrows, size_t row_bytes, void *out, char *err)
{
    (void)ctx, (void)name, (void)row0, (void)err;
    size_t n = nrows * row_bytes;
    for (size_t off = 0; off < n; off += PIECE)
        MPI_Recv((char *)out + off, (int)(n - off < PIECE ? n - off : PIECE), MPI_BYTE, 0, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    return 0;
}

static void load_shard(mi_runtime *rt, const mi_runtime_options *opt)
{
    const mi_config *c = &rt->plan.cfg;
    char err[MI_ERRLEN] = "";
    mi_layer_spec *layers = mi_malloc((size_t)c->n_layers * sizeof *layers, "layer specs");
    mi_shard_spec spec = {layers, 0, 0, 0};
    /* resident growth is measured from after the file is open, so the HDF5
     * library's own caches do not count as weights */
    size_t rss0 = mi_rss_bytes();
    int rc = 0;
    if (!opt->scatter) {
        mi_config fc;
        mi_model_file *mf = mi_model_open(opt->model_path, &fc, err);
        rss0 = mi_rss_bytes();
        if (!mf) {
            rc = -1;
        } else {
            mi_plan_shard(&rt->plan, rt->rank, &spec);
            for (int l = 0; rt->keep_layers && l < c->n_layers; l++)
                if (rt->keep_layers[l])
                    memset(&spec.layers[l], 0, sizeof spec.layers[l]);
            if (rt->keep_globals)
                spec.embeddings = spec.cls_v0 = spec.cls_nv = 0;
            mi_weight_source src = mi_weight_source_file(mf);
            rc = mi_model_load(&rt->model, &src, c, &spec, err);
            mi_model_close(mf);
        }
        mi_check_all(rc != 0, err);
    } else if (rt->rank == 0) {
        mi_config fc;
        mi_model_file *mf = mi_model_open(opt->model_path, &fc, err);
        if (!mf)
            mi_fatal("%s", err);
        rss0 = mi_rss_bytes();
        for (int r = 1; r < rt->size; r++) {
            mi_plan_shard(&rt->plan, r, &spec);
            send_ctx sc = {mf, r};
            mi_weight_source src = {fetch_and_send, &sc, 1};
            mi_model other;
            if (mi_model_load(&other, &src, c, &spec, err))
                mi_fatal("%s", err);
            mi_model_free(&other);
        }
        mi_plan_shard(&rt->plan, 0, &spec);
        mi_weight_source src = mi_weight_source_file(mf);
        if (mi_model_load(&rt->model, &src, c, &spec, err))
            mi_fatal("%s", err);
        mi_model_close(mf);
    } else {
        mi_plan_shard(&rt->plan, rt->rank, &spec);
        mi_weight_source src = {fetch_recv, NULL, 0};
        if (mi_model_load(&rt->model, &src, c, &spec, err))
            mi_fatal("%s", err);
    }
    size_t rss1 = mi_rss_bytes();
    rt->m.rss_weights = rss1 > rss0 ? (double)(rss1 - rss0) : 0.0;
    rt->m.weight_bytes = (double)rt->model.weight_bytes;
    rt->m.kv_bytes = (double)rt->model.kv_bytes;
    free(layers);
}

/* ------------------------------------------------------------ set-up */

static int member_index(const mi_step *st, int rank)
{
    for (int i = 0; i < st->n_members; i++)
        if (st->members[i] == rank)
            return i;
    return -1;
}

static void build_comms(mi_runtime *rt)
{
    const mi_config *c = &rt->plan.cfg;
    rt->st = mi_calloc((size_t)rt->sched.n_steps, sizeof(step_rt), "step table");
    for (int i = 0; i < rt->sched.n_steps; i++) {
        rt->st[i].comm = MPI_COMM_NULL;
        rt->st[i].win = MPI_WIN_NULL;
        rt->st[i].my_idx = member_index(&rt->sched.steps[i], rt->rank);
        rt->st[i].root_idx = 0;
    }
    /* one rank: every step is local, so no communicators, windows or MPI
     * calls at all (MPI may not even be initialized) */
    MPI_Group world = MPI_GROUP_NULL;
    if (rt->size > 1)
        MPI_Comm_group(MPI_COMM_WORLD, &world);
    /* One communicator per distinct member set, created in schedule order by
     * its members only (MPI_Comm_create_group), so no rank waits on a set it
     * is not part of; the set's first index is the tag that keeps them apart. */
    for (int i = 0; i < rt->sched.n_steps; i++) {
        const mi_step *st = &rt->sched.steps[i];
        step_rt *sr = &rt->st[i];
        sr->comm = MPI_COMM_NULL;
        sr->win = MPI_WIN_NULL;
        sr->my_idx = member_index(st, rt->rank);
        sr->root_idx = st->root >= 0 ? member_index(st, st->root) : 0;
        if (sr->my_idx < 0 || st->n_members < 2)
            continue;
        int first = i;
        for (int j = 0; j < i; j++)
            if (rt->sched.steps[j].n_members == st->n_members &&
                !memcmp(rt->sched.steps[j].members, st->members, (size_t)st->n_members * sizeof(int))) {
                first = j;
                break;
            }
        if (first < i) {
            sr->comm = rt->st[first].comm;
            continue;
        }
        MPI_Group g;
        MPI_Group_incl(world, st->n_members, st->members, &g);
        MPI_Comm_create_group(MPI_COMM_WORLD, g, i, &sr->comm);
        MPI_Group_free(&g);
    }
    if (world != MPI_GROUP_NULL)
        MPI_Group_free(&world);
    /* RMA windows of the head-output gathers: the projection rank exposes
     * one slot per member, big enough for max_T positions of that member's
     * head outputs in the wire dtype; head ranks expose nothing. Members put
     * their outputs encoded, the root decodes them into place. */
    size_t gsize = (size_t)rt->max_T * c->n_heads * c->head_dim;
    for (int i = 0; i < rt->sched.n_steps; i++) {
        const mi_step *st = &rt->sched.steps[i];
        step_rt *sr = &rt->st[i];
        if (st->kind != MI_STEP_GATHER || sr->my_idx < 0)
            continue;
        sr->slot_off = mi_calloc((size_t)st->n_members + 1, sizeof(size_t), "gather slots");
        for (int j = 0; j < st->n_members; j++) {
            size_t b = st->members[j] == st->root ? 0 : (size_t)rt->max_T * (size_t)mi_step_bytes(&rt->plan, st,
                                                                                                    st->members[j]);
            sr->slot_off[j + 1] = sr->slot_off[j] + b;
        }
        size_t wbytes = sr->slot_off[st->n_members];
        if (st->root == rt->rank) {
            sr->gbuf = mi_calloc(gsize, sizeof(float), "head gather buffer");
            sr->slots = mi_calloc(wbytes ? wbytes : 1, 1, "head gather window");
        }
        if (sr->comm != MPI_COMM_NULL) {
            MPI_Win_create(sr->slots, sr->slots ? (MPI_Aint)wbytes : 0, 1, MPI_INFO_NULL, sr->comm, &sr->win);
            /* post/start/complete/wait synchronises only the ranks that talk,
             * one message each way, where a fence costs a barrier */
            MPI_Group g;
            MPI_Comm_group(sr->comm, &g);
            if (st->root == rt->rank) {
                int root_only = sr->root_idx;
                MPI_Group_excl(g, 1, &root_only, &sr->peers);
            } else {
                MPI_Group_incl(g, 1, &sr->root_idx, &sr->peers);
            }
            MPI_Group_free(&g);
        }
    }
}

/* Everything that depends on the plan, in two parts: the plan copy and the
 * shard, then the buffers (sized by the shard), communicators and windows.
 * Used at creation and again by a re-placement, which puts back what it kept
 * between the two. */
static void setup_shard(mi_runtime *rt, const mi_plan *plan)
{
    /* deep copy so the caller may free its plan */
    size_t n;
    int *buf = mi_plan_serialize(plan, &n);
    char err[MI_ERRLEN];
    if (mi_plan_deserialize(buf, n, &plan->cfg, &rt->plan, err))
        mi_fatal("%s", err);
    free(buf);
    rt->max_T = rt->opt.max_T < plan->cfg.seq_len ? rt->opt.max_T : plan->cfg.seq_len;
    mi_schedule_build(&rt->plan, &rt->sched);
    load_shard(rt, &rt->opt);
}

static void setup_rest(mi_runtime *rt)
{
    const mi_config *c = &rt->plan.cfg;
    mi_scratch_init(&rt->s, c, rt->max_T);
    size_t T = (size_t)rt->max_T, d = (size_t)c->dim;
    rt->x = mi_calloc(T * d + 1, sizeof(float), "residual"); /* + the speculation flag */
    rt->zbuf = mi_calloc(T * d, sizeof(float), "speculation buffer");
    rt->wire = rt->plan.wire;
    rt->zwire = mi_calloc(T * mi_wire_row_bytes(rt->wire, d) + 8, 1, "speculation buffer");
    /* wbuf holds at most a lossy allreduce's three parts (sends, receives,
     * gathered sums) or T rows of logits; wtmp two decoded slices of dim */
    size_t widest = 2 * d > (size_t)c->vocab_size ? 2 * d : (size_t)c->vocab_size;
    rt->wbuf_bytes = T * (4 * widest + 3 * mi_wire_row_bytes(rt->wire, d) + 64) + 64 * (size_t)MI_MAX_RANKS;
    rt->wbuf = mi_malloc(rt->wbuf_bytes, "message buffer");
    rt->wtmp = mi_calloc(T * widest, sizeof(float), "message buffer");
    rt->counts = mi_calloc(4 * (size_t)MI_MAX_RANKS, sizeof(int), "message counts");
    rt->displs = rt->counts + MI_MAX_RANKS;
    rt->counts2 = rt->displs + MI_MAX_RANKS;
    rt->displs2 = rt->counts2 + MI_MAX_RANKS;
    rt->pending = MPI_REQUEST_NULL;
    rt->xn = mi_calloc(T * d, sizeof(float), "activations");
    rt->heads = mi_calloc(T * (size_t)c->n_heads * c->head_dim, sizeof(float), "head outputs");
    rt->tmp = mi_calloc(T * d, sizeof(float), "partial sums");
    rt->logits_local = mi_calloc(T * (size_t)(rt->model.cls_nv ? rt->model.cls_nv : 1), sizeof(float), "logits");
    if (rt->rank == 0) {
        rt->logits_all = mi_calloc(T * (size_t)c->vocab_size, sizeof(float), "logits");
        rt->logits_recv = mi_calloc(T * (size_t)c->vocab_size, sizeof(float), "logits");
        rt->recv_counts = mi_calloc((size_t)rt->size, sizeof(int), "counts");
        rt->recv_displs = mi_calloc((size_t)rt->size, sizeof(int), "displacements");
    }
    build_comms(rt);
}

static void teardown(mi_runtime *rt)
{
    for (int i = 0; i < rt->sched.n_steps; i++) {
        step_rt *sr = &rt->st[i];
        if (sr->win != MPI_WIN_NULL) {
            MPI_Win_free(&sr->win);
            MPI_Group_free(&sr->peers);
        }
        free(sr->gbuf);
        free(sr->slots);
        free(sr->slot_off);
    }
    /* communicators are shared between steps with the same members: free each once */
    for (int i = 0; i < rt->sched.n_steps; i++) {
        MPI_Comm cm = rt->st[i].comm;
        if (cm == MPI_COMM_NULL)
            continue;
        for (int j = i; j < rt->sched.n_steps; j++)
            if (rt->st[j].comm == cm)
                rt->st[j].comm = MPI_COMM_NULL;
        MPI_Comm_free(&cm);
    }
    free(rt->st);
    mi_schedule_free(&rt->sched);
    mi_plan_free(&rt->plan);
    mi_model_free(&rt->model);
    mi_scratch_free(&rt->s);
    free(rt->x);
    free(rt->zbuf);
    free(rt->zwire);
    free(rt->wbuf);
    free(rt->wtmp);
    free(rt->counts);
    free(rt->xn);
    free(rt->heads);
    free(rt->tmp);
    free(rt->logits_local);
    free(rt->logits_all);
    free(rt->logits_recv);
    free(rt->recv_counts);
    free(rt->recv_displs);
    rt->st = NULL;
    rt->x = rt->zbuf = rt->xn = rt->heads = rt->tmp = rt->wtmp = NULL;
    rt->zwire = rt->wbuf = NULL;
    rt->counts = rt->displs = rt->counts2 = rt->displs2 = NULL;
    rt->logits_local = rt->logits_all = rt->logits_recv = NULL;
    rt->recv_counts = rt->recv_displs = NULL;
}

mi_runtime *mi_runtime_create(const mi_plan *plan, const mi_runtime_options *opt)
{
    mi_runtime *rt = mi_calloc(1, sizeof *rt, "runtime");
    rt->rank = mi_world_rank();
    rt->size = mi_world_size();
    if (plan->n_ranks != rt->size)
        mi_fatal("plan is for %d ranks but the job has %d", plan->n_ranks, rt->size);
    rt->opt = *opt;
    rt->trace = opt->trace;
    rt->tolerance = opt->tolerance;
    setup_shard(rt, plan);
    setup_rest(rt);
    if (rt->size > 1)
        MPI_Barrier(MPI_COMM_WORLD);
    rt->t_origin = mi_now();
    rt->idle_since = rt->t_origin;
    return rt;
}

/* ------------------------------------------------------------ steps */

/* Copy a member's head outputs local [T][its heads * group * head_dim] (its
 * KV heads in ascending order, as the plan lists them) into their places
 * in the projection's input gbuf [T][n_heads * head_dim]. */
static void scatter_heads(const mi_runtime *rt, int layer, int member, const float *local, int T, float *gbuf)
{
    const mi_config *c = &rt->plan.cfg;
    int w = mi_kv_group(c) * c->head_dim, full = c->n_heads * c->head_dim, nk = 0, ids[MI_MAX_KV_HEADS];
    for (int k = 0; k < c->n_kv_heads; k++)
        if (rt->plan.layers[layer].kv_rank[k] == member)
            ids[nk++] = k;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < nk; i++)
            memcpy(gbuf + (size_t)t * full + (size_t)ids[i] * w, local + ((size_t)t * nk + i) * w,
                   (size_t)w * sizeof(float));
}

/* Seed 000: head outputs go to the projection rank by RMA. Each head rank
 * puts its [T, local] outputs, encoded in the wire dtype, into its own slot
 * of the root's window (one MPI_Put); the root then decodes every slot into
 * place. The root's own heads are copied exactly. */
static void gather_heads(mi_runtime *rt, const mi_step *st, step_rt *sr, int T)
{
    const mi_config *c = &rt->plan.cfg;
    int local = rt->model.layers[st->layer].spec.n_kv * mi_kv_group(c) * c->head_dim;
    if (st->root != rt->rank) {
        size_t rb = mi_wire_row_bytes(rt->wire, (size_t)local), bytes = (size_t)T * rb;
        const void *src = rt->heads;
        if (rt->wire != MI_F32) {
            mi_wire_pack(rt->wire, rt->heads, (size_t)T, (size_t)local, (size_t)local, rt->wbuf);
            src = rt->wbuf;
        }
        MPI_Put(src, (int)bytes, MPI_BYTE, sr->root_idx, (MPI_Aint)sr->slot_off[sr->my_idx], (int)bytes, MPI_BYTE,
                sr->win);
        rt->m.bytes_sent += (double)bytes;
        return;
    }
    scatter_heads(rt, st->layer, rt->rank, rt->heads, T, sr->gbuf);
}

/* The root, after the access epoch: decode every member's slot. */
static void gather_decode(mi_runtime *rt, const mi_step *st, step_rt *sr, int T)
{
    for (int j = 0; j < st->n_members; j++) {
        int m = st->members[j];
        if (m == rt->rank)
            continue;
        int local = (int)mi_step_floats(&rt->plan, st, m);
        mi_wire_unpack(rt->wire, sr->slots + sr->slot_off[j], (size_t)T, (size_t)local, (size_t)local, rt->wtmp);
        scatter_heads(rt, st->layer, m, rt->wtmp, T, sr->gbuf);
        rt->m.bytes_recv += (double)T * (double)mi_wire_row_bytes(rt->wire, (size_t)local);
    }
}

/* Broadcast T positions of x (row length dim) from the step's root; with
 * flag, one more float (the speculation decision) after them, which always
 * travels exactly. A lossy wire dtype encodes the rows; the root keeps its
 * exact values. */
static void bcast_rows(mi_runtime *rt, const mi_step *st, step_rt *sr, float *x, int T, int flag)
{
    const int d = rt->plan.cfg.dim, root = st->root == rt->rank;
    size_t bytes;
    if (rt->wire == MI_F32) {
        int n = T * d + (flag ? 1 : 0);
        MPI_Bcast(x, n, MPI_FLOAT, sr->root_idx, sr->comm);
        bytes = 4 * (size_t)n;
    } else {
        size_t rows = (size_t)T * mi_wire_row_bytes(rt->wire, (size_t)d);
        bytes = rows + (flag ? 4 : 0);
        if (root) {
            mi_wire_pack(rt->wire, x, (size_t)T, (size_t)d, (size_t)d, rt->wbuf);
            if (flag)
                memcpy(rt->wbuf + rows, x + (size_t)T * d, 4);
        }
        MPI_Bcast(rt->wbuf, (int)bytes, MPI_BYTE, sr->root_idx, sr->comm);
        if (!root) {
            mi_wire_unpack(rt->wire, rt->wbuf, (size_t)T, (size_t)d, (size_t)d, x);
            if (flag)
                memcpy(x + (size_t)T * d, rt->wbuf + rows, 4);
        }
    }
    if (root)
        rt->m.bytes_sent += (double)bytes * (st->n_members - 1);
    else
        rt->m.bytes_recv += (double)bytes;
}

/* Every member sends sbuf + sdispls[j] (scounts[j] bytes) to member j and
 * receives rcounts[j] bytes from j at rbuf + rdispls[j], all messages posted
 * at once: one round of link latency. (MPI_Alltoallv and MPI_Allgatherv
 * proceed in up to n-1 pairwise rounds; with 5 ms links that made a lossy
 * reduction slower than an fp32 MPI_Allreduce.) */
static void exchange_all(MPI_Comm comm, int n, int me, const unsigned char *sbuf, const int *scounts,
                         const int *sdispls, unsigned char *rbuf, const int *rcounts, const int *rdispls)
{
    MPI_Request req[2 * MI_MAX_RANKS];
    int nr = 0;
    for (int j = 0; j < n; j++)
        if (j != me && rcounts[j] > 0)
            MPI_Irecv(rbuf + rdispls[j], rcounts[j], MPI_BYTE, j, TAG_REDUCE, comm, &req[nr++]);
    for (int j = 0; j < n; j++)
        if (j != me && scounts[j] > 0)
            MPI_Isend(sbuf + sdispls[j], scounts[j], MPI_BYTE, j, TAG_REDUCE, comm, &req[nr++]);
    MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
}

/* Residual x += sum over members of tmp (an allreduce), with the same sums
 * on every member, in every wire dtype (plan.h, mi_wire_slice). Two members
 * swap their encoded partials and both add the two decoded partials in
 * member order: one round of messages. More members reduce-scatter then
 * allgather, one round each: member j receives the others' encoded partials
 * of its columns, sums them with its own in fp32 in member order, encodes the
 * sum once, and every member decodes the same sums. So residuals stay
 * identical across ranks (MPI_Allreduce does not promise that), no partial
 * is quantized twice, and the reduction takes two rounds of link latency
 * where MPI_Allreduce's recursive doubling takes up to log2(n) + 1 and
 * Alltoallv/Allgatherv up to n - 1 each (measured on 5 ms links: tp over 5
 * ranks 27.2 s with MPI_Allreduce, 21.9 s like this). A user-defined MPI_Op
 * inside MPI_Allreduce would re-quantize at every step of the reduction tree,
 * differently on different ranks. */
static void allreduce_add(mi_runtime *rt, const mi_step *st, step_rt *sr, int T, double *comm_t)
{
    const mi_config *c = &rt->plan.cfg;
    const int d = c->dim, n = T * d;
    if (sr->comm != MPI_COMM_NULL && st->n_members == 2) {
        const int me = sr->my_idx, other = 1 - me, w = rt->wire;
        size_t bytes = (size_t)T * mi_wire_row_bytes(w, (size_t)d);
        unsigned char *mine = rt->wbuf, *theirs = rt->wbuf + bytes;
        mi_wire_pack(w, rt->tmp, (size_t)T, (size_t)d, (size_t)d, mine);
        rt->counts[me] = rt->counts2[me] = 0;
        rt->counts[other] = rt->counts2[other] = (int)bytes;
        rt->displs[other] = 0;
        rt->displs2[other] = 0;
        double t0 = mi_now();
        exchange_all(sr->comm, 2, me, mine, rt->counts, rt->displs, theirs, rt->counts2, rt->displs2);
        *comm_t += mi_now() - t0;
        /* both members add decoded(member 0) + decoded(member 1), in that order */
        float *p0 = rt->wtmp, *p1 = rt->wtmp + n;
        mi_wire_unpack(w, me == 0 ? mine : theirs, (size_t)T, (size_t)d, (size_t)d, p0);
        mi_wire_unpack(w, me == 0 ? theirs : mine, (size_t)T, (size_t)d, (size_t)d, p1);
        for (int i = 0; i < n; i++)
            rt->tmp[i] = p0[i] + p1[i];
        rt->m.bytes_sent += (double)bytes;
        rt->m.bytes_recv += (double)bytes;
    } else if (sr->comm != MPI_COMM_NULL) {
        const int M = st->n_members, me = sr->my_idx, w = rt->wire;
        int c0[MI_MAX_RANKS] = {0}, len[MI_MAX_RANKS] = {0};
        for (int j = 0; j < M; j++)
            mi_wire_slice(d, M, j, &c0[j], &len[j]);
        size_t mine = (size_t)T * mi_wire_row_bytes(w, (size_t)len[me]), off = 0;
        unsigned char *send = rt->wbuf, *recv;
        /* reduce-scatter: my partial's columns of member j go to j */
        for (int j = 0; j < M; j++) {
            size_t b = j == me ? 0 : (size_t)T * mi_wire_row_bytes(w, (size_t)len[j]);
            if (b)
                mi_wire_pack(w, rt->tmp + c0[j], (size_t)T, (size_t)len[j], (size_t)d, send + off);
            rt->counts[j] = (int)b;
            rt->displs[j] = (int)off;
            off += b;
        }
        recv = send + off;
        for (int j = 0; j < M; j++) {
            rt->counts2[j] = j == me ? 0 : (int)mine;
            rt->displs2[j] = j * (int)mine;
        }
        double t0 = mi_now();
        exchange_all(sr->comm, M, me, send, rt->counts, rt->displs, recv, rt->counts2, rt->displs2);
        *comm_t += mi_now() - t0;
        /* my columns: the members' partials summed in member order */
        float *sum = rt->wtmp, *part = rt->wtmp + (size_t)T * len[me];
        memset(sum, 0, (size_t)T * len[me] * sizeof(float));
        for (int j = 0; j < M; j++) {
            if (j == me) {
                for (int t = 0; t < T; t++)
                    for (int k = 0; k < len[me]; k++)
                        sum[(size_t)t * len[me] + k] += rt->tmp[(size_t)t * d + c0[me] + k];
                continue;
            }
            mi_wire_unpack(w, recv + rt->displs2[j], (size_t)T, (size_t)len[me], (size_t)len[me], part);
            for (size_t k = 0; k < (size_t)T * len[me]; k++)
                sum[k] += part[k];
        }
        /* allgather the encoded sums; every member decodes all of them */
        unsigned char *all = recv + (size_t)M * mine;
        size_t aoff = 0;
        for (int j = 0; j < M; j++) {
            rt->counts[j] = (int)((size_t)T * mi_wire_row_bytes(w, (size_t)len[j]));
            rt->displs[j] = (int)aoff;
            aoff += (size_t)rt->counts[j];
        }
        mi_wire_pack(w, sum, (size_t)T, (size_t)len[me], (size_t)len[me], all + rt->displs[me]);
        for (int j = 0; j < M; j++) { /* my encoded sum to everyone */
            rt->counts2[j] = j == me ? 0 : (int)mine;
            rt->displs2[j] = rt->displs[me];
        }
        t0 = mi_now();
        exchange_all(sr->comm, M, me, all, rt->counts2, rt->displs2, all, rt->counts, rt->displs);
        *comm_t += mi_now() - t0;
        for (int j = 0; j < M; j++)
            mi_wire_unpack(w, all + rt->displs[j], (size_t)T, (size_t)len[j], (size_t)d, rt->tmp + c0[j]);
        double b = (double)(off + (size_t)(M - 1) * mine); /* what I send; I receive as much */
        rt->m.bytes_sent += b;
        rt->m.bytes_recv += b;
    }
    for (int i = 0; i < n; i++)
        rt->x[i] += rt->tmp[i];
}

/* Finish the non-blocking broadcast this rank started as root, before its
 * next blocking MPI call (the buffer and the ordering rules need it). */
static double complete_pending(mi_runtime *rt)
{
    if (rt->pending == MPI_REQUEST_NULL)
        return 0.0;
    double t0 = mi_now();
    MPI_Wait(&rt->pending, MPI_STATUS_IGNORE);
    return mi_now() - t0;
}

/* ob1 has no asynchronous progress: a pending broadcast only advances inside
 * MPI calls, so the FFN rank pokes it between compute chunks. */
static void poke(mi_runtime *rt)
{
    if (rt->pending != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&rt->pending, &done, MPI_STATUS_IGNORE);
    }
}

/* FFN of layer l into rt->tmp (not yet added to the residual). Decoding runs
 * it in row chunks with progress calls between them; every row is the same
 * matvec as unchunked, so results do not depend on the chunking. */
static void ffn_to_tmp(mi_runtime *rt, int l, int T)
{
    const mi_config *c = &rt->plan.cfg;
    mi_model *m = &rt->model;
    const mi_layer *L = &m->layers[l];
    mi_rmsnorm(rt->xn, rt->x, L->ffn_norm, T, c->dim, c->norm_eps);
    if (T > 1) {
        mi_ffn_block(m, l, &rt->s, rt->xn, T, rt->tmp, 0);
        return;
    }
    const int chunks = 8, nf = L->spec.nf, d = c->dim;
    for (int k = 0; k < chunks; k++) {
        int a = nf * k / chunks, b = nf * (k + 1) / chunks;
        mi_tensor w1 = mi_tensor_rows(&L->w1, a, b - a), w3 = mi_tensor_rows(&L->w3, a, b - a);
        mi_matmul(rt->s.h1 + a, rt->xn, &w1, 1);
        mi_matmul(rt->s.h3 + a, rt->xn, &w3, 1);
        poke(rt);
    }
    mi_swiglu(rt->s.h1, rt->s.h3, (size_t)nf);
    for (int k = 0; k < chunks; k++) {
        int a = d * k / chunks, b = d * (k + 1) / chunks;
        mi_tensor w2 = mi_tensor_rows(&L->w2, a, b - a);
        mi_matmul(rt->tmp + a, rt->s.h1, &w2, 1);
        poke(rt);
    }
}

static void run_step(mi_runtime *rt, int i, int T, int pos0, int T_logits)
{
    const mi_step *st = &rt->sched.steps[i];
    step_rt *sr = &rt->st[i];
    if (sr->my_idx < 0)
        return;
    const mi_config *c = &rt->plan.cfg;
    mi_model *m = &rt->model;
    double comm = 0;
    if (sr->comm != MPI_COMM_NULL || st->kind == MI_STEP_DECIDE)
        comm += complete_pending(rt);
    double t0 = mi_now();
    double *bucket = NULL;
    switch (st->kind) {
    case MI_STEP_BCAST:
        bcast_rows(rt, st, sr, rt->x, T, 0);
        comm = mi_now() - t0;
        break;
    case MI_STEP_ATTN:
        mi_rmsnorm(rt->xn, rt->x, m->layers[st->layer].attention_norm, T, c->dim, c->norm_eps);
        mi_attn_block(m, st->layer, &rt->s, rt->xn, T, pos0, rt->heads);
        bucket = &rt->m.attn;
        break;
    case MI_STEP_GATHER:
        if (sr->win == MPI_WIN_NULL) {
            gather_heads(rt, st, sr, T); /* the projection rank holds every head */
        } else if (st->root == rt->rank) {
            MPI_Win_post(sr->peers, 0, sr->win);
            gather_heads(rt, st, sr, T); /* its own heads: a local copy */
            MPI_Win_wait(sr->win);
            gather_decode(rt, st, sr, T);
        } else {
            MPI_Win_start(sr->peers, 0, sr->win);
            gather_heads(rt, st, sr, T);
            MPI_Win_complete(sr->win);
        }
        comm = mi_now() - t0;
        break;
    case MI_STEP_PROJ:
        /* the schedule puts every PROJ right after its GATHER, whose window holds the heads */
        mi_proj_block(m, st->layer, rt->st[i - 1].gbuf, T, rt->x, 1);
        bucket = &rt->m.proj;
        break;
    case MI_STEP_PROJ_PARTIAL:
        mi_proj_block(m, st->layer, rt->heads, T, rt->tmp, 0);
        rt->m.proj += mi_now() - t0;
        allreduce_add(rt, st, sr, T, &comm);
        break;
    case MI_STEP_FFN: {
        ffn_to_tmp(rt, st->layer, T);
        int n = T * c->dim, l = st->layer;
        if (rt->plan.layers[l].speculate) {
            /* seed 000's test: is the FFN's contribution small next to Z? */
            double worst = 0;
            for (int t = 0; t < T; t++) {
                double fz = 0, zz = 0;
                for (int k = 0; k < c->dim; k++) {
                    double f = rt->tmp[(size_t)t * c->dim + k], z = rt->x[(size_t)t * c->dim + k];
                    fz += f * f;
                    zz += z * z;
                }
                double r = zz > 0 ? sqrt(fz / zz) : INFINITY;
                if (r > worst)
                    worst = r;
            }
            rt->accepted = worst < rt->tolerance;
            if (l < MI_SPEC_MAX_LAYERS) {
                rt->m.spec_decided[l] += 1;
                rt->m.spec_accepted[l] += rt->accepted;
                rt->m.spec_ratio_sum[l] += worst;
            }
        }
        for (int k = 0; k < n; k++)
            rt->x[k] += rt->tmp[k];
        bucket = &rt->m.ffn;
        break;
    }
    case MI_STEP_SPEC_BCAST: {
        int n = T * c->dim;
        if (sr->comm == MPI_COMM_NULL)
            break; /* the projection rank is also the FFN rank and the next layer's only head rank */
        /* the buffer stays in flight while the root runs the FFN: its own copy */
        size_t bytes = (size_t)T * mi_wire_row_bytes(rt->wire, (size_t)c->dim);
        void *buf = rt->wire == MI_F32 ? (void *)rt->zbuf : (void *)rt->zwire;
        if (st->root == rt->rank) {
            if (rt->wire == MI_F32)
                memcpy(rt->zbuf, rt->x, (size_t)n * sizeof(float));
            else
                mi_wire_pack(rt->wire, rt->x, (size_t)T, (size_t)c->dim, (size_t)c->dim, rt->zwire);
            MPI_Ibcast(buf, (int)bytes, MPI_BYTE, sr->root_idx, sr->comm, &rt->pending);
            rt->m.bytes_sent += (double)bytes * (st->n_members - 1);
        } else {
            MPI_Request rq;
            MPI_Ibcast(buf, (int)bytes, MPI_BYTE, sr->root_idx, sr->comm, &rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            mi_wire_unpack(rt->wire, buf, (size_t)T, (size_t)c->dim, (size_t)c->dim, rt->x);
            rt->m.bytes_recv += (double)bytes;
        }
        comm += mi_now() - t0;
        break;
    }
    case MI_STEP_SPEC_ATTN:
    case MI_STEP_ATTN_CHECK:
        if (st->kind == MI_STEP_ATTN_CHECK && rt->accepted)
            break; /* keep the attention computed on Z */
        mi_rmsnorm(rt->xn, rt->x, m->layers[st->layer].attention_norm, T, c->dim, c->norm_eps);
        mi_attn_block(m, st->layer, &rt->s, rt->xn, T, pos0, rt->heads);
        bucket = &rt->m.attn;
        break;
    case MI_STEP_DECIDE: {
        int n = T * c->dim;
        if (sr->comm == MPI_COMM_NULL)
            break; /* alone: the flag is already ours */
        if (st->root == rt->rank)
            rt->x[n] = rt->accepted ? 1.0f : 0.0f;
        bcast_rows(rt, st, sr, rt->x, T, 1);
        rt->accepted = rt->x[n] != 0.0f;
        comm += mi_now() - t0;
        break;
    }
    case MI_STEP_FFN_PARTIAL:
        mi_rmsnorm(rt->xn, rt->x, m->layers[st->layer].ffn_norm, T, c->dim, c->norm_eps);
        mi_ffn_block(m, st->layer, &rt->s, rt->xn, T, rt->tmp, 0);
        rt->m.ffn += mi_now() - t0;
        allreduce_add(rt, st, sr, T, &comm);
        break;
    case MI_STEP_LOGITS: {
        int rows = m->cls_nv;
        if (rows > 0)
            mi_logits(m, &rt->s, rt->x + (size_t)(T - T_logits) * c->dim, T_logits, rt->logits_local);
        rt->m.logits += mi_now() - t0;
        double tc = mi_now();
        int count = rows * T_logits;
        if (sr->comm == MPI_COMM_NULL) {
            memcpy(rt->logits_all, rt->logits_local, (size_t)count * sizeof(float));
        } else {
            /* each member's [T_logits, rows] encoded in the wire dtype; rank 0
             * places every part at its vocabulary rows (its own exactly) */
            unsigned char *dst = rt->rank == 0 ? (unsigned char *)rt->logits_recv : NULL;
            if (rt->rank == 0) {
                int off = 0;
                for (int j = 0; j < st->n_members; j++) {
                    int r = st->members[j];
                    rt->recv_counts[j] = r == 0 ? 0 : (int)mi_step_bytes(&rt->plan, st, r) * T_logits;
                    rt->recv_displs[j] = off;
                    off += rt->recv_counts[j];
                }
            }
            int mine = rt->rank == 0 ? 0 : (int)((size_t)T_logits * mi_wire_row_bytes(rt->wire, (size_t)rows));
            if (mine)
                mi_wire_pack(rt->wire, rt->logits_local, (size_t)T_logits, (size_t)rows, (size_t)rows, rt->wbuf);
            MPI_Gatherv(rt->wbuf, mine, MPI_BYTE, dst, rt->recv_counts, rt->recv_displs, MPI_BYTE, sr->root_idx,
                        sr->comm);
            if (rt->rank == 0) {
                for (int j = 0; j < st->n_members; j++) {
                    int r = st->members[j], v0 = 0, nr = 0;
                    for (int k = 0; k < rt->plan.n_cls; k++)
                        if (rt->plan.cls[k].rank == r) {
                            v0 = rt->plan.cls[k].v0;
                            nr = rt->plan.cls[k].n;
                        }
                    if (r == 0)
                        for (int t = 0; t < T_logits; t++)
                            memcpy(rt->logits_all + (size_t)t * c->vocab_size + v0, rt->logits_local + (size_t)t * nr,
                                   (size_t)nr * sizeof(float));
                    else
                        mi_wire_unpack(rt->wire, dst + rt->recv_displs[j], (size_t)T_logits, (size_t)nr,
                                       (size_t)c->vocab_size, rt->logits_all + v0);
                    rt->m.bytes_recv += (double)rt->recv_counts[j];
                }
            } else {
                rt->m.bytes_sent += (double)mine;
            }
        }
        comm = mi_now() - tc;
        break;
    }
    }
    double t1 = mi_now();
    if (bucket)
        *bucket += t1 - t0;
    rt->m.comm += comm;
    record(rt, st->kind, st->layer, t0, t1);
}

static void run_forward(mi_runtime *rt, int T, int pos0, int T_logits)
{
    for (int i = 0; i < rt->sched.n_steps; i++)
        run_step(rt, i, T, pos0, T_logits);
    rt->m.comm += complete_pending(rt);
    rt->m.forwards++;
    rt->m.positions += T;
}

static void reset_metrics_local(mi_runtime *rt);

static void send_cmd(mi_runtime *rt, int cmd, int T, int pos0, int T_logits)
{
    int hdr[4] = {cmd, T, pos0, T_logits};
    if (rt->size > 1)
        MPI_Bcast(hdr, 4, MPI_INT, 0, MPI_COMM_WORLD);
}

float *mi_runtime_forward(mi_runtime *rt, const int *tokens, int T, int pos0, int all_logits)
{
    const mi_config *c = &rt->plan.cfg;
    if (T < 1 || T > rt->max_T || pos0 < 0 || pos0 + T > c->seq_len)
        mi_fatal("forward of %d positions at %d is outside the context (%d) or chunk (%d)", T, pos0, c->seq_len,
                 rt->max_T);
    double t0 = mi_now();
    rt->m.idle += t0 - rt->idle_since;
    int T_logits = all_logits ? T : 1;
    send_cmd(rt, CMD_FORWARD, T, pos0, T_logits);
    size_t d = (size_t)c->dim;
    for (int t = 0; t < T; t++)
        mi_tensor_row_f32(&rt->model.tok_embeddings, tokens[t], rt->x + t * d);
    run_forward(rt, T, pos0, T_logits);
    rt->idle_since = mi_now();
    record(rt, 100, -1, t0, rt->idle_since);
    return rt->logits_all;
}

float *mi_runtime_prefill(mi_runtime *rt, const int *tokens, int n, int pos0)
{
    float *logits = NULL;
    for (int i = 0; i < n; i += rt->max_T) {
        int T = n - i < rt->max_T ? n - i : rt->max_T;
        logits = mi_runtime_forward(rt, tokens + i, T, pos0 + i, 0);
    }
    return logits;
}

void mi_runtime_reset(mi_runtime *rt)
{
    send_cmd(rt, CMD_RESET, 0, 0, 0);
    mi_model_reset(&rt->model);
}

void mi_runtime_stop(mi_runtime *rt)
{
    send_cmd(rt, CMD_STOP, 0, 0, 0);
}

/* Seed 000 "Memory needs active management": every rank stages the KV rows
 * [0, n_pos) of the heads it holds, drops its old shard (so a device never
 * holds two placements at once), loads its shard of the new plan, and KV
 * heads whose owner changed are sent old owner -> new owner. Messages between
 * a pair are posted in the same (layer, KV head, K then V) order on both
 * sides, so one tag suffices (MPI keeps them in order). */
static void replan_local(mi_runtime *rt, const mi_plan *np, int n_pos)
{
    const mi_config *c = &rt->plan.cfg;
    int L = c->n_layers, nkv = c->n_kv_heads;
    size_t S = (size_t)c->seq_len, hd = (size_t)c->head_dim, rows = (size_t)n_pos * hd;
    double t0 = mi_now();
    /* What stays on this rank is kept in place, weights and KV cache alike;
     * with --weights scatter rank 0 streams every shard again instead. */
    mi_layer_spec *ol = mi_malloc(2 * (size_t)L * sizeof *ol, "layer specs");
    mi_shard_spec os = {ol, 0, 0, 0}, ns = {ol + L, 0, 0, 0};
    mi_plan_shard(&rt->plan, rt->rank, &os);
    mi_plan_shard(np, rt->rank, &ns);
    unsigned char *keep = mi_calloc((size_t)L, 1, "kept layers");
    mi_layer *kept = mi_calloc((size_t)L, sizeof *kept, "kept layers");
    for (int l = 0; l < L && !rt->opt.scatter; l++) {
        const mi_layer_spec *a = &os.layers[l];
        keep[l] = (a->n_kv || a->proj || a->nf) && !memcmp(a, &ns.layers[l], sizeof *a);
        if (keep[l]) {
            kept[l] = rt->model.layers[l];
            memset(&rt->model.layers[l], 0, sizeof kept[l]); /* teardown must not free it */
        }
    }
    mi_model g = rt->model; /* embeddings, final norm, classifier */
    int keep_g = !rt->opt.scatter && (os.embeddings || os.cls_nv) && os.embeddings == ns.embeddings &&
                 os.cls_v0 == ns.cls_v0 && os.cls_nv == ns.cls_nv;
    if (keep_g)
        rt->model.arena = NULL; /* teardown must not free it */
    int *old_owner = mi_malloc((size_t)L * nkv * sizeof(int), "old KV owners");
    float **stage = mi_calloc((size_t)L * nkv, sizeof(float *), "KV staging");
    for (int l = 0; l < L; l++) {
        memcpy(old_owner + (size_t)l * nkv, rt->plan.layers[l].kv_rank, (size_t)nkv * sizeof(int));
        const mi_layer *ly = &rt->model.layers[l];
        for (int i = 0; i < ly->spec.n_kv && rows > 0 && !keep[l]; i++) {
            float *b = mi_malloc(2 * rows * sizeof(float), "KV staging");
            memcpy(b, ly->k_cache + (size_t)i * S * hd, rows * sizeof(float));
            memcpy(b + rows, ly->v_cache + (size_t)i * S * hd, rows * sizeof(float));
            stage[(size_t)l * nkv + ly->spec.kv[i]] = b;
        }
    }
    mi_rank_metrics m = rt->m;
    teardown(rt);
    rt->keep_layers = keep;
    rt->keep_globals = keep_g;
    setup_shard(rt, np);
    rt->keep_layers = NULL;
    rt->keep_globals = 0;
    for (int l = 0; l < L; l++)
        if (keep[l])
            rt->model.layers[l] = kept[l];
    if (keep_g) {
        rt->model.has_embeddings = g.has_embeddings;
        rt->model.tok_embeddings = g.tok_embeddings;
        rt->model.norm = g.norm;
        rt->model.classifier = g.classifier;
        rt->model.cls_alias = g.cls_alias;
        rt->model.cls_v0 = g.cls_v0;
        rt->model.cls_nv = g.cls_nv;
        rt->model.arena = g.arena;
        rt->model.arena_bytes = g.arena_bytes;
    }
    rt->model.weight_bytes = mi_shard_weight_bytes(c, &ns);
    rt->model.kv_bytes = mi_shard_kv_bytes(c, &ns);
    m.weight_bytes = (double)rt->model.weight_bytes;
    m.kv_bytes = (double)rt->model.kv_bytes;
    m.rss_weights = rt->m.rss_weights;
    rt->m = m;
    setup_rest(rt);
    MPI_Request *req = mi_malloc(4 * (size_t)L * nkv * sizeof(MPI_Request), "KV move requests");
    int nr = 0;
    for (int l = 0; l < L && rows > 0; l++) {
        mi_layer *ly = &rt->model.layers[l];
        for (int i = 0; i < ly->spec.n_kv && !keep[l]; i++) {
            int k = ly->spec.kv[i], o = old_owner[(size_t)l * nkv + k];
            float *kd = ly->k_cache + (size_t)i * S * hd, *vd = ly->v_cache + (size_t)i * S * hd;
            if (o == rt->rank) {
                const float *b = stage[(size_t)l * nkv + k];
                memcpy(kd, b, rows * sizeof(float));
                memcpy(vd, b + rows, rows * sizeof(float));
            } else {
                MPI_Irecv(kd, (int)rows, MPI_FLOAT, o, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
                MPI_Irecv(vd, (int)rows, MPI_FLOAT, o, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
                rt->m.moved_bytes_recv += 2.0 * rows * sizeof(float);
            }
        }
        for (int k = 0; k < nkv; k++) {
            const float *b = stage[(size_t)l * nkv + k];
            int to = rt->plan.layers[l].kv_rank[k];
            if (!b || to == rt->rank)
                continue;
            MPI_Isend(b, (int)rows, MPI_FLOAT, to, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
            MPI_Isend(b + rows, (int)rows, MPI_FLOAT, to, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
            rt->m.moved_bytes_sent += 2.0 * rows * sizeof(float);
        }
    }
    if (nr)
        MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
    free(req);
    for (size_t i = 0; i < (size_t)L * nkv; i++)
        free(stage[i]);
    free(stage);
    free(old_owner);
    free(keep);
    free(kept);
    free(ol);
    double t1 = mi_now();
    rt->m.replans += 1;
    rt->m.replan_s += t1 - t0;
    record(rt, 102, -1, t0, t1);
}

void mi_runtime_replan(mi_runtime *rt, const mi_plan *plan, int n_pos)
{
    if (n_pos < 0 || n_pos > rt->plan.cfg.seq_len)
        mi_fatal("re-placement with %d cached positions is outside the context (%d)", n_pos, rt->plan.cfg.seq_len);
    size_t n;
    int *buf = mi_plan_serialize(plan, &n);
    send_cmd(rt, CMD_REPLAN, n_pos, (int)n, 0);
    if (rt->size > 1)
        MPI_Bcast(buf, (int)n, MPI_INT, 0, MPI_COMM_WORLD);
    free(buf);
    double t0 = mi_now();
    rt->m.idle += t0 - rt->idle_since;
    replan_local(rt, plan, n_pos);
    rt->idle_since = mi_now();
}

void mi_runtime_serve(mi_runtime *rt)
{
    for (;;) {
        int hdr[4];
        double t0 = mi_now();
        MPI_Bcast(hdr, 4, MPI_INT, 0, MPI_COMM_WORLD);
        double t1 = mi_now();
        rt->m.idle += t1 - t0;
        record(rt, 101, -1, t0, t1);
        if (hdr[0] == CMD_STOP)
            break;
        if (hdr[0] == CMD_RESET)
            mi_model_reset(&rt->model);
        else if (hdr[0] == CMD_RESET_METRICS)
            reset_metrics_local(rt);
        else if (hdr[0] == CMD_FORWARD)
            run_forward(rt, hdr[1], hdr[2], hdr[3]);
        else if (hdr[0] == CMD_REPLAN) {
            int *buf = mi_malloc((size_t)hdr[2] * sizeof(int), "plan buffer");
            MPI_Bcast(buf, hdr[2], MPI_INT, 0, MPI_COMM_WORLD);
            mi_plan np;
            char err[MI_ERRLEN];
            if (mi_plan_deserialize(buf, (size_t)hdr[2], &rt->plan.cfg, &np, err))
                mi_fatal("re-placement: %s", err);
            free(buf);
            replan_local(rt, &np, hdr[1]);
            mi_plan_free(&np);
        }
    }
}

const mi_rank_metrics *mi_runtime_metrics(mi_runtime *rt, mi_rank_metrics *all)
{
    int n = (int)(sizeof(mi_rank_metrics) / sizeof(double));
    (void)n;
    if (rt->size == 1) {
        if (all)
            *all = rt->m;
        return &rt->m;
    }
    MPI_Gather(&rt->m, (int)sizeof(mi_rank_metrics), MPI_BYTE, all, (int)sizeof(mi_rank_metrics), MPI_BYTE, 0,
               MPI_COMM_WORLD);
    return &rt->m;
}

static void reset_metrics_local(mi_runtime *rt)
{
    double w = rt->m.weight_bytes, kv = rt->m.kv_bytes, rss = rt->m.rss_weights;
    memset(&rt->m, 0, sizeof rt->m);
    rt->m.weight_bytes = w;
    rt->m.kv_bytes = kv;
    rt->m.rss_weights = rss;
    rt->n_ev = 0;
    rt->idle_since = mi_now();
}

void mi_runtime_reset_metrics(mi_runtime *rt)
{
    send_cmd(rt, CMD_RESET_METRICS, 0, 0, 0);
    reset_metrics_local(rt);
}

static const char *step_name(int k)
{
    switch (k) {
    case MI_STEP_BCAST: return "bcast residual";
    case MI_STEP_ATTN: return "attention";
    case MI_STEP_GATHER: return "gather heads (RMA)";
    case MI_STEP_PROJ: return "projection";
    case MI_STEP_PROJ_PARTIAL: return "projection partial + allreduce";
    case MI_STEP_FFN: return "FFN";
    case MI_STEP_SPEC_BCAST: return "send Z (speculation)";
    case MI_STEP_SPEC_ATTN: return "speculative attention";
    case MI_STEP_DECIDE: return "decide + bcast residual";
    case MI_STEP_ATTN_CHECK: return "attention (recompute if rejected)";
    case MI_STEP_FFN_PARTIAL: return "FFN partial + allreduce";
    case MI_STEP_LOGITS: return "logits";
    case 100: return "forward";
    case 101: return "idle";
    case 102: return "re-placement (load shard, move KV cache)";
    default: return "?";
    }
}

int mi_runtime_write_trace(mi_runtime *rt, const char *path)
{
    int n = (int)rt->n_ev;
    int *counts = NULL, *displs = NULL;
    if (rt->rank == 0) {
        counts = mi_calloc((size_t)rt->size, sizeof(int), "trace counts");
        displs = mi_calloc((size_t)rt->size, sizeof(int), "trace displacements");
    }
    if (rt->size > 1)
        MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    else
        counts[0] = n;
    int total = 0;
    if (rt->rank == 0)
        for (int r = 0; r < rt->size; r++) {
            displs[r] = total * (int)sizeof(trace_event);
            total += counts[r];
            counts[r] *= (int)sizeof(trace_event);
        }
    trace_event *all = rt->rank == 0 ? mi_malloc((size_t)total * sizeof(trace_event) + 1, "trace") : NULL;
    if (rt->size > 1)
        MPI_Gatherv(rt->ev, n * (int)sizeof(trace_event), MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    else if (n)
        memcpy(all, rt->ev, (size_t)n * sizeof(trace_event));
    int rc = 0;
    if (rt->rank == 0) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.partial", path);
        FILE *f = fopen(tmp, "w");
        if (!f) {
            rc = -1;
        } else {
            fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
            for (int r = 0; r < rt->size; r++)
                fprintf(f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": "
                           "\"rank %d%s\"}},\n", r, r, r == 0 ? " (controller)" : "");
            int r = 0, left = rt->size > 0 ? counts[0] / (int)sizeof(trace_event) : 0;
            for (int e = 0; e < total; e++) {
                while (left == 0 && r + 1 < rt->size) {
                    r++;
                    left = counts[r] / (int)sizeof(trace_event);
                }
                left--;
                const trace_event *ev = &all[e];
                fprintf(f, "{\"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"name\": \"%s\", \"cat\": \"%s\", "
                           "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"layer\": %d}}%s\n",
                        r, step_name(ev->step), ev->step >= 100 ? "token" : "step", ev->t0 * 1e6,
                        (ev->t1 - ev->t0) * 1e6, ev->layer, e + 1 < total ? "," : "");
            }
            fprintf(f, "]}\n");
            if (fclose(f) != 0 || rename(tmp, path) != 0) {
                remove(tmp);
                rc = -1;
            }
        }
        free(all);
        free(counts);
        free(displs);
    }
    return rc;
}

void mi_runtime_free(mi_runtime *rt)
{
    if (!rt)
        return;
    teardown(rt);
    free(rt->ev);
    free(rt);
}
