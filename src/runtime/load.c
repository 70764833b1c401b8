/* Loading this rank's shard of the plan: every rank reads its own
 * hyperslabs of the model file, or (--weights scatter) rank 0 reads every
 * shard and streams it to its rank (devices without a copy of the model). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "meshinfer/common.h"
#include "meshinfer/model_file.h"

typedef struct {
    mi_model_file *mf;
    int dest;
    size_t piece;
} send_ctx;

/* Shards travel as the raw stored bytes (any dtype), in pieces of at most
 * 1 GiB so that counts fit an int (runtime.h scatter_piece: smaller ones). */
#define PIECE ((size_t)1 << 30)

static int fetch_and_send(void *ctx, const char *name, size_t row0, size_t nrows, size_t row_bytes, size_t byte0,
                          size_t nbytes, void *out, char *err)
{
    send_ctx *sc = ctx;
    if (mi_model_read_raw_cols(sc->mf, name, row0, nrows, row_bytes, byte0, nbytes, out, err))
        mi_fatal("%s", err); /* the receiver is blocked in MPI_Recv: abort the job */
    size_t n = nrows * nbytes, piece = sc->piece;
    for (size_t off = 0; off < n; off += piece)
        MPI_Send((char *)out + off, (int)(n - off < piece ? n - off : piece), MPI_BYTE, sc->dest, 7, MPI_COMM_WORLD);
    return 0;
}

static int fetch_recv(void *ctx, const char *name, size_t row0, size_t nrows, size_t row_bytes, size_t byte0,
                      size_t nbytes, void *out, char *err)
{
    (void)name, (void)row0, (void)row_bytes, (void)byte0, (void)err;
    size_t n = nrows * nbytes, piece = *(const size_t *)ctx;
    for (size_t off = 0; off < n; off += piece)
        MPI_Recv((char *)out + off, (int)(n - off < piece ? n - off : piece), MPI_BYTE, 0, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    return 0;
}

/* Voltron computation scaling: the layers this plan holds in other dtypes
 * than the file's are re-encoded after loading (a layer raised back to its
 * stored dtype was reloaded from the file, so it comes back exact). Returns
 * 0 or -1 with err. */
static int convert_layers(mi_runtime *rt, char *err)
{
    const mi_config *c = &rt->plan.cfg;
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &rt->model.layers[l];
        if ((rt->keep_layers && rt->keep_layers[l]) || !memcmp(c->dtype[l], rt->stored_dtype[l], sizeof c->dtype[l]))
            continue;
        if (mi_layer_convert(L, c->dim, c->dtype[l], err))
            return -1;
    }
    return 0;
}

/* Voltron §4.3.1, shard-wise pruning at run time: the FFN units the plan
 * prunes leave this rank's w1 and w3 rows and w2 columns, packed in place,
 * so the products skip them (exec.c op_ffn_up, op_ffn_down). A layer whose
 * pruning changes is reloaded first (migrate.c), so what is packed away comes
 * back exact. Returns 0 or -1 with err. */
static int prune_layers(mi_runtime *rt, char *err)
{
    const mi_plan *p = &rt->plan;
    for (int l = 0; l < p->cfg.n_layers; l++) {
        mi_layer *L = &rt->model.layers[l];
        const mi_layer_spec *sp = &L->spec;
        if (!p->layers[l].ffn_pruned || (rt->keep_layers && rt->keep_layers[l]) || (!sp->nf && !sp->w2_rows))
            continue;
        int r0[MI_MAX_PRUNE_RUNS], rn[MI_MAX_PRUNE_RUNS], k = mi_plan_ffn_kept(p, l, sp->f0, sp->nf, r0, rn);
        for (int i = 0; i < k; i++)
            r0[i] -= sp->f0;
        if (sp->nf) {
            mi_tensor_keep_rows(&L->w1, k, r0, rn);
            mi_tensor_keep_rows(&L->w3, k, r0, rn);
        }
        if (sp->w2_rows) /* somegather: w2 rows over every unit, the pruned ones dropped everywhere */
            k = mi_plan_ffn_kept(p, l, 0, p->cfg.hidden_dim, r0, rn);
        if (L->w2.rows && mi_tensor_keep_cols(&L->w2, k, r0, rn))
            return mi_set_error(err, "layer %d: pruned FFN shards cut the %s blocks of w2", l,
                                mi_dtype_name(L->w2.dtype));
    }
    return 0;
}

void rt_load_shard(mi_runtime *rt)
{
    const mi_runtime_options *opt = &rt->opt;
    /* shards are read in the file's dtypes, then converted (convert_layers) */
    mi_config stored = rt->plan.cfg;
    memcpy(stored.dtype, rt->stored_dtype, sizeof stored.dtype);
    const mi_config *c = &stored;
    char err[MI_ERRLEN] = "";
    mi_layer_spec *layers = mi_malloc((size_t)c->n_layers * sizeof *layers, "layer specs");
    mi_shard_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.layers = layers;
    /* resident growth is measured from after the file is open, so the HDF5
     * library's own caches do not count as weights */
    size_t rss0 = mi_rss_bytes();
    int rc = 0;
    size_t piece = opt->scatter_piece > 0 && opt->scatter_piece < PIECE ? opt->scatter_piece : PIECE;
    if (!opt->scatter) {
        mi_config fc;
        mi_model_file *mf = mi_model_open(opt->model_path, &fc, err);
        rss0 = mi_rss_bytes();
        if (!mf) {
            rc = -1;
        } else {
            mi_plan_shard(&rt->plan, rt->rank, &spec);
            for (int l = 0; rt->keep_layers && l < c->n_layers; l++)
                if (rt->keep_layers[l])
                    memset(&spec.layers[l], 0, sizeof spec.layers[l]);
            if (rt->keep_globals)
                spec.embeddings = spec.emb_nc = spec.emb_nv = spec.cls_v0 = spec.cls_nv = 0;
            mi_weight_source src = mi_weight_source_file(mf);
            rc = mi_model_load(&rt->model, &src, c, &spec, err);
            mi_model_close(mf);
        }
        mi_check_all(rc != 0, err);
    } else if (rt->rank == 0) {
        mi_config fc;
        mi_model_file *mf = mi_model_open(opt->model_path, &fc, err);
        if (!mf)
            mi_fatal("%s", err);
        rss0 = mi_rss_bytes();
        for (int r = 1; r < rt->size; r++) {
            mi_plan_shard(&rt->plan, r, &spec);
            send_ctx sc = {mf, r, piece};
            mi_weight_source src = {fetch_and_send, &sc, 1};
            mi_model other;
            if (mi_model_load(&other, &src, c, &spec, err))
                mi_fatal("%s", err);
            mi_model_free(&other);
        }
        mi_plan_shard(&rt->plan, 0, &spec);
        mi_weight_source src = mi_weight_source_file(mf);
        if (mi_model_load(&rt->model, &src, c, &spec, err))
            mi_fatal("%s", err);
        mi_model_close(mf);
    } else {
        mi_plan_shard(&rt->plan, rt->rank, &spec);
        mi_weight_source src = {fetch_recv, &piece, 0};
        if (mi_model_load(&rt->model, &src, c, &spec, err))
            mi_fatal("%s", err);
    }
    rc = convert_layers(rt, err);
    if (!rc)
        rc = prune_layers(rt, err);
    mi_check_all(rc != 0, err);
    rt->model.cfg = rt->plan.cfg;
    if (memcmp(rt->plan.cfg.dtype, rt->stored_dtype, sizeof rt->stored_dtype)) {
        mi_plan_shard(&rt->plan, rt->rank, &spec);
        rt->model.weight_bytes = mi_shard_weight_bytes(&rt->plan.cfg, &spec);
    }
    size_t rss1 = mi_rss_bytes();
    rt->m.rss_weights = rss1 > rss0 ? (double)(rss1 - rss0) : 0.0;
    rt->m.weight_bytes = (double)rt->model.weight_bytes;
    rt->m.kv_bytes = (double)rt->model.kv_bytes;
    free(layers);
}
