/* `meshinfer plan --memory-model`: CATS's memory and traffic model (its
 * Q1, Fig. 4 and 5) of somegather and the baselines it is compared with,
 * over D = 1..N devices, as a table, a CSV and a gnuplot figure (see
 * cmd_plan.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_plan.h"
#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/output.h"
#include "meshinfer/planner.h"

/* --prune R[,R...]: each a ratio in [0, 1) (1 would send nothing at all). */
void plan_parse_prune_list(const char *arg, mem_opts *o)
{
    char buf[512];
    if (strlen(arg) >= sizeof buf)
        mi_fatal("option --prune: the list is too long");
    strcpy(buf, arg);
    o->n_prune = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_prune == MAX_PRUNE)
            mi_fatal("option --prune: more than %d ratios", MAX_PRUNE);
        double r = mi_parse_double("--prune", t, -1e300, 1e300);
        if (!(r >= 0.0 && r < 1.0))
            mi_fatal("option --prune: %g is outside [0, 1)%s", r, r >= 1.0 ? " (a ratio of 1 would send nothing)" : "");
        o->prune[o->n_prune++] = r;
    }
    if (o->n_prune == 0 || arg[strlen(arg) - 1] == ',' || arg[0] == ',' || strstr(arg, ",,"))
        mi_fatal("option --prune: '%s' is not a comma-separated list of ratios", arg);
}

/* The rows of the table: somegather at each ratio, then the baselines. */
typedef struct {
    int scheme;
    double prune;
} mem_series;

static int mem_series_list(const mem_opts *o, mem_series *s)
{
    int n = 0;
    for (int i = 0; i < o->n_prune; i++)
        s[n++] = (mem_series){MI_MEM_SOMEGATHER, o->prune[i]};
    for (int k = MI_MEM_TOKEN_SPLIT; k < MI_MEM_N_SCHEMES; k++)
        s[n++] = (mem_series){k, 0.0};
    return n;
}

static const char *mem_label(const mem_series *s, char *buf, size_t n)
{
    static const char *const names[MI_MEM_N_SCHEMES] = {"somegather", "token split", "token split 4-bit",
                                                        "head split"};
    if (s->scheme == MI_MEM_SOMEGATHER)
        snprintf(buf, n, "somegather r=%g", s->prune);
    else
        snprintf(buf, n, "%s (%s)", names[s->scheme], mi_mem_scheme_source(s->scheme));
    return buf;
}

/* The busiest device's KV cache plus activations. */
static double mem_activations(const mi_mem_model *m)
{
    double a = 0;
    for (int i = 0; i < m->n_devices; i++)
        if (m->dev[i].kv_bytes + m->dev[i].act_bytes > a)
            a = m->dev[i].kv_bytes + m->dev[i].act_bytes;
    return a;
}

static void mem_make(const mi_config *c, const mem_opts *o, const mem_series *s, int D, mi_mem_model *m)
{
    char err[MI_ERRLEN];
    mi_mem_query q = {s->scheme, D, s->prune, o->wire, o->n_pos, 0};
    if (mi_mem_model_make(c, &q, m, err))
        mi_fatal("plan: %s", err);
}

static void mem_print_table(const mi_config *c, const mem_opts *o, const mem_series *ser, int n_ser)
{
    char dts[160], lab[64];
    printf("memory model (CATS Q1) for %s: dim %d, %d layers, %d heads in %d KV groups, hidden %d, vocab %d; "
           "weights %s, messages %s, %d positions\n", c->name, c->dim, c->n_layers, c->n_heads, c->n_kv_heads,
           c->hidden_dim, c->vocab_size, mi_config_dtype_summary(c, dts, sizeof dts), mi_dtype_name(o->wire),
           o->n_pos);
    printf("per device: the busiest device; MB = 10^6 bytes, KB = 10^3 bytes; activations include the KV cache;\n"
           "* = our runtime runs it (somegather: D divides the %d KV heads; head split: tp planner's programs)\n",
           c->n_kv_heads);
    printf("%4s  %-44s %12s %12s %16s %14s %14s\n", "D", "scheme", "weights_MB", "needed_MB", "activations_KB",
           "sent_KB/token", "moved_KB/token");
    mi_mem_model *m = mi_malloc(sizeof *m, "memory model");
    for (int D = 1; D <= o->max_devices; D++) {
        for (int i = 0; i < n_ser; i++) {
            mem_make(c, o, &ser[i], D, m);
            printf("%4d  %-42s %s %12.2f %12.2f %16.1f %14.2f %14.2f\n", D, mem_label(&ser[i], lab, sizeof lab),
                   m->runnable ? "*" : " ", m->max.weight_bytes / 1e6, m->max.weight_needed_bytes / 1e6,
                   mem_activations(m) / 1e3, m->max.sent_bytes / 1e3, m->moved_bytes / 1e3);
        }
        if (D < o->max_devices)
            printf("\n");
    }
    free(m);
}

/* A temporary name next to path, renamed over it once complete. */
static void temp_name(const char *path, const char *tag, char *out, size_t n)
{
    if ((size_t)snprintf(out, n, "%s.%s.%ld", path, tag, (long)getpid()) >= n)
        mi_fatal("%s: path too long", path);
}

static void csv_name(const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s", name);
    for (char *p = out; *p; p++)
        if (*p == ',' || *p == '"' || *p == '\n')
            *p = '_';
}

/* One row per series and D, series after series (what a plot reads). */
static int mem_write_csv(FILE *f, const mi_config *c, const mem_opts *o, const mem_series *ser, int n_ser)
{
    char name[sizeof c->name];
    csv_name(c->name, name, sizeof name);
    fprintf(f, "model,D,scheme,source,prune,runnable,from_programs,wire,positions,weights_bytes,"
               "weights_needed_bytes,kv_bytes,act_bytes,activations_bytes,ram_bytes,sent_max_bytes,"
               "sent_mean_bytes,moved_bytes\n");
    mi_mem_model *m = mi_malloc(sizeof *m, "memory model");
    for (int i = 0; i < n_ser; i++)
        for (int D = 1; D <= o->max_devices; D++) {
            mem_make(c, o, &ser[i], D, m);
            fprintf(f, "%s,%d,%s,%s,%g,%d,%d,%s,%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.2f,%.0f\n", name, D,
                    mi_mem_scheme_name(ser[i].scheme), mi_mem_scheme_source(ser[i].scheme), ser[i].prune,
                    m->runnable, m->from_programs, mi_dtype_name(o->wire), o->n_pos, m->max.weight_bytes,
                    m->max.weight_needed_bytes, m->max.kv_bytes, m->max.act_bytes, mem_activations(m),
                    m->max.ram_bytes, m->max.sent_bytes, m->moved_bytes / D, m->moved_bytes);
        }
    free(m);
    return ferror(f);
}

/* Write the CSV to path (output.h). */
static void mem_save_csv(const char *path, const mi_config *c, const mem_opts *o, const mem_series *ser,
                         int n_ser)
{
    char err[MI_ERRLEN];
    mi_output out;
    FILE *f = mi_output_open(&out, path, err);
    if (!f)
        mi_fatal("%s", err);
    if (mem_write_csv(f, c, o, ser, n_ser)) {
        mi_output_abort(&out);
        mi_fatal("%s: cannot write the CSV file", path);
    }
    if (mi_output_commit(&out, err))
        mi_fatal("%s", err);
}

/* Draw png from csv; returns 0, or -1 with one line in err. */
static int mem_draw_png(const char *png, const char *csv, const mi_config *c, const mem_opts *o, char *err)
{
    char gp[PATH_MAX], title[512], ratios[MAX_PRUNE * 24] = "", msg[2048], dts[160];
    if (cli_find_script("memory_model.gp", gp, sizeof gp))
        return mi_set_error(err, "%s: cannot find jobs/lib/memory_model.gp (run meshinfer from its build "
                                 "directory in the repository)", png);
    snprintf(title, sizeof title, "%s (dim %d, %d layers, %d KV heads, weights %s): %d positions, %s messages",
             c->name, c->dim, c->n_layers, c->n_kv_heads, mi_config_dtype_summary(c, dts, sizeof dts), o->n_pos,
             mi_dtype_name(o->wire));
    for (int i = 0; i < o->n_prune; i++)
        snprintf(ratios + strlen(ratios), sizeof ratios - strlen(ratios), "%s%g", i ? " " : "", o->prune[i]);
    mi_output out; /* gnuplot writes the temporary file; renamed when it succeeded */
    if (mi_output_begin(&out, png, err))
        return -1;
    char *argv[] = {"gnuplot", "-c", gp, (char *)csv, out.tmp, title, ratios, NULL};
    int rc = cli_run_gnuplot(argv, msg, sizeof msg);
    if (rc == 0)
        return mi_output_commit(&out, err);
    mi_output_abort(&out);
    if (rc == 127)
        return mi_set_error(err, "%s: --png needs gnuplot, which is not installed (jobs/dev/build.sh installs it)", png);
    if (rc < 0)
        return mi_set_error(err, "%s: cannot write the PNG file (%s)", png, msg);
    return mi_set_error(err, "%s: gnuplot failed: %s", png, cli_first_line(msg));
}

static int mem_run(const mi_config *c, const mem_opts *o)
{
    mem_series ser[MAX_PRUNE + MI_MEM_N_SCHEMES];
    int n_ser = mem_series_list(o, ser);
    if (o->csv)
        mem_save_csv(o->csv, c, o, ser, n_ser);
    if (o->png) {
        char tmp_csv[PATH_MAX + 64];
        const char *csv = o->csv;
        if (!csv) {
            temp_name(o->png, "csv", tmp_csv, sizeof tmp_csv);
            mem_save_csv(tmp_csv, c, o, ser, n_ser);
            csv = tmp_csv;
        }
        char err[MI_ERRLEN];
        int rc = mem_draw_png(o->png, csv, c, o, err);
        if (!o->csv)
            remove(tmp_csv);
        if (rc)
            mi_fatal("%s", err);
    }
    mem_print_table(c, o, ser, n_ser);
    if (o->csv)
        printf("wrote %s\n", o->csv);
    if (o->png)
        printf("wrote %s\n", o->png);
    return 0;
}

/* The config of --model (nothing else is read) or --shape, with the dtype options. */
void plan_load_config(const char *model, const char *shape, const cli_dtypes *dt, mi_config *c)
{
    char err[MI_ERRLEN];
    if (model) {
        mi_model_file *mf = mi_model_open(model, c, err);
        if (!mf)
            mi_fatal("%s", err);
        mi_model_close(mf);
    } else if (mi_config_from_shape(shape, c)) {
        mi_fatal("plan: unknown shape '%s' (known: %s)", shape, mi_config_shape_names());
    }
    cli_dtypes_apply(dt, c, "plan");
}

int plan_memory_model(const char *model, const char *shape, const cli_dtypes *dt, int wire, mem_opts *mo)
{
    /* outputs first: a bad path fails before any work is shown */
    char err[MI_ERRLEN];
    if (mo->csv && mi_output_check(mo->csv, "CSV file", &model, 1, err))
        mi_fatal("%s", err);
    if (mo->png && mi_output_check(mo->png, "PNG file", &model, 1, err))
        mi_fatal("%s", err);
    if (mo->csv && mo->png && !strcmp(mo->csv, mo->png))
        mi_fatal("%s: --csv and --png name the same file", mo->csv);
    mi_config c;
    plan_load_config(model, shape, dt, &c);
    mo->wire = wire;
    if (mo->dim) {
        /* CATS Fig. 5's axis: the same heads and layers at feature size F, the FFN in proportion */
        if (mo->dim % c.n_heads)
            mi_fatal("plan: --dim %d is not a multiple of the %d heads", mo->dim, c.n_heads);
        c.hidden_dim = (int)((long)c.hidden_dim * mo->dim / c.dim);
        c.head_dim = mo->dim / c.n_heads;
        c.dim = mo->dim;
        char cerr[MI_ERRLEN];
        if (mi_config_validate(&c, cerr))
            mi_fatal("plan: --dim %d: %s", mo->dim, cerr);
    }
    if (mo->n_pos == 0)
        mo->n_pos = c.seq_len;
    return mem_run(&c, mo);
}

