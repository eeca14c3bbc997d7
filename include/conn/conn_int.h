/* conn_int.h: what the connection's rooms (src/conn/conn*.c, hs_*.c) call of each other. */
#ifndef MTPROXY_PROXY_CONN_INT_H
#define MTPROXY_PROXY_CONN_INT_H

#include <stdlib.h>

#include "core/worker.h"
#include "conn/conn.h"
#include "upstream/middle.h"
#include "relay/relay.h"
#include "config/reload.h"

/*
 * Calls go one way (tests/check_layers.py checks there is no circle):
 *   conn_worker (the worker's life, its sweep and generation adoption close connections)
 *   -> conn (the state machine: events in, verdicts out, conn_close on a reason; accept)
 *   -> hs_first -> hs_tls -> hs_obfs2 -> hs_gate, conn_front -> conn_up -> relay, middle
 *   and from any of them down to conn_guard, conn_names, conn_close (conn_close, the log
 *   rate limit) -> relay, middle -> conn_mark (conn_close_later, which calls nothing above it).
 * relay.c and middle_*.c return verdicts too; they reach conn_mark.c (conn_close_later) for
 * connections other than the one whose event they handle.
 */

/* --- verdicts ---------------------------------------------------------------------------- */

/* A step's verdict is an enum conn_reason: CR_NONE to go on (the step moved c to the state it
 * wanted), else the reason the state machine closes the connection with. relay.c and middle_*.c
 * (side_flush, side_queue, relay_event, middle_client_event, middle_attach) return the same. */

/* 1 if verdict r ends the step: a reason to close. */
static inline int conn_stop(enum conn_reason r)
{
    return r != CR_NONE;
}

/* --- small per-connection bookkeeping (used by several rooms) --------------------------- */

/* Re-arms c's one timer (handshake / connect / idle / hold deadline by state). */
static inline void timer_arm(struct conn *c, double seconds)
{
    ev_timer_stop(c->pw->w->loop, &c->timer);
    ev_timer_set(&c->timer, seconds, 0);
    ev_timer_start(c->pw->w->loop, &c->timer);
}

/* The worker holds a descriptor in reserve for a connection from accept until it opens its
 * upstream socket or knows it never will (held, closed), so that socket is not refused when
 * accept took the last free descriptor. The handshake states are the ones that hold it: this
 * gives it back when the connection leaves them (call it before changing the state). */
static inline void reserve_release(struct conn *c)
{
    if (c->state == CS_HEADER || c->state == CS_TLS_HELLO || c->state == CS_TLS_HEADER ||
        c->state == CS_PROXY_HDR || c->state == CS_STORE_WAIT)
        worker_reserve_release(c->pw->w);
}

/* The connection proved a secret (or is closing): it stops counting against its address. */
static inline void stranger_done(struct conn *c)
{
    if (c->stranger) {
        ipcount_del(&c->pw->strangers, &c->peer.u.sa);
        c->stranger = 0;
    }
}

/* The connection left the handshake (proved a secret, or is rejected/closing). */
static inline void handshake_done(struct conn *c)
{
    if (c->handshaking) {
        c->handshaking = 0;
        c->pw->handshakes--;
    }
}

/* Frees the hello/PROXY/ServerHello buffer and gives its bytes back to the worker's budget. */
static inline void hbuf_free(struct conn *c)
{
    c->pw->hbuf_bytes -= c->hcap;
    free(c->hbuf);
    c->hbuf = NULL;
    c->hlen = c->hcap = 0;
}

/* --- names (conn_names.c) ---------------------------------------------------------------- */

/* c is now known to be kind k: counted in total and while open. */
void conn_set_kind(struct conn *c, enum conn_kind k);

/* --- closing (conn_close.c) -------------------------------------------------------------- */

#define LOGLIM_REJECT CR_COUNT /* the log rate limit's slot for reject lines */

/* 1 if a line about a stranger (slot: a close reason or LOGLIM_REJECT) may be written now. */
int conn_loglim_allow(struct proxy_worker *pw, int slot);
/* The log rate limit's window ended: one summary line per slot that dropped lines. */
void conn_loglim_timer(struct ev_loop *loop, ev_timer *t, int revents);
/* rst-on-close: the coming close(2) of fd sends a TCP reset instead of a FIN. */
void conn_reset_on_close(int fd);
/* The close queue's prepare watcher: closes the marked connections before the loop sleeps. */
void conn_close_prepare(struct ev_loop *loop, ev_prepare *p, int revents);

/* --- admission guards (conn_guard.c) ----------------------------------------------------- */

/* Counts c against its source address; 1 (counted as refused) at probe-limit-per-ip. */
int guard_stranger(struct conn *c);
/* Counts c's handshake; at max-handshakes the oldest unfinished one is closed (later). */
void guard_handshake_start(struct conn *c);
/* accept-rate: 1 (acc_rate counted) if this source opened its share of connections this second;
 * the caller closes and counts the close. */
int guard_accept_rate(struct proxy_worker *pw, const struct sock_addr *peer);
/* Access list acl's verdict (a generation's) for a client address: 1 (counted) if refused. */
int guard_acl(struct proxy_worker *pw, const struct acl *acl, const struct sock_addr *peer);

/* --- upstream connect (conn_up.c) -------------------------------------------------------- */

/* CONNECTING: the next candidate address (also after a wait for a free descriptor). */
enum conn_reason up_connect_next(struct conn *c);
/* CONNECTING: the upstream socket is ready (connected, failed, or socks5 bytes came). */
enum conn_reason up_event(struct conn *c, int revents);
/* CONNECTING: the deadline came (a wait for a free descriptor, or the attempt timed out). */
enum conn_reason up_timeout(struct conn *c);
/* Leaves the handshake for CONNECTING: a pooled DC socket, or the first address. */
enum conn_reason up_start(struct conn *c);
/* Middle mode: the client goes to an ME link instead of a DC; then CS_RELAY, idle timer. */
enum conn_reason up_middle(struct conn *c, uint8_t *extra, size_t n);

/* --- rejected clients (conn_front.c) ----------------------------------------------------- */

/* Enters HOLD: no answer; read and discarded until a random deadline. */
void front_hold(struct conn *c);
/* A client we will not serve: fronted (CONNECTING to the site) with the bytes seen so far,
 * or held. CR_NONE, or a reason to close. */
enum conn_reason front_reject(struct conn *c, const uint8_t *seen, size_t n, const char *sni,
                              const char *why);
/* unknown-sni drop/reject (the alert sent): CR_UNKNOWN_SNI. */
enum conn_reason front_unknown_sni(struct conn *c, const char *sni);
/* HOLD: a read of what is discarded. */
enum conn_reason front_hold_read(struct conn *c);

/* --- handshake gates (hs_gate.c) --------------------------------------------------------- */

enum store_gate { STORE_GO = 0, STORE_WAIT, STORE_REPLAY };

/* A client proved secret idx (of c->gen): 0 if its user is admitted (c->uid, c->us, c->lim
 * set), -1 if refused by a limit (counted, logged; the caller rejects it), GATE_FOREIGN_ADDR if
 * it came to another user's listen-prefix address (or no user's; the same). */
#define GATE_FOREIGN_ADDR (-2)
int gate_user(struct conn *c, uint32_t idx);
/* The fleet's replay store on a handshake's 16 identifying bytes: GO, WAIT (c now in
 * STORE_WAIT, the check runs again with the answer) or REPLAY. */
enum store_gate gate_store(struct conn *c, const uint8_t *key, unsigned ttl_ms);

/* --- handshake (hs_obfs2.c, hs_tls.c, hs_first.c) ---------------------------------------- */

/* The client's 64-byte header is complete (c->hdr). extra[0..n) are client bytes that came
 * after it (inside TLS records), still encrypted with the client's stream. Checks it (or
 * rejects the client), keys both directions, and starts the upstream (or an ME link). */
enum conn_reason hs_obfs2_done(struct conn *c, uint8_t *extra, size_t n);
/* Grows the hello buffer to at least want bytes (within the worker's budget: the oldest
 * unfinished hello is closed later to make room). Returns 0, or -1. */
int hs_hbuf_reserve(struct conn *c, size_t want);
/* TLS_HELLO: looks at the hello bytes so far: waits for more, rejects, or answers (then
 * TLS_HEADER). */
enum conn_reason hs_tls_hello_check(struct conn *c);
/* TLS_HELLO: reads more of the hello. */
enum conn_reason hs_tls_hello_read(struct conn *c);
/* TLS_HEADER: after our answer, records carrying the obfuscated2 header (maybe with data). */
enum conn_reason hs_tls_header_read(struct conn *c, int revents);
/* HEADER: the client's first bytes (FakeTLS, obfuscated2, or not a client). */
enum conn_reason hs_first_read(struct conn *c);
/* PROXY_HDR: the balancer's PROXY header (then HEADER). */
enum conn_reason hs_proxy_read(struct conn *c);

/* --- the state machine (conn.c) ---------------------------------------------------------- */

/* The replay store's answer for c (owner) asked with token c->id (pw->store_answer). */
void conn_store_answer(void *owner, uint64_t token, enum rstore_verdict v);

#endif
