/* Helpers shared by the subcommands (see cli.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/plan.h"
#include "meshinfer/common.h"
#include "meshinfer/utf8.h"
#include "meshinfer/quantize.h"
#include "meshinfer/tensor.h"

void cli_no_positional(const char *cmd, int optind_, int argc, char **argv)
{
    if (optind_ < argc)
        mi_fatal("%s: unexpected argument '%s' (see meshinfer %s --help)", cmd, argv[optind_], cmd);
}

void cli_bad_option(const char *cmd, int code, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (code == ':')
        mi_fatal("%s: option '%s' needs a value (see meshinfer %s --help)", cmd, arg, cmd);
    if (!strncmp(arg, "--", 2) && strchr(arg, '='))
        mi_fatal("%s: option '%s' is unknown or takes no value (see meshinfer %s --help)", cmd, arg, cmd);
    if (optopt && optopt != '?')
        mi_fatal("%s: unknown option '-%c' (see meshinfer %s --help)", cmd, optopt, cmd);
    mi_fatal("%s: unknown option '%s' (see meshinfer %s --help)", cmd, arg, cmd);
}

void cli_json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            /* a sampled byte-fallback token can leave half a character: the
             * JSON must still parse, so invalid bytes become U+FFFD */
            size_t k = (size_t)mi_utf8_len((const unsigned char *)s + i, n - i);
            if (k == 0) {
                fputs("\\ufffd", f);
            } else {
                fwrite(s + i, 1, k, f);
                i += k - 1;
            }
            continue;
        }
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}

int cli_wire_dtype(const char *s)
{
    mi_dtype t;
    if (mi_dtype_parse(s, &t) || (t != MI_F32 && t != MI_F16 && t != MI_Q8_0))
        mi_fatal("--wire-dtype: '%s' is not fp32, fp16 or q8_0", s);
    return t;
}

const char *CLI_DTYPE_HELP =
    "  --dtype T              every layer matrix, and the embeddings and classifier: fp32, fp16,\n"
    "                         q8_0, q4_0, q4_K, q5_K or q6_K; or llama.cpp's mixes q4_K_M, q5_K_M\n"
    "                         (q6_K classifier, and wv and w2 of some layers). A k-quant on rows that\n"
    "                         are not whole super-blocks of 256 falls back to q4_0 (q4_K) or q8_0\n"
    "                         (q5_K, q6_K), with a note saying how many\n"
    "  --layer-dtype SPEC     per layer, over --dtype: e.g. 0-1:q8_0,2-5:q4_K (layers not named keep\n"
    "                         --dtype, or fp32; given twice, both lists apply, a layer in both refused)\n"
    "  --embeddings-dtype T   token embeddings and classifier (default: --dtype)\n";

int cli_dtype_opt(cli_dtypes *d, int code, const char *arg)
{
    switch (code) {
    case 2000: d->dtype = arg; return 1;
    case 2001:
        /* a second --layer-dtype adds its layers to the first's (mi_dtypes_apply refuses a layer named
         * twice): dropping the first silently would quantize layers the user did not ask for */
        if (d->layer) {
            size_t n = strlen(d->layer) + strlen(arg) + 2;
            char *joined = mi_malloc(n, "--layer-dtype");
            snprintf(joined, n, "%s,%s", d->layer, arg);
            arg = joined; /* kept for the command's length, like the argv strings */
        }
        d->layer = arg;
        return 1;
    case 2002: d->emb = arg; return 1;
    default: return 0;
    }
}

int cli_dtypes_given(const cli_dtypes *d)
{
    return d->dtype || d->layer || d->emb;
}

void cli_dtypes_apply(const cli_dtypes *d, mi_config *c, const char *cmd)
{
    char err[MI_ERRLEN];
    int fb = 0;
    if (cli_dtypes_given(d) && mi_dtypes_apply_fallback(c, d->dtype, d->layer, d->emb, &fb, err))
        mi_fatal("%s: %s", cmd, err);
    if (fb) {
        int n = 2 - c->shared_classifier;
        for (int l = 0; l < c->n_layers; l++)
            n += MI_N_LAYER_MATS - (c->ffn_type != MI_FFNK_SWIGLU && c->ffn_type != MI_FFNK_GEGLU);
        fprintf(stderr, "%s: note: %d of %d weight matrices have rows that are not whole super-blocks of 256 and "
                        "fell back from the k-quants (q4_K to q4_0, q5_K and q6_K to q8_0)\n", cmd, fb, n);
    }
}

/* --prune SPEC: "R" for all four exchange kinds, or a comma list mixing "R"
 * and "kind=R". */
void cli_parse_prune(const char *arg, double *ratio)
{
    /* R sets every exchange kind, KIND=R one kind; a bare R is the default
     * whatever its position, each at most once, no empty items */
    char buf[256];
    size_t len = strlen(arg);
    if (len >= sizeof buf || !*arg || arg[0] == ',' || arg[len - 1] == ',' || strstr(arg, ",,"))
        mi_fatal("--prune: '%s' is not a ratio or a list like 0.5,hidden=0.9 (no empty items)", arg);
    strcpy(buf, arg);
    double all = -1, kind[MI_N_PRUNED_XCH];
    for (int k = 0; k < MI_N_PRUNED_XCH; k++)
        kind[k] = -1;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        int x = -1;
        if (eq) {
            *eq = '\0';
            x = mi_xch_parse(item);
            if (x < 0 || x >= MI_N_PRUNED_XCH)
                mi_fatal("--prune: unknown exchange '%s' (attn_in, heads, ffn_in, hidden)", item);
        }
        double r = mi_parse_double("--prune", eq ? eq + 1 : item, 0.0, 1.0);
        if (r >= 1.0)
            mi_fatal("--prune: ratio %s is outside [0, 1) (1 would send nothing at all)", eq ? eq + 1 : item);
        double *slot = x < 0 ? &all : &kind[x];
        if (*slot >= 0)
            mi_fatal(x < 0 ? "--prune: '%s' gives two ratios for all exchanges (one R, then KIND=R for the others; "
                             "a list of ratios is plan --memory-model's)"
                           : "--prune: '%s' gives exchange %s twice",
                     arg, x < 0 ? "" : item);
        *slot = r;
    }
    int covered = 1;
    for (int k = 0; k < MI_N_PRUNED_XCH; k++)
        covered &= kind[k] >= 0;
    if (all >= 0 && covered) /* a bare R that no exchange takes: a typo, or a ratio meant for one kind */
        mi_fatal("--prune: '%s' gives every exchange its own ratio, so the bare ratio applies to none (leave it out)",
                 arg);
    for (int k = 0; k < MI_N_PRUNED_XCH; k++)
        ratio[k] = kind[k] >= 0 ? kind[k] : all >= 0 ? all : 0.0;
}

const char *cli_shell_word(const char *s, char *buf, size_t n)
{
    int plain = *s != 0;
    for (const char *p = s; *p; p++)
        plain &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 strchr("_./-+=:,@%", *p) != NULL;
    if (plain) {
        snprintf(buf, n, "%s", s);
        return buf;
    }
    /* single quotes keep everything but a single quote, which becomes '\'' */
    size_t o = 0;
    if (o + 1 < n)
        buf[o++] = '\'';
    for (const char *p = s; *p && o + 5 < n; p++) {
        if (*p == '\'') {
            memcpy(buf + o, "'\\''", 4);
            o += 4;
        } else {
            buf[o++] = *p;
        }
    }
    if (o + 1 < n)
        buf[o++] = '\'';
    buf[o < n ? o : n - 1] = 0;
    return buf;
}

void cli_exact_report(const mi_exact_info *e, const mi_plan *plan, const char *extra)
{
    char bound[48] = "no bound: the limit came first"; /* NAN (planner.h) */
    if (!isnan(e->bound_s))
        snprintf(bound, sizeof bound, "bound %.3f ms", e->bound_s * 1e3);
    int kept = e->source != MI_PLANNER_EXACT;
    fprintf(stderr, "meshinfer: %sexact planner: %s in %.2f s (%d rows, %d columns), predicted step %.3f ms (%s) at "
                    "context %d%s%s%s%s\n",
            e->optimal ? "" : "warning: ", e->optimal ? "proven optimal" : "its best when the time limit stopped the search",
            e->seconds, e->rows, e->cols, e->objective_s * 1e3, bound, plan->kv_positions / 2, kept ? "; kept " : "",
            kept ? mi_planner_name(e->source) : "", kept ? "'s placement, which the search had not beaten" : "", extra);
}
