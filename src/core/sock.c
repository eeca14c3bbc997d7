/* sock.c: socket helpers shared by the listener, the DC connector, tests and benches. */
#include "core/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sock_addr_parse(const char *text, int resolve, int allow_port0, struct sock_addr *out,
                    char *err, size_t errlen)
{
    char host[256];
    const char *port_s;
    memset(out, 0, sizeof *out);
    if (text[0] == '[') {
        const char *rb = strchr(text, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - text - 1) >= sizeof host) {
            snprintf(err, errlen, "'%s' is not [IPv6]:PORT", text);
            return -1;
        }
        memcpy(host, text + 1, (size_t)(rb - text - 1));
        host[rb - text - 1] = 0;
        port_s = rb + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || (size_t)(colon - text) >= sizeof host || colon == text) {
            snprintf(err, errlen, "'%s' is not ADDRESS:PORT", text);
            return -1;
        }
        if (strchr(text, ':') != colon) {
            snprintf(err, errlen, "'%s': write IPv6 addresses as [ADDRESS]:PORT", text);
            return -1;
        }
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = 0;
        port_s = colon + 1;
    }
    char *end;
    long port = strtol(port_s, &end, 10);
    if (!*port_s || *end || port < (allow_port0 ? 0 : 1) || port > 65535) {
        snprintf(err, errlen, "'%s': bad port '%s'", text, port_s);
        return -1;
    }
    if (inet_pton(AF_INET, host, &out->u.in4.sin_addr) == 1) {
        out->u.in4.sin_family = AF_INET;
        out->u.in4.sin_port = htons((uint16_t)port);
        out->len = sizeof out->u.in4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &out->u.in6.sin6_addr) == 1) {
        out->u.in6.sin6_family = AF_INET6;
        out->u.in6.sin6_port = htons((uint16_t)port);
        out->len = sizeof out->u.in6;
        return 0;
    }
    if (!resolve) {
        snprintf(err, errlen, "'%s' is not a numeric IPv4 or IPv6 address", host);
        return -1;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(&out->u, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    freeaddrinfo(res);
    if (out->u.sa.sa_family == AF_INET)
        out->u.in4.sin_port = htons((uint16_t)port);
    else
        out->u.in6.sin6_port = htons((uint16_t)port);
    return 0;
}

void sock_addr_host(const struct sock_addr *a, char *buf, size_t len)
{
    if (a->u.sa.sa_family == AF_INET)
        inet_ntop(AF_INET, &a->u.in4.sin_addr, buf, (socklen_t)len);
    else if (a->u.sa.sa_family == AF_INET6)
        inet_ntop(AF_INET6, &a->u.in6.sin6_addr, buf, (socklen_t)len);
    else
        snprintf(buf, len, "?");
}

int sock_addr_port(const struct sock_addr *a)
{
    return ntohs(a->u.sa.sa_family == AF_INET ? a->u.in4.sin_port : a->u.in6.sin6_port);
}

void sock_addr_format(const struct sock_addr *a, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    sock_addr_host(a, host, sizeof host);
    if (a->u.sa.sa_family == AF_INET6)
        snprintf(buf, len, "[%s]:%d", host, sock_addr_port(a));
    else
        snprintf(buf, len, "%s:%d", host, sock_addr_port(a));
}

int sock_addr_is_any(const struct sock_addr *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return a->u.in4.sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&a->u.in6.sin6_addr);
}

int sock_addr_is_loopback(const struct sock_addr *a)
{
    if (a->u.sa.sa_family == AF_INET)
        return (ntohl(a->u.in4.sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *v6 = &a->u.in6.sin6_addr;
    return a->u.sa.sa_family == AF_INET6 &&
           (IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127));
}

int sock_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void sock_tune(int fd, const struct sock_opts *o)
{
    int one = 1;
    if (o->nodelay)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (o->keepalive_s > 0) {
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        int idle = o->keepalive_s, intvl = o->keepalive_s / 3 ? o->keepalive_s / 3 : 1, cnt = 3;
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
    if (o->sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf, sizeof o->sndbuf);
    if (o->rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf, sizeof o->rcvbuf);
}

int sock_listen(const struct sock_addr *a, int backlog, int reuseport,
                const struct sock_opts *opts, char *err, size_t errlen)
{
    char text[SOCK_ADDR_STRLEN];
    sock_addr_format(a, text, sizeof text);
    int fd = socket(a->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s: socket: %s", text, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) {
        snprintf(err, errlen, "%s: SO_REUSEPORT: %s", text, strerror(errno));
        close(fd);
        return -1;
    }
    if (a->u.sa.sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (opts)
        sock_tune(fd, opts);
    if (bind(fd, &a->u.sa, a->len) < 0 || listen(fd, backlog) < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", text, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int sock_connect(const struct sock_addr *a, const struct sock_opts *opts)
{
    int fd = socket(a->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (opts)
        sock_tune(fd, opts);
    if (connect(fd, &a->u.sa, a->len) < 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int sock_connect_result(int fd)
{
    int e = 0;
    socklen_t len = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
        return errno;
    return e;
}
