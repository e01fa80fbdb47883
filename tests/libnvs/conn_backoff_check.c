/* Unit checks of the pauses between libnvs's connection attempts (libnvs/wire/conn.c), with a
 * clock given by the check: test_conn_backoff.py builds this with conn.c and wire.c and runs it.
 * Real sockets, in a directory of the check's own.
 *
 *   conn_backoff_check DIR    runs every check; exit status 0 when all hold, else 1, with a
 *                             line on stderr for each pause that was not as expected */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire/conn.h"

static bool all_held = true;
static char socket_path[108];

static void expect(bool held, const char *check, const char *what)
{
    if (!held) {
        fprintf(stderr, "%s: %s does not hold\n", check, what);
        all_held = false;
    }
}

#define CHECK(cond) expect((cond), __func__, #cond)

/* One attempt at `now`, closed at once as the client thread would; the pause it leaves. */
static int64_t attempt(struct gs_conn *c, int64_t now)
{
    char why[128];
    gs_conn_open(c, socket_path, why, sizeof why);
    gs_conn_close(c, now);
    return c->next_retry - now;
}

static int listening(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 64) < 0)
        return -1;
    return fd;
}

/* Nobody there: the pauses stop at the short cap, so a scheduler is found soon after it comes. */
static void no_socket_is_tried_again_every_quarter_second(void)
{
    struct gs_conn c = GS_CONN_INITIAL;
    int64_t now = 0, pauses[6];
    for (int i = 0; i < 6; i++) {
        pauses[i] = attempt(&c, now);
        now += pauses[i];
        CHECK(!c.reached);
    }
    CHECK(pauses[0] == GS_CONN_RETRY_FIRST_MS && pauses[1] == 2 * GS_CONN_RETRY_FIRST_MS);
    for (int i = 2; i < 6; i++)
        CHECK(pauses[i] == GS_CONN_ABSENT_RETRY_MAX_MS);
}

/* A socket file nobody listens on yet (a scheduler starting) counts as nobody there. */
static void a_socket_nobody_listens_on_counts_as_none(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    struct gs_conn c = GS_CONN_INITIAL;
    c.retry_ms = GS_CONN_RETRY_MAX_MS; /* as after a long outage of a refusing scheduler */
    CHECK(attempt(&c, 0) == GS_CONN_ABSENT_RETRY_MAX_MS && !c.reached);
    close(fd);
}

/* A scheduler that takes the connection and closes it is asked again less and less often. */
static void a_scheduler_that_closes_is_asked_again_up_to_a_second_apart(void)
{
    int fd = listening();
    CHECK(fd >= 0);
    struct gs_conn c = GS_CONN_INITIAL;
    int64_t expected[] = {100, 200, 400, 800, 1000, 1000};
    for (int i = 0; i < 6; i++) {
        CHECK(attempt(&c, 0) == expected[i]);
        CHECK(c.reached);
    }
    /* Gone after that: the next pause is already the short one. */
    close(fd);
    unlink(socket_path);
    CHECK(attempt(&c, 0) == GS_CONN_ABSENT_RETRY_MAX_MS);
}

/* A registration starts the next outage over from the first pause. */
static void a_registration_resets_the_pauses(void)
{
    struct gs_conn c = GS_CONN_INITIAL;
    for (int i = 0; i < 4; i++)
        attempt(&c, 0);
    gs_conn_reset_backoff(&c);
    CHECK(attempt(&c, 0) == GS_CONN_RETRY_FIRST_MS);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: conn_backoff_check DIR\n");
        return 2;
    }
    snprintf(socket_path, sizeof socket_path, "%s/s.sock", argv[1]);
    no_socket_is_tried_again_every_quarter_second();
    unlink(socket_path);
    a_socket_nobody_listens_on_counts_as_none();
    unlink(socket_path);
    a_scheduler_that_closes_is_asked_again_up_to_a_second_apart();
    unlink(socket_path);
    a_registration_resets_the_pauses();
    return all_held ? 0 : 1;
}
