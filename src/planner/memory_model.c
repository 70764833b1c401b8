/* CATS Q1 (section 5.2.1, Fig. 4): what each device stores and sends
 * under somegather and under the three baselines the seed compares it with
 * (see planner.h, mi_mem_model_make).
 *
 * Everything is counted per device from equal shares, in bytes:
 *
 *   weights     the stored matrices in the config's dtypes, as the runtime's
 *               loader holds them (model.c mi_shard_weight_bytes): the seed's
 *               "flash";
 *   needed      the part of them a device ever multiplies with once other
 *               ranks' pruned columns never arrive (somegather only);
 *   KV cache    K and V of the device's heads for n_pos positions;
 *   activations what a device must hold while it runs a pass over n_pos
 *               positions at once (the seed's encoder setting, a prefill of
 *               an n_pos prompt): its share of the residual stream, and for
 *               the widest step of a layer the step's input (own columns
 *               plus every column received in the exchange before it) and
 *               the new columns the step writes, plus one row of logits.
 *               Query rows are consumed head by head and not counted; K and
 *               V go to the KV cache. Our runtime works in chunks of
 *               positions and allocates full-width buffers, so its own
 *               footprint differs: this is what the scheme needs, not what
 *               our runtime allocates;
 *   traffic     payload per decoded token under the README's convention:
 *               bytes delivered to a rank that did not have them, so an
 *               allgather counts each column once per receiver (over a
 *               broadcast medium such as the seed's Mixer one transmission
 *               reaches every receiver; the seed's volumes are ours divided
 *               by D-1 for allgathers).
 *
 * Activations and KV cache are fp32 as in our runtime, except where a
 * scheme says otherwise (liu2025communication's 4-bit K/V). */
#include "meshinfer/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/model.h"

#define F32 4.0 /* bytes of an fp32 activation or KV-cache value */

static const char *const scheme_names[MI_MEM_N_SCHEMES] = {"somegather", "token-split", "token-split-4bit",
                                                           "head-split"};
static const char *const scheme_sources[MI_MEM_N_SCHEMES] = {"CATS", "hu2024edge", "liu2025communication",
                                                             "bochem2025distributed"};

const char *mi_mem_scheme_name(int s) { return s >= 0 && s < MI_MEM_N_SCHEMES ? scheme_names[s] : "?"; }
const char *mi_mem_scheme_source(int s) { return s >= 0 && s < MI_MEM_N_SCHEMES ? scheme_sources[s] : "?"; }

/* ------------------------------------------------------------ shares */

/* One device's share of every split axis (counts, and starts where the
 * byte count depends on them). */
typedef struct {
    int c0, nc; /* residual columns of dim (somegather) */
    int nq;     /* head-output columns of n_heads*head_dim: its query heads (wq rows, wo rows or columns) */
    int nkv;    /* K/V columns of n_kv_heads*head_dim (wk, wv rows, KV cache) */
    int nf;     /* FFN units of hidden_dim */
    int nv;     /* classifier rows of vocab_size */
    int nt;     /* positions of the sequence (token split) */
} share;

/* [a, b) of device i when total is cut at floor(total*i/D): the somegather
 * planner's rounding (plan.c plan_somegather). */
static int split_floor(int total, int D, int i)
{
    long a = (long)total * i / D, b = (long)total * (i + 1) / D;
    return (int)(b - a);
}

/* Device i's units when total is split as the tp planner splits over equal
 * devices. */
static int split_nearest(int total, int D, int i)
{
    int *count = mi_malloc((size_t)D * sizeof(int), "split counts");
    mi_split_units(total, NULL, D, count);
    int n = count[i];
    free(count);
    return n;
}

static int n_q(const mi_config *c) { return c->n_heads * c->head_dim; }

/* Somegather: an equal share of every axis (dim/D residual columns,
 * n_heads/D heads, hidden_dim/D units, vocab_size/D classifier rows). Where
 * D divides n_kv_heads these are the planner's whole KV-head groups; other D
 * get fractional heads, which our runtime cannot run. */
static share somegather_share(const mi_config *c, int D, int i)
{
    share s = {0};
    s.c0 = (int)((long)c->dim * i / D);
    s.nc = split_floor(c->dim, D, i);
    s.nq = split_floor(n_q(c), D, i);
    s.nkv = split_floor(mi_kv_dim(c), D, i);
    s.nf = split_floor(c->hidden_dim, D, i);
    s.nv = split_floor(c->vocab_size, D, i);
    return s;
}

/* Alignment units of the tp planner over all layers: KV-head groups per unit
 * (whole blocks of wo columns) and FFN units per unit (whole blocks of w2). */
static int head_align(const mi_config *c)
{
    int a = 1;
    for (int l = 0; l < c->n_layers; l++)
        if (mi_kv_align(c, l) > a)
            a = mi_kv_align(c, l);
    return a;
}
static int ffn_align(const mi_config *c)
{
    int a = 1;
    for (int l = 0; l < c->n_layers; l++)
        if (mi_ffn_align(c, l) > a)
            a = mi_ffn_align(c, l);
    return a;
}

/* Head split (bochem2025distributed, our tp): whole aligned KV-head groups
 * and FFN blocks split as the tp planner does while every device can get
 * one; beyond that, equal fractional columns (weights/D). */
static share head_split_share(const mi_config *c, int D, int i)
{
    share s = {0};
    int ka = head_align(c), fa = ffn_align(c), units = c->n_kv_heads / ka;
    if (D <= units) {
        int g = split_nearest(units, D, i) * ka;
        s.nq = g * mi_kv_group(c) * c->head_dim;
        s.nkv = g * c->head_dim;
    } else {
        s.nq = split_nearest(n_q(c), D, i);
        s.nkv = split_nearest(mi_kv_dim(c), D, i);
    }
    s.nf = D <= c->hidden_dim / fa ? split_nearest(c->hidden_dim / fa, D, i) * fa : split_nearest(c->hidden_dim, D, i);
    s.nv = split_nearest(c->vocab_size, D, i);
    return s;
}

/* Share of a head-split plan's rank (layer 0; the tp planner splits every
 * layer alike unless the layers' dtypes differ). */
static share plan_share(const mi_plan *p, int r)
{
    const mi_config *c = &p->cfg;
    share s = {0};
    for (int k = 0; k < c->n_kv_heads; k++)
        if (p->layers[0].kv_rank[k] == r) {
            s.nq += mi_kv_group(c) * c->head_dim;
            s.nkv += c->head_dim;
        }
    for (int i = 0; i < p->layers[0].n_ffn; i++)
        if (p->layers[0].ffn[i].rank == r)
            s.nf += p->layers[0].ffn[i].n;
    for (int i = 0; i < p->n_cls; i++)
        if (p->cls[i].rank == r)
            s.nv += p->cls[i].n;
    return s;
}

/* Columns a device keeps sending of the n it owns with pruning ratio r: the
 * rule of prune.c (mi_plan_prune), ceil(r * n) left out, so at most (1-r)
 * of them travel (the epsilon keeps 0.1 * 30, 3.0000000000000004 in
 * doubles, from dropping 4). */
static int kept(int n, double r)
{
    return n - (int)ceil(r * n - 1e-9);
}

/* ------------------------------------------------------------ weights */

static double row(const mi_config *c, int l, int mat, int n)
{
    return (double)mi_dtype_row_bytes(c->dtype[l][mat], (size_t)n);
}

/* Fractions of the input columns of each layer matrix a somegather device
 * multiplies with: 1 without pruning. */
typedef struct {
    double attn_in, heads, ffn_in, hidden;
} used_cols;

/* Somegather device weights (model.c mi_shard_weight_bytes of its shard):
 * the embedding columns of its slice (whole blocks covering them), the final
 * norm and its classifier rows (never pruned: the final exchange is whole),
 * and per layer its heads' wq, wk, wv rows, its rows of wo and w2, its FFN
 * units' w1 and w3 rows and the two norms. With u < 1, the input columns
 * other ranks' pruned columns would feed are left out, in proportion (for
 * block dtypes as if the used columns were packed into whole blocks). */
static double somegather_weights(const mi_config *c, const share *s, const used_cols *u)
{
    int series = c->family == MI_FAMILY_PATCHTST; /* docs/patchtst.md: LayerNorm with bias, biases, no w3 */
    double norm = F32 * c->dim * (series ? 2 : 1), bias = series ? F32 : 0, n = 0;
    if (s->nc > 0 && series) {
        n += (double)mi_embedding_bytes(c); /* every device holds the whole patch embedding */
    } else if (s->nc > 0) {
        int a, b;
        mi_emb_cover(c, s->c0, s->nc, &a, &b);
        n += (double)c->vocab_size * (double)mi_dtype_row_bytes(c->emb_dtype, (size_t)(b - a));
    }
    /* a tied classifier is a view of the embeddings when the slice is the whole width (D = 1) */
    if (s->nv > 0)
        n += (series ? 0 : norm) + (c->shared_classifier && s->c0 == 0 && s->nc == c->dim
                                        ? 0.0
                                        : (double)mi_classifier_bytes(c, s->nv));
    for (int l = 0; l < c->n_layers; l++) {
        if (s->nkv > 0)
            n += norm + u->attn_in * (s->nq * row(c, l, MI_WQ, c->dim) +
                                      s->nkv * (row(c, l, MI_WK, c->dim) + row(c, l, MI_WV, c->dim))) +
                 bias * (s->nq + 2 * s->nkv);
        n += u->heads * s->nc * row(c, l, MI_WO, n_q(c)) + bias * s->nc;
        if (s->nf > 0)
            n += norm + u->ffn_in * s->nf * (row(c, l, MI_W1, c->dim) + (double)mi_w3_row_bytes(c, l)) +
                 u->hidden * s->nc * row(c, l, MI_W2, c->hidden_dim) + bias * (s->nf + s->nc);
    }
    return n;
}

/* Head-split device weights (the tp planner's shard, model.c): device 0
 * also embeds (whole embeddings and final norm; with a tied classifier its
 * classifier rows are rows of the embeddings); per layer its heads' wq, wk,
 * wv rows, the wo columns of its heads, its FFN units (w1, w3 rows, w2
 * columns) and the norms of what it holds. */
static double head_split_weights(const mi_config *c, const share *s, int i)
{
    double norm = F32 * c->dim, n = 0;
    if (i == 0)
        n += (double)mi_embedding_bytes(c) + norm;
    else if (s->nv > 0)
        n += norm;
    if (s->nv > 0 && !(i == 0 && c->shared_classifier))
        n += (double)mi_classifier_bytes(c, s->nv);
    for (int l = 0; l < c->n_layers; l++) {
        if (s->nkv > 0)
            n += norm + s->nq * row(c, l, MI_WQ, c->dim) +
                 s->nkv * (row(c, l, MI_WK, c->dim) + row(c, l, MI_WV, c->dim)) +
                 c->dim * row(c, l, MI_WO, n_q(c)) * s->nq / n_q(c);
        if (s->nf > 0)
            n += norm + s->nf * (row(c, l, MI_W1, c->dim) + (double)mi_w3_row_bytes(c, l)) +
                 c->dim * row(c, l, MI_W2, c->hidden_dim) * s->nf / c->hidden_dim;
    }
    return n;
}

/* The whole model as one device holds it (token split keeps it everywhere). */
static double whole_model_weights(const mi_config *c)
{
    mi_layer_spec *layers = mi_malloc((size_t)c->n_layers * sizeof *layers, "layer specs");
    mi_shard_spec spec = mi_shard_spec_full(c, layers);
    double n = (double)mi_shard_weight_bytes(c, &spec);
    free(layers);
    return n;
}

/* ------------------------------------------------------------ somegather */

/* Columns device s owns in exchange kind x (mi_xch_kind). */
static int owned(const share *s, int x)
{
    return x == MI_XCH_HEADS ? s->nq : x == MI_XCH_HIDDEN ? s->nf : s->nc;
}

/* Columns it sends in x: the final exchange is never pruned. */
static int sends(const share *s, int x, double r)
{
    return x == MI_XCH_FINAL ? owned(s, x) : kept(owned(s, x), r);
}

/* Somegather per device. Traffic (somegather.c): per layer four allgathers
 * of the kept columns (each device's message to each of the D-1 others),
 * then the final allgather of the residual and the gather of the logits of
 * every device's classifier rows at device 0. */
static void somegather_model(const mi_config *c, int D, double r, int wire, int N, mi_mem_model *m)
{
    share *sh = mi_malloc((size_t)D * sizeof *sh, "shares");
    for (int i = 0; i < D; i++)
        sh[i] = somegather_share(c, D, i);
    for (int i = 0; i < D; i++) {
        const share *s = &sh[i];
        mi_mem_device *d = &m->dev[i];
        double recv_cols[MI_N_XCH] = {0};
        for (int x = 0; x < MI_N_XCH; x++) {
            double per = (double)mi_wire_row_bytes(wire, (size_t)sends(s, x, r));
            d->sent_bytes += (x == MI_XCH_FINAL ? 1 : c->n_layers) * (D - 1) * per;
            for (int j = 0; j < D; j++)
                if (j != i) {
                    recv_cols[x] += sends(&sh[j], x, r);
                    d->recv_bytes += (x == MI_XCH_FINAL ? 1 : c->n_layers) *
                                     (double)mi_wire_row_bytes(wire, (size_t)sends(&sh[j], x, r));
                }
        }
        if (D > 1 && i > 0) {
            d->sent_bytes += (double)mi_wire_row_bytes(wire, (size_t)s->nv);
            m->dev[0].recv_bytes += (double)mi_wire_row_bytes(wire, (size_t)s->nv);
        }
        /* a receiver multiplies with its own columns and the others' kept ones */
        used_cols all = {1, 1, 1, 1};
        used_cols u = {(s->nc + recv_cols[MI_XCH_ATTN_IN]) / c->dim, (s->nq + recv_cols[MI_XCH_HEADS]) / n_q(c),
                       (s->nc + recv_cols[MI_XCH_FFN_IN]) / c->dim,
                       (s->nf + recv_cols[MI_XCH_HIDDEN]) / c->hidden_dim};
        d->weight_bytes = somegather_weights(c, s, &all);
        d->weight_needed_bytes = somegather_weights(c, s, &u);
        d->kv_bytes = F32 * 2.0 * c->n_layers * s->nkv * N;
        /* steps: attention (XN gathered -> own heads), wo (heads gathered ->
         * own residual columns, added in place), FFN up (XN gathered -> own
         * units), FFN down (hidden gathered -> own residual columns), final
         * norm (the whole residual) */
        double step[] = {s->nc + recv_cols[MI_XCH_ATTN_IN] + s->nq, s->nq + recv_cols[MI_XCH_HEADS],
                         s->nc + recv_cols[MI_XCH_FFN_IN] + s->nf, s->nf + recv_cols[MI_XCH_HIDDEN], c->dim};
        double widest = 0;
        for (size_t k = 0; k < sizeof step / sizeof step[0]; k++)
            widest = fmax(widest, step[k]);
        double logits = i == 0 ? c->vocab_size : s->nv; /* device 0 gathers them all */
        d->act_bytes = F32 * ((double)N * (s->nc + widest) + logits);
    }
    free(sh);
}

/* ------------------------------------------------------------ token split */

/* Bytes of n K or V values as liu2025communication exchanges and keeps
 * them: 4-bit blocks of 32 with an fp16 scale (q4_0, 18 bytes per 32). */
static double q4_bytes(int n)
{
    return (double)((n + MI_QK - 1) / MI_QK) * (MI_QK / 2 + 2);
}

/* Token split (hu2024edge; liu2025communication with low_bit): every device
 * holds the whole model and positions [N*i/D, N*(i+1)/D) of the sequence;
 * per layer it sends its positions' K and V rows to every other device, so
 * each holds the K and V of all N positions (the whole KV cache) and attends
 * for its own positions alone. A decoded token is computed by one device
 * (the one whose share the new position joins, here the last), which sends
 * its K and V row of every layer to the D-1 others; token ids (4 bytes) are
 * not counted, as in our runtime's counters. liu2025communication exchanges
 * and keeps K and V in 4-bit blocks whatever the wire dtype (its
 * "specialized low-precision quantization", CATS section 5.2.1); its
 * weights stay in the config's dtypes, because the seed has its flash as
 * constant as hu2024edge's and credits the quantization to RAM only. */
static void token_split_model(const mi_config *c, int D, int wire, int N, int low_bit, mi_mem_model *m)
{
    int kvd = mi_kv_dim(c);
    double kv_row = low_bit ? q4_bytes(kvd) : (double)mi_wire_row_bytes(wire, (size_t)kvd);
    double kv_keep = low_bit ? q4_bytes(kvd) : F32 * kvd;
    double w = whole_model_weights(c);
    for (int i = 0; i < D; i++) {
        mi_mem_device *d = &m->dev[i];
        int nt = split_floor(N, D, i);
        int decoder = i == D - 1;
        d->weight_bytes = d->weight_needed_bytes = w;
        d->kv_bytes = 2.0 * c->n_layers * (double)N * kv_keep;
        d->sent_bytes = decoder ? 2.0 * c->n_layers * (D - 1) * kv_row : 0.0;
        d->recv_bytes = decoder ? 0.0 : 2.0 * c->n_layers * kv_row;
        /* widest step for its positions: attention (XN -> heads) or FFN up
         * (XN -> hidden); the decoding device also holds the logits */
        double widest = fmax(c->dim + n_q(c), c->dim + c->hidden_dim);
        d->act_bytes = F32 * ((double)nt * (c->dim + widest) + (decoder ? c->vocab_size : 0));
    }
}

/* ------------------------------------------------------------ head split */

/* Head-split traffic per decoded token (headlevel.c compiled for the tp
 * planner): device 0 embeds and broadcasts the residual to the others
 * before layer 0; per layer two allreduces of dim (after wo and after w2)
 * over all D, which a decode step does in one round (runtime.h: every
 * device sends its whole partial to every other, since each message is one
 * small row); then device 0 gathers the others' logits. */
static void head_split_traffic(const mi_config *c, int D, int wire, const share *sh, mi_mem_model *m)
{
    if (D < 2)
        return;
    double x = (double)mi_wire_row_bytes(wire, (size_t)c->dim);
    m->dev[0].sent_bytes += (D - 1) * x;
    for (int i = 1; i < D; i++) {
        m->dev[i].recv_bytes += x;
        double lg = (double)mi_wire_row_bytes(wire, (size_t)sh[i].nv);
        m->dev[i].sent_bytes += lg;
        m->dev[0].recv_bytes += lg;
    }
    for (int i = 0; i < D; i++) {
        m->dev[i].sent_bytes += 2.0 * c->n_layers * (D - 1) * x;
        m->dev[i].recv_bytes += 2.0 * c->n_layers * (D - 1) * x;
    }
}

/* Head-split memory: every device holds the whole residual (an allreduce
 * leaves the same sums everywhere), the KV cache of its heads, and for the
 * widest step: attention (XN -> its heads), wo or FFN down (its columns ->
 * a partial of dim), the reduction (its partial plus the others' partials
 * of its slice: a whole partial with two devices), FFN up (XN -> its
 * units). A pass over N positions reduces as a prefill does (runtime.h:
 * reduce-scatter then allgather), so it holds (D-1) slices of dim/D; the
 * seed's figure has bochem2025distributed's RAM grow linearly with D
 * because an all-to-all allreduce (our one-round decode reduction) holds all
 * D partials, which for one decoded position is negligible here. */
static void head_split_memory(const mi_config *c, int D, int N, const share *sh, mi_mem_model *m)
{
    for (int i = 0; i < D; i++) {
        const share *s = &sh[i];
        mi_mem_device *d = &m->dev[i];
        int c0, len;
        mi_wire_slice(c->dim, D, i, &c0, &len);
        double reduce_in = D < 2 ? 0 : D == 2 ? c->dim : (double)(D - 1) * len;
        double step[] = {c->dim + s->nq, s->nq + c->dim, c->dim + reduce_in, c->dim + s->nf, s->nf + c->dim};
        double widest = 0;
        for (size_t k = 0; k < sizeof step / sizeof step[0]; k++)
            widest = fmax(widest, step[k]);
        double logits = i == 0 ? c->vocab_size : s->nv;
        d->kv_bytes = F32 * 2.0 * c->n_layers * s->nkv * N;
        d->act_bytes = F32 * ((double)N * (c->dim + widest) + logits);
    }
}

/* Our tp planner's plan and programs for D ranks of unlimited memory. */
static int head_split_plan(const mi_config *c, int D, int wire, mi_plan *plan, mi_programs *p, char *err)
{
    mi_cluster cl;
    mi_cluster_default(&cl, D, 1e18);
    mi_plan_options po = {MI_PLANNER_TP, 1, -1, 0, NULL, 0.0, 0, wire, 0, 0, 0, NULL, 0, 0};
    int rc = mi_plan_make(c, &cl, &po, plan, err);
    mi_cluster_free(&cl);
    if (rc)
        return -1;
    if (mi_programs_compile(plan, p, err)) {
        mi_plan_free(plan);
        return -1;
    }
    return 0;
}

static int head_split_model(const mi_config *c, int D, int wire, int N, int formula_only, mi_mem_model *m,
                            char *err)
{
    share *sh = mi_malloc((size_t)D * sizeof *sh, "shares");
    mi_plan plan;
    mi_programs p;
    int programs = m->runnable && !formula_only;
    if (programs && head_split_plan(c, D, wire, &plan, &p, err)) {
        free(sh);
        return -1;
    }
    for (int i = 0; i < D; i++)
        sh[i] = programs ? plan_share(&plan, i) : head_split_share(c, D, i);
    head_split_memory(c, D, N, sh, m);
    if (programs) {
        double sent[MI_MAX_RANKS], recv[MI_MAX_RANKS];
        mi_programs_bytes(&p, MI_PHASE_DECODE, sent, recv);
        for (int i = 0; i < D; i++) {
            size_t w;
            mi_plan_rank_memory(&plan, i, &w, NULL);
            m->dev[i].weight_bytes = m->dev[i].weight_needed_bytes = (double)w;
            m->dev[i].sent_bytes = sent[i];
            m->dev[i].recv_bytes = recv[i];
        }
        mi_programs_free(&p);
        mi_plan_free(&plan);
        m->from_programs = 1;
    } else {
        head_split_traffic(c, D, wire, sh, m);
        for (int i = 0; i < D; i++)
            m->dev[i].weight_bytes = m->dev[i].weight_needed_bytes = head_split_weights(c, &sh[i], i);
    }
    free(sh);
    return 0;
}

/* ------------------------------------------------------------ public */

int mi_mem_runnable(const mi_config *c, int scheme, int D)
{
    if (D < 1)
        return 0;
    if (scheme == MI_MEM_SOMEGATHER)
        return D <= c->n_kv_heads && c->n_kv_heads % D == 0;
    if (scheme == MI_MEM_HEAD_SPLIT)
        return D <= c->n_kv_heads / head_align(c);
    return 0;
}

static int check_query(const mi_config *c, const mi_mem_query *q, char *err)
{
    if (mi_config_validate(c, err))
        return -1;
    if (q->scheme < 0 || q->scheme >= MI_MEM_N_SCHEMES)
        return mi_set_error(err, "memory model: unknown scheme %d", q->scheme);
    if (q->n_devices < 1 || q->n_devices > MI_MAX_RANKS)
        return mi_set_error(err, "memory model: %d devices is outside [1, %d]", q->n_devices, MI_MAX_RANKS);
    if (!(q->prune >= 0 && q->prune < 1))
        return mi_set_error(err, "memory model: pruning ratio %g is outside [0, 1)", q->prune);
    if (q->prune > 0 && q->scheme != MI_MEM_SOMEGATHER)
        return mi_set_error(err, "memory model: pruning applies to somegather only, not %s",
                            mi_mem_scheme_name(q->scheme));
    if (q->wire != MI_F32 && q->wire != MI_F16 && q->wire != MI_Q8_0)
        return mi_set_error(err, "memory model: wire dtype %s is not fp32, fp16 or q8_0", mi_dtype_name(q->wire));
    if (q->n_pos < 1)
        return mi_set_error(err, "memory model: %d positions; it needs at least 1", q->n_pos);
    return 0;
}

/* The largest of each field over the devices, and the totals. */
static void summarize(mi_mem_model *m)
{
    mi_mem_device *x = &m->max;
    memset(x, 0, sizeof *x);
    m->moved_bytes = 0;
    for (int i = 0; i < m->n_devices; i++) {
        mi_mem_device *d = &m->dev[i];
        d->ram_bytes = d->weight_bytes + d->kv_bytes + d->act_bytes;
        x->weight_bytes = fmax(x->weight_bytes, d->weight_bytes);
        x->weight_needed_bytes = fmax(x->weight_needed_bytes, d->weight_needed_bytes);
        x->kv_bytes = fmax(x->kv_bytes, d->kv_bytes);
        x->act_bytes = fmax(x->act_bytes, d->act_bytes);
        x->ram_bytes = fmax(x->ram_bytes, d->ram_bytes);
        x->sent_bytes = fmax(x->sent_bytes, d->sent_bytes);
        x->recv_bytes = fmax(x->recv_bytes, d->recv_bytes);
        m->moved_bytes += d->sent_bytes;
    }
}

int mi_mem_model_make(const mi_config *c, const mi_mem_query *q, mi_mem_model *m, char *err)
{
    if (check_query(c, q, err))
        return -1;
    memset(m, 0, sizeof *m);
    m->scheme = q->scheme;
    m->n_devices = q->n_devices;
    m->prune = q->prune;
    m->wire = q->wire;
    m->n_pos = q->n_pos;
    m->runnable = mi_mem_runnable(c, q->scheme, q->n_devices);
    switch (q->scheme) {
    case MI_MEM_SOMEGATHER: somegather_model(c, q->n_devices, q->prune, q->wire, q->n_pos, m); break;
    case MI_MEM_TOKEN_SPLIT: token_split_model(c, q->n_devices, q->wire, q->n_pos, 0, m); break;
    case MI_MEM_TOKEN_SPLIT_4BIT: token_split_model(c, q->n_devices, q->wire, q->n_pos, 1, m); break;
    default:
        if (head_split_model(c, q->n_devices, q->wire, q->n_pos, q->formula_only, m, err))
            return -1;
    }
    summarize(m);
    return 0;
}
