/* A request's life on the server's side apart from the scheduler (see
 * internal.h): the stop flag and the signals that set it, the server's
 * set-up, a parsed request queued (srv_submit, on libmicrohttpd's thread)
 * and a request released by its last holder (logged, counted, freed). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "meshinfer/common.h"

static volatile sig_atomic_t stop_flag, ending_flag;
static pid_t launcher_pid; /* the parent, when a launcher started us; else 0 */

/* set from a signal handler or another thread (tests): atomic stores and loads of a lock-free int */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (sig == SIGTERM && launcher_pid > 0 && si && si->si_pid == launcher_pid)
        __atomic_store_n(&ending_flag, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&stop_flag, 1, __ATOMIC_SEQ_CST);
}

void mi_server_install_signals(int launched)
{
    launcher_pid = launched ? getppid() : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void mi_server_ignore_signals(void)
{
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
}

void srv_request_stop(void) { __atomic_store_n(&stop_flag, 1, __ATOMIC_SEQ_CST); }
void srv_reset_stop(void) { __atomic_store_n(&stop_flag, 0, __ATOMIC_SEQ_CST); }
int srv_stop_requested(void) { return __atomic_load_n(&stop_flag, __ATOMIC_SEQ_CST) != 0; }
void srv_request_ending(void) { __atomic_store_n(&ending_flag, 1, __ATOMIC_SEQ_CST); }
int srv_ending(void) { return __atomic_load_n(&ending_flag, __ATOMIC_SEQ_CST) != 0; }

void mi_server_opts_init(mi_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_batch = 1;
    o->max_queue = 64;
    o->max_body = 1 << 20;
    o->max_tokens = 4096;
    o->timeout_s = 30;
    o->drain_s = 30;
}

void srv_init(srv *s, const mi_server_opts *o)
{
    memset(s, 0, sizeof *s);
    s->exit_fn = _exit;
    s->o = *o;
    s->started = (long)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->cmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    srv_metrics_init(&s->m, o->max_batch);
}

void srv_destroy(srv *s)
{
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->cmu);
    pthread_mutex_destroy(&s->m.mu);
}

int srv_submit(srv *s, srv_req *r)
{
    pthread_mutex_lock(&s->mu);
    int free_slots = s->o.max_batch - s->n_running, rc = 0;
    if (s->stopping)
        rc = srv_fail(&r->err, 503, "server_error", "shutting_down", NULL, "The server is shutting down");
    else if (s->n_queued >= s->o.max_queue + (free_slots > 0 ? free_slots : 0))
        rc = srv_fail(&r->err, 503, "server_error", "queue_full", NULL, "The server is busy: %d requests running "
                      "and %d not yet started (--max-batch %d, --max-queue %d); retry later", s->n_running, s->n_queued,
                      s->o.max_batch, s->o.max_queue);
    if (rc == 0) {
        r->state = SRV_QUEUED;
        r->t_submit = mi_now();
        r->refs++;
        r->next = NULL;
        if (s->q_tail)
            s->q_tail->next = r;
        else
            s->q_head = r;
        s->q_tail = r;
        s->n_queued++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void srv_req_release(srv_req *r)
{
    srv *s = r->s;
    pthread_mutex_lock(&s->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last)
        return;
    /* a client that left before its answer was whole: 499, nginx's "client closed request"; a stream
     * that began 200 and ended in an error event: the error's status, for the log and the metrics */
    int status = r->gone ? 499 : r->stream_failed ? r->err.status : r->responded ? r->status : 500;
    int gen_route = r->route >= 0;
    if (gen_route || status >= 400) {
        char timing[96] = "";
        if (r->timed)
            snprintf(timing, sizeof timing, " ttft_ms=%.1f tpot_ms=%.2f", r->ttft_s * 1e3, r->tpot_s * 1e3);
        fprintf(stderr, "serve: id=%s %s status=%d prompt_tokens=%d completion_tokens=%d%s finish=%s%s\n", r->id,
                r->path, status, r->n_prompt, r->n_gen, timing, r->finish ? r->finish : "-",
                r->p.stream ? " stream" : "");
    }
    srv_metrics_request(&s->m, status, r->n_prompt, r->n_gen, r->ttft_s, r->tpot_s, r->timed);
    srv_params_free(&r->p);
    srv_stream_free(&r->st);
    srv_buf_free(&r->body);
    srv_buf_free(&r->text);
    srv_buf_free(&r->sse);
    free(r->ids);
    free(r);
    pthread_mutex_lock(&s->mu);
    s->live--;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
