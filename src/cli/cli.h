/* Subcommands of the meshinfer binary (internal). Each parses its own
 * options with getopt_long, prints --help, and returns the exit status. */
#ifndef MESHINFER_CLI_H
#define MESHINFER_CLI_H

int cmd_convert(int argc, char **argv);
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

/* Reject a positional argument nobody asked for; getopt has already
 * rejected unknown options with its own message. */
void cli_no_positional(const char *cmd, int optind_, int argc, char **argv);

/* Report an option getopt_long rejected (optstring must start with ':' so a
 * missing value is told apart); never returns. */
void cli_bad_option(const char *cmd, int code, char **argv);

/* Read a whole text file into a NUL-terminated buffer. Returns NULL with err
 * set when it cannot be read, is empty, or holds a NUL byte. */
char *cli_read_text_err(const char *path, size_t *len, char *err);

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

/* --prune SPEC of somegather (seed 002): "R" for all four exchange kinds, or
 * a comma list mixing "R" and "kind=R" (attn_in heads ffn_in hidden), each R
 * in [0, 1); fills ratio[MI_N_PRUNED_XCH]. mi_fatal names the problem. */
void cli_parse_prune(const char *arg, double *ratio);

/* Negative log-likelihood (nats) of token `target` under logits[V]
 * (perplexity, importance). */
double cli_nll(const float *logits, int V, int target);

/* ---- journal.c: generate --journal / --resume (issue 11 item 5) ---- */
#include <stdint.h>
typedef struct {
    char model[4096];       /* the model file's path when the journal was begun */
    char model_name[64];    /* its config: a resumed run must load the same model */
    int n_layers, dim, hidden_dim, vocab_size;
    char dtypes[160];       /* mi_config_dtype_summary: a resumed run must compute with the same weights */
    char *prompt;           /* the prompt text, as given */
    int n_prompt, *prompt_ids; /* [n_prompt] its tokens, BOS first */
    long steps;             /* tokens asked for */
    double temperature, topp;
    uint64_t seed;
    int ignore_eos;
    int n_out, *out;        /* [n_out] tokens generated so far */
    uint64_t rng;           /* the sampler's state after out[n_out - 1] was sampled */
    int done;               /* 1: the generation ended (steps reached, or BOS/EOS) */
    long valid_bytes;       /* journal_read: the bytes of its whole lines */
    /* the distributed options that went into the tokens (--planner, --wire-dtype, --prune-ffn, ...),
     * as given: n_options strings packed one after another, each NUL-terminated, options_len bytes */
    char *options;
    int n_options;
    size_t options_len;
    int sync;               /* --journal-sync: each line reaches the disk before the next token */
    int fd;                 /* open to append (journal_begin, journal_append_open), else -1 */
} gen_journal;

/* Start a journal at path: the request's line (written whole, synced,
 * renamed into place), then path open to append (j->fd). journal_append_open reopens an
 * existing one to go on, first cutting it to keep_bytes (the whole lines
 * journal_read found; -1: as it is). journal_token appends a token and the
 * sampler's state after it; journal_finish appends "done" and closes. With
 * j->sync each line is on disk (fdatasync) before they return. Each returns 0
 * or -1 with one line in err. */
int journal_begin(const char *path, gen_journal *j, char *err);
int journal_append_open(const char *path, gen_journal *j, long keep_bytes, char *err);
int journal_token(gen_journal *j, int token, uint64_t rng, char *err);
int journal_finish(gen_journal *j, char *err);
/* Read a journal strictly (unknown or duplicate keys, fields out of range,
 * token ids past vocab_size, lines that are not token lines: one line in
 * err, -1); a torn last line is dropped. journal_free releases it. */
int journal_read(const char *path, gen_journal *j, char *err);
void journal_free(gen_journal *j);

/* ---- quality.c: perplexity of a model configuration on one device ---- */
#include "meshinfer/model.h"
#include "meshinfer/forward.h"
#include "meshinfer/tokenizer.h"

/* The tokens of text file path (no BOS), at most max_tokens; mi_fatal names
 * an unreadable file, text the tokenizer refuses, or fewer than 2 tokens. */
int *cli_text_ids(const char *path, const mi_tokenizer *tok, long max_tokens, int *n);

/* Perplexity of ids[n] in windows of the context (BOS first in each). */
double cli_window_perplexity(mi_model *m, mi_scratch *s, const int *ids, int n);

/* Rows [r0, r0+n) of t set to zero, in any dtype (a blocked row's scales
 * too). */
void cli_zero_rows(mi_tensor *t, int r0, int n);

/* Model m (every layer held) made to compute what `meshinfer quantize` would
 * write for target's layer dtypes and, with keep (n_layers rows of kept
 * hidden channels, cost.h mi_prune_keep), its pruning: the pruned channels'
 * w3 rows zeroed (their outputs vanish) before the layers are re-encoded. */
void cli_model_apply(mi_model *m, const mi_config *target, const int *keep, int kept);

/* s as one shell word for a command line printed to be pasted: as it is when
 * it holds only safe characters, else in single quotes (buf, n bytes). */
const char *cli_shell_word(const char *s, char *buf, size_t n);

/* JSON string escaping of n bytes to stream f (with surrounding quotes). */
#include <stdio.h>
void cli_json_string(FILE *f, const char *s, size_t n);

#endif
