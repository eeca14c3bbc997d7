/* relay.h: the relay between a connection's two sockets (used by the connection machine). */
#ifndef MTPROXY_PROXY_RELAY_H
#define MTPROXY_PROXY_RELAY_H

#include "conn/conn.h"

/* Starts side s's watcher with exactly `events` (0 stops it); no-op if unchanged. */
void side_watch(struct conn *c, struct conn_side *s, unsigned events);

/* In RELAY: reads a side while it has not ended, its sink has room and no block is awaited;
 * watches for writability while bytes are queued to it. */
void relay_watch(struct conn *c);

/* Sets up / stops the worker's relay state (the write-batch timer). */
void relay_init(struct proxy_worker *pw);
void relay_stop(struct proxy_worker *pw);

/* buffers = per-connection: gives each side of c its own block for the connection's life.
 * Returns 0, or -1 if the arena has none. */
int relay_reserve(struct conn *c);

/* Stops side s, closes its socket, gives back its queued blocks and pipe. */
void side_release(struct conn *c, struct conn_side *s);

/* Wakes connections waiting for a block while blocks can be had. */
void waiters_wake(struct proxy_worker *pw);

/* 1 while relays (connections that proved a secret) hold every block of their share of the
 * arena: they wait for blocks and accepting pauses. Fronted connections have their own. */
int relay_blocks_full(const struct proxy_worker *pw);

/* Pauses accepting while the connection slots or the buffer arena are used up; resumes
 * otherwise. */
void conn_check_accept(struct proxy_worker *pw);

/* Rate limit: stops reading direction dir (0 client->DC, 1 DC->client) of c for wait
 * seconds (relay_watch leaves it alone until then). */
void conn_rate_pause(struct conn *c, int dir, double wait);

/* Appends a copy of p[0..n) to the queue of side s (handshake bytes, replayed probes).
 * Returns CR_NONE, or CR_NO_MEMORY if no block could be had. */
enum conn_reason side_queue(struct conn *c, struct conn_side *s, const uint8_t *p, size_t n);

/* Writes what is queued to side s (from the pipe or the blocks). Once the queue drains and
 * `from` has ended, shuts s for writing (half-close). Never closes c: returns CR_NONE (all
 * out, or the socket is full and s waits for EV_WRITE) or why c ends (CR_CLIENT_CLOSED,
 * CR_DC_CLOSED: a write failed). */
enum conn_reason side_flush(struct conn *c, struct conn_side *s, struct conn_side *from);

/* Handles readiness of side s in RELAY: flushes on EV_WRITE, pumps the direction that reads
 * s on EV_READ, then re-watches. Never closes c: returns CR_NONE to go on, CR_DONE when both
 * directions ended and drained, or why c ends (a side closed or failed, a bad record, the
 * user's quota). */
enum conn_reason relay_event(struct conn *c, struct conn_side *s, int revents);

#endif
