/* anyip.c: Linux AnyIP: checks for and adds the `local` route of an IPv6 prefix (netlink). */
#include "core/anyip.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#endif

void anyip_route_command(const struct in6_addr *prefix, int len, char *buf, size_t buflen)
{
    char p[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, prefix, p, sizeof p);
    snprintf(buf, buflen, "ip -6 route add local %s/%d dev lo", p, len);
}

#ifdef __linux__
/* Appends attribute type with n bytes of data to the message in buf. */
static void rta_put(struct nlmsghdr *h, size_t cap, unsigned short type, const void *data,
                    size_t n)
{
    struct rtattr *rta = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));
    if (NLMSG_ALIGN(h->nlmsg_len) + RTA_SPACE(n) > cap)
        return;
    rta->rta_type = type;
    rta->rta_len = (unsigned short)RTA_LENGTH(n);
    memcpy(RTA_DATA(rta), data, n);
    h->nlmsg_len = (uint32_t)(NLMSG_ALIGN(h->nlmsg_len) + RTA_SPACE(n));
}

union nl_msg {
    struct nlmsghdr h;
    char b[256];
};

/* Starts an IPv6 route message of type with flags in m; returns its rtmsg to fill. */
static struct rtmsg *nl_route_msg(union nl_msg *m, unsigned short type, unsigned short flags)
{
    memset(m, 0, sizeof *m);
    m->h.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
    m->h.nlmsg_type = type;
    m->h.nlmsg_flags = flags;
    m->h.nlmsg_seq = 1;
    struct rtmsg *rt = NLMSG_DATA(&m->h);
    rt->rtm_family = AF_INET6;
    return rt;
}

/* Sends request m and reads the first answer into ans. Returns its length, or -1 (errno). */
static ssize_t nl_talk(const struct nlmsghdr *m, char *ans, size_t anslen)
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return -1;
    struct sockaddr_nl k = {.nl_family = AF_NETLINK};
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = sendto(fd, m, m->nlmsg_len, 0, (struct sockaddr *)&k, sizeof k);
    if (n >= 0)
        n = recv(fd, ans, anslen, 0);
    int e = errno;
    close(fd);
    errno = e;
    return n;
}

/* IPv6 bind() does not look at routes (only at configured addresses), so a test bind cannot
 * tell: the kernel's route lookup for an address inside the prefix can (RTM_GETROUTE). */
int anyip_ready(const struct in6_addr *prefix, int len)
{
    union nl_msg m;
    struct rtmsg *rt = nl_route_msg(&m, RTM_GETROUTE, NLM_F_REQUEST);
    rt->rtm_dst_len = 128;
    struct in6_addr a = *prefix;
    if (len < 128)
        a.s6_addr[15] ^= 1; /* an address inside, not the prefix's own */
    rta_put(&m.h, sizeof m, RTA_DST, &a, sizeof a);
    char ans[2048];
    ssize_t n = nl_talk(&m.h, ans, sizeof ans);
    const struct nlmsghdr *h = (const struct nlmsghdr *)ans;
    if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct rtmsg)) || h->nlmsg_type != RTM_NEWROUTE)
        return 0;
    return ((const struct rtmsg *)NLMSG_DATA(h))->rtm_type == RTN_LOCAL;
}

int anyip_route_add(const struct in6_addr *prefix, int len, char *err, size_t errlen)
{
    unsigned lo = if_nametoindex("lo");
    if (!lo) {
        snprintf(err, errlen, "no loopback interface");
        return -1;
    }
    union nl_msg m;
    struct rtmsg *rt = nl_route_msg(&m, RTM_NEWROUTE,
                                    NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    rt->rtm_dst_len = (unsigned char)len;
    rt->rtm_table = RT_TABLE_LOCAL;
    rt->rtm_protocol = RTPROT_BOOT;
    rt->rtm_scope = RT_SCOPE_HOST;
    rt->rtm_type = RTN_LOCAL;
    uint32_t oif = lo;
    rta_put(&m.h, sizeof m, RTA_DST, prefix, sizeof *prefix);
    rta_put(&m.h, sizeof m, RTA_OIF, &oif, sizeof oif);
    char ans[1024];
    ssize_t n = nl_talk(&m.h, ans, sizeof ans);
    const struct nlmsghdr *a = (const struct nlmsghdr *)ans;
    int e;
    if (n < 0)
        e = errno;
    else if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || a->nlmsg_type != NLMSG_ERROR)
        e = EPROTO;
    else
        e = -((const struct nlmsgerr *)NLMSG_DATA(a))->error;
    if (e && e != EEXIST) {
        snprintf(err, errlen, "adding the local route: %s", strerror(e));
        return -1;
    }
    return 0;
}
#else
int anyip_ready(const struct in6_addr *prefix, int len)
{
    (void)prefix;
    (void)len;
    return 0;
}

int anyip_route_add(const struct in6_addr *prefix, int len, char *err, size_t errlen)
{
    (void)prefix;
    (void)len;
    snprintf(err, errlen, "AnyIP routes are Linux only");
    return -1;
}
#endif
