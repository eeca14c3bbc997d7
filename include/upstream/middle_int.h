/* middle_int.h: what the parts of middle-proxy mode (src/upstream/middle_*.c) share. */
#ifndef MTPROXY_UPSTREAM_MIDDLE_INT_H
#define MTPROXY_UPSTREAM_MIDDLE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/crypto.h"
#include "proto/rpc.h"
#include "upstream/dialer.h"
#include "upstream/middle.h"

/*
 * Calls go one way (tests/check_layers.py checks there is no circle):
 *   middle_link (a link's life: connect, nonce, handshake, input, timers; the worker's setup)
 *   -> middle_mux (clients by conn id, the three flow-control limits, stalled clients)
 *   -> middle_wire (the conn-id hash, a link's output queue, names);
 *   and middle_table (the ME table) under all of them.
 */

#define ME_READ_CHUNK 65536 /* one read of a link or a client, and their buffers' slack */

enum me_state { ML_WAIT = 0, ML_CONNECTING, ML_NONCE, ML_HANDSHAKE, ML_READY };

/* One encrypted frame (or several padding words) waiting to be written to a link. */
struct me_out {
    struct me_out *next;
    uint64_t conn_id; /* the client whose request this is (0 = control) */
    size_t len, off;
    uint8_t data[];
};

struct mclient;

struct me_link {
    struct middle *m;
    struct me_link *next;
    struct me_table *t; /* its table (one reference) */
    int addr;           /* index in t->addrs */
    int fd;
    ev_io io;
    unsigned events;
    ev_timer timer;
    ev_timer stall;     /* while paused: closes the clients holding it after me-stall-grace */
    ev_tstamp paused_at;
    uint32_t pause_epoch; /* counts pauses and stall checks: clients that drained since have it */
    uint8_t stall_judge;  /* the next stall check judges (the first of a pause only notes) */
    uint8_t state;
    uint8_t draining;   /* from an older table: no new clients; freed when empty */
    uint8_t err;        /* a write failed: fail at the next chance (never from a send) */
    uint8_t ping_out;   /* a ping is unanswered */
    uint8_t paused;     /* me-link-buffer reached: not read until clients drain */
    uint8_t failing;    /* link_fail is closing its clients: they must not free it */
    double backoff;
    ev_tstamp last_rx;
    struct crypto_cbc *enc, *dec;
    int32_t seq_out, seq_in;
    uint8_t *rbuf;
    size_t rlen, rcap, rdec; /* bytes held, allocated, already decrypted (CBC blocks) */
    struct me_out *ohead, *otail;
    size_t undelivered;      /* bytes its clients hold queued toward their sockets */
    struct mclient *clients;
    int nclients;
    uint64_t last_unknown;   /* the last conn id we told the ME we no longer know */
    struct rpc_nonce nonce;  /* ours */
    uint8_t pid[RPC_PID_LEN];
    struct rpc_endpoint clt, srv;
    struct dial dial;                 /* ML_CONNECTING: the connect (and SOCKS5 handshake) */
    uint8_t bound[SOCKS_BOUND_LEN];   /* through socks5: where the server connected from */
};

/* The middle-mode part of a client connection. */
struct mclient {
    struct conn *c;
    struct me_link *link;
    uint64_t conn_id;
    struct mclient *hnext;         /* the worker's conn-id hash */
    struct mclient *lprev, *lnext; /* its link's clients */
    uint8_t *in;                   /* decrypted client bytes not yet a whole packet */
    size_t inlen, incap;
    size_t pending_up;             /* bytes of its requests queued on the link */
    size_t accounted;              /* of c->cli.queued, what link->undelivered counts */
    uint32_t drained_epoch;        /* its link's pause_epoch when it last drained, paused */
    uint32_t mark_epoch;           /* its link's pause_epoch when stall_mark was taken */
    size_t stall_mark;             /* client_unread at the link's last stall check */
    uint32_t flags;                /* RPC_PROXY_REQ flags for its framing */
    struct rpc_addr remote, ours;
};

struct middle {
    struct proxy_worker *pw;
    struct me_table *cur;
    struct me_link *links;
    struct mclient **hash;
    size_t hmask;
    uint64_t next_id;
    unsigned rr;
    uint8_t *tmp; /* an answer being framed for a client */
    size_t tmpcap;
    uint8_t rd[ME_READ_CHUNK];
};

/* The loop of m's worker. */
static inline struct ev_loop *middle_loop_of(const struct middle *m)
{
    return m->pw->w->loop;
}

/* --- the conn-id hash, a link's output, names (middle_wire.c) ------------------------------ */

/* The hash chain of conn id id in m. */
struct mclient **middle_hash_slot(struct middle *m, uint64_t id);
/* The client with conn id id in m, or NULL. */
struct mclient *middle_hash_find(struct middle *m, uint64_t id);
/* Takes mc out of m's hash (nothing if it is not there). */
void middle_hash_remove(struct middle *m, struct mclient *mc);
/* Makes l's socket watched for events (EV_READ | EV_WRITE, 0 = none); none without a socket. */
void middle_link_watch(struct me_link *l, unsigned events);
/* Watches l for what its state wants: writes while connecting or frames wait, reads from the
 * nonce on unless paused. */
void middle_link_rewatch(struct me_link *l);
/* Writes what l has queued; a write error sets l->err (the link fails from its own callbacks,
 * never from here). A client whose requests left l below me-request-buffer is read again. */
void middle_link_flush(struct me_link *l);
/* Queues one frame of a + b (either may be empty) on l with the next seqno, CBC-encrypted and
 * padded to 16 bytes, counted to conn_id's requests (0 = control), and writes what it can.
 * Returns 0, or -1 (no memory). */
int middle_link_send(struct me_link *l, uint64_t conn_id, const uint8_t *a, size_t alen,
                     const uint8_t *b, size_t blen);
/* Reads mc's client while its link is ready and its requests fit; writes while bytes wait. */
void middle_client_watch(struct mclient *mc);
/* "wW ME address (dc N)": l's name in log lines, in buf[0..len). */
void middle_link_name(const struct me_link *l, char *buf, size_t len);
/* The endpoint the ME sees for local address ss: through o's nat-info if nat. */
void middle_endpoint_of(const struct sockaddr_storage *ss, const struct options *o, int nat,
                        struct rpc_endpoint *e);

/* --- clients, flow control, stalled clients (middle_mux.c) ----------------------------------- */

/* Ends client c from the link's side (not c's own event): detached from its link at once, and
 * closed with r before the loop sleeps. */
void middle_client_drop(struct conn *c, enum conn_reason r);
/* Sends the whole packets mc holds while its requests fit. Returns CR_NONE, or why c ends. */
enum conn_reason middle_client_packets(struct mclient *mc);
/* Sends mc's client a packet data[0..len) (or a quick-ack of confirm: ack = 1) in its framing.
 * Returns CR_NONE, or why it ends (CR_SLOW past me-client-buffer); the caller drops it. */
enum conn_reason middle_client_deliver(struct mclient *mc, const uint8_t *data, size_t len,
                                       uint32_t confirm, int ack);
/* Runs l's stall check in s seconds, in a new pause epoch. */
void middle_link_stall_arm(struct me_link *l, double s);
/* The stall timer of a paused link (its data: the link): closes clients that hold it. */
void middle_on_link_stall(struct ev_loop *loop, ev_timer *t, int revents);

#endif
