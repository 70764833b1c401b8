/* Shared error handling and strict option parsing.
 *
 * meshinfer is an MPI program, so "print and exit" is not enough: a rank that
 * fails alone must take the whole job down, or the other ranks hang in their
 * next collective. mi_fatal() therefore runs a hook the runtime registers
 * while MPI runs (MPI_Abort with more than one rank, MPI_Finalize alone), then
 * exit(1). This module itself knows no MPI, so model and plan code and their
 * unit tests link without it. Every error is one line on stderr starting with
 * "meshinfer: error: ". */
#ifndef MESHINFER_COMMON_H
#define MESHINFER_COMMON_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MI_NORETURN __attribute__((noreturn))
#else
#define MI_PRINTF(a, b)
#define MI_NORETURN
#endif

/* Print "meshinfer: error: <msg>" and stop every rank with a non-zero exit.
 * Safe before MPI_Init and after MPI_Finalize. Never returns. */
MI_NORETURN void mi_fatal(const char *fmt, ...) MI_PRINTF(1, 2);

/* Register (or clear, with NULL) what mi_fatal runs after printing and before
 * exit(1): the runtime's way to stop the other ranks. Not thread-safe; set
 * once at start-up and cleared at finalize. */
void mi_set_fatal_hook(void (*hook)(void));

/* Print "meshinfer: warning: <msg>" on stderr and continue. */
void mi_warn(const char *fmt, ...) MI_PRINTF(1, 2);

/* Text streamed to stdout that does not end a line (generated tokens): say
 * so with the bytes just written, and a fatal error (mi_fatal) on the same
 * terminal or file starts its line after a newline instead of gluing onto
 * the text. */
void mi_stdout_wrote(const char *bytes, size_t n);

/* Error message buffer used by functions that report failure instead of
 * aborting (library code that tests call): returns -1 after formatting. */
#define MI_ERRLEN 512
int mi_set_error(char *err, const char *fmt, ...) MI_PRINTF(2, 3);

/* Strict number parsing for command-line options: the whole string must be
 * a number within [lo, hi]; otherwise mi_fatal names the option and value. */
long mi_parse_long(const char *opt, const char *s, long lo, long hi);
double mi_parse_double(const char *opt, const char *s, double lo, double hi);
uint64_t mi_parse_u64(const char *opt, const char *s);

/* Check that path names an existing regular file we can read (not empty,
 * not a directory, FIFO or device, which would block or mislead). what names
 * the file's role in the message ("model file", "checkpoint", ...).
 * Returns 0, or -1 with one line in err. */
int mi_check_input_file(const char *path, const char *what, char *err);

/* Up to n leading bytes of the regular file at path into buf; returns how
 * many were read, 0 for anything else (missing, unreadable, a directory, and
 * a FIFO or device, which it never opens: a format sniffed before the input
 * checks must not block on a FIFO that has no writer). */
size_t mi_read_head(const char *path, void *buf, size_t n);

/* Read a whole text file (what names its role: "cluster file", "plan file",
 * "text file") into a NUL-terminated malloc'ed buffer; *len gets its length.
 * Returns NULL with one line in err when it is not a readable regular file,
 * is larger than max_bytes, or holds a NUL byte. An empty file is returned. */
char *mi_read_text_file(const char *path, const char *what, size_t max_bytes, size_t *len, char *err);
/* A text file as mi_read_text_file reads it (up to 4 GiB), refused also when
 * empty ("PATH: text file is empty"). Returns NULL with err set. */
char *mi_read_text_nonempty(const char *path, size_t *len, char *err);

/* A 64-bit hash of p[0, n) going on from h (start with MI_HASH_SEED):
 * 32 bytes a step in four lanes. It tells a file or a record
 * that changed from the one hashed (an edit, another file), not one forged to
 * match: it is no cryptographic hash. Words are read in the host's byte
 * order, so hashes compare between hosts of one byte order. */
#define MI_HASH_SEED 0x6a09e667f3bcc909ull
uint64_t mi_hash64(const void *p, size_t n, uint64_t h);

/* A file's size in bytes and mi_hash64 of its bytes (what identifies a model
 * file whatever its path). Returns 0, or -1 with one line in err (not a
 * readable regular file, a read error). */
int mi_file_fingerprint(const char *path, uint64_t *bytes, uint64_t *hash, char *err);

/* Allocation that aborts with a clear message (bytes, what) on failure. */
void *mi_malloc(size_t bytes, const char *what);
void *mi_calloc(size_t n, size_t size, const char *what);

/* Wall-clock seconds from a monotonic clock. */
double mi_now(void);

/* CPU seconds the calling thread has run: under a CPU quota, the time its
 * work takes at full speed (the throttled waits are not counted). */
double mi_cpu_now(void);

/* An emulated slower device (the testbed's --slowdown; Voltron's
 * heterogeneous devices): MESHINFER_SLOWDOWN=S
 * (a number >= 1, read once; absent: 1) makes every compute op take S times
 * as long, as a CPU S times slower would, by sleeping (S - 1) times the op's
 * own time after it. A CPU-quota cgroup throttles only sustained work (a
 * burst shorter than its quota runs at full speed), so decode steps on it
 * run faster than a slower CPU would; sleeping stretches bursts alike and
 * leaves the cores free for the other emulated devices. Sleeps are owed and
 * paid in pieces of at least 0.2 ms, so tiny ops do not pay a timer's
 * overshoot each. mi_slowdown: the factor; mi_slowdown_pay(t0): after
 * compute that started at mi_now() = t0. An unparsable value is fatal.
 * MESHINFER_SLOWDOWN_FILE=PATH: a factor in that file replaces it whenever
 * the file changes (read at most every 50 ms; unreadable or out-of-range
 * contents are ignored): a device that slows down mid-run. */
double mi_slowdown(void);
void mi_slowdown_pay(double t0);
/* Emulated DVFS (Voltron §4.4, `--energy`): this device runs at level f
 * (fraction of its top frequency, in (0, 1]), so its compute takes 1/f as
 * long, on top of any slowdown above (the two multiply). */
void mi_slowdown_set_freq(double f);

/* Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown. */
size_t mi_rss_bytes(void);

/* Remove `path` (a temporary output written before a rename) if the process
 * exits or is ended by SIGINT, SIGTERM, SIGHUP or SIGQUIT before
 * mi_temp_file_clear(), so a killed convert, quantize, synth or profile
 * leaves nothing half written. One path at a
 * time; the signal then takes its default action, so the exit status is that
 * of the signal. Signals ignored at start (nohup, background jobs) stay
 * ignored. */
void mi_temp_file_set(const char *path);
void mi_temp_file_clear(void);

/* While libhdf5 reads a model file (model_file.h wraps each public read,
 * mi_model_open and mi_model_close in these), a segmentation fault, bus
 * error, arithmetic fault or abort, a stack overflow included (the handler
 * has a stack of its own), ends the process with one line naming
 * PATH, exit status 1 and the registered temporary output removed, instead
 * of a crash: Debian's libhdf5 can fault on a damaged file, which no caller
 * can check beforehand. Calls nest (up to 8 files keep their own line) and
 * must pair; leaving the last restores the handlers that were there (Open
 * MPI's). Built with AddressSanitizer the guard is off, so that ASan reports
 * the fault with its stack. Not thread-safe: call from the main thread. */
void mi_fault_file_enter(const char *path);
void mi_fault_file_leave(void);

#endif
