/* hs_first.c: handshake: the first bytes (FakeTLS, obfuscated2, not a client), PROXY header. */
#include "conn/conn_int.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "proto/proxyproto.h"

/* --- first bytes ------------------------------------------------------------------------- */

/* 1 if the first bytes start a TLS handshake record (16 03 01 or 16 03 03). A plain client's
 * random header does so with probability 2^-23: such a client is fronted, never misread. */
static int looks_tls(const uint8_t *p)
{
    return p[0] == 0x16 && p[1] == 0x03 && (p[2] == 0x01 || p[2] == 0x03);
}

/* 1 if the first n bytes a plain connection sent can start no client's obfuscated2 header:
 * clients never send these (PROTOCOL.md 1.2: HTTP verbs, transport markers, a TLS hello start,
 * zeros at 4..7), so such a connection is fronted at once, with no silence a probe could time. */
static int cannot_be_obfs2(const uint8_t *p, size_t n)
{
    static const char *const words[] = {"HEAD", "POST", "GET ", "OPTI", "\xdd\xdd\xdd\xdd",
                                        "\xee\xee\xee\xee", "\x16\x03\x01\x02"};
    if (n >= 1 && p[0] == 0xef)
        return 1;
    for (size_t i = 0; n >= 4 && i < sizeof words / sizeof words[0]; i++)
        if (memcmp(p, words[i], 4) == 0)
            return 1;
    return n >= 8 && !(p[4] | p[5] | p[6] | p[7]);
}

/* allow-ee and at least one ee secret in c's generation (the worker keeps the newest one's). */
static int tls_enabled(const struct conn *c)
{
    if (c->gen == c->pw->gen)
        return c->pw->tls_enabled;
    const struct options *o = &c->gen->opt;
    for (int i = 0; i < o->nsecrets; i++)
        if (o->allow_ee && o->secrets[i].kind == SECRET_EE)
            return 1;
    return 0;
}

enum conn_reason hs_first_read(struct conn *c)
{
    const struct options *o = &c->gen->opt;
    ssize_t n = read(c->cli.fd, c->hdr + c->hdr_len, OBFS2_HDR_LEN - c->hdr_len);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return CR_NONE;
        return CR_CLIENT_EARLY_EOF;
    }
    size_t before = c->hdr_len;
    c->hdr_len += (uint8_t)n;
    if (before < 3 && c->hdr_len >= 3) {
        if (looks_tls(c->hdr) && tls_enabled(c)) {
            if (hs_hbuf_reserve(c, 1024))
                return CR_NO_MEMORY;
            memcpy(c->hbuf, c->hdr, c->hdr_len);
            c->hlen = c->hdr_len;
            c->state = CS_TLS_HELLO;
            return hs_tls_hello_check(c);
        }
        if (!o->allow_plain && !o->allow_dd) /* TLS-only: nothing else is a client */
            return front_reject(c, c->hdr, c->hdr_len, NULL, "not TLS (TLS-only proxy)");
    }
    if (c->hdr_len < OBFS2_HDR_LEN && cannot_be_obfs2(c->hdr, c->hdr_len))
        return front_reject(c, c->hdr, c->hdr_len, NULL,
                            "not an obfuscated2 header (HTTP or similar)");
    if (c->hdr_len == OBFS2_HDR_LEN)
        return hs_obfs2_done(c, NULL, 0);
    return CR_NONE;
}

/* --- PROXY protocol (proxy-protocol = on) ------------------------------------------------ */

#define PP_V2_CAP 512 /* a balancer's v2 header with its TLVs: a few dozen bytes in practice */

/* A malformed (or too long) PROXY header: counted, logged at debug, refused. */
static enum conn_reason proxy_hdr_bad(struct conn *c, const struct proxyproto_result *r)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.pp_bad);
    if (log_enabled(LOG_LVL_DEBUG)) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, a, sizeof a);
        log_debug("w%d conn %llu %s: bad PROXY header: %s", pw->w->id,
                  (unsigned long long)c->id, a, r->why ? r->why : "too long");
    }
    return CR_REFUSED;
}

/* PROXIED: the header's source address is the client's from now on. */
static void proxy_hdr_peer(struct conn *c, const struct proxyproto_result *r)
{
    memset(&c->peer, 0, sizeof c->peer);
    if (r->src.ss_family == AF_INET) {
        memcpy(&c->peer.u.in4, &r->src, sizeof c->peer.u.in4);
        c->peer.len = sizeof c->peer.u.in4;
    } else {
        memcpy(&c->peer.u.in6, &r->src, sizeof c->peer.u.in6);
        c->peer.len = sizeof c->peer.u.in6;
    }
}

/* Reads the PROXY header, and nothing of the client's own bytes: each call peeks at what has
 * arrived; while the header is incomplete every byte seen belongs to it (a v1 line before its
 * CR LF, a v2 header shorter than its length) and is consumed into hbuf, so the socket never
 * stays readable with a partial header (no busy loop); once complete, exactly its rest is
 * consumed and the client's bytes wait in the socket for HEADER. */
enum conn_reason hs_proxy_read(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (hs_hbuf_reserve(c, 16 + PP_V2_CAP))
        return CR_NO_MEMORY;
    ssize_t n = recv(c->cli.fd, c->hbuf + c->hlen, 16 + PP_V2_CAP - c->hlen, MSG_PEEK);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return CR_NONE;
        STAT_INC(&pw->stats.pp_bad);
        return CR_CLIENT_EARLY_EOF;
    }
    struct proxyproto_result r;
    enum proxyproto_status st = proxyproto_parse(c->hbuf, c->hlen + (size_t)n, PP_V2_CAP, &r);
    if (st == PROXYPROTO_BAD || (st == PROXYPROTO_NEED_MORE && r.need > 16 + PP_V2_CAP))
        return proxy_hdr_bad(c, &r);
    size_t take = st == PROXYPROTO_OK ? r.consumed - c->hlen : (size_t)n;
    if (recv(c->cli.fd, c->hbuf + c->hlen, take, 0) != (ssize_t)take)
        return CR_CLIENT_EARLY_EOF; /* peeked bytes vanished: a reset */
    c->hlen += (uint32_t)take;
    if (st == PROXYPROTO_NEED_MORE)
        return CR_NONE;
    hbuf_free(c);
    if (r.kind == PROXYPROTO_LOCAL) {
        STAT_INC(&pw->stats.pp_local);
        return CR_DONE;
    }
    if (r.kind == PROXYPROTO_PROXIED)
        proxy_hdr_peer(c, &r);
    /* UNKNOWN: the balancer's own address stands, as the specification says */
    if (guard_acl(pw, &c->gen->acl, &c->peer))
        return CR_REFUSED;
    if (guard_accept_rate(pw, &c->peer)) /* the client's address, not the balancer's */
        return CR_ACCEPT_RATE;
    if (guard_stranger(c))
        return CR_REFUSED;
    c->state = CS_HEADER; /* the handshake timer keeps running from accept */
    return CR_NONE;
}
