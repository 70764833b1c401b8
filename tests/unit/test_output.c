/* CUnit tests of the one output path (src/util/output.c), no MPI:
 *   - refused before anything is written: an empty path, a directory, a
 *     FIFO, a missing directory, and the same file as an input by any name
 *     (the input itself, a symlink, a hard link); an input that does not
 *     exist yet is no conflict;
 *   - a committed output has exactly what was written and no temporary
 *     file is left; an aborted one leaves nothing and an existing
 *     destination untouched;
 *   - a writer that opens the temporary file itself (HDF5, gnuplot) is
 *     renamed into place by mi_output_commit;
 *   - a destination that is a symlink is written through (the link stays),
 *     a read-only destination keeps its mode, a symlink planted at the
 *     temporary name is never followed, and /proc, /dev and dangling links
 *     are refused;
 *   - what a killed writer left on this host (its pid gone) is removed by the
 *     next writer of the path; a live pid's, another host's and other names
 *     are kept;
 *   - UTF-8 (src/util/utf8.c): whole sequences, the maximal subpart of a
 *     malformed one, and a character cut short.
 *
 * Exit status: 0 when every test passed, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/utf8.h"
#include "test_util.h"

static char g_dir[512];

/* This host's name as the temporary names carry it: read off one ("<path>.partial.<host>.<pid>"). */
static void host_tag(char *h, size_t n)
{
    char p[600], err[MI_ERRLEN], pid[32];
    tu_path(p, sizeof p, g_dir, "host.json");
    mi_output o;
    CU_ASSERT_EQUAL_FATAL(mi_output_begin(&o, p, err), 0);
    const char *a = strstr(o.tmp, ".partial.") + 9, *b = strrchr(o.tmp, '.');
    snprintf(pid, sizeof pid, ".%ld", (long)getpid());
    CU_ASSERT_STRING_EQUAL(b, pid);
    snprintf(h, n, "%.*s", (int)(b - a), a);
    mi_output_abort(&o);
}

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static void read_all(const char *path, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
}

static void test_refusals(void)
{
    char err[MI_ERRLEN], in[600], link_s[600], link_h[600], fifo[600], p[700];
    tu_path(in, sizeof in, g_dir, "model.h5");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(in, "weights"), 0);
    tu_path(link_s, sizeof link_s, g_dir, "sym.h5");
    tu_path(link_h, sizeof link_h, g_dir, "hard.h5");
    tu_path(fifo, sizeof fifo, g_dir, "fifo");
    CU_ASSERT_EQUAL_FATAL(symlink(in, link_s), 0);
    CU_ASSERT_EQUAL_FATAL(link(in, link_h), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    const char *inputs[] = {NULL, in};

    CU_ASSERT_EQUAL(mi_output_check("", "trace file", NULL, 0, err), -1);
    CU_ASSERT(has(err, "trace file path is empty"));
    CU_ASSERT_EQUAL(mi_output_check(g_dir, "trace file", NULL, 0, err), -1);
    CU_ASSERT(has(err, "is a directory"));
    CU_ASSERT_EQUAL(mi_output_check(fifo, "plan file", NULL, 0, err), -1);
    CU_ASSERT(has(err, "not a regular file"));
    snprintf(p, sizeof p, "%s/nodir/x.json", g_dir);
    CU_ASSERT_EQUAL(mi_output_check(p, "plan file", NULL, 0, err), -1);
    CU_ASSERT(has(err, "nodir does not exist"));
    const char *names[] = {in, link_s, link_h};
    for (int i = 0; i < 3; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(mi_output_check(names[i], "profile file", inputs, 2, err), -1);
        CU_ASSERT(has(err, "same file as the input") && has(err, "profile file"));
    }
    /* the same names are fine when the input is another file */
    tu_path(p, sizeof p, g_dir, "other.txt");
    const char *other[] = {p};
    CU_ASSERT_EQUAL(mi_output_check(in, "model file", other, 1, err), 0);
    /* a new file in an existing directory */
    tu_path(p, sizeof p, g_dir, "new.json");
    CU_ASSERT_EQUAL(mi_output_check(p, "trace file", inputs, 2, err), 0);
    char buf[64];
    read_all(in, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "weights");
    CU_ASSERT_FALSE(tu_file_exists(p));
}

/* A model file (HDF5) is replaced only by a model writer, even when it is no input. */
static void test_models_kept(void)
{
    char model[4200], err[MI_ERRLEN] = "";
    tu_path(model, sizeof model, g_dir, "other-model.h5");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(model, "\x89HDF\r\n\x1a\n and the rest"), 0);
    CU_ASSERT_EQUAL(mi_output_check(model, "plan file", NULL, 0, err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is an HDF5 file (a model?); refusing to replace it with the plan file"));
    CU_ASSERT_EQUAL(mi_output_check(model, "model file", NULL, 0, err), 0);
    char text[4200];
    tu_path(text, sizeof text, g_dir, "notes.json");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(text, "{}"), 0);
    CU_ASSERT_EQUAL(mi_output_check(text, "plan file", NULL, 0, err), 0); /* other files are replaced */
}

static void test_commit_and_abort(void)
{
    char err[MI_ERRLEN], p[600], buf[64];
    mi_output o;
    tu_path(p, sizeof p, g_dir, "out.json");
    FILE *f = mi_output_open(&o, p, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"a\": 1}\n", f);
    CU_ASSERT_FALSE(tu_file_exists(p)); /* nothing at the destination until committed */
    CU_ASSERT_TRUE(tu_dir_has_partial(g_dir));
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), 0);
    read_all(p, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "{\"a\": 1}\n");
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));

    /* abort: the existing destination keeps its content, nothing partial */
    f = mi_output_open(&o, p, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("half", f);
    mi_output_abort(&o);
    mi_output_abort(&o); /* twice is harmless */
    read_all(p, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "{\"a\": 1}\n");
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));

    /* a writer that creates the temporary file itself */
    CU_ASSERT_EQUAL_FATAL(mi_output_begin(&o, p, err), 0);
    CU_ASSERT_EQUAL_FATAL(tu_write_text(o.tmp, "png"), 0);
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), 0);
    read_all(p, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "png");
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));

    /* the temporary file vanished before the commit: an error naming the path, no crash */
    CU_ASSERT_EQUAL_FATAL(mi_output_begin(&o, p, err), 0);
    CU_ASSERT_EQUAL_FATAL(unlink(o.tmp), 0);
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), -1);
    CU_ASSERT(has(err, p) && has(err, "nothing was written"));
    read_all(p, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "png");
}

/* A writer killed outright leaves its temporary file; the next writer of the path removes it. */
static void test_stale_partials(void)
{
    char out[600], host[64], dead[700], dead_k[700], live[700], other[700], alien[700], err[MI_ERRLEN];
    tu_path(out, sizeof out, g_dir, "stale.json");
    host_tag(host, sizeof host);
    pid_t child = fork(); /* a pid that is surely gone once reaped */
    CU_ASSERT_FATAL(child >= 0);
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    snprintf(dead, sizeof dead, "%s.partial.%s.%ld", out, host, (long)child);
    snprintf(dead_k, sizeof dead_k, "%s.partial.%s.%ld.3", out, host, (long)child);
    snprintf(live, sizeof live, "%s.partial.%s.%ld", out, host, (long)getppid());
    snprintf(other, sizeof other, "%s.partial.%s-elsewhere.%ld", out, host, (long)child);
    snprintf(alien, sizeof alien, "%s.partial.%s.%ldx", out, host, (long)child);
    const char *all[] = {dead, dead_k, live, other, alien};
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL_FATAL(tu_write_text(all[i], "half"), 0);
    mi_output o;
    FILE *f = mi_output_open(&o, out, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("whole", f);
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), 0);
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(dead, &st), 0);   /* the killed writer's: gone */
    CU_ASSERT_NOT_EQUAL(stat(dead_k, &st), 0); /* ... and its retry name */
    CU_ASSERT_EQUAL(stat(live, &st), 0);       /* a live process's: kept */
    CU_ASSERT_EQUAL(stat(other, &st), 0);      /* another host's: kept */
    CU_ASSERT_EQUAL(stat(alien, &st), 0);      /* not one of our names: kept */
    for (int i = 0; i < 5; i++)
        unlink(all[i]);
    unlink(out);
}

static void test_links_and_modes(void)
{
    char err[MI_ERRLEN], target[600], lnk[600], tmpname[700], victim[600], buf[64];
    mi_output o;
    /* a destination that is a symlink: written through, the link stays a link */
    tu_path(target, sizeof target, g_dir, "target.json");
    tu_path(lnk, sizeof lnk, g_dir, "link.json");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(target, "old"), 0);
    CU_ASSERT_EQUAL_FATAL(symlink(target, lnk), 0);
    CU_ASSERT_EQUAL(mi_output_check(lnk, "plan file", NULL, 0, err), 0);
    FILE *f = mi_output_open(&o, lnk, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("new", f);
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), 0);
    struct stat st;
    CU_ASSERT(lstat(lnk, &st) == 0 && S_ISLNK(st.st_mode));
    read_all(target, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "new");
    /* a read-only destination stays read-only */
    CU_ASSERT_EQUAL_FATAL(chmod(target, 0444), 0);
    f = mi_output_open(&o, target, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("newer", f);
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), 0);
    CU_ASSERT(stat(target, &st) == 0 && (st.st_mode & 0777) == 0444);
    /* a symlink planted at the predictable temporary name is never followed */
    tu_path(victim, sizeof victim, g_dir, "victim.txt");
    CU_ASSERT_EQUAL_FATAL(tu_write_text(victim, "precious"), 0);
    char out[600];
    tu_path(out, sizeof out, g_dir, "out.json");
    char host[64];
    host_tag(host, sizeof host);
    snprintf(tmpname, sizeof tmpname, "%s.partial.%s.%ld", out, host, (long)getpid());
    CU_ASSERT_EQUAL_FATAL(symlink(victim, tmpname), 0);
    f = mi_output_open(&o, out, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_STRING_NOT_EQUAL(o.tmp, tmpname);
    fputs("plan", f);
    CU_ASSERT_EQUAL(mi_output_commit(&o, err), 0);
    read_all(victim, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "precious");
    read_all(out, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "plan");
    CU_ASSERT(lstat(out, &st) == 0 && S_ISREG(st.st_mode));
    unlink(tmpname);
    /* places that hold no ordinary files, or where nothing can be created */
    CU_ASSERT_EQUAL(mi_output_check("/proc/x", "trace file", NULL, 0, err), -1);
    CU_ASSERT(has(err, "holds no ordinary files"));
    CU_ASSERT_EQUAL(mi_output_check("/dev/stdout", "trace file", NULL, 0, err), -1);
    char dangling[600];
    tu_path(dangling, sizeof dangling, g_dir, "dangling.json");
    CU_ASSERT_EQUAL_FATAL(symlink("/nonexistent/x", dangling), 0);
    CU_ASSERT_EQUAL(mi_output_check(dangling, "trace file", NULL, 0, err), -1);
    CU_ASSERT(has(err, "symbolic link to nothing"));
    CU_ASSERT_FALSE(tu_dir_has_partial(g_dir));
}

/* Each case: bytes, their count, the expected return and *need. */
static void test_utf8(void)
{
    static const struct {
        const char *s;
        size_t n;
        int got, need;
    } c[] = {
        {"a", 1, 1, 1},             {"\xC3\xA9", 2, 2, 2},       /* e acute */
        {"\xE2\x82\xAC", 3, 3, 3},   {"\xF0\x9F\x98\x80", 4, 4, 4}, /* euro, emoji */
        {"\xE2\x82", 2, 2, 3},        /* cut short: more bytes may complete it */
        {"\xE2\x41", 2, 1, 3},        /* a lead then ASCII: the subpart is the lead */
        {"\x80", 1, 1, 0},             {"\xC0\x80", 2, 1, 0},        /* stray continuation, overlong lead */
        {"\xF5\x80", 2, 1, 0},        {"\xE0\x80\x80", 3, 1, 3},   /* past U+10FFFF, overlong E0 */
        {"\xED\xA0\x80", 3, 1, 3},   /* a surrogate */
        {"\xF4\x90\x80\x80", 4, 1, 4}, {"\xF4\x8F\xBF\xBF", 4, 4, 4}, /* past and at U+10FFFF */
        {"\xF0\x9F\x98\x41", 4, 3, 4},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int need = -1;
        const int got = mi_utf8_start((const unsigned char *)c[i].s, c[i].n, &need);
        CU_ASSERT_EQUAL(got, c[i].got);
        CU_ASSERT_EQUAL(need, c[i].need);
        CU_ASSERT_EQUAL(mi_utf8_len((const unsigned char *)c[i].s, c[i].n),
                        c[i].got == c[i].need ? c[i].need : 0);
    }
    /* n bounds the look: a whole character seen through n = 2 is cut short */
    CU_ASSERT_EQUAL(mi_utf8_len((const unsigned char *)"\xE2\x82\xAC", 2), 0);
}

int main(void)
{
    if (tu_make_scratch(g_dir, sizeof g_dir, "test_output"))
        return 1;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    CU_pSuite s = CU_add_suite("outputs", NULL, NULL);
    CU_add_test(s, "refused before any work: directories, FIFOs, missing directories, inputs by any name",
                test_refusals);
    CU_add_test(s, "committed whole, aborted without a trace", test_commit_and_abort);
    CU_add_test(s, "a model is replaced only by a model writer", test_models_kept);
    CU_add_test(s, "symlinks written through, modes kept, planted temporary links ignored", test_links_and_modes);
    CU_add_test(s, "a killed writer's temporary file removed by the next writer", test_stale_partials);
    CU_add_test(s, "UTF-8: whole sequences, maximal subparts, characters cut short", test_utf8);
    CU_basic_set_mode(CU_BRM_NORMAL);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    tu_rm_tree(g_dir);
    return failed ? 1 : 0;
}
