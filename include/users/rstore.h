/* rstore.h: the fleet's shared replay store in Redis/Valkey: SET NX PX per handshake, async on a worker's loop. */
#ifndef MTPROXY_PROXY_RSTORE_H
#define MTPROXY_PROXY_RSTORE_H

#include <ev.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/stat.h"

#define RSTORE_KEY_LEN 16

/* Where the store is (replay-store = URL) and how to behave when it does not answer. */
struct rstore_config {
    int on;
    char host[256];      /* an address (names are resolved at start into it), or "" */
    int port;
    char path[108];      /* a Unix socket path instead of host:port, or "" */
    char password[128];  /* AUTH before use; "" = none */
    int db;              /* SELECT before use when > 0 */
    char key[16];        /* the config key it came from (log lines name it) */
};

/* Parses "redis://[:PASSWORD@]HOST:PORT[/DB]" or "redis://[:PASSWORD@]/PATH/TO/SOCKET[?db=DB]"
 * (HOST an IPv4 address, [IPv6] or a name). Returns 0, or -1 with err. */
int rstore_parse_url(const char *url, struct rstore_config *out, char *err, size_t errlen);
/* The same for config key key (replay-store, limits-store: errors and log lines name it). */
int rstore_parse_url_as(const char *key, const char *url, struct rstore_config *out, char *err,
                        size_t errlen);

/* Resolves a host name into an address (blocking: start-up and --check-config only).
 * Returns 0, or -1 with err. */
int rstore_resolve(struct rstore_config *cfg, char *err, size_t errlen);

enum rstore_verdict {
    RSTORE_NEW = 0,  /* no instance has seen the key: it is recorded now */
    RSTORE_SEEN,     /* some instance has: a replay */
    RSTORE_FAILED,   /* the store did not answer (down, error, disconnected) */
};

/* The reply path without a socket (what on_answer and the fuzz target share): reads the
 * store's bytes buf[0..len) as RESP replies the way the worker's connection does (the same
 * reader, the same limits: no array of more than RSTORE_REPLY_MAX_ELEMENTS) and stores the
 * verdict each complete reply would give a question in out[0..cap) (replies past cap are
 * read and dropped). If text is not NULL, the printable text of the last error or status
 * reply is put there (textlen >= 1; what a log line may show). Returns the number of complete
 * replies, or -1 once the bytes are not RESP (or break a limit): the connection is dropped
 * then. Built without hiredis: -1. */
/* A reply (a hiredis redisReply, or NULL: the connection went away before it came), on the
 * store's loop (or from rstore_each_reply). */
typedef void (*rstore_reply_cb)(void *reply, void *priv);

/* Reads buf[0..len) as RESP replies with the store's reader and limits (big:
 * RSTORE_BIG_MAX_ELEMENTS) and calls fn with each complete one (freed after). Returns the
 * number of complete replies, or -1 once the bytes are not RESP (or break a limit). Built
 * without hiredis: -1. */
int rstore_each_reply(const char *buf, size_t len, int big, rstore_reply_cb fn, void *ctx);

#define RSTORE_REPLY_MAX_ELEMENTS 16
#define RSTORE_BIG_MAX_ELEMENTS (1 << 21) /* a store that asks for arrays (rstore.big) */
int rstore_parse_replies(const char *buf, size_t len, enum rstore_verdict *out, size_t cap,
                         char *text, size_t textlen);

/* Copies the printable ASCII of s[0..n) into out (at most cap - 1 bytes; others become '?'),
 * for a log line quoting what the store said. */
void rstore_printable(const char *s, size_t n, char *out, size_t cap);

/* Called on the worker's loop (never from inside rstore_check) with the answer for the
 * question tagged (owner, token). */
typedef void (*rstore_cb)(void *owner, uint64_t token, enum rstore_verdict v);

struct rstore_stats {
    stat_t asked, seen, failed, down, reconnects;
};

/* One worker's connection to the store. */
struct rstore {
    struct ev_loop *loop;
    const struct rstore_config *cfg;
    void *ac;            /* redisAsyncContext, or NULL while down */
    int ready;           /* connected, AUTH/SELECT sent */
    int stopping;
    double backoff;      /* seconds before the next reconnect */
    ev_timer retry;
    unsigned inflight;
    int big;             /* replies may be arrays up to RSTORE_BIG_MAX_ELEMENTS (rstore_open) */
    struct rstore_stats stats;
};

/* Starts connecting (in the background; questions before it is up get -1). */
void rstore_init(struct rstore *rs, struct ev_loop *loop, const struct rstore_config *cfg);
/* The same for a connection whose replies may be arrays up to RSTORE_BIG_MAX_ELEMENTS (big). */
void rstore_open(struct rstore *rs, struct ev_loop *loop, const struct rstore_config *cfg,
                 int big);

/* Asks whether key was seen, and records it for ttl_ms (SET mtproxy:r:HEX 1 NX PX ttl).
 * Returns 0 when the question is on its way (cb comes later, exactly once), or -1 when the
 * store is down right now (nothing will be called: the caller applies its failure policy). */
int rstore_check(struct rstore *rs, const uint8_t key[RSTORE_KEY_LEN], unsigned ttl_ms,
                 rstore_cb cb, void *owner, uint64_t token);

/* Sends one command (argv as redisAsyncCommandArgv takes it) on a store's connection: for
 * a user of the connection other than the replay check (limits-store). Returns 0 (cb comes
 * later, exactly once), or -1 (down: nothing will be called). */
int rstore_command(struct rstore *rs, int argc, const char **argv, const size_t *argvlen,
                   rstore_reply_cb cb, void *priv);

/* Drops the connection (pending callbacks get NULL) and connects again after the back-off:
 * for a store that stopped answering. */
void rstore_reconnect(struct rstore *rs);

/* Disconnects (pending callbacks are called with RSTORE_FAILED) and stops the timers. */
void rstore_stop(struct rstore *rs);

#endif
