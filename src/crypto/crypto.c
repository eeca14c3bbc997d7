/* crypto.c: AES-256-CTR, SHA-256, HMAC-SHA256 and randomness over OpenSSL. */
#include "crypto/crypto.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* EVP lengths are int: longer inputs are fed in pieces of at most this many bytes. */
#define CRYPTO_CHUNK_MAX (INT_MAX - 64)

/* Cipher contexts of parked streams, kept for the next stream that needs one (bounded: the
 * rest are freed, so a worker's idle connections hold none). */
#define CTX_SPARE_MAX 64
static _Thread_local EVP_CIPHER_CTX *ctx_spare[CTX_SPARE_MAX];
static _Thread_local int ctx_nspare;

/* The per-thread context behind crypto_ctr_oneshot, created on first use. Cipher selection
 * happens once here, so each one-shot call only re-keys it (no allocation, no fetch). */
static _Thread_local EVP_CIPHER_CTX *oneshot_ctx;

/* Per-thread contexts reused by crypto_sha256 and crypto_ctr_block: a handshake tries every
 * secret in turn, and allocating (and, in OpenSSL 3, fetching) per try cost more than the
 * hashing. Freed by crypto_thread_cleanup. */
static _Thread_local EVP_MD_CTX *md_ctx;
static _Thread_local EVP_CIPHER_CTX *ecb_ctx;
/* crypto_random_fast's stream and the keystream bytes it may still give before a re-key. */
static _Thread_local EVP_CIPHER_CTX *fast_ctx;
static _Thread_local size_t fast_left;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
static _Thread_local EVP_MD *sha256_md;
#endif

/* The thread's cached contexts are freed when it exits (also a thread that never calls
 * crypto_thread_cleanup itself, like a test tool's): a key whose destructor does it. */
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key;

static void tls_exit(void *p) {
    (void)p;
    crypto_thread_cleanup();
}

static void tls_key_init(void) {
    pthread_key_create(&tls_key, tls_exit);
}

/* Called when the thread first caches a context. */
static _Thread_local int tls_tracked;

static void tls_track(void) {
    if (tls_tracked)
        return;
    pthread_once(&tls_once, tls_key_init);
    pthread_setspecific(tls_key, (void *)1);
    tls_tracked = 1;
}

static const EVP_MD *sha256_get(void) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    if (!sha256_md) {
        sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
        tls_track();
    }
    return sha256_md ? sha256_md : EVP_sha256();
#else
    return EVP_sha256();
#endif
}

int crypto_init(void) {
    /* No openssl.cnf (its providers and settings are not the proxy's business), no error
     * strings (nothing prints OpenSSL's errors), no table of every cipher and digest name. */
    uint64_t opts = OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS |
                    OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS;
    return OPENSSL_init_crypto(opts, NULL) == 1 ? 0 : -1;
}

/* 1 once any thread has made a cipher context: OpenSSL's provider is loaded, and its DRBG
 * costs little more. Until then crypto_random asks the kernel, so a proxy that has not served
 * anyone has not paid for the DRBG's set-up (about 1.2 MB of libcrypto touched). Set once,
 * never cleared. */
static atomic_int drbg_on;

static void drbg_allow(void) {
    if (!atomic_load_explicit(&drbg_on, memory_order_relaxed))
        atomic_store_explicit(&drbg_on, 1, memory_order_relaxed);
}

/* AES-256-CTR fetched from the provider once for the process (OpenSSL 3: a legacy
 * EVP_aes_256_ctr() makes every EVP_EncryptInit_ex that names it fetch again), on the first
 * context, not at start. Kept for the life of the process. */
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
static pthread_once_t ctr_once = PTHREAD_ONCE_INIT;
static EVP_CIPHER *ctr_fetched;

static void ctr_fetch(void) {
    ctr_fetched = EVP_CIPHER_fetch(NULL, "AES-256-CTR", NULL);
}
#endif

static const EVP_CIPHER *ctr_cipher(void) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    pthread_once(&ctr_once, ctr_fetch);
    if (ctr_fetched)
        return ctr_fetched;
#endif
    return EVP_aes_256_ctr();
}

/* Allocates a context with AES-256-CTR selected but no key yet. Returns NULL on failure.
 * Later re-keying passes a NULL cipher, which keeps the selection and resets the counter. */
static EVP_CIPHER_CTX *ctr_ctx_new(void) {
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return NULL;
    if (EVP_EncryptInit_ex(ctx, ctr_cipher(), NULL, NULL, NULL) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    drbg_allow();
    return ctx;
}

/* XORs keystream into out; returns 0, or -1 (out is then zero-filled, never left holding
 * the input, so a failure cannot send plaintext on as if it were ciphertext). */
static int ctr_xor(EVP_CIPHER_CTX *ctx, const uint8_t *in, uint8_t *out, size_t len) {
    size_t done = 0;
    while (done < len) {
        size_t n = len - done;
        if (n > CRYPTO_CHUNK_MAX)
            n = CRYPTO_CHUNK_MAX;
        int outl = 0;
        if (EVP_EncryptUpdate(ctx, out + done, &outl, in + done, (int)n) != 1 ||
            (size_t)outl != n) {
            memset(out, 0, len);
            return -1;
        }
        done += n;
    }
    return 0;
}

struct crypto_ctr *crypto_ctr_new(void) {
    return calloc(1, sizeof(struct crypto_ctr));
}

void crypto_ctr_free(struct crypto_ctr *c) {
    if (!c)
        return;
    crypto_ctr_wipe(c);
    free(c);
}

/* A context with AES-256-CTR selected: a spare one, else a new one. NULL on failure. */
static EVP_CIPHER_CTX *ctx_take(void) {
    if (ctx_nspare)
        return ctx_spare[--ctx_nspare];
    return ctr_ctx_new();
}

int crypto_ctr_park(struct crypto_ctr *c) {
    EVP_CIPHER_CTX *ctx = c->ctx;
    if (!ctx)
        return 0;
    c->ctx = NULL;
    if (ctx_nspare < CTX_SPARE_MAX) {
        tls_track(); /* a thread that ends with spares frees them (tls_exit) */
        ctx_spare[ctx_nspare++] = ctx; /* its key schedule is overwritten by the next init */
        return 0;
    }
    EVP_CIPHER_CTX_free(ctx); /* also wipes the key schedule */
    return 1;
}

void crypto_ctr_wipe(struct crypto_ctr *c) {
    crypto_ctr_park(c);
    OPENSSL_cleanse(c, sizeof *c);
}

/* Gives a parked stream a context keyed at its position. Returns 0, or -1. */
static int ctr_attach(struct crypto_ctr *c) {
    uint8_t iv[CRYPTO_IV_LEN], skip[16];
    memcpy(iv, c->iv, sizeof iv);
    uint64_t blocks = c->pos / 16;
    for (int i = 15; i >= 0 && blocks; i--) { /* big-endian 128-bit add, as CTR counts */
        uint64_t v = (uint64_t)iv[i] + (blocks & 0xff);
        iv[i] = (uint8_t)v;
        blocks = (blocks >> 8) + (v >> 8);
    }
    EVP_CIPHER_CTX *ctx = ctx_take();
    if (!ctx)
        return -1;
    size_t part = (size_t)(c->pos % 16);
    int outl = 0;
    if (EVP_EncryptInit_ex(ctx, NULL, NULL, c->key, iv) != 1 ||
        (part && (EVP_EncryptUpdate(ctx, skip, &outl, skip, (int)part) != 1 ||
                  (size_t)outl != part))) {
        EVP_CIPHER_CTX_free(ctx);
        return -1;
    }
    c->ctx = ctx;
    return 0;
}

int crypto_ctr_init(struct crypto_ctr *c, const uint8_t key[CRYPTO_KEY_LEN],
                    const uint8_t iv[CRYPTO_IV_LEN]) {
    memcpy(c->key, key, CRYPTO_KEY_LEN);
    memcpy(c->iv, iv, CRYPTO_IV_LEN);
    c->pos = 0;
    c->keyed = 0;
    if (c->ctx ? EVP_EncryptInit_ex(c->ctx, NULL, NULL, key, iv) != 1 : ctr_attach(c) != 0)
        return -1;
    c->keyed = 1;
    return 0;
}

void crypto_ctr_apply(struct crypto_ctr *c, const uint8_t *in, uint8_t *out, size_t len) {
    if (!c->keyed || (!c->ctx && ctr_attach(c) != 0)) {
        c->keyed = 0;
        memset(out, 0, len);
        return;
    }
    if (ctr_xor(c->ctx, in, out, len) != 0)
        c->keyed = 0; /* position unknown now: refuse further use until re-keyed */
    c->pos += len;
}

void crypto_ctr_oneshot(const uint8_t key[CRYPTO_KEY_LEN], const uint8_t iv[CRYPTO_IV_LEN],
                        const uint8_t *in, uint8_t *out, size_t len) {
    if (!oneshot_ctx) {
        oneshot_ctx = ctr_ctx_new();
        tls_track();
    }
    if (!oneshot_ctx || EVP_EncryptInit_ex(oneshot_ctx, NULL, NULL, key, iv) != 1) {
        memset(out, 0, len);
        return;
    }
    ctr_xor(oneshot_ctx, in, out, len);
}

static void digest_failed(uint8_t out[CRYPTO_SHA256_LEN]);

void crypto_thread_cleanup(void) {
    tls_tracked = 0; /* a later use registers the exit hook again */
    EVP_CIPHER_CTX_free(oneshot_ctx);
    oneshot_ctx = NULL;
    EVP_CIPHER_CTX_free(ecb_ctx);
    ecb_ctx = NULL;
    EVP_CIPHER_CTX_free(fast_ctx);
    fast_ctx = NULL;
    fast_left = 0;
    while (ctx_nspare)
        EVP_CIPHER_CTX_free(ctx_spare[--ctx_nspare]);
    EVP_MD_CTX_free(md_ctx);
    md_ctx = NULL;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    EVP_MD_free(sha256_md);
    sha256_md = NULL;
#endif
}

void crypto_ctr_block(const uint8_t key[CRYPTO_KEY_LEN], const uint8_t iv[CRYPTO_IV_LEN],
                      uint32_t index, uint8_t out[16]) {
    uint8_t ctr[16];
    memcpy(ctr, iv, 16);
    for (int i = 15; i >= 0 && index; i--) { /* big-endian 128-bit add, as CTR counts */
        uint32_t v = ctr[i] + (index & 0xff);
        ctr[i] = (uint8_t)v;
        index = (index >> 8) + (v >> 8);
    }
    int outl = 0;
    if (!ecb_ctx && (tls_track(), ecb_ctx = EVP_CIPHER_CTX_new()) &&
        (EVP_EncryptInit_ex(ecb_ctx, EVP_aes_256_ecb(), NULL, NULL, NULL) != 1 ||
         EVP_CIPHER_CTX_set_padding(ecb_ctx, 0) != 1)) {
        EVP_CIPHER_CTX_free(ecb_ctx);
        ecb_ctx = NULL;
    }
    if (!ecb_ctx || EVP_EncryptInit_ex(ecb_ctx, NULL, NULL, key, NULL) != 1 ||
        EVP_EncryptUpdate(ecb_ctx, out, &outl, ctr, 16) != 1 || outl != 16) {
        uint8_t r[CRYPTO_SHA256_LEN];
        digest_failed(r); /* random: matches nothing */
        memcpy(out, r, 16);
    }
}

/* A digest that could not be computed must not come out predictable (all zeros would let a
 * forged HMAC or a guessed key through): replace it with random bytes, which match nothing.
 * If even the random source is gone there is no safe value to return, so stop. */
static void digest_failed(uint8_t out[CRYPTO_SHA256_LEN]) {
    if (crypto_random(out, CRYPTO_SHA256_LEN) != 0)
        abort();
}

/* Feeds len bytes to a digest in int-sized pieces; returns 1 on success like EVP does. */
static int digest_update(EVP_MD_CTX *md, const void *p, size_t len) {
    const uint8_t *b = p;
    while (len > 0) {
        size_t n = len > CRYPTO_CHUNK_MAX ? CRYPTO_CHUNK_MAX : len;
        if (EVP_DigestUpdate(md, b, n) != 1)
            return 0;
        b += n;
        len -= n;
    }
    return 1;
}

void crypto_sha256(const void *a, size_t alen, const void *b, size_t blen,
                   uint8_t out[CRYPTO_SHA256_LEN]) {
    if (!md_ctx) {
        md_ctx = EVP_MD_CTX_new();
        tls_track();
    }
    EVP_MD_CTX *md = md_ctx;
    unsigned int outl = 0;
    int ok = md && EVP_DigestInit_ex(md, sha256_get(), NULL) == 1 &&
             digest_update(md, a, alen) && digest_update(md, b, blen) &&
             EVP_DigestFinal_ex(md, out, &outl) == 1 && outl == CRYPTO_SHA256_LEN;
    if (!ok)
        digest_failed(out);
}

void crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        uint8_t out[CRYPTO_SHA256_LEN]) {
    static const uint8_t empty[1];
    unsigned int outl = 0;
    if (keylen > CRYPTO_CHUNK_MAX) {
        digest_failed(out);
        return;
    }
    /* Some OpenSSL 3 releases treat a NULL key as "no key": pass a real pointer instead. */
    if (keylen == 0)
        key = empty;
    if (len == 0)
        data = empty;
    if (!HMAC(EVP_sha256(), key, (int)keylen, data, len, out, &outl) || outl != CRYPTO_SHA256_LEN)
        digest_failed(out);
}

/* The kernel's random bytes (getrandom(2)); -1 if it has none to give (no such call). */
static int os_random(uint8_t *b, size_t len) {
    while (len > 0) {
        ssize_t n = getrandom(b, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

int crypto_random(void *buf, size_t len) {
    uint8_t *b = buf;
    if (!atomic_load_explicit(&drbg_on, memory_order_relaxed) && os_random(b, len) == 0)
        return 0;
    while (len > 0) {
        size_t n = len > CRYPTO_CHUNK_MAX ? CRYPTO_CHUNK_MAX : len;
        if (RAND_bytes(b, (int)n) != 1)
            return -1;
        b += n;
        len -= n;
    }
    return 0;
}

/* crypto_random_fast: the keystream of a per-thread AES-256-CTR stream keyed from RAND_bytes
 * and re-keyed every FAST_REKEY bytes (the construction of a CTR-DRBG, without OpenSSL's
 * per-call locking, reseed checks and provider dispatch). */
#define FAST_REKEY (1u << 20)

int crypto_random_fast(void *buf, size_t len) {
    uint8_t *b = buf;
    while (len > 0) {
        if (!fast_left) {
            uint8_t k[CRYPTO_KEY_LEN + CRYPTO_IV_LEN];
            if (!fast_ctx) {
                if (!(fast_ctx = ctr_ctx_new()))
                    return crypto_random(b, len);
                tls_track(); /* freed when the thread exits, even without cleanup */
            }
            int ok = RAND_bytes(k, sizeof k) == 1 &&
                     EVP_EncryptInit_ex(fast_ctx, NULL, NULL, k, k + CRYPTO_KEY_LEN) == 1;
            OPENSSL_cleanse(k, sizeof k);
            if (!ok)
                return crypto_random(b, len);
            fast_left = FAST_REKEY;
        }
        size_t n = len < fast_left ? len : fast_left;
        memset(b, 0, n); /* keystream = zeros XOR keystream, in place */
        if (ctr_xor(fast_ctx, b, b, n) != 0) {
            fast_left = 0;
            return crypto_random(b, len);
        }
        fast_left -= n;
        b += n;
        len -= n;
    }
    return 0;
}

int crypto_memeq(const void *a, const void *b, size_t n) {
    return CRYPTO_memcmp(a, b, n) == 0;
}

/* SHA-256 block size: HMAC pads (or first hashes) the key to this many bytes. */
#define CRYPTO_SHA256_BLOCK 64

/* HMAC computed from its definition (RFC 2104) over EVP digests, so it needs neither the
 * HMAC_CTX API (deprecated in OpenSSL 3) nor the EVP_MAC one (absent from 1.1). */
void crypto_hmac_sha256_spans(const void *key, size_t keylen, const struct crypto_span *spans,
                              size_t n, uint8_t out[CRYPTO_SHA256_LEN]) {
    uint8_t k[CRYPTO_SHA256_BLOCK] = {0}, pad[CRYPTO_SHA256_BLOCK], inner[CRYPTO_SHA256_LEN];
    unsigned int outl = 0;
    if (keylen > CRYPTO_SHA256_BLOCK)
        crypto_sha256(key, keylen, NULL, 0, k);
    else if (keylen > 0)
        memcpy(k, key, keylen);
    if (!md_ctx) {
        md_ctx = EVP_MD_CTX_new();
        tls_track();
    }
    EVP_MD_CTX *md = md_ctx;
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = k[i] ^ 0x36;
    int ok = md && EVP_DigestInit_ex(md, sha256_get(), NULL) == 1 &&
             digest_update(md, pad, sizeof pad);
    for (size_t i = 0; ok && i < n; i++)
        ok = digest_update(md, spans[i].p, spans[i].len);
    ok = ok && EVP_DigestFinal_ex(md, inner, &outl) == 1 && outl == CRYPTO_SHA256_LEN;
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = k[i] ^ 0x5c;
    ok = ok && EVP_DigestInit_ex(md, sha256_get(), NULL) == 1 &&
         digest_update(md, pad, sizeof pad) && digest_update(md, inner, sizeof inner) &&
         EVP_DigestFinal_ex(md, out, &outl) == 1 && outl == CRYPTO_SHA256_LEN;
    OPENSSL_cleanse(k, sizeof k);
    OPENSSL_cleanse(pad, sizeof pad);
    OPENSSL_cleanse(inner, sizeof inner);
    if (!ok)
        digest_failed(out);
}

/* --- middle-proxy link ---------------------------------------------------------------- */

static void digest_simple(const EVP_MD *type, const void *data, size_t len, uint8_t *out,
                          unsigned want) {
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned int outl = 0;
    int ok = md && EVP_DigestInit_ex(md, type, NULL) == 1 && digest_update(md, data, len) &&
             EVP_DigestFinal_ex(md, out, &outl) == 1 && outl == want;
    EVP_MD_CTX_free(md);
    if (!ok && crypto_random(out, want))
        abort();
}

void crypto_md5(const void *data, size_t len, uint8_t out[CRYPTO_MD5_LEN]) {
    digest_simple(EVP_md5(), data, len, out, CRYPTO_MD5_LEN);
}

void crypto_sha1(const void *data, size_t len, uint8_t out[CRYPTO_SHA1_LEN]) {
    digest_simple(EVP_sha1(), data, len, out, CRYPTO_SHA1_LEN);
}

struct crypto_cbc {
    EVP_CIPHER_CTX *ctx;
};

struct crypto_cbc *crypto_cbc_new(const uint8_t key[CRYPTO_KEY_LEN],
                                  const uint8_t iv[CRYPTO_IV_LEN], int encrypt) {
    struct crypto_cbc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->ctx = EVP_CIPHER_CTX_new();
    if (!c->ctx ||
        EVP_CipherInit_ex(c->ctx, EVP_aes_256_cbc(), NULL, key, iv, encrypt ? 1 : 0) != 1 ||
        EVP_CIPHER_CTX_set_padding(c->ctx, 0) != 1) {
        crypto_cbc_free(c);
        return NULL;
    }
    return c;
}

void crypto_cbc_free(struct crypto_cbc *c) {
    if (!c)
        return;
    EVP_CIPHER_CTX_free(c->ctx);
    free(c);
}

int crypto_cbc_apply(struct crypto_cbc *c, const uint8_t *in, uint8_t *out, size_t len) {
    int ok = len % CRYPTO_CBC_BLOCK == 0;
    size_t done = 0;
    while (ok && done < len) {
        size_t n = len - done > CRYPTO_CHUNK_MAX / 2 ? CRYPTO_CHUNK_MAX / 2 : len - done;
        n -= n % CRYPTO_CBC_BLOCK;
        int outl = 0;
        ok = EVP_CipherUpdate(c->ctx, out + done, &outl, in + done, (int)n) == 1 &&
             (size_t)outl == n;
        done += n;
    }
    if (!ok) {
        memset(out, 0, len);
        return -1;
    }
    return 0;
}
