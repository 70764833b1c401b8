/* Cluster descriptions (see plan.h): the devices of a job, their memory
 * budgets and relative speeds, and the link model used by the cost model.
 *
 * Cluster file format (JSON, parsed with cJSON; every key below is the only
 * key allowed at its level, so a typo such as "mem_MB" is an error instead of
 * being silently ignored):
 *
 *   {
 *     "description": "5 Raspberry Pi 4 on 802.11ac",      optional string, ignored
 *     "link": {"latency_ms": 5, "bandwidth_mbit": 300},   optional, each key optional
 *     "mem_bandwidth_gbs": 4,                             optional
 *     "devices": [                                        required, 1..MI_MAX_RANKS entries
 *       {"name": "pi-ctl", "mem_mb": 3500, "speed": 1.0}, name, speed optional
 *       ...
 *     ]
 *   }
 *
 * Units and conversions:
 *   latency_ms         one-way per-message latency in milliseconds (>= 0)  -> seconds (x * 1e-3)
 *   bandwidth_mbit     link bandwidth in megabits/s (> 0)                  -> bytes/s (x * 1e6 / 8)
 *   mem_bandwidth_gbs  weight streaming rate of a speed-1.0 device, GB/s   -> bytes/s (x * 1e9)
 *   mem_mb             device budget in decimal megabytes (MB = 1e6 bytes,
 *                      not MiB) (> 0)                                      -> bytes (x * 1e6)
 *   speed              relative compute speed (> 0, default 1.0)
 *   name               at most 63 characters, default "dev<i>"
 * "description" is the one free-form key (JSON has no comments). Defaults for
 * a missing "link"/"mem_bandwidth_gbs" are those of mi_cluster_default. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/plan.h"

#include "meshinfer/common.h"
#include "../util/json_keys.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LATENCY_S 20e-6
#define DEFAULT_BANDWIDTH 5e9 /* bytes/s */
#define DEFAULT_MEM_BW 20e9   /* bytes/s */
#define MAX_FILE_BYTES (64L << 20)

void mi_cluster_default(mi_cluster *cl, int n, double mem_each)
{
    memset(cl, 0, sizeof *cl);
    if (n < 0)
        n = 0;
    cl->n_devices = n;
    cl->dev = n > 0 ? mi_calloc((size_t)n, sizeof *cl->dev, "cluster devices") : NULL;
    for (int i = 0; i < n; i++) {
        snprintf(cl->dev[i].name, sizeof cl->dev[i].name, "dev%d", i);
        cl->dev[i].mem_bytes = mem_each;
        cl->dev[i].speed = 1.0;
    }
    cl->latency_s = DEFAULT_LATENCY_S;
    cl->bandwidth = DEFAULT_BANDWIDTH;
    cl->mem_bw = DEFAULT_MEM_BW;
    cl->rtt_s = NULL;
}

/* ------------------------------------------------------------ parsing */

/* 1-based line and column of byte offset pos in text. */
static void line_col(const char *text, size_t pos, int *line, int *col)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < pos && text[i]; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* Optional number of obj[key] that must be > 0 (or >= 0 when allow_zero).
 * Leaves *out untouched when the key is missing. */
static int get_number(const cJSON *obj, const char *key, int allow_zero, double *out, const char *prefix,
                      const char *where, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return 0;
    const char *what = allow_zero ? "a non-negative number" : "a positive number";
    const char *dot = *where ? "." : "";
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return mi_set_error(err, "%s: %s%s%s must be %s", prefix, where, dot, key, what);
    double d = v->valuedouble;
    if (d < 0 || (!allow_zero && d <= 0))
        return mi_set_error(err, "%s: %s%s%s must be %s (got %g)", prefix, where, dot, key, what, d);
    /* far beyond any device or link, and small enough that sums over 256
     * devices stay finite (speeds near 1e308 made the tp planner's sum NaN) */
    if (d > 1e9)
        return mi_set_error(err, "%s: %s%s%s must be at most 1e9 (got %g)", prefix, where, dot, key, d);
    *out = d;
    return 0;
}

static int parse_device(const cJSON *d, int i, mi_device *dev, const char *prefix, char *err)
{
    static const char *const keys[] = {"name", "mem_mb", "speed", NULL};
    char where[32];
    snprintf(where, sizeof where, "devices[%d]", i);
    if (!cJSON_IsObject(d))
        return mi_set_error(err, "%s: %s must be an object like {\"name\": \"pi0\", \"mem_mb\": 3500}", prefix,
                            where);
    if (mi_json_check_keys(d, keys, prefix, where, err))
        return -1;

    snprintf(dev->name, sizeof dev->name, "dev%d", i);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
    if (name) {
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return mi_set_error(err, "%s: %s.name must be a non-empty string", prefix, where);
        size_t len = strlen(name->valuestring);
        if (len >= sizeof dev->name)
            return mi_set_error(err, "%s: %s.name is %zu characters long; at most %zu are allowed", prefix, where,
                                len, sizeof dev->name - 1);
        memcpy(dev->name, name->valuestring, len + 1);
    }

    double mem_mb = -1;
    if (!cJSON_GetObjectItemCaseSensitive(d, "mem_mb"))
        return mi_set_error(err, "%s: %s.mem_mb is missing (memory budget in MB, must be a positive number)",
                            prefix, where);
    if (get_number(d, "mem_mb", 0, &mem_mb, prefix, where, err))
        return -1;
    dev->mem_bytes = mem_mb * 1e6;
    if (!isfinite(dev->mem_bytes))
        return mi_set_error(err, "%s: %s.mem_mb is too large (%g)", prefix, where, mem_mb);

    dev->speed = 1.0;
    if (get_number(d, "speed", 0, &dev->speed, prefix, where, err))
        return -1;
    return 0;
}

/* Parse json into cl; error messages start with prefix. On failure cl is
 * left empty (safe to mi_cluster_free). */
static int parse_cluster(const char *json, size_t len, mi_cluster *cl, const char *prefix, char *err)
{
    static const char *const top_keys[] = {"description", "link", "mem_bandwidth_gbs", "devices", NULL};
    static const char *const link_keys[] = {"latency_ms", "bandwidth_mbit", NULL};
    memset(cl, 0, sizeof *cl);

    const char *end = NULL;
    /* len + 1: cJSON counts the terminating NUL when it must check for
     * trailing garbage (require_null_terminated). */
    cJSON *root = cJSON_ParseWithLengthOpts(json, len + 1, &end, 1);
    if (!root) {
        size_t pos = end && end >= json ? (size_t)(end - json) : 0;
        int line, col;
        line_col(json, pos, &line, &col);
        return mi_set_error(err, "%s: JSON syntax error at byte %zu (line %d, column %d)", prefix, pos, line, col);
    }

    int rc = -1;
    mi_cluster tmp;
    mi_cluster_default(&tmp, 0, 0);

    if (!cJSON_IsObject(root)) {
        mi_set_error(err, "%s: the top level must be a JSON object with a 'devices' array", prefix);
        goto done;
    }
    if (mi_json_check_keys(root, top_keys, prefix, "", err))
        goto done;

    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (desc && !cJSON_IsString(desc)) {
        mi_set_error(err, "%s: 'description' must be a string", prefix);
        goto done;
    }

    const cJSON *link = cJSON_GetObjectItemCaseSensitive(root, "link");
    if (link) {
        if (!cJSON_IsObject(link)) {
            mi_set_error(err, "%s: 'link' must be an object like {\"latency_ms\": 5, \"bandwidth_mbit\": 300}",
                         prefix);
            goto done;
        }
        if (mi_json_check_keys(link, link_keys, prefix, "link", err))
            goto done;
        double lat_ms = tmp.latency_s * 1e3, mbit = tmp.bandwidth * 8 / 1e6;
        if (get_number(link, "latency_ms", 1, &lat_ms, prefix, "link", err) ||
            get_number(link, "bandwidth_mbit", 0, &mbit, prefix, "link", err))
            goto done;
        tmp.latency_s = lat_ms * 1e-3;
        tmp.bandwidth = mbit * 1e6 / 8;
    }

    double gbs = tmp.mem_bw / 1e9;
    if (get_number(root, "mem_bandwidth_gbs", 0, &gbs, prefix, "", err))
        goto done;
    tmp.mem_bw = gbs * 1e9;

    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(root, "devices");
    int n = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
    if (n <= 0) {
        mi_set_error(err, "%s: 'devices' must be a non-empty array of {\"name\", \"mem_mb\", \"speed\"} objects",
                     prefix);
        goto done;
    }
    if (n > MI_MAX_RANKS) {
        mi_set_error(err, "%s: 'devices' has %d entries; at most %d (MI_MAX_RANKS) are supported", prefix, n,
                     MI_MAX_RANKS);
        goto done;
    }
    tmp.dev = mi_calloc((size_t)n, sizeof *tmp.dev, "cluster devices");
    tmp.n_devices = n;
    int i = 0;
    for (const cJSON *d = devs->child; d; d = d->next, i++)
        if (parse_device(d, i, &tmp.dev[i], prefix, err))
            goto done;

    *cl = tmp;
    memset(&tmp, 0, sizeof tmp);
    rc = 0;
done:
    mi_cluster_free(&tmp);
    cJSON_Delete(root);
    return rc;
}

int mi_cluster_parse(const char *json, mi_cluster *cl, char *err)
{
    if (!json) {
        memset(cl, 0, sizeof *cl);
        return mi_set_error(err, "cluster file: no text to parse");
    }
    return parse_cluster(json, strlen(json), cl, "cluster file", err);
}

int mi_cluster_load(const char *path, mi_cluster *cl, char *err)
{
    memset(cl, 0, sizeof *cl);
    size_t len = 0;
    char *buf = mi_read_text_file(path, "cluster file", MAX_FILE_BYTES, &len, err);
    if (!buf)
        return -1;
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "cluster file %s", path);
    int rc = parse_cluster(buf, len, cl, prefix, err);
    free(buf);
    return rc;
}

/* -------------------------------------------------------------- links */

void mi_cluster_set_rtt(mi_cluster *cl, const double *rtt_s, double margin)
{
    free(cl->rtt_s);
    cl->rtt_s = NULL;
    if (!rtt_s || cl->n_devices <= 0)
        return;
    size_t n = (size_t)cl->n_devices;
    cl->rtt_s = mi_malloc(n * n * sizeof *cl->rtt_s, "cluster RTT matrix");
    for (size_t i = 0; i < n * n; i++) {
        double v = rtt_s[i] * (1.0 + margin);
        cl->rtt_s[i] = v > 0 ? v : 0.0; /* no negative (or NaN) latencies */
    }
}

double mi_cluster_latency(const mi_cluster *cl, int a, int b)
{
    if (a == b)
        return 0.0;
    if (cl->rtt_s && a >= 0 && b >= 0 && a < cl->n_devices && b < cl->n_devices)
        return cl->rtt_s[(size_t)a * (size_t)cl->n_devices + (size_t)b] / 2.0;
    return cl->latency_s;
}

void mi_cluster_free(mi_cluster *cl)
{
    if (!cl)
        return;
    free(cl->dev);
    free(cl->rtt_s);
    memset(cl, 0, sizeof *cl);
}
