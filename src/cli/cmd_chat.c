/* meshinfer chat: an interactive conversation with a model's own chat
 * template (control.h session_encode_chat): each user line is appended to
 * the conversation, which is rendered whole and encoded; the tokens it
 * shares with what the KV cache already holds are not run again; the reply
 * streams until the template's end-of-turn token. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/control.h"
#include "meshinfer/runtime.h"
#include "meshinfer/sampler.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: meshinfer chat --model MODEL [--system TEXT] [--steps N] [--temperature T] [--top-p P]\n"
           "                      [--seed S] [--chat-template NAME] [--no-think] [distributed options]\n\n"
           "Talks with a chat model: type a message and press Enter; the reply streams. The conversation is\n"
           "kept (and its KV cache: earlier turns are not run again). An empty line, EOF or /exit ends it.\n"
           "  --model MODEL       a model file with a chat template (converted from a GGUF file or a Hugging\n"
           "                      Face folder), or the GGUF file or folder itself\n"
           "  --system TEXT       a system prompt\n"
           "  --steps N           longest reply in tokens (default 512)\n"
           "  --temperature T     0 (default) is greedy; --top-k K (default 40), --top-p P (default 0.9), --seed S\n"
           "  --chat-template NAME  render with this kind instead of the file's: llama3, llama3-orig, llama3.1,\n"
           "                      llama3.2, qwen2.5, qwen2, qwen3, gemma3, zephyr, llama2, chatml\n"
           "  --no-think          Qwen3: answer without a thinking block (enable_thinking=false)\n"
           "The distributed options are generate's (meshinfer generate --help): --planner, --cluster, ...\n");
}

typedef struct {
    mi_session *ss;
    char *text;
    size_t len, cap;
} reply;

static void on_token(void *ctx, int token, int prev, uint64_t rng, int replayed)
{
    (void)rng, (void)replayed;
    reply *r = ctx;
    int len = 0;
    const char *piece = mi_tokenizer_decode(&r->ss->tok, prev, token, &len);
    if (r->len + (size_t)len + 1 > r->cap) {
        r->cap = 2 * (r->len + (size_t)len + 1);
        r->text = realloc(r->text, r->cap);
        if (!r->text)
            mi_fatal("out of memory");
    }
    memcpy(r->text + r->len, piece, (size_t)len);
    r->len += (size_t)len;
    r->text[r->len] = 0;
    fwrite(piece, 1, (size_t)len, stdout);
    fflush(stdout);
    mi_stdout_wrote(piece, (size_t)len);
}

typedef struct {
    const char *model, *system, *tmpl;
    long steps;
    double temperature, topp;
    uint64_t seed;
    int no_think, threads;
    int top_k;
    session_opts so;
} chat_args;

static const struct option chat_opts[] = {
    {"model", required_argument, 0, 'm'},  {"system", required_argument, 0, 'S'},
    {"steps", required_argument, 0, 'n'},  {"temperature", required_argument, 0, 't'},
    {"top-p", required_argument, 0, 'P'},  {"seed", required_argument, 0, 's'},
    {"chat-template", required_argument, 0, 'C'}, {"no-think", no_argument, 0, 'N'},
    {"threads", required_argument, 0, 'T'}, {"top-k", required_argument, 0, 'k'}, {"help", no_argument, 0, 'h'},
    SESSION_LONG_OPTS, {0, 0, 0, 0}};

static int parse(int argc, char **argv, chat_args *a)
{
    memset(a, 0, sizeof *a);
    a->steps = 512, a->topp = 0.9, a->seed = 42, a->threads = 1, a->top_k = 40;
    session_opts_init(&a->so);
    int o, sampler_opt = 0; /* --top-k, --top-p or --seed given: they act only when sampling (-t > 0) */
    while ((o = getopt_long(argc, argv, ":m:n:t:s:k:h", chat_opts, NULL)) != -1) {
        switch (o) {
        case 'm': a->model = optarg; break;
        case 'S': a->system = optarg; break;
        case 'n': a->steps = mi_parse_long("--steps", optarg, 1, 1 << 20); break;
        case 't': a->temperature = mi_parse_double("--temperature", optarg, 0.0, 100.0); break;
        case 'P': a->topp = mi_parse_double("--top-p", optarg, 1e-6, 1.0); sampler_opt = 1; break;
        case 's': a->seed = mi_parse_u64("--seed", optarg); sampler_opt = 1; break;
        case 'C': a->tmpl = optarg; break;
        case 'N': a->no_think = 1; break;
        case 'k': a->top_k = (int)mi_parse_long("--top-k", optarg, 0, 1 << 24); sampler_opt = 1; break;
        case 'T': a->threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'h': help(); return 1;
        default:
            if (!session_opt(&a->so, o, optarg))
                cli_bad_option("chat", o, argv);
        }
    }
    cli_no_positional("chat", optind, argc, argv);
    if (!a->model)
        mi_fatal("chat: --model is required (see meshinfer chat --help)");
    if (sampler_opt && a->temperature <= 0)
        mi_fatal("chat: --top-k, --top-p and --seed shape sampling: greedy decoding (-t 0, the default) uses none "
                 "of them (give -t T > 0)");
    /* a chat's turns run without Voltron's runtime scaling (generate's) */
    if (a->so.tpot_ms > 0 || (a->so.importance && !a->so.prune_ffn) || a->so.energy)
        mi_fatal("chat: --tpot-ms, --importance (without --prune-ffn) and --energy shape a generation at run time: "
                 "they apply to generate");
    char err[MI_ERRLEN];
    if (session_opts_check(&a->so, "chat", mi_world_launch_size(NULL), err))
        mi_fatal("%s", err);
    /* a split classifier sends the candidates the sampler needs (sampler.h) */
    a->so.logits_k = mi_logit_candidates((float)a->temperature, a->top_k);
    return 0;
}

/* One turn: the conversation so far rendered and encoded, the part the
 * cache lacks run, the reply generated and appended. A message that cannot
 * be encoded (not UTF-8, past the context) is refused in one line and
 * dropped, and the conversation goes on without it: -1. */
static int turn(chat_args *a, mi_session *ss, mi_chat_msg *msgs, int *n_msgs, int **cached, int *n_cached)
{
    char err[MI_ERRLEN];
    int n;
    int *ids = session_encode_chat(ss, msgs, *n_msgs, a->tmpl, MI_CHAT_GEN | (a->no_think ? MI_CHAT_NO_THINKING : 0),
                                   &n, err);
    if (!ids) {
        fprintf(stderr, "meshinfer: error: chat: your message was not sent: %s\n", err);
        free((char *)msgs[--*n_msgs].content);
        return -1;
    }
    int same = 0;
    while (same < *n_cached && same < n - 1 && (*cached)[same] == ids[same])
        same++;
    long room = ss->cfg.seq_len - n;
    mi_gen_request rq = {.prompt = ids, .n_prompt = n, .steps = a->steps < room ? a->steps : room,
                         .temperature = (float)a->temperature, .topp = (float)a->topp, .seed = a->seed,
                         .n_cached = same, .top_k = a->top_k};
    reply r = {ss, NULL, 0, 0};
    mi_gen_hooks hk = {on_token, &r, NULL};
    mi_gen_result res;
    session_generate(ss, &rq, &hk, &res);
    fputc('\n', stdout);
    mi_stdout_wrote("\n", 1);
    /* the cache now holds the prompt and every reply token run through it */
    int run = strcmp(res.stop, "eos") == 0 ? res.n : res.n - 1;
    *cached = realloc(*cached, (size_t)(n + res.n + 1) * sizeof(int));
    memcpy(*cached, ids, (size_t)n * sizeof(int));
    memcpy(*cached + n, res.tokens, (size_t)(run > 0 ? run : 0) * sizeof(int));
    *n_cached = n + (run > 0 ? run : 0);
    msgs[(*n_msgs)++] = (mi_chat_msg){"assistant", r.text ? r.text : strdup("")};
    free(res.tokens);
    free(ids);
    return 0;
}

/* The tokens of text alone (no BOS), or -1 with err naming its fault (not UTF-8, ...): a text's own
 * faults said as its own, not as the rendered template's. */
static int count_tokens(const mi_tokenizer *tok, const char *text, char *err)
{
    int n = (int)strlen(text) + 4, *ids = mi_malloc((size_t)n * sizeof(int), "chat text");
    int k = mi_tokenizer_encode_n(tok, text, 0, ids, n, err);
    free(ids);
    return k;
}

int cmd_chat(int argc, char **argv)
{
    chat_args a;
    int exit_code = 0;
    if (parse(argc, argv, &a))
        return 0;
    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    mi_session ss;
    session_open(&ss, "chat", a.model, &a.so, 64, a.threads);
    if (rank != 0) {
        mi_runtime_serve(ss.rt);
    } else {
        char err[MI_ERRLEN];
        int kind = session_chat_kind(&ss, a.tmpl, err); /* said before the user types anything */
        if (kind < 0)
            mi_fatal("chat: %s: %s", a.model, err);
        if (a.no_think && kind != MI_CHAT_QWEN3)
            mi_fatal("chat: --no-think turns off Qwen3's thinking block; the %s template has none",
                     mi_chat_kind_name(kind));
        if (a.system) { /* its faults are said once, now, not blamed on every message */
            int k = count_tokens(&ss.tok, a.system, err);
            if (k < 0)
                mi_fatal("chat: --system: %s", err);
            if (k >= ss.cfg.seq_len)
                mi_fatal("chat: --system is %d tokens; the model's context is %d, which leaves no room for a message",
                         k, ss.cfg.seq_len);
        }
        int cap = 256, n_msgs = 0, n_cached = 0, *cached = NULL, refused = 0;
        mi_chat_msg *msgs = mi_calloc((size_t)cap, sizeof *msgs, "conversation");
        if (a.system)
            msgs[n_msgs++] = (mi_chat_msg){"system", strdup(a.system)};
        char *line = NULL; /* a line of any length is one message (getline) */
        size_t line_cap = 0;
        for (;;) {
            fputs("> ", stderr);
            ssize_t got = getline(&line, &line_cap, stdin);
            if (got < 0)
                break;
            if (strlen(line) < (size_t)got) { /* the text after a NUL would be dropped unseen */
                fprintf(stderr, "meshinfer: error: chat: your message was not sent: it holds a NUL byte (at byte "
                        "%zu)\n", strlen(line));
                refused = 1;
                continue;
            }
            line[strcspn(line, "\r\n")] = 0;
            if (!line[0] || !strcmp(line, "/exit"))
                break;
            if (n_msgs + 2 > cap)
                mi_fatal("chat: the conversation has %d messages, the most one chat keeps", cap);
            /* a fault of the line named in the line (not in the rendered template) */
            if (count_tokens(&ss.tok, line, err) < 0) {
                fprintf(stderr, "meshinfer: error: chat: your message was not sent: %s\n", err);
                refused = 1;
                continue;
            }
            msgs[n_msgs++] = (mi_chat_msg){"user", strdup(line)};
            refused |= turn(&a, &ss, msgs, &n_msgs, &cached, &n_cached) != 0;
        }
        free(line);
        for (int i = 0; i < n_msgs; i++)
            free((char *)msgs[i].content);
        free(msgs);
        free(cached);
        mi_runtime_stop(ss.rt);
        if (refused) /* a script piping messages learns that one was not sent */
            exit_code = 1;
    }
    session_close(&ss, &a.so);
    return mi_world_finish(exit_code);
}
