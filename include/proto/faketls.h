/* faketls.h: FakeTLS (ee secrets): ClientHello reader and check, ServerHello, record framing. */
#ifndef MTPROXY_PROTO_FAKETLS_H
#define MTPROXY_PROTO_FAKETLS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/secret.h"

/*
 * TLS record layer (RFC 8446 5.1), every multi-byte field big-endian:
 *
 *   0      1      3       5
 *   +------+------+-------+--------------------------+
 *   | type | ver  | len   | payload (len bytes)      |
 *   +------+------+-------+--------------------------+
 *   type 16 handshake, 14 change_cipher_spec, 17 application_data
 */
#define FAKETLS_RECORD_HDR_LEN 5
#define FAKETLS_MAX_PAYLOAD 16384                          /* 2^14: plaintext record limit */
#define FAKETLS_MAX_CIPHERTEXT (FAKETLS_MAX_PAYLOAD + 256) /* RFC 8446 TLSCiphertext limit */

#define FAKETLS_TYPE_CCS 0x14
#define FAKETLS_TYPE_HANDSHAKE 0x16
#define FAKETLS_TYPE_APPDATA 0x17

#define FAKETLS_RANDOM_LEN 32
#define FAKETLS_RANDOM_OFF 11 /* offset of the random in a single-record hello or a ServerHello */
#define FAKETLS_SID_MAX 32
#define FAKETLS_KEY_LEN SECRET_KEY_LEN

/* Limits of the ClientHello reader. A handshake message may be cut into up to
 * FAKETLS_HELLO_MAX_RECORDS records (DPI-evasion tools do that); the message itself (4-byte
 * handshake header included) may be at most FAKETLS_HELLO_MSG_MAX bytes, since the client
 * signed it as one record. FAKETLS_HELLO_BUF_MAX is the most bytes a caller must buffer before
 * parse gives an answer other than NEED_MORE. */
#define FAKETLS_HELLO_MAX_RECORDS 32
#define FAKETLS_HELLO_MSG_MAX FAKETLS_MAX_PAYLOAD
#define FAKETLS_HELLO_BUF_MAX                                                                      \
    (FAKETLS_HELLO_MSG_MAX + FAKETLS_HELLO_MAX_RECORDS * FAKETLS_RECORD_HDR_LEN)
#define FAKETLS_SNI_MAX 253  /* longest DNS name in text form */
#define FAKETLS_SNI_NAMES 4  /* host names kept from the server_name extension */

/* Verdicts of the parsers in this module. */
enum faketls_status { FAKETLS_OK = 0, FAKETLS_NEED_MORE = 1, FAKETLS_BAD = -1 };

/* Why a parser said FAKETLS_BAD (for logs and counters; see faketls_reason_name). */
enum faketls_reason {
    FAKETLS_R_NONE = 0,
    FAKETLS_R_RECORD_TYPE,    /* record type not handshake (hello) / not 14 or 17 (deframer) */
    FAKETLS_R_RECORD_VERSION, /* record version not 0301/0303 (hello) or not 0303 (deframer) */
    FAKETLS_R_RECORD_LENGTH,  /* record length 0 or over the limit */
    FAKETLS_R_TOO_MANY_RECORDS,
    FAKETLS_R_MSG_TYPE,     /* handshake message is not a ClientHello (01) */
    FAKETLS_R_MSG_LENGTH,   /* message too short, too long, or records carry bytes past its end */
    FAKETLS_R_HELLO_VERSION, /* legacy_version not 0303 */
    FAKETLS_R_SESSION_ID,   /* session id longer than 32 */
    FAKETLS_R_CIPHER,       /* cipher suite list malformed, or offers none of 1301..1303 */
    FAKETLS_R_COMPRESSION,  /* compression method list malformed */
    FAKETLS_R_EXTENSIONS,   /* extension block missing, malformed, or not ending the message */
    FAKETLS_R_SNI,          /* server_name malformed, a name with a bad byte, or too many */
    FAKETLS_R_NOT_TLS13,    /* no supported_versions extension offering 0304 */
    FAKETLS_R_CCS,          /* change_cipher_spec payload is not the single byte 01 */
};

/* Short name of a reason for logs ("record-type", ...). Never NULL. */
const char *faketls_reason_name(enum faketls_reason r);

/* What the ServerHello needs from the ClientHello (67 bytes: copy it into the connection). */
struct faketls_client {
    uint8_t random[FAKETLS_RANDOM_LEN]; /* exactly as received (timestamp-XORed) */
    uint8_t sid[FAKETLS_SID_MAX];
    uint8_t sid_len;
    uint16_t cipher_suite; /* the suite to echo: 0x1301, 0x1302 or 0x1303 */
};

/* One record's payload inside the caller's buffer (internal to parse/verify). */
struct faketls_frag {
    uint32_t off, len;
};

/* Result of faketls_hello_parse. Only the fields named for the returned status are set. */
struct faketls_hello {
    /* NEED_MORE */
    size_t need; /* at least this many more bytes must arrive before parse can answer */
    /* BAD */
    enum faketls_reason reason;
    /* OK */
    size_t consumed;   /* bytes of buf taken by the hello's records (headers included) */
    size_t msg_len;    /* handshake message length, its 4-byte header included */
    size_t random_off; /* offset of the random in buf, or SIZE_MAX if split across records */
    uint8_t record_version[2]; /* first record's version: 03 01 or 03 03 */
    uint8_t tls13_suites;      /* suites offered: bit 0 = 1301, bit 1 = 1302, bit 2 = 1303 */
    struct faketls_client client;
    unsigned nsni; /* host names in server_name (0: no extension) */
    char sni[FAKETLS_SNI_NAMES][FAKETLS_SNI_MAX + 1]; /* as sent, NUL-terminated */
    unsigned nfrags;
    struct faketls_frag frags[FAKETLS_HELLO_MAX_RECORDS];
};

/*
 * Reads a ClientHello from the first len bytes a client sent (buf[0] is the first byte).
 *
 * The handshake message, carried in one record or cut into several (each `16 03 01|03 LL LL`,
 * 1..16384 payload bytes; the last one must end exactly where the message ends):
 *
 *   0    1         4      6             38  39          +s        +2
 *   +----+---------+------+-------------+---+-----------+---------+-------------------+
 *   | 01 | len u24 | 0303 | random (32) | s | sid (s)   | cs_len  | suites (cs_len)   |
 *   +----+---------+------+-------------+---+-----------+---------+-------------------+
 *   ...  +---+-----------+---------+--------------------------------------------------+
 *        | c | methods   | ext_len | extensions: { type u16 | len u16 | data } ...     |
 *        +---+-----------+---------+--------------------------------------------------+
 *   s <= 32; cs_len even and >= 2; c >= 1; the extensions end exactly at 4 + len.
 *   In a single 16 03 01 record the random sits at FAKETLS_RANDOM_OFF (11) of buf.
 *
 *   server_name (type 0000) data:
 *   +--------------+------+----------+------------+---- ...
 *   | list_len u16 | 00   | n u16    | name (n)   | more entries
 *   +--------------+------+----------+------------+---- ...
 *   Entries of type 00 (host_name) must be 1..253 bytes of [A-Za-z0-9.-_]; other entry types
 *   are skipped. supported_versions (002b) must offer 0304. GREASE values anywhere are skipped.
 *
 * Returns FAKETLS_OK (out: consumed, msg_len, random, client, sni, frags), FAKETLS_NEED_MORE
 * (out->need >= 1: call again with more bytes; never more than FAKETLS_HELLO_BUF_MAX in total)
 * or FAKETLS_BAD (out->reason) as soon as the bytes so far cannot start a ClientHello we accept.
 * Only buf[0..len) is read; buf is not kept. The cipher suite chosen is the first of 1301..1303
 * in the client's order (tls13_suites says which were offered, for a caller that would rather
 * answer with another); a hello offering none of them is BAD (no Telegram client sends one).
 */
enum faketls_status faketls_hello_parse(const uint8_t *buf, size_t len, struct faketls_hello *out);

/* 1 if one of the hello's host names equals domain (ASCII case-insensitive), else 0. */
int faketls_hello_has_sni(const struct faketls_hello *h, const char *domain);

/* Clock policy for the hello timestamp. ts is accepted when
 * now - allowed_past <= ts <= now + allowed_future, or always if ignore_time is set. */
struct faketls_time {
    uint32_t allowed_past;   /* how old a hello may be (client clock behind, or delay) */
    uint32_t allowed_future; /* how far ahead the client clock may be */
    int ignore_time;
};

enum faketls_verify {
    FAKETLS_VERIFY_OK = 0,
    FAKETLS_VERIFY_BAD_MAC = -1, /* no ee secret produced the digest (a probe or wrong key) */
    FAKETLS_VERIFY_STALE = -2,   /* digest matched, timestamp older than allowed_past */
    FAKETLS_VERIFY_FUTURE = -3,  /* digest matched, timestamp beyond allowed_future */
};

/* Which secret matched and when the client said it wrote the hello. */
struct faketls_match {
    int secret_index;   /* index into the secrets array; -1 on BAD_MAC */
    uint32_t timestamp; /* unix time from the digest */
    int64_t skew;       /* now - timestamp (positive: the hello is that many seconds old) */
};

/*
 * Checks a hello that faketls_hello_parse accepted (buf and h as it left them) against each
 * secret of kind SECRET_EE, in order; other kinds are skipped. For a secret key K:
 *
 *   msg  = the handshake message (all record payloads joined), random bytes set to zero
 *   mac  = HMAC-SHA256(K, 16 || record_version || u16 BE msg_len || msg)
 *   ok   = mac[0..28) == random[0..28)            (constant time)
 *   ts   = u32 LE of mac[28..32) XOR random[28..32)
 *
 * For a hello in one record the signed bytes are exactly that record (PROTOCOL.md 3.2); for a
 * hello cut into records they are the single record the client built before it was cut.
 * The first secret whose digest matches decides; then the timestamp is checked against now
 * with tp (NULL: ignore time). Returns FAKETLS_VERIFY_* and fills *m (secret_index stays -1 on
 * BAD_MAC; on STALE/FUTURE it names the secret that matched so the caller can log it).
 */
enum faketls_verify faketls_hello_verify(const uint8_t *buf, const struct faketls_hello *h,
                                         const struct secret *secrets, size_t nsecrets,
                                         int64_t now, const struct faketls_time *tp,
                                         struct faketls_match *m);

/* faketls_hello_verify, but with sni_only set only the secrets whose domain the hello names
 * in its SNI are tried (what tls-sni-check would accept anyway): a hello naming none of our
 * domains is BAD_MAC without computing any HMAC. *tries (if not NULL) is set to the number of
 * HMACs computed. */
enum faketls_verify faketls_hello_verify_sni(const uint8_t *buf, const struct faketls_hello *h,
                                             const struct secret *secrets, size_t nsecrets,
                                             int64_t now, const struct faketls_time *tp,
                                             int sni_only, struct faketls_match *m,
                                             unsigned *tries);

/* The ee secrets of an array by domain (a hash of the lowercased domain, sorted), so that
 * tls-sni-check finds a hello's candidates without walking every secret: with thousands of
 * users on their own domains the walk, not the one HMAC, was the cost. */
struct faketls_sni_index {
    uint64_t *e; /* hash << 32 | secret index, sorted */
    size_t n;
};

/* Builds x over secrets[0..n) (only ee ones). Returns 0, or -1 (out of memory; x empty). */
int faketls_sni_index_build(struct faketls_sni_index *x, const struct secret *secrets, size_t n);
void faketls_sni_index_free(struct faketls_sni_index *x);

/* faketls_hello_verify_sni with sni_only on, trying only the secrets x lists for the SNI names
 * the hello carries (x built over the same secrets). */
enum faketls_verify faketls_hello_verify_index(const uint8_t *buf, const struct faketls_hello *h,
                                               const struct secret *secrets,
                                               const struct faketls_sni_index *x, int64_t now,
                                               const struct faketls_time *tp,
                                               struct faketls_match *m, unsigned *tries);

/* Name of a verify result for logs ("ok", "bad-mac", "stale", "future"). */
const char *faketls_verify_name(enum faketls_verify v);

/* Extension order in the ServerHello (real servers differ; copy the fronted site's). */
enum faketls_ext_order {
    FAKETLS_KEY_SHARE_FIRST = 0,    /* key_share, supported_versions */
    FAKETLS_VERSIONS_FIRST = 1,     /* supported_versions, key_share */
};

/* Default range for the fake ApplicationData length (what certificate chains of common sites
 * measure; MTG draws from the same range). */
#define FAKETLS_APPDATA_MIN 2500
#define FAKETLS_APPDATA_MAX 4700

struct faketls_reply {
    enum faketls_ext_order order;
    size_t app_data_len;       /* 1..FAKETLS_MAX_CIPHERTEXT bytes of random "ciphertext" */
    const uint8_t *x25519_pub; /* 32-byte key_share value, or NULL to generate a fresh one */
};

/* Bytes faketls_server_hello writes for a session id of sid_len and the given app data. */
size_t faketls_server_hello_len(size_t sid_len, size_t app_data_len);

/*
 * Writes the answer to a verified hello: three records, nothing else.
 *
 *   16 03 03 LL LL                       handshake record
 *     02 LL LL LL                        ServerHello
 *     03 03 | random (32) | s | sid (s)  random at offset 11; sid echoed
 *     CC CC | 00                         cipher suite (client->cipher_suite), no compression
 *     00 2e                              extensions, in reply->order:
 *       00 33 00 24 00 1d 00 20 <x25519 public key (32)>   key_share
 *       00 2b 00 02 03 04                                  supported_versions: TLS 1.3
 *   14 03 03 00 01 01                    change_cipher_spec
 *   17 03 03 LL LL <app_data_len random bytes>
 *
 * The random is filled last: HMAC-SHA256(key, client->random || all bytes written with the
 * random zeroed) — what the client recomputes. key is the matched secret's 16 bytes.
 * Returns the bytes written (faketls_server_hello_len), or 0 if outlen is too small,
 * app_data_len is out of range, the session id is too long, or the random source failed.
 */
size_t faketls_server_hello(uint8_t *out, size_t outlen, const uint8_t key[FAKETLS_KEY_LEN],
                            const struct faketls_client *client, const struct faketls_reply *reply);

/* A length drawn uniformly from [lo, hi] (lo <= hi) with the strong random source; if that
 * fails, the midpoint. For faketls_reply.app_data_len. */
size_t faketls_draw_len(size_t lo, size_t hi);

/*
 * Client -> proxy after the handshake: strips record headers in place.
 *
 *   14 03 03 00 01 01                    change_cipher_spec: ignored (payload must be 01)
 *   17 03 03 LL LL <payload>             application data: payload kept
 *
 * Version must be 0303; an application-data payload is 1..FAKETLS_MAX_CIPHERTEXT bytes.
 * Anything else is an error. Headers and records may be split anywhere across calls.
 */
struct faketls_deframer {
    uint8_t hdr[FAKETLS_RECORD_HDR_LEN]; /* header bytes seen so far */
    uint8_t hdr_len;
    uint8_t type;            /* type of the record being read (when left > 0) */
    uint8_t bad;             /* sticky: an error was seen */
    enum faketls_reason reason;
    uint32_t left;           /* payload bytes of the current record still to come */
    uint64_t records;        /* complete headers seen (for stats) */
};

/* Puts a deframer at a record boundary (a zeroed struct is the same state). */
void faketls_deframer_init(struct faketls_deframer *d);

/* Feeds the len bytes just read into buf: on FAKETLS_OK the application-data payload bytes
 * among them are moved to buf[0..*out_len) (order kept; *out_len <= len; may be 0 when only
 * headers arrived). On FAKETLS_BAD (d->reason says why) *out_len is 0 and every later call is
 * BAD too: close or front the connection. Never NEED_MORE: partial records are remembered. */
enum faketls_status faketls_deframe(struct faketls_deframer *d, uint8_t *buf, size_t len,
                                    size_t *out_len);

/* Proxy -> client: writes `17 03 03 LL LL` for payload_len bytes. The caller must cut its
 * data into records of at most FAKETLS_MAX_PAYLOAD bytes (TD closes the connection on a larger
 * one); a larger payload_len asserts in debug builds and is clamped. Returns the length written
 * into the header. */
size_t faketls_record_header(uint8_t hdr[FAKETLS_RECORD_HDR_LEN], size_t payload_len);

#endif
