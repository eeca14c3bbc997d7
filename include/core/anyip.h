/* anyip.h: Linux AnyIP: a `local` route that makes every address of an IPv6 prefix ours. */
#ifndef MTPROXY_CORE_ANYIP_H
#define MTPROXY_CORE_ANYIP_H

#include <netinet/in.h>
#include <stddef.h>

/* 1 if this machine takes connections to the addresses of prefix/len now (the kernel routes
 * an address inside it as local), else 0. */
int anyip_ready(const struct in6_addr *prefix, int len);

/* Writes the command an operator runs to add the route: "ip -6 route add local P/LEN dev lo". */
void anyip_route_command(const struct in6_addr *prefix, int len, char *buf, size_t buflen);

/* Adds the route (netlink RTM_NEWROUTE, type RTN_LOCAL, table local, dev lo; an existing one
 * is fine). Needs CAP_NET_ADMIN. Returns 0, or -1 with the reason in err. */
int anyip_route_add(const struct in6_addr *prefix, int len, char *err, size_t errlen);

#endif
