/* socks.c: drives the SOCKS5 client handshake (proto/socks5.c) on a nonblocking socket. */
#include "upstream/socks.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

/* Sends a whole small request into a fresh socket (its send buffer is empty: it takes a few
 * hundred bytes at once; anything less is treated as a failure). */
static enum socks_result send_all(int fd, const uint8_t *b, size_t n, const char **why)
{
    if (n == 0)
        return *why = "socks5: request does not fit", SOCKS_DIAL_FAIL;
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w != (ssize_t)n)
        return *why = "socks5: the server stopped taking our request", SOCKS_DIAL_FAIL;
    return SOCKS_DIAL_WAIT;
}

enum socks_result socks_dial_start(struct socks_dial *d, int fd, const struct socks5_server *srv,
                                   const char **why)
{
    uint8_t b[8];
    memset(d, 0, sizeof *d);
    d->step = SOCKS_STEP_METHOD;
    return send_all(fd, b, socks5_greeting(srv, b, sizeof b), why);
}

/* Reads up to want - d->got more bytes of the reply into d->hdr. Returns 1 when it has want,
 * 0 to wait, -1 on EOF or error. */
static int fill(struct socks_dial *d, int fd, size_t want)
{
    while (d->got < want) {
        ssize_t n = recv(fd, d->hdr + d->got, want - d->got, MSG_DONTWAIT);
        if (n > 0) {
            d->got = (uint8_t)(d->got + n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        return -1;
    }
    return 1;
}

enum socks_result socks_dial_read_bound(struct socks_dial *d, int fd,
                                        const struct socks5_server *srv,
                                        const struct sockaddr *target, const char **why,
                                        int *code, uint8_t *bound)
{
    uint8_t b[600];
    for (;;) {
        size_t want = d->step == SOCKS_STEP_REPLY ? 5 : 2;
        int f = fill(d, fd, want);
        if (f < 0)
            return *why = "socks5: the server closed the connection", SOCKS_DIAL_FAIL;
        /* A failure code is known from the first two bytes: report it without waiting. */
        if (d->step == SOCKS_STEP_REPLY && d->got >= 2 && (d->hdr[0] != 5 || d->hdr[1] != 0)) {
            size_t used;
            socks5_parse_reply(d->hdr, d->got, &used, code, why);
            return SOCKS_DIAL_FAIL;
        }
        if (f == 0)
            return SOCKS_DIAL_WAIT;
        if (d->step == SOCKS_STEP_METHOD) {
            int method = 0;
            if (socks5_parse_method(srv, d->hdr, 2, &method, why) != SOCKS5_OK)
                return SOCKS_DIAL_FAIL;
            d->got = 0;
            if (method == 2) {
                d->step = SOCKS_STEP_AUTH;
                if (send_all(fd, b, socks5_auth_request(srv, b, sizeof b), why) < 0)
                    return SOCKS_DIAL_FAIL;
                continue;
            }
            d->step = SOCKS_STEP_REPLY;
            if (send_all(fd, b, socks5_connect_request(target, NULL, 0, b, sizeof b), why) < 0)
                return SOCKS_DIAL_FAIL;
            continue;
        }
        if (d->step == SOCKS_STEP_AUTH) {
            if (socks5_parse_auth(d->hdr, 2, why) != SOCKS5_OK)
                return SOCKS_DIAL_FAIL;
            d->got = 0;
            d->step = SOCKS_STEP_REPLY;
            if (send_all(fd, b, socks5_connect_request(target, NULL, 0, b, sizeof b), why) < 0)
                return SOCKS_DIAL_FAIL;
            continue;
        }
        /* REPLY: the first 5 bytes tell its length; the bound address is read and dropped,
         * exactly, so the target's own first bytes stay in the socket. */
        if (d->left == 0) {
            size_t total = 0;
            if (socks5_parse_reply(d->hdr, 5, &total, code, why) == SOCKS5_BAD)
                return SOCKS_DIAL_FAIL;
            size_t alen = d->hdr[3] == 1 ? 4 : d->hdr[3] == 4 ? 16 : 1 + (size_t)d->hdr[4];
            d->left = (uint16_t)(4 + alen + 2 - 5);
            if (bound) {
                memset(bound, 0, SOCKS_BOUND_LEN);
                bound[0] = d->hdr[3];
                bound[1] = d->hdr[4];
            }
        }
        /* IPv4/IPv6 bound address: its bytes after the first go to bound[2..] */
        int keep = bound && (d->hdr[3] == 1 || d->hdr[3] == 4);
        size_t all = d->hdr[3] == 1 ? 5 : 17; /* bytes after hdr[4] when kept */
        while (d->left) {
            uint8_t *to = keep ? bound + 2 + (all - d->left) : b;
            ssize_t n = recv(fd, to, d->left, MSG_DONTWAIT);
            if (n > 0) {
                d->left = (uint16_t)(d->left - n);
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return SOCKS_DIAL_WAIT;
            return *why = "socks5: the server closed the connection", SOCKS_DIAL_FAIL;
        }
        d->step = SOCKS_STEP_DONE;
        return SOCKS_DIAL_DONE;
    }
}

int socks_bound_addr(const uint8_t *bound, struct sockaddr_storage *out)
{
    static const uint8_t zero[16];
    size_t alen = bound[0] == 1 ? 4 : bound[0] == 4 ? 16 : 0;
    memset(out, 0, sizeof *out);
    if (!alen || !memcmp(bound + 1, zero, alen) || !(bound[1 + alen] | bound[2 + alen]))
        return -1;
    if (alen == 4) {
        struct sockaddr_in *a = (struct sockaddr_in *)out;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, bound + 1, 4);
        memcpy(&a->sin_port, bound + 5, 2);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, bound + 1, 16);
        memcpy(&a->sin6_port, bound + 17, 2);
    }
    return 0;
}
