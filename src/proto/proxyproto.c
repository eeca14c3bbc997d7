/* proxyproto.c: PROXY protocol v1/v2 header parser (pure: bytes in, addresses out). */
#include "proto/proxyproto.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static const uint8_t v2_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                   0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

static enum proxyproto_status bad(struct proxyproto_result *out, const char *why)
{
    out->why = why;
    return PROXYPROTO_BAD;
}

static enum proxyproto_status more(struct proxyproto_result *out, size_t need)
{
    out->need = need;
    return PROXYPROTO_NEED_MORE;
}

/* Next space-separated field of line[*pos..end) into f (at most cap - 1 bytes). */
static int field(const char *line, size_t end, size_t *pos, char *f, size_t cap)
{
    size_t s = *pos, e = s;
    while (e < end && line[e] != ' ')
        e++;
    if (e == s || e - s >= cap)
        return -1;
    memcpy(f, line + s, e - s);
    f[e - s] = 0;
    *pos = e + 1 < end ? e + 1 : e; /* a trailing space stays unconsumed: BAD */
    return 0;
}

static int port_of(const char *f, uint16_t *out)
{
    /* 0..65535, decimal, no sign, no leading zero but "0" itself (as the spec writes them). */
    size_t n = strlen(f);
    if (n == 0 || n > 5 || (n > 1 && f[0] == '0'))
        return -1;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (f[i] < '0' || f[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(f[i] - '0');
    }
    if (v > 65535)
        return -1;
    *out = (uint16_t)v;
    return 0;
}

static int addr_of(int family, const char *text, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        if (inet_pton(AF_INET, text, &a->sin_addr) != 1)
            return -1;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET6, text, &a->sin6_addr) != 1)
            return -1;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
    }
    return 0;
}

static enum proxyproto_status parse_v1(const uint8_t *buf, size_t len,
                                       struct proxyproto_result *out)
{
    /* Every byte so far must be printable ASCII up to the CR LF that ends the line. */
    size_t lim = len < PROXYPROTO_V1_MAX ? len : PROXYPROTO_V1_MAX;
    size_t crlf = 0;
    for (size_t i = 0; i < lim; i++) {
        if (buf[i] == '\r') {
            if (i + 1 < len && buf[i + 1] != '\n')
                return bad(out, "v1: CR not followed by LF");
            if (i + 1 >= len)
                return more(out, i + 2);
            if (i + 2 > PROXYPROTO_V1_MAX)
                return bad(out, "v1: line longer than 107 bytes");
            crlf = i;
            break;
        }
        if (buf[i] < 0x20 || buf[i] > 0x7e)
            return bad(out, "v1: not a text line");
    }
    if (!crlf)
        return len >= PROXYPROTO_V1_MAX ? bad(out, "v1: line longer than 107 bytes")
                                        : more(out, len + 1);
    const char *line = (const char *)buf;
    size_t pos = 6; /* after "PROXY " */
    char proto[16], src[64], dst[64], sp[16], dp[16];
    if (field(line, crlf, &pos, proto, sizeof proto))
        return bad(out, "v1: no protocol");
    out->version = 1;
    out->consumed = crlf + 2;
    if (strcmp(proto, "UNKNOWN") == 0) {
        out->kind = PROXYPROTO_UNKNOWN;
        return PROXYPROTO_OK;
    }
    int family;
    if (strcmp(proto, "TCP4") == 0)
        family = AF_INET;
    else if (strcmp(proto, "TCP6") == 0)
        family = AF_INET6;
    else
        return bad(out, "v1: protocol is not TCP4, TCP6 or UNKNOWN");
    uint16_t sport, dport;
    if (field(line, crlf, &pos, src, sizeof src) || field(line, crlf, &pos, dst, sizeof dst) ||
        field(line, crlf, &pos, sp, sizeof sp) || field(line, crlf, &pos, dp, sizeof dp) ||
        pos != crlf)
        return bad(out, "v1: expected SRC DST SPORT DPORT");
    if (port_of(sp, &sport) || port_of(dp, &dport))
        return bad(out, "v1: bad port");
    if (addr_of(family, src, sport, &out->src) || addr_of(family, dst, dport, &out->dst))
        return bad(out, "v1: bad address for its protocol");
    out->kind = PROXYPROTO_PROXIED;
    return PROXYPROTO_OK;
}

static enum proxyproto_status parse_v2(const uint8_t *buf, size_t len, size_t max_v2,
                                       struct proxyproto_result *out)
{
    if (len < 16)
        return more(out, 16);
    if ((buf[12] >> 4) != 2)
        return bad(out, "v2: version is not 2");
    int cmd = buf[12] & 0x0f;
    if (cmd > 1)
        return bad(out, "v2: command is not LOCAL or PROXY");
    int fam = buf[13] >> 4, transport = buf[13] & 0x0f;
    if (fam > 3 || transport > 2)
        return bad(out, "v2: unknown address family or transport");
    size_t body = (size_t)buf[14] << 8 | buf[15], total = 16 + body;
    if (total > max_v2)
        return bad(out, "v2: header longer than allowed");
    static const size_t need_body[4] = {0, 12, 36, 216};
    if (body < need_body[fam])
        return bad(out, "v2: too short for its address family");
    if (len < total)
        return more(out, total);
    out->version = 2;
    out->consumed = total;
    if (cmd == 0) {
        out->kind = PROXYPROTO_LOCAL;
        return PROXYPROTO_OK;
    }
    if (transport != 1 || (fam != 1 && fam != 2)) {
        out->kind = PROXYPROTO_UNKNOWN;
        return PROXYPROTO_OK;
    }
    /* TLVs after the addresses: each type(1) length(2) value; they must tile the rest. */
    size_t p = 16 + need_body[fam];
    while (p < total) {
        if (total - p < 3)
            return bad(out, "v2: truncated TLV");
        size_t tl = (size_t)buf[p + 1] << 8 | buf[p + 2];
        if (tl > total - p - 3)
            return bad(out, "v2: TLV runs past the header");
        p += 3 + tl;
    }
    const uint8_t *a = buf + 16;
    memset(&out->src, 0, sizeof out->src);
    memset(&out->dst, 0, sizeof out->dst);
    if (fam == 1) {
        struct sockaddr_in *s = (struct sockaddr_in *)&out->src;
        struct sockaddr_in *d = (struct sockaddr_in *)&out->dst;
        s->sin_family = d->sin_family = AF_INET;
        memcpy(&s->sin_addr, a, 4);
        memcpy(&d->sin_addr, a + 4, 4);
        memcpy(&s->sin_port, a + 8, 2);
        memcpy(&d->sin_port, a + 10, 2);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&out->src;
        struct sockaddr_in6 *d = (struct sockaddr_in6 *)&out->dst;
        s->sin6_family = d->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, a, 16);
        memcpy(&d->sin6_addr, a + 16, 16);
        memcpy(&s->sin6_port, a + 32, 2);
        memcpy(&d->sin6_port, a + 34, 2);
    }
    out->kind = PROXYPROTO_PROXIED;
    return PROXYPROTO_OK;
}

enum proxyproto_status proxyproto_parse(const uint8_t *buf, size_t len, size_t max_v2,
                                        struct proxyproto_result *out)
{
    memset(out, 0, sizeof *out);
    if (len == 0)
        return more(out, 1);
    /* Decide which version as soon as the bytes so far match only one signature prefix. */
    size_t n = len < 12 ? len : 12;
    int v2 = memcmp(buf, v2_sig, n) == 0;
    int v1 = memcmp(buf, "PROXY ", len < 6 ? len : 6) == 0;
    if (!v1 && !v2)
        return bad(out, "not a PROXY protocol header");
    if (v2)
        return len < 12 ? more(out, 12) : parse_v2(buf, len, max_v2, out);
    return len < 6 ? more(out, 6) : parse_v1(buf, len, out);
}
