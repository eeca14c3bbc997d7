/* tlsclient.h: the client side of FakeTLS as Telegram's apps speak it, for the test client. */
#ifndef MTPROXY_TESTS_TOOLS_TLSCLIENT_H
#define MTPROXY_TESTS_TOOLS_TLSCLIENT_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "crypto/crypto.h"

/*
 * Written from the facts of tdlib's td/mtproto/TlsInit.cpp (shared/PROTOCOL.md section 3),
 * independently of the proxy's parser in src/proto/faketls.c, so each checks the other.
 *
 * ClientHello record (every length big-endian; G(i) = GREASE value i, written twice):
 *
 *   16 03 01 LLLL                        record header (one record, cut later if asked)
 *   01 00 LLLL                           ClientHello, u24 length
 *   03 03 | random (32) | 20 | sid (32)  random zero while signing, at offset 11
 *   00 20 | G(0) | 15 suites             1301 1302 1303 c02b c02f c02c c030 cca9 cca8 c013
 *                                         c014 009c 009d 002f 0035
 *   01 00                                compression: null
 *   LLLL extensions:
 *     G(2) 00 00                         empty GREASE extension
 *     16 extensions in random order      SNI, status_request, supported_groups (G(4) 11ec
 *                                         001d 0017 0018), ec_point_formats, sig_algs, ALPN
 *                                         (h2, http/1.1), SCT, EMS, compress_certificate,
 *                                         session_ticket, supported_versions (G(6) 0304 0303),
 *                                         psk_modes, key_share, application_settings, ECH,
 *                                         renegotiation_info
 *     G(3) 00 01 00                      one-byte GREASE extension
 *     [00 15 LLLL zeros]                 padding, only when the hello is under 513 bytes
 *
 *   key_share: 00 33 04 ef | 04 ed | G(4) 00 01 00
 *                                 | 11 ec 04 c0 <1184-byte ML-KEM-768 key> <32-byte x25519>
 *                                 | 00 1d 00 20 <32-byte x25519>
 *
 * Signing: mac = HMAC-SHA256(key16, record with the random zeroed); the random is mac with
 * its last 4 bytes XORed with the unix time (int32 little-endian).
 */

#define TLSC_HELLO_MAX 4096
#define TLSC_CLIENT_RECORD 2878 /* tdlib's MAX_TLS_PACKET_LENGTH: client record payload cap */
#define TLSC_SERVER_RECORD_MAX 16384
#define TLSC_RANDOM_OFF 11

/* A growing byte string with nested u16 length scopes. */
struct tlsc_buf {
    uint8_t *p;
    size_t len, cap;
    size_t scope[8];
    int nscope;
    bool bad;
};

static inline void tlsc_put(struct tlsc_buf *b, const void *d, size_t n) {
    if (b->bad || b->len + n > b->cap) {
        b->bad = true;
        return;
    }
    if (d)
        memcpy(b->p + b->len, d, n);
    else
        memset(b->p + b->len, 0, n);
    b->len += n;
}

/* Appends bytes written as hex digits (spaces ignored). */
static inline void tlsc_hex(struct tlsc_buf *b, const char *hex) {
    for (const char *h = hex; *h;) {
        if (*h == ' ') {
            h++;
            continue;
        }
        unsigned v = 0;
        if (sscanf(h, "%2x", &v) != 1) {
            b->bad = true;
            return;
        }
        uint8_t c = (uint8_t)v;
        tlsc_put(b, &c, 1);
        h += 2;
    }
}

static inline void tlsc_random(struct tlsc_buf *b, size_t n) {
    if (b->bad || b->len + n > b->cap || crypto_random(b->p + b->len, n) != 0) {
        b->bad = true;
        return;
    }
    b->len += n;
}

static inline void tlsc_grease(struct tlsc_buf *b, const uint8_t *grease, int i) {
    uint8_t g[2] = {grease[i], grease[i]};
    tlsc_put(b, g, 2);
}

/* Opens a u16 length scope (its two bytes are filled by tlsc_close). */
static inline void tlsc_open(struct tlsc_buf *b) {
    if (b->nscope == 8) {
        b->bad = true;
        return;
    }
    b->scope[b->nscope++] = b->len;
    tlsc_put(b, NULL, 2);
}

static inline void tlsc_close(struct tlsc_buf *b) {
    if (b->bad || b->nscope == 0) {
        b->bad = true;
        return;
    }
    size_t at = b->scope[--b->nscope], n = b->len - at - 2;
    b->p[at] = (uint8_t)(n >> 8);
    b->p[at + 1] = (uint8_t)n;
}

/* Seven GREASE bytes 0x?a, neighbours (0,1), (2,3), (4,5) distinct. */
static inline int tlsc_grease_init(uint8_t g[7]) {
    if (crypto_random(g, 7) != 0)
        return -1;
    for (int i = 0; i < 7; i++)
        g[i] = (uint8_t)((g[i] & 0xf0) | 0x0a);
    for (int i = 1; i < 7; i += 2)
        if (g[i] == g[i - 1])
            g[i] ^= 0x10;
    return 0;
}

/* An ML-KEM-768 encapsulation key look-alike: 256*3 coefficients < 3329 packed 12 bits each,
 * then a 32-byte seed. */
static inline void tlsc_mlkem_key(struct tlsc_buf *b) {
    for (int i = 0; i < 384 && !b->bad; i++) {
        uint32_t r[2];
        if (crypto_random(r, sizeof(r)) != 0) {
            b->bad = true;
            return;
        }
        uint32_t x = r[0] % 3329, y = r[1] % 3329;
        uint8_t t[3] = {(uint8_t)x, (uint8_t)((x >> 8) | ((y & 15) << 4)), (uint8_t)(y >> 4)};
        tlsc_put(b, t, 3);
    }
    tlsc_random(b, 32);
}

static inline void tlsc_x25519(struct tlsc_buf *b) {
    uint8_t k[32];
    if (crypto_x25519_public(k) != 0) {
        b->bad = true;
        return;
    }
    tlsc_put(b, k, 32);
}

/* Writes the extensions tdlib permutes, each one its own piece, then shuffles the pieces into
 * out. */
static inline void tlsc_extensions(struct tlsc_buf *out, const uint8_t *grease, const char *sni) {
    uint8_t scratch[3072];
    struct tlsc_buf e = {.p = scratch, .cap = sizeof(scratch)};
    size_t start[16], end[16];
    int n = 0;
#define TLSC_EXT(body)                                                                             \
    do {                                                                                           \
        start[n] = e.len;                                                                          \
        body;                                                                                      \
        end[n++] = e.len;                                                                          \
    } while (0)
    TLSC_EXT({
        tlsc_hex(&e, "0000");
        tlsc_open(&e);
        tlsc_open(&e);
        tlsc_hex(&e, "00");
        tlsc_open(&e);
        tlsc_put(&e, sni, strlen(sni));
        tlsc_close(&e);
        tlsc_close(&e);
        tlsc_close(&e);
    });
    TLSC_EXT(tlsc_hex(&e, "0005 0005 01 0000 0000"));
    TLSC_EXT({
        tlsc_hex(&e, "000a 000c 000a");
        tlsc_grease(&e, grease, 4);
        tlsc_hex(&e, "11ec 001d 0017 0018");
    });
    TLSC_EXT(tlsc_hex(&e, "000b 0002 01 00"));
    TLSC_EXT(tlsc_hex(&e, "000d 0012 0010 0403 0804 0401 0503 0805 0501 0806 0601"));
    TLSC_EXT(tlsc_hex(&e, "0010 000e 000c 02 6832 08 687474702f312e31"));
    TLSC_EXT(tlsc_hex(&e, "0012 0000"));
    TLSC_EXT(tlsc_hex(&e, "0017 0000"));
    TLSC_EXT(tlsc_hex(&e, "001b 0003 02 0002"));
    TLSC_EXT(tlsc_hex(&e, "0023 0000"));
    TLSC_EXT({
        tlsc_hex(&e, "002b 0007 06");
        tlsc_grease(&e, grease, 6);
        tlsc_hex(&e, "0304 0303");
    });
    TLSC_EXT(tlsc_hex(&e, "002d 0002 01 01"));
    TLSC_EXT({
        tlsc_hex(&e, "0033 04ef 04ed");
        tlsc_grease(&e, grease, 4);
        tlsc_hex(&e, "0001 00 11ec 04c0");
        tlsc_mlkem_key(&e);
        tlsc_x25519(&e);
        tlsc_hex(&e, "001d 0020");
        tlsc_x25519(&e);
    });
    TLSC_EXT(tlsc_hex(&e, "44cd 0005 0003 02 6832"));
    TLSC_EXT({
        uint8_t r = 0;
        crypto_random(&r, 1);
        tlsc_hex(&e, "fe0d");
        tlsc_open(&e);
        tlsc_hex(&e, "0000 0100 01");
        tlsc_random(&e, 1);
        tlsc_hex(&e, "0020");
        tlsc_random(&e, 32);
        tlsc_open(&e);
        tlsc_random(&e, 144 + 32 * (size_t)(r % 4));
        tlsc_close(&e);
        tlsc_close(&e);
    });
    TLSC_EXT(tlsc_hex(&e, "ff01 0001 00"));
#undef TLSC_EXT
    if (e.bad) {
        out->bad = true;
        return;
    }
    int order[16];
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        uint32_t r = 0;
        crypto_random(&r, sizeof(r));
        int j = (int)(r % (uint32_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < n; i++)
        tlsc_put(out, scratch + start[order[i]], end[order[i]] - start[order[i]]);
}

/*
 * Builds and signs one ClientHello record into out (cap >= TLSC_HELLO_MAX). key is the 16-byte
 * secret the HMAC is keyed with, sni the server name, unix_time the stamped time.
 * Returns the record length, or 0 on failure.
 */
static inline size_t tlsc_build_hello(uint8_t *out, size_t cap, const uint8_t key[16],
                                      const char *sni, uint32_t unix_time) {
    uint8_t grease[7];
    struct tlsc_buf b = {.p = out, .cap = cap};
    if (tlsc_grease_init(grease) != 0)
        return 0;
    tlsc_hex(&b, "160301");
    tlsc_open(&b);         /* record */
    tlsc_hex(&b, "01 00"); /* ClientHello, high byte of the u24 length */
    tlsc_open(&b);         /* message */
    tlsc_hex(&b, "0303");
    tlsc_put(&b, NULL, 32); /* random: zero while signing */
    tlsc_hex(&b, "20");
    tlsc_random(&b, 32); /* session id */
    tlsc_hex(&b, "0020");
    tlsc_grease(&b, grease, 0);
    tlsc_hex(&b, "1301 1302 1303 c02b c02f c02c c030 cca9 cca8 c013 c014 009c 009d 002f 0035");
    tlsc_hex(&b, "01 00");
    tlsc_open(&b); /* extensions */
    tlsc_grease(&b, grease, 2);
    tlsc_hex(&b, "0000");
    tlsc_extensions(&b, grease, sni);
    tlsc_grease(&b, grease, 3);
    tlsc_hex(&b, "0001 00");
    if (!b.bad && b.len < 513) { /* tdlib pads short hellos to 517 bytes */
        size_t pad = 513 - b.len;
        tlsc_hex(&b, "0015");
        tlsc_open(&b);
        tlsc_put(&b, NULL, pad);
        tlsc_close(&b);
    }
    tlsc_close(&b);
    tlsc_close(&b);
    tlsc_close(&b);
    if (b.bad || b.nscope != 0)
        return 0;
    uint8_t mac[CRYPTO_SHA256_LEN];
    crypto_hmac_sha256(key, 16, out, b.len, mac);
    for (int i = 0; i < 4; i++)
        mac[28 + i] ^= (uint8_t)(unix_time >> (8 * i));
    memcpy(out + TLSC_RANDOM_OFF, mac, 32);
    return b.len;
}

/* Cuts a one-record hello (rec, len) into nrec records `16 03 01 LLLL` of near-equal size
 * (what DPI-evasion tools do). Returns the new length written to out, or 0 if nrec does not
 * fit. */
static inline size_t tlsc_cut_hello(const uint8_t *rec, size_t len, int nrec, uint8_t *out,
                                    size_t cap) {
    size_t msg = len - 5, off = 0, o = 0;
    if (nrec < 1 || (size_t)nrec > msg || len + 5 * (size_t)nrec > cap)
        return 0;
    for (int i = 0; i < nrec; i++) {
        size_t n = msg / (size_t)nrec + ((size_t)i < msg % (size_t)nrec ? 1 : 0);
        out[o++] = 0x16;
        out[o++] = 0x03;
        out[o++] = 0x01;
        out[o++] = (uint8_t)(n >> 8);
        out[o++] = (uint8_t)n;
        memcpy(out + o, rec + 5 + off, n);
        o += n;
        off += n;
    }
    return o;
}

/*
 * Checks the proxy's answer the way tdlib does: resp[0..len) must be exactly
 *   16 03 03 LLLL <skip> | 14 03 03 00 01 01 | 17 03 03 LLLL <skip>
 * and HMAC-SHA256(key, client_random || resp with bytes 11..43 zeroed) must equal those bytes.
 * Returns 0 if so, -1 with a reason in why.
 */
static inline int tlsc_check_server_hello(const uint8_t *resp, size_t len, const uint8_t key[16],
                                          const uint8_t client_random[32], char *why,
                                          size_t whylen) {
    static const uint8_t ccs_app[9] = {0x14, 0x03, 0x03, 0x00, 0x01, 0x01, 0x17, 0x03, 0x03};
    if (len < 5 || memcmp(resp, "\x16\x03\x03", 3) != 0) {
        snprintf(why, whylen, "not a 16 03 03 record");
        return -1;
    }
    size_t sh = 5 + ((size_t)resp[3] << 8 | resp[4]);
    if (sh < TLSC_RANDOM_OFF + 32 || len < sh + 11 || memcmp(resp + sh, ccs_app, 9) != 0) {
        snprintf(why, whylen, "no 14 03 03 00 01 01 17 03 03 after the ServerHello");
        return -1;
    }
    size_t app = (size_t)resp[sh + 9] << 8 | resp[sh + 10];
    if (len != sh + 11 + app) {
        snprintf(why, whylen, "answer is %zu bytes, records say %zu", len, sh + 11 + app);
        return -1;
    }
    uint8_t zero[32] = {0}, mac[CRYPTO_SHA256_LEN];
    struct crypto_span sp[4] = {{client_random, 32},
                                {resp, TLSC_RANDOM_OFF},
                                {zero, 32},
                                {resp + TLSC_RANDOM_OFF + 32, len - TLSC_RANDOM_OFF - 32}};
    crypto_hmac_sha256_spans(key, 16, sp, 4, mac);
    if (!crypto_memeq(mac, resp + TLSC_RANDOM_OFF, 32)) {
        snprintf(why, whylen, "server random is not the digest");
        return -1;
    }
    return 0;
}

/* Wraps n payload bytes into records of at most TLSC_CLIENT_RECORD bytes (after a CCS record
 * if *ccs_pending, which is then cleared). out needs tlsc_framed_len(n) bytes. */
static inline size_t tlsc_framed_len(size_t n) {
    return 6 + n + 5 * ((n + TLSC_CLIENT_RECORD - 1) / TLSC_CLIENT_RECORD);
}

static inline size_t tlsc_frame(const uint8_t *in, size_t n, bool *ccs_pending, uint8_t *out) {
    size_t o = 0;
    if (*ccs_pending) {
        memcpy(out, "\x14\x03\x03\x00\x01\x01", 6);
        o = 6;
        *ccs_pending = false;
    }
    for (size_t off = 0; off < n;) {
        size_t k = n - off < TLSC_CLIENT_RECORD ? n - off : TLSC_CLIENT_RECORD;
        out[o++] = 0x17;
        out[o++] = 0x03;
        out[o++] = 0x03;
        out[o++] = (uint8_t)(k >> 8);
        out[o++] = (uint8_t)k;
        memcpy(out + o, in + off, k);
        o += k;
        off += k;
    }
    return o;
}

/* Reader of the records the proxy sends after its ServerHello: only 17 03 03 with 1..16384
 * payload bytes are legal (tdlib closes the connection on anything else). */
struct tlsc_in {
    uint8_t hdr[5];
    unsigned hdr_len;
    uint32_t left;
    uint64_t records;
    uint32_t max_payload;
    bool bad;
    char why[96];
};

/* Strips record headers from buf[0..n) in place; *out = payload bytes now at buf[0..*out).
 * Returns 0, or -1 (sticky) on an illegal record. */
static inline int tlsc_in_feed(struct tlsc_in *t, uint8_t *buf, size_t n, size_t *out) {
    size_t w = 0;
    *out = 0;
    if (t->bad)
        return -1;
    for (size_t i = 0; i < n;) {
        if (t->left == 0) {
            t->hdr[t->hdr_len++] = buf[i++];
            if (t->hdr_len < 5)
                continue;
            uint32_t len = (uint32_t)t->hdr[3] << 8 | t->hdr[4];
            t->hdr_len = 0;
            t->records++;
            if (t->hdr[0] != 0x17 || t->hdr[1] != 3 || t->hdr[2] != 3) {
                snprintf(t->why, sizeof(t->why), "record %" PRIu64 " header %02x %02x %02x",
                         t->records, t->hdr[0], t->hdr[1], t->hdr[2]);
                t->bad = true;
                return -1;
            }
            if (len == 0 || len > TLSC_SERVER_RECORD_MAX) {
                snprintf(t->why, sizeof(t->why), "record %" PRIu64 " payload %u (limit %d)",
                         t->records, len, TLSC_SERVER_RECORD_MAX);
                t->bad = true;
                return -1;
            }
            if (len > t->max_payload)
                t->max_payload = len;
            t->left = len;
            continue;
        }
        size_t k = n - i < t->left ? n - i : t->left;
        memmove(buf + w, buf + i, k);
        w += k;
        i += k;
        t->left -= (uint32_t)k;
    }
    *out = w;
    return 0;
}

#endif
