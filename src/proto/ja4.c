/* ja4.c: the JA4 TLS client fingerprint of a raw ClientHello (see include/proto/ja4.h). */
#include "proto/ja4.h"

#include <stdlib.h>
#include <string.h>

#include "crypto/crypto.h"

#define REC_HDR 5
#define REC_MAX 16384
#define HS_HDR 4
#define HS_CLIENT_HELLO 0x01

#define EXT_SNI 0x0000
#define EXT_SIGALGS 0x000d
#define EXT_ALPN 0x0010
#define EXT_VERSIONS 0x002b

#define HASH_HEX 12
/* Values sorted on the stack; more take one heap block. */
#define STACK_CIPHERS 256
#define STACK_EXTS 128
#define STACK_TEXT 4096

/*
 * ClientHello message (after the records are joined), every length big-endian:
 *
 *   0    1         4        6            38  39        +s       +2
 *   +----+---------+--------+------------+---+---------+--------+-----------------+
 *   | 01 | len u24 | legacy | random(32) | s | sid (s) | cs_len | suites (cs_len) |
 *   +----+---------+--------+------------+---+---------+--------+-----------------+
 *   ...  +---+---------+  [ +---------+------------------------------------------+ ]
 *        | c | methods |  [ | ext_len | { type u16 | len u16 | data (len) } ...  | ]
 *        +---+---------+  [ +---------+------------------------------------------+ ]
 *   The extension block, when present, ends exactly where the message ends.
 *
 *   signature_algorithms (000d): list_len u16 (even) | u16 ...
 *   supported_versions   (002b): list_len u8 (even)  | u16 ...
 *   ALPN                 (0010): list_len u16 | { n u8 | name (n) } ...   (first name used)
 */

/* What the fingerprint needs from a hello; offsets index m. */
struct parts {
    const uint8_t *m;
    size_t cs_off, cs_len;    /* cipher suite bytes */
    size_t ext_off, ext_len;  /* extension block without its length */
    size_t sig_off, sig_len;  /* signature algorithm bytes of the first 000d */
    unsigned ncs, next, nsig; /* non-GREASE counts (extensions: SNI and ALPN included) */
    unsigned nsorted_ext;     /* non-GREASE extensions other than SNI and ALPN */
    char version[2];
    char alpn[2];
    int sni;
};

static unsigned be16(const uint8_t *p) {
    return (unsigned)p[0] << 8 | p[1];
}

static int grease(unsigned v) {
    return (v & 0x0f0f) == 0x0a0a && (v >> 8) == (v & 0xff);
}

static int alnum(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static const char hexd[] = "0123456789abcdef";

static void version_code(unsigned v, char out[2]) {
    static const struct {
        uint16_t v;
        char s[3];
    } map[] = {{0x0304, "13"}, {0x0303, "12"}, {0x0302, "11"}, {0x0301, "10"}, {0x0300, "s3"},
               {0x0002, "s2"}, {0xfeff, "d1"}, {0xfefd, "d2"}, {0xfefc, "d3"}};
    out[0] = out[1] = '0';
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].v == v) {
            out[0] = map[i].s[0];
            out[1] = map[i].s[1];
        }
}

/* ALPN data at [p, p + len): first protocol's first and last characters. -1 if malformed. */
static int parse_alpn(const uint8_t *p, size_t len, char out[2]) {
    out[0] = out[1] = '0';
    if (len < 2 || be16(p) != len - 2)
        return -1;
    if (len == 2)
        return 0; /* no protocol */
    size_t n = p[2];
    if (n > len - 3)
        return -1;
    if (n == 0)
        return 0;
    uint8_t f = p[3], l = p[3 + n - 1];
    if (alnum(f) && alnum(l)) {
        out[0] = (char)f;
        out[1] = (char)l;
    } else {
        out[0] = hexd[f >> 4];
        out[1] = hexd[l & 15];
    }
    return 0;
}

/* Reads the ClientHello message m[0..n) (n >= HS_HDR, type and length already checked). */
static int parse_msg(const uint8_t *m, size_t n, struct parts *pt) {
    memset(pt, 0, sizeof *pt);
    pt->m = m;
    pt->alpn[0] = pt->alpn[1] = '0';
    size_t p = HS_HDR;
    if (n - p < 2 + 32 + 1)
        return -1;
    unsigned legacy = be16(m + p);
    p += 2 + 32;
    size_t sid = m[p++];
    if (sid > 32 || sid > n - p)
        return -1;
    p += sid;
    if (n - p < 2)
        return -1;
    size_t cs = be16(m + p);
    p += 2;
    if (cs % 2 != 0 || cs > n - p)
        return -1;
    pt->cs_off = p;
    pt->cs_len = cs;
    for (size_t i = 0; i < cs; i += 2)
        pt->ncs += !grease(be16(m + p + i));
    p += cs;
    if (n - p < 1)
        return -1;
    size_t cm = m[p++];
    if (cm > n - p)
        return -1;
    p += cm;

    unsigned version = legacy;
    int seen_versions = 0, seen_sig = 0, seen_alpn = 0;
    if (p < n) {
        if (n - p < 2 || be16(m + p) != n - p - 2)
            return -1;
        p += 2;
        pt->ext_off = p;
        pt->ext_len = n - p;
    }
    while (p < n) {
        if (n - p < 4)
            return -1;
        unsigned type = be16(m + p);
        size_t len = be16(m + p + 2);
        p += 4;
        if (len > n - p)
            return -1;
        const uint8_t *d = m + p;
        p += len;
        if (grease(type))
            continue;
        pt->next++;
        if (type == EXT_SNI) {
            pt->sni = 1;
            continue;
        }
        if (type == EXT_ALPN) {
            if (!seen_alpn++ && parse_alpn(d, len, pt->alpn) != 0)
                return -1;
            continue;
        }
        pt->nsorted_ext++;
        if (type == EXT_SIGALGS && !seen_sig++) {
            if (len < 2 || be16(d) % 2 != 0 || be16(d) > len - 2)
                return -1;
            pt->sig_off = (size_t)(d - m) + 2;
            pt->sig_len = be16(d);
            for (size_t i = 0; i < pt->sig_len; i += 2)
                pt->nsig += !grease(be16(d + 2 + i));
        } else if (type == EXT_VERSIONS && !seen_versions++) {
            if (len < 1 || d[0] % 2 != 0 || d[0] > len - 1)
                return -1;
            version = 0;
            for (size_t i = 1; i < 1 + (size_t)d[0]; i += 2) {
                unsigned v = be16(d + i);
                if (!grease(v) && v > version)
                    version = v;
            }
        }
    }
    version_code(version, pt->version);
    return 0;
}

/* The handshake message from the records at rec[0..len): *msg points into rec when the first
 * record holds it all, else into copy (JA4_MSG_MAX bytes). Returns its length, or 0. */
static size_t join_records(const uint8_t *rec, size_t len, uint8_t *copy, const uint8_t **msg) {
    size_t off = 0, have = 0, total = 0; /* total 0: the message length is not known yet */
    for (unsigned r = 0; r < JA4_MAX_RECORDS; r++) {
        if (len - off < REC_HDR)
            return 0;
        const uint8_t *h = rec + off;
        size_t rlen = be16(h + 3);
        if (h[0] != 0x16 || h[1] != 3 || h[2] > 4 || rlen == 0 || rlen > REC_MAX ||
            rlen > len - off - REC_HDR)
            return 0;
        const uint8_t *pay = h + REC_HDR;
        off += REC_HDR + rlen;
        if (r == 0 && rlen >= HS_HDR) { /* the common case: read the first record in place */
            total = HS_HDR + ((size_t)pay[1] << 16 | be16(pay + 2));
            if (pay[0] != HS_CLIENT_HELLO || total > JA4_MSG_MAX)
                return 0;
            if (rlen >= total) {
                *msg = pay;
                return total;
            }
        }
        if (!total) { /* the handshake header itself is cut */
            size_t k = rlen < HS_HDR - have ? rlen : HS_HDR - have;
            memcpy(copy + have, pay, k);
            have += k;
            pay += k;
            rlen -= k;
            if (have < HS_HDR)
                continue;
            total = HS_HDR + ((size_t)copy[1] << 16 | be16(copy + 2));
            if (copy[0] != HS_CLIENT_HELLO || total > JA4_MSG_MAX)
                return 0;
        }
        size_t k = rlen < total - have ? rlen : total - have;
        memcpy(copy + have, pay, k);
        have += k;
        if (have == total) {
            *msg = copy;
            return total;
        }
    }
    return 0;
}

static int cmp_u16(const void *a, const void *b) {
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

static void sort_u16(uint16_t *v, size_t n) {
    if (n > 32) {
        qsort(v, n, sizeof *v, cmp_u16);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        uint16_t x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* Writes "xxxx,xxxx,..." of v[0..n) at out; returns the characters written. */
static size_t hex_list(char *out, const uint16_t *v, size_t n) {
    char *o = out;
    for (size_t i = 0; i < n; i++) {
        if (i)
            *o++ = ',';
        *o++ = hexd[v[i] >> 12];
        *o++ = hexd[(v[i] >> 8) & 15];
        *o++ = hexd[(v[i] >> 4) & 15];
        *o++ = hexd[v[i] & 15];
    }
    return (size_t)(o - out);
}

/* The two strings that are hashed, built from pt: text = ciphers, then text + *clen =
 * extensions ["_" sigalgs]. text must hold 5 * (ncs + nsorted_ext + nsig) + 1 bytes; vals
 * ncs + nsorted_ext values. */
static void lists(const struct parts *pt, uint16_t *vals, char *text, size_t *clen, size_t *elen) {
    const uint8_t *m = pt->m;
    size_t k = 0;
    for (size_t i = 0; i < pt->cs_len; i += 2) {
        unsigned v = be16(m + pt->cs_off + i);
        if (!grease(v))
            vals[k++] = (uint16_t)v;
    }
    sort_u16(vals, k);
    *clen = hex_list(text, vals, k);

    uint16_t *ev = vals + k;
    k = 0;
    for (size_t p = pt->ext_off; p < pt->ext_off + pt->ext_len;) {
        unsigned type = be16(m + p);
        size_t len = be16(m + p + 2);
        p += 4 + len;
        if (!grease(type) && type != EXT_SNI && type != EXT_ALPN)
            ev[k++] = (uint16_t)type;
    }
    sort_u16(ev, k);
    char *e = text + *clen;
    size_t n = hex_list(e, ev, k);
    if (pt->nsig) {
        e[n++] = '_';
        for (size_t i = 0; i < pt->sig_len; i += 2) {
            uint16_t v = (uint16_t)be16(m + pt->sig_off + i);
            if (grease(v))
                continue;
            if (e[n - 1] != '_')
                e[n++] = ',';
            n += hex_list(e + n, &v, 1);
        }
    }
    *elen = n;
}

static void write_a(const struct parts *pt, char *o) {
    unsigned nc = pt->ncs > 99 ? 99 : pt->ncs, ne = pt->next > 99 ? 99 : pt->next;
    o[0] = 't';
    o[1] = pt->version[0];
    o[2] = pt->version[1];
    o[3] = pt->sni ? 'd' : 'i';
    o[4] = (char)('0' + nc / 10);
    o[5] = (char)('0' + nc % 10);
    o[6] = (char)('0' + ne / 10);
    o[7] = (char)('0' + ne % 10);
    o[8] = pt->alpn[0];
    o[9] = pt->alpn[1];
}

static void hash12(const char *s, size_t n, int empty, char out[HASH_HEX]) {
    if (empty) {
        memset(out, '0', HASH_HEX);
        return;
    }
    uint8_t d[CRYPTO_SHA256_LEN];
    crypto_sha256(s, n, NULL, 0, d);
    for (int i = 0; i < HASH_HEX / 2; i++) {
        out[2 * i] = hexd[d[i] >> 4];
        out[2 * i + 1] = hexd[d[i] & 15];
    }
}

/* Scratch for lists(): on the stack for common hellos, else one heap block. */
struct scratch {
    uint16_t vals[STACK_CIPHERS + STACK_EXTS];
    char text[STACK_TEXT];
    void *heap;
};

static int scratch_get(struct scratch *s, const struct parts *pt, uint16_t **vals, char **text,
                       size_t *text_cap) {
    size_t nv = (size_t)pt->ncs + pt->nsorted_ext;
    size_t nt = 5 * (nv + pt->nsig) + 2;
    s->heap = NULL;
    if (nv <= sizeof s->vals / sizeof s->vals[0] && nt <= sizeof s->text) {
        *vals = s->vals;
        *text = s->text;
        *text_cap = sizeof s->text;
        return 0;
    }
    s->heap = malloc(nv * sizeof(uint16_t) + nt);
    if (!s->heap)
        return -1;
    *vals = s->heap;
    *text = (char *)s->heap + nv * sizeof(uint16_t);
    *text_cap = nt;
    return 0;
}

/* Parses the hello; fills pt. Uses copy for a hello cut into records. */
static int parse(const uint8_t *rec, size_t len, uint8_t *copy, struct parts *pt) {
    const uint8_t *msg = NULL;
    size_t n = rec ? join_records(rec, len, copy, &msg) : 0;
    if (n == 0)
        return -1;
    return parse_msg(msg, n, pt);
}

int ja4_from_hello(const uint8_t *rec, size_t len, char out[JA4_LEN + 1]) {
    _Static_assert(JA4_LEN == 10 + 1 + HASH_HEX + 1 + HASH_HEX, "JA4 layout");
    uint8_t copy[JA4_MSG_MAX];
    struct parts pt;
    struct scratch s;
    uint16_t *vals;
    char *text;
    size_t cap, clen, elen;
    out[0] = '\0';
    if (parse(rec, len, copy, &pt) != 0 || scratch_get(&s, &pt, &vals, &text, &cap) != 0)
        return -1;
    lists(&pt, vals, text, &clen, &elen);
    write_a(&pt, out);
    out[10] = '_';
    hash12(text, clen, pt.ncs == 0, out + 11);
    out[23] = '_';
    hash12(text + clen, elen, pt.nsorted_ext == 0, out + 24);
    out[JA4_LEN] = '\0';
    free(s.heap);
    return 0;
}

int ja4_raw_from_hello(const uint8_t *rec, size_t len, char *out, size_t cap) {
    uint8_t copy[JA4_MSG_MAX];
    struct parts pt;
    struct scratch s;
    uint16_t *vals;
    char *text;
    size_t tcap, clen, elen;
    if (cap)
        out[0] = '\0';
    if (parse(rec, len, copy, &pt) != 0 || scratch_get(&s, &pt, &vals, &text, &tcap) != 0)
        return -1;
    lists(&pt, vals, text, &clen, &elen);
    size_t need = 10 + 1 + clen + 1 + elen;
    int r = -1;
    if (need < cap && need <= INT32_MAX) {
        write_a(&pt, out);
        out[10] = '_';
        memcpy(out + 11, text, clen);
        out[11 + clen] = '_';
        memcpy(out + 12 + clen, text + clen, elen);
        out[need] = '\0';
        r = (int)need;
    }
    free(s.heap);
    return r;
}
