/* dcpool.h: per-worker pools of pre-connected, header-less TCP sockets to each DC. */
#ifndef MTPROXY_PROXY_DCPOOL_H
#define MTPROXY_PROXY_DCPOOL_H

#include <ev.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/stat.h"

#include "core/sock.h"
#include "upstream/dc.h"
#include "upstream/dialer.h"

struct dcpool;

/* One pooled socket. */
struct dcpool_slot {
    struct dcpool *pool;
    int fd;          /* -1 when empty */
    int ready;       /* connected and idle */
    int addr_try;    /* index of the address being tried, within the pool's addresses */
    ev_io io;
    ev_timer timer;  /* connect timeout, back-off before reconnecting, or (ready) recycle */
    ev_tstamp born;  /* when it became ready */
    double last_drop; /* life of this slot's last socket the DC closed (0: none yet) */
    struct dial dial; /* the connect (and SOCKS5 handshake) before it is ready */
};

/* The pool for one DC id. */
struct dcpool {
    struct dcpool_set *set;
    int id;
    int first, count;  /* its addresses in the dc table */
    int fails;         /* consecutive failures, for back-off */
    double idle_life;  /* the DC's idle timeout as learnt (0: not yet): two drops in a row
                        * of one slot, the longer of their lives (so one early close, say a
                        * DC restart, teaches nothing); sockets are recycled before it */
    struct dcpool_slot *slots;
};

struct dcpool_stats {
    stat_t connects;  /* pooled sockets that became ready */
    stat_t claims;    /* handed to a client */
    stat_t dropped;   /* ready sockets the DC closed (replaced) */
    stat_t failures;  /* connect attempts that failed */
    stat_t recycled;  /* ready sockets we closed and replaced before the DC's idle timeout */
    stat_t ready;     /* gauge: connected idle sockets waiting for a client now */
};

/* All pools of one worker. */
struct dcpool_set {
    struct ev_loop *loop;
    const struct dc_table *dcs;
    struct sock_opts opts;
    double connect_timeout;
    int per_dc;
    struct dcpool *pools;
    int npools;
    int stopped;
    const struct socks5_server *socks; /* NULL: connect directly */
    struct sock_addr socks_addr;
    struct dcpool_stats stats;
};

/* A ready socket is closed and replaced (recycled) after DCPOOL_MAX_IDLE seconds unused, or
 * sooner, at DCPOOL_RECYCLE_SHARE of the DC's idle timeout once learnt (a DC closing it
 * first would race a client claiming it: its close is still on the way while the client's
 * first bytes go out). The age cap also bounds how long a path that went silent (a NAT that
 * forgot the connection) can hide a dead socket. */
#define DCPOOL_MAX_IDLE 120.0
#define DCPOOL_RECYCLE_SHARE 0.75

/* Creates per_dc sockets for every DC id of the table (each id group once) and starts
 * connecting them in loop (through the SOCKS5 server at socks_addr if socks is not NULL: a
 * socket is ready once the server connected it to the DC). per_dc 0 makes an empty set.
 * Returns 0, or -1. */
int dcpool_init(struct dcpool_set *s, struct ev_loop *loop, const struct dc_table *dcs,
                int per_dc, const struct sock_opts *opts, double connect_timeout,
                const struct socks5_server *socks, const struct sock_addr *socks_addr);

/* Hands out a connected, idle socket to DC id (as resolved by dc_lookup), checked alive, and
 * starts replacing it. Returns the fd (the caller owns it), or -1 if none is ready. */
int dcpool_claim(struct dcpool_set *s, int id);

/* Closes every pooled socket and stops the watchers (before the loop ends). */
void dcpool_stop(struct dcpool_set *s);

/* Frees the memory (after dcpool_stop). */
void dcpool_destroy(struct dcpool_set *s);

#endif
