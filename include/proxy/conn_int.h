/* conn_int.h: what the connection's rooms (src/proxy/conn*.c, hs_*.c) call of each other. */
#ifndef MTPROXY_PROXY_CONN_INT_H
#define MTPROXY_PROXY_CONN_INT_H

#include <stdlib.h>

#include "proxy/conn.h"

/*
 * Calls go one way: conn_worker -> conn (the state machine, the only caller of conn_close
 * besides the worker's sweep and generation adoption) -> hs_first -> hs_tls -> hs_obfs2 ->
 * hs_gate / conn_front -> conn_up -> relay, middle; everything may call conn_guard,
 * conn_close (conn_close_later, the log rate limit) and conn_names.
 */

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
/* accept-rate: 1 (counted) if this source opened its share of connections this second. */
int guard_accept_rate(struct proxy_worker *pw, const struct sock_addr *peer);
/* The access list's verdict for a client address: 1 (and counted) if refused. */
int guard_acl(struct proxy_worker *pw, const struct sock_addr *peer);

/* --- upstream connect (conn_up.c) -------------------------------------------------------- */

int up_via_socks(const struct conn *c);
int up_connect_next(struct conn *c);
int up_retry(struct conn *c, int err);
int up_socks_step(struct conn *c);
int up_established(struct conn *c);
void up_start(struct conn *c);

/* --- rejected clients (conn_front.c) ----------------------------------------------------- */

void front_hold(struct conn *c);
void front_reject(struct conn *c, const uint8_t *seen, size_t n, const char *sni,
                  const char *why);
void front_unknown_sni(struct conn *c, const char *sni);
void front_hold_read(struct conn *c);

/* --- handshake gates (hs_gate.c) --------------------------------------------------------- */

enum store_gate { STORE_GO = 0, STORE_WAIT, STORE_REPLAY };

int gate_user(struct conn *c, uint32_t idx);
enum store_gate gate_store(struct conn *c, const uint8_t *key, unsigned ttl_ms);

/* --- handshake (hs_obfs2.c, hs_tls.c, hs_first.c) ---------------------------------------- */

void hs_obfs2_done(struct conn *c, uint8_t *extra, size_t n);
int hs_hbuf_reserve(struct conn *c, size_t want);
void hs_tls_hello_check(struct conn *c);
void hs_tls_hello_read(struct conn *c);
void hs_tls_header_read(struct conn *c, int revents);
void hs_first_read(struct conn *c);
void hs_proxy_read(struct conn *c);

/* --- the state machine (conn.c) ---------------------------------------------------------- */

void conn_store_answer(void *owner, uint64_t token, enum rstore_verdict v);

#endif
