/* Perplexity of a model configuration on one device, for Voltron's offline
 * measurements: `meshinfer importance` (each layer lowered, each FFN shard
 * pruned, one at a time) and the precision search's check of its own choice
 * (`plan --importance --text`). See quality.h. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfer/quality.h"
#include "meshinfer/common.h"
#include "meshinfer/forward.h"
#include "meshinfer/tensor.h"

int *mi_text_ids(const char *path, const mi_tokenizer *tok, long max_tokens, int *n)
{
    char err[MI_ERRLEN];
    size_t len;
    char *text = mi_read_text_nonempty(path, &len, err);
    if (!text)
        mi_fatal("%s", err);
    int *ids = mi_malloc((len + 3) * sizeof(int), "text tokens");
    *n = mi_tokenizer_encode(tok, text, 0, ids, err);
    free(text);
    if (*n < 0)
        mi_fatal("%s: %s", path, err);
    if (*n > max_tokens)
        *n = (int)max_tokens;
    if (*n < 2)
        mi_fatal("%s: fewer than 2 tokens to score", path);
    return ids;
}

double mi_window_perplexity(mi_model *m, mi_scratch *s, const int *ids, int n, int bos)
{
    const mi_config *c = &m->cfg;
    int W = c->seq_len, chunk = s->max_T;
    int *win = mi_malloc((size_t)W * sizeof(int), "window");
    double nll = 0;
    long scored = 0;
    for (int start = 0; start < n; start += W - 1) {
        int len = n - start < W - 1 ? n - start : W - 1;
        win[0] = bos;
        memcpy(win + 1, ids + start, (size_t)len * sizeof(int));
        mi_model_reset(m);
        for (int i = 0; i < len; i += chunk) {
            int T = len - i < chunk ? len - i : chunk;
            const float *lg = mi_forward(m, s, win + i, T, i, 1);
            for (int t = 0; t < T; t++, scored++)
                nll += mi_nll(lg + (size_t)t * c->vocab_size, c->vocab_size, win[i + t + 1]);
        }
    }
    free(win);
    return exp(nll / (double)scored);
}

void mi_zero_rows(mi_tensor *t, int r0, int n)
{
    size_t row = mi_dtype_q_row_bytes(t->dtype, (size_t)t->cols);
    memset((char *)t->q + (size_t)r0 * row, 0, (size_t)n * row);
    if (t->d) /* blocked: a zero scale makes every value of the block zero */
        memset(t->d + (size_t)r0 * (size_t)(t->cols / MI_QK), 0, (size_t)n * (size_t)(t->cols / MI_QK) * sizeof(uint16_t));
}

void mi_model_apply(mi_model *m, const mi_config *target, const int *keep, int kept)
{
    const mi_config *c = &m->cfg;
    char err[MI_ERRLEN];
    unsigned char *gone = mi_malloc((size_t)c->hidden_dim, "pruned channels");
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        if (keep) { /* pruned channels output zero: silu(w1 x) * (0 . x) */
            memset(gone, 1, (size_t)c->hidden_dim);
            for (int i = 0; i < kept; i++)
                gone[keep[(size_t)l * kept + i]] = 0;
            for (int u = 0; u < c->hidden_dim; u++)
                if (gone[u])
                    mi_zero_rows(&L->w3, u, 1);
        }
        if (memcmp(c->dtype[l], target->dtype[l], MI_N_LAYER_MATS) &&
            mi_layer_convert(L, c->dim, target->dtype[l], err))
            mi_fatal("layer %d: %s", l, err);
    }
    memcpy(m->cfg.dtype, target->dtype, sizeof m->cfg.dtype);
    free(gone);
}

double mi_nll(const float *logits, int V, int target)
{
    /* log-softmax of the target, in double for a stable sum over the vocabulary */
    float mx = logits[0];
    for (int v = 1; v < V; v++)
        if (logits[v] > mx)
            mx = logits[v];
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        sum += exp((double)(logits[v] - mx));
    return log(sum) + (double)mx - (double)logits[target];
}
