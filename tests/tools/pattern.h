/* pattern.h: the test protocol shared by fake_dc and test_client (byte layouts + data pattern). */
#ifndef MTPROXY_TESTS_TOOLS_PATTERN_H
#define MTPROXY_TESTS_TOOLS_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * Test protocol, carried inside the obfuscated2 stream after the 64-byte header (all
 * integers little-endian):
 *
 *   client -> DC request (36 bytes):
 *     "MTPXTEST" | u32 version=1 | u64 up_bytes | u64 down_bytes | u32 seed | u32 flags
 *   DC -> client hello (20 bytes):
 *     "FDCHELLO" | u32 listener id | u32 tag seen by the DC | i16 dc field | u16 0
 *   if flags bit 1 (GO): client -> DC one byte 'G' when it wants the transfer to start
 *   then, at the same time: client -> DC up_bytes of P(seed, UP),
 *                           DC -> client down_bytes of P(seed, DOWN)
 *   DC -> client trailer (20 bytes), once both directions are done:
 *     "FDCDONE\0" | u64 up bytes verified ok | u32 first mismatch offset or 0xffffffff
 *   then the DC half-closes (or resets, if flags bit 0) and the client closes.
 *
 * P(seed, dir) is splitmix64 (Steele/Lea/Flood 2014): state starts at
 * (seed << 32 | dir) * golden; each step adds the golden gamma, mixes, and emits the 8-byte
 * result little-endian. Byte i of the stream is byte (i % 8) of step (i / 8).
 */
#define TP_MAGIC "MTPXTEST"
#define TP_HELLO_MAGIC "FDCHELLO"
#define TP_DONE_MAGIC "FDCDONE"
#define TP_VERSION 1u
#define TP_REQ_LEN 36
#define TP_HELLO_LEN 20
#define TP_DONE_LEN 20
#define TP_FLAG_RST 1u
#define TP_FLAG_GO 2u
#define TP_NO_MISMATCH 0xffffffffu

#define TP_DIR_UP 0x7570u   /* "up" */
#define TP_DIR_DOWN 0x646fu /* "do" */

#define TP_GOLDEN 0x9e3779b97f4a7c15ull

struct pattern {
    uint64_t state;
    uint8_t block[8];
    unsigned used; /* bytes of block already consumed; 8 = need a new step */
};

static inline uint64_t pattern_next64(uint64_t *state) {
    uint64_t z = (*state += TP_GOLDEN);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void pattern_init(struct pattern *p, uint32_t seed, uint32_t dir) {
    p->state = (((uint64_t)seed << 32) | dir) * TP_GOLDEN;
    p->used = 8;
}

static inline void pattern_refill(struct pattern *p) {
    uint64_t v = pattern_next64(&p->state);
    for (int i = 0; i < 8; i++)
        p->block[i] = (uint8_t)(v >> (8 * i));
    p->used = 0;
}

/* Writes the next len bytes of the stream to out. */
static inline void pattern_fill(struct pattern *p, uint8_t *out, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (p->used == 8) {
            if (len - i >= 8) {
                uint64_t v = pattern_next64(&p->state);
                for (int k = 0; k < 8; k++)
                    out[i + k] = (uint8_t)(v >> (8 * k));
                i += 8;
                continue;
            }
            pattern_refill(p);
        }
        out[i++] = p->block[p->used++];
    }
}

/* Compares in[0..len) with the next len bytes of the stream (consuming them). Returns the
 * index of the first differing byte, or -1 if all match. */
static inline long pattern_check(struct pattern *p, const uint8_t *in, size_t len) {
    uint8_t tmp[4096];
    size_t done = 0;
    long bad = -1;
    while (done < len) {
        size_t n = len - done < sizeof(tmp) ? len - done : sizeof(tmp);
        pattern_fill(p, tmp, n);
        if (bad < 0 && memcmp(tmp, in + done, n) != 0) {
            for (size_t k = 0; k < n; k++) {
                if (tmp[k] != in[done + k]) {
                    bad = (long)(done + k);
                    break;
                }
            }
        }
        done += n;
    }
    return bad;
}

static inline void tp_put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void tp_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void tp_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t tp_get16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t tp_get32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t tp_get64(const uint8_t *p) {
    return (uint64_t)tp_get32(p) | ((uint64_t)tp_get32(p + 4) << 32);
}

#endif
