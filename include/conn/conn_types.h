/* conn_types.h: a connection's types (states, reasons, kinds, sides, struct conn), lean. */
#ifndef MTPROXY_PROXY_CONN_TYPES_H
#define MTPROXY_PROXY_CONN_TYPES_H

#include <ev.h>
#include <stdint.h>

#include "core/sock.h"     /* struct sock_addr */
#include "crypto/crypto.h" /* struct crypto_ctr */
#include "proto/faketls.h" /* struct faketls_deframer */
#include "proto/obfs2.h"   /* OBFS2_HDR_LEN */
#include "upstream/dialer.h"  /* struct dial */
#include "users/ja4stat.h" /* JA4STAT_KEY_LEN */

struct arena_block;
struct gen;
struct mask_target;
struct mclient;
struct proxy_worker;
struct user_limit;
struct user_stats;

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
    CR_DRAINED,           /* removed-user = drain: its user was removed drain-timeout ago */
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

struct conn {
    void *pool_link; /* owned by the pool while the slot is free */
    struct proxy_worker *pw;
    struct conn *prev, *next;  /* the worker's live list */
    struct conn *wait_next;    /* the worker's list of connections waiting for a block, or
                                * (closing) its queue of connections marked to close */
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
    int32_t addr_uid;          /* listen-prefix: the user whose address it came to (or
                                * PREFIX_NOBODY); PREFIX_NOT_VIA through other listeners */
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
    struct dial dial;          /* CONNECTING: the upstream attempt's progress */
    uint8_t rs_verdict;        /* replay-store answer for this handshake (enum rstore_verdict
                                * + 1), 0 = not asked yet */
    uint8_t rs_resume;         /* STORE_WAIT: the state to go back to with the answer */
    uint8_t authed;            /* proved a secret (valid header or FakeTLS hello): its close
                                * is an operator's business, never rate-limited */
    uint8_t stranger;          /* counted in the worker's strangers (until authed or closed) */
    uint8_t kind;              /* enum conn_kind, counted in kind_active while open */
    uint8_t closing;           /* marked by conn_close_later: no event reaches it any more;
                                * it is on the worker's close queue (through wait_next) */
    int8_t close_reason;       /* marked: the reason it closes with (enum conn_reason) */
    ev_tstamp born;            /* accepted at (a fronted connection's life is bounded) */
    ev_tstamp drain_at;        /* its user was removed (removed-user = drain): closed then;
                                * 0 = not draining */
    ev_tstamp rs_start, rs_last; /* record-sizing: this small phase began / last record */
    uint32_t rs_sent;          /* record-sizing: payload sent toward the client this phase */
    uint16_t rs_mss;           /* record-sizing: the client socket's MSS (0 = not read yet) */
    uint8_t hdr[OBFS2_HDR_LEN]; /* the client's header, then the plain header toward the DC */
    uint8_t ja4[JA4STAT_KEY_LEN]; /* its FakeTLS hello's JA4 (proxy/ja4stat.h), 0s if none */
    struct mclient *mc;        /* middle mode: the client's ME state (upstream/middle_*.c) */
};

#endif
