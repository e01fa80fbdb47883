/* hold-signals: what runs first when gemshare-scheduler starts from make install, make
 * scheduler, the unit and the image. It blocks SIGHUP, SIGUSR1 and SIGUSR2 (held_signals.h),
 * then execs the scheduler, which takes them over once its handlers are in place and acts on each
 * when it serves. SIGTERM and SIGINT keep their usual action: they end a start at once.
 *
 *   hold-signals COMMAND [ARG...]
 *   #!/usr/local/lib/gemshare/hold-signals /usr/bin/env python3 -IS     (a script's first line)
 *
 * As a script's interpreter it gets the words after its path as one argument, so the first
 * argument is split at blanks into the command and its first arguments (which therefore hold
 * none). Built static (launcher/build.mk): no dynamic loader runs before the mask is set. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "held_signals.h"

int main(int argc, char **argv)
{
    block_held_signals();
    if (argc < 2) {
        fprintf(stderr, "usage: hold-signals COMMAND [ARG...]\n");
        return 2;
    }
    /* Each word takes at least two characters of argv[1] (itself and a blank), but the last. */
    char **args = calloc((size_t)argc + strlen(argv[1]) / 2 + 1, sizeof *args);
    if (args == NULL) {
        fprintf(stderr, "hold-signals: out of memory\n");
        return 127;
    }
    int count = 0;
    for (char *word = strtok(argv[1], " \t"); word != NULL; word = strtok(NULL, " \t"))
        args[count++] = word;
    if (count == 0) {
        fprintf(stderr, "hold-signals: the command is empty\n");
        return 2;
    }
    for (int i = 2; i < argc; i++)
        args[count++] = argv[i];
    execvp(args[0], args);
    fprintf(stderr, "hold-signals: cannot run %s: %s\n", args[0], strerror(errno));
    return 127;
}
