/* `meshinfer simulate`'s report (see sim_report.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "sim_report.h"

static const char *const CSV_FILES[] = {"tokens.csv", "devices.csv", "links.csv", "replans.csv"};
static const char *const PNG_FILES[] = {"latency.png", "devices.png", "links.png"};

void sim_check_dir(const char *dir, const char *opt, const char *const *inputs, int n_inputs)
{
    struct stat st;
    if (!*dir)
        mi_fatal("simulate: %s needs a directory", opt);
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            mi_fatal("simulate: %s %s is not a directory", opt, dir);
    } else if (errno == ENOENT) {
        /* made when the results are written (sim_write_csv): a run that fails leaves nothing */
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", dir);
        for (size_t n = strlen(parent); n > 1 && parent[n - 1] == '/'; n--)
            parent[n - 1] = 0;
        char *slash = strrchr(parent, '/');
        if (slash)
            slash == parent ? (void)(parent[1] = 0) : (void)(*slash = 0);
        else
            snprintf(parent, sizeof parent, ".");
        if (stat(parent, &st) || !S_ISDIR(st.st_mode))
            mi_fatal("simulate: %s %s: cannot make the directory (%s is not a directory)", opt, dir, parent);
        return;
    } else {
        mi_fatal("simulate: %s %s: %s", opt, dir, strerror(errno));
    }
    char path[PATH_MAX], err[MI_ERRLEN];
    for (int i = 0; i < 4 + 3 * !strcmp(opt, "--plot"); i++) {
        const char *f = i < 4 ? CSV_FILES[i] : PNG_FILES[i - 4];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, f) >= sizeof path)
            mi_fatal("simulate: %s %s: the path is too long", opt, dir);
        if (mi_output_check(path, "simulation output", inputs, n_inputs, err))
            mi_fatal("simulate: %s: %s", opt, err);
    }
}

/* ------------------------------------------------------------ summaries */

static double busy_total(const mi_sim_result *r, int rank)
{
    double b = 0;
    for (int k = 0; k < r->n_tokens; k++)
        b += r->busy_s[(size_t)k * r->n_ranks + rank];
    return b;
}

static double mem_peak(const mi_sim_result *r, int rank)
{
    double m = 0;
    for (int k = 0; k < r->n_tokens; k++)
        if (r->mem_bytes[(size_t)k * r->n_ranks + rank] > m)
            m = r->mem_bytes[(size_t)k * r->n_ranks + rank];
    return m;
}

static double link_sum(const mi_sim_result *r, int rank, int sent)
{
    double b = 0;
    for (int j = 0; j < r->n_ranks; j++)
        b += sent ? r->link_bytes[(size_t)rank * r->n_ranks + j] : r->link_bytes[(size_t)j * r->n_ranks + rank];
    return b;
}

/* The re-placement before token k, or NULL. */
static const mi_sim_replan *replan_at(const mi_sim_result *r, int k)
{
    for (int i = 0; i < r->n_replans; i++)
        if (r->replans[i].token == k)
            return &r->replans[i];
    return NULL;
}

static void print_links_line(const sim_report *s)
{
    const mi_sim_links *lk = &s->rq->links;
    const mi_cluster *cl = s->cl;
    if (s->cluster_file)
        printf("  cluster %s: ", s->cluster_file);
    else
        printf("  %d equal device%s: ", cl->n_devices, cl->n_devices == 1 ? "" : "s");
    printf("links %s%.3g ms one-way, %.4g Mbit/s%s; jitter %.3g ms, loss %.3g%% (rto %.0f ms), %s\n",
           cl->rtt_s || cl->bw ? "per pair (link block: " : "", cl->latency_s * 1e3, cl->bandwidth * 8 / 1e6,
           cl->rtt_s || cl->bw ? ")" : "", lk->jitter_s * 1e3, lk->loss * 100, lk->rto_s * 1e3,
           lk->shared_medium ? "one shared medium" : "a link per pair");
}

typedef struct {
    double bytes;
    int a, b;
} link_row;

/* descending bytes, then sender and receiver ascending */
static int by_bytes(const void *x, const void *y)
{
    const link_row *p = x, *q = y;
    if (p->bytes != q->bytes)
        return p->bytes < q->bytes ? 1 : -1;
    return p->a != q->a ? p->a - q->a : p->b - q->b;
}

void sim_print_table(const sim_report *s)
{
    const mi_sim_result *r = s->r;
    const mi_config *c = s->c;
    const mi_cluster *cl = s->cl;
    int n = r->n_ranks, N = r->n_tokens;
    char dts[160];
    printf("simulate: %s (%d layers, %d KV heads, weights %s%s) on %d device%s, planner %s%s, prompt %d, %d of %d "
           "tokens, batch %d\n", c->name, c->n_layers, c->n_kv_heads, mi_config_dtype_summary(c, dts, sizeof dts),
           c->synthetic ? ", synthetic" : "", n, n == 1 ? "" : "s", mi_planner_name(s->plan->planner),
           s->rq->replan ? " with re-placement" : "", s->rq->n_prompt, N, s->rq->n_tokens, s->rq->batch);
    print_links_line(s);
    if (r->stopped)
        printf("  STOPPED: %s\n", r->stop_reason);
    if (N > 0) {
        double first = N > 1 ? r->token_s[1] : 0, last = N > 1 ? r->token_s[N - 1] : 0;
        printf("  TTFT %.3f ms, TPOT %.3f ms (first decode %.3f, last %.3f), total %.3f s, %.2f tokens/s%s\n",
               r->ttft_s * 1e3, r->tpot_s * 1e3, first * 1e3, last * 1e3, r->total_s,
               r->total_s > 0 ? N * s->rq->batch / r->total_s : 0.0, s->rq->batch > 1 ? " (all sequences)" : "");
    }
    printf("  payload %.3f MB in %.0f messages; %ld events in %d passes walked, %d decode passes interpolated "
           "(exact); simulated in %.3f s\n", r->bytes / 1e6, r->messages, r->events, r->walks, r->interpolated,
           s->wall_s);
    if (r->n_replans) {
        printf("  re-placements (HeadSplit, at %.0f%% of a budget or past the positions planned):\n",
               100 * MI_REPLACE_THRESHOLD);
        printf("    token  position  device            share  horizon  moved  kv_heads  move_ms\n");
        for (int i = 0; i < r->n_replans; i++) {
            const mi_sim_replan *e = &r->replans[i];
            printf("    %5d  %8d  %-16s  %4.0f%%%s  %7d  %5s  %8d  %7.2f\n", e->token, e->position,
                   cl->dev[e->rank].name, 100 * e->frac, e->outgrown ? "*" : " ", e->horizon, e->moved ? "yes" : "no",
                   e->kv_heads_moved, e->switch_s * 1e3);
        }
        printf("    (* the cache outgrew the positions planned; else the device crossed the threshold)\n");
    }
    if (N > 0) {
        printf("  latency over time (every %d tokens, and at re-placements):\n", N > 10 ? N / 10 : 1);
        printf("    token     time_s  latency_ms    ctx\n");
        for (int k = 0; k < N; k++)
            if (k % (N > 10 ? N / 10 : 1) == 0 || k == N - 1 || replan_at(r, k))
                printf("    %5d  %9.3f  %10.3f  %5d%s\n", k, r->t_s[k], r->token_s[k] * 1e3, r->ctx[k],
                       k == 0 ? "  (prefill)" : replan_at(r, k) ? "  (after a re-placement)" : "");
    }
    printf("  devices (busy: computing, of the %.3f s run; memory: weights + KV cache at its peak):\n", r->total_s);
    printf("    rank  device            busy_%%    busy_s  peak_MB  budget_MB  peak_use  sent_MB  recv_MB\n");
    for (int i = 0; i < n; i++) {
        double b = busy_total(r, i), m = mem_peak(r, i), bud = cl->dev[i].mem_bytes;
        printf("    %4d  %-16s  %6.1f  %8.3f  %7.1f  %9.1f  %7.1f%%  %7.2f  %7.2f\n", i, cl->dev[i].name,
               r->total_s > 0 ? 100 * b / r->total_s : 0.0, b, m / 1e6, bud / 1e6, bud > 0 ? 100 * m / bud : 0.0,
               link_sum(r, i, 1) / 1e6, link_sum(r, i, 0) / 1e6);
    }
    /* the busiest links: 10 by bytes */
    size_t nl = 0;
    link_row *rows = mi_malloc(((size_t)n * n + 1) * sizeof *rows, "links");
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (r->link_bytes[(size_t)a * n + b] > 0)
                rows[nl++] = (link_row){r->link_bytes[(size_t)a * n + b], a, b};
    qsort(rows, nl, sizeof *rows, by_bytes);
    printf("  busiest links (payload over the run):%s\n", nl ? "" : " none");
    for (size_t i = 0; i < nl && i < 10; i++)
        printf("    %-16s -> %-16s  %10.3f MB  %8.0f messages\n", cl->dev[rows[i].a].name, cl->dev[rows[i].b].name,
               rows[i].bytes / 1e6, r->link_msgs[(size_t)rows[i].a * n + rows[i].b]);
    free(rows);
}

/* ------------------------------------------------------------------ JSON */

static void json_array(const char *key, const double *v, size_t n, size_t stride, double scale)
{
    printf("\"%s\": [", key);
    for (size_t i = 0; i < n; i++)
        printf("%s%.6g", i ? ", " : "", v[i * stride] * scale);
    printf("]");
}

void sim_print_json(const sim_report *s)
{
    const mi_sim_result *r = s->r;
    const mi_sim_links *lk = &s->rq->links;
    const mi_cluster *cl = s->cl;
    int n = r->n_ranks, N = r->n_tokens;
    printf("{\"model\": ");
    cli_json_string(stdout, s->c->name, strlen(s->c->name));
    printf(", \"synthetic\": %s, \"devices\": %d, \"planner\": \"%s\", \"replan\": %s, \"prompt_tokens\": %d, "
           "\"tokens_asked\": %d, \"tokens\": %d, \"batch\": %d, \"kv_positions\": %d, ",
           s->c->synthetic ? "true" : "false", n, mi_planner_name(s->plan->planner), s->rq->replan ? "true" : "false",
           s->rq->n_prompt, s->rq->n_tokens, N, s->rq->batch, s->plan->kv_positions);
    printf("\"link_model\": {\"jitter_ms\": %.6g, \"loss_pct\": %.6g, \"rto_ms\": %.6g, \"shared_medium\": %s, "
           "\"spec_draws\": %s, \"seed\": %llu}, ", lk->jitter_s * 1e3, lk->loss * 100, lk->rto_s * 1e3,
           lk->shared_medium ? "true" : "false", lk->spec_draws ? "true" : "false", (unsigned long long)lk->seed);
    printf("\"ttft_ms\": %.6f, \"tpot_ms\": %.6f, \"total_s\": %.6f, \"tokens_per_s\": %.6f, \"bytes\": %.0f, "
           "\"messages\": %.0f, \"events\": %ld, \"walks\": %d, \"interpolated\": %d, \"sim_seconds\": %.4f, ",
           r->ttft_s * 1e3, r->tpot_s * 1e3, r->total_s, r->total_s > 0 ? N * s->rq->batch / r->total_s : 0.0,
           r->bytes, r->messages, r->events, r->walks, r->interpolated, s->wall_s);
    if (s->exact) { /* JSON has no NaN: null where the limit came before any bound */
        const mi_exact_info *e = s->exact;
        printf("\"exact\": {\"optimal\": %s, \"objective_ms\": %.6f, \"bound_ms\": ", e->optimal ? "true" : "false",
               e->objective_s * 1e3);
        if (isnan(e->bound_s))
            printf("null");
        else
            printf("%.6f", e->bound_s * 1e3);
        printf(", \"seconds\": %.3f, \"rows\": %d, \"cols\": %d, \"source\": \"%s\"}, ", e->seconds, e->rows, e->cols,
               mi_planner_name(e->source));
    }
    printf("\"stopped\": %s, \"stop_reason\": ", r->stopped ? "true" : "false");
    cli_json_string(stdout, r->stop_reason, strlen(r->stop_reason));
    printf(", \"replans\": [");
    for (int i = 0; i < r->n_replans; i++) {
        const mi_sim_replan *e = &r->replans[i];
        printf("%s{\"token\": %d, \"position\": %d, \"rank\": %d, \"fraction\": %.4f, \"outgrown\": %s, "
               "\"kv_positions\": %d, \"moved\": %s, \"kv_heads_moved\": %d, \"move_ms\": %.4f}", i ? ", " : "",
               e->token, e->position, e->rank, e->frac, e->outgrown ? "true" : "false", e->horizon,
               e->moved ? "true" : "false", e->kv_heads_moved, e->switch_s * 1e3);
    }
    printf("], ");
    json_array("token_ms", r->token_s, (size_t)N, 1, 1e3);
    printf(", ");
    json_array("time_s", r->t_s, (size_t)N, 1, 1);
    printf(", \"ctx\": [");
    for (int k = 0; k < N; k++)
        printf("%s%d", k ? ", " : "", r->ctx[k]);
    printf("], \"per_device\": [");
    for (int i = 0; i < n; i++) {
        printf("%s{\"rank\": %d, \"name\": ", i ? ", " : "", i);
        cli_json_string(stdout, cl->dev[i].name, strlen(cl->dev[i].name));
        printf(", \"budget_bytes\": %.0f, \"busy_s\": %.6f, \"sent_bytes\": %.0f, \"recv_bytes\": %.0f, ",
               cl->dev[i].mem_bytes, busy_total(r, i), link_sum(r, i, 1), link_sum(r, i, 0));
        json_array("busy_ms", r->busy_s + i, (size_t)N, (size_t)n, 1e3);
        printf(", ");
        json_array("mem_bytes", r->mem_bytes + i, (size_t)N, (size_t)n, 1);
        printf("}");
    }
    printf("], \"links\": [");
    int first = 1;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (r->link_msgs[(size_t)a * n + b] > 0) {
                printf("%s{\"from\": %d, \"to\": %d, \"bytes\": %.0f, \"messages\": %.0f}", first ? "" : ", ", a, b,
                       r->link_bytes[(size_t)a * n + b], r->link_msgs[(size_t)a * n + b]);
                first = 0;
            }
    printf("]}\n");
}

/* ------------------------------------------------------------------ CSV */

/* A device name as one CSV field. */
static void csv_name(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        fputs(*s == '"' ? "\"\"" : (char[]){*s, 0}, f);
    fputc('"', f);
}

static FILE *open_in(mi_output *o, const char *dir, const char *name)
{
    char path[PATH_MAX], err[MI_ERRLEN];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = mi_output_open(o, path, err);
    if (!f)
        mi_fatal("simulate: %s", err);
    return f;
}

static void commit(mi_output *o, FILE *f)
{
    char err[MI_ERRLEN];
    if (ferror(f)) {
        mi_output_abort(o);
        mi_fatal("simulate: %s: cannot write the file", o->path);
    }
    if (mi_output_commit(o, err))
        mi_fatal("simulate: %s", err);
}

void sim_write_csv(const sim_report *s, const char *dir)
{
    const mi_sim_result *r = s->r;
    const mi_cluster *cl = s->cl;
    int n = r->n_ranks, N = r->n_tokens;
    mi_output o;
    if (mkdir(dir, 0777) && errno != EEXIST)
        mi_fatal("simulate: %s: cannot make the directory (%s)", dir, strerror(errno));
    FILE *f = open_in(&o, dir, "tokens.csv");
    fprintf(f, "token,time_s,latency_ms,ctx,replaced,move_ms\n");
    for (int k = 0; k < N; k++) {
        const mi_sim_replan *e = replan_at(r, k);
        fprintf(f, "%d,%.9g,%.9g,%d,%d,%.9g\n", k, r->t_s[k], r->token_s[k] * 1e3, r->ctx[k], e != NULL,
                e ? e->switch_s * 1e3 : 0.0);
    }
    commit(&o, f);
    f = open_in(&o, dir, "devices.csv");
    fprintf(f, "token,rank,device,busy_ms,idle_ms,mem_mb,mem_use\n");
    for (int k = 0; k < N; k++)
        for (int i = 0; i < n; i++) {
            double b = r->busy_s[(size_t)k * n + i], m = r->mem_bytes[(size_t)k * n + i], bud = cl->dev[i].mem_bytes;
            fprintf(f, "%d,%d,", k, i);
            csv_name(f, cl->dev[i].name);
            fprintf(f, ",%.9g,%.9g,%.9g,%.6f\n", b * 1e3, (r->token_s[k] - b) * 1e3, m / 1e6, bud > 0 ? m / bud : 0.0);
        }
    commit(&o, f);
    f = open_in(&o, dir, "links.csv");
    fprintf(f, "from,to,from_device,to_device,bytes,messages\n");
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            if (r->link_msgs[(size_t)a * n + b] > 0) {
                fprintf(f, "%d,%d,", a, b);
                csv_name(f, cl->dev[a].name);
                fputc(',', f);
                csv_name(f, cl->dev[b].name);
                fprintf(f, ",%.0f,%.0f\n", r->link_bytes[(size_t)a * n + b], r->link_msgs[(size_t)a * n + b]);
            }
    commit(&o, f);
    f = open_in(&o, dir, "replans.csv");
    fprintf(f, "token,position,rank,device,fraction,outgrown,kv_positions,moved,kv_heads_moved,move_ms\n");
    for (int i = 0; i < r->n_replans; i++) {
        const mi_sim_replan *e = &r->replans[i];
        fprintf(f, "%d,%d,%d,", e->token, e->position, e->rank);
        csv_name(f, cl->dev[e->rank].name);
        fprintf(f, ",%.6f,%d,%d,%d,%d,%.9g\n", e->frac, e->outgrown, e->horizon, e->moved, e->kv_heads_moved,
                e->switch_s * 1e3);
    }
    commit(&o, f);
}

/* ------------------------------------------------------------- figures */

void sim_plot(const sim_report *s, const char *dir)
{
    char gp[PATH_MAX], title[512], msg[2048], err[MI_ERRLEN], dts[160], ns[16];
    if (cli_find_script("simulate.gp", gp, sizeof gp))
        mi_fatal("simulate: --plot: cannot find jobs/lib/simulate.gp (run meshinfer from its build directory in the "
                 "repository)");
    sim_write_csv(s, dir);
    snprintf(title, sizeof title, "%s (weights %s%s), %d devices, planner %s%s, prompt %d, batch %d", s->c->name,
             mi_config_dtype_summary(s->c, dts, sizeof dts), s->c->synthetic ? ", synthetic" : "", s->r->n_ranks,
             mi_planner_name(s->plan->planner), s->rq->replan ? " + re-placement" : "", s->rq->n_prompt,
             s->rq->batch);
    snprintf(ns, sizeof ns, "%d", s->r->n_ranks);
    for (int i = 0; i < 3; i++) {
        char path[PATH_MAX], figure[16];
        snprintf(path, sizeof path, "%s/%s", dir, PNG_FILES[i]);
        snprintf(figure, sizeof figure, "%.*s", (int)(strchr(PNG_FILES[i], '.') - PNG_FILES[i]), PNG_FILES[i]);
        mi_output o; /* gnuplot writes the temporary file; renamed when it succeeded */
        if (mi_output_begin(&o, path, err))
            mi_fatal("simulate: %s", err);
        char *argv[] = {"gnuplot", "-c", gp, figure, (char *)dir, o.tmp, title, ns, NULL};
        int rc = cli_run_gnuplot(argv, msg, sizeof msg);
        if (rc == 0) {
            if (mi_output_commit(&o, err))
                mi_fatal("simulate: %s", err);
            continue;
        }
        mi_output_abort(&o);
        if (rc == 127)
            mi_fatal("simulate: --plot needs gnuplot, which is not installed (jobs/dev/build.sh installs it)");
        mi_fatal("simulate: --plot: gnuplot failed on %s: %s", path, cli_first_line(msg));
    }
}
