/* webcap.h: the WEB proxy v1 bridge capability (docs/web.md 2): host, derivation, matching. */
#ifndef MTPROXY_PROTO_WEBCAP_H
#define MTPROXY_PROTO_WEBCAP_H

#include <stddef.h>
#include <stdint.h>

#include "proto/secret.h"

/*
 * capability = base64url-no-pad(HMAC-SHA256(key = S, msg = WEBCAP_LABEL + H))
 *   S: the client's secret bytes: 16 (plain) or dd + 16 (dd); ee secrets have none
 *   H: the canonical host name: lowercase ASCII (A-labels), no trailing dot
 * The result is WEBCAP_LEN characters: https://H/?bridge=<capability> selects the bridge page.
 */
#define WEBCAP_LABEL "tdesktop-web-proxy-bridge-v1\n"
#define WEBCAP_LEN 43      /* base64url of 32 bytes, unpadded */
#define WEBCAP_HOST_MAX 253 /* a DNS name's length without the trailing dot */
#define WEBCAP_SECRET_MAX (1 + SECRET_KEY_LEN)

/* Writes the unpadded base64url form of in[0..n) and a NUL into out[0..cap). Returns its length
 * (4n/3 rounded up), or 0 if cap is too small (out then holds "" when cap > 0). */
size_t webcap_b64url(const uint8_t *in, size_t n, char *out, size_t cap);

/* Canonicalises the host name in[0..n) into out[0..cap) (NUL-terminated): ASCII letters
 * lowered, one trailing dot dropped. It must then be a DNS name of two or more labels, each
 * 1..63 of [a-z0-9-] not starting or ending with '-', at most WEBCAP_HOST_MAX long, whose last
 * label is not all digits (so no IPv4 address; ':' already rules out IPv6). Returns the length,
 * or -1 (bad name or cap too small). */
int webcap_host(const char *in, size_t n, char *out, size_t cap);

/* The secret bytes S of s: its key, with the dd byte in front for a dd secret. Returns the
 * number written to out (16 or 17), or -1 for an ee secret (WEB mode does not take them). */
int webcap_secret_bytes(const struct secret *s, uint8_t out[WEBCAP_SECRET_MAX]);

/* Derives the capability for secret bytes key[0..keylen) and host (canonicalised first with
 * webcap_host) into out (WEBCAP_LEN characters and a NUL). Returns 0, or -1 for a bad host. */
int webcap_derive(const uint8_t *key, size_t keylen, const char *host,
                  char out[WEBCAP_LEN + 1]);

/* 1 if the presented bridge value p[0..n) is exactly the capability cap (WEBCAP_LEN
 * characters), else 0. The comparison takes the same time wherever the bytes differ. */
int webcap_match(const char *p, size_t n, const char cap[WEBCAP_LEN + 1]);

/* Compares p[0..n) with every one of count capabilities (all of them, whatever matches) and
 * returns the index of the last that matches, or -1. */
int webcap_find(const char *p, size_t n, const char (*caps)[WEBCAP_LEN + 1], size_t count);

#endif
