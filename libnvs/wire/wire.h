/* Frames of the gemshare protocol (docs/protocol.md) as the client sends and receives them. */
#ifndef GS_WIRE_H
#define GS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "wire/gemshare_protocol.h"

/* Largest frame a scheduler sends a client: ERROR with its longest text. */
#define GS_WIRE_MAX_INBOUND (sizeof(struct gs_header) + sizeof(struct gs_error) + GS_MAX_ERROR_TEXT)

/* Writes header and payload into out (room for 16 + len bytes); returns the frame size. */
size_t gs_wire_frame(uint8_t *out, uint16_t type, uint32_t seq, const void *payload, uint32_t len);

/* Checks a received header; NULL if acceptable, else what is wrong with it. */
const char *gs_wire_check_header(const struct gs_header *h);

/* The payload size a fixed-layout message type must have (0 for ERROR, which varies). */
size_t gs_wire_fixed_size(uint16_t type);

#endif
