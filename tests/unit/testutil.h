/* testutil.h: small helpers shared by the unit tests (header-only; each test is one file). */
#ifndef MTPROXY_TESTS_UNIT_TESTUTIL_H
#define MTPROXY_TESTS_UNIT_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Decodes a hex string (either case) into out, which must hold strlen(hex) / 2 bytes;
 * returns that length. Test vectors only: no validation. */
static inline size_t unhex(const char *hex, uint8_t *out) {
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 * i + j];
            v = v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        out[i] = (uint8_t)v;
    }
    return n;
}

#endif
