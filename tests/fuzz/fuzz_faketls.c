/* fuzz_faketls.c: libFuzzer target for the FakeTLS ClientHello reader, its check and the reply. */
#include "proto/faketls.h"

#include "crypto/crypto.h"
#include "fuzz_common.h"
#include "fuzz_secrets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ee secrets tried in order; the first is the key of the MTG sample hellos (seeds). */
static const char *const secret_texts[] = {
    "ee367a189aee18fa31c190054efd4a8e95"
    "73746f726167652e676f6f676c65617069732e636f6d",
    "0123456789abcdef0123456789abcdef", /* plain: skipped by verify */
    "ee000102030405060708090a0b0c0d0e0f"
    "6578616d706c652e636f6d", /* example.com */
};
#define NSECRETS (sizeof secret_texts / sizeof secret_texts[0])
static struct secret secrets[NSECRETS];

static void setup(void) {
    fuzz_secrets_setup("fuzz_faketls", secret_texts, secrets, NSECRETS);
}

static enum faketls_status parse_copy(const uint8_t *data, size_t len, struct faketls_hello *h) {
    uint8_t *buf = malloc(len ? len : 1); /* exact size: reads past len are caught */
    FUZZ_CHECK(buf);
    if (len)
        memcpy(buf, data, len);
    enum faketls_status st = faketls_hello_parse(buf, len, h);
    free(buf);
    return st;
}

/* What any verdict must look like. */
static void check_verdict(enum faketls_status st, const struct faketls_hello *h, size_t len) {
    if (st == FAKETLS_NEED_MORE) {
        FUZZ_CHECK(h->need >= 1 && len + h->need <= FAKETLS_HELLO_BUF_MAX);
    } else if (st == FAKETLS_BAD) {
        FUZZ_CHECK(h->reason != FAKETLS_R_NONE && faketls_reason_name(h->reason) != NULL);
    } else {
        FUZZ_CHECK(st == FAKETLS_OK);
        FUZZ_CHECK(h->consumed <= len && h->msg_len <= FAKETLS_HELLO_MSG_MAX);
        FUZZ_CHECK(h->nfrags >= 1 && h->nfrags <= FAKETLS_HELLO_MAX_RECORDS);
        size_t sum = 0, end = 0;
        for (unsigned i = 0; i < h->nfrags; i++) {
            FUZZ_CHECK(h->frags[i].len >= 1 && h->frags[i].off >= end + FAKETLS_RECORD_HDR_LEN);
            end = (size_t)h->frags[i].off + h->frags[i].len;
            sum += h->frags[i].len;
        }
        FUZZ_CHECK(end == h->consumed && sum == h->msg_len);
        FUZZ_CHECK(h->random_off == SIZE_MAX || h->random_off + FAKETLS_RANDOM_LEN <= len);
        FUZZ_CHECK(h->client.sid_len <= FAKETLS_SID_MAX);
        FUZZ_CHECK(h->client.cipher_suite >= 0x1301 && h->client.cipher_suite <= 0x1303);
        FUZZ_CHECK(h->nsni <= FAKETLS_SNI_NAMES);
        for (unsigned i = 0; i < h->nsni; i++) {
            FUZZ_CHECK(fuzz_terminated(h->sni[i], sizeof h->sni[i]) && h->sni[i][0]);
            FUZZ_CHECK(faketls_hello_has_sni(h, h->sni[i]) == 1);
        }
    }
}

/* The hello message as the client signed it: payloads joined, the random zeroed. */
static size_t joined_msg(const uint8_t *buf, const struct faketls_hello *h, uint8_t *msg) {
    size_t n = 0;
    for (unsigned i = 0; i < h->nfrags; i++) {
        memcpy(msg + n, buf + h->frags[i].off, h->frags[i].len);
        n += h->frags[i].len;
    }
    memset(msg + 6, 0, FAKETLS_RANDOM_LEN);
    return n;
}

/* Signs the hello in buf (single-random case) with secret si at time ts, as a client does. */
static void sign(uint8_t *buf, const struct faketls_hello *h, size_t si, uint32_t ts) {
    static uint8_t msg[4 + FAKETLS_HELLO_MSG_MAX], signed_bytes[5 + FAKETLS_HELLO_MSG_MAX];
    size_t n = joined_msg(buf, h, msg);
    signed_bytes[0] = FAKETLS_TYPE_HANDSHAKE;
    signed_bytes[1] = h->record_version[0];
    signed_bytes[2] = h->record_version[1];
    signed_bytes[3] = (uint8_t)(n >> 8);
    signed_bytes[4] = (uint8_t)n;
    memcpy(signed_bytes + 5, msg, n);
    uint8_t mac[CRYPTO_SHA256_LEN];
    crypto_hmac_sha256(secrets[si].key, SECRET_KEY_LEN, signed_bytes, 5 + n, mac);
    uint8_t *r = buf + h->random_off;
    memcpy(r, mac, 28);
    for (int i = 0; i < 4; i++)
        r[28 + i] = mac[28 + i] ^ (uint8_t)(ts >> (8 * i));
}

/* The reply: its length, its three records, and a digest the client would accept. */
static void check_reply(const struct faketls_hello *h, const uint8_t *data, size_t size) {
    uint8_t pub[32] = {0};
    memcpy(pub, data, size < 32 ? size : 32);
    size_t app = 1 + (size ? data[size - 1] * 64u : 0);
    struct faketls_reply rep = {
        .order = (enum faketls_ext_order)(size & 1), .app_data_len = app, .x25519_pub = pub};
    static uint8_t out[4096 + 64 + 20000];
    size_t want = faketls_server_hello_len(h->client.sid_len, app);
    FUZZ_CHECK(want <= sizeof out);
    FUZZ_CHECK(faketls_server_hello(out, want - 1, secrets[0].key, &h->client, &rep) == 0);
    size_t n = faketls_server_hello(out, sizeof out, secrets[0].key, &h->client, &rep);
    FUZZ_CHECK(n == want);
    FUZZ_CHECK(out[0] == 0x16 && out[1] == 3 && out[2] == 3);
    size_t hs = (size_t)out[3] << 8 | out[4];
    FUZZ_CHECK(5 + hs + 6 + 5 + app == n);
    FUZZ_CHECK(!memcmp(out + 5 + hs, "\x14\x03\x03\x00\x01\x01", 6));
    const uint8_t *ad = out + 5 + hs + 6;
    FUZZ_CHECK(ad[0] == 0x17 && ad[1] == 3 && ad[2] == 3 && ((size_t)ad[3] << 8 | ad[4]) == app);
    FUZZ_CHECK(out[5 + 4 + 2 + 32] == h->client.sid_len);
    FUZZ_CHECK(!memcmp(out + 5 + 4 + 2 + 32 + 1, h->client.sid, h->client.sid_len));
    /* digest = HMAC(key, client random || reply with its random zeroed) */
    static uint8_t chk[FAKETLS_RANDOM_LEN + sizeof out];
    memcpy(chk, h->client.random, FAKETLS_RANDOM_LEN);
    memcpy(chk + FAKETLS_RANDOM_LEN, out, n);
    memset(chk + FAKETLS_RANDOM_LEN + FAKETLS_RANDOM_OFF, 0, FAKETLS_RANDOM_LEN);
    uint8_t mac[CRYPTO_SHA256_LEN];
    crypto_hmac_sha256(secrets[0].key, SECRET_KEY_LEN, chk, FAKETLS_RANDOM_LEN + n, mac);
    FUZZ_CHECK(!memcmp(mac, out + FAKETLS_RANDOM_OFF, FAKETLS_RANDOM_LEN));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    static struct faketls_hello h, h2;
    enum faketls_status st = parse_copy(data, size, &h);
    check_verdict(st, &h, size);

    /* Prefixes: a prefix of an accepted hello is never BAD nor OK, and says how much is
     * missing without overshooting; after BAD every longer prefix stays BAD. */
    size_t stop = st == FAKETLS_OK ? h.consumed : size;
    int seen_bad = 0;
    for (size_t k = 0; k < 24 && stop; k++) {
        size_t l = k < 16 ? stop * k / 16 : stop - (24 - k);
        if (l >= stop)
            continue;
        enum faketls_status s2 = parse_copy(data, l, &h2);
        check_verdict(s2, &h2, l);
        if (st == FAKETLS_OK) {
            FUZZ_CHECK(s2 == FAKETLS_NEED_MORE);
            FUZZ_CHECK(l + h2.need <= h.consumed);
        }
        if (st == FAKETLS_NEED_MORE)
            FUZZ_CHECK(s2 == FAKETLS_NEED_MORE); /* BAD is final: it cannot come back */
        if (seen_bad && k < 16)
            FUZZ_CHECK(s2 == FAKETLS_BAD);
        seen_bad |= s2 == FAKETLS_BAD && k < 16;
    }
    if (st != FAKETLS_OK)
        return 0;

    /* Bytes after the hello do not change it. */
    FUZZ_CHECK(parse_copy(data, h.consumed, &h2) == FAKETLS_OK);
    FUZZ_CHECK(h2.consumed == h.consumed && h2.msg_len == h.msg_len && h2.nfrags == h.nfrags);
    FUZZ_CHECK(!memcmp(&h2.client, &h.client, sizeof h.client));

    struct faketls_match m;
    struct faketls_time tp = {300, 300, 0};
    enum faketls_verify v = faketls_hello_verify(data, &h, secrets, NSECRETS, 1617181365, &tp, &m);
    FUZZ_CHECK(faketls_verify_name(v) != NULL);
    if (v == FAKETLS_VERIFY_BAD_MAC)
        FUZZ_CHECK(m.secret_index == -1);
    else
        FUZZ_CHECK(m.secret_index >= 0 && (size_t)m.secret_index < NSECRETS &&
                   secrets[m.secret_index].kind == SECRET_EE);

    /* Signed properly by the last ee secret, it verifies with that secret within the clock
     * window and is stale or future just outside it. */
    if (h.random_off != SIZE_MAX) {
        uint8_t *buf = malloc(size);
        FUZZ_CHECK(buf);
        memcpy(buf, data, size);
        uint32_t ts = 1700000000u + (uint32_t)size;
        sign(buf, &h, NSECRETS - 1, ts);
        FUZZ_CHECK(faketls_hello_parse(buf, size, &h2) == FAKETLS_OK);
        v = faketls_hello_verify(buf, &h2, secrets, NSECRETS, ts + 300, &tp, &m);
        FUZZ_CHECK(v == FAKETLS_VERIFY_OK && m.secret_index == NSECRETS - 1 && m.timestamp == ts);
        v = faketls_hello_verify(buf, &h2, secrets, NSECRETS, ts + 301, &tp, &m);
        FUZZ_CHECK(v == FAKETLS_VERIFY_STALE && m.secret_index == NSECRETS - 1);
        v = faketls_hello_verify(buf, &h2, secrets, NSECRETS, (int64_t)ts - 301, &tp, &m);
        FUZZ_CHECK(v == FAKETLS_VERIFY_FUTURE);
        v = faketls_hello_verify(buf, &h2, secrets, NSECRETS, 0, NULL, &m);
        FUZZ_CHECK(v == FAKETLS_VERIFY_OK);
        v = faketls_hello_verify(buf, &h2, secrets, NSECRETS - 1, ts, &tp, &m);
        FUZZ_CHECK(v == FAKETLS_VERIFY_BAD_MAC); /* without that secret: nobody's */
        free(buf);
    }
    check_reply(&h, data, size);
    return 0;
}
