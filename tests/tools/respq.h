/* respq.h: the resPQ answer to an unencrypted req_pq_multi, as the fake DC and fake ME send. */
#ifndef MTPROXY_TESTS_TOOLS_RESPQ_H
#define MTPROXY_TESTS_TOOLS_RESPQ_H

#include <string.h>
#include <time.h>

#include "crypto/crypto.h"
#include "pattern.h"

#define RESPQ_LEN (20 + 64)

/* Checks that m[0..len) is an unencrypted req_pq_multi (auth_key_id 0 | msg_id | msg_len |
 * body); exact: the message fills len (padded framing may leave up to 12 more bytes). Returns
 * NULL, or why not. */
static inline const char *respq_check(const uint8_t *m, size_t len, int exact) {
    if (len < 24)
        return "short";
    uint32_t msg_len = tp_get32(m + 16);
    if (tp_get64(m) != 0)
        return "auth_key_id_not_zero";
    if (msg_len < 20 || (size_t)msg_len + 20 > len)
        return "bad_msg_len";
    if (exact && (size_t)msg_len + 20 != len)
        return "msg_len_mismatch";
    if (tp_get32(m + 20) != 0xbe7e8ef1u)
        return "not_req_pq_multi";
    return NULL;
}

/* Writes the unencrypted resPQ message answering the req_pq_multi m (its nonce at m + 24):
 * resPQ#05162463 nonce server_nonce pq:bytes server_public_key_fingerprints:Vector<long>. */
static inline void respq_build(const uint8_t *m, uint8_t msg[RESPQ_LEN]) {
    uint8_t *b = msg + 20;
    uint64_t msg_id = ((uint64_t)time(NULL) << 32);
    uint32_t lo = 0;
    crypto_random(&lo, sizeof(lo));
    msg_id |= (lo & ~3u) | 1u; /* server answers: msg_id % 4 == 1 */
    tp_put64(msg, 0);
    tp_put64(msg + 8, msg_id);
    tp_put32(msg + 16, 64);
    tp_put32(b, 0x05162463u);
    memcpy(b + 4, m + 24, 16); /* nonce */
    crypto_random(b + 20, 16); /* server_nonce */
    static const uint8_t pq[8] = {0x17, 0xed, 0x48, 0x94, 0x1a, 0x08, 0xf9, 0x81};
    b[36] = 8; /* TL bytes: len byte, data, pad to 4 */
    memcpy(b + 37, pq, 8);
    memset(b + 45, 0, 3);
    tp_put32(b + 48, 0x1cb5c415u); /* vector */
    tp_put32(b + 52, 1);
    tp_put64(b + 56, 0xc3b42b026ce86b21ull); /* a fingerprint */
}

#endif
