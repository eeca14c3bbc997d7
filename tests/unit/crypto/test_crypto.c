/* test_crypto.c: known-answer and behaviour tests for the crypto module (AES-CTR, SHA, HMAC). */
#include "crypto/crypto.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <pthread.h>

#include "testutil.h"


/* NIST SP 800-38A, appendix F.5.5 CTR-AES256.Encrypt. */
static const char nist_key[] = "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4";
static const char nist_iv[] = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
static const char nist_plain[] = "6bc1bee22e409f96e93d7e117393172a"
                                 "ae2d8a571e03ac9c9eb76fac45af8e51"
                                 "30c81c46a35ce411e5fbc1191a0a52ef"
                                 "f69f2445df4f9b17ad2b417be66c3710";
static const char nist_cipher[] = "601ec313775789a5b7a7f504bbf3d228"
                                  "f443e3ca4d62b59aca84e990cacaf5c5"
                                  "2b0930daa23de94ce87017ba2d84988d"
                                  "dfc9c58db67aada613c2dd08457941a6";

struct nist {
    uint8_t key[32], iv[16], plain[64], cipher[64];
};

static void nist_load(struct nist *v) {
    unhex(nist_key, v->key);
    unhex(nist_iv, v->iv);
    unhex(nist_plain, v->plain);
    unhex(nist_cipher, v->cipher);
}

static void test_ctr_nist_f55(void **state) {
    struct nist v;
    nist_load(&v);
    struct crypto_ctr *c = crypto_ctr_new();
    assert_non_null(c);
    assert_int_equal(crypto_ctr_init(c, v.key, v.iv), 0);
    uint8_t out[64];
    crypto_ctr_apply(c, v.plain, out, sizeof(out));
    assert_memory_equal(out, v.cipher, 64);

    /* decrypt == encrypt, in place */
    assert_int_equal(crypto_ctr_init(c, v.key, v.iv), 0);
    crypto_ctr_apply(c, out, out, sizeof(out));
    assert_memory_equal(out, v.plain, 64);
    crypto_ctr_free(c);
}

static void test_ctr_oneshot_nist(void **state) {
    struct nist v;
    nist_load(&v);
    uint8_t out[64];
    crypto_ctr_oneshot(v.key, v.iv, v.plain, out, sizeof(out));
    assert_memory_equal(out, v.cipher, 64);
    /* a second call re-keys the cached context: same answer, not a continued stream */
    memset(out, 0, sizeof(out));
    crypto_ctr_oneshot(v.key, v.iv, v.plain, out, sizeof(out));
    assert_memory_equal(out, v.cipher, 64);
    /* and after the cache is dropped it is rebuilt */
    crypto_thread_cleanup();
    crypto_thread_cleanup();
    memset(out, 0, sizeof(out));
    crypto_ctr_oneshot(v.key, v.iv, v.plain + 16, out, 16);
    uint8_t expect[16];
    for (int i = 0; i < 16; i++) /* keystream block 0 XOR plaintext block 1 */
        expect[i] = v.cipher[i] ^ v.plain[i] ^ v.plain[16 + i];
    assert_memory_equal(out, expect, 16);
}

/* Keystream block i of (key, iv): encrypt zeros. */
static void keystream(const uint8_t *key, const uint8_t *iv, uint8_t *out, size_t len) {
    memset(out, 0, len);
    crypto_ctr_oneshot(key, iv, out, out, len);
}

static void test_ctr_counter_carry(void **state) {
    /* The counter is one 128-bit big-endian integer: 00..00ff..ff + 1 carries into byte 7,
     * and ff..ff + 1 wraps to zero. Expected keystreams computed with Python cryptography
     * 48 (AES-256-CTR), key = the NIST F.5.5 key. */
    uint8_t key[32], iv[16], ks[48], expect[48];
    unhex(nist_key, key);

    unhex("00000000000000ffffffffffffffffff", iv);
    keystream(key, iv, ks, 48);
    unhex("0d829d4421235ef5f9ad3755c8a54d8e0ace370f7b14652a7f2e9be6fd64d6df"
          "74312f0fb7ecfa5a86a6f903bb5f8bbe",
          expect);
    assert_memory_equal(ks, expect, 48);

    /* the same property without the table: block 1 of iv == block 0 of iv + 1 */
    uint8_t next[16], ks_next[16];
    unhex("00000000000001000000000000000000", next);
    keystream(key, next, ks_next, 16);
    assert_memory_equal(ks + 16, ks_next, 16);

    memset(iv, 0xff, sizeof(iv));
    keystream(key, iv, ks, 32);
    unhex("3b3c2921c85a24de9ac606ce6d1d60cce568f68194cf76d6174d4cc04310a854", expect);
    assert_memory_equal(ks, expect, 32);
    uint8_t zero[16] = {0};
    keystream(key, zero, ks_next, 16);
    assert_memory_equal(ks + 16, ks_next, 16);
}

static void test_ctr_chunks_equal_oneshot(void **state) {
    uint8_t key[32], iv[16], data[1000], whole[1000], pieces[1000];
    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof(iv); i++)
        iv[i] = (uint8_t)(0xf0 + i);
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 31 + 5);
    crypto_ctr_oneshot(key, iv, data, whole, sizeof(data));
    assert_memory_not_equal(whole, data, sizeof(data));

    struct crypto_ctr *c = crypto_ctr_new();
    assert_non_null(c);
    assert_int_equal(crypto_ctr_init(c, key, iv), 0);
    /* uneven sizes crossing block boundaries, including empty and single bytes */
    static const size_t sizes[] = {1, 0, 15, 17, 3, 64, 100, 1, 255, 31, 33};
    size_t off = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        crypto_ctr_apply(c, data + off, pieces + off, sizes[i]);
        off += sizes[i];
    }
    crypto_ctr_apply(c, data + off, pieces + off, sizeof(data) - off);
    assert_memory_equal(pieces, whole, sizeof(data));
    crypto_ctr_free(c);
}

static void test_ctr_reinit_resets(void **state) {
    struct nist v;
    nist_load(&v);
    struct crypto_ctr *c = crypto_ctr_new();
    assert_non_null(c);
    uint8_t out[64], junk[37];
    memset(junk, 0, sizeof(junk));

    /* keyed with another key and advanced mid-block, then re-keyed: back at offset 0 */
    uint8_t other[32];
    memset(other, 0x5a, sizeof(other));
    assert_int_equal(crypto_ctr_init(c, other, v.iv), 0);
    crypto_ctr_apply(c, junk, junk, sizeof(junk));
    assert_int_equal(crypto_ctr_init(c, v.key, v.iv), 0);
    crypto_ctr_apply(c, v.plain, out, sizeof(out));
    assert_memory_equal(out, v.cipher, 64);

    /* same key again after 64 bytes: still restarts */
    assert_int_equal(crypto_ctr_init(c, v.key, v.iv), 0);
    crypto_ctr_apply(c, v.plain, out, 16);
    assert_memory_equal(out, v.cipher, 16);
    crypto_ctr_free(c);
}

static void test_ctr_unkeyed_fails_closed(void **state) {
    struct crypto_ctr *c = crypto_ctr_new();
    assert_non_null(c);
    uint8_t buf[20], zero[20] = {0};
    memset(buf, 0xab, sizeof(buf));
    crypto_ctr_apply(c, buf, buf, sizeof(buf));
    assert_memory_equal(buf, zero, sizeof(buf));
    crypto_ctr_free(c);
    crypto_ctr_free(NULL);
}

static void test_sha256(void **state) {
    /* FIPS 180-2 appendix B.1 / B.2 and the empty string (NIST examples). */
    uint8_t out[32], expect[32];
    crypto_sha256("abc", 3, NULL, 0, out);
    unhex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", expect);
    assert_memory_equal(out, expect, 32);

    crypto_sha256("ab", 2, "c", 1, out); /* split across the two parts */
    assert_memory_equal(out, expect, 32);
    crypto_sha256(NULL, 0, "abc", 3, out);
    assert_memory_equal(out, expect, 32);

    crypto_sha256(NULL, 0, NULL, 0, out);
    unhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", expect);
    assert_memory_equal(out, expect, 32);

    static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    crypto_sha256(m, 20, m + 20, strlen(m) - 20, out);
    unhex("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", expect);
    assert_memory_equal(out, expect, 32);
}

static void test_hmac_sha256(void **state) {
    /* RFC 4231 test cases 1, 2 and 6. */
    uint8_t key[131], out[32], expect[32];
    memset(key, 0x0b, 20);
    crypto_hmac_sha256(key, 20, "Hi There", 8, out);
    unhex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", expect);
    assert_memory_equal(out, expect, 32);

    static const char d2[] = "what do ya want for nothing?";
    crypto_hmac_sha256("Jefe", 4, d2, strlen(d2), out);
    unhex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", expect);
    assert_memory_equal(out, expect, 32);

    static const char d6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    memset(key, 0xaa, sizeof(key));
    crypto_hmac_sha256(key, sizeof(key), d6, strlen(d6), out);
    unhex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", expect);
    assert_memory_equal(out, expect, 32);

    /* empty key and message (computed with Python hmac/hashlib) */
    crypto_hmac_sha256(NULL, 0, NULL, 0, out);
    unhex("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad", expect);
    assert_memory_equal(out, expect, 32);
}

static void test_random(void **state) {
    uint8_t a[64], b[64], zero[64] = {0};
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    assert_int_equal(crypto_random(a, sizeof(a)), 0);
    assert_int_equal(crypto_random(b, sizeof(b)), 0);
    assert_memory_not_equal(a, zero, sizeof(a));
    assert_memory_not_equal(a, b, sizeof(a));
    assert_int_equal(crypto_random(a, 0), 0);
}

static void test_memeq(void **state) {
    uint8_t a[33], b[33];
    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = b[i] = (uint8_t)i;
    assert_int_equal(crypto_memeq(a, b, sizeof(a)), 1);
    b[0] ^= 1;
    assert_int_equal(crypto_memeq(a, b, sizeof(a)), 0);
    b[0] ^= 1;
    b[32] ^= 0x80;
    assert_int_equal(crypto_memeq(a, b, sizeof(a)), 0);
    assert_int_equal(crypto_memeq(a, b, 32), 1);
    assert_int_equal(crypto_memeq(a, b, 0), 1);
}

/* crypto_ctr_block gives the same bytes as the stream at that block, also when the counter
 * carries across bytes (iv ending in ff ff). */
static void test_ctr_block_matches_stream(void **state) {
    (void)state;
    uint8_t key[32], iv[16], zero[16 * 300] = {0}, stream[sizeof zero], blk[16];
    for (int round = 0; round < 3; round++) {
        crypto_random(key, sizeof key);
        crypto_random(iv, sizeof iv);
        if (round == 1)
            memset(iv + 12, 0xff, 4);
        if (round == 2)
            memset(iv, 0xff, 16); /* wraps around */
        crypto_ctr_oneshot(key, iv, zero, stream, sizeof stream);
        for (uint32_t b = 0; b < 300; b += 1 + b / 7) {
            crypto_ctr_block(key, iv, b, blk);
            assert_memory_equal(blk, stream + 16 * b, 16);
        }
    }
}

/* crypto_random_fast: no zeros left, two draws differ, and a draw across the 1 MiB re-key
 * boundary is filled to its last byte (byte frequencies near uniform over 2 MiB). */
/* RFC 7748 section 6.1: Alice's and Bob's key pairs. */
static void test_x25519_rfc7748(void **state) {
    (void)state;
    static const char *const v[][2] = {
        {"77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
         "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"},
        {"5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
         "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint8_t k[32], want[32], got[32];
        unhex(v[i][0], k);
        unhex(v[i][1], want);
        assert_int_equal(crypto_x25519_public_vartime(got, k), 0);
        assert_memory_equal(got, want, 32);
    }
}

/* OpenSSL's own X25519 public key for the same private key. */
static void openssl_x25519(uint8_t out[32], const uint8_t k[32]) {
    EVP_PKEY *pk = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, k, 32);
    size_t len = 32;
    assert_non_null(pk);
    assert_int_equal(EVP_PKEY_get_raw_public_key(pk, out, &len), 1);
    assert_int_equal(len, 32);
    EVP_PKEY_free(pk);
}

/* Agrees with OpenSSL for n random scalars (any bytes: clamping is the function's job) and
 * for the edge scalars; returns the number of disagreements. */
static int x25519_disagreements(int n, unsigned seed) {
    int bad = 0;
    for (int i = 0; i < n + 3; i++) {
        uint8_t k[32], got[32], want[32];
        if (i < n) {
            assert_int_equal(crypto_random(k, sizeof k), 0);
        } else {
            memset(k, i == n ? 0x00 : 0xff, sizeof k); /* the smallest and largest clamped */
            if (i == n + 2)
                k[0] = (uint8_t)seed;
        }
        assert_int_equal(crypto_x25519_public_vartime(got, k), 0);
        openssl_x25519(want, k);
        bad += memcmp(got, want, 32) != 0;
    }
    return bad;
}

static void test_x25519_matches_openssl(void **state) {
    (void)state;
    assert_int_equal(x25519_disagreements(2000, 7), 0);
    uint8_t a[32], b[32], want[32];
    assert_int_equal(crypto_x25519_public(a), 0);
    assert_int_equal(crypto_x25519_public(b), 0);
    assert_false(memcmp(a, b, 32) == 0);
    memset(want, 0, sizeof want);
    assert_false(memcmp(a, want, 32) == 0);
}

/* Batches of every size agree with OpenSSL key by key (one shared inversion per batch). */
static void test_x25519_batch(void **state) {
    (void)state;
    uint8_t k[CRYPTO_X25519_BATCH_MAX][32], got[CRYPTO_X25519_BATCH_MAX][32], want[32];
    for (size_t n = 1; n <= CRYPTO_X25519_BATCH_MAX; n++)
        for (int round = 0; round < 20; round++) {
            assert_int_equal(crypto_random(k, sizeof k), 0);
            assert_int_equal(
                crypto_x25519_public_batch_vartime(got, (const uint8_t(*)[32])k, n), 0);
            for (size_t b = 0; b < n; b++) {
                openssl_x25519(want, k[b]);
                assert_memory_equal(got[b], want, 32);
            }
        }
    assert_int_equal(crypto_x25519_public_batch_vartime(got, (const uint8_t(*)[32])k, 0), -1);
    assert_int_equal(crypto_x25519_public_batch_vartime(got, (const uint8_t(*)[32])k,
                                                        CRYPTO_X25519_BATCH_MAX + 1),
                     -1);
    /* crypto_x25519_public hands out batch after batch: all distinct. */
    uint8_t seen[3 * CRYPTO_X25519_BATCH_MAX][32];
    for (size_t i = 0; i < 3 * CRYPTO_X25519_BATCH_MAX; i++) {
        assert_int_equal(crypto_x25519_public(seen[i]), 0);
        for (size_t j = 0; j < i; j++)
            assert_false(memcmp(seen[i], seen[j], 32) == 0);
    }
}

/* No crypto_thread_cleanup here: the thread's cached contexts (the key-share batch's random
 * stream among them) must be freed at its exit anyway (LeakSanitizer checks, in CI's run). */
static void *x25519_thread(void *arg) {
    int *bad = arg;
    *bad = x25519_disagreements(200, 3);
    uint8_t pub[32];
    if (crypto_x25519_public(pub) != 0)
        *bad += 1;
    return NULL;
}

/* Threads that race to the first key (the comb table is built once) all get right answers. */
static void test_x25519_threads(void **state) {
    (void)state;
    pthread_t t[4];
    int bad[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, x25519_thread, &bad[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(bad[i], 0);
    }
}

static void test_random_fast(void **state) {
    (void)state;
    uint8_t a[4096], b[4096];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    assert_int_equal(crypto_random_fast(a, sizeof a), 0);
    assert_int_equal(crypto_random_fast(b, sizeof b), 0);
    assert_false(memcmp(a, b, sizeof a) == 0);
    size_t n = (size_t)2 << 20;
    uint8_t *big = calloc(1, n);
    assert_non_null(big);
    assert_int_equal(crypto_random_fast(big, 1000), 0); /* not aligned to the re-key */
    assert_int_equal(crypto_random_fast(big, n), 0);
    size_t freq[256] = {0};
    for (size_t i = 0; i < n; i++)
        freq[big[i]]++;
    for (int v = 0; v < 256; v++) { /* expected 8192 each; 7,000..9,400 is > 12 sigma */
        assert_true(freq[v] > 7000);
        assert_true(freq[v] < 9400);
    }
    size_t zero_run = 0, longest = 0; /* the tail after the re-key must not be left zero */
    for (size_t i = n - 4096; i < n; i++) {
        zero_run = big[i] ? 0 : zero_run + 1;
        longest = zero_run > longest ? zero_run : longest;
    }
    assert_true(longest < 8);
    free(big);
}

/* A parked stream goes on where it stopped (any offset in a block, a counter that carries);
 * an inline zero-filled stream works like crypto_ctr_new's; a wiped one fails closed. */
static void test_ctr_park_resumes(void **state) {
    (void)state;
    uint8_t key[32], iv[16], zero[3000] = {0}, whole[3000], part[3000];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(7 * i + 1);
    memset(iv, 0xff, sizeof iv); /* the counter wraps after one block */
    iv[0] = 0x12;
    crypto_ctr_oneshot(key, iv, zero, whole, sizeof whole);
    struct crypto_ctr c;
    memset(&c, 0, sizeof c);
    assert_int_equal(crypto_ctr_init(&c, key, iv), 0);
    static const size_t cuts[] = {1, 15, 16, 17, 250, 1024, 1, 33, 600};
    size_t at = 0;
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        crypto_ctr_apply(&c, zero, part + at, cuts[i]);
        at += cuts[i];
        crypto_ctr_park(&c);
        assert_null(c.ctx);
    }
    crypto_ctr_apply(&c, zero, part + at, sizeof part - at);
    assert_memory_equal(part, whole, sizeof whole);
    crypto_ctr_wipe(&c);
    memset(part, 0xaa, 64);
    crypto_ctr_apply(&c, zero, part, 64); /* un-keyed: zeros, never the input */
    assert_memory_equal(part, zero, 64);
    /* more streams parked than the spare list holds: the surplus is freed */
    struct crypto_ctr many[80];
    memset(many, 0, sizeof many);
    int freed = 0;
    for (int i = 0; i < 80; i++)
        assert_int_equal(crypto_ctr_init(&many[i], key, iv), 0);
    for (int i = 0; i < 80; i++)
        freed += crypto_ctr_park(&many[i]);
    assert_true(freed >= 16);
    for (int i = 0; i < 80; i++)
        crypto_ctr_wipe(&many[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctr_nist_f55),
        cmocka_unit_test(test_ctr_oneshot_nist),
        cmocka_unit_test(test_ctr_block_matches_stream),
        cmocka_unit_test(test_ctr_counter_carry),
        cmocka_unit_test(test_ctr_chunks_equal_oneshot),
        cmocka_unit_test(test_ctr_reinit_resets),
        cmocka_unit_test(test_ctr_unkeyed_fails_closed),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_hmac_sha256),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_random_fast),
        cmocka_unit_test(test_ctr_park_resumes),
        cmocka_unit_test(test_memeq),
        cmocka_unit_test(test_x25519_threads),
        cmocka_unit_test(test_x25519_rfc7748),
        cmocka_unit_test(test_x25519_matches_openssl),
        cmocka_unit_test(test_x25519_batch),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    crypto_thread_cleanup();
    return rc;
}
