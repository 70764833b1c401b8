/* The token loop, once (see control.h session_generate): prefill, the
 * decode phase, then one decode step per token with the memory check
 * (session_forward) and, when asked, runtime scaling (session_after_step).
 * generate, its --repeat soak and --resume's replay are its callers. */
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/control.h"
#include "meshinfer/sampler.h"

/* The tokenizer's end-of-generation tokens (llama2.c: BOS and EOS, where a
 * story ended), and the one a finished replay ends on. */
static int is_end(const mi_session *ss, int tok) { return mi_tokenizer_is_eog(&ss->tok, tok); }
static int end_token(const mi_session *ss)
{
    return ss->tok.eos_id >= 0 ? ss->tok.eos_id : ss->tok.n_eog > 0 ? ss->tok.eog_ids[0] : 0;
}

void session_generate(mi_session *ss, const mi_gen_request *rq, const mi_gen_hooks *hk, mi_gen_result *res)
{
    const mi_config *c = &ss->cfg;
    memset(res, 0, sizeof *res);
    res->tokens = mi_malloc((size_t)(rq->steps > 0 ? rq->steps : 1) * sizeof(int), "generated tokens");
    res->stop = "length";
    mi_sampler smp;
    mi_sampler_init(&smp, c->vocab_size, rq->temperature, rq->topp, rq->seed);
    smp.top_k = rq->top_k;
    if (rq->rng_set)
        smp.rng = rq->rng;
    const int *forced = rq->forced;
    int n_forced = rq->n_forced;
    res->t0 = mi_now();
    int next;
    if (rq->replay_only) { /* a finished journal: its tokens, no forward pass (none: it stopped at once) */
        next = n_forced > 0 ? forced[0] : end_token(ss);
    } else {
        float *logits = session_prefill(ss, rq->prompt + rq->n_cached, rq->n_prompt - rq->n_cached, rq->n_cached);
        session_check_output(ss, logits, ss->cfg.vocab_size, rq->n_prompt - 1);
        next = n_forced > 0 ? forced[0] : mi_sample(&smp, logits);
    }
    res->t_first = mi_now();
    /* a hybrid plan's decode placement takes over once the first token is
     * out (Voltron; its cost falls in TPOT and is reported apart) */
    session_phase(ss, 0, rq->n_prompt);
    int n = 0, prev = rq->prompt[rq->n_prompt - 1];
    for (;;) {
        if (!rq->ignore_eos && is_end(ss, next)) {
            res->stop = "eos";
            if (hk && hk->on_end)
                hk->on_end(hk->ctx, next, smp.rng, n < n_forced);
            break;
        }
        res->tokens[n++] = next;
        res->n = n;
        if (hk && hk->on_token)
            hk->on_token(hk->ctx, next, prev, smp.rng, n <= n_forced);
        if (n >= rq->steps)
            break;
        prev = next;
        if (rq->replay_only) {
            next = forced[n];
            continue;
        }
        double ts = mi_now();
        float *logits = session_forward(ss, &next, 1, rq->n_prompt + n - 1, MI_FORWARD_DECODE);
        session_check_output(ss, logits, ss->cfg.vocab_size, rq->n_prompt + n - 1);
        if (n < n_forced) {
            next = forced[n];
        } else {
            if (n == n_forced && n_forced > 0) {
                res->replayed = n_forced;
                res->t_replayed = mi_now();
            }
            next = mi_sample(&smp, logits);
        }
        if (rq->scale) /* Voltron's runtime scaling: may re-place (the logits were read) */
            session_after_step(ss, mi_now() - ts, rq->n_prompt + n);
    }
    res->t_end = mi_now();
    mi_sampler_free(&smp);
}
