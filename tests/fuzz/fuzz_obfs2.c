/* fuzz_obfs2.c: libFuzzer target for the obfuscated2 header parser (obfs2_parse) and builder. */
#include "proto/obfs2.h"

#include "fuzz_common.h"
#include "fuzz_secrets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A few secrets of each kind, in the order the proxy tries them. The first is the secret of
 * the mtg snapshot vectors (PROTOCOL.md 9.1), so those real headers make good seeds. */
static const char *const secret_texts[] = {
    "367a189aee18fa31c190054efd4a8e95",
    "dd00112233445566778899aabbccddeeff",
    "ee0123456789abcdef0123456789abcdef"
    "6578616d706c652e636f6d", /* example.com */
    "000102030405060708090a0b0c0d0e0f",
    "ddffeeddccbbaa99887766554433221100",
    "eefedcba9876543210fedcba9876543210"
    "612e6272", /* a.br */
};
#define NSECRETS (sizeof secret_texts / sizeof secret_texts[0])

static struct secret secrets[NSECRETS];

static void setup(void) {
    fuzz_secrets_setup("fuzz_obfs2", secret_texts, secrets, NSECRETS);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static unsigned tag_bit(uint32_t tag) {
    return tag == OBFS2_TAG_ABRIDGED       ? OBFS2_ALLOW_ABRIDGED
           : tag == OBFS2_TAG_INTERMEDIATE ? OBFS2_ALLOW_INTERMEDIATE
           : tag == OBFS2_TAG_PADDED       ? OBFS2_ALLOW_PADDED
                                           : 0;
}

static unsigned kind_bits(enum secret_kind k) {
    return k == SECRET_PLAIN ? OBFS2_ALLOW_ALL : k == SECRET_DD ? OBFS2_ALLOW_PADDED : 0;
}

/* An accepted header must really decrypt, under the secret reported, to the tag and dc
 * reported, with keys equal to obfs2_derive's. Checked independently of obfs2_parse. */
static void check_hello(const uint8_t wire[OBFS2_HDR_LEN], unsigned allowed,
                        const struct obfs2_hello *h) {
    FUZZ_CHECK(h->secret_index >= 0 && (size_t)h->secret_index < NSECRETS);
    const struct secret *s = &secrets[h->secret_index];
    FUZZ_CHECK(tag_bit(h->tag) & allowed & kind_bits(s->kind));
    struct obfs2_keys k;
    obfs2_derive(wire, s->key, &k);
    FUZZ_CHECK(!memcmp(&k, &h->keys, sizeof k));
    uint8_t plain[OBFS2_HDR_LEN];
    crypto_ctr_oneshot(k.fwd.key, k.fwd.iv, wire, plain, OBFS2_HDR_LEN);
    FUZZ_CHECK(le32(plain + 56) == h->tag);
    FUZZ_CHECK(h->dc == (int16_t)(uint16_t)(plain[60] | plain[61] << 8));
    FUZZ_CHECK(strcmp(obfs2_tag_name(h->tag), "unknown") != 0);
}

/*
 * Input: a mode byte, then up to 64 header bytes (zero-padded).
 *   mode bit 7 clear: the bytes are a header off the wire; parse with allowed = mode & 7.
 *   mode bit 7 set:   the bytes are a plaintext header; secret (mode >> 3) & 7 and tag
 *                     mode & 3 are written in and it is sealed like a client would, then
 *                     parsed: it must be accepted whenever that secret admits the tag.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    uint8_t hdr[OBFS2_HDR_LEN] = {0};
    memcpy(hdr, data + 1, size - 1 < OBFS2_HDR_LEN ? size - 1 : OBFS2_HDR_LEN);
    (void)obfs2_forbidden(hdr);

    struct obfs2_hello h;
    if (!(mode & 0x80)) {
        unsigned allowed = mode & 7;
        if (obfs2_parse(hdr, secrets, NSECRETS, allowed, &h) == OBFS2_OK)
            check_hello(hdr, allowed, &h);
        return 0;
    }

    static const uint32_t tags[] = {OBFS2_TAG_ABRIDGED, OBFS2_TAG_INTERMEDIATE, OBFS2_TAG_PADDED,
                                    0x12345678u};
    size_t si = ((mode >> 3) & 7) % NSECRETS;
    uint32_t tag = tags[mode & 3];
    hdr[56] = (uint8_t)tag;
    hdr[57] = (uint8_t)(tag >> 8);
    hdr[58] = (uint8_t)(tag >> 16);
    hdr[59] = (uint8_t)(tag >> 24);

    struct obfs2_keys k;
    obfs2_derive(hdr, secrets[si].key, &k);
    struct crypto_ctr *enc = crypto_ctr_new();
    FUZZ_CHECK(enc && crypto_ctr_init(enc, k.fwd.key, k.fwd.iv) == 0);
    uint8_t wire[OBFS2_HDR_LEN];
    obfs2_seal(hdr, enc, wire);
    crypto_ctr_free(enc);
    FUZZ_CHECK(!memcmp(wire, hdr, 56)); /* only tag, dc and the last two bytes are hidden */

    int admitted = (tag_bit(tag) & kind_bits(secrets[si].kind)) != 0;
    enum obfs2_status st = obfs2_parse(wire, secrets, NSECRETS, OBFS2_ALLOW_ALL, &h);
    if (admitted) {
        FUZZ_CHECK(st == OBFS2_OK);
        FUZZ_CHECK((size_t)h.secret_index <= si); /* an earlier secret may match by chance */
    }
    if (st == OBFS2_OK) {
        check_hello(wire, OBFS2_ALLOW_ALL, &h);
        if ((size_t)h.secret_index == si) {
            FUZZ_CHECK(h.tag == tag);
            FUZZ_CHECK(h.dc == (int16_t)(uint16_t)(hdr[60] | hdr[61] << 8));
        }
    }
    /* The same header with its tag's bit masked out is never accepted by that secret. */
    if (admitted &&
        obfs2_parse(wire, secrets, NSECRETS, OBFS2_ALLOW_ALL & ~tag_bit(tag), &h) == OBFS2_OK)
        FUZZ_CHECK((size_t)h.secret_index != si);

    /* The builder: tag and dc land where the parser reads them, never a forbidden start,
     * and a preset rev direction is what the DC will derive. */
    uint8_t built[OBFS2_HDR_LEN];
    struct obfs2_dir preset;
    memcpy(preset.key, hdr, sizeof preset.key);
    memcpy(preset.iv, hdr + 32, sizeof preset.iv);
    int16_t dc = (int16_t)(uint16_t)(hdr[60] | hdr[61] << 8);
    if (obfs2_build(built, tag, dc, (mode & 4) ? &preset : NULL) == 0) {
        FUZZ_CHECK(!obfs2_forbidden(built));
        FUZZ_CHECK(le32(built + 56) == tag);
        FUZZ_CHECK((int16_t)(uint16_t)(built[60] | built[61] << 8) == dc);
        if (mode & 4) {
            struct obfs2_keys raw;
            obfs2_derive(built, NULL, &raw);
            FUZZ_CHECK(!memcmp(&raw.rev, &preset, sizeof preset));
        }
    }
    return 0;
}
