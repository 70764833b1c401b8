/* Programs as data: buffers, op kinds, exchanges and their payload (see
 * partition.h). The schemes that fill them are headlevel.c and somegather.c. */
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/partition.h"
#include "program_build.h"

int mi_buf_width(const mi_config *c, int b)
{
    switch (b) {
    case MI_BUF_X:
    case MI_BUF_XN:
    case MI_BUF_TMP: return c->dim;
    case MI_BUF_HEADS:
    case MI_BUF_HEADS_LOCAL: return c->n_heads * c->head_dim;
    case MI_BUF_HIDDEN: return c->hidden_dim;
    case MI_BUF_LOGITS: return c->vocab_size;
    default: return 0;
    }
}

const char *mi_buf_name(int b)
{
    static const char *names[MI_N_BUFS] = {"X", "XN", "HEADS", "HEADS_LOCAL", "TMP", "HIDDEN", "LOGITS"};
    return b >= 0 && b < MI_N_BUFS ? names[b] : "?";
}

static const char *const op_names[MI_N_OPS] = {
    [MI_OP_EMBED] = "embed",         [MI_OP_NORM] = "norm",           [MI_OP_ATTN] = "attention",
    [MI_OP_PROJ] = "projection",     [MI_OP_FFN_UP] = "ffn up",       [MI_OP_FFN_DOWN] = "ffn down",
    [MI_OP_ADD] = "add",             [MI_OP_SPEC_TEST] = "speculation test",
    [MI_OP_LOGITS] = "logits",       [MI_OP_NORM_LOCAL] = "norm (local)", [MI_OP_BCAST] = "bcast",         [MI_OP_IBCAST] = "ibcast",
    [MI_OP_POST] = "post (RMA)",     [MI_OP_PUT] = "put (RMA)",       [MI_OP_ALLREDUCE] = "allreduce", [MI_OP_ALLGATHERV] = "allgatherv",
    [MI_OP_GATHERV] = "gatherv",     [MI_OP_MOE] = "experts",
    [MI_OP_DISPATCH] = "dispatch",   [MI_OP_COMBINE] = "combine",     [MI_OP_ROUTE] = "route",
};

const char *mi_op_name(int kind)
{
    return kind >= 0 && kind < MI_N_OPS ? op_names[kind] : "?";
}

int mi_op_is_comm(int kind)
{
    return kind >= MI_OP_BCAST && kind <= MI_OP_COMBINE;
}

int mi_program_chain_split(const mi_programs *p, const mi_program *g)
{
    int split = -1;
    for (int i = 0; i < g->n_ops; i++) {
        const mi_op *op = &g->ops[i];
        if (!mi_op_is_comm(op->kind))
            continue;
        if (split >= 0 || op->kind != MI_OP_BCAST)
            return -1;
        const mi_exchange *x = &p->xchg[op->xid];
        if (p->comms[x->comm].members[x->root] != 0)
            split = i;
    }
    return split;
}

int mi_programs_can_pipeline(const mi_programs *p)
{
    if (p->n_ranks < 2)
        return 0;
    for (int ph = 0; ph < MI_N_PHASES; ph++)
        if (mi_program_chain_split(p, &p->prog[ph][0]) < 0)
            return 0;
    return 1;
}

int mi_comm_index(const mi_comm *comm, int rank)
{
    for (int i = 0; i < comm->n_members; i++)
        if (comm->members[i] == rank)
            return i;
    return -1;
}

/* ------------------------------------------------------------ building */

void pb_init(mi_programs *p, int n_ranks, int wire)
{
    memset(p, 0, sizeof *p);
    p->n_ranks = n_ranks;
    p->wire = wire;
    for (int ph = 0; ph < MI_N_PHASES; ph++)
        p->prog[ph] = mi_calloc((size_t)n_ranks, sizeof(mi_program), "programs");
}

void pb_op(mi_programs *p, int ph, int rank, mi_op op)
{
    mi_program *g = &p->prog[ph][rank];
    if (g->n_ops == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        mi_op *n = realloc(g->ops, (size_t)g->cap * sizeof *n);
        if (!n)
            mi_fatal("out of memory building programs");
        g->ops = n;
    }
    g->ops[g->n_ops++] = op;
}

mi_op pb_compute(int kind, int layer, int buf, int c0, int n)
{
    mi_op op;
    memset(&op, 0, sizeof op);
    op.kind = (unsigned char)kind;
    op.layer = (short)layer;
    op.buf = (unsigned char)buf;
    op.c0 = c0;
    op.n = n;
    op.xid = -1;
    op.runs = -1;
    return op;
}

int pb_comm(mi_programs *p, const int *members, int n)
{
    for (int i = 0; i < p->n_comms; i++)
        if (p->comms[i].n_members == n && !memcmp(p->comms[i].members, members, (size_t)n * sizeof(int)))
            return i;
    mi_comm *nc = realloc(p->comms, (size_t)(p->n_comms + 1) * sizeof *nc);
    if (!nc)
        mi_fatal("out of memory building programs");
    p->comms = nc;
    mi_comm *c = &p->comms[p->n_comms];
    c->n_members = n;
    c->members = mi_malloc((size_t)(n ? n : 1) * sizeof(int), "communicator");
    memcpy(c->members, members, (size_t)n * sizeof(int));
    return p->n_comms++;
}

int pb_exchange(mi_programs *p, int kind, int comm, int buf, int root, int layer)
{
    mi_exchange *nx = realloc(p->xchg, (size_t)(p->n_xchg + 1) * sizeof *nx);
    if (!nx)
        mi_fatal("out of memory building programs");
    p->xchg = nx;
    mi_exchange *x = &p->xchg[p->n_xchg];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->comm = comm;
    x->buf = buf;
    x->root = root;
    x->layer = layer;
    x->what = MI_XCH_NONE;
    x->shared = -1;
    x->send = mi_calloc((size_t)p->comms[comm].n_members, sizeof(mi_colset), "exchange");
    return p->n_xchg++;
}

void pb_cols_add(mi_colset *s, int c0, int len)
{
    if (len <= 0)
        return;
    if (s->n_runs > 0 && s->c0[s->n_runs - 1] + s->len[s->n_runs - 1] == c0) {
        s->len[s->n_runs - 1] += len;
    } else {
        int *a = realloc(s->c0, (size_t)(s->n_runs + 1) * sizeof(int));
        int *b = a ? realloc(s->len, (size_t)(s->n_runs + 1) * sizeof(int)) : NULL;
        if (!a || !b)
            mi_fatal("out of memory building programs");
        s->c0 = a;
        s->len = b;
        s->c0[s->n_runs] = c0;
        s->len[s->n_runs++] = len;
    }
    s->count += len;
}

static void cols_free(mi_colset *s)
{
    free(s->c0);
    free(s->len);
}

void mi_programs_free(mi_programs *p)
{
    /* the decode programs may share the prefill ones' op arrays */
    for (int ph = 0; ph < MI_N_PHASES; ph++)
        for (int r = 0; p->prog[ph] && r < p->n_ranks; r++)
            if (ph == 0 || !p->prog[0] || p->prog[ph][r].ops != p->prog[0][r].ops)
                free(p->prog[ph][r].ops);
    for (int ph = 0; ph < MI_N_PHASES; ph++)
        free(p->prog[ph]);
    for (int i = 0; i < p->n_xchg; i++) {
        mi_exchange *x = &p->xchg[i];
        int n = p->comms[x->comm].n_members;
        for (int j = 0; j < n; j++) {
            cols_free(&x->send[j]);
            if (x->own)
                cols_free(&x->own[j]);
        }
        free(x->send);
        free(x->own);
    }
    free(p->xchg);
    for (int i = 0; i < p->n_comms; i++)
        free(p->comms[i].members);
    free(p->comms);
    free(p->run_c0);
    free(p->run_len);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------ payload */

void mi_wire_slice(int dim, int n_members, int j, int *c0, int *len)
{
    int nb = (dim + MI_QK - 1) / MI_QK;
    int a = (int)((long)nb * j / n_members) * MI_QK, b = (int)((long)nb * (j + 1) / n_members) * MI_QK;
    if (b > dim)
        b = dim;
    if (a > dim)
        a = dim;
    *c0 = a;
    *len = b - a;
}

/* Bytes of one position of a column set on the wire: its columns packed
 * densely and encoded as one row, as the runtime sends them. */
static double cols_bytes(int wire, const mi_colset *s)
{
    return (double)mi_wire_row_bytes(wire, (size_t)s->count);
}

/* C(n, k) / C(m, k) for n <= m: the chance that k of m experts drawn
 * uniformly avoid m - n given ones. */
static double none_chosen(int m, int n, int k)
{
    if (k > n)
        return 0.0;
    double q = 1.0;
    for (int i = 0; i < k; i++)
        q *= (double)(n - i) / (double)(m - i);
    return q;
}

double mi_moe_dispatch_rows(const mi_exchange *x, int j)
{
    if (j == x->root)
        return 0.0;
    if (j == x->shared)
        return 1.0;
    return 1.0 - none_chosen(x->n_experts, x->n_experts - x->own[j].count, x->top_k);
}

double mi_moe_combine_rows(const mi_exchange *x, int j)
{
    if (j == x->root)
        return 0.0;
    return (double)x->top_k * x->own[j].count / x->n_experts + (j == x->shared ? 1.0 : 0.0);
}

double mi_exchange_bytes(const mi_programs *p, int xid, int from, int to)
{
    const mi_exchange *x = &p->xchg[xid];
    const mi_comm *cm = &p->comms[x->comm];
    int n = cm->n_members, w = x->wire;
    if (from == to || n < 2)
        return 0;
    switch (x->kind) {
    case MI_OP_BCAST:
    case MI_OP_IBCAST:
        if (from != x->root)
            return 0;
        return cols_bytes(w, &x->send[from]) + (x->flag ? 4.0 : 0.0);
    case MI_OP_GATHERV:
        if (to != x->root)
            return 0;
        if (x->cand > 0) /* (fp32 logit, int32 token id) pairs */
            return 8.0 * (double)(x->cand < x->send[from].count ? x->cand : x->send[from].count);
        return cols_bytes(w, &x->send[from]);
    case MI_OP_PUT:
        return to == x->root ? cols_bytes(w, &x->send[from]) : 0;
    case MI_OP_ALLGATHERV:
        return cols_bytes(w, &x->send[from]);
    case MI_OP_DISPATCH: /* XN rows and each row's k (int32 id, fp32 weight) pairs */
        if (from != x->root)
            return 0;
        return mi_moe_dispatch_rows(x, to) * (cols_bytes(w, &x->send[from]) + 8.0 * x->top_k);
    case MI_OP_COMBINE:
        if (to != x->root)
            return 0;
        return mi_moe_combine_rows(x, from) * cols_bytes(w, &x->send[x->root]);
    case MI_OP_ALLREDUCE: {
        /* two members, or one round: whole partials to every other member;
         * two rounds: reduce-scatter (from's partial of to's slice) then
         * allgather (from's summed slice) */
        int dim = x->send[0].count, c0, lt, lf;
        mi_wire_slice(dim, n, to, &c0, &lt);
        mi_wire_slice(dim, n, from, &c0, &lf);
        if (n == 2 || x->rounds == 1)
            return (double)mi_wire_row_bytes(w, (size_t)dim);
        return (double)mi_wire_row_bytes(w, (size_t)lt) + (double)mi_wire_row_bytes(w, (size_t)lf);
    }
    default: return 0;
    }
}

double mi_programs_bytes(const mi_programs *p, int ph, double *sent, double *recv)
{
    int n = p->n_ranks;
    if (sent)
        memset(sent, 0, (size_t)n * sizeof(double));
    if (recv)
        memset(recv, 0, (size_t)n * sizeof(double));
    /* every exchange the phase's programs use, once */
    unsigned char *used = mi_calloc((size_t)p->n_xchg + 1, 1, "exchange marks");
    for (int r = 0; r < n; r++)
        for (int i = 0; i < p->prog[ph][r].n_ops; i++) {
            int xid = p->prog[ph][r].ops[i].xid;
            if (xid >= 0)
                used[xid] = 1;
        }
    double total = 0;
    for (int xid = 0; xid < p->n_xchg; xid++) {
        if (!used[xid])
            continue;
        const mi_comm *cm = &p->comms[p->xchg[xid].comm];
        for (int a = 0; a < cm->n_members; a++)
            for (int b = 0; b < cm->n_members; b++) {
                double by = mi_exchange_bytes(p, xid, a, b);
                if (by <= 0)
                    continue;
                if (sent)
                    sent[cm->members[a]] += by;
                if (recv)
                    recv[cm->members[b]] += by;
                total += by;
            }
    }
    free(used);
    return total;
}

/* ------------------------------------------------------------ listing */

static void print_cols(FILE *f, const mi_colset *s)
{
    if (s->n_runs == 0) {
        fprintf(f, "-");
        return;
    }
    if (s->n_runs > 4) {
        fprintf(f, "%d columns in %d runs", s->count, s->n_runs);
        return;
    }
    for (int i = 0; i < s->n_runs; i++)
        fprintf(f, "%s[%d,%d)", i ? "," : "", s->c0[i], s->c0[i] + s->len[i]);
}

void mi_programs_print(const mi_programs *p, const mi_config *c, FILE *f)
{
    (void)c;
    fprintf(f, "communicators:\n");
    for (int i = 0; i < p->n_comms; i++) {
        fprintf(f, "  c%d: ranks", i);
        for (int j = 0; j < p->comms[i].n_members; j++)
            fprintf(f, " %d", p->comms[i].members[j]);
        fputc('\n', f);
    }
    for (int ph = 0; ph < MI_N_PHASES; ph++) {
        if (ph == MI_PHASE_DECODE) {
            int same = 1;
            for (int r = 0; r < p->n_ranks; r++)
                same &= p->prog[1][r].ops == p->prog[0][r].ops;
            if (same) {
                fprintf(f, "decode programs: the same as prefill\n");
                continue;
            }
        }
        for (int r = 0; r < p->n_ranks; r++) {
            const mi_program *g = &p->prog[ph][r];
            fprintf(f, "%s program of rank %d (%d ops):\n", ph == 0 ? "prefill" : "decode", r, g->n_ops);
            for (int i = 0; i < g->n_ops; i++) {
                const mi_op *op = &g->ops[i];
                fprintf(f, "  %3d  %-17s", i, mi_op_name(op->kind));
                if (op->layer >= 0)
                    fprintf(f, " layer %-3d", op->layer);
                else
                    fprintf(f, "          ");
                if (op->xid >= 0) {
                    const mi_exchange *x = &p->xchg[op->xid];
                    const mi_comm *cm = &p->comms[x->comm];
                    int me = mi_comm_index(cm, r);
                    fprintf(f, " %s on c%d", mi_buf_name(x->buf), x->comm);
                    if (x->root >= 0)
                        fprintf(f, " root %d", cm->members[x->root]);
                    if (x->what >= 0)
                        fprintf(f, " (%s)", mi_xch_name(x->what));
                    if (x->cand > 0)
                        fprintf(f, " (%d best per slice)", x->cand);
                    if (x->by_token)
                        fprintf(f, " (rows by token)");
                    if (me >= 0 && (x->kind == MI_OP_DISPATCH || x->kind == MI_OP_COMBINE)) {
                        fprintf(f, " experts ");
                        print_cols(f, &x->own[me]);
                        if (me == x->shared)
                            fprintf(f, " + shared");
                    } else if (me >= 0 && x->kind != MI_OP_ALLREDUCE) {
                        fprintf(f, " sends ");
                        print_cols(f, &x->send[me]);
                    }
                } else {
                    if (op->kind == MI_OP_NORM || op->kind == MI_OP_NORM_LOCAL)
                        fprintf(f, " %s", op->norm == MI_NORM_ATTN ? "attention" : op->norm == MI_NORM_FFN ? "ffn" : "final");
                    else
                        fprintf(f, " %s[%d,%d)", mi_buf_name(op->buf), op->c0, op->c0 + op->n);
                    if (op->kind == MI_OP_PROJ || op->kind == MI_OP_FFN_DOWN)
                        fprintf(f, " %s %s[%d,%d)", op->flags & MI_OPF_ADD ? "+=" : "=", mi_buf_name(op->in), op->i0,
                                op->i0 + op->ni);
                }
                if (op->flags & MI_OPF_IF_REJECTED)
                    fprintf(f, " if rejected");
                if (op->flags & MI_OPF_FLAG)
                    fprintf(f, " +decision");
                fputc('\n', f);
            }
        }
    }
}

static int *ints_dup(const int *a, int n)
{
    if (!a || n <= 0)
        return NULL;
    int *b = mi_malloc((size_t)n * sizeof(int), "programs");
    memcpy(b, a, (size_t)n * sizeof(int));
    return b;
}

static void colset_copy(const mi_colset *a, mi_colset *b)
{
    *b = *a;
    b->c0 = ints_dup(a->c0, a->n_runs);
    b->len = ints_dup(a->len, a->n_runs);
}

void mi_programs_copy(const mi_programs *src, mi_programs *dst)
{
    *dst = *src;
    dst->comms = mi_calloc((size_t)(src->n_comms > 0 ? src->n_comms : 1), sizeof(mi_comm), "programs");
    for (int i = 0; i < src->n_comms; i++) {
        dst->comms[i] = src->comms[i];
        dst->comms[i].members = ints_dup(src->comms[i].members, src->comms[i].n_members);
    }
    dst->xchg = mi_calloc((size_t)(src->n_xchg > 0 ? src->n_xchg : 1), sizeof(mi_exchange), "programs");
    for (int i = 0; i < src->n_xchg; i++) {
        const mi_exchange *a = &src->xchg[i];
        mi_exchange *b = &dst->xchg[i];
        *b = *a;
        int n = src->comms[a->comm].n_members;
        b->send = a->send ? mi_calloc((size_t)n, sizeof(mi_colset), "programs") : NULL;
        b->own = a->own ? mi_calloc((size_t)n, sizeof(mi_colset), "programs") : NULL;
        for (int j = 0; j < n; j++) {
            if (a->send)
                colset_copy(&a->send[j], &b->send[j]);
            if (a->own)
                colset_copy(&a->own[j], &b->own[j]);
        }
    }
    for (int ph = 0; ph < MI_N_PHASES; ph++) {
        if (!src->prog[ph])
            continue;
        dst->prog[ph] = mi_calloc((size_t)src->n_ranks, sizeof(mi_program), "programs");
        for (int r = 0; r < src->n_ranks; r++) {
            const mi_program *a = &src->prog[ph][r];
            mi_program *b = &dst->prog[ph][r];
            b->n_ops = b->cap = a->n_ops;
            b->ops = mi_malloc((size_t)(a->n_ops > 0 ? a->n_ops : 1) * sizeof(mi_op), "programs");
            memcpy(b->ops, a->ops, (size_t)a->n_ops * sizeof(mi_op));
        }
    }
    dst->run_c0 = ints_dup(src->run_c0, src->n_runs);
    dst->run_len = ints_dup(src->run_len, src->n_runs);
}

