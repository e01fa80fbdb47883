/* The MPS offer, from the client thread to the first cuInit. A mutex, not atomics: it is taken
 * once per registration and once per cuInit, never on a hot path. */
#include "gate/mps.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "wire/gemshare_protocol.h"

static struct {
    pthread_mutex_t mu;
    bool offered;
    bool applied;
    unsigned percentage;
    bool low_priority;
    char pipe[257];
} gs_mps = {.mu = PTHREAD_MUTEX_INITIALIZER};

void gs_mps_forget(void)
{
    pthread_mutex_lock(&gs_mps.mu);
    gs_mps.offered = false;
    pthread_mutex_unlock(&gs_mps.mu);
}

void gs_mps_offer(const char *pipe_directory, size_t pipe_size, unsigned percentage,
                  unsigned priority)
{
    size_t len = strnlen(pipe_directory, pipe_size);
    bool usable = len > 0 && len < sizeof gs_mps.pipe && percentage <= 100 &&
                  (priority == GS_MPS_PRIORITY_NORMAL || priority == GS_MPS_PRIORITY_LOW);
    pthread_mutex_lock(&gs_mps.mu);
    if (usable) {
        memcpy(gs_mps.pipe, pipe_directory, len);
        gs_mps.pipe[len] = '\0';
        gs_mps.percentage = percentage;
        gs_mps.low_priority = priority == GS_MPS_PRIORITY_LOW;
    }
    gs_mps.offered = usable;
    pthread_mutex_unlock(&gs_mps.mu);
    if (!usable)
        gs_warn("the scheduler's MPS frame is malformed (pipe directory of %zu bytes, %u%% of "
                "the SMs, client priority %u); running as a plain context", len, percentage,
                priority);
}

void gs_mps_apply(void)
{
    pthread_mutex_lock(&gs_mps.mu);
    if (gs_mps.applied || !gs_mps.offered) {
        /* Applied: the driver has read the environment already. Not offered: the program's
         * own MPS settings, if any, stay as its owner gave them. */
        gs_mps.applied = true;
        pthread_mutex_unlock(&gs_mps.mu);
        return;
    }
    gs_mps.applied = true;
    setenv("CUDA_MPS_PIPE_DIRECTORY", gs_mps.pipe, 1);
    unsigned percentage = gs_mps.percentage;
    if (percentage > 0) {
        char share[12];
        snprintf(share, sizeof share, "%u", percentage);
        setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", share, 1);
    }
    /* Normal is MPS's own default: a program that set a priority itself keeps it. */
    bool low = gs_mps.low_priority;
    if (low)
        setenv("CUDA_MPS_CLIENT_PRIORITY", "1", 1);
    char pipe[sizeof gs_mps.pipe];
    memcpy(pipe, gs_mps.pipe, sizeof pipe);
    pthread_mutex_unlock(&gs_mps.mu);
    char share_words[48] = "";
    if (percentage > 0)
        snprintf(share_words, sizeof share_words, ", at most %u%% of the SMs", percentage);
    gs_warn("runs through NVIDIA MPS beside other programs (%s%s%s): a GPU fault in any program "
            "of that MPS server ends them all; GEMSHARE_MPS=0 keeps this program out", pipe,
            share_words, low ? ", below-normal priority" : "");
}
