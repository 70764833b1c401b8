/* Programs in words (partition.h mi_programs_explain): what `plan --explain`
 * and `generate --explain` print for a student to follow one token. Every
 * op of every rank becomes one line naming the weights it multiplies with
 * (layer, matrix, which heads, rows, FFN units or columns) or the peers it
 * sends to and waits for, with the bytes of one position. The figures come
 * from mi_exchange_bytes, the definition the cost model and the runtime's
 * counters share, so the totals printed here are the plan's bytes per token. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/partition.h"

/* A short text buffer appended to piecewise. */
typedef struct {
    char s[1024];
    size_t n;
} line;

static void add(line *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(line *b, const char *fmt, ...)
{
    if (b->n >= sizeof b->s - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        b->n += (size_t)k < sizeof b->s - b->n ? (size_t)k : sizeof b->s - 1 - b->n;
}

/* Integers in ascending order as runs: "0-2,5". */
static void add_list(line *b, const int *v, int n)
{
    if (n == 0) {
        add(b, "none");
        return;
    }
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        add(b, "%s%d", i ? "," : "", v[i]);
        if (j > i)
            add(b, "-%d", v[j]);
        i = j + 1;
    }
}

/* Columns as [a,b) runs; many runs as a count. */
static void add_cols(line *b, const mi_colset *s)
{
    if (s->n_runs == 0) {
        add(b, "no columns");
        return;
    }
    if (s->n_runs > 4) {
        add(b, "%d columns in %d runs", s->count, s->n_runs);
        return;
    }
    for (int i = 0; i < s->n_runs; i++)
        add(b, "%s[%d,%d)", i ? "," : "", s->c0[i], s->c0[i] + s->len[i]);
}

/* The query heads whose output columns (head order, head_dim each) touch s. */
static int heads_of_cols(const mi_config *c, const mi_colset *s, int *out)
{
    int n = 0;
    for (int h = 0; h < c->n_heads; h++) {
        int a = h * c->head_dim, e = a + c->head_dim, hit = 0;
        for (int i = 0; i < s->n_runs && !hit; i++)
            hit = s->c0[i] < e && s->c0[i] + s->len[i] > a;
        if (hit)
            out[n++] = h;
    }
    return n;
}

/* Query heads of layer l that rank computes (its KV heads' groups, ascending). */
static int rank_heads(const mi_plan *plan, int l, int rank, int *q, int *kv, int *n_kv)
{
    const mi_config *c = &plan->cfg;
    int g = mi_kv_group(c), n = 0;
    *n_kv = 0;
    for (int k = 0; k < c->n_kv_heads; k++)
        if (plan->layers[l].kv_rank[k] == rank) {
            kv[(*n_kv)++] = k;
            for (int j = 0; j < g; j++)
                q[n++] = k * g + j;
        }
    return n;
}

/* What a buffer's columns are, for messages. */
static void add_payload(line *b, const mi_config *c, int buf, const mi_colset *s)
{
    int h[MI_MAX_KV_HEADS * 64];
    switch (buf) {
    case MI_BUF_X:
        if (s->count == c->dim)
            add(b, "the residual X (all %d columns)", c->dim);
        else {
            add(b, "residual columns ");
            add_cols(b, s);
        }
        break;
    case MI_BUF_HEADS:
    case MI_BUF_HEADS_LOCAL: {
        int n = c->n_heads <= (int)(sizeof h / sizeof h[0]) ? heads_of_cols(c, s, h) : 0;
        add(b, "outputs of head%s ", n == 1 ? "" : "s");
        add_list(b, h, n);
        break;
    }
    case MI_BUF_HIDDEN:
        add(b, "FFN hidden units ");
        add_cols(b, s);
        break;
    case MI_BUF_LOGITS:
        add(b, "logits of vocabulary rows ");
        add_cols(b, s);
        break;
    default: add(b, "%s ", mi_buf_name(buf)); add_cols(b, s);
    }
}

static const char *norm_name(int k)
{
    return k == MI_NORM_ATTN ? "attention" : k == MI_NORM_FFN ? "FFN" : "final";
}

/* One compute op of `rank`. */
static void explain_compute(const mi_plan *plan, const mi_op *op, int rank, line *b)
{
    const mi_config *c = &plan->cfg;
    int l = op->layer;
    switch (op->kind) {
    case MI_OP_EMBED:
        if (op->variant == MI_OPV_EMBED_ROWS)
            add(b, "embed       the rows of tok_embeddings it holds, vocabulary rows [%d,%d) of %d: each token among "
                   "them -> its row of X, zeros for the others", op->i0, op->i0 + op->ni, c->vocab_size);
        else
            add(b, "embed       the token's row of tok_embeddings, columns [%d,%d) of %d -> X", op->c0,
                op->c0 + op->n, c->dim);
        break;
    case MI_OP_NORM:
        if (op->norm == MI_NORM_FINAL)
            add(b, "norm        final RMSNorm of X -> XN");
        else
            add(b, "norm        layer %d %s RMSNorm of X -> XN", l, norm_name(op->norm));
        break;
    case MI_OP_NORM_LOCAL:
        /* somegather: no rank holds the whole residual, so each normalises with what it has */
        if (op->norm == MI_NORM_FINAL)
            add(b, "norm        final RMSNorm over the residual columns this rank holds -> XN");
        else
            add(b, "norm        layer %d %s RMSNorm over the residual columns this rank holds (its own and those "
                   "received) -> XN", l, norm_name(op->norm));
        break;
    case MI_OP_ATTN: {
        int q[MI_MAX_KV_HEADS * 64] = {0}, kv[MI_MAX_KV_HEADS] = {0}, nkv = 0;
        int nq = c->n_heads <= (int)(sizeof q / sizeof q[0]) ? rank_heads(plan, l, rank, q, kv, &nkv) : 0;
        add(b, "attention   layer %d, query head%s ", l, nq == 1 ? "" : "s");
        add_list(b, q, nq);
        if (mi_kv_group(c) > 1) {
            add(b, " (KV head%s ", nkv == 1 ? "" : "s");
            add_list(b, kv, nkv);
            add(b, ")");
        }
        add(b, ": wq, wk, wv rows of those heads (%d x %d each), K and V appended to its KV cache -> %s[%d,%d)",
            c->head_dim, c->dim, mi_buf_name(op->buf), op->c0, op->c0 + op->n);
        break;
    }
    case MI_OP_PROJ: {
        add(b, "projection  layer %d, wo rows [%d,%d) x ", l, op->c0, op->c0 + op->n);
        if (op->in == MI_BUF_HEADS_LOCAL) {
            int q[MI_MAX_KV_HEADS * 64] = {0}, kv[MI_MAX_KV_HEADS] = {0}, nkv = 0;
            int nq = c->n_heads <= (int)(sizeof q / sizeof q[0]) ? rank_heads(plan, l, rank, q, kv, &nkv) : 0;
            add(b, "the columns of its own head%s ", nq == 1 ? "" : "s");
            add_list(b, q, nq);
        } else if (op->ni == c->n_heads * c->head_dim) {
            add(b, "the columns of all %d heads", c->n_heads);
        } else {
            add(b, "columns [%d,%d)", op->i0, op->i0 + op->ni);
        }
        add(b, " (their outputs) %s %s[%d,%d)%s", op->flags & MI_OPF_ADD ? "added to" : "->", mi_buf_name(op->buf),
            op->c0, op->c0 + op->n, op->buf == MI_BUF_TMP ? " (a partial sum)" : "");
        break;
    }
    case MI_OP_ROUTE:
        add(b, "route       layer %d, router over %d experts on XN: each position's top %d experts and weights", l,
            c->n_experts, c->n_experts_used);
        break;
    case MI_OP_MOE:
        if (op->flags & MI_OPF_ROUTED) {
            add(b, "experts     layer %d, the routed rows' selections among experts [%d,%d)%s: one weighted row "
                   "each, for the combine", l, op->i0, op->i0 + op->ni,
                op->flags & MI_OPF_SHARED ? ", and every row's gated shared expert" : "");
            break;
        }
        add(b, "experts     layer %d, router over %d experts, the top %d of XN among experts [%d,%d)%s %s %s[%d,%d)%s",
            l, c->n_experts, c->n_experts_used, op->i0, op->i0 + op->ni,
            op->flags & MI_OPF_SHARED ? " and the shared expert" : c->shared_hidden_dim ? "" : " (no shared expert)",
            op->flags & MI_OPF_ADD ? "added to" : "->", mi_buf_name(op->buf), op->c0, op->c0 + op->n,
            op->ni < c->n_experts ? " (a partial sum)" : "");
        break;
    case MI_OP_FFN_UP:
        add(b, "ffn up      layer %d, FFN units [%d,%d) of %d: w1 and w3 rows, silu(w1 XN) * w3 XN -> HIDDEN", l, op->c0,
            op->c0 + op->n, c->hidden_dim);
        break;
    case MI_OP_FFN_DOWN:
        add(b, "ffn down    layer %d, w2 rows [%d,%d) x the columns of units [%d,%d) %s %s[%d,%d)%s", l, op->c0,
            op->c0 + op->n, op->i0, op->i0 + op->ni, op->flags & MI_OPF_ADD ? "added to" : "->", mi_buf_name(op->buf), op->c0,
            op->c0 + op->n, op->buf == MI_BUF_TMP && op->ni < c->hidden_dim ? " (a partial sum)" : "");
        break;
    case MI_OP_ADD:
        add(b, "add         X[%d,%d) += TMP (layer %d's FFN output joins the residual)", op->c0, op->c0 + op->n, l);
        break;
    case MI_OP_SPEC_TEST:
        add(b, "speculate?  layer %d -> %d: accept the speculative attention when ||FFN(Z)|| / ||Z|| < tolerance", l,
            l + 1);
        break;
    case MI_OP_LOGITS:
        add(b, "logits      classifier rows [%d,%d) of %d x XN -> LOGITS (the positions whose logits are wanted)",
            op->c0, op->c0 + op->n, c->vocab_size);
        break;
    default: add(b, "%s", mi_op_name(op->kind));
    }
}

/* Ranks of comm other than member `me`, as a list. */
static void add_peers(line *b, const mi_comm *cm, int me)
{
    int v[MI_MAX_RANKS] = {0}, n = 0;
    for (int j = 0; j < cm->n_members; j++)
        if (j != me)
            v[n++] = cm->members[j];
    add(b, "rank%s ", n == 1 ? "" : "s");
    add_list(b, v, n);
}

/* A gather at rank 0: the logits (whole, or each slice's best candidates),
 * or a split vocabulary's embedding rows. */
static void explain_gatherv(const mi_exchange *x, const mi_comm *cm, const mi_config *c, int me, int root, double in,
                            double out, const char *unit, line *b)
{
    if (me == x->root) {
        if (x->by_token)
            add(b, "wait        for the embedding rows of the tokens among the vocabulary rows of ");
        else if (x->cand == 1)
            add(b, "wait        for the best logit (with its token id) of each classifier slice of ");
        else if (x->cand > 0)
            add(b, "wait        for the %d best logits (with their token ids) of each classifier slice of ", x->cand);
        else
            add(b, "wait        for the logits of ");
        add_peers(b, cm, me);
        add(b, ": %.0f B %s%s", in, unit,
            x->by_token ? "; keeps each position's row from its token's owner"
            : x->cand > 0 ? "; the logits rebuilt from them, -infinity for the other tokens" : "");
    } else if (x->by_token) {
        add(b, "send        its X rows (%d columns: the embeddings of the tokens among vocabulary rows ", c->dim);
        add_cols(b, &x->own[me]);
        add(b, ", zeros for the others) to rank %d: %.0f B %s", root, out, unit);
    } else if (x->cand > 0) {
        if (x->cand == 1)
            add(b, "send        the best of its logits of vocabulary rows ");
        else
            add(b, "send        the %d best of its logits of vocabulary rows ", x->cand);
        add_cols(b, &x->send[me]);
        add(b, " with %s to rank %d: %.0f B %s", x->cand == 1 ? "its token id" : "their token ids", root, out, unit);
    } else {
        add(b, "send        ");
        add_payload(b, c, x->buf, &x->send[me]);
        add(b, " to rank %d: %.0f B %s", root, out, unit);
    }
}

/* One communication op of `rank`; adds its bytes per position to *sent, *recv. */
static void explain_comm(const mi_programs *p, const mi_config *c, const mi_op *op, int rank, const char *unit,
                         line *b, double *sent, double *recv)
{
    const mi_exchange *x = &p->xchg[op->xid];
    const mi_comm *cm = &p->comms[x->comm];
    int me = mi_comm_index(cm, rank), n = cm->n_members;
    double out = 0, in = 0;
    for (int j = 0; j < n; j++) {
        out += mi_exchange_bytes(p, op->xid, me, j);
        in += mi_exchange_bytes(p, op->xid, j, me);
    }
    *sent += out;
    *recv += in;
    char lbuf[32] = "the logits";
    if (x->layer >= 0)
        snprintf(lbuf, sizeof lbuf, "layer %d", x->layer);
    /* what a broadcast residual is: layer l's input (or the final one), Z
     * before l's FFN (speculation), or l's output with the decision */
    char what[96];
    if (op->kind == MI_OP_IBCAST)
        snprintf(what, sizeof what, "Z, layer %d's residual before its FFN", x->layer);
    else if (x->flag)
        snprintf(what, sizeof what, "layer %d's output and its speculation decision (4 B)", x->layer);
    else if (x->layer >= 0)
        snprintf(what, sizeof what, "on its way into layer %d", x->layer);
    else
        snprintf(what, sizeof what, "for the final norm and the classifier");
    int root = x->root >= 0 ? cm->members[x->root] : -1;
    switch (op->kind) {
    case MI_OP_BCAST:
    case MI_OP_IBCAST:
        if (me == x->root) {
            add(b, "%s", op->kind == MI_OP_IBCAST ? "send async  " : "send        ");
            add_payload(b, c, x->buf, &x->send[me]);
            add(b, ", %s, to ", what);
            add_peers(b, cm, me);
            if (n > 2)
                add(b, ": %.0f B %s each, %.0f B in all", out / (n - 1), unit, out);
            else
                add(b, ": %.0f B %s", out, unit);
            if (op->kind == MI_OP_IBCAST)
                add(b, "; computing goes on while it travels");
        } else {
            add(b, "wait        for rank %d: ", root);
            add_payload(b, c, x->buf, &x->send[x->root]);
            add(b, ", %s: %.0f B %s", what, in, unit);
        }
        break;
    case MI_OP_POST:
        add(b, "open window for %s's head outputs (RMA exposure; no data yet)", lbuf);
        break;
    case MI_OP_PUT:
        if (me == x->root) {
            if (n == 1) {
                add(b, "gather      its own head outputs of %s in place (no message)", lbuf);
                break;
            }
            add(b, "wait        for ");
            int first = 1;
            for (int j = 0; j < n; j++) {
                if (j == me)
                    continue;
                add(b, "%srank %d's ", first ? "" : ", ", cm->members[j]);
                add_payload(b, c, x->buf, &x->send[j]);
                add(b, " (%.0f B)", mi_exchange_bytes(p, op->xid, j, me));
                first = 0;
            }
            add(b, " put into its window, %s: %.0f B %s", lbuf, in, unit);
        } else {
            add(b, "put         ");
            add_payload(b, c, x->buf, &x->send[me]);
            add(b, " of %s into rank %d's window (RMA): %.0f B %s", lbuf, root, out, unit);
        }
        break;
    case MI_OP_ALLREDUCE:
        add(b, "allreduce   %s's partial sums of X (%d columns) with ", lbuf, x->send[0].count);
        add_peers(b, cm, me);
        add(b, " in %d round%s: sends %.0f B, receives %.0f B %s; every member ends with the same X",
            n == 2 ? 1 : x->rounds, (n == 2 ? 1 : x->rounds) == 1 ? "" : "s", out, in, unit);
        break;
    case MI_OP_ALLGATHERV:
        add(b, "allgather   %s %s: sends its ", lbuf, x->what >= 0 ? mi_xch_name(x->what) : "");
        add_payload(b, c, x->buf, &x->send[me]);
        if (x->own && x->own[me].count > x->send[me].count)
            add(b, " (%d of its %d columns; the rest pruned)", x->send[me].count, x->own[me].count);
        add(b, " to ");
        add_peers(b, cm, me);
        add(b, " (%.0f B each), waits for theirs: sends %.0f B, receives %.0f B %s",
            n > 1 ? out / (n - 1) : 0.0, out, in, unit);
        break;
    case MI_OP_GATHERV:
        explain_gatherv(x, cm, c, me, root, in, out, unit, b);
        break;
    case MI_OP_DISPATCH:
    case MI_OP_COMBINE: {
        int disp = op->kind == MI_OP_DISPATCH;
        if (me == x->root) {
            add(b, disp ? "dispatch    %s's XN rows, each to " : "combine     %s: waits for the expert rows of ", lbuf);
            add_peers(b, cm, me);
            add(b, disp ? " when it chose one of their experts" : " and adds each position's in selection order to X");
            add(b, ": %s %.1f B %s expected (uniform routing)", disp ? "sends" : "receives", disp ? out : in, unit);
        } else {
            add(b, disp ? "wait        for rank %d: the XN rows of %s that chose its experts"
                        : "send        to rank %d: %s's rows of its selected experts", root, lbuf);
            add(b, ", %.1f B %s expected (uniform routing)", disp ? in : out, unit);
        }
        break;
    }
    default: add(b, "%s", mi_op_name(op->kind));
    }
}

/* 1 when rank's programs of the two phases are the same steps (only the
 * rounds of reductions and the windows' exposure may differ). */
static int same_steps(const mi_programs *p, int rank)
{
    const mi_program *a = &p->prog[MI_PHASE_PREFILL][rank], *d = &p->prog[MI_PHASE_DECODE][rank];
    if (a->ops == d->ops)
        return 1;
    if (a->n_ops != d->n_ops)
        return 0;
    for (int i = 0; i < a->n_ops; i++) {
        const mi_op *x = &a->ops[i], *y = &d->ops[i];
        if (x->kind != y->kind || x->layer != y->layer || x->buf != y->buf || x->c0 != y->c0 || x->n != y->n ||
            x->flags != y->flags || x->i0 != y->i0 || x->ni != y->ni || x->norm != y->norm)
            return 0;
        if (x->xid >= 0 && (p->xchg[x->xid].comm != p->xchg[y->xid].comm || p->xchg[x->xid].root != p->xchg[y->xid].root))
            return 0;
    }
    return 1;
}

/* One rank's program of phase ph; returns its bytes sent per position. */
static double explain_rank(const mi_plan *plan, const mi_programs *p, int ph, int rank, FILE *f)
{
    const mi_program *g = &p->prog[ph][rank];
    const char *unit = ph == MI_PHASE_DECODE ? "per token" : "per position";
    double sent = 0, recv = 0;
    line *lines = mi_calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *lines, "explanation");
    for (int i = 0; i < g->n_ops; i++) {
        const mi_op *op = &g->ops[i];
        line *b = &lines[i];
        if (op->xid >= 0)
            explain_comm(p, &plan->cfg, op, rank, unit, b, &sent, &recv);
        else
            explain_compute(plan, op, rank, b);
        if (op->flags & MI_OPF_IF_REJECTED)
            add(b, " [only when layer %d's speculation was rejected]", op->layer - 1);
    }
    fprintf(f, "rank %d%s: %d steps; sends %.0f B, receives %.0f B %s\n", rank, rank == 0 ? " (controller)" : "",
            g->n_ops, sent, recv, unit);
    if (g->n_ops == 0)
        fprintf(f, "    (nothing: this rank holds no shard in this phase)\n");
    for (int i = 0; i < g->n_ops; i++)
        fprintf(f, "  %3d  %s\n", i + 1, lines[i].s);
    free(lines);
    return sent;
}

/* Who holds what, one line per layer: the answer to "which rank computes
 * which heads of layer l" before the programs say how. */
static void explain_placement(const mi_plan *plan, FILE *f)
{
    const mi_config *c = &plan->cfg;
    int g = mi_kv_group(c);
    fprintf(f, "placement (%s, %d rank%s; query heads %d per KV head, head_dim %d, FFN units %d):\n",
            mi_planner_name(plan->planner), plan->n_ranks, plan->n_ranks == 1 ? "" : "s", g, c->head_dim,
            c->hidden_dim);
    for (int l = 0; l < c->n_layers; l++) {
        const mi_layer_plan *lp = &plan->layers[l];
        line b = {{0}, 0};
        add(&b, "  layer %d:", l);
        for (int r = 0; r < plan->n_ranks; r++) {
            int q[MI_MAX_KV_HEADS * 64] = {0}, kv[MI_MAX_KV_HEADS] = {0}, nkv = 0;
            if (c->n_heads > (int)(sizeof q / sizeof q[0]))
                break;
            int nq = rank_heads(plan, l, r, q, kv, &nkv);
            if (!nq)
                continue;
            add(&b, " heads ");
            add_list(&b, q, nq);
            add(&b, " on rank %d;", r);
        }
        if (lp->proj_rank >= 0)
            add(&b, " wo on rank %d;", lp->proj_rank);
        else if (plan->n_cols > 0)
            add(&b, " wo and w2 rows with each rank's residual columns;");
        else
            add(&b, " wo split with the heads;");
        add(&b, mi_config_is_moe(c) ? " router held by each expert rank; experts" : " FFN units");
        for (int i = 0; i < lp->n_ffn; i++)
            add(&b, "%s [%d,%d)%s on rank %d", i ? "," : "", lp->ffn[i].v0, lp->ffn[i].v0 + lp->ffn[i].n,
                mi_config_is_moe(c) && lp->ffn[i].v0 == 0 && c->shared_hidden_dim ? " and the shared expert" : "",
                lp->ffn[i].rank);
        if (lp->speculate)
            add(&b, "; speculates into layer %d", l + 1);
        fprintf(f, "%s\n", b.s);
    }
    line b = {{0}, 0};
    add(&b, "  classifier rows:");
    for (int i = 0; i < plan->n_cls; i++)
        add(&b, "%s [%d,%d) on rank %d", i ? "," : "", plan->cls[i].v0, plan->cls[i].v0 + plan->cls[i].n,
            plan->cls[i].rank);
    fprintf(f, "%s\n", b.s);
    b.n = 0;
    b.s[0] = 0;
    if (plan->split_vocab) {
        add(&b, "  token embedding rows (with the classifier's):");
        for (int i = 0; i < plan->n_cls; i++)
            add(&b, "%s [%d,%d) on rank %d", i ? "," : "", plan->cls[i].v0, plan->cls[i].v0 + plan->cls[i].n,
                plan->cls[i].rank);
    } else if (plan->n_cols == 0) {
        add(&b, "  token embeddings: [0,%d) on rank 0", c->vocab_size);
    } else {
        add(&b, "  token embeddings: every row, each rank its residual columns");
    }
    fprintf(f, "%s\n", b.s);
    if (plan->n_cols > 0) {
        b.n = 0;
        b.s[0] = 0;
        add(&b, "  residual columns (somegather):");
        for (int i = 0; i < plan->n_cols; i++)
            add(&b, "%s [%d,%d) on rank %d", i ? "," : "", plan->cols[i].v0, plan->cols[i].v0 + plan->cols[i].n,
                plan->cols[i].rank);
        fprintf(f, "%s\n", b.s);
    }
}

void mi_programs_explain(const mi_plan *plan, const mi_programs *p, int phases, FILE *f)
{
    explain_placement(plan, f);
    static const int order[2] = {MI_PHASE_DECODE, MI_PHASE_PREFILL};
    for (int k = 0; k < 2; k++) {
        int ph = order[k];
        if (phases >= 0 && phases != ph)
            continue;
        if (ph == MI_PHASE_DECODE)
            fprintf(f, "decode pass: one new token at one position. Bytes are message payload in the wire dtype "
                       "(%s), per token; the 16-byte commands rank 0 sends each worker per pass are not counted\n",
                    mi_dtype_name(p->wire));
        else
            fprintf(f, "prefill pass: the prompt's positions in chunks; bytes per position (a pass of T positions "
                       "moves T times as much, logits only for the last position)\n");
        double total = 0;
        for (int r = 0; r < p->n_ranks; r++) {
            if (ph == MI_PHASE_PREFILL && phases < 0 && same_steps(p, r)) {
                double s = 0;
                const mi_program *g = &p->prog[ph][r];
                for (int i = 0; i < g->n_ops; i++) {
                    int xid = g->ops[i].xid;
                    if (xid < 0)
                        continue;
                    const mi_comm *cm = &p->comms[p->xchg[xid].comm];
                    for (int j = 0; j < cm->n_members; j++)
                        s += mi_exchange_bytes(p, xid, mi_comm_index(cm, r), j);
                }
                fprintf(f, "rank %d%s: the same %d steps as its decode program, on every position; sends %.0f B per "
                           "position\n", r, r == 0 ? " (controller)" : "", g->n_ops, s);
                total += s;
                continue;
            }
            total += explain_rank(plan, p, ph, r, f);
        }
        fprintf(f, "%s: %.0f bytes %s sent by all ranks together%s\n", ph == MI_PHASE_DECODE ? "bytes per token"
                                                                                           : "bytes per position",
                total, ph == MI_PHASE_DECODE ? "per token" : "per prefill position",
                ph == MI_PHASE_DECODE ? " (the plan's bytes per token)" : "");
    }
}
