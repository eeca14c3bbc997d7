/* sock.h: socket addresses and helpers (listen, nonblocking connect, tuning); errors in buffers. */
#ifndef MTPROXY_CORE_SOCK_H
#define MTPROXY_CORE_SOCK_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

/* An IPv4 or IPv6 socket address. */
struct sock_addr {
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
    } u;
    socklen_t len;
};

/* Longest text sock_addr_format writes: "[v6%scope]:65535". */
#define SOCK_ADDR_STRLEN 72

/* Parses "A.B.C.D:PORT", "[V6]:PORT" or, if resolve is set, "HOSTNAME:PORT" (getaddrinfo,
 * first result; blocking: start-up only). Port 1..65535 (0 allowed if allow_port0).
 * Returns 0, or -1 with a message in err. */
int sock_addr_parse(const char *text, int resolve, int allow_port0, struct sock_addr *out,
                    char *err, size_t errlen);

/* Writes "A.B.C.D:PORT" or "[V6]:PORT". */
void sock_addr_format(const struct sock_addr *a, char *buf, size_t len);

/* Writes the address without port. */
void sock_addr_host(const struct sock_addr *a, char *buf, size_t len);

int sock_addr_port(const struct sock_addr *a);

/* 1 if the address is the unspecified address (0.0.0.0 or ::). */
int sock_addr_is_any(const struct sock_addr *a);

/* 1 if the address is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104). */
int sock_addr_is_loopback(const struct sock_addr *a);

/* Per-socket tuning applied to accepted and outgoing sockets. 0 = leave the system default. */
struct sock_opts {
    int nodelay;      /* TCP_NODELAY on/off */
    int keepalive_s;  /* SO_KEEPALIVE with TCP_KEEPIDLE = this, 0 = off */
    int sndbuf;       /* SO_SNDBUF bytes */
    int rcvbuf;       /* SO_RCVBUF bytes */
};

/* Applies opts to fd (best effort; failures are ignored). */
void sock_tune(int fd, const struct sock_opts *opts);

/* Creates a nonblocking, close-on-exec listening TCP socket with SO_REUSEADDR and, if
 * reuseport, SO_REUSEPORT; IPv6 sockets are v6-only. opts (may be NULL) is applied before
 * listen(): accepted sockets inherit it, and buffer sizes must be set before the handshake
 * advertises a window (set later, a small SO_RCVBUF stalls the peer). Returns the fd, or -1
 * with err. */
int sock_listen(const struct sock_addr *a, int backlog, int reuseport,
                const struct sock_opts *opts, char *err, size_t errlen);

/* Starts a nonblocking connect. Returns the fd (connection in progress or done; the caller
 * waits for writability and checks sock_connect_result), or -1 with errno set. */
int sock_connect(const struct sock_addr *a, const struct sock_opts *opts);

/* After writability: 0 if the connect succeeded, else the errno value. */
int sock_connect_result(int fd);

/* Sets O_NONBLOCK. Returns 0 or -1. */
int sock_nonblock(int fd);

#endif
