/* What generate, perplexity and bench share: MPI start-up, the distributed
 * options, making or loading the plan, starting the runtime, prompt checks
 * and the metrics report (internal header). */
#ifndef MESHINFER_SESSION_H
#define MESHINFER_SESSION_H

#include <getopt.h>
#include <stdio.h>

#include "meshinfer/plan.h"
#include "meshinfer/runtime.h"
#include "meshinfer/tokenizer.h"

typedef struct {
    const char *planner;     /* default "greedy" */
    const char *cluster;     /* cluster file, NULL: equal devices */
    const char *plan_file;   /* saved plan to use instead of a planner */
    const char *trace;       /* Chrome trace output */
    uint64_t plan_seed;
    int controller_works;    /* -1 default, 0 no, 1 yes */
    int scatter;             /* --weights scatter */
    int speculate;           /* --speculate */
    double tolerance;        /* --tolerance (default 0.05) */
    double min_acceptance;   /* --min-acceptance (default 0.7) */
    const char *spec_profile;/* --spec-profile FILE from `meshinfer profile` */
} session_opts;

/* getopt_long entries for the options above (codes >= 1000), to append to a
 * command's table, and their --help text. */
#define SESSION_LONG_OPTS                                                         \
    {"planner", required_argument, 0, 1000}, {"cluster", required_argument, 0, 1001}, \
    {"plan-file", required_argument, 0, 1002}, {"trace", required_argument, 0, 1003}, \
    {"plan-seed", required_argument, 0, 1004}, {"controller-works", required_argument, 0, 1005}, \
    {"weights", required_argument, 0, 1006}, {"speculate", no_argument, 0, 1007}, \
    {"tolerance", required_argument, 0, 1008}, {"min-acceptance", required_argument, 0, 1009}, \
    {"spec-profile", required_argument, 0, 1010}
extern const char *SESSION_HELP;

void session_opts_init(session_opts *o);
/* Returns 1 if code was one of the session options (and applies it). */
int session_opt(session_opts *o, int code, const char *arg);

typedef struct {
    int rank, size;
    mi_config cfg;
    mi_runtime *rt;
    mi_tokenizer tok;       /* rank 0 */
    double load_seconds;
    double plan_ms;
    mi_prediction pred;     /* rank 0: the cost model's view of the plan */
    mi_schedule sched;      /* rank 0 */
    mi_plan plan;           /* rank 0 */
    double rtt_s[MI_MAX_RANKS]; /* rank 0: measured round trip to each rank (0 for itself) */
} mi_session;

void session_mpi_init(int *argc, char ***argv, int *rank, int *size);

/* Collective: rank 0 opens the model and makes (or loads) the plan; every rank
 * loads its shard. chunk: positions per forward pass. One error line and exit
 * 1 on every rank for any failure. */
void session_open(mi_session *ss, const char *cmd, const char *path, const session_opts *o, int chunk, int threads);

/* Collective: stop workers (rank 0 releases them; workers return from
 * serving here), write the trace if asked, free. */
void session_close(mi_session *ss, const session_opts *o);

/* Rank 0: encode a prompt with BOS; mi_fatal for an empty prompt, invalid
 * UTF-8, or a prompt that leaves no room in the context. */
int *session_encode_prompt(mi_session *ss, const char *prompt, int *n);

/* Acceptance per transition at `tolerance` from a profile file written by
 * `meshinfer profile` (JSON). acc must hold n_layers-1 values. Returns 0 or -1
 * with err (unreadable, malformed, or for another model). */
int session_load_profile(const char *path, const mi_config *c, double tolerance, double *acc, char *err);

/* Rank 0: stop with one error line when logits hold NaN or infinity (corrupt
 * weights, or values that overflow fp32). */
void session_check_logits(const float *logits, int n, int pos);

/* Collective: gather every rank's metrics and, on rank 0, print them as a
 * JSON array (key "ranks") to f, per forward pass averages included. */
void session_metrics_json(mi_session *ss, FILE *f);

/* Collective: per-rank metrics as a human-readable table on rank 0's stderr. */
void session_metrics_table(mi_session *ss);

#endif
