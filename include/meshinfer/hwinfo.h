/* What device this process runs on, as the cost model's calibration needs it
 * (Voltron §4.2.1: the device is a feature of its regression):
 * each MPI rank describes its own host (hostname, CPU, cores it may use,
 * caches, memory, the cgroup limits of an emulated device) and can pin
 * itself to its share of the host's cores.
 *
 * Counts come from hwloc; memory is cross-checked with the kernel because
 * hwloc's total (the sum of the NUMA nodes' memory) is wrong on some virtual
 * machines, whose memory added after boot belongs to no node: the kernel's
 * MemTotal is what we trust. Limits come from the process's own cgroup (v2,
 * or v1, or both on a hybrid host), since an emulated device on the testbed
 * is a cgroup with a CPU quota and a memory limit, which neither hwloc nor
 * /proc/meminfo shows.
 *
 * No MPI: ranks exchange the JSON object (mi_hwinfo_json) themselves. Linux
 * only for the kernel and cgroup figures (elsewhere they stay 0). */
#ifndef MESHINFER_HWINFO_H
#define MESHINFER_HWINFO_H

#include <stdio.h>

typedef struct {
    char hostname[256];
    char cpu_model[128];          /* hwloc's CPUModel of the first package, /proc/cpuinfo's, or "unknown" */
    int packages, cores, pus;     /* the whole machine, allowed to us or not */
    int allowed_pus;              /* PUs this process may run on now (its binding within the cgroup's cpuset) */
    int allowed_cores;            /* cores holding at least one of those PUs */
    long long l1d_bytes;          /* data caches of the first allowed core, bytes, 0 when absent */
    long long l2_bytes, l3_bytes;
    int numa_nodes;
    long long hwloc_mem_bytes;    /* hwloc's total (sum of the NUMA nodes), bytes, 0 if unknown */
    long long kernel_mem_bytes;   /* MemTotal of /proc/meminfo, bytes, 0 if unknown */
    long long kernel_avail_bytes; /* MemAvailable of /proc/meminfo at the probe, bytes, 0 if unknown */
    long long cgroup_mem_limit_bytes; /* tightest memory limit of our cgroup and its parents, bytes; 0 = none */
    long long mem_bytes;          /* what we may use: min(MemTotal, cgroup limit); hwloc's total if no MemTotal */
    int mem_disagree;             /* 1 when hwloc's total and MemTotal differ by more than 5% of MemTotal */
    double cpu_quota;             /* tightest cgroup CPU quota in cores (0.5 = half of one core); 0 = none */
    double cpu_period_s;          /* that quota's CFS period, seconds (0 = no quota) */
    int bound;                    /* 1 when our binding is narrower than the cgroup's cpuset (pinned) */
    char cpuset[256];             /* our binding as a PU list, "0-1" or "0,2" (truncated if longer) */
} mi_hwinfo;

/* Fill h for this process and host. Returns 0, or -1 with one line in err
 * (MI_ERRLEN bytes) when hwloc cannot build the topology; a missing
 * /proc/meminfo or cgroup file is not an error, its fields stay 0. */
int mi_hwinfo_probe(mi_hwinfo *h, char *err);

/* Bind the calling process (all its threads, and so the OpenMP and OpenBLAS
 * threads it creates later, which inherit it) to its share of the cores the
 * cgroup allows: the cores are split evenly and in order among the
 * local_size ranks of this host, rank local_rank taking slice local_rank (a
 * whole number of cores, at least one); with more ranks than cores, rank r
 * gets core r % cores. This is why the compute threads of two ranks on one
 * host do not fight for one core. A binding inherited from the launcher
 * (mpirun, taskset) is replaced, since every rank must split the same set.
 * Returns 0, or -1 with one line in err (bad ranks, hwloc or the kernel
 * refused). */
int mi_hwinfo_bind(int local_rank, int local_size, char *err);

/* One JSON object (no trailing newline) with every field above, keys named
 * as the fields (cpu_quota a number, strings escaped). */
void mi_hwinfo_json(const mi_hwinfo *h, FILE *f);

/* Parse such an object back (cjson_object is a const cJSON *, kept opaque so
 * this header needs no cJSON). Every key must be present with its type.
 * Returns 0, or -1 with one line in err naming the key. */
int mi_hwinfo_from_json(const void *cjson_object, mi_hwinfo *h, char *err);

/* The parsers, exposed for tests on fake files. */

/* The value of `key` ("MemTotal") in /proc/meminfo's text, in bytes (the
 * file says kB); -1 when absent or malformed. */
long long mi_meminfo_parse(const char *text, const char *key);

/* Tightest memory limit, bytes (0 = none), of the cgroup that
 * proc_self_cgroup (the text of /proc/self/cgroup) names and its parents,
 * under cgroup_root ("/sys/fs/cgroup"): v2's memory.max (at the root or under
 * unified/, "max" is none) and v1's memory/.../memory.limit_in_bytes (values
 * of 2^60 and more, the "unlimited" of v1, are none). */
long long mi_cgroup_mem_limit(const char *cgroup_root, const char *proc_self_cgroup);

/* Likewise the tightest CPU quota in cores (0 = none): v2's cpu.max
 * ("quota period" or "max period") and v1's cpu/.../cpu.cfs_quota_us over
 * cpu.cfs_period_us (-1 is none). */
double mi_cgroup_cpu_quota(const char *cgroup_root, const char *proc_self_cgroup);

/* The period in seconds of the quota mi_cgroup_cpu_quota finds (v2's
 * cpu.max second field, default 0.1 s; v1's cpu.cfs_period_us); 0 = no
 * quota. */
double mi_cgroup_cpu_period(const char *cgroup_root, const char *proc_self_cgroup);

/* This process's tightest CPU quota in cores (0 = none) and its period in
 * *period_s, from /proc/self/cgroup under /sys/fs/cgroup (no hwloc). */
double mi_cgroup_self_cpu(double *period_s);

/* One cgroup's quota in cores from v2's cpu.max text (or NULL) or v1's two
 * values (quota -1 = none); 0 = none. */
double mi_cgroup_cpu_quota_parse(const char *v2_cpu_max, long long v1_quota_us, long long v1_period_us);

#endif
