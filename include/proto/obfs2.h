/* obfs2.h: the obfuscated2 64-byte init header: key derivation, parsing, building. */
#ifndef MTPROXY_PROTO_OBFS2_H
#define MTPROXY_PROTO_OBFS2_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/crypto.h"
#include "proto/secret.h"

/*
 * The header (PROTOCOL.md 1.1), plaintext as the initiator builds it:
 *
 *   0        8                              40              56      60   62   64
 *   +--------+------------------------------+---------------+-------+----+----+
 *   | noise  | key material K (32)          | IV (16)       | tag   | dc | nz |
 *   +--------+------------------------------+---------------+-------+----+----+
 *
 * On the wire: plain[0..56) || E(plain)[56..64), where E is the initiator->responder
 * stream; that stream then continues at keystream offset 64.
 */
#define OBFS2_HDR_LEN 64

#define OBFS2_TAG_ABRIDGED 0xefefefefu
#define OBFS2_TAG_INTERMEDIATE 0xeeeeeeeeu
#define OBFS2_TAG_PADDED 0xddddddddu

/* One direction's key and IV. */
struct obfs2_dir {
    uint8_t key[CRYPTO_KEY_LEN];
    uint8_t iv[CRYPTO_IV_LEN];
};

/* Both directions of one header:
 * fwd = initiator -> responder (from H[8..56)), rev = responder -> initiator (from the
 * byte-reversed H[8..56)). With a secret each key is SHA256(material || secret). */
struct obfs2_keys {
    struct obfs2_dir fwd;
    struct obfs2_dir rev;
};

/* Derives both directions from a header (wire or plain form: bytes 8..56 are the same).
 * secret may be NULL (raw keys, the DC side) or SECRET_KEY_LEN bytes. */
void obfs2_derive(const uint8_t hdr[OBFS2_HDR_LEN], const uint8_t *secret,
                  struct obfs2_keys *out);

/* Result of obfs2_parse. */
struct obfs2_hello {
    int secret_index; /* index into the secrets array */
    uint32_t tag;     /* OBFS2_TAG_* */
    int16_t dc;       /* signed DC id as sent */
    struct obfs2_keys keys;
};

enum obfs2_status { OBFS2_OK = 0, OBFS2_BAD = -1 };

/* Responder side: tries each secret (in order) on a received 64-byte header; accepts the
 * first that decrypts to a known tag allowed for that secret's kind and by allowed_tags
 * (a mask of OBFS2_ALLOW_*). On OBFS2_OK fills *out; the caller's decrypt stream must be
 * keyed with out->keys.fwd and advanced by OBFS2_HDR_LEN bytes. */
#define OBFS2_ALLOW_ABRIDGED 1
#define OBFS2_ALLOW_INTERMEDIATE 2
#define OBFS2_ALLOW_PADDED 4
#define OBFS2_ALLOW_ALL 7
enum obfs2_status obfs2_parse(const uint8_t hdr[OBFS2_HDR_LEN], const struct secret *secrets,
                              size_t nsecrets, unsigned allowed_tags, struct obfs2_hello *out);

/* Returns 1 if a plaintext header's first 8 bytes are forbidden for an initiator
 * (PROTOCOL.md 1.2: first byte 0xef; first word HEAD/POST/GET /OPTI/dddddddd/eeeeeeee/
 * 16030102; second word zero), else 0. */
int obfs2_forbidden(const uint8_t hdr[OBFS2_HDR_LEN]);

/* Initiator side: builds a plain header with the tag and dc. If rev_preset is not NULL,
 * bytes 8..56 are chosen so that the raw rev direction equals *rev_preset (fast mode);
 * otherwise they are random. Noise bytes are random and re-drawn until not forbidden.
 * Returns 0, or -1 if the random source failed. */
int obfs2_build(uint8_t plain[OBFS2_HDR_LEN], uint32_t tag, int16_t dc,
                const struct obfs2_dir *rev_preset);

/* Initiator side: turns a plain header into wire bytes using the initiator's encrypt
 * stream enc, which must be freshly keyed with the fwd keys; leaves enc at offset 64. */
void obfs2_seal(const uint8_t plain[OBFS2_HDR_LEN], struct crypto_ctr *enc,
                uint8_t wire[OBFS2_HDR_LEN]);

/* Name of a tag for logs: "abridged", "intermediate", "padded" or "unknown". */
const char *obfs2_tag_name(uint32_t tag);

#endif
