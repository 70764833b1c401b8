/* `meshinfer forecast`: CATS's time-series workload (docs/patchtst.md).
 * A PatchTST-style encoder forecasts every channel of a multivariate series
 * from its look-back, split over the ranks by somegather (or layer-wise),
 * and is scored against the rows that follow. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/model_file.h"
#include "meshinfer/output.h"
#include "meshinfer/series.h"
#include "meshinfer/runtime.h"
#include "session_opts.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer forecast --model MODEL.h5 --series FILE.csv\n"
           "           [--at ROW | --split SPLIT.json [--stride N]] [--out FORECAST.csv] [--json]\n\n"
           "Forecasts every column of a multivariate series with a time-series model (CATS's\n"
           "PatchTST-style encoder, docs/patchtst.md; `meshinfer synth --shape patchtst` makes a\n"
           "synthetic one, train/patchtst.py trains one), each column on its own (channel-\n"
           "independent), and prints the error against the rows that follow the look-back.\n"
           "  --series FILE    CSV: a header of column names, then one row per time step; a first\n"
           "                   column named time, date or timestamp is left out\n"
           "  --at ROW         forecast rows [ROW, ROW+horizon) from rows [ROW-lookback, ROW)\n"
           "                   (default: the last horizon rows of the file)\n"
           "  --split FILE     JSON with \"train\": [0, a] and \"test\": [b, N] row ranges (written by\n"
           "                   jobs/dev/fetch_series.sh): every window whose forecast lies in the test\n"
           "                   range (its look-back may start earlier), errors standardised by the\n"
           "                   train rows' deviation (without --split: the whole file's)\n"
           "  --stride N       rows between the windows of --split (default: the horizon)\n"
           "  --out FILE       the forecasts as CSV (a row per forecast step; columns: window's first\n"
           "                   forecast row, step, then one per channel)\n"
           "  --threads N      compute threads per rank (default 1)\n"
           "  --json           print one JSON object\n"
           "Planners (--planner; for forecast the default is somegather): somegather (CATS,\n"
           "with --prune R or the masks the model was trained with, and --loss P --loss-mode M\n"
           "--loss-seed S), layerwise and tp. A model trained with pruning masks gives the same\n"
           "forecasts at every rank count only without them: a mask names columns, and which\n"
           "device owns a column depends on the rank count.\n"
           "%s",
           SESSION_HELP);
}

typedef struct {
    int a[2], b[2]; /* train, test row ranges [lo, hi) */
} split;

static int read_split(const char *path, int rows, split *sp, char *err)
{
    size_t len;
    char *text = mi_read_text_file(path, "split file", (size_t)1 << 24, &len, err);
    if (!text)
        return -1;
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1); /* the whole file: nothing after the object */
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return mi_set_error(err, "%s: split file is not one JSON object", path);
    }
    static const char *keys[2] = {"train", "test"};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
        int *v = k ? sp->b : sp->a;
        if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(r, 0)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(r, 1))) {
            rc = mi_set_error(err, "%s: \"%s\" must be [first row, end row]", path, keys[k]);
            break;
        }
        double lo = cJSON_GetArrayItem(r, 0)->valuedouble, hi = cJSON_GetArrayItem(r, 1)->valuedouble;
        if (!(lo >= 0 && hi <= rows && lo < hi) || lo != floor(lo) || hi != floor(hi))
            rc = mi_set_error(err, "%s: \"%s\" = [%g, %g] is not a row range inside the series' %d rows", path,
                              keys[k], lo, hi, rows);
        else
            v[0] = (int)lo, v[1] = (int)hi;
    }
    /* errors on rows the deviation came from would judge the forecast on its own standard */
    if (!rc && sp->b[0] < sp->a[1] && sp->a[0] < sp->b[1])
        rc = mi_set_error(err, "%s: the test rows [%d, %d) overlap the train rows [%d, %d)", path, sp->b[0], sp->b[1],
                          sp->a[0], sp->a[1]);
    cJSON_Delete(root);
    return rc;
}

/* One forecast command on rank 0: its inputs, its windows and its errors. */
typedef struct {
    const char *model, *path, *split_path, *out_path;
    long at, stride;
    mi_series s;
    split sp;
    int n_win, *origins;     /* window origins: the first forecast row of each */
    double *sd;              /* [cols] the deviation errors are standardised by */
    double *se, *ae;         /* [cols] squared and absolute errors, summed */
    double se_std;           /* standardised squared errors, summed */
    double fwd_s, seconds;   /* time in forward passes; the whole loop */
    float *y;                /* [horizon * cols] the last window's forecasts */
    float *x, *patches;      /* [lookback], [n_patches * patch_len]: one channel's input (heap: the model
                                file sets their sizes) */
} fc_run;

/* Read the series and check it, the output and the windows against the
 * model's config, before any rank loads a shard. 0, or -1 with err. */
static int fc_prepare(fc_run *r, char *err)
{
    const char *inputs[] = {r->model, r->path, r->split_path};
    if (mi_series_read(r->path, &r->s, err) ||
        (r->out_path && mi_output_check(r->out_path, "forecast file", inputs, 3, err)))
        return -1;
    mi_config cfg;
    mi_model_file *mf = mi_model_open(r->model, &cfg, err);
    if (!mf)
        return -1;
    mi_model_close(mf);
    const mi_config *c = &cfg;
    const mi_series *s = &r->s;
    if (c->family != MI_FAMILY_PATCHTST)
        return mi_set_error(err, "%s is a language model; forecast needs a time-series model (docs/patchtst.md)",
                            r->model);
    if (s->cols != c->n_channels)
        return mi_set_error(err, "%s has %d columns, but the model was trained on %d channels", r->path, s->cols,
                            c->n_channels);
    if (s->rows < c->lookback + c->horizon)
        return mi_set_error(err, "%s has %d rows: a forecast needs lookback %d + horizon %d = %d", r->path, s->rows,
                            c->lookback, c->horizon, c->lookback + c->horizon);
    if (mi_world_size() > c->horizon) /* each rank computes rows of the head */
        return mi_set_error(err, "%s forecasts %d rows, fewer than the %d ranks (each computes rows of the head): run "
                                 "on at most %d", r->model, c->horizon, mi_world_size(), c->horizon);
    if (r->at >= 0 && (r->at < c->lookback || r->at + c->horizon > s->rows))
        return mi_set_error(err, "--at %ld: the look-back needs rows from %ld and the forecast rows up to %ld, but %s "
                                 "has rows 0..%d", r->at, r->at - c->lookback, r->at + c->horizon - 1, r->path,
                            s->rows - 1);
    if (r->split_path && read_split(r->split_path, s->rows, &r->sp, err))
        return -1;
    if (r->split_path) {
        /* a window's look-back may reach back before the test rows (as PatchTST's loaders do) */
        int step = r->stride ? (int)r->stride : c->horizon, lo = r->sp.b[0] > c->lookback ? r->sp.b[0] : c->lookback;
        r->origins = mi_malloc((size_t)(s->rows / step + 2) * sizeof(int), "windows");
        for (int t = lo; t + c->horizon <= r->sp.b[1]; t += step)
            r->origins[r->n_win++] = t;
        if (r->n_win == 0)
            return mi_set_error(err, "%s: the test rows [%d, %d) hold no window of lookback %d + horizon %d",
                                r->split_path, r->sp.b[0], r->sp.b[1], c->lookback, c->horizon);
    } else {
        r->origins = mi_malloc(sizeof(int), "windows");
        r->origins[r->n_win++] = r->at >= 0 ? (int)r->at : s->rows - c->horizon;
    }
    /* standardised by the train rows' population deviation (the whole file without --split) */
    int C = s->cols, lo = r->split_path ? r->sp.a[0] : 0, hi = r->split_path ? r->sp.a[1] : s->rows;
    r->sd = mi_malloc((size_t)C * sizeof(double), "column deviations");
    for (int j = 0; j < C; j++) {
        double m = 0, v = 0;
        for (int i = lo; i < hi; i++)
            m += s->v[(size_t)i * C + j];
        m /= hi - lo;
        for (int i = lo; i < hi; i++)
            v += (s->v[(size_t)i * C + j] - m) * (s->v[(size_t)i * C + j] - m);
        if (!(v > 0)) /* dividing by 1 instead would report the raw error as the standardised one */
            return mi_set_error(err, "%s: column '%s' is constant over the rows [%d, %d) its deviation is taken "
                                "from, so its standardised error is undefined%s", r->path, s->names[j], lo, hi,
                                r->split_path ? " (give train rows where it varies)" : "");
        r->sd[j] = sqrt(v / (hi - lo));
    }
    return 0;
}

/* Rank 0: every channel's forecast at window origin t into r->y. */
static void forecast_window(fc_run *r, mi_session *ss, int t)
{
    const mi_config *c = &ss->cfg;
    const mi_series *s = &r->s;
    for (int j = 0; j < s->cols; j++) {
        for (int i = 0; i < c->lookback; i++)
            r->x[i] = (float)s->v[(size_t)(t - c->lookback + i) * s->cols + j];
        float mu, sigma;
        mi_series_patches(c, r->x, r->patches, &mu, &sigma);
        double t0 = mi_now();
        const float *out = mi_runtime_forecast(ss->rt, r->patches);
        r->fwd_s += mi_now() - t0;
        for (int h = 0; h < c->horizon; h++) {
            float v = out[h] * sigma + mu;
            if (!isfinite(v)) /* NaN weights, or a series whose scale overflows float32 inside the model */
                mi_fatal("forecast of row %d, column '%s' is not finite: the weights are corrupt (run meshinfer "
                         "check) or the series' values overflow float32 in the model", t + h, s->names[j]);
            r->y[(size_t)h * s->cols + j] = v;
        }
    }
}

/* Rank 0: every window, its errors summed, the forecasts to --out, progress on stderr. */
static void fc_run_windows(fc_run *r, mi_session *ss)
{
    int H = ss->cfg.horizon, C = r->s.cols;
    char err[MI_ERRLEN];
    r->y = mi_malloc((size_t)H * C * sizeof(float), "forecast");
    r->x = mi_malloc((size_t)ss->cfg.lookback * sizeof(float), "look-back");
    r->patches = mi_malloc((size_t)ss->cfg.seq_len * (size_t)ss->cfg.patch_len * sizeof(float), "patches");
    r->se = mi_calloc((size_t)C, sizeof(double), "errors");
    r->ae = mi_calloc((size_t)C, sizeof(double), "errors");
    double t0 = mi_now();
    mi_output out;
    FILE *f = NULL;
    if (r->out_path) {
        if (!(f = mi_output_open(&out, r->out_path, err)))
            mi_fatal("%s", err);
        fprintf(f, "origin,step");
        for (int j = 0; j < C; j++)
            fprintf(f, ",%s", r->s.names[j]);
        fputc('\n', f);
    }
    int tty = isatty(fileno(stderr)), every = r->n_win / 10 > 0 ? r->n_win / 10 : 1;
    for (int w = 0; w < r->n_win; w++) {
        int t = r->origins[w];
        forecast_window(r, ss, t);
        for (int h = 0; h < H; h++) {
            if (f) {
                fprintf(f, "%d,%d", t, h);
                for (int j = 0; j < C; j++)
                    fprintf(f, ",%.9g", (double)r->y[(size_t)h * C + j]);
                fputc('\n', f);
            }
            for (int j = 0; j < C; j++) {
                double d = (double)r->y[(size_t)h * C + j] - r->s.v[(size_t)(t + h) * C + j];
                r->se[j] += d * d;
                r->ae[j] += fabs(d);
                r->se_std += d * d / (r->sd[j] * r->sd[j]);
            }
        }
        if (r->n_win > 1 && (tty || (w + 1) % every == 0 || w + 1 == r->n_win))
            fprintf(stderr, "%sforecast: %d/%d windows, standardised MSE so far %.4f%s", tty ? "\r" : "", w + 1,
                    r->n_win, r->se_std / ((double)(w + 1) * H * C), tty ? "   " : "\n");
    }
    if (r->n_win > 1 && tty)
        fputc('\n', stderr);
    if (f && mi_output_commit(&out, err))
        mi_fatal("%s", err);
    r->seconds = mi_now() - t0;
}

/* Rank 0: the report, as text or as the start of the JSON object (the
 * session's metrics follow). */
static void fc_report(const fc_run *r, const mi_session *ss, int json)
{
    const mi_config *c = &ss->cfg;
    int H = c->horizon, C = r->s.cols;
    double n_pts = (double)r->n_win * H, ms = 1e3 * r->fwd_s / ((double)r->n_win * C);
    if (json) {
        printf("{\"model\": ");
        cli_json_string(stdout, r->model, strlen(r->model));
        printf(", \"series\": ");
        cli_json_string(stdout, r->path, strlen(r->path));
        printf(", \"synthetic_weights\": %s, \"n_ranks\": %d, \"planner\": \"%s\", \"windows\": %d, "
               "\"channels\": %d, \"lookback\": %d, \"horizon\": %d, \"mse_standardised\": %.9g, "
               "\"forecast_ms\": %.4f, \"seconds\": %.3f, \"per_channel\": [",
               c->synthetic ? "true" : "false", ss->size, mi_planner_name(ss->plan.planner), r->n_win, C, c->lookback,
               H, r->se_std / (n_pts * C), ms, r->seconds);
        for (int j = 0; j < C; j++) {
            printf("%s{\"name\": ", j ? ", " : "");
            cli_json_string(stdout, r->s.names[j], strlen(r->s.names[j]));
            printf(", \"mse\": %.9g, \"mae\": %.9g}", r->se[j] / n_pts, r->ae[j] / n_pts);
        }
        printf("], ");
        return;
    }
    if (r->n_win == 1) { /* the forecast beside the rows it forecasts */
        int t = r->origins[0];
        printf("forecast of rows %d..%d from rows %d..%d (%s, %d rank%s)\n%-5s", t, t + H - 1, t - c->lookback, t - 1,
               mi_planner_name(ss->plan.planner), ss->size, ss->size > 1 ? "s" : "", "step");
        for (int j = 0; j < C; j++)
            printf(" %14.14s %14s", r->s.names[j], "actual");
        printf("\n");
        for (int h = 0; h < H; h++) {
            printf("%-5d", h);
            for (int j = 0; j < C; j++)
                printf(" %14.6g %14.6g", (double)r->y[(size_t)h * C + j], r->s.v[(size_t)(t + h) * C + j]);
            printf("\n");
        }
    }
    for (int j = 0; j < C; j++)
        printf("%-16.16s mse %.6g  mae %.6g\n", r->s.names[j], r->se[j] / n_pts, r->ae[j] / n_pts);
    printf("windows %d  standardised mse %.6f  %.3f ms per channel forecast%s\n", r->n_win, r->se_std / (n_pts * C),
           ms, c->synthetic ? "  (synthetic weights)" : "");
}

static void fc_free(fc_run *r)
{
    mi_series_free(&r->s);
    free(r->origins);
    free(r->sd);
    free(r->se);
    free(r->ae);
    free(r->y);
    free(r->x);
    free(r->patches);
}

int cmd_forecast(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"series", required_argument, 0, 's'},
                                         {"at", required_argument, 0, 'a'},
                                         {"split", required_argument, 0, 'S'},
                                         {"stride", required_argument, 0, 'r'},
                                         {"out", required_argument, 0, 'o'},
                                         {"threads", required_argument, 0, 'T'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         SESSION_LONG_OPTS,
                                         {0, 0, 0, 0}};
    fc_run r;
    memset(&r, 0, sizeof r);
    r.at = -1;
    int threads = 1, json = 0, o, planner_given = 0;
    session_opts so;
    session_opts_init(&so);
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': r.model = optarg; break;
        case 's': r.path = optarg; break;
        case 'a': r.at = mi_parse_long("--at", optarg, 0, 1L << 30); break;
        case 'S': r.split_path = optarg; break;
        case 'r': r.stride = mi_parse_long("--stride", optarg, 1, 1L << 30); break;
        case 'o': r.out_path = optarg; break;
        case 'T': threads = (int)mi_parse_long("--threads", optarg, 1, 256); break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        default:
            planner_given |= o == 1000;
            if (!session_opt(&so, o, optarg))
                cli_bad_option("forecast", o, argv);
        }
    }
    cli_no_positional("forecast", optind, argc, argv);
    if (!r.model || !r.path)
        mi_fatal("forecast: --model and --series are required (see meshinfer forecast --help)");
    if (r.at >= 0 && r.split_path)
        mi_fatal("forecast: --at forecasts one window, --split every window of the test rows: give one");
    if (r.stride && !r.split_path)
        mi_fatal("forecast: --stride spaces the windows of --split");
    if (so.tpot_ms > 0 || so.importance || so.energy || so.replan || so.prune_ffn)
        mi_fatal("forecast: --tpot-ms, --importance, --energy, --replan and --prune-ffn act on a language model's "
                 "decode steps");
    if (!planner_given)
        so.planner = "somegather";
    char cerr[MI_ERRLEN];
    if (session_opts_check(&so, "forecast", mi_world_launch_size(NULL), cerr))
        mi_fatal("%s", cerr);

    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    char err[MI_ERRLEN] = "";
    mi_check_all(rank == 0 && fc_prepare(&r, err) != 0, err);
    so.text_input = r.path;
    so.forecast = 1;
    mi_session ss;
    session_open(&ss, "forecast", r.model, &so, 1 << 16, threads);
    if (rank != 0) {
        mi_runtime_serve(ss.rt);
    } else {
        fc_run_windows(&r, &ss);
        mi_runtime_stop(ss.rt);
        fc_report(&r, &ss, json);
    }
    if (json)
        session_metrics_json(&ss, stdout);
    if (rank == 0 && json)
        printf("}\n");
    fc_free(&r);
    session_close(&ss, &so);
    mi_world_finalize();
    return 0;
}
