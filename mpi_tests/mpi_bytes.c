/* Bytes counted at the MPI layer through the profiling interface (see
 * mpi_bytes.h). Linked into the test executable, these definitions take the
 * place of libmpi's for every call the program makes, the runtime's included;
 * each calls the PMPI_ version after counting. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_bytes.h"
#include "../src/runtime/internal.h" /* TAG_KV_MOVE */

static int g_n;         /* world size */
static double *g_bytes; /* [MPIB_N_CLASSES][g_n][g_n]: from -> to */
static int g_key = MPI_KEYVAL_INVALID;

static void init(void)
{
    if (g_bytes)
        return;
    PMPI_Comm_size(MPI_COMM_WORLD, &g_n);
    g_bytes = calloc((size_t)MPIB_N_CLASSES * g_n * g_n, sizeof(double));
    if (!g_bytes)
        PMPI_Abort(MPI_COMM_WORLD, 1);
}

static void add(int cls, int from, int to, double bytes)
{
    init();
    if (bytes <= 0 || from < 0 || to < 0 || from >= g_n || to >= g_n)
        return;
    g_bytes[((size_t)cls * g_n + from) * g_n + to] += bytes;
}

static double payload(int count, MPI_Datatype t)
{
    int size = 0;
    if (count <= 0)
        return 0;
    PMPI_Type_size(t, &size);
    return (double)count * size;
}

static int del_ranks(MPI_Comm c, int key, void *val, void *extra)
{
    (void)c, (void)key, (void)extra;
    free(val);
    return MPI_SUCCESS;
}

/* world ranks of group g's members, into out[0..n) */
static void translate(MPI_Group g, int n, int *out)
{
    MPI_Group world;
    int *in = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        in[i] = i;
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_translate_ranks(g, n, in, world, out);
    PMPI_Group_free(&world);
    free(in);
}

/* comm's members as world ranks: r[0] the size, then one per member (kept
 * as an attribute of the communicator, freed with it) */
static const int *ranks_of(MPI_Comm comm)
{
    init();
    if (g_key == MPI_KEYVAL_INVALID)
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, del_ranks, &g_key, NULL);
    int *r = NULL, flag = 0;
    PMPI_Comm_get_attr(comm, g_key, &r, &flag);
    if (flag)
        return r;
    int n;
    MPI_Group g;
    PMPI_Comm_size(comm, &n);
    r = malloc((size_t)(n + 1) * sizeof(int));
    r[0] = n;
    PMPI_Comm_group(comm, &g);
    translate(g, n, r + 1);
    PMPI_Group_free(&g);
    PMPI_Comm_set_attr(comm, g_key, r);
    return r;
}

static int me(void)
{
    int w;
    PMPI_Comm_rank(MPI_COMM_WORLD, &w);
    return w;
}

static int class_of(MPI_Comm comm, int tag)
{
    if (comm != MPI_COMM_WORLD)
        return MPIB_DATA;
    return tag == TAG_KV_MOVE ? MPIB_KV : MPIB_CONTROL;
}

/* a point-to-point message of bytes to comm's rank dest */
static void p2p(MPI_Comm comm, int dest, int tag, double bytes)
{
    if (dest == MPI_PROC_NULL)
        return;
    const int *r = ranks_of(comm);
    if (dest >= 0 && dest < r[0])
        add(class_of(comm, tag), me(), r[1 + dest], bytes);
}

/* bytes from this rank to every other member of comm (root < 0), or to root */
static void coll(MPI_Comm comm, int root, double bytes, int to_self)
{
    const int *r = ranks_of(comm);
    int cls = class_of(comm, -1), w = me();
    for (int j = 0; j < r[0]; j++)
        if ((root < 0 || j == root) && (r[1 + j] != w || to_self))
            add(cls, w, r[1 + j], bytes);
}

/* world rank of rank t of win's group */
static int win_world(MPI_Win win, int t)
{
    MPI_Group g;
    int n, out = -1;
    PMPI_Win_get_group(win, &g);
    PMPI_Group_size(g, &n);
    if (t >= 0 && t < n) {
        int *all = malloc((size_t)n * sizeof(int));
        translate(g, n, all);
        out = all[t];
        free(all);
    }
    PMPI_Group_free(&g);
    return out;
}

static int comm_rank(MPI_Comm comm)
{
    int r;
    PMPI_Comm_rank(comm, &r);
    return r;
}

/* ------------------------------------------------------------ point to point */

int MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm)
{
    p2p(comm, dest, tag, payload(count, t));
    return PMPI_Send(buf, count, t, dest, tag, comm);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
    p2p(comm, dest, tag, payload(count, t));
    return PMPI_Isend(buf, count, t, dest, tag, comm, req);
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int sendtag, int source, int recvtag,
                         MPI_Comm comm, MPI_Status *status)
{
    p2p(comm, dest, sendtag, payload(count, t));
    return PMPI_Sendrecv_replace(buf, count, t, dest, sendtag, source, recvtag, comm, status);
}

/* ------------------------------------------------------------ one-sided */

int MPI_Put(const void *oa, int oc, MPI_Datatype ot, int target, MPI_Aint disp, int tc, MPI_Datatype tt, MPI_Win win)
{
    add(MPIB_DATA, me(), win_world(win, target), payload(oc, ot));
    return PMPI_Put(oa, oc, ot, target, disp, tc, tt, win);
}

int MPI_Accumulate(const void *oa, int oc, MPI_Datatype ot, int target, MPI_Aint disp, int tc, MPI_Datatype tt,
                   MPI_Op op, MPI_Win win)
{
    add(MPIB_DATA, me(), win_world(win, target), payload(oc, ot));
    return PMPI_Accumulate(oa, oc, ot, target, disp, tc, tt, op, win);
}

int MPI_Get(void *oa, int oc, MPI_Datatype ot, int target, MPI_Aint disp, int tc, MPI_Datatype tt, MPI_Win win)
{
    add(MPIB_DATA, win_world(win, target), me(), payload(oc, ot));
    return PMPI_Get(oa, oc, ot, target, disp, tc, tt, win);
}

/* ------------------------------------------------------------ collectives */

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm)
{
    if (comm_rank(comm) == root)
        coll(comm, -1, payload(count, t), 0);
    return PMPI_Bcast(buf, count, t, root, comm);
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request *req)
{
    if (comm_rank(comm) == root)
        coll(comm, -1, payload(count, t), 0);
    return PMPI_Ibcast(buf, count, t, root, comm, req);
}

int MPI_Gather(const void *sb, int sc, MPI_Datatype st, void *rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm)
{
    if (sb != MPI_IN_PLACE)
        coll(comm, root, payload(sc, st), 1);
    return PMPI_Gather(sb, sc, st, rb, rc, rt, root, comm);
}

int MPI_Gatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rc[], const int displs[],
                MPI_Datatype rt, int root, MPI_Comm comm)
{
    if (sb != MPI_IN_PLACE)
        coll(comm, root, payload(sc, st), 1);
    return PMPI_Gatherv(sb, sc, st, rb, rc, displs, rt, root, comm);
}

int MPI_Igatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rc[], const int displs[],
                 MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req)
{
    if (sb != MPI_IN_PLACE)
        coll(comm, root, payload(sc, st), 1);
    return PMPI_Igatherv(sb, sc, st, rb, rc, displs, rt, root, comm, req);
}

int MPI_Allgatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rc[], const int displs[],
                   MPI_Datatype rt, MPI_Comm comm)
{
    if (sb != MPI_IN_PLACE)
        coll(comm, -1, payload(sc, st), 0);
    return PMPI_Allgatherv(sb, sc, st, rb, rc, displs, rt, comm);
}

int MPI_Iallgatherv(const void *sb, int sc, MPI_Datatype st, void *rb, const int rc[], const int displs[],
                    MPI_Datatype rt, MPI_Comm comm, MPI_Request *req)
{
    if (sb != MPI_IN_PLACE)
        coll(comm, -1, payload(sc, st), 0);
    return PMPI_Iallgatherv(sb, sc, st, rb, rc, displs, rt, comm, req);
}

int MPI_Allreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
    coll(comm, -1, payload(count, t), 0);
    return PMPI_Allreduce(sb, rb, count, t, op, comm);
}

/* ------------------------------------------------------------ reading */

void mpib_reset(void)
{
    init();
    memset(g_bytes, 0, (size_t)MPIB_N_CLASSES * g_n * g_n * sizeof(double));
}

void mpib_reset_cb(void *arg)
{
    (void)arg;
    mpib_reset();
}

void mpib_matrix(int cls, double *out)
{
    init();
    size_t nn = (size_t)g_n * g_n;
    PMPI_Reduce(g_bytes + (size_t)cls * nn, out, (int)nn, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
}
