/* gemshare-scheduler as a wheel installs it (pip install, pip install gemshare-*.whl): a static
 * program that blocks SIGHUP, SIGUSR1 and SIGUSR2 (held_signals.h) and then execs the script
 * installed beside it under its own name plus ".py", gemshare-scheduler.py, whose interpreter
 * line pip wrote at install time (from the wheel's "#!python"). A console script that pip
 * writes starts Python at once, and a signal during the interpreter's start (20-40 ms) would
 * kill it; here only the kernel's exec itself comes before the mask.
 *
 * Its own path is read from /proc/self/exe (symbolic links resolved, so a link to it elsewhere
 * finds the script too), or taken from argv[0] where that names a path. Built static
 * (launcher/build.mk, or setup.py where make is not used): no dynamic loader runs first. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "held_signals.h"

#define SUFFIX ".py"

/* The path of this program into `path` (of `size` bytes); 0 if it is not known. */
static int own_path(char *path, size_t size, const char *argv0)
{
    ssize_t length = readlink("/proc/self/exe", path, size - 1);
    if (length > 0) {
        path[length] = '\0';
        return 1;
    }
    if (argv0 != NULL && strchr(argv0, '/') != NULL && strlen(argv0) < size) {
        strcpy(path, argv0);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    block_held_signals();
    char script[PATH_MAX + sizeof SUFFIX];
    if (!own_path(script, PATH_MAX, argv[0])) {
        fprintf(stderr, "gemshare-scheduler: cannot tell where it is installed (/proc/self/exe "
                        "is unreadable: is /proc mounted?), so cannot find its Python script\n");
        return 127;
    }
    strcat(script, SUFFIX);
    argv[0] = script;
    execv(script, argv);
    fprintf(stderr, "gemshare-scheduler: cannot run %s: %s (it is installed beside this "
                    "program; reinstall the package)\n", script, strerror(errno));
    return 127;
}
