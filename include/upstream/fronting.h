/* fronting.h: where non-clients are forwarded (the real site), PROXY headers, loop checks. */
#ifndef MTPROXY_PROXY_FRONTING_H
#define MTPROXY_PROXY_FRONTING_H

#include <stddef.h>
#include <stdint.h>

#include "core/sock.h"
#include "config/options.h"

#define MASK_MAX_TARGETS 256 /* distinct fronting domains; more are fronted to the first */

/* One resolved fronting target: the web server of a domain (or the configured mask-host). */
struct mask_target {
    char domain[SECRET_DOMAIN_MAX + 1]; /* the ee domain it serves; "" for mask-host */
    struct sock_addr addr;
};

/* Read-only once built: shared by all workers. */
struct mask_table {
    struct mask_target t[MASK_MAX_TARGETS];
    int n;
    int enabled; /* mask = on and at least one target resolved */
};

/* Resolves the targets: mask-host:mask-port if set (every connection goes there), else each
 * distinct ee domain on mask-port. A name that does not resolve is skipped with a warning
 * (connections that would go there are held silently instead). Fails with a message in err
 * if a target is one of this proxy's own listening sockets (fronting would loop). */
int mask_table_build(struct mask_table *t, const struct options *o, char *err, size_t errlen);

/* The target for a connection whose hello named sni (NULL/"" if none or not TLS): the target
 * of that domain if it is one of ours, else the first target. NULL if masking is off. */
const struct mask_target *mask_lookup(const struct mask_table *t, const char *sni);

/* Writes a PROXY protocol header (version 1 text or version 2 binary) telling the target
 * that src (the client) connected to dst (our listening socket). Returns its length, or 0
 * if out is too small or the families differ. */
size_t mask_proxy_header(uint8_t *out, size_t outlen, int version, const struct sock_addr *src,
                         const struct sock_addr *dst);

/* 1 if addr is an address of this host (loopback, or on one of its interfaces). */
int mask_addr_is_local(const struct sock_addr *addr);

#endif
