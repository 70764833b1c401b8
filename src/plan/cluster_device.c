/* The number rule of a cluster file and its device blocks, parsed apart
 * from cluster.c (whose top comment is the format): "power", "emulate" and
 * the CPU keys the simulator models (cpu_quota, cpu_period_ms, msg_us,
 * spin_us, poll_pct). */
#include "cluster_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meshinfer/common.h"
#include "../util/json_keys.h"

/* Optional number of obj[key] that must be > 0 (or >= 0 when allow_zero).
 * Leaves *out untouched when the key is missing. */
int mi_cl_get_number(const cJSON *obj, const char *key, int allow_zero, double *out, const char *prefix,
                      const char *where, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return 0;
    /* one rule, stated whole in every refusal: at most 1e9, far beyond any
     * device or link, so that sums over 256 devices stay finite (speeds near
     * 1e308 made the tp planner's sum NaN); and, when positive, at least 1e-6,
     * so that every rate and time derived from it stays a normal number
     * (1e-300 Mbit/s made predictions of 300 digits, 1e-320 became 0) */
    const char *what = allow_zero ? "0 or a number from 1e-6 to 1e9" : "a number from 1e-6 to 1e9";
    const char *dot = *where ? "." : "";
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return mi_set_error(err, "%s: %s%s%s must be %s", prefix, where, dot, key, what);
    double d = v->valuedouble;
    if (d < 0 || (!allow_zero && d == 0) || d > 1e9 || (d > 0 && d < 1e-6))
        return mi_set_error(err, "%s: %s%s%s must be %s (got %g)", prefix, where, dot, key, what, d);
    *out = d;
    return 0;
}

/* "power": {"idle_w", "active_w", "freq": [1, ...]} (see the top of the file). */
int mi_cl_parse_power(const cJSON *p, mi_device *dev, const char *prefix, const char *where, char *err)
{
    static const char *const keys[] = {"idle_w", "active_w", "freq", NULL};
    char w[48];
    snprintf(w, sizeof w, "%s.power", where);
    if (!cJSON_IsObject(p))
        return mi_set_error(err, "%s: %s must be an object like {\"idle_w\": 3.8, \"active_w\": 4.9, \"freq\": [1, 0.6]}",
                            prefix, w);
    if (mi_json_check_keys(p, keys, prefix, w, err) || mi_cl_get_number(p, "idle_w", 1, &dev->idle_w, prefix, w, err) ||
        mi_cl_get_number(p, "active_w", 0, &dev->active_w, prefix, w, err))
        return -1;
    if (dev->active_w < dev->idle_w)
        return mi_set_error(err, "%s: %s.active_w (%g W) is below idle_w (%g W)", prefix, w, dev->active_w,
                            dev->idle_w);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p, "freq");
    if (f) {
        int n = cJSON_IsArray(f) ? cJSON_GetArraySize(f) : 0;
        if (n < 1 || n > MI_MAX_FREQ)
            return mi_set_error(err, "%s: %s.freq must be a list of 1 to %d DVFS levels (fractions of the top "
                                "frequency, descending from 1)", prefix, w, MI_MAX_FREQ);
        int i = 0;
        for (const cJSON *v = f->child; v; v = v->next, i++) {
            if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.01 && v->valuedouble <= 1) ||
                (i == 0 && v->valuedouble != 1) || (i > 0 && v->valuedouble >= dev->freq[i - 1]))
                return mi_set_error(err, "%s: %s.freq[%d] must be %s", prefix, w, i,
                                    i == 0 ? "1 (the top frequency)" : "in (0.01, 1) and below the level before it");
            dev->freq[i] = v->valuedouble;
        }
        dev->n_freq = n;
    }
    dev->power_given = 1;
    return 0;
}

/* A device's "emulate" block is read by the hosts testbed (jobs/testbed/hosts.sh), not
 * by the planners: they see the device through "speed", "compute" and the
 * links. It is checked here all the same, so that a file the planners accept
 * is never one the testbed then refuses, and a typo is never silently the
 * testbed's default. */
int mi_cl_check_emulate(const cJSON *e, const char *prefix, const char *where, char *err)
{
    static const char *const keys[] = {"cpu_pct", "slowdown", "delay_ms", "jitter_ms", "loss_pct", "rate_mbit", NULL};
    char w[48];
    snprintf(w, sizeof w, "%s.emulate", where);
    if (!cJSON_IsObject(e))
        return mi_set_error(err, "%s: %s must be an object like {\"cpu_pct\": 40, \"delay_ms\": 5, \"rate_mbit\": 50}",
                            prefix, w);
    if (mi_json_check_keys(e, keys, prefix, w, err))
        return -1;
    double cpu = 100, slow = 1, delay = 0, jitter = 0, loss = 0, rate = 0;
    if (mi_cl_get_number(e, "cpu_pct", 0, &cpu, prefix, w, err) || mi_cl_get_number(e, "slowdown", 0, &slow, prefix, w, err) ||
        mi_cl_get_number(e, "delay_ms", 1, &delay, prefix, w, err) || mi_cl_get_number(e, "jitter_ms", 1, &jitter, prefix, w, err) ||
        mi_cl_get_number(e, "loss_pct", 1, &loss, prefix, w, err) || mi_cl_get_number(e, "rate_mbit", 1, &rate, prefix, w, err))
        return -1;
    if (cpu < 1 || cpu > 100)
        return mi_set_error(err, "%s: %s.cpu_pct must be in [1, 100] (%% of one core; got %g)", prefix, w, cpu);
    if (slow < 1 || slow > 1000)
        return mi_set_error(err, "%s: %s.slowdown must be in [1, 1000] (got %g)", prefix, w, slow);
    if (delay > 10000 || jitter > delay)
        return mi_set_error(err, "%s: %s: delay_ms must be at most 10000 and jitter_ms at most delay_ms (got %g, %g)",
                            prefix, w, delay, jitter);
    if (loss >= 100)
        return mi_set_error(err, "%s: %s.loss_pct must be below 100 (got %g)", prefix, w, loss);
    /* tc's tbf takes whole kbit/s */
    if (rate != 0 && (rate < 0.01 || rate > 100000))
        return mi_set_error(err, "%s: %s.rate_mbit must be 0 (unlimited) or in [0.01, 100000] (got %g)", prefix, w, rate);
    return 0;
}

int mi_cl_parse_setup(const cJSON *root, const char *key, double *two, double *all, const char *prefix, char *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *two = *all = 0;
    if (!v)
        return 0;
    if (cJSON_IsNumber(v)) {
        if (mi_cl_get_number(root, key, 1, two, prefix, "", err))
            return -1;
        *all = *two;
    } else {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(v->child) ||
            !cJSON_IsNumber(v->child->next) || !(v->child->valuedouble >= 0 && v->child->valuedouble <= 1e6) ||
            !(v->child->next->valuedouble >= 0 && v->child->next->valuedouble <= 1e6))
            return mi_set_error(err, "%s: %s must be milliseconds from 0 to 1e6, one number or [two ranks, all ranks]",
                                prefix, key);
        *two = v->child->valuedouble, *all = v->child->next->valuedouble;
    }
    *two *= 1e-3, *all *= 1e-3;
    return 0;
}

/* A number of key that must satisfy ok(); NAN when absent; -1 (with err)
 * when not a number. */
static int raw_number(const cJSON *d, const char *key, double *v, const char *prefix, const char *where,
                      const char *rule, char *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(d, key);
    *v = NAN;
    if (!x)
        return 0;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
        return mi_set_error(err, "%s: %s.%s must be %s", prefix, where, key, rule);
    *v = x->valuedouble;
    return 0;
}

int mi_cl_parse_cpu(const cJSON *d, mi_device *dev, const char *prefix, const char *where, char *err)
{
    double q, p, m = 0;
    const char *qrule = "a fraction of one core in (0, 1] (cgroup quota / period: 0.4 is 40%)";
    const char *prule = "a period in milliseconds above 0 and at most 1000 (CFS's cpu.cfs_period_us / 1000)";
    if (raw_number(d, "cpu_quota", &q, prefix, where, qrule, err) ||
        raw_number(d, "cpu_period_ms", &p, prefix, where, prule, err) ||
        mi_cl_get_number(d, "msg_us", 1, &m, prefix, where, err))
        return -1;
    if (!isnan(q) && !(q > 0 && q <= 1))
        return mi_set_error(err, "%s: %s.cpu_quota must be %s (got %g)", prefix, where, qrule, q);
    /* the kernel takes periods of 1 ms to 1 s */
    if (!isnan(p) && !(p > 0 && p <= 1000))
        return mi_set_error(err, "%s: %s.cpu_period_ms must be %s (got %g)", prefix, where, prule, p);
    if (!isnan(p) && isnan(q))
        return mi_set_error(err, "%s: %s.cpu_period_ms is given without cpu_quota (the fraction of the period the "
                                 "device may compute)", prefix, where);
    if (m > 1e6)
        return mi_set_error(err, "%s: %s.msg_us must be at most 1e6 (got %g)", prefix, where, m);
    double spin = 0, poll = 0;
    if (mi_cl_get_number(d, "spin_us", 1, &spin, prefix, where, err) ||
        mi_cl_get_number(d, "poll_pct", 1, &poll, prefix, where, err))
        return -1;
    if (spin > 1e6 || poll > 100)
        return mi_set_error(err, "%s: %s: spin_us must be at most 1e6 and poll_pct at most 100 (got %g, %g)", prefix,
                            where, spin, poll);
    dev->spin_s = spin * 1e-6;
    dev->poll = poll / 100;
    dev->cpu_quota = isnan(q) ? 0 : q;
    /* a quota without a period has the kernel's default period, 100 ms */
    dev->cpu_period_s = isnan(q) ? 0 : isnan(p) ? 0.1 : p * 1e-3;
    dev->msg_s = m * 1e-6;
    return 0;
}

void mi_cl_save_cpu(const mi_device *d, cJSON *o)
{
    if (d->cpu_quota > 0) {
        cJSON_AddNumberToObject(o, "cpu_quota", d->cpu_quota);
        cJSON_AddNumberToObject(o, "cpu_period_ms", d->cpu_period_s * 1e3);
    }
    if (d->msg_s > 0)
        cJSON_AddNumberToObject(o, "msg_us", d->msg_s * 1e6);
    if (d->spin_s > 0 || d->poll > 0) {
        cJSON_AddNumberToObject(o, "spin_us", d->spin_s * 1e6);
        cJSON_AddNumberToObject(o, "poll_pct", d->poll * 100);
    }
}
