/* acl.h: the access list: allow/deny networks from the config and from list files. */
#ifndef MTPROXY_PROXY_ACL_H
#define MTPROXY_PROXY_ACL_H

#include <sys/socket.h>

#include "core/cidr.h"
#include "core/config.h"
#include "config/options.h"

/* Built once from the options (and rebuilt whole on reload); read-only afterwards, shared by
 * every worker. */
struct acl {
    struct cidr_set allow, deny;
    int has_allow; /* any allow entry (even one that merged away): only allowed sources pass */
    struct cidr_set pp_from; /* proxy-protocol-from: who may send a PROXY header (empty: any) */
};

enum acl_verdict {
    ACL_PASS = 0,
    ACL_DENIED,      /* in a deny entry (deny wins over allow) */
    ACL_NOT_ALLOWED, /* allow entries exist and none holds the address */
};

/* Builds a from o's allow/deny lines and allow-file/deny-file lists. Every bad list line is
 * added to errs as "PATH:LINE: message". Returns the number of errors (a is usable and must be
 * freed either way). */
int acl_build(struct acl *a, const struct options *o, struct config_errors *errs);

/* The verdict for a client address (IPv4-mapped IPv6 addresses are checked as IPv4). */
enum acl_verdict acl_check(const struct acl *a, const struct sockaddr *sa);

/* proxy-protocol: 1 if the connection's own source may send a PROXY header. */
int acl_pp_trusted(const struct acl *a, const struct sockaddr *sa);

/* 1 if the list has any entry (checking can be skipped otherwise). */
int acl_active(const struct acl *a);

void acl_free(struct acl *a);

#endif
