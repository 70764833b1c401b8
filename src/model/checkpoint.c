/* llama2.c checkpoint reader and the converter to HDF5 (see checkpoint.h). */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/checkpoint.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/tokenizer.h"

#define V1_MAGIC 0x616b3432u /* "ak42" */
#define V1_HEADER 256

int mi_checkpoint_open(mi_checkpoint *ck, const char *path, char *err)
{
    memset(ck, 0, sizeof *ck);
    if (mi_foreign_format(path, err) || mi_check_input_file(path, "checkpoint", err))
        return -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return mi_set_error(err, "%s: cannot open checkpoint (no such file or not readable)", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mi_set_error(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < 7 * sizeof(int32_t)) {
        close(fd);
        return mi_set_error(err, "%s: checkpoint is truncated (%zu bytes, header needs 28)", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return mi_set_error(err, "%s: cannot map checkpoint", path);
    const unsigned char *base = map;
    uint32_t magic;
    memcpy(&magic, base, 4);
    int32_t h[7];
    size_t header;
    int shared;
    if (magic == V1_MAGIC) {
        int32_t version;
        if (size < V1_HEADER) {
            munmap(map, size);
            return mi_set_error(err, "%s: checkpoint is truncated (%zu bytes, v1 header needs %d)", path, size,
                                V1_HEADER);
        }
        memcpy(&version, base + 4, 4);
        if (version != 1) {
            munmap(map, size);
            return mi_set_error(err, "%s: llama2.c checkpoint version %d is not supported (fp32 v0 and v1 are)",
                                path, version);
        }
        memcpy(h, base + 8, sizeof h);
        shared = base[8 + sizeof h] != 0;
        header = V1_HEADER;
        ck->version = 1;
    } else {
        memcpy(h, base, sizeof h);
        shared = h[5] > 0;
        /* v0 stores an unshared classifier as a negative vocab_size; INT32_MIN
         * has no positive counterpart (negating it is undefined) */
        if (h[5] == INT32_MIN) {
            munmap(map, size);
            return mi_set_error(err, "%s: not a llama2.c checkpoint, or corrupt header (vocab_size %d)", path,
                                (int)INT32_MIN);
        }
        if (h[5] < 0)
            h[5] = -h[5];
        header = sizeof h;
        ck->version = 0;
    }
    mi_config *c = &ck->cfg;
    c->dim = h[0];
    c->hidden_dim = h[1];
    c->n_layers = h[2];
    c->n_heads = h[3];
    c->n_kv_heads = h[4];
    c->vocab_size = h[5];
    c->seq_len = h[6];
    c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    c->rope_theta = 10000.0f;
    c->norm_eps = 1e-5f;
    c->shared_classifier = shared;
    c->synthetic = 0;
    char cerr[MI_ERRLEN];
    if (mi_config_validate(c, cerr)) {
        munmap(map, size);
        return mi_set_error(err, "%s: not a llama2.c checkpoint, or corrupt header (%s)", path, cerr);
    }
    size_t d = (size_t)c->dim, L = (size_t)c->n_layers, kv = (size_t)mi_kv_dim(c), hd = (size_t)c->head_dim;
    size_t hid = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    size_t n = V * d + 2 * L * d + 2 * L * d * d + 2 * L * kv * d + 3 * L * hid * d + d + (shared ? 0 : V * d);
    if (ck->version == 0)
        n += (size_t)c->seq_len * hd; /* legacy RoPE tables: 2 x seq_len x head_dim/2 */
    size_t want = header + n * sizeof(float);
    if (size != want) {
        munmap(map, size);
        return mi_set_error(err, "%s: checkpoint is %zu bytes but its header (dim %d, %d layers, vocab %d) "
                                 "implies %zu: %s",
                            path, size, c->dim, c->n_layers, c->vocab_size, want,
                            size < want ? "truncated" : "trailing data or wrong format");
    }
    const float *p = (const float *)(base + header);
    if (ck->version == 0) {
        ck->tok_embeddings = p; p += V * d;
        ck->rms_att = p;        p += L * d;
        ck->wq = p;             p += L * d * d;
        ck->wk = p;             p += L * kv * d;
        ck->wv = p;             p += L * kv * d;
        ck->wo = p;             p += L * d * d;
        ck->rms_ffn = p;        p += L * d;
        ck->w1 = p;             p += L * hid * d;
        ck->w2 = p;             p += L * d * hid;
        ck->w3 = p;             p += L * hid * d;
        ck->rms_final = p;      p += d;
        p += (size_t)c->seq_len * hd; /* skip freq_cis_real and freq_cis_imag */
    } else {
        ck->rms_att = p;        p += L * d;
        ck->rms_ffn = p;        p += L * d;
        ck->rms_final = p;      p += d;
        ck->tok_embeddings = p; p += V * d;
        ck->wq = p;             p += L * d * d;
        ck->wk = p;             p += L * kv * d;
        ck->wv = p;             p += L * kv * d;
        ck->wo = p;             p += L * d * d;
        ck->w1 = p;             p += L * hid * d;
        ck->w2 = p;             p += L * d * hid;
        ck->w3 = p;             p += L * hid * d;
    }
    ck->wcls = shared ? ck->tok_embeddings : p;
    ck->map = map;
    ck->map_size = size;
    return 0;
}

void mi_checkpoint_close(mi_checkpoint *ck)
{
    if (ck->map)
        munmap(ck->map, ck->map_size);
    memset(ck, 0, sizeof *ck);
}

int mi_convert(const char *ckpt_path, const char *tok_path, const char *out_path, const char *name, char *err)
{
    mi_checkpoint ck;
    if (mi_checkpoint_open(&ck, ckpt_path, err))
        return -1;
    mi_tokenizer tok;
    if (mi_tokenizer_load_bin(&tok, tok_path, ck.cfg.vocab_size, err)) {
        mi_checkpoint_close(&ck);
        return -1;
    }
    mi_config *c = &ck.cfg;
    snprintf(c->name, sizeof c->name, "%s", name);
    mi_model_writer *w = mi_model_writer_create(out_path, c, err);
    if (!w) {
        mi_tokenizer_free(&tok);
        mi_checkpoint_close(&ck);
        return -1;
    }
    size_t d = (size_t)c->dim, kv = (size_t)mi_kv_dim(c), hid = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    int rc = mi_model_writer_put(w, "tok_embeddings", ck.tok_embeddings, V, d, 0, err);
    if (!rc)
        rc = mi_model_writer_put(w, "norm", ck.rms_final, d, 1, 0, err);
    if (!rc && !c->shared_classifier)
        rc = mi_model_writer_put(w, "classifier", ck.wcls, V, d, 0, err);
    for (int l = 0; l < c->n_layers && !rc; l++) {
        char nm[128];
        size_t L = (size_t)l;
#define PUT(t, ptr, rows, cols, tr)                                       \
        if (!rc) {                                                        \
            mi_model_layer_name(nm, sizeof nm, l, t);                     \
            rc = mi_model_writer_put(w, nm, ptr, rows, cols, tr, err);    \
        }
        PUT("attention_norm", ck.rms_att + L * d, d, 1, 0);
        PUT("wq", ck.wq + L * d * d, d, d, 0);
        PUT("wk", ck.wk + L * kv * d, kv, d, 0);
        PUT("wv", ck.wv + L * kv * d, kv, d, 0);
        PUT("wo_t", ck.wo + L * d * d, d, d, 1);
        PUT("ffn_norm", ck.rms_ffn + L * d, d, 1, 0);
        PUT("w1", ck.w1 + L * hid * d, hid, d, 0);
        PUT("w3", ck.w3 + L * hid * d, hid, d, 0);
        PUT("w2_t", ck.w2 + L * d * hid, d, hid, 1);
#undef PUT
    }
    if (!rc)
        rc = mi_model_writer_put_tokenizer(w, &tok, err);
    if (rc)
        mi_model_writer_abort(w);
    else
        rc = mi_model_writer_commit(w, err);
    mi_tokenizer_free(&tok);
    mi_checkpoint_close(&ck);
    return rc;
}
