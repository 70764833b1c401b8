/* `meshinfer forecast`: seed 002's time-series workload (docs/patchtst.md).
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
#include "session.h"

static void help(void)
{
    printf("usage: [mpirun -np N ...] meshinfer forecast --model MODEL.h5 --series FILE.csv\n"
           "           [--at ROW | --split SPLIT.json [--stride N]] [--out FORECAST.csv] [--json]\n\n"
           "Forecasts every column of a multivariate series with a time-series model (seed 002's\n"
           "PatchTST-style encoder, docs/patchtst.md; `meshinfer synth --shape patchtst` makes a\n"
           "synthetic one, train/patchtst.py trains one), each column on its own (channel-\n"
           "independent), and prints the error against the rows that follow the look-back.\n"
           "  --series FILE    CSV: a header of column names, then one row per time step; a first\n"
           "                   column named time, date or timestamp is left out\n"
           "  --at ROW         forecast rows [ROW, ROW+horizon) from rows [ROW-lookback, ROW)\n"
           "                   (default: the last horizon rows of the file)\n"
           "  --split FILE     JSON with \"train\": [0, a] and \"test\": [b, N] row ranges (written by\n"
           "                   jobs/fetch_series.sh): every window whose forecast lies in the test\n"
           "                   range, errors standardised by the train rows' mean and deviation\n"
           "  --stride N       rows between the windows of --split (default: the horizon)\n"
           "  --out FILE       the forecasts as CSV (a row per forecast step; columns: window's first\n"
           "                   forecast row, step, then one per channel)\n"
           "  --threads N      compute threads per rank (default 1)\n"
           "  --json           print one JSON object\n"
           "Planners: somegather (default; seed 002, with --prune R or the masks the model was\n"
           "trained with, and --loss P --loss-mode M --loss-seed S), layerwise and tp.\n"
           "%s",
           SESSION_HELP);
}

typedef struct {
    int a[2], b[2]; /* train, test row ranges [lo, hi) */
} split;

static int read_split(const char *path, int rows, split *sp, char *err)
{
    size_t len;
    char *text = cli_read_text_err(path, &len, err);
    if (!text)
        return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root)
        return mi_set_error(err, "%s: not valid JSON", path);
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
    cJSON_Delete(root);
    return rc;
}

/* Rank 0: the forecasts of every channel at window origin t into y[horizon * cols]. */
static void forecast_window(mi_session *ss, const mi_series *s, int t, float *y, double *fwd_s)
{
    const mi_config *c = &ss->cfg;
    float x[c->lookback], patches[(size_t)c->seq_len * c->patch_len];
    for (int j = 0; j < s->cols; j++) {
        for (int i = 0; i < c->lookback; i++)
            x[i] = (float)s->v[(size_t)(t - c->lookback + i) * s->cols + j];
        float mu, sigma;
        mi_series_patches(c, x, patches, &mu, &sigma);
        double t0 = mi_now();
        const float *out = mi_runtime_forecast(ss->rt, patches);
        *fwd_s += mi_now() - t0;
        for (int h = 0; h < c->horizon; h++)
            y[(size_t)h * s->cols + j] = out[h] * sigma + mu;
    }
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
    const char *model = NULL, *path = NULL, *split_path = NULL, *out_path = NULL;
    long at = -1, stride = 0;
    int threads = 1, json = 0, o, planner_given = 0;
    session_opts so;
    session_opts_init(&so);
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model = optarg; break;
        case 's': path = optarg; break;
        case 'a': at = mi_parse_long("--at", optarg, 0, 1L << 30); break;
        case 'S': split_path = optarg; break;
        case 'r': stride = mi_parse_long("--stride", optarg, 1, 1L << 30); break;
        case 'o': out_path = optarg; break;
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
    if (!model || !path)
        mi_fatal("forecast: --model and --series are required (see meshinfer forecast --help)");
    if (at >= 0 && split_path)
        mi_fatal("forecast: --at forecasts one window, --split every window of the test rows: give one");
    if (stride && !split_path)
        mi_fatal("forecast: --stride spaces the windows of --split");
    if (so.tpot_ms > 0 || so.importance || so.energy || so.replan || so.prune_ffn)
        mi_fatal("forecast: --tpot-ms, --importance, --energy, --replan and --prune-ffn act on a language model's "
                 "decode steps");
    if (!planner_given)
        so.planner = "somegather";

    int rank, size;
    session_mpi_init(&argc, &argv, &rank, &size);
    /* the series is the controller's: read and checked before any rank loads */
    char err[MI_ERRLEN] = "";
    mi_series s;
    memset(&s, 0, sizeof s);
    int failed = 0;
    if (rank == 0) {
        const char *inputs[] = {model, path, split_path};
        failed = mi_series_read(path, &s, err) != 0 ||
                 (out_path && mi_output_check(out_path, "forecast file", inputs, 3, err) != 0);
    }
    /* the series against the model's config before any rank loads a shard */
    mi_config c0;
    memset(&c0, 0, sizeof c0);
    const mi_config *c = &c0;
    split sp;
    int n_win = 0, *origins = NULL;
    if (rank == 0 && !failed) {
        mi_model_file *mf = mi_model_open(model, &c0, err);
        if (!mf)
            failed = 1;
        mi_model_close(mf);
        if (!failed && c->family != MI_FAMILY_PATCHTST)
            failed = mi_set_error(err, "%s is a language model; forecast needs a time-series model (docs/patchtst.md)",
                                  model);
        else if (failed)
            ;
        else if (s.cols != c->n_channels)
            failed = mi_set_error(err, "%s has %d columns, but the model was trained on %d channels", path, s.cols,
                                  c->n_channels);
        else if (s.rows < c->lookback + c->horizon)
            failed = mi_set_error(err, "%s has %d rows: a forecast needs lookback %d + horizon %d = %d", path, s.rows,
                                  c->lookback, c->horizon, c->lookback + c->horizon);
        else if (at >= 0 && (at < c->lookback || at + c->horizon > s.rows))
            failed = mi_set_error(err, "--at %ld: the look-back needs rows from %ld and the forecast rows up to %ld, "
                                       "but %s has rows 0..%d", at, at - c->lookback, at + c->horizon - 1, path,
                                  s.rows - 1);
        else if (split_path && read_split(split_path, s.rows, &sp, err))
            failed = 1;
        if (!failed) {
            if (split_path) {
                int step = stride ? (int)stride : c->horizon, lo = sp.b[0] > c->lookback ? sp.b[0] : c->lookback;
                origins = mi_malloc((size_t)(s.rows / step + 2) * sizeof(int), "windows");
                for (int t = lo; t + c->horizon <= sp.b[1]; t += step)
                    origins[n_win++] = t;
                if (n_win == 0)
                    failed = mi_set_error(err, "%s: the test rows [%d, %d) hold no window of lookback %d + horizon %d",
                                          split_path, sp.b[0], sp.b[1], c->lookback, c->horizon);
            } else {
                origins = mi_malloc(sizeof(int), "windows");
                origins[n_win++] = at >= 0 ? (int)at : s.rows - c->horizon;
            }
        }
    }
    mi_check_all(failed, err);
    so.text_input = path;
    so.forecast = 1;
    mi_session ss;
    session_open(&ss, "forecast", model, &so, 1 << 16, threads);
    c = &ss.cfg;
    if (rank != 0) {
        mi_runtime_serve(ss.rt);
    } else {
        int H = c->horizon, C = s.cols;
        /* standardised errors (split given): by the train rows' mean and population deviation */
        double *mean = mi_calloc((size_t)C, sizeof(double), "column stats"), *sd = mi_malloc((size_t)C * sizeof(double), "column stats");
        for (int j = 0; j < C; j++) {
            int lo = split_path ? sp.a[0] : 0, hi = split_path ? sp.a[1] : s.rows;
            double m = 0, v = 0;
            for (int i = lo; i < hi; i++)
                m += s.v[(size_t)i * C + j];
            m /= hi - lo;
            for (int i = lo; i < hi; i++)
                v += (s.v[(size_t)i * C + j] - m) * (s.v[(size_t)i * C + j] - m);
            mean[j] = m;
            sd[j] = sqrt(v / (hi - lo)) > 0 ? sqrt(v / (hi - lo)) : 1.0;
        }
        float *y = mi_malloc((size_t)H * C * sizeof(float), "forecast");
        double *se = mi_calloc((size_t)C, sizeof(double), "errors"), *ae = mi_calloc((size_t)C, sizeof(double), "errors");
        double se_std = 0, fwd_s = 0, t0 = mi_now();
        mi_output out;
        FILE *f = NULL;
        if (out_path) {
            if (!(f = mi_output_open(&out, out_path, err)))
                mi_fatal("%s", err);
            fprintf(f, "origin,step");
            for (int j = 0; j < C; j++)
                fprintf(f, ",%s", s.names[j]);
            fputc('\n', f);
        }
        int tty = isatty(fileno(stderr));
        for (int w = 0; w < n_win; w++) {
            int t = origins[w];
            forecast_window(&ss, &s, t, y, &fwd_s);
            for (int h = 0; h < H; h++) {
                if (f) {
                    fprintf(f, "%d,%d", t, h);
                    for (int j = 0; j < C; j++)
                        fprintf(f, ",%.9g", (double)y[(size_t)h * C + j]);
                    fputc('\n', f);
                }
                for (int j = 0; j < C; j++) {
                    double d = (double)y[(size_t)h * C + j] - s.v[(size_t)(t + h) * C + j];
                    se[j] += d * d;
                    ae[j] += fabs(d);
                    se_std += d * d / (sd[j] * sd[j]);
                }
            }
            int step = n_win / 10 > 0 ? n_win / 10 : 1;
            if (n_win > 1 && (tty || (w + 1) % step == 0 || w + 1 == n_win))
                fprintf(stderr, "%sforecast: %d/%d windows, standardised MSE so far %.4f%s", tty ? "\r" : "", w + 1,
                        n_win, se_std / ((double)(w + 1) * H * C), tty ? "   " : "\n");
        }
        if (n_win > 1 && tty)
            fputc('\n', stderr);
        if (f && mi_output_commit(&out, err))
            mi_fatal("%s", err);
        double seconds = mi_now() - t0, n_pts = (double)n_win * H;
        mi_runtime_stop(ss.rt);
        if (json) {
            printf("{\"model\": ");
            cli_json_string(stdout, model, strlen(model));
            printf(", \"series\": ");
            cli_json_string(stdout, path, strlen(path));
            printf(", \"synthetic_weights\": %s, \"n_ranks\": %d, \"planner\": \"%s\", \"windows\": %d, "
                   "\"channels\": %d, \"lookback\": %d, \"horizon\": %d, \"mse_standardised\": %.9g, "
                   "\"forecast_ms\": %.4f, \"seconds\": %.3f, \"per_channel\": [",
                   c->synthetic ? "true" : "false", size, mi_planner_name(ss.plan.planner), n_win, C, c->lookback, H,
                   se_std / (n_pts * C), 1e3 * fwd_s / ((double)n_win * C), seconds);
            for (int j = 0; j < C; j++) {
                printf("%s{\"name\": ", j ? ", " : "");
                cli_json_string(stdout, s.names[j], strlen(s.names[j]));
                printf(", \"mse\": %.9g, \"mae\": %.9g}", se[j] / n_pts, ae[j] / n_pts);
            }
            printf("], ");
        } else {
            if (n_win == 1) {
                printf("forecast of rows %d..%d from rows %d..%d (%s, %d rank%s)\n", origins[0], origins[0] + H - 1,
                       origins[0] - c->lookback, origins[0] - 1, mi_planner_name(ss.plan.planner), size,
                       size > 1 ? "s" : "");
                printf("%-5s", "step");
                for (int j = 0; j < C; j++)
                    printf(" %14.14s %14s", s.names[j], "actual");
                printf("\n");
                for (int h = 0; h < H; h++) {
                    printf("%-5d", h);
                    for (int j = 0; j < C; j++)
                        printf(" %14.6g %14.6g", (double)y[(size_t)h * C + j], s.v[(size_t)(origins[0] + h) * C + j]);
                    printf("\n");
                }
            }
            for (int j = 0; j < C; j++)
                printf("%-16.16s mse %.6g  mae %.6g\n", s.names[j], se[j] / n_pts, ae[j] / n_pts);
            printf("windows %d  standardised mse %.6f  %.3f ms per channel forecast%s\n", n_win,
                   se_std / (n_pts * C), 1e3 * fwd_s / ((double)n_win * C),
                   c->synthetic ? "  (synthetic weights)" : "");
        }
        free(y);
        free(se);
        free(ae);
        free(mean);
        free(sd);
    }
    if (json)
        session_metrics_json(&ss, stdout);
    if (rank == 0 && json)
        printf("}\n");
    free(origins);
    mi_series_free(&s);
    session_close(&ss, &so);
    mi_world_finalize();
    return 0;
}
