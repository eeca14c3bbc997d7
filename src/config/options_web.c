/* options_web.c: the cross-key checks of WEB proxy mode (web-listen and its keys). */
#include "config/options.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "proto/webcap.h"

/* 1 if a is loopback or private: 10/8, 172.16/12, 192.168/16, 100.64/10 (carrier NAT),
 * 169.254/16, fc00::/7, fe80::/10 (IPv4-mapped too). The wildcard is neither. */
static int addr_private(const struct sock_addr *a)
{
    if (sock_addr_is_loopback(a))
        return 1;
    uint32_t v4;
    const uint8_t *b6 = a->u.in6.sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (a->u.sa.sa_family == AF_INET) {
        v4 = ntohl(a->u.in4.sin_addr.s_addr);
    } else if (a->u.sa.sa_family == AF_INET6 && !memcmp(b6, mapped, 12)) {
        v4 = (uint32_t)b6[12] << 24 | (uint32_t)b6[13] << 16 | (uint32_t)b6[14] << 8 | b6[15];
    } else if (a->u.sa.sa_family == AF_INET6) {
        return (b6[0] & 0xfe) == 0xfc || (b6[0] == 0xfe && (b6[1] & 0xc0) == 0x80);
    } else {
        return 0;
    }
    return (v4 >> 24) == 10 || (v4 >> 20) == (172u << 4 | 1) || (v4 >> 16) == (192u << 8 | 168) ||
           (v4 >> 22) == (100u << 2 | 1) || (v4 >> 16) == (169u << 8 | 254);
}

int options_validate_web(struct config_parser *p, struct options *o)
{
    int before = p->errors.count;
#define ERR(...) config_error(&p->errors, __VA_ARGS__)
    if (!o->web_on)
        return 0;
    char host[WEBCAP_HOST_MAX + 1];
    if (!o->web_host[0])
        ERR("web-listen needs web-host: the public name the WEB links and capabilities are "
            "made for");
    else if (webcap_host(o->web_host, strlen(o->web_host), host, sizeof host) < 0)
        ERR("web-host '%s' is not a DNS name of two or more labels (no IP address, port or "
            "scheme)", o->web_host);
    if (!o->web_public && !addr_private(&o->web_addr))
        ERR("web-listen is neither a loopback nor a private address: browsers could reach "
            "the carrier without the TLS terminator; use the terminator's side of the "
            "network, or web-public = on if that is meant");
    if (o->web_upstream_on && o->web_root[0])
        ERR("web-root and web-upstream are two ways to serve the ordinary site: set one");
    if (o->web_grace_ms <= o->web_poll_ms)
        ERR("web-grace (%ums) must be longer than web-poll (%ums): a client holding an empty "
            "poll would lose its session", o->web_grace_ms, o->web_poll_ms);
    if (o->proxy_protocol)
        ERR("web-listen does not work with proxy-protocol = on yet (its streams carry no "
            "PROXY header)");
#undef ERR
    return p->errors.count - before;
}
