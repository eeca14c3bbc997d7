/* socks.h: the SOCKS5 handshake on a connected nonblocking socket, step by step in an event loop. */
#ifndef MTPROXY_PROXY_SOCKS_H
#define MTPROXY_PROXY_SOCKS_H

#include <stdint.h>
#include <sys/socket.h>

#include "proto/socks5.h"

/* Per socket: 10 bytes, kept in the connection (or pool slot) while it dials. */
struct socks_dial {
    uint8_t step;   /* SOCKS_STEP_* */
    uint8_t got;    /* bytes of the current reply read so far */
    uint8_t hdr[5]; /* the reply's first bytes (enough to know its length) */
    uint16_t left;  /* REPLY: bytes of the bound address still to read and drop */
};

enum socks_step {
    SOCKS_STEP_NONE = 0, /* not started (TCP connect to the SOCKS server pending) */
    SOCKS_STEP_METHOD,   /* greeting sent, waiting for the method choice */
    SOCKS_STEP_AUTH,     /* login sent, waiting for its status */
    SOCKS_STEP_REPLY,    /* CONNECT sent, waiting for its reply */
    SOCKS_STEP_DONE,     /* the target is connected through the server */
};

enum socks_result { SOCKS_DIAL_DONE = 0, SOCKS_DIAL_WAIT = 1, SOCKS_DIAL_FAIL = -1 };

/* Starts the handshake once the TCP connect to the server succeeded: sends the greeting.
 * Returns WAIT (watch fd for reading, then call socks_dial_read_bound), or FAIL with *why. */
enum socks_result socks_dial_start(struct socks_dial *d, int fd, const struct socks5_server *srv,
                                   const char **why);

/* The reply's BND.ADDR and BND.PORT (RFC 1928: the address the server connected from), raw:
 * [0] ATYP, then the address (4 or 16 bytes) and the port. */
#define SOCKS_BOUND_LEN 19

/* Reads what the server sent and answers it. target (with its port) is where the server is
 * asked to connect. Reads exactly the handshake's bytes, never the target's first bytes.
 * Returns DONE (the socket now talks to the target), WAIT (read again when readable), or FAIL
 * with *why (for a refused CONNECT, the RFC 1928 text of the reply code; *code set). bound
 * (NULL, or SOCKS_BOUND_LEN bytes kept by the caller across calls) gets the reply's bound
 * address (filled for IPv4/IPv6 replies). */
enum socks_result socks_dial_read_bound(struct socks_dial *d, int fd,
                                        const struct socks5_server *srv,
                                        const struct sockaddr *target, const char **why,
                                        int *code, uint8_t *bound);

/* The bound address socks_dial_read_bound kept, as a socket address. Returns 0, or -1 if the
 * server gave none (a domain name, or all zeros: many servers, microsocks among them, do not
 * report where they connected from). */
int socks_bound_addr(const uint8_t *bound, struct sockaddr_storage *out);

#endif
