/* Unit checks of libnvs's lock state machine (libnvs/lock/lock_core.c), alone: no threads,
 * sockets or driver. test_lock_core.py builds this with lock_core.c and runs each check by name.
 *
 *   lock_core_check --list    the checks' names
 *   lock_core_check NAME      runs one; exit status 0 when it holds, 1 (and the line) otherwise */
#include <stdio.h>
#include <string.h>

#include "lock/lock_core.h"

static int failures;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: %s does not hold\n", __FILE__, __LINE__, #cond);             \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

static struct gs_lock_actions todo;

static struct gs_lock_actions *fresh(void)
{
    memset(&todo, 0, sizeof todo);
    return &todo;
}

static bool did(int i, enum gs_lock_action_kind kind, int device)
{
    return i < todo.count && todo.list[i].kind == kind && todo.list[i].device == device;
}

static struct gs_lock_core registered_on(void)
{
    struct gs_lock_core c = GS_LOCK_CORE_INITIAL;
    gs_lock_core_registered(&c, GS_MODE_ON, fresh());
    return c;
}

static void registration_closes_every_gate(void)
{
    struct gs_lock_core c = GS_LOCK_CORE_INITIAL;
    gs_lock_core_registered(&c, GS_MODE_ON, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_CLOSE_ALL, -1));
    gs_lock_core_registered(&c, GS_MODE_OFF, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_RUN_FREELY, -1));
}

static void a_waiter_asks_once_and_a_grant_opens_its_device(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_wanted(&c, 1, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_REQUEST, 1));
    gs_lock_core_wanted(&c, 1, fresh());
    CHECK(todo.count == 0);
    gs_lock_core_granted(&c, 1, GS_GRANT_OTHERS_RAN, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_OPEN, 1) && todo.list[0].value == GS_GRANT_OTHERS_RAN);
    CHECK(gs_lock_core_holds(&c, 1) && !gs_lock_core_holds(&c, 0));
}

static void devices_are_locked_apart(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_wanted(&c, 1, fresh());
    gs_lock_core_granted(&c, 0, 0, fresh());
    gs_lock_core_granted(&c, 1, 0, fresh());
    CHECK(gs_lock_core_holds(&c, 0) && gs_lock_core_holds(&c, 1));
    gs_lock_core_drop(&c, 1, 4096, false, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_RELEASE, 1) &&
          todo.list[0].value == GS_RELEASE_DROPPED && todo.list[0].bytes == 4096);
    CHECK(gs_lock_core_holds(&c, 0) && !gs_lock_core_holds(&c, 1));
    /* Device 1 may be asked for again; device 0's lock is untouched. */
    gs_lock_core_wanted(&c, 1, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_REQUEST, 1));
    gs_lock_core_wanted(&c, 0, fresh());
    CHECK(todo.count == 0);
}

static void a_grant_of_several_devices_is_several_grants(void)
{
    struct gs_lock_core c = registered_on();
    for (int d = 0; d < 4; d++)
        gs_lock_core_wanted(&c, d, fresh());
    fresh();
    for (uint32_t d = 0; d < 4; d++)
        gs_lock_core_granted(&c, d, 0, &todo);
    CHECK(todo.count == 4);
    for (int d = 0; d < 4; d++)
        CHECK(did(d, GS_DO_OPEN, d) && gs_lock_core_holds(&c, d));
}

static void a_drop_that_crossed_our_release_is_ignored(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_drop(&c, 0, 0, false, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_IGNORE, 0));
    gs_lock_core_drop(&c, 0, 0, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_IGNORE, 0));
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_granted(&c, 0, 0, fresh());
    gs_lock_core_drop(&c, 0, 1 << 20, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_RELEASE, 0) &&
          todo.list[0].value == GS_RELEASE_REVOKED && todo.list[0].bytes == 0);
}

static void an_eviction_moves_only_what_is_not_running(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_evict(&c, 1, 100, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_EVICT, 1) && todo.list[0].bytes == 100);
    gs_lock_core_evict(&c, 1, 100, false, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_EVICT_NOTHING, 1));
    gs_lock_core_evict(&c, 1, 0, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_EVICT_NOTHING, 1));
    gs_lock_core_wanted(&c, 1, fresh());
    gs_lock_core_granted(&c, 1, 0, fresh());
    gs_lock_core_evict(&c, 1, 100, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_EVICT_NOTHING, 1));
    /* Held on device 1 does not stop an eviction on device 0. */
    gs_lock_core_evict(&c, 0, 100, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_EVICT, 0));
}

static void mode_off_frees_everything_and_mode_on_closes_again(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_granted(&c, 0, 0, fresh());
    gs_lock_core_mode(&c, GS_MODE_OFF, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_RUN_FREELY, -1) && !gs_lock_core_holds_any(&c));
    gs_lock_core_wanted(&c, 0, fresh());
    CHECK(todo.count == 0);
    gs_lock_core_mode(&c, GS_MODE_ON, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_CLOSE_ALL, -1));
    gs_lock_core_mode(&c, GS_MODE_AUTO, fresh());
    CHECK(todo.count == 0);
}

static void the_idle_hint_bounds_early_release_for_one_grant(void)
{
    struct gs_lock_core c = registered_on();
    CHECK(gs_lock_core_idle_ms(&c, 0, 250) == 0); /* not held */
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_granted(&c, 0, 0, fresh());
    CHECK(gs_lock_core_idle_ms(&c, 0, 250) == 250);
    gs_lock_core_idle_hint(&c, 0, 100, 1 << 20, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_PREPARE, 0) && todo.list[0].bytes == 1 << 20);
    CHECK(gs_lock_core_idle_ms(&c, 0, 250) == 100); /* a ceiling */
    CHECK(gs_lock_core_idle_ms(&c, 0, 50) == 50);
    CHECK(gs_lock_core_idle_ms(&c, 0, 0) == 0); /* off stays off */
    gs_lock_core_idle_hint(&c, 0, 1000, 0, false, fresh());
    CHECK(todo.count == 0);
    CHECK(gs_lock_core_idle_ms(&c, 0, 250) == 1000); /* a floor */
    CHECK(gs_lock_core_idle_ms(&c, 0, 2000) == 2000);
    gs_lock_core_granted(&c, 0, 0, fresh());
    CHECK(gs_lock_core_idle_ms(&c, 0, 250) == 250); /* each grant starts without one */
    gs_lock_core_idle_hint(&c, 1, 100, 0, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_PREPARE, 1) && todo.list[0].bytes == 0); /* not held */
}

static void an_idle_hint_to_a_process_not_holding_the_device_only_prepares(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_idle_hint(&c, 0, 100, 1 << 20, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_PREPARE, 0) && todo.list[0].bytes == 1 << 20);
    gs_lock_core_idle_hint(&c, 0, 100, 0, true, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_PREPARE, 0) && todo.list[0].bytes == 0); /* give back */
    gs_lock_core_idle_hint(&c, 0, 100, 1 << 20, false, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_IGNORE, 0)); /* nothing can move */
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_granted(&c, 0, 0, fresh());
    CHECK(gs_lock_core_idle_ms(&c, 0, 250) == 250); /* what came before the grant sets nothing */
}

static void a_refused_device_runs_ungated_from_then_on(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_wanted(&c, 2, fresh());
    gs_lock_core_error(&c, GS_ERROR_PROTOCOL, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_UNGATE, 2));
    gs_lock_core_lost(&c, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_RUN_FREELY, -1) && !gs_lock_core_holds_any(&c));
    gs_lock_core_registered(&c, GS_MODE_ON, fresh());
    gs_lock_core_wanted(&c, 2, fresh());
    CHECK(todo.count == 0);
    gs_lock_core_wanted(&c, 0, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_REQUEST, 0));
    /* Other errors refuse nothing. */
    gs_lock_core_wanted(&c, 3, fresh());
    gs_lock_core_error(&c, GS_ERROR_TOO_MANY_CLIENTS, fresh());
    CHECK(todo.count == 0);
}

static void devices_past_the_bound_have_no_lock(void)
{
    struct gs_lock_core c = registered_on();
    gs_lock_core_wanted(&c, GS_GATED_DEVICES, fresh());
    CHECK(todo.count == 0);
    gs_lock_core_granted(&c, GS_GATED_DEVICES, 0, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_IGNORE, GS_GATED_DEVICES));
    gs_lock_core_drop(&c, 1000, 0, false, fresh());
    CHECK(todo.count == 1 && did(0, GS_DO_IGNORE, 1000));
    CHECK(!gs_lock_core_holds_any(&c));
}

/* What the scheduler owes answers for: a lock asked for or held, on any device. */
static void a_request_or_a_hold_is_owed_answers(void)
{
    struct gs_lock_core c = registered_on();
    CHECK(!gs_lock_core_waits_or_holds(&c));
    gs_lock_core_wanted(&c, 3, fresh());
    CHECK(gs_lock_core_waits_or_holds(&c) && !gs_lock_core_holds_any(&c));
    gs_lock_core_granted(&c, 3, 0, fresh());
    CHECK(gs_lock_core_waits_or_holds(&c));
    gs_lock_core_released_idle(&c, 3);
    CHECK(!gs_lock_core_waits_or_holds(&c));
    gs_lock_core_wanted(&c, 0, fresh());
    gs_lock_core_lost(&c, fresh());
    CHECK(!gs_lock_core_waits_or_holds(&c));
}

static const struct {
    const char *name;
    void (*run)(void);
} checks[] = {
#define CHECK_ENTRY(f) {#f, f}
    CHECK_ENTRY(registration_closes_every_gate),
    CHECK_ENTRY(a_waiter_asks_once_and_a_grant_opens_its_device),
    CHECK_ENTRY(devices_are_locked_apart),
    CHECK_ENTRY(a_grant_of_several_devices_is_several_grants),
    CHECK_ENTRY(a_drop_that_crossed_our_release_is_ignored),
    CHECK_ENTRY(an_eviction_moves_only_what_is_not_running),
    CHECK_ENTRY(mode_off_frees_everything_and_mode_on_closes_again),
    CHECK_ENTRY(the_idle_hint_bounds_early_release_for_one_grant),
    CHECK_ENTRY(an_idle_hint_to_a_process_not_holding_the_device_only_prepares),
    CHECK_ENTRY(a_refused_device_runs_ungated_from_then_on),
    CHECK_ENTRY(devices_past_the_bound_have_no_lock),
    CHECK_ENTRY(a_request_or_a_hold_is_owed_answers),
};

int main(int argc, char **argv)
{
    size_t n = sizeof checks / sizeof checks[0];
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            puts(checks[i].name);
        return 0;
    }
    for (size_t i = 0; argc == 2 && i < n; i++) {
        if (strcmp(argv[1], checks[i].name) == 0) {
            checks[i].run();
            return failures ? 1 : 0;
        }
    }
    fprintf(stderr, "usage: lock_core_check --list | NAME\n");
    return 2;
}
