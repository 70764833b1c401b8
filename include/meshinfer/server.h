/* `meshinfer serve`: an OpenAI-compatible HTTP endpoint on rank 0 (layer
 * server, above control). libmicrohttpd's thread serves HTTP and never calls
 * MPI; the thread that calls mi_server_run (rank 0's main thread, the one
 * that calls MPI) runs the scheduler: it prepares queued requests (chat
 * template, tokens, limits), adds them to the continuous batch (batch.h)
 * while slots are free, steps the batch, and hands each sequence's text to
 * its connection (whole, or as server-sent events). The workers serve the
 * runtime meanwhile (mi_runtime_serve). docs/guide/serve.md has the routes,
 * fields and limits. */
#ifndef MESHINFER_SERVER_H
#define MESHINFER_SERVER_H

#include <stddef.h>

#include "meshinfer/control.h"

typedef struct {
    const char *host;        /* address to listen on (default "127.0.0.1"; "0.0.0.0" or "::" for all) */
    int port;                /* 0: any free port (the start line names it) */
    const char *api_key;     /* Bearer key the /v1 routes need, or NULL */
    int max_batch;           /* sequences decoding together (>= 1) */
    int micro_batches;       /* decode passes as this many pipelined micro-batches where the plan is a
                                chain (batch.h mi_batch_pipeline); 0: the batch's default */
    int max_queue;           /* requests waiting for a slot before 503 (>= 0) */
    size_t max_body;         /* request body bytes (413 past it) */
    int max_tokens;          /* the largest max_tokens a request may ask for */
    double timeout_s;        /* a request's headers and body must arrive within it; an idle
                                keep-alive connection is closed after it */
    double drain_s;          /* SIGTERM/SIGINT: running and queued requests get this long */
    const char *alias;       /* the model's id in the API, or NULL: the model file's name */
    const char *chat_template; /* a chat template kind by name (chat.h) instead of the file's, or NULL */
    const char *pid_file;    /* written with rank 0's pid once listening (removed at exit), or NULL */
} mi_server_opts;

/* Defaults: 127.0.0.1:8080, max_batch 1, max_queue 64, max_body 1 MiB,
 * max_tokens 4096 (and never past the context), timeout 30 s, drain 30 s. */
void mi_server_opts_init(mi_server_opts *o);

/* SIGTERM and SIGINT make a running server drain and return (the handler only
 * sets a flag); SIGPIPE is ignored. Call once on rank 0 before mi_server_run;
 * workers call mi_server_ignore_signals instead, so that a signal every rank
 * receives (mpirun's) leaves them serving until rank 0 releases them.
 * launched: a launcher (mpirun, srun) started this process. Then a SIGTERM
 * sent by the parent process is the launcher ending the job (a rank exited,
 * or mpirun itself was signalled; SIGKILL follows within about a second, so
 * there is no drain): mi_server_run answers every running and queued request
 * 503 at once (a stream gets an error event), says so in one line and exits
 * the process with status 1. A SIGTERM from anyone else drains as above. */
void mi_server_install_signals(int launched);
void mi_server_ignore_signals(void);

/* Rank 0: serve the open session ss (its runtime has at least o->max_batch
 * KV cache slots) until SIGTERM or SIGINT, then stop accepting, drain running
 * and queued requests for up to o->drain_s seconds (then cancel what is
 * left), and return 0. The caller then stops the workers (mi_runtime_stop)
 * and closes the session. Returns -1 with one line in err when it cannot
 * start: the address cannot be bound, the batch cannot be made, the chat
 * template named does not fit the model. */
int mi_server_run(mi_session *ss, const mi_server_opts *o, const char *model_id, char *err);

#endif
