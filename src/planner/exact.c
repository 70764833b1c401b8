/* The exact placement planner (`--planner exact`, plan.h MI_PLANNER_EXACT):
 * HeadSplit's head-level placement as a mixed-integer program solved with
 * GLPK (planners.h mi_plan_exact_fill), for a few devices ("with 3 to 5 devices, our heuristic was within
 * 15 to 20 percent of an exact solver").
 *
 * The placement: every KV head of every layer on one rank, and per layer
 * the projection on one rank and the FFN whole on one rank (greedy's units).
 * The objective is the decode step as the cost model walks the head-level
 * programs (partition/headlevel.c) at context kv_positions / 2, which for
 * these plans is a chain through the layers: layer l's output X_l is ready
 * on its FFN rank q_l at
 *   S_l = max( max over head ranks w of X_{l-1} + b(q_{l-1}, w) + att_w + put(w, p_l),
 *              X_{l-1} + b(q_{l-1}, p_l),
 *              max over head ranks w of the window post reaching w: lat(0, p_l) + lat(p_l, w) + put(w, p_l) )
 *   X_l = S_l + proj(p_l) + b(p_l, q_l) + ffn(q_l)
 * and the step ends after b(q_{L-1}, 0) and rank 0's final norm and logits;
 * b is a message of X (latency, the eager limit's round trip, bytes over
 * bandwidth; 0 on one rank), att and put linear in the rank's KV heads, the
 * compute times mi_op_compute_s's. The maxima and the pairs (q_{l-1}, p_l),
 * (p_l, q_l) are big-M constraints on one-hot choices. Memory: every rank's
 * weights and KV cache for kv_positions within its budget, rank 0 holding
 * the embeddings and classifier. */
#include "planners.h"

#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"

typedef struct {
    int *ia, *ja;
    double *ar;
    int n, cap, rows;
    int bad;           /* a coefficient or bound that is not finite (figures GLPK must not see) */
    glp_prob *lp;
} milp;

static void coef(milp *m, int col, double v)
{
    if (m->n + 1 >= m->cap) {
        m->cap = m->cap ? 2 * m->cap : 4096;
        m->ia = realloc(m->ia, (size_t)m->cap * sizeof(int));
        m->ja = realloc(m->ja, (size_t)m->cap * sizeof(int));
        m->ar = realloc(m->ar, (size_t)m->cap * sizeof(double));
        if (!m->ia || !m->ja || !m->ar)
            mi_fatal("out of memory (exact planner)");
    }
    if (!isfinite(v)) {
        m->bad = 1;
        v = 0;
    }
    m->n++;
    m->ia[m->n] = m->rows;
    m->ja[m->n] = col;
    m->ar[m->n] = v;
}

/* A new row: its coefficients follow; type GLP_LO (>= v), GLP_UP (<= v) or GLP_FX (= v). */
static void row(milp *m, int type, double v)
{
    if (!isfinite(v)) {
        m->bad = 1;
        v = 0;
    }
    m->rows = glp_add_rows(m->lp, 1);
    glp_set_row_bnds(m->lp, m->rows, type, type == GLP_UP ? 0 : v, type == GLP_LO ? 0 : v);
}

/* Weight bytes of one layer-l spec on its own (plus whatever an empty spec holds). */
static double spec_bytes(const mi_config *c, int l, int n_kv, int proj, int nf, int emb, double *kv)
{
    mi_layer_spec *ls = mi_calloc((size_t)c->n_layers, sizeof *ls, "layer specs");
    mi_shard_spec s = {.layers = ls, .embeddings = emb, .cls_v0 = 0, .cls_nv = emb ? c->vocab_size : 0};
    if (l >= 0) {
        ls[l].n_kv = n_kv;
        for (int k = 0; k < n_kv; k++)
            ls[l].kv[k] = (unsigned char)k;
        ls[l].proj = proj;
        ls[l].nf = nf;
    }
    double w = (double)mi_shard_weight_bytes(c, &s);
    if (kv)
        *kv = (double)mi_shard_kv_bytes(c, &s);
    free(ls);
    return w;
}

/* Seconds of X from rank a to rank b (0 on one rank). */
static double x_msg(const mi_cluster *cl, int a, int b, double bytes)
{
    if (a == b)
        return 0;
    return mi_cluster_latency(cl, a, b) * (bytes > cl->eager_bytes ? 3 : 1) + bytes / mi_cluster_bandwidth(cl, a, b);
}

static double op_cost(const mi_plan *pl, const mi_cluster *cl, int r, int kind, int l, int n, int ni, int ctx)
{
    mi_op op;
    memset(&op, 0, sizeof op);
    op.kind = (unsigned char)kind;
    op.layer = (short)l;
    op.n = n;
    op.ni = ni;
    op.xid = -1;
    return mi_op_compute_s(pl, &op, cl, r, 1, ctx);
}

/* The branch and bound's callback: the best open node's bound, kept as the search goes (the tree is gone
 * when glp_intopt returns, and the bound only rises, so the last one seen is a valid lower bound). */
static void track_bound(glp_tree *tree, void *info)
{
    double *bound = info;
    /* the best active node changes only as nodes are chosen: read it then,
     * not on every cut, heuristic and branching callback too */
    if (glp_ios_reason(tree) != GLP_ISELECT)
        return;
    int p = glp_ios_best_node(tree);
    if (p) {
        double b = glp_ios_node_bound(tree, p);
        if (isfinite(b) && fabs(b) < 1e300 && !(b <= *bound))
            *bound = b;
    }
}

int mi_plan_exact_fill(mi_plan *plan, const mi_cluster *cl, double time_limit_s, mi_exact_info *info, char *err)
{
    const mi_config *c = &plan->cfg;
    int R = plan->n_ranks, L = c->n_layers, K = c->n_kv_heads, cw = plan->controller_works;
    if (R > MI_EXACT_MAX_RANKS)
        return mi_set_error(err, "exact planner: %d devices; it solves at most %d (the program grows with devices "
                                 "squared per layer; use greedy)", R, MI_EXACT_MAX_RANKS);
    if (mi_config_is_moe(c) || c->family == MI_FAMILY_PATCHTST || plan->split_vocab)
        return mi_set_error(err, "exact planner: it places KV heads, projections and whole FFNs of a language model "
                                 "with the vocabulary on rank 0 (not %s)", plan->split_vocab ? "a split vocabulary"
                            : mi_config_is_moe(c) ? "a mixture of experts" : "a time-series model");
    int wk[MI_EXACT_MAX_RANKS], W = 0;
    for (int r = cw ? 0 : 1; r < R; r++)
        wk[W++] = r;
    int ctx = plan->kv_positions / 2, g = mi_kv_group(c);
    double xb = (double)mi_wire_row_bytes(plan->wire, (size_t)c->dim),
           hb = (double)mi_wire_row_bytes(plan->wire, (size_t)(g * c->head_dim));
    if (K * hb > cl->eager_bytes)
        return mi_set_error(err, "exact planner: a rank's head outputs (up to %.0f bytes) may pass the eager limit "
                                 "(%.0f bytes), whose extra round trip the program does not model", K * hb,
                            cl->eager_bytes);
    /* compute times: attention fixed + per KV head, projection, FFN; rank 0's own */
    double (*att0)[MI_EXACT_MAX_RANKS] = mi_calloc((size_t)L * 5, sizeof *att0, "exact planner");
    double (*att1)[MI_EXACT_MAX_RANKS] = att0 + L, (*proj)[MI_EXACT_MAX_RANKS] = att0 + 2 * L,
           (*ffn)[MI_EXACT_MAX_RANKS] = att0 + 3 * L;
    int nq = c->n_heads * c->head_dim, H = mi_plan_ffn_units(c);
    for (int l = 0; l < L; l++)
        for (int i = 0; i < W; i++) {
            int r = wk[i];
            double t1 = op_cost(plan, cl, r, MI_OP_ATTN, l, g * c->head_dim, 0, ctx),
                   t2 = op_cost(plan, cl, r, MI_OP_ATTN, l, 2 * g * c->head_dim, 0, ctx);
            att1[l][i] = t2 - t1;
            att0[l][i] = t1 - att1[l][i] + op_cost(plan, cl, r, MI_OP_NORM, l, c->dim, 0, ctx);
            proj[l][i] = op_cost(plan, cl, r, MI_OP_PROJ, l, c->dim, nq, ctx) +
                         (c->post_norms ? op_cost(plan, cl, r, MI_OP_ADD, l, c->dim, 0, ctx) : 0);
            ffn[l][i] = op_cost(plan, cl, r, MI_OP_NORM, l, c->dim, 0, ctx) +
                        op_cost(plan, cl, r, MI_OP_FFN_UP, l, H, 0, ctx) +
                        op_cost(plan, cl, r, MI_OP_FFN_DOWN, l, c->dim, H, ctx) +
                        op_cost(plan, cl, r, MI_OP_ADD, l, c->dim, 0, ctx);
        }
    double t_embed = op_cost(plan, cl, 0, MI_OP_EMBED, -1, c->dim, 0, ctx),
           tail = op_cost(plan, cl, 0, MI_OP_NORM, -1, c->dim, 0, ctx) +
                  op_cost(plan, cl, 0, MI_OP_LOGITS, -1, c->vocab_size, 0, ctx);
    /* memory: per KV head, per layer's attention (norms), projection, FFN; rank 0's tables */
    double empty = spec_bytes(c, -1, 0, 0, 0, 0, NULL), base0 = spec_bytes(c, -1, 0, 0, 0, 1, NULL);
    double *mh = mi_calloc((size_t)L * 4, sizeof(double), "exact planner"), *mf = mh + L, *mp = mh + 2 * L,
           *mffn = mh + 3 * L;
    int horizon = plan->kv_positions;
    for (int l = 0; l < L; l++) {
        double kv1, w1 = spec_bytes(c, l, 1, 0, 0, 0, &kv1), w2 = spec_bytes(c, l, K > 1 ? 2 : 1, 0, 0, 0, NULL);
        double per = K > 1 ? w2 - w1 : w1 - empty;
        mh[l] = per + kv1 / c->seq_len * horizon;
        mf[l] = w1 - empty - per;
        mp[l] = spec_bytes(c, l, 0, MI_PROJ_FULL, 0, 0, NULL) - empty;
        mffn[l] = spec_bytes(c, l, 0, 0, c->hidden_dim, 0, NULL) - empty;
    }
    int rc = 0;
    if (!cw && base0 > cl->dev[0].mem_bytes)
        rc = mi_set_error(err, "plan does not fit: the controller (rank 0) needs %.0f bytes for the embeddings and "
                               "classifier but its budget is %.0f bytes", base0, cl->dev[0].mem_bytes);
    /* columns */
    int cx = 1, cu = cx + L * K * W, cP = cu + L * W, cQ = cP + L * W, cS = cQ + L * W, cX = cS + L,
        cY = cX + L, ncol = cY + L * W * W - 1;
#define X_(l, k, i) (cx + ((l) * K + (k)) * W + (i))
#define U_(l, i) (cu + (l) * W + (i))
#define P_(l, i) (cP + (l) * W + (i))
#define Q_(l, i) (cQ + (l) * W + (i))
#define Y_(l, w, p) (cY + ((l) * W + (w)) * W + (p))
    milp m = {0};
    m.lp = glp_create_prob();
    glp_set_obj_dir(m.lp, GLP_MIN);
    glp_add_cols(m.lp, ncol);
    for (int j = 1; j <= ncol; j++) {
        int binary = j < cS && !(j >= cu && j < cP);
        if (binary)
            glp_set_col_kind(m.lp, j, GLP_BV);
        else
            glp_set_col_bnds(m.lp, j, j < cS ? GLP_DB : GLP_LO, 0, 1); /* u in [0, 1]; times, y >= 0 */
    }
    glp_set_obj_coef(m.lp, cX + L - 1, 1);
    for (int i = 0; i < W; i++) {
        double b = x_msg(cl, wk[i], 0, xb);
        m.bad |= !isfinite(b);
        glp_set_obj_coef(m.lp, Q_(L - 1, i), isfinite(b) ? b : 0);
    }
    m.bad |= !isfinite(tail);
    glp_set_obj_coef(m.lp, 0, isfinite(tail) ? tail : 0);
    for (int l = 0; l < L; l++) {
        for (int k = 0; k < K; k++) { /* each KV head on one rank, which then attends */
            row(&m, GLP_FX, 1);
            for (int i = 0; i < W; i++)
                coef(&m, X_(l, k, i), 1);
            for (int i = 0; i < W; i++) {
                row(&m, GLP_LO, 0);
                coef(&m, U_(l, i), 1);
                coef(&m, X_(l, k, i), -1);
            }
        }
        row(&m, GLP_FX, 1);
        for (int i = 0; i < W; i++)
            coef(&m, P_(l, i), 1);
        row(&m, GLP_FX, 1);
        for (int i = 0; i < W; i++)
            coef(&m, Q_(l, i), 1);
        /* S_l >= X_{l-1} (rank 0's embedding before layer 0) and X_l >= S_l + proj(p_l) + ffn(q_l): every big M
         * below is then the row's own largest term, which keeps the relaxation tight */
        row(&m, GLP_LO, l ? 0 : t_embed);
        coef(&m, cS + l, 1);
        if (l)
            coef(&m, cX + l - 1, -1);
        row(&m, GLP_LO, 0);
        coef(&m, cX + l, 1);
        coef(&m, cS + l, -1);
        for (int i = 0; i < W; i++) {
            coef(&m, P_(l, i), -proj[l][i]);
            coef(&m, Q_(l, i), -ffn[l][i]);
        }
        double bmax = 0; /* the largest X message into the layer */
        for (int q = 0; q < W; q++)
            for (int w = 0; w < W; w++)
                bmax = fmax(bmax, x_msg(cl, l ? wk[q] : 0, wk[w], xb));
        /* w's heads reach the projection rank p_l: S_l >= X_{l-1} + b(q_{l-1}, w) + att(w) + put(w, p_l), and
         * not before p_l's window post has reached w; written without a big M, every choice's term times
         * (its indicators - 1), which is the term where they hold and at most 0 elsewhere */
        for (int w = 0; w < W; w++) {
            double ub = 0, lat_sum = 0, post_sum = 0;
            for (int q = 0; q < (l ? W : 1); q++)
                ub += x_msg(cl, l ? wk[q] : 0, wk[w], xb);
            for (int p = 0; p < W; p++)
                if (p != w) {
                    lat_sum += mi_cluster_latency(cl, wk[w], wk[p]);
                    post_sum += mi_cluster_latency(cl, 0, wk[p]) + mi_cluster_latency(cl, wk[p], wk[w]) +
                                mi_cluster_latency(cl, wk[w], wk[p]);
                }
            /* y(w, p) >= n_w - K (1 - P_p): the heads w sends p when p projects (n_w P_p, bilinear) */
            for (int p = 0; p < W; p++)
                if (p != w) {
                    row(&m, GLP_LO, -K);
                    coef(&m, Y_(l, w, p), 1);
                    for (int k = 0; k < K; k++)
                        coef(&m, X_(l, k, w), -1);
                    coef(&m, P_(l, p), -K);
                }
            row(&m, GLP_LO, (l ? -ub : t_embed) - lat_sum);
            coef(&m, cS + l, 1);
            if (l) {
                coef(&m, cX + l - 1, -1);
                for (int q = 0; q < W; q++)
                    coef(&m, Q_(l - 1, q), -x_msg(cl, wk[q], wk[w], xb));
            }
            coef(&m, U_(l, w), -(ub + att0[l][w] + lat_sum));
            for (int k = 0; k < K; k++)
                coef(&m, X_(l, k, w), -att1[l][w]);
            for (int p = 0; p < W; p++)
                if (p != w) {
                    coef(&m, P_(l, p), -mi_cluster_latency(cl, wk[w], wk[p]));
                    coef(&m, Y_(l, w, p), -hb / mi_cluster_bandwidth(cl, wk[w], wk[p]));
                }
            row(&m, GLP_LO, -post_sum);
            coef(&m, cS + l, 1);
            coef(&m, U_(l, w), -post_sum);
            for (int p = 0; p < W; p++)
                if (p != w) {
                    coef(&m, P_(l, p), -(mi_cluster_latency(cl, 0, wk[p]) + mi_cluster_latency(cl, wk[p], wk[w]) +
                                         mi_cluster_latency(cl, wk[w], wk[p])));
                    coef(&m, Y_(l, w, p), -hb / mi_cluster_bandwidth(cl, wk[w], wk[p]));
                }
        }
        for (int p = 0; p < W; p++) {
            /* the same per pair (w, p) with a big M, the row's own largest term: another relaxation, which
             * the search prunes with where links are slow */
            for (int w = 0; w < W; w++) {
                double put_lat = w == p ? 0 : mi_cluster_latency(cl, wk[w], wk[p]),
                       put_b = w == p ? 0 : hb / mi_cluster_bandwidth(cl, wk[w], wk[p]), bmax = 0;
                for (int q = 0; q < (l ? W : 1); q++)
                    bmax = fmax(bmax, x_msg(cl, l ? wk[q] : 0, wk[w], xb));
                double big = bmax + att0[l][w] + K * (att1[l][w] + put_b) + put_lat;
                row(&m, GLP_LO, att0[l][w] + put_lat - 2 * big + (l ? 0 : t_embed + x_msg(cl, 0, wk[w], xb)));
                coef(&m, cS + l, 1);
                if (l) {
                    coef(&m, cX + l - 1, -1);
                    for (int q = 0; q < W; q++)
                        coef(&m, Q_(l - 1, q), -x_msg(cl, wk[q], wk[w], xb));
                }
                for (int k = 0; k < K; k++)
                    coef(&m, X_(l, k, w), -(att1[l][w] + put_b));
                coef(&m, U_(l, w), -big);
                coef(&m, P_(l, p), -big);
            }
            /* p itself needs X: S_l >= X_{l-1} + b(q_{l-1}, p) */
            for (int q = 0; q < (l ? W : 1); q++) {
                double b = x_msg(cl, l ? wk[q] : 0, wk[p], xb);
                if (b <= 0)
                    continue;
                row(&m, GLP_LO, b - (l ? 2 : 1) * b + (l ? 0 : t_embed));
                coef(&m, cS + l, 1);
                if (l) {
                    coef(&m, cX + l - 1, -1);
                    coef(&m, Q_(l - 1, q), -b);
                }
                coef(&m, P_(l, p), -b);
            }
            /* and X from p to q: X_l >= S_l + proj(p_l) + ffn(q_l) + b(p, q) (P + Q - 1) */
            for (int q = 0; q < W; q++) {
                double b = x_msg(cl, wk[p], wk[q], xb);
                if (b <= 0)
                    continue;
                row(&m, GLP_LO, -b);
                coef(&m, cX + l, 1);
                coef(&m, cS + l, -1);
                for (int i = 0; i < W; i++) { /* (one coefficient per column and row) */
                    coef(&m, P_(l, i), -proj[l][i] - (i == p ? b : 0));
                    coef(&m, Q_(l, i), -ffn[l][i] - (i == q ? b : 0));
                }
            }
        }
    }
    /* interchangeable workers (the same compute, budget and links): the lower one holds at least as many
     * units, which any placement can be relabelled to satisfy; it spares the search their permutations */
    for (int i = 0; i + 1 < W; i++) {
        int a = wk[i], b = wk[i + 1], same = cl->dev[a].mem_bytes == cl->dev[b].mem_bytes;
        for (int l = 0; l < L && same; l++)
            same = att0[l][i] == att0[l][i + 1] && att1[l][i] == att1[l][i + 1] && proj[l][i] == proj[l][i + 1] &&
                   ffn[l][i] == ffn[l][i + 1];
        for (int r = 0; r < R && same; r++)
            if (r != a && r != b)
                same = mi_cluster_latency(cl, a, r) == mi_cluster_latency(cl, b, r) &&
                       mi_cluster_latency(cl, r, a) == mi_cluster_latency(cl, r, b) &&
                       mi_cluster_bandwidth(cl, a, r) == mi_cluster_bandwidth(cl, b, r) &&
                       mi_cluster_bandwidth(cl, r, a) == mi_cluster_bandwidth(cl, r, b);
        same = same && mi_cluster_latency(cl, a, b) == mi_cluster_latency(cl, b, a) &&
               mi_cluster_bandwidth(cl, a, b) == mi_cluster_bandwidth(cl, b, a);
        if (!same)
            continue;
        row(&m, GLP_LO, 0);
        for (int l = 0; l < L; l++) {
            for (int k = 0; k < K; k++) {
                coef(&m, X_(l, k, i), 1);
                coef(&m, X_(l, k, i + 1), -1);
            }
            coef(&m, P_(l, i), 1);
            coef(&m, P_(l, i + 1), -1);
            coef(&m, Q_(l, i), 1);
            coef(&m, Q_(l, i + 1), -1);
        }
    }
    for (int i = 0; i < W; i++) { /* budgets */
        int r = wk[i];
        row(&m, GLP_UP, (cl->dev[r].mem_bytes - (r == 0 ? base0 : empty)) / 1e6);
        for (int l = 0; l < L; l++) {
            for (int k = 0; k < K; k++)
                coef(&m, X_(l, k, i), mh[l] / 1e6);
            coef(&m, U_(l, i), mf[l] / 1e6);
            coef(&m, P_(l, i), mp[l] / 1e6);
            coef(&m, Q_(l, i), mffn[l] / 1e6);
        }
    }
    if (!rc && m.bad)
        rc = mi_set_error(err, "exact planner: the cluster's figures give times or sizes that are not finite");
    if (!rc) {
        glp_load_matrix(m.lp, m.n, m.ia, m.ja, m.ar);
        glp_iocp parm;
        glp_init_iocp(&parm);
        parm.msg_lev = GLP_MSG_OFF;
        parm.presolve = GLP_ON;
        parm.fp_heur = GLP_ON; /* the feasibility pump: a first placement soon, for the time limit to keep */
        parm.mir_cuts = GLP_ON;
        parm.tm_lim = (int)(1000 * (time_limit_s > 0 ? time_limit_s : MI_EXACT_TIME_S));
        double bound = NAN;
        parm.cb_func = track_bound;
        parm.cb_info = &bound;
        double t0 = mi_now();
        int st = glp_intopt(m.lp, &parm), ms = glp_mip_status(m.lp);
        if (info) {
            info->seconds = mi_now() - t0;
            info->optimal = st == 0 && ms == GLP_OPT;
            info->objective_s = ms == GLP_OPT || ms == GLP_FEAS ? glp_mip_obj_val(m.lp) : NAN;
            /* proven: the bound is the objective (GLPK's own tolerance, mip_gap 0, aside) */
            info->bound_s = info->optimal ? info->objective_s : isnan(bound) ? NAN : fmin(bound, info->objective_s);
            info->rows = m.rows;
            info->cols = ncol;
        }
        if (ms != GLP_OPT && ms != GLP_FEAS)
            rc = st == GLP_ETMLIM
                     ? mi_set_error(err, "the exact planner's time limit (%.2f s) ran out before it found any "
                                         "placement within the budgets: give it more time (--exact-seconds)",
                                    time_limit_s > 0 ? time_limit_s : MI_EXACT_TIME_S)
                     : mi_set_error(err, "plan does not fit: the exact planner found no placement within the budgets");
    }
    for (int l = 0; l < L && !rc; l++) {
        mi_layer_plan *lp = &plan->layers[l];
        for (int k = 0; k < K; k++)
            for (int i = 0; i < W; i++)
                if (glp_mip_col_val(m.lp, X_(l, k, i)) > 0.5)
                    lp->kv_rank[k] = wk[i];
        lp->n_ffn = 1;
        lp->ffn = mi_malloc(sizeof(mi_slice), "plan FFN slices");
        for (int i = 0; i < W; i++) {
            if (glp_mip_col_val(m.lp, P_(l, i)) > 0.5)
                lp->proj_rank = wk[i];
            if (glp_mip_col_val(m.lp, Q_(l, i)) > 0.5)
                lp->ffn[0] = (mi_slice){wk[i], 0, H};
        }
    }
#undef X_
#undef U_
#undef P_
#undef Q_
#undef Y_
    glp_delete_prob(m.lp);
    free(m.ia);
    free(m.ja);
    free(m.ar);
    free(att0);
    free(mh);
    return rc ? -1 : 0;
}
