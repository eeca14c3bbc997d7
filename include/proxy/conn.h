/* conn.h: a client connection as a state machine in one worker's loop, and its relay. */
#ifndef MTPROXY_PROXY_CONN_H
#define MTPROXY_PROXY_CONN_H

#include <ev.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/ipcount.h"
#include "core/sock.h"
#include "core/worker.h"
#include "crypto/crypto.h"
#include "proto/faketls.h"
#include "proto/obfs2.h"
#include "proxy/acl.h"
#include "proxy/dc.h"
#include "proxy/dcpool.h"
#include "proxy/fronting.h"
#include "proxy/options.h"
#include "proxy/reload.h"
#include "proxy/rstore.h"
#include "proxy/socks.h"
#include "proxy/users.h"
#include "proxy/tlslearn.h"

/*
 * States:
 *   HEADER --(64 bytes, valid)--------------------------------> CONNECTING -> RELAY
 *   HEADER --(16 03 01|03)--> TLS_HELLO --(valid, answered)--> TLS_HEADER --^
 *   any rejection before we answered --> CONNECTING (mode MASK: to the real site) -> RELAY,
 *                                        or HOLD when there is nowhere to front to.
 *   With proxy-protocol: PROXY_HDR --(valid PROXY v1/v2 header, address allowed)--> HEADER.
 */
enum conn_state {
    CS_FREE = 0,
    CS_HEADER,     /* reading the client's first bytes / 64-byte obfuscated2 header */
    CS_TLS_HELLO,  /* buffering a FakeTLS ClientHello */
    CS_TLS_HEADER, /* answered; reading the obfuscated2 header inside TLS records */
    CS_CONNECTING, /* connecting to the DC (or, in mode MASK, to the fronting target) */
    CS_RELAY,      /* both sides open (or half-closed); bytes flow */
    CS_HOLD,       /* bad client: read and discard silently until a random deadline */
    CS_PROXY_HDR,  /* proxy-protocol: reading the balancer's PROXY header (before HEADER) */
    CS_STORE_WAIT, /* replay-store: asked whether any instance saw this handshake */
};

/* What the upstream side is. */
enum conn_mode {
    CONN_MODE_MTPROTO = 0, /* a Telegram DC, with obfuscated2 both ways */
    CONN_MODE_MASK,        /* the fronted web server: bytes pass untouched */
};

/* Why a connection ended: logged once and counted. */
enum conn_reason {
    CR_NONE = -1,         /* not a close: a step's verdict "go on" (never logged or counted) */
    CR_DONE = 0,          /* both sides closed cleanly (EOF both ways, drained) */
    CR_CLIENT_CLOSED,     /* client closed or reset before the relay ended cleanly */
    CR_DC_CLOSED,         /* DC reset or errored */
    CR_CLIENT_EARLY_EOF,  /* client closed during the header */
    CR_HANDSHAKE_TIMEOUT, /* header not complete in time */
    CR_BAD_HEADER,        /* no secret yields a valid tag (held, then closed) */
    CR_DC_UNREACHABLE,    /* every address of the DC failed or timed out */
    CR_IDLE,              /* no bytes either way for idle-timeout */
    CR_NO_MEMORY,         /* could not get a cipher context or buffer */
    CR_CLIENT_PROTOCOL,   /* bad TLS record or header from a client we already answered */
    CR_MASK_UNREACHABLE,  /* the fronting target could not be reached */
    CR_SHUTDOWN,          /* proxy stopping */
    CR_REFUSED,           /* access list or PROXY header: refused before any byte of ours */
    CR_ME_LINK,           /* middle mode: the client's ME link died */
    CR_SLOW,              /* middle mode: over me-client-buffer (a client that stopped reading) */
    CR_LIMIT,             /* the user's quota ran out or it expired while connected */
    CR_USER_REMOVED,      /* a reload removed the user */
    CR_HANDSHAKE_CAP,     /* max-handshakes: the oldest unfinished handshake made room */
    CR_ACCEPT_RATE,       /* accept-rate: too many new connections from the source */
    CR_UNKNOWN_SNI,       /* unknown-sni drop/reject: a hello naming none of our domains */
    CR_COUNT
};

const char *conn_reason_name(enum conn_reason r);

/* The name of a state ("header", "relay", ...), for the close line. */
const char *conn_state_name(enum conn_state s);

/* What a client turned out to be (counted per kind while active and in total). */
enum conn_kind {
    CK_NONE = 0, /* not known yet: handshaking, held */
    CK_OBFS2,    /* obfuscated2 without padding (tags ef, ee) */
    CK_DD,       /* padded intermediate (tag dd) outside TLS */
    CK_TLS,      /* FakeTLS (ee secret) */
    CK_FRONTED,  /* not a client: forwarded to the real site */
    CK_COUNT
};

const char *conn_kind_name(enum conn_kind k);

/* Bytes are counted per DC in these slots: DCs 1..5, media DCs -1..-5, CDN 203, others. */
#define CONN_DC_SLOTS 12

/* The slot of DC id (as resolved for the connection). */
int conn_dc_slot(int id);

/* The label of a slot ("1".."5", "-1".."-5", "203", "other"). */
const char *conn_dc_slot_name(int slot);

/* One socket of a connection and the bytes queued to be written to it. */
struct conn_side {
    int fd;
    ev_io io;
    unsigned events;             /* events io is started with (0 = stopped) */
    struct arena_block *qhead, *qtail;
    size_t queued;               /* bytes waiting to be written: in qhead..qtail or the pipe */
    size_t piped;                /* of those, bytes in the pipe (splice path) */
    int pipe_r, pipe_w;          /* a pooled pipe while bytes are spliced to this side; or -1 */
    struct arena_block *spare;   /* buffers = per-connection: the block this side owns */
    uint32_t rec_left;           /* ee client side, splice-tls: payload of the current TLS
                                  * record still in the pipe ... */
    uint8_t rec_hdr_left;        /* ... and bytes of its header not yet written (while any
                                  * are, rec_left is still the whole record's length) */
    uint8_t pipe_full;           /* the pipe took no more (out of slots): stop reading the
                                  * source until the pipe drains */
    uint8_t corked;              /* write-batch cork/msg-more: held in the kernel until the timer */
    uint8_t rd_eof;              /* read returned 0 */
    uint8_t wide;                /* blocks this side's next read may fill (1..RELAY_WIDE_MAX):
                                  * doubles while reads come back full, 1 after a short one */
    uint8_t wr_shut;             /* shutdown(SHUT_WR) done */
};

struct proxy_worker;
struct replay;

struct conn {
    void *pool_link; /* owned by the pool while the slot is free */
    struct proxy_worker *pw;
    struct conn *prev, *next;  /* the worker's live list */
    struct conn *wait_next;    /* the worker's list of connections waiting for a block */
    struct conn *batch_next;   /* the worker's list of connections with a batched write */
    struct conn_side cli, dc;
    /* The AES-256-CTR streams: pointers into ctr[] (0 cli_dec, 1 cli_enc, 2 dc_enc, 3 dc_dec).
     * In fast mode cli_enc and dc_dec are unused. A stream holds an OpenSSL context only while
     * the connection moves bytes: the worker's sweep parks those of connections idle for
     * CONN_PARK_IDLE seconds, so an idle connection is this struct and nothing on the heap. */
    struct crypto_ctr *cli_dec, *cli_enc, *dc_enc, *dc_dec;
    struct crypto_ctr ctr[4];
    ev_timer timer;            /* handshake / connect / idle / hold deadline by state */
    ev_tstamp last_io;
    uint64_t id;
    uint64_t up_bytes, down_bytes; /* client->DC, DC->client payload bytes */
    struct sock_addr peer;
    uint32_t tag;
    int16_t dc_id;             /* as the client asked */
    int16_t dc_resolved;       /* the id whose addresses are used */
    uint8_t state;
    uint32_t secret_idx;       /* index of the matched secret in the options' secrets */
    int32_t uid;               /* its user's id in the users registry, -1 until admitted */
    struct user_stats *us;     /* that user's counters in this worker (NULL until admitted) */
    const struct user_limit *lim; /* that user's limits (in gen), or NULL */
    struct gen *gen;           /* the config generation it started under (one reference) */
    ev_timer rate_timer;       /* rate limit: reading paused until then (per direction) */
    ev_tstamp rate_until[2];   /* [0] client->DC, [1] DC->client; 0 = not paused */
    uint8_t handshaking;       /* counted in the worker's unfinished handshakes */
    uint8_t hdr_len;
    uint8_t waiting_block;
    uint8_t fast;              /* fast mode: DC->client bytes pass without crypto */
    uint8_t splice;            /* bytes that need no transformation move by splice(2) */
    uint8_t mode;              /* enum conn_mode */
    uint8_t tls;               /* the client speaks FakeTLS (records both ways) */
    uint8_t batched;           /* on the worker's batch list (write-batch > 0) */
    const struct mask_target *mask; /* mode MASK: where to */
    uint8_t *hbuf;             /* TLS_HELLO: the hello bytes so far (heap, freed after) */
    uint32_t hlen, hcap;
    struct faketls_deframer defr; /* tls: client records -> payload */
    int dc_first, dc_count, dc_try; /* candidate addresses in the dc table */
    uint16_t fd_waits;         /* 100 ms waits for a free descriptor to connect upstream */
    struct socks_dial sd;      /* CONNECTING through socks5: the handshake's progress */
    uint8_t rs_verdict;        /* replay-store answer for this handshake (enum rstore_verdict
                                * + 1), 0 = not asked yet */
    uint8_t rs_resume;         /* STORE_WAIT: the state to go back to with the answer */
    uint8_t authed;            /* proved a secret (valid header or FakeTLS hello): its close
                                * is an operator's business, never rate-limited */
    uint8_t stranger;          /* counted in the worker's strangers (until authed or closed) */
    uint8_t kind;              /* enum conn_kind, counted in kind_active while open */
    ev_tstamp born;            /* accepted at (a fronted connection's life is bounded) */
    ev_tstamp rs_start, rs_last; /* record-sizing: this small phase began / last record */
    uint32_t rs_sent;          /* record-sizing: payload sent toward the client this phase */
    uint16_t rs_mss;           /* record-sizing: the client socket's MSS (0 = not read yet) */
    uint8_t hdr[OBFS2_HDR_LEN]; /* the client's header, then the plain header toward the DC */
    struct mclient *mc;        /* middle mode: the client's ME state (proxy/middle.c) */
    struct conn *close_next;   /* the worker's queue of connections marked to close */
    int8_t close_reason;       /* marked: the reason it closes with (enum conn_reason) */
    uint8_t closing;           /* marked by conn_close_later: no event reaches it any more */
};

/* Seconds without a byte either way after which a connection's cipher contexts are parked. */
#define CONN_PARK_IDLE 1.0

/* Counters of one worker; written by it only (relaxed), summed by readers. */
struct proxy_stats {
    stat_t accepted;
    stat_t active;
    stat_t handshakes;       /* valid headers */
    stat_t dc_connects;      /* DC connections established */
    stat_t dc_connect_fails; /* failed attempts (one address each) */
    stat_t bytes_up, bytes_down;
    stat_t reads, writes;    /* relay read(2)/writev(2)/splice(2) calls */
    stat_t spliced;          /* bytes moved by splice */
    stat_t pipe_full;        /* splice found a pipe out of slots: reading paused */
    stat_t block_waits;      /* times a connection waited for a buffer block */
    stat_t tls_handshakes;   /* FakeTLS hellos answered */
    stat_t rejected;         /* clients we would not serve (then masked or held) */
    stat_t masked;           /* connections fronted to the real site */
    stat_t replays;          /* handshakes refused as replays */
    stat_t acl_denied;       /* closed at accept: a deny entry names the source */
    stat_t acl_not_allowed;  /* closed at accept: allow entries exist, none names it */
    stat_t pp_untrusted;     /* proxy-protocol: sender not in proxy-protocol-from */
    stat_t pp_bad;           /* proxy-protocol: malformed or missing PROXY header */
    stat_t pp_local;         /* proxy-protocol: LOCAL (health check), closed */
    stat_t socks_fails;      /* socks5 handshakes that failed (refused, closed) */
    stat_t store_replays;    /* handshakes the replay store had seen (another
                                        * instance, or this one before a restart) */
    stat_t store_failed;     /* the store did not answer in time (or was down):
                                        * replay-store-fail applied */
    stat_t strangers_refused; /* closed at once: probe-limit-per-ip reached */
    stat_t hello_budget;     /* hellos dropped: the workers' hello buffers were full */
    stat_t user_refused;     /* valid clients refused by a user limit (per user: users.h) */
    stat_t acc_rate;         /* closed at accept: accept-rate from one source reached */
    stat_t handshake_cap;    /* unfinished handshakes closed for max-handshakes */
    stat_t unknown_sni;      /* hellos naming none of our domains, dropped or refused */
    stat_t wide_reads;       /* relay reads that filled more than one block (readv) */
    stat_t ctr_parked;       /* idle connections whose cipher contexts were handed back */
    stat_t tls_hmacs;        /* HMACs computed to check FakeTLS hellos (a probe's
                                        * cost; with tls-sni-check only its domain's secrets) */
    /* middle mode */
    stat_t me_handshakes;      /* ME links that completed the handshake */
    stat_t me_handshake_fails; /* handshakes that failed after the nonce (nat-info?) */
    stat_t me_connect_fails;   /* connects/nonces that failed */
    stat_t me_link_drops;      /* ready links lost */
    stat_t me_links_open;      /* gauge: links past the handshake now */
    stat_t me_dead_closed;     /* clients closed because their link died */
    stat_t me_slow_closed;     /* clients closed over me-client-buffer */
    stat_t me_link_pauses;     /* a link stopped being read (me-link-buffer) */
    stat_t me_requests;        /* RPC_PROXY_REQ sent */
    stat_t me_answers;         /* RPC_PROXY_ANS delivered */
    stat_t me_acks;            /* RPC_SIMPLE_ACK delivered */
    stat_t me_pings;           /* RPC_PING answered */
    stat_t me_unknown;         /* messages for a connection id we no longer know */
    stat_t closed[CR_COUNT];
    stat_t kind_total[CK_COUNT];  /* connections that turned out to be each kind */
    stat_t kind_active[CK_COUNT]; /* of those, open now */
    stat_t dc_bytes[CONN_DC_SLOTS][2]; /* [0] client->DC, [1] DC->client */
};

/* Counter updates: core/stat.h (STAT_INC, STAT_ADD, STAT_DEC, STAT_GET). */

/* Pipes a worker may lend out at once for splice (2 descriptors each, held only while
 * bytes are in flight); main counts them in the descriptor budget. */
#define PROXY_PIPES_PER_WORKER 64

/* Per-worker proxy state (the worker's ctx). */
struct proxy_worker {
    struct worker *w;
    const struct options *opt;
    const struct dc_table *dcs;
    const struct mask_table *masks;
    struct replay *replay;             /* shared by all workers; NULL = off */
    struct tlslearn *learn;            /* the site's TLS profile (shared; worker 0 learns) */
    uint64_t rng;                      /* xorshift state for record-size noise */
    struct rstore rstore;              /* this worker's link to the fleet's replay store */
    rstore_cb store_answer;            /* the state machine's entry point for its answers */
    const struct acl *acl;             /* shared, read-only; NULL or empty = everyone */
    struct gen *gen;                   /* the generation new connections take (one ref) */
    struct gen *_Atomic next_gen;      /* posted by main (proxy_worker_post_gen), one ref */
    struct users *users;               /* the users registry (shared) */
    ev_timer sweep_timer;              /* every second: quota / expiry of live connections */
    struct ipcount accepts;            /* accept-rate: per source, accepts in this second */
    ev_tstamp accepts_second;
    uint32_t accepts_max;              /* accept-rate for this worker (0 = off) */
    uint32_t handshakes, handshakes_max; /* unfinished handshakes / max-handshakes share */
    int nworkers;
    int tls_enabled;                   /* allow-ee and at least one ee secret */
    struct arena arena;
    struct pool conns;
    struct conn *live;
    struct conn *waiters;
    struct conn *mask_waiters;         /* fronted connections waiting for their own budget */
    size_t mask_blocks, mask_blocks_max; /* arena blocks fronted connections hold / may hold */
    size_t relay_blocks_max;           /* the rest of the arena, for relays (0 = no cap) */
    struct ipcount strangers;          /* per source address: connections not (yet) proven */
    uint32_t strangers_max;            /* probe-limit-per-ip for this worker (0 = off) */
    size_t hbuf_bytes, hbuf_max;       /* hello/PROXY/ServerHello buffers held, and the cap */
    struct conn *closing;              /* marked by conn_close_later, closed before the loop
                                        * sleeps again (close_prepare) */
    ev_prepare close_prepare;
    struct conn *batch;                /* connections whose small writes wait for batch_timer */
    ev_timer batch_timer;
    uint64_t next_id;
    struct sock_opts sockopts;
    struct dcpool_set dcpool;
    struct middle *middle;             /* middle mode (ad-tag); NULL in direct mode */
    /* Log lines about strangers (rejected or failed handshakes), per close reason (and one
     * more slot for reject lines): LOG_BURST a window, the rest counted and summed up. */
    struct {
        uint32_t shown, dropped;
    } loglim[CR_COUNT + 1];
    ev_timer loglim_timer;
    /* Idle pipes for splice; pipes_out counts those held by connections. */
    int (*pipes)[2];
    int npipes, pipes_out, pipes_cap;
    int pipe_size;
    struct proxy_stats stats;
};

/* Sets up the proxy state of worker w (index, of nworkers) from generation g (the worker
 * takes a reference) and registers the proxy's handlers (accept, stop, commands) and itself as
 * w's ctx. Limits are the options' process-wide values divided by nworkers. users is the
 * process's registry. Returns 0, or -1. */
int proxy_worker_init(struct proxy_worker *pw, struct worker *w, struct gen *g,
                      struct users *users, struct replay *replay, int nworkers);

/* Command bit for worker_post: a new generation waits in next_gen. */
#define PROXY_CMD_GEN 1

/* Main thread: hands generation g to the worker (takes a reference for it) and wakes it; the
 * worker adopts it in its own thread (new connections use it; connections of users g no
 * longer has are closed; live ones keep theirs). */
void proxy_worker_post_gen(struct proxy_worker *pw, struct gen *g);

/* Frees the pools (after the worker's loop has ended). */
void proxy_worker_destroy(struct proxy_worker *pw);

/* Handlers given to core/worker (exposed for tests). */
void proxy_on_accept(struct worker *w, int fd, const struct sock_addr *peer);
void proxy_on_stop(struct worker *w);

/* Ends a connection: logs the reason once (with the state it was in), counts it, frees
 * everything. The caller must not touch c afterwards. Only the state machine's entry points
 * (client I/O, upstream I/O, timers, an asynchronous answer) call it, on a connection whose
 * event they are handling; the steps they call return a verdict (enum conn_reason, CR_NONE to
 * go on) instead. Returns -1 (kept while callers still propagate "closed"). */
int conn_close(struct conn *c, enum conn_reason r);

/* Closing another connection than the one being handled (an ME link died, a batch flush
 * failed, max-handshakes evicts the oldest): marks c with reason r and queues it; no event
 * reaches it any more, and the worker closes the queue before its loop sleeps again. A second
 * mark keeps the first reason. */
void conn_close_later(struct conn *c, enum conn_reason r);

/* Rate limit: stops reading direction dir (0 client->DC, 1 DC->client) of c for wait
 * seconds (relay_watch leaves it alone until then). */
void conn_rate_pause(struct conn *c, int dir, double wait);

/* Pauses accepting while the connection slots or the buffer arena are used up; resumes
 * otherwise. */
void conn_check_accept(struct proxy_worker *pw);

/* The per-worker counters bytes of connection c go to in direction down (0 client->DC,
 * 1 DC->client): out[0] the total, out[1] the user's (NULL if c proved no secret), out[2]
 * the DC's (NULL if fronted). */
void conn_byte_counters(struct conn *c, int down, stat_t *out[3]);

/* Adds the counters of src into dst (relaxed reads of another thread's counters). */
void proxy_stats_add(struct proxy_stats *dst, const struct proxy_stats *src);

#endif
