/* prefix.h: listen-prefix: one IPv6 address per user from a prefix, and the address -> user map. */
#ifndef MTPROXY_PROXY_PREFIX_H
#define MTPROXY_PROXY_PREFIX_H

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "core/siphash.h"
#include "proto/secret.h"

struct gen;
struct options;

/*
 * With `listen-prefix = [P]/LEN:PORT` every user (secret name) gets an address in P:
 *
 *   host bits = HMAC-SHA256(key, "mtproxy-addr" 0x00 NAME 0x00 GEN32_LE), first bytes
 *
 * key: listen-prefix-key, else the one drawn at first start and kept in STATE-FILE.addresses
 * (a sibling of the state file, which the running proxy rewrites: the CLI writes this one).
 * GEN is the user's address generation (0 until `mtproxy user rotate-address NAME`), kept in
 * the same file with the time of the last rotation; the previous generation's address keeps
 * serving for listen-prefix-grace after it. All host bits zero becomes ...1.
 *
 * STATE-FILE.addresses, one item a line:   key = HEX64
 *                                          user = NAME GEN ROTATED_UNIX_TIME
 */

#define PREFIX_KEY_LEN 32
#define PREFIX_NOT_VIA (-2) /* a connection that did not come in through listen-prefix */
#define PREFIX_NOBODY (-1)  /* an address of the prefix that is no user's */

/* The address of user name at generation gen. */
void prefix_user_addr(const uint8_t key[PREFIX_KEY_LEN], const struct in6_addr *net, int len,
                      const char *name, uint32_t gen, struct in6_addr *out);

/* What STATE-FILE.addresses holds. */
struct prefix_user_gen {
    char name[SECRET_NAME_MAX];
    uint32_t gen;
    int64_t rotated; /* unix time of the last rotation (0 = never) */
};
struct prefix_state {
    uint8_t key[PREFIX_KEY_LEN];
    int has_key;
    struct prefix_user_gen *u;
    size_t n, cap;
};

/* Reads path (a missing file leaves st empty). Returns 0, or -1 with err (file:line). */
int prefix_state_load(const char *path, struct prefix_state *st, char *err, size_t errlen);
/* Writes st to path atomically, 0600. Returns 0, or -1 with err. */
int prefix_state_save(const char *path, const struct prefix_state *st, char *err,
                      size_t errlen);
void prefix_state_free(struct prefix_state *st);
/* User name's entry (NULL if it has none). */
const struct prefix_user_gen *prefix_state_find(const struct prefix_state *st, const char *name);

/* The address -> user map: open addressing (at most half full) on SipHash-1-3 of the address
 * under a random key (a client picks the address it connects to: unkeyed, it could line up
 * collisions); O(1) per lookup. */
struct prefix_slot {
    struct in6_addr a;
    int32_t uid;  /* PREFIX_NOBODY = empty */
    double until; /* unix time it stops serving (an old address in its grace), 0 = never */
};
struct prefix_map {
    struct siphash_key key; /* drawn per map */
    uint32_t mask;
    uint32_t n;
    struct prefix_slot *slots;
};

/* Sets up an empty map with room for n entries. Returns 0, or -1. */
int prefix_map_init(struct prefix_map *m, uint32_t n);
/* Adds a -> uid (until 0 = for good). Returns 0, or -1 if a is there already for another uid
 * or the map is full. */
int prefix_map_add(struct prefix_map *m, const struct in6_addr *a, int32_t uid, double until);
/* The user of a at time now, or PREFIX_NOBODY. */
int32_t prefix_map_lookup(const struct prefix_map *m, const struct in6_addr *a, double now);
void prefix_map_free(struct prefix_map *m);

/* The build's part (reload_build, main thread): the key (listen-prefix-key or the file's; if
 * neither and start is set, drawn and saved), each secret's address in g->opt.user_addr, and
 * (if g has users mapped) g->pmap: current addresses, and previous ones within their grace at
 * time now. Nothing to do without listen-prefix. Returns 0, or -1 with err. */
int prefix_build(struct gen *g, int start, int64_t now, char *err, size_t errlen);

/* In the worker, at accept through the listen-prefix listener: the user whose address fd was
 * reached on (getsockname), PREFIX_NOBODY if none (or not in the prefix). */
int32_t prefix_accept(const struct gen *g, int fd, double now);

/* Secret i's link host and port: its own address and the prefix's port with listen-prefix
 * (host gets the bare address), else host and port unchanged. Returns the port. */
int prefix_link_host(const struct options *o, int i, char *host, size_t hostlen, int port);

/* The subcommand `mtproxy user rotate-address NAME`: bumps NAME's generation in
 * STATE-FILE.addresses, prints the new address to out, and sends the running proxy SIGHUP
 * (its pidfile), which takes it at once. Returns the exit code. */
int prefix_rotate_cmd(const struct options *o, const char *name, FILE *out);

/* Start-up, before dropping privileges to uid: STATE-FILE.addresses becomes uid's (reloads
 * read it). */
void prefix_give_to(const struct options *o, uid_t uid);

/* Start-up, before privileges are dropped: makes sure the prefix is routed locally (AnyIP),
 * adding the route if allowed. Returns 0 if it is, else -1 with a message in msg naming the
 * `ip -6 route` line to add. */
int prefix_route_setup(const struct options *o, char *msg, size_t msglen);

#endif
