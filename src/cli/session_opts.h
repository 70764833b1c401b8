/* The distributed options shared by generate, perplexity, bench and forecast:
 * getopt_long entries, --help text and parsing into control.h's session_opts. */
#ifndef MESHINFER_SESSION_OPTS_H
#define MESHINFER_SESSION_OPTS_H

#include <getopt.h>

#include "meshinfer/control.h"

/* getopt_long entries for the options above (codes >= 1000), to append to a
 * command's table, and their --help text. */
#define SESSION_LONG_OPTS                                                         \
    {"planner", required_argument, 0, 1000}, {"cluster", required_argument, 0, 1001}, \
    {"plan-file", required_argument, 0, 1002}, {"trace", required_argument, 0, 1003}, \
    {"plan-seed", required_argument, 0, 1004}, {"controller-works", required_argument, 0, 1005}, \
    {"weights", required_argument, 0, 1006}, {"speculate", no_argument, 0, 1007}, \
    {"tolerance", required_argument, 0, 1008}, {"min-acceptance", required_argument, 0, 1009}, \
    {"spec-profile", required_argument, 0, 1010}, {"replan", no_argument, 0, 1011}, \
    {"kv-positions", required_argument, 0, 1012}, {"wire-dtype", required_argument, 0, 1013}, \
    {"prune", required_argument, 0, 1014}, {"prune-mode", required_argument, 0, 1015}, \
    {"loss", required_argument, 0, 1016}, {"loss-mode", required_argument, 0, 1017}, \
    {"loss-seed", required_argument, 0, 1018}, {"phase-plans", required_argument, 0, 1019}, \
    {"tpot-ms", required_argument, 0, 1020}, {"importance", required_argument, 0, 1021}, \
    {"energy", no_argument, 0, 1022}, {"prune-ffn", required_argument, 0, 1023}, \
    {"ppl-budget", required_argument, 0, 1024}, {"somegather-quality", required_argument, 0, 1025}, \
    {"explain", no_argument, 0, 1026}, {"split-vocab", no_argument, 0, 1027}
extern const char *SESSION_HELP;

void session_opts_init(session_opts *o);

/* Returns 1 if code was one of the session options (and applies it). */
int session_opt(session_opts *o, int code, const char *arg);

/* Options given that would do nothing in this mode (one error line in err,
 * naming the option; returns -1; else 0): --prune-mode without --prune,
 * --loss-mode/--loss-seed without --loss, speculation's tuning without
 * --speculate, --plan-seed without --planner random, --speculate with tp,
 * and on a one-rank job (ranks 1) --weights scatter, --controller-works no and
 * --split-vocab. Checks needing the model or the placement are session.c's. */
int session_opts_check(const session_opts *o, const char *cmd, int ranks, char *err);

#endif
