/* preflight.h: what start-up works out from the options before the proxy runs, shared with `mtproxy doctor`: the worker count, the file-descriptor budget, a drawn secret. */
#ifndef MTPROXY_PROXY_PREFLIGHT_H
#define MTPROXY_PROXY_PREFLIGHT_H

#include "proto/secret.h"
#include "config/options.h"

struct me_table;

/* The descriptors the proxy needs against a limit. */
struct preflight_fds {
    long long reserve; /* besides the two per connection: per worker its listeners, epoll and
                        * eventfd, the spare for the next accept, splice pipes, metrics, pooled
                        * DC sockets and ME links; plus slack */
    long long need;    /* 2 * max-connections + reserve */
    unsigned long long limit; /* the limit checked against (RLIM_INFINITY: none) */
    int fits;          /* 1 if need <= limit */
    long long fit;     /* if not: the max-connections the limit holds (may be 0) */
};

/* The workers the proxy runs: workers, or with 0 one per online CPU (at most 256). */
int preflight_workers(const struct options *o);

/* The budget of o run by nworkers workers with ME table me (NULL: direct mode) against limit
 * (the hard RLIMIT_NOFILE, which start-up raises the soft one to). Two descriptors per
 * connection (from accept on: while it handshakes its worker holds one in reserve for its
 * upstream socket); dc-pool sockets per worker per DC id; in middle mode me-pool links per
 * worker per ME address, twice (a reload's new set while the old one drains). */
void preflight_fds(const struct options *o, int nworkers, const struct me_table *me,
                   unsigned long long limit, struct preflight_fds *out);

/* The hard RLIMIT_NOFILE (RLIM_INFINITY if it cannot be read). */
unsigned long long preflight_fd_limit(void);

/* Draws a new 16-byte key into s (its kind set). A plain secret is redrawn while its hex
 * starts with dd or ee: some clients (Telethon among them) read such a prefix as a secret
 * kind. Returns 0, or -1 (no random source). */
int preflight_draw_key(struct secret *s);

#endif
