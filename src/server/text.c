/* Byte buffers, JSON strings, UTF-8 and the stop-string streamer (see
 * internal.h): pure functions, no threads, no session. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"

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

/* The length of the sequence lead byte c starts (2-4), 0 when c cannot start one. */
static int seq_len(unsigned char c)
{
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* 1 when byte i of a sequence led by lead may be c (the second byte of
 * E0, ED, F0, F4 is narrower: no overlong forms, surrogates, or past U+10FFFF). */
static int cont_ok(unsigned char lead, int i, unsigned char c)
{
    if ((c & 0xC0) != 0x80)
        return 0;
    if (i != 1)
        return 1;
    switch (lead) {
    case 0xE0: return c >= 0xA0;
    case 0xED: return c <= 0x9F;
    case 0xF0: return c >= 0x90;
    case 0xF4: return c <= 0x8F;
    }
    return 1;
}

size_t srv_utf8_incomplete_tail(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char lead = u[n - k];
        if ((lead & 0xC0) == 0x80)
            continue; /* a continuation byte: the lead is further back */
        int need = seq_len(lead);
        if (need <= (int)k)
            return 0; /* ASCII, a complete sequence, or no lead at all */
        for (size_t j = 1; j < k; j++)
            if (!cont_ok(lead, (int)j, u[n - k + j]))
                return 0;
        return k;
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
        int need = seq_len(u[i]), j = 1;
        while (j < need && i + (size_t)j < n && cont_ok(u[i], j, u[i + (size_t)j]))
            j++;
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
