/* test_ja4.c: JA4 tests: the spec's examples, our test client, TDLib's hello, edge rules. */
#include "proto/ja4.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../tools/tlsclient.h"
#include "crypto/crypto.h"
#include "testutil.h"

/* ---- building hellos from value lists ---- */

struct ext {
    uint16_t type;
    const uint8_t *data;
    size_t len;
};

/* One record 16 03 01 holding a ClientHello with legacy_version 0303, a zero random, no
 * session id, the given suites and extensions (NULL exts with n 0: an empty block; noblock:
 * none at all). Returns the record's length. */
static size_t build(uint8_t *out, size_t cap, const uint16_t *cs, size_t ncs,
                    const struct ext *exts, size_t next, int noblock) {
    uint8_t *p = out + 9; /* record header 5, handshake header 4 */
    *p++ = 3;
    *p++ = 3;
    memset(p, 0, 32);
    p += 32;
    *p++ = 0;
    *p++ = (uint8_t)(2 * ncs >> 8);
    *p++ = (uint8_t)(2 * ncs);
    for (size_t i = 0; i < ncs; i++) {
        *p++ = (uint8_t)(cs[i] >> 8);
        *p++ = (uint8_t)cs[i];
    }
    *p++ = 1;
    *p++ = 0;
    if (!noblock) {
        uint8_t *blk = p;
        p += 2;
        for (size_t i = 0; i < next; i++) {
            *p++ = (uint8_t)(exts[i].type >> 8);
            *p++ = (uint8_t)exts[i].type;
            *p++ = (uint8_t)(exts[i].len >> 8);
            *p++ = (uint8_t)exts[i].len;
            if (exts[i].len)
                memcpy(p, exts[i].data, exts[i].len);
            p += exts[i].len;
        }
        size_t bl = (size_t)(p - blk - 2);
        blk[0] = (uint8_t)(bl >> 8);
        blk[1] = (uint8_t)bl;
    }
    size_t msg = (size_t)(p - out - 9), rec = msg + 4;
    assert_true(5 + rec <= cap);
    out[0] = 0x16;
    out[1] = 3;
    out[2] = 1;
    out[3] = (uint8_t)(rec >> 8);
    out[4] = (uint8_t)rec;
    out[5] = 1;
    out[6] = 0;
    out[7] = (uint8_t)(msg >> 8);
    out[8] = (uint8_t)msg;
    return 5 + rec;
}

static const uint8_t sni_data[] = {0,   14,  0,   0,   11,  'e', 'x', 'a',
                                   'm', 'p', 'l', 'e', '.', 'c', 'o', 'm'};
static const uint8_t alpn_h2[] = {0, 12, 2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
static const uint8_t versions13[] = {4, 0x03, 0x04, 0x03, 0x03};
static const uint8_t spec_sigs[] = {0x00, 0x10, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05,
                                    0x03, 0x08, 0x05, 0x05, 0x01, 0x08, 0x06, 0x06, 0x01};

static const uint16_t spec_cs[] = {0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9,
                                   0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035};

static void check(const uint8_t *h, size_t len, const char *want) {
    char out[JA4_LEN + 1];
    assert_int_equal(ja4_from_hello(h, len, out), 0);
    assert_string_equal(out, want);
}

static void check_raw(const uint8_t *h, size_t len, const char *want) {
    char out[4096];
    assert_int_equal(ja4_raw_from_hello(h, len, out, sizeof out), (int)strlen(want));
    assert_string_equal(out, want);
}

/* ---- (a) the public examples ---- */

/* FoxIO's JA4 spec (technical_details/JA4.md, "Example" and "Raw Output"): the hello's lists
 * in their original order (JA4_ro) give t13d1516h2_8daaf6152771_e5627efa2ab1. Extensions the
 * spec lists without data get empty data (JA4 reads only SNI's presence, ALPN, sigalgs and
 * supported_versions). */
static size_t spec_hello(uint8_t *buf, size_t cap, int grease) {
    static const uint16_t order[] = {0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017,
                                     0x002d, 0x000d, 0x0005, 0x0023, 0x0012, 0x002b,
                                     0xff01, 0x000b, 0x000a, 0x0015};
    struct ext e[20];
    size_t n = 0;
    if (grease)
        e[n++] = (struct ext){0x3a3a, NULL, 0};
    for (size_t i = 0; i < 16; i++) {
        e[n] = (struct ext){order[i], NULL, 0};
        if (order[i] == 0x0000)
            e[n] = (struct ext){0x0000, sni_data, sizeof sni_data};
        if (order[i] == 0x0010)
            e[n] = (struct ext){0x0010, alpn_h2, sizeof alpn_h2};
        if (order[i] == 0x000d)
            e[n] = (struct ext){0x000d, spec_sigs, sizeof spec_sigs};
        if (order[i] == 0x002b)
            e[n] = (struct ext){0x002b, versions13, sizeof versions13};
        n++;
    }
    if (grease)
        e[n++] = (struct ext){0xdada, (const uint8_t *)"\0", 1};
    uint16_t cs[16];
    size_t ncs = 0;
    if (grease)
        cs[ncs++] = 0x8a8a;
    memcpy(cs + ncs, spec_cs, sizeof spec_cs);
    ncs += 15;
    return build(buf, cap, cs, ncs, e, n, 0);
}

static void test_spec_example(void **state) {
    (void)state;
    uint8_t h[1024];
    for (int g = 0; g < 2; g++) { /* GREASE anywhere changes nothing */
        size_t len = spec_hello(h, sizeof h, g);
        check(h, len, "t13d1516h2_8daaf6152771_e5627efa2ab1");
        check_raw(h, len,
                  "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,"
                  "cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,"
                  "ff01_0403,0804,0401,0503,0805,0501,0806,0601");
    }
}

/* The spec's ALPN examples ("ALPN Extension Value") and its "00" and one-character rules. */
static void test_alpn_rules(void **state) {
    (void)state;
    static const struct {
        const char *name; /* bytes of the first protocol, as hex */
        const char *want;
    } cases[] = {{"ab", "ab"},       {"abcd", "ad"},     {"30ab", "3b"},
                 {"3031abcd", "3d"}, {"30abcd31", "01"}, {"6832", "h2"},
                 {"68", "hh"},       {"", "00"},         {"687474702f312e31", "h1"},
                 {"2f", "2f"},       {"41", "AA"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t name[16], data[32], h[512];
        size_t n = strlen(cases[i].name) / 2;
        for (size_t k = 0; k < n; k++)
            sscanf(cases[i].name + 2 * k, "%2hhx", &name[k]);
        data[0] = 0;
        data[1] = (uint8_t)(n + 1);
        data[2] = (uint8_t)n;
        memcpy(data + 3, name, n);
        struct ext e[] = {{0x0010, data, n + 3}};
        size_t len = build(h, sizeof h, spec_cs, 1, e, 1, 0);
        char out[JA4_LEN + 1];
        assert_int_equal(ja4_from_hello(h, len, out), 0);
        char got[3] = {out[8], out[9], 0};
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("ALPN %s: %s, want %s", cases[i].name, got, cases[i].want);
    }
    /* an ALPN extension with an empty list, and none at all */
    uint8_t h[512];
    static const uint8_t empty[] = {0, 0};
    struct ext e[] = {{0x0010, empty, 2}};
    check(h, build(h, sizeof h, spec_cs, 1, e, 1, 0), "t12i010100_0f2cb44170f4_000000000000");
    check(h, build(h, sizeof h, spec_cs, 1, NULL, 0, 0), "t12i010000_0f2cb44170f4_000000000000");
}

/* Version: supported_versions' highest non-GREASE value, else legacy_version; empty lists. */
static void test_version_and_empty_lists(void **state) {
    (void)state;
    uint8_t h[512];
    char out[JA4_LEN + 1];
    static const uint8_t only_grease[] = {2, 0x7a, 0x7a};
    static const uint8_t v12_13[] = {6, 0x03, 0x03, 0x2a, 0x2a, 0x03, 0x04};
    static const uint8_t v10[] = {2, 0x03, 0x01};
    struct ext e1[] = {{0x002b, v12_13, sizeof v12_13}};
    assert_int_equal(ja4_from_hello(h, build(h, sizeof h, spec_cs, 15, e1, 1, 0), out), 0);
    assert_memory_equal(out, "t13i1501", 8);
    struct ext e2[] = {{0x002b, v10, sizeof v10}};
    assert_int_equal(ja4_from_hello(h, build(h, sizeof h, spec_cs, 15, e2, 1, 0), out), 0);
    assert_memory_equal(out, "t10i1501", 8);
    struct ext e3[] = {{0x002b, only_grease, sizeof only_grease}};
    assert_int_equal(ja4_from_hello(h, build(h, sizeof h, spec_cs, 15, e3, 1, 0), out), 0);
    assert_memory_equal(out, "t00i1501", 8);
    /* no extension block at all (a TLS 1.2-style hello): legacy 0303 */
    check(h, build(h, sizeof h, spec_cs, 15, NULL, 0, 1), "t12i150000_8daaf6152771_000000000000");
    /* no cipher suites: b is twelve zeros, not the hash of nothing */
    check(h, build(h, sizeof h, NULL, 0, e1, 1, 0), "t13i000100_000000000000_b9a491fefe05");
    check_raw(h, build(h, sizeof h, NULL, 0, e1, 1, 0), "t13i000100__002b");
    /* only SNI and ALPN: the sorted list is empty, so c is zeros; both still counted */
    struct ext e4[] = {{0x0000, sni_data, sizeof sni_data}, {0x0010, alpn_h2, sizeof alpn_h2}};
    check(h, build(h, sizeof h, spec_cs, 15, e4, 2, 0), "t12d1502h2_8daaf6152771_000000000000");
    /* signature_algorithms with GREASE: dropped; an empty one leaves no "_" */
    static const uint8_t sigs[] = {0, 6, 0x1a, 0x1a, 0x04, 0x03, 0x08, 0x04};
    static const uint8_t nosigs[] = {0, 0};
    struct ext e5[] = {{0x000d, sigs, sizeof sigs}};
    check_raw(h, build(h, sizeof h, spec_cs, 1, e5, 1, 0), "t12i010100_1301_000d_0403,0804");
    struct ext e6[] = {{0x000d, nosigs, sizeof nosigs}};
    check_raw(h, build(h, sizeof h, spec_cs, 1, e6, 1, 0), "t12i010100_1301_000d");
}

/* More than 99 ciphers or extensions print 99; hellos this large take the heap path. */
static void test_counts_cap(void **state) {
    (void)state;
    static uint8_t h[8192];
    uint16_t cs[600];
    struct ext e[300];
    for (size_t i = 0; i < 600; i++)
        cs[i] = (uint16_t)(0xff00 - i); /* 0xfe00.. range is counted too (spec) */
    for (size_t i = 0; i < 300; i++)
        e[i] = (struct ext){(uint16_t)(0x1000 + i), NULL, 0};
    char out[JA4_LEN + 1], raw[8192];
    size_t len = build(h, sizeof h, cs, 600, e, 300, 0);
    assert_int_equal(ja4_from_hello(h, len, out), 0);
    assert_memory_equal(out, "t12i9999", 8);
    int n = ja4_raw_from_hello(h, len, raw, sizeof raw);
    assert_int_equal(n, 10 + 1 + 600 * 5 - 1 + 1 + 300 * 5 - 1);
    assert_memory_equal(raw + 11, "fca9,fcaa,", 10);            /* sorted ascending */
    assert_int_equal(ja4_raw_from_hello(h, len, raw, 100), -1); /* does not fit */
    assert_string_equal(raw, "");
}

/* ---- (b) the project's own test client (tests/tools/tlsclient.h) ---- */

/*
 * tlsc_build_hello's fixed lists, by hand (GREASE values are never counted nor hashed):
 *   version    supported_versions = G 0304 0303 -> 13; SNI present -> d
 *   ciphers    1301 1302 1303 c02b c02f c02c c030 cca9 cca8 c013 c014 009c 009d 002f 0035
 *              -> 15, the spec example's suites: b = 8daaf6152771
 *   extensions 0000 0005 000a 000b 000d 0010 0012 0017 001b 0023 002b 002d 0033 44cd fe0d
 *              ff01 -> 16 (the 0015 padding is only added under 513 bytes; with the ML-KEM
 *              key share the hello is ~1.8 KB); ALPN h2, http/1.1 -> h2
 *   c          SHA-256("0005,000a,000b,000d,0012,0017,001b,0023,002b,002d,0033,44cd,fe0d,"
 *              "ff01_0403,0804,0401,0503,0805,0501,0806,0601")[:12] = d8a2da3f94cd
 * t13d1516h2_8daaf6152771_d8a2da3f94cd is also Chrome's JA4 of 2025 (ECH, ML-KEM, ALPS 44cd).
 * tlsclient draws GREASE values and the extension order at random for every hello: 20 hellos
 * must all give this one fingerprint, also when cut into records.
 */
#define TLSCLIENT_JA4 "t13d1516h2_8daaf6152771_d8a2da3f94cd"

static void test_tlsclient(void **state) {
    (void)state;
    static uint8_t h[TLSC_HELLO_MAX], cut[TLSC_HELLO_MAX + 5 * 32];
    static const uint8_t key[16] = {1, 2, 3};
    for (int i = 0; i < 20; i++) {
        size_t len = tlsc_build_hello(h, sizeof h, key, "www.example.com", 1700000000u + i);
        assert_true(len > 0);
        check(h, len, TLSCLIENT_JA4);
        size_t n = tlsc_cut_hello(h, len, 1 + i % 8, cut, sizeof cut);
        assert_true(n > 0);
        check(cut, n, TLSCLIENT_JA4);
    }
}

/* ---- (c) vectors: TDLib's captured hello and the examples, with Python's answers ---- */

/* $MTPROXY_VECTORS/ja4/name (the caller frees). */
static uint8_t *read_vector(const char *name, size_t *len) {
    char path[256];
    snprintf(path, sizeof path, "ja4/%s", name);
    char *v = testutil_vector(path, len);
    if (!v)
        fail_msg("cannot read vector %s", path);
    return (uint8_t *)v;
}

/*
 * tests/vectors/ja4/expected.txt: "NAME JA4 JA4_r" per hello, written by tests/tools/ja4.py (a
 * separate Python implementation of the spec): both must agree on every vector.
 *   tdlib-1.8.69.hello       what TDLib 1.8.69 (PyPI tdjson) sent to an ee-secret proxy on
 *                            127.0.0.1 (captured in a network namespace with only lo)
 *   tdlib-1.8.69-cut3.hello  the same message cut into 3 records
 *   spec.hello, sigalg-grease.hello  the public examples as ja4.py builds them
 *   tlsclient.hello          one hello of tests/tools/tlsclient.h
 */
static void test_vectors(void **state) {
    (void)state;
    size_t tlen;
    char *copy = (char *)read_vector("expected.txt", &tlen); /* NUL-terminated */
    int n = 0, tdlib = 0;
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == 0)
            continue;
        char name[128], want[JA4_LEN + 1], want_r[4096];
        assert_int_equal(sscanf(line, "%127s %36s %4095s", name, want, want_r), 3);
        size_t len;
        uint8_t *h = read_vector(name, &len);
        check(h, len, want);
        check_raw(h, len, want_r);
        free(h);
        tdlib += strncmp(name, "tdlib", 5) == 0;
        n++;
    }
    free(copy);
    assert_true(n >= 5 && tdlib >= 1);
}

/* ---- malformed input ---- */

static void test_malformed(void **state) {
    (void)state;
    static uint8_t h[TLSC_HELLO_MAX], b[TLSC_HELLO_MAX];
    static const uint8_t key[16] = {0};
    char out[JA4_LEN + 1];
    size_t len = tlsc_build_hello(h, sizeof h, key, "a.example", 0);
    assert_true(len > 0);
    /* every strict prefix is incomplete; bytes after the hello are ignored */
    for (size_t l = 0; l < len; l++) {
        uint8_t *p = malloc(l ? l : 1); /* exact size: ASan catches an over-read */
        memcpy(p, h, l);
        assert_int_equal(ja4_from_hello(p, l, out), -1);
        assert_string_equal(out, "");
        free(p);
    }
    memcpy(b, h, len);
    memcpy(b + len, "\x17\x03\x03\x00\x01\x00", 6);
    check(b, len + 6, TLSCLIENT_JA4);
    assert_int_equal(ja4_from_hello(NULL, 0, out), -1);
    /* wrong record type, record version, message type; length fields overrunning */
    static const struct {
        size_t off;
        uint8_t val;
    } flips[] = {{0, 0x17}, {1, 0x02}, {2, 0x05}, {5, 0x02}, {6, 0x01}};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(b, h, len);
        b[flips[i].off] = flips[i].val;
        assert_int_equal(ja4_from_hello(b, len, out), -1);
    }
    /* the session id length, the cipher list length and the extension block length */
    memcpy(b, h, len);
    b[5 + 4 + 2 + 32] = 33;
    assert_int_equal(ja4_from_hello(b, len, out), -1);
    memcpy(b, h, len);
    b[5 + 4 + 2 + 32 + 1 + 32] = 0xff;
    assert_int_equal(ja4_from_hello(b, len, out), -1);
    memcpy(b, h, len);
    b[5 + 4 + 2 + 32 + 1 + 32 + 2 + 32 + 2] ^= 0x01; /* extension block length */
    assert_int_equal(ja4_from_hello(b, len, out), -1);
    /* an odd cipher list */
    uint8_t s[512];
    size_t sl = build(s, sizeof s, spec_cs, 2, NULL, 0, 0);
    s[5 + 4 + 2 + 32 + 1 + 1] = 3;
    assert_int_equal(ja4_from_hello(s, sl, out), -1);
    /* malformed sigalgs, versions, ALPN */
    static const uint8_t bad_sig[] = {0, 3, 4, 3, 8};
    static const uint8_t bad_ver[] = {3, 3, 4, 3};
    static const uint8_t bad_alpn[] = {0, 4, 5, 'h', '2', 'x'};
    struct ext e1[] = {{0x000d, bad_sig, sizeof bad_sig}};
    struct ext e2[] = {{0x002b, bad_ver, sizeof bad_ver}};
    struct ext e3[] = {{0x0010, bad_alpn, sizeof bad_alpn}};
    assert_int_equal(ja4_from_hello(s, build(s, sizeof s, spec_cs, 1, e1, 1, 0), out), -1);
    assert_int_equal(ja4_from_hello(s, build(s, sizeof s, spec_cs, 1, e2, 1, 0), out), -1);
    assert_int_equal(ja4_from_hello(s, build(s, sizeof s, spec_cs, 1, e3, 1, 0), out), -1);
    /* more than 32 records */
    static uint8_t many[TLSC_HELLO_MAX + 5 * 40];
    assert_int_equal(ja4_from_hello(many, tlsc_cut_hello(h, len, 33, many, sizeof many), out), -1);
    check(many, tlsc_cut_hello(h, len, 32, many, sizeof many), TLSCLIENT_JA4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_alpn_rules),
        cmocka_unit_test(test_version_and_empty_lists),
        cmocka_unit_test(test_counts_cap),
        cmocka_unit_test(test_tlsclient),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
