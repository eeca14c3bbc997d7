/* obfs2.c: the obfuscated2 init header: key derivation, responder parsing, initiator building. */
#include "proto/obfs2.h"

#include <string.h>

/* Offsets inside the 64-byte header (see the diagram in obfs2.h). */
#define OBFS2_KEY_OFF 8
#define OBFS2_IV_OFF 40
#define OBFS2_MATERIAL_END 56 /* end of key || iv; R = reverse(H[8..56)) */
#define OBFS2_MATERIAL_LEN (OBFS2_MATERIAL_END - OBFS2_KEY_OFF)
#define OBFS2_TAG_OFF 56
#define OBFS2_DC_OFF 60

/* Draws that all come out forbidden mean a broken random source, not bad luck
 * (the odds of one forbidden draw are about 1 in 250). */
#define OBFS2_BUILD_TRIES 64

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* One direction from 48 bytes of key || iv material: raw, or key = SHA256(material || S). */
static void derive_dir(const uint8_t material[OBFS2_MATERIAL_LEN], const uint8_t *secret,
                       struct obfs2_dir *out) {
    if (secret)
        crypto_sha256(material, CRYPTO_KEY_LEN, secret, SECRET_KEY_LEN, out->key);
    else
        memcpy(out->key, material, CRYPTO_KEY_LEN);
    memcpy(out->iv, material + CRYPTO_KEY_LEN, CRYPTO_IV_LEN);
}

void obfs2_derive(const uint8_t hdr[OBFS2_HDR_LEN], const uint8_t *secret, struct obfs2_keys *out) {
    uint8_t rev[OBFS2_MATERIAL_LEN];
    for (size_t i = 0; i < OBFS2_MATERIAL_LEN; i++)
        rev[i] = hdr[OBFS2_MATERIAL_END - 1 - i];
    derive_dir(hdr + OBFS2_KEY_OFF, secret, &out->fwd);
    derive_dir(rev, secret, &out->rev);
}

/* The OBFS2_ALLOW_* bit of a tag, or 0 for anything that is not a tag. */
static unsigned tag_bit(uint32_t tag) {
    switch (tag) {
    case OBFS2_TAG_ABRIDGED:
        return OBFS2_ALLOW_ABRIDGED;
    case OBFS2_TAG_INTERMEDIATE:
        return OBFS2_ALLOW_INTERMEDIATE;
    case OBFS2_TAG_PADDED:
        return OBFS2_ALLOW_PADDED;
    default:
        return 0;
    }
}

/* Tags a secret's kind admits on this path: plain takes all three, dd only the padded tag,
 * ee none (FakeTLS clients reach obfuscated2 through the TLS layer, not here). */
static unsigned kind_tags(enum secret_kind kind) {
    switch (kind) {
    case SECRET_PLAIN:
        return OBFS2_ALLOW_ALL;
    case SECRET_DD:
        return OBFS2_ALLOW_PADDED;
    default:
        return 0;
    }
}

enum obfs2_status obfs2_parse(const uint8_t hdr[OBFS2_HDR_LEN], const struct secret *secrets,
                              size_t nsecrets, unsigned allowed_tags, struct obfs2_hello *out) {
    for (size_t i = 0; i < nsecrets; i++) {
        const struct secret *s = &secrets[i];
        unsigned allowed = allowed_tags & kind_tags(s->kind);
        if (!allowed)
            continue;

        /* Only the tag and dc (bytes 56..61) are needed to know whether this secret is the
         * one: one keystream block (bytes 48..63), not the whole header. */
        struct obfs2_dir fwd;
        uint8_t ks[16], plain[16];
        derive_dir(hdr + OBFS2_KEY_OFF, s->key, &fwd);
        crypto_ctr_block(fwd.key, fwd.iv, 3, ks);
        for (int j = 0; j < 16; j++)
            plain[j] = hdr[48 + j] ^ ks[j];

        uint32_t tag = load_le32(plain + (OBFS2_TAG_OFF - 48));
        if (!(tag_bit(tag) & allowed))
            continue;

        out->secret_index = (int)i;
        out->tag = tag;
        out->dc = (int16_t)(uint16_t)(plain[OBFS2_DC_OFF - 48] | plain[OBFS2_DC_OFF - 47] << 8);
        obfs2_derive(hdr, s->key, &out->keys);
        return OBFS2_OK;
    }
    return OBFS2_BAD;
}

int obfs2_forbidden(const uint8_t hdr[OBFS2_HDR_LEN]) {
    static const uint32_t first_words[] = {
        0x44414548u, /* "HEAD" */
        0x54534f50u, /* "POST" */
        0x20544547u, /* "GET " */
        0x4954504fu, /* "OPTI" */
        0xddddddddu, /* padded intermediate, unobfuscated */
        0xeeeeeeeeu, /* intermediate, unobfuscated */
        0x02010316u, /* 16 03 01 02: a TLS handshake record */
    };
    if (hdr[0] == 0xef) /* abridged, unobfuscated */
        return 1;
    uint32_t first = load_le32(hdr);
    for (size_t i = 0; i < sizeof(first_words) / sizeof(first_words[0]); i++)
        if (first == first_words[i])
            return 1;
    return load_le32(hdr + 4) == 0; /* the "full" transport starts with a length and seq 0 */
}

int obfs2_build(uint8_t plain[OBFS2_HDR_LEN], uint32_t tag, int16_t dc,
                const struct obfs2_dir *rev_preset) {
    for (int tries = 0; tries < OBFS2_BUILD_TRIES; tries++) {
        if (crypto_random(plain, OBFS2_HDR_LEN) != 0)
            return -1;
        if (rev_preset) {
            /* reverse(H[8..56)) must read key || iv, so write that backwards from byte 55 */
            for (size_t i = 0; i < CRYPTO_KEY_LEN; i++)
                plain[OBFS2_MATERIAL_END - 1 - i] = rev_preset->key[i];
            for (size_t i = 0; i < CRYPTO_IV_LEN; i++)
                plain[OBFS2_MATERIAL_END - 1 - CRYPTO_KEY_LEN - i] = rev_preset->iv[i];
        }
        store_le32(plain + OBFS2_TAG_OFF, tag);
        plain[OBFS2_DC_OFF] = (uint8_t)((uint16_t)dc & 0xff);
        plain[OBFS2_DC_OFF + 1] = (uint8_t)((uint16_t)dc >> 8);
        if (!obfs2_forbidden(plain))
            return 0;
    }
    return -1;
}

void obfs2_seal(const uint8_t plain[OBFS2_HDR_LEN], struct crypto_ctr *enc,
                uint8_t wire[OBFS2_HDR_LEN]) {
    uint8_t enc_hdr[OBFS2_HDR_LEN];
    crypto_ctr_apply(enc, plain, enc_hdr, OBFS2_HDR_LEN);
    memmove(wire, plain, OBFS2_TAG_OFF);
    memcpy(wire + OBFS2_TAG_OFF, enc_hdr + OBFS2_TAG_OFF, OBFS2_HDR_LEN - OBFS2_TAG_OFF);
}

const char *obfs2_tag_name(uint32_t tag) {
    switch (tag) {
    case OBFS2_TAG_ABRIDGED:
        return "abridged";
    case OBFS2_TAG_INTERMEDIATE:
        return "intermediate";
    case OBFS2_TAG_PADDED:
        return "padded";
    default:
        return "unknown";
    }
}
