/* Checks of the host's staging claims (libnvs/memory/host_room.c) between processes, alone: no
 * CUDA. test_host_claims.py builds this with host_room.c, the lock files named in a directory
 * of the test's own (-DGS_HOST_ROOM_LOCK, -DGS_HOST_URGENT_LOCK), and runs each check by name.
 *
 *   host_claim_check --list    the checks' names
 *   host_claim_check NAME      runs one; exit status 0 when it holds, 1 (and why) otherwise */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memory/host_room.h"

#define AHEADS 4 /* programs preparing ahead */
#define AHEAD_STEPS 40 /* each */
#define STEP_MS 5

static void sleep_ms(int ms)
{
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

/* Other programs fault staging memory in ahead, a step of STEP_MS at a time, each taking the
 * claim again at once after each step (as gs_prepare_in_background does); a move here needs
 * room meanwhile. Its claim must go in within a step or two, not after most of theirs. */
static int urgent_claims_pass_claims_ahead(void)
{
    _Atomic int *steps = mmap(NULL, sizeof *steps, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (steps == MAP_FAILED)
        return perror("mmap"), 1;
    atomic_store(steps, 0);
    pid_t aheads[AHEADS];
    for (int a = 0; a < AHEADS; a++)
        if ((aheads[a] = fork()) == 0) {
            for (int i = 0; i < AHEAD_STEPS; i++) {
                gs_host_claim_begin(false);
                sleep_ms(STEP_MS);
                atomic_fetch_add(steps, 1);
                gs_host_claim_end(false);
            }
            _exit(0);
        }
    while (atomic_load(steps) < AHEADS) /* they are well under way */
        sleep_ms(1);
    int asked_at = atomic_load(steps);
    gs_host_claim_begin(true);
    int done_then = atomic_load(steps);
    sleep_ms(STEP_MS);
    int done_after = atomic_load(steps);
    gs_host_claim_end(true);
    int failed = 0, ended = 0;
    for (int a = 0; a < AHEADS; a++) {
        int status;
        waitpid(aheads[a], &status, 0);
        ended += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (done_then - asked_at > 2) {
        fprintf(stderr, "the move's claim went in after %d more of the others' %d steps ahead "
                        "(the one in progress at most, or two)\n", done_then - asked_at,
                AHEADS * AHEAD_STEPS);
        failed = 1;
    }
    if (done_after != done_then) {
        fprintf(stderr, "a claim ahead went in beside the move's (%d, then %d steps)\n",
                done_then, done_after);
        failed = 1;
    }
    if (ended != AHEADS || atomic_load(steps) != AHEADS * AHEAD_STEPS) {
        fprintf(stderr, "the claims ahead did not all end (%d of %d steps)\n",
                atomic_load(steps), AHEADS * AHEAD_STEPS);
        failed = 1;
    }
    return failed;
}

/* With nobody urgent, claims ahead of two programs both go on: none waits out its yield. */
static int claims_ahead_take_turns(void)
{
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t other = fork();
    for (int i = 0; i < 10; i++) {
        gs_host_claim_begin(false);
        sleep_ms(2);
        gs_host_claim_end(false);
    }
    if (other == 0)
        _exit(0);
    int status;
    waitpid(other, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    if (seconds * 1000 >= GS_HOST_YIELD_MS) {
        fprintf(stderr, "20 claims ahead of 2 ms took %.2f s: one waited out its yield\n",
                seconds);
        return 1;
    }
    return 0;
}

#define CHECKS(X) X(urgent_claims_pass_claims_ahead) X(claims_ahead_take_turns)
#define NAME(check) #check,
#define RUN(check)                                                                               \
    if (strcmp(argv[1], #check) == 0)                                                            \
        return check();

int main(int argc, char **argv)
{
    static const char *names[] = {CHECKS(NAME)};
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            puts(names[i]);
        return 0;
    }
    if (argc != 2)
        return fprintf(stderr, "usage: %s --list | NAME\n", argv[0]), 2;
    CHECKS(RUN)
    fprintf(stderr, "no check named %s\n", argv[1]);
    return 2;
}
