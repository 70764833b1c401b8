/* meshinfer: run Llama-architecture language models split across devices.
 * This file only dispatches to the subcommands in cmd_*.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/kernels.h"
#include "meshinfer/runtime.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
    int mpi; /* runs as one rank per device; the others are one-device commands */
} commands[] = {
    {"generate", cmd_generate, "generate text from a prompt (streams tokens)", 1},
    {"chat", cmd_chat, "talk with a chat model in its own template (keeps the conversation, streams)", 1},
    {"serve", cmd_serve, "serve the model over HTTP with OpenAI's API (completions, chat, streaming, metrics)", 1},
    {"perplexity", cmd_perplexity, "mean NLL and perplexity of a text file", 1},
    {"forecast", cmd_forecast, "forecast a multivariate series with a time-series model (CATS)", 1},
    {"bench", cmd_bench, "TTFT, TPOT, decode tokens/s and weight bandwidth vs STREAM triad", 1},
    {"plan", cmd_plan, "make a placement plan; print predicted memory, bytes and time per device", 0},
    {"simulate", cmd_simulate, "discrete-event simulation of a generation on a cluster (no MPI, no model run)", 0},
    {"cluster-gen", cmd_cluster_gen, "write a cluster file of N heterogeneous devices drawn from distributions", 0},
    {"calibrate", cmd_calibrate, "measure every rank's device and link; write a cluster file for --cluster", 1},
    {"importance", cmd_importance, "perplexity rise per layer lowered to q8_0 and to q4_0 (Voltron's importance)", 0},
    {"profile", cmd_profile, "acceptance of inter-layer speculation per layer transition, over a corpus", 0},
    {"convert", cmd_convert, "a GGUF file, a Hugging Face folder or a llama2.c checkpoint -> HDF5 model file", 0},
    {"logits", cmd_logits, "one device's logits for token ids, as JSON (to compare implementations)", 0},
    {"synth", cmd_synth, "write a seeded synthetic model of a real model's shape", 0},
    {"quantize", cmd_quantize, "copy an fp32 model with weights in fp16, q8_0, q4_0 or a k-quant (per layer too)", 0},
    {"info", cmd_info, "print a model file's config", 0},
    {"check", cmd_check, "validate a model file whole: config against tensors, tokenizer, every weight finite", 0},
    {"tokenize", cmd_tokenize, "print the token ids of a text", 0},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: meshinfer <command> [options]   (meshinfer <command> --help for details)\n"
               "       meshinfer --version\n\n"
               "Runs transformer language models split across MPI ranks (one rank per device).\n"
               "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "Environment:\n"
               "  MESHINFER_KERNELS=NAME  matrix-product kernels: %s (default auto:\n"
               "                          the best this CPU runs; now %s)\n"
               "  MESHINFER_MPI=0|1       without mpirun or srun MPI is not started; 1 starts it anyway\n"
               "  MESHINFER_SLOWDOWN=S    emulate a CPU S times slower (S in [1, 1000]): every compute op\n"
               "                          sleeps S-1 times its own time after it (the testbed's --slowdown)\n",
            mi_kernels_list(), mi_kernels_name());
}

int main(int argc, char **argv)
{
    /* whole lines: stdout and stderr into one pipe (2>&1 | ...) interleave
     * by lines, never a warning spliced into the middle of a table's row (a
     * pipe would otherwise buffer stdout in 4 KB blocks) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "meshinfer: error: no command given (try meshinfer --help)\n");
        return 2;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        printf("meshinfer %s (commit %s; kernels %s)\n", MESHINFER_VERSION, MESHINFER_COMMIT, mi_kernels_name());
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    /* a kernel family asked for by name must exist and run here: a silent
     * fallback would make a comparison of families measure the same one twice */
    const char *kf = getenv("MESHINFER_KERNELS");
    char kerr[128];
    if (kf && *kf && mi_kernels_use(kf, kerr) != 0) {
        fprintf(stderr, "meshinfer: error: MESHINFER_KERNELS=%s: %s (%s)\n", kf, kerr, mi_kernels_list());
        return 1; /* as every other bad environment variable (mi_fatal) */
    }
    mi_slowdown(); /* checked before any work or output: one error line, from the first rank only */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* a one-device command started by mpirun on several ranks would do the
             * same work N times and race on its output file */
            int launch_rank, launch_size = mi_world_launch_size(&launch_rank);
            if (!commands[i].mpi && launch_size > 1) {
                if (launch_rank == 0)
                    fprintf(stderr, "meshinfer: error: %s runs on one device; start it without mpirun (here on %d ranks)\n",
                            argv[1], launch_size);
                return 2;
            }
            int rc = commands[i].fn(argc - 1, argv + 1);
            /* a full disk or closed pipe must not look like success */
            if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "meshinfer: error: cannot write the output (disk full or pipe closed)\n");
                return 1;
            }
            return rc;
        }
    /* a typo of a command: the one that shares the longest start with it */
    size_t best = 0, at = 0;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        size_t n = 0;
        while (argv[1][n] && argv[1][n] == commands[i].name[n])
            n++;
        if (n > best)
            best = n, at = i;
    }
    if (best >= 3)
        fprintf(stderr, "meshinfer: error: unknown command '%s' (did you mean '%s'? try meshinfer --help)\n", argv[1],
                commands[at].name);
    else
        fprintf(stderr, "meshinfer: error: unknown command '%s' (try meshinfer --help)\n", argv[1]);
    return 2;
}
