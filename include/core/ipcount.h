/* ipcount.h: per-worker counts of connections by source address (a bounded hash table). */
#ifndef MTPROXY_CORE_IPCOUNT_H
#define MTPROXY_CORE_IPCOUNT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/siphash.h"

struct ipcount_slot {
    uint8_t addr[16]; /* IPv6, or IPv4 as ::ffff:a.b.c.d */
    uint32_t n;       /* 0 = empty slot */
};

/* Open addressing; the home slot is SipHash-1-3 of all 16 address bytes under a random
 * 128-bit key drawn for each table, so a remote peer cannot aim collisions (addresses of one
 * prefix, picked by the sender, land as spread as random ones). */
struct ipcount {
    struct ipcount_slot *t;
    size_t mask; /* capacity - 1 (a power of two) */
    size_t used;
    struct siphash_key key;
};

/* Room for at least max_addrs distinct addresses. Returns 0, or -1 without memory. */
int ipcount_init(struct ipcount *m, size_t max_addrs);

/* Counts one more connection from sa's address (AF_INET or AF_INET6). Returns the new count,
 * or 0 when the table holds max_addrs addresses already (nothing counted). */
uint32_t ipcount_add(struct ipcount *m, const struct sockaddr *sa);

/* One connection fewer from sa's address (which must have been counted). */
void ipcount_del(struct ipcount *m, const struct sockaddr *sa);

/* Connections counted for sa's address now. */
uint32_t ipcount_get(const struct ipcount *m, const struct sockaddr *sa);

void ipcount_free(struct ipcount *m);

#endif
