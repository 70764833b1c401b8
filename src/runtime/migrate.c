/* Re-placement in the middle of a sequence (see runtime.h mi_runtime_replan). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"

/* HeadSplit "Memory needs active management": every rank stages the KV rows
 * [0, n_pos) of the heads it holds, drops its old shard (so a device never
 * holds two placements at once), loads its shard of the new plan, and KV
 * heads whose owner changed are sent old owner -> new owner. Messages between
 * a pair are posted in the same (layer, KV head, K then V) order on both
 * sides, so one tag suffices (MPI keeps them in order). */
void rt_replan_local(mi_runtime *rt, const mi_plan *np, const mi_programs *prog, int n_pos)
{
    const mi_config *c = &rt->plan.cfg;
    int L = c->n_layers, nkv = c->n_kv_heads;
    /* with several KV slots (serve's batch) positions [0, n_pos) of every slot:
     * the slots before the last whole, one message per head still */
    size_t S = mi_config_kv_stride(c), hd = (size_t)c->head_dim;
    size_t rows = ((size_t)(mi_config_kv_slots(c) - 1) * (size_t)c->seq_len + (size_t)n_pos) * hd;
    double t0 = mi_now();
    /* What stays on this rank is kept in place, weights and KV cache alike;
     * with --weights scatter rank 0 streams every shard again instead. */
    mi_layer_spec *ol = mi_malloc(2 * (size_t)L * sizeof *ol, "layer specs");
    mi_shard_spec os, ns;
    memset(&os, 0, sizeof os);
    memset(&ns, 0, sizeof ns);
    os.layers = ol;
    ns.layers = ol + L;
    mi_plan_shard(&rt->plan, rt->rank, &os);
    mi_plan_shard(np, rt->rank, &ns);
    unsigned char *keep = mi_calloc((size_t)L, 1, "kept layers");
    mi_layer *kept = mi_calloc((size_t)L, sizeof *kept, "kept layers");
    for (int l = 0; l < L && !rt->opt.scatter; l++) {
        const mi_layer_spec *a = &os.layers[l];
        keep[l] = (a->n_kv || a->proj || a->nf) && !memcmp(a, &ns.layers[l], sizeof *a) &&
                  !memcmp(c->dtype[l], np->cfg.dtype[l], sizeof c->dtype[l]) &&
                  rt->plan.layers[l].ffn_pruned == np->layers[l].ffn_pruned &&
                  (!rt->plan.layers[l].ffn_pruned || rt->plan.ffn_shard == np->ffn_shard);
        if (keep[l]) {
            kept[l] = rt->model.layers[l];
            memset(&rt->model.layers[l], 0, sizeof kept[l]); /* teardown must not free it */
        }
    }
    mi_model g = rt->model; /* embeddings, final norm, classifier */
    int keep_g = !rt->opt.scatter && (os.embeddings || os.emb_nc || os.emb_nv || os.cls_nv) &&
                 os.embeddings == ns.embeddings && os.emb_c0 == ns.emb_c0 && os.emb_nc == ns.emb_nc &&
                 os.emb_v0 == ns.emb_v0 && os.emb_nv == ns.emb_nv && os.cls_v0 == ns.cls_v0 && os.cls_nv == ns.cls_nv;
    if (keep_g)
        rt->model.arena = NULL; /* teardown must not free it */
    int *old_owner = mi_malloc((size_t)L * nkv * sizeof(int), "old KV owners");
    float **stage = mi_calloc((size_t)L * nkv, sizeof(float *), "KV staging");
    for (int l = 0; l < L; l++) {
        memcpy(old_owner + (size_t)l * nkv, rt->plan.layers[l].kv_rank, (size_t)nkv * sizeof(int));
        const mi_layer *ly = &rt->model.layers[l];
        for (int i = 0; i < ly->spec.n_kv && rows > 0 && !keep[l]; i++) {
            float *b = mi_malloc(2 * rows * sizeof(float), "KV staging");
            memcpy(b, ly->k_cache + (size_t)i * S * hd, rows * sizeof(float));
            memcpy(b + rows, ly->v_cache + (size_t)i * S * hd, rows * sizeof(float));
            stage[(size_t)l * nkv + ly->spec.kv[i]] = b;
        }
    }
    mi_rank_metrics m = rt->m;
    rt_teardown(rt);
    rt->keep_layers = keep;
    rt->keep_globals = keep_g;
    rt_setup_shard(rt, np, prog);
    rt->keep_layers = NULL;
    rt->keep_globals = 0;
    for (int l = 0; l < L; l++)
        if (keep[l])
            rt->model.layers[l] = kept[l];
    if (keep_g) {
        rt->model.has_embeddings = g.has_embeddings;
        rt->model.tok_embeddings = g.tok_embeddings;
        rt->model.emb_c0 = g.emb_c0;
        rt->model.emb_nc = g.emb_nc;
        rt->model.emb_skip = g.emb_skip;
        rt->model.emb_v0 = g.emb_v0;
        rt->model.emb_nv = g.emb_nv;
        rt->model.pos_embed = g.pos_embed;
        rt->model.norm_b = g.norm_b;
        rt->model.rope_freqs = g.rope_freqs;
        rt->model.norm = g.norm;
        rt->model.classifier = g.classifier;
        rt->model.cls_alias = g.cls_alias;
        rt->model.cls_v0 = g.cls_v0;
        rt->model.cls_nv = g.cls_nv;
        rt->model.arena = g.arena;
        rt->model.arena_bytes = g.arena_bytes;
    }
    rt->model.weight_bytes = mi_shard_weight_bytes(c, &ns);
    rt->model.kv_bytes = mi_shard_kv_bytes(c, &ns);
    m.weight_bytes = (double)rt->model.weight_bytes;
    m.kv_bytes = (double)rt->model.kv_bytes;
    m.rss_weights = rt->m.rss_weights;
    rt->m = m;
    rt_setup_rest(rt);
    MPI_Request *req = mi_malloc(4 * (size_t)L * nkv * sizeof(MPI_Request), "KV move requests");
    int nr = 0;
    for (int l = 0; l < L && rows > 0; l++) {
        mi_layer *ly = &rt->model.layers[l];
        for (int i = 0; i < ly->spec.n_kv && !keep[l]; i++) {
            int k = ly->spec.kv[i], o = old_owner[(size_t)l * nkv + k];
            float *kd = ly->k_cache + (size_t)i * S * hd, *vd = ly->v_cache + (size_t)i * S * hd;
            if (o == rt->rank) {
                const float *b = stage[(size_t)l * nkv + k];
                memcpy(kd, b, rows * sizeof(float));
                memcpy(vd, b + rows, rows * sizeof(float));
            } else {
                MPI_Irecv(kd, (int)rows, MPI_FLOAT, o, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
                MPI_Irecv(vd, (int)rows, MPI_FLOAT, o, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
                rt->m.moved_bytes_recv += 2.0 * rows * sizeof(float);
            }
        }
        for (int k = 0; k < nkv; k++) {
            const float *b = stage[(size_t)l * nkv + k];
            int to = rt->plan.layers[l].kv_rank[k];
            if (!b || to == rt->rank)
                continue;
            MPI_Isend(b, (int)rows, MPI_FLOAT, to, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
            MPI_Isend(b + rows, (int)rows, MPI_FLOAT, to, TAG_KV_MOVE, MPI_COMM_WORLD, &req[nr++]);
            rt->m.moved_bytes_sent += 2.0 * rows * sizeof(float);
        }
    }
    if (nr)
        MPI_Waitall(nr, req, MPI_STATUSES_IGNORE);
    free(req);
    for (size_t i = 0; i < (size_t)L * nkv; i++)
        free(stage[i]);
    free(stage);
    free(old_owner);
    free(keep);
    free(kept);
    free(ol);
    double t1 = mi_now();
    rt->m.replans += 1;
    rt->m.replan_s += t1 - t0;
    rt_record(rt, TRACE_REPLAN, -1, t0, t1);
}

