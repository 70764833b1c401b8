/* `meshinfer simulate`'s report (sim_report.c): a table, JSON, CSV files
 * and gnuplot figures of a simulated generation. Internal to src/cli/. */
#ifndef MESHINFER_SIM_REPORT_H
#define MESHINFER_SIM_REPORT_H

#include "meshinfer/planner.h"
#include "meshinfer/simulate.h"

typedef struct {
    const mi_config *c;
    const mi_cluster *cl;
    const mi_sim_request *rq;
    const mi_sim_result *r;
    const mi_plan *plan;      /* the first placement */
    const char *cluster_file; /* NULL: --ranks N equal devices */
    double wall_s;            /* the simulation's own time on this machine */
    const mi_exact_info *exact; /* --planner exact's search (NULL: another planner or a plan file) */
} sim_report;

/* --csv DIR, --plot DIR: DIR made when missing (one level), and every file
 * the report writes into it checked as an output (output.h, against the
 * inputs); mi_fatal names the option and the problem. */
void sim_check_dir(const char *dir, const char *opt, const char *const *inputs, int n_inputs);

/* The table on stdout. */
void sim_print_table(const sim_report *s);
/* One JSON object on stdout (docs/guide/simulate.md lists its keys). */
void sim_print_json(const sim_report *s);
/* tokens.csv, devices.csv, links.csv and replans.csv into dir. */
void sim_write_csv(const sim_report *s, const char *dir);
/* The CSVs and latency.png, devices.png and links.png (jobs/lib/simulate.gp) into dir. */
void sim_plot(const sim_report *s, const char *dir);

#endif
