/* middle.h: middle-proxy mode: per-worker encrypted RPC links to Telegram's MEs, clients
 * multiplexed over them by connection id, flow control, reload. */
#ifndef MTPROXY_PROXY_MIDDLE_H
#define MTPROXY_PROXY_MIDDLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sock.h"
#include "core/worker.h"
#include "proto/rpc.h"
#include "conn/conn.h" /* enum conn_reason (the verdicts of the client hooks) */
#include "config/options.h"

struct conn;
struct proxy_worker;

/* The MEs and the proxy secret, built from proxy-config-file and proxy-secret-file with each
 * config generation (struct gen's me) and shared read-only by the workers (reference counted:
 * a reload hands out a new one while links of the old one finish their clients). */
struct me_table {
    _Atomic int refs;
    uint8_t secret[RPC_SECRET_MAX];
    size_t secret_len;
    int default_dc;
    int naddrs;
    struct me_addr {
        int16_t dc;
        int16_t uniq; /* the first entry with this address (links are per address) */
        struct sock_addr addr;
    } addrs[RPC_CONFIG_MAX];
};

/* Reads and checks both files of o. Returns a table (1 reference), or NULL with err
 * ("file:line: message" for a bad config line, "file: message" otherwise). */
struct me_table *middle_table_load(const struct options *o, char *err, size_t errlen);

/* Takes one more reference (NULL is fine). Returns t. */
struct me_table *middle_table_get(struct me_table *t);

/* Drops one reference (NULL is fine). */
void middle_table_put(struct me_table *t);

/* In the worker's setup (before its thread runs, after proxy_worker_init): middle-proxy state
 * for pw with its generation's table (takes its own reference) and the links to every ME
 * (me-pool each), started once the loop runs. Returns 0, or -1. */
int middle_init(struct proxy_worker *pw);

/* In the worker thread, when pw adopts generation g after old (gen_adopt): if g has another
 * ME table, new clients go to links of it (started now) and old links close once their
 * clients are gone. Nothing before middle_init or in direct mode. */
struct gen;
void middle_adopt(struct proxy_worker *pw, const struct gen *g, const struct gen *old);
/* In the worker thread at stop (after its connections closed): closes every link. */
void middle_stop(struct proxy_worker *pw);

/* After the loop ended: frees the state. */
void middle_destroy(struct proxy_worker *pw);

/* The connection machine's hooks. middle_attach: c's obfuscated2 header is done (client
 * streams keyed); extra[0..n) are client bytes that came with it, still encrypted. Attaches c to
 * a link for its DC and starts reading it; on CR_NONE the caller moves c to RELAY and arms its
 * idle timer. middle_client_event: c's socket is ready (RELAY state). Neither closes c: they
 * return CR_NONE to go on, or why c ends. middle_detach: c is closing (from conn_close or
 * conn_close_later): tells its ME and forgets it. */
enum conn_reason middle_attach(struct conn *c, uint8_t *extra, size_t n);
enum conn_reason middle_client_event(struct conn *c, int revents);
void middle_detach(struct conn *c);

/* One client of an ME link paused longer than me-stall-grace, as the stall check sees it. */
struct middle_holder {
    void *who;      /* the caller's (its client) */
    size_t held;    /* bytes it holds toward its socket, counted in the link's total */
    int progressed; /* wrote some of them to its socket since the link paused */
    int evict;      /* out: chosen */
};

/* Chooses whom a paused link closes so that it can be read again: every holder that made no
 * progress (since the last check) and holds more than fair bytes (its share of
 * me-link-buffer), then the largest holders left that made none (all: any holder) until the
 * rest hold at most target (the resume mark). Sorts h[0..n) by held, largest first, and sets
 * evict on the chosen. Returns how many were chosen. */
int middle_stall_victims(struct middle_holder *h, int n, size_t fair, size_t target, int all);

#endif
