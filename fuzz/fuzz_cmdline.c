/* libFuzzer harness: the command line. One input is one
 * argument list, one argument per line, the first naming the command; it runs
 * as `meshinfer ARGS...` would, on one device, in a scratch directory that
 * holds a small synthetic model (m.h5, and q.h5 in q4_0) and a text (t.txt),
 * and for `forecast` a tiny time-series model (p.h5), a series (s.csv) and
 * its split (sp.json).
 *
 * mi_fatal ends a command with exit(1); the harness is linked with
 * -Wl,--wrap=exit so that exit returns here instead (a clean error is not a
 * finding; a crash, a sanitizer report or a hang is). What an ended command
 * leaves open (files, HDF5 handles) is closed after it, so millions of runs
 * do not run out of descriptors.
 *
 * Kept out: arguments with a '/' (outputs stay in the scratch directory, and
 * no file outside it is read or written), `synth` (it would write models of
 * real shapes, gigabytes), `bench` (timing loops), `calibrate` (MPI). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <hdf5.h>
#include <setjmp.h>
#include <sys/stat.h>

#include "cli.h"
#include "fuzz_model.h"
#include "fuzz_util.h"
#include "meshinfer/common.h"
#include "meshinfer/synth.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
} commands[] = {
    {"generate", cmd_generate}, {"perplexity", cmd_perplexity}, {"plan", cmd_plan},
    {"importance", cmd_importance}, {"profile", cmd_profile},   {"convert", cmd_convert},
    {"quantize", cmd_quantize}, {"info", cmd_info},             {"check", cmd_check},
    {"tokenize", cmd_tokenize}, {"forecast", cmd_forecast},
};

#define MAX_ARGS 32
static const char *inputs[] = {"m.h5", "q.h5", "t.txt", "p.h5", "s.csv", "sp.json"};
#define N_INPUTS (sizeof inputs / sizeof inputs[0])
static struct stat input_stat[N_INPUTS];
static char scratch[256];
static int base_fds[1024], n_base_fds;
static jmp_buf back;
static int in_command;

void __real_exit(int code) __attribute__((noreturn));
void __wrap_exit(int code) __attribute__((noreturn));
void __wrap_exit(int code)
{
    if (in_command) {
        in_command = 0;
        longjmp(back, 1);
    }
    __real_exit(code);
}

static void write_inputs(void)
{
    char err[MI_ERRLEN];
    mi_config c;
    fuzz_tiny_config(&c, 1);
    if (mi_synth_write(&c, 3, "m.h5", 0, err))
        goto fail;
    fuzz_tiny_config(&c, 0);
    for (int l = 0; l < c.n_layers; l++)
        memset(c.dtype[l], MI_Q4_0, sizeof c.dtype[l]);
    c.emb_dtype = c.cls_dtype = MI_Q8_0;
    if (mi_synth_write(&c, 3, "q.h5", 0, err))
        goto fail;
    FILE *f = fopen("t.txt", "w");
    if (!f || fputs("Once upon a time there was a little dog. It liked to run and play.\n", f) < 0 || fclose(f))
        goto fail;
    fuzz_tiny_series_config(&c);
    if (mi_synth_write(&c, 3, "p.h5", 0, err))
        goto fail;
    f = fopen("s.csv", "w");
    if (!f || fputs("time,a,b\n", f) < 0)
        goto fail;
    for (int i = 0; i < 40; i++)
        fprintf(f, "%d,%g,%g\n", i, (double)(i % 7), (double)(i * i % 11));
    if (fclose(f))
        goto fail;
    f = fopen("sp.json", "w");
    if (!f || fputs("{\"train\": [0, 20], \"val\": [20, 28], \"test\": [28, 40]}\n", f) < 0 || fclose(f))
        goto fail;
    for (size_t i = 0; i < N_INPUTS; i++)
        if (stat(inputs[i], &input_stat[i]))
            goto fail;
    return;
fail:
    fprintf(stderr, "fuzz_cmdline: cannot make the scratch inputs in %s: %s\n", scratch, err);
    abort();
}

static int list_fds(int *fds, int max)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        abort();
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.' && n < max)
            fds[n++] = atoi(e->d_name);
    closedir(d);
    return n;
}

static void remove_scratch(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (scratch[0] && system(cmd) != 0)
        fprintf(stderr, "fuzz_cmdline: could not remove %s\n", scratch);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(scratch, sizeof scratch, "%s/meshinfer-fuzz-cmdline-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(scratch) || chdir(scratch))
        abort();
    atexit(remove_scratch);
    write_inputs();
    /* the commands' normal output is not what is under test */
    int null = open("/dev/null", O_WRONLY);
    if (null < 0 || dup2(null, 1) < 0)
        abort();
    close(null);
    n_base_fds = list_fds(base_fds, 1024);
    return 0;
}

/* After a command: close what an exit left open, remove its outputs, and put
 * back an input it replaced (quantize may legitimately write over m.h5). */
static void clean_up(void)
{
    if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) > 0)
        H5close(); /* closes every open HDF5 object; the library reopens itself on its next use */
    int fds[1024], n = list_fds(fds, 1024);
    for (int i = 0; i < n; i++) {
        int base = 0;
        for (int j = 0; j < n_base_fds && !base; j++)
            base = fds[i] == base_fds[j];
        if (!base)
            close(fds[i]);
    }
    DIR *d = opendir(".");
    if (!d)
        abort();
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int keep = e->d_name[0] == '.';
        for (size_t i = 0; i < N_INPUTS; i++)
            keep |= !strcmp(e->d_name, inputs[i]);
        if (!keep && unlink(e->d_name) != 0) {
            char cmd[600];
            snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", e->d_name); /* a directory a command made */
            if (system(cmd) != 0)
                abort();
        }
    }
    closedir(d);
    for (size_t i = 0; i < N_INPUTS; i++) {
        struct stat st;
        if (stat(inputs[i], &st) || st.st_ino != input_stat[i].st_ino || st.st_size != input_stat[i].st_size ||
            st.st_mtim.tv_sec != input_stat[i].st_mtim.tv_sec || st.st_mtim.tv_nsec != input_stat[i].st_mtim.tv_nsec) {
            write_inputs();
            break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_string(data, size);
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    for (char *s = text, *line; argc < MAX_ARGS && (line = strsep(&s, "\n")) != NULL;)
        argv[argc++] = line;
    argv[argc] = NULL;
    int (*fn)(int, char **) = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0] && argc > 0; i++)
        if (!strcmp(argv[0], commands[i].name))
            fn = commands[i].fn;
    for (int i = 0; i < argc && fn; i++)
        if (strchr(argv[i], '/'))
            fn = NULL;
    if (fn) {
        optind = 0; /* glibc: a full re-initialisation of getopt for the next command */
        in_command = 1;
        if (setjmp(back) == 0)
            fn(argc, argv);
        in_command = 0;
        fflush(stdout);
        clearerr(stdout);
        clean_up();
    }
    free(text);
    return 0;
}
