/* rpc.c: the middle-proxy link: frames with CRC32, handshake messages, KDF, RPC messages,
 * proxy-config and proxy-secret parsing. Pure: no I/O. */
#include "proto/rpc.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

uint32_t rpc_crc32(const void *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const Bytef *b = p;
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

size_t rpc_frame_build(uint8_t *out, int32_t seq, const uint8_t *payload, size_t len)
{
    size_t total = len + RPC_FRAME_OVERHEAD;
    if (payload != out + 8)
        memmove(out + 8, payload, len);
    put32(out, (uint32_t)total);
    put32(out + 4, (uint32_t)seq);
    put32(out + 8 + len, rpc_crc32(out, 8 + len));
    return total;
}

size_t rpc_frame_pad16(uint8_t *out, size_t n)
{
    while (n % 16) {
        put32(out + n, 4);
        n += 4;
    }
    return n;
}

enum rpc_status rpc_frame_parse(const uint8_t *p, size_t n, int32_t want_seq,
                                struct rpc_frame *f, size_t *need, const char **why)
{
    if (n < 4) {
        *need = 4;
        return RPC_NEED_MORE;
    }
    uint32_t len = le32(p);
    if (len == 4) {
        f->payload = NULL;
        f->len = 0;
        f->total = 4;
        return RPC_OK;
    }
    if (len < 16 || len % 4 || len > RPC_FRAME_MAX) {
        *why = "bad frame length";
        return RPC_BAD;
    }
    if (n < len) {
        *need = len;
        return RPC_NEED_MORE;
    }
    if ((int32_t)le32(p + 4) != want_seq) {
        *why = "wrong seqno";
        return RPC_BAD;
    }
    if (rpc_crc32(p, len - 4) != le32(p + len - 4)) {
        *why = "bad crc";
        return RPC_BAD;
    }
    f->payload = p + 8;
    f->len = len - RPC_FRAME_OVERHEAD;
    f->total = len;
    return RPC_OK;
}

void rpc_nonce_build(uint8_t out[RPC_NONCE_LEN], const struct rpc_nonce *n)
{
    put32(out, RPC_NONCE);
    put32(out + 4, n->key_select);
    put32(out + 8, n->schema);
    put32(out + 12, n->ts);
    memcpy(out + 16, n->nonce, 16);
}

int rpc_nonce_parse(const uint8_t *p, size_t len, struct rpc_nonce *n)
{
    if (len < RPC_NONCE_LEN || le32(p) != RPC_NONCE)
        return -1;
    n->key_select = le32(p + 4);
    n->schema = le32(p + 8);
    n->ts = le32(p + 12);
    memcpy(n->nonce, p + 16, 16);
    return 0;
}

void rpc_handshake_build(uint8_t out[RPC_HANDSHAKE_LEN], uint32_t flags,
                         const uint8_t sender[RPC_PID_LEN], const uint8_t peer[RPC_PID_LEN])
{
    put32(out, RPC_HANDSHAKE);
    put32(out + 4, flags);
    memcpy(out + 8, sender, RPC_PID_LEN);
    memcpy(out + 20, peer, RPC_PID_LEN);
}

int rpc_handshake_parse(const uint8_t *p, size_t len, uint32_t *flags,
                        uint8_t sender[RPC_PID_LEN], uint8_t peer[RPC_PID_LEN])
{
    if (len >= 4 && le32(p) == RPC_HANDSHAKE_ERROR)
        return -2;
    if (len < RPC_HANDSHAKE_LEN || le32(p) != RPC_HANDSHAKE)
        return -1;
    *flags = le32(p + 4);
    memcpy(sender, p + 8, RPC_PID_LEN);
    memcpy(peer, p + 20, RPC_PID_LEN);
    return 0;
}

/* An IPv4 address as the KDF takes it: the host-order u32 stored LE = network bytes
 * reversed; zero for an IPv6 end. */
static void kdf_ip4(uint8_t *s, const struct rpc_endpoint *e)
{
    for (int i = 0; i < 4; i++)
        s[i] = e->v6 ? 0 : e->ip[3 - i];
}

size_t rpc_kdf_input(const struct rpc_kdf_in *in, const char *purpose, uint8_t *s)
{
    size_t n = 0;
    memcpy(s + n, in->nonce_srv, 16), n += 16;
    memcpy(s + n, in->nonce_clt, 16), n += 16;
    put32(s + n, in->clt_ts), n += 4;
    kdf_ip4(s + n, &in->srv), n += 4;
    s[n++] = (uint8_t)in->clt.port;
    s[n++] = (uint8_t)(in->clt.port >> 8);
    memcpy(s + n, purpose, 6), n += 6;
    kdf_ip4(s + n, &in->clt), n += 4;
    s[n++] = (uint8_t)in->srv.port;
    s[n++] = (uint8_t)(in->srv.port >> 8);
    size_t sl = in->secret_len > RPC_SECRET_MAX ? RPC_SECRET_MAX : in->secret_len;
    memcpy(s + n, in->secret, sl), n += sl;
    memcpy(s + n, in->nonce_srv, 16), n += 16;
    if (in->clt.v6 || in->srv.v6) {
        memcpy(s + n, in->clt.ip, 16), n += 16;
        memcpy(s + n, in->srv.ip, 16), n += 16;
    }
    memcpy(s + n, in->nonce_clt, 16), n += 16;
    return n;
}

void rpc_kdf(const struct rpc_kdf_in *in, const char *purpose, uint8_t key[CRYPTO_KEY_LEN],
             uint8_t iv[CRYPTO_IV_LEN])
{
    uint8_t s[RPC_KDF_MAX], md5[CRYPTO_MD5_LEN];
    size_t n = rpc_kdf_input(in, purpose, s);
    crypto_md5(s + 1, n - 1, md5);
    memcpy(key, md5, 12);
    crypto_sha1(s, n, key + 12);
    crypto_md5(s + 2, n - 2, iv);
    memset(s, 0, sizeof s);
}

void rpc_addr_set(struct rpc_addr *a, const uint8_t *ip, int v6, uint16_t port)
{
    memset(a->ip, 0, 16);
    if (v6) {
        memcpy(a->ip, ip, 16);
    } else {
        a->ip[10] = a->ip[11] = 0xff;
        memcpy(a->ip + 12, ip, 4);
    }
    a->port = port;
}

size_t rpc_proxy_req_header(uint8_t *out, uint32_t flags, uint64_t conn_id,
                            const struct rpc_addr *remote, const struct rpc_addr *ours,
                            const uint8_t *ad_tag)
{
    if (ad_tag)
        flags |= RPC_FLAG_HAS_AD_TAG;
    put32(out, RPC_PROXY_REQ);
    put32(out + 4, flags);
    put64(out + 8, conn_id);
    memcpy(out + 16, remote->ip, 16);
    put32(out + 32, remote->port);
    memcpy(out + 36, ours->ip, 16);
    put32(out + 52, ours->port);
    if (!ad_tag)
        return 56;
    put32(out + 56, 24);
    put32(out + 60, RPC_TL_PROXY_TAG);
    out[64] = RPC_AD_TAG_LEN;
    memcpy(out + 65, ad_tag, RPC_AD_TAG_LEN);
    out[81] = out[82] = out[83] = 0;
    return 84;
}

enum rpc_status rpc_proxy_req_parse(const uint8_t *p, size_t len, struct rpc_proxy_req *r)
{
    if (len < 56 || le32(p) != RPC_PROXY_REQ)
        return RPC_BAD;
    memset(r, 0, sizeof *r);
    r->flags = le32(p + 4);
    r->conn_id = le64(p + 8);
    memcpy(r->remote.ip, p + 16, 16);
    r->remote.port = le32(p + 32);
    memcpy(r->ours.ip, p + 36, 16);
    r->ours.port = le32(p + 52);
    size_t off = 56;
    if (r->flags & (RPC_FLAG_HAS_AD_TAG | 0x4u)) {
        if (len < off + 4)
            return RPC_BAD;
        uint32_t extra = le32(p + off);
        off += 4;
        if (extra % 4 || extra > len - off)
            return RPC_BAD;
        const uint8_t *x = p + off;
        if (extra >= 24 && le32(x) == RPC_TL_PROXY_TAG && x[4] == RPC_AD_TAG_LEN) {
            r->has_tag = 1;
            memcpy(r->ad_tag, x + 5, RPC_AD_TAG_LEN);
        }
        off += extra;
    }
    r->data = p + off;
    r->len = len - off;
    return RPC_OK;
}

enum rpc_status rpc_msg_parse(const uint8_t *p, size_t len, struct rpc_msg *m)
{
    if (len < 4)
        return RPC_BAD;
    memset(m, 0, sizeof *m);
    m->type = le32(p);
    switch (m->type) {
    case RPC_PROXY_ANS:
        if (len < 16)
            return RPC_BAD;
        m->flags = le32(p + 4);
        m->conn_id = le64(p + 8);
        m->data = p + 16;
        m->len = len - 16;
        return RPC_OK;
    case RPC_SIMPLE_ACK:
        if (len < 16)
            return RPC_BAD;
        m->conn_id = le64(p + 4);
        m->confirm = le32(p + 12);
        return RPC_OK;
    case RPC_CLOSE_EXT:
    case RPC_CLOSE_CONN:
        if (len < 12)
            return RPC_BAD;
        m->conn_id = le64(p + 4);
        return RPC_OK;
    case RPC_PING:
    case RPC_PONG:
        if (len < 12)
            return RPC_BAD;
        m->ping_id = le64(p + 4);
        return RPC_OK;
    default:
        return RPC_OK;
    }
}

void rpc_msg_u64(uint8_t out[12], uint32_t type, uint64_t v)
{
    put32(out, type);
    put64(out + 4, v);
}

/* --- proxy config ---------------------------------------------------------------------- */

static int cfg_err(char *err, size_t errlen, const char *name, int line, const char *msg,
                   const char *arg)
{
    if (line)
        snprintf(err, errlen, "%s:%d: %s%s%.64s%s", name, line, msg, arg ? " '" : "",
                 arg ? arg : "", arg ? "'" : "");
    else
        snprintf(err, errlen, "%s: %s", name, msg);
    return -1;
}

/* Parses an integer token fully within [lo, hi]. Returns 0, or -1. */
static int cfg_int(const char *t, long lo, long hi, long *out)
{
    char *end;
    if (!*t)
        return -1;
    long v = strtol(t, &end, 10);
    if (*end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "A.B.C.D:PORT" or "[V6]:PORT". Returns 0, or -1. */
static int cfg_addr(const char *t, struct rpc_config_entry *e)
{
    char host[64];
    const char *colon;
    if (*t == '[') {
        const char *close = strchr(t, ']');
        if (!close || close[1] != ':' || (size_t)(close - t - 1) >= sizeof host)
            return -1;
        memcpy(host, t + 1, (size_t)(close - t - 1));
        host[close - t - 1] = 0;
        colon = close + 1;
        e->v6 = 1;
    } else {
        colon = strrchr(t, ':');
        if (!colon || (size_t)(colon - t) >= sizeof host)
            return -1;
        memcpy(host, t, (size_t)(colon - t));
        host[colon - t] = 0;
        e->v6 = 0;
    }
    long port;
    if (cfg_int(colon + 1, 1, 65535, &port))
        return -1;
    memset(e->ip, 0, sizeof e->ip);
    if (inet_pton(e->v6 ? AF_INET6 : AF_INET, host, e->ip) != 1)
        return -1;
    e->port = (uint16_t)port;
    return 0;
}

#define CFG_MAX_TOKENS 8

/* One statement (tokens before a ';'). Returns 0, or -1 with err. */
static int cfg_statement(char **tok, int nt, struct rpc_config *c, const char *name, int line,
                         char *err, size_t errlen)
{
    long v;
    const char *k = tok[0];
    if (strcmp(k, "proxy_for") == 0) {
        if (nt != 3)
            return cfg_err(err, errlen, name, line, "expected 'proxy_for DC ADDR:PORT;'", NULL);
        if (cfg_int(tok[1], -32768, 32767, &v) || v == 0)
            return cfg_err(err, errlen, name, line, "bad dc id", tok[1]);
        if (c->n >= RPC_CONFIG_MAX)
            return cfg_err(err, errlen, name, line, "too many proxy_for lines", NULL);
        struct rpc_config_entry *e = &c->e[c->n];
        if (cfg_addr(tok[2], e))
            return cfg_err(err, errlen, name, line, "bad address (A.B.C.D:PORT or [V6]:PORT)",
                           tok[2]);
        e->dc = (int16_t)v;
        c->n++;
        return 0;
    }
    if (strcmp(k, "default") == 0) {
        if (nt != 2 || cfg_int(tok[1], -32768, 32767, &v) || v == 0)
            return cfg_err(err, errlen, name, line, "expected 'default DC;'", NULL);
        c->default_dc = (int)v;
        return 0;
    }
    if (strcmp(k, "timeout") == 0 || strcmp(k, "min_connections") == 0 ||
        strcmp(k, "max_connections") == 0) {
        long hi = k[0] == 't' ? 30000 : 1000, lo = k[0] == 't' ? 10 : 1;
        if (nt != 2 || cfg_int(tok[1], lo, hi, &v))
            return cfg_err(err, errlen, name, line, "bad value for", k);
        return 0;
    }
    if (strcmp(k, "proxy") == 0) {
        struct rpc_config_entry e;
        if (nt != 2 || cfg_addr(tok[1], &e))
            return cfg_err(err, errlen, name, line, "expected 'proxy ADDR:PORT;'", NULL);
        return 0;
    }
    return cfg_err(err, errlen, name, line, "unknown statement", k);
}

int rpc_config_parse(const char *name, const char *text, size_t len, struct rpc_config *c,
                     char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char buf[512];
    int line = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        line++;
        size_t ll = j - i;
        if (ll >= sizeof buf)
            return cfg_err(err, errlen, name, line, "line too long", NULL);
        memcpy(buf, text + i, ll);
        buf[ll] = 0;
        i = j + 1;
        if (memchr(buf, 0, ll))
            return cfg_err(err, errlen, name, line, "NUL byte in line", NULL);
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = 0;
        /* statements end with ';' (several may share a line; none may span lines) */
        char *p = buf;
        for (;;) {
            char *semi = strchr(p, ';');
            char *tok[CFG_MAX_TOKENS];
            int nt = 0;
            if (semi)
                *semi = 0;
            for (char *s = strtok(p, " \t\r"); s; s = strtok(NULL, " \t\r")) {
                if (nt == CFG_MAX_TOKENS)
                    return cfg_err(err, errlen, name, line, "too many words", NULL);
                tok[nt++] = s;
            }
            if (!semi) {
                if (nt)
                    return cfg_err(err, errlen, name, line, "missing ';' after", tok[0]);
                break;
            }
            if (!nt)
                return cfg_err(err, errlen, name, line, "empty statement", NULL);
            if (cfg_statement(tok, nt, c, name, line, err, errlen))
                return -1;
            p = semi + 1;
        }
    }
    if (c->n == 0)
        return cfg_err(err, errlen, name, 0, "no proxy_for line (is this a proxy config?)",
                       NULL);
    if (c->default_dc) {
        int found = 0;
        for (int k = 0; k < c->n; k++)
            found |= c->e[k].dc == c->default_dc;
        if (!found)
            return cfg_err(err, errlen, name, 0, "the default dc has no proxy_for line", NULL);
    }
    return 0;
}

int rpc_secret_check(const char *name, size_t len, char *err, size_t errlen)
{
    if (len < RPC_SECRET_MIN || len > RPC_SECRET_MAX) {
        snprintf(err, errlen, "%s: a proxy secret is %d to %d bytes (getProxySecret serves "
                 "128), this file has %zu", name, RPC_SECRET_MIN, RPC_SECRET_MAX, len);
        return -1;
    }
    return 0;
}
