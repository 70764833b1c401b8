/* llama.cpp's side of jobs/experiments/bench_gguf.sh's correctness check: loads a GGUF with
 * llama.cpp's library (only its public llama.h), runs token ids through it on one thread
 * (KV cache fp32, like meshinfer's) and prints one JSON object:
 *   {"desc": llama_model_desc, "n_params": N, "n_vocab": V,
 *    "text_tokens": [ids of TEXT as llama.cpp tokenizes it, BOS added as the file says],
 *    "logits": [V floats: the last prompt position],
 *    "greedy": [N ids, each the argmax after the ones before (the prompt's, then the greedy ones)],
 *    "gaps": [N floats: the largest logit minus the second largest at each greedy step]}
 * Built by the script against the checkout it is given:
 *   cc -O2 -I DIR/include -I DIR/ggml/include llama_greedy.c -L DIR/build/bin -lllama -lggml
 * usage: llama_greedy MODEL.gguf ID,ID,... N [TEXT] */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 256

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

/* The index of the largest of n values, and how far the second largest is below it. */
static int argmax(const float *x, int n, float *gap)
{
    int best = 0, second = -1;
    for (int i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            second = best;
            best = i;
        } else if (second < 0 || x[i] > x[second]) {
            second = i;
        }
    }
    *gap = second < 0 ? 0.0f : x[best] - x[second];
    return best;
}

/* Runs n ids at positions pos.. in one batch; the logits of the last one are kept. */
static int decode(struct llama_context *ctx, const llama_token *ids, int n, int pos)
{
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = pos + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == n - 1;
    }
    b.n_tokens = n;
    const int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    return rc;
}

static void print_text_tokens(const struct llama_vocab *vocab, const char *text)
{
    llama_token ids[MAX_IDS];
    const int n = llama_tokenize(vocab, text, (int32_t)strlen(text), ids, MAX_IDS, 1, 1);
    printf(", \"text_tokens\": [");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]");
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: llama_greedy MODEL.gguf ID,ID,... N [TEXT]\n");
        return 2;
    }
    llama_token ids[MAX_IDS];
    int n_ids = 0;
    for (char *p = strtok(argv[2], ","); p && n_ids < MAX_IDS; p = strtok(NULL, ","))
        ids[n_ids++] = atoi(p);
    const int n_gen = atoi(argv[3]);
    if (n_ids < 1 || n_gen < 1 || n_ids + n_gen > MAX_IDS) {
        fprintf(stderr, "llama_greedy: error: 1..%d ids and positions in all\n", MAX_IDS);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        fprintf(stderr, "llama_greedy: error: llama.cpp could not load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = MAX_IDS;
    cp.n_batch = MAX_IDS;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    if (!ctx || decode(ctx, ids, n_ids, 0)) {
        fprintf(stderr, "llama_greedy: error: llama.cpp could not run the prompt\n");
        return 1;
    }
    printf("{\"desc\": \"%s\", \"n_params\": %llu, \"n_vocab\": %d", desc,
           (unsigned long long)llama_model_n_params(model), nv);
    if (argc == 5)
        print_text_tokens(vocab, argv[4]);
    const float *l = llama_get_logits_ith(ctx, -1);
    printf(", \"logits\": [");
    for (int v = 0; v < nv; v++)
        printf("%s%.9g", v ? ", " : "", l[v]);
    printf("], \"greedy\": [");
    float gaps[MAX_IDS];
    for (int i = 0; i < n_gen; i++) {
        llama_token t = argmax(llama_get_logits_ith(ctx, -1), nv, &gaps[i]);
        printf("%s%d", i ? ", " : "", t);
        if (i + 1 < n_gen && decode(ctx, &t, 1, n_ids + i)) {
            fprintf(stderr, "llama_greedy: error: decode failed at position %d\n", n_ids + i);
            return 1;
        }
    }
    printf("], \"gaps\": [");
    for (int i = 0; i < n_gen; i++)
        printf("%s%.6g", i ? ", " : "", gaps[i]);
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
