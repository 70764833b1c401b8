/* CUnit tests for cluster files (src/cluster.c) and plan JSON files
 * (src/plan_io.c).
 *
 * Usage: test_cluster HOSTFILES_DIR
 *   HOSTFILES_DIR holds cluster-localhost.json, cluster-5pi.json and
 *   cluster-hetero.json, which must parse. Scratch files go to a mkdtemp
 *   directory under $TMPDIR or /tmp and are removed at the end.
 *
 * Cluster files accept exactly the keys "description" (free-form string,
 * the stand-in for comments), "link" {"latency_ms", "bandwidth_mbit"},
 * "mem_bandwidth_gbs" and "devices" [{"name", "mem_mb", "speed"}]; anything
 * else is an error. mem_mb is decimal megabytes (1e6 bytes).
 *
 * Exit status: 0 when every test passed, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L

#include "meshinfer/common.h"
#include "test_util.h"
#include "meshinfer/config.h"
#include "meshinfer/plan.h"
#include "meshinfer/planner.h"
#include "meshinfer/quantize.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_hostfiles = NULL;
static char g_dir[4096];

/* ------------------------------------------------------------ helpers */

#define CHECK_NEAR(a, b) CU_ASSERT(fabs((double)(a) - (double)(b)) <= 1e-9 * fmax(1.0, fabs((double)(b))))

/* Parse text expecting failure; every NULL-terminated word must appear in err. */
static void expect_cluster_error(const char *json, const char *w1, const char *w2)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    int rc = mi_cluster_parse(json, &cl, err);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(cl.dev);
    CU_ASSERT_EQUAL(cl.n_devices, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cluster file"));
    if (w1 && !strstr(err, w1)) {
        fprintf(stderr, "\n  expected '%s' in error: %s\n  input: %s\n", w1, err, json);
        CU_FAIL("error text lacks an expected word");
    }
    if (w2 && !strstr(err, w2)) {
        fprintf(stderr, "\n  expected '%s' in error: %s\n  input: %s\n", w2, err, json);
        CU_FAIL("error text lacks an expected word");
    }
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    if (rc == 0)
        mi_cluster_free(&cl);
}

/* --------------------------------------------------------- cluster tests */

static void test_cluster_full(void)
{
    const char *json = "{\n"
                       "  \"description\": \"two boards\",\n"
                       "  \"link\": {\"latency_ms\": 5, \"bandwidth_mbit\": 300},\n"
                       "  \"mem_bandwidth_gbs\": 4,\n"
                       "  \"devices\": [\n"
                       "    {\"name\": \"pi-ctl\", \"mem_mb\": 3500, \"speed\": 1.0},\n"
                       "    {\"name\": \"pi5\", \"mem_mb\": 7300.5, \"speed\": 2.5,\n"
                       "     \"power\": {\"idle_w\": 2.7, \"active_w\": 7, \"freq\": [1, 0.75, 0.5]}},\n"
                       "    {\"mem_mb\": 1}\n"
                       "  ]\n"
                       "}\n";
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    int rc = mi_cluster_parse(json, &cl, err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(cl.n_devices, 3);
    CHECK_NEAR(cl.latency_s, 0.005);
    CHECK_NEAR(cl.bandwidth, 300e6 / 8); /* 37.5 MB/s */
    CHECK_NEAR(cl.mem_bw, 4e9);
    CU_ASSERT_PTR_NULL(cl.rtt_s);
    CU_ASSERT_STRING_EQUAL(cl.dev[0].name, "pi-ctl");
    CHECK_NEAR(cl.dev[0].mem_bytes, 3500e6);
    CHECK_NEAR(cl.dev[0].speed, 1.0);
    CU_ASSERT_STRING_EQUAL(cl.dev[1].name, "pi5");
    CHECK_NEAR(cl.dev[1].mem_bytes, 7300.5e6);
    CHECK_NEAR(cl.dev[1].speed, 2.5);
    CU_ASSERT_STRING_EQUAL(cl.dev[2].name, "dev2");
    CHECK_NEAR(cl.dev[2].mem_bytes, 1e6);
    CHECK_NEAR(cl.dev[2].speed, 1.0);
    /* power: given for pi5, HeadSplit's Raspberry Pi 4 figures at one level otherwise */
    CU_ASSERT(cl.dev[1].power_given && !cl.dev[0].power_given);
    CHECK_NEAR(cl.dev[1].idle_w, 2.7);
    CHECK_NEAR(cl.dev[1].active_w, 7);
    CU_ASSERT_EQUAL(cl.dev[1].n_freq, 3);
    CHECK_NEAR(cl.dev[1].freq[2], 0.5);
    CHECK_NEAR(cl.dev[0].idle_w, 3.8);
    CHECK_NEAR(cl.dev[0].active_w, 4.9);
    CU_ASSERT_EQUAL(cl.dev[0].n_freq, 1);
    mi_cluster_free(&cl);
    CU_ASSERT_PTR_NULL(cl.dev);
    CU_ASSERT_EQUAL(cl.n_devices, 0);
}

static void test_cluster_defaults(void)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL_FATAL(mi_cluster_parse("{\"devices\": [{\"mem_mb\": 100}, {\"mem_mb\": 200}]}", &cl, err), 0);
    CU_ASSERT_EQUAL(cl.n_devices, 2);
    CHECK_NEAR(cl.latency_s, 20e-6);
    CHECK_NEAR(cl.bandwidth, 5e9);
    CHECK_NEAR(cl.mem_bw, 20e9);
    CU_ASSERT_STRING_EQUAL(cl.dev[0].name, "dev0");
    CU_ASSERT_STRING_EQUAL(cl.dev[1].name, "dev1");
    CHECK_NEAR(cl.dev[1].mem_bytes, 200e6);
    CHECK_NEAR(cl.dev[0].speed, 1.0);
    CU_ASSERT_PTR_NULL(cl.rtt_s);
    mi_cluster_free(&cl);

    /* link keys are optional one by one; zero latency is allowed */
    CU_ASSERT_EQUAL_FATAL(mi_cluster_parse("{\"link\": {\"latency_ms\": 0}, \"devices\": [{\"mem_mb\": 1}]}", &cl,
                                           err), 0);
    CHECK_NEAR(cl.latency_s, 0.0);
    CHECK_NEAR(cl.bandwidth, 5e9);
    mi_cluster_free(&cl);
    CU_ASSERT_EQUAL_FATAL(mi_cluster_parse("{\"link\": {\"bandwidth_mbit\": 8}, \"devices\": [{\"mem_mb\": 1}]}", &cl,
                                           err), 0);
    CHECK_NEAR(cl.latency_s, 20e-6);
    CHECK_NEAR(cl.bandwidth, 1e6);
    mi_cluster_free(&cl);

    mi_cluster_default(&cl, 4, 2e9);
    CU_ASSERT_EQUAL(cl.n_devices, 4);
    CHECK_NEAR(cl.latency_s, 20e-6);
    CHECK_NEAR(cl.bandwidth, 5e9);
    CHECK_NEAR(cl.mem_bw, 20e9);
    CU_ASSERT_PTR_NULL(cl.rtt_s);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(cl.dev[i].mem_bytes, 2e9);
        CHECK_NEAR(cl.dev[i].speed, 1.0);
        CU_ASSERT(cl.dev[i].name[0] != '\0');
    }
    mi_cluster_free(&cl);
}

static void test_cluster_syntax_errors(void)
{
    /* cJSON reports where it stopped: byte 26 is the stray "x" */
    expect_cluster_error("{\"devices\":[{\"mem_mb\":1}]} x", "syntax", "byte 27");
    /* truncated: stops at the end (byte 13) */
    expect_cluster_error("{\"devices\": [", "syntax", "byte 13");
    /* missing comma on line 3: byte 35, line 3 column 19 */
    expect_cluster_error("{\n  \"devices\": [\n    {\"mem_mb\": 10 \"speed\": 1}\n  ]\n}\n", "byte 35", "line 3");
    expect_cluster_error("", "syntax", "byte 0");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1,}]}", "syntax", "byte");
    expect_cluster_error("[{\"mem_mb\": 1}]", "top level", "object");
}

static void test_cluster_field_errors(void)
{
    expect_cluster_error("{}", "'devices'", "non-empty array");
    expect_cluster_error("{\"devices\": []}", "'devices'", "non-empty array");
    expect_cluster_error("{\"devices\": {\"mem_mb\": 1}}", "'devices'", "array");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1}, {\"mem_mb\": 1}, {\"mem_mb\": -5}]}",
                         "devices[2].mem_mb", "a number from 1e-6 to 1e9");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 0}]}", "devices[0].mem_mb", "a number from 1e-6 to 1e9");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": \"4000\"}]}", "devices[0].mem_mb",
                         "a number from 1e-6 to 1e9");
    expect_cluster_error("{\"devices\": [{\"name\": \"a\"}]}", "devices[0].mem_mb", "missing");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"speed\": 0}]}", "devices[0].speed",
                         "a number from 1e-6 to 1e9 (got 0)");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"speed\": \"fast\"}]}", "devices[0].speed", "number");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"name\": 7}]}", "devices[0].name", "string");
    expect_cluster_error("{\"devices\": [7]}", "devices[0]", "object");
    expect_cluster_error("{\"link\": {\"bandwidth_mbit\": 0}, \"devices\": [{\"mem_mb\": 1}]}",
                         "link.bandwidth_mbit", "a number from 1e-6 to 1e9 (got 0)");
    expect_cluster_error("{\"link\": {\"latency_ms\": -1}, \"devices\": [{\"mem_mb\": 1}]}", "link.latency_ms",
                         "0 or a number from 1e-6 to 1e9 (got -1)");
    expect_cluster_error("{\"link\": 5, \"devices\": [{\"mem_mb\": 1}]}", "'link'", "object");
    expect_cluster_error("{\"mem_bandwidth_gbs\": \"4\", \"devices\": [{\"mem_mb\": 1}]}", "mem_bandwidth_gbs",
                         "a number from 1e-6 to 1e9");
    expect_cluster_error("{\"description\": 3, \"devices\": [{\"mem_mb\": 1}]}", "'description'", "string");

    /* a device's power model (HeadSplit / Voltron §4.4 energy) */
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"power\": 5}]}", "devices[0].power", "object");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"power\": {\"idle_w\": 5, \"active_w\": 4}}]}",
                         "devices[0].power.active_w", "below idle_w");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"power\": {\"freq\": [0.8, 0.5]}}]}",
                         "devices[0].power.freq[0]", "top frequency");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"power\": {\"freq\": [1, 0.5, 0.6]}}]}",
                         "devices[0].power.freq[2]", "below the level before it");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"power\": {\"freq\": []}}]}",
                         "devices[0].power.freq", "1 to 16");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"power\": {\"watts\": 3}}]}", "unknown key 'watts'",
                         "power");

    /* a device's emulation on the hosts testbed (jobs/testbed/hosts.sh): checked, not planned with */
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": 5}]}", "devices[0].emulate", "object");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"delay\": 5}}]}", "unknown key 'delay'",
                         "devices[0].emulate");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"cpu_pct\": 150}}]}",
                         "devices[0].emulate.cpu_pct", "[1, 100]");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"slowdown\": 0.5}}]}",
                         "devices[0].emulate.slowdown", "[1, 1000]");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"delay_ms\": 2, \"jitter_ms\": 3}}]}",
                         "devices[0].emulate", "jitter_ms at most delay_ms");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"loss_pct\": 100}}]}",
                         "devices[0].emulate.loss_pct", "below 100");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"rate_mbit\": -1}}]}",
                         "devices[0].emulate.rate_mbit", "0 or a number from 1e-6 to 1e9 (got -1)");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"emulate\": {\"rate_mbit\": 0.001}}]}",
                         "devices[0].emulate.rate_mbit", "[0.01, 100000]");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"name\": \"pi\\n1\"}]}", "devices[0].name",
                         "control character");

    /* unknown keys at every level */
    expect_cluster_error("{\"foo\": 1, \"devices\": [{\"mem_mb\": 1}]}", "unknown key 'foo'", "top level");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1}, {\"mem_MB\": 1}]}", "unknown key 'mem_MB'",
                         "devices[1]");
    expect_cluster_error("{\"link\": {\"latency_s\": 1}, \"devices\": [{\"mem_mb\": 1}]}", "unknown key 'latency_s'",
                         "link");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"mem_mb\": 2}]}", "duplicate key 'mem_mb'", "devices[0]");
}

static char *devices_json(int n)
{
    size_t cap = 64 + (size_t)n * 32;
    char *s = malloc(cap);
    size_t len = (size_t)snprintf(s, cap, "{\"devices\": [");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s{\"mem_mb\": %d}", i ? "," : "", i + 1);
    snprintf(s + len, cap - len, "]}");
    return s;
}

static void test_cluster_limits(void)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "";
    char *ok = devices_json(MI_MAX_RANKS);
    CU_ASSERT_EQUAL(mi_cluster_parse(ok, &cl, err), 0);
    CU_ASSERT_EQUAL(cl.n_devices, MI_MAX_RANKS);
    if (cl.n_devices == MI_MAX_RANKS)
        CHECK_NEAR(cl.dev[MI_MAX_RANKS - 1].mem_bytes, MI_MAX_RANKS * 1e6);
    mi_cluster_free(&cl);
    free(ok);
    char *many = devices_json(MI_MAX_RANKS + 1);
    expect_cluster_error(many, "'devices'", "at most 256");
    free(many);

    /* names: 63 characters fit, 64 do not */
    char name[65], json[256];
    memset(name, 'n', 64);
    name[63] = '\0';
    snprintf(json, sizeof json, "{\"devices\": [{\"name\": \"%s\", \"mem_mb\": 1}]}", name);
    CU_ASSERT_EQUAL(mi_cluster_parse(json, &cl, err), 0);
    if (cl.n_devices == 1)
        CU_ASSERT_STRING_EQUAL(cl.dev[0].name, name);
    mi_cluster_free(&cl);
    name[63] = 'n';
    name[64] = '\0';
    snprintf(json, sizeof json, "{\"devices\": [{\"mem_mb\": 1}, {\"name\": \"%s\", \"mem_mb\": 1}]}", name);
    expect_cluster_error(json, "devices[1].name", "63");

    /* numbers: 1e9 is the most any device or link value may be, so that
     * sums over 256 devices stay finite (a speed of 1e308 made the tp
     * planner's sum NaN and its placement nonsense) */
    CU_ASSERT_EQUAL(mi_cluster_parse("{\"devices\": [{\"mem_mb\": 1e9, \"speed\": 1e9}]}", &cl, err), 0);
    mi_cluster_free(&cl);
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"speed\": 1e308}, {\"mem_mb\": 1}]}",
                         "devices[0].speed", "a number from 1e-6 to 1e9 (got 1e+308)");
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1e300}]}", "devices[0].mem_mb",
                         "a number from 1e-6 to 1e9 (got 1e+300)");
    /* below 1e-6 breaks the same rule as 0 and says so in the same words */
    expect_cluster_error("{\"devices\": [{\"mem_mb\": 1, \"speed\": 1e-300}]}", "devices[0].speed",
                         "a number from 1e-6 to 1e9 (got 1e-300)");
}

static void test_cluster_load(void)
{
    mi_cluster cl;
    char err[MI_ERRLEN] = "", path[4200];
    tu_path(path, sizeof path, g_dir, "no-such-cluster.json");
    CU_ASSERT_EQUAL(mi_cluster_load(path, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open cluster file"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NULL(cl.dev);

    /* errors of a file name the file */
    tu_path(path, sizeof path, g_dir, "bad-cluster.json");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(path, "{\"devices\": [{\"mem_mb\": -1}]}\n"), 0);
    CU_ASSERT_EQUAL(mi_cluster_load(path, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "devices[0].mem_mb"));
    CU_ASSERT_EQUAL_FATAL(tu_write_text(path, "{\"devices\": [{\"mem_mb\": 1}\n"), 0);
    CU_ASSERT_EQUAL(mi_cluster_load(path, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "syntax error at byte"));

    tu_path(path, sizeof path, g_dir, "good-cluster.json");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(path, "{\"devices\": [{\"name\": \"x\", \"mem_mb\": 2}]}\n"), 0);
    CU_ASSERT_EQUAL(mi_cluster_load(path, &cl, err), 0);
    CU_ASSERT_EQUAL(cl.n_devices, 1);
    mi_cluster_free(&cl);
}

static void test_cluster_rtt(void)
{
    mi_cluster cl;
    mi_cluster_default(&cl, 3, 1e9);
    /* unmeasured: the link latency, and nothing to oneself */
    CHECK_NEAR(mi_cluster_latency(&cl, 0, 1), 20e-6);
    CHECK_NEAR(mi_cluster_latency(&cl, 2, 2), 0.0);

    double rtt[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            rtt[i * 3 + j] = i == j ? 0.0 : 0.010;
    rtt[0 * 3 + 2] = 0.020;
    mi_cluster_set_rtt(&cl, rtt, 0.15);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cl.rtt_s);
    CU_ASSERT_PTR_NOT_EQUAL(cl.rtt_s, rtt);
    rtt[0 * 3 + 1] = 99.0; /* copied: later changes of the caller's array do not matter */
    CHECK_NEAR(mi_cluster_latency(&cl, 0, 1), 0.00575);
    CHECK_NEAR(mi_cluster_latency(&cl, 1, 0), 0.00575);
    CHECK_NEAR(mi_cluster_latency(&cl, 0, 2), 0.0115);
    CHECK_NEAR(mi_cluster_latency(&cl, 1, 1), 0.0);

    mi_cluster_set_rtt(&cl, NULL, 0.15);
    CU_ASSERT_PTR_NULL(cl.rtt_s);
    CHECK_NEAR(mi_cluster_latency(&cl, 0, 1), 20e-6);
    mi_cluster_free(&cl);
}

static void test_hostfiles(void)
{
    static const char *names[] = {"cluster-localhost.json", "cluster-5pi.json", "cluster-hetero.json",
                                  "hosts-5pi.json", "hosts-hetero.json"};
    if (!g_hostfiles) {
        CU_FAIL("no hostfiles directory given on the command line");
        return;
    }
    for (int i = 0; i < 5; i++) {
        char path[4200], err[MI_ERRLEN] = "";
        snprintf(path, sizeof path, "%s/%s", g_hostfiles, names[i]);
        mi_cluster cl;
        int rc = mi_cluster_load(path, &cl, err);
        if (rc != 0)
            fprintf(stderr, "\n  %s\n", err);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            continue;
        CU_ASSERT_EQUAL(cl.n_devices, 5);
        for (int d = 0; d < cl.n_devices; d++) {
            CU_ASSERT(cl.dev[d].mem_bytes > 0);
            CU_ASSERT(cl.dev[d].speed > 0);
        }
        if (i == 0) {
            CU_ASSERT_STRING_EQUAL(cl.dev[0].name, "rank0");
            CU_ASSERT_STRING_EQUAL(cl.dev[4].name, "rank4");
            CHECK_NEAR(cl.dev[2].mem_bytes, 4000e6);
            CHECK_NEAR(cl.latency_s, 20e-6);
            CHECK_NEAR(cl.bandwidth, 5e9);
            CHECK_NEAR(cl.mem_bw, 20e9);
        } else if (i == 1 || i == 3) { /* hosts-5pi.json: the same devices, emulated */
            CU_ASSERT_STRING_EQUAL(cl.dev[0].name, "pi-ctl");
            CU_ASSERT_STRING_EQUAL(cl.dev[4].name, "pi-w4");
            CHECK_NEAR(cl.dev[3].mem_bytes, 3500e6);
            CHECK_NEAR(cl.dev[3].speed, 1.0);
            CHECK_NEAR(cl.latency_s, 0.005);
            CHECK_NEAR(cl.bandwidth, 37.5e6);
            CHECK_NEAR(cl.mem_bw, 4e9);
        } else {
            double smin = 1e9, smax = 0;
            for (int d = 0; d < cl.n_devices; d++) {
                smin = fmin(smin, cl.dev[d].speed);
                smax = fmax(smax, cl.dev[d].speed);
            }
            CU_ASSERT(smax > smin); /* heterogeneous */
            if (i == 4) /* the far host's link, from the links matrix */
                CHECK_NEAR(cl.rtt_s[0 * cl.n_devices + 4], 2 * 6.5e-3);
        }
        mi_cluster_free(&cl);
    }
}

/* ------------------------------------------------------- plan_io tests */

static mi_config small_config(int n_kv_heads)
{
    mi_config c;
    memset(&c, 0, sizeof c);
    c.dim = 32;
    c.hidden_dim = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = n_kv_heads;
    c.head_dim = 8;
    c.vocab_size = 300;
    c.seq_len = 16;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    c.shared_classifier = 1;
    c.synthetic = 1;
    snprintf(c.name, sizeof c.name, "plan-io-test");
    return c;
}

static mi_slice *slices(int n, const int *triples)
{
    mi_slice *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++)
        s[i] = (mi_slice){.rank = triples[3 * i], .v0 = triples[3 * i + 1], .n = triples[3 * i + 2]};
    return s;
}

/* A hand-made 3-rank plan: layer 0 gathers to rank 1 and splits its FFN over
 * ranks 1 and 2; layer 1 keeps both heads and the whole FFN on rank 2 with a
 * split projection; the classifier is split over ranks 0 and 1. */
static void small_plan(mi_plan *p)
{
    memset(p, 0, sizeof *p);
    p->cfg = small_config(2);
    p->n_ranks = 3;
    p->planner = MI_PLANNER_HYBRID; /* per layer model or tensor parallel: the one planner of this mix */
    p->controller_works = 0;
    p->plan_seconds = 1.25;
    p->layers = calloc(2, sizeof *p->layers);
    p->layers[0].kv_rank[0] = 1;
    p->layers[0].kv_rank[1] = 2;
    p->layers[0].proj_rank = 1;
    p->layers[0].n_ffn = 2;
    p->layers[0].ffn = slices(2, (const int[]){1, 0, 40, 2, 40, 24});
    p->layers[1].kv_rank[0] = 2;
    p->layers[1].kv_rank[1] = 2;
    p->layers[1].proj_rank = -1;
    p->layers[1].n_ffn = 1;
    p->layers[1].ffn = slices(1, (const int[]){2, 0, 64});
    p->n_cls = 2;
    p->cls = slices(2, (const int[]){0, 0, 150, 1, 150, 150});
}

static void free_small_plan(mi_plan *p)
{
    for (int l = 0; l < 2; l++)
        free(p->layers[l].ffn);
    free(p->layers);
    free(p->cls);
    memset(p, 0, sizeof *p);
}

static void expect_same_plan(const mi_plan *a, const mi_plan *b)
{
    CU_ASSERT_EQUAL(a->cfg.dim, b->cfg.dim);
    CU_ASSERT_EQUAL(a->cfg.hidden_dim, b->cfg.hidden_dim);
    CU_ASSERT_EQUAL(a->cfg.n_layers, b->cfg.n_layers);
    CU_ASSERT_EQUAL(a->cfg.n_heads, b->cfg.n_heads);
    CU_ASSERT_EQUAL(a->cfg.n_kv_heads, b->cfg.n_kv_heads);
    CU_ASSERT_EQUAL(a->cfg.head_dim, b->cfg.head_dim);
    CU_ASSERT_EQUAL(a->cfg.vocab_size, b->cfg.vocab_size);
    CU_ASSERT_EQUAL(a->cfg.seq_len, b->cfg.seq_len);
    CU_ASSERT_EQUAL(a->cfg.rope_theta, b->cfg.rope_theta);
    CU_ASSERT_EQUAL(a->cfg.norm_eps, b->cfg.norm_eps);
    CU_ASSERT_EQUAL(a->cfg.shared_classifier, b->cfg.shared_classifier);
    CU_ASSERT_EQUAL(a->cfg.synthetic, b->cfg.synthetic);
    CU_ASSERT_STRING_EQUAL(a->cfg.name, b->cfg.name);
    CU_ASSERT_EQUAL(a->n_ranks, b->n_ranks);
    CU_ASSERT_EQUAL(a->planner, b->planner);
    CU_ASSERT_EQUAL(a->controller_works, b->controller_works);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b->layers);
    for (int l = 0; l < a->cfg.n_layers; l++) {
        const mi_layer_plan *x = &a->layers[l], *y = &b->layers[l];
        for (int h = 0; h < a->cfg.n_kv_heads; h++)
            CU_ASSERT_EQUAL(x->kv_rank[h], y->kv_rank[h]);
        CU_ASSERT_EQUAL(x->proj_rank, y->proj_rank);
        CU_ASSERT_EQUAL_FATAL(x->n_ffn, y->n_ffn);
        for (int i = 0; i < x->n_ffn; i++) {
            CU_ASSERT_EQUAL(x->ffn[i].rank, y->ffn[i].rank);
            CU_ASSERT_EQUAL(x->ffn[i].v0, y->ffn[i].v0);
            CU_ASSERT_EQUAL(x->ffn[i].n, y->ffn[i].n);
        }
    }
    CU_ASSERT_EQUAL_FATAL(a->n_cls, b->n_cls);
    for (int i = 0; i < a->n_cls; i++) {
        CU_ASSERT_EQUAL(a->cls[i].rank, b->cls[i].rank);
        CU_ASSERT_EQUAL(a->cls[i].v0, b->cls[i].v0);
        CU_ASSERT_EQUAL(a->cls[i].n, b->cls[i].n);
    }
}

static void test_plan_roundtrip(void)
{
    mi_plan p, q;
    char path[4200], err[MI_ERRLEN] = "";
    small_plan(&p);
    CU_ASSERT_EQUAL_FATAL(mi_plan_validate(&p, NULL, err), 0);
    tu_path(path, sizeof path, g_dir, "plan.json");
    int rc = mi_plan_save_json(&p, path, err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(tu_file_exists(path));
    CU_ASSERT(!tu_dir_has_partial(g_dir));

    mi_config c = small_config(2);
    rc = mi_plan_load_json(path, &c, &q, err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    expect_same_plan(&p, &q);
    CU_ASSERT_EQUAL(q.plan_seconds, 0.0);
    mi_plan_free(&q);

    /* saving again replaces the file atomically; other planners and flags survive */
    p.planner = MI_PLANNER_TP;
    p.controller_works = 1;
    p.layers[0].proj_rank = -1; /* tp splits every projection with its heads */
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p, path, err), 0);
    CU_ASSERT(!tu_dir_has_partial(g_dir));
    CU_ASSERT_EQUAL_FATAL(mi_plan_load_json(path, &c, &q, err), 0);
    expect_same_plan(&p, &q);
    mi_plan_free(&q);
    free_small_plan(&p);
}

/* Block dtypes: the tp planner splits wo's heads and w2's FFN units in whole
 * blocks (stories15M's 48-wide heads in pairs, FFN slices in 32s), sizes
 * memory by the dtypes, and validation refuses a plan that cuts a block. */
static void test_plan_blocks(void)
{
    mi_config c;
    char err[MI_ERRLEN] = "";
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    mi_config f32 = c;
    CU_ASSERT_EQUAL_FATAL(mi_dtypes_apply(&c, "q4_0", NULL, NULL, err), 0);
    CU_ASSERT_EQUAL(mi_kv_align(&c, 0), 2);
    CU_ASSERT_EQUAL(mi_ffn_align(&c, 0), 32);
    CU_ASSERT_EQUAL(mi_kv_align(&f32, 0), 1);
    for (int n = 2; n <= 7; n++) {
        mi_cluster cl;
        mi_cluster_default(&cl, n, 1e12);
        mi_plan_options po = {MI_PLANNER_TP, 1, -1, 0, NULL, 0.7, 0, MI_Q8_0, 0, 0, 0, NULL, 0, 0};
        mi_plan p;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
        CU_ASSERT_EQUAL(p.wire, MI_Q8_0);
        int bad = 0;
        for (int l = 0; l < c.n_layers; l++) {
            for (int k = 0; k < c.n_kv_heads; k += 2)
                bad += p.layers[l].kv_rank[k] != p.layers[l].kv_rank[k + 1];
            for (int i = 0; i < p.layers[l].n_ffn; i++)
                bad += p.layers[l].ffn[i].v0 % 32 || p.layers[l].ffn[i].n % 32;
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* q4_0 memory: 0.5625 bytes a weight in the plan's accounting */
        size_t w0;
        mi_plan_rank_memory(&p, 1, &w0, NULL);
        mi_plan_free(&p);
        mi_plan pf;
        CU_ASSERT_EQUAL_FATAL(mi_plan_make(&f32, &cl, &po, &pf, err), 0);
        size_t wf;
        mi_plan_rank_memory(&pf, 1, &wf, NULL);
        CU_ASSERT(w0 < wf / 5 && w0 > wf / 8);
        mi_plan_free(&pf);
        mi_cluster_free(&cl);
    }
    /* a plan that cuts blocks: one head alone on a rank, an FFN slice edge at 100 */
    mi_cluster cl;
    mi_cluster_default(&cl, 3, 1e12);
    mi_plan_options po = {MI_PLANNER_TP, 1, -1, 0, NULL, 0.7, 0, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_plan p;
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p, err), 0);
    CU_ASSERT_EQUAL(mi_plan_validate(&p, &cl, err), 0);
    int saved = p.layers[2].kv_rank[1];
    p.layers[2].kv_rank[1] = (saved + 1) % 3;
    CU_ASSERT_EQUAL(mi_plan_validate(&p, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layer 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "q4_0 blocks of its wo"));
    p.layers[2].kv_rank[1] = saved;
    p.layers[4].ffn[0].n -= 28;
    p.layers[4].ffn[1].v0 -= 28;
    p.layers[4].ffn[1].n += 28;
    CU_ASSERT_EQUAL(mi_plan_validate(&p, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "layer 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cuts the q4_0 blocks of w2"));
    /* the same cuts are fine with fp32 weights */
    p.cfg = f32;
    CU_ASSERT_EQUAL(mi_plan_validate(&p, &cl, err), 0);
    /* the wire dtype travels through serialization and JSON, and must be one of three */
    p.cfg = c;
    p.layers[4].ffn[0].n += 28;
    p.layers[4].ffn[1].v0 += 28;
    p.layers[4].ffn[1].n -= 28;
    p.wire = MI_F16;
    size_t n;
    int *buf = mi_plan_serialize(&p, &n);
    mi_plan q;
    CU_ASSERT_EQUAL_FATAL(mi_plan_deserialize(buf, n, &c, &q, err), 0);
    CU_ASSERT_EQUAL(q.wire, MI_F16);
    mi_plan_free(&q);
    free(buf);
    /* so do the weight dtypes (Voltron computation scaling re-places to lower ones),
     * and a table that does not fit the shards is refused */
    p.cfg.dtype[1][MI_W1] = MI_Q8_0;
    buf = mi_plan_serialize(&p, &n);
    CU_ASSERT_EQUAL_FATAL(mi_plan_deserialize(buf, n, &f32, &q, err), 0);
    CU_ASSERT_EQUAL(q.cfg.dtype[1][MI_W1], MI_Q8_0);
    CU_ASSERT_EQUAL(q.cfg.dtype[4][MI_W2], c.dtype[4][MI_W2]);
    mi_plan_free(&q);
    free(buf);
    p.cfg.dtype[1][MI_W1] = c.dtype[1][MI_W1];
    p.layers[4].ffn[0].n -= 28;
    p.layers[4].ffn[1].v0 -= 28;
    p.layers[4].ffn[1].n += 28;
    p.cfg = f32;
    buf = mi_plan_serialize(&p, &n);
    CU_ASSERT_EQUAL(mi_plan_deserialize(buf, n, &f32, &q, err), 0);
    mi_plan_free(&q);
    free(buf);
    p.cfg = c;
    buf = mi_plan_serialize(&p, &n);
    CU_ASSERT_EQUAL(mi_plan_deserialize(buf, n, &f32, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cuts the q4_0 blocks of w2"));
    free(buf);
    p.layers[4].ffn[0].n += 28;
    p.layers[4].ffn[1].v0 += 28;
    p.layers[4].ffn[1].n -= 28;
    char path[4200];
    tu_path(path, sizeof path, g_dir, "plan-wire.json");
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p, path, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_plan_load_json(path, &c, &q, err), 0);
    CU_ASSERT_EQUAL(q.wire, MI_F16);
    mi_plan_free(&q);
    p.wire = MI_Q4_0;
    CU_ASSERT_EQUAL(mi_plan_validate(&p, NULL, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "wire dtype q4_0"));
    mi_plan_free(&p);
    mi_cluster_free(&cl);
}

static void test_plan_model_mismatch(void)
{
    mi_plan p, q;
    char path[4200], err[MI_ERRLEN] = "";
    small_plan(&p);
    tu_path(path, sizeof path, g_dir, "plan-mismatch.json");
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p, path, err), 0);
    free_small_plan(&p);

    mi_config c = small_config(4); /* 4 KV heads: the plan has 2 */
    CU_ASSERT_EQUAL(mi_plan_load_json(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "plan has 2 KV heads per layer but the model has 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NULL(q.layers);

    c = small_config(2);
    c.n_layers = 3;
    CU_ASSERT_EQUAL(mi_plan_load_json(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "plan has 2 layers but the model has 3"));
    c = small_config(2);
    c.hidden_dim = 128;
    CU_ASSERT_EQUAL(mi_plan_load_json(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "hidden_dim"));
    c = small_config(2);
    c.vocab_size = 512;
    CU_ASSERT_EQUAL(mi_plan_load_json(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "vocab_size"));
}

static void test_plan_malformed(void)
{
    mi_plan p, q;
    char path[4200], bad[4200], err[MI_ERRLEN] = "";
    small_plan(&p);
    tu_path(path, sizeof path, g_dir, "plan-full.json");
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p, path, err), 0);
    free_small_plan(&p);

    /* truncated copy */
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n / 2] = '\0';
    tu_path(bad, sizeof bad, g_dir, "plan-truncated.json");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(bad, text), 0);
    mi_config c = small_config(2);
    CU_ASSERT_EQUAL(mi_plan_load_json(bad, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "syntax"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "byte"));
    CU_ASSERT_PTR_NULL(q.layers);

    CU_ASSERT_EQUAL_FATAL(tu_write_text(bad, "{\"planner\": \"greedy\",, }"), 0);
    CU_ASSERT_EQUAL(mi_plan_load_json(bad, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "syntax error at byte"));

    tu_path(bad, sizeof bad, g_dir, "no-such-plan.json");
    CU_ASSERT_EQUAL(mi_plan_load_json(bad, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open plan file"));
}

/* Structural errors in hand-written plan files: each body is completed with
 * the model block of small_config(2) and must fail naming `want`. */
static void test_plan_field_errors(void)
{
    static const char *model = "\"model\": {\"n_layers\": 2, \"n_kv_heads\": 2, \"hidden_dim\": 64, "
                                "\"vocab_size\": 300}";
    static const char *good_layers = "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}, "
                                     "{\"kv_rank\": [1, 2], \"proj_rank\": 2, \"ffn\": [[2, 0, 64]]}]";
    struct {
        const char *head, *layers, *cls, *want;
    } cases[] = {
        {"\"planner\": \"smart\", \"n_ranks\": 3", NULL, NULL,
         "'planner' must be one of layerwise, roundrobin, random, greedy, tp, somegather, hybrid, exact"},
        /* a layout under another planner's name, and rank 0 working against controller_works */
        {"\"planner\": \"tp\", \"n_ranks\": 3", NULL, NULL,
         "layers[0].proj_rank is 1, but tp splits every layer's projection with its heads over the 2 workers"},
        {"\"planner\": \"layerwise\", \"n_ranks\": 3", NULL, NULL,
         "layers[0] is split over ranks, but a layerwise plan places every layer whole on one rank"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": -1, \"ffn\": [[2, 0, 64]]}]",
         NULL, "layers[1] splits its projection (proj_rank -1), but greedy places"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 32], [2, 32, 32]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 2, \"ffn\": [[2, 0, 64]]}]",
         NULL, "layers[0] splits its FFN into slices, but greedy places"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [0, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 2, \"ffn\": [[2, 0, 64]]}]",
         NULL, "layers[0].kv_rank[0] is rank 0, but 'controller_works' is false"},
        {"\"planner\": \"hybrid\", \"n_ranks\": 3, \"controller_works\": false",
         "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 0, \"ffn\": [[1, 0, 64]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 2, \"ffn\": [[2, 0, 64]]}]",
         NULL, "layers[0].proj_rank is rank 0, but 'controller_works' is false"},
        {"\"planner\": \"tp\", \"n_ranks\": 1",
         "\"layers\": [{\"kv_rank\": [0, 0], \"proj_rank\": 0, \"ffn\": [[0, 0, 64]]}, "
         "{\"kv_rank\": [0, 0], \"proj_rank\": 0, \"ffn\": [[0, 0, 64]]}]",
         NULL, "'controller_works' is false but the plan has one rank"},
        {"\"n_ranks\": 3", NULL, NULL, "'planner' is missing"},
        {"\"planner\": \"greedy\", \"n_ranks\": 0", NULL, NULL, "'n_ranks'"},
        {"\"planner\": \"greedy\", \"n_ranks\": 257", NULL, NULL, "'n_ranks'"},
        {"\"planner\": \"greedy\", \"n_ranks\": 2.5", NULL, NULL, "'n_ranks'"},
        {"\"planner\": \"greedy\", \"n_ranks\": 3, \"controller_works\": 1", NULL, NULL, "controller_works"},
        {"\"planner\": \"greedy\", \"n_ranks\": 3, \"extra\": 1", NULL, NULL, "unknown key 'extra'"},
        {"\"planner\": \"greedy\", \"n_ranks\": 3, \"wire_dtype\": \"q4_0\"", NULL, NULL, "'wire_dtype'"},
        {"\"planner\": \"greedy\", \"n_ranks\": 3, \"wire_dtype\": 8", NULL, NULL, "'wire_dtype'"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}]",
         NULL, "layers[0].kv_rank has 1 entries"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": -2, \"ffn\": [[1, 0, 64]]}]",
         NULL, "layers[1].proj_rank"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}]",
         NULL, "layers[0].ffn[0]"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1, 7], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}]",
         NULL, "layers[0].kv_rank[1]"},
        {NULL,
         "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]], \"fnn\": []}, "
         "{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}]",
         NULL, "unknown key 'fnn' in layers[0]"},
        {NULL, "\"layers\": [{\"kv_rank\": [1, 2], \"proj_rank\": 1, \"ffn\": [[1, 0, 64]]}]", NULL,
         "'layers' has 1 entries"},
        {NULL, NULL, "\"classifier\": [0, 0, 300]", "classifier[0]"},
        {NULL, NULL, "\"classifier\": []", "'classifier'"},
        {NULL, NULL, "\"classifier\": [[0, 0, 301]]", "classifier[0]"},
    };
    char path[4200], text[2048], err[MI_ERRLEN];
    tu_path(path, sizeof path, g_dir, "plan-hand.json");
    mi_config c = small_config(2);
    mi_plan q;

    /* the base document itself loads */
    snprintf(text, sizeof text, "{\"description\": \"hand-written\", \"planner\": \"greedy\", \"n_ranks\": 3, %s, %s, "
                                "\"classifier\": [[0, 0, 300]]}",
             model, good_layers);
    CU_ASSERT_EQUAL_FATAL(tu_write_text(path, text), 0);
    int rc = mi_plan_load_json(path, &c, &q, err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        CU_ASSERT_EQUAL(q.controller_works, 0);
        CU_ASSERT_EQUAL(q.planner, MI_PLANNER_GREEDY);
        mi_plan_free(&q);
    }

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "{%s, %s, %s, %s}",
                 cases[i].head ? cases[i].head : "\"planner\": \"greedy\", \"n_ranks\": 3", model,
                 cases[i].layers ? cases[i].layers : good_layers,
                 cases[i].cls ? cases[i].cls : "\"classifier\": [[0, 0, 300]]");
        CU_ASSERT_EQUAL_FATAL(tu_write_text(path, text), 0);
        err[0] = '\0';
        rc = mi_plan_load_json(path, &c, &q, err);
        CU_ASSERT_EQUAL(rc, -1);
        if (!strstr(err, cases[i].want)) {
            fprintf(stderr, "\n  case %zu: expected '%s' in: %s\n", i, cases[i].want, err);
            CU_FAIL("plan error text lacks the expected words");
        }
        CU_ASSERT_PTR_NULL(q.layers);
        if (rc == 0)
            mi_plan_free(&q);
    }
}

static void test_plan_not_covering(void)
{
    mi_plan p, q;
    char path[4200], err[MI_ERRLEN] = "";
    small_plan(&p);
    p.layers[0].n_ffn = 1;
    p.layers[0].ffn[0] = (mi_slice){.rank = 1, .v0 = 0, .n = 40}; /* [40, 64) missing */
    tu_path(path, sizeof path, g_dir, "plan-gap.json");
    /* save writes what it is given; load validates */
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p, path, err), 0);
    mi_config c = small_config(2);
    err[0] = '\0';
    CU_ASSERT_EQUAL(mi_plan_load_json(path, &c, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "FFN"));
    CU_ASSERT_PTR_NULL(q.layers);
    CU_ASSERT_PTR_NULL(q.cls);

    /* two FFN slices on one rank */
    p.layers[0].n_ffn = 2;
    p.layers[0].ffn[0] = (mi_slice){.rank = 1, .v0 = 0, .n = 40};
    p.layers[0].ffn[1] = (mi_slice){.rank = 1, .v0 = 40, .n = 24};
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p, path, err), 0);
    CU_ASSERT_EQUAL(mi_plan_load_json(path, &c, &q, err), -1);
    free_small_plan(&p);
}

static void test_plan_save_missing_dir(void)
{
    mi_plan p;
    char dir[4200], path[4300], err[MI_ERRLEN] = "";
    small_plan(&p);
    tu_path(dir, sizeof dir, g_dir, "missing-dir");
    snprintf(path, sizeof path, "%s/plan.json", dir);
    CU_ASSERT_EQUAL(mi_plan_save_json(&p, path, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT(!tu_file_exists(dir));
    CU_ASSERT(!tu_file_exists(path));
    CU_ASSERT(!tu_dir_has_partial(g_dir));
    free_small_plan(&p);
}

/* ------------------------------------------- KV horizon and re-placement */

/* stories15M on a controller and three workers whose budgets are tight: the
 * greedy placement must change as the KV horizon grows (HeadSplit "Memory
 * needs active management"), memory at n positions is linear in n. */
static void tight_cluster(mi_cluster *cl)
{
    mi_cluster_default(cl, 4, 40e6);
    cl->dev[1].mem_bytes = 8.45e6;
    cl->dev[2].mem_bytes = 8.9e6;
    cl->dev[3].mem_bytes = 20e6;
}

static void test_plan_kv_horizon(void)
{
    mi_config c;
    CU_ASSERT_EQUAL_FATAL(mi_config_from_shape("stories15M", &c), 0);
    mi_cluster cl;
    tight_cluster(&cl);
    char err[MI_ERRLEN] = "";
    mi_plan_options po = {MI_PLANNER_GREEDY, 1, -1, 0, NULL, 0.7, 32, MI_F32, 0, 0, 0, NULL, 0, 0};
    mi_plan p32, p32b, p256;
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p32, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p32b, err), 0);
    po.kv_positions = 0; /* the whole context */
    CU_ASSERT_EQUAL_FATAL(mi_plan_make(&c, &cl, &po, &p256, err), 0);
    CU_ASSERT_EQUAL(p32.kv_positions, 32);
    CU_ASSERT_EQUAL(p256.kv_positions, c.seq_len);
    CU_ASSERT(mi_plan_same_placement(&p32, &p32b));
    CU_ASSERT(!mi_plan_same_placement(&p32, &p256)); /* heads left the small devices */

    /* bytes at n positions: weights, plus n/seq_len of the full KV cache */
    mi_plan full = p32;
    full.kv_positions = c.seq_len;
    for (int r = 0; r < 4; r++) {
        size_t w, kv;
        mi_plan_rank_memory(&full, r, &w, &kv);
        CU_ASSERT_DOUBLE_EQUAL(mi_plan_rank_bytes_at(&p32, r, 0), (double)w, 0.5);
        CU_ASSERT_DOUBLE_EQUAL(mi_plan_rank_bytes_at(&p32, r, c.seq_len), (double)(w + kv), 0.5);
        CU_ASSERT_DOUBLE_EQUAL(mi_plan_rank_bytes_at(&p32, r, 64), w + kv / 4.0, 0.5);
        size_t kv32;
        mi_plan_rank_memory(&p32, r, NULL, &kv32);
        CU_ASSERT_EQUAL(kv32, kv / 8); /* 32 of 256 positions */
    }
    /* the smallest worker is the fullest; its fraction is bytes / budget */
    double frac;
    int r = mi_plan_fullest_rank(&p32, &cl, 100, &frac);
    CU_ASSERT_EQUAL(r, 1);
    CU_ASSERT_DOUBLE_EQUAL(frac, mi_plan_rank_bytes_at(&p32, 1, 100) / 8.45e6, 1e-12);

    /* the 32-position placement does not hold the whole context on small1 */
    CU_ASSERT_EQUAL(mi_plan_validate(&full, &cl, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "for 256 positions"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "short by"));

    /* the horizon survives serialization and JSON */
    size_t n;
    int *buf = mi_plan_serialize(&p32, &n);
    mi_plan q;
    CU_ASSERT_EQUAL_FATAL(mi_plan_deserialize(buf, n, &c, &q, err), 0);
    CU_ASSERT_EQUAL(q.kv_positions, 32);
    CU_ASSERT(mi_plan_same_placement(&p32, &q));
    /* a classifier slice on another rank, or at other rows of the same size, is another placement */
    q.cls[0].rank = (q.cls[0].rank + 1) % 4;
    CU_ASSERT(!mi_plan_same_placement(&p32, &q));
    q.cls[0] = p32.cls[0];
    q.cls[0].v0 += 1;
    CU_ASSERT(!mi_plan_same_placement(&p32, &q));
    q.cls[0] = p32.cls[0];
    CU_ASSERT(mi_plan_same_placement(&p32, &q));
    mi_plan_free(&q);
    free(buf);
    char path[4200];
    tu_path(path, sizeof path, g_dir, "plan-kv.json");
    CU_ASSERT_EQUAL_FATAL(mi_plan_save_json(&p32, path, err), 0);
    CU_ASSERT_EQUAL_FATAL(mi_plan_load_json(path, &c, &q, err), 0);
    CU_ASSERT_EQUAL(q.kv_positions, 32);
    mi_plan_free(&q);

    /* a budget that cannot hold even the weights: the planner says who is short */
    cl.dev[1].mem_bytes = cl.dev[2].mem_bytes = cl.dev[3].mem_bytes = 5e6;
    po.kv_positions = 32;
    CU_ASSERT_EQUAL(mi_plan_make(&c, &cl, &po, &q, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "short by"));

    mi_plan_free(&p32);
    mi_plan_free(&p32b);
    mi_plan_free(&p256);
    mi_cluster_free(&cl);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: %s HOSTFILES_DIR\n", argv[0]);
        return 2;
    }
    g_hostfiles = argc == 2 ? argv[1] : NULL;
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_cluster")) {
        perror("mkdtemp");
        return 1;
    }

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite cs = CU_add_suite("cluster", NULL, NULL);
    CU_pSuite ps = CU_add_suite("plan_io", NULL, NULL);
    if (!cs || !ps || !CU_add_test(cs, "full file, units converted", test_cluster_full) ||
        !CU_add_test(cs, "defaults", test_cluster_defaults) ||
        !CU_add_test(cs, "syntax errors with byte offsets", test_cluster_syntax_errors) ||
        !CU_add_test(cs, "field errors and unknown keys", test_cluster_field_errors) ||
        !CU_add_test(cs, "device count and name limits", test_cluster_limits) ||
        !CU_add_test(cs, "load from files", test_cluster_load) ||
        !CU_add_test(cs, "measured RTT with margin", test_cluster_rtt) ||
        !CU_add_test(cs, "hostfiles/*.json parse", test_hostfiles) ||
        !CU_add_test(ps, "save and load round trip", test_plan_roundtrip) ||
        !CU_add_test(ps, "block dtypes: tp splits whole blocks, cut blocks refused, wire dtype", test_plan_blocks) ||
        !CU_add_test(ps, "model block mismatch", test_plan_model_mismatch) ||
        !CU_add_test(ps, "malformed and missing files", test_plan_malformed) ||
        !CU_add_test(ps, "field errors", test_plan_field_errors) ||
        !CU_add_test(ps, "FFN slices not covering hidden_dim", test_plan_not_covering) ||
        !CU_add_test(ps, "save into a missing directory", test_plan_save_missing_dir) ||
        !CU_add_test(ps, "KV horizon: memory at n positions, placement changes", test_plan_kv_horizon)) {
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    int failed = (int)CU_get_number_of_failures();
    CU_cleanup_registry();
    tu_rm_tree(g_dir);
    return failed != 0;
}
