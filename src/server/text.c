/* Byte buffers, JSON strings, UTF-8 and the stop-string streamer (see
 * internal.h): pure functions, no threads, no session. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/utf8.h"

static void reserve(srv_buf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        mi_fatal("serve: out of memory (a buffer of %zu bytes)", cap);
    b->p = p, b->cap = cap;
}

void srv_buf_add(srv_buf *b, const void *s, size_t n)
{
    reserve(b, n);
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_str(srv_buf *b, const char *s) { srv_buf_add(b, s, strlen(s)); }

void srv_buf_printf(srv_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void srv_buf_json(srv_buf *b, const char *s, size_t n)
{
    reserve(b, n + 2);
    srv_buf_add(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (!esc)
            continue;
        srv_buf_add(b, s + run, i - run);
        srv_buf_str(b, esc);
        run = i + 1;
    }
    srv_buf_add(b, s + run, n - run);
    srv_buf_add(b, "\"", 1);
}

void srv_buf_free(srv_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

size_t srv_utf8_incomplete_tail(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        if ((u[n - k] & 0xC0) == 0x80)
            continue; /* a continuation byte: the lead is further back */
        int need;
        const int got = mi_utf8_start(u + n - k, k, &need);
        /* ASCII, a whole sequence or no lead at all: nothing to wait for */
        return need > (int)k && got == (int)k ? k : 0;
    }
    return 0;
}

void srv_utf8_append(srv_buf *out, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int need;
        const int j = mi_utf8_start(u + i, n - i, &need);
        if (need > 0 && j == need) {
            i += (size_t)need;
            continue;
        }
        /* one U+FFFD for the longest start of a sequence that went wrong (Unicode's "maximal subpart") */
        srv_buf_add(out, s + run, i - run);
        srv_buf_add(out, "\xEF\xBF\xBD", 3);
        i += (size_t)j;
        run = i;
    }
    srv_buf_add(out, s + run, n - run);
}

/* The longest k < len(stop) for which the last k bytes of p are the first k
 * of a stop string: text that may yet become one. */
static size_t held_back(const srv_stream *s)
{
    const srv_buf *p = &s->pending;
    size_t hold = 0;
    for (int i = 0; i < s->n_stop; i++) {
        size_t L = strlen(s->stop[i]);
        for (size_t k = (L - 1 < p->len ? L - 1 : p->len); k > hold; k--)
            if (!memcmp(p->p + p->len - k, s->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Hand out pending[0..n) (valid UTF-8 or U+FFFD) and keep the rest. */
static void emit(srv_stream *s, size_t n, srv_buf *out)
{
    srv_buf *p = &s->pending;
    srv_utf8_append(out, p->p, n);
    memmove(p->p, p->p + n, p->len - n);
    p->len -= n;
    p->p[p->len] = 0;
}

int srv_stream_push(srv_stream *s, const char *piece, size_t n, srv_buf *out)
{
    if (s->stopped)
        return 1;
    srv_buf_add(&s->pending, piece, n);
    srv_buf *p = &s->pending;
    /* text before pending could not start a stop string (it was handed out
     * only once no stop string could begin in it): search pending alone */
    size_t at = p->len;
    for (int i = 0; i < s->n_stop; i++) {
        const char *m = memmem(p->p, p->len, s->stop[i], strlen(s->stop[i]));
        if (m && (size_t)(m - p->p) < at)
            at = (size_t)(m - p->p);
    }
    if (at < p->len) {
        emit(s, at, out);
        p->len = 0;
        s->stopped = 1;
        return 1;
    }
    size_t safe = p->len - held_back(s);
    safe -= srv_utf8_incomplete_tail(p->p, safe);
    emit(s, safe, out);
    return 0;
}

void srv_stream_finish(srv_stream *s, srv_buf *out)
{
    if (!s->stopped && s->pending.len)
        emit(s, s->pending.len, out);
}

void srv_stream_free(srv_stream *s) { srv_buf_free(&s->pending); }
