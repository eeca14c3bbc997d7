/* ja4.h: the JA4 TLS client fingerprint (FoxIO's public JA4 spec) of a raw ClientHello. */
#ifndef MTPROXY_PROTO_JA4_H
#define MTPROXY_PROTO_JA4_H

#include <stddef.h>
#include <stdint.h>

/*
 * JA4 = a "_" b "_" c, 36 characters, e.g. t13d1516h2_8daaf6152771_e5627efa2ab1:
 *
 *   a (10)  t         TLS over TCP (the only transport here)
 *           13        version: the highest non-GREASE value of supported_versions (002b) if the
 *                     extension is there, else the hello's legacy_version; 0304 13, 0303 12,
 *                     0302 11, 0301 10, 0300 s3, 0002 s2, feff d1, fefd d2, fefc d3, else 00
 *           d         d if a server_name extension (0000) is present, else i
 *           15        cipher suites, GREASE not counted, at most 99
 *           16        extensions, GREASE not counted (SNI and ALPN counted), at most 99
 *           h2        first and last character of the first ALPN (0010) protocol; 00 when no
 *                     ALPN, no protocol or an empty one; a one-byte name gives that byte twice;
 *                     if the first or the last byte is not [0-9A-Za-z], the first and last
 *                     hex digits of the whole name instead (ab cd -> "ad")
 *   b (12)  the first 12 hex digits of SHA-256 of the non-GREASE cipher suites as 4 lowercase
 *           hex digits each, sorted, comma-separated; 000000000000 if there is none
 *   c (12)  the same of the non-GREASE extensions without 0000 and 0010, sorted, then "_"
 *           and the non-GREASE signature_algorithms (000d) in the hello's order (no "_" if
 *           there are none); 000000000000 if the sorted extension list is empty
 *
 * JA4_r (raw) is a "_" ciphers "_" extensions ["_" sigalgs]: the strings before hashing.
 * Duplicates are kept (the spec says nothing of them; FoxIO's Rust tool keeps them).
 */
#define JA4_LEN 36

/* A hello in one or more records, as src/proto/faketls.c accepts them. */
#define JA4_MAX_RECORDS 32
#define JA4_MSG_MAX 16384 /* handshake message, its 4-byte header included */

/*
 * The JA4 of the ClientHello starting at rec[0]: one or several handshake records
 *
 *   16 03 0v LL LL <payload>   v 0..4, payload 1..16384 bytes, at most JA4_MAX_RECORDS
 *
 * whose payloads joined make a handshake message 01 <u24 len> <ClientHello body> of at most
 * JA4_MSG_MAX bytes. Bytes after the record that completes the message are ignored (so are
 * the rest of that record's bytes). The body must be well-formed up to the end of its
 * extension block (an absent block means no extensions); a malformed signature_algorithms,
 * supported_versions or ALPN extension makes the hello malformed too.
 *
 * Writes JA4_LEN characters and a NUL to out and returns 0; returns -1 (out set to "") if
 * the bytes are not a complete, well-formed ClientHello. Reads only rec[0..len); keeps
 * nothing; about 21 KB of stack; no allocation unless the hello has over 256 cipher suites,
 * over 128 extensions or over ~800 values in all (then one temporary heap block, and -1 if it
 * cannot be had). Thread-safe (crypto_sha256's per-thread context).
 */
int ja4_from_hello(const uint8_t *rec, size_t len, char out[JA4_LEN + 1]);

/*
 * JA4_r of the same hello into out (cap bytes, NUL-terminated). Returns the length written
 * (without the NUL), or -1 if the hello is malformed or the string does not fit in cap
 * (out is then ""). 4096 bytes hold any hello of up to ~800 values.
 */
int ja4_raw_from_hello(const uint8_t *rec, size_t len, char *out, size_t cap);

#endif
