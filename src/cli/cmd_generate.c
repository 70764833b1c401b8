/* `meshinfer generate`: prompt in, streamed text out. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/runtime.h"
#include "meshinfer/sampler.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer generate --model MODEL.h5 [-p PROMPT] [-n N] [options]\n\n"
           "Generates up to N tokens after PROMPT (BOS is prepended) and streams the text.\n"
           "  -m, --model FILE        HDF5 model (from `convert`, `quantize` or `synth`), or a GGUF file or\n"
           "                          Hugging Face folder (converted once into the model cache)\n"
           "  -p, --prompt TEXT       prompt (default \"Once upon a time\")\n"
           "      --chat              the prompt is a user message in the model's own chat template\n"
           "      --system TEXT       with --chat: a system prompt\n"
           "      --chat-template K   with --chat: render as kind K instead (llama3, qwen2.5, qwen3, gemma3, ...)\n"
           "  -n, --steps N           tokens to generate (default: up to 256, within the context)\n"
           "  -t, --temperature T     0 = greedy (default 0)\n"
           "      --top-k N           sample among the N most likely tokens (default 40; 0 = all), then\n"
           "                          top-p within them (llama.cpp's order)\n"
           "      --top-p P           nucleus sampling mass in (0,1] (default 0.9; 1 disables)\n"
           "  -s, --seed S            sampling seed (default 42)\n"
           "      --ignore-eos        keep going after BOS/EOS\n"
           "      --threads N         compute threads per rank: matrix products and BLAS (default 1)\n"
           "      --json              print one JSON object (text, tokens, timing, per-rank metrics)\n"
           "      --metrics           print per-rank time, bytes and memory to stderr\n"
           "      --journal FILE      after every token, record what it takes to go on without this job\n"
           "                          (prompt tokens, tokens so far, sampler state)\n"
           "      --repeat N          run the same generation N times in this job (KV cache reset, sampler\n"
           "                          re-seeded): a soak; reports how many gave the first run's tokens and\n"
           "                          every rank's resident memory after the first repeat and the last\n"
           "      --journal-sync      put each journal line on disk before the next token (fdatasync), for a\n"
           "                          journal on a file system that outlives this host\n"
           "      --resume FILE       go on from a journal on the ranks of this job (after a device was lost):\n"
           "                          re-plan for them, replay the journal's tokens, continue with the\n"
           "                          tokens the first run would have made, and keep journaling to FILE;\n"
           "                          the prompt, -n and sampling come from the journal (-m may name\n"
           "                          the same model at another path); the text is printed from the start.\n"
           "                          The distributed options come from the journal too: those that change\n"
           "                          the numbers (--wire-dtype, --prune, --prune-mode, --prune-ffn,\n"
           "                          --importance, --loss*, --speculate, --tolerance, --min-acceptance,\n"
           "                          --spec-profile) may only be given again as they were; the others\n"
           "                          (--planner, ...) may be changed for the new ranks; --cluster,\n"
           "                          --plan-file and --trace are never carried over\n"
           "%s"
           "Logits: with greedy decoding or top-k sampling each rank holding classifier rows sends rank 0\n"
           "only its best (logit, token id) pairs (1, or N of --top-k), not its logits whole; sampling\n"
           "with --top-k 0 needs them whole (docs/guide/vocabulary.md).\n"
           "Timing (TTFT, TPOT, tokens/s) goes to stderr, or into the JSON.\n",
           SESSION_HELP);
}

/* The session options of a command line, as given ("--planner", "layerwise",
 * "--speculate", ...), packed NUL-terminated: what a journal keeps and what a resumed run compares with it. */
typedef struct {
    char *buf;
    size_t len, cap;
    int n;
} opt_list;

static void opt_list_add(opt_list *l, const char *s)
{
    size_t n = strlen(s) + 1;
    if (l->len + n > l->cap) {
        l->cap = (l->len + n) * 2 + 64;
        char *b = realloc(l->buf, l->cap);
        if (!b)
            mi_fatal("out of memory");
        l->buf = b;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    l->n++;
}

/* Not carried into a resumed run: the devices (--cluster) and a plan for them
 * (--plan-file) are the lost job's, and --trace is an output. */
static int opt_carried(int code) { return code != 1001 && code != 1002 && code != 1003; }

/* Options that change the numbers a run computes: a resumed run must have
 * them as the first run had, or its tokens are not the first run's. */
static int opt_numeric(int code)
{
    switch (code) {
    case 1007: case 1008: case 1009: case 1010: /* speculation */
    case 1013: case 1014: case 1015:            /* wire dtype, somegather pruning */
    case 1016: case 1017: case 1018:            /* message loss */
    case 1021: case 1023:                       /* FFN shards pruned by importance */
        return 1;
    }
    return 0;
}

static const struct option *opt_by_code(const struct option *opts, int code)
{
    for (; opts->name; opts++)
        if (opts->val == code)
            return opts;
    return NULL;
}

static const struct option *opt_by_name(const struct option *opts, const char *dashed)
{
    if (strncmp(dashed, "--", 2))
        return NULL;
    for (; opts->name; opts++)
        if (opts->val >= 1000 && !strcmp(opts->name, dashed + 2))
            return opts;
    return NULL;
}

/* The argument the command line gave for code (its last), "" for a flag, or NULL. */
static const char *given_arg(const opt_list *given, const struct option *opts, int code)
{
    const char *found = NULL;
    for (const char *s = given->buf; given->buf && s < given->buf + given->len; s += strlen(s) + 1) {
        const struct option *o = opt_by_name(opts, s);
        const char *arg = o && o->has_arg ? s + strlen(s) + 1 : "";
        if (o && o->val == code)
            found = arg;
        if (o && o->has_arg)
            s += strlen(s) + 1;
    }
    return found;
}

/* 1 when numeric option code has the same effect with argument a as with b
 * (NULL: not given, its default): "--wire-dtype fp32" is no option at all,
 * "--tolerance 0.50" is "--tolerance 0.5". Compares what session_opt sets
 * for it, not how it was written. */
static int same_effect(int code, const char *a, const char *b)
{
    if (a && b && !strcmp(a, b))
        return 1;
    session_opts x, y;
    session_opts_init(&x);
    session_opts_init(&y);
    if (a)
        session_opt(&x, code, a);
    if (b)
        session_opt(&y, code, b);
    switch (code) {
    case 1007: return x.speculate == y.speculate;
    case 1008: return x.tolerance == y.tolerance;
    case 1009: return x.min_acceptance == y.min_acceptance;
    case 1010: return !x.spec_profile == !y.spec_profile && (!x.spec_profile || !strcmp(x.spec_profile, y.spec_profile));
    case 1013: return x.wire == y.wire;
    case 1014: return !memcmp(x.prune, y.prune, sizeof x.prune);
    case 1015: return x.prune_mode == y.prune_mode;
    case 1016: return x.loss == y.loss;
    case 1017: return x.loss_mode == y.loss_mode;
    case 1018: return x.loss_seed == y.loss_seed;
    case 1021: return !x.importance == !y.importance && (!x.importance || !strcmp(x.importance, y.importance));
    case 1023: return x.prune_ffn == y.prune_ffn;
    }
    return 0;
}

/* A resumed run takes the journal's distributed options (packed as opt_list):
 * the numeric ones must have the command line's effect where it gives them,
 * and the command line may not add one that changes anything (same_effect); the others apply unless the command line set
 * them. Every rank decides alike (same command line, same journal). Returns
 * 0, or -1 with err. */
static int resume_options(const char *jopts, size_t jlen, const opt_list *given, const struct option *opts,
                          session_opts *so, const char *journal, char *err)
{
    opt_list seen = {0};
    int rc = 0;
    for (const char *s = jopts; rc == 0 && s < jopts + jlen; s += strlen(s) + 1) {
        const struct option *o = opt_by_name(opts, s);
        if (!o || !opt_carried(o->val)) {
            rc = mi_set_error(err, "generate: journal %s: option '%s' is not a distributed option this meshinfer "
                                   "carries into a resumed run", journal, s);
            break;
        }
        if (o->has_arg && s + strlen(s) + 1 >= jopts + jlen) {
            rc = mi_set_error(err, "generate: journal %s: option '%s' has no value after it", journal, s);
            break;
        }
        const char *arg = o->has_arg ? s + strlen(s) + 1 : "";
        const char *now = given_arg(given, opts, o->val);
        opt_list_add(&seen, s);
        if (opt_numeric(o->val) && now && !same_effect(o->val, arg, now))
            rc = mi_set_error(err, "generate: journal %s was made with --%s %s, which changes the tokens: a resumed "
                                   "run must compute as it did (leave --%s out)", journal, o->name, arg, o->name);
        else if (!now)
            session_opt(so, o->val, o->has_arg ? arg : NULL);
        if (o->has_arg)
            s += strlen(s) + 1;
    }
    for (const char *s = given->buf; rc == 0 && given->buf && s < given->buf + given->len; s += strlen(s) + 1) {
        const struct option *o = opt_by_name(opts, s);
        int in_journal = 0;
        for (const char *t = seen.buf; seen.buf && t < seen.buf + seen.len; t += strlen(t) + 1)
            in_journal |= !strcmp(s, t);
        if (o && opt_numeric(o->val) && !in_journal && !same_effect(o->val, NULL, o->has_arg ? s + strlen(s) + 1 : ""))
            rc = mi_set_error(err, "generate: journal %s was made without --%s, which changes the tokens: a resumed "
                                   "run must compute as the first did (leave it out)", journal, o->name);
        if (o && o->has_arg)
            s += strlen(s) + 1;
    }
    free(seen.buf);
    return rc;
}

/* generate's command line. */
typedef struct {
    const char *model, *prompt, *journal, *resume;
    const char *system, *chat_template; /* --chat: the prompt is a user message in the model's template */
    int chat;
    long steps;
    double temperature, topp;
    int top_k;
    uint64_t seed;
    int ignore_eos, threads, json, metrics, repeat, journal_sync;
    session_opts so;
    opt_list given_opts; /* the session options as given, for the journal */
} gen_args;

static const struct option gen_opts[] = {
    {"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
    {"steps", required_argument, 0, 'n'},  {"temperature", required_argument, 0, 't'},
    {"top-p", required_argument, 0, 'P'},  {"seed", required_argument, 0, 's'},
    {"ignore-eos", no_argument, 0, 'E'},   {"threads", required_argument, 0, 'T'},
    {"json", no_argument, 0, 'j'},         {"metrics", no_argument, 0, 'M'},
    {"help", no_argument, 0, 'h'},         {"journal", required_argument, 0, 'J'},
    {"resume", required_argument, 0, 'R'}, {"repeat", required_argument, 0, 'r'},
    {"journal-sync", no_argument, 0, 'Y'}, {"top-k", required_argument, 0, 'k'}, {"chat", no_argument, 0, 2001},
    {"system", required_argument, 0, 2002}, {"chat-template", required_argument, 0, 2003}, SESSION_LONG_OPTS,
    {0, 0, 0, 0}};

/* Options into a; returns 1 after --help. Every refusal is one mi_fatal line. */
static int parse_args(int argc, char **argv, gen_args *a)
{
    memset(a, 0, sizeof *a);
    a->prompt = "Once upon a time";
    a->repeat = 1, a->steps = -1, a->topp = 0.9, a->top_k = 40, a->seed = 42, a->threads = 1;
    session_opts_init(&a->so);
    int given = 0, o; /* options a resumed run takes from its journal */
    int sampler_opt = 0; /* --top-k, --top-p or --seed given: they act only when sampling (-t > 0) */
    while ((o = getopt_long(argc, argv, ":m:p:n:t:s:h", gen_opts, NULL)) != -1) {
        switch (o) {
        case 'm': a->model = optarg; break;
        case 'p': a->prompt = optarg; given = 1; break;
        case 'n': a->steps = mi_parse_long("--steps", optarg, 1, 1 << 20); given = 1; break;
        case 't': a->temperature = mi_parse_double("--temperature", optarg, 0.0, 100.0); given = 1; break;
        case 'P': a->topp = mi_parse_double("--top-p", optarg, 1e-6, 1.0); given = sampler_opt = 1; break;
        case 'k': a->top_k = (int)mi_parse_long("--top-k", optarg, 0, 1 << 24); given = sampler_opt = 1; break;
        case 's': a->seed = mi_parse_u64("--seed", optarg); given = sampler_opt = 1; break;
        case 'E': a->ignore_eos = 1; given = 1; break;
        case 'J': a->journal = optarg; break;
        case 'R': a->resume = optarg; break;
        case 'r': a->repeat = (int)mi_parse_long("--repeat", optarg, 1, 1000000); break;
        case 'T': a->threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': a->json = 1; break;
        case 'M': a->metrics = 1; break;
        case 'h': help(); return 1;
        case 'Y': a->journal_sync = 1; break;
        case 2001: a->chat = 1; given = 1; break;
        case 2002: a->system = optarg; given = 1; break;
        case 2003: a->chat_template = optarg; given = 1; break;
        default:
            if (!session_opt(&a->so, o, optarg))
                cli_bad_option("generate", o, argv);
            const struct option *so_opt = opt_by_code(gen_opts, o);
            char dashed[64];
            snprintf(dashed, sizeof dashed, "--%s", so_opt->name);
            opt_list_add(&a->given_opts, dashed);
            if (so_opt->has_arg)
                opt_list_add(&a->given_opts, optarg);
        }
    }
    cli_no_positional("generate", optind, argc, argv);
    if (a->journal_sync && !a->journal && !a->resume)
        mi_fatal("generate: --journal-sync syncs the journal: it needs --journal or --resume");
    if (a->resume && given)
        mi_fatal("generate: --resume takes the prompt, -n, --temperature, --top-k, --top-p, --seed, --ignore-eos, "
                 "--chat, --system and --chat-template from the journal: leave them out");
    if (a->resume && a->journal && strcmp(a->resume, a->journal))
        mi_fatal("generate: --resume keeps journaling to its own file: leave out --journal");
    if (a->repeat > 1 && (a->resume || a->journal))
        mi_fatal("generate: --repeat runs one generation again and again in this job: it has no journal to keep");
    if (sampler_opt && a->temperature <= 0)
        mi_fatal("generate: --top-k, --top-p and --seed shape sampling: greedy decoding (-t 0, the default) uses "
                 "none of them (give -t T > 0)");
    if ((a->system || a->chat_template) && !a->chat)
        mi_fatal("generate: --system and --chat-template shape a chat prompt: add --chat");
    if (a->resume)
        a->journal = a->resume;
    if (!a->model && !a->resume)
        mi_fatal("generate: --model is required (see meshinfer generate --help)");
    if (a->so.importance && a->so.tpot_ms <= 0 && !a->so.prune_ffn)
        mi_fatal("generate: --importance orders the layers runtime scaling lowers (it needs --tpot-ms) and the FFN "
                 "shards --prune-ffn drops");
    if (a->so.energy && a->so.tpot_ms <= 0)
        mi_fatal("generate: --energy spends the margin under a TPOT target on lower frequencies: it needs --tpot-ms");
    return 0;
}

/* Collective: --resume's journal (read by rank 0 only: the workers may be on
 * hosts without it) gives every rank its model path and distributed options,
 * and rank 0 the request; a --journal output is checked against every input. */
static void journal_setup(gen_args *a, gen_journal *jr, int rank, char *model_path, size_t path_size)
{
    char err[MI_ERRLEN] = "";
    if (rank == 0 && a->resume) {
        int bad = journal_read(a->resume, jr, err) != 0;
        if (!bad && !a->model)
            snprintf(model_path, path_size, "%s", jr->model);
        mi_check_all(bad, err);
    } else if (a->resume) {
        mi_check_all(0, err);
    }
    if (rank == 0 && a->journal) {
        /* every input of the run (the trace, another output, is checked against it in session_open) */
        const session_opts *so = &a->so;
        const char *inputs[] = {a->model ? a->model : model_path, so->cluster, so->plan_file, so->importance,
                                so->sg_quality, so->spec_profile, so->text_input};
        int bad = mi_output_check(a->journal, "journal", inputs, 7, err) != 0;
        struct stat st;
        /* a journal is never replaced: an unfinished one is what --resume needs, and any other file is not ours */
        if (!bad && !a->resume && lstat(a->journal, &st) == 0)
            bad = mi_set_error(err, "generate: journal %s exists: a new generation needs a new journal (remove it or "
                                    "give another name; --resume %s goes on from a journal)", a->journal,
                               a->journal) != 0;
        mi_check_all(bad, err);
    } else if (a->journal) {
        mi_check_all(0, err);
    }
    if (!a->resume)
        return;
    if (!a->model) {
        mi_world_bcast(model_path, path_size);
        a->model = model_path;
    }
    /* the journal's distributed options, to every rank */
    unsigned long long jlen = rank == 0 ? jr->options_len : 0;
    mi_world_bcast(&jlen, sizeof jlen);
    char *jopts = rank == 0 ? jr->options : mi_malloc(jlen + 1, "journal options");
    mi_world_bcast(jopts, (size_t)jlen);
    int bad_opts = resume_options(jopts, (size_t)jlen, &a->given_opts, gen_opts, &a->so, a->resume, err) != 0;
    if (rank != 0)
        free(jopts);
    mi_check_all(bad_opts, err);
    if (rank == 0) {
        a->prompt = jr->prompt;
        a->steps = jr->steps;
        a->temperature = jr->temperature;
        a->topp = jr->topp;
        a->top_k = jr->top_k;
        a->seed = jr->seed;
        a->ignore_eos = jr->ignore_eos;
    }
}

/* The model file a journal identifies: the file given (a GGUF file too,
 * whose converted copy may be made again), or a folder's converted copy. */
static const char *fingerprinted_file(const char *given, const mi_session *ss)
{
    struct stat st;
    return stat(given, &st) == 0 && S_ISREG(st.st_mode) ? given : ss->model_file;
}

/* Rank 0, --resume: what of the journal needs the model (journal_read
 * checked the rest): the same model file, the context, the prompt's tokens
 * the tokenizer's of its text, no end token where the run would have
 * stopped, and last the check values (a cause named above is the more
 * exact). Returns 1 with one line in msg, else 0. */
static int resume_check(mi_session *ss, const gen_args *a, const gen_journal *jr, char *msg, size_t size)
{
    const mi_config *c = &ss->cfg;
    char dts[160], err[MI_ERRLEN] = "";
    mi_config_dtype_summary(c, dts, sizeof dts);
    if (strcmp(jr->model_name, c->name) || jr->n_layers != c->n_layers || jr->dim != c->dim ||
        jr->hidden_dim != c->hidden_dim || jr->vocab_size != c->vocab_size || strcmp(jr->dtypes, dts))
        /* the same weights, or the continuation is not the first run's */
        return snprintf(msg, size, "generate: journal %s: line 1: it is of %s (%d layers, dim %d, hidden_dim %d, "
                        "vocabulary %d, %s) but %s is %s (%d layers, dim %d, hidden_dim %d, vocabulary %d, %s)",
                        a->resume, jr->model_name, jr->n_layers, jr->dim, jr->hidden_dim, jr->vocab_size,
                        jr->dtypes, a->model, c->name, c->n_layers, c->dim, c->hidden_dim, c->vocab_size, dts) > 0;
    uint64_t bytes = 0, hash = 0;
    const char *file = fingerprinted_file(a->model, ss);
    if (mi_file_fingerprint(file, &bytes, &hash, err))
        return snprintf(msg, size, "generate: journal %s: %s", a->resume, err) > 0;
    if (bytes != jr->model_bytes || hash != jr->model_hash)
        return snprintf(msg, size, "generate: journal %s: line 1: written with another model file of this shape "
                        "(%" PRIu64 " bytes, hash %016" PRIx64 "); %s is %" PRIu64 " bytes, hash %016" PRIx64
                        ": its tokens are not this model's", a->resume, jr->model_bytes, jr->model_hash, file, bytes,
                        hash) > 0;
    if (jr->n_prompt + jr->steps > c->seq_len)
        return snprintf(msg, size, "generate: journal %s asks for %d + %ld tokens, past the context of %d",
                        a->resume, jr->n_prompt, jr->steps, c->seq_len) > 0;
    /* the prompt's tokens: what this tokenizer (and the chat template, for --chat) makes of its text */
    int n = -1, *want = NULL;
    if (jr->chat) {
        mi_chat_msg m[2] = {{"system", jr->system}, {"user", jr->prompt}};
        want = session_encode_chat(ss, jr->system ? m : m + 1, jr->system ? 2 : 1, jr->chat_template, MI_CHAT_GEN,
                                   &n, err);
    } else {
        want = mi_malloc((strlen(jr->prompt) + 3) * sizeof(int), "prompt tokens");
        n = mi_tokenizer_encode(&ss->tok, jr->prompt, 1, want, err);
    }
    int same = want && n == jr->n_prompt && !memcmp(want, jr->prompt_ids, (size_t)n * sizeof(int));
    free(want);
    if (!same)
        return snprintf(msg, size, "generate: journal %s: line 1: prompt_tokens (%d) are not what the tokenizer "
                        "makes of the prompt text%s (%d tokens): the prompt or its tokens were changed", a->resume,
                        jr->n_prompt, jr->chat ? " in the chat template" : "", n) > 0;
    /* a run that stopped at its end tokens cannot have gone on after one (the end token it stopped at is
     * its last line) */
    for (int i = 0; !jr->ignore_eos && i < jr->n_out - 1; i++)
        if (mi_tokenizer_is_eog(&ss->tok, jr->out[i]))
            return snprintf(msg, size, "journal %s: line %d is BOS or EOS, where the run stopped (an "
                            "end-of-generation token; it did not ignore them): no token can follow",
                            a->resume, i + 2) > 0;
    /* "done" ends a run only where it stopped: at the count asked for, or at an end token */
    int at_end = jr->n_out > 0 && !jr->ignore_eos && mi_tokenizer_is_eog(&ss->tok, jr->out[jr->n_out - 1]);
    if (jr->done && jr->n_out < jr->steps && !at_end)
        return snprintf(msg, size, "generate: journal %s: line %d: 'done' after %d of %ld tokens and no end token "
                        "(BOS or EOS) where the run would stop: the journal was cut and ended by hand", a->resume,
                        jr->done_line, jr->n_out, jr->steps) > 0;
    if (jr->edited_line)
        return snprintf(msg, size, "generate: journal %s: line %d: its check value is not that of its %s: %s",
                        a->resume, jr->edited_line, jr->edited_line == 1 ? "fields"
                                                    : jr->edited_line == jr->done_line ? "'done' line"
                                                                                       : "token and state",
                        jr->edited_line == 1 ? "the request was edited after it was written"
                                             : "lines swapped, repeated, dropped or edited, or taken from another "
                                               "journal") > 0;
    return 0;
}

/* Collective: the prompt's tokens on rank 0 (a resumed run's are the
 * journal's, checked against the model: resume_check) and the steps within
 * the context. */
static int *prompt_tokens(mi_session *ss, gen_args *a, const gen_journal *jr, int *n_prompt)
{
    const mi_config *c = &ss->cfg;
    *n_prompt = 0;
    char msg[MI_ERRLEN] = "";
    int bad = 0, *ids = NULL;
    if (a->chat) { /* the prompt as the user's message in the model's chat template */
        mi_chat_msg m[2] = {{"system", a->system}, {"user", a->prompt}};
        if (ss->rank == 0 && !(ids = session_encode_chat(ss, a->system ? m : m + 1, a->system ? 2 : 1,
                                                          a->chat_template, MI_CHAT_GEN, n_prompt, msg)))
            bad = 1;
        mi_check_all(bad, msg);
    } else if (!a->resume) {
        ids = session_encode_prompt(ss, a->prompt, n_prompt);
    }
    if (ss->rank == 0 && a->resume) {
        bad = resume_check(ss, a, jr, msg, sizeof msg);
        *n_prompt = jr->n_prompt;
        ids = mi_malloc((size_t)*n_prompt * sizeof(int), "prompt tokens");
        memcpy(ids, jr->prompt_ids, (size_t)*n_prompt * sizeof(int));
    }
    int room = c->seq_len - *n_prompt;
    if (ss->rank == 0 && !bad) {
        if (a->steps < 0)
            a->steps = room < 256 ? room : 256;
        else if (a->steps > room)
            bad = snprintf(msg, sizeof msg,
                           "generate: prompt (%d tokens) + %ld new tokens exceeds the context of %d; use -n %d or less",
                           *n_prompt, a->steps, c->seq_len, room) > 0;
    }
    mi_check_all(bad, msg);
    return ids;
}

/* A new journal's request: the model, its config, the prompt, the sampling
 * and the distributed options that went into the tokens (less this job's
 * devices and outputs). */
static void journal_request(const gen_args *a, const mi_session *ss, const int *ids, int n_prompt, gen_journal *jr)
{
    const mi_config *c = &ss->cfg;
    char err[MI_ERRLEN];
    if (mi_file_fingerprint(fingerprinted_file(a->model, ss), &jr->model_bytes, &jr->model_hash, err))
        mi_fatal("journal: %s", err);
    snprintf(jr->model, sizeof jr->model, "%s", a->model);
    snprintf(jr->model_name, sizeof jr->model_name, "%s", c->name);
    jr->n_layers = c->n_layers, jr->dim = c->dim, jr->hidden_dim = c->hidden_dim, jr->vocab_size = c->vocab_size;
    mi_config_dtype_summary(c, jr->dtypes, sizeof jr->dtypes);
    jr->prompt = strdup(a->prompt);
    jr->chat = a->chat;
    jr->system = a->system ? strdup(a->system) : NULL;
    jr->chat_template = a->chat_template ? strdup(a->chat_template) : NULL;
    jr->n_prompt = n_prompt;
    jr->prompt_ids = mi_malloc((size_t)n_prompt * sizeof(int), "journal");
    memcpy(jr->prompt_ids, ids, (size_t)n_prompt * sizeof(int));
    jr->steps = a->steps, jr->temperature = a->temperature, jr->topp = a->topp, jr->seed = a->seed;
    jr->top_k = a->top_k;
    jr->ignore_eos = a->ignore_eos;
    opt_list carried = {0};
    const opt_list *g = &a->given_opts;
    for (const char *s = g->buf; g->buf && s < g->buf + g->len; s += strlen(s) + 1) {
        const struct option *so_opt = opt_by_name(gen_opts, s);
        const char *arg = so_opt->has_arg ? s + strlen(s) + 1 : NULL;
        if (opt_carried(so_opt->val)) {
            opt_list_add(&carried, s);
            if (arg)
                opt_list_add(&carried, arg);
        }
        if (arg)
            s += strlen(s) + 1;
    }
    jr->options = carried.buf, jr->n_options = carried.n, jr->options_len = carried.len;
}

/* What the token loop's hook does with each token: the text (streamed
 * unless --json) and the journal's line. */
typedef struct {
    mi_session *ss;
    int json;
    gen_journal *jr;        /* NULL: no journal */
    double journal_s;       /* time spent writing it */
    char *text;
    size_t len, cap;
} gen_output;

static void on_token(void *ctx, int token, int prev, uint64_t rng, int replayed)
{
    gen_output *g = ctx;
    int len = 1;
    /* with --ignore-eos a story can end mid-stream (BOS or EOS): the next
     * one starts on a line of its own, not glued on ("sunshine.Once") */
    const mi_tokenizer *tok = &g->ss->tok;
    const char *piece = mi_tokenizer_is_eog(tok, token) || token == tok->bos_id ? "\n"
                                                                                : mi_tokenizer_decode(tok, prev, token, &len);
    if (g->len + (size_t)len + 1 > g->cap) {
        g->cap = 2 * (g->len + (size_t)len + 1);
        char *nt = realloc(g->text, g->cap);
        if (!nt)
            mi_fatal("out of memory");
        g->text = nt;
    }
    memcpy(g->text + g->len, piece, (size_t)len);
    g->len += (size_t)len;
    if (!g->json) {
        fwrite(piece, 1, (size_t)len, stdout);
        fflush(stdout);
        mi_stdout_wrote(piece, (size_t)len);
    }
    if (g->jr && !replayed) {
        char msg[MI_ERRLEN];
        double tj = mi_now();
        if (journal_token(g->jr, token, rng, msg))
            mi_fatal("%s", msg);
        g->journal_s += mi_now() - tj;
    }
}

/* The end token the run stops at: journaled (not printed), so that "done"
 * after fewer tokens than asked for can be told from a journal cut short. */
static void on_end(void *ctx, int token, uint64_t rng, int replayed)
{
    gen_output *g = ctx;
    char msg[MI_ERRLEN];
    if (g->jr && !replayed && journal_token(g->jr, token, rng, msg))
        mi_fatal("%s", msg);
}

/* What --repeat found (a soak in one job). */
typedef struct {
    int runs, same;                      /* generations after the first; how many gave its tokens */
    double rss0[MI_MAX_RANKS], rss1[MI_MAX_RANKS]; /* each rank's RSS after the first repeat and the last */
    double seconds;
} soak_result;

/* The same generation again, `more` times in the same job: the KV cache reset,
 * the sampler re-seeded, every token compared with the first run's (ref[n_ref]).
 * Resident memory per rank is polled after the first repeat and the last. */
static void soak(mi_session *ss, mi_gen_request rq, const int *ref, int n_ref, int more, soak_result *sr)
{
    memset(sr, 0, sizeof *sr);
    rq.scale = 0;
    double t0 = mi_now();
    for (int rep = 0; rep < more; rep++) {
        session_restart(ss);
        mi_gen_result res;
        session_generate(ss, &rq, NULL, &res);
        sr->same += res.n == n_ref && !memcmp(res.tokens, ref, (size_t)res.n * sizeof(int));
        sr->runs++;
        free(res.tokens);
        /* the baseline after the first repeat, not the first run: resetting the KV cache touches
         * every page of it once (2.4 MB of stories15M's on one rank), which is not growth */
        if (rep == 0)
            mi_runtime_poll_rss(ss->rt, sr->rss0);
        if (more >= 10 && (rep + 1) % ((more + 9) / 10) == 0)
            fprintf(stderr, "meshinfer: --repeat: %d of %d generations again, %d with the first's tokens\n", rep + 1,
                    more, sr->same);
    }
    sr->seconds = mi_now() - t0;
    mi_runtime_poll_rss(ss->rt, sr->rss1);
    int size = ss->size, at = 0;
    double worst = 0;
    for (int r = 0; r < size; r++)
        if (sr->rss1[r] - sr->rss0[r] > worst)
            worst = sr->rss1[r] - sr->rss0[r], at = r;
    fprintf(stderr, "meshinfer: --repeat %d: %d of %d repeats gave the first run's tokens in %.1f s; resident "
            "memory grew at most %.3f MB (rank %d) from the first repeat to the last\n", more + 1, sr->same,
            sr->runs, sr->seconds, worst / 1e6, at);
}

/* A figure in JSON, or null when there is nothing it measured. */
static void json_figure(const char *key, const char *fmt, int measured, double v)
{
    printf(", \"%s\": ", key);
    if (measured)
        printf(fmt, v);
    else
        printf("null");
}

/* timed: 0 when this run computed nothing (a finished journal replayed):
 * then it has no speed to report, and its timings are null; n_new: the
 * tokens it made (and journaled). */
static void print_json(const gen_args *a, mi_session *ss, int n_prompt, const mi_gen_result *res,
                       const gen_output *g, const soak_result *sr, int timed, int n_new)
{
    const mi_config *c = &ss->cfg;
    int size = ss->size, n_decode = res->n - 1; /* forward passes after the first token */
    double ttft = res->t_first - res->t0, tpot = n_decode > 0 ? (res->t_end - res->t_first) / n_decode : 0.0;
    printf("{\"model\": ");
    cli_json_string(stdout, a->model, strlen(a->model));
    printf(", \"synthetic_weights\": %s, \"n_ranks\": %d, \"prompt_tokens\": %d, \"generated_tokens\": %d, "
           "\"stop\": \"%s\"", c->synthetic ? "true" : "false", size, n_prompt, res->n, res->stop);
    json_figure("ttft_ms", "%.3f", timed, ttft * 1e3);
    json_figure("tpot_ms", "%.4f", timed, tpot * 1e3);
    json_figure("decode_tokens_per_s", "%.2f", timed, tpot > 0 ? 1.0 / tpot : 0.0);
    printf(", \"load_s\": %.3f, \"text\": ", ss->load_seconds);
    cli_json_string(stdout, g->text, g->len);
    if (a->temperature > 0)
        printf(", \"decoding\": {\"mode\": \"sampled\", \"temperature\": %g, \"top_k\": %d, \"top_p\": %g, "
               "\"seed\": %llu}", a->temperature, a->top_k, a->topp, (unsigned long long)a->seed);
    else
        printf(", \"decoding\": {\"mode\": \"greedy\"}");
    double pt, pp;
    session_predict(ss, n_prompt, n_decode > 0 ? n_decode : 1, &pt, &pp);
    printf(", \"predicted_ttft_ms\": %.3f, \"predicted_tpot_ms\": %.4f, \"phase_switches\": %d, "
           "\"phase_switch_ms\": %.3f", pt * 1e3, pp * 1e3, ss->phases.n_switches, ss->phases.switch_s * 1e3);
    json_figure("tpot_without_switch_ms", "%.4f", timed,
                n_decode > 0 ? (res->t_end - res->t_first - ss->phases.switch_s) / n_decode * 1e3 : 0.0);
    if (a->repeat > 1) {
        printf(", \"repeat\": {\"runs\": %d, \"same_tokens\": %d, \"seconds\": %.3f, \"rss_mb_after_first_repeat\": [",
               sr->runs, sr->same, sr->seconds);
        for (int r = 0; r < size; r++)
            printf("%s%.3f", r ? ", " : "", sr->rss0[r] / 1e6);
        printf("], \"rss_mb_after_last\": [");
        for (int r = 0; r < size; r++)
            printf("%s%.3f", r ? ", " : "", sr->rss1[r] / 1e6);
        printf("]}");
    }
    if (a->journal) {
        printf(", \"journal\": {\"already_finished\": %s, \"replayed_tokens\": %d, \"replay_ms\": %.3f",
               a->resume && g->jr->done ? "true" : "false", res->replayed,
               res->replayed ? (res->t_replayed - res->t0) * 1e3 : 0.0);
        json_figure("write_us_per_token", "%.1f", n_new > 0, n_new > 0 ? g->journal_s / n_new * 1e6 : 0.0);
        printf("}");
    }
    printf(", \"tokens\": [");
    for (int i = 0; i < res->n; i++)
        printf(i ? ", %d" : "%d", res->tokens[i]);
    printf("], ");
}

static void print_summary(const gen_args *a, const mi_session *ss, int n_prompt, const mi_gen_result *res,
                          int timed)
{
    int n_decode = res->n - 1;
    double ttft = res->t_first - res->t0, tpot = n_decode > 0 ? (res->t_end - res->t_first) / n_decode : 0.0;
    printf("\n");
    fflush(stdout);
    mi_stdout_wrote("\n", 1);
    char tp[64] = "TPOT n/a (one token)";
    if (n_decode > 0)
        snprintf(tp, sizeof tp, "TPOT %.2f ms, %.1f tokens/s", tpot * 1e3, 1.0 / tpot);
    char mode[96] = "greedy"; /* the decoding mode, apart from the placement */
    if (a->temperature > 0)
        snprintf(mode, sizeof mode, "sampled at T %g, top-k %d, top-p %g, seed %llu", a->temperature, a->top_k,
                 a->topp, (unsigned long long)a->seed);
    /* under a launcher stdout and stderr travel apart and the text's last
     * line can arrive after this one: start it on a line of its own */
    char timing[128];
    if (timed)
        snprintf(timing, sizeof timing, "TTFT %.1f ms, %s", ttft * 1e3, tp);
    else /* a finished journal's tokens, replayed without a forward pass: nothing was timed */
        snprintf(timing, sizeof timing, "no timing (none computed: the journal was already finished)");
    fprintf(stderr, "%sgenerate: %d prompt + %d new tokens, %s, on %d rank%s (planner %s), %s%s\n",
            mi_world_launched() ? "\n" : "", n_prompt, res->n, mode, ss->size, ss->size > 1 ? "s" : "",
            mi_planner_name(ss->plan.planner), timing, ss->cfg.synthetic ? " (synthetic weights)" : "");
}

/* Rank 0: the generation (and --repeat's soak), streamed, journaled, reported. */
static void run(gen_args *a, mi_session *ss, gen_journal *jr, const int *ids, int n_prompt)
{
    const mi_config *c = &ss->cfg;
    int resume = a->resume != NULL, done = resume && jr->done;
    mi_gen_request rq = {.prompt = ids, .n_prompt = n_prompt, .steps = a->steps, .ignore_eos = a->ignore_eos,
                         .temperature = (float)a->temperature, .topp = (float)a->topp, .top_k = a->top_k,
                         .seed = a->seed,
                         .forced = resume ? jr->out : NULL, .n_forced = resume ? jr->n_out : 0,
                         .rng_set = resume, .rng = resume ? jr->rng : 0, .replay_only = done, .scale = 1};
    if (a->journal && !resume)
        journal_request(a, ss, ids, n_prompt, jr);
    jr->sync = a->journal_sync;
    if (a->journal) {
        char msg[MI_ERRLEN];
        jr->fd = -1;
        mi_sampler smp; /* the journal starts from the sampler's state before any token */
        mi_sampler_init(&smp, c->vocab_size, rq.temperature, rq.topp, rq.seed);
        jr->rng = resume ? jr->rng : smp.rng;
        mi_sampler_free(&smp);
        /* begun before the prompt (a loss during it resumes too); a resumed one goes on after its
         * last whole line */
        if (resume ? (done ? 0 : journal_append_open(a->journal, jr, jr->valid_bytes, msg))
                   : journal_begin(a->journal, jr, msg))
            mi_fatal("%s", msg);
    }
    if (done) /* nothing left to generate: the text, as the run that finished printed it */
        rq.steps = rq.n_forced;
    gen_output g = {.ss = ss, .json = a->json, .jr = a->journal ? jr : NULL, .cap = 1024};
    g.text = mi_malloc(g.cap, "generated text");
    if (!a->json) {
        fputs(a->prompt, stdout);
        fflush(stdout);
        mi_stdout_wrote(a->prompt, strlen(a->prompt));
    }
    mi_gen_hooks hk = {on_token, &g, on_end};
    mi_gen_result res;
    session_generate(ss, &rq, &hk, &res);
    soak_result sr;
    memset(&sr, 0, sizeof sr);
    if (a->repeat > 1) /* the first run's figures stand; the repeats are reported apart */
        soak(ss, rq, res.tokens, res.n, a->repeat - 1, &sr);
    char msg[MI_ERRLEN];
    if (a->journal && !done && journal_finish(jr, msg))
        mi_fatal("%s", msg);
    /* the journal's tokens among the text (an end token it stopped at is none), and those this run made */
    int n_journaled = rq.n_forced;
    if (n_journaled > 0 && !a->ignore_eos && mi_tokenizer_is_eog(&ss->tok, jr->out[n_journaled - 1]))
        n_journaled--;
    int computed = res.n - n_journaled;
    if (done)
        fprintf(stderr, "meshinfer: journal %s was already finished (%d token%s): its text printed again, nothing "
                "computed\n", a->resume, n_journaled, n_journaled == 1 ? "" : "s");
    else if (resume)
        fprintf(stderr, "meshinfer: resumed from %s on %d rank%s: %d token%s replayed (the prompt and %d decode "
                "steps) in %.1f ms, then %d new\n", a->resume, ss->size, ss->size > 1 ? "s" : "", rq.n_forced,
                rq.n_forced == 1 ? "" : "s", rq.n_forced, res.replayed ? (res.t_replayed - res.t0) * 1e3 : 0.0,
                computed);
    mi_runtime_stop(ss->rt);
    ss->power.run_s = res.t_end - res.t0; /* the energy report's span: prompt and decoding */
    ss->power.run_tokens = res.n;
    if (a->json)
        print_json(a, ss, n_prompt, &res, &g, &sr, !done, computed);
    else
        print_summary(a, ss, n_prompt, &res, !done);
    free(g.text);
    free(res.tokens);
}

int cmd_generate(int argc, char **argv)
{
    gen_args a;
    if (parse_args(argc, argv, &a))
        return 0;
    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    gen_journal jr;
    memset(&jr, 0, sizeof jr);
    jr.fd = -1;
    char model_path[4096] = "";
    journal_setup(&a, &jr, rank, model_path, sizeof model_path);
    /* after the journal's options joined the command line's: a resumed run is checked as it will run */
    char cerr[MI_ERRLEN] = "";
    mi_check_all(session_opts_check(&a.so, "generate", size, cerr) != 0, cerr);
    a.so.journal = a.journal;
    /* a split classifier sends rank 0 only what this sampler needs (the journal's, when resuming) */
    if (rank == 0)
        a.so.logits_k = mi_logit_candidates((float)a.temperature, a.top_k);
    a.so.auto_steps = a.steps > 0 ? (int)(a.steps < 4096 ? a.steps : 4096) : 0;
    a.so.auto_prompt = (int)(strlen(a.prompt) / 4) + 2; /* about 4 characters per token, and BOS */
    mi_session ss;
    session_open(&ss, "generate", a.model, &a.so, 64, a.threads);
    int n_prompt;
    int *ids = prompt_tokens(&ss, &a, &jr, &n_prompt);
    if (rank != 0)
        mi_runtime_serve(ss.rt);
    else
        run(&a, &ss, &jr, ids, n_prompt);
    free(ids);
    journal_free(&jr);
    free(a.given_opts.buf);
    if (a.json)
        session_metrics_json(&ss, stdout);
    if (rank == 0 && a.json)
        printf("}\n");
    if (a.metrics)
        session_metrics_table(&ss);
    session_close(&ss, &a.so);
    mi_world_finalize();
    return 0;
}
