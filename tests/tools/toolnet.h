/* toolnet.h: small socket helpers (loopback-only address parsing, deadline I/O) for test tools. */
#ifndef MTPROXY_TESTS_TOOLS_TOOLNET_H
#define MTPROXY_TESTS_TOOLS_TOOLNET_H

#include "proto/obfs2.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Outcome of a deadline-bounded I/O helper. */
enum tn_status { TN_OK = 0, TN_EOF = 1, TN_TIMEOUT = 2, TN_ERR = 3 };

static inline const char *tn_status_name(enum tn_status s) {
    switch (s) {
    case TN_OK:
        return "ok";
    case TN_EOF:
        return "eof";
    case TN_TIMEOUT:
        return "timeout";
    default:
        return "error";
    }
}

static inline int64_t tn_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int tn_left_ms(int64_t deadline) {
    int64_t left = deadline - tn_now_ms();
    if (left < 0)
        return 0;
    return left > 1000000 ? 1000000 : (int)left;
}

static inline int tn_set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Parses "A.B.C.D:PORT" or "[v6]:PORT" (numeric only, no DNS). With loopback_only, anything
 * outside 127.0.0.0/8 and ::1 is refused: the test tools never dial anywhere else.
 * *rest is set to the text after the port (e.g. ",ID,MODE") when rest is not NULL.
 * Returns 0, or -1 with a message in err. */
static inline int tn_parse_addr(const char *text, int loopback_only, struct sockaddr_storage *ss,
                                socklen_t *sslen, const char **rest, char *err, size_t errlen) {
    char host[64];
    const char *p;
    const char *port_s;
    memset(ss, 0, sizeof(*ss));
    if (text[0] == '[') {
        p = strchr(text, ']');
        if (!p || p[1] != ':' || (size_t)(p - text - 1) >= sizeof(host)) {
            snprintf(err, errlen, "bad address '%s' (want [v6]:port)", text);
            return -1;
        }
        memcpy(host, text + 1, (size_t)(p - text - 1));
        host[p - text - 1] = 0;
        port_s = p + 2;
    } else {
        p = strchr(text, ':');
        if (!p || (size_t)(p - text) >= sizeof(host)) {
            snprintf(err, errlen, "bad address '%s' (want ip:port)", text);
            return -1;
        }
        memcpy(host, text, (size_t)(p - text));
        host[p - text] = 0;
        port_s = p + 1;
    }
    char *end;
    long port = strtol(port_s, &end, 10);
    if (end == port_s || port < 0 || port > 65535) {
        snprintf(err, errlen, "bad port in '%s'", text);
        return -1;
    }
    if (rest)
        *rest = end;
    else if (*end) {
        snprintf(err, errlen, "trailing text in '%s'", text);
        return -1;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *sslen = sizeof(*s4);
        if (loopback_only && (ntohl(s4->sin_addr.s_addr) >> 24) != 127) {
            snprintf(err, errlen, "refusing non-loopback address %s", host);
            return -1;
        }
        return 0;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *sslen = sizeof(*s6);
        /* A unique-local address (fc00::/7) only inside the tests' loopback-only namespace
         * (tests/netns.sh), where one on lo (test_ipv6_prefix.py) reaches nothing else. */
        int ula = (s6->sin6_addr.s6_addr[0] & 0xfe) == 0xfc && getenv("MTPROXY_IN_NETNS") &&
                  !strcmp(getenv("MTPROXY_IN_NETNS"), "1");
        if (loopback_only && !IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) && !ula) {
            snprintf(err, errlen, "refusing non-loopback address %s", host);
            return -1;
        }
        return 0;
    }
    snprintf(err, errlen, "bad host '%s' (numeric IPv4/IPv6 only)", host);
    return -1;
}

/* Waits for events on fd until deadline. Returns revents, 0 on timeout, -1 on error. */
static inline int tn_wait(int fd, short events, int64_t deadline) {
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int r = poll(&pfd, 1, tn_left_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r;
        return pfd.revents;
    }
}

/* Writes all n bytes of a nonblocking socket before deadline. */
static inline enum tn_status tn_write_all(int fd, const void *buf, size_t n, int64_t deadline) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return TN_ERR;
        int r = tn_wait(fd, POLLOUT, deadline);
        if (r < 0)
            return TN_ERR;
        if (r == 0)
            return TN_TIMEOUT;
    }
    return TN_OK;
}

/* After recv() on a nonblocking socket returned r <= 0: TN_EOF (r == 0), TN_ERR, TN_TIMEOUT
 * (deadline passed while waiting), or TN_OK once fd is readable again (recv again). */
static inline enum tn_status tn_recv_wait(int fd, ssize_t r, int64_t deadline) {
    if (r == 0)
        return TN_EOF;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return TN_ERR;
    int w = tn_wait(fd, POLLIN, deadline);
    return w < 0 ? TN_ERR : w == 0 ? TN_TIMEOUT : TN_OK;
}

/* Reads exactly n bytes of a nonblocking socket before deadline; *got = bytes read. */
static inline enum tn_status tn_read_full(int fd, void *buf, size_t n, int64_t deadline,
                                          size_t *got) {
    uint8_t *p = buf;
    size_t done = 0;
    enum tn_status st = TN_OK;
    while (done < n && st == TN_OK) {
        ssize_t r = recv(fd, p + done, n - done, 0);
        if (r > 0)
            done += (size_t)r;
        else
            st = tn_recv_wait(fd, r, deadline);
    }
    if (got)
        *got = done;
    return st;
}

/* Reads and discards until EOF (TN_EOF), error (TN_ERR, errno set) or deadline
 * (TN_TIMEOUT). *extra = bytes discarded. */
static inline enum tn_status tn_drain_to_eof(int fd, int64_t deadline, size_t *extra) {
    uint8_t buf[4096];
    size_t total = 0;
    enum tn_status st = TN_OK;
    while (st == TN_OK) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r > 0)
            total += (size_t)r;
        else
            st = tn_recv_wait(fd, r, deadline);
    }
    if (extra)
        *extra = total;
    return st;
}

/* Prints one line to stdout and flushes it, under lock: threads' lines never interleave. */
static inline void tn_print_line(pthread_mutex_t *lock, const char *fmt, va_list ap) {
    pthread_mutex_lock(lock);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(lock);
}

/* Closes with an RST (SO_LINGER {1, 0}). */
static inline void tn_close_rst(int fd) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static inline void tn_hex(const uint8_t *in, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = 0;
}

/* Short name of an obfuscated2 tag, as on the command line: "ef", "ee", "dd" or "??". */
static inline const char *tn_tag_short(uint32_t tag) {
    switch (tag) {
    case OBFS2_TAG_ABRIDGED:
        return "ef";
    case OBFS2_TAG_INTERMEDIATE:
        return "ee";
    case OBFS2_TAG_PADDED:
        return "dd";
    default:
        return "??";
    }
}

#endif
