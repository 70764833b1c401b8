/* A plan compiled into one program per rank (see partition.h): the scheme's
 * builder (head-level or somegather), then what the model and the plan
 * decide per op, set here once: the family's op variants, pruned FFN
 * units, and every exchange's wire dtype. */
#include "meshinfer/partition.h"

#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/forward.h"
#include "program_build.h"

/* The family's variant of each compute op, and whether it exists at all:
 * the time-series family has no final norm (its head reads X itself). */
static int family_variant(const mi_config *c, mi_op *op)
{
    static const unsigned char ffn[] = {[MI_FFNK_SWIGLU] = MI_OPV_DEFAULT, [MI_FFNK_GELU_ERF] = MI_OPV_GELU,
                                        [MI_FFNK_GEGLU] = MI_OPV_GEGLU, [MI_FFNK_GELU_TANH] = MI_OPV_GELU_TANH};
    if (op->kind == MI_OP_FFN_UP)
        op->variant = ffn[c->ffn_type];
    if ((op->kind == MI_OP_NORM || op->kind == MI_OP_NORM_LOCAL) && c->norm_type == MI_NORMK_LAYER)
        op->variant = MI_OPV_LAYERNORM;
    if (op->kind == MI_OP_ADD && c->post_norms && op->layer >= 0)
        op->variant = MI_OPV_POSTNORM;
    if (c->family != MI_FAMILY_PATCHTST)
        return 1;
    switch (op->kind) {
    case MI_OP_EMBED: op->variant = MI_OPV_PATCHES; break;
    case MI_OP_NORM:
    case MI_OP_NORM_LOCAL:
        if (op->norm == MI_NORM_FINAL)
            return 0;
        break;
    case MI_OP_LOGITS: op->variant = MI_OPV_SERIES_HEAD; break;
    default: break;
    }
    return 1;
}

/* The kept units of an FFN op's slice in a layer that prunes shards. */
static void kept_runs(const mi_plan *plan, mi_programs *p, mi_op *op)
{
    op->runs = -1;
    op->n_runs = 0;
    if ((op->kind != MI_OP_FFN_UP && op->kind != MI_OP_FFN_DOWN) || !plan->layers[op->layer].ffn_pruned)
        return;
    int r0[MI_MAX_PRUNE_RUNS], rn[MI_MAX_PRUNE_RUNS];
    int u0 = op->kind == MI_OP_FFN_UP ? op->c0 : op->i0, n = op->kind == MI_OP_FFN_UP ? op->n : op->ni;
    int k = mi_plan_ffn_kept(plan, op->layer, u0, n, r0, rn);
    p->run_c0 = realloc(p->run_c0, (size_t)(p->n_runs + k + 1) * sizeof(int));
    p->run_len = realloc(p->run_len, (size_t)(p->n_runs + k + 1) * sizeof(int));
    if (!p->run_c0 || !p->run_len)
        mi_fatal("out of memory compiling programs");
    memcpy(p->run_c0 + p->n_runs, r0, (size_t)k * sizeof(int));
    memcpy(p->run_len + p->n_runs, rn, (size_t)k * sizeof(int));
    op->runs = p->n_runs;
    op->n_runs = k;
    p->n_runs += k;
}

static void lower_program(const mi_plan *plan, mi_programs *p, mi_program *g)
{
    int n = 0;
    for (int i = 0; i < g->n_ops; i++) {
        mi_op op = g->ops[i];
        if (!family_variant(&plan->cfg, &op))
            continue;
        kept_runs(plan, p, &op);
        g->ops[n++] = op;
    }
    g->n_ops = n;
}

int mi_programs_compile(const mi_plan *plan, mi_programs *p, char *err)
{
    const mi_config *c = &plan->cfg;
    int sg = plan->planner == MI_PLANNER_SOMEGATHER;
    /* a post-norm needs a block's whole output, which somegather never gathers */
    if (sg && c->post_norms)
        return mi_set_error(err, "somegather splits the residual stream by columns, but %s norms each block's "
                                 "whole output before it joins the residual: use a head-level planner (greedy, "
                                 "tp, layerwise, hybrid)", mi_family_name(c->family));
    if (c->post_norms)
        for (int l = 0; l < c->n_layers; l++)
            if (plan->layers[l].speculate)
                return mi_set_error(err, "inter-layer speculation tests the FFN's raw output against the residual; "
                                         "%s norms it first: run without --speculate", mi_family_name(c->family));
    int rc = sg ? pb_compile_somegather(plan, p, err) : pb_compile_headlevel(plan, p, err);
    /* each op array once: the decode programs may share the prefill ones' */
    for (int r = 0; !rc && r < p->n_ranks; r++) {
        mi_program *pre = &p->prog[MI_PHASE_PREFILL][r], *dec = &p->prog[MI_PHASE_DECODE][r];
        lower_program(plan, p, pre);
        if (dec->ops == pre->ops)
            dec->n_ops = pre->n_ops;
        else
            lower_program(plan, p, dec);
    }
    /* every exchange travels in its layer's wire dtype (the schemes need not know) */
    for (int i = 0; !rc && i < p->n_xchg; i++)
        p->xchg[i].wire = mi_plan_wire(plan, p->xchg[i].layer);
    return rc;
}
