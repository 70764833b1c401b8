/* The device this process runs on, from hwloc, /proc and the cgroup files
 * (see hwinfo.h). No MPI. */
#define _GNU_SOURCE
#include "meshinfer/hwinfo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <hwloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meshinfer/common.h"

/* v1 writes "no limit" as LONG_MAX rounded down to a page; anything this
 * large (1 EiB) is no limit on any real machine. */
#define HUGE_LIMIT (1LL << 60)

/* The start of a small file (/proc, /sys) into buf[n], NUL-terminated; NULL
 * when it cannot be read. Enough for every field read here. */
static char *slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t k = fread(buf, 1, n - 1, f);
    int bad = ferror(f);
    fclose(f);
    buf[k] = '\0';
    return bad ? NULL : buf;
}

long long mi_meminfo_parse(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, kl) != 0 || p[kl] != ':')
            continue;
        char *end;
        errno = 0;
        long long kb = strtoll(p + kl + 1, &end, 10);
        if (end == p + kl + 1 || errno || kb < 0 || kb > HUGE_LIMIT / 1024)
            return -1;
        while (*end == ' ' || *end == '\t')
            end++;
        /* every size line says kB; a key without a unit (HugePages_Total) is a count, not bytes */
        return strncmp(end, "kB", 2) == 0 ? kb * 1024 : -1;
    }
    return -1;
}

double mi_cgroup_cpu_quota_parse(const char *v2_cpu_max, long long v1_quota_us, long long v1_period_us)
{
    if (v2_cpu_max) {
        long long quota, period = 100000; /* the kernel's default period when only the quota is written */
        if (strncmp(v2_cpu_max, "max", 3) == 0 || sscanf(v2_cpu_max, "%lld %lld", &quota, &period) < 1)
            return 0;
        return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
    }
    return v1_quota_us > 0 && v1_period_us > 0 ? (double)v1_quota_us / (double)v1_period_us : 0;
}

/* One cgroup directory's memory limit in bytes, or 0 for none. */
static double mem_level(const char *dir, int v2, double *aux)
{
    (void)aux;
    char p[4400], buf[64];
    snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (!slurp(p, buf, sizeof buf) || strncmp(buf, "max", 3) == 0)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    return end == buf || errno || v <= 0 || v >= HUGE_LIMIT ? 0 : (double)v;
}

/* One cgroup directory's CPU quota in cores, or 0 for none; *period: its
 * period in seconds. */
static double cpu_level(const char *dir, int v2, double *period)
{
    char p[4400], buf[64], buf2[64];
    if (v2) {
        snprintf(p, sizeof p, "%s/cpu.max", dir);
        long long q, us = 100000; /* the kernel's default period */
        if (!slurp(p, buf, sizeof buf))
            return 0;
        if (sscanf(buf, "%lld %lld", &q, &us) < 1)
            us = 100000;
        *period = us * 1e-6;
        return mi_cgroup_cpu_quota_parse(buf, -1, 0);
    }
    char p2[4400];
    snprintf(p, sizeof p, "%s/cpu.cfs_quota_us", dir);
    snprintf(p2, sizeof p2, "%s/cpu.cfs_period_us", dir);
    int ok = slurp(p, buf, sizeof buf) && slurp(p2, buf2, sizeof buf2);
    if (ok)
        *period = atoll(buf2) * 1e-6;
    return ok ? mi_cgroup_cpu_quota_parse(NULL, atoll(buf), atoll(buf2)) : 0;
}

/* The smaller positive of best and every level from base+path up to base: a
 * parent's limit binds its children too, and in a container the path seen in
 * /proc/self/cgroup may not exist under its own mount, whose root is then
 * the container's cgroup. */
typedef double (*level_fn)(const char *dir, int v2, double *aux);

/* (*aux: the level's aux figure where best was taken) */
static double walk(const char *base, const char *path, int v2, level_fn level, double best, double *aux)
{
    char dir[4400];
    size_t len = strcmp(path, "/") == 0 ? 0 : strlen(path);
    for (;;) {
        snprintf(dir, sizeof dir, "%s%.*s", base, (int)len, path);
        double a = 0, v = level(dir, v2, &a);
        if (v > 0 && (best == 0 || v < best)) {
            best = v;
            *aux = a;
        }
        if (len == 0)
            return best;
        while (len > 0 && path[len - 1] != '/')
            len--;
        if (len > 0)
            len--;
    }
}

/* Tightest value over the v2 hierarchy (at the root or, on a hybrid host,
 * under unified/) and the v1 hierarchy of controller ctl. */
static double cgroup_min(const char *root, const char *text, const char *ctl, level_fn level, double *aux)
{
    double best = 0;
    char base[4400];
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        const char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        const char *eol = strchr(l, '\n');
        if (!c2 || (eol && c2 > eol))
            continue;
        size_t plen = eol ? (size_t)(eol - c2 - 1) : strlen(c2 + 1);
        char path[4096], ctls[256];
        if (plen >= sizeof path || (size_t)(c2 - c1 - 1) >= sizeof ctls)
            continue;
        memcpy(path, c2 + 1, plen);
        path[plen] = '\0';
        memcpy(ctls, c1 + 1, (size_t)(c2 - c1 - 1));
        ctls[c2 - c1 - 1] = '\0';
        if (ctls[0] == '\0' && strncmp(l, "0:", 2) == 0) { /* v2: "0::/path" */
            best = walk(root, path, 1, level, best, aux);
            snprintf(base, sizeof base, "%s/unified", root);
            best = walk(base, path, 1, level, best, aux);
            continue;
        }
        char list[260], want[64]; /* v1: "4:cpu,cpuacct:/path", mounted at root/cpu,cpuacct */
        snprintf(list, sizeof list, ",%s,", ctls);
        snprintf(want, sizeof want, ",%s,", ctl);
        if (strstr(list, want)) {
            snprintf(base, sizeof base, "%s/%s", root, ctls);
            best = walk(base, path, 0, level, best, aux);
        }
    }
    return best;
}

long long mi_cgroup_mem_limit(const char *cgroup_root, const char *proc_self_cgroup)
{
    double aux = 0;
    return (long long)cgroup_min(cgroup_root, proc_self_cgroup, "memory", mem_level, &aux);
}

double mi_cgroup_cpu_quota(const char *cgroup_root, const char *proc_self_cgroup)
{
    double period = 0;
    return cgroup_min(cgroup_root, proc_self_cgroup, "cpu", cpu_level, &period);
}

double mi_cgroup_cpu_period(const char *cgroup_root, const char *proc_self_cgroup)
{
    double period = 0;
    return cgroup_min(cgroup_root, proc_self_cgroup, "cpu", cpu_level, &period) > 0 ? period : 0;
}

double mi_cgroup_self_cpu(double *period_s)
{
    char buf[16384];
    const char *cg = slurp("/proc/self/cgroup", buf, sizeof buf);
    *period_s = cg ? mi_cgroup_cpu_period("/sys/fs/cgroup", cg) : 0;
    return cg ? mi_cgroup_cpu_quota("/sys/fs/cgroup", cg) : 0;
}

static int topo_load(hwloc_topology_t *t, unsigned long flags, char *err)
{
    if (hwloc_topology_init(t))
        return mi_set_error(err, "hwinfo: hwloc_topology_init failed (%s)", strerror(errno));
    if (hwloc_topology_set_flags(*t, flags) || hwloc_topology_load(*t)) {
        int e = errno;
        hwloc_topology_destroy(*t);
        return mi_set_error(err, "hwinfo: hwloc cannot read this machine's topology (%s)", strerror(e));
    }
    return 0;
}

static void cpu_model(hwloc_topology_t t, char *out, size_t n)
{
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    const char *m = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
    char buf[16384];
    if (m && !*m)
        m = NULL;
    const char *line = !m && slurp("/proc/cpuinfo", buf, sizeof buf) ? strstr(buf, "model name") : NULL;
    snprintf(out, n, "%s", m ? m : "unknown");
    if (line && (line = strchr(line, ':'))) {
        line += strspn(line + 1, " \t") + 1;
        snprintf(out, n, "%.*s", (int)strcspn(line, "\n"), line);
    }
}

int mi_hwinfo_probe(mi_hwinfo *h, char *err)
{
    memset(h, 0, sizeof *h);
    if (gethostname(h->hostname, sizeof h->hostname - 1))
        snprintf(h->hostname, sizeof h->hostname, "unknown");
    /* the whole machine, disallowed parts included, so pus/cores say what
     * the host has and allowed_* what this process gets of it */
    hwloc_topology_t t;
    if (topo_load(&t, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED, err))
        return -1;
    cpu_model(t, h->cpu_model, sizeof h->cpu_model);
    h->packages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    h->cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    h->pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    h->numa_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(t);
    hwloc_cpuset_t bind = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(t, bind, HWLOC_CPUBIND_PROCESS) && hwloc_get_cpubind(t, bind, HWLOC_CPUBIND_THREAD))
        hwloc_bitmap_copy(bind, allowed);
    hwloc_bitmap_and(bind, bind, allowed);
    h->allowed_pus = hwloc_bitmap_weight(bind);
    h->bound = !hwloc_bitmap_isequal(bind, allowed);
    hwloc_bitmap_list_snprintf(h->cpuset, sizeof h->cpuset, bind);
    for (int i = 0; i < h->cores; i++)
        h->allowed_cores += hwloc_bitmap_intersects(hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, i)->cpuset, bind);
    /* caches are ancestors of the core (and so of its PUs) in hwloc 2 */
    int first = hwloc_bitmap_first(bind);
    hwloc_obj_t pu = first >= 0 ? hwloc_get_pu_obj_by_os_index(t, (unsigned)first) : NULL;
    for (hwloc_obj_t o = pu; o; o = o->parent) {
        long long *dst = o->type == HWLOC_OBJ_L1CACHE ? &h->l1d_bytes : o->type == HWLOC_OBJ_L2CACHE ? &h->l2_bytes
                       : o->type == HWLOC_OBJ_L3CACHE ? &h->l3_bytes : NULL;
        if (dst && *dst == 0)
            *dst = (long long)o->attr->cache.size;
    }
    hwloc_bitmap_free(bind);
    h->hwloc_mem_bytes = (long long)hwloc_get_root_obj(t)->total_memory;
    hwloc_topology_destroy(t);

    char buf[16384];
    const char *mi = slurp("/proc/meminfo", buf, sizeof buf);
    long long total = mi ? mi_meminfo_parse(mi, "MemTotal") : -1, avail = mi ? mi_meminfo_parse(mi, "MemAvailable") : -1;
    h->kernel_mem_bytes = total > 0 ? total : 0;
    h->kernel_avail_bytes = avail > 0 ? avail : 0;
    const char *cg = slurp("/proc/self/cgroup", buf, sizeof buf);
    if (cg) {
        h->cgroup_mem_limit_bytes = mi_cgroup_mem_limit("/sys/fs/cgroup", cg);
        h->cpu_quota = mi_cgroup_cpu_quota("/sys/fs/cgroup", cg);
        h->cpu_period_s = mi_cgroup_cpu_period("/sys/fs/cgroup", cg);
    }
    h->mem_bytes = h->kernel_mem_bytes ? h->kernel_mem_bytes : h->hwloc_mem_bytes;
    if (h->cgroup_mem_limit_bytes > 0 && (h->mem_bytes == 0 || h->cgroup_mem_limit_bytes < h->mem_bytes))
        h->mem_bytes = h->cgroup_mem_limit_bytes;
    if (h->kernel_mem_bytes > 0 && h->hwloc_mem_bytes > 0)
        h->mem_disagree = llabs(h->hwloc_mem_bytes - h->kernel_mem_bytes) * 20 > h->kernel_mem_bytes;
    return 0;
}

int mi_hwinfo_bind(int local_rank, int local_size, char *err)
{
    if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
        return mi_set_error(err, "hwinfo: cannot bind local rank %d of %d ranks on this host", local_rank,
                            local_size);
    hwloc_topology_t t; /* default flags: only the cores the cgroup allows */
    if (topo_load(&t, 0, err))
        return -1;
    hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int n = hwloc_get_nbobjs_by_type(t, type), lo, hi;
    if (n < 1) {
        hwloc_topology_destroy(t);
        return mi_set_error(err, "hwinfo: hwloc finds no core this process may use");
    }
    if (local_size <= n) {
        lo = (int)((long long)local_rank * n / local_size);
        hi = (int)((long long)(local_rank + 1) * n / local_size);
    } else {
        lo = local_rank % n;
        hi = lo + 1;
    }
    hwloc_cpuset_t set = hwloc_bitmap_alloc();
    for (int i = lo; i < hi; i++)
        hwloc_bitmap_or(set, set, hwloc_get_obj_by_type(t, type, i)->cpuset);
    hwloc_bitmap_and(set, set, hwloc_topology_get_allowed_cpuset(t));
    int rc = 0;
    if (hwloc_set_cpubind(t, set, HWLOC_CPUBIND_PROCESS)) {
        char list[256];
        int e = errno;
        hwloc_bitmap_list_snprintf(list, sizeof list, set);
        rc = mi_set_error(err, "hwinfo: cannot bind local rank %d of %d to PUs %s (%s)", local_rank, local_size,
                          list, strerror(e));
    }
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
    return rc;
}

/* One table drives the writer and the reader, so they cannot disagree. */
enum { F_STR, F_INT, F_LL, F_DBL };
static const struct {
    const char *key;
    int kind;
    size_t off, size;
} fields[] = {
#define F(k, kind) {#k, kind, offsetof(mi_hwinfo, k), sizeof(((mi_hwinfo *)0)->k)}
    F(hostname, F_STR), F(cpu_model, F_STR), F(packages, F_INT), F(cores, F_INT), F(pus, F_INT),
    F(allowed_pus, F_INT), F(allowed_cores, F_INT), F(l1d_bytes, F_LL), F(l2_bytes, F_LL), F(l3_bytes, F_LL),
    F(numa_nodes, F_INT), F(hwloc_mem_bytes, F_LL), F(kernel_mem_bytes, F_LL), F(kernel_avail_bytes, F_LL),
    F(cgroup_mem_limit_bytes, F_LL), F(mem_bytes, F_LL), F(mem_disagree, F_INT), F(cpu_quota, F_DBL), F(cpu_period_s, F_DBL),
    F(bound, F_INT), F(cpuset, F_STR),
#undef F
};
#define NFIELDS (sizeof fields / sizeof fields[0])

void mi_hwinfo_json(const mi_hwinfo *h, FILE *f)
{
    const char *base = (const char *)h;
    fputc('{', f);
    for (size_t i = 0; i < NFIELDS; i++) {
        const void *v = base + fields[i].off;
        fprintf(f, "%s\"%s\": ", i ? ", " : "", fields[i].key);
        if (fields[i].kind == F_STR) {
            fputc('"', f);
            for (const unsigned char *s = v; *s; s++) {
                if (*s == '"' || *s == '\\')
                    fprintf(f, "\\%c", *s);
                else if (*s < 0x20 || *s == 0x7f)
                    fprintf(f, "\\u%04x", *s);
                else
                    fputc(*s, f);
            }
            fputc('"', f);
        } else if (fields[i].kind == F_DBL)
            fprintf(f, "%.17g", *(const double *)v); /* exact when read back */
        else
            fprintf(f, "%lld", fields[i].kind == F_INT ? *(const int *)v : *(const long long *)v);
    }
    fputc('}', f);
}

int mi_hwinfo_from_json(const void *cjson_object, mi_hwinfo *h, char *err)
{
    const cJSON *o = cjson_object;
    memset(h, 0, sizeof *h);
    if (!cJSON_IsObject(o))
        return mi_set_error(err, "hwinfo: not a JSON object");
    char *base = (char *)h;
    for (size_t i = 0; i < NFIELDS; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, fields[i].key);
        void *v = base + fields[i].off;
        if (fields[i].kind == F_STR) {
            if (!cJSON_IsString(it) || strlen(it->valuestring) >= fields[i].size)
                return mi_set_error(err, "hwinfo: '%s' is missing, not a string or longer than %zu bytes",
                                    fields[i].key, fields[i].size - 1);
            memcpy(v, it->valuestring, strlen(it->valuestring) + 1);
            continue;
        }
        if (!cJSON_IsNumber(it))
            return mi_set_error(err, "hwinfo: '%s' is missing or not a number", fields[i].key);
        double d = it->valuedouble;
        if (fields[i].kind == F_DBL) {
            *(double *)v = d;
            continue;
        }
        if (!(d >= 0 && d < 9.2e18) || (fields[i].kind == F_INT && d > 2147483647.0) || d != (double)(long long)d)
            return mi_set_error(err, "hwinfo: '%s' is not a whole number >= 0", fields[i].key);
        if (fields[i].kind == F_INT)
            *(int *)v = (int)d;
        else
            *(long long *)v = (long long)d;
    }
    return 0;
}
