/* socks5.h: the client side of SOCKS5 (RFC 1928) with username/password (RFC 1929): URL, requests, replies. */
#ifndef MTPROXY_PROTO_SOCKS5_H
#define MTPROXY_PROTO_SOCKS5_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SOCKS5_NAME_MAX 255 /* user, password and domain names: one length byte each */

/* Where the SOCKS5 server is, and how to log in. */
struct socks5_server {
    char host[256]; /* address or name, without brackets */
    int port;
    char user[SOCKS5_NAME_MAX + 1], pass[SOCKS5_NAME_MAX + 1];
    int auth; /* user/pass given */
};

/* Parses "socks5://[USER:PASS@]HOST:PORT" (HOST an IPv4 address, [IPv6] or a name; USER and
 * PASS percent-encoded where they hold ':', '@' or '%'; 1..255 bytes each once decoded).
 * Returns 0, or -1 with err. */
int socks5_parse_url(const char *url, struct socks5_server *out, char *err, size_t errlen);

enum socks5_status { SOCKS5_OK = 0, SOCKS5_NEED_MORE = 1, SOCKS5_BAD = -1 };

/*
 * The exchange, client side:
 *   -> 05 N METHODS...           (00 no auth, and 02 user/pass when configured)
 *   <- 05 M                      (M: the method chosen; FF none acceptable)
 *   -> 01 ULEN USER PLEN PASS    (only if M = 02)
 *   <- 01 STATUS                 (00 success)
 *   -> 05 01 00 ATYP ADDR PORT   (CONNECT; ATYP 01 IPv4 (4), 03 name (1 + n), 04 IPv6 (16))
 *   <- 05 REP 00 ATYP ADDR PORT  (REP 00 succeeded; the bound address is read and ignored)
 * Builders return the bytes written to out (0 if it does not fit).
 */
size_t socks5_greeting(const struct socks5_server *s, uint8_t *out, size_t cap);

/* The server's method choice at buf[0..len): OK with *method set (0, or 2 if s->auth),
 * NEED_MORE, or BAD with *why. */
enum socks5_status socks5_parse_method(const struct socks5_server *s, const uint8_t *buf,
                                       size_t len, int *method, const char **why);

size_t socks5_auth_request(const struct socks5_server *s, uint8_t *out, size_t cap);
enum socks5_status socks5_parse_auth(const uint8_t *buf, size_t len, const char **why);

/* CONNECT to an address (AF_INET/AF_INET6 with port) or, if name is not NULL, to name:port. */
size_t socks5_connect_request(const struct sockaddr *target, const char *name, int port,
                              uint8_t *out, size_t cap);

/* The CONNECT reply: OK with *consumed (its whole length: bytes after it are the target's),
 * NEED_MORE, or BAD with *why (for a refusal: the RFC's text for the reply code). */
enum socks5_status socks5_parse_reply(const uint8_t *buf, size_t len, size_t *consumed,
                                      int *code, const char **why);

/* The RFC 1928 text for a reply code ("connection refused", ...). */
const char *socks5_reply_name(int code);

#endif
