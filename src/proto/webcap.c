/* webcap.c: the WEB proxy v1 bridge capability: host canonicalisation, derivation, matching. */
#include "proto/webcap.h"

#include <string.h>

#include "crypto/crypto.h"

#define WEBCAP_LABEL_MAX 63 /* longest DNS label */

size_t webcap_b64url(const uint8_t *in, size_t n, char *out, size_t cap)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t len = n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    if (cap <= len) {
        if (cap > 0)
            out[0] = 0;
        return 0;
    }
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        acc = acc << 8 | in[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = alphabet[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        out[o++] = alphabet[(acc << (6 - bits)) & 63];
    out[o] = 0;
    return o;
}

/* 1 if the label l[0..n) is 1..63 of [a-z0-9-] not starting or ending with '-'. */
static int label_ok(const char *l, size_t n)
{
    if (n == 0 || n > WEBCAP_LABEL_MAX || l[0] == '-' || l[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = l[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return 0;
    }
    return 1;
}

/* 1 if the canonical (lowercased, no trailing dot) name h[0..n) passes webcap_host's rules. */
static int name_ok(const char *h, size_t n)
{
    size_t start = 0, labels = 0;
    int numeric = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && h[i] != '.')
            continue;
        if (!label_ok(h + start, i - start))
            return 0;
        numeric = 1;
        for (size_t j = start; j < i; j++)
            numeric &= h[j] >= '0' && h[j] <= '9';
        labels++;
        start = i + 1;
    }
    return labels >= 2 && !numeric;
}

int webcap_host(const char *in, size_t n, char *out, size_t cap)
{
    if (n > 0 && in[n - 1] == '.')
        n--;
    if (n == 0 || n > WEBCAP_HOST_MAX || cap <= n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        out[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    out[n] = 0;
    if (!name_ok(out, n)) {
        out[0] = 0;
        return -1;
    }
    return (int)n;
}

int webcap_secret_bytes(const struct secret *s, uint8_t out[WEBCAP_SECRET_MAX])
{
    size_t len = 0;
    if (s->kind == SECRET_DD)
        out[len++] = 0xdd;
    else if (s->kind != SECRET_PLAIN)
        return -1;
    memcpy(out + len, s->key, SECRET_KEY_LEN);
    return (int)(len + SECRET_KEY_LEN);
}

int webcap_derive(const uint8_t *key, size_t keylen, const char *host,
                  char out[WEBCAP_LEN + 1])
{
    char h[WEBCAP_HOST_MAX + 1];
    int hlen = webcap_host(host, strlen(host), h, sizeof h);
    if (hlen < 0) {
        out[0] = 0;
        return -1;
    }
    const struct crypto_span msg[2] = {{WEBCAP_LABEL, sizeof WEBCAP_LABEL - 1},
                                       {h, (size_t)hlen}};
    uint8_t mac[CRYPTO_SHA256_LEN];
    crypto_hmac_sha256_spans(key, keylen, msg, 2, mac);
    webcap_b64url(mac, sizeof mac, out, WEBCAP_LEN + 1);
    return 0;
}

int webcap_match(const char *p, size_t n, const char cap[WEBCAP_LEN + 1])
{
    if (n != WEBCAP_LEN)
        return 0;
    return crypto_memeq(p, cap, WEBCAP_LEN);
}

int webcap_find(const char *p, size_t n, const char (*caps)[WEBCAP_LEN + 1], size_t count)
{
    int found = -1;
    for (size_t i = 0; i < count; i++) {
        int eq = webcap_match(p, n, caps[i]);
        found = eq ? (int)i : found;
    }
    return found;
}
