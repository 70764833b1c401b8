/* `meshinfer serve`: the running job becomes an OpenAI-compatible HTTP
 * server. Rank 0 serves HTTP and runs the scheduler (server.h); the other
 * ranks serve the runtime as for generate. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/runtime.h"
#include "meshinfer/server.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer serve --model MODEL [--host H] [--port P] [options]\n\n"
           "Serves the model over HTTP with OpenAI's API until SIGTERM or SIGINT (to rank 0), then stops\n"
           "accepting, lets running and queued requests finish (--drain-timeout) and exits 0 on every rank.\n"
           "Routes: POST /v1/completions, POST /v1/chat/completions (the model's chat template), GET /v1/models,\n"
           "GET /health, GET /metrics (Prometheus). Streaming (\"stream\": true) sends server-sent events.\n"
           "  -m, --model FILE        HDF5 model, or a GGUF file or Hugging Face folder (converted once)\n"
           "      --host ADDR         address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
           "      --port P            TCP port (default 8080; 0: any free port, named in the start line)\n"
           "      --api-key KEY       the /v1 routes need 'Authorization: Bearer KEY' (default: the environment's\n"
           "                          MESHINFER_API_KEY; none when neither is set)\n"
           "      --alias NAME        the model's id in the API (default: the model file's name)\n"
           "      --chat-template K   render chats as kind K (llama3, qwen2.5, qwen3, gemma3, chatml, ...)\n"
           "                          instead of the model file's template\n"
           "      --max-batch N       sequences decoding together, each in its own KV cache slot (default 1,\n"
           "                          at most 64)\n"
           "      --micro-batches M   decode passes as M micro-batches pipelined through the ranks where the\n"
           "                          plan is a chain (layer-wise): ranks work on different sequences at once\n"
           "                          (default: the rank count; 1: one pass)\n"
           "      --max-queue N       requests waiting for a slot; more are answered 503 (default 64)\n"
           "      --max-body BYTES    largest request body (default 1048576); larger: 413 unread\n"
           "      --max-tokens N      the largest max_tokens a request may ask for (default 4096; never past\n"
           "                          the context); also chat's default\n"
           "      --timeout S         a request's headers and body must arrive within S seconds (408, or the\n"
           "                          connection closed), and idle connections close after S (default 30)\n"
           "      --drain-timeout S   on SIGTERM/SIGINT, running and queued requests get S seconds, then\n"
           "                          are answered 503 (default 30)\n"
           "      --pid-file FILE     write rank 0's pid there once listening (removed at exit)\n"
           "      --threads N         compute threads per rank (default 1)\n"
           "%s"
           "Each request is logged on stderr in one line (id, status, prompt and generated tokens, TTFT, TPOT).\n"
           "Under mpirun, send SIGTERM to rank 0's pid (in the start line): mpirun's own SIGTERM kills the job\n"
           "after a second. docs/guide/serve.md: fields, limits, examples.\n",
           SESSION_HELP);
}

typedef struct {
    const char *model;
    int threads;
    mi_server_opts o;
    session_opts so;
} serve_args;

static const struct option serve_opts[] = {
    {"model", required_argument, 0, 'm'},       {"host", required_argument, 0, 3001},
    {"port", required_argument, 0, 3002},       {"api-key", required_argument, 0, 3003},
    {"alias", required_argument, 0, 3004},      {"chat-template", required_argument, 0, 3005},
    {"max-batch", required_argument, 0, 3006},  {"max-queue", required_argument, 0, 3007},
    {"max-body", required_argument, 0, 3008},   {"max-tokens", required_argument, 0, 3009},
    {"timeout", required_argument, 0, 3010},    {"drain-timeout", required_argument, 0, 3011},
    {"pid-file", required_argument, 0, 3012},   {"threads", required_argument, 0, 'T'},
    {"micro-batches", required_argument, 0, 3013},
    {"help", no_argument, 0, 'h'},              SESSION_LONG_OPTS,
    {0, 0, 0, 0}};

/* Returns 1 after --help. Every refusal is one mi_fatal line. */
static int parse(int argc, char **argv, serve_args *a)
{
    memset(a, 0, sizeof *a);
    a->threads = 1;
    mi_server_opts_init(&a->o);
    session_opts_init(&a->so);
    int o;
    while ((o = getopt_long(argc, argv, ":m:h", serve_opts, NULL)) != -1) {
        switch (o) {
        case 'm': a->model = optarg; break;
        case 3001: a->o.host = optarg; break;
        case 3002: a->o.port = (int)mi_parse_long("--port", optarg, 0, 65535); break;
        case 3003: a->o.api_key = optarg; break;
        case 3004: a->o.alias = optarg; break;
        case 3005: a->o.chat_template = optarg; break;
        case 3006: a->o.max_batch = (int)mi_parse_long("--max-batch", optarg, 1, 64); break;
        case 3007: a->o.max_queue = (int)mi_parse_long("--max-queue", optarg, 0, 100000); break;
        case 3008: a->o.max_body = (size_t)mi_parse_long("--max-body", optarg, 1024, 1L << 30); break;
        case 3009: a->o.max_tokens = (int)mi_parse_long("--max-tokens", optarg, 1, 1 << 20); break;
        case 3010: a->o.timeout_s = mi_parse_double("--timeout", optarg, 0.1, 86400); break;
        case 3011: a->o.drain_s = mi_parse_double("--drain-timeout", optarg, 0, 86400); break;
        case 3012: a->o.pid_file = optarg; break;
        case 3013: a->o.micro_batches = (int)mi_parse_long("--micro-batches", optarg, 1, MI_MAX_RANKS); break;
        case 'T': a->threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'h': help(); return 1;
        default:
            if (!session_opt(&a->so, o, optarg))
                cli_bad_option("serve", o, argv);
        }
    }
    cli_no_positional("serve", optind, argc, argv);
    if (!a->model)
        mi_fatal("serve: --model is required (see meshinfer serve --help)");
    if (!a->o.host[0])
        mi_fatal("serve: --host is empty");
    if (a->o.api_key && !a->o.api_key[0])
        mi_fatal("serve: --api-key is empty (leave it out for a server without a key)");
    if (!a->o.api_key) {
        /* set but empty is a mistake (a variable that expanded to nothing), not a wish for an open server */
        const char *k = getenv("MESHINFER_API_KEY");
        if (k && !*k)
            mi_fatal("serve: MESHINFER_API_KEY is set but empty (unset it for a server without a key)");
        a->o.api_key = k;
    }
    if (a->o.alias && (!a->o.alias[0] || strlen(a->o.alias) > 200))
        mi_fatal("serve: --alias must have 1 to 200 characters");
    /* the requests run without Voltron's runtime scaling (generate's) */
    if (a->so.tpot_ms > 0 || (a->so.importance && !a->so.prune_ffn) || a->so.energy)
        mi_fatal("serve: --tpot-ms, --importance (without --prune-ffn) and --energy shape a generation at run time: "
                 "they apply to generate");
    char err[MI_ERRLEN];
    if (session_opts_check(&a->so, "serve", mi_world_launch_size(NULL), err))
        mi_fatal("%s", err);
    /* the pid file is written once listening: checked now, and never one of the inputs */
    const char *inputs[] = {a->model, a->so.cluster, a->so.plan_file, a->so.importance, a->so.sg_quality};
    if (a->o.pid_file && mi_output_check(a->o.pid_file, "--pid-file", inputs, 5, err))
        mi_fatal("serve: %s", err);
    /* requests sample at any temperature and top-k: a split classifier sends every logit */
    a->so.logits_k = 0;
    a->so.kv_slots = a->o.max_batch; /* each sequence of the batch in a KV cache slot of its own */
    return 0;
}

/* The model's id in the API: --alias, else the file's (or folder's) name without its extension. */
static void model_id(const serve_args *a, char *id, size_t n)
{
    if (a->o.alias) {
        snprintf(id, n, "%s", a->o.alias);
        return;
    }
    const char *p = a->model;
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && p[start - 1] != '/')
        start--;
    size_t end = len;
    for (size_t i = len; i > start; i--)
        if (p[i - 1] == '.') {
            end = i - 1 > start ? i - 1 : len;
            break;
        }
    snprintf(id, n, "%.*s", (int)(end - start), p + start);
}

int cmd_serve(int argc, char **argv)
{
    serve_args a;
    if (parse(argc, argv, &a))
        return 0;
    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    /* a signal mpirun sends every rank stops rank 0's server; the workers serve until it releases them */
    if (rank == 0)
        mi_server_install_signals(mi_world_launched());
    else
        mi_server_ignore_signals();
    mi_session ss;
    session_open(&ss, "serve", a.model, &a.so, 64, a.threads);
    int rc = 0;
    if (rank != 0) {
        mi_runtime_serve(ss.rt);
    } else {
        char id[256], err[MI_ERRLEN] = "";
        model_id(&a, id, sizeof id);
        rc = mi_server_run(&ss, &a.o, id, err) != 0;
        mi_runtime_stop(ss.rt);
        if (rc) /* the workers are released first: one line, every rank ends */
            fprintf(stderr, "meshinfer: error: %s\n", err);
    }
    session_close(&ss, &a.so);
    return mi_world_finish(rc);
}
