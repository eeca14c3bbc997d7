/* siphash.h: SipHash (Aumasson & Bernstein, 2012), a keyed 64-bit hash for tables keyed by remote input. */
#ifndef MTPROXY_CORE_SIPHASH_H
#define MTPROXY_CORE_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* A 128-bit key: k[0] holds key bytes 0..7, k[1] bytes 8..15, both read little-endian. */
struct siphash_key {
    uint64_t k[2];
};

/* SipHash-2-4 of msg[0..len) under key (the paper's recommended rounds; its test vectors). */
uint64_t siphash24(const struct siphash_key *key, const void *msg, size_t len);

/* SipHash-1-3 (one compression, three finalisation rounds): the cheaper variant for hash
 * tables, where the output is never seen by the peer. */
uint64_t siphash13(const struct siphash_key *key, const void *msg, size_t len);

/* SipHash-1-3 of exactly 16 bytes (an IPv6 address, a replay key): the same value as
 * siphash13(key, msg, 16), unrolled for the hot path. */
uint64_t siphash13_16(const struct siphash_key *key, const uint8_t msg[16]);

/* Fills key from the kernel's random source (getrandom, else /dev/urandom when the pool is
 * not initialised yet early at boot: it never blocks). Returns 0, or -1
 * if neither answered (key then holds a clock-and-address mix: unpredictable enough to spread
 * ordinary traffic, not a secret). */
int siphash_key_random(struct siphash_key *key);

#endif
