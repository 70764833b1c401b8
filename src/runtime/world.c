/* The MPI world: start-up without a launcher, rank and size, collective
 * error checks (see runtime.h). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/runtime.h"

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

int mi_world_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("PMI_SIZE") ||
           getenv("SLURM_STEP_ID");
}

/* Every pair of ranks exchanges one int before any work, with errors
 * returned and a deadline: a job whose hosts no transport connects
 * (btl_tcp_if_include naming an interface some host lacks, or no tcp in
 * --mca btl across hosts) otherwise dies at its first message deep in a
 * collective, under Open MPI's own banner only, which names neither the MCA
 * parameter nor the fix; and one whose selection reaches the wrong peer (lo
 * between hosts: every host's 127.0.0.1 is itself) waits forever. A rank that
 * cannot reach its peers, or not within MESHINFER_PROBE_TIMEOUT seconds
 * (default 60), says so in one line and aborts the job, so no rank waits. */
static void world_probe(const char *cmd)
{
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2)
        return;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* every rank sees the same value: a bad one stops each with one line */
    const char *env = getenv("MESHINFER_PROBE_TIMEOUT");
    double limit = env && *env ? mi_parse_double("MESHINFER_PROBE_TIMEOUT", env, 0.001, 86400) : 60;
    /* on the world itself: duplicating it would already communicate */
    MPI_Comm c = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    /* with each rank's number its command's: ranks started as different commands
     * (mpirun -np 1 meshinfer generate : -np 1 meshinfer serve) would wait on each
     * other's first collective for good */
    int *out = mi_malloc(2 * (size_t)size * sizeof *out, "probe"), *in = mi_malloc(2 * (size_t)size * sizeof *in, "probe");
    int mine = (int)(mi_hash64(cmd, strlen(cmd), MI_HASH_SEED) & 0x7fffffff);
    for (int i = 0; i < size; i++)
        out[2 * i] = rank, out[2 * i + 1] = mine;
    MPI_Request q = MPI_REQUEST_NULL;
    int rc = MPI_Ialltoall(out, 2, MPI_INT, in, 2, MPI_INT, c, &q), done = 0, late = 0;
    double t0 = mi_now();
    while (rc == MPI_SUCCESS && !done) {
        rc = MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !done) {
            if (mi_now() - t0 > limit) {
                late = 1;
                break;
            }
            struct timespec ts = {0, 200000}; /* the cores belong to the peers we wait for */
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; rc == MPI_SUCCESS && !late && i < size; i++)
        if (in[2 * i] != i)
            rc = MPI_ERR_OTHER;
    int other = -1; /* the first rank whose command differs (every rank sees the same) */
    for (int i = 0; rc == MPI_SUCCESS && !late && i < size && other < 0; i++)
        if (in[2 * i + 1] != in[1])
            other = i;
    if (other >= 0) {
        if (rank == 0) {
            fprintf(stderr, "meshinfer: error: rank %d was started as another command than rank 0's '%s': every "
                            "rank of a job runs the same meshinfer command (mpirun -np N meshinfer %s ...)\n",
                    other, cmd, cmd);
            fflush(stderr);
        }
        free(out);
        free(in);
        MPI_Finalize();
        exit(1);
    }
    if (rc != MPI_SUCCESS || late) {
        char host[MPI_MAX_PROCESSOR_NAME] = "?", why[MPI_MAX_ERROR_STRING] = "";
        int n = 0;
        MPI_Get_processor_name(host, &n);
        if (late)
            snprintf(why, sizeof why, "no answer within %g s, MESHINFER_PROBE_TIMEOUT", limit);
        else
            MPI_Error_string(rc, why, &n);
        fprintf(stderr,
                "meshinfer: error: rank %d (host %s) cannot exchange messages with every other rank (%s): no MPI "
                "transport connects their hosts; across hosts use --mca btl self,tcp (with --mca osc pt2pt) and a "
                "btl_tcp_if_include that matches an address on every host that the others can reach (an interface "
                "name they all have, or their common subnet; never lo)\n",
                rank, host, why);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(out);
    free(in);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_ARE_FATAL);
}

void mi_world_init(int *argc, char ***argv)
{
    const char *force = getenv("MESHINFER_MPI");
    int launched = mi_world_launched();
    if (force && *force) {
        if (strcmp(force, "0") && strcmp(force, "1"))
            mi_fatal("MESHINFER_MPI=%s: give 1 (initialise MPI) or 0 (run as one process)", force);
        launched = force[0] == '1';
    }
    if (launched && !mpi_running())
        MPI_Init(argc, argv);
    if (mpi_running()) {
        mi_set_fatal_hook(fatal_stop_world);
        world_probe(*argc > 0 && (*argv)[0] ? (*argv)[0] : "");
    }
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

int mi_world_finish(int rc)
{
    if (mpi_running() && mi_world_size() > 1)
        MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    mi_world_finalize();
    return rc;
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

/* Ping-pong of a 4-byte message between rank 0 and each rank in turn, the
 * median of 9 after one that sets the connection up. Waits release the CPU
 * (rt_waitall with the slow-link setting): a spinning rank on a device with a
 * CPU quota would be throttled and answer late, inflating the round trip. */
void mi_world_rtt(double *rtt_s)
{
    enum { REPS = 9 };
    int rank = mi_world_rank(), size = mi_world_size();
    float b = 0;
    rt_set_spin(20e-6);
    for (int r = 1; r < size; r++) {
        if (rank != 0 && rank != r)
            continue;
        double t[REPS];
        for (int k = 0; k < REPS + 1; k++) {
            double t0 = mi_now();
            MPI_Request q;
            if (rank == 0) {
                MPI_Isend(&b, 1, MPI_FLOAT, r, 11, MPI_COMM_WORLD, &q);
                rt_waitall(1, &q);
                MPI_Irecv(&b, 1, MPI_FLOAT, r, 11, MPI_COMM_WORLD, &q);
                rt_waitall(1, &q);
            } else {
                MPI_Irecv(&b, 1, MPI_FLOAT, 0, 11, MPI_COMM_WORLD, &q);
                rt_waitall(1, &q);
                MPI_Isend(&b, 1, MPI_FLOAT, 0, 11, MPI_COMM_WORLD, &q);
                rt_waitall(1, &q);
            }
            if (k > 0)
                t[k - 1] = mi_now() - t0;
        }
        if (rank == 0) {
            for (int i = 1; i < REPS; i++)
                for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                    double x = t[j];
                    t[j] = t[j - 1];
                    t[j - 1] = x;
                }
            rtt_s[r] = t[REPS / 2];
        }
    }
    if (rank == 0)
        rtt_s[0] = 0;
}

int mi_world_launch_size(int *rank)
{
    const char *n = getenv("OMPI_COMM_WORLD_SIZE"), *r = getenv("OMPI_COMM_WORLD_RANK");
    if (rank)
        *rank = r ? atoi(r) : 0;
    return n ? atoi(n) : 1;
}

/* The set-up and report collectives below travel on MPI_COMM_WORLD in bytes:
 * every rank of a job runs the same build (little-endian x86-64 and aarch64
 * alike), and none of them is an exchange of a program (the bytes checks
 * count only those). Alone, nothing moves. */
void mi_world_bcast(void *buf, size_t bytes)
{
    if (mi_world_size() > 1 && bytes > 0)
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

void mi_world_gather(const void *mine, size_t bytes, void *all)
{
    if (mi_world_size() > 1)
        MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    else if (all != mine)
        memcpy(all, mine, bytes);
}

char **mi_world_gather_strings(const char *mine)
{
    int rank = mi_world_rank(), size = mi_world_size();
    int len = (int)strlen(mine) + 1, *lens = rank == 0 ? mi_calloc((size_t)size, sizeof(int), "lengths") : NULL;
    mi_world_gather(&len, sizeof len, lens);
    int *displ = NULL, tot = 0;
    char *cat = NULL;
    if (rank == 0) {
        displ = mi_calloc((size_t)size, sizeof(int), "offsets");
        for (int r = 0; r < size; r++) {
            displ[r] = tot;
            tot += lens[r];
        }
        cat = mi_malloc((size_t)tot, "gathered strings");
    }
    if (size > 1)
        MPI_Gatherv(mine, len, MPI_CHAR, cat, lens, displ, MPI_CHAR, 0, MPI_COMM_WORLD);
    else
        memcpy(cat, mine, (size_t)len);
    char **out = NULL;
    if (rank == 0) {
        out = mi_calloc((size_t)size, sizeof(char *), "gathered strings");
        for (int r = 0; r < size; r++)
        {
            out[r] = mi_malloc((size_t)lens[r], "gathered strings");
            memcpy(out[r], cat + displ[r], (size_t)lens[r]);
        }
    }
    free(cat);
    free(displ);
    free(lens);
    return out;
}

void mi_world_barrier(void)
{
    if (mi_world_size() > 1)
        MPI_Barrier(MPI_COMM_WORLD);
}

double mi_world_sum(double x)
{
    double sum = x;
    if (mi_world_size() > 1)
        MPI_Reduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum;
}
