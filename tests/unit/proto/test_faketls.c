/* test_faketls.c: FakeTLS tests: MTG hellos, fragmented and large hellos, ServerHello, records. */
#include "proto/faketls.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#include "crypto/crypto.h"

/* ---- helpers ---- */


/* Standard-alphabet base64, padding optional. Returns the decoded length. */
static size_t unbase64(const char *s, uint8_t *out) {
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(alphabet, *s);
        assert_non_null(p);
        acc = acc << 6 | (uint32_t)(p - alphabet);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return n;
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
    /* exact-size heap copies, so valgrind / ASan see any read past the end */
    uint8_t *q = malloc(n ? n : 1);
    assert_non_null(q);
    memcpy(q, p, n);
    return q;
}

static void put16(uint8_t *p, size_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static unsigned get16(const uint8_t *p) {
    return (unsigned)p[0] << 8 | p[1];
}

static struct secret ee_secret(const char *hexkey) {
    struct secret s;
    memset(&s, 0, sizeof s);
    s.kind = SECRET_EE;
    unhex(hexkey, s.key);
    strcpy(s.domain, "storage.googleapis.com");
    return s;
}

/* ---- MTG vectors ---- */

/*
 * 9seconds/mtg, mtglib/internal/tls/fake/testdata/client-hello-*.json ("full" field, base64;
 * "time" and "cipherSuite" fields alongside). Secret (PROTOCOL.md 9.2):
 * ee 367a189aee18fa31c190054efd4a8e95 "storage.googleapis.com". Re-verified with Python.
 */
static const char mtg_key[] = "367a189aee18fa31c190054efd4a8e95";

struct mtg_hello {
    const char *name;
    uint32_t time; /* "time" */
    int ok;        /* 0 for the "bad" file */
    size_t len;
    const char *sha256; /* of the decoded bytes: pins the transcription */
    const char *b64;    /* "full" */
};

static const struct mtg_hello mtg_hellos[] = {
    {"client-hello-ok-19dfe38384b9884b.json", 1617181365, 1, 517,
     "a759967b92d6cc0a5e9091258874df8dbffebb8d088e7535f7dfcd31bde176e6",
     "FgMBAgABAAH8AwNe8I9zdoBsduFEu/SRSbLoF89k4a+y6x53n8c2wpcQ+yBK3YFna4cwWfcHa2sPWN922mOgk46D"
     "okF4uEVzIIwKrgA0EwMTARMCwCzAK8AkwCPACsAJzKnAMMAvwCjAJ8AUwBPMqACdAJwAPQA8ADUAL8AIwBIACgEA"
     "AX//AQABAAAAABsAGQAAFnN0b3JhZ2UuZ29vZ2xlYXBpcy5jb20AFwAAAA0AGAAWBAMIBAQBBQMCAwgFCAUFAQgG"
     "BgECAQAFAAUBAAAAADN0AAAAEgAAABAAMAAuAmgyBWgyLTE2BWgyLTE1BWgyLTE0CHNwZHkvMy4xBnNwZHkvMwho"
     "dHRwLzEuMQALAAIBAAAzACYAJAAdACAH/ugvH0kSUgAuwslL3UfZA3JTUfSiwrAhR6VWd2wvIgAtAAIBAQArAAkI"
     "AwQDAwMCAwEACgAKAAgAHQAXABgAGQAVAKEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"client-hello-bad-fa2e46cdb33e2a1b.json", 1617181365, 0, 517,
     "c2f09f9b8c06dc03437a557268ba443b8cbf9c46a733729dc13d411680ffcfed",
     "FgMBAgABAAH8AwNe8I9zdoBsduFEu/SRSbLoF89k4a+y6x53n8c2wpcQ+yBK3YFna4cwWfcHa2sPWN922mOgk46D"
     "okF4uEVzIIAKrgA0EwMTARMCwCzAK8AkwCPACsAJzKnAMMAvwCjAJ8AUwBPMqACdAJwAPQA8ADUAL8AIwBIACgEA"
     "AX//AQABAAAAABsAGQAAFnN0b3JhZ2UuZ29vZ2xlYXBpcy5jb20AFwAAAA0AGAAWBAMIBAQBBQMCAwgFCAUFAQgG"
     "BgECAQAFAAUA0AAAADN0AAAAEgAAABAAMAAuAmgyBWgyLTE2BWgyLTE1BWgyLTE0CHNwZHkvMy4xBnNwZHkvMwho"
     "dHRwLzEuMQALAAIBAAAzACYAJAAdACAH/ugvH0kSUgAuwslL3UfZA3JTUfSiwrAhR6VWd2wvIgAtAAIBAQArAAkI"
     "AwQDAwMCAwEACgAKAAgAHQAXABgAGQAVAKEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"client-hello-ok-grease-first.json", 1617181365, 1, 519,
     "64a508d85b936d2b1976d5249c8742a9e1bdf25f758ea637c1c9c14ceb437d2a",
     "FgMBAgIBAAH+AwPDhNoN9iD9pQp3HWiLry/Ewq8clzNE2+1FGmksRPN40SBK3YFna4cwWfcHa2sPWN922mOgk46D"
     "okF4uEVzIIwKrgA2WloTAxMBEwLALMArwCTAI8AKwAnMqcAwwC/AKMAnwBTAE8yoAJ0AnAA9ADwANQAvwAjAEgAK"
     "AQABf/8BAAEAAAAAGwAZAAAWc3RvcmFnZS5nb29nbGVhcGlzLmNvbQAXAAAADQAYABYEAwgEBAEFAwIDCAUIBQUB"
     "CAYGAQIBAAUABQEAAAAAM3QAAAASAAAAEAAwAC4CaDIFaDItMTYFaDItMTUFaDItMTQIc3BkeS8zLjEGc3BkeS8z"
     "CGh0dHAvMS4xAAsAAgEAADMAJgAkAB0AIAf+6C8fSRJSAC7CyUvdR9kDclNR9KLCsCFHpVZ3bC8iAC0AAgEBACsA"
     "CQgDBAMDAwIDAQAKAAoACAAdABcAGAAZABUAoQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"client-hello-ok-48f8a72a56f3174a.json", 1617181352, 1, 517,
     "c422e9336b8352a945edd33e2e857963b563d43f40e56f9bfe2c48522a8857e9",
     "FgMBAgABAAH8AwOhgS7feOX7NBtQoy1BtXU4cHSBcgzbLZqr2JjRBfXaiyAUaoDdkVitKWP//GXuVqaY2frgr38w"
     "raZDcclQa8/7yAA0EwMTARMCwCzAK8AkwCPACsAJzKnAMMAvwCjAJ8AUwBPMqACdAJwAPQA8ADUAL8AIwBIACgEA"
     "AX//AQABAAAAABsAGQAAFnN0b3JhZ2UuZ29vZ2xlYXBpcy5jb20AFwAAAA0AGAAWBAMIBAQBBQMCAwgFCAUFAQgG"
     "BgECAQAFAAUBAAAAADN0AAAAEgAAABAAMAAuAmgyBWgyLTE2BWgyLTE1BWgyLTE0CHNwZHkvMy4xBnNwZHkvMwho"
     "dHRwLzEuMQALAAIBAAAzACYAJAAdACBroKhykU/xB3hgIVH2mRoKv3umjYAuPQ/mcj02dvdRYwAtAAIBAQArAAkI"
     "AwQDAwMCAwEACgAKAAgAHQAXABgAGQAVAKEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"client-hello-ok-651054256093c6cd.json", 1617181352, 1, 517,
     "67b7878c4977a3a8fdf7c6c1c879e69fa39ab5f7f2a3c860149a34446956ea62",
     "FgMBAgABAAH8AwPlXmxKmuT+0UiDL7HUF4o0aEuUWSp+CAumA3sZg4DWuiCPGvh3o9c8OT4vDHdZSn3C+PxMaU7E"
     "R2tEnTJ3In34fwA0EwMTARMCwCzAK8AkwCPACsAJzKnAMMAvwCjAJ8AUwBPMqACdAJwAPQA8ADUAL8AIwBIACgEA"
     "AX//AQABAAAAABsAGQAAFnN0b3JhZ2UuZ29vZ2xlYXBpcy5jb20AFwAAAA0AGAAWBAMIBAQBBQMCAwgFCAUFAQgG"
     "BgECAQAFAAUBAAAAADN0AAAAEgAAABAAMAAuAmgyBWgyLTE2BWgyLTE1BWgyLTE0CHNwZHkvMy4xBnNwZHkvMwho"
     "dHRwLzEuMQALAAIBAAAzACYAJAAdACCu6UBqpR0p5VgzQX6m7qif+HosGk7LM4objEUgpygWTgAtAAIBAQArAAkI"
     "AwQDAwMCAwEACgAKAAgAHQAXABgAGQAVAKEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"client-hello-ok-79d01ef18a9d2621.json", 1617181365, 1, 517,
     "18d85a47ec09b2fe5a2e729c257f1b66a93e65cf8a24288505980b9448f6dc26",
     "FgMBAgABAAH8AwPzGWOU6GQOWRp8QXm+7d7Wvd9a+HwBfnjzALeEtnezNCDTS68NgqcXJkUrJ/ceUvBYYI7J4ew8"
     "WJTlRn4WzmkMBQA0EwMTARMCwCzAK8AkwCPACsAJzKnAMMAvwCjAJ8AUwBPMqACdAJwAPQA8ADUAL8AIwBIACgEA"
     "AX//AQABAAAAABsAGQAAFnN0b3JhZ2UuZ29vZ2xlYXBpcy5jb20AFwAAAA0AGAAWBAMIBAQBBQMCAwgFCAUFAQgG"
     "BgECAQAFAAUBAAAAADN0AAAAEgAAABAAMAAuAmgyBWgyLTE2BWgyLTE1BWgyLTE0CHNwZHkvMy4xBnNwZHkvMwho"
     "dHRwLzEuMQALAAIBAAAzACYAJAAdACD/0/vXjQ20rOPIPAF/32Y7LX4WNE8A8dM1D1bEc4qlXgAtAAIBAQArAAkI"
     "AwQDAwMCAwEACgAKAAgAHQAXABgAGQAVAKEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"client-hello-ok-7a5569f05b118145.json", 1617181352, 1, 517,
     "75439f73185021d64bb2551078554f1d8835125e7709db95763a5d2d1cb7900a",
     "FgMBAgABAAH8AwPONrcwtnxYZJ+xBG09Xvn61jqBsrfMo+LVLLtIEFp+DiCo+63bIypdr3MYsgj/zvZJDd3hN+qj"
     "S6gNvu2mRF8GcAA0EwMTARMCwCzAK8AkwCPACsAJzKnAMMAvwCjAJ8AUwBPMqACdAJwAPQA8ADUAL8AIwBIACgEA"
     "AX//AQABAAAAABsAGQAAFnN0b3JhZ2UuZ29vZ2xlYXBpcy5jb20AFwAAAA0AGAAWBAMIBAQBBQMCAwgFCAUFAQgG"
     "BgECAQAFAAUBAAAAADN0AAAAEgAAABAAMAAuAmgyBWgyLTE2BWgyLTE1BWgyLTE0CHNwZHkvMy4xBnNwZHkvMwho"
     "dHRwLzEuMQALAAIBAAAzACYAJAAdACBe+ItECoBgnzE4t2VyxSGV0jheXSD+z37LZCt3yto8SAAtAAIBAQArAAkI"
     "AwQDAwMCAwEACgAKAAgAHQAXABgAGQAVAKEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
     "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
};
#define N_MTG (sizeof mtg_hellos / sizeof mtg_hellos[0])
#define MTG_OK 0   /* client-hello-ok-19dfe38384b9884b.json */
#define MTG_BAD 1  /* client-hello-bad-fa2e46cdb33e2a1b.json */
#define MTG_GREASE 2 /* client-hello-ok-grease-first.json: GREASE suite before 1303 */

static size_t mtg_load(size_t i, uint8_t *out) {
    return unbase64(mtg_hellos[i].b64, out);
}

static const struct faketls_time window_5s = {5, 5, 0};

static void test_mtg_samples(void **state) {
    (void)state;
    struct secret sec = ee_secret(mtg_key);
    for (size_t i = 0; i < N_MTG; i++) {
        uint8_t raw[1024];
        size_t n = mtg_load(i, raw);
        assert_int_equal(n, mtg_hellos[i].len);
        uint8_t *buf = dup_bytes(raw, n);
        struct faketls_hello h;
        assert_int_equal(faketls_hello_parse(buf, n, &h), FAKETLS_OK);
        assert_int_equal(h.consumed, n);
        assert_int_equal(h.msg_len, n - 5);
        assert_int_equal(h.nfrags, 1);
        assert_int_equal(h.random_off, FAKETLS_RANDOM_OFF);
        assert_memory_equal(h.client.random, buf + 11, 32);
        assert_int_equal(h.client.sid_len, 32);
        assert_int_equal(buf[43], 0x20);
        assert_memory_equal(h.client.sid, buf + 44, 32);
        assert_int_equal(h.client.cipher_suite, 0x1303); /* cipherSuite 4867 in every file */
        assert_int_equal(h.record_version[0], 3);
        assert_int_equal(h.record_version[1], 1);
        assert_int_equal(h.nsni, 1);
        assert_string_equal(h.sni[0], "storage.googleapis.com");
        assert_true(faketls_hello_has_sni(&h, "Storage.GoogleAPIs.com"));
        assert_false(faketls_hello_has_sni(&h, "storage.googleapis.co"));
        assert_false(faketls_hello_has_sni(&h, "storage.googleapis.com."));

        struct faketls_match m;
        enum faketls_verify v =
            faketls_hello_verify(buf, &h, &sec, 1, mtg_hellos[i].time, &window_5s, &m);
        if (mtg_hellos[i].ok) {
            assert_int_equal(v, FAKETLS_VERIFY_OK);
            assert_int_equal(m.secret_index, 0);
            assert_int_equal(m.timestamp, mtg_hellos[i].time);
            assert_int_equal(m.skew, 0);
        } else {
            assert_int_equal(v, FAKETLS_VERIFY_BAD_MAC);
            assert_int_equal(m.secret_index, -1);
        }
        free(buf);
    }
}

/* The embedded base64 decodes to exactly the bytes of the JSON files (SHA-256 computed from
 * them), and the "bad" file differs from ok-19dfe... in three bytes. */
static void test_mtg_transcription(void **state) {
    (void)state;
    for (size_t i = 0; i < N_MTG; i++) {
        uint8_t raw[1024], digest[32], want[32];
        size_t n = mtg_load(i, raw);
        assert_int_equal(n, mtg_hellos[i].len);
        crypto_sha256(raw, n, NULL, 0, digest);
        unhex(mtg_hellos[i].sha256, want);
        assert_memory_equal(digest, want, 32);
    }
    uint8_t a[1024], b[1024];
    size_t na = mtg_load(MTG_OK, a), nb = mtg_load(MTG_BAD, b);
    assert_int_equal(na, nb);
    size_t diffs = 0;
    for (size_t i = 0; i < na; i++)
        diffs += a[i] != b[i];
    assert_int_equal(diffs, 3);
    static const uint8_t head[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01,
                                   0x00, 0x01, 0xfc, 0x03, 0x03};
    assert_memory_equal(a, head, sizeof head);
}

static void test_wrong_key_and_secret_list(void **state) {
    (void)state;
    uint8_t buf[1024];
    size_t n = mtg_load(MTG_OK, buf);
    struct faketls_hello h;
    assert_int_equal(faketls_hello_parse(buf, n, &h), FAKETLS_OK);
    struct faketls_match m;

    struct secret wrong = ee_secret("367a189aee18fa31c190054efd4a8e96");
    assert_int_equal(faketls_hello_verify(buf, &h, &wrong, 1, 1617181365, &window_5s, &m),
                     FAKETLS_VERIFY_BAD_MAC);
    assert_int_equal(m.secret_index, -1);

    /* the right key as a dd secret is not tried; the ee one at index 2 is */
    struct secret list[3] = {wrong, ee_secret(mtg_key), ee_secret(mtg_key)};
    list[1].kind = SECRET_DD;
    assert_int_equal(faketls_hello_verify(buf, &h, list, 3, 1617181365, &window_5s, &m),
                     FAKETLS_VERIFY_OK);
    assert_int_equal(m.secret_index, 2);
    assert_int_equal(faketls_hello_verify(buf, &h, list, 2, 1617181365, &window_5s, &m),
                     FAKETLS_VERIFY_BAD_MAC);
    assert_int_equal(faketls_hello_verify(buf, &h, list, 0, 1617181365, &window_5s, &m),
                     FAKETLS_VERIFY_BAD_MAC);

    /* one flipped bit anywhere in the signed bytes breaks the digest */
    struct secret sec = ee_secret(mtg_key);
    for (size_t i = 0; i < n; i += 37) {
        if (i >= 11 && i < 43)
            continue;
        uint8_t *c = dup_bytes(buf, n);
        c[i] ^= 0x20;
        if (faketls_hello_parse(c, n, &h) == FAKETLS_OK)
            assert_int_equal(faketls_hello_verify(c, &h, &sec, 1, 1617181365, NULL, &m),
                             FAKETLS_VERIFY_BAD_MAC);
        free(c);
    }
}

static void test_time_window(void **state) {
    (void)state;
    uint8_t buf[1024];
    size_t n = mtg_load(MTG_OK, buf);
    const int64_t ts = 1617181365;
    struct faketls_hello h;
    assert_int_equal(faketls_hello_parse(buf, n, &h), FAKETLS_OK);
    struct secret sec = ee_secret(mtg_key);
    struct faketls_match m;
    const struct faketls_time tp = {600, 120, 0};

    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, ts + 600, &tp, &m), FAKETLS_VERIFY_OK);
    assert_int_equal(m.skew, 600);
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, ts + 601, &tp, &m),
                     FAKETLS_VERIFY_STALE);
    assert_int_equal(m.secret_index, 0); /* the caller can still log which secret matched */
    assert_int_equal(m.timestamp, ts);
    assert_int_equal(m.skew, 601);
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, ts - 120, &tp, &m), FAKETLS_VERIFY_OK);
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, ts - 121, &tp, &m),
                     FAKETLS_VERIFY_FUTURE);
    assert_int_equal(m.skew, -121);
    /* today's clock against a 2021 hello */
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, 1780000000, &tp, &m),
                     FAKETLS_VERIFY_STALE);
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, 0, &tp, &m), FAKETLS_VERIFY_FUTURE);

    const struct faketls_time ignore = {0, 0, 1};
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, 1780000000, &ignore, &m),
                     FAKETLS_VERIFY_OK);
    assert_int_equal(m.timestamp, ts);
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, 0, NULL, &m), FAKETLS_VERIFY_OK);
    const struct faketls_time exact = {0, 0, 0};
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, ts, &exact, &m), FAKETLS_VERIFY_OK);
    assert_int_equal(faketls_hello_verify(buf, &h, &sec, 1, ts + 1, &exact, &m),
                     FAKETLS_VERIFY_STALE);

    assert_string_equal(faketls_verify_name(FAKETLS_VERIFY_STALE), "stale");
    assert_string_equal(faketls_verify_name(FAKETLS_VERIFY_FUTURE), "future");
    assert_string_equal(faketls_verify_name(FAKETLS_VERIFY_BAD_MAC), "bad-mac");
}

/* Feeds every prefix of wire[0..n): each shorter prefix is NEED_MORE with a need that never
 * overshoots the real end; the whole is OK with consumed == n. Also streams by `need` steps. */
static void check_every_prefix(const uint8_t *wire, size_t n) {
    struct faketls_hello h;
    for (size_t k = 0; k < n; k++) {
        uint8_t *p = dup_bytes(wire, k);
        enum faketls_status st = faketls_hello_parse(p, k, &h);
        if (st != FAKETLS_NEED_MORE)
            fail_msg("prefix %zu of %zu: status %d reason %s", k, n, st,
                     faketls_reason_name(h.reason));
        assert_true(h.need >= 1);
        assert_true(k + h.need <= n);
        free(p);
    }
    uint8_t *p = dup_bytes(wire, n);
    assert_int_equal(faketls_hello_parse(p, n, &h), FAKETLS_OK);
    assert_int_equal(h.consumed, n);
    free(p);

    size_t k = 0, steps = 0;
    for (;;) {
        p = dup_bytes(wire, k);
        enum faketls_status st = faketls_hello_parse(p, k, &h);
        free(p);
        steps++;
        if (st == FAKETLS_OK)
            break;
        assert_int_equal(st, FAKETLS_NEED_MORE);
        k += h.need;
        assert_true(k <= n);
    }
    assert_int_equal(k, n);
    assert_true(steps >= 2);
}

static void test_split_every_byte(void **state) {
    (void)state;
    uint8_t buf[1024];
    size_t n = mtg_load(MTG_OK, buf);
    check_every_prefix(buf, n);
    n = mtg_load(MTG_GREASE, buf);
    check_every_prefix(buf, n);
}

/* Re-cuts the single record rec[0..n) into records at the message offsets cuts[0..ncuts). */
static size_t fragment(const uint8_t *rec, size_t n, const size_t *cuts, size_t ncuts,
                       uint8_t *out, uint8_t version_minor) {
    const uint8_t *msg = rec + 5;
    size_t mlen = n - 5, prev = 0, o = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : mlen;
        out[o++] = 0x16;
        out[o++] = 0x03;
        out[o++] = i == 0 ? rec[2] : version_minor;
        put16(out + o, end - prev);
        o += 2;
        memcpy(out + o, msg + prev, end - prev);
        o += end - prev;
        prev = end;
    }
    return o;
}

static void test_two_records(void **state) {
    (void)state;
    uint8_t rec[1024], wire[2048];
    size_t n = mtg_load(MTG_OK, rec);
    struct secret sec = ee_secret(mtg_key);
    struct faketls_hello h;
    struct faketls_match m;
    /* every cut point of the 512-byte message, continuation record version 01 or 03 */
    for (size_t cut = 1; cut < n - 5; cut++) {
        size_t w = fragment(rec, n, &cut, 1, wire, cut % 2 ? 0x01 : 0x03);
        assert_int_equal(w, n + 5);
        uint8_t *p = dup_bytes(wire, w);
        assert_int_equal(faketls_hello_parse(p, w, &h), FAKETLS_OK);
        assert_int_equal(h.consumed, w);
        assert_int_equal(h.nfrags, 2);
        assert_int_equal(h.msg_len, n - 5);
        assert_memory_equal(h.client.random, rec + 11, 32);
        assert_memory_equal(h.client.sid, rec + 44, 32);
        assert_string_equal(h.sni[0], "storage.googleapis.com");
        if (cut > 6 && cut < 38)
            assert_int_equal(h.random_off, SIZE_MAX); /* the random straddles the cut */
        else
            assert_memory_equal(p + h.random_off, rec + 11, 32);
        assert_int_equal(faketls_hello_verify(p, &h, &sec, 1, 1617181365, &window_5s, &m),
                         FAKETLS_VERIFY_OK);
        assert_int_equal(m.timestamp, 1617181365);
        free(p);
    }
    /* a hello cut around the random into four records, fed byte by byte */
    const size_t cuts[] = {3, 10, 30};
    size_t w = fragment(rec, n, cuts, 3, wire, 0x01);
    check_every_prefix(wire, w);
    uint8_t *p = dup_bytes(wire, w);
    assert_int_equal(faketls_hello_parse(p, w, &h), FAKETLS_OK);
    assert_int_equal(h.nfrags, 4);
    assert_int_equal(faketls_hello_verify(p, &h, &sec, 1, 1617181365, &window_5s, &m),
                     FAKETLS_VERIFY_OK);
    free(p);
}

static void test_fragment_rules(void **state) {
    (void)state;
    uint8_t rec[1024], wire[4096];
    size_t n = mtg_load(MTG_OK, rec);
    struct faketls_hello h;

    /* the most records allowed, then one more */
    size_t cuts[FAKETLS_HELLO_MAX_RECORDS];
    for (size_t i = 0; i < FAKETLS_HELLO_MAX_RECORDS; i++)
        cuts[i] = 1 + i;
    size_t w = fragment(rec, n, cuts, FAKETLS_HELLO_MAX_RECORDS - 1, wire, 0x01);
    assert_int_equal(faketls_hello_parse(wire, w, &h), FAKETLS_OK);
    assert_int_equal(h.nfrags, FAKETLS_HELLO_MAX_RECORDS);
    struct secret sec = ee_secret(mtg_key);
    struct faketls_match m;
    assert_int_equal(faketls_hello_verify(wire, &h, &sec, 1, 1617181365, NULL, &m),
                     FAKETLS_VERIFY_OK);
    w = fragment(rec, n, cuts, FAKETLS_HELLO_MAX_RECORDS, wire, 0x01);
    assert_int_equal(faketls_hello_parse(wire, w, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_TOO_MANY_RECORDS);

    /* the last record carries a byte past the message */
    size_t cut = 100;
    w = fragment(rec, n, &cut, 1, wire, 0x01);
    wire[w] = 0x00;
    put16(wire + 105 + 3, n - 5 - 100 + 1);
    assert_int_equal(faketls_hello_parse(wire, w + 1, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_MSG_LENGTH);
    /* ... refused from its header alone, before its payload arrives */
    assert_int_equal(faketls_hello_parse(wire, 105 + 5, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_MSG_LENGTH);
    /* same in a single record: length says one byte more than the message */
    memcpy(wire, rec, n);
    wire[n] = 0;
    put16(wire + 3, n - 5 + 1);
    assert_int_equal(faketls_hello_parse(wire, n + 1, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_MSG_LENGTH);

    /* zero-length continuation record */
    w = fragment(rec, n, &cut, 1, wire, 0x01);
    memmove(wire + 105 + 5, wire + 105, w - 105);
    memcpy(wire + 105, "\x16\x03\x01\x00\x00", 5);
    assert_int_equal(faketls_hello_parse(wire, w + 5, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_RECORD_LENGTH);

    /* continuation of another type or version */
    w = fragment(rec, n, &cut, 1, wire, 0x01);
    wire[105] = 0x17;
    assert_int_equal(faketls_hello_parse(wire, w, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_RECORD_TYPE);
    wire[105] = 0x16;
    wire[107] = 0x02;
    assert_int_equal(faketls_hello_parse(wire, w, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_RECORD_VERSION);

    /* first record of 1..3 bytes: the message length becomes known only later */
    for (size_t c = 1; c <= 4; c++) {
        w = fragment(rec, n, &c, 1, wire, 0x01);
        check_every_prefix(wire, w);
    }
}

/* ---- a hello as current Telegram clients build it (tdlib TlsInit, non-Apple layout) ---- */

struct builder {
    uint8_t *buf;
    size_t len;
    size_t scopes[8];
    int depth;
};

static void b_bytes(struct builder *b, const void *p, size_t n) {
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

static void b_hex(struct builder *b, const char *hex) {
    b->len += unhex(hex, b->buf + b->len);
}

static void b_rand(struct builder *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        b->buf[b->len++] = (uint8_t)rand();
}

static void b_zero(struct builder *b, size_t n) {
    memset(b->buf + b->len, 0, n);
    b->len += n;
}

static void b_grease(struct builder *b, uint8_t g) {
    b->buf[b->len++] = g;
    b->buf[b->len++] = g;
}

static void b_open(struct builder *b) {
    b->scopes[b->depth++] = b->len;
    b->len += 2;
}

static void b_close(struct builder *b) {
    size_t at = b->scopes[--b->depth];
    put16(b->buf + at, b->len - at - 2);
}

/* Builds a signed ClientHello record into out (>= 2048 bytes); returns its length.
 * record_minor: 01 as TD sends, or 03. ech_extra: 0..3 (ECH payload 144 + 32 * ech_extra). */
static size_t build_td_hello(uint8_t *out, const uint8_t key[16], uint32_t now,
                             const char *domain, uint8_t record_minor, int ech_extra) {
    struct builder b = {out, 0, {0}, 0};
    uint8_t g[7];
    for (int i = 0; i < 7; i++) /* GREASE: ?a?a, neighbours distinct */
        g[i] = (uint8_t)((rand() & 0xf0) | 0x0a);
    for (int i = 1; i < 7; i += 2)
        if (g[i] == g[i - 1])
            g[i] ^= 0x10;

    b.buf[b.len++] = 0x16;
    b.buf[b.len++] = 0x03;
    b.buf[b.len++] = record_minor;
    b_open(&b); /* record */
    b_hex(&b, "0100");
    b_open(&b); /* handshake body (u24 with a zero top byte) */
    b_hex(&b, "0303");
    b_zero(&b, 32);
    b_hex(&b, "20");
    b_rand(&b, 32);
    b_hex(&b, "0020");
    b_grease(&b, g[0]);
    b_hex(&b, "130113021303c02bc02fc02cc030cca9cca8c013c014009c009d002f0035");
    b_hex(&b, "0100");
    b_open(&b); /* extensions */
    b_grease(&b, g[2]);
    b_hex(&b, "0000");
    b_hex(&b, "0000"); /* server_name */
    b_open(&b);
    b_open(&b);
    b_hex(&b, "00");
    b_open(&b);
    b_bytes(&b, domain, strlen(domain));
    b_close(&b);
    b_close(&b);
    b_close(&b);
    b_hex(&b, "000500050100000000");
    b_hex(&b, "000a000c000a");
    b_grease(&b, g[4]);
    b_hex(&b, "11ec001d00170018");
    b_hex(&b, "000b00020100");
    b_hex(&b, "000d0012001004030804040105030805050108060601");
    b_hex(&b, "0010000e000c02683208687474702f312e31");
    b_hex(&b, "00120000");
    b_hex(&b, "00170000");
    b_hex(&b, "001b0003020002");
    b_hex(&b, "00230000");
    b_hex(&b, "002b000706");
    b_grease(&b, g[6]);
    b_hex(&b, "03040303");
    b_hex(&b, "002d00020101");
    b_hex(&b, "003304ef04ed"); /* key_share: GREASE, X25519MLKEM768 (1184 + 32), x25519 */
    b_grease(&b, g[4]);
    b_hex(&b, "00010011ec04c0");
    b_rand(&b, 1184 + 32);
    b_hex(&b, "001d0020");
    b_rand(&b, 32);
    b_hex(&b, "44cd00050003026832");
    b_hex(&b, "fe0d"); /* encrypted_client_hello */
    b_open(&b);
    b_hex(&b, "0000010001");
    b_rand(&b, 1);
    b_hex(&b, "0020");
    b_rand(&b, 32);
    b_open(&b);
    b_rand(&b, 144 + 32 * (size_t)ech_extra);
    b_close(&b);
    b_close(&b);
    b_hex(&b, "ff01000100");
    b_grease(&b, g[3]);
    b_hex(&b, "000100");
    b_close(&b); /* extensions */
    b_close(&b); /* handshake body */
    b_close(&b); /* record */
    assert_int_equal(b.depth, 0);

    uint8_t mac[32];
    crypto_hmac_sha256(key, 16, out, b.len, mac);
    for (int i = 0; i < 4; i++)
        mac[28 + i] ^= (uint8_t)(now >> (8 * i));
    memcpy(out + 11, mac, 32);
    return b.len;
}

static void test_large_td_hello(void **state) {
    (void)state;
    struct secret sec = ee_secret("00112233445566778899aabbccddeeff");
    const uint32_t now = 1780000000;
    uint8_t wire[4096];
    srand(42);
    for (int variant = 0; variant < 8; variant++) {
        uint8_t minor = variant & 1 ? 0x03 : 0x01;
        size_t n = build_td_hello(wire, sec.key, now - 2, "www.example-domain.com", minor,
                                  variant / 2);
        assert_true(n > 1700 && n < 2000);
        uint8_t *p = dup_bytes(wire, n);
        struct faketls_hello h;
        assert_int_equal(faketls_hello_parse(p, n, &h), FAKETLS_OK);
        assert_int_equal(h.consumed, n);
        assert_int_equal(h.client.cipher_suite, 0x1301); /* GREASE first, then 1301 */
        assert_int_equal(h.client.sid_len, 32);
        assert_int_equal(h.record_version[1], minor);
        assert_int_equal(h.nsni, 1);
        assert_string_equal(h.sni[0], "www.example-domain.com");
        struct faketls_match m;
        const struct faketls_time tp = {120, 120, 0};
        assert_int_equal(faketls_hello_verify(p, &h, &sec, 1, now, &tp, &m), FAKETLS_VERIFY_OK);
        assert_int_equal(m.timestamp, now - 2);
        assert_int_equal(m.skew, 2);
        free(p);
        if (variant < 2)
            check_every_prefix(wire, n);
    }
    /* the largest domain TD sends (182 bytes) */
    char dom[183];
    memset(dom, 'a', 182);
    dom[182] = '\0';
    for (int i = 60; i < 182; i += 61)
        dom[i] = '.';
    size_t n = build_td_hello(wire, sec.key, now, dom, 0x01, 3);
    struct faketls_hello h;
    assert_int_equal(faketls_hello_parse(wire, n, &h), FAKETLS_OK);
    assert_string_equal(h.sni[0], dom);
    assert_true(faketls_hello_has_sni(&h, dom));

    /* a TD hello cut into records by a DPI-evasion tool still verifies */
    uint8_t cutwire[4096];
    const size_t cuts[] = {50, 51, 700, 1500};
    size_t w = fragment(wire, n, cuts, 4, cutwire, 0x01);
    assert_int_equal(faketls_hello_parse(cutwire, w, &h), FAKETLS_OK);
    struct faketls_match m;
    assert_int_equal(faketls_hello_verify(cutwire, &h, &sec, 1, now, &window_5s, &m),
                     FAKETLS_VERIFY_OK);
}

/* Builds a minimal hello record from hex pieces of the message body after the random. */
static size_t mini_hello(uint8_t *out, const char *after_random) {
    size_t n = 0;
    memcpy(out, "\x16\x03\x01\x00\x00\x01\x00\x00\x00\x03\x03", 11);
    n = 11;
    memset(out + n, 0x5a, 32);
    n += 32;
    n += unhex(after_random, out + n);
    put16(out + 3, n - 5);
    put16(out + 7, n - 9);
    return n;
}

static void expect_bad(const char *after_random, enum faketls_reason r) {
    uint8_t buf[2048];
    size_t n = mini_hello(buf, after_random);
    uint8_t *p = dup_bytes(buf, n);
    struct faketls_hello h;
    enum faketls_status st = faketls_hello_parse(p, n, &h);
    if (st != FAKETLS_BAD || h.reason != r)
        fail_msg("%s: status %d reason %s, want %s", after_random, st,
                 faketls_reason_name(h.reason), faketls_reason_name(r));
    free(p);
}

static void expect_ok(const char *after_random, struct faketls_hello *h) {
    uint8_t buf[2048];
    size_t n = mini_hello(buf, after_random);
    uint8_t *p = dup_bytes(buf, n);
    enum faketls_status st = faketls_hello_parse(p, n, h);
    if (st != FAKETLS_OK)
        fail_msg("%s: status %d reason %s", after_random, st, faketls_reason_name(h->reason));
    free(p);
}

/* supported_versions offering 0304 (7 bytes); 16 zero bytes in hex */
#define SV13 "002b0003020304"
#define Z16 "00000000000000000000000000000000"

/* The domain index finds the same secret as walking the list with the SNI check, with one
 * HMAC for a hello naming a domain of one user among many, none for a foreign domain, and
 * case-insensitively. */
static void test_sni_index(void **state) {
    (void)state;
    enum { N = 500 };
    struct secret *list = calloc(N, sizeof *list);
    for (int i = 0; i < N; i++) {
        char key[33];
        snprintf(key, sizeof key, "%032x", i + 1);
        list[i] = ee_secret(key);
        snprintf(list[i].domain, sizeof list[i].domain, "u%d.example.net", i / 2);
    }
    list[7].kind = SECRET_DD; /* not ee: never in the index */
    struct faketls_sni_index x;
    assert_int_equal(faketls_sni_index_build(&x, list, N), 0);
    assert_int_equal(x.n, N - 1);
    const uint32_t now = 1780000000;
    uint8_t wire[4096];
    srand(7);
    static const int who[] = {0, 1, 201, 499, 6};
    for (size_t k = 0; k < sizeof who / sizeof who[0]; k++) {
        int i = who[k];
        char sni[64];
        snprintf(sni, sizeof sni, k == 2 ? "U%d.EXAMPLE.net" : "u%d.example.net", i / 2);
        size_t n = build_td_hello(wire, list[i].key, now, sni, 0x01, 0);
        struct faketls_hello h;
        assert_int_equal(faketls_hello_parse(wire, n, &h), FAKETLS_OK);
        struct faketls_match m1, m2;
        unsigned t1 = 0, t2 = 0;
        assert_int_equal(faketls_hello_verify_sni(wire, &h, list, N, now, &window_5s, 1, &m1, &t1),
                         FAKETLS_VERIFY_OK);
        assert_int_equal(faketls_hello_verify_index(wire, &h, list, &x, now, &window_5s, &m2, &t2),
                         FAKETLS_VERIFY_OK);
        assert_int_equal(m1.secret_index, i);
        assert_int_equal(m2.secret_index, i);
        assert_true(t2 <= 2 && t2 == t1);
    }
    /* the dd secret's domain (u3) still finds its ee neighbour only; a foreign domain: none */
    size_t n = build_td_hello(wire, list[7].key, now, "u3.example.net", 0x01, 0);
    struct faketls_hello h;
    struct faketls_match m;
    unsigned t = 0;
    assert_int_equal(faketls_hello_parse(wire, n, &h), FAKETLS_OK);
    assert_int_equal(faketls_hello_verify_index(wire, &h, list, &x, now, &window_5s, &m, &t),
                     FAKETLS_VERIFY_BAD_MAC);
    assert_int_equal(t, 1);
    n = build_td_hello(wire, list[9].key, now, "elsewhere.example.org", 0x01, 0);
    assert_int_equal(faketls_hello_parse(wire, n, &h), FAKETLS_OK);
    assert_int_equal(faketls_hello_verify_index(wire, &h, list, &x, now, &window_5s, &m, &t),
                     FAKETLS_VERIFY_BAD_MAC);
    assert_int_equal(t, 0);
    faketls_sni_index_free(&x);
    struct faketls_sni_index empty;
    assert_int_equal(faketls_sni_index_build(&empty, list, 0), 0);
    assert_int_equal(faketls_hello_verify_index(wire, &h, list, &empty, now, NULL, &m, &t),
                     FAKETLS_VERIFY_BAD_MAC);
    free(list);
}

static void test_field_rules(void **state) {
    (void)state;
    struct faketls_hello h;
    /* minimal acceptable hello: no sid, one suite, one method, supported_versions only */
    expect_ok("00" "00021301" "0100" "0007" SV13, &h);
    assert_int_equal(h.client.sid_len, 0);
    assert_int_equal(h.client.cipher_suite, 0x1301);
    assert_int_equal(h.nsni, 0);

    /* suite choice: first of 1301..1303 in client order, skipping GREASE and others */
    expect_ok("00" "000a0a0ac02b13031302cccc" "0100" "0007" SV13, &h);
    assert_int_equal(h.client.cipher_suite, 0x1303);
    expect_bad("00" "0004c02bc02f" "0100" "0007" SV13, FAKETLS_R_CIPHER);
    expect_bad("00" "0003130113" "0100" "0007" SV13, FAKETLS_R_CIPHER);
    expect_bad("00" "0000" "0100" "0007" SV13, FAKETLS_R_CIPHER);
    expect_bad("00" "00fe1301" "0100" "0007" SV13, FAKETLS_R_CIPHER);

    /* legacy_version 0303 only */
    uint8_t buf[256];
    size_t n = mini_hello(buf, "00" "00021301" "0100" "0007" SV13);
    buf[10] = 0x01;
    assert_int_equal(faketls_hello_parse(buf, n, &h), FAKETLS_BAD);
    assert_int_equal(h.reason, FAKETLS_R_HELLO_VERSION);

    /* session id: up to 32 bytes */
    expect_bad("21" Z16 Z16 "00" "00021301" "0100" "0007" SV13, FAKETLS_R_SESSION_ID);
    expect_ok("20" Z16 Z16 "00021301" "0100" "0007" SV13, &h);
    assert_int_equal(h.client.sid_len, 32);
    expect_ok("01" "ab" "00021302" "0100" "0007" SV13, &h);
    assert_int_equal(h.client.sid_len, 1);
    assert_int_equal(h.client.sid[0], 0xab);
    assert_int_equal(h.client.cipher_suite, 0x1302);

    /* compression: at least one method, inside the message */
    expect_bad("00" "00021301" "00" "0007" SV13, FAKETLS_R_COMPRESSION);
    expect_bad("00" "00021301" "0a" "0007" SV13, FAKETLS_R_COMPRESSION);

    /* extensions: the block ends the message; each extension lies inside it */
    expect_bad("00" "00021301" "0100" "0008" SV13, FAKETLS_R_EXTENSIONS);
    expect_bad("00" "00021301" "0100" "0006" SV13, FAKETLS_R_EXTENSIONS);
    expect_bad("00" "00021301" "0100" "0009" SV13 "0a", FAKETLS_R_EXTENSIONS);
    expect_bad("00" "00021301" "0100" "000b" SV13 "0a0a0001", FAKETLS_R_EXTENSIONS);
    expect_ok("00" "00021301" "0100" "000b" SV13 "0a0a0000", &h); /* empty GREASE extension */
    expect_bad("00" "00021301" "0100", FAKETLS_R_MSG_LENGTH);    /* 45 bytes: too short */
    expect_bad("00" "00021301" "0100" "0000", FAKETLS_R_NOT_TLS13);
    expect_bad("00" "00021301" "0100" "0007" "002b0003020303", FAKETLS_R_NOT_TLS13);
    expect_bad("00" "00021301" "0100" "0007" "002b0003030304", FAKETLS_R_EXTENSIONS);
    expect_bad("00" "00021301" "0100" "0006" "002b00020304", FAKETLS_R_EXTENSIONS);

    /* server_name: list_len | type | len | name */
    expect_ok("00" "00021301" "0100" "0013" "0000" "0008" "0006" "00" "0003" "616263" SV13, &h);
    assert_int_equal(h.nsni, 1);
    assert_string_equal(h.sni[0], "abc");
    expect_ok("00" "00021301" "0100" "0013" "0000" "0008" "0006" "00" "0003" "615f2d" SV13, &h);
    assert_string_equal(h.sni[0], "a_-");
    expect_bad("00" "00021301" "0100" "0013" "0000" "0008" "0006" "00" "0003" "610063" SV13,
               FAKETLS_R_SNI); /* NUL */
    expect_bad("00" "00021301" "0100" "0013" "0000" "0008" "0006" "00" "0003" "612063" SV13,
               FAKETLS_R_SNI); /* space */
    expect_bad("00" "00021301" "0100" "0013" "0000" "0008" "0006" "00" "0003" "61c3a9" SV13,
               FAKETLS_R_SNI); /* UTF-8 */
    expect_bad("00" "00021301" "0100" "0013" "0000" "0008" "0007" "00" "0003" "616263" SV13,
               FAKETLS_R_SNI); /* list length != extension length - 2 */
    expect_bad("00" "00021301" "0100" "0013" "0000" "0008" "0006" "00" "0004" "616263" SV13,
               FAKETLS_R_SNI); /* name past the list */
    expect_bad("00" "00021301" "0100" "0012" "0000" "0007" "0005" "00" "0003" "6162" SV13,
               FAKETLS_R_SNI);
    expect_bad("00" "00021301" "0100" "000d" "0000" "0002" "0000" SV13, FAKETLS_R_SNI);
    expect_bad("00" "00021301" "0100" "0010" "0000" "0005" "0003" "00" "0000" SV13,
               FAKETLS_R_SNI); /* empty name */
    expect_bad("00" "00021301" "0100" "001b"
               "0000" "0006" "0004" "00" "0001" "61" "0000" "0006" "0004" "00" "0001" "62" SV13,
               FAKETLS_R_SNI); /* two server_name extensions */
    /* several names; an entry of another type is skipped */
    expect_ok("00" "00021301" "0100" "001a" "0000" "000f" "000d"
              "00" "0001" "61" "01" "0002" "6364" "00" "0001" "65" SV13,
              &h);
    assert_int_equal(h.nsni, 2);
    assert_string_equal(h.sni[0], "a");
    assert_string_equal(h.sni[1], "e");
    assert_true(faketls_hello_has_sni(&h, "E"));
    assert_false(faketls_hello_has_sni(&h, "cd"));
    expect_bad("00" "00021301" "0100" "0021" "0000" "0016" "0014" "00000161" "00000162"
               "00000163" "00000164" "00000165" SV13,
               FAKETLS_R_SNI); /* more than FAKETLS_SNI_NAMES */
    /* the longest name allowed, and one more byte */
    char hex[2048], name[300];
    memset(name, 'x', sizeof name);
    for (size_t len = 253; len <= 254; len++) {
        int o = sprintf(hex, "00" "00021301" "0100" "%04zx" "0000" "%04zx" "%04zx" "00" "%04zx",
                        len + 9 + 7, len + 5, len + 3, len);
        for (size_t i = 0; i < len; i++)
            o += sprintf(hex + o, "%02x", (unsigned)name[i]);
        strcpy(hex + o, SV13);
        if (len == 253) {
            expect_ok(hex, &h);
            assert_int_equal(strlen(h.sni[0]), 253);
        } else {
            expect_bad(hex, FAKETLS_R_SNI);
        }
    }
    assert_string_equal(faketls_reason_name(FAKETLS_R_SNI), "sni");
}

static void test_garbage(void **state) {
    (void)state;
    struct faketls_hello h;
    static const struct {
        const char *hex;
        enum faketls_status st;
        enum faketls_reason r;
    } cases[] = {
        {"", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"16", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"1603", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"160301", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"16030302", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"47455420", FAKETLS_BAD, FAKETLS_R_RECORD_TYPE}, /* "GET " */
        {"ef", FAKETLS_BAD, FAKETLS_R_RECORD_TYPE},       /* obfuscated2 abridged */
        {"1702", FAKETLS_BAD, FAKETLS_R_RECORD_TYPE},     /* the type is judged first */
        {"1604", FAKETLS_BAD, FAKETLS_R_RECORD_VERSION},
        {"160302", FAKETLS_BAD, FAKETLS_R_RECORD_VERSION},
        {"160300", FAKETLS_BAD, FAKETLS_R_RECORD_VERSION},
        {"1603010000", FAKETLS_BAD, FAKETLS_R_RECORD_LENGTH},
        {"1603014001", FAKETLS_BAD, FAKETLS_R_RECORD_LENGTH}, /* 16385 */
        {"16030140000100", FAKETLS_NEED_MORE, FAKETLS_R_NONE}, /* 16384 is fine */
        {"160301020002", FAKETLS_BAD, FAKETLS_R_MSG_TYPE},
        {"16030102000100", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"16030102000100ff", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"16030102000100fffc", FAKETLS_BAD, FAKETLS_R_MSG_LENGTH}, /* message > 16384 */
        {"16030140000100fffc", FAKETLS_BAD, FAKETLS_R_MSG_LENGTH},
        {"160301020001000010", FAKETLS_BAD, FAKETLS_R_MSG_LENGTH}, /* message < 47 */
        {"160301020001000100", FAKETLS_BAD, FAKETLS_R_MSG_LENGTH}, /* record > message */
        {"160301010001000300", FAKETLS_NEED_MORE, FAKETLS_R_NONE}, /* record < message: ok */
        {"1603010001", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"160301000101", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"160301000102", FAKETLS_BAD, FAKETLS_R_MSG_TYPE},
        {"160301000101" "160301000100" "160301000100", FAKETLS_NEED_MORE, FAKETLS_R_NONE},
        {"160301000101" "160301000100" "160301000100" "160301000110", FAKETLS_BAD,
         FAKETLS_R_MSG_LENGTH},
        {"160301000101" "170301", FAKETLS_BAD, FAKETLS_R_RECORD_TYPE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t buf[64];
        size_t n = unhex(cases[i].hex, buf);
        uint8_t *p = dup_bytes(buf, n);
        enum faketls_status st = faketls_hello_parse(p, n, &h);
        if (st != cases[i].st || (st == FAKETLS_BAD && h.reason != cases[i].r))
            fail_msg("case %zu (%s): status %d reason %s", i, cases[i].hex, st,
                     faketls_reason_name(h.reason));
        if (st == FAKETLS_NEED_MORE)
            assert_true(h.need >= 1);
        free(p);
    }

    /* random mutations of a real hello: any verdict, but never a read out of bounds */
    uint8_t rec[1024];
    size_t n = mtg_load(MTG_OK, rec);
    srand(7);
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t *p = dup_bytes(rec, n);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++)
            p[rand() % n] = (uint8_t)rand();
        size_t len = (size_t)rand() % (n + 1);
        uint8_t *q = dup_bytes(p, len);
        enum faketls_status st = faketls_hello_parse(q, len, &h);
        assert_true(st == FAKETLS_OK || st == FAKETLS_BAD || st == FAKETLS_NEED_MORE);
        if (st == FAKETLS_OK) {
            assert_true(h.consumed <= len);
            struct secret sec = ee_secret(mtg_key);
            struct faketls_match m;
            faketls_hello_verify(q, &h, &sec, 1, 0, NULL, &m);
        }
        free(q);
        free(p);
    }
    /* random bytes that start like a handshake record */
    for (int iter = 0; iter < 5000; iter++) {
        uint8_t buf[600];
        size_t len = 5 + (size_t)rand() % 590;
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rand();
        memcpy(buf, "\x16\x03\x01", 3);
        put16(buf + 3, len - 5);
        if (len > 5)
            buf[5] = 0x01;
        if (len > 9) {
            buf[6] = 0;
            put16(buf + 7, len - 9);
        }
        uint8_t *q = dup_bytes(buf, len);
        enum faketls_status st = faketls_hello_parse(q, len, &h);
        assert_true(st == FAKETLS_OK || st == FAKETLS_BAD || st == FAKETLS_NEED_MORE);
        free(q);
    }
}

/* ---- ServerHello ---- */

/* Checks a response the way a client does (tdlib TlsInit::wait_hello_response), independently
 * of the builder: record prefixes, exactly one app-data record, and the HMAC. Returns the
 * bytes the client would take as the handshake response. */
static size_t client_check_response(const uint8_t *resp, size_t n, const uint8_t key[16],
                                    const uint8_t client_random[32]) {
    size_t o = 0;
    assert_true(n >= 5);
    assert_memory_equal(resp, "\x16\x03\x03", 3);
    o = 5 + get16(resp + 3);
    assert_true(o + 11 <= n);
    assert_memory_equal(resp + o, "\x14\x03\x03\x00\x01\x01\x17\x03\x03", 9);
    o += 11 + get16(resp + o + 9);
    assert_true(o <= n);

    uint8_t *copy = dup_bytes(resp, o);
    uint8_t got[32];
    memcpy(got, copy + 11, 32);
    memset(copy + 11, 0, 32);
    uint8_t *msg = malloc(32 + o);
    assert_non_null(msg);
    memcpy(msg, client_random, 32);
    memcpy(msg + 32, copy, o);
    uint8_t mac[32];
    crypto_hmac_sha256(key, 16, msg, 32 + o, mac);
    assert_memory_equal(mac, got, 32);
    free(msg);
    free(copy);
    return o;
}

static void test_server_hello(void **state) {
    (void)state;
    uint8_t rec[1024];
    size_t n = mtg_load(MTG_OK, rec);
    struct faketls_hello h;
    assert_int_equal(faketls_hello_parse(rec, n, &h), FAKETLS_OK);
    struct secret sec = ee_secret(mtg_key);
    uint8_t pub[32];
    memset(pub, 0x42, sizeof pub);

    const size_t lens[] = {1, 2500, 4700, 16384, FAKETLS_MAX_CIPHERTEXT};
    for (int order = 0; order < 2; order++) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t app = lens[li];
            struct faketls_reply rp = {(enum faketls_ext_order)order, app,
                                       order ? NULL : pub};
            size_t want = faketls_server_hello_len(32, app);
            assert_int_equal(want, 127 + 6 + 5 + app);
            uint8_t *out = malloc(want + 100);
            assert_non_null(out);
            memset(out + want, 0xee, 100); /* stream data after the response */
            assert_int_equal(faketls_server_hello(out, want, sec.key, &h.client, &rp), want);
            assert_int_equal(client_check_response(out, want + 100, sec.key, h.client.random),
                             want);
            /* ServerHello fields */
            assert_memory_equal(out, "\x16\x03\x03\x00\x7a\x02\x00\x00\x76\x03\x03", 11);
            assert_int_equal(out[43], 32);
            assert_memory_equal(out + 44, h.client.sid, 32);
            assert_int_equal(get16(out + 76), 0x1303);
            assert_int_equal(out[78], 0);
            assert_int_equal(get16(out + 79), 0x2e);
            const uint8_t *ks = out + 81 + (order ? 6 : 0);
            const uint8_t *sv = out + 81 + (order ? 0 : 40);
            assert_memory_equal(ks, "\x00\x33\x00\x24\x00\x1d\x00\x20", 8);
            assert_memory_equal(sv, "\x00\x2b\x00\x02\x03\x04", 6);
            if (!order)
                assert_memory_equal(ks + 8, pub, 32);
            else
                assert_memory_not_equal(ks + 8, pub, 32);
            assert_memory_equal(out + 127, "\x14\x03\x03\x00\x01\x01\x17\x03\x03", 9);
            assert_int_equal(get16(out + 136), app);
            free(out);
        }
    }

    /* a session id of any length 0..32 is echoed */
    for (uint8_t sl = 0; sl <= 32; sl += 8) {
        struct faketls_client c = h.client;
        c.sid_len = sl;
        struct faketls_reply rp = {FAKETLS_KEY_SHARE_FIRST, 100, pub};
        uint8_t out[512];
        size_t w = faketls_server_hello(out, sizeof out, sec.key, &c, &rp);
        assert_int_equal(w, faketls_server_hello_len(sl, 100));
        assert_int_equal(client_check_response(out, w, sec.key, c.random), w);
        assert_int_equal(out[43], sl);
    }

    /* refusals */
    uint8_t out[512];
    struct faketls_reply rp = {FAKETLS_KEY_SHARE_FIRST, 100, pub};
    assert_int_equal(faketls_server_hello(out, faketls_server_hello_len(32, 100) - 1, sec.key,
                                          &h.client, &rp),
                     0);
    rp.app_data_len = 0;
    assert_int_equal(faketls_server_hello(out, sizeof out, sec.key, &h.client, &rp), 0);
    rp.app_data_len = FAKETLS_MAX_CIPHERTEXT + 1;
    uint8_t *big = malloc(20000);
    assert_non_null(big);
    assert_int_equal(faketls_server_hello(big, 20000, sec.key, &h.client, &rp), 0);
    free(big);
    struct faketls_client c = h.client;
    c.sid_len = 33;
    rp.app_data_len = 100;
    assert_int_equal(faketls_server_hello(out, sizeof out, sec.key, &c, &rp), 0);

    /* two answers to the same hello differ (fresh key share and data) */
    uint8_t a[512], b[512];
    struct faketls_reply fresh = {FAKETLS_VERSIONS_FIRST, 200, NULL};
    size_t wa = faketls_server_hello(a, sizeof a, sec.key, &h.client, &fresh);
    size_t wb = faketls_server_hello(b, sizeof b, sec.key, &h.client, &fresh);
    assert_int_equal(wa, wb);
    assert_memory_not_equal(a + 95, b + 95, 32); /* key_share value */
    assert_memory_not_equal(a + 11, b + 11, 32);
}

static void test_draw_len(void **state) {
    (void)state;
    size_t lo_seen = 0, hi_seen = 0;
    for (int i = 0; i < 20000; i++) {
        size_t v = faketls_draw_len(10, 13);
        assert_true(v >= 10 && v <= 13);
        lo_seen += v == 10;
        hi_seen += v == 13;
        v = faketls_draw_len(FAKETLS_APPDATA_MIN, FAKETLS_APPDATA_MAX);
        assert_true(v >= FAKETLS_APPDATA_MIN && v <= FAKETLS_APPDATA_MAX);
    }
    assert_true(lo_seen > 4000 && hi_seen > 4000);
    assert_int_equal(faketls_draw_len(7, 7), 7);
    assert_int_equal(faketls_draw_len(9, 3), 9);
    (void)faketls_draw_len(0, SIZE_MAX);
}

/* ---- records after the handshake ---- */

/* A client stream: CCS, then app-data records of the given payload sizes; payload bytes are
 * a counter pattern. Returns the stream length; *plen gets the payload total. */
static size_t client_stream(uint8_t *out, const size_t *sizes, size_t nsizes, size_t *plen) {
    size_t o = 0, pl = 0;
    memcpy(out, "\x14\x03\x03\x00\x01\x01", 6);
    o = 6;
    for (size_t i = 0; i < nsizes; i++) {
        memcpy(out + o, "\x17\x03\x03", 3);
        put16(out + o + 3, sizes[i]);
        o += 5;
        for (size_t k = 0; k < sizes[i]; k++)
            out[o++] = (uint8_t)(pl++ * 7 + 3);
        if (i == 1) { /* a CCS in the middle is ignored too */
            memcpy(out + o, "\x14\x03\x03\x00\x01\x01", 6);
            o += 6;
        }
    }
    *plen = pl;
    return o;
}

static void expected_payload(uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(i * 7 + 3);
}

/* Deframes stream in chunks cut at the given points and compares with the payload. */
static void deframe_chunks(const uint8_t *stream, size_t n, const size_t *cuts, size_t ncuts,
                           const uint8_t *want, size_t wantlen) {
    struct faketls_deframer d;
    faketls_deframer_init(&d);
    uint8_t *got = malloc(wantlen + 1);
    assert_non_null(got);
    size_t have = 0, prev = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        uint8_t *chunk = dup_bytes(stream + prev, end - prev);
        size_t out_len = 12345;
        assert_int_equal(faketls_deframe(&d, chunk, end - prev, &out_len), FAKETLS_OK);
        assert_true(out_len <= end - prev);
        assert_true(have + out_len <= wantlen);
        memcpy(got + have, chunk, out_len);
        have += out_len;
        free(chunk);
        prev = end;
    }
    assert_int_equal(have, wantlen);
    assert_memory_equal(got, want, wantlen);
    assert_int_equal(d.left, 0);
    assert_int_equal(d.hdr_len, 0);
    free(got);
}

static void test_deframer(void **state) {
    (void)state;
    /* first record: the 64-byte obfuscated2 header plus a frame, as TD sends it */
    const size_t sizes[] = {64 + 36, 1, 2878, 5, 7};
    uint8_t stream[8192], want[8192];
    size_t plen, n = client_stream(stream, sizes, 5, &plen);
    expected_payload(want, plen);

    for (size_t cut = 0; cut <= n; cut++)
        deframe_chunks(stream, n, &cut, 1, want, plen);
    for (size_t a = 0; a < 40; a++)
        for (size_t b = a; b < 130; b += 3) {
            size_t cuts[2] = {a, b};
            deframe_chunks(stream, n, cuts, 2, want, plen);
        }
    size_t *every = malloc(n * sizeof(size_t));
    assert_non_null(every);
    for (size_t i = 0; i < n; i++)
        every[i] = i;
    deframe_chunks(stream, n, every, n, want, plen); /* one byte per call (plus an empty one) */
    free(every);

    /* the largest record accepted */
    const size_t big[] = {FAKETLS_MAX_CIPHERTEXT, 16384};
    uint8_t *s2 = malloc(40000), *w2 = malloc(40000);
    assert_non_null(s2);
    assert_non_null(w2);
    n = client_stream(s2, big, 2, &plen);
    expected_payload(w2, plen);
    size_t cut = 9000;
    deframe_chunks(s2, n, &cut, 1, w2, plen);
    free(s2);
    free(w2);
    assert_int_equal(faketls_deframe(&(struct faketls_deframer){0}, stream, 0, &plen),
                     FAKETLS_OK);
    assert_int_equal(plen, 0);
}

static void test_deframer_errors(void **state) {
    (void)state;
    static const struct {
        const char *hex;
        enum faketls_reason r;
    } cases[] = {
        {"1503030002", FAKETLS_R_RECORD_TYPE},          /* alert */
        {"1603030002", FAKETLS_R_RECORD_TYPE},          /* handshake after the handshake */
        {"1703010002", FAKETLS_R_RECORD_VERSION},
        {"1704030002", FAKETLS_R_RECORD_VERSION},
        {"1703030000", FAKETLS_R_RECORD_LENGTH},
        {"1703034101", FAKETLS_R_RECORD_LENGTH}, /* 16641 */
        {"1403030002", FAKETLS_R_CCS},
        {"1403030001" "02", FAKETLS_R_CCS},
        {"170303000161" "ff", FAKETLS_R_RECORD_TYPE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t buf[64];
        size_t n = unhex(cases[i].hex, buf);
        struct faketls_deframer d;
        faketls_deframer_init(&d);
        /* fed whole, and fed byte by byte: the error surfaces at the same byte */
        size_t out_len = 99;
        assert_int_equal(faketls_deframe(&d, buf, n, &out_len), FAKETLS_BAD);
        assert_int_equal(out_len, 0);
        assert_int_equal(d.reason, cases[i].r);
        assert_int_equal(faketls_deframe(&d, buf, 0, &out_len), FAKETLS_BAD); /* sticky */

        faketls_deframer_init(&d);
        unhex(cases[i].hex, buf);
        enum faketls_status st = FAKETLS_OK;
        for (size_t k = 0; k < n && st == FAKETLS_OK; k++)
            st = faketls_deframe(&d, buf + k, 1, &out_len);
        assert_int_equal(st, FAKETLS_BAD);
        assert_int_equal(d.reason, cases[i].r);
    }
    assert_string_equal(faketls_reason_name(FAKETLS_R_CCS), "ccs");
}

static void test_record_header(void **state) {
    (void)state;
    uint8_t hdr[FAKETLS_RECORD_HDR_LEN];
    assert_int_equal(faketls_record_header(hdr, 1), 1);
    assert_memory_equal(hdr, "\x17\x03\x03\x00\x01", 5);
    assert_int_equal(faketls_record_header(hdr, FAKETLS_MAX_PAYLOAD), 16384);
    assert_memory_equal(hdr, "\x17\x03\x03\x40\x00", 5);
    assert_int_equal(faketls_record_header(hdr, 1425), 1425);
    assert_memory_equal(hdr, "\x17\x03\x03\x05\x91", 5);

    /* what the proxy writes, the deframer (a client's view) reads back */
    uint8_t stream[64];
    faketls_record_header(stream, 10);
    memcpy(stream + 5, "0123456789", 10);
    struct faketls_deframer d;
    faketls_deframer_init(&d);
    size_t out_len;
    assert_int_equal(faketls_deframe(&d, stream, 15, &out_len), FAKETLS_OK);
    assert_int_equal(out_len, 10);
    assert_memory_equal(stream, "0123456789", 10);
}

/* ---- the crypto helpers this module added ---- */

static void test_crypto_helpers(void **state) {
    (void)state;
    /* RFC 4231 test case 6: a key longer than the block */
    uint8_t key[131], mac[32], want[32];
    memset(key, 0xaa, sizeof key);
    const char *msg = "Test Using Larger Than Block-Size Key - Hash Key First";
    unhex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", want);
    struct crypto_span s[3] = {{msg, 10}, {NULL, 0}, {msg + 10, strlen(msg) - 10}};
    crypto_hmac_sha256_spans(key, sizeof key, s, 3, mac);
    assert_memory_equal(mac, want, 32);
    /* RFC 4231 test case 2: a short key */
    unhex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", want);
    const struct crypto_span s2[2] = {{"what do ya want ", 16}, {"for nothing?", 12}};
    crypto_hmac_sha256_spans("Jefe", 4, s2, 2, mac);
    assert_memory_equal(mac, want, 32);
    /* spans == one-shot for every split of a buffer */
    uint8_t data[300];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 13);
    crypto_hmac_sha256(key, 16, data, sizeof data, want);
    for (size_t cut = 0; cut <= sizeof data; cut += 7) {
        struct crypto_span sp[2] = {{data, cut}, {data + cut, sizeof data - cut}};
        crypto_hmac_sha256_spans(key, 16, sp, 2, mac);
        assert_memory_equal(mac, want, 32);
    }

    uint8_t p1[32], p2[32], z[32] = {0};
    assert_int_equal(crypto_x25519_public(p1), 0);
    assert_int_equal(crypto_x25519_public(p2), 0);
    assert_memory_not_equal(p1, p2, 32);
    assert_memory_not_equal(p1, z, 32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtg_samples),
        cmocka_unit_test(test_mtg_transcription),
        cmocka_unit_test(test_wrong_key_and_secret_list),
        cmocka_unit_test(test_time_window),
        cmocka_unit_test(test_split_every_byte),
        cmocka_unit_test(test_two_records),
        cmocka_unit_test(test_fragment_rules),
        cmocka_unit_test(test_large_td_hello),
        cmocka_unit_test(test_sni_index),
        cmocka_unit_test(test_field_rules),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_server_hello),
        cmocka_unit_test(test_draw_len),
        cmocka_unit_test(test_deframer),
        cmocka_unit_test(test_deframer_errors),
        cmocka_unit_test(test_record_header),
        cmocka_unit_test(test_crypto_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
