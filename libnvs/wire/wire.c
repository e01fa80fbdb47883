/* Framing: gemshare_protocol.h's structs are the bytes on the wire on the little-endian
 * machines gemshare supports, so a frame is a header and a memcpy. */
#include "wire/wire.h"

#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");

size_t gs_wire_frame(uint8_t *out, uint16_t type, uint32_t seq, const void *payload, uint32_t len)
{
    struct gs_header h = {GS_MAGIC, GS_VERSION, type, len, seq};
    memcpy(out, &h, sizeof h);
    if (len)
        memcpy(out + sizeof h, payload, len);
    return sizeof h + len;
}

size_t gs_wire_fixed_size(uint16_t type)
{
    switch (type) {
    case GS_MSG_REGISTERED:
        return sizeof(struct gs_registered);
    case GS_MSG_LOCK_GRANTED:
        return sizeof(struct gs_lock_granted);
    case GS_MSG_DROP_LOCK:
        return sizeof(struct gs_drop_lock);
    case GS_MSG_LOCK_REVOKED:
        return sizeof(struct gs_lock_revoked);
    case GS_MSG_SCHED_MODE:
        return sizeof(struct gs_sched_mode);
    case GS_MSG_EVICT:
        return sizeof(struct gs_evict);
    case GS_MSG_IDLE_HINT:
        return sizeof(struct gs_idle_hint);
    case GS_MSG_LIMITS:
        return sizeof(struct gs_limits);
    case GS_MSG_PONG:
        return sizeof(struct gs_pong);
    case GS_MSG_MPS:
        return sizeof(struct gs_mps);
    default:
        return 0;
    }
}

const char *gs_wire_check_header(const struct gs_header *h)
{
    if (h->magic != GS_MAGIC)
        return "bad magic";
    if (h->version != GS_VERSION)
        return "unsupported protocol version";
    if (h->type == GS_MSG_ERROR) {
        if (h->length < sizeof(struct gs_error) ||
            h->length > sizeof(struct gs_error) + GS_MAX_ERROR_TEXT)
            return "ERROR frame of a bad size";
        return NULL;
    }
    size_t fixed = gs_wire_fixed_size(h->type);
    if (fixed == 0)
        return "a message type a scheduler does not send to clients";
    if (h->length != fixed)
        return "a payload of the wrong size";
    return NULL;
}
