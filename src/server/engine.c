/* The scheduler's engine over an open session (see internal.h): prompts
 * through the tokenizer or the chat template, tokens back to bytes, the
 * sequences in the session's continuous batch (batch.h). mi_server_run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/cost.h"

typedef struct {
    mi_session *ss;
    mi_batch *b;
    const char *tmpl;        /* --chat-template, or NULL: the file's */
} engine;

static int *encode(void *ctx, const srv_params *p, int *n, srv_error *e)
{
    engine *g = ctx;
    char err[MI_ERRLEN] = "";
    int *ids = NULL;
    *n = 0;
    if (p->route == SRV_CHAT) {
        mi_chat_msg *m = mi_calloc((size_t)p->n_msgs, sizeof *m, "chat messages");
        for (int i = 0; i < p->n_msgs; i++)
            m[i] = (mi_chat_msg){p->roles[i], p->contents[i]};
        ids = session_encode_chat(g->ss, m, p->n_msgs, g->tmpl, MI_CHAT_GEN | (p->no_thinking ? MI_CHAT_NO_THINKING : 0),
                                  n, err);
        free(m);
        if (!ids) {
            srv_fail(e, 400, "invalid_request_error", strstr(err, "context") ? "context_length_exceeded" : NULL,
                     "messages", "%s", err);
            return NULL;
        }
        return ids;
    }
    size_t len = strlen(p->prompt);
    ids = mi_malloc((len + 3) * sizeof(int), "prompt tokens");
    *n = mi_tokenizer_encode(&g->ss->tok, p->prompt, 1, ids, err);
    if (*n < 0) {
        free(ids);
        srv_fail(e, 400, "invalid_request_error", NULL, "prompt", "'prompt': %s", err);
        return NULL;
    }
    if (*n == 0) {
        free(ids);
        srv_fail(e, 400, "invalid_request_error", NULL, "prompt", "'prompt' is empty (and this tokenizer adds no BOS)");
        return NULL;
    }
    return ids;
}

static const char *decode(void *ctx, int prev, int token, int *len)
{
    engine *g = ctx;
    return mi_tokenizer_decode(&g->ss->tok, prev, token, len);
}

static int free_slots(void *ctx) { return mi_batch_free_slots(((engine *)ctx)->b); }
static int add(void *ctx, const mi_gen_request *rq, const mi_seq_hooks *hk, char *err)
{
    return mi_batch_add(((engine *)ctx)->b, rq, hk, err);
}
static void cancel(void *ctx, int id) { mi_batch_cancel(((engine *)ctx)->b, id); }
static int step(void *ctx) { return mi_batch_step(((engine *)ctx)->b); }

int mi_server_run(mi_session *ss, const mi_server_opts *o, const char *model_id, char *err)
{
    engine g = {.ss = ss, .tmpl = o->chat_template};
    char cerr[MI_ERRLEN] = "";
    int has_chat = session_chat_kind(ss, o->chat_template, cerr) >= 0;
    if (o->chat_template && !has_chat)
        return mi_set_error(err, "serve: --chat-template %s: %s", o->chat_template, cerr);
    g.b = mi_batch_create(ss, o->max_batch, err);
    if (!g.b)
        return -1;
    if (o->micro_batches)
        mi_batch_pipeline(g.b, o->micro_batches);
    srv *s = mi_calloc(1, sizeof *s, "server");
    srv_init(s, o);
    snprintf(s->model_id, sizeof s->model_id, "%s", model_id);
    s->eng = (srv_engine){.ctx = &g, .encode = encode, .decode = decode, .free_slots = free_slots, .add = add,
                          .cancel = cancel, .step = step, .seq_len = ss->cfg.seq_len};
    /* a completion needs one prompt token: the cap never passes the context less one */
    int cap = o->max_tokens < ss->cfg.seq_len - 1 ? o->max_tokens : ss->cfg.seq_len - 1;
    s->lim = (srv_limits){.model_id = s->model_id, .seq_len = ss->cfg.seq_len, .max_tokens = cap,
                          .has_chat = has_chat};
    /* what the cost model expects of the batch (decode steps at a quarter of the context), on measured
     * devices only, as bench --batch: the defaults' one figure per dtype says nothing of how the rows
     * of a batch share the reading of a weight */
    int ctx = ss->cfg.seq_len / 4;
    if (session_devices_measured(ss)) {
        double t1 = mi_predict_batch_step(&ss->plan, &ss->prog, &ss->cl, ctx, 1);
        double tb = mi_predict_batch_step(&ss->plan, &ss->prog, &ss->cl, ctx, o->max_batch);
        snprintf(s->plan_note, sizeof s->plan_note,
                 "predicted decode: %.1f tokens/s for one sequence, %.1f for %d together (TPOT %.2f ms); decode "
                 "passes in %d micro-batch%s", 1.0 / t1, o->max_batch / tb, o->max_batch, tb * 1e3,
                 mi_batch_micro(g.b), mi_batch_micro(g.b) > 1 ? "es, pipelined" : "");
    } else {
        snprintf(s->plan_note, sizeof s->plan_note,
                 "decode passes in %d micro-batch%s (no prediction: the cost model needs measured devices, "
                 "meshinfer calibrate, then --cluster FILE)", mi_batch_micro(g.b),
                 mi_batch_micro(g.b) > 1 ? "es, pipelined" : "");
    }
    if (!has_chat)
        snprintf(s->note, sizeof s->note, "%s has no chat template: /v1/chat/completions answers 400 (%s)", model_id,
                 cerr);
    if (cap < o->max_tokens) {
        size_t used = strlen(s->note);
        snprintf(s->note + used, sizeof s->note - used, "%s--max-tokens %d is past the model's context of %d tokens: "
                 "max_tokens may be at most %d", used ? "; " : "", o->max_tokens, ss->cfg.seq_len, cap);
    }
    int rc = srv_run(s, err);
    mi_batch_free(g.b);
    srv_destroy(s);
    free(s);
    return rc;
}
