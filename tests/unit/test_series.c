/* CUnit tests of CATS's time-series family (docs/patchtst.md), no MPI:
 *   - LayerNorm with bias, whole and device-local (held columns), against
 *     values worked out by hand; GELU against the erf form's known values;
 *   - instance normalisation and patching of one channel;
 *   - the config checks of the family (patches tiling the look-back, the
 *     head's width, float32 only);
 *   - series CSV files: a time column left out, and one error line naming the
 *     row and column for every kind of bad file;
 *   - a synthetic model written, opened, checked and run on one device:
 *     finite forecasts that depend on the input, the same for the same input.
 *
 * Exit status: 0 when every test passed, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meshinfer/common.h"
#include "meshinfer/kernels.h"
#include "meshinfer/model.h"
#include "meshinfer/series.h"
#include "meshinfer/synth.h"
#include "test_util.h"

static char g_dir[512];

static void test_layernorm(void)
{
    float x[4] = {1, 2, 3, 4}, g[4] = {1, 2, 1, 0.5f}, b[4] = {0, 1, 0, -1}, out[4];
    mi_layernorm_held(out, x, g, b, 1, 4, 1e-5f, NULL);
    /* mean 2.5, variance 1.25 */
    double s = 1.0 / sqrt(1.25 + 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(out[0], -1.5 * s, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 2 * -0.5 * s + 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[3], 0.5 * 1.5 * s - 1, 1e-6);
    /* device-local: column 2 absent: mean 7/3, variance 14/9 over the three held */
    unsigned char held[4] = {1, 1, 0, 1}, all[4] = {1, 1, 1, 1};
    mi_layernorm_held(out, x, g, b, 1, 4, 1e-5f, held);
    s = 1.0 / sqrt(14.0 / 9 + 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(out[0], (1 - 7.0 / 3) * s, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 2 * (2 - 7.0 / 3) * s + 1, 1e-6);
    CU_ASSERT_EQUAL(out[2], 0.0f); /* absent: 0, not the bias */
    CU_ASSERT_DOUBLE_EQUAL(out[3], 0.5 * (4 - 7.0 / 3) * s - 1, 1e-6);
    /* every column held is the whole norm, bit for bit */
    float whole[4];
    mi_layernorm_held(whole, x, g, b, 1, 4, 1e-5f, NULL);
    mi_layernorm_held(out, x, g, b, 1, 4, 1e-5f, all);
    CU_ASSERT_EQUAL(memcmp(whole, out, sizeof out), 0);
    /* nothing held: zeros, no division by zero */
    unsigned char none[4] = {0};
    mi_layernorm_held(out, x, g, b, 1, 4, 1e-5f, none);
    CU_ASSERT(out[0] == 0 && out[1] == 0 && out[2] == 0 && out[3] == 0);
}

static void test_gelu(void)
{
    float v[3] = {1.0f, -1.0f, 0.0f};
    mi_gelu(v, 3);
    CU_ASSERT_DOUBLE_EQUAL(v[0], 0.8413447460685429, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(v[1], -0.15865525393145707, 1e-7);
    CU_ASSERT_EQUAL(v[2], 0.0f);
}

static mi_config small_config(void)
{
    mi_config c;
    CU_ASSERT_EQUAL(mi_config_from_shape("patchtst", &c), 0);
    return c;
}

static void test_patches(void)
{
    mi_config c = small_config();
    c.lookback = 6, c.patch_len = 4, c.patch_stride = 2, c.seq_len = 2;
    float x[6] = {0, 1, 2, 3, 4, 5}, p[8], mu, sigma;
    mi_series_patches(&c, x, p, &mu, &sigma);
    CU_ASSERT_DOUBLE_EQUAL(mu, 2.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(sigma, sqrt(17.5 / 6 + 1e-5), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[0], -2.5 / sigma, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[4], (2 - 2.5) / sigma, 1e-6); /* patch 1 starts at row 2 */
    CU_ASSERT_DOUBLE_EQUAL(p[7], (5 - 2.5) / sigma, 1e-6);
}

static void test_config(void)
{
    char err[MI_ERRLEN];
    mi_config c = small_config();
    CU_ASSERT_EQUAL(mi_config_validate(&c, err), 0);
    CU_ASSERT_EQUAL(c.seq_len, 11);
    mi_config bad = c;
    bad.lookback = 100; /* (100 - 16) / 8 is not whole */
    CU_ASSERT_EQUAL(mi_config_validate(&bad, err), -1);
    CU_ASSERT(strstr(err, "lookback = 100") != NULL);
    bad = c;
    bad.vocab_size = 23;
    CU_ASSERT_EQUAL(mi_config_validate(&bad, err), -1);
    CU_ASSERT(strstr(err, "horizon") != NULL);
    /* other weight dtypes are counted by the memory model (its files stay float32), along whole blocks */
    mi_config q = c;
    q.dtype[2][MI_W1] = MI_Q8_0;
    CU_ASSERT_EQUAL(mi_config_validate(&q, err), 0);
    q.hidden_dim = 250;
    q.dtype[2][MI_W2] = MI_Q8_0;
    CU_ASSERT_EQUAL(mi_config_validate(&q, err), -1);
    CU_ASSERT(strstr(err, "w2_t is q8_0, but its blocked axis of 250") != NULL);
    bad = c;
    bad.n_channels = 0;
    CU_ASSERT_EQUAL(mi_config_validate(&bad, err), -1);
    CU_ASSERT(strstr(err, "n_channels") != NULL);
}

/* Write text to a file in the scratch dir and read it as a series. */
static int read_text(const char *text, mi_series *s, char *err)
{
    char p[600];
    tu_path(p, sizeof p, g_dir, "s.csv");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(p, text), 0);
    return mi_series_read(p, s, err);
}

static void test_csv(void)
{
    char err[MI_ERRLEN];
    mi_series s;
    CU_ASSERT_EQUAL_FATAL(read_text("time,a,b\n0,1.5,2\n1,-3,4e2\r\n\n \n", &s, err), 0); /* blank lines at the end */
    CU_ASSERT_EQUAL(s.rows, 2);
    CU_ASSERT_EQUAL(s.cols, 2);
    CU_ASSERT_EQUAL(s.skipped_time, 1);
    CU_ASSERT_STRING_EQUAL(s.names[1], "b");
    CU_ASSERT_DOUBLE_EQUAL(s.v[3], 400.0, 0);
    mi_series_free(&s);
    CU_ASSERT_EQUAL(read_text("a,b\n1,1e-310\n", &s, err), 0); /* below float32's smallest: 0, not an error */
    CU_ASSERT_EQUAL(s.skipped_time, 0);
    CU_ASSERT_EQUAL(s.cols, 2);
    mi_series_free(&s);
    static const struct { const char *text, *says; } bad[] = {
        {"a,b\n1,2\n3,\n", "line 3, column 'b': missing"},
        {"a,b\n1,2\nNA,4\n", "line 3, column 'a': non-numeric"},
        {"a,b\n1,nan\n", "non-finite"},
        {"a,b\n1,x2\n", "non-numeric"},
        {"a,b\n1,0x10\n", "line 2, column 'b': non-numeric value '0x10'"},
        {"a,b\n1,2,3\n", "line 2 has 3 fields, the header has 2"},
        {"a,b\n", "no data rows"},
        {"", "empty series file"},
        {"a,b\n1,1e999\n", "non-finite"},
        {"a,b\n1,1e300\n", "outside float32's range"},
        {"a,b\n1,2\n\n3,4\n", "line 3 is blank, but data rows follow it"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(read_text(bad[i].text, &s, err), -1);
        if (!strstr(err, bad[i].says))
            fprintf(stderr, "\ncase %zu: '%s' lacks '%s'\n", i, err, bad[i].says);
        CU_ASSERT(strstr(err, bad[i].says) != NULL);
        CU_ASSERT(s.v == NULL && s.names == NULL);
    }
    char p[600];
    tu_path(p, sizeof p, g_dir, "missing.csv");
    CU_ASSERT_EQUAL(mi_series_read(p, &s, err), -1);
    CU_ASSERT(strstr(err, "missing.csv") != NULL);
}

static void test_forward(void)
{
    char err[MI_ERRLEN], p[600];
    mi_config c = small_config();
    tu_path(p, sizeof p, g_dir, "pt.h5");
    CU_ASSERT_EQUAL_FATAL(mi_synth_write(&c, 7, p, 0, err), 0);
    mi_model m;
    mi_model_load_path(&m, p, NULL);
    CU_ASSERT_EQUAL(m.cfg.family, MI_FAMILY_PATCHTST);
    size_t n = 0;
    CU_ASSERT_EQUAL(mi_model_check_finite(&m, p, &n, err), 0);
    CU_ASSERT_EQUAL(n, mi_model_params(&c));
    mi_scratch s;
    mi_scratch_init(&s, &m.cfg, m.cfg.seq_len);
    float x[96], patches[11 * 16], y1[24], y2[24], y3[24], mu, sigma;
    for (int i = 0; i < 96; i++)
        x[i] = sinf(i / 5.0f);
    mi_series_patches(&m.cfg, x, patches, &mu, &sigma);
    mi_series_forward(&m, &s, patches, y1);
    mi_series_forward(&m, &s, patches, y2);
    CU_ASSERT_EQUAL(memcmp(y1, y2, sizeof y1), 0); /* no state carried between forecasts */
    int finite = 1;
    for (int h = 0; h < 24; h++)
        finite &= isfinite(y1[h]);
    CU_ASSERT(finite);
    patches[5] += 0.5f; /* the first patch: attention carries it to every output */
    mi_series_forward(&m, &s, patches, y3);
    CU_ASSERT(memcmp(y1, y3, sizeof y1) != 0);
    mi_scratch_free(&s);
    mi_model_free(&m);
}

int main(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_series"))
        return 1;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("time-series family", NULL, NULL);
    CU_add_test(s, "LayerNorm with bias, whole and device-local", test_layernorm);
    CU_add_test(s, "GELU, erf form", test_gelu);
    CU_add_test(s, "instance normalisation and patches", test_patches);
    CU_add_test(s, "config checks", test_config);
    CU_add_test(s, "series CSV files and their errors", test_csv);
    CU_add_test(s, "synthetic model on one device", test_forward);
    CU_basic_set_mode(CU_BRM_NORMAL);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    tu_rm_tree(g_dir);
    return failed ? 1 : 0;
}
