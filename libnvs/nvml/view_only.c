/* The view-only registration: a program that asks NVML for memory but never used CUDA has no
 * client thread, so the querying thread itself connects, sends REGISTER with REG_VIEW_ONLY and
 * reads LIMITS and REGISTERED; the connection stays open, and each later query reads what came
 * since (a new LIMITS) without blocking. No lock machinery starts and nothing is ever printed
 * but GEMSHARE_DEBUG lines: nvidia-smi's output must stay its own. */
#define _GNU_SOURCE
#include "nvml/view_only.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/process.h"
#include "gate/registration.h"
#include "wire/conn.h"

static struct gs_view {
    pthread_mutex_t mu; /* one query at a time talks to the scheduler */
    struct gs_conn conn;
    bool registering;  /* REGISTER sent, REGISTERED not come yet */
    int64_t register_deadline;
    bool limits_heard; /* LIMITS came on this connection */
    bool waited;       /* the first query waited for its answer; later ones never do */
    bool never;        /* no scheduler to ask: this process is it, or the socket path is bad */
} gs_view = {.mu = PTHREAD_MUTEX_INITIALIZER, .conn = GS_CONN_INITIAL};

static pthread_once_t gs_view_once = PTHREAD_ONCE_INIT;

static void gs_view_after_fork_child(void)
{
    /* The child registers on its own; only the forking thread runs in it. */
    if (gs_view.conn.sock >= 0)
        close(gs_view.conn.sock);
    bool never = gs_view.never;
    gs_view = (struct gs_view){.mu = PTHREAD_MUTEX_INITIALIZER, .conn = GS_CONN_INITIAL,
                               .never = never};
}

static void gs_view_setup(void)
{
    pthread_atfork(NULL, NULL, gs_view_after_fork_child);
}

static void gs_view_frame(void *arg, const struct gs_header *h, const uint8_t *payload)
{
    struct gs_view *v = arg;
    struct gs_limits limits;
    switch (h->type) {
    case GS_MSG_LIMITS:
        memcpy(&limits, payload, sizeof limits);
        v->limits_heard = true;
        gs_memory_set_limit((struct gs_memory_limit){limits.memory_limit, limits.budget_used});
        break;
    case GS_MSG_REGISTERED:
        if (!v->registering) {
            gs_conn_fail(&v->conn, "a second REGISTERED");
            break;
        }
        /* LIMITS comes before REGISTERED when a limit applies: none means none. */
        if (!v->limits_heard)
            gs_memory_set_limit((struct gs_memory_limit){0, 0});
        v->registering = false;
        gs_conn_reset_backoff(&v->conn);
        gs_debug("NVML: registered view-only with the scheduler at %s",
                 gs_config()->socket_path);
        break;
    case GS_MSG_ERROR:
        gs_conn_fail(&v->conn, "the scheduler answered with an error");
        break;
    default:
        break; /* about locks, which a view-only client never takes */
    }
}

/* Whether this process listens on the scheduler's socket (given to it by systemd or bound by
 * itself): with libnvs in /etc/ld.so.preload, the scheduler's own NVML queries must never wait
 * for an answer from the scheduler. */
static bool gs_listens_on(const char *path)
{
    DIR *fds = opendir("/proc/self/fd");
    if (fds == NULL)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(fds)) != NULL;) {
        int fd = atoi(e->d_name), listening = 0;
        socklen_t len = sizeof listening;
        struct sockaddr_un addr;
        socklen_t addr_len = sizeof addr;
        found = e->d_name[0] != '.' &&
                getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
                getsockname(fd, (struct sockaddr *)&addr, &addr_len) == 0 &&
                addr.sun_family == AF_UNIX && addr_len > sizeof addr.sun_family &&
                strncmp(addr.sun_path, path, sizeof addr.sun_path) == 0;
    }
    closedir(fds);
    return found;
}

static void gs_view_connect(struct gs_view *v, int64_t now)
{
    const struct gs_config *cfg = gs_config();
    char why[128];
    if (cfg->socket_too_long || gs_listens_on(cfg->socket_path)) {
        v->never = true;
        gs_debug("NVML: %s: the card is shown as it is",
                 cfg->socket_too_long ? "GEMSHARE_SOCKET is too long"
                                      : "this process is the scheduler");
        return;
    }
    if (!gs_conn_open(&v->conn, cfg->socket_path, why, sizeof why)) {
        gs_debug("NVML: no scheduler at %s (%s)", cfg->socket_path, why);
        gs_conn_close(&v->conn, now);
        return;
    }
    struct gs_register m = {.device = 0, .flags = GS_REG_VIEW_ONLY};
    gs_process_describe(&m);
    v->registering = true;
    v->limits_heard = false;
    v->register_deadline = now + cfg->scheduler_timeout_ms;
    gs_conn_send(&v->conn, GS_MSG_REGISTER, &m, sizeof m);
}

/* Until REGISTERED, the connection breaks, or the deadline. */
static void gs_view_wait_registered(struct gs_view *v)
{
    while (v->conn.sock >= 0 && !v->conn.broken && v->registering) {
        int64_t left = v->register_deadline - gs_now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {v->conn.sock, POLLIN, 0};
        if (poll(&p, 1, left > 60000 ? 60000 : (int)left) > 0)
            gs_conn_receive(&v->conn, gs_view_frame, v);
    }
}

static void gs_view_close(struct gs_view *v, int64_t now)
{
    if (v->conn.sock < 0)
        return;
    gs_debug("NVML: view-only connection closed (%s)",
             v->conn.broken ? v->conn.failure : "the CUDA client registers instead");
    gs_conn_close(&v->conn, now);
    v->registering = false;
}

static void gs_view_update(struct gs_view *v)
{
    int64_t now = gs_now_ms();
    if (v->conn.sock >= 0)
        gs_conn_receive(&v->conn, gs_view_frame, v);
    if (v->conn.sock >= 0 && v->registering && now >= v->register_deadline)
        gs_conn_fail(&v->conn, "no answer to REGISTER");
    if (v->conn.broken)
        gs_view_close(v, now); /* the limit stays until a registration says otherwise */
    if (v->conn.sock < 0 && !v->never && now >= v->conn.next_retry)
        gs_view_connect(v, now);
    if (!v->waited) {
        v->waited = true;
        gs_view_wait_registered(v);
        if (v->registering)
            gs_debug("NVML: the scheduler did not answer within %u ms; the card is shown as it "
                     "is until it does",
                     gs_config()->scheduler_timeout_ms);
    }
}

struct gs_memory_limit gs_nvml_terms(void)
{
    pthread_once(&gs_view_once, gs_view_setup);
    bool cuda_client = gs_registration_expected();
    pthread_mutex_lock(&gs_view.mu);
    if (cuda_client)
        gs_view_close(&gs_view, gs_now_ms()); /* one registration per process */
    else
        gs_view_update(&gs_view);
    pthread_mutex_unlock(&gs_view.mu);
    if (cuda_client)
        gs_registration_wait_first_attempt(); /* a limit sent at registration is the answer's */
    return gs_memory_limit();
}
