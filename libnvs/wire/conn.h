/* The connection to gemshare-scheduler: a Unix stream socket, frames out and in, and the backoff
 * between attempts. Knows nothing of what the frames mean. A failed send or read marks the
 * connection broken (with why) rather than acting on it: the client thread notices after the
 * step it is in and fails open in one place. Client thread only. */
#ifndef GS_CONN_H
#define GS_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

/* The pauses between attempts double from the first. Where nobody answered (no socket file, or
 * one nobody listens on yet: a scheduler starting again) they stop growing at the shorter cap,
 * so that a scheduler that starts again, however fast, is found within that long of its socket
 * appearing. A scheduler that took the connection and then closed or refused it is there, and
 * is asked again less often. */
#define GS_CONN_RETRY_FIRST_MS 100
#define GS_CONN_ABSENT_RETRY_MAX_MS 250
#define GS_CONN_RETRY_MAX_MS 1000
/* A scheduler that stops reading (or a full listen backlog) must not hang the client thread. */
#define GS_CONN_SEND_TIMEOUT_MS 5000
/* A scheduler that accepts and never answers REGISTER is given up after this long. */
#define GS_REGISTER_TIMEOUT_MS 2000

struct gs_conn {
    int sock;           /* -1: not connected */
    bool reached;       /* the last attempt connected (a scheduler was there) */
    bool broken;        /* a send or read failed: close it (failure says why) */
    char failure[160];
    uint32_t seq;
    int retry_ms;       /* the pause before the attempt after the next failure */
    int64_t next_retry; /* while not connected: when to try again */
    size_t rlen;
    uint8_t rbuf[2 * GS_WIRE_MAX_INBOUND];
};

#define GS_CONN_INITIAL {.sock = -1, .retry_ms = GS_CONN_RETRY_FIRST_MS}

/* Connects to the socket at path; false with why when it cannot (the socket, if made, is kept in
 * c->sock for gs_conn_close). */
bool gs_conn_open(struct gs_conn *c, const char *path, char *why, size_t why_size);
/* Sends one frame; false (the connection broken) when it cannot. Nothing once broken. */
bool gs_conn_send(struct gs_conn *c, uint16_t type, const void *payload, uint32_t len);

/* Marks the connection broken, with why (kept if it was broken already). */
void gs_conn_fail(struct gs_conn *c, const char *why);

typedef void (*gs_frame_handler)(void *arg, const struct gs_header *h, const uint8_t *payload);
/* Reads what arrived and hands each complete, well-formed frame to handle, in order; stops at
 * once when a handler closes or breaks the connection. A closed connection or a bad header
 * breaks it. */
void gs_conn_receive(struct gs_conn *c, gs_frame_handler handle, void *arg);

/* Closes the socket and sets the next attempt after the backoff, which doubles up to
 * GS_CONN_RETRY_MAX_MS, or GS_CONN_ABSENT_RETRY_MAX_MS when the attempt did not connect. */
void gs_conn_close(struct gs_conn *c, int64_t now_ms);
/* A registration succeeded: the next outage starts again from the first, short pause. */
void gs_conn_reset_backoff(struct gs_conn *c);

#endif
