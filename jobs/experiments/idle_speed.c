/* Does a core compute slower after it idles? An fp32 matrix-vector product
 * over 60.8 MB (stories15M's weight bytes: 52736 x 288), timed on the
 * thread's CPU clock, back to back or after a sleep before each pass;
 * prints the median and mean of the passes (the first dropped). --spin S:
 * instead spin for S seconds and print the share of a core received, to
 * check a cgroup CPU quota. results.md, "The simulator against the testbed".
 *   cc -O3 -march=native -o /tmp/idle_speed jobs/experiments/idle_speed.c
 *   taskset -c 1 /tmp/idle_speed 0 15      back to back
 *   taskset -c 1 /tmp/idle_speed 10 15     10 ms asleep before each pass
 * Under a quota of 2 ms per 5 ms (cgroup v1, as root):
 *   G=/sys/fs/cgroup/cpu/qtest; mkdir $G; echo 5000 > $G/cpu.cfs_period_us
 *   echo 2000 > $G/cpu.cfs_quota_us
 *   (echo $BASHPID > $G/cgroup.procs; exec taskset -c 1 /tmp/idle_speed 0 15)
 *   (echo $BASHPID > $G/cgroup.procs; exec taskset -c 1 /tmp/idle_speed --spin 3); rmdir $G */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--spin")) {
        double s = atof(argv[2]), w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
        volatile double x = 0;
        while (now(CLOCK_MONOTONIC) - w0 < s)
            for (int i = 0; i < 10000; i++)
                x += i;
        double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_THREAD_CPUTIME_ID) - c0;
        printf("spin: wall %.3f s, CPU %.3f s, share of a core %.3f\n", w, c, c / w);
        return 0;
    }
    int n = argc == 3 ? atoi(argv[2]) : 0;
    double gap = argc == 3 ? atof(argv[1]) * 1e-3 : -1;
    if (gap < 0 || gap > 10 || n < 1 || n > 1000) {
        fprintf(stderr, "usage: idle_speed GAP_MS PASSES (0..10000 ms, 1..1000 passes) | idle_speed --spin SECONDS\n");
        return 2;
    }
    const int rows = 52736, cols = 288;
    float *w = malloc((size_t)rows * cols * sizeof *w), *x = malloc(cols * sizeof *x), *y = malloc(rows * sizeof *y);
    double *v = malloc((size_t)n * sizeof *v), tot = 0;
    if (!w || !x || !y || !v)
        return 1;
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        w[i] = (float)(i % 7) * 0.01f;
    for (int i = 0; i < cols; i++)
        x[i] = 0.01f * (float)i;
    for (int p = 0; p <= n; p++) {
        if (gap > 0) {
            struct timespec ts = {(time_t)gap, (long)((gap - (double)(time_t)gap) * 1e9)};
            nanosleep(&ts, NULL);
        }
        double c0 = now(CLOCK_THREAD_CPUTIME_ID);
        for (int r = 0; r < rows; r++) {
            float s = 0;
            const float *wr = w + (size_t)r * cols;
            for (int k = 0; k < cols; k++)
                s += wr[k] * x[k];
            y[r] = s;
        }
        double d = now(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (p > 0)
            v[p - 1] = d, tot += d;
    }
    qsort(v, (size_t)n, sizeof *v, cmp);
    printf("sleep %.0f ms before each pass: median %.2f ms a pass (%.1f GB/s), mean %.2f ms (checksum %.3f)\n",
           gap * 1e3, v[n / 2] * 1e3, (double)rows * cols * sizeof *w / v[n / 2] / 1e9, tot / n * 1e3, y[7]);
    free(w), free(x), free(y), free(v);
    return 0;
}
