/* secret.h: proxy secrets as clients see them (plain, dd, ee+domain), parsing and links. */
#ifndef MTPROXY_PROTO_SECRET_H
#define MTPROXY_PROTO_SECRET_H

#include <stddef.h>
#include <stdint.h>

#define SECRET_KEY_LEN 16
#define SECRET_NAME_MAX 64
#define SECRET_DOMAIN_MAX 182 /* tdlib's MAX_DOMAIN_LENGTH */
/* Buffer size for secret_to_hex that fits every kind: "ee" + key + domain in hex + NUL. */
#define SECRET_HEX_MAX (2 + 2 * SECRET_KEY_LEN + 2 * SECRET_DOMAIN_MAX + 1)

/* Which client kinds a secret serves; also used as a bit mask of allowed kinds. */
enum secret_kind {
    SECRET_PLAIN = 1, /* 16 bytes: obfuscated2, tags ef / ee (and dd) */
    SECRET_DD = 2,    /* dd + 16 bytes: padded intermediate only (tag dd) */
    SECRET_EE = 4,    /* ee + 16 bytes + domain: FakeTLS (issue 3) */
};

struct secret {
    char name[SECRET_NAME_MAX];
    uint8_t key[SECRET_KEY_LEN];
    enum secret_kind kind;
    char domain[SECRET_DOMAIN_MAX + 1]; /* ee only; "" otherwise */
};

/* Parses SECRET as a client sees it: 32 hex digits (plain), "dd" + 32 hex, or
 * "ee" + 32 hex + hex of the domain; hex is case-insensitive. Also accepts the unpadded
 * base64url form of the same bytes. name is copied (must be 1..SECRET_NAME_MAX-1 chars of
 * [A-Za-z0-9_.-]); NULL leaves it empty. Returns 0, or -1 with a message in err. */
int secret_parse(const char *name, const char *text, struct secret *out, char *err,
                 size_t errlen);

/* Parses the config form "NAME:SECRET". Returns 0, or -1 with a message in err. */
int secret_parse_named(const char *text, struct secret *out, char *err, size_t errlen);

/* Writes the client form of s in lowercase hex (e.g. "dd0123..."), NUL-terminated.
 * Returns the length, or -1 if outlen is too small. */
int secret_to_hex(const struct secret *s, char *out, size_t outlen);

/* Writes the two invitation links for host:port, each NUL-terminated:
 * tg://proxy?server=HOST&port=PORT&secret=HEX and https://t.me/proxy?... .
 * An IPv6 host is written bare (brackets, if given, are dropped: Telegram Android parses the
 * server with inet_pton); bytes outside [A-Za-z0-9-._~:] are percent-encoded.
 * Returns 0, or -1 if a buffer is too small, host is NULL or empty, or port is not 1..65535. */
int secret_links(const struct secret *s, const char *host, int port, char *tg, size_t tglen,
                 char *https, size_t httpslen);

/* The WEB proxy links (docs/web.md) of a plain or dd secret s for the DNS name host:
 * tg://webproxy?server=HOST&secret=HEX and https://t.me/webproxy?... (no port: always 443).
 * Returns 0, or -1 for an ee secret, an empty host or a buffer too small. */
int secret_web_links(const struct secret *s, const char *host, char *tg, size_t tglen,
                     char *https, size_t httpslen);

#endif
