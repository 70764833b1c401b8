/* Internal to src/model/: the importer's core (import.c) and its two
 * front-ends, GGUF (import_gguf.c) and Hugging Face folders (import_hf.c).
 * Public: meshinfer/import.h. */
#ifndef MESHINFER_IMPORT_INTERNAL_H
#define MESHINFER_IMPORT_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "meshinfer/config.h"
#include "meshinfer/import.h"
#include "meshinfer/tokenizer.h"

/* Source element types beyond tensor.h's (which they extend). */
enum { IM_BF16 = 100, IM_OTHER = 101 };

/* One source tensor as the importer sees it: row-major shape (shape[0] the
 * outermost, shape[n_dims-1] contiguous, as PyTorch; a GGUF's dims reversed). */
typedef struct {
    int dtype;             /* MI_F32, MI_F16, MI_Q8_0, MI_Q4_0 (ggml blocks: fp16 scale, then values),
                              MI_Q4_K, MI_Q5_K, MI_Q6_K (super-blocks as tensor.h's), IM_BF16, IM_OTHER */
    const char *type_name; /* the file's name of its type, for errors */
    int n_dims;
    int64_t shape[4];
    const unsigned char *data;
    size_t size;
} im_tensor;

typedef struct im_ctx im_ctx;
struct im_ctx {
    const mi_import_options *o;
    const char *src;       /* the GGUF file or the folder */
    int gguf;              /* 1: GGUF names; 0: Hugging Face names */
    const void *h;         /* mi_gguf * or mi_st * */
    /* the tensor `name` of the source: 0 found, 1 absent, -1 error */
    int (*find)(const im_ctx *x, const char *name, im_tensor *t, char *err);
    char hf_prefix[48];    /* "model." or "language_model.model." or "" / "transformer." (GPT-2) */
    int norm_plus_one;     /* Hugging Face Gemma: RMSNorm weights are 1 + w */
    int conv1d;            /* Hugging Face GPT-2: matrices stored [in, out] */
    mi_config cfg;
    mi_tokenizer tok;
    int has_tok;
    char *chat_template;   /* malloc'd, or NULL */
    float *rope_freqs;     /* [head_dim/2] computed from a Hugging Face rope_scaling (malloc'd), or NULL */
    int n_bf16_f16, n_bf16_f32; /* BF16 tensors stored as fp16 (exactly) and as fp32 */
    unsigned char *used;   /* GGUF: per source tensor, 1 once find() returned it (malloc'd) */
};

/* Front-ends: open the source, fill x->cfg (family, traits, sizes; seq_len
 * capped by the options) and the tokenizer; close. Each returns 0 or -1 with
 * err set. */
int im_gguf_open(im_ctx *x, const char *path, char *err);
void im_gguf_close(im_ctx *x);
int im_hf_open(im_ctx *x, const char *path, char *err);
void im_hf_close(im_ctx *x);

/* Name of our tensor `our` (model_file.h names; layer -1 for the model's own)
 * in the source, with the rows [*row0, *row0 + *nrows) it takes from it (a
 * fused q/k/v; *nrows 0: all). NULL when the family has no such source
 * tensor (then it is computed or absent). A Hugging Face folder's expert
 * stack (experts_w1 ...) names one expert's tensor: the one *nrows says on
 * entry. */
const char *im_source_name(const im_ctx *x, const char *our, int layer, char *buf, size_t n, int64_t *row0,
                           int64_t *nrows);

/* The context a model runs with: its own, capped at 4096 unless asked. */
static inline int im_context(const mi_import_options *o, long model_ctx)
{
    if (o && o->ctx > 0)
        return o->ctx;
    return model_ctx > 0 && model_ctx < 4096 ? (int)model_ctx : 4096;
}

#endif
