/* libmicrohttpd's side of the server (see internal.h). Everything here runs
 * on libmicrohttpd's one polling thread, except srv_http_watchdog,
 * srv_http_quiesce and srv_http_stop (the scheduler's thread). A request
 * waiting for the scheduler is suspended (MHD_suspend_connection) with
 * s->mu held, so that the scheduler, which resumes it with s->mu released,
 * never resumes a connection before it is suspended; a streaming response's
 * reader suspends the same way when it has nothing to send. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "meshinfer/common.h"

static enum MHD_Result queue(srv_req *r, int status, const srv_buf *b, const char *ctype)
{
    struct MHD_Response *rs = MHD_create_response_from_buffer(b->len, b->p, MHD_RESPMEM_MUST_COPY);
    if (!rs)
        return MHD_NO;
    MHD_add_response_header(rs, "Content-Type", ctype);
    if (status == 401)
        MHD_add_response_header(rs, "WWW-Authenticate", "Bearer");
    if (status == 503 || status == 429)
        MHD_add_response_header(rs, "Retry-After", "1");
    if (status == 405)
        MHD_add_response_header(rs, "Allow", r->route >= 0 ? "POST" : "GET, HEAD");
    if (status == 413 || status == 408) /* the rest of the body is not read */
        MHD_add_response_header(rs, "Connection", "close");
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, rs);
    MHD_destroy_response(rs);
    pthread_mutex_lock(&r->s->mu);
    r->responded = 1;
    r->status = status;
    pthread_mutex_unlock(&r->s->mu);
    return rc;
}

/* An answer in the middle of an upload (408: too slow; 413: a chunked body
 * past --max-body). libmicrohttpd 0.9.75 takes a response only before the
 * body (the first call) or after all of it, and this one must not wait for
 * the rest: the answer is written on the socket here, its sending side shut
 * (the client reads the answer, then the end), and the connection dropped
 * (MHD_NO), the rest of the body unread. */
static enum MHD_Result reject_now(srv_req *r, const srv_error *e)
{
    srv_buf body = {0}, msg = {0};
    srv_json_error(&body, e);
    srv_buf_add(&body, "\n", 1);
    srv_buf_printf(&msg, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n%s", e->status, e->status == 408 ? "Request Timeout"
                   : "Content Too Large", body.len, body.p);
    if (r->fd >= 0) {
        ssize_t sent = send(r->fd, msg.p, msg.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)sent; /* a few hundred bytes into an empty socket buffer; nothing to do if not */
        shutdown(r->fd, SHUT_WR);
    }
    srv_buf_free(&body);
    srv_buf_free(&msg);
    r->err = *e;
    pthread_mutex_lock(&r->s->mu);
    r->responded = r->rejected = 1;
    r->status = e->status;
    pthread_mutex_unlock(&r->s->mu);
    return MHD_NO;
}

static enum MHD_Result send_error(srv_req *r, const srv_error *e)
{
    srv_buf b = {0};
    srv_json_error(&b, e);
    srv_buf_add(&b, "\n", 1);
    if (e != &r->err)
        r->err = *e;
    enum MHD_Result rc = queue(r, e->status, &b, "application/json");
    srv_buf_free(&b);
    return rc;
}

static enum MHD_Result fail(srv_req *r, int status, const char *type, const char *code, const char *fmt, const char *a)
{
    srv_error e;
    srv_fail(&e, status, type, code, NULL, fmt, a);
    return send_error(r, &e);
}

/* A streaming response's bytes, as the scheduler appends them. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_req *r = cls;
    pthread_mutex_lock(&r->s->mu);
    if (r->sse_off < r->sse.len) {
        size_t n = r->sse.len - r->sse_off < max ? r->sse.len - r->sse_off : max;
        memcpy(buf, r->sse.p + r->sse_off, n);
        r->sse_off += n;
        if (r->sse_off == r->sse.len)
            r->sse.len = r->sse_off = 0;
        pthread_mutex_unlock(&r->s->mu);
        return (ssize_t)n;
    }
    if (r->sse_end) {
        pthread_mutex_unlock(&r->s->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    r->suspended = 1;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&r->s->mu);
    return 0;
}

static enum MHD_Result start_stream(srv_req *r)
{
    struct MHD_Response *rs = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, r, NULL);
    if (!rs)
        return MHD_NO;
    MHD_add_response_header(rs, "Content-Type", "text/event-stream");
    MHD_add_response_header(rs, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, rs);
    MHD_destroy_response(rs);
    pthread_mutex_lock(&r->s->mu);
    r->responded = 1;
    r->status = 200;
    pthread_mutex_unlock(&r->s->mu);
    return rc;
}

/* The key compared in time independent of where it differs. */
static int key_ok(const char *want, const char *auth)
{
    /* the scheme's name is case-insensitive (RFC 9110 11.1) */
    if (!auth || strncasecmp(auth, "Bearer ", 7))
        return 0;
    const char *got = auth + 7;
    size_t n = strlen(want), m = strlen(got);
    unsigned char d = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(want[i] ^ (i < m ? got[i] : 0));
    return d == 0;
}

/* MHD_get_connection_values' walk: counts the Content-Length headers. */
static enum MHD_Result count_length(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind, (void)value;
    if (!strcasecmp(key, "Content-Length"))
        ++*(int *)cls;
    return MHD_YES;
}

static srv_req *new_req(srv *s, struct MHD_Connection *c, const char *url, const char *method)
{
    srv_req *r = calloc(1, sizeof *r);
    if (!r)
        mi_fatal("serve: out of memory");
    r->s = s, r->conn = c, r->fd = -1, r->refs = 1, r->seq = -1;
    r->t_start = mi_now();
    r->created = (long)time(NULL);
    snprintf(r->path, sizeof r->path, "%s %.40s", method, url);
    r->route = !strcmp(url, "/v1/completions") ? SRV_COMPLETIONS : !strcmp(url, "/v1/chat/completions") ? SRV_CHAT : -1;
    pthread_mutex_lock(&s->mu);
    uint64_t n = ++s->id_seq;
    s->live++;
    pthread_mutex_unlock(&s->mu);
    snprintf(r->id, sizeof r->id, "%s-%08lx%08llx", r->route == SRV_CHAT ? "chatcmpl" : r->route == SRV_COMPLETIONS
             ? "cmpl" : "req", (unsigned long)(s->started & 0xffffffff), (unsigned long long)n);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    srv_conn *sc = ci ? ci->socket_context : NULL;
    if (sc) {
        pthread_mutex_lock(&s->cmu);
        sc->busy = 1;
        r->fd = sc->fd;
        pthread_mutex_unlock(&s->cmu);
    }
    return r;
}

/* GET routes, answered at once. */
static enum MHD_Result get_route(srv *s, srv_req *r, const char *url)
{
    srv_buf b = {0};
    enum MHD_Result rc;
    if (!strcmp(url, "/health")) {
        pthread_mutex_lock(&s->mu);
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        srv_buf_str(&b, stopping ? "{\"status\": \"draining\"}\n" : "{\"status\": \"ok\"}\n");
        rc = queue(r, stopping ? 503 : 200, &b, "application/json");
    } else if (!strcmp(url, "/metrics")) {
        srv_metrics_text(&s->m, &b);
        rc = queue(r, 200, &b, "text/plain; version=0.0.4; charset=utf-8");
    } else if (!strcmp(url, "/v1/models")) {
        srv_json_models(&b, s->model_id, s->started);
        rc = queue(r, 200, &b, "application/json");
    } else { /* /v1/models/ID */
        const char *id = url + strlen("/v1/models/");
        if (strcmp(id, s->model_id)) {
            srv_buf_free(&b);
            return fail(r, 404, "invalid_request_error", "model_not_found", "The model '%s' does not exist", id);
        }
        srv_buf_str(&b, "{\"id\": ");
        srv_buf_json(&b, s->model_id, strlen(s->model_id));
        srv_buf_printf(&b, ", \"object\": \"model\", \"created\": %ld, \"owned_by\": \"meshinfer\"}\n", s->started);
        rc = queue(r, 200, &b, "application/json");
    }
    srv_buf_free(&b);
    return rc;
}

/* The first call, with the headers: route, method, key, announced size. */
static enum MHD_Result first_call(srv *s, srv_req *r, const char *url, const char *method)
{
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int get_path = !strcmp(url, "/health") || !strcmp(url, "/metrics") || !strcmp(url, "/v1/models") ||
                   !strncmp(url, "/v1/models/", 11);
    if (r->route < 0 && !get_path) {
        char what[600];
        snprintf(what, sizeof what, "%s %s", method, url);
        return fail(r, 404, "invalid_request_error", "unknown_url", "Invalid URL (%s): the routes are POST "
                    "/v1/completions, POST /v1/chat/completions, GET /v1/models, /health and /metrics", what);
    }
    if (r->route >= 0 ? strcmp(method, "POST") : !get)
        return fail(r, 405, "invalid_request_error", "method_not_allowed", "%s is not allowed on this route",
                    method);
    if (s->o.api_key && strncmp(url, "/v1/", 4) == 0 &&
        !key_ok(s->o.api_key, MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization")))
        return fail(r, 401, "invalid_request_error", "invalid_api_key", "%s", "Incorrect or missing API key: send "
                    "the header 'Authorization: Bearer KEY' with the server's --api-key");
    if (r->route < 0)
        return get_route(s, r, url);
    /* two lengths make the body's end ambiguous: a request smuggled behind a proxy that takes the
     * other one (RFC 9112 6.3) */
    int n_length = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_length, &n_length);
    if (n_length > 1)
        return fail(r, 400, "invalid_request_error", "invalid_content_length", "%s", "The request has "
                    "more than one Content-Length header");
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
        char n[64];
        snprintf(n, sizeof n, "%s", cl);
        srv_error e;
        srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL, "The request body of %s bytes is "
                 "larger than this server's --max-body of %zu bytes", n, s->o.max_body);
        return send_error(r, &e);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    srv *s = cls;
    srv_req *r = *con_cls;
    if (!r) {
        *con_cls = r = new_req(s, c, url, method);
        return first_call(s, r, url, method);
    }
    if (r->responded) { /* an answer went out before the body: the rest is not read */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (mi_now() - r->t_start > s->o.timeout_s) {
            *upload_size = 0;
            srv_error e;
            srv_fail(&e, 408, "invalid_request_error", "request_timeout", NULL, "The request body did not arrive "
                     "within %g s (this server's --timeout)", s->o.timeout_s);
            return reject_now(r, &e);
        }
        if (r->body.len + *upload_size > s->o.max_body) {
            *upload_size = 0;
            srv_error e;
            srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                     "The request body is larger than this server's --max-body of %zu bytes", s->o.max_body);
            return reject_now(r, &e);
        }
        srv_buf_add(&r->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (!r->parsed) { /* the whole body is here */
        r->parsed = 1;
        srv_error e;
        if (srv_parse_request(r->body.p ? r->body.p : "", r->body.len, r->route, &s->lim, &r->p, &e))
            return send_error(r, &e);
        srv_buf_free(&r->body);
        if (srv_submit(s, r))
            return send_error(r, &r->err);
    }
    /* queued: wait for the scheduler (a stream, until its prompt is prepared) */
    pthread_mutex_lock(&s->mu);
    int failed = r->failed, ready = r->p.stream ? r->state >= SRV_READY : r->state == SRV_DONE;
    if (!failed && !ready) {
        r->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&s->mu);
    if (failed)
        return send_error(r, &r->err);
    if (r->p.stream)
        return start_stream(r);
    srv_buf b = {0};
    srv_json_completion(&b, r->route, r->id, r->created, s->model_id, r->text.p ? r->text.p : "", r->text.len,
                        r->finish, r->n_prompt, r->n_gen);
    enum MHD_Result rc = queue(r, 200, &b, "application/json");
    srv_buf_free(&b);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    srv *s = cls;
    srv_req *r = *con_cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    srv_conn *sc = ci ? ci->socket_context : NULL;
    if (sc) { /* the connection's next request starts its own clock */
        pthread_mutex_lock(&s->cmu);
        sc->busy = 0;
        sc->t0 = mi_now();
        pthread_mutex_unlock(&s->cmu);
    }
    if (!r)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    r->closed = 1;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !r->rejected) {
        r->gone = 1; /* the scheduler stops its sequence */
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    srv_req_release(r);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *sc = calloc(1, sizeof *sc);
        if (!sc)
            return;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        sc->fd = ci ? ci->connect_fd : -1;
        sc->t0 = mi_now();
        pthread_mutex_lock(&s->cmu);
        sc->next = s->conns;
        if (s->conns)
            s->conns->prev = sc;
        s->conns = sc;
        if (++s->n_conns > s->conn_limit) {
            /* full: close the oldest connection that has no request under way (idle sockets held
             * open must not stall everyone behind them in the listen queue), or else this one */
            srv_conn *last = sc, *victim = sc;
            while (last->next)
                last = last->next;
            for (srv_conn *o = last; o != sc; o = o->prev)
                if (!o->busy && o->fd >= 0 && o->t0 < sc->t0 + 1e8) {
                    victim = o;
                    break;
                }
            if (victim->fd >= 0)
                shutdown(victim->fd, SHUT_RDWR);
            victim->t0 = sc->t0 + 1e9; /* closing: neither chosen again nor counted by the watchdog */
        }
        pthread_mutex_unlock(&s->cmu);
        *socket_context = sc;
    } else if (*socket_context) { /* closed: before libmicrohttpd closes the socket */
        srv_conn *sc = *socket_context;
        pthread_mutex_lock(&s->cmu);
        if (sc->prev)
            sc->prev->next = sc->next;
        else
            s->conns = sc->next;
        if (sc->next)
            sc->next->prev = sc->prev;
        s->n_conns--;
        pthread_mutex_unlock(&s->cmu);
        free(sc);
        *socket_context = NULL;
    }
}

void srv_http_watchdog(srv *s)
{
    double now = mi_now();
    pthread_mutex_lock(&s->cmu);
    for (srv_conn *sc = s->conns; sc; sc = sc->next)
        if (!sc->busy && sc->fd >= 0 && now - sc->t0 > s->o.timeout_s) {
            /* headers that never complete (or a keep-alive connection idle that long): libmicrohttpd sees
             * the socket end and closes it; the socket itself stays its to close */
            shutdown(sc->fd, SHUT_RDWR);
            sc->t0 = now + 1e9;
        }
    pthread_mutex_unlock(&s->cmu);
}

int srv_http_start(srv *s, char *err)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int g = getaddrinfo(s->o.host, port, &hints, &ai);
    if (g)
        return mi_set_error(err, "serve: --host %s: %s", s->o.host, gai_strerror(g));
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* past conn_limit on_connection closes the oldest idle connection; libmicrohttpd's own limit
     * (beyond which it stops accepting) leaves room for those still closing */
    s->conn_limit = 2 * (s->o.max_queue + s->o.max_batch) + 64;
    unsigned limit = (unsigned)s->conn_limit + 64;
    errno = 0;
    s->d = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ceil(s->o.timeout_s),
                            MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_END);
    int e = errno;
    freeaddrinfo(ai);
    if (!s->d)
        return mi_set_error(err, "serve: cannot listen on %s port %d%s%s", s->o.host, s->o.port, e ? ": " : "",
                            e ? strerror(e) : "");
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    __atomic_store_n(&s->port, di && di->port ? di->port : s->o.port, __ATOMIC_SEQ_CST); /* (read by tests' threads) */
    return 0;
}

void srv_http_quiesce(srv *s)
{
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void srv_http_resume(struct MHD_Connection *c) { MHD_resume_connection(c); }

void srv_http_stop(srv *s)
{
    if (s->d)
        MHD_stop_daemon(s->d);
    s->d = NULL;
}
