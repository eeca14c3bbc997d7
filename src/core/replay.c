/* replay.c: sharded FIFO replay cache: full 16-byte keys, time window, one lock per shard. */
#include "core/replay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/siphash.h"

#define CACHE_LINE 64
/* Automatic sharding: up to this many shards, each holding at least SHARD_MIN_AUTO entries. */
#define SHARDS_AUTO_MAX 64
#define SHARD_MIN_AUTO 256

struct replay_entry {
    uint8_t key[REPLAY_KEY_LEN];
    uint32_t ts; /* when added (unix time) */
};

/*
 * One shard: a ring of cap entries in insertion order (the live ones are the `count`
 * positions before `head`) and a linear-probing index of ring positions (value pos + 1,
 * 0 = empty slot) at most half full. An index slot is deleted by backward shifting, so
 * lookups never meet tombstones. A ring position whose key has been re-added elsewhere (an
 * expired entry refreshed) is "dead": it has no index slot and just waits to be passed.
 */
struct replay_shard {
    _Alignas(CACHE_LINE) pthread_mutex_t lock;
    struct replay_entry *ring;
    uint32_t *index;
    uint32_t cap, mask;
    uint32_t head, count;
    uint64_t lookups, hits, evicted, expired;
};

struct replay {
    struct replay_shard *shards;
    unsigned nshards, shard_shift;
    uint32_t window;
    struct siphash_key key; /* random per cache: slots and shards cannot be aimed */
    size_t memory;
    void *block; /* every shard's ring and index: one anonymous mapping */
    size_t block_len;
};

static int valid_config(const struct replay_config *cfg) {
    unsigned s = cfg->shards;
    return cfg->max_entries >= 1 && cfg->max_entries <= REPLAY_MAX_ENTRIES &&
           cfg->window <= INT32_MAX && s <= REPLAY_MAX_SHARDS && (s & (s - 1)) == 0;
}

static unsigned pick_shards(const struct replay_config *cfg) {
    if (cfg->shards)
        return cfg->shards;
    unsigned s = 1;
    while (s < SHARDS_AUTO_MAX && cfg->max_entries / (s * 2) >= SHARD_MIN_AUTO)
        s *= 2;
    return s;
}

static uint32_t shard_cap(const struct replay_config *cfg, unsigned nshards) {
    return (uint32_t)((cfg->max_entries + nshards - 1) / nshards);
}

/* Index slots for cap entries: a power of two >= 2 * cap (load factor <= 1/2). */
static uint32_t index_slots(uint32_t cap) {
    uint32_t n = 2;
    while (n < 2 * (uint64_t)cap)
        n *= 2;
    return n;
}

size_t replay_memory_for(const struct replay_config *cfg) {
    if (!valid_config(cfg))
        return 0;
    unsigned n = pick_shards(cfg);
    uint32_t cap = shard_cap(cfg, n);
    return sizeof(struct replay) + (size_t)n * sizeof(struct replay_shard) +
           (size_t)n * ((size_t)cap * sizeof(struct replay_entry) +
                        (size_t)index_slots(cap) * sizeof(uint32_t));
}

/* Shard (top bits) and index slot (low bits) of a key. The obfuscated2 keys are raw header
 * bytes the client picks freely (anyone with a public secret): SipHash under a random key
 * makes their slots as spread as random ones, whatever the client picks. */
static uint64_t key_hash(const struct replay *r, const uint8_t key[REPLAY_KEY_LEN]) {
    return siphash13_16(&r->key, key);
}

struct replay *replay_new(const struct replay_config *cfg) {
    if (!valid_config(cfg))
        return NULL;
    struct replay *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->nshards = pick_shards(cfg);
    r->window = cfg->window;
    r->memory = replay_memory_for(cfg);
    unsigned bits = 0;
    while ((1u << bits) < r->nshards)
        bits++;
    r->shard_shift = 64 - bits; /* shard = top bits of the hash; 64 means "shard 0" */
    siphash_key_random(&r->key); /* on failure a clock mix: still spreads, not secret */
    r->shards = aligned_alloc(CACHE_LINE, r->nshards * sizeof(struct replay_shard));
    if (!r->shards) {
        free(r);
        return NULL;
    }
    memset(r->shards, 0, r->nshards * sizeof(struct replay_shard));
    uint32_t cap = shard_cap(cfg, r->nshards), slots = index_slots(cap);
    /* The rings and indexes come zeroed from the kernel, page by page as they are first
     * written: a cache that sees few hellos costs few pages (calloc from the heap would
     * clear, and so touch, all of it at start). */
    size_t per = (size_t)cap * sizeof(struct replay_entry) + (size_t)slots * sizeof(uint32_t);
    r->block_len = per * r->nshards;
    r->block = mmap(NULL, r->block_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    if (r->block == MAP_FAILED) {
        r->block = NULL;
        r->nshards = 0;
        replay_free(r);
        return NULL;
    }
#ifdef MADV_NOHUGEPAGE
    /* Index slots are hit at random: with transparent huge pages set to "always", the first
     * few hellos would make 2 MiB pages resident. */
    madvise(r->block, r->block_len, MADV_NOHUGEPAGE);
#endif
    for (unsigned i = 0; i < r->nshards; i++) {
        struct replay_shard *s = &r->shards[i];
        s->cap = cap;
        s->mask = slots - 1;
        s->index = (uint32_t *)((char *)r->block + per * i);
        s->ring = (struct replay_entry *)(s->index + slots);
        if (pthread_mutex_init(&s->lock, NULL) != 0) {
            r->nshards = i; /* destroy only the locks that were set up */
            replay_free(r);
            return NULL;
        }
    }
    return r;
}

void replay_free(struct replay *r) {
    if (!r)
        return;
    for (unsigned i = 0; i < r->nshards; i++)
        pthread_mutex_destroy(&r->shards[i].lock);
    if (r->block)
        munmap(r->block, r->block_len);
    free(r->shards);
    free(r);
}

static struct replay_shard *shard_of(struct replay *r, uint64_t h) {
    return &r->shards[r->shard_shift == 64 ? 0 : h >> r->shard_shift];
}

/* The time stamp of an entry the window never expires (obfuscated2 headers: they carry no
 * time of their own, so only FIFO eviction may ever forget one). */
#define TS_TIMELESS UINT32_MAX

static int expired(const struct replay *r, uint32_t ts, uint32_t now) {
    return r->window && ts != TS_TIMELESS && (int64_t)now - (int64_t)ts > (int64_t)r->window;
}

/* Index slot holding ring position pos + 1 for a key of hash h, or -1 (the position is dead). */
static int64_t index_find_pos(const struct replay_shard *s, uint64_t h, uint32_t pos) {
    for (uint32_t i = (uint32_t)h & s->mask;; i = (i + 1) & s->mask) {
        if (s->index[i] == 0)
            return -1;
        if (s->index[i] == pos + 1)
            return i;
    }
}

/* Index slot of key, or -1. */
static int64_t index_find_key(const struct replay_shard *s, uint64_t h,
                              const uint8_t key[REPLAY_KEY_LEN]) {
    for (uint32_t i = (uint32_t)h & s->mask;; i = (i + 1) & s->mask) {
        uint32_t v = s->index[i];
        if (v == 0)
            return -1;
        if (memcmp(s->ring[v - 1].key, key, REPLAY_KEY_LEN) == 0)
            return i;
    }
}

/* Empties index slot i, moving later members of its probe run back so none is cut off. */
static void index_delete(const struct replay *r, struct replay_shard *s, uint32_t i) {
    for (uint32_t j = i;;) {
        j = (j + 1) & s->mask;
        uint32_t v = s->index[j];
        if (v == 0)
            break;
        uint32_t home = (uint32_t)key_hash(r, s->ring[v - 1].key) & s->mask;
        /* v may move to i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            s->index[i] = v;
            i = j;
        }
    }
    s->index[i] = 0;
}

/* Drops the oldest ring entry (its index slot too, unless it is dead). */
static void pop_tail(const struct replay *r, struct replay_shard *s) {
    uint32_t pos = (s->head + s->cap - s->count) % s->cap;
    uint64_t h = key_hash(r, s->ring[pos].key);
    int64_t slot = index_find_pos(s, h, pos);
    if (slot >= 0)
        index_delete(r, s, (uint32_t)slot);
    s->count--;
}

static void add(const struct replay *r, struct replay_shard *s, uint64_t h,
                const uint8_t key[REPLAY_KEY_LEN], uint32_t now, uint32_t ts) {
    /* reclaim the expired head of the queue first, then make room if still full (a timeless
     * entry at the head stops the reclaim: the expired ones behind it go by FIFO instead, and
     * lookups count them absent meanwhile) */
    while (s->count > 0 && expired(r, s->ring[(s->head + s->cap - s->count) % s->cap].ts, now)) {
        pop_tail(r, s);
        s->expired++;
    }
    if (s->count == s->cap) {
        pop_tail(r, s);
        s->evicted++;
    }
    uint32_t pos = s->head;
    memcpy(s->ring[pos].key, key, REPLAY_KEY_LEN);
    s->ring[pos].ts = ts;
    s->head = (s->head + 1) % s->cap;
    s->count++;
    uint32_t i = (uint32_t)h & s->mask;
    while (s->index[i] != 0)
        i = (i + 1) & s->mask;
    s->index[i] = pos + 1;
}

static int lookup(struct replay *r, const uint8_t key[REPLAY_KEY_LEN], uint32_t now,
                  int add_if_absent, int timeless) {
    if (!r)
        return 0;
    uint64_t h = key_hash(r, key);
    struct replay_shard *s = shard_of(r, h);
    int seen = 0;
    pthread_mutex_lock(&s->lock);
    s->lookups++;
    int64_t slot = index_find_key(s, h, key);
    if (slot >= 0) {
        if (!expired(r, s->ring[s->index[slot] - 1].ts, now)) {
            seen = 1;
            s->hits++;
        } else if (add_if_absent) {
            /* leave the old ring position dead; the key goes to the back of the queue */
            index_delete(r, s, (uint32_t)slot);
            s->expired++;
        }
    }
    if (!seen && add_if_absent)
        add(r, s, h, key, now, timeless ? TS_TIMELESS : now);
    pthread_mutex_unlock(&s->lock);
    return seen;
}

int replay_check_and_add(struct replay *r, const uint8_t key[REPLAY_KEY_LEN], uint32_t now) {
    return lookup(r, key, now, 1, 0);
}

int replay_check_and_add_timeless(struct replay *r, const uint8_t key[REPLAY_KEY_LEN],
                                  uint32_t now) {
    return lookup(r, key, now, 1, 1);
}

int replay_contains(struct replay *r, const uint8_t key[REPLAY_KEY_LEN], uint32_t now) {
    return lookup(r, key, now, 0, 0);
}

void replay_stats(struct replay *r, struct replay_stats *out) {
    memset(out, 0, sizeof(*out));
    if (!r)
        return;
    out->shards = r->nshards;
    out->memory = r->memory;
    for (unsigned i = 0; i < r->nshards; i++) {
        struct replay_shard *s = &r->shards[i];
        pthread_mutex_lock(&s->lock);
        out->lookups += s->lookups;
        out->hits += s->hits;
        out->evicted += s->evicted;
        out->expired += s->expired;
        out->entries += s->count;
        out->capacity += s->cap;
        pthread_mutex_unlock(&s->lock);
    }
}
