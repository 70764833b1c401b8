/* meshinfer logits: one device's logits for given token ids, as JSON: for
 * comparing with another implementation (PyTorch, llama.cpp) on the same
 * weights. No MPI. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/forward.h"
#include "meshinfer/model.h"

static int *parse_ids(const char *s, int vocab, int seq_len, int *n)
{
    int cap = (int)strlen(s) / 2 + 2, *ids = mi_malloc((size_t)cap * sizeof(int), "token ids");
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= vocab || (*end && *end != ','))
            mi_fatal("logits: --tokens '%s': ids are comma-separated integers in [0, %d)", s, vocab);
        if (*n >= seq_len)
            mi_fatal("logits: more than the context of %d tokens", seq_len);
        ids[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        mi_fatal("logits: --tokens is empty");
    return ids;
}

int cmd_logits(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"tokens", required_argument, 0, 'k'},
                                         {"all", no_argument, 0, 'a'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *tokens = NULL;
    int all = 0, o;
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 'k': tokens = optarg; break;
        case 'a': all = 1; break;
        case 'h':
            printf("usage: meshinfer logits --model MODEL.h5 --tokens ID,ID,... [--all]\n\n"
                   "Runs the ids through the model on one device (one prefill pass) and prints\n"
                   "{\"n_vocab\": V, \"logits\": [[V floats] per position]} for the last position (--all:\n"
                   "every position), to compare with another implementation of the same weights.\n");
            return 0;
        default: cli_bad_option("logits", o, argv);
        }
    }
    cli_no_positional("logits", optind, argc, argv);
    if (!model || !tokens)
        mi_fatal("logits: --model and --tokens are required (see meshinfer logits --help)");
    mi_model m;
    mi_model_load_path(&m, model, NULL);
    if (!mi_config_is_lm(&m.cfg))
        mi_fatal("logits: %s is a time-series model: it has no tokens", model);
    int n, V = m.cfg.vocab_size;
    int *ids = parse_ids(tokens, V, m.cfg.seq_len, &n);
    mi_scratch s;
    mi_scratch_init(&s, &m.cfg, n);
    const float *lg = mi_forward(&m, &s, ids, n, 0, all);
    printf("{\"n_vocab\": %d, \"logits\": [", V);
    for (int t = 0; t < (all ? n : 1); t++) {
        printf("%s[", t ? ", " : "");
        for (int i = 0; i < V; i++)
            printf("%s%.9g", i ? ", " : "", (double)lg[(size_t)t * V + i]);
        printf("]");
    }
    printf("]}\n");
    mi_scratch_free(&s);
    mi_model_free(&m);
    free(ids);
    return 0;
}
