/* faketls.c: FakeTLS: ClientHello reader and HMAC check, ServerHello builder, record framing. */
#include "proto/faketls.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/crypto.h"

/* Handshake header: type (1) + u24 length. */
#define HS_HDR_LEN 4
/* Offsets inside the handshake message (see the diagram in faketls.h). */
#define MSG_VERSION_OFF 4
#define MSG_RANDOM_OFF 6
#define MSG_SID_LEN_OFF (MSG_RANDOM_OFF + FAKETLS_RANDOM_LEN)
/* Smallest message the field rules allow: header, version, random, sid_len, one suite,
 * one compression method, an empty extension block. */
#define MSG_MIN (HS_HDR_LEN + 2 + FAKETLS_RANDOM_LEN + 1 + 2 + 2 + 1 + 1 + 2)

#define HS_CLIENT_HELLO 0x01
#define HS_SERVER_HELLO 0x02
#define EXT_SERVER_NAME 0x0000
#define EXT_SUPPORTED_VERSIONS 0x002b
#define EXT_KEY_SHARE 0x0033
#define SNI_HOST_NAME 0x00
#define GROUP_X25519 0x001d
#define TLS13 0x0304
#define X25519_LEN 32

/* Spans an HMAC over a hello may need: the record header, then per record at most three
 * (bytes before the random, zeros, bytes after it). */
#define VERIFY_SPANS_MAX (1 + 3 * FAKETLS_HELLO_MAX_RECORDS)

static const uint8_t zeros[FAKETLS_RANDOM_LEN];

const char *faketls_reason_name(enum faketls_reason r) {
    switch (r) {
    case FAKETLS_R_NONE:
        return "none";
    case FAKETLS_R_RECORD_TYPE:
        return "record-type";
    case FAKETLS_R_RECORD_VERSION:
        return "record-version";
    case FAKETLS_R_RECORD_LENGTH:
        return "record-length";
    case FAKETLS_R_TOO_MANY_RECORDS:
        return "too-many-records";
    case FAKETLS_R_MSG_TYPE:
        return "not-client-hello";
    case FAKETLS_R_MSG_LENGTH:
        return "hello-length";
    case FAKETLS_R_HELLO_VERSION:
        return "hello-version";
    case FAKETLS_R_SESSION_ID:
        return "session-id";
    case FAKETLS_R_CIPHER:
        return "cipher-suites";
    case FAKETLS_R_COMPRESSION:
        return "compression";
    case FAKETLS_R_EXTENSIONS:
        return "extensions";
    case FAKETLS_R_SNI:
        return "sni";
    case FAKETLS_R_NOT_TLS13:
        return "not-tls13";
    case FAKETLS_R_CCS:
        return "ccs";
    }
    return "unknown";
}

const char *faketls_verify_name(enum faketls_verify v) {
    switch (v) {
    case FAKETLS_VERIFY_OK:
        return "ok";
    case FAKETLS_VERIFY_BAD_MAC:
        return "bad-mac";
    case FAKETLS_VERIFY_STALE:
        return "stale";
    case FAKETLS_VERIFY_FUTURE:
        return "future";
    }
    return "unknown";
}

static unsigned load_be16(const uint8_t *p) {
    return (unsigned)p[0] << 8 | p[1];
}

static void store_be16(uint8_t *p, size_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- the handshake message seen through its record fragments ---- */

/* Byte access by message offset over the fragments; remembers the fragment of the last
 * access, so a forward walk costs O(1) per byte. Callers check every offset against len. */
struct view {
    const uint8_t *buf;
    const struct faketls_frag *frags;
    size_t len; /* message length */
    unsigned cur;
    size_t cur_start; /* message offset of frags[cur] */
};

static void view_init(struct view *v, const uint8_t *buf, const struct faketls_hello *h,
                      size_t len) {
    v->buf = buf;
    v->frags = h->frags;
    v->len = len;
    v->cur = 0;
    v->cur_start = 0;
}

static uint8_t view_byte(struct view *v, size_t pos) {
    if (pos < v->cur_start) {
        v->cur = 0;
        v->cur_start = 0;
    }
    while (pos - v->cur_start >= v->frags[v->cur].len) {
        v->cur_start += v->frags[v->cur].len;
        v->cur++;
    }
    return v->buf[v->frags[v->cur].off + (pos - v->cur_start)];
}

static unsigned view_u16(struct view *v, size_t pos) {
    return (unsigned)view_byte(v, pos) << 8 | view_byte(v, pos + 1);
}

static void view_copy(struct view *v, size_t pos, uint8_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = view_byte(v, pos + i);
}

/* Offset in buf of message bytes [pos, pos + n) if one fragment holds them all, else SIZE_MAX. */
static size_t view_contiguous(const struct faketls_hello *h, size_t pos, size_t n) {
    size_t start = 0;
    for (unsigned i = 0; i < h->nfrags; i++) {
        size_t flen = h->frags[i].len;
        if (pos < start + flen)
            return pos + n <= start + flen ? h->frags[i].off + (pos - start) : SIZE_MAX;
        start += flen;
    }
    return SIZE_MAX;
}

static enum faketls_status bad(struct faketls_hello *out, enum faketls_reason r) {
    out->reason = r;
    return FAKETLS_BAD;
}

static int sni_char_ok(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_';
}

/* server_name extension data at [p, p + len). */
static enum faketls_status parse_sni(struct view *v, size_t p, size_t len,
                                     struct faketls_hello *out) {
    size_t end = p + len;
    if (len < 2 || view_u16(v, p) != len - 2 || len == 2)
        return bad(out, FAKETLS_R_SNI);
    for (p += 2; p < end;) {
        if (end - p < 3)
            return bad(out, FAKETLS_R_SNI);
        uint8_t type = view_byte(v, p);
        size_t n = view_u16(v, p + 1);
        p += 3;
        if (n > end - p)
            return bad(out, FAKETLS_R_SNI);
        if (type == SNI_HOST_NAME) {
            if (n == 0 || n > FAKETLS_SNI_MAX || out->nsni == FAKETLS_SNI_NAMES)
                return bad(out, FAKETLS_R_SNI);
            char *name = out->sni[out->nsni++];
            for (size_t i = 0; i < n; i++) {
                uint8_t c = view_byte(v, p + i);
                if (!sni_char_ok(c))
                    return bad(out, FAKETLS_R_SNI);
                name[i] = (char)c;
            }
            name[n] = '\0';
        }
        p += n;
    }
    return FAKETLS_OK;
}

/* supported_versions data at [p, p + len): 1 if it offers TLS 1.3, 0 if not, -1 if malformed. */
static int versions_offer_tls13(struct view *v, size_t p, size_t len) {
    if (len < 3 || view_byte(v, p) != len - 1 || (len - 1) % 2 != 0)
        return -1;
    for (size_t i = p + 1; i < p + len; i += 2)
        if (view_u16(v, i) == TLS13)
            return 1;
    return 0;
}

/* Parses the fields of a complete message of h->msg_len bytes (see faketls.h). */
static enum faketls_status parse_fields(const uint8_t *buf, struct faketls_hello *out) {
    struct view v;
    size_t total = out->msg_len;
    view_init(&v, buf, out, total);

    if (view_u16(&v, MSG_VERSION_OFF) != 0x0303)
        return bad(out, FAKETLS_R_HELLO_VERSION);
    view_copy(&v, MSG_RANDOM_OFF, out->client.random, FAKETLS_RANDOM_LEN);
    out->random_off = view_contiguous(out, MSG_RANDOM_OFF, FAKETLS_RANDOM_LEN);

    size_t p = MSG_SID_LEN_OFF;
    size_t sid_len = view_byte(&v, p++);
    if (sid_len > FAKETLS_SID_MAX || sid_len > total - p)
        return bad(out, FAKETLS_R_SESSION_ID);
    view_copy(&v, p, out->client.sid, sid_len);
    out->client.sid_len = (uint8_t)sid_len;
    p += sid_len;

    if (total - p < 2)
        return bad(out, FAKETLS_R_CIPHER);
    size_t cs_len = view_u16(&v, p);
    p += 2;
    if (cs_len < 2 || cs_len % 2 != 0 || cs_len > total - p)
        return bad(out, FAKETLS_R_CIPHER);
    for (size_t i = 0; i < cs_len; i += 2) {
        unsigned cs = view_u16(&v, p + i);
        if (cs >= 0x1301 && cs <= 0x1303) {
            if (!out->client.cipher_suite)
                out->client.cipher_suite = (uint16_t)cs;
            out->tls13_suites |= (uint8_t)(1u << (cs - 0x1301));
        }
    }
    if (!out->client.cipher_suite)
        return bad(out, FAKETLS_R_CIPHER);
    p += cs_len;

    if (total - p < 1)
        return bad(out, FAKETLS_R_COMPRESSION);
    size_t cm_len = view_byte(&v, p++);
    if (cm_len < 1 || cm_len > total - p)
        return bad(out, FAKETLS_R_COMPRESSION);
    p += cm_len;

    if (total - p < 2 || view_u16(&v, p) != total - p - 2)
        return bad(out, FAKETLS_R_EXTENSIONS);
    int tls13 = 0, seen_sni = 0;
    for (p += 2; p < total;) {
        if (total - p < 4)
            return bad(out, FAKETLS_R_EXTENSIONS);
        unsigned type = view_u16(&v, p);
        size_t len = view_u16(&v, p + 2);
        p += 4;
        if (len > total - p)
            return bad(out, FAKETLS_R_EXTENSIONS);
        if (type == EXT_SERVER_NAME) {
            if (seen_sni++)
                return bad(out, FAKETLS_R_SNI);
            if (parse_sni(&v, p, len, out) != FAKETLS_OK)
                return FAKETLS_BAD;
        } else if (type == EXT_SUPPORTED_VERSIONS) {
            int r = versions_offer_tls13(&v, p, len);
            if (r < 0)
                return bad(out, FAKETLS_R_EXTENSIONS);
            tls13 |= r;
        }
        p += len;
    }
    if (!tls13)
        return bad(out, FAKETLS_R_NOT_TLS13);
    return FAKETLS_OK;
}

/* The message length from the first 4 message bytes, which may straddle fragments. */
static size_t msg_total(const uint8_t *buf, struct faketls_hello *out, uint8_t *type) {
    struct view v;
    view_init(&v, buf, out, HS_HDR_LEN);
    *type = view_byte(&v, 0);
    return HS_HDR_LEN + ((size_t)view_byte(&v, 1) << 16 | (size_t)view_u16(&v, 2));
}

enum faketls_status faketls_hello_parse(const uint8_t *buf, size_t len, struct faketls_hello *out) {
    memset(out, 0, sizeof(*out));
    out->random_off = SIZE_MAX;
    size_t off = 0, have = 0, total = 0; /* total 0: message length not known yet */

    for (;;) {
        size_t avail = len - off;
        const uint8_t *r = buf + off;
        /* Judge a header as soon as its bytes arrive, so garbage is refused early. */
        if (avail >= 1 && r[0] != FAKETLS_TYPE_HANDSHAKE)
            return bad(out, FAKETLS_R_RECORD_TYPE);
        if ((avail >= 2 && r[1] != 3) || (avail >= 3 && r[2] != 1 && r[2] != 3))
            return bad(out, FAKETLS_R_RECORD_VERSION);
        if (avail < FAKETLS_RECORD_HDR_LEN) {
            /* this header, then at least one payload byte (or the rest of the message) */
            out->need = FAKETLS_RECORD_HDR_LEN - avail + (total ? total - have : 1);
            return FAKETLS_NEED_MORE;
        }
        size_t rlen = load_be16(r + 3);
        if (rlen == 0 || rlen > FAKETLS_MAX_PAYLOAD)
            return bad(out, FAKETLS_R_RECORD_LENGTH);
        if (out->nfrags == FAKETLS_HELLO_MAX_RECORDS)
            return bad(out, FAKETLS_R_TOO_MANY_RECORDS);
        if (total && rlen > total - have)
            return bad(out, FAKETLS_R_MSG_LENGTH); /* this record would run past the message */
        if (have == 0 && avail > FAKETLS_RECORD_HDR_LEN && r[5] != HS_CLIENT_HELLO)
            return bad(out, FAKETLS_R_MSG_TYPE);
        if (have == 0 && rlen >= HS_HDR_LEN && avail >= FAKETLS_RECORD_HDR_LEN + HS_HDR_LEN) {
            /* the message length is in this (maybe incomplete) first record: check it now */
            size_t t = HS_HDR_LEN + ((size_t)r[6] << 16 | load_be16(r + 7));
            if (t < MSG_MIN || t > FAKETLS_HELLO_MSG_MAX || rlen > t)
                return bad(out, FAKETLS_R_MSG_LENGTH);
        }
        if (avail - FAKETLS_RECORD_HDR_LEN < rlen) {
            out->need = rlen - (avail - FAKETLS_RECORD_HDR_LEN);
            if (total && have + rlen < total) /* more records must follow */
                out->need += FAKETLS_RECORD_HDR_LEN + (total - have - rlen);
            return FAKETLS_NEED_MORE;
        }
        out->frags[out->nfrags].off = (uint32_t)(off + FAKETLS_RECORD_HDR_LEN);
        out->frags[out->nfrags].len = (uint32_t)rlen;
        out->nfrags++;
        if (out->nfrags == 1) {
            out->record_version[0] = r[1];
            out->record_version[1] = r[2];
        }
        have += rlen;
        off += FAKETLS_RECORD_HDR_LEN + rlen;
        if (!total && have >= HS_HDR_LEN) {
            uint8_t type;
            total = msg_total(buf, out, &type);
            if (type != HS_CLIENT_HELLO)
                return bad(out, FAKETLS_R_MSG_TYPE);
            if (total < MSG_MIN || total > FAKETLS_HELLO_MSG_MAX)
                return bad(out, FAKETLS_R_MSG_LENGTH);
        } else if (!total && buf[out->frags[0].off] != HS_CLIENT_HELLO) {
            return bad(out, FAKETLS_R_MSG_TYPE);
        }
        if (total && have > total)
            return bad(out, FAKETLS_R_MSG_LENGTH); /* the record that told the length runs past */
        if (total && have == total)
            break;
    }
    out->consumed = off;
    out->msg_len = total;
    if (parse_fields(buf, out) != FAKETLS_OK)
        return FAKETLS_BAD;
    return FAKETLS_OK;
}

int faketls_hello_has_sni(const struct faketls_hello *h, const char *domain) {
    for (unsigned i = 0; i < h->nsni; i++) {
        const char *a = h->sni[i], *b = domain;
        while (*a && *b) {
            char x = *a >= 'A' && *a <= 'Z' ? (char)(*a | 0x20) : *a;
            char y = *b >= 'A' && *b <= 'Z' ? (char)(*b | 0x20) : *b;
            if (x != y)
                break;
            a++;
            b++;
        }
        if (*a == '\0' && *b == '\0')
            return 1;
    }
    return 0;
}

/* ---- verification ---- */

/* The spans of the signed bytes: hdr (5 bytes, filled here), then each fragment with the
 * message's random bytes replaced by zeros. Returns the number of spans. */
static size_t hello_spans(const uint8_t *buf, const struct faketls_hello *h, uint8_t hdr[5],
                          struct crypto_span *s) {
    const size_t hole = MSG_RANDOM_OFF, hole_end = MSG_RANDOM_OFF + FAKETLS_RANDOM_LEN;
    size_t n = 0, pos = 0;
    hdr[0] = FAKETLS_TYPE_HANDSHAKE;
    hdr[1] = h->record_version[0];
    hdr[2] = h->record_version[1];
    store_be16(hdr + 3, h->msg_len);
    s[n++] = (struct crypto_span){hdr, FAKETLS_RECORD_HDR_LEN};
    for (unsigned i = 0; i < h->nfrags; i++) {
        const uint8_t *p = buf + h->frags[i].off;
        size_t a = pos, b = pos + h->frags[i].len;
        pos = b;
        if (b <= hole || a >= hole_end) {
            s[n++] = (struct crypto_span){p, b - a};
            continue;
        }
        size_t za = a > hole ? a : hole, zb = b < hole_end ? b : hole_end;
        if (za > a)
            s[n++] = (struct crypto_span){p, za - a};
        s[n++] = (struct crypto_span){zeros, zb - za};
        if (b > zb)
            s[n++] = (struct crypto_span){p + (zb - a), b - zb};
    }
    return n;
}

enum faketls_verify faketls_hello_verify(const uint8_t *buf, const struct faketls_hello *h,
                                         const struct secret *secrets, size_t nsecrets,
                                         int64_t now, const struct faketls_time *tp,
                                         struct faketls_match *m) {
    return faketls_hello_verify_sni(buf, h, secrets, nsecrets, now, tp, 0, m, NULL);
}

/* Starts a verification: no match yet, no HMAC yet; returns the number of signed spans. */
static size_t verify_begin(const uint8_t *buf, const struct faketls_hello *h, uint8_t *hdr,
                           struct crypto_span *spans, struct faketls_match *m, unsigned *tries) {
    if (tries)
        *tries = 0;
    m->secret_index = -1;
    m->timestamp = 0;
    m->skew = 0;
    return hello_spans(buf, h, hdr, spans);
}

/* Tries secret i against the hello (spans: the signed bytes). Returns BAD_MAC if its MAC
 * does not match, else the verdict (OK, STALE or FUTURE) with *m filled. */
static enum faketls_verify try_secret(const struct secret *s, size_t i, const struct faketls_hello *h,
                      const struct crypto_span *spans, size_t n, int64_t now,
                      const struct faketls_time *tp, struct faketls_match *m, unsigned *tries) {
    uint8_t mac[CRYPTO_SHA256_LEN];
    const uint8_t *rnd = h->client.random;
    if (tries)
        (*tries)++;
    crypto_hmac_sha256_spans(s->key, SECRET_KEY_LEN, spans, n, mac);
    if (!crypto_memeq(mac, rnd, FAKETLS_RANDOM_LEN - 4))
        return FAKETLS_VERIFY_BAD_MAC;
    uint8_t t[4];
    for (int j = 0; j < 4; j++)
        t[j] = mac[FAKETLS_RANDOM_LEN - 4 + j] ^ rnd[FAKETLS_RANDOM_LEN - 4 + j];
    m->secret_index = (int)i;
    m->timestamp = load_le32(t);
    m->skew = now - (int64_t)m->timestamp;
    if (tp && !tp->ignore_time) {
        if (m->skew > (int64_t)tp->allowed_past)
            return FAKETLS_VERIFY_STALE;
        if (-m->skew > (int64_t)tp->allowed_future)
            return FAKETLS_VERIFY_FUTURE;
    }
    return FAKETLS_VERIFY_OK;
}

enum faketls_verify faketls_hello_verify_sni(const uint8_t *buf, const struct faketls_hello *h,
                                             const struct secret *secrets, size_t nsecrets,
                                             int64_t now, const struct faketls_time *tp,
                                             int sni_only, struct faketls_match *m,
                                             unsigned *tries) {
    struct crypto_span spans[VERIFY_SPANS_MAX];
    uint8_t hdr[FAKETLS_RECORD_HDR_LEN];
    size_t n = verify_begin(buf, h, hdr, spans, m, tries);
    for (size_t i = 0; i < nsecrets; i++) {
        if (secrets[i].kind != SECRET_EE)
            continue;
        /* With the SNI check on, a secret whose domain the hello does not name could never be
         * accepted: it costs no HMAC (a probe naming none of our domains costs none). */
        if (sni_only && !faketls_hello_has_sni(h, secrets[i].domain))
            continue;
        enum faketls_verify v = try_secret(&secrets[i], i, h, spans, n, now, tp, m, tries);
        if (v != FAKETLS_VERIFY_BAD_MAC)
            return v;
    }
    return FAKETLS_VERIFY_BAD_MAC;
}

/* FNV-1a of a domain, lowercased (SNI comparison ignores ASCII case). */
static uint32_t domain_hash(const char *d) {
    uint32_t x = 2166136261u;
    for (; *d; d++)
        x = (x ^ (uint8_t)(*d >= 'A' && *d <= 'Z' ? *d | 0x20 : *d)) * 16777619u;
    return x;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int faketls_sni_index_build(struct faketls_sni_index *x, const struct secret *secrets,
                            size_t n) {
    x->e = NULL;
    x->n = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += secrets[i].kind == SECRET_EE;
    if (!k)
        return 0;
    if (!(x->e = malloc(k * sizeof *x->e)))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (secrets[i].kind == SECRET_EE)
            x->e[x->n++] = (uint64_t)domain_hash(secrets[i].domain) << 32 | (uint32_t)i;
    qsort(x->e, x->n, sizeof *x->e, cmp_u64);
    return 0;
}

void faketls_sni_index_free(struct faketls_sni_index *x) {
    free(x->e);
    x->e = NULL;
    x->n = 0;
}

enum faketls_verify faketls_hello_verify_index(const uint8_t *buf, const struct faketls_hello *h,
                                               const struct secret *secrets,
                                               const struct faketls_sni_index *x, int64_t now,
                                               const struct faketls_time *tp,
                                               struct faketls_match *m, unsigned *tries) {
    struct crypto_span spans[VERIFY_SPANS_MAX];
    uint8_t hdr[FAKETLS_RECORD_HDR_LEN];
    size_t n = verify_begin(buf, h, hdr, spans, m, tries);
    for (unsigned s = 0; s < h->nsni; s++) {
        uint64_t key = (uint64_t)domain_hash(h->sni[s]) << 32;
        size_t lo = 0, hi = x->n; /* first entry >= key */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (x->e[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < x->n && (x->e[lo] >> 32) == (key >> 32); lo++) {
            size_t i = (size_t)(x->e[lo] & 0xffffffffu);
            if (!faketls_hello_has_sni(h, secrets[i].domain)) /* a hash collision */
                continue;
            enum faketls_verify v = try_secret(&secrets[i], i, h, spans, n, now, tp, m, tries);
            if (v != FAKETLS_VERIFY_BAD_MAC)
                return v;
        }
    }
    return FAKETLS_VERIFY_BAD_MAC;
}

/* ---- ServerHello ---- */

/* Extensions: key_share (4 + 2 + 2 + 32) + supported_versions (4 + 2). */
#define SH_EXT_KEY_SHARE_LEN (4 + 2 + 2 + X25519_LEN)
#define SH_EXT_VERSIONS_LEN (4 + 2)
#define SH_EXTS_LEN (SH_EXT_KEY_SHARE_LEN + SH_EXT_VERSIONS_LEN)
/* ServerHello body without the session id: version, random, sid_len, suite, compression,
 * extensions length, extensions. */
#define SH_BODY_FIXED (2 + FAKETLS_RANDOM_LEN + 1 + 2 + 1 + 2 + SH_EXTS_LEN)
#define CCS_RECORD_LEN 6

size_t faketls_server_hello_len(size_t sid_len, size_t app_data_len) {
    return FAKETLS_RECORD_HDR_LEN + HS_HDR_LEN + SH_BODY_FIXED + sid_len + CCS_RECORD_LEN +
           FAKETLS_RECORD_HDR_LEN + app_data_len;
}

static uint8_t *put_key_share(uint8_t *p, const uint8_t pub[X25519_LEN]) {
    store_be16(p, EXT_KEY_SHARE);
    store_be16(p + 2, 2 + 2 + X25519_LEN);
    store_be16(p + 4, GROUP_X25519);
    store_be16(p + 6, X25519_LEN);
    memcpy(p + 8, pub, X25519_LEN);
    return p + SH_EXT_KEY_SHARE_LEN;
}

static uint8_t *put_versions(uint8_t *p) {
    store_be16(p, EXT_SUPPORTED_VERSIONS);
    store_be16(p + 2, 2);
    store_be16(p + 4, TLS13);
    return p + SH_EXT_VERSIONS_LEN;
}

size_t faketls_server_hello(uint8_t *out, size_t outlen, const uint8_t key[FAKETLS_KEY_LEN],
                            const struct faketls_client *client,
                            const struct faketls_reply *reply) {
    size_t sid_len = client->sid_len, app = reply->app_data_len;
    if (sid_len > FAKETLS_SID_MAX || app < 1 || app > FAKETLS_MAX_CIPHERTEXT)
        return 0;
    size_t total = faketls_server_hello_len(sid_len, app);
    if (outlen < total)
        return 0;

    uint8_t pub[X25519_LEN];
    if (reply->x25519_pub)
        memcpy(pub, reply->x25519_pub, X25519_LEN);
    else if (crypto_x25519_public(pub) != 0)
        return 0;

    size_t body = SH_BODY_FIXED + sid_len;
    uint8_t *p = out;
    p[0] = FAKETLS_TYPE_HANDSHAKE;
    p[1] = 3;
    p[2] = 3;
    store_be16(p + 3, HS_HDR_LEN + body);
    p[5] = HS_SERVER_HELLO;
    p[6] = 0;
    store_be16(p + 7, body);
    p[9] = 3;
    p[10] = 3;
    memset(p + FAKETLS_RANDOM_OFF, 0, FAKETLS_RANDOM_LEN);
    p += FAKETLS_RANDOM_OFF + FAKETLS_RANDOM_LEN;
    *p++ = (uint8_t)sid_len;
    memcpy(p, client->sid, sid_len);
    p += sid_len;
    store_be16(p, client->cipher_suite);
    p[2] = 0; /* compression: null */
    store_be16(p + 3, SH_EXTS_LEN);
    p += 5;
    if (reply->order == FAKETLS_VERSIONS_FIRST) {
        p = put_versions(p);
        p = put_key_share(p, pub);
    } else {
        p = put_key_share(p, pub);
        p = put_versions(p);
    }
    static const uint8_t ccs[CCS_RECORD_LEN] = {FAKETLS_TYPE_CCS, 3, 3, 0, 1, 1};
    memcpy(p, ccs, sizeof ccs);
    p += sizeof ccs;
    p[0] = FAKETLS_TYPE_APPDATA;
    p[1] = 3;
    p[2] = 3;
    store_be16(p + 3, app);
    p += FAKETLS_RECORD_HDR_LEN;
    if (crypto_random_fast(p, app) != 0)
        return 0;
    p += app;
    assert((size_t)(p - out) == total);

    uint8_t mac[CRYPTO_SHA256_LEN];
    const struct crypto_span s[2] = {{client->random, FAKETLS_RANDOM_LEN}, {out, total}};
    crypto_hmac_sha256_spans(key, FAKETLS_KEY_LEN, s, 2, mac);
    memcpy(out + FAKETLS_RANDOM_OFF, mac, FAKETLS_RANDOM_LEN);
    return total;
}

size_t faketls_draw_len(size_t lo, size_t hi) {
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1, r;
    if (span == 0) /* [0, UINT64_MAX]: every value is fine */
        return crypto_random_fast(&r, sizeof r) == 0 ? (size_t)r : lo + (hi - lo) / 2;
    uint64_t limit = UINT64_MAX - UINT64_MAX % span; /* reject the biased tail */
    for (int tries = 0; tries < 64; tries++) {
        if (crypto_random_fast(&r, sizeof r) != 0)
            break;
        if (r < limit)
            return lo + (size_t)(r % span);
    }
    return lo + (hi - lo) / 2;
}

/* ---- records after the handshake ---- */

void faketls_deframer_init(struct faketls_deframer *d) {
    memset(d, 0, sizeof(*d));
}

static enum faketls_status deframe_fail(struct faketls_deframer *d, enum faketls_reason r,
                                        size_t *out_len) {
    d->bad = 1;
    d->reason = r;
    *out_len = 0;
    return FAKETLS_BAD;
}

enum faketls_status faketls_deframe(struct faketls_deframer *d, uint8_t *buf, size_t len,
                                    size_t *out_len) {
    size_t r = 0, w = 0;
    *out_len = 0;
    if (d->bad)
        return FAKETLS_BAD;
    while (r < len) {
        if (d->left == 0) {
            size_t take = FAKETLS_RECORD_HDR_LEN - d->hdr_len;
            if (take > len - r)
                take = len - r;
            memcpy(d->hdr + d->hdr_len, buf + r, take);
            d->hdr_len = (uint8_t)(d->hdr_len + take);
            r += take;
            /* judge each header byte as it arrives, so a bad stream fails at once */
            uint8_t type = d->hdr[0];
            if (type != FAKETLS_TYPE_APPDATA && type != FAKETLS_TYPE_CCS)
                return deframe_fail(d, FAKETLS_R_RECORD_TYPE, out_len);
            if ((d->hdr_len >= 2 && d->hdr[1] != 3) || (d->hdr_len >= 3 && d->hdr[2] != 3))
                return deframe_fail(d, FAKETLS_R_RECORD_VERSION, out_len);
            if (d->hdr_len < FAKETLS_RECORD_HDR_LEN)
                break;
            d->hdr_len = 0;
            size_t rlen = load_be16(d->hdr + 3);
            if (type == FAKETLS_TYPE_CCS && rlen != 1)
                return deframe_fail(d, FAKETLS_R_CCS, out_len);
            if (rlen == 0 || rlen > FAKETLS_MAX_CIPHERTEXT)
                return deframe_fail(d, FAKETLS_R_RECORD_LENGTH, out_len);
            d->type = type;
            d->left = (uint32_t)rlen;
            d->records++;
            continue;
        }
        size_t take = d->left;
        if (take > len - r)
            take = len - r;
        if (d->type == FAKETLS_TYPE_CCS) {
            if (buf[r] != 0x01) /* take is 1: a CCS payload is one byte */
                return deframe_fail(d, FAKETLS_R_CCS, out_len);
        } else {
            if (w != r)
                memmove(buf + w, buf + r, take);
            w += take;
        }
        r += take;
        d->left -= (uint32_t)take;
    }
    *out_len = w;
    return FAKETLS_OK;
}

size_t faketls_record_header(uint8_t hdr[FAKETLS_RECORD_HDR_LEN], size_t payload_len) {
    assert(payload_len <= FAKETLS_MAX_PAYLOAD);
    if (payload_len > FAKETLS_MAX_PAYLOAD)
        payload_len = FAKETLS_MAX_PAYLOAD;
    hdr[0] = FAKETLS_TYPE_APPDATA;
    hdr[1] = 3;
    hdr[2] = 3;
    store_be16(hdr + 3, payload_len);
    return payload_len;
}
