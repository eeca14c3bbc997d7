/* rpc.h: the middle-proxy (ME) link: full-transport frames, handshake, KDF, RPC messages,
 * and the proxy-config / proxy-secret files (PROTOCOL.md 6). */
#ifndef MTPROXY_PROTO_RPC_H
#define MTPROXY_PROTO_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/crypto.h"

#define RPC_NONCE 0x7acb87aau
#define RPC_HANDSHAKE 0x7682eef5u
#define RPC_HANDSHAKE_ERROR 0x6a27bedau
#define RPC_PROXY_REQ 0x36cef1eeu
#define RPC_PROXY_ANS 0x4403da0du
#define RPC_CLOSE_CONN 0x1fcf425du
#define RPC_CLOSE_EXT 0x5eb634a2u
#define RPC_SIMPLE_ACK 0x3bac409bu
#define RPC_PING 0x5730a2dfu
#define RPC_PONG 0x8430eaa7u
#define RPC_TL_PROXY_TAG 0xdb1e26aeu

/* RPC_PROXY_REQ flags (PROTOCOL.md 6.5). */
#define RPC_FLAG_NOT_ENCRYPTED 0x2u
#define RPC_FLAG_HAS_AD_TAG 0x8u
#define RPC_FLAG_MAGIC 0x1000u
#define RPC_FLAG_EXTMODE2 0x20000u
#define RPC_FLAG_PAD 0x8000000u
#define RPC_FLAG_INTERMEDIATE 0x20000000u
#define RPC_FLAG_ABRIDGED 0x40000000u
#define RPC_FLAG_QUICKACK 0x80000000u

#define RPC_SEQ_NONCE (-2)
#define RPC_SEQ_HANDSHAKE (-1)
#define RPC_FRAME_OVERHEAD 12          /* len, seq, crc */
#define RPC_FRAME_MAX (1u << 24)       /* largest frame accepted (len field) */
#define RPC_NONCE_LEN 32
#define RPC_HANDSHAKE_LEN 32
#define RPC_PID_LEN 12
#define RPC_AD_TAG_LEN 16
#define RPC_REQ_HDR_MAX 84             /* RPC_PROXY_REQ before the packet, with an ad tag */
#define RPC_SECRET_MIN 32
#define RPC_SECRET_MAX 256

enum rpc_status { RPC_OK = 0, RPC_NEED_MORE = 1, RPC_BAD = -1 };

/* zlib CRC-32 (IEEE) of p[0..n). */
uint32_t rpc_crc32(const void *p, size_t n);

/*
 * A frame ("full" transport, PROTOCOL.md 6.2), all fields little-endian:
 *
 *   +----------+-----------+-------------------+-----------+
 *   | len u32  | seq i32   | payload (len-12)  | crc32 u32 |   crc over len..payload
 *   +----------+-----------+-------------------+-----------+
 *
 * len = 4 alone is a padding word (04 00 00 00) that fills writes to 16-byte blocks.
 */

/* Writes the frame for payload[0..len) (a multiple of 4) with seq into out (len + 12 bytes;
 * payload may already sit at out + 8). Returns len + 12. */
size_t rpc_frame_build(uint8_t *out, int32_t seq, const uint8_t *payload, size_t len);

/* Appends padding words to out[0..n) up to a multiple of 16; returns the new length. */
size_t rpc_frame_pad16(uint8_t *out, size_t n);

struct rpc_frame {
    const uint8_t *payload; /* NULL for a padding word */
    size_t len;             /* payload bytes */
    size_t total;           /* bytes consumed */
};

/* Parses the frame at p[0..n): RPC_OK (a padding word has payload NULL, total 4; else seq
 * must equal want_seq and the CRC match), RPC_NEED_MORE (*need = total bytes wanted), or
 * RPC_BAD with *why (a static string: bad length, wrong seqno, bad crc). */
enum rpc_status rpc_frame_parse(const uint8_t *p, size_t n, int32_t want_seq,
                                struct rpc_frame *f, size_t *need, const char **why);

/* RPC_NONCE: type | key_select | schema (1 = AES) | crypto_ts | nonce[16]. */
struct rpc_nonce {
    uint32_t key_select; /* first 4 bytes of the proxy secret, as stored (LE u32) */
    uint32_t schema;
    uint32_t ts;
    uint8_t nonce[16];
};
void rpc_nonce_build(uint8_t out[RPC_NONCE_LEN], const struct rpc_nonce *n);
/* Returns 0, or -1 if p[0..len) is not an RPC_NONCE. */
int rpc_nonce_parse(const uint8_t *p, size_t len, struct rpc_nonce *n);

/* RPC_HANDSHAKE: type | flags | sender_pid[12] | peer_pid[12]; a pid is ip u32 | port u16 |
 * pid u16 | utime u32. */
void rpc_handshake_build(uint8_t out[RPC_HANDSHAKE_LEN], uint32_t flags,
                         const uint8_t sender[RPC_PID_LEN], const uint8_t peer[RPC_PID_LEN]);
/* Returns 0 (fields filled), -2 for an RPC_HANDSHAKE_ERROR, -1 for anything else. */
int rpc_handshake_parse(const uint8_t *p, size_t len, uint32_t *flags,
                        uint8_t sender[RPC_PID_LEN], uint8_t peer[RPC_PID_LEN]);

/* One end of an ME link for the key derivation: the address as the other end sees it. */
struct rpc_endpoint {
    int v6;
    uint8_t ip[16]; /* network order; IPv4 in ip[0..4) */
    uint16_t port;
};

struct rpc_kdf_in {
    uint8_t nonce_srv[16], nonce_clt[16];
    uint32_t clt_ts;
    struct rpc_endpoint clt, srv; /* clt = the proxy (its public address), srv = the ME */
    const uint8_t *secret;
    size_t secret_len;
};

#define RPC_KDF_MAX (16 * 4 + 4 + 4 + 2 + 6 + 4 + 2 + 32 + RPC_SECRET_MAX)

/* Builds the KDF input string for purpose "CLIENT" or "SERVER" (6 bytes) into s (at least
 * RPC_KDF_MAX bytes). Returns its length. IPv4 addresses enter byte-reversed, ports LE; with
 * IPv6 ends the IPv4 fields are zero and both IPv6 addresses follow the second nonce_srv. */
size_t rpc_kdf_input(const struct rpc_kdf_in *in, const char *purpose, uint8_t *s);

/* key = MD5(s[1..])[0..12] || SHA1(s), iv = MD5(s[2..]). purpose "CLIENT" gives the proxy's
 * write key, "SERVER" its read key. */
void rpc_kdf(const struct rpc_kdf_in *in, const char *purpose, uint8_t key[CRYPTO_KEY_LEN],
             uint8_t iv[CRYPTO_IV_LEN]);

/* An address in an RPC_PROXY_REQ: 16 bytes (IPv4 mapped ::ffff:a.b.c.d) and a u32 port. */
struct rpc_addr {
    uint8_t ip[16];
    uint32_t port;
};

/* Fills a from an IPv4 (4 bytes) or IPv6 (16 bytes) address in network order. */
void rpc_addr_set(struct rpc_addr *a, const uint8_t *ip, int v6, uint16_t port);

/*
 * RPC_PROXY_REQ before the packet (PROTOCOL.md 6.5):
 *   type | flags | conn_id u64 | remote ip[16] | remote port u32 | our ip[16] | our port u32
 *   [ad tag: extra_len u32 (24) | 0xdb1e26ae | 16 | tag[16] | 0 0 0 ]
 * Writes it into out (RPC_REQ_HDR_MAX bytes); flags gain RPC_FLAG_HAS_AD_TAG with a tag.
 * Returns its length (56, or 84 with a tag).
 */
size_t rpc_proxy_req_header(uint8_t *out, uint32_t flags, uint64_t conn_id,
                            const struct rpc_addr *remote, const struct rpc_addr *ours,
                            const uint8_t *ad_tag);

/* The ME side's view of an RPC_PROXY_REQ (fake ME, tests, fuzzing). */
struct rpc_proxy_req {
    uint32_t flags;
    uint64_t conn_id;
    struct rpc_addr remote, ours;
    int has_tag;
    uint8_t ad_tag[RPC_AD_TAG_LEN];
    const uint8_t *data;
    size_t len;
};
/* Returns RPC_OK or RPC_BAD (short, wrong type, malformed extra block). */
enum rpc_status rpc_proxy_req_parse(const uint8_t *p, size_t len, struct rpc_proxy_req *r);

/* A message from the ME (PROTOCOL.md 6.6). */
struct rpc_msg {
    uint32_t type;    /* RPC_PROXY_ANS, RPC_SIMPLE_ACK, RPC_CLOSE_EXT, RPC_CLOSE_CONN, RPC_PING,
                       * RPC_PONG, or another value (unknown: ignore) */
    uint32_t flags;   /* PROXY_ANS */
    uint64_t conn_id; /* all but PING/PONG */
    uint64_t ping_id; /* PING, PONG */
    uint32_t confirm; /* SIMPLE_ACK */
    const uint8_t *data; /* PROXY_ANS: the packet for the client */
    size_t len;
};
/* Returns RPC_OK, or RPC_BAD when p[0..len) is too short for its type (or under 4 bytes). */
enum rpc_status rpc_msg_parse(const uint8_t *p, size_t len, struct rpc_msg *m);

/* type | u64: RPC_CLOSE_CONN / RPC_CLOSE_EXT (conn_id), RPC_PING / RPC_PONG (ping_id).
 * Writes 12 bytes. */
void rpc_msg_u64(uint8_t out[12], uint32_t type, uint64_t v);

/* The proxy config (getProxyConfig): `proxy_for DC ADDR:PORT;` lines, `default DC;`, and
 * `timeout`, `min_connections`, `max_connections`, `proxy` lines (accepted, unused); `#`
 * comments. IPv6 as [ADDR]:PORT. */
#define RPC_CONFIG_MAX 256
struct rpc_config_entry {
    int16_t dc;
    uint8_t v6;
    uint8_t ip[16]; /* network order */
    uint16_t port;
};
struct rpc_config {
    struct rpc_config_entry e[RPC_CONFIG_MAX];
    int n;
    int default_dc; /* 0 = none given */
};

/* Parses text[0..len) (need not be NUL-terminated). Returns 0, or -1 with err =
 * "name:LINE: message" for the first bad line (or "name: message" for a file-wide problem:
 * no proxy_for line, the default DC has none). */
int rpc_config_parse(const char *name, const char *text, size_t len, struct rpc_config *c,
                     char *err, size_t errlen);

/* Checks a proxy secret's size. Returns 0, or -1 with err = "name: message". */
int rpc_secret_check(const char *name, size_t len, char *err, size_t errlen);

#endif
