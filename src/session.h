/* What generate, perplexity and bench share: MPI start-up, loading the model
 * and tokenizer, prompt checks, and a forward call (internal header). */
#ifndef MESHINFER_SESSION_H
#define MESHINFER_SESSION_H

#include "meshinfer/forward.h"
#include "meshinfer/model.h"
#include "meshinfer/tokenizer.h"

typedef struct {
    int rank, size;
    mi_model model;
    mi_tokenizer tok;
    mi_scratch s;
    double load_seconds;
} mi_session;

/* MPI_Init (works as a singleton without mpirun). */
void session_mpi_init(int *argc, char ***argv, int *rank, int *size);

/* Load model + tokenizer; scratch for chunk positions at once. threads sets
 * BLAS threads (0: leave default). Prints "synthetic weights" on stderr for
 * synthetic models. mi_fatal on any error. */
void session_open(mi_session *ss, const char *cmd, const char *path, int chunk, int threads);
void session_close(mi_session *ss);

/* Encode a prompt with BOS; mi_fatal for an empty prompt, invalid UTF-8, or a
 * prompt that leaves no room in the context. Returns ids (caller frees). */
int *session_encode_prompt(mi_session *ss, const char *prompt, int *n);

/* Run tokens[n] at positions pos0.. in chunks of the scratch size; returns
 * logits of the last position. */
float *session_prefill(mi_session *ss, const int *tokens, int n, int pos0);

#endif
