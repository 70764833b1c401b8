/* `meshinfer generate`: prompt in, streamed text out. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/sampler.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer generate --model MODEL.h5 [-p PROMPT] [-n N] [options]\n\n"
           "Generates up to N tokens after PROMPT (BOS is prepended) and streams the text.\n"
           "  -m, --model FILE        HDF5 model (from `convert`, `quantize` or `synth`)\n"
           "  -p, --prompt TEXT       prompt (default \"Once upon a time\")\n"
           "  -n, --steps N           tokens to generate (default: up to 256, within the context)\n"
           "  -t, --temperature T     0 = greedy (default 0)\n"
           "      --top-p P           nucleus sampling mass in (0,1] (default 0.9; 1 disables)\n"
           "  -s, --seed S            sampling seed (default 42)\n"
           "      --ignore-eos        keep going after BOS/EOS\n"
           "      --threads N         compute threads per rank: matrix products and BLAS (default 1)\n"
           "      --json              print one JSON object (text, tokens, timing, per-rank metrics)\n"
           "      --metrics           print per-rank time, bytes and memory to stderr\n"
           "      --journal FILE      after every token, record what it takes to go on without this job\n"
           "                          (prompt tokens, tokens so far, sampler state; issue 11 item 5)\n"
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
           "Timing (TTFT, TPOT, tokens/s) goes to stderr, or into the JSON.\n",
           SESSION_HELP);
}

/* The session options of a command line, as given ("--planner", "layerwise",
 * "--speculate", ...), packed NUL-terminated: what a journal keeps (issue 11
 * item 5) and what a resumed run compares with it. */
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

/* A resumed run takes the journal's distributed options (packed as opt_list):
 * the numeric ones must match the command line's where it gives them, and the
 * command line may not add one; the others apply unless the command line set
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
        if (opt_numeric(o->val) && now && strcmp(now, arg))
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
        if (o && opt_numeric(o->val) && !in_journal)
            rc = mi_set_error(err, "generate: journal %s was made without --%s, which changes the tokens: a resumed "
                                   "run must compute as the first did (leave it out)", journal, o->name);
        if (o && o->has_arg)
            s += strlen(s) + 1;
    }
    free(seen.buf);
    return rc;
}

/* What --repeat found (issue 11 item 7, a soak in one job). */
typedef struct {
    int runs, same;                      /* generations after the first; how many gave its tokens */
    double rss0[MI_MAX_RANKS], rss1[MI_MAX_RANKS]; /* each rank's RSS after the first repeat and the last */
    double seconds;
} soak_result;

/* The same generation again, `more` times in the same job: the KV cache reset,
 * the sampler re-seeded, every token compared with the first run's (ref[n_ref]).
 * Resident memory per rank is polled after the first repeat and the last. */
static void soak(mi_session *ss, const int *prompt_ids, int n_prompt, long steps, int ignore_eos, float temperature,
                 float topp, uint64_t seed, const int *ref, int n_ref, int more, soak_result *sr)
{
    const mi_config *c = &ss->cfg;
    memset(sr, 0, sizeof *sr);
    int *toks = mi_malloc((size_t)(steps > 0 ? steps : 1) * sizeof(int), "soak tokens");
    double t0 = mi_now();
    for (int rep = 0; rep < more; rep++) {
        session_restart(ss);
        mi_sampler smp;
        mi_sampler_init(&smp, c->vocab_size, temperature, topp, seed);
        float *logits = session_prefill(ss, prompt_ids, n_prompt, 0);
        session_check_logits(logits, c->vocab_size, n_prompt - 1);
        int next = mi_sample(&smp, logits), n = 0;
        session_phase(ss, 0, n_prompt);
        while (ignore_eos || (next != MI_TOK_BOS && next != MI_TOK_EOS)) {
            toks[n++] = next;
            if (n >= steps)
                break;
            logits = session_forward(ss, &next, 1, n_prompt + n - 1, 0);
            session_check_logits(logits, c->vocab_size, n_prompt + n - 1);
            next = mi_sample(&smp, logits);
        }
        mi_sampler_free(&smp);
        sr->same += n == n_ref && !memcmp(toks, ref, (size_t)n * sizeof(int));
        sr->runs++;
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
    free(toks);
}

int cmd_generate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
        {"steps", required_argument, 0, 'n'},  {"temperature", required_argument, 0, 't'},
        {"top-p", required_argument, 0, 'P'},  {"seed", required_argument, 0, 's'},
        {"ignore-eos", no_argument, 0, 'E'},   {"threads", required_argument, 0, 'T'},
        {"json", no_argument, 0, 'j'},         {"metrics", no_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},         {"journal", required_argument, 0, 'J'},
        {"resume", required_argument, 0, 'R'}, {"repeat", required_argument, 0, 'r'},
        {"journal-sync", no_argument, 0, 'Y'}, SESSION_LONG_OPTS,
        {0, 0, 0, 0}};
    opt_list given_opts = {0}; /* the session options as given, for the journal */
    int journal_sync = 0;
    const char *model = NULL, *prompt = "Once upon a time", *journal = NULL, *resume = NULL;
    int given = 0; /* options a resumed run takes from its journal */
    int repeat = 1;
    long steps = -1;
    double temperature = 0.0, topp = 0.9;
    uint64_t seed = 42;
    int ignore_eos = 0, threads = 1, json = 0, metrics = 0, o;
    session_opts so;
    session_opts_init(&so);
    while ((o = getopt_long(argc, argv, ":m:p:n:t:s:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; given = 1; break;
        case 'n': steps = mi_parse_long("--steps", optarg, 1, 1 << 20); given = 1; break;
        case 't': temperature = mi_parse_double("--temperature", optarg, 0.0, 100.0); given = 1; break;
        case 'P': topp = mi_parse_double("--top-p", optarg, 1e-6, 1.0); given = 1; break;
        case 's': seed = mi_parse_u64("--seed", optarg); given = 1; break;
        case 'E': ignore_eos = 1; given = 1; break;
        case 'J': journal = optarg; break;
        case 'R': resume = optarg; break;
        case 'r': repeat = (int)mi_parse_long("--repeat", optarg, 1, 1000000); break;
        case 'T': threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': json = 1; break;
        case 'M': metrics = 1; break;
        case 'h': help(); return 0;
        case 'Y': journal_sync = 1; break;
        default:
            if (!session_opt(&so, o, optarg))
                cli_bad_option("generate", o, argv);
            const struct option *so_opt = opt_by_code(opts, o);
            char dashed[64];
            snprintf(dashed, sizeof dashed, "--%s", so_opt->name);
            opt_list_add(&given_opts, dashed);
            if (so_opt->has_arg)
                opt_list_add(&given_opts, optarg);
        }
    }
    cli_no_positional("generate", optind, argc, argv);
    if (journal_sync && !journal && !resume)
        mi_fatal("generate: --journal-sync syncs the journal: it needs --journal or --resume");
    if (resume && given)
        mi_fatal("generate: --resume takes the prompt, -n, --temperature, --top-p, --seed and --ignore-eos from the "
                 "journal: leave them out");
    if (resume && journal && strcmp(resume, journal))
        mi_fatal("generate: --resume keeps journaling to its own file: leave out --journal");
    if (repeat > 1 && (resume || journal))
        mi_fatal("generate: --repeat runs one generation again and again in this job: it has no journal to keep");
    if (resume)
        journal = resume;
    if (!model && !resume)
        mi_fatal("generate: --model is required (see meshinfer generate --help)");
    if (so.importance && so.tpot_ms <= 0 && !so.prune_ffn)
        mi_fatal("generate: --importance orders the layers runtime scaling lowers (it needs --tpot-ms) and the FFN "
                 "shards --prune-ffn drops");
    if (so.energy && so.tpot_ms <= 0)
        mi_fatal("generate: --energy spends the margin under a TPOT target on lower frequencies: it needs --tpot-ms");

    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    /* issue 11 item 5: the journal is rank 0's (the workers may be on hosts without it); the model
     * path it names goes to every rank */
    gen_journal jr;
    memset(&jr, 0, sizeof jr);
    jr.fd = -1;
    char err[MI_ERRLEN] = "", model_path[4096] = "";
    if (rank == 0 && resume) {
        int bad = journal_read(resume, &jr, err) != 0;
        if (!bad && !model)
            snprintf(model_path, sizeof model_path, "%s", jr.model);
        mi_check_all(bad, err);
    } else if (resume) {
        mi_check_all(0, err);
    }
    if (rank == 0 && journal) {
        /* every input of the run (the trace, another output, is checked against it in session_open) */
        const char *inputs[] = {model ? model : model_path, so.cluster, so.plan_file, so.importance, so.sg_quality,
                                so.spec_profile, so.text_input};
        mi_check_all(mi_output_check(journal, "journal", inputs, 7, err) != 0, err);
    } else if (journal) {
        mi_check_all(0, err);
    }
    if (resume && !model) {
        mi_world_bcast(model_path, sizeof model_path);
        model = model_path;
    }
    if (resume) { /* the journal's distributed options, to every rank (only rank 0 reads the journal) */
        unsigned long long jlen = rank == 0 ? jr.options_len : 0;
        mi_world_bcast(&jlen, sizeof jlen);
        char *jopts = rank == 0 ? jr.options : mi_malloc(jlen + 1, "journal options");
        mi_world_bcast(jopts, (size_t)jlen);
        int bad_opts = resume_options(jopts, (size_t)jlen, &given_opts, opts, &so, resume, err) != 0;
        if (rank != 0)
            free(jopts);
        mi_check_all(bad_opts, err);
    }
    if (rank == 0 && resume) {
        prompt = jr.prompt;
        steps = jr.steps;
        temperature = jr.temperature;
        topp = jr.topp;
        seed = jr.seed;
        ignore_eos = jr.ignore_eos;
    }
    so.journal = journal;
    mi_session ss;
    so.auto_steps = steps > 0 ? (int)(steps < 4096 ? steps : 4096) : 0;
    so.auto_prompt = (int)(strlen(prompt) / 4) + 2; /* about 4 characters per token, and BOS */
    session_open(&ss, "generate", model, &so, 64, threads);
    const mi_config *c = &ss.cfg;
    int n_prompt = 0;
    /* a resumed run uses the journal's tokens (every rank knows it resumes: the same command line);
     * its prompt text is only printed, never encoded again */
    int *prompt_ids = resume ? NULL : session_encode_prompt(&ss, prompt, &n_prompt);
    char msg[MI_ERRLEN] = "";
    int bad = 0;
    if (rank == 0 && resume) { /* the journal's tokens, not a new encoding: the same model's, checked */
        char dts[160];
        mi_config_dtype_summary(c, dts, sizeof dts);
        if (strcmp(jr.model_name, c->name) || jr.n_layers != c->n_layers || jr.dim != c->dim ||
            jr.hidden_dim != c->hidden_dim || jr.vocab_size != c->vocab_size || strcmp(jr.dtypes, dts))
            /* the same weights, or the continuation is not the first run's */
            bad = snprintf(msg, sizeof msg, "generate: journal %s is of %s (%d layers, dim %d, hidden_dim %d, "
                           "vocabulary %d, %s) but %s is %s (%d layers, dim %d, hidden_dim %d, vocabulary %d, %s)",
                           resume, jr.model_name, jr.n_layers, jr.dim, jr.hidden_dim, jr.vocab_size, jr.dtypes, model,
                           c->name, c->n_layers, c->dim, c->hidden_dim, c->vocab_size, dts) > 0;
        else if (jr.n_prompt + jr.steps > c->seq_len)
            bad = snprintf(msg, sizeof msg, "generate: journal %s asks for %d + %ld tokens, past the context of %d",
                           resume, jr.n_prompt, jr.steps, c->seq_len) > 0;
        n_prompt = jr.n_prompt;
        prompt_ids = mi_malloc((size_t)n_prompt * sizeof(int), "prompt tokens");
        memcpy(prompt_ids, jr.prompt_ids, (size_t)n_prompt * sizeof(int));
    }
    int room = c->seq_len - n_prompt;
    if (rank == 0 && !bad) {
        if (steps < 0)
            steps = room < 256 ? room : 256;
        else if (steps > room)
            bad = snprintf(msg, sizeof msg,
                           "generate: prompt (%d tokens) + %ld new tokens exceeds the context of %d; use -n %d or less",
                           n_prompt, steps, c->seq_len, room) > 0;
    }
    mi_check_all(bad, msg);

    if (rank != 0) {
        mi_runtime_serve(ss.rt);
    } else {
        mi_sampler smp;
        mi_sampler_init(&smp, c->vocab_size, (float)temperature, (float)topp, seed);
        int *out = mi_malloc((size_t)steps * sizeof(int), "generated tokens");
        /* --resume: the journal's tokens are replayed (the forward passes the first run made, decode
         * step by decode step: a prefill over them would sum in another order), not sampled; the
         * sampler goes on from its journaled state */
        int n_forced = resume ? jr.n_out : 0;
        const int *forced = resume ? jr.out : NULL;
        if (resume)
            smp.rng = jr.rng;
        if (journal && !resume) {
            snprintf(jr.model, sizeof jr.model, "%s", model);
            snprintf(jr.model_name, sizeof jr.model_name, "%s", c->name);
            jr.n_layers = c->n_layers, jr.dim = c->dim, jr.hidden_dim = c->hidden_dim, jr.vocab_size = c->vocab_size;
            mi_config_dtype_summary(c, jr.dtypes, sizeof jr.dtypes);
            jr.prompt = strdup(prompt);
            jr.n_prompt = n_prompt;
            jr.prompt_ids = mi_malloc((size_t)n_prompt * sizeof(int), "journal");
            memcpy(jr.prompt_ids, prompt_ids, (size_t)n_prompt * sizeof(int));
            jr.steps = steps, jr.temperature = temperature, jr.topp = topp, jr.seed = seed, jr.ignore_eos = ignore_eos;
            /* the distributed options, less those of this job's devices and outputs */
            opt_list carried = {0};
            for (const char *s = given_opts.buf; given_opts.buf && s < given_opts.buf + given_opts.len;
                 s += strlen(s) + 1) {
                const struct option *so_opt = opt_by_name(opts, s);
                const char *arg = so_opt->has_arg ? s + strlen(s) + 1 : NULL;
                if (opt_carried(so_opt->val)) {
                    opt_list_add(&carried, s);
                    if (arg)
                        opt_list_add(&carried, arg);
                }
                if (arg)
                    s += strlen(s) + 1;
            }
            jr.options = carried.buf, jr.n_options = carried.n, jr.options_len = carried.len;
        }
        jr.sync = journal_sync;
        if (journal) {
            jr.fd = -1;
            jr.rng = smp.rng;
            /* begun before the prompt (a loss during it resumes too); a resumed one goes on after its
             * last whole line */
            int rc = resume ? (jr.done ? 0 : journal_append_open(journal, &jr, jr.valid_bytes, msg))
                            : journal_begin(journal, &jr, msg);
            if (rc)
                mi_fatal("%s", msg);
        }
        double journal_s = 0, t_replayed = 0;
        int replayed = 0;
        if (resume && jr.done) /* nothing left to generate: the text, as the run that finished printed it */
            steps = n_forced;
        size_t text_cap = 1024, text_len = 0;
        char *text = mi_malloc(text_cap, "generated text");
        if (!json) {
            fputs(prompt, stdout);
            fflush(stdout);
        }
        double t0 = mi_now();
        int next;
        float *logits = NULL;
        if (resume && jr.done) { /* a run that stopped before any token stopped at BOS or EOS */
            next = n_forced > 0 ? forced[0] : MI_TOK_EOS;
        } else {
            logits = session_prefill(&ss, prompt_ids, n_prompt, 0);
            session_check_logits(logits, c->vocab_size, n_prompt - 1);
            next = n_forced > 0 ? forced[0] : mi_sample(&smp, logits);
        }
        double t_first = mi_now();
        /* seed 003: a hybrid plan's decode placement takes over once the first
         * token is out (its cost falls in TPOT and is reported apart) */
        session_phase(&ss, 0, n_prompt);
        int n_out = 0, prev = prompt_ids[n_prompt - 1];
        const char *stop = "length";
        for (;;) {
            if (!ignore_eos && (next == MI_TOK_BOS || next == MI_TOK_EOS)) {
                stop = "eos";
                break;
            }
            out[n_out++] = next;
            int len = 1;
            /* with --ignore-eos a story can end mid-stream (BOS or EOS): the
             * next one starts on a line of its own, not glued on ("sunshine.Once") */
            const char *piece = next == MI_TOK_BOS || next == MI_TOK_EOS ? "\n"
                                                                         : mi_tokenizer_decode(&ss.tok, prev, next, &len);
            if (text_len + (size_t)len + 1 > text_cap) {
                text_cap = 2 * (text_len + (size_t)len + 1);
                char *nt = realloc(text, text_cap);
                if (!nt)
                    mi_fatal("out of memory");
                text = nt;
            }
            memcpy(text + text_len, piece, (size_t)len);
            text_len += (size_t)len;
            if (!json) {
                fwrite(piece, 1, (size_t)len, stdout);
                fflush(stdout);
            }
            if (journal && n_out > n_forced) {
                double tj = mi_now();
                if (journal_token(&jr, next, smp.rng, msg))
                    mi_fatal("%s", msg);
                journal_s += mi_now() - tj;
            }
            if (n_out >= steps)
                break;
            if (resume && jr.done) { /* printing the finished text: no forward pass */
                prev = next;
                next = forced[n_out];
                continue;
            }
            prev = next;
            double ts = mi_now();
            logits = session_forward(&ss, &next, 1, n_prompt + n_out - 1, 0);
            session_check_logits(logits, c->vocab_size, n_prompt + n_out - 1);
            if (n_out < n_forced) {
                next = forced[n_out];
            } else {
                if (n_out == n_forced && n_forced > 0) {
                    replayed = n_forced;
                    t_replayed = mi_now();
                }
                next = mi_sample(&smp, logits);
            }
            /* seed 003 runtime scaling: may re-place (the logits were read) */
            session_after_step(&ss, mi_now() - ts, n_prompt + n_out);
        }
        double t_end = mi_now();
        soak_result sr;
        memset(&sr, 0, sizeof sr);
        if (repeat > 1) {
            /* the first run's figures stand; the repeats are reported apart */
            soak(&ss, prompt_ids, n_prompt, steps, ignore_eos, (float)temperature, (float)topp, seed, out, n_out,
                 repeat - 1, &sr);
            double worst = 0;
            int at = 0;
            for (int r = 0; r < size; r++)
                if (sr.rss1[r] - sr.rss0[r] > worst)
                    worst = sr.rss1[r] - sr.rss0[r], at = r;
            fprintf(stderr, "meshinfer: --repeat %d: %d of %d repeats gave the first run's tokens in %.1f s; resident "
                    "memory grew at most %.3f MB (rank %d) from the first repeat to the last\n", repeat, sr.same,
                    sr.runs, sr.seconds, worst / 1e6, at);
        }
        if (journal && !(resume && jr.done)) {
            if (journal_finish(&jr, msg))
                mi_fatal("%s", msg);
        }
        if (resume)
            fprintf(stderr, "meshinfer: resumed from %s on %d rank%s: %d token%s replayed (the prompt and %d decode "
                    "steps) in %.1f ms, then %d new\n", resume, size, size > 1 ? "s" : "", n_forced,
                    n_forced == 1 ? "" : "s", n_forced, replayed ? (t_replayed - t0) * 1e3 : 0.0, n_out - n_forced);
        mi_runtime_stop(ss.rt);
        ss.run_s = t_end - t0; /* the energy report's span: prompt and decoding */
        ss.run_tokens = n_out;
        double ttft = t_first - t0;
        int n_decode = n_out - 1; /* forward passes after the first token */
        double tpot = n_decode > 0 ? (t_end - t_first) / n_decode : 0.0;
        if (json) {
            printf("{\"model\": ");
            cli_json_string(stdout, model, strlen(model));
            printf(", \"synthetic_weights\": %s, \"n_ranks\": %d, \"prompt_tokens\": %d, \"generated_tokens\": %d, "
                   "\"stop\": \"%s\", \"ttft_ms\": %.3f, \"tpot_ms\": %.4f, \"decode_tokens_per_s\": %.2f, "
                   "\"load_s\": %.3f, \"text\": ",
                   c->synthetic ? "true" : "false", size, n_prompt, n_out, stop, ttft * 1e3, tpot * 1e3,
                   tpot > 0 ? 1.0 / tpot : 0.0, ss.load_seconds);
            cli_json_string(stdout, text, text_len);
            if (temperature > 0)
                printf(", \"decoding\": {\"mode\": \"sampled\", \"temperature\": %g, \"top_p\": %g, \"seed\": %llu}",
                       temperature, topp, (unsigned long long)seed);
            else
                printf(", \"decoding\": {\"mode\": \"greedy\"}");
            double pt, pp;
            session_predict(&ss, n_prompt, n_decode > 0 ? n_decode : 1, &pt, &pp);
            printf(", \"predicted_ttft_ms\": %.3f, \"predicted_tpot_ms\": %.4f, \"phase_switches\": %d, "
                   "\"phase_switch_ms\": %.3f, \"tpot_without_switch_ms\": %.4f", pt * 1e3, pp * 1e3, ss.n_switches,
                   ss.switch_s * 1e3, n_decode > 0 ? (t_end - t_first - ss.switch_s) / n_decode * 1e3 : 0.0);
            if (repeat > 1) {
                printf(", \"repeat\": {\"runs\": %d, \"same_tokens\": %d, \"seconds\": %.3f, \"rss_mb_after_first_repeat\": [",
                       sr.runs, sr.same, sr.seconds);
                for (int r = 0; r < size; r++)
                    printf("%s%.3f", r ? ", " : "", sr.rss0[r] / 1e6);
                printf("], \"rss_mb_after_last\": [");
                for (int r = 0; r < size; r++)
                    printf("%s%.3f", r ? ", " : "", sr.rss1[r] / 1e6);
                printf("]}");
            }
            if (journal)
                printf(", \"journal\": {\"replayed_tokens\": %d, \"replay_ms\": %.3f, \"write_us_per_token\": %.1f}",
                       replayed, replayed ? (t_replayed - t0) * 1e3 : 0.0,
                       n_out > n_forced ? journal_s / (n_out - n_forced) * 1e6 : 0.0);
            printf(", \"tokens\": [");
            for (int i = 0; i < n_out; i++)
                printf(i ? ", %d" : "%d", out[i]);
            printf("], ");
        } else {
            printf("\n");
            fflush(stdout);
            char tp[64] = "TPOT n/a (one token)";
            if (n_decode > 0)
                snprintf(tp, sizeof tp, "TPOT %.2f ms, %.1f tokens/s", tpot * 1e3, 1.0 / tpot);
            char mode[96] = "greedy"; /* the decoding mode, apart from the placement */
            if (temperature > 0)
                snprintf(mode, sizeof mode, "sampled at T %g, top-p %g, seed %llu", temperature, topp,
                         (unsigned long long)seed);
            /* under a launcher stdout and stderr travel apart and the text's last
             * line can arrive after this one: start it on a line of its own */
            fprintf(stderr, "%sgenerate: %d prompt + %d new tokens, %s, on %d rank%s (planner %s), TTFT %.1f ms, %s%s\n",
                    mi_world_launched() ? "\n" : "", n_prompt, n_out, mode, size, size > 1 ? "s" : "", mi_planner_name(ss.plan.planner), ttft * 1e3,
                    tp, c->synthetic ? " (synthetic weights)" : "");
        }
        free(text);
        free(out);
        free(prompt_ids);
        mi_sampler_free(&smp);
        journal_free(&jr);
    }
    free(given_opts.buf);
    if (json)
        session_metrics_json(&ss, stdout);
    if (rank == 0 && json)
        printf("}\n");
    if (metrics)
        session_metrics_table(&ss);
    session_close(&ss, &so);
    mi_world_finalize();
    return 0;
}
