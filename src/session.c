/* Shared set-up of the model-running commands (see session.h). */
#include "session.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

void session_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
}

void session_open(mi_session *ss, const char *cmd, const char *path, int chunk, int threads)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &ss->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ss->size);
    if (ss->size > 1)
        mi_fatal("%s: running on %d ranks, but distributed execution (plans) is not built yet; "
                 "run with one rank", cmd, ss->size);
    mi_set_blas_threads(threads);
    double t0 = mi_now();
    mi_model_load_path(&ss->model, path, &ss->tok);
    ss->load_seconds = mi_now() - t0;
    if (ss->model.cfg.synthetic)
        fprintf(stderr, "meshinfer: %s: %s has synthetic weights (seeded random): text and perplexity are "
                        "meaningless, speed figures are valid\n", cmd, path);
    int T = chunk < ss->model.cfg.seq_len ? chunk : ss->model.cfg.seq_len;
    mi_scratch_init(&ss->s, &ss->model.cfg, T);
}

void session_close(mi_session *ss)
{
    mi_scratch_free(&ss->s);
    mi_tokenizer_free(&ss->tok);
    mi_model_free(&ss->model);
}

int *session_encode_prompt(mi_session *ss, const char *prompt, int *n)
{
    if (!prompt || !*prompt)
        mi_fatal("prompt is empty (give some text with -p)");
    char err[MI_ERRLEN];
    int *ids = mi_malloc((strlen(prompt) + 3) * sizeof(int), "prompt tokens");
    *n = mi_tokenizer_encode(&ss->tok, prompt, 1, ids, err);
    if (*n < 0)
        mi_fatal("prompt: %s", err);
    int ctx = ss->model.cfg.seq_len;
    if (*n >= ctx)
        mi_fatal("prompt is %d tokens (with BOS) but the model's context is %d tokens; "
                 "shorten it to at most %d tokens", *n, ctx, ctx - 1);
    return ids;
}

float *session_prefill(mi_session *ss, const int *tokens, int n, int pos0)
{
    float *logits = NULL;
    for (int i = 0; i < n; i += ss->s.max_T) {
        int T = n - i < ss->s.max_T ? n - i : ss->s.max_T;
        logits = mi_forward(&ss->model, &ss->s, tokens + i, T, pos0 + i, 0);
    }
    return logits;
}
