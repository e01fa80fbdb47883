/* The scheduler connection's socket work. */
#define _GNU_SOURCE
#include "wire/conn.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

void gs_conn_fail(struct gs_conn *c, const char *why)
{
    if (!c->broken)
        snprintf(c->failure, sizeof c->failure, "%s", why);
    c->broken = true;
}

bool gs_conn_open(struct gs_conn *c, const char *path, char *why, size_t why_size)
{
    c->broken = false;
    c->reached = false;
    c->rlen = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_size, "cannot create a socket: %s", strerror(errno));
        return false;
    }
    struct timeval send_timeout = {GS_CONN_SEND_TIMEOUT_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strnlen(path, sizeof addr.sun_path - 1));
    int r;
    do
        r = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    while (r < 0 && errno == EINTR);
    c->sock = fd;
    if (r < 0) {
        snprintf(why, why_size, "%s", strerror(errno));
        return false;
    }
    c->reached = true;
    return true;
}

bool gs_conn_send(struct gs_conn *c, uint16_t type, const void *payload, uint32_t len)
{
    if (c->sock < 0 || c->broken)
        return false;
    uint8_t frame[sizeof(struct gs_header) + sizeof(struct gs_register)];
    if (len > sizeof frame - sizeof(struct gs_header)) {
        gs_conn_fail(c, "a frame too large to send");
        return false;
    }
    size_t n = gs_wire_frame(frame, type, ++c->seq, payload, len);
    for (size_t off = 0; off < n;) {
        ssize_t w = send(c->sock, frame + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            char why[96];
            snprintf(why, sizeof why, "sending failed: %s", strerror(errno));
            gs_conn_fail(c, why);
            return false;
        }
        off += (size_t)w;
    }
    return true;
}

void gs_conn_receive(struct gs_conn *c, gs_frame_handler handle, void *arg)
{
    if (c->sock < 0 || c->broken)
        return;
    ssize_t n = recv(c->sock, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        gs_conn_fail(c, n == 0 ? "the scheduler closed the connection" : strerror(errno));
        return;
    }
    c->rlen += (size_t)n;
    size_t off = 0;
    while (c->sock >= 0 && !c->broken && c->rlen - off >= sizeof(struct gs_header)) {
        struct gs_header h;
        memcpy(&h, c->rbuf + off, sizeof h);
        const char *bad = gs_wire_check_header(&h);
        if (bad) {
            char why[128];
            snprintf(why, sizeof why, "protocol error from the scheduler: %s", bad);
            gs_conn_fail(c, why);
            return;
        }
        if (c->rlen - off < sizeof h + h.length)
            break;
        handle(arg, &h, c->rbuf + off + sizeof h);
        off += sizeof h + h.length;
    }
    if (c->sock < 0 || c->broken)
        return;
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
}

void gs_conn_close(struct gs_conn *c, int64_t now_ms)
{
    if (c->sock >= 0)
        close(c->sock);
    c->sock = -1;
    c->rlen = 0;
    c->broken = false;
    int cap = c->reached ? GS_CONN_RETRY_MAX_MS : GS_CONN_ABSENT_RETRY_MAX_MS;
    c->next_retry = now_ms + (c->retry_ms < cap ? c->retry_ms : cap);
    c->retry_ms = c->retry_ms * 2 > GS_CONN_RETRY_MAX_MS ? GS_CONN_RETRY_MAX_MS : c->retry_ms * 2;
}

void gs_conn_reset_backoff(struct gs_conn *c)
{
    c->retry_ms = GS_CONN_RETRY_FIRST_MS;
}
