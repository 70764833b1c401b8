/* Error handling, strict option parsing and small utilities (see common.h). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* sigaltstack, SA_ONSTACK */
#include "meshinfer/common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

/* Set by the runtime while MPI runs (mi_world_init): util knows no MPI. */
static void (*fatal_hook)(void);

void mi_set_fatal_hook(void (*hook)(void))
{
    fatal_hook = hook;
}

static int stdout_mid_line;

void mi_stdout_wrote(const char *bytes, size_t n)
{
    if (n)
        stdout_mid_line = bytes[n - 1] != '\n';
}

/* stdout ends mid-line on the file stderr writes to (a terminal, 2>&1). */
static int glued_to_stdout(void)
{
    struct stat a, b;
    return stdout_mid_line && fstat(1, &a) == 0 && fstat(2, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

void mi_fatal(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Before MPI_Init every rank of an mpirun job sees the same bad option:
     * let only the first say so, from the launcher's environment. */
    const char *launcher_rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!launcher_rank)
        launcher_rank = getenv("PMI_RANK");
    fflush(stdout);
    if (fatal_hook || !launcher_rank || atoi(launcher_rank) == 0)
        fprintf(stderr, "%smeshinfer: error: %s\n", glued_to_stdout() ? "\n" : "", msg);
    fflush(stderr);
    fflush(stdout);
    if (fatal_hook) {
        void (*hook)(void) = fatal_hook;
        fatal_hook = NULL; /* a failure inside the hook must not recurse */
        hook();
    }
    exit(1);
}

void mi_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("meshinfer: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int mi_set_error(char *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, MI_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Plain decimal only: no leading blanks or '+', no hex, so "5 ", " 5" and
 * "0x10" are all rejected alike. */
static int plain_number(const char *s, int allow_sign, int allow_point)
{
    const char *p = s;
    if (allow_sign && *p == '-')
        p++;
    if (!(*p >= '0' && *p <= '9') && !(allow_point && *p == '.'))
        return 0;
    for (; *p; p++)
        if (*p == 'x' || *p == 'X' || *p == ' ' || *p == '\t')
            return 0;
    return 1;
}

int mi_check_input_file(const char *path, const char *what, char *err)
{
    struct stat st;
    if (!path || !*path)
        return mi_set_error(err, "%s path is empty", what);
    if (stat(path, &st) != 0)
        return mi_set_error(err, "%s: cannot open %s (%s)", path, what,
                            errno == ENOENT ? "no such file" : strerror(errno));
    if (S_ISDIR(st.st_mode))
        return mi_set_error(err, "%s: %s is a directory, not a regular file", path, what);
    if (!S_ISREG(st.st_mode))
        return mi_set_error(err, "%s: %s is not a regular file (a FIFO, socket or device)", path, what);
    if (access(path, R_OK) != 0)
        return mi_set_error(err, "%s: cannot read %s (%s)", path, what, strerror(errno));
    return 0;
}

size_t mi_read_head(const char *path, void *buf, size_t n)
{
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    /* O_NONBLOCK: were it swapped for a FIFO since the stat, open returns at once */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t got = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        while (got < n) {
            ssize_t k = read(fd, (char *)buf + got, n - got);
            if (k <= 0) {
                if (k < 0 && errno == EINTR)
                    continue;
                break;
            }
            got += (size_t)k;
        }
    close(fd);
    return got;
}

static uint64_t hash_step(uint64_t h, uint64_t w)
{
    h ^= w * 0x9E3779B97F4A7C15ull;
    h = (h << 31 | h >> 33) * 0xBF58476D1CE4E5B9ull;
    return h;
}

/* Four lanes, each a chain of multiplies over every fourth word: the
 * multiplies of one block overlap (one lane ran at half the speed). */
typedef struct {
    uint64_t lane[4];
} hash_state;

static void hash_init(hash_state *s, uint64_t seed)
{
    for (int k = 0; k < 4; k++)
        s->lane[k] = seed + (uint64_t)k * 0x632BE59BD9B4E019ull;
}

/* the 32-byte blocks of p[0, n) with n a multiple of 32 */
static void hash_blocks(hash_state *s, const unsigned char *p, size_t n)
{
    uint64_t a = s->lane[0], b = s->lane[1], c = s->lane[2], d = s->lane[3];
    for (size_t i = 0; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, 32);
        a = hash_step(a, w[0]), b = hash_step(b, w[1]), c = hash_step(c, w[2]), d = hash_step(d, w[3]);
    }
    s->lane[0] = a, s->lane[1] = b, s->lane[2] = c, s->lane[3] = d;
}

/* the lanes joined, the last 0-31 bytes and the length, then every bit of h
 * into every other (splitmix64's finalizer) */
static uint64_t hash_final(const hash_state *s, const unsigned char *tail, size_t n_tail, uint64_t total)
{
    uint64_t h = s->lane[0];
    for (int k = 1; k < 4; k++)
        h = hash_step(h, s->lane[k]);
    for (size_t i = 0; i < n_tail; i += 8) {
        uint64_t w = 0;
        memcpy(&w, tail + i, n_tail - i < 8 ? n_tail - i : 8);
        h = hash_step(h, w);
    }
    h = hash_step(h, total);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

uint64_t mi_hash64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    size_t whole = n & ~(size_t)31;
    hash_state s;
    hash_init(&s, h);
    hash_blocks(&s, b, whole);
    return hash_final(&s, b + whole, n - whole, n);
}

int mi_file_fingerprint(const char *path, uint64_t *bytes, uint64_t *hash, char *err)
{
    if (mi_check_input_file(path, "model file", err))
        return -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mi_set_error(err, "%s: cannot open model file (%s)", path, strerror(errno));
    enum { CHUNK = 1 << 20 }; /* a multiple of 32: only the last read has a tail */
    unsigned char *buf = mi_malloc(CHUNK, "file hash buffer");
    hash_state s;
    hash_init(&s, MI_HASH_SEED);
    uint64_t total = 0;
    size_t r, whole = 0, tail = 0;
    while ((r = fread(buf, 1, CHUNK, f)) > 0) {
        total += r;
        whole = r & ~(size_t)31;
        hash_blocks(&s, buf, whole);
        tail = r - whole;
        if (r < CHUNK)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (!bad)
        *hash = hash_final(&s, buf + whole, tail, total), *bytes = total;
    free(buf);
    return bad ? mi_set_error(err, "%s: read error in the model file", path) : 0;
}

char *mi_read_text_file(const char *path, const char *what, size_t max_bytes, size_t *len, char *err)
{
    if (mi_check_input_file(path, what, err))
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        mi_set_error(err, "%s: cannot open %s (%s)", path, what, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = mi_malloc(cap, what);
    size_t r;
    int too_big = 0;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n > max_bytes) {
            too_big = 1;
            break;
        }
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                mi_fatal("%s: out of memory reading the %s", path, what);
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    buf[n] = '\0';
    const char *nul = memchr(buf, '\0', n);
    if (too_big)
        mi_set_error(err, "%s: %s is larger than %zu bytes", path, what, max_bytes);
    else if (bad)
        mi_set_error(err, "%s: read error in %s", path, what);
    else if (nul)
        mi_set_error(err, "%s: %s holds a NUL byte at byte %zu (not a text file)", path, what, (size_t)(nul - buf));
    if (too_big || bad || nul) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

long mi_parse_long(const char *opt, const char *s, long lo, long hi)
{
    if (!s || !*s)
        mi_fatal("option %s needs an integer value", opt);
    if (!plain_number(s, 1, 0))
        mi_fatal("option %s: '%s' is not an integer", opt, s);
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0')
        mi_fatal("option %s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi)
        mi_fatal("option %s: %ld is outside [%ld, %ld]", opt, v, lo, hi);
    return v;
}

double mi_parse_double(const char *opt, const char *s, double lo, double hi)
{
    if (!s || !*s)
        mi_fatal("option %s needs a numeric value", opt);
    if (!plain_number(s, 1, 1))
        mi_fatal("option %s: '%s' is not a number", opt, s);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v))
        mi_fatal("option %s: '%s' is not a number", opt, s);
    if (v < lo || v > hi)
        mi_fatal("option %s: %g is outside [%g, %g]", opt, v, lo, hi);
    return v;
}

uint64_t mi_parse_u64(const char *opt, const char *s)
{
    if (!s || !*s || !plain_number(s, 0, 0))
        mi_fatal("option %s needs a non-negative integer, not '%s'", opt, s ? s : "");
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0')
        mi_fatal("option %s: '%s' is not a non-negative integer", opt, s);
    return (uint64_t)v;
}

void *mi_malloc(size_t bytes, const char *what)
{
    void *p = NULL;
    /* 64-byte alignment keeps AVX-512 loads of weight rows aligned. */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        mi_fatal("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *mi_calloc(size_t n, size_t size, const char *what)
{
    if (size && n > SIZE_MAX / size)
        mi_fatal("allocation size overflow for %s", what);
    /* calloc, not malloc + memset: large zeroed blocks (the KV cache) then
     * stay untouched pages until used, so memory grows with the context */
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        mi_fatal("out of memory allocating %zu bytes for %s", n * size, what);
    return p;
}

double mi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mi_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double g_slowdown = -1, g_owed = 0, g_freq_stretch = 1;

void mi_slowdown_set_freq(double f)
{
    g_freq_stretch = f > 0 && f <= 1 ? 1.0 / f : 1.0;
}

double mi_slowdown(void)
{
    if (g_slowdown < 0) {
        const char *v = getenv("MESHINFER_SLOWDOWN");
        g_slowdown = 1;
        if (v && *v) {
            char *end;
            errno = 0;
            double s = strtod(v, &end);
            if (errno || *end || !(s >= 1) || s > 1000)
                mi_fatal("MESHINFER_SLOWDOWN='%s' is not a number in [1, 1000]", v);
            g_slowdown = s;
        }
    }
    return g_slowdown;
}

/* MESHINFER_SLOWDOWN_FILE: a factor that may change during the run (the
 * testbed slows a device mid-run), read at most every 50 ms. */
static double slowdown_now(void)
{
    static const char *path;
    static int checked;
    static double next_read;
    if (!checked) {
        checked = 1;
        path = getenv("MESHINFER_SLOWDOWN_FILE");
        if (path && !*path)
            path = NULL;
    }
    if (path) {
        double t = mi_now();
        if (t >= next_read) {
            next_read = t + 0.05;
            char b[64] = "", *end;
            mi_read_head(path, b, sizeof b - 1); /* never blocks on a FIFO */
            double s = strtod(b, &end);
            if (end != b && s >= 1 && s <= 1000)
                g_slowdown = s;
        }
    }
    return mi_slowdown();
}

void mi_slowdown_pay(double t0)
{
    double s = slowdown_now() * g_freq_stretch;
    if (s <= 1)
        return;
    double now = mi_now();
    g_owed += (s - 1) * (now - t0);
    if (g_owed < 2e-4)
        return;
    struct timespec ts = {(time_t)g_owed, (long)((g_owed - (double)(time_t)g_owed) * 1e9)};
    nanosleep(&ts, NULL);
    g_owed -= mi_now() - now; /* what the sleep took, overshoot included, is paid */
}

size_t mi_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long size = 0, rss = 0;
    int n = fscanf(f, "%lu %lu", &size, &rss);
    fclose(f);
    if (n != 2)
        return 0;
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

/* ------------------------------------------------ temporary outputs */

static volatile sig_atomic_t g_temp_set = 0;
static char g_temp_path[4200];

static void temp_on_signal(int sig)
{
    if (g_temp_set)
        unlink(g_temp_path); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void temp_at_exit(void)
{
    if (g_temp_set)
        unlink(g_temp_path);
}

void mi_temp_file_set(const char *path)
{
    static int installed = 0;
    if (!installed) {
        installed = 1;
        atexit(temp_at_exit); /* mi_fatal and exit() mid-write */
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
        for (int i = 0; i < 4; i++) {
            struct sigaction old;
            if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
                continue;
            signal(sigs[i], temp_on_signal);
        }
    }
    g_temp_set = 0;
    snprintf(g_temp_path, sizeof g_temp_path, "%s", path);
    g_temp_set = 1;
}

void mi_temp_file_clear(void)
{
    g_temp_set = 0;
}

/* ------------------------------------------------ faults while reading a file */

#if defined(__SANITIZE_ADDRESS__)
#define MI_FAULT_GUARD 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MI_FAULT_GUARD 0
#endif
#endif
#ifndef MI_FAULT_GUARD
#define MI_FAULT_GUARD 1
#endif

#define MI_FAULT_DEPTH 8
static volatile sig_atomic_t g_fault_depth = 0;
static char g_fault_msg[MI_FAULT_DEPTH][4400];
static size_t g_fault_len[MI_FAULT_DEPTH];
/* what libhdf5 on a damaged file can die of: a bad pointer or mapping, an integer division by a
 * corrupt zero size, glibc's abort on a heap it overran */
#define MI_FAULT_NSIGS 4
static struct sigaction g_fault_old[MI_FAULT_NSIGS];
static const int g_fault_sigs[MI_FAULT_NSIGS] = {SIGSEGV, SIGBUS, SIGFPE, SIGABRT};
/* the handler's own stack: a damaged file can send libhdf5's recursion past
 * the thread's stack, where no handler could run on it */
static char g_fault_stack[1 << 16];
static stack_t g_fault_old_stack;

static void fault_on_signal(int sig)
{
    int d = g_fault_depth;
    if (d <= 0) { /* left the file between the fault and here: die as before */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    if (g_temp_set)
        unlink(g_temp_path); /* nothing partial left */
    d = d > MI_FAULT_DEPTH ? MI_FAULT_DEPTH : d; /* deeper files kept the outer message */
    ssize_t w = write(2, g_fault_msg[d - 1], g_fault_len[d - 1]);
    (void)w;
    _exit(1);
}

void mi_fault_file_enter(const char *path)
{
    int d = g_fault_depth;
    if (!MI_FAULT_GUARD || d >= MI_FAULT_DEPTH) {
        g_fault_depth = d + 1; /* counted so that leave pairs; deeper files keep the outer message */
        return;
    }
    int n = snprintf(g_fault_msg[d], sizeof g_fault_msg[d],
                     "meshinfer: error: %s: the HDF5 library crashed reading it; the file is damaged "
                     "(convert or copy it again)\n",
                     path);
    g_fault_len[d] = n < 0 ? 0 : (size_t)n >= sizeof g_fault_msg[d] ? sizeof g_fault_msg[d] - 1 : (size_t)n;
    if (d == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = fault_on_signal;
        sa.sa_flags = SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        stack_t ss = {.ss_sp = g_fault_stack, .ss_size = sizeof g_fault_stack, .ss_flags = 0};
        sigaltstack(&ss, &g_fault_old_stack);
        for (int i = 0; i < MI_FAULT_NSIGS; i++)
            sigaction(g_fault_sigs[i], &sa, &g_fault_old[i]);
    }
    g_fault_depth = d + 1;
}

void mi_fault_file_leave(void)
{
    int d = g_fault_depth;
    if (d <= 0)
        return;
    g_fault_depth = d - 1;
    if (d == 1 && MI_FAULT_GUARD) {
        for (int i = 0; i < MI_FAULT_NSIGS; i++)
            sigaction(g_fault_sigs[i], &g_fault_old[i], NULL); /* Open MPI's or ASan's again */
        g_fault_old_stack.ss_flags &= SS_DISABLE;            /* (SS_ONSTACK is a report, not a request) */
        sigaltstack(&g_fault_old_stack, NULL);
    }
}

char *mi_read_text_nonempty(const char *path, size_t *len, char *err)
{
    char *buf = mi_read_text_file(path, "text file", (size_t)1 << 32, len, err);
    if (buf && *len == 0) {
        mi_set_error(err, "%s: text file is empty", path);
        free(buf);
        return NULL;
    }
    return buf;
}
