/* libFuzzer harness: meshinfer serve's request bodies (srv_parse_request, the
 * first byte choosing the route) and, when one parses, its prompt or last
 * message streamed through its stop strings in pieces of every size the
 * input picks: it must stop after the first piece that completes a stop
 * string, and what came out, piece by piece, must be exactly the text before
 * the earliest stop string then (bytes that are not UTF-8 as U+FFFD, as the
 * whole text would give them). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/server/internal.h"

static void check(int ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    srv_limits lim = {.model_id = "m", .seq_len = 256, .max_tokens = 100, .has_chat = data[0] & 2};
    srv_params p;
    srv_error e;
    /* NUL after the body, as the server's buffer has it (srv_parse_request) */
    char *body = malloc(size);
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    int rc = srv_parse_request(body, size - 1, data[0] & 1, &lim, &p, &e);
    free(body);
    if (rc) {
        check(e.status >= 400 && e.status < 500 && e.message[0]);
        return 0;
    }
    const char *text = p.route == SRV_CHAT ? p.contents[p.n_msgs - 1] : p.prompt;
    size_t n = strlen(text);
    /* the pieces: sizes 1-7 from the input */
    static size_t ends[1 << 16];
    int n_pieces = 0;
    for (size_t at = 0, k = 0; at < n && n_pieces < (1 << 16); k++) {
        size_t piece = 1 + data[k % size] % 7;
        at += piece < n - at ? piece : n - at;
        ends[n_pieces++] = at;
    }
    /* the expected text: generation stops after the first piece whose end completes a stop string, the text
     * cut where the earliest stop string within it starts (sanitized as a whole) */
    size_t cut = n;
    for (int k = 0; k < n_pieces && cut == n; k++)
        for (int i = 0; i < p.n_stop; i++) {
            const char *m = memmem(text, ends[k], p.stop[i], strlen(p.stop[i]));
            if (m && (size_t)(m - text) < cut)
                cut = (size_t)(m - text);
        }
    srv_buf want = {0}, got = {0};
    srv_buf_add(&want, "", 0);
    srv_buf_add(&got, "", 0);
    srv_utf8_append(&want, text, cut);
    srv_stream st = {.stop = p.stop, .n_stop = p.n_stop};
    int stopped = 0;
    for (int k = 0; k < n_pieces && !stopped; k++) {
        size_t at = k ? ends[k - 1] : 0;
        stopped = srv_stream_push(&st, text + at, ends[k] - at, &got);
    }
    srv_stream_finish(&st, &got);
    check(stopped == (cut < n));
    check(got.len == want.len && !memcmp(got.p, want.p, got.len));
    srv_buf_free(&want);
    srv_buf_free(&got);
    srv_stream_free(&st);
    srv_params_free(&p);
    return 0;
}
