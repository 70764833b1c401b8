/* CATS's time-series family: series files and the encoder's own
 * blocks (see series.h, docs/patchtst.md). */
#define _GNU_SOURCE
#include "meshinfer/series.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "meshinfer/common.h"

#define MAX_COLS 4096

/* Split line in place at commas into at most max fields; returns their
 * number (max + 1 when there are more). Trailing CR/LF removed first. */
static int split(char *line, char **f, int max)
{
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    int k = 0;
    for (char *p = line;;) {
        if (k == max)
            return max + 1;
        f[k++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = '\0';
        p = c + 1;
    }
    return k;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '"')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '"'))
        s[--n] = '\0';
    return s;
}

int mi_series_read(const char *path, mi_series *s, char *err)
{
    memset(s, 0, sizeof *s);
    if (mi_check_input_file(path, "series file", err))
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return mi_set_error(err, "%s: cannot open series file: %s", path, strerror(errno));
    char *line = NULL, **fld = mi_malloc((MAX_COLS + 1) * sizeof(char *), "series fields");
    size_t cap = 0, vcap = 0;
    ssize_t len;
    int rc = 0, total = 0;
    if ((len = getline(&line, &cap, f)) <= 0) {
        rc = mi_set_error(err, "%s: empty series file (needs a header row of column names)", path);
        goto done;
    }
    if ((unsigned char)line[0] == 0xEF && (unsigned char)line[1] == 0xBB && (unsigned char)line[2] == 0xBF)
        memmove(line, line + 3, strlen(line + 3) + 1); /* a UTF-8 byte-order mark (spreadsheet exports) */
    total = split(line, fld, MAX_COLS);
    if (total > MAX_COLS) {
        rc = mi_set_error(err, "%s: more than %d columns", path, MAX_COLS);
        goto done;
    }
    const char *first = trim(fld[0]);
    s->skipped_time = total > 1 && (!strcasecmp(first, "time") || !strcasecmp(first, "date") ||
                                    !strcasecmp(first, "timestamp"));
    s->cols = total - s->skipped_time;
    s->names = mi_calloc((size_t)s->cols, sizeof(char *), "series names");
    for (int j = 0; j < s->cols; j++)
        s->names[j] = strndup(trim(fld[j + s->skipped_time]), 64);
    int blank = 0; /* line number of a blank line seen: only the end of the file may have them */
    for (int row = 2; (len = getline(&line, &cap, f)) > 0; row++) {
        if (strspn(line, " \t\r\n") == (size_t)len) {
            blank = blank ? blank : row;
            continue;
        }
        if (blank) { /* skipping it would shift every later time step */
            rc = mi_set_error(err, "%s: line %d is blank, but data rows follow it", path, blank);
            goto done;
        }
        int k = split(line, fld, MAX_COLS);
        if (k != total) {
            if (k > MAX_COLS)
                rc = mi_set_error(err, "%s: line %d has more than %d fields, the header has %d", path, row, MAX_COLS,
                                  total);
            else
                rc = mi_set_error(err, "%s: line %d has %d fields, the header has %d", path, row, k, total);
            goto done;
        }
        if ((size_t)(s->rows + 1) * (size_t)s->cols > vcap) {
            vcap = vcap ? 2 * vcap : 1024 * (size_t)s->cols;
            s->v = realloc(s->v, vcap * sizeof(double));
            if (!s->v)
                mi_fatal("out of memory reading %s", path);
        }
        for (int j = 0; j < s->cols; j++) {
            char *t = trim(fld[j + s->skipped_time]), *end = NULL;
            /* decimal only: strtod would also read 0x10 as 16 */
            double v = *t && !strpbrk(t, "xX") ? strtod(t, &end) : NAN;
            if (*t && !end)
                end = t;
            /* the model computes in float32: a value beyond its range cannot be forecast (a
             * value too small for it is as good as 0, as strtod's underflow says) */
            if (!*t || end == t || *end || !isfinite(v) || fabs(v) > FLT_MAX) {
                const char *why = !*t ? "missing" : end == t || *end ? "non-numeric" : !isfinite(v) ? "non-finite"
                                                                                                 : "outside float32's range";
                rc = mi_set_error(err, "%s: line %d, column '%s': %s value '%.32s'%s", path, row, s->names[j], why, t,
                                  !*t ? " (fill or drop missing values first)" : "");
                goto done;
            }
            s->v[(size_t)s->rows * s->cols + j] = v;
        }
        s->rows++;
    }
    if (ferror(f))
        rc = mi_set_error(err, "%s: read error: %s", path, strerror(errno));
    else if (s->rows == 0)
        rc = mi_set_error(err, "%s: no data rows after the header", path);
done:
    free(line);
    free(fld);
    fclose(f);
    if (rc)
        mi_series_free(s);
    return rc;
}

void mi_series_free(mi_series *s)
{
    for (int j = 0; s->names && j < s->cols; j++)
        free(s->names[j]);
    free(s->names);
    free(s->v);
    memset(s, 0, sizeof *s);
}

void mi_series_patches(const mi_config *c, const float *x, float *patches, float *mu, float *sigma)
{
    double sum = 0.0, ss = 0.0;
    for (int i = 0; i < c->lookback; i++)
        sum += x[i];
    double m = sum / c->lookback;
    for (int i = 0; i < c->lookback; i++)
        ss += ((double)x[i] - m) * ((double)x[i] - m);
    double sd = sqrt(ss / c->lookback + 1e-5);
    for (int n = 0; n < c->seq_len; n++)
        for (int k = 0; k < c->patch_len; k++)
            patches[(size_t)n * c->patch_len + k] = (float)(((double)x[n * c->patch_stride + k] - m) / sd);
    *mu = (float)m;
    *sigma = (float)sd;
}

void mi_patch_embed(const mi_model *m, const float *patches, int T, float *x, int ldx, int c0, int n)
{
    const mi_config *c = &m->cfg;
    mi_tensor rows = mi_tensor_rows(&m->patch_embed, c0, n);
    mi_matmul_ld(x, ldx, patches, c->patch_len, &rows, T, 0);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++)
            x[(size_t)t * ldx + i] += m->patch_embed_b[c0 + i] + m->pos_embed[(size_t)t * c->dim + c0 + i];
}

void mi_series_head(const mi_model *m, const float *x, float *y)
{
    mi_matmul(y, x, &m->classifier, 1);
    mi_add_bias(y, m->cls_nv, m->cls_b, 1, m->cls_nv);
}

void mi_series_forward(mi_model *m, mi_scratch *s, const float *patches, float *y)
{
    const mi_config *c = &m->cfg;
    int T = c->seq_len;
    mi_patch_embed(m, patches, T, s->x, c->dim, 0, c->dim);
    for (int l = 0; l < c->n_layers; l++) {
        mi_layer *L = &m->layers[l];
        mi_layernorm_held(s->xn, s->x, L->attention_norm, L->attention_norm_b, T, c->dim, c->norm_eps, NULL);
        mi_attn_block(m, l, s, s->xn, T, 0, s->heads);
        mi_proj_block(m, l, s->heads, T, s->x, 1);
        mi_layernorm_held(s->xn, s->x, L->ffn_norm, L->ffn_norm_b, T, c->dim, c->norm_eps, NULL);
        mi_ffn_block(m, l, s, s->xn, T, s->x, 1);
    }
    mi_series_head(m, s->x, y);
}
