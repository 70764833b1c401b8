/* The MPI world: start-up without a launcher, rank and size, collective
 * error checks (see runtime.h). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

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
