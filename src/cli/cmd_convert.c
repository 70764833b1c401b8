/* meshinfer convert: a llama2.c checkpoint, a GGUF file or a Hugging Face
 * folder into our HDF5 model file (checkpoint.h, import.h). No MPI. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/checkpoint.h"
#include "meshinfer/common.h"
#include "meshinfer/import.h"
#include "meshinfer/model_file.h"
#include "meshinfer/output.h"

static void usage(void)
{
    printf("usage: meshinfer convert --input MODEL.gguf|HF_FOLDER --out MODEL.h5 [--ctx N] [--name NAME]\n"
           "       meshinfer convert --checkpoint FILE.bin --tokenizer tokenizer.bin --out MODEL.h5 [--name NAME]\n\n"
           "Writes one HDF5 model file (config as attributes, tokenizer inside, one dataset per tensor, each\n"
           "rank's shard a contiguous row range); it appears only when complete.\n"
           "  --input SRC      a GGUF file (v2, v3) or a Hugging Face folder (config.json, model.safetensors or\n"
           "                   its shards and index, tokenizer.json, tokenizer_config.json) of a llama, qwen2,\n"
           "                   qwen3, gemma3, gpt2, qwen2moe or qwen3moe model. Tensors keep their precision:\n"
           "                   f32, f16, q8_0, q4_0, q4_K, q5_K and q6_K as they are (blocks byte for byte),\n"
           "                   bf16 as fp16 where every value is exact, else fp32; other types (the i-quants,\n"
           "                   q2_K, q3_K ...) are refused, naming the tensor.\n"
           "  --ctx N          context to size KV caches for (default: the model's, at most 4096)\n"
           "  --checkpoint, --tokenizer   a llama2.c checkpoint (legacy or v1, fp32) and its tokenizer.bin\n"
           "  --name NAME      model name stored in the file\n"
           "generate, bench, plan ... -m FILE.gguf (or a folder) convert into the model cache themselves.\n");
}

int cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {{"checkpoint", required_argument, 0, 'c'},
                                         {"tokenizer", required_argument, 0, 't'},
                                         {"input", required_argument, 0, 'i'},
                                         {"out", required_argument, 0, 'o'},
                                         {"name", required_argument, 0, 'n'},
                                         {"ctx", required_argument, 0, 'x'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *ckpt = NULL, *tok = NULL, *in = NULL, *out = NULL, *name = NULL;
    int o, ctx = 0;
    while ((o = getopt_long(argc, argv, ":c:t:i:o:n:x:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': ckpt = optarg; break;
        case 't': tok = optarg; break;
        case 'i': in = optarg; break;
        case 'o': out = optarg; break;
        case 'n': name = optarg; break;
        case 'x': ctx = (int)mi_parse_long("--ctx", optarg, 2, 1 << 20); break;
        case 'h': usage(); return 0;
        default: cli_bad_option("convert", o, argv);
        }
    }
    cli_no_positional("convert", optind, argc, argv);
    if (in && (ckpt || tok))
        mi_fatal("convert: --input is a GGUF file or a Hugging Face folder; --checkpoint and --tokenizer are for "
                 "llama2.c files: give one or the other");
    if (!out || (!in && (!ckpt || !tok)))
        mi_fatal("convert: --input (or --checkpoint and --tokenizer) and --out are required (see meshinfer convert "
                 "--help)");
    /* the name goes into the file whole and is printed in tables: never empty, cut or with control bytes */
    if (name && !*name)
        mi_fatal("convert: --name is empty: give the model a name, or leave --name out to keep the source's");
    if (name && strlen(name) >= sizeof ((mi_config *)0)->name)
        mi_fatal("convert: --name is %zu bytes long; a model name holds at most %zu", strlen(name),
                 sizeof ((mi_config *)0)->name - 1);
    for (const char *q = name; q && *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            mi_fatal("convert: --name contains a control character (byte %td)", q - name);
    if (ctx && !in)
        mi_fatal("convert: --ctx applies to --input (a llama2.c checkpoint keeps its own seq_len)");
    char err[MI_ERRLEN];
    const char *inputs[] = {in ? in : ckpt, tok};
    if (mi_output_check(out, "model file", inputs, in ? 1 : 2, err))
        mi_fatal("%s", err);
    double t0 = mi_now();
    if (in) {
        mi_import_options io = {ctx, name, stderr, stdout};
        if (mi_import(in, out, &io, err))
            mi_fatal("%s", err);
    } else {
        char nb[64];
        if (!name) {
            const char *b = strrchr(ckpt, '/');
            snprintf(nb, sizeof nb, "%s", b ? b + 1 : ckpt);
            char *dot = strrchr(nb, '.');
            if (dot)
                *dot = '\0';
            name = nb;
        }
        if (mi_convert(ckpt, tok, out, name, err))
            mi_fatal("%s", err);
    }
    mi_config c;
    mi_model_file *mf = mi_model_open(out, &c, err);
    if (!mf)
        mi_fatal("converted file does not verify: %s", err);
    mi_model_close(mf);
    printf("wrote %s: %s (%s), dim %d, hidden_dim %d, %d layers, %d heads (%d KV), vocab %d, seq_len %d, "
           "%zu parameters (%.1f s)\n",
           out, c.name, mi_family_name(c.family), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
           c.vocab_size, c.seq_len, mi_model_params(&c), mi_now() - t0);
    return 0;
}
