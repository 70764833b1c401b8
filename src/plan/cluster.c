/* Cluster descriptions (see plan.h): the devices of a job, their memory
 * budgets and relative speeds, and the link model used by the cost model.
 *
 * Cluster file format (JSON, parsed with cJSON; every key below is the only
 * key allowed at its level, so a typo such as "mem_MB" is an error instead of
 * being silently ignored):
 *
 *   {
 *     "description": "5 Raspberry Pi 4 on 802.11ac",      optional string, ignored
 *     "link": {"latency_ms": 5, "bandwidth_mbit": 300,    optional, each key optional;
 *              "jitter_ms": 1, "loss_pct": 0.5,            the last three for the simulator only
 *              "shared_medium": true},
 *     "mem_bandwidth_gbs": 4,                             optional
 *     "devices": [                                        required, 1..MI_MAX_RANKS entries
 *       {"name": "pi-ctl", "mem_mb": 3500, "speed": 1.0}, name, speed optional
 *       ...
 *     ],
 *     "gflops": 10,                                       optional
 *     "eager_bytes": 65536,                               optional
 *     "storage_mbs": 100,                                 optional (weights read when re-placing, MB/s)
 *     "links": {"latency_ms": [[..]], "bandwidth_mbit": [[..]]},   optional n x n
 *     "calibration": {"n_ranks": 3, "tool": "...", "date": "..."}  optional
 *   }
 *
 * A device may also give "emulate": {"cpu_pct": 40, "slowdown": 1, "delay_ms": 5,
 * "jitter_ms": 1, "loss_pct": 0, "rate_mbit": 50}, what the hosts testbed
 * (jobs/testbed/hosts.sh) makes of it on one machine: its CPU quota (% of one core),
 * a slowdown of every compute op, and its link's one-way delay, jitter, loss
 * and bandwidth (0: unlimited); every key optional. Checked, never planned with.
 *
 * A device may also give "cpu_quota": 0.4, "cpu_period_ms": 5 (a CFS CPU quota: full
 * speed until quota * period of CPU time is used in the current period, then idle until
 * the next; the period defaults to the kernel's 100 ms; speed and "compute" are then the
 * unthrottled figures), "msg_us": 30 (CPU microseconds per message sent or received),
 * "spin_us": 100 and "poll_pct": 3 (a wait for a message spins that long, then takes
 * that share of the CPU while it polls); only the simulator models them. `meshinfer calibrate` writes them from the rank's
 * cgroup and a ping-pong. The top level may give "comm_setup_ms" and "win_setup_ms": what
 * creating one communicator and one one-sided window takes, [of two ranks, of all] (or
 * one number for both; calibrate measures them), charged to a re-placement's move per
 * exchange rebuilt, a group of m members in proportion between the two.
 *
 * A device may also give "power": {"idle_w": 3.8, "active_w": 4.9,
 * "freq": [1, 0.8, 0.6]} (watts idle and computing at the top frequency;
 * the DVFS levels as fractions of the top frequency, descending from 1;
 * every key optional; defaults HeadSplit's Raspberry Pi 4 at one level).
 *
 * `meshinfer calibrate` writes the last two and, per device, "host" (where
 * it was measured), "hwloc" (the device's description, kept for people, not
 * read back) and "compute": {"pass_ns": {"fp32": .., "fp16": .., "q8_0": ..,
 * "q4_0": ..}, "pos_ns": {...}, "kv_ns": .., "op_us": .., "vec_ns": ..} (plan.h mi_device,
 * in nanoseconds per weight element and microseconds per op). A device with
 * "compute" is calibrated; its speed is then only what the HeadSplit planners
 * (greedy) weigh.
 *
 * Units and conversions:
 *   latency_ms         one-way per-message latency in milliseconds (>= 0)  -> seconds (x * 1e-3)
 *   bandwidth_mbit     link bandwidth in megabits/s (> 0)                  -> bytes/s (x * 1e6 / 8)
 *   mem_bandwidth_gbs  weight streaming rate of a speed-1.0 device, GB/s   -> bytes/s (x * 1e9)
 *   mem_mb             device budget in decimal megabytes (MB = 1e6 bytes,
 *                      not MiB) (> 0)                                      -> bytes (x * 1e6)
 *   speed              relative compute speed (> 0, default 1.0)
 *   name               at most 63 characters, default "dev<i>"
 *   gflops             matrix-product rate of a speed-1.0 device, Gflop/s (uncalibrated prefill)
 *   links.latency_ms   one-way latency per pair (diagonal ignored)           -> RTT matrix
 *   links.bandwidth_mbit  bandwidth per pair (diagonal ignored)              -> bytes/s
 *   link.jitter_ms     a message's latency varies by +- this (0..10000)    -> seconds
 *   link.loss_pct      messages lost and sent again, % in [0, 100)         -> fraction
 *   link.shared_medium true: all transfers share link.bandwidth_mbit, one at a time
 *                      (not with a links.bandwidth_mbit matrix, which it would contradict)
 * "description" is the one free-form key (JSON has no comments). Defaults for
 * a missing "link"/"mem_bandwidth_gbs" are those of mi_cluster_default. */
#define _POSIX_C_SOURCE 200809L
#include "meshinfer/plan.h"

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "../util/json_keys.h"
#include "cluster_internal.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_LATENCY_S 20e-6
#define DEFAULT_BANDWIDTH 5e9 /* bytes/s */
#define DEFAULT_MEM_BW 20e9   /* bytes/s */
#define DEFAULT_GFLOPS 10.0   /* a core's sustained fp32 matrix-product rate, order of magnitude */
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
        mi_device_power_defaults(&cl->dev[i]);
    }
    cl->latency_s = DEFAULT_LATENCY_S;
    cl->bandwidth = DEFAULT_BANDWIDTH;
    cl->mem_bw = DEFAULT_MEM_BW;
    cl->gflops = DEFAULT_GFLOPS;
    cl->eager_bytes = 65536; /* Open MPI's btl_tcp_eager_limit */
    cl->storage_bw = 100e6;
    cl->rtt_s = NULL;
    mi_cluster_finish(cl);
}

void mi_device_power_defaults(mi_device *d)
{
    d->idle_w = 3.8; /* HeadSplit: "from 3.8 W idle to 4.8 to 5.0 W active" */
    d->active_w = 4.9;
    d->n_freq = 1;
    d->freq[0] = 1.0;
    d->power_given = 0;
}

void mi_cluster_finish(mi_cluster *cl)
{
    for (int i = 0; i < cl->n_devices; i++) {
        mi_device *d = &cl->dev[i];
        if (d->calibrated)
            continue;
        double s = d->speed > 0 ? d->speed : 1.0;
        for (int t = 0; t < MI_N_DTYPES; t++) {
            d->pass_s[t] = (double)mi_dtype_row_bytes(t, MI_QK_K) / MI_QK_K / (cl->mem_bw * s);
            d->pos_s[t] = 2.0 / (cl->gflops * 1e9 * s);
        }
        d->kv_s = 8.0 / (cl->mem_bw * s); /* a cached position's K and V, fp32, read once per KV head */
        d->op_s = 0;
    }
}

/* ------------------------------------------------------------ parsing */

/* A per-dtype table {"fp32": x, "fp16": x, "q8_0": x, "q4_0": x, "q4_K": x,
 * ...}, nanoseconds per weight element, positive. The 32-block dtypes are
 * required; a k-quant left out (files calibrated before they existed) takes
 * q4_0's time scaled by its bytes per element, which is what a
 * memory-bound pass costs. */
static int parse_dtype_table(const cJSON *o, const char *key, double *out, const char *prefix, const char *where,
                             char *err)
{
    static const char *const keys[] = {"fp32", "fp16", "q8_0", "q4_0", "q4_K", "q5_K", "q6_K", NULL};
    char w[64];
    snprintf(w, sizeof w, "%s.compute.%s", where, key);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsObject(t))
        return mi_set_error(err, "%s: %s must be an object {\"fp32\": ns, \"fp16\": ns, \"q8_0\": ns, \"q4_0\": ns}",
                            prefix, w);
    if (mi_json_check_keys(t, keys, prefix, w, err))
        return -1;
    for (int d = 0; d < MI_N_DTYPES; d++) {
        double v = -1;
        if (mi_cl_get_number(t, mi_dtype_name(d), 0, &v, prefix, w, err))
            return -1;
        if (v < 0 && mi_dtype_kquant(d)) {
            out[d] = out[MI_Q4_0] * (double)mi_dtype_row_bytes(d, MI_QK_K) / (double)mi_dtype_row_bytes(MI_Q4_0, MI_QK_K);
            continue;
        }
        if (v < 0)
            return mi_set_error(err, "%s: %s.%s is missing", prefix, w, mi_dtype_name(d));
        out[d] = v * 1e-9;
    }
    return 0;
}

static int parse_compute(const cJSON *cp, mi_device *dev, const char *prefix, const char *where, char *err)
{
    static const char *const keys[] = {"pass_ns", "pos_ns", "kv_ns", "op_us", "vec_ns", NULL};
    char w[48];
    snprintf(w, sizeof w, "%s.compute", where);
    if (!cJSON_IsObject(cp))
        return mi_set_error(err, "%s: %s must be an object (written by meshinfer calibrate)", prefix, w);
    if (mi_json_check_keys(cp, keys, prefix, w, err) || parse_dtype_table(cp, "pass_ns", dev->pass_s, prefix, where, err) ||
        parse_dtype_table(cp, "pos_ns", dev->pos_s, prefix, where, err))
        return -1;
    double kv = -1, op = 0, vec = 0;
    if (mi_cl_get_number(cp, "kv_ns", 0, &kv, prefix, w, err) || mi_cl_get_number(cp, "op_us", 1, &op, prefix, w, err) ||
        mi_cl_get_number(cp, "vec_ns", 1, &vec, prefix, w, err))
        return -1;
    dev->vec_s = vec * 1e-9;
    if (kv < 0)
        return mi_set_error(err, "%s: %s.kv_ns is missing", prefix, w);
    dev->kv_s = kv * 1e-9;
    dev->op_s = op * 1e-6;
    dev->calibrated = 1;
    return 0;
}

static int parse_device(const cJSON *d, int i, mi_device *dev, const char *prefix, char *err)
{
    static const char *const keys[] = {"name", "mem_mb", "speed", "host", "compute", "hwloc", "power", "emulate",
                                       "cpu_quota", "cpu_period_ms", "msg_us", "spin_us", "poll_pct", NULL};
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
        for (size_t k = 0; k < len; k++)
            if ((unsigned char)name->valuestring[k] < 0x20 || name->valuestring[k] == 0x7f)
                /* names are printed in tables and read back line by line (jobs/testbed/hosts.sh) */
                return mi_set_error(err, "%s: %s.name contains a control character (byte %zu)", prefix, where, k);
        memcpy(dev->name, name->valuestring, len + 1);
    }

    double mem_mb = -1;
    if (!cJSON_GetObjectItemCaseSensitive(d, "mem_mb"))
        return mi_set_error(err, "%s: %s.mem_mb is missing (the memory budget in MB, a number from 1e-6 to 1e9)",
                            prefix, where);
    if (mi_cl_get_number(d, "mem_mb", 0, &mem_mb, prefix, where, err))
        return -1;
    dev->mem_bytes = mem_mb * 1e6;
    if (!isfinite(dev->mem_bytes))
        return mi_set_error(err, "%s: %s.mem_mb is too large (%g)", prefix, where, mem_mb);

    dev->speed = 1.0;
    if (mi_cl_get_number(d, "speed", 0, &dev->speed, prefix, where, err))
        return -1;

    const cJSON *host = cJSON_GetObjectItemCaseSensitive(d, "host");
    if (host) {
        if (!cJSON_IsString(host) || strlen(host->valuestring) >= sizeof dev->host)
            return mi_set_error(err, "%s: %s.host must be a host name of at most %zu characters", prefix, where,
                                sizeof dev->host - 1);
        strcpy(dev->host, host->valuestring);
    }
    mi_device_power_defaults(dev);
    const cJSON *pw = cJSON_GetObjectItemCaseSensitive(d, "power");
    if (pw && mi_cl_parse_power(pw, dev, prefix, where, err))
        return -1;
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(d, "hwloc");
    if (hw && !cJSON_IsObject(hw))
        return mi_set_error(err, "%s: %s.hwloc must be an object (the device's description)", prefix, where);
    const cJSON *em = cJSON_GetObjectItemCaseSensitive(d, "emulate");
    if (em && mi_cl_check_emulate(em, prefix, where, err))
        return -1;
    if (mi_cl_parse_cpu(d, dev, prefix, where, err))
        return -1;
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(d, "compute");
    if (cp)
        return parse_compute(cp, dev, prefix, where, err);
    return 0;
}

/* An n x n matrix of non-negative numbers (diagonal ignored) into out[n*n],
 * scaled. */
static int parse_matrix(const cJSON *m, const char *key, int n, double scale, double *out, const char *prefix,
                        char *err)
{
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != n)
        return mi_set_error(err, "%s: links.%s must be %d rows of %d numbers (one per device)", prefix, key, n, n);
    int i = 0;
    for (const cJSON *row = m->child; row; row = row->next, i++) {
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != n)
            return mi_set_error(err, "%s: links.%s[%d] must be a row of %d numbers", prefix, key, i, n);
        int j = 0;
        for (const cJSON *v = row->child; v; v = v->next, j++) {
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9 ||
                (v->valuedouble > 0 && v->valuedouble < 1e-6) ||
                (i != j && !strcmp(key, "bandwidth_mbit") && v->valuedouble <= 0)) {
                char got[48] = "";
                if (cJSON_IsNumber(v))
                    snprintf(got, sizeof got, " (got %g)", v->valuedouble);
                return mi_set_error(err, "%s: links.%s[%d][%d] must be %s%s", prefix, key, i, j,
                                    strcmp(key, "bandwidth_mbit") ? "0 or a number from 1e-6 to 1e9"
                                                                  : "a number from 1e-6 to 1e9", got);
            }
            out[(size_t)i * n + j] = i == j ? 0.0 : v->valuedouble * scale;
        }
    }
    return 0;
}

static int parse_links(const cJSON *root, mi_cluster *cl, const char *prefix, char *err)
{
    static const char *const keys[] = {"latency_ms", "bandwidth_mbit", NULL};
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (!links)
        return 0;
    if (!cJSON_IsObject(links))
        return mi_set_error(err, "%s: 'links' must be an object {\"latency_ms\": [[..]], \"bandwidth_mbit\": [[..]]}",
                            prefix);
    if (mi_json_check_keys(links, keys, prefix, "links", err))
        return -1;
    size_t n = (size_t)cl->n_devices;
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(links, "latency_ms");
    if (lat) {
        cl->rtt_s = mi_calloc(n * n, sizeof(double), "link latencies");
        /* a one-way latency is half a round trip (mi_cluster_latency) */
        if (parse_matrix(lat, "latency_ms", (int)n, 2e-3, cl->rtt_s, prefix, err))
            return -1;
    }
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(links, "bandwidth_mbit");
    if (bw) {
        cl->bw = mi_calloc(n * n, sizeof(double), "link bandwidths");
        if (parse_matrix(bw, "bandwidth_mbit", (int)n, 1e6 / 8, cl->bw, prefix, err))
            return -1;
    }
    return 0;
}

/* The link block's keys only the simulator draws on (plan.h mi_cluster). */
static int parse_link_sim(const cJSON *link, mi_cluster *cl, const char *prefix, char *err)
{
    double jitter = 0, loss = 0;
    if (mi_cl_get_number(link, "jitter_ms", 1, &jitter, prefix, "link", err) ||
        mi_cl_get_number(link, "loss_pct", 1, &loss, prefix, "link", err))
        return -1;
    if (jitter > 10000)
        return mi_set_error(err, "%s: link.jitter_ms must be at most 10000 (got %g)", prefix, jitter);
    if (loss >= 100)
        return mi_set_error(err, "%s: link.loss_pct must be below 100 (got %g)", prefix, loss);
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(link, "shared_medium");
    if (sm && !cJSON_IsBool(sm))
        return mi_set_error(err, "%s: link.shared_medium must be true or false", prefix);
    cl->jitter_s = jitter * 1e-3;
    cl->loss = loss / 100;
    cl->shared_medium = sm && cJSON_IsTrue(sm);
    return 0;
}

static int parse_calibration(const cJSON *root, mi_cluster *cl, const char *prefix, char *err)
{
    static const char *const keys[] = {"n_ranks", "tool", "date", "model", "seconds", NULL};
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "calibration");
    if (!c)
        return 0;
    if (!cJSON_IsObject(c))
        return mi_set_error(err, "%s: 'calibration' must be an object (written by meshinfer calibrate)", prefix);
    if (mi_json_check_keys(c, keys, prefix, "calibration", err))
        return -1;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "n_ranks");
    if (!cJSON_IsNumber(n) || n->valuedouble != cl->n_devices)
        return mi_set_error(err, "%s: calibration.n_ranks must equal the number of devices (%d)", prefix,
                            cl->n_devices);
    cl->calib_ranks = cl->n_devices;
    return 0;
}

/* Parse json into cl; error messages start with prefix. On failure cl is
 * left empty (safe to mi_cluster_free). */
static int parse_cluster(const char *json, size_t len, mi_cluster *cl, const char *prefix, char *err)
{
    static const char *const top_keys[] = {"description", "link", "mem_bandwidth_gbs", "gflops", "devices",
                                           "links", "calibration", "eager_bytes", "storage_mbs", "comm_setup_ms",
                                           "win_setup_ms", NULL};
    static const char *const link_keys[] = {"latency_ms", "bandwidth_mbit", "jitter_ms", "loss_pct", "shared_medium",
                                            NULL};
    memset(cl, 0, sizeof *cl);

    cJSON *root = mi_json_parse(json, len, prefix, err);
    if (!root)
        return -1;

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
        if (mi_cl_get_number(link, "latency_ms", 1, &lat_ms, prefix, "link", err) ||
            mi_cl_get_number(link, "bandwidth_mbit", 0, &mbit, prefix, "link", err))
            goto done;
        tmp.latency_s = lat_ms * 1e-3;
        tmp.bandwidth = mbit * 1e6 / 8;
        if (parse_link_sim(link, &tmp, prefix, err))
            goto done;
    }

    double gbs = tmp.mem_bw / 1e9;
    if (mi_cl_get_number(root, "mem_bandwidth_gbs", 0, &gbs, prefix, "", err))
        goto done;
    tmp.mem_bw = gbs * 1e9;
    if (mi_cl_get_number(root, "gflops", 0, &tmp.gflops, prefix, "", err) ||
        mi_cl_get_number(root, "eager_bytes", 1, &tmp.eager_bytes, prefix, "", err))
        goto done;
    if (tmp.eager_bytes != floor(tmp.eager_bytes)) { /* a message size: whole bytes */
        mi_set_error(err, "%s: eager_bytes must be a whole number of bytes (got %g)", prefix, tmp.eager_bytes);
        goto done;
    }
    double smbs = tmp.storage_bw / 1e6;
    if (mi_cl_get_number(root, "storage_mbs", 0, &smbs, prefix, "", err))
        goto done;
    tmp.storage_bw = smbs * 1e6;
    if (mi_cl_parse_setup(root, "comm_setup_ms", &tmp.comm_setup_s, &tmp.comm_setup_all_s, prefix, err) ||
        mi_cl_parse_setup(root, "win_setup_ms", &tmp.win_setup_s, &tmp.win_setup_all_s, prefix, err))
        goto done;

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
    /* a name identifies its device in every table, trace and testbed line: two alike would say one
     * device where two are meant (a default "dev<i>" counts as given) */
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (!strcmp(tmp.dev[a].name, tmp.dev[b].name)) {
                mi_set_error(err, "%s: devices[%d].name '%s' is also devices[%d]'s: each device needs its own name",
                             prefix, b, tmp.dev[b].name, a);
                goto done;
            }
    if (parse_links(root, &tmp, prefix, err) || parse_calibration(root, &tmp, prefix, err))
        goto done;
    if (tmp.shared_medium && tmp.bw) {
        mi_set_error(err, "%s: link.shared_medium puts every transfer on one medium of link.bandwidth_mbit: a "
                          "links.bandwidth_mbit matrix contradicts it (give one or the other)", prefix);
        goto done;
    }
    mi_cluster_finish(&tmp);

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

double mi_cluster_bandwidth(const mi_cluster *cl, int a, int b)
{
    if (cl->bw && a != b && a >= 0 && b >= 0 && a < cl->n_devices && b < cl->n_devices)
        return cl->bw[(size_t)a * (size_t)cl->n_devices + (size_t)b];
    return cl->bandwidth;
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
    free(cl->bw);
    memset(cl, 0, sizeof *cl);
}

/* ------------------------------------------------------------- saving */

static cJSON *matrix_json(const double *m, int n, double scale)
{
    cJSON *rows = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < n; j++)
            cJSON_AddItemToArray(row, cJSON_CreateNumber(i == j ? 0.0 : m[(size_t)i * n + j] * scale));
        cJSON_AddItemToArray(rows, row);
    }
    return rows;
}

static cJSON *dtype_json(const double *v)
{
    cJSON *o = cJSON_CreateObject();
    for (int t = 0; t < MI_N_DTYPES; t++)
        cJSON_AddNumberToObject(o, mi_dtype_name(t), v[t] * 1e9);
    return o;
}

int mi_cluster_save(const mi_cluster *cl, const char *const *hw, const char *description, const char *path,
                    char *err)
{
    cJSON *root = cJSON_CreateObject();
    if (description)
        cJSON_AddStringToObject(root, "description", description);
    cJSON *link = cJSON_AddObjectToObject(root, "link");
    cJSON_AddNumberToObject(link, "latency_ms", cl->latency_s * 1e3);
    cJSON_AddNumberToObject(link, "bandwidth_mbit", cl->bandwidth * 8 / 1e6);
    if (cl->jitter_s > 0)
        cJSON_AddNumberToObject(link, "jitter_ms", cl->jitter_s * 1e3);
    if (cl->loss > 0)
        cJSON_AddNumberToObject(link, "loss_pct", cl->loss * 100);
    if (cl->shared_medium)
        cJSON_AddTrueToObject(link, "shared_medium");
    cJSON_AddNumberToObject(root, "mem_bandwidth_gbs", cl->mem_bw / 1e9);
    cJSON_AddNumberToObject(root, "gflops", cl->gflops);
    cJSON_AddNumberToObject(root, "eager_bytes", cl->eager_bytes);
    cJSON_AddNumberToObject(root, "storage_mbs", cl->storage_bw / 1e6);
    if (cl->comm_setup_s > 0 || cl->win_setup_s > 0) {
        double c[2] = {cl->comm_setup_s * 1e3, cl->comm_setup_all_s * 1e3};
        double w[2] = {cl->win_setup_s * 1e3, cl->win_setup_all_s * 1e3};
        cJSON_AddItemToObject(root, "comm_setup_ms", cJSON_CreateDoubleArray(c, 2));
        cJSON_AddItemToObject(root, "win_setup_ms", cJSON_CreateDoubleArray(w, 2));
    }
    cJSON *devs = cJSON_AddArrayToObject(root, "devices");
    for (int i = 0; i < cl->n_devices; i++) {
        const mi_device *d = &cl->dev[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", d->name);
        cJSON_AddNumberToObject(o, "mem_mb", d->mem_bytes / 1e6);
        cJSON_AddNumberToObject(o, "speed", d->speed);
        if (d->host[0])
            cJSON_AddStringToObject(o, "host", d->host);
        mi_cl_save_cpu(d, o);
        if (d->power_given) {
            cJSON *p = cJSON_AddObjectToObject(o, "power");
            cJSON_AddNumberToObject(p, "idle_w", d->idle_w);
            cJSON_AddNumberToObject(p, "active_w", d->active_w);
            cJSON_AddItemToObject(p, "freq", cJSON_CreateDoubleArray(d->freq, d->n_freq));
        }
        if (d->calibrated) {
            cJSON *c = cJSON_AddObjectToObject(o, "compute");
            cJSON_AddItemToObject(c, "pass_ns", dtype_json(d->pass_s));
            cJSON_AddItemToObject(c, "pos_ns", dtype_json(d->pos_s));
            cJSON_AddNumberToObject(c, "kv_ns", d->kv_s * 1e9);
            cJSON_AddNumberToObject(c, "op_us", d->op_s * 1e6);
            cJSON_AddNumberToObject(c, "vec_ns", d->vec_s * 1e9);
        }
        cJSON *h = hw && hw[i] ? cJSON_Parse(hw[i]) : NULL;
        if (h)
            cJSON_AddItemToObject(o, "hwloc", h);
        cJSON_AddItemToArray(devs, o);
    }
    if (cl->rtt_s || cl->bw) {
        cJSON *links = cJSON_AddObjectToObject(root, "links");
        if (cl->rtt_s)
            cJSON_AddItemToObject(links, "latency_ms", matrix_json(cl->rtt_s, cl->n_devices, 0.5e3));
        if (cl->bw)
            cJSON_AddItemToObject(links, "bandwidth_mbit", matrix_json(cl->bw, cl->n_devices, 8 / 1e6));
    }
    if (cl->calib_ranks > 0) {
        cJSON *c = cJSON_AddObjectToObject(root, "calibration");
        cJSON_AddNumberToObject(c, "n_ranks", cl->calib_ranks);
        cJSON_AddStringToObject(c, "tool", "meshinfer calibrate");
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    mi_output out;
    FILE *f = mi_output_open(&out, path, err);
    if (!f) {
        free(text);
        return -1;
    }
    fputs(text, f);
    fputc('\n', f);
    free(text);
    return mi_output_commit(&out, err);
}
