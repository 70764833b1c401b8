/* Importing the models people hold: a GGUF file (llama.cpp's format, v2
 * and v3) or a Hugging Face folder (config.json, model.safetensors or its
 * shards with model.safetensors.index.json, tokenizer.json,
 * tokenizer_config.json), written as our HDF5 model file (model_file.h), so
 * that each rank still reads only its own hyperslabs.
 *
 * Families: llama (Llama 2, TinyLlama, Llama 3.x), qwen2 (Qwen1.5, Qwen2.5),
 * qwen3, gemma3 (text), gpt2 (config.h). Tensors keep their precision: F32
 * and F16 as they are, Q8_0 and Q4_0 blocks byte for byte; BF16 becomes fp16
 * where every value of the tensor is exactly an fp16 value, else fp32 (the
 * summary says which). Any other tensor type is an error naming the tensor,
 * its type and what to do. Norms and biases are stored float32; Gemma's
 * norms (1 + w) are stored summed; Llama's GGUF q/k rows stay in Meta's
 * pair order (rope_type PAIRS), a Hugging Face folder's in rotate-half order
 * (HALVES). */
#ifndef MESHINFER_IMPORT_H
#define MESHINFER_IMPORT_H

#include <stdio.h>

typedef struct {
    int ctx;             /* context (seq_len) to size KV caches for; 0: the model's, at most 4096 */
    const char *name;    /* model name stored in the file (1 to 63 bytes); NULL: from the source */
    FILE *progress;      /* a line per quarter of the layers (NULL: quiet) */
    FILE *summary;       /* what was converted how (NULL: quiet) */
} mi_import_options;

/* What path is: 0 none of these, MI_IMPORT_GGUF, MI_IMPORT_HF (a folder, or
 * one .safetensors file inside one), by first bytes and names. */
enum { MI_IMPORT_NONE = 0, MI_IMPORT_GGUF = 1, MI_IMPORT_HF = 2 };
int mi_import_kind(const char *path);

/* Convert src (a GGUF file or a Hugging Face folder) into out (written
 * atomically: nothing at out on failure). Returns 0, or -1 with one line in
 * err naming the file, tensor or key and the problem: an unknown
 * architecture (naming the supported ones), a tensor type we do not run, a
 * missing or misshapen tensor, head counts that do not divide, a config that
 * disagrees with the tensors, a tokenizer whose vocabulary disagrees with
 * the embeddings. */
int mi_import(const char *src, const char *out, const mi_import_options *o, char *err);

#endif
