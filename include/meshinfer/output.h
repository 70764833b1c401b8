/* Every file meshinfer writes goes through this one path: model files
 * (convert, synth, quantize), plan files, profiles, traces, the memory
 * model's CSV and PNG.
 *
 * An output is checked before any work starts, so a long run never ends in
 * "cannot write": refused are an empty path, an existing directory, an
 * existing file that is not a regular file (a device, a FIFO), a missing or
 * unwritable directory, an existing HDF5 file unless `what` is "model file"
 * (a model is expensive to remake; only the model writers replace one), and
 * the same file as any input of the command
 * (compared by device and inode, so another name, a symlink or a hard link
 * of the input is caught too), and a place where no file can be created
 * (tried, since access() says yes to root on a read-only mount or in /proc).
 * It is then written under a temporary name in the same directory, created
 * exclusively and never through a link (a planted symlink cannot redirect
 * it), and renamed over the destination only when complete, so a failure or
 * an interruption (exit, SIGINT, SIGTERM, SIGHUP, SIGQUIT) leaves nothing and
 * an input is never damaged. What a writer killed outright (SIGKILL) left,
 * the next writer of the same path on the same host removes (with a note on
 * stderr) once its process is gone. A destination that is a symlink is written
 * through: its target gets the content and the link stays; the file keeps
 * the mode it had.
 *
 * No MPI: under mpirun only the rank that writes calls these. */
#ifndef MESHINFER_OUTPUT_H
#define MESHINFER_OUTPUT_H

#include <stdio.h>

typedef struct {
    char path[4096]; /* the destination */
    char tmp[4200];  /* "<path>.partial.<host>.<pid>", in the destination's directory */
    FILE *f;         /* open on tmp after mi_output_open, else NULL */
    int fd;          /* tmp's descriptor after mi_output_begin (-1 once f owns it) */
} mi_output;

/* Check `path` as an output named `what` (e.g. "trace file") of a command
 * whose inputs are inputs[0..n_inputs) (NULL entries and inputs that do not
 * exist are skipped). Returns 0, or -1 with one line in err naming the path
 * and the reason. Writes nothing. */
int mi_output_check(const char *path, const char *what, const char *const *inputs, int n_inputs, char *err);

/* 1 when paths a and b name the same file: by device and inode when both
 * exist, else by their directories' real paths and their last components
 * (two outputs of one command, not yet written, must not be one file). */
int mi_same_path(const char *a, const char *b);

/* The directory part of path into dir[n] ("." when path has none, "/" for a
 * file at the root): where the output and its temporary file are created. */
void mi_output_dir(const char *path, char *dir, size_t n);

/* Create the temporary file for `path` (empty, mode 0600) and register it
 * for removal at exit or on a signal (mi_temp_file_set; one output at a
 * time). For writers that then open o->tmp themselves (HDF5, gnuplot).
 * Returns 0, or -1 with err set (path too long, cannot create). */
int mi_output_begin(mi_output *o, const char *path, char *err);

/* mi_output_begin, then open the temporary file for writing. Returns the
 * stream, or NULL with one line in err. */
FILE *mi_output_open(mi_output *o, const char *path, char *err);

/* Finish: flush, sync and close the stream (if open), then rename the
 * temporary file over the destination. Returns 0, or -1 with one line in err
 * (a full disk, an I/O error), the temporary file removed either way. */
int mi_output_commit(mi_output *o, char *err);

/* Give up: close and remove the temporary file. Safe to call twice. */
void mi_output_abort(mi_output *o);

#endif
