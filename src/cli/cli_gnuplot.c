/* Figures with gnuplot (see cli.h): the scripts in jobs/lib/ and running
 * gnuplot with its messages collected, for plan --memory-model's --png and
 * simulate's --plot. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

int cli_find_script(const char *name, char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"/../jobs/lib/", "/../../jobs/lib/"};
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        for (int i = 0; i < 2; i++)
            if ((size_t)snprintf(out, n, "%s%s%s", exe, rel[i], name) < n && access(out, R_OK) == 0)
                return 0;
    }
    snprintf(out, n, "jobs/lib/%s", name);
    return access(out, R_OK) == 0 ? 0 : -1;
}

int cli_run_gnuplot(char *const argv[], char *msg, size_t n)
{
    int fd[2];
    msg[0] = 0;
    if (pipe(fd))
        return 127;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 127;
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        dup2(fd[1], 1);
        execvp("gnuplot", argv);
        _exit(127);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    char sink[256];
    while ((k = read(fd[0], got + 1 < n ? msg + got : sink, got + 1 < n ? n - 1 - got : sizeof sink)) > 0)
        if (got + 1 < n)
            got += (size_t)k;
    msg[got] = 0;
    close(fd[0]);
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
        return 1;
    return WEXITSTATUS(st);
}

const char *cli_first_line(char *s)
{
    while (*s == '\n' || *s == ' ')
        s++;
    char *e = strchr(s, '\n');
    if (e)
        *e = 0;
    return *s ? s : "no message";
}
