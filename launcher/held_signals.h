/* The signals gemshare-scheduler keeps while it starts (SIGHUP: reload; SIGUSR1, SIGUSR2: a
 * status line), blocked first thing by its launchers: a blocked signal stays pending, and the
 * mask outlives exec, so one sent while Python starts is kept for the scheduler's own handlers
 * (nvs/service/early_signals.py unblocks them) instead of killing it by its default action. */
#ifndef GEMSHARE_HELD_SIGNALS_H
#define GEMSHARE_HELD_SIGNALS_H

#include <signal.h>

static inline void block_held_signals(void)
{
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGHUP);
    sigaddset(&held, SIGUSR1);
    sigaddset(&held, SIGUSR2);
    sigprocmask(SIG_BLOCK, &held, NULL);
}

#endif
