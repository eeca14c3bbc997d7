/* test_obfs2.c: obfuscated2 header tests: MTG snapshot vectors, policy, forbidden, round trips. */
#include "proto/obfs2.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"


/*
 * 9seconds/mtg mtglib/internal/obfuscation/testdata/client-handshake-snapshot-*.json, as
 * transcribed in PROTOCOL.md 9.1 (base64 there, hex here). In both files the client sends
 * "abcdefg" (decrypted.cipher = YWJjZGVmZw) right after the header; "after" is its plaintext.
 * The proxy writes 01..0a (encrypted.text) and "written" is the expected ciphertext.
 */
static const char mtg_secret[] = "367a189aee18fa31c190054efd4a8e95";

struct mtg_vector {
    const char *frame, *c2p_key, *c2p_iv, *p2c_key, *p2c_iv, *after, *written;
};

static const struct mtg_vector mtg_vectors[] = {
    {
        /* client-handshake-snapshot-4529d55776e2d427.json */
        "803717c1a318e11c2547e9c9c3e20b0ebd76dd42471e38c4fd4e691789bf634e"
        "00987ee512910be946119c86036c394e1d20f17354e8ce23ef36524987c44ca3",
        "5718e0e2c67876e474a1fed6e7a638f1a785325360f92a6f361f6dd43caf59f3",
        "46119c86036c394e1d20f17354e8ce23",
        "6d910881ac50b6daa78498d79ec442d5cc2b2faa77a0efd48ab9c238f98671e8",
        "c4381e4742dd76bd0e0be2c3c9e94725",
        "e30663ea65147b",
        "c195774d1dfd97d9d1a1",
    },
    {
        /* client-handshake-snapshot-585c944d672f60a2.json */
        "3365b2c5e8b021007e64e17137348d1edbbd39d11291fc6fdc990a162982c54a"
        "18037043fd097d9d707f388a2708a2d4282712d15cd9d8febffb9a10f4623c60",
        "e5e9b93620f4d19c14594a82043f573d7a80913a3b8dbb551e5a1b2011bd15be",
        "707f388a2708a2d4282712d15cd9d8fe",
        "02bee2138a5aa95abb5221ff52e0d470846274ed3c8a24ba8b6f1ca07e0fc888",
        "6ffc9112d139bddb1e8d343771e1647e",
        "42422fc0640380",
        "b73030ac2cf4d2874446",
    },
};

static struct secret make_secret(enum secret_kind kind, const char *hexkey) {
    struct secret s;
    memset(&s, 0, sizeof(s));
    s.kind = kind;
    unhex(hexkey, s.key);
    if (kind == SECRET_EE)
        strcpy(s.domain, "example.com");
    return s;
}

static void check_mtg_vector(const struct mtg_vector *v) {
    uint8_t frame[64], key[32], iv[16];
    unhex(v->frame, frame);
    struct secret secrets[2] = {
        make_secret(SECRET_PLAIN, "00112233445566778899aabbccddeeff"), /* wrong one first */
        make_secret(SECRET_PLAIN, mtg_secret),
    };

    struct obfs2_hello h;
    memset(&h, 0, sizeof(h));
    assert_int_equal(obfs2_parse(frame, secrets, 2, OBFS2_ALLOW_ALL, &h), OBFS2_OK);
    assert_int_equal(h.secret_index, 1);
    assert_int_equal(h.tag, OBFS2_TAG_PADDED);
    assert_int_equal(h.dc, 2);

    unhex(v->c2p_key, key);
    unhex(v->c2p_iv, iv);
    assert_memory_equal(h.keys.fwd.key, key, 32);
    assert_memory_equal(h.keys.fwd.iv, iv, 16);
    unhex(v->p2c_key, key);
    unhex(v->p2c_iv, iv);
    assert_memory_equal(h.keys.rev.key, key, 32);
    assert_memory_equal(h.keys.rev.iv, iv, 16);

    /* obfs2_derive alone gives the same keys */
    struct obfs2_keys k;
    obfs2_derive(frame, secrets[1].key, &k);
    assert_memory_equal(&k, &h.keys, sizeof(k));

    /* the client stream continues at keystream offset 64 */
    struct crypto_ctr *dec = crypto_ctr_new(), *enc = crypto_ctr_new();
    assert_non_null(dec);
    assert_non_null(enc);
    uint8_t scratch[64], buf[16], expect[16];
    assert_int_equal(crypto_ctr_init(dec, h.keys.fwd.key, h.keys.fwd.iv), 0);
    crypto_ctr_apply(dec, frame, scratch, 64);
    memcpy(buf, "abcdefg", 7);
    crypto_ctr_apply(dec, buf, buf, 7);
    size_t n = unhex(v->after, expect);
    assert_memory_equal(buf, expect, n);

    /* the proxy's stream to the client starts at offset 0 */
    assert_int_equal(crypto_ctr_init(enc, h.keys.rev.key, h.keys.rev.iv), 0);
    for (int i = 0; i < 10; i++)
        buf[i] = (uint8_t)(i + 1);
    crypto_ctr_apply(enc, buf, buf, 10);
    n = unhex(v->written, expect);
    assert_memory_equal(buf, expect, n);
    crypto_ctr_free(dec);
    crypto_ctr_free(enc);
}

static void test_mtg_vector_1(void **state) {
    check_mtg_vector(&mtg_vectors[0]);
}

static void test_mtg_vector_2(void **state) {
    check_mtg_vector(&mtg_vectors[1]);
}

static void test_mtg_vector_dd_secret(void **state) {
    /* the vectors use tag dd, which a dd-kind secret accepts too */
    uint8_t frame[64];
    unhex(mtg_vectors[1].frame, frame);
    struct secret s = make_secret(SECRET_DD, mtg_secret);
    struct obfs2_hello h;
    assert_int_equal(obfs2_parse(frame, &s, 1, OBFS2_ALLOW_ALL, &h), OBFS2_OK);
    assert_int_equal(h.tag, OBFS2_TAG_PADDED);
    /* ...but not when the caller's mask leaves the padded tag out */
    assert_int_equal(obfs2_parse(frame, &s, 1, OBFS2_ALLOW_ABRIDGED | OBFS2_ALLOW_INTERMEDIATE, &h),
                     OBFS2_BAD);
}

static void test_wrong_secret(void **state) {
    uint8_t frame[64];
    unhex(mtg_vectors[0].frame, frame);
    struct secret s = make_secret(SECRET_PLAIN, "367a189aee18fa31c190054efd4a8e94"); /* last bit */
    struct obfs2_hello h;
    assert_int_equal(obfs2_parse(frame, &s, 1, OBFS2_ALLOW_ALL, &h), OBFS2_BAD);
    assert_int_equal(obfs2_parse(frame, NULL, 0, OBFS2_ALLOW_ALL, &h), OBFS2_BAD);
    /* the right key in an ee secret is not accepted on this path */
    s = make_secret(SECRET_EE, mtg_secret);
    assert_int_equal(obfs2_parse(frame, &s, 1, OBFS2_ALLOW_ALL, &h), OBFS2_BAD);
    /* one flipped bit in the tag area */
    s = make_secret(SECRET_PLAIN, mtg_secret);
    frame[57] ^= 0x01;
    assert_int_equal(obfs2_parse(frame, &s, 1, OBFS2_ALLOW_ALL, &h), OBFS2_BAD);
}

/* Builds the wire header a client with secret s would send (tag, dc). */
static void client_header(const struct secret *s, uint32_t tag, int16_t dc, uint8_t wire[64],
                          struct obfs2_keys *keys) {
    uint8_t plain[64];
    assert_int_equal(obfs2_build(plain, tag, dc, NULL), 0);
    obfs2_derive(plain, s ? s->key : NULL, keys);
    struct crypto_ctr *enc = crypto_ctr_new();
    assert_non_null(enc);
    assert_int_equal(crypto_ctr_init(enc, keys->fwd.key, keys->fwd.iv), 0);
    obfs2_seal(plain, enc, wire);
    crypto_ctr_free(enc);
}

static void test_kind_and_mask_rules(void **state) {
    static const uint32_t tags[] = {OBFS2_TAG_ABRIDGED, OBFS2_TAG_INTERMEDIATE, OBFS2_TAG_PADDED};
    static const unsigned tag_bits[] = {OBFS2_ALLOW_ABRIDGED, OBFS2_ALLOW_INTERMEDIATE,
                                        OBFS2_ALLOW_PADDED};
    static const enum secret_kind kinds[] = {SECRET_PLAIN, SECRET_DD, SECRET_EE};
    static const unsigned kind_allows[] = {OBFS2_ALLOW_ALL, OBFS2_ALLOW_PADDED, 0};
    int accepted = 0;
    for (int t = 0; t < 3; t++) {
        for (int k = 0; k < 3; k++) {
            struct secret s = make_secret(kinds[k], mtg_secret);
            uint8_t wire[64];
            struct obfs2_keys keys;
            client_header(&s, tags[t], 1, wire, &keys);
            for (unsigned mask = 0; mask <= OBFS2_ALLOW_ALL; mask++) {
                struct obfs2_hello h;
                int want = (tag_bits[t] & kind_allows[k] & mask) != 0;
                enum obfs2_status st = obfs2_parse(wire, &s, 1, mask, &h);
                assert_int_equal(st, want ? OBFS2_OK : OBFS2_BAD);
                if (want) {
                    assert_int_equal(h.tag, tags[t]);
                    accepted++;
                }
            }
        }
    }
    /* plain: each tag under 4 of 8 masks (12); dd: padded under 4 masks (4); ee: none */
    assert_int_equal(accepted, 16);
}

static void test_dc_round_trip(void **state) {
    static const int16_t dcs[] = {-2, -5, -203, 0, 1, 203, INT16_MIN, INT16_MAX, -10002};
    struct secret s = make_secret(SECRET_PLAIN, mtg_secret);
    for (size_t i = 0; i < sizeof(dcs) / sizeof(dcs[0]); i++) {
        uint8_t wire[64];
        struct obfs2_keys keys;
        client_header(&s, OBFS2_TAG_INTERMEDIATE, dcs[i], wire, &keys);
        struct obfs2_hello h;
        assert_int_equal(obfs2_parse(wire, &s, 1, OBFS2_ALLOW_ALL, &h), OBFS2_OK);
        assert_int_equal(h.dc, dcs[i]);
    }
}

static void test_forbidden(void **state) {
    uint8_t h[64];
    for (int i = 0; i < 64; i++)
        h[i] = (uint8_t)(0x11 + i);
    assert_int_equal(obfs2_forbidden(h), 0);

    /* first words, as the bytes on the wire (PROTOCOL.md 1.2) */
    static const uint8_t words[][4] = {
        {'H', 'E', 'A', 'D'},     {'P', 'O', 'S', 'T'},     {'G', 'E', 'T', ' '},
        {'O', 'P', 'T', 'I'},     {0xdd, 0xdd, 0xdd, 0xdd}, {0xee, 0xee, 0xee, 0xee},
        {0x16, 0x03, 0x01, 0x02},
    };
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        uint8_t t[64];
        memcpy(t, h, 64);
        memcpy(t, words[w], 4);
        assert_int_equal(obfs2_forbidden(t), 1);
        t[3] ^= 0x01; /* one bit away is fine */
        assert_int_equal(obfs2_forbidden(t), 0);
    }

    uint8_t t[64];
    memcpy(t, h, 64);
    t[0] = 0xef;
    assert_int_equal(obfs2_forbidden(t), 1);
    t[0] = 0x11;
    t[1] = 0xef; /* only the first byte matters */
    assert_int_equal(obfs2_forbidden(t), 0);

    memcpy(t, h, 64);
    memset(t + 4, 0, 4);
    assert_int_equal(obfs2_forbidden(t), 1);
    t[7] = 0x01;
    assert_int_equal(obfs2_forbidden(t), 0);
    memset(t, 0, 4); /* a zero first word alone is allowed */
    assert_int_equal(obfs2_forbidden(t), 0);

    /* the rest of the header plays no part */
    memcpy(t, h, 64);
    memset(t + 8, 0, 56);
    assert_int_equal(obfs2_forbidden(t), 0);
}

static void test_build_many(void **state) {
    static const uint32_t tags[] = {OBFS2_TAG_ABRIDGED, OBFS2_TAG_INTERMEDIATE, OBFS2_TAG_PADDED};
    uint8_t plain[64], prev[64];
    memset(prev, 0, sizeof(prev));
    for (int i = 0; i < 20000; i++) {
        uint32_t tag = tags[i % 3];
        int16_t dc = (int16_t)(i % 11 - 5);
        assert_int_equal(obfs2_build(plain, tag, dc, NULL), 0);
        assert_int_equal(obfs2_forbidden(plain), 0);
        uint32_t got_tag = (uint32_t)plain[56] | (uint32_t)plain[57] << 8 |
                           (uint32_t)plain[58] << 16 | (uint32_t)plain[59] << 24;
        assert_int_equal(got_tag, tag);
        assert_int_equal((int16_t)(uint16_t)(plain[60] | plain[61] << 8), dc);
        assert_memory_not_equal(plain + 8, prev + 8, 48); /* fresh key material each time */
        memcpy(prev, plain, 64);
    }
}

static void test_round_trip_raw(void **state) {
    /* Proxy -> DC direction (PROTOCOL.md 5.2): raw keys, no secret. */
    uint8_t plain[64], wire[64];
    assert_int_equal(obfs2_build(plain, OBFS2_TAG_ABRIDGED, -4, NULL), 0);
    struct obfs2_keys ik, rk;
    obfs2_derive(plain, NULL, &ik);
    assert_memory_equal(ik.fwd.key, plain + 8, 32); /* raw: no hashing */
    assert_memory_equal(ik.fwd.iv, plain + 40, 16);

    struct crypto_ctr *ienc = crypto_ctr_new(), *idec = crypto_ctr_new();
    struct crypto_ctr *rdec = crypto_ctr_new(), *renc = crypto_ctr_new();
    assert_true(ienc && idec && rdec && renc);
    assert_int_equal(crypto_ctr_init(ienc, ik.fwd.key, ik.fwd.iv), 0);
    obfs2_seal(plain, ienc, wire);
    assert_memory_equal(wire, plain, 56); /* key material in the clear */
    assert_memory_not_equal(wire + 56, plain + 56, 8);
    uint8_t msg[5];
    memcpy(msg, "hello", 5);
    crypto_ctr_apply(ienc, msg, msg, 5); /* continues at offset 64 */

    /* responder: derive from the wire bytes, decrypt the header, then the message */
    obfs2_derive(wire, NULL, &rk);
    assert_memory_equal(&rk, &ik, sizeof(rk));
    uint8_t dec[64];
    assert_int_equal(crypto_ctr_init(rdec, rk.fwd.key, rk.fwd.iv), 0);
    crypto_ctr_apply(rdec, wire, dec, 64);
    assert_memory_equal(dec + 56, plain + 56, 8);
    crypto_ctr_apply(rdec, msg, msg, 5);
    assert_memory_equal(msg, "hello", 5);

    /* reply: responder encrypts with rev from offset 0, initiator decrypts with rev */
    uint8_t reply[6];
    memcpy(reply, "world!", 6);
    assert_int_equal(crypto_ctr_init(renc, rk.rev.key, rk.rev.iv), 0);
    crypto_ctr_apply(renc, reply, reply, 6);
    assert_memory_not_equal(reply, "world!", 6);
    assert_int_equal(crypto_ctr_init(idec, ik.rev.key, ik.rev.iv), 0);
    crypto_ctr_apply(idec, reply, reply, 6);
    assert_memory_equal(reply, "world!", 6);

    crypto_ctr_free(ienc);
    crypto_ctr_free(idec);
    crypto_ctr_free(rdec);
    crypto_ctr_free(renc);
}

static void test_round_trip_secret(void **state) {
    struct secret secrets[3] = {
        make_secret(SECRET_DD, "ffeeddccbbaa99887766554433221100"),
        make_secret(SECRET_EE, mtg_secret),
        make_secret(SECRET_PLAIN, mtg_secret),
    };
    uint8_t wire[64];
    struct obfs2_keys ck;
    client_header(&secrets[2], OBFS2_TAG_PADDED, 4, wire, &ck);
    struct obfs2_hello h;
    assert_int_equal(obfs2_parse(wire, secrets, 3, OBFS2_ALLOW_ALL, &h), OBFS2_OK);
    assert_int_equal(h.secret_index, 2);
    assert_int_equal(h.tag, OBFS2_TAG_PADDED);
    assert_int_equal(h.dc, 4);
    assert_memory_equal(&h.keys, &ck, sizeof(ck));

    /* hashed keys differ from the raw ones */
    struct obfs2_keys raw;
    obfs2_derive(wire, NULL, &raw);
    assert_memory_not_equal(raw.fwd.key, ck.fwd.key, 32);
    assert_memory_equal(raw.fwd.iv, ck.fwd.iv, 16);
}

static void test_rev_preset(void **state) {
    struct obfs2_dir preset;
    for (int i = 0; i < 32; i++)
        preset.key[i] = (uint8_t)(i + 1);
    for (int i = 0; i < 16; i++)
        preset.iv[i] = (uint8_t)(0xa0 + i);
    uint8_t plain[64];
    for (int round = 0; round < 100; round++) {
        assert_int_equal(obfs2_build(plain, OBFS2_TAG_PADDED, -2, &preset), 0);
        assert_int_equal(obfs2_forbidden(plain), 0);
        struct obfs2_keys k;
        obfs2_derive(plain, NULL, &k);
        assert_memory_equal(k.rev.key, preset.key, 32);
        assert_memory_equal(k.rev.iv, preset.iv, 16);
        assert_int_equal(plain[55], preset.key[0]); /* reversed, from the end of the material */
        assert_int_equal(plain[8], preset.iv[15]);
        assert_int_equal(plain[56], 0xdd);
        assert_int_equal((int16_t)(uint16_t)(plain[60] | plain[61] << 8), -2);
    }
}

/* Fast mode (issue 7): the proxy accepts a client header (with a secret), then builds its DC
 * header with rev_preset = the client's download keys. The DC encrypts toward the proxy with
 * the raw rev keys of that header from offset 0; the client decrypts what the proxy sends with
 * its own rev keys from offset 0. Both keystreams must be the same bytes, so the proxy can
 * forward the DC's bytes untouched. */
static void test_fast_mode_keystreams_equal(void **state) {
    (void)state;
    static const uint8_t secret[16] = {0x36, 0x7a, 0x18, 0x9a, 0xee, 0x18, 0xfa, 0x31,
                                       0xc1, 0x90, 0x05, 0x4e, 0xfd, 0x4a, 0x8e, 0x95};
    for (int round = 0; round < 8; round++) {
        /* The client's header and its view of the download keys. */
        uint8_t client_hdr[OBFS2_HDR_LEN];
        assert_int_equal(obfs2_build(client_hdr, OBFS2_TAG_PADDED, 2, NULL), 0);
        struct obfs2_keys ck;
        obfs2_derive(client_hdr, secret, &ck);
        /* The proxy's header toward the DC, fast mode. */
        uint8_t dc_hdr[OBFS2_HDR_LEN];
        assert_int_equal(obfs2_build(dc_hdr, OBFS2_TAG_PADDED, 2, &ck.rev), 0);
        assert_int_equal(obfs2_forbidden(dc_hdr), 0);
        struct obfs2_keys dk;
        obfs2_derive(dc_hdr, NULL, &dk); /* what a DC derives: raw keys */
        uint8_t zeros[4096] = {0}, ks_dc[4096], ks_client[4096];
        crypto_ctr_oneshot(dk.rev.key, dk.rev.iv, zeros, ks_dc, sizeof zeros);
        crypto_ctr_oneshot(ck.rev.key, ck.rev.iv, zeros, ks_client, sizeof zeros);
        assert_memory_equal(ks_dc, ks_client, sizeof ks_dc);
        /* And the upload direction stays independent of the download one. */
        assert_memory_not_equal(dk.fwd.key, ck.rev.key, CRYPTO_KEY_LEN);
    }
    /* Without the preset the streams differ (the check above can fail). */
    uint8_t a[OBFS2_HDR_LEN], b[OBFS2_HDR_LEN];
    assert_int_equal(obfs2_build(a, OBFS2_TAG_PADDED, 2, NULL), 0);
    assert_int_equal(obfs2_build(b, OBFS2_TAG_PADDED, 2, NULL), 0);
    struct obfs2_keys ka, kb;
    obfs2_derive(a, secret, &ka);
    obfs2_derive(b, NULL, &kb);
    assert_memory_not_equal(ka.rev.key, kb.rev.key, CRYPTO_KEY_LEN);
}

static void test_tag_name(void **state) {
    assert_string_equal(obfs2_tag_name(OBFS2_TAG_ABRIDGED), "abridged");
    assert_string_equal(obfs2_tag_name(OBFS2_TAG_INTERMEDIATE), "intermediate");
    assert_string_equal(obfs2_tag_name(OBFS2_TAG_PADDED), "padded");
    assert_string_equal(obfs2_tag_name(0xdddddddcu), "unknown");
    assert_string_equal(obfs2_tag_name(0), "unknown");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtg_vector_1),
        cmocka_unit_test(test_mtg_vector_2),
        cmocka_unit_test(test_mtg_vector_dd_secret),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_kind_and_mask_rules),
        cmocka_unit_test(test_dc_round_trip),
        cmocka_unit_test(test_forbidden),
        cmocka_unit_test(test_build_many),
        cmocka_unit_test(test_round_trip_raw),
        cmocka_unit_test(test_round_trip_secret),
        cmocka_unit_test(test_rev_preset),
        cmocka_unit_test(test_fast_mode_keystreams_equal),
        cmocka_unit_test(test_tag_name),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    crypto_thread_cleanup();
    return rc;
}
