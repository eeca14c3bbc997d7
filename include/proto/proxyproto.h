/* proxyproto.h: PROXY protocol v1 (text) and v2 (binary) header parser, for a proxy behind a balancer. */
#ifndef MTPROXY_PROTO_PROXYPROTO_H
#define MTPROXY_PROTO_PROXYPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * v1 (at most 107 bytes, ASCII, one line):
 *   "PROXY TCP4 SRC DST SPORT DPORT\r\n" | "PROXY TCP6 ..." | "PROXY UNKNOWN[ anything]\r\n"
 * v2:
 *   0  12  signature 0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A
 *  12   1  version (high nibble, must be 2) | command (low: 0 LOCAL, 1 PROXY)
 *  13   1  family (high: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX) | transport (low: 0 UNSPEC,
 *          1 STREAM, 2 DGRAM)
 *  14   2  length L of what follows, big-endian
 *  16   L  addresses: INET 4+4+2+2, INET6 16+16+2+2, UNIX 108+108; then TLVs (skipped)
 */
#define PROXYPROTO_V1_MAX 107
#define PROXYPROTO_V2_MAX (16 + 65535)
#define PROXYPROTO_MIN 16 /* bytes that always tell v1 from v2 from neither */

enum proxyproto_status { PROXYPROTO_OK = 0, PROXYPROTO_NEED_MORE = 1, PROXYPROTO_BAD = -1 };

enum proxyproto_kind {
    PROXYPROTO_PROXIED = 0, /* a client's addresses: src is the real client */
    PROXYPROTO_LOCAL,       /* v2 LOCAL: the balancer's own connection (health check) */
    PROXYPROTO_UNKNOWN,     /* v1 UNKNOWN, or v2 PROXY of a family/transport not TCP over
                             * IPv4/IPv6 (UNIX, UDP, UNSPEC): no usable address */
};

struct proxyproto_result {
    size_t consumed; /* header length: the client's own bytes start here */
    size_t need;     /* NEED_MORE: total bytes to have before calling again (>= len + 1) */
    int version;     /* 1 or 2 */
    enum proxyproto_kind kind;
    struct sockaddr_storage src, dst; /* PROXIED: AF_INET or AF_INET6 with port */
    const char *why; /* BAD: what was wrong (a static string) */
};

/* Parses a PROXY header at buf[0..len). max_v2 caps a v2 header's total length (TLVs
 * included; a balancer sends a few hundred bytes at most): longer is BAD. Returns OK (out
 * filled), NEED_MORE (out->need) or BAD (out->why) as soon as the bytes cannot start a valid
 * header. Reads only buf[0..len). */
enum proxyproto_status proxyproto_parse(const uint8_t *buf, size_t len, size_t max_v2,
                                        struct proxyproto_result *out);

#endif
