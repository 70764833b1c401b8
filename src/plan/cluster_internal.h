/* What cluster.c and cluster_device.c share: the number rule of the
 * cluster file and the device blocks parsed apart (cluster.c's top comment
 * is the format). */
#ifndef MI_CLUSTER_INTERNAL_H
#define MI_CLUSTER_INTERNAL_H

#include <cjson/cJSON.h>

#include "meshinfer/plan.h"

/* Optional number obj[key] in [1e-6, 1e9] (or 0 too when allow_zero) into
 * *out, untouched when the key is missing. Returns 0, or -1 with one line
 * in err naming prefix: where.key. */
int mi_cl_get_number(const cJSON *obj, const char *key, int allow_zero, double *out, const char *prefix,
                     const char *where, char *err);

/* A device's "power" block into dev (idle_w, active_w, freq). */
int mi_cl_parse_power(const cJSON *p, mi_device *dev, const char *prefix, const char *where, char *err);

/* A device's "emulate" block, checked (the hosts testbed reads it). */
int mi_cl_check_emulate(const cJSON *e, const char *prefix, const char *where, char *err);

/* A device's CPU keys (cpu_quota, cpu_period_ms, msg_us, spin_us, poll_pct) into dev; absent
 * ones leave no quota and no message cost. */
int mi_cl_parse_cpu(const cJSON *d, mi_device *dev, const char *prefix, const char *where, char *err);

/* A top-level set-up time (ms) of root[key]: one number, or [two ranks, all
 * ranks], into seconds (0 when absent). */
int mi_cl_parse_setup(const cJSON *root, const char *key, double *two, double *all, const char *prefix, char *err);

/* The same keys written back (a device without a quota or cost adds none). */
void mi_cl_save_cpu(const mi_device *d, cJSON *o);

#endif
