/* Subcommands of the meshinfer binary (internal). Each parses its own
 * options with getopt_long, prints --help, and returns the exit status. */
#ifndef MESHINFER_CLI_H
#define MESHINFER_CLI_H

int cmd_convert(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_importance(int argc, char **argv);
int cmd_forecast(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_cluster_gen(int argc, char **argv);

/* Reject a positional argument nobody asked for; getopt has already
 * rejected unknown options with its own message. */
void cli_no_positional(const char *cmd, int optind_, int argc, char **argv);

/* Report an option getopt_long rejected (optstring must start with ':' so a
 * missing value is told apart); never returns. */
void cli_bad_option(const char *cmd, int code, char **argv);


/* --dtype, --layer-dtype and --embeddings-dtype, which quantize, synth and
 * plan take alike (getopt codes 2000-2002; CLI_DTYPE_HELP is their --help). */
#include "meshinfer/config.h"
#define CLI_DTYPE_LONG_OPTS                                                                      \
    {"dtype", required_argument, 0, 2000}, {"layer-dtype", required_argument, 0, 2001},        \
        {"embeddings-dtype", required_argument, 0, 2002}
extern const char *CLI_DTYPE_HELP;
typedef struct {
    const char *dtype, *layer, *emb;
} cli_dtypes;
/* Returns 1 if code was one of the options above (and records it). */
int cli_dtype_opt(cli_dtypes *d, int code, const char *arg);
/* 1 if any was given. */
int cli_dtypes_given(const cli_dtypes *d);
/* Apply them to c (mi_dtypes_apply); mi_fatal, naming cmd, on a bad one. */
void cli_dtypes_apply(const cli_dtypes *d, mi_config *c, const char *cmd);

/* The value of --wire-dtype (fp32, fp16, q8_0); mi_fatal names the option
 * for anything else. */
int cli_wire_dtype(const char *s);

/* --prune SPEC of somegather (CATS): "R" for all four exchange kinds, or
 * a comma list mixing "R" and "kind=R" (attn_in heads ffn_in hidden), each R
 * in [0, 1); fills ratio[MI_N_PRUNED_XCH]. mi_fatal names the problem. */
void cli_parse_prune(const char *arg, double *ratio);


/* s as one shell word for a command line printed to be pasted: as it is when
 * it holds only safe characters, else in single quotes (buf, n bytes). */
const char *cli_shell_word(const char *s, char *buf, size_t n);

/* jobs/lib/NAME (a gnuplot script) of the repository this binary was built
 * in (build/meshinfer -> ../jobs/lib), else under the current directory,
 * into out[n]. Returns 0, or -1 when there is none. */
int cli_find_script(const char *name, char *out, size_t n);

/* Run gnuplot with argv (argv[0] "gnuplot", NULL-terminated), its output
 * collected into msg[n]. Returns its exit status, 127 when gnuplot cannot
 * be started. */
int cli_run_gnuplot(char *const argv[], char *msg, size_t n);

/* The first non-empty line of s (cut in place), or "no message". */
const char *cli_first_line(char *s);

/* JSON string escaping of n bytes to stream f (with surrounding quotes). */
#include <stdio.h>
void cli_json_string(FILE *f, const char *s, size_t n);

/* The exact planner's search on stderr in one line: a note when it proved
 * its placement optimal, a warning when the time limit stopped it (the best
 * found, the bound, whose placement was kept); extra (may be "") ends it. */
#include "meshinfer/planner.h"
void cli_exact_report(const mi_exact_info *e, const mi_plan *plan, const char *extra);

#endif
