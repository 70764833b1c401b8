/* Communicators and RMA windows for a programs' exchanges (see internal.h). */
#include <stdio.h>
#include <sys/statvfs.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/runtime.h"

void rt_build_comms(mi_runtime *rt)
{
    const mi_programs *p = &rt->prog;
    rt->comms = mi_malloc((size_t)(p->n_comms ? p->n_comms : 1) * sizeof(MPI_Comm), "communicators");
    for (int i = 0; i < p->n_comms; i++)
        rt->comms[i] = MPI_COMM_NULL;
    rt->xr = mi_calloc((size_t)(p->n_xchg ? p->n_xchg : 1), sizeof(xchg_rt), "exchanges");
    /* one rank: every op is local, so no communicators, windows or MPI calls
     * at all (MPI may not even be initialized) */
    if (rt->size > 1) {
        MPI_Group world;
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        /* made in table order by their members only (MPI_Comm_create_group),
         * so no rank waits on a set it is not part of; the index is the tag
         * that keeps concurrent creations apart */
        for (int i = 0; i < p->n_comms; i++) {
            const mi_comm *cm = &p->comms[i];
            if (cm->n_members < 2 || mi_comm_index(cm, rt->rank) < 0)
                continue;
            MPI_Group g;
            MPI_Group_incl(world, cm->n_members, cm->members, &g);
            MPI_Comm_create_group(MPI_COMM_WORLD, g, i, &rt->comms[i]);
            MPI_Group_free(&g);
        }
        MPI_Group_free(&world);
    }
    char win_err[MI_ERRLEN] = "";
    for (int i = 0; i < p->n_xchg; i++) {
        const mi_exchange *x = &p->xchg[i];
        xchg_rt *xr = &rt->xr[i];
        xr->me = mi_comm_index(&p->comms[x->comm], rt->rank);
        xr->comm = xr->me >= 0 ? rt->comms[x->comm] : MPI_COMM_NULL;
        xr->win = MPI_WIN_NULL;
        xr->peers = MPI_GROUP_NULL;
        if (x->kind != MI_OP_PUT || xr->me < 0)
            continue;
        /* The projection rank exposes one slot per member, big enough for
         * max_T positions of that member's head outputs in the wire dtype;
         * head ranks expose nothing. Members put their outputs encoded, the
         * root decodes them into place. */
        int n = p->comms[x->comm].n_members;
        xr->slot_off = mi_calloc((size_t)n + 1, sizeof(size_t), "window slots");
        for (int j = 0; j < n; j++) {
            size_t b = j == x->root ? 0 : (size_t)rt->max_T * (size_t)mi_exchange_bytes(p, i, j, x->root);
            xr->slot_off[j + 1] = xr->slot_off[j] + b;
        }
        size_t wbytes = xr->slot_off[n];
        if (xr->me == x->root)
            xr->slots = mi_calloc(wbytes ? wbytes : 1, 1, "head gather window");
        if (xr->comm == MPI_COMM_NULL)
            continue;
        /* a failure here is the environment's (a transport without a one-sided
         * component, no room for MPI's shared memory): report it, not abort */
        MPI_Comm_set_errhandler(xr->comm, MPI_ERRORS_RETURN);
        int rc = MPI_Win_create(xr->slots, xr->me == x->root ? (MPI_Aint)wbytes : 0, 1, MPI_INFO_NULL, xr->comm,
                                &xr->win);
        MPI_Comm_set_errhandler(xr->comm, MPI_ERRORS_ARE_FATAL);
        if (rc != MPI_SUCCESS) {
            char es[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, es, &len);
            struct statvfs v;
            double shm_free = statvfs("/dev/shm", &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : -1;
            snprintf(win_err, sizeof win_err,
                     "MPI cannot create the one-sided window that gathers head outputs (%s). Over TCP, Debian's Open "
                     "MPI needs --mca osc pt2pt (it has no other one-sided component for TCP); on one host, "
                     "/dev/shm has %.0f KB free: enlarge it, or use --mca osc pt2pt too",
                     es, shm_free / 1e3);
            xr->win = MPI_WIN_NULL;
            continue;
        }
        /* post/start/complete/wait synchronises only the ranks that talk, one
         * message each way, where a fence costs a barrier */
        MPI_Group g;
        MPI_Comm_group(xr->comm, &g);
        int root = x->root;
        if (xr->me == root)
            MPI_Group_excl(g, 1, &root, &xr->peers);
        else
            MPI_Group_incl(g, 1, &root, &xr->peers);
        MPI_Group_free(&g);
    }
    /* every rank takes part, so a window that failed anywhere ends the job
     * on every rank with one line, not with MPI's abort banner */
    if (rt->size > 1)
        mi_check_all(win_err[0] != '\0', win_err);
}

void rt_free_comms(mi_runtime *rt)
{
    const mi_programs *p = &rt->prog;
    for (int i = 0; rt->xr && i < p->n_xchg; i++) {
        xchg_rt *xr = &rt->xr[i];
        if (xr->win != MPI_WIN_NULL)
            MPI_Win_free(&xr->win);
        if (xr->peers != MPI_GROUP_NULL)
            MPI_Group_free(&xr->peers);
        free(xr->slots);
        free(xr->slot_off);
    }
    for (int i = 0; rt->comms && i < p->n_comms; i++)
        if (rt->comms[i] != MPI_COMM_NULL)
            MPI_Comm_free(&rt->comms[i]);
    free(rt->xr);
    free(rt->comms);
    rt->xr = NULL;
    rt->comms = NULL;
}
