/* CUnit test of meshinfer serve's HTTP side and scheduler (src/server/http.c,
 * sched.c) over a fake engine (no model, no MPI): the server runs srv_run on
 * a thread, on a free port, and plain sockets talk to it.
 *   - GET routes; a completion whole and streamed give the same text, usage
 *     and finish; a character split over tokens arrives whole in one event;
 *     a stop string across tokens ends the text before it (never sent in
 *     part); chat's first event carries the role;
 *   - 401 without the key (not on /health), 404, 405, 400, 413 from the
 *     announced size without the body read, 408 for a body sent a byte at a
 *     time, a connection closed for headers that never end; the server
 *     answers after each; idle sockets past the connection limit make
 *     room (the oldest closed) instead of stalling a new client;
 *   - concurrent streams each get the text they get alone; a full queue is
 *     503; a client that leaves mid-stream or while waiting gets its
 *     sequence stopped and its slot back;
 *   - a stop drains: the running request finishes (200), new connections
 *     are refused, srv_run returns; past --drain-timeout a request is 503;
 *   - the launcher ending the job (in a child process, as it _exits): a
 *     running stream gets its tokens so far and an error event, a running
 *     and a queued request 503 "cluster_lost", one that finished in the
 *     pass that then hung its whole answer, the process exits 1 at once
 *     although that pass never returns.
 * Exit status: 0 when every test passed, 1 otherwise. */
#define _GNU_SOURCE
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../src/server/internal.h"
#include "meshinfer/common.h"

/* what the server's thread and the test's share outside the server's locks */
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

/* ---- the fake engine: token i of every sequence is pieces[i % N] ---- */
static const char *pieces[] = {"Hello", ",", " wor", "ld", "!", " \xC3", "\xA9", "t\xC3\xA9", " \xF0\x9F", "\x98\x80",
                               " END", " more"};
#define N_PIECES 12
#define FAKE_MAX 8
typedef struct {
    int used, cancel, steps, n, n_prompt;
    mi_seq_hooks hk;
} fseq;
static struct {
    int max_batch, step_us;
    fseq s[FAKE_MAX];
    int active, ended_early; /* running; ended by on_token's stop or a cancel (read with LOAD by the test's thread) */
    int block_after_done;    /* a step that ended a sequence then hangs: a pass waiting on a rank that is gone */
} F;

static int *f_encode(void *ctx, const srv_params *p, int *n, srv_error *e)
{
    (void)ctx;
    size_t chars = 0;
    if (p->route == SRV_CHAT)
        for (int i = 0; i < p->n_msgs; i++)
            chars += strlen(p->contents[i]) + 8;
    else
        chars = strlen(p->prompt);
    if (p->prompt && strstr(p->prompt, "\xff")) {
        srv_fail(e, 400, "invalid_request_error", NULL, "prompt", "not valid UTF-8");
        return NULL;
    }
    *n = (int)(chars / 4) + 1;
    return calloc((size_t)*n, sizeof(int));
}
static const char *f_decode(void *ctx, int prev, int token, int *len)
{
    (void)ctx, (void)prev;
    *len = (int)strlen(pieces[token]);
    return pieces[token];
}
static int f_free(void *ctx) { (void)ctx; return F.max_batch - LOAD(F.active); }
static int f_add(void *ctx, const mi_gen_request *rq, const mi_seq_hooks *hk, char *err)
{
    (void)ctx;
    for (int i = 0; i < F.max_batch; i++)
        if (!F.s[i].used) {
            F.s[i] = (fseq){.used = 1, .steps = (int)rq->steps, .n_prompt = rq->n_prompt, .hk = *hk};
            STORE(F.active, F.active + 1);
            return i;
        }
    return mi_set_error(err, "no free slot");
}
static void f_cancel(void *ctx, int id) { (void)ctx; F.s[id].cancel = 1; }
static void done(int i, const char *stop)
{
    fseq q = F.s[i];
    F.s[i].used = 0;
    STORE(F.active, F.active - 1);
    q.hk.on_done(q.hk.ctx, stop, q.n_prompt, q.n, 0.001, 0.001);
}
static int f_step(void *ctx)
{
    (void)ctx;
    usleep((useconds_t)LOAD(F.step_us));
    int ended = 0;
    for (int i = 0; i < F.max_batch; i++) {
        if (!F.s[i].used)
            continue;
        if (F.s[i].cancel) {
            STORE(F.ended_early, F.ended_early + 1);
            done(i, "cancelled");
            ended = 1;
            continue;
        }
        int tok = F.s[i].n % N_PIECES;
        F.s[i].n++;
        if (F.s[i].hk.on_token(F.s[i].hk.ctx, tok)) {
            STORE(F.ended_early, F.ended_early + 1);
            done(i, "stop");
            ended = 1;
        } else if (F.s[i].n >= F.s[i].steps) {
            done(i, "length");
            ended = 1;
        }
    }
    if (ended && LOAD(F.block_after_done))
        sleep(30);
    return LOAD(F.active);
}

/* ---- the server on a thread ---- */
static srv S;
static pthread_t th;
static void *serve_thread(void *a)
{
    (void)a;
    char err[MI_ERRLEN];
    if (srv_run(&S, err))
        fprintf(stderr, "srv_run: %s\n", err);
    return NULL;
}

static void start(int max_batch, int max_queue, double drain_s)
{
    mi_server_opts o;
    mi_server_opts_init(&o);
    o.port = 0, o.max_batch = max_batch, o.max_queue = max_queue, o.drain_s = drain_s;
    o.max_body = 4096, o.timeout_s = 1, o.max_tokens = 1000, o.api_key = "sesame";
    memset(&F, 0, sizeof F);
    F.max_batch = max_batch;
    STORE(F.step_us, 2000);
    srv_reset_stop();
    srv_init(&S, &o);
    snprintf(S.model_id, sizeof S.model_id, "fake");
    S.eng = (srv_engine){.encode = f_encode, .decode = f_decode, .free_slots = f_free, .add = f_add,
                         .cancel = f_cancel, .step = f_step, .seq_len = 4096};
    S.lim = (srv_limits){.model_id = S.model_id, .seq_len = 4096, .max_tokens = 1000, .has_chat = 1};
    pthread_create(&th, NULL, serve_thread, NULL);
    for (int i = 0; i < 500 && !LOAD(S.port); i++)
        usleep(2000);
}

/* ---- a plain HTTP/1.1 client ---- */
static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)S.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_req(int fd, const char *method, const char *path, const char *body, const char *extra)
{
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method, path,
                     extra ? extra : "Authorization: Bearer sesame\r\n", body ? strlen(body) : 0);
    send(fd, head, (size_t)n, MSG_NOSIGNAL);
    if (body)
        send(fd, body, strlen(body), MSG_NOSIGNAL);
}

/* Read the response to EOF: its status, and its body (de-chunked) into out. */
static int read_resp(int fd, srv_buf *out)
{
    srv_buf raw = {0};
    char buf[4096];
    ssize_t k;
    while ((k = recv(fd, buf, sizeof buf, 0)) > 0)
        srv_buf_add(&raw, buf, (size_t)k);
    close(fd);
    srv_buf_add(out, "", 0);
    int status = 0;
    if (!raw.p || sscanf(raw.p, "HTTP/1.1 %d", &status) != 1) {
        srv_buf_free(&raw);
        return 0;
    }
    char *body = strstr(raw.p, "\r\n\r\n");
    body = body ? body + 4 : raw.p + raw.len;
    if (strcasestr(raw.p, "Transfer-Encoding: chunked")) {
        char *p = body;
        unsigned long n;
        while (sscanf(p, "%lx", &n) == 1 && n > 0) {
            p = strstr(p, "\r\n") + 2;
            srv_buf_add(out, p, n);
            p += n + 2;
        }
    } else {
        srv_buf_add(out, body, raw.len - (size_t)(body - raw.p));
    }
    srv_buf_free(&raw);
    return status;
}

static int http(const char *method, const char *path, const char *body, const char *extra, srv_buf *out)
{
    int fd = dial();
    if (fd < 0)
        return -1;
    send_req(fd, method, path, body, extra);
    out->len = 0;
    return read_resp(fd, out);
}

/* A completion's text (choices[0].text or .message.content), usage and finish. */
static void whole(const char *json, char *text, size_t n, int *prompt, int *gen, char *finish)
{
    cJSON *j = cJSON_Parse(json);
    text[0] = finish[0] = 0;
    *prompt = *gen = -1;
    if (!j)
        return;
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(c, "text");
    if (!t)
        t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content");
    snprintf(text, n, "%s", cJSON_IsString(t) ? t->valuestring : "");
    snprintf(finish, 16, "%s", cJSON_GetObjectItem(c, "finish_reason")->valuestring);
    *prompt = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens")->valueint;
    *gen = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint;
    cJSON_Delete(j);
}

/* A stream's events joined: the text, the finish, whether [DONE] ended it,
 * whether every event's text was whole UTF-8, and the first event's role. */
static int streamed(const char *sse, char *text, size_t n, char *finish, int *role)
{
    int done = 0, whole_utf8 = 1;
    text[0] = finish[0] = 0;
    *role = 0;
    srv_buf all = {0};
    srv_buf_add(&all, "", 0);
    int first = 1;
    for (const char *p = sse; (p = strstr(p, "data: ")); p += 6) {
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = 1;
            continue;
        }
        cJSON *j = cJSON_Parse(p + 6);
        if (!j)
            continue;
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItem(c, "delta");
        const cJSON *t = d ? cJSON_GetObjectItem(d, "content") : cJSON_GetObjectItem(c, "text");
        if (first && d && cJSON_GetObjectItem(d, "role"))
            *role = 1;
        first = 0;
        if (cJSON_IsString(t)) {
            srv_buf chk = {0};
            srv_utf8_append(&chk, t->valuestring, strlen(t->valuestring));
            whole_utf8 &= chk.len == strlen(t->valuestring) && !strstr(chk.p ? chk.p : "", "\xEF\xBF\xBD");
            srv_buf_free(&chk);
            srv_buf_str(&all, t->valuestring);
        }
        const cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
        if (cJSON_IsString(f))
            snprintf(finish, 16, "%s", f->valuestring);
        cJSON_Delete(j);
    }
    snprintf(text, n, "%s", all.p);
    srv_buf_free(&all);
    return done && whole_utf8;
}

static void test_routes(void)
{
    srv_buf b = {0};
    CU_ASSERT_EQUAL(http("GET", "/health", NULL, "", &b), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\"ok\""));
    CU_ASSERT_EQUAL(http("GET", "/v1/models", NULL, NULL, &b), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\"id\": \"fake\""));
    CU_ASSERT_EQUAL(http("GET", "/v1/models", NULL, "", &b), 401);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "invalid_api_key"));
    CU_ASSERT_EQUAL(http("GET", "/v1/models", NULL, "Authorization: Bearer sesam\r\n", &b), 401);
    CU_ASSERT_EQUAL(http("GET", "/v1/models", NULL, "Authorization: bearer sesame\r\n", &b), 200); /* scheme: any case */
    CU_ASSERT_EQUAL(http("GET", "/v1/nothing", NULL, NULL, &b), 404);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "Invalid URL (GET /v1/nothing)"));
    CU_ASSERT_EQUAL(http("GET", "/v1/completions", NULL, NULL, &b), 405);
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", "{\"prompt\": ", NULL, &b), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "JSON syntax error"));
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", "{\"prompt\": \"\xff\"}", NULL, &b), 400);
    CU_ASSERT_EQUAL(http("GET", "/metrics", NULL, "", &b), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "meshinfer_requests_total{status=\"401\"} 2"));
    srv_buf_free(&b);
}

static void test_completion(void)
{
    srv_buf b = {0};
    char text[256], text2[256], fin[16], fin2[16];
    int np, ng, role;
    const char *body = "{\"prompt\": \"abcdefgh\", \"max_tokens\": 10, \"temperature\": 0}";
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", body, NULL, &b), 200);
    whole(b.p, text, sizeof text, &np, &ng, fin);
    CU_ASSERT_STRING_EQUAL(text, "Hello, world! \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80");
    CU_ASSERT_EQUAL(np, 3);
    CU_ASSERT_EQUAL(ng, 10);
    CU_ASSERT_STRING_EQUAL(fin, "length");
    const char *sbody = "{\"prompt\": \"abcdefgh\", \"max_tokens\": 10, \"stream\": true, "
                        "\"stream_options\": {\"include_usage\": true}}";
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", sbody, NULL, &b), 200);
    CU_ASSERT(streamed(b.p, text2, sizeof text2, fin2, &role));
    CU_ASSERT_STRING_EQUAL(text2, text);
    CU_ASSERT_STRING_EQUAL(fin2, "length");
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\"usage\": {\"prompt_tokens\": 3, \"completion_tokens\": 10"));
    /* the stop string "d!" spans tokens "ld" and "!": the text ends before it, "d" never sent */
    const char *stop = "{\"prompt\": \"x\", \"max_tokens\": 10, \"stop\": [\"zz\", \"d!\"], \"stream\": true}";
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", stop, NULL, &b), 200);
    CU_ASSERT(streamed(b.p, text, sizeof text, fin, &role));
    CU_ASSERT_STRING_EQUAL(text, "Hello, worl");
    CU_ASSERT_STRING_EQUAL(fin, "stop");
    CU_ASSERT_PTR_NULL(strstr(b.p, "\"d\""));
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3}";
    CU_ASSERT_EQUAL(http("POST", "/v1/chat/completions", chat, NULL, &b), 200);
    whole(b.p, text, sizeof text, &np, &ng, fin);
    CU_ASSERT_STRING_EQUAL(text, "Hello, wor");
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\"object\": \"chat.completion\""));
    const char *schat = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3, \"stream\": true}";
    CU_ASSERT_EQUAL(http("POST", "/v1/chat/completions", schat, NULL, &b), 200);
    CU_ASSERT(streamed(b.p, text, sizeof text, fin, &role));
    CU_ASSERT_STRING_EQUAL(text, "Hello, wor");
    CU_ASSERT_EQUAL(role, 1);
    srv_buf_free(&b);
}

static void test_limits(void)
{
    srv_buf b = {0};
    /* 413 from Content-Length alone: the body is never sent */
    int fd = dial();
    const char *big = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sesame\r\n"
                      "Content-Length: 104857600\r\n\r\n";
    send(fd, big, strlen(big), MSG_NOSIGNAL);
    CU_ASSERT_EQUAL(read_resp(fd, &b), 413);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "--max-body"));
    /* two Content-Lengths: where the body ends is ambiguous (request smuggling), 400 */
    fd = dial();
    const char *two = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sesame\r\n"
                      "Content-Length: 16\r\nContent-Length: 5\r\n\r\n{\"prompt\": \"a\"}";
    send(fd, two, strlen(two), MSG_NOSIGNAL);
    CU_ASSERT_EQUAL(read_resp(fd, &b), 400);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "more than one Content-Length"));
    /* 408: a body a byte at a time, past the 1 s timeout */
    fd = dial();
    const char *slow = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sesame\r\n"
                       "Content-Length: 40\r\n\r\n";
    send(fd, slow, strlen(slow), MSG_NOSIGNAL);
    double t0 = mi_now();
    for (int i = 0; i < 8; i++) {
        send(fd, "{", 1, MSG_NOSIGNAL);
        usleep(200000);
    }
    int st = read_resp(fd, &b);
    CU_ASSERT_EQUAL(st, 408);
    if (st != 408)
        fprintf(stderr, "slow body: %d after %.2f s: %s\n", st, mi_now() - t0, b.p);
    CU_ASSERT(mi_now() - t0 < 3);
    /* headers that never end: the connection is closed */
    fd = dial();
    send(fd, "POST /v1/completions HTTP/1.1\r\n", 31, MSG_NOSIGNAL);
    t0 = mi_now();
    int closed = 0;
    for (int i = 0; i < 20 && !closed; i++) {
        closed = send(fd, "X", 1, MSG_NOSIGNAL) < 0;
        char c;
        if (!closed && recv(fd, &c, 1, MSG_DONTWAIT) == 0)
            closed = 1;
        usleep(200000);
    }
    close(fd);
    CU_ASSERT(closed);
    CU_ASSERT(mi_now() - t0 < 3.5);
    /* the server still answers */
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", NULL, &b), 200);
    srv_buf_free(&b);
}

typedef struct {
    const char *body;
    int status;
    char text[256];
} job;
static void *run_job(void *a)
{
    job *j = a;
    srv_buf b = {0};
    char fin[16];
    int role;
    j->status = http("POST", "/v1/completions", j->body, NULL, &b);
    if (j->status == 200)
        streamed(b.p, j->text, sizeof j->text, fin, &role);
    srv_buf_free(&b);
    return NULL;
}

static int queued(void)
{
    pthread_mutex_lock(&S.mu);
    int n = S.n_queued;
    pthread_mutex_unlock(&S.mu);
    return n;
}

static void test_concurrency(void)
{
    /* 6 streams on 2 slots and a queue of 4: each gets its text (token counts that end on a whole character) */
    pthread_t t[6];
    job j[6];
    char want[6][256];
    const int len[6] = {3, 4, 5, 7, 8, 10};
    for (int i = 0; i < 6; i++) {
        static char bodies[6][128];
        snprintf(bodies[i], sizeof bodies[i], "{\"prompt\": \"p\", \"max_tokens\": %d, \"stream\": true}", len[i]);
        j[i] = (job){.body = bodies[i]};
        want[i][0] = 0;
        for (int k = 0; k < len[i]; k++)
            strcat(want[i], pieces[k]);
        pthread_create(&t[i], NULL, run_job, &j[i]);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(j[i].status, 200);
        CU_ASSERT_STRING_EQUAL(j[i].text, want[i]);
    }
    /* queue full: 2 running, 4 queued, the 7th is 503 */
    int fds[6];
    STORE(F.step_us, 20000);
    for (int i = 0; i < 6; i++) {
        fds[i] = dial();
        send_req(fds[i], "POST", "/v1/completions", "{\"prompt\": \"p\", \"max_tokens\": 500}", NULL);
    }
    usleep(200000);
    srv_buf b = {0};
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", "{\"prompt\": \"p\"}", NULL, &b), 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "queue_full"));
    CU_ASSERT_EQUAL(LOAD(F.active), 2);
    /* they leave: the running stop, the queued are dropped, the slots come back */
    int early = LOAD(F.ended_early);
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    for (int i = 0; i < 100 && (LOAD(F.active) || queued()); i++)
        usleep(20000);
    CU_ASSERT_EQUAL(LOAD(F.active), 0);
    CU_ASSERT_EQUAL(queued(), 0);
    CU_ASSERT_EQUAL(LOAD(F.ended_early) - early, 2);
    /* a stream left after its first event */
    int fd = dial();
    send_req(fd, "POST", "/v1/completions", "{\"prompt\": \"p\", \"max_tokens\": 500, \"stream\": true}", NULL);
    char buf[512];
    CU_ASSERT(recv(fd, buf, sizeof buf, 0) > 0);
    close(fd);
    for (int i = 0; i < 100 && LOAD(F.active); i++)
        usleep(20000);
    CU_ASSERT_EQUAL(LOAD(F.active), 0);
    CU_ASSERT_EQUAL(LOAD(F.ended_early) - early, 3);
    STORE(F.step_us, 2000);
    CU_ASSERT_EQUAL(http("POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", NULL, &b), 200);
    srv_buf_free(&b);
}

static void test_drain(void)
{
    /* a stop lets the running request finish */
    STORE(F.step_us, 10000);
    job j = {.body = "{\"prompt\": \"p\", \"max_tokens\": 30, \"stream\": true}"};
    pthread_t t;
    pthread_create(&t, NULL, run_job, &j);
    usleep(100000);
    srv_request_stop();
    usleep(50000);
    CU_ASSERT_EQUAL(dial(), -1); /* not accepting */
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(j.status, 200);
    CU_ASSERT_EQUAL(strlen(j.text) > 20, 1);
    pthread_join(th, NULL);
    srv_destroy(&S);
    /* past the drain's deadline a running request is answered 503, a stream under way gets an error
     * event after its 200; both are logged and counted as 503 */
    start(2, 4, 0.2);
    STORE(F.step_us, 10000);
    job k = {.body = "{\"prompt\": \"p\", \"max_tokens\": 900}"};
    job ks = {.body = "{\"prompt\": \"p\", \"max_tokens\": 900, \"stream\": true}"};
    pthread_t ts;
    pthread_create(&t, NULL, run_job, &k);
    pthread_create(&ts, NULL, run_job, &ks);
    usleep(100000);
    double t0 = mi_now();
    srv_request_stop();
    pthread_join(th, NULL);
    pthread_join(t, NULL);
    pthread_join(ts, NULL);
    CU_ASSERT_EQUAL(k.status, 503);
    CU_ASSERT_EQUAL(ks.status, 200);
    CU_ASSERT(mi_now() - t0 < 2);
    uint64_t n503 = 0, n200 = 0;
    for (int i = 0; i < S.m.n_status; i++) {
        n503 += S.m.status[i] == 503 ? S.m.by_status[i] : 0;
        n200 += S.m.status[i] == 200 ? S.m.by_status[i] : 0;
    }
    CU_ASSERT_EQUAL(n503, 2);
    CU_ASSERT_EQUAL(n200, 0);
    srv_destroy(&S);
}

static void test_launcher_ending(void)
{
    int to_child[2], to_parent[2];
    CU_ASSERT_FATAL(pipe(to_child) == 0 && pipe(to_parent) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) { /* the server: two slots, each pass 150 ms, and the pass that ends a sequence never returns */
        start(2, 4, 5);
        STORE(F.step_us, 150000);
        STORE(F.block_after_done, 1);
        int port = LOAD(S.port);
        char c;
        if (write(to_parent[1], &port, sizeof port) != sizeof port || read(to_child[0], &c, 1) != 1)
            _exit(3);
        srv_request_ending();
        sleep(5); /* the watch ends the process first (a pass is under way) */
        _exit(4);
    }
    int port = 0;
    CU_ASSERT_FATAL(read(to_parent[0], &port, sizeof port) == sizeof port && port > 0);
    STORE(S.port, port);
    int fs = dial(), fd = dial(), fw = dial();
    send_req(fs, "POST", "/v1/completions", "{\"prompt\": \"p\", \"max_tokens\": 900, \"stream\": true}", NULL);
    send_req(fd, "POST", "/v1/completions", "{\"prompt\": \"p\", \"max_tokens\": 2}", NULL);
    usleep(100000);
    send_req(fw, "POST", "/v1/completions", "{\"prompt\": \"p\", \"max_tokens\": 900}", NULL);
    /* the stream has its first token; the short one finished in the pass that then hung, its
     * answer not yet sent; the third waits for a slot */
    usleep(600000);
    double t0 = mi_now();
    CU_ASSERT(write(to_child[1], "x", 1) == 1);
    srv_buf a = {0}, b = {0}, d = {0};
    CU_ASSERT_EQUAL(read_resp(fs, &a), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(a.p, "\"text\": \"Hello\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(a.p, "\"code\": \"cluster_lost\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(a.p, "data: [DONE]"));
    CU_ASSERT_EQUAL(read_resp(fd, &d), 200); /* finished: sent whole, not lost */
    CU_ASSERT_PTR_NOT_NULL(strstr(d.p, "\"text\": \"Hello,\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(d.p, "\"finish_reason\": \"length\""));
    CU_ASSERT_EQUAL(read_resp(fw, &b), 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "cluster_lost"));
    int st = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CU_ASSERT(mi_now() - t0 < 1.5);
    srv_buf_free(&a);
    srv_buf_free(&b);
    srv_buf_free(&d);
}

/* Idle sockets past the connection limit (here 2 (4 + 2) + 64 = 76) do not stall a client: the
 * oldest idle ones are closed as new ones arrive, well before the 1 s idle timeout would. */
static void test_idle_flood(void)
{
    enum { N = 100 };
    int fd[N];
    for (int i = 0; i < N; i++)
        fd[i] = dial();
    srv_buf b = {0};
    double t0 = mi_now();
    CU_ASSERT_EQUAL(http("GET", "/health", NULL, NULL, &b), 200);
    CU_ASSERT(mi_now() - t0 < 0.5);
    char c;
    CU_ASSERT(fd[0] >= 0 && recv(fd[0], &c, 1, 0) <= 0); /* the oldest: closed */
    for (int i = 0; i < N; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    srv_buf_free(&b);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    start(2, 4, 5);
    CU_pSuite s = CU_add_suite("serve over HTTP", NULL, NULL);
    CU_add_test(s, "routes, keys and errors", test_routes);
    CU_add_test(s, "completions whole and streamed", test_completion);
    CU_add_test(s, "413, 408 and slow headers", test_limits);
    CU_add_test(s, "idle connections past the limit", test_idle_flood);
    CU_add_test(s, "concurrency, queue and cancellation", test_concurrency);
    CU_add_test(s, "drain", test_drain);
    CU_add_test(s, "the launcher ending the job", test_launcher_ending);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
