/* loopback_guard.c: linked into every unit test, whose connect(2) calls it takes over
 * (-Wl,--wrap=connect): a connect to anything but 127.0.0.0/8, ::1 (plain or IPv4-mapped
 * 127/8) or a Unix socket fails with EACCES before the kernel sees it, and is reported on
 * stderr. So no unit test can dial an outside address, even outside tests/netns.sh: the
 * built-in DC table's real Telegram addresses (test_dc formats them) never leave the process. */
#include "loopback_guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>

int __real_connect(int fd, const struct sockaddr *sa, socklen_t len);
int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len);

int loopback_guard_allows(const struct sockaddr *sa, socklen_t len)
{
    if (!sa || len < (socklen_t)sizeof(sa_family_t))
        return 0;
    switch (sa->sa_family) {
    case AF_UNIX:
        return 1;
    case AF_INET: {
        if (len < (socklen_t)sizeof(struct sockaddr_in))
            return 0;
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    case AF_INET6: {
        if (len < (socklen_t)sizeof(struct sockaddr_in6))
            return 0;
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    default:
        return 0;
    }
}

int __wrap_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (!loopback_guard_allows(sa, len)) {
        fprintf(stderr, "loopback_guard: a unit test tried to connect outside loopback: refused\n");
        errno = EACCES;
        return -1;
    }
    return __real_connect(fd, sa, len);
}
