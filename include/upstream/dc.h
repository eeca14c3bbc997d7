/* dc.h: the DC address table (built-in production list + dc lines) and id lookup. */
#ifndef MTPROXY_PROXY_DC_H
#define MTPROXY_PROXY_DC_H

#include "core/sock.h"
#include "config/options.h"

#define DC_MAX_ADDRS (OPT_MAX_DC_ADDRS + 32)

struct dc_entry {
    int id;
    struct sock_addr addr;
};

/* Addresses grouped by id, each group in connect order. Read-only once built: shared by all
 * workers without locks. */
struct dc_table {
    struct dc_entry e[DC_MAX_ADDRS];
    int n;
    int default_dc;
};

/* Builds the table from the options: dc lines (in order) replace the built-in addresses of
 * their id; built-ins are used for other ids if dc-builtin is on; IPv6 entries are dropped
 * with only-ipv4 and put first with prefer-ipv6 (else IPv4 first). Returns 0. */
int dc_table_build(struct dc_table *t, const struct options *o);

/* Finds the addresses for a client's dc id: the id itself, else |id| for a negative
 * (media) id, else the default DC. Sets *first to the index of the first entry and returns
 * how many consecutive entries belong to it (0 if none). *resolved gets the id used. */
int dc_lookup(const struct dc_table *t, int id, int *first, int *resolved);

#endif
