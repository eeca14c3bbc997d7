/* tlsprofile.c: a browser-shaped ClientHello, the server flight reader, profile text form. */
#include "proto/tlsprofile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HS_SERVER_HELLO 0x02
#define EXT_SUPPORTED_VERSIONS 0x002b
#define EXT_KEY_SHARE 0x0033
#define TLS13 0x0304
#define FINISHED_SHA256 53 /* 4 + 32 + 1 (inner type) + 16 (tag) */
#define FINISHED_SHA384 69 /* 4 + 48 + 1 + 16 */

static unsigned be16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

/* ---- ClientHello ---- */

struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int bad;
};

static void put(struct wbuf *w, const void *d, size_t n)
{
    if (w->bad || w->cap - w->len < n) {
        w->bad = 1;
        return;
    }
    memcpy(w->p + w->len, d, n);
    w->len += n;
}

static void put16(struct wbuf *w, unsigned v)
{
    uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
    put(w, b, 2);
}

/* Opens a length field of n bytes (2 or 3); close_len fills it. */
static size_t open_len(struct wbuf *w, size_t n)
{
    static const uint8_t z[3];
    size_t at = w->len;
    put(w, z, n);
    return at;
}

static void close_len(struct wbuf *w, size_t at, size_t n)
{
    if (w->bad)
        return;
    size_t v = w->len - at - n;
    if (n == 3)
        w->p[at++] = (uint8_t)(v >> 16);
    w->p[at] = (uint8_t)(v >> 8);
    w->p[at + 1] = (uint8_t)v;
}

/* A GREASE value (RFC 8701: 0x?a?a) from a random byte. */
static unsigned grease(uint8_t r)
{
    unsigned n = (r & 0xf0u) | 0x0au;
    return n << 8 | n;
}

size_t tlsprofile_client_hello(uint8_t *out, size_t cap, const char *sni,
                               const uint8_t random[32], const uint8_t sid[32],
                               const uint8_t x25519[32])
{
    size_t sl = sni ? strlen(sni) : 0;
    if (sl == 0 || sl > TLSPROFILE_HOST_MAX)
        return 0;
    struct wbuf w = {out, 0, cap, 0};
    /* GREASE values drawn from the random: two of them must differ (Chromium's rule). */
    unsigned g_suite = grease(random[0]), g_ext1 = grease(random[1]), g_grp = grease(random[2]);
    unsigned g_ext2 = grease(random[3]), g_ver = grease(random[4]);
    if (g_ext2 == g_ext1)
        g_ext2 ^= 0x1010;
    static const uint8_t rec[3] = {0x16, 0x03, 0x01};
    put(&w, rec, 3);
    size_t rl = open_len(&w, 2);
    uint8_t t = 0x01;
    put(&w, &t, 1);
    size_t ml = open_len(&w, 3);
    put16(&w, 0x0303);
    put(&w, random, 32);
    t = 32;
    put(&w, &t, 1);
    put(&w, sid, 32);
    static const uint16_t suites[] = {0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030,
                                      0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f,
                                      0x0035};
    put16(&w, 2 * (1 + sizeof suites / sizeof suites[0]));
    put16(&w, g_suite);
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        put16(&w, suites[i]);
    static const uint8_t comp[2] = {0x01, 0x00};
    put(&w, comp, 2);
    size_t el = open_len(&w, 2);
    put16(&w, g_ext1); /* GREASE, empty */
    put16(&w, 0);
    put16(&w, 0x0000); /* server_name */
    put16(&w, sl + 5);
    put16(&w, sl + 3);
    t = 0;
    put(&w, &t, 1);
    put16(&w, sl);
    put(&w, sni, sl);
    static const uint8_t fixed1[] = {
        0x00, 0x17, 0x00, 0x00,                         /* extended_master_secret */
        0xff, 0x01, 0x00, 0x01, 0x00,                   /* renegotiation_info */
    };
    put(&w, fixed1, sizeof fixed1);
    put16(&w, 0x000a); /* supported_groups: GREASE, x25519, secp256r1, secp384r1 */
    put16(&w, 10);
    put16(&w, 8);
    put16(&w, g_grp);
    put16(&w, 0x001d);
    put16(&w, 0x0017);
    put16(&w, 0x0018);
    static const uint8_t fixed2[] = {
        0x00, 0x0b, 0x00, 0x02, 0x01, 0x00,             /* ec_point_formats: uncompressed */
        0x00, 0x23, 0x00, 0x00,                         /* session_ticket */
        0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, 'h', '2', 0x08, 'h', 't', 't', 'p', '/', '1',
        '.', '1',                                       /* ALPN h2, http/1.1 */
        0x00, 0x05, 0x00, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00, /* status_request */
        0x00, 0x0d, 0x00, 0x12, 0x00, 0x10, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x03,
        0x08, 0x05, 0x05, 0x01, 0x08, 0x06, 0x06, 0x01, /* signature_algorithms */
        0x00, 0x12, 0x00, 0x00,                         /* signed_certificate_timestamp */
    };
    put(&w, fixed2, sizeof fixed2);
    put16(&w, 0x0033); /* key_share: GREASE (1 byte), x25519 */
    put16(&w, 2 + 4 + 1 + 4 + 32);
    put16(&w, 4 + 1 + 4 + 32);
    put16(&w, g_grp);
    put16(&w, 1);
    t = 0;
    put(&w, &t, 1);
    put16(&w, 0x001d);
    put16(&w, 32);
    put(&w, x25519, 32);
    static const uint8_t fixed3[] = {
        0x00, 0x2d, 0x00, 0x02, 0x01, 0x01,             /* psk_key_exchange_modes: psk_dhe */
    };
    put(&w, fixed3, sizeof fixed3);
    put16(&w, 0x002b); /* supported_versions: GREASE, 1.3, 1.2 */
    put16(&w, 7);
    t = 6;
    put(&w, &t, 1);
    put16(&w, g_ver);
    put16(&w, 0x0304);
    put16(&w, 0x0303);
    static const uint8_t fixed4[] = {
        0x00, 0x1b, 0x00, 0x03, 0x02, 0x00, 0x02,       /* compress_certificate: brotli */
    };
    put(&w, fixed4, sizeof fixed4);
    put16(&w, g_ext2); /* GREASE, one zero byte */
    put16(&w, 1);
    t = 0;
    put(&w, &t, 1);
    close_len(&w, el, 2);
    close_len(&w, ml, 3);
    close_len(&w, rl, 2);
    return w.bad ? 0 : w.len;
}

/* ---- the server's flight ---- */

static enum faketls_status flight_bad(struct tlsprofile_flight *out, const char *why)
{
    out->why = why;
    return FAKETLS_BAD;
}

/* Reads the ServerHello message body (after the 4-byte handshake header). */
static enum faketls_status parse_server_hello(const uint8_t *m, size_t n, struct tlsprofile *p,
                                              struct tlsprofile_flight *out)
{
    static const uint8_t hrr[32] = {0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11,
                                    0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
                                    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e,
                                    0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c};
    if (n < 2 + 32 + 1)
        return flight_bad(out, "server-hello");
    if (be16(m) != 0x0303)
        return flight_bad(out, "server-hello-version");
    if (!memcmp(m + 2, hrr, 32))
        return flight_bad(out, "hello-retry");
    size_t off = 2 + 32, s = m[off++];
    if (s > 32 || off + s + 2 + 1 + 2 > n)
        return flight_bad(out, "server-hello");
    off += s;
    p->cipher = (uint16_t)be16(m + off);
    off += 3; /* suite, compression */
    size_t elen = be16(m + off);
    off += 2;
    if (off + elen != n)
        return flight_bad(out, "server-hello-extensions");
    p->next = 0;
    p->version = 0x0303;
    while (off < n) {
        if (n - off < 4)
            return flight_bad(out, "server-hello-extensions");
        unsigned type = be16(m + off), len = be16(m + off + 2);
        off += 4;
        if (len > n - off)
            return flight_bad(out, "server-hello-extensions");
        if (p->next == TLSPROFILE_MAX_EXTS)
            return flight_bad(out, "server-hello-extensions");
        p->ext[p->next++] = (uint16_t)type;
        if (type == EXT_SUPPORTED_VERSIONS) {
            if (len != 2)
                return flight_bad(out, "server-hello-extensions");
            p->version = (uint16_t)be16(m + off);
        }
        off += len;
    }
    if (p->version != TLS13)
        return flight_bad(out, "tls12");
    return FAKETLS_OK;
}

enum faketls_status tlsprofile_parse_flight(const uint8_t *buf, size_t len,
                                            struct tlsprofile *p,
                                            struct tlsprofile_flight *out)
{
    memset(out, 0, sizeof *out);
    p->next = 0;
    p->nrec = 0;
    p->ccs = 0;
    size_t off = 0;
    int seen_sh = 0;
    for (;;) {
        if (len - off < FAKETLS_RECORD_HDR_LEN) {
            if (len > off && buf[off] == 0x15)
                return flight_bad(out, "alert");
            out->need = FAKETLS_RECORD_HDR_LEN - (len - off);
            out->quiet_ok = p->nrec > 0 && off == len;
            out->consumed = off;
            return FAKETLS_NEED_MORE;
        }
        const uint8_t *r = buf + off;
        size_t rlen = be16(r + 3);
        if (r[0] == 0x15)
            return flight_bad(out, "alert");
        if (r[1] != 3 || (r[2] != 3 && !(r[2] == 1 && !seen_sh)))
            return flight_bad(out, "record-version");
        if (rlen == 0 || rlen > FAKETLS_MAX_CIPHERTEXT)
            return flight_bad(out, "record-length");
        if (!seen_sh) {
            if (r[0] != FAKETLS_TYPE_HANDSHAKE)
                return flight_bad(out, "not-handshake");
        } else if (r[0] == FAKETLS_TYPE_CCS) {
            if (p->ccs || p->nrec || rlen != 1)
                return flight_bad(out, "ccs");
        } else if (r[0] != FAKETLS_TYPE_APPDATA) {
            return flight_bad(out, "record-type");
        }
        if (len - off - FAKETLS_RECORD_HDR_LEN < rlen) {
            out->need = rlen - (len - off - FAKETLS_RECORD_HDR_LEN);
            out->consumed = off;
            return FAKETLS_NEED_MORE;
        }
        const uint8_t *d = r + FAKETLS_RECORD_HDR_LEN;
        off += FAKETLS_RECORD_HDR_LEN + rlen;
        if (!seen_sh) {
            /* the ServerHello message, whole in this one record */
            if (rlen < 4 || d[0] != HS_SERVER_HELLO)
                return flight_bad(out, "not-server-hello");
            size_t mlen = (size_t)d[1] << 16 | be16(d + 2);
            if (mlen + 4 != rlen)
                return flight_bad(out, "server-hello-length");
            enum faketls_status st = parse_server_hello(d + 4, mlen, p, out);
            if (st != FAKETLS_OK)
                return st;
            seen_sh = 1;
        } else if (r[0] == FAKETLS_TYPE_CCS) {
            if (d[0] != 1)
                return flight_bad(out, "ccs");
            p->ccs = 1;
        } else {
            if (p->nrec == TLSPROFILE_MAX_RECORDS)
                return flight_bad(out, "too-many-records");
            p->rec_min[p->nrec] = p->rec_max[p->nrec] = (uint16_t)rlen;
            p->nrec++;
            size_t fin = p->cipher == 0x1302 ? FINISHED_SHA384 : FINISHED_SHA256;
            if (rlen == fin) {
                out->consumed = off;
                return FAKETLS_OK;
            }
        }
    }
}

int tlsprofile_merge(struct tlsprofile *a, const struct tlsprofile *b)
{
    if (a->nrec != b->nrec || a->next != b->next || a->ccs != b->ccs ||
        memcmp(a->ext, b->ext, a->next * sizeof a->ext[0]))
        return -1;
    for (unsigned i = 0; i < a->nrec; i++) {
        if (b->rec_min[i] < a->rec_min[i])
            a->rec_min[i] = b->rec_min[i];
        if (b->rec_max[i] > a->rec_max[i])
            a->rec_max[i] = b->rec_max[i];
    }
    return 0;
}

void tlsprofile_appdata_range(const struct tlsprofile *p, unsigned vary, size_t *lo, size_t *hi)
{
    size_t a = 0, b = 0;
    for (unsigned i = 0; i < p->nrec; i++) {
        a += p->rec_min[i] + (i ? FAKETLS_RECORD_HDR_LEN : 0);
        b += p->rec_max[i] + (i ? FAKETLS_RECORD_HDR_LEN : 0);
    }
    a = a > vary ? a - vary : 1;
    b += vary;
    if (a > FAKETLS_MAX_CIPHERTEXT)
        a = FAKETLS_MAX_CIPHERTEXT;
    if (b > FAKETLS_MAX_CIPHERTEXT)
        b = FAKETLS_MAX_CIPHERTEXT;
    if (b < a)
        b = a;
    *lo = a;
    *hi = b;
}

enum faketls_ext_order tlsprofile_ext_order(const struct tlsprofile *p)
{
    for (unsigned i = 0; i < p->next; i++) {
        if (p->ext[i] == EXT_KEY_SHARE)
            return FAKETLS_KEY_SHARE_FIRST;
        if (p->ext[i] == EXT_SUPPORTED_VERSIONS)
            return FAKETLS_VERSIONS_FIRST;
    }
    return FAKETLS_KEY_SHARE_FIRST;
}

/* ---- built-in profiles ---- */

/* Shapes of common servers' answers to a browser hello (ALPN h2 accepted), computed from the
 * sealed sizes of their handshake messages: EncryptedExtensions with ALPN (32), a certificate
 * chain, CertificateVerify (RSA-2048: 281; ECDSA P-256: 95..97), Finished (53). OpenSSL writes
 * supported_versions before key_share and one record per message; BoringSSL-style servers
 * pack the messages into one record. */
static const struct tlsprofile builtins[] = {
    {.version = TLS13, .cipher = 0x1301, .next = 2, .ext = {0x002b, 0x0033}, .ccs = 1,
     .nrec = 4, .rec_min = {32, 3050, 281, 53}, .rec_max = {32, 3050, 281, 53},
     .host = "built-in:openssl-rsa2048"},
    {.version = TLS13, .cipher = 0x1301, .next = 2, .ext = {0x002b, 0x0033}, .ccs = 1,
     .nrec = 4, .rec_min = {32, 2210, 95, 53}, .rec_max = {32, 2210, 97, 53},
     .host = "built-in:openssl-ecdsa"},
    {.version = TLS13, .cipher = 0x1301, .next = 2, .ext = {0x0033, 0x002b}, .ccs = 1,
     .nrec = 1, .rec_min = {2810}, .rec_max = {2812}, .host = "built-in:packed-ecdsa"},
};

const struct tlsprofile *tlsprofile_builtin(size_t i)
{
    return i < sizeof builtins / sizeof builtins[0] ? &builtins[i] : NULL;
}

size_t tlsprofile_builtin_count(void)
{
    return sizeof builtins / sizeof builtins[0];
}

/* ---- text form ---- */

size_t tlsprofile_format(const struct tlsprofile *p, char *out, size_t cap)
{
    size_t n = 0;
#define OUT(...)                                                                                \
    do {                                                                                       \
        int k_ = snprintf(out + n, cap - n, __VA_ARGS__);                                      \
        if (k_ < 0 || (size_t)k_ >= cap - n)                                                   \
            return 0;                                                                          \
        n += (size_t)k_;                                                                       \
    } while (0)
    if (cap == 0)
        return 0;
    OUT("# mtproxy: the fronting site's TLS first flight (rewritten by the proxy)\n");
    OUT("host %s\nlearned %lld\nversion %04x\ncipher %04x\nextensions", p->host,
        (long long)p->learned, p->version, p->cipher);
    for (unsigned i = 0; i < p->next; i++)
        OUT(" %04x", p->ext[i]);
    OUT("\nccs %u\nrecords", p->ccs);
    for (unsigned i = 0; i < p->nrec; i++)
        OUT(" %u/%u", p->rec_min[i], p->rec_max[i]);
    OUT("\nidle-close-ms %u\n", p->idle_close_ms);
#undef OUT
    return n;
}

/* Reads unsigned numbers (base 10 or 16) separated by spaces from s; "a/b" pairs fill lo and
 * hi (a lone number fills both). Returns the count, or -1 on a malformed or too large one. */
static int read_numbers(const char *s, int base, unsigned long long max,
                        unsigned long long *lo, unsigned long long *hi, int nmax)
{
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        if (n == nmax || !(base == 16 ? strchr("0123456789abcdefABCDEF", *s) && *s
                                      : *s >= '0' && *s <= '9'))
            return -1;
        char *e;
        unsigned long long a = strtoull(s, &e, base), b = a;
        if (*e == '/' && hi) {
            const char *q = e + 1;
            if (!(*q >= '0' && *q <= '9'))
                return -1;
            b = strtoull(q, &e, base);
        }
        if ((*e && *e != ' ' && *e != '\t') || a > max || b > max || b < a)
            return -1;
        lo[n] = a;
        if (hi)
            hi[n] = b;
        n++;
        s = e;
    }
    return n;
}

enum faketls_status tlsprofile_parse_text(const char *buf, size_t len, struct tlsprofile *p)
{
    memset(p, 0, sizeof *p);
    int have_host = 0, have_rec = 0;
    size_t off = 0;
    while (off < len) {
        char line[256];
        size_t e = off;
        while (e < len && buf[e] != '\n')
            e++;
        size_t ll = e - off;
        if (ll >= sizeof line)
            return FAKETLS_BAD;
        memcpy(line, buf + off, ll);
        line[ll] = '\0';
        off = e + 1;
        if (memchr(line, '\0', ll))
            return FAKETLS_BAD;
        if (ll == 0 || line[0] == '#')
            continue;
        char *v = strchr(line, ' ');
        if (v)
            *v++ = '\0';
        else
            v = line + ll; /* a key alone: an empty value (extensions with none) */
        unsigned long long lo[TLSPROFILE_MAX_RECORDS], hi[TLSPROFILE_MAX_RECORDS];
        int n;
        if (!strcmp(line, "host")) {
            size_t hl = strlen(v);
            if (hl == 0 || hl > TLSPROFILE_HOST_MAX)
                return FAKETLS_BAD;
            for (size_t i = 0; i < hl; i++)
                if ((unsigned char)v[i] <= ' ' || (unsigned char)v[i] >= 0x7f)
                    return FAKETLS_BAD;
            memcpy(p->host, v, hl + 1);
            have_host = 1;
        } else if (!strcmp(line, "learned")) {
            if (read_numbers(v, 10, 0xffffffffffULL, lo, NULL, 1) != 1)
                return FAKETLS_BAD;
            p->learned = (int64_t)lo[0];
        } else if (!strcmp(line, "version") || !strcmp(line, "cipher")) {
            if (read_numbers(v, 16, 0xffff, lo, NULL, 1) != 1)
                return FAKETLS_BAD;
            *(line[0] == 'v' ? &p->version : &p->cipher) = (uint16_t)lo[0];
        } else if (!strcmp(line, "extensions")) {
            if ((n = read_numbers(v, 16, 0xffff, lo, NULL, TLSPROFILE_MAX_EXTS)) < 0)
                return FAKETLS_BAD;
            p->next = (uint8_t)n;
            memset(p->ext, 0, sizeof p->ext);
            for (int i = 0; i < n; i++)
                p->ext[i] = (uint16_t)lo[i];
        } else if (!strcmp(line, "ccs")) {
            if (read_numbers(v, 10, 1, lo, NULL, 1) != 1)
                return FAKETLS_BAD;
            p->ccs = (uint8_t)lo[0];
        } else if (!strcmp(line, "records")) {
            n = read_numbers(v, 10, FAKETLS_MAX_CIPHERTEXT, lo, hi, TLSPROFILE_MAX_RECORDS);
            if (n < 1)
                return FAKETLS_BAD;
            p->nrec = (uint8_t)n; /* a repeated line replaces the earlier one whole */
            memset(p->rec_min, 0, sizeof p->rec_min);
            memset(p->rec_max, 0, sizeof p->rec_max);
            for (int i = 0; i < n; i++) {
                if (lo[i] == 0)
                    return FAKETLS_BAD;
                p->rec_min[i] = (uint16_t)lo[i];
                p->rec_max[i] = (uint16_t)hi[i];
            }
            have_rec = 1;
        } else if (!strcmp(line, "idle-close-ms")) {
            if (read_numbers(v, 10, 0xffffffffUL, lo, NULL, 1) != 1)
                return FAKETLS_BAD;
            p->idle_close_ms = (uint32_t)lo[0];
        }
    }
    if (!have_host || !have_rec || p->version != TLS13)
        return FAKETLS_BAD;
    return FAKETLS_OK;
}

size_t tlsprofile_describe(const struct tlsprofile *p, int64_t now, char *out, size_t cap)
{
    if (cap == 0)
        return 0;
    char recs[TLSPROFILE_MAX_RECORDS * 12 + 1] = "";
    size_t rl = 0;
    for (unsigned i = 0; i < p->nrec && rl < sizeof recs; i++) {
        int k = p->rec_min[i] == p->rec_max[i]
                    ? snprintf(recs + rl, sizeof recs - rl, "%s%u", i ? "," : "", p->rec_min[i])
                    : snprintf(recs + rl, sizeof recs - rl, "%s%u-%u", i ? "," : "",
                               p->rec_min[i], p->rec_max[i]);
        if (k < 0)
            break;
        rl += (size_t)k;
    }
    char age[48];
    if (p->learned)
        snprintf(age, sizeof age, "learned %llds ago",
                 (long long)(now > p->learned ? now - p->learned : 0));
    else
        snprintf(age, sizeof age, "built in");
    int n = snprintf(out, cap, "%s (%s): cipher %04x, %s, %s, %u encrypted record%s [%s]%s",
                     p->host, age, p->cipher,
                     tlsprofile_ext_order(p) == FAKETLS_KEY_SHARE_FIRST ? "key_share first"
                                                                       : "versions first",
                     p->ccs ? "ccs" : "no ccs", p->nrec, p->nrec == 1 ? "" : "s", recs,
                     p->idle_close_ms ? ", idle close" : "");
    if (n < 0)
        return 0;
    size_t w = (size_t)n < cap ? (size_t)n : cap - 1;
    if (p->idle_close_ms && w + 1 < cap) {
        int k = snprintf(out + w, cap - w, " %u ms", p->idle_close_ms);
        if (k > 0)
            w = (size_t)k < cap - w ? w + (size_t)k : cap - 1;
    }
    return w;
}
