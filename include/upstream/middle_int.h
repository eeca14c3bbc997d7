/* middle_int.h: what the parts of middle-proxy mode (src/upstream/middle_*.c) share. */
#ifndef MTPROXY_UPSTREAM_MIDDLE_INT_H
#define MTPROXY_UPSTREAM_MIDDLE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/crypto.h"
#include "proto/rpc.h"
#include "upstream/dialer.h"
#include "upstream/middle.h"

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

#endif
