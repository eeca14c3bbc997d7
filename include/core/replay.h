/* replay.h: the replay cache all workers share: recent handshakes, bounded, sharded, locked. */
#ifndef MTPROXY_CORE_REPLAY_H
#define MTPROXY_CORE_REPLAY_H

#include <stddef.h>
#include <stdint.h>

/*
 * What the cache stores: 16-byte keys chosen by the caller (FakeTLS: client random[0..16);
 * obfuscated2: the header's bytes 8..24, which the client picks freely), each with the time
 * it was added.
 *
 * Exact, not probabilistic: the whole key is stored and compared, so there are no false
 * positives (a legit client is never taken for a replay unless it really sent the same 16
 * bytes). Memory per entry: 20 bytes (key + u32 time) in a FIFO ring plus 4-byte slots in an
 * open-addressing index at most half full: 28 bytes per entry when max_entries / shards is a
 * power of two, up to 36 otherwise; replay_memory_for() gives the exact figure. For example
 * 65536 entries (64 shards) take 1.8 MB, 1 Mi entries 28 MB.
 *
 * Time window: an entry older than `window` seconds counts as absent (a hello that old fails
 * the timestamp check anyway when window >= the allowed clock skew) and its space is reused.
 *
 * Full: the oldest entry of the shard is evicted (FIFO). So a replay older than roughly
 * max_entries later insertions passes this cache even inside the window — size max_entries
 * for the handshake rate times the window (e.g. 100 handshakes/s x 1200 s = 120 000), and let
 * the timestamp check close the rest. Keys are spread over `shards` independent FIFOs of
 * max_entries / shards each, so "max_entries later insertions" varies by about
 * +-sqrt(max_entries * shards) (3% at 65536 entries and 64 shards).
 *
 * Concurrency: one lock per shard (shard and index slot picked by SipHash-1-3 of the key
 * under a random per-cache key, so a client cannot aim its keys at one shard or slot), each shard on
 * its own cache lines; two workers contend only when they hit the same shard at the same
 * moment (1/shards). All functions may be called from any thread, except replay_new and
 * replay_free, which must not run concurrently with any other call on the same cache.
 *
 * Add keys only for handshakes that authenticated (FakeTLS HMAC ok, obfuscated2 tag ok):
 * keys from unauthenticated bytes would let anyone flush the cache with junk.
 */

#define REPLAY_KEY_LEN 16

struct replay;

struct replay_config {
    size_t max_entries; /* 1..REPLAY_MAX_ENTRIES */
    uint32_t window;    /* seconds an entry counts (0: no time limit, FIFO only); <= INT32_MAX */
    unsigned shards;    /* power of two <= REPLAY_MAX_SHARDS, or 0 to pick one from max_entries */
};

#define REPLAY_MAX_ENTRIES ((size_t)1 << 30)
#define REPLAY_MAX_SHARDS 1024

/* Bytes a cache with this config allocates (0 if the config is invalid). */
size_t replay_memory_for(const struct replay_config *cfg);

/* Creates an empty cache. Returns NULL if the config is invalid or memory is short. */
struct replay *replay_new(const struct replay_config *cfg);

/* Frees the cache (NULL is fine). */
void replay_free(struct replay *r);

/* If key was added within the window (now - added <= window) returns 1: a replay, and the
 * entry is left as it was. Otherwise adds key with time now (evicting the oldest entry of its
 * shard if that is full) and returns 0. r == NULL (cache disabled) always returns 0.
 * now is unix time; callers on several threads may pass values a second or two apart. */
int replay_check_and_add(struct replay *r, const uint8_t key[REPLAY_KEY_LEN], uint32_t now);

/* Like replay_check_and_add, but an entry it adds is never expired by the window, only pushed
 * out by FIFO eviction: for keys that carry no time stamp of their own (obfuscated2 headers),
 * whose replay must be refused however late it comes. */
int replay_check_and_add_timeless(struct replay *r, const uint8_t key[REPLAY_KEY_LEN],
                                  uint32_t now);

/* Like replay_check_and_add but never adds: 1 if key is present within the window, else 0. */
int replay_contains(struct replay *r, const uint8_t key[REPLAY_KEY_LEN], uint32_t now);

struct replay_stats {
    uint64_t lookups; /* calls of both functions */
    uint64_t hits;    /* replays reported */
    uint64_t evicted; /* live entries pushed out because a shard was full */
    uint64_t expired; /* entries dropped or overwritten because their window passed */
    size_t entries;   /* slots in use now (may include a few expired, not yet reclaimed) */
    size_t capacity;  /* total slots (max_entries rounded up to a multiple of shards) */
    size_t memory;    /* bytes allocated */
    unsigned shards;
};

/* Sums the counters of all shards (takes each shard's lock in turn). */
void replay_stats(struct replay *r, struct replay_stats *out);

#endif
