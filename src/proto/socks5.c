/* socks5.c: SOCKS5 client handshake pieces (RFC 1928, RFC 1929): pure builders and parsers. */
#include "proto/socks5.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "proto/http.h"

int socks5_parse_url(const char *url, struct socks5_server *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    static const char scheme[] = "socks5://";
    if (strncmp(url, scheme, sizeof scheme - 1) != 0) {
        /* No part of it is quoted: credentials may come anywhere in what is not a URL. */
        snprintf(err, errlen, "socks5: the URL must start with socks5:// "
                 "(socks5://[USER:PASS@]HOST:PORT)");
        return -1;
    }
    const char *p = url + sizeof scheme - 1;
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon) {
            snprintf(err, errlen, "socks5: credentials must be USER:PASS@");
            return -1;
        }
        int ul = http_pct_decode(p, (size_t)(colon - p), out->user, sizeof out->user, 0);
        int pl = http_pct_decode(colon + 1, (size_t)(at - colon - 1), out->pass,
                                 sizeof out->pass, 0);
        if (ul < 1 || pl < 1) {
            snprintf(err, errlen, "socks5: user and password must be 1 to %d bytes "
                     "(percent-encode ':', '@' and '%%')", SOCKS5_NAME_MAX);
            return -1;
        }
        out->auth = 1;
        p = at + 1;
    }
    const char *hend, *portp;
    int v6 = *p == '[';
    if (v6) {
        hend = strchr(++p, ']');
        if (!hend || hend[1] != ':') {
            snprintf(err, errlen, "socks5: expected [IPV6]:PORT");
            return -1;
        }
        portp = hend + 2;
    } else {
        hend = strrchr(p, ':');
        if (!hend) {
            snprintf(err, errlen, "socks5: expected HOST:PORT");
            return -1;
        }
        portp = hend + 1;
    }
    size_t hl = (size_t)(hend - p);
    if (hl == 0 || hl >= sizeof out->host) {
        snprintf(err, errlen, "socks5: host must be 1 to %zu bytes", sizeof out->host - 1);
        return -1;
    }
    memcpy(out->host, p, hl);
    out->host[hl] = 0;
    struct in6_addr a6;
    if (v6 && inet_pton(AF_INET6, out->host, &a6) != 1) {
        snprintf(err, errlen, "socks5: the host in [...] is not an IPv6 address");
        return -1;
    }
    for (size_t i = 0; !v6 && i < hl; i++) {
        unsigned char c = (unsigned char)out->host[i];
        if (c <= ' ' || c == '/' || c == '@' || c == ':' || c == '[' || c == ']' || c >= 0x7f) {
            /* the host is not quoted: with the '@' left out it holds USER:PASS */
            snprintf(err, errlen, "socks5: bad character in host (byte %zu after '//' or '@': "
                     "0x%02x)%s", i + 1, c, c == ':' ? "; is the '@' after USER:PASS missing?"
                     : "");
            return -1;
        }
    }
    int port = 0;
    if (!*portp || strlen(portp) > 5) {
        snprintf(err, errlen, "socks5: port must be 1..65535");
        return -1;
    }
    for (const char *q = portp; *q; q++) {
        if (*q < '0' || *q > '9') {
            snprintf(err, errlen, "socks5: port must be 1..65535 (and nothing after it)");
            return -1;
        }
        port = port * 10 + (*q - '0');
    }
    if (port < 1 || port > 65535) {
        snprintf(err, errlen, "socks5: port must be 1..65535");
        return -1;
    }
    out->port = port;
    return 0;
}

size_t socks5_greeting(const struct socks5_server *s, uint8_t *out, size_t cap)
{
    if (cap < 4)
        return 0;
    out[0] = 5;
    out[1] = 1;
    out[2] = 0; /* no authentication */
    if (s->auth) {
        out[1] = 2;
        out[3] = 2; /* username/password */
        return 4;
    }
    return 3;
}

enum socks5_status socks5_parse_method(const struct socks5_server *s, const uint8_t *buf,
                                       size_t len, int *method, const char **why)
{
    if (len >= 1 && buf[0] != 5)
        return *why = "not a SOCKS5 server (version byte)", SOCKS5_BAD;
    if (len < 2)
        return SOCKS5_NEED_MORE;
    if (buf[1] == 0xff)
        return *why = s->auth ? "the server accepts no username/password login"
                              : "the server requires a login (set USER:PASS@ in socks5)",
               SOCKS5_BAD;
    if (buf[1] != 0 && !(s->auth && buf[1] == 2))
        return *why = "the server chose a method we did not offer", SOCKS5_BAD;
    *method = buf[1];
    return SOCKS5_OK;
}

size_t socks5_auth_request(const struct socks5_server *s, uint8_t *out, size_t cap)
{
    size_t ul = strlen(s->user), pl = strlen(s->pass);
    if (ul < 1 || ul > SOCKS5_NAME_MAX || pl < 1 || pl > SOCKS5_NAME_MAX || cap < 3 + ul + pl)
        return 0;
    out[0] = 1;
    out[1] = (uint8_t)ul;
    memcpy(out + 2, s->user, ul);
    out[2 + ul] = (uint8_t)pl;
    memcpy(out + 3 + ul, s->pass, pl);
    return 3 + ul + pl;
}

enum socks5_status socks5_parse_auth(const uint8_t *buf, size_t len, const char **why)
{
    if (len >= 1 && buf[0] != 1)
        return *why = "bad username/password reply (version byte)", SOCKS5_BAD;
    if (len < 2)
        return SOCKS5_NEED_MORE;
    if (buf[1] != 0)
        return *why = "the server refused the username/password", SOCKS5_BAD;
    return SOCKS5_OK;
}

size_t socks5_connect_request(const struct sockaddr *target, const char *name, int port,
                              uint8_t *out, size_t cap)
{
    if (cap < 4)
        return 0;
    out[0] = 5, out[1] = 1, out[2] = 0;
    size_t n;
    uint16_t be_port;
    if (name) {
        size_t l = strlen(name);
        if (l < 1 || l > SOCKS5_NAME_MAX || cap < 7 + l || port < 1 || port > 65535)
            return 0;
        out[3] = 3;
        out[4] = (uint8_t)l;
        memcpy(out + 5, name, l);
        n = 5 + l;
        be_port = htons((uint16_t)port);
    } else if (target->sa_family == AF_INET) {
        if (cap < 10)
            return 0;
        const struct sockaddr_in *a = (const struct sockaddr_in *)target;
        out[3] = 1;
        memcpy(out + 4, &a->sin_addr, 4);
        n = 8;
        be_port = a->sin_port;
    } else if (target->sa_family == AF_INET6) {
        if (cap < 22)
            return 0;
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)target;
        out[3] = 4;
        memcpy(out + 4, &a->sin6_addr, 16);
        n = 20;
        be_port = a->sin6_port;
    } else {
        return 0;
    }
    memcpy(out + n, &be_port, 2);
    return n + 2;
}

const char *socks5_reply_name(int code)
{
    static const char *const names[] = {
        "succeeded",          "general SOCKS server failure",
        "connection not allowed by ruleset", "network unreachable",
        "host unreachable",   "connection refused",
        "TTL expired",        "command not supported",
        "address type not supported",
    };
    return code >= 0 && code < (int)(sizeof names / sizeof names[0]) ? names[code]
                                                                     : "unassigned reply code";
}

enum socks5_status socks5_parse_reply(const uint8_t *buf, size_t len, size_t *consumed,
                                      int *code, const char **why)
{
    if (len >= 1 && buf[0] != 5)
        return *why = "not a SOCKS5 reply (version byte)", SOCKS5_BAD;
    if (len >= 2) {
        *code = buf[1];
        if (buf[1] != 0)
            return *why = socks5_reply_name(buf[1]), SOCKS5_BAD;
    }
    if (len >= 3 && buf[2] != 0)
        return *why = "bad SOCKS5 reply (reserved byte)", SOCKS5_BAD;
    if (len < 5)
        return SOCKS5_NEED_MORE;
    size_t alen;
    switch (buf[3]) {
    case 1: alen = 4; break;
    case 4: alen = 16; break;
    case 3: alen = 1 + (size_t)buf[4]; break;
    default: return *why = "bad SOCKS5 reply (address type)", SOCKS5_BAD;
    }
    size_t total = 4 + alen + 2;
    if (len < total)
        return SOCKS5_NEED_MORE;
    *consumed = total;
    return SOCKS5_OK;
}
