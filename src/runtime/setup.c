/* A rank's state from its plan (see internal.h): the plan copy, programs,
 * shard, buffers, communicators and windows; made at creation and again by
 * a re-placement (migrate.c), freed by rt_teardown. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"

/* Everything that depends on the plan, in two parts: the plan copy, its
 * programs and the shard, then the buffers (sized by the shard),
 * communicators and windows. Used at creation and again by a re-placement,
 * which puts back what it kept between the two. */
void rt_setup_shard(mi_runtime *rt, const mi_plan *plan, const mi_programs *prog)
{
    /* deep copy so the caller may free its plan */
    size_t n;
    int *buf = mi_plan_serialize(plan, &n);
    char err[MI_ERRLEN];
    if (mi_plan_deserialize(buf, n, &plan->cfg, &rt->plan, err))
        mi_fatal("%s", err);
    free(buf);
    rt->max_T = rt->opt.max_T < plan->cfg.seq_len ? rt->opt.max_T : plan->cfg.seq_len;
    if (prog) /* compiled once, by the caller */
        mi_programs_copy(prog, &rt->prog);
    else if (mi_programs_compile(&rt->plan, &rt->prog, err))
        mi_fatal("%s", err);
    rt_load_shard(rt);
}

void rt_setup_rest(mi_runtime *rt)
{
    const mi_config *c = &rt->plan.cfg;
    mi_scratch_init(&rt->s, c, rt->max_T);
    size_t T = (size_t)rt->max_T, widest = 0;
    for (int b = 0; b < MI_N_BUFS; b++) {
        rt->width[b] = mi_buf_width(c, b);
        /* + 1: the speculation decision travels after X's rows */
        rt->buf[b] = mi_calloc(T * (size_t)rt->width[b] + 1, sizeof(float), "activations");
        if ((size_t)rt->width[b] > widest)
            widest = (size_t)rt->width[b];
    }
    rt->held = mi_calloc(T * (size_t)c->dim, 1, "held columns");
    rt->held_all = 1;
    rt->in_words = c->family == MI_FAMILY_PATCHTST ? c->patch_len : 1;
    rt->tokens = mi_calloc(T * (size_t)rt->in_words, sizeof(int), "tokens");
    rt->patches = rt->in_words > 1 ? mi_calloc(T * (size_t)rt->in_words, sizeof(float), "patches") : NULL;
    rt->wire = rt->plan.wire;
    /* wbuf holds at most a reduction's three parts (sends, receives,
     * gathered sums), an allgather's message and those it receives, or T rows
     * of logits; wtmp two decoded rows of the widest buffer */
    size_t per_row = mi_wire_row_bytes(rt->wire, widest) + 64;
    rt->wbuf_bytes = T * ((size_t)rt->size + 3) * per_row + 64 * (size_t)MI_MAX_RANKS;
    /* logit candidates: at most every token's (8 bytes) per position, whatever the wire dtype */
    size_t cand = T * 8 * (size_t)c->vocab_size + 64 * (size_t)MI_MAX_RANKS;
    if (rt->wbuf_bytes < cand)
        rt->wbuf_bytes = cand;
    rt->wbuf = mi_malloc(rt->wbuf_bytes, "message buffer");
    rt->wtmp = mi_calloc(2 * T * widest, sizeof(float), "message buffer");
    rt->zwire_bytes = T * mi_wire_row_bytes(rt->wire, widest) + 8;
    rt->zwire = mi_calloc(rt->zwire_bytes, 1, "message buffer");
    rt->counts = mi_calloc(4 * (size_t)MI_MAX_RANKS, sizeof(int), "message counts");
    if (mi_config_is_moe(c)) {
        /* the dispatch: at most every position to every other rank with its k (id, weight) records; the
         * combine: at most k + 1 rows per position (k selections and the shared expert's) */
        size_t k = (size_t)c->n_experts_used, d = (size_t)c->dim, rb = mi_wire_row_bytes(rt->wire, d);
        size_t disp = T * (size_t)rt->size * (rb + 8 * k), comb = T * (k + 1) * rb;
        rt->moe_ids = mi_calloc(T * k, sizeof(int), "expert dispatch");
        rt->moe_w = mi_calloc(T * k, sizeof(float), "expert dispatch");
        rt->moe_out = mi_calloc(T * (k + 1) * d, sizeof(float), "expert dispatch");
        rt->moe_in = mi_calloc(T * (k + 1) * d, sizeof(float), "expert dispatch");
        rt->moe_wire = mi_malloc(disp > comb ? disp : comb, "expert dispatch");
    }
    rt->n_pend = 0;
    rt->cmd = mi_calloc(4 + T * ((size_t)rt->in_words + 2), sizeof(int), "command");
    rt_build_comms(rt);
}

void rt_teardown(mi_runtime *rt)
{
    rt_free_comms(rt);
    mi_programs_free(&rt->prog);
    mi_plan_free(&rt->plan);
    mi_model_free(&rt->model);
    mi_scratch_free(&rt->s);
    for (int b = 0; b < MI_N_BUFS; b++) {
        free(rt->buf[b]);
        rt->buf[b] = NULL;
    }
    free(rt->held);
    free(rt->tokens);
    free(rt->patches);
    rt->patches = NULL;
    free(rt->wbuf);
    free(rt->wtmp);
    free(rt->zwire);
    free(rt->counts);
    free(rt->moe_ids);
    free(rt->moe_w);
    free(rt->moe_out);
    free(rt->moe_in);
    free(rt->moe_wire);
    rt->moe_ids = NULL;
    rt->moe_w = rt->moe_out = rt->moe_in = NULL;
    rt->moe_wire = NULL;
    free(rt->cmd);
    rt->cmd = NULL;
    free(rt->dreq);
    free(rt->dbuf);
    free(rt->logits_all);
    rt->dreq = NULL, rt->dbuf = NULL, rt->logits_all = NULL;
    rt->n_dreq = rt->n_dbuf = rt->cap_d = 0;
    rt->held = NULL;
    rt->tokens = rt->counts = NULL;
    rt->wbuf = rt->zwire = NULL;
    rt->wtmp = NULL;
}
