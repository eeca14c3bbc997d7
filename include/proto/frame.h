/* frame.h: MTProto transport framings of clients (abridged, intermediate, padded). */
#ifndef MTPROXY_PROTO_FRAME_H
#define MTPROXY_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

/*
 * Client packets after the obfuscated2 header (PROTOCOL.md 7), by the header's tag:
 *
 *   abridged (ef):     +---------+-------------+     q = quick-ack request (bit 7)
 *                      |q| n<7f  | n*4 bytes   |     n = 7f: the next 3 bytes LE are n
 *                      +---------+-------------+         (a long form holding n < 7f is bad)
 *   intermediate (ee): +--------------+--------+     len: u32 LE, bit 31 = quick-ack request,
 *                      | len (u32 LE) | len B  |     a multiple of 4
 *                      +--------------+--------+
 *   padded (dd):       as intermediate, len counts 0..15 random trailing bytes; the packet
 *                      is the first len & ~3 bytes.
 *
 * Toward the client the same framings; a quick-ack token is 4 bytes with no length (abridged:
 * big-endian, intermediate and padded: little-endian; bit 31 set in both).
 */
#define FRAME_MAX_LEN (1u << 24) /* largest packet accepted from a client */

enum frame_status { FRAME_OK = 0, FRAME_NEED_MORE = 1, FRAME_BAD = -1 };

/* One parsed client packet. */
struct frame {
    size_t hdr_len; /* bytes of the length header */
    size_t len;     /* bytes of the packet (padding stripped) */
    size_t total;   /* bytes the whole frame takes: header, packet, padding */
    int quickack;   /* the client asked for a quick ack */
};

/* Parses the frame at p[0..n) in the framing of tag (OBFS2_TAG_*). FRAME_OK: *f filled (the
 * packet is p[f->hdr_len .. f->hdr_len + f->len)). FRAME_NEED_MORE: *need (if not NULL) = the
 * bytes the frame needs in all (at least n + 1). FRAME_BAD: an empty or oversized packet, a
 * length that is not a multiple of 4 (abridged, intermediate), an overlong abridged form, or an
 * unknown tag. */
enum frame_status frame_parse(uint32_t tag, const uint8_t *p, size_t n, struct frame *f,
                              size_t *need);

/* Writes the length header for a packet of len bytes (a multiple of 4) followed by pad bytes of
 * padding (padded framing only; 0 otherwise) into out. Returns the header's length (1 or 4), or
 * 0 for an unknown tag or a len that cannot be framed. */
size_t frame_header(uint32_t tag, size_t len, size_t pad, uint8_t out[4]);

/* Writes the 4-byte quick-ack token for confirm (as the ME sent it) in the framing of tag. */
void frame_quickack(uint32_t tag, uint32_t confirm, uint8_t out[4]);

#endif
