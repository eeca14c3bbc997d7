/* fuzz_secrets.h: a target's built-in secrets, parsed once before the first input. */
#ifndef MTPROXY_FUZZ_SECRETS_H
#define MTPROXY_FUZZ_SECRETS_H

#include <stdio.h>
#include <stdlib.h>

#include "proto/secret.h"

/* Parses texts[0..n) into out[] on the first call; a bad built-in secret aborts (the target's
 * own bug, not a finding). */
static inline void fuzz_secrets_setup(const char *target, const char *const *texts,
                                      struct secret *out, size_t n) {
    static int done;
    if (done)
        return;
    for (size_t i = 0; i < n; i++) {
        char err[256];
        if (secret_parse("s", texts[i], &out[i], err, sizeof err) != 0) {
            fprintf(stderr, "%s: bad built-in secret %zu: %s\n", target, i, err);
            abort();
        }
    }
    done = 1;
}

#endif
