/* dialer.h: one attempt at reaching one address, directly or through a SOCKS5 server, stepped on the caller's io events. */
#ifndef MTPROXY_PROXY_DIALER_H
#define MTPROXY_PROXY_DIALER_H

#include <ev.h>
#include <stdint.h>

#include "core/sock.h"
#include "proto/socks5.h"
#include "upstream/socks.h"

/*
 * The caller owns the socket, its ev_io and its timer (a client's upstream side, a DC pool
 * slot, an ME link, a learner connection); the dialer only says which event to watch next:
 *
 *   dial_start -> WAIT_WRITE -> dial_step ... -> WAIT_READ -> dial_step ... -> DONE
 *                                  (TCP connect)        (SOCKS5: method, auth, CONNECT reply)
 *
 * A timeout is the caller's timer. Several candidate addresses are the caller's loop: one
 * dial is one attempt at one target. The dialer never closes the socket: on FAIL the caller
 * stops its watcher and closes the fd (then, if it likes, starts the next attempt).
 */

/* Where one attempt goes. Only pointers: a caller fills it on its stack from what it keeps
 * (its config generation, its table entry) for dial_start and for every dial_step. */
struct dial_to {
    const struct sock_addr *target;     /* where the caller wants to talk to */
    const struct socks5_server *socks;  /* NULL: connect to target directly */
    const struct sock_addr *socks_addr; /* the SOCKS5 server's address (when socks is set) */
    const struct sock_opts *opts;       /* tuning of the new socket; NULL: system defaults */
    uint8_t *bound;                     /* NULL, or SOCKS_BOUND_LEN bytes the caller keeps:
                                         * the CONNECT reply's bound address (socks_bound_addr) */
};

/* The progress of one attempt: 10 bytes, embedded where the fd is kept. Zeroed or not, it
 * is (re)set by dial_start. */
struct dial {
    struct socks_dial sd; /* SOCKS_STEP_NONE: the TCP connect is pending; DONE: connected */
};

/* A positive verdict is the libev events to watch before the next dial_step. */
enum dial_verdict {
    DIAL_DONE = 0,              /* the socket talks to the target (none of its bytes read) */
    DIAL_WAIT_READ = EV_READ,   /* watch the fd for readability, then dial_step */
    DIAL_WAIT_WRITE = EV_WRITE, /* watch the fd for writability, then dial_step */
    DIAL_FAIL = -1,             /* this attempt failed (struct dial_result says why) */
    DIAL_NO_FD = -2,            /* dial_start only: out of descriptors (EMFILE/ENFILE), not
                                 * the address's fault; no socket; the caller's own policy */
};

/* Why an attempt failed (DIAL_FAIL or DIAL_NO_FD), for the caller's counters and log line.
 * Filled on the caller's stack; nothing of it is kept in struct dial. */
struct dial_result {
    int err;         /* errno of the socket or TCP connect (to the target, or to the SOCKS5
                      * server when socks is set), 0 for a SOCKS5 handshake failure */
    int code;        /* a refused CONNECT: the SOCKS5 reply code (> 0), else 0 */
    int socks;       /* 1: the SOCKS5 handshake failed (the server answered, or closed, or
                      * stopped taking our request); 0: the socket or TCP connect did */
    const char *why; /* a short static text: strerror(err), or the SOCKS5 failure (for a
                      * refused CONNECT, RFC 1928's text for the code) */
};

/* Starts one attempt: a nonblocking socket connecting (sock_connect with to->opts) to
 * to->target, or to to->socks_addr when to->socks is set. Returns WAIT_WRITE with *fd set
 * (the caller owns it, watches it for writability and calls dial_step), or FAIL / NO_FD with
 * *fd = -1 and *r filled. */
enum dial_verdict dial_start(struct dial *d, const struct dial_to *to, int *fd,
                             struct dial_result *r);

/* Advances the attempt on fd after the event the last verdict asked for; revents is libev's
 * (EV_READ/EV_WRITE): a wake-up without the awaited event returns the same wait again
 * (0 counts as the awaited event). to must name what dial_start was given. First the TCP
 * connect's result, then (through socks5) the greeting, login and CONNECT exchange, reading
 * only the handshake's bytes. Returns DONE, WAIT_READ / WAIT_WRITE (watch that event and call
 * again), or FAIL with *r filled (the caller closes fd). */
enum dial_verdict dial_step(struct dial *d, int fd, const struct dial_to *to, int revents,
                            struct dial_result *r);

#endif
