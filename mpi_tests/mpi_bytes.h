/* Bytes counted at the MPI layer: mpi_bytes.c defines the
 * MPI calls that move data (through the MPI profiling interface: each counts
 * its payload, then calls the PMPI_ version), so a test can hold what MPI was
 * actually handed against the plan's prediction, independently of the
 * runtime's own counters (mi_rank_metrics.bytes_sent/recv).
 *
 * What a call counts, as bytes from one world rank to another (type size x
 * count, at the rank that makes the call; a transfer is counted once, by its
 * sender or RMA origin):
 *   MPI_Send, MPI_Isend, MPI_Sendrecv_replace  count to dest
 *   MPI_Put, MPI_Accumulate                    origin count, origin -> target
 *   MPI_Get                                    origin count, target -> origin
 *   MPI_Bcast, MPI_Ibcast                      the root's count to every other member
 *   MPI_Gather, MPI_Gatherv, MPI_Igatherv      each member's sendcount to the root (the
 *                                              root's own, unless MPI_IN_PLACE, to itself)
 *   MPI_Allgatherv, MPI_Iallgatherv            each member's sendcount to every other member
 *   MPI_Allreduce                              each member's count to every other member
 * which is how the plan's prediction counts its exchanges (mi_exchange_bytes:
 * a broadcast as the root's message to each member, a gather as each
 * member's message to the root, an all-to-all as each member's message to
 * every other). Receives are not counted: what a rank receives is what the
 * others sent it (the matrix's column).
 *
 * Classes: DATA is everything on a communicator other than MPI_COMM_WORLD and
 * every RMA operation: the runtime's exchanges (activations, head outputs,
 * logits) run on their own communicators and windows (src/runtime/comms.c),
 * nothing else does. On MPI_COMM_WORLD, KV is the KV-cache moves of a
 * re-placement (tag TAG_KV_MOVE, src/runtime/migrate.c); CONTROL is the rest:
 * the commands rank 0 sends every worker before each forward (4 ints, plus the
 * tokens when every rank embeds), weight scatter, metric gathers, the test's
 * own broadcasts. */
#ifndef MESHINFER_MPI_BYTES_H
#define MESHINFER_MPI_BYTES_H

enum { MPIB_DATA, MPIB_KV, MPIB_CONTROL, MPIB_N_CLASSES };

/* This rank's counters to zero. */
void mpib_reset(void);
/* The same, as a mi_runtime_options.on_reset_metrics callback (arg unused). */
void mpib_reset_cb(void *arg);
/* Collective over MPI_COMM_WORLD: on rank 0, out[from * n + to] (n = world
 * size) = the bytes of class cls from world rank `from` to world rank `to`
 * counted by all ranks since their last reset. out is only written on rank 0. */
void mpib_matrix(int cls, double *out);

#endif
