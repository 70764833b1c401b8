/* What `meshinfer plan`'s two files share (cmd_plan.c: placement plans;
 * cmd_plan_memory.c: --memory-model). Internal to src/cli/. */
#ifndef MESHINFER_CMD_PLAN_H
#define MESHINFER_CMD_PLAN_H

#include "cli.h"
#include "meshinfer/config.h"

/* --memory-model's options (CATS Q1). */
#define MAX_PRUNE 16

typedef struct {
    int max_devices, n_pos, wire;
    int dim;             /* --dim: the shape at another feature size (0: as it is) */
    int n_prune;
    double prune[MAX_PRUNE];
    const char *csv, *png;
} mem_opts;

/* --memory-model's --prune R[,R...]: each a ratio in [0, 1) (1 would send
 * nothing at all); mi_fatal on a bad list. */
void plan_parse_prune_list(const char *arg, mem_opts *o);

/* The config of --model (nothing else is read) or --shape, with the dtype
 * options applied; mi_fatal on an unknown shape or a bad dtype. */
void plan_load_config(const char *model, const char *shape, const cli_dtypes *dt, mi_config *c);

/* plan --memory-model: CATS's memory and traffic model of somegather and its
 * baselines over D = 1..max_devices (planner.h mi_mem_model_make) as a
 * table, and the CSV and gnuplot PNG when asked (checked before any work).
 * Returns the command's exit status. */
int plan_memory_model(const char *model, const char *shape, const cli_dtypes *dt, int wire, mem_opts *mo);

#endif
