/* fronting.c: targets for domain fronting, PROXY protocol v1/v2 headers, self-loop check. */
#include "upstream/fronting.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"

static int same_ip(const struct sock_addr *a, const struct sockaddr *b)
{
    if (a->u.sa.sa_family != b->sa_family)
        return 0;
    if (b->sa_family == AF_INET)
        return a->u.in4.sin_addr.s_addr == ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    return !memcmp(&a->u.in6.sin6_addr, &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                   sizeof a->u.in6.sin6_addr);
}

int mask_addr_is_local(const struct sock_addr *addr)
{
    if (addr->u.sa.sa_family == AF_INET && (ntohl(addr->u.in4.sin_addr.s_addr) >> 24) == 127)
        return 1;
    if (addr->u.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&addr->u.in6.sin6_addr))
        return 1;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return 0;
    int local = 0;
    for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && same_ip(addr, i->ifa_addr))
            local = 1;
    freeifaddrs(ifs);
    return local;
}

/* 1 if connecting to a would reach one of our own listening sockets. */
static int is_self(const struct options *o, const struct sock_addr *a)
{
    for (int i = 0; i < o->nlisten; i++) {
        const struct sock_addr *l = &o->listen[i];
        if (sock_addr_port(l) != sock_addr_port(a) || l->u.sa.sa_family != a->u.sa.sa_family)
            continue;
        if (sock_addr_is_any(l) ? mask_addr_is_local(a) : same_ip(a, &l->u.sa))
            return 1;
    }
    return 0;
}

static int add_target(struct mask_table *t, const struct options *o, const char *domain,
                      const char *host, char *err, size_t errlen)
{
    char text[600], why[300];
    if (strchr(host, ':'))
        snprintf(text, sizeof text, "[%s]:%d", host, o->mask_port);
    else
        snprintf(text, sizeof text, "%s:%d", host, o->mask_port);
    struct mask_target *m = &t->t[t->n];
    if (sock_addr_parse(text, 1, 0, &m->addr, why, sizeof why)) {
        log_warn("fronting: %s; clients that would be fronted there are held silently", why);
        return 0;
    }
    if (is_self(o, &m->addr)) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&m->addr, a, sizeof a);
        snprintf(err, errlen, "fronting target %s is %s, one of this proxy's own listening "
                              "sockets: fronting would loop (set mask-host to the real server)",
                 text, a);
        return -1;
    }
    snprintf(m->domain, sizeof m->domain, "%s", domain);
    t->n++;
    return 0;
}

int mask_table_build(struct mask_table *t, const struct options *o, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (!o->mask)
        return 0;
    if (o->mask_host[0]) {
        if (add_target(t, o, "", o->mask_host, err, errlen))
            return -1;
    } else {
        for (int i = 0; i < o->nsecrets; i++) {
            const struct secret *s = &o->secrets[i];
            if (s->kind != SECRET_EE)
                continue;
            int seen = 0;
            for (int k = 0; k < t->n; k++)
                seen |= !strcasecmp(t->t[k].domain, s->domain);
            if (!seen && t->n == MASK_MAX_TARGETS) {
                log_warn("fronting: more than %d ee domains: clients naming the others are "
                         "fronted to %s", MASK_MAX_TARGETS, t->t[0].domain);
                break;
            }
            if (!seen && add_target(t, o, s->domain, s->domain, err, errlen))
                return -1;
        }
    }
    t->enabled = t->n > 0;
    return 0;
}

const struct mask_target *mask_lookup(const struct mask_table *t, const char *sni)
{
    if (!t->enabled)
        return NULL;
    if (sni && *sni)
        for (int i = 0; i < t->n; i++)
            if (t->t[i].domain[0] && !strcasecmp(t->t[i].domain, sni))
                return &t->t[i];
    return &t->t[0];
}

size_t mask_proxy_header(uint8_t *out, size_t outlen, int version, const struct sock_addr *src,
                         const struct sock_addr *dst)
{
    int fam = src->u.sa.sa_family;
    if (fam != dst->u.sa.sa_family)
        return 0;
    if (version == 1) {
        char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
        sock_addr_host(src, s, sizeof s);
        sock_addr_host(dst, d, sizeof d);
        int n = snprintf((char *)out, outlen, "PROXY %s %s %s %d %d\r\n",
                         fam == AF_INET ? "TCP4" : "TCP6", s, d, sock_addr_port(src),
                         sock_addr_port(dst));
        return n > 0 && (size_t)n < outlen ? (size_t)n : 0;
    }
    /* v2: 12-byte signature, ver/cmd 0x21 (v2, PROXY), family 0x11 (TCP/IPv4) or 0x21
     * (TCP/IPv6), u16 BE address length, then addresses and ports in network order. */
    static const uint8_t sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                    0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};
    size_t alen = fam == AF_INET ? 12 : 36;
    if (outlen < 16 + alen)
        return 0;
    memcpy(out, sig, 12);
    out[12] = 0x21;
    out[13] = fam == AF_INET ? 0x11 : 0x21;
    out[14] = 0;
    out[15] = (uint8_t)alen;
    uint8_t *p = out + 16;
    if (fam == AF_INET) {
        memcpy(p, &src->u.in4.sin_addr, 4);
        memcpy(p + 4, &dst->u.in4.sin_addr, 4);
        memcpy(p + 8, &src->u.in4.sin_port, 2);
        memcpy(p + 10, &dst->u.in4.sin_port, 2);
    } else {
        memcpy(p, &src->u.in6.sin6_addr, 16);
        memcpy(p + 16, &dst->u.in6.sin6_addr, 16);
        memcpy(p + 32, &src->u.in6.sin6_port, 2);
        memcpy(p + 34, &dst->u.in6.sin6_port, 2);
    }
    return 16 + alen;
}
