/* tlsprofile.h: the shape of a real TLS 1.3 server's first flight (learned without decrypting). */
#ifndef MTPROXY_PROTO_TLSPROFILE_H
#define MTPROXY_PROTO_TLSPROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/faketls.h"

#define TLSPROFILE_MAX_EXTS 8     /* ServerHello extensions kept, in order */
#define TLSPROFILE_MAX_RECORDS 16 /* encrypted records of the first flight kept */
#define TLSPROFILE_HOST_MAX 253
#define TLSPROFILE_HELLO_MAX 1024 /* faketls... the ClientHello we send is shorter than this */
#define TLSPROFILE_FILE_MAX 1024  /* text form written by tlsprofile_format */

/* What a server sent in answer to our ClientHello, up to its Finished. */
struct tlsprofile {
    uint16_t version;                   /* from supported_versions: 0x0304 */
    uint16_t cipher;                    /* the suite it chose */
    uint8_t next;                       /* extensions in its ServerHello ... */
    uint16_t ext[TLSPROFILE_MAX_EXTS];  /* ... their types, in order */
    uint8_t ccs;                        /* a change_cipher_spec followed the ServerHello */
    uint8_t nrec;                       /* encrypted (17 03 03) records up to Finished ... */
    uint16_t rec_min[TLSPROFILE_MAX_RECORDS]; /* ... their payload lengths: smallest seen */
    uint16_t rec_max[TLSPROFILE_MAX_RECORDS]; /* ... and largest seen (several handshakes) */
    uint32_t idle_close_ms;             /* the site closed an idle connection after this (0:
                                         * did not within the time we waited) */
    int64_t learned;                    /* unix time of the learning (0: built in) */
    char host[TLSPROFILE_HOST_MAX + 1]; /* where it was learned, or the built-in's name */
};

/*
 * Writes a TLS 1.3 ClientHello shaped like a current Chromium's (GREASE values, the usual
 * extension set, ALPN h2 + http/1.1, x25519 key share, TLS 1.3 and 1.2 offered) naming sni:
 *
 *   16 03 01 LL LL | 01 LL LL LL | 03 03 | random (32) | 20 sid (32) | suites | 01 00 |
 *   ext_len | extensions...
 *
 * random, sid and x25519 (32 bytes each) are the caller's. Returns the bytes written, or 0 if
 * out (cap bytes) is too small or sni is empty or longer than TLSPROFILE_HOST_MAX.
 */
size_t tlsprofile_client_hello(uint8_t *out, size_t cap, const char *sni,
                               const uint8_t random[32], const uint8_t sid[32],
                               const uint8_t x25519[32]);

/* Result of tlsprofile_parse_flight. */
struct tlsprofile_flight {
    size_t need;      /* NEED_MORE: at least this many more bytes */
    int quiet_ok;     /* NEED_MORE at a record boundary after at least one encrypted record:
                       * if the server now stays quiet, its flight has ended */
    const char *why;  /* BAD: short reason ("alert", "tls12", "hello-retry", ...) */
    size_t consumed;  /* OK or quiet_ok: bytes of the flight so far */
};

/*
 * Reads a server's answer to tlsprofile_client_hello (buf[0] is its first byte) without
 * decrypting:
 *
 *   16 03 03 LL LL  02 LL LL LL  03 03 random(32) s sid(s) CC CC 00 EE EE {type len data}...
 *   [14 03 03 00 01 01]                                  change_cipher_spec (optional)
 *   17 03 03 LL LL <encrypted> ...                       EncryptedExtensions .. Finished
 *
 * The flight is complete (OK) at the first encrypted record as long as a sealed Finished
 * (53 bytes; 69 with TLS_AES_256_GCM_SHA384); servers that pack their messages into fewer
 * records end with a larger one: then only the quiet after it tells (NEED_MORE with
 * quiet_ok). Fills p (version, cipher, ext, ccs, nrec, rec_min = rec_max) as far as read.
 * BAD for an alert, a HelloRetryRequest, a TLS 1.2 answer or anything malformed; more than
 * TLSPROFILE_MAX_RECORDS encrypted records is BAD too. Only buf[0..len) is read.
 */
enum faketls_status tlsprofile_parse_flight(const uint8_t *buf, size_t len,
                                            struct tlsprofile *p,
                                            struct tlsprofile_flight *out);

/* Folds another handshake's profile b into a (same shape: same record count, extensions and
 * ccs): widens a's per-record [min, max]. Returns 0, or -1 if the shapes differ (a kept). */
int tlsprofile_merge(struct tlsprofile *a, const struct tlsprofile *b);

/* Bytes a single encrypted record must carry to put on the wire what the profile's records
 * do (their payloads plus the headers of all but one): lo..hi over the lengths seen, widened
 * by vary on both sides, clamped to 1..FAKETLS_MAX_CIPHERTEXT. */
void tlsprofile_appdata_range(const struct tlsprofile *p, unsigned vary, size_t *lo, size_t *hi);

/* The ServerHello extension order the profile shows (key_share before supported_versions, or
 * after). */
enum faketls_ext_order tlsprofile_ext_order(const struct tlsprofile *p);

/* Built-in profiles of common servers (for when the site cannot be reached): index i <
 * tlsprofile_builtin_count(). NULL past the end. */
const struct tlsprofile *tlsprofile_builtin(size_t i);
size_t tlsprofile_builtin_count(void);

/*
 * Text form kept in the state directory, one `key value` per line:
 *
 *   host www.example.com
 *   learned 1732480000
 *   version 0304
 *   cipher 1301
 *   extensions 002b 0033
 *   ccs 1
 *   records 23/23 4012/4012 264/266 53/53      (min/max payload of each encrypted record)
 *   idle-close-ms 60000
 *
 * tlsprofile_format returns the length written (< cap), or 0 if cap is too small.
 * tlsprofile_parse_text reads len bytes of that form (lines starting with # and unknown keys
 * are ignored) and returns FAKETLS_OK, or FAKETLS_BAD if a line is malformed, a value is out
 * of range, or host/records are missing.
 */
size_t tlsprofile_format(const struct tlsprofile *p, char *out, size_t cap);
enum faketls_status tlsprofile_parse_text(const char *buf, size_t len, struct tlsprofile *p);

/* One line describing p for logs and `mtproxy doctor`: where it came from, how old it is at
 * now (unix seconds), its record lengths and extension order. Returns the length written. */
size_t tlsprofile_describe(const struct tlsprofile *p, int64_t now, char *out, size_t cap);

#endif
