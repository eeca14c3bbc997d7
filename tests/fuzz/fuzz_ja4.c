/* fuzz_ja4.c: libFuzzer target for the JA4 fingerprint of a raw ClientHello (src/proto/ja4.c). */
#include "proto/ja4.h"

#include "users/ja4stat.h"

#include "crypto/crypto.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* The first 12 hex digits of SHA-256(s[0..n)), or twelve zeros when empty says so. */
static void hash12(const char *s, size_t n, int empty, char out[12]) {
    static const char hx[] = "0123456789abcdef";
    if (empty) {
        memset(out, '0', 12);
        return;
    }
    uint8_t d[CRYPTO_SHA256_LEN];
    crypto_sha256(s, n, NULL, 0, d);
    for (int i = 0; i < 6; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
}

/* Checks the shape of a JA4 and that it is the hash of the JA4_r raw[0..rn). */
static void check_pair(const char *j, const char *raw, size_t rn) {
    FUZZ_CHECK(strlen(j) == JA4_LEN && j[0] == 't' && j[10] == '_' && j[23] == '_');
    FUZZ_CHECK(strchr("0123456789sd", j[1]) && (j[3] == 'd' || j[3] == 'i'));
    for (int i = 4; i < 8; i++)
        FUZZ_CHECK(j[i] >= '0' && j[i] <= '9');
    for (int i = 11; i < JA4_LEN; i++)
        FUZZ_CHECK(i == 23 || is_hex(j[i]));
    /* raw = a _ ciphers _ exts [_ sigs]: a matches, and the hashes are of those strings */
    FUZZ_CHECK(rn >= 12 && !memcmp(raw, j, 11));
    const char *c = raw + 11, *u = memchr(c, '_', rn - 11);
    FUZZ_CHECK(u);
    char h[12];
    hash12(c, (size_t)(u - c), u == c, h);
    FUZZ_CHECK(!memcmp(h, j + 11, 12));
    size_t elen = rn - (size_t)(u + 1 - raw);
    hash12(u + 1, elen, elen == 0 || u[1] == '_', h);
    FUZZ_CHECK(!memcmp(h, j + 24, 12));
}

static char raw[1 << 17];

/* Every input's fingerprint (or "malformed") counted as the proxy counts hellos: the key gives
 * the text back, and the table stays bounded with counts summing to every input. */
static struct ja4stat tab;
static uint64_t counted;

static void count(const char *j)
{
    uint8_t key[JA4STAT_KEY_LEN];
    char back[JA4_LEN + 1];
    int k = ja4stat_key(j[0] ? j : NULL, key);
    FUZZ_CHECK(k == (j[0] ? 0 : -1));
    FUZZ_CHECK(!strcmp(ja4stat_key_str(key, back), j[0] ? j : "malformed"));
    ja4stat_add(&tab, key, (int)(counted & 1));
    counted++;
    static struct ja4stat_row rows[JA4STAT_SLOTS];
    const struct ja4stat *t = &tab;
    uint64_t total;
    FUZZ_CHECK(ja4stat_merge(&t, 1, rows, JA4STAT_SLOTS, &total) <= JA4STAT_SLOTS);
    FUZZ_CHECK(total == counted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1); /* exact size: reads past size are caught */
    FUZZ_CHECK(buf);
    if (size)
        memcpy(buf, data, size);
    char j[JA4_LEN + 1];
    int r = ja4_from_hello(buf, size, j);
    int rn = ja4_raw_from_hello(buf, size, raw, sizeof raw);
    FUZZ_CHECK(r == 0 || r == -1);
    FUZZ_CHECK((r == 0) == (rn >= 0)); /* raw fits: at most 5 characters per input byte */
    count(j);
    if (r != 0) {
        FUZZ_CHECK(j[0] == '\0' && raw[0] == '\0');
        free(buf);
        return 0;
    }
    FUZZ_CHECK((size_t)rn == strlen(raw));
    check_pair(j, raw, (size_t)rn);

    /* A hello in one record cut into records anywhere has the same fingerprint. */
    if (size >= 9 && buf[0] == 0x16) {
        size_t rlen = (size_t)buf[3] << 8 | buf[4];
        size_t msg = 4 + ((size_t)buf[6] << 16 | (size_t)buf[7] << 8 | buf[8]);
        if (rlen == msg && msg >= 3) {
            size_t a = 1 + data[size - 1] % (msg - 2), b = a + 1 + data[size / 2] % (msg - a - 1);
            size_t cuts[4] = {0, a, b, msg}, o = 0;
            uint8_t *cut = malloc(msg + 15);
            FUZZ_CHECK(cut);
            for (int i = 0; i < 3; i++) {
                size_t n = cuts[i + 1] - cuts[i];
                memcpy(cut + o, buf, 3);
                cut[o + 3] = (uint8_t)(n >> 8);
                cut[o + 4] = (uint8_t)n;
                memcpy(cut + o + 5, buf + 5 + cuts[i], n);
                o += 5 + n;
            }
            char j2[JA4_LEN + 1];
            FUZZ_CHECK(ja4_from_hello(cut, o, j2) == 0 && !strcmp(j, j2));
            free(cut);
        }
    }
    free(buf);
    return 0;
}
