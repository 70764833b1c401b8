/* The scheduler (see internal.h): on the thread that called srv_run, the
 * only one that touches the engine (and through it the session and MPI). It
 * prepares queued requests (tokens, limits), adds ready ones to the batch
 * while slots are free, steps the batch, turns tokens into text (stop
 * strings, UTF-8) for each connection, resumes the connections that have
 * news, stops the sequences of clients that left, and drains on a stop. */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "meshinfer/common.h"

/* Under s->mu: the request is answered with e (before or instead of its text). */
static void set_failed(srv_req *r, const srv_error *e)
{
    r->err = *e;
    r->failed = !r->p.stream || r->state < SRV_READY; /* a stream under way ends with an error event */
    if (!r->failed) {
        r->stream_failed = 1;
        srv_buf_str(&r->sse, "data: ");
        srv_json_error(&r->sse, e);
        srv_buf_str(&r->sse, "\n\ndata: [DONE]\n\n");
        r->sse_end = 1;
    }
    r->state = SRV_DONE;
    r->news = 1;
}

/* Take r off the queue (s->mu held). */
static void unqueue(srv *s, srv_req *r)
{
    srv_req **pp = &s->q_head, *prev = NULL;
    while (*pp && *pp != r)
        prev = *pp, pp = &(*pp)->next;
    if (!*pp)
        return;
    *pp = r->next;
    if (s->q_tail == r)
        s->q_tail = prev;
    r->next = NULL;
    s->n_queued--;
}

static void list_add(srv_req_list *l, srv_req *r)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->r = realloc(l->r, (size_t)l->cap * sizeof *l->r);
        if (!l->r)
            mi_fatal("serve: out of memory");
    }
    l->r[l->n++] = r;
}

/* The prompt's tokens and the steps it may take: READY, or answered 400. */
static void prepare(srv *s, srv_req *r)
{
    srv_error e;
    int n = 0, *ids = s->eng.encode(s->eng.ctx, &r->p, &n, &e), room = s->eng.seq_len - n;
    int want = r->p.max_tokens;
    if (ids && room < 1)
        srv_fail(&e, 400, "invalid_request_error", "context_length_exceeded", r->route == SRV_CHAT ? "messages"
                 : "prompt", "This model's maximum context length is %d tokens; the %s is %d tokens, which leaves "
                 "no room for a completion", s->eng.seq_len, r->route == SRV_CHAT ? "conversation" : "prompt", n);
    else if (ids && want > room)
        srv_fail(&e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens", "This model's maximum "
                 "context length is %d tokens. However, you requested %d tokens (%d in the %s, %d for the "
                 "completion): lower max_tokens to %d or less", s->eng.seq_len, n + want, n,
                 r->route == SRV_CHAT ? "messages" : "prompt", want, room);
    int ok = ids && room >= 1 && want <= room;
    if (ok && want == 0) /* OpenAI's defaults: 16 for completions, the rest of the context for chat */
        want = r->route == SRV_COMPLETIONS ? 16 : s->o.max_tokens;
    if (ok && want > room)
        want = room;
    pthread_mutex_lock(&s->mu);
    if (ok) {
        r->ids = ids, r->n_ids = n, r->steps = want, r->n_prompt = n;
        r->state = SRV_READY;
        r->news = 1;
    } else {
        free(ids);
        unqueue(s, r);
        set_failed(r, &e);
    }
    pthread_mutex_unlock(&s->mu);
}

static int on_token(void *ctx, int token)
{
    srv_req *r = ctx;
    srv *s = r->s;
    int len = 0;
    const char *piece = s->eng.decode(s->eng.ctx, r->prev, token, &len);
    r->prev = token;
    srv_buf out = {0};
    int stop = srv_stream_push(&r->st, piece, (size_t)len, &out);
    srv_metrics_tokens(&s->m, 1);
    pthread_mutex_lock(&s->mu);
    if (r->state == SRV_DONE) { /* answered by the launcher watch: nothing more goes out */
        pthread_mutex_unlock(&s->mu);
        srv_buf_free(&out);
        return 1;
    }
    if (!r->t_first)
        r->t_first = mi_now();
    r->n_gen++;
    if (r->p.stream) {
        if (out.len || (!r->first_sent && r->route == SRV_CHAT)) {
            if (!r->first_sent && r->route == SRV_CHAT) /* the role first, as OpenAI's first chunk */
                srv_sse_chunk(&r->sse, r->route, r->id, r->created, s->model_id, "", 0, NULL, 1);
            if (out.len)
                srv_sse_chunk(&r->sse, r->route, r->id, r->created, s->model_id, out.p, out.len, NULL, 0);
            r->first_sent = 1;
            r->news = 1;
        }
    } else if (out.len) {
        srv_buf_add(&r->text, out.p, out.len);
    }
    int gone = r->gone;
    pthread_mutex_unlock(&s->mu);
    srv_buf_free(&out);
    return stop || gone;
}

static void on_done(void *ctx, const char *stop, int n_prompt, int n_gen, double ttft_s, double tpot_s)
{
    srv_req *r = ctx;
    srv *s = r->s;
    (void)ttft_s;
    srv_buf out = {0};
    srv_stream_finish(&r->st, &out);
    /* take it off the running list (under s->mu: the launcher watch reads the list from its thread) */
    pthread_mutex_lock(&s->mu);
    for (srv_req **pp = &s->running; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    r->next = NULL;
    s->n_running--;
    if (r->state == SRV_DONE) { /* answered by the launcher watch */
        list_add(&s->finished, r);
        pthread_mutex_unlock(&s->mu);
        srv_buf_free(&out);
        return;
    }
    r->n_prompt = n_prompt, r->n_gen = n_gen;
    r->timed = n_gen > 0;
    r->ttft_s = r->t_first ? r->t_first - r->t_submit : 0;
    r->tpot_s = tpot_s;
    r->finish = !strcmp(stop, "length") ? "length" : "stop";
    srv_error e;
    if (!strcmp(stop, "error")) {
        srv_fail(&e, 500, "server_error", "generation_failed", NULL, "The model's logits were not finite: the "
                 "generation stopped after %d tokens", n_gen);
        set_failed(r, &e);
    } else if (!strcmp(stop, "cancelled") && !r->gone) {
        srv_fail(&e, 503, "server_error", "shutting_down", NULL, "The server shut down before the request finished "
                 "(--drain-timeout %g s)", s->o.drain_s);
        set_failed(r, &e);
    } else if (r->p.stream) {
        if (!r->first_sent && r->route == SRV_CHAT)
            srv_sse_chunk(&r->sse, r->route, r->id, r->created, s->model_id, "", 0, NULL, 1);
        if (out.len)
            srv_sse_chunk(&r->sse, r->route, r->id, r->created, s->model_id, out.p, out.len, NULL, 0);
        srv_sse_chunk(&r->sse, r->route, r->id, r->created, s->model_id, "", 0, r->finish, 0);
        if (r->p.include_usage)
            srv_sse_usage(&r->sse, r->route, r->id, r->created, s->model_id, n_prompt, n_gen);
        srv_buf_str(&r->sse, "data: [DONE]\n\n");
        r->sse_end = 1;
    } else {
        srv_buf_add(&r->text, out.p ? out.p : "", out.len);
    }
    r->state = SRV_DONE;
    r->news = 1;
    list_add(&s->finished, r); /* under s->mu: the launcher watch delivers it if no wake() comes */
    pthread_mutex_unlock(&s->mu);
    srv_buf_free(&out);
}

/* Ready requests into the batch, first come first served, while slots are free. */
static void admit(srv *s)
{
    for (;;) {
        pthread_mutex_lock(&s->mu);
        srv_req *r = s->q_head;
        int go = r && r->state == SRV_READY && s->eng.free_slots(s->eng.ctx) > 0;
        if (go)
            unqueue(s, r);
        pthread_mutex_unlock(&s->mu);
        if (!go)
            return;
        uint64_t seed = r->p.seed_set ? r->p.seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(mi_now() * 1e9);
        mi_gen_request rq = {.prompt = r->ids, .n_prompt = r->n_ids, .steps = r->steps,
                             .temperature = (float)r->p.temperature, .topp = (float)r->p.top_p, .top_k = r->p.top_k,
                             .seed = seed};
        mi_seq_hooks hk = {on_token, on_done, r};
        r->st.stop = r->p.stop, r->st.n_stop = r->p.n_stop;
        r->prev = r->ids[r->n_ids - 1];
        char err[MI_ERRLEN] = "";
        int id = s->eng.add(s->eng.ctx, &rq, &hk, err);
        pthread_mutex_lock(&s->mu);
        if (id < 0) {
            srv_error e;
            srv_fail(&e, 500, "server_error", NULL, NULL, "The request could not join the batch: %s", err);
            set_failed(r, &e);
            list_add(&s->finished, r);
        } else {
            r->seq = id;
            r->state = SRV_RUNNING;
            r->next = s->running;
            s->running = r;
            s->n_running++;
        }
        pthread_mutex_unlock(&s->mu);
    }
}

/* Clients that left: a queued request is dropped, a running one stops at
 * its next token (on_token sees gone). A suspended connection is not
 * watched by libmicrohttpd: its socket is polled here for the peer's end. */
static void check_gone(srv *s)
{
    pthread_mutex_lock(&s->mu);
    for (int pass = 0; pass < 2; pass++)
        for (srv_req *r = pass ? s->running : s->q_head, *next; r; r = next) {
            next = r->next;
            if (!r->gone && r->suspended && r->fd >= 0) {
                struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
                if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                    r->gone = 1;
            }
            if (r->gone && pass == 0) {
                srv_error e;
                srv_fail(&e, 499, "invalid_request_error", NULL, NULL, "The client closed the connection");
                unqueue(s, r);
                set_failed(r, &e);
                list_add(&s->finished, r);
            } else if (r->gone && r->seq >= 0) {
                s->eng.cancel(s->eng.ctx, r->seq);
            }
        }
    pthread_mutex_unlock(&s->mu);
}

/* Resume the connections that have news, then drop the references of the finished. */
static void collect(srv_req *x, srv_req_list *go)
{
    if (x->suspended && x->news) {
        x->suspended = 0;
        x->news = 0;
        list_add(go, x);
    }
}

static void wake(srv *s)
{
    srv_req_list go = {0}, done;
    pthread_mutex_lock(&s->mu);
    for (srv_req *r = s->q_head; r; r = r->next)
        collect(r, &go);
    for (srv_req *r = s->running; r; r = r->next)
        collect(r, &go);
    for (int i = 0; i < s->finished.n; i++)
        collect(s->finished.r[i], &go);
    done = s->finished; /* taken under s->mu: the launcher watch reads the list */
    s->finished = (srv_req_list){0};
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < go.n; i++)
        srv_http_resume(go.r[i]->conn);
    for (int i = 0; i < done.n; i++)
        srv_req_release(done.r[i]);
    free(done.r);
    free(go.r);
}

/* The drain's deadline passed: running sequences are cancelled (their
 * on_done answers 503), queued requests answered 503 at once. */
static void abort_all(srv *s)
{
    srv_error e;
    srv_fail(&e, 503, "server_error", "shutting_down", NULL, "The server shut down before the request started "
             "(--drain-timeout %g s)", s->o.drain_s);
    pthread_mutex_lock(&s->mu);
    for (srv_req *r = s->running; r; r = r->next)
        s->eng.cancel(s->eng.ctx, r->seq);
    while (s->q_head) {
        srv_req *r = s->q_head;
        unqueue(s, r);
        set_failed(r, &e);
        list_add(&s->finished, r);
    }
    pthread_mutex_unlock(&s->mu);
}

/* The launcher is ending the job (srv_ending): the scheduler's thread may be
 * blocked for good in a pass that waits on a rank that is gone, and SIGKILL
 * follows within about a second, so this thread answers every running and
 * queued request 503 itself (a stream under way gets an error event), lets
 * libmicrohttpd write the answers for at most half a second and ends the
 * process. Each request gets a reference of its own: the scheduler, should
 * it still be running, never frees one under us. */
static void *ending_watch(void *arg)
{
    srv *s = arg;
    while (!srv_ending()) {
        if (__atomic_load_n(&s->watch_quit, __ATOMIC_SEQ_CST))
            return NULL;
        usleep(20000);
    }
    srv_error e;
    srv_fail(&e, 503, "server_error", "cluster_lost", NULL, "The cluster job is ending (its launcher stopped it: "
             "a rank exited, or mpirun was signalled); the request did not finish");
    srv_req_list go = {0};
    pthread_mutex_lock(&s->mu);
    int n_run = 0, n_queued = 0;
    for (int pass = 0; pass < 2; pass++)
        for (srv_req *r = pass ? s->q_head : s->running; r; r = r->next) {
            if (r->state == SRV_DONE)
                continue;
            n_run += !pass, n_queued += pass;
            set_failed(r, &e);
            r->refs++;
            list_add(&go, r);
        }
    /* finished in the pass that then blocked: answered, but no wake() came to send it */
    int n_done = 0;
    for (int i = 0; i < s->finished.n; i++) {
        srv_req *r = s->finished.r[i];
        if (r->suspended && r->news) {
            n_done++;
            r->refs++;
            list_add(&go, r);
        }
    }
    srv_req_list wake_now = {0};
    for (int i = 0; i < go.n; i++)
        collect(go.r[i], &wake_now);
    pthread_mutex_unlock(&s->mu);
    fprintf(stderr, "serve: error: the launcher is ending the job (a rank exited, or mpirun was signalled): "
            "%d running and %d queued requests answered 503, %d finished ones sent\n", n_run, n_queued, n_done);
    for (int i = 0; i < wake_now.n; i++)
        srv_http_resume(wake_now.r[i]->conn);
    /* until libmicrohttpd is done with each (its answer written, or the client gone) */
    double until = mi_now() + 0.5;
    for (;;) {
        int pending = 0;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < go.n; i++)
            pending += !go.r[i]->closed;
        pthread_mutex_unlock(&s->mu);
        if (!pending || mi_now() > until)
            break;
        usleep(10000);
    }
    free(go.r);
    free(wake_now.r);
    if (s->o.pid_file) /* as a drained server's exit does: the file names a live server only */
        unlink(s->o.pid_file);
    s->exit_fn(1);
    return NULL;
}

/* Prepare the requests queued since the last pass (s->mu released while encoding). */
static void prepare_new(srv *s)
{
    for (;;) {
        pthread_mutex_lock(&s->mu);
        srv_req *r = s->q_head;
        while (r && r->state != SRV_QUEUED)
            r = r->next;
        pthread_mutex_unlock(&s->mu);
        if (!r)
            return;
        prepare(s, r); /* only this thread takes requests off the queue: r stays */
        if (r->failed) {
            pthread_mutex_lock(&s->mu);
            list_add(&s->finished, r);
            pthread_mutex_unlock(&s->mu);
        }
    }
}

static double wait_s(srv *s, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

int srv_run(srv *s, char *err)
{
    if (srv_http_start(s, err))
        return -1;
    fprintf(stderr, "serve: listening on http://%s%s%s:%d (model %s, pid %ld, max batch %d, queue %d, %s)\n",
            strchr(s->o.host, ':') ? "[" : "", s->o.host, strchr(s->o.host, ':') ? "]" : "", s->port, s->model_id,
            (long)getpid(), s->o.max_batch, s->o.max_queue, s->o.api_key ? "API key required" : "no API key");
    if (s->plan_note[0])
        fprintf(stderr, "serve: %s\n", s->plan_note);
    if (s->note[0])
        fprintf(stderr, "serve: %s\n", s->note);
    if (s->o.pid_file) {
        FILE *f = fopen(s->o.pid_file, "w");
        if (f) {
            fprintf(f, "%ld\n", (long)getpid());
            fclose(f);
        }
    }
    pthread_t watcher;
    int watching = pthread_create(&watcher, NULL, ending_watch, s) == 0;
    double deadline = 0, last_watch = 0;
    int aborted = 0;
    for (;;) {
        double now = mi_now();
        if (!s->stopping && srv_stop_requested()) {
            pthread_mutex_lock(&s->mu);
            s->stopping = 1;
            int q = s->n_queued, n = s->n_running;
            pthread_mutex_unlock(&s->mu);
            srv_http_quiesce(s);
            deadline = now + s->o.drain_s;
            if (!srv_ending()) /* the launcher's teardown is the watcher's to say (ending_watch) */
                fprintf(stderr, "serve: stopping: no new connections; draining %d running and %d queued requests "
                        "(at most %g s)\n", n, q, s->o.drain_s);
        }
        prepare_new(s);
        check_gone(s);
        if (s->stopping && !aborted && now > deadline) {
            abort_all(s);
            aborted = 1;
        }
        admit(s);
        wake(s);
        if (now - last_watch > 0.25) {
            srv_http_watchdog(s);
            last_watch = now;
        }
        pthread_mutex_lock(&s->mu);
        srv_metrics_load(&s->m, s->n_queued, s->n_running);
        int busy = s->n_running > 0, idle = !busy && !s->q_head;
        if (idle && s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (idle) /* nothing to do: sleep until a request (signalled) or a stop (checked every 50 ms) */
            wait_s(s, 0.05);
        pthread_mutex_unlock(&s->mu);
        if (busy) {
            s->eng.step(s->eng.ctx);
            wake(s);
        }
    }
    /* every answer out (the connections resumed), at most 5 s more; then close */
    double until = mi_now() + 5;
    pthread_mutex_lock(&s->mu);
    while (s->live > 0 && mi_now() < until)
        wait_s(s, 0.05);
    int left = s->live;
    pthread_mutex_unlock(&s->mu);
    __atomic_store_n(&s->watch_quit, 1, __ATOMIC_SEQ_CST);
    if (watching)
        pthread_join(watcher, NULL);
    srv_http_stop(s);
    free(s->finished.r);
    fprintf(stderr, "serve: stopped%s\n", left ? " (some connections were still open)" : "");
    if (s->o.pid_file)
        unlink(s->o.pid_file);
    return 0;
}
