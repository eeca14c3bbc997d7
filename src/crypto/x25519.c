/* x25519.c: X25519 public keys for throw-away FakeTLS key shares, computed without OpenSSL's keygen. */
/*
 * A ServerHello must carry a real X25519 public key (a point of the curve's prime-order
 * subgroup, as a TLS server's would be), but the proxy never uses the private key: nothing is
 * ever derived from it. OpenSSL's key generation costs ~25 µs (its portable fixed-base code
 * behind EVP); this file computes the same value, X25519(k, 9) for a clamped k (RFC 7748), in a
 * few µs with a fixed-base comb on the twisted Edwards form of the curve and 64-bit limbs.
 *
 * It is variable time on purpose: the scalar is random, used once and forgotten, so nothing
 * secret can leak through timing. Never use it for a key that is kept.
 *
 * Field elements: GF(2^255 - 19) in five 51-bit limbs (unsigned __int128 products); on targets
 * without a 128-bit type the functions fall back to OpenSSL (each scalar imported as a raw
 * private key).
 *
 * Comb: k = sum e[i] 2^(w i) with signed digits |e[i]| <= 2^(w-1) (w = COMB_BITS, 6); the
 * table holds j 2^(w i) B for every window i and j = 1..2^(w-1) in affine "precomputed" form
 * (y + x, y - x, 2dxy): one mixed addition per window (43), and one inversion per batch of
 * keys. The table (1,376 points, 165 KiB) is built once per process on first use (~1 ms),
 * under pthread_once, and is read-only afterwards.
 */
#include "crypto/crypto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#if defined(__SIZEOF_INT128__) && !defined(MTPROXY_X25519_OPENSSL)

#include <pthread.h>

typedef unsigned __int128 u128;

/* An element of GF(p), p = 2^255 - 19: sum v[i] 2^(51 i). Products and squares leave their
 * result carried (limbs < 2^51 + 2^7); sums and differences are not carried (limbs < 2^54),
 * which fe_mul and fe_sq accept: every partial product stays below 2^128. A difference's
 * subtrahend must be carried (a product's result or a constant). */
typedef struct {
    uint64_t v[5];
} fe;

#define MASK51 ((UINT64_C(1) << 51) - 1)

static void fe_carry(fe *h) {
    uint64_t c;
    for (int i = 0; i < 4; i++) {
        c = h->v[i] >> 51;
        h->v[i] &= MASK51;
        h->v[i + 1] += c;
    }
    c = h->v[4] >> 51;
    h->v[4] &= MASK51;
    h->v[0] += 19 * c;
}

static void fe_add(fe *h, const fe *f, const fe *g) {
    for (int i = 0; i < 5; i++)
        h->v[i] = f->v[i] + g->v[i];
}

/* f - g + 4p: every limb of 4p exceeds every carried limb of g. */
static void fe_sub(fe *h, const fe *f, const fe *g) {
    h->v[0] = f->v[0] + UINT64_C(0x1FFFFFFFFFFFB4) - g->v[0];
    for (int i = 1; i < 5; i++)
        h->v[i] = f->v[i] + UINT64_C(0x1FFFFFFFFFFFFC) - g->v[i];
}

/* h = r0 + r1 2^51 + ... + r4 2^204 (mod p), carried: the end of a product or a square. */
static inline void fe_reduce(fe *h, u128 r0, u128 r1, u128 r2, u128 r3, u128 r4) {
    r1 += (uint64_t)(r0 >> 51);
    r2 += (uint64_t)(r1 >> 51);
    r3 += (uint64_t)(r2 >> 51);
    r4 += (uint64_t)(r3 >> 51);
    uint64_t c = (uint64_t)(r4 >> 51);
    h->v[0] = ((uint64_t)r0 & MASK51) + 19 * c;
    h->v[1] = ((uint64_t)r1 & MASK51) + (h->v[0] >> 51);
    h->v[0] &= MASK51;
    h->v[2] = (uint64_t)r2 & MASK51;
    h->v[3] = (uint64_t)r3 & MASK51;
    h->v[4] = (uint64_t)r4 & MASK51;
}

static void fe_mul(fe *h, const fe *f, const fe *g) {
    const uint64_t *a = f->v, *b = g->v;
    uint64_t b1 = 19 * b[1], b2 = 19 * b[2], b3 = 19 * b[3], b4 = 19 * b[4];
    u128 r0 = (u128)a[0] * b[0] + (u128)a[1] * b4 + (u128)a[2] * b3 + (u128)a[3] * b2 +
              (u128)a[4] * b1;
    u128 r1 = (u128)a[0] * b[1] + (u128)a[1] * b[0] + (u128)a[2] * b4 + (u128)a[3] * b3 +
              (u128)a[4] * b2;
    u128 r2 = (u128)a[0] * b[2] + (u128)a[1] * b[1] + (u128)a[2] * b[0] + (u128)a[3] * b4 +
              (u128)a[4] * b3;
    u128 r3 = (u128)a[0] * b[3] + (u128)a[1] * b[2] + (u128)a[2] * b[1] + (u128)a[3] * b[0] +
              (u128)a[4] * b4;
    u128 r4 = (u128)a[0] * b[4] + (u128)a[1] * b[3] + (u128)a[2] * b[2] + (u128)a[3] * b[1] +
              (u128)a[4] * b[0];
    fe_reduce(h, r0, r1, r2, r3, r4);
}

static void fe_sq(fe *h, const fe *f) {
    const uint64_t *a = f->v;
    uint64_t d0 = 2 * a[0], d1 = 2 * a[1], d2 = 2 * a[2];
    uint64_t a3_19 = 19 * a[3], a4_19 = 19 * a[4];
    u128 r0 = (u128)a[0] * a[0] + (u128)d1 * a4_19 + (u128)d2 * a3_19;
    u128 r1 = (u128)d0 * a[1] + (u128)d2 * a4_19 + (u128)a[3] * a3_19;
    u128 r2 = (u128)d0 * a[2] + (u128)a[1] * a[1] + (u128)(2 * a[3]) * a4_19;
    u128 r3 = (u128)d0 * a[3] + (u128)d1 * a[2] + (u128)a[4] * a4_19;
    u128 r4 = (u128)d0 * a[4] + (u128)d1 * a[3] + (u128)a[2] * a[2];
    fe_reduce(h, r0, r1, r2, r3, r4);
}

static void fe_sqn(fe *h, const fe *f, int n) {
    fe_sq(h, f);
    while (--n > 0)
        fe_sq(h, h);
}

/* z^(p - 2) = 1/z (0 for 0): 254 squarings and 11 multiplications. */
static void fe_invert(fe *out, const fe *z) {
    fe z2, z9, z11, z5_0, z10_0, z20_0, z50_0, z100_0, t;
    fe_sq(&z2, z);
    fe_sqn(&t, &z2, 2);
    fe_mul(&z9, &t, z);
    fe_mul(&z11, &z9, &z2);
    fe_sq(&t, &z11);
    fe_mul(&z5_0, &t, &z9); /* z^(2^5 - 1) */
    fe_sqn(&t, &z5_0, 5);
    fe_mul(&z10_0, &t, &z5_0);
    fe_sqn(&t, &z10_0, 10);
    fe_mul(&z20_0, &t, &z10_0);
    fe_sqn(&t, &z20_0, 20);
    fe_mul(&t, &t, &z20_0);
    fe_sqn(&t, &t, 10);
    fe_mul(&z50_0, &t, &z10_0);
    fe_sqn(&t, &z50_0, 50);
    fe_mul(&z100_0, &t, &z50_0);
    fe_sqn(&t, &z100_0, 100);
    fe_mul(&t, &t, &z100_0);
    fe_sqn(&t, &t, 50);
    fe_mul(&t, &t, &z50_0); /* z^(2^250 - 1) */
    fe_sqn(&t, &t, 5);
    fe_mul(out, &t, &z11); /* z^(2^255 - 21) */
}

/* The canonical 32-byte little-endian form (fully reduced below p). */
static void fe_tobytes(uint8_t out[32], const fe *f) {
    fe h = *f;
    fe_carry(&h);
    fe_carry(&h);
    /* h < 2^255 + small: q = 1 exactly when h >= p. */
    uint64_t q = (h.v[0] + 19) >> 51;
    for (int i = 1; i < 5; i++)
        q = (h.v[i] + q) >> 51;
    h.v[0] += 19 * q;
    for (int i = 0; i < 4; i++) {
        h.v[i + 1] += h.v[i] >> 51;
        h.v[i] &= MASK51;
    }
    h.v[4] &= MASK51;
    uint64_t w[4] = {h.v[0] | h.v[1] << 51, h.v[1] >> 13 | h.v[2] << 38,
                     h.v[2] >> 26 | h.v[3] << 25, h.v[3] >> 39 | h.v[4] << 12};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            out[8 * i + j] = (uint8_t)(w[i] >> (8 * j));
}

/* Points of -x^2 + y^2 = 1 + d x^2 y^2 in extended coordinates: x = X/Z, y = Y/Z, T = XY/Z. */
struct ge {
    fe X, Y, Z, T;
};

/* An affine point as the comb adds it: y + x, y - x, 2 d x y. */
struct ge_pre {
    fe ypx, ymx, xy2d;
};

static const fe fe_one = {{1, 0, 0, 0, 0}};
/* 2d, d = -121665/121666 */
static const fe fe_d2 = {{0x69b9426b2f159ULL, 0x35050762add7aULL, 0x3cf44c0038052ULL,
                          0x6738cc7407977ULL, 0x2406d9dc56dffULL}};
/* The base point B (its Montgomery u is 9). */
static const fe base_x = {{0x62d608f25d51aULL, 0x412a4b4f6592aULL, 0x75b7171a4b31dULL,
                           0x1ff60527118feULL, 0x216936d3cd6e5ULL}};
static const fe base_y = {{0x6666666666658ULL, 0x4ccccccccccccULL, 0x1999999999999ULL,
                           0x3333333333333ULL, 0x6666666666666ULL}};

/* r = p + q (complete for a = -1 and a non-square d, so it doubles too). */
static void ge_add(struct ge *r, const struct ge *p, const struct ge *q) {
    fe a, b, c, d, e, f, g, h, t;
    fe_sub(&a, &p->Y, &p->X);
    fe_sub(&t, &q->Y, &q->X);
    fe_mul(&a, &a, &t);
    fe_add(&b, &p->Y, &p->X);
    fe_add(&t, &q->Y, &q->X);
    fe_mul(&b, &b, &t);
    fe_mul(&c, &p->T, &q->T);
    fe_mul(&c, &c, &fe_d2);
    fe_mul(&d, &p->Z, &q->Z);
    fe_add(&d, &d, &d);
    fe_sub(&e, &b, &a);
    fe_sub(&f, &d, &c);
    fe_add(&g, &d, &c);
    fe_add(&h, &b, &a);
    fe_mul(&r->X, &e, &f);
    fe_mul(&r->Y, &g, &h);
    fe_mul(&r->T, &e, &h);
    fe_mul(&r->Z, &f, &g);
}

/* r = p + q (neg = 0) or p - q (neg = 1) for an affine q: 7 multiplications. */
static void ge_madd(struct ge *r, const struct ge *p, const struct ge_pre *q, int neg) {
    fe a, b, c, d, e, f, g, h;
    fe_add(&a, &p->Y, &p->X);
    fe_mul(&a, &a, neg ? &q->ymx : &q->ypx);
    fe_sub(&b, &p->Y, &p->X);
    fe_mul(&b, &b, neg ? &q->ypx : &q->ymx);
    fe_mul(&c, &p->T, &q->xy2d);
    fe_add(&d, &p->Z, &p->Z);
    fe_sub(&e, &a, &b);
    fe_add(&h, &a, &b);
    if (neg) {
        fe_sub(&g, &d, &c);
        fe_add(&f, &d, &c);
    } else {
        fe_add(&g, &d, &c);
        fe_sub(&f, &d, &c);
    }
    fe_mul(&r->X, &e, &f);
    fe_mul(&r->Y, &g, &h);
    fe_mul(&r->Z, &f, &g);
    fe_mul(&r->T, &e, &h);
}

/* Window width of the comb: 6 bits gives 43 windows of 32 points each (1,376 points, 165 KiB)
 * and 43 additions per key; 4 bits would take 64 additions from 60 KiB. */
#ifndef MTPROXY_X25519_COMB_BITS
#define MTPROXY_X25519_COMB_BITS 6
#endif
#define COMB_BITS MTPROXY_X25519_COMB_BITS
/* Windows over 256 bits, so the top one (bit 255 is clear) never needs a digit above 2^(w-1). */
#define COMB_WINDOWS ((256 + COMB_BITS - 1) / COMB_BITS)
#define COMB_DIGITS (1 << (COMB_BITS - 1))

static struct ge_pre (*comb)[COMB_DIGITS];
static pthread_once_t comb_once = PTHREAD_ONCE_INIT;

/* out[i] = 1 / in[i] for n elements (none zero), with one inversion: Montgomery's trick.
 * acc is scratch for n elements; out may be in. */
static void fe_batch_invert(fe *out, const fe *in, fe *acc, size_t n) {
    acc[0] = in[0];
    for (size_t b = 1; b < n; b++)
        fe_mul(&acc[b], &acc[b - 1], &in[b]);
    fe inv, t;
    fe_invert(&inv, &acc[n - 1]); /* 1 / (in[0] ... in[n-1]) */
    for (size_t b = n - 1; b > 0; b--) {
        fe_mul(&t, &inv, &acc[b - 1]); /* 1 / in[b] */
        fe_mul(&inv, &inv, &in[b]);    /* 1 / (in[0] ... in[b-1]) */
        out[b] = t;
    }
    out[0] = inv;
}

static void comb_build(void) {
    struct ge_pre (*tab)[COMB_DIGITS] = malloc(sizeof(struct ge_pre[COMB_WINDOWS][COMB_DIGITS]));
    if (!tab)
        return;
    struct ge p = {.X = base_x, .Y = base_y, .Z = fe_one}, row[COMB_DIGITS];
    fe_mul(&p.T, &base_x, &base_y);
    for (int i = 0; i < COMB_WINDOWS; i++) { /* p = 2^(COMB_BITS i) B */
        fe z[COMB_DIGITS], zi[COMB_DIGITS], acc[COMB_DIGITS];
        row[0] = p;
        for (int j = 1; j < COMB_DIGITS; j++)
            ge_add(&row[j], &row[j - 1], &p);
        for (int j = 0; j < COMB_DIGITS; j++)
            z[j] = row[j].Z;
        fe_batch_invert(zi, z, acc, COMB_DIGITS);
        for (int j = 0; j < COMB_DIGITS; j++) { /* (j + 1) p, affine */
            fe x, y;
            fe_mul(&x, &row[j].X, &zi[j]);
            fe_mul(&y, &row[j].Y, &zi[j]);
            fe_add(&tab[i][j].ypx, &y, &x);
            fe_sub(&tab[i][j].ymx, &y, &x);
            fe_mul(&tab[i][j].xy2d, &x, &y);
            fe_mul(&tab[i][j].xy2d, &tab[i][j].xy2d, &fe_d2);
        }
        for (int k = 0; k < COMB_BITS; k++)
            ge_add(&p, &p, &p);
    }
    comb = tab;
}

/* r = k B for the clamped k: one mixed addition per non-zero window. */
static void comb_mul(struct ge *r, const uint8_t scalar[32]) {
    uint8_t k[33];
    memcpy(k, scalar, 32);
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
    k[32] = 0;
    int e[COMB_WINDOWS];
    for (int i = 0; i < COMB_WINDOWS; i++) { /* bits [COMB_BITS i, COMB_BITS (i + 1)) */
        int bit = COMB_BITS * i;
        unsigned w = (unsigned)k[bit / 8] | (unsigned)k[bit / 8 + 1] << 8;
        e[i] = (int)((w >> (bit % 8)) & ((1u << COMB_BITS) - 1));
    }
    OPENSSL_cleanse(k, sizeof k);
    int carry = 0;
    for (int i = 0; i < COMB_WINDOWS - 1; i++) {
        /* digits into [-2^(b-1), 2^(b-1)); the top one (k < 2^255) stays below 2^(b-1) */
        e[i] += carry;
        carry = (e[i] + COMB_DIGITS) >> COMB_BITS;
        e[i] -= carry << COMB_BITS;
    }
    e[COMB_WINDOWS - 1] += carry;

    *r = (struct ge){.Y = fe_one, .Z = fe_one}; /* the neutral point (0, 1) */
    for (int i = 0; i < COMB_WINDOWS; i++) {
        if (e[i] > 0)
            ge_madd(r, r, &comb[i][e[i] - 1], 0);
        else if (e[i] < 0)
            ge_madd(r, r, &comb[i][-e[i] - 1], 1);
    }
    OPENSSL_cleanse(e, sizeof e);
}

int crypto_x25519_public_batch_vartime(uint8_t (*out)[32], const uint8_t (*scalars)[32],
                                       size_t n) {
    if (n == 0 || n > CRYPTO_X25519_BATCH_MAX)
        return -1;
    pthread_once(&comb_once, comb_build);
    if (!comb)
        return -1;
    /* Montgomery u = (1 + y) / (1 - y) = (Z + Y) / (Z - Y); the n divisions share one
     * inversion. */
    fe num[CRYPTO_X25519_BATCH_MAX], den[CRYPTO_X25519_BATCH_MAX] = {0},
        acc[CRYPTO_X25519_BATCH_MAX];
    for (size_t b = 0; b < n; b++) {
        struct ge r;
        comb_mul(&r, scalars[b]);
        fe_add(&num[b], &r.Z, &r.Y);
        fe_sub(&den[b], &r.Z, &r.Y);
    }
    fe_batch_invert(den, den, acc, n);
    for (size_t b = 0; b < n; b++) {
        fe u;
        fe_mul(&u, &num[b], &den[b]);
        fe_tobytes(out[b], &u);
    }
    return 0;
}

#else /* no 128-bit products: OpenSSL computes it */

int crypto_x25519_public_batch_vartime(uint8_t (*out)[32], const uint8_t (*scalars)[32],
                                       size_t n) {
    if (n == 0 || n > CRYPTO_X25519_BATCH_MAX)
        return -1;
    for (size_t b = 0; b < n; b++) {
        EVP_PKEY *pk = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, scalars[b], 32);
        size_t len = 32;
        int ok = pk && EVP_PKEY_get_raw_public_key(pk, out[b], &len) == 1 && len == 32;
        EVP_PKEY_free(pk);
        if (!ok)
            return -1;
    }
    return 0;
}

#endif

int crypto_x25519_public_vartime(uint8_t out[32], const uint8_t scalar[32]) {
    return crypto_x25519_public_batch_vartime((uint8_t(*)[32])out,
                                              (const uint8_t(*)[32])scalar, 1);
}

/* Each thread computes its key shares CRYPTO_X25519_BATCH_MAX at a time and hands them out
 * one per call; each is used once. */
static _Thread_local uint8_t ready[CRYPTO_X25519_BATCH_MAX][32];
static _Thread_local size_t nready;

int crypto_x25519_public(uint8_t out[32]) {
    if (nready == 0) {
        uint8_t k[CRYPTO_X25519_BATCH_MAX][32];
        int rc = crypto_random_fast(k, sizeof k) == 0 &&
                         crypto_x25519_public_batch_vartime(ready, (const uint8_t(*)[32])k,
                                                            CRYPTO_X25519_BATCH_MAX) == 0
                     ? 0
                     : -1;
        OPENSSL_cleanse(k, sizeof k);
        if (rc != 0)
            return -1;
        nready = CRYPTO_X25519_BATCH_MAX;
    }
    nready--;
    memcpy(out, ready[nready], 32);
    memset(ready[nready], 0, 32);
    return 0;
}
