/* CUnit tests of the device description (src/util/hwinfo.c), no MPI:
 *   - the probe on this machine against what the test reads itself:
 *     sched_getaffinity for the allowed PUs, /proc/meminfo for MemTotal,
 *     sysfs for the caches of the first allowed PU and the NUMA nodes'
 *     memory (hwloc's total);
 *   - the /proc/meminfo parser and the cgroup readers on fake files: v1
 *     memory.limit_in_bytes and cpu.cfs_quota_us, v2 memory.max ("max" is no
 *     limit) and cpu.max, a hybrid host's unified/, a parent's limit binding
 *     its child, files that do not exist;
 *   - binding: each local rank's slice read back with sched_getaffinity
 *     (disjoint slices covering the allowed cores, round robin past the
 *     cores, a thread created afterwards inheriting it), bad ranks refused;
 *   - the JSON object parsed back with cJSON: every key, escaped strings,
 *     the reader's round trip and its refusals.
 *
 * Exit status: 0 when every test passed, 1 otherwise. */
#define _GNU_SOURCE
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/hwinfo.h"
#include "test_util.h"

static char g_dir[512];

static void mkdirs(const char *rel)
{
    char p[1024];
    int n = snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    for (int i = (int)strlen(g_dir) + 1; i <= n; i++)
        if (p[i] == '/' || p[i] == '\0') {
            char c = p[i];
            p[i] = '\0';
            mkdir(p, 0755);
            p[i] = c;
        }
}

static void put(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    CU_ASSERT_EQUAL_FATAL(tu_write_text(p, text), 0);
}

static long long read_ll(const char *path)
{
    FILE *f = fopen(path, "r");
    long long v = -1;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* The PU list of a cpu_set_t, formatted here as hwloc does ("0-1", "0,2"). */
static void cpuset_list(const cpu_set_t *s, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; i < CPU_SETSIZE; i++) {
        if (!CPU_ISSET(i, s))
            continue;
        int j = i;
        while (j + 1 < CPU_SETSIZE && CPU_ISSET(j + 1, s))
            j++;
        size_t l = strlen(out);
        snprintf(out + l, n - l, j > i ? "%s%d-%d" : "%s%d", l ? "," : "", i, j);
        i = j;
    }
}

static cpu_set_t affinity(void)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CU_ASSERT_EQUAL(sched_getaffinity(0, sizeof s, &s), 0);
    return s;
}

static void test_probe(void)
{
    char err[MI_ERRLEN], host[256] = "";
    mi_hwinfo h;
    CU_ASSERT_EQUAL_FATAL(mi_hwinfo_probe(&h, err), 0);
    gethostname(host, sizeof host - 1);
    CU_ASSERT_STRING_EQUAL(h.hostname, host);
    CU_ASSERT(h.cpu_model[0] != '\0');
    CU_ASSERT(h.packages >= 1 && h.numa_nodes >= 1);
    CU_ASSERT(h.pus >= h.cores && h.cores >= 1);
    cpu_set_t s = affinity();
    CU_ASSERT_EQUAL(h.allowed_pus, CPU_COUNT(&s));
    CU_ASSERT(h.allowed_cores >= 1 && h.allowed_cores <= h.cores && h.allowed_cores <= h.allowed_pus);
    char list[256];
    cpuset_list(&s, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(h.cpuset, list);

    /* caches of the first allowed PU, as the kernel lists them */
    int first = 0;
    while (!CPU_ISSET(first, &s))
        first++;
    for (int i = 0; i < 8; i++) {
        char p[256], type[32] = "";
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/cache/index%d/type", first, i);
        FILE *f = fopen(p, "r");
        if (!f)
            break;
        if (fscanf(f, "%31s", type) != 1)
            type[0] = '\0';
        fclose(f);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", first, i);
        long long level = read_ll(p);
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/cache/index%d/size", first, i);
        long long kb = read_ll(p); /* "32K" */
        if (level == 1 && strcmp(type, "Data") == 0)
            CU_ASSERT_EQUAL(h.l1d_bytes, kb * 1024);
        if (level == 2)
            CU_ASSERT_EQUAL(h.l2_bytes, kb * 1024);
        if (level == 3)
            CU_ASSERT_EQUAL(h.l3_bytes, kb * 1024);
    }

    /* MemTotal as the test reads it */
    FILE *f = fopen("/proc/meminfo", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[256];
    long long total_kb = -1, avail_kb = -1;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "MemTotal: %lld kB", &total_kb);
        sscanf(line, "MemAvailable: %lld kB", &avail_kb);
    }
    fclose(f);
    CU_ASSERT_EQUAL(h.kernel_mem_bytes, total_kb * 1024);
    CU_ASSERT(h.kernel_avail_bytes > 0 && h.kernel_avail_bytes <= h.kernel_mem_bytes);
    CU_ASSERT(h.mem_bytes > 0 && h.mem_bytes <= h.kernel_mem_bytes);
    CU_ASSERT(h.cgroup_mem_limit_bytes == 0 || h.mem_bytes == (h.cgroup_mem_limit_bytes < h.kernel_mem_bytes
                                                                  ? h.cgroup_mem_limit_bytes
                                                                  : h.kernel_mem_bytes));
    CU_ASSERT(h.cgroup_mem_limit_bytes != 0 || h.mem_bytes == h.kernel_mem_bytes);
    CU_ASSERT(h.cpu_quota >= 0);
    /* hwloc's total is the NUMA nodes' memory: sum the nodes' MemTotal */
    long long nodes = 0;
    for (int i = 0; i < 1024; i++) {
        char p[128];
        snprintf(p, sizeof p, "/sys/devices/system/node/node%d/meminfo", i);
        if (!(f = fopen(p, "r")))
            continue;
        long long kb;
        int node;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "Node %d MemTotal: %lld kB", &node, &kb) == 2)
                nodes += kb * 1024;
        fclose(f);
    }
    if (nodes > 0)
        CU_ASSERT_EQUAL(h.hwloc_mem_bytes, nodes);
    long long diff = llabs(h.hwloc_mem_bytes - h.kernel_mem_bytes);
    CU_ASSERT_EQUAL(h.mem_disagree, diff * 20 > h.kernel_mem_bytes);
}

static void test_meminfo_parse(void)
{
    put("meminfo", "MemTotalX:      1 kB\nMemTotal:       24684084 kB\nMemFree:        100 kB\n"
                   "HugePages_Total:       0\nMemAvailable:   24171700 kB");
    char p[1024], err[MI_ERRLEN];
    size_t len;
    tu_path(p, sizeof p, g_dir, "meminfo");
    char *text = mi_read_text_file(p, "meminfo", 1 << 20, &len, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_EQUAL(mi_meminfo_parse(text, "MemTotal"), 24684084LL * 1024);
    CU_ASSERT_EQUAL(mi_meminfo_parse(text, "MemAvailable"), 24171700LL * 1024); /* last line, no newline */
    CU_ASSERT_EQUAL(mi_meminfo_parse(text, "MemFree"), 100 * 1024);
    CU_ASSERT_EQUAL(mi_meminfo_parse(text, "HugePages_Total"), -1); /* a count, not a size */
    CU_ASSERT_EQUAL(mi_meminfo_parse(text, "SwapTotal"), -1);
    CU_ASSERT_EQUAL(mi_meminfo_parse("MemTotal: lots kB\n", "MemTotal"), -1);
    CU_ASSERT_EQUAL(mi_meminfo_parse("", "MemTotal"), -1);
    free(text);
}

static void test_cgroup_files(void)
{
    char root[600], p[700];
    /* v1: the child's limit is tighter than the parent's; the root says unlimited */
    tu_path(root, sizeof root, g_dir, "v1");
    mkdirs("v1/memory/a/b");
    mkdirs("v1/cpu,cpuacct/a/b");
    put("v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("v1/memory/a/memory.limit_in_bytes", "1073741824\n");
    put("v1/memory/a/b/memory.limit_in_bytes", "536870912\n");
    put("v1/cpu,cpuacct/a/b/cpu.cfs_quota_us", "-1\n");
    put("v1/cpu,cpuacct/a/b/cpu.cfs_period_us", "100000\n");
    put("v1/cpu,cpuacct/a/cpu.cfs_quota_us", "50000\n");
    put("v1/cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
    const char *v1 = "11:pids:/a/b\n4:memory:/a/b\n2:cpu,cpuacct:/a/b\n0::/\n";
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, v1), 536870912LL);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota(root, v1), 0.5, 1e-12); /* the parent's quota binds */
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_period(root, v1), 0.1, 1e-12); /* and its period */
    put("v1/cpu,cpuacct/a/b/cpu.cfs_quota_us", "2000\n"); /* the testbed's: 40% of 5 ms */
    put("v1/cpu,cpuacct/a/b/cpu.cfs_period_us", "5000\n");
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota(root, v1), 0.4, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_period(root, v1), 5e-3, 1e-12);
    put("v1/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n");
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, v1), 1073741824LL);
    put("v1/memory/a/memory.limit_in_bytes", "9223372036854771712\n");
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, v1), 0); /* unlimited everywhere */

    /* v2: "max" is no limit; cpu.max "quota period" */
    tu_path(root, sizeof root, g_dir, "v2");
    mkdirs("v2/emu/dev1");
    put("v2/emu/memory.max", "max\n");
    put("v2/emu/dev1/memory.max", "max\n");
    put("v2/emu/dev1/cpu.max", "max 100000\n");
    const char *v2 = "0::/emu/dev1\n";
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, v2), 0);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota(root, v2), 0, 1e-12);
    put("v2/emu/dev1/memory.max", "268435456\n");
    put("v2/emu/dev1/cpu.max", "150000 100000\n");
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, v2), 268435456LL);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota(root, v2), 1.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_period(root, v2), 0.1, 1e-12);
    put("v2/emu/dev1/cpu.max", "20000 50000\n");
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_period(root, v2), 0.05, 1e-12);
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, "0::/\n"), 0); /* the root cgroup has no memory.max */

    /* a hybrid host: v2 under unified/, v1 memory unlimited */
    tu_path(root, sizeof root, g_dir, "hy");
    mkdirs("hy/unified/x");
    mkdirs("hy/memory/x");
    put("hy/unified/x/memory.max", "1048576\n");
    put("hy/memory/x/memory.limit_in_bytes", "9223372036854771712\n");
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(root, "4:memory:/x\n0::/x\n"), 1048576LL);

    /* nothing there: no limit, no quota */
    snprintf(p, sizeof p, "%s/none", g_dir);
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(p, v1), 0);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota(p, v2), 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_period(p, v2), 0, 1e-12);
    CU_ASSERT_EQUAL(mi_cgroup_mem_limit(p, ""), 0);

    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota_parse("50000 100000\n", -1, 0), 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota_parse("25000", -1, 0), 0.25, 1e-12); /* default period */
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota_parse("max 100000", -1, 0), 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota_parse(NULL, 200000, 100000), 2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(mi_cgroup_cpu_quota_parse(NULL, -1, 100000), 0, 1e-12);
}

static void *thread_affinity(void *arg)
{
    CPU_ZERO((cpu_set_t *)arg);
    sched_getaffinity(0, sizeof(cpu_set_t), (cpu_set_t *)arg);
    return NULL;
}

/* Bind local_rank r of n, check the slice against the probe, return it. */
static cpu_set_t bind_slice(int r, int n)
{
    char err[MI_ERRLEN], list[256];
    mi_hwinfo h;
    CU_ASSERT_EQUAL(mi_hwinfo_bind(r, n, err), 0);
    cpu_set_t s = affinity();
    CU_ASSERT(CPU_COUNT(&s) >= 1);
    CU_ASSERT_EQUAL_FATAL(mi_hwinfo_probe(&h, err), 0);
    cpuset_list(&s, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(h.cpuset, list);
    CU_ASSERT_EQUAL(h.allowed_pus, CPU_COUNT(&s));
    return s;
}

static void test_bind(void)
{
    char err[MI_ERRLEN];
    mi_hwinfo h;
    cpu_set_t all = bind_slice(0, 1); /* one rank: every allowed core, not bound */
    CU_ASSERT_EQUAL_FATAL(mi_hwinfo_probe(&h, err), 0);
    CU_ASSERT_EQUAL(h.bound, 0);
    int cores = h.allowed_cores;
    for (int n = 2; n <= cores + 1; n++) {
        cpu_set_t seen, first;
        CPU_ZERO(&seen);
        for (int r = 0; r < n; r++) {
            cpu_set_t s = bind_slice(r, n), both;
            CU_ASSERT_EQUAL_FATAL(mi_hwinfo_probe(&h, err), 0);
            CU_ASSERT_EQUAL(h.bound, cores > 1);
            if (r == 0)
                first = s;
            if (n <= cores) { /* whole cores, disjoint */
                CU_ASSERT(h.allowed_cores >= 1 && h.allowed_cores <= cores / n + 1);
                CPU_AND(&both, &seen, &s);
                CU_ASSERT_EQUAL(CPU_COUNT(&both), 0);
            } else if (r == cores) { /* past the cores: round robin */
                CU_ASSERT(CPU_EQUAL(&s, &first));
            }
            CPU_OR(&seen, &seen, &s);
        }
        CU_ASSERT(CPU_EQUAL(&seen, &all));
    }
    /* a thread created after the binding inherits it */
    cpu_set_t mine = bind_slice(0, cores), theirs;
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, thread_affinity, &theirs), 0);
    pthread_join(th, NULL);
    CU_ASSERT(CPU_EQUAL(&mine, &theirs));

    CU_ASSERT_EQUAL(mi_hwinfo_bind(2, 2, err), -1);
    CU_ASSERT(strstr(err, "local rank 2 of 2") != NULL);
    CU_ASSERT_EQUAL(mi_hwinfo_bind(0, 0, err), -1);
    CU_ASSERT_EQUAL(mi_hwinfo_bind(-1, 2, err), -1);
    cpu_set_t back = bind_slice(0, 1);
    CU_ASSERT(CPU_EQUAL(&back, &all));
}

static char *json_of(const mi_hwinfo *h)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mi_hwinfo_json(h, f);
    fclose(f);
    return buf;
}

static void test_json(void)
{
    char err[MI_ERRLEN];
    mi_hwinfo h, back;
    CU_ASSERT_EQUAL_FATAL(mi_hwinfo_probe(&h, err), 0);
    snprintf(h.hostname, sizeof h.hostname, "a\"b\\c\nd\x01\xc3\xa9"); /* quotes, controls, UTF-8 */
    h.cpu_quota = 1.0 / 3;
    char *text = json_of(&h);
    CU_ASSERT(text[strlen(text) - 1] == '}');
    cJSON *o = cJSON_Parse(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    const char *keys[] = {"hostname", "cpu_model", "packages", "cores", "pus", "allowed_pus", "allowed_cores",
                          "l1d_bytes", "l2_bytes", "l3_bytes", "numa_nodes", "hwloc_mem_bytes", "kernel_mem_bytes",
                          "kernel_avail_bytes", "cgroup_mem_limit_bytes", "mem_bytes", "mem_disagree",
                          "cpu_quota", "cpu_period_s", "bound", "cpuset"};
    CU_ASSERT_EQUAL(cJSON_GetArraySize(o), (int)(sizeof keys / sizeof keys[0]));
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(o, keys[i]));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "hostname")->valuestring, h.hostname);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "cpuset")->valuestring, h.cpuset);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(o, "pus")->valueint, h.pus);
    CU_ASSERT_EQUAL((long long)cJSON_GetObjectItem(o, "kernel_mem_bytes")->valuedouble, h.kernel_mem_bytes);
    CU_ASSERT_EQUAL((long long)cJSON_GetObjectItem(o, "mem_bytes")->valuedouble, h.mem_bytes);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(o, "mem_disagree")->valueint, h.mem_disagree);
    /* the reader gives back the same object */
    CU_ASSERT_EQUAL_FATAL(mi_hwinfo_from_json(o, &back, err), 0);
    CU_ASSERT(back.cpu_quota == h.cpu_quota);
    char *again = json_of(&back);
    CU_ASSERT_STRING_EQUAL(again, text);
    free(again);
    /* and refuses a missing key, a wrong type, a negative count */
    cJSON_ReplaceItemInObject(o, "cores", cJSON_CreateNumber(-2));
    CU_ASSERT_EQUAL(mi_hwinfo_from_json(o, &back, err), -1);
    CU_ASSERT(strstr(err, "'cores'") != NULL);
    cJSON_ReplaceItemInObject(o, "cores", cJSON_CreateString("2"));
    CU_ASSERT_EQUAL(mi_hwinfo_from_json(o, &back, err), -1);
    cJSON_DeleteItemFromObject(o, "cores");
    CU_ASSERT_EQUAL(mi_hwinfo_from_json(o, &back, err), -1);
    CU_ASSERT(strstr(err, "'cores' is missing") != NULL);
    cJSON_Delete(o);
    free(text);
}

int main(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_hwinfo"))
        return 1;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("hwinfo", NULL, NULL);
    CU_add_test(s, "probe agrees with sched_getaffinity, /proc/meminfo and sysfs", test_probe);
    CU_add_test(s, "meminfo parser on a fake file", test_meminfo_parse);
    CU_add_test(s, "cgroup v1, v2 and hybrid limits and quotas on fake files", test_cgroup_files);
    CU_add_test(s, "bind: disjoint slices read back, round robin, inherited by threads", test_bind);
    CU_add_test(s, "JSON parsed back with cJSON, escaped, round trip", test_json);
    CU_basic_set_mode(CU_BRM_NORMAL);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    tu_rm_tree(g_dir);
    return failed ? 1 : 0;
}
