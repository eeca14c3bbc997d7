/* crypto.h: the only door to OpenSSL libcrypto (AES-CTR, SHA-256, HMAC, X25519, random). */
#ifndef MTPROXY_CRYPTO_CRYPTO_H
#define MTPROXY_CRYPTO_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define CRYPTO_KEY_LEN 32
#define CRYPTO_IV_LEN 16
#define CRYPTO_SHA256_LEN 32

/* One AES-256-CTR stream. Its fields belong to crypto.c (visible so that a connection can hold
 * its streams inline: an idle stream is these few bytes). A keyed stream holds an OpenSSL
 * context (~0.9 KB) only while it is in use: crypto_ctr_park hands the context back and keeps
 * key, IV and position, and the next apply takes a context again (from a small per-thread
 * spare list, re-keyed at the position). A zero-filled struct is a valid, un-keyed stream. */
struct crypto_ctr {
    void *ctx;                    /* the OpenSSL context, or NULL while parked / un-keyed */
    uint64_t pos;                 /* keystream bytes used since crypto_ctr_init */
    uint8_t key[CRYPTO_KEY_LEN];
    uint8_t iv[CRYPTO_IV_LEN];
    int keyed;                    /* 0 until crypto_ctr_init succeeds, and again after a failure */
};

/* Initialises OpenSSL with only what the proxy uses: no config file, no error strings, no
 * name tables of every algorithm. Call once at start, before any other crypto_ call (later
 * calls are harmless). Returns 0, or -1 if OpenSSL cannot be initialised. */
int crypto_init(void);

/* Allocates an un-keyed stream (no context yet). Returns NULL on allocation failure. */
struct crypto_ctr *crypto_ctr_new(void);

/* Wipes and frees a stream (NULL is fine). */
void crypto_ctr_free(struct crypto_ctr *c);

/* (Re)keys the stream: key 32 bytes, iv 16 bytes = initial big-endian 128-bit counter.
 * Keystream position returns to 0. Returns 0, or -1 if OpenSSL failed. */
int crypto_ctr_init(struct crypto_ctr *c, const uint8_t key[CRYPTO_KEY_LEN],
                    const uint8_t iv[CRYPTO_IV_LEN]);

/* Gives the stream's OpenSSL context back (to the calling thread's spare list, or freed when
 * that is full); key, IV and position stay, and the next crypto_ctr_apply goes on where this
 * one stopped. Call from the thread that uses the stream. Returns 1 if a context was freed,
 * else 0 (kept as a spare, or none held). */
int crypto_ctr_park(struct crypto_ctr *c);

/* Parks the stream and wipes its key: back to a zero-filled, un-keyed stream (for a stream
 * held inline whose owner is done with it). */
void crypto_ctr_wipe(struct crypto_ctr *c);

/* XORs len bytes of keystream into buf in place (encrypt == decrypt) and advances the
 * position by len. in may equal out; otherwise the ranges must not overlap. Fails closed: on
 * a stream that is not keyed (or if OpenSSL fails) out is zero-filled, never left as plaintext. */
void crypto_ctr_apply(struct crypto_ctr *c, const uint8_t *in, uint8_t *out, size_t len);

/* One-shot: out = in XOR keystream(key, iv)[0..len). No allocation after the first call on
 * a thread. For trying a header against many secrets. Fails closed like crypto_ctr_apply. */
void crypto_ctr_oneshot(const uint8_t key[CRYPTO_KEY_LEN], const uint8_t iv[CRYPTO_IV_LEN],
                        const uint8_t *in, uint8_t *out, size_t len);

/* One 16-byte block of the AES-256-CTR keystream: block `index` (bytes 16*index..) of the
 * stream keyed with key and iv (the counter is iv + index, big-endian, as CTR counts). Lets a
 * check that needs a few bytes deep in a stream skip the rest. Uses a per-thread context. */
void crypto_ctr_block(const uint8_t key[CRYPTO_KEY_LEN], const uint8_t iv[CRYPTO_IV_LEN],
                      uint32_t index, uint8_t out[16]);

/* Frees the calling thread's cached one-shot context (see crypto_ctr_oneshot). Call it before
 * a thread that used crypto_ctr_oneshot exits, or the context leaks. Safe to call at any time,
 * and more than once; the next crypto_ctr_oneshot on the thread allocates a new context. */
void crypto_thread_cleanup(void);

/* SHA-256 of a || b (either may be empty). If OpenSSL fails, out is filled with random bytes
 * (so it matches nothing); if the random source fails too, the process aborts. */
void crypto_sha256(const void *a, size_t alen, const void *b, size_t blen,
                   uint8_t out[CRYPTO_SHA256_LEN]);

/* HMAC-SHA256(key, data). Fails like crypto_sha256. */
void crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        uint8_t out[CRYPTO_SHA256_LEN]);

/* Fills buf with len cryptographically strong random bytes: the kernel's (getrandom) until
 * the process has made its first cipher context, OpenSSL's DRBG from then on (so a proxy that
 * has served nobody has not set up the DRBG). Returns 0, or -1 on failure. */
int crypto_random(void *buf, size_t len);

/* Like crypto_random, for bulk bytes that must be unpredictable but are no key (a FakeTLS
 * answer's fake ApplicationData, length draws): the keystream of a per-thread AES-256-CTR
 * stream keyed from crypto_random and re-keyed every MiB, about 10x cheaper per call than
 * RAND_bytes. Falls back to crypto_random if the cipher fails. Returns 0, or -1. The thread's
 * stream is freed by crypto_thread_cleanup. */
int crypto_random_fast(void *buf, size_t len);

/* Constant-time comparison: 1 if the n bytes are equal, else 0. */
int crypto_memeq(const void *a, const void *b, size_t n);

/* One piece of a message given in several pieces (see crypto_hmac_sha256_spans). */
struct crypto_span {
    const void *p;
    size_t len;
};

/* HMAC-SHA256(key, spans[0] || spans[1] || ... || spans[n-1]) without joining the pieces.
 * A span with len 0 may have p NULL. Fails like crypto_sha256. */
void crypto_hmac_sha256_spans(const void *key, size_t keylen, const struct crypto_span *spans,
                              size_t n, uint8_t out[CRYPTO_SHA256_LEN]);

/* Writes the 32-byte public key of a freshly generated X25519 key pair (the private key is
 * discarded): a real curve point for a ServerHello key_share. Returns 0, or -1 on failure.
 * (src/crypto/x25519.c: a few µs on 64-bit targets; OpenSSL's keygen elsewhere.) */
int crypto_x25519_public(uint8_t out[32]);

/* X25519(scalar, 9) (RFC 7748): the public key of a 32-byte private key, clamped here.
 * Variable time: only for keys that are thrown away. Returns 0, or -1 on failure. */
int crypto_x25519_public_vartime(uint8_t out[32], const uint8_t scalar[32]);

/* The same for n (1..CRYPTO_X25519_BATCH_MAX) keys at once, sharing one field inversion. */
#define CRYPTO_X25519_BATCH_MAX 8
int crypto_x25519_public_batch_vartime(uint8_t (*out)[32], const uint8_t (*scalars)[32],
                                       size_t n);

/* --- middle-proxy link: MD5, SHA-1 (key derivation) and AES-256-CBC (PROTOCOL.md 6.4) --- */

#define CRYPTO_MD5_LEN 16
#define CRYPTO_SHA1_LEN 20
#define CRYPTO_CBC_BLOCK 16

/* MD5 / SHA-1 of data. On an OpenSSL failure out is filled with random bytes (so the derived
 * keys match nothing). */
void crypto_md5(const void *data, size_t len, uint8_t out[CRYPTO_MD5_LEN]);
void crypto_sha1(const void *data, size_t len, uint8_t out[CRYPTO_SHA1_LEN]);

/* One AES-256-CBC stream without padding: consecutive calls chain (the IV of each call is the
 * last ciphertext block of the previous one), as on an ME link. Opaque like crypto_ctr. */
struct crypto_cbc;

/* Allocates a stream keyed with key/iv, encrypting (encrypt = 1) or decrypting. Returns NULL
 * on failure. */
struct crypto_cbc *crypto_cbc_new(const uint8_t key[CRYPTO_KEY_LEN],
                                  const uint8_t iv[CRYPTO_IV_LEN], int encrypt);

/* Frees a stream (NULL is fine). */
void crypto_cbc_free(struct crypto_cbc *c);

/* Encrypts or decrypts len bytes (a multiple of CRYPTO_CBC_BLOCK) from in to out (in may
 * equal out). Returns 0, or -1 (out zero-filled) on a bad length or an OpenSSL failure. */
int crypto_cbc_apply(struct crypto_cbc *c, const uint8_t *in, uint8_t *out, size_t len);

#endif
