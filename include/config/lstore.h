/* lstore.h: per-user limits across the fleet (limits-store = redis://...): a flusher thread
 * that shares each user's quota bytes, live connections and addresses through Redis. */
#ifndef MTPROXY_PROXY_LSTORE_H
#define MTPROXY_PROXY_LSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/stat.h"

/*
 * The data path counts locally exactly as without the store (users_admit, users_charge). One
 * thread of its own ("the flusher", not a relay worker) sends once per limits-store-interval
 * ONE pipelined round trip for the whole process:
 *
 *   quota   HSET mtproxy:l:q:USER:PERIOD INSTANCE "EPOCH BYTES"   this process's bytes in the
 *           PEXPIRE (periodic quotas: the period's end + 1 day)    period (absolute: a retry
 *           HGETALL mtproxy:l:q:USER:PERIOD                         never counts twice)
 *   live    HSET mtproxy:l:i:INSTANCE USER "CONNS IPS" ...  HDEL (gone to 0)  PEXPIRE 3 intervals
 *           SADD/SMEMBERS mtproxy:l:instances; HGETALL mtproxy:l:i:OTHER for each other instance
 *
 * and from the answers folds the fleet into the local limit state: a user's `used` becomes
 * the fleet total plus the local bytes since the flush (so the quota check on the data path
 * is unchanged), the other instances' live connections are added to its conns slot count and
 * their addresses to its ips count. A user's quota reset (lstore_reset_quota) bumps the
 * hash's field "e" (the epoch): shares written under an older epoch no longer count.
 */

/* Pure parts (unit tests, fuzzing). */

/* "CONNS IPS" (a live hash's value). Returns 0, or -1. */
int lstore_parse_live(const char *s, size_t n, uint32_t *conns, uint32_t *ips);
/* "EPOCH BYTES" (a quota hash's per-instance value). Returns 0, or -1. */
int lstore_parse_share(const char *s, size_t n, uint64_t *epoch, uint64_t *bytes);
/* A decimal number of at most 19 digits (the epoch field "e"). Returns 0, or -1. */
int lstore_parse_u64(const char *s, size_t n, uint64_t *out);

/* One field/value pair of a hash reply. */
struct lstore_kv {
    const char *k, *v;
    size_t kn, vn;
};

#ifdef MTPROXY_HAVE_HIREDIS
struct redisReply;
/* The pairs of a hash reply r (an array of 2n strings) into *kv (malloc'd, pointing into r;
 * NULL when n is 0 or on failure; the caller frees it). Returns n, or -1 (not such an array,
 * or no memory). */
long lstore_parse_pairs(const struct redisReply *r, struct lstore_kv **kv);
#endif

/* More bytes than one user can have moved (64 PiB: 100 Gbit/s for 66 days): a share or a fleet
 * total above it is a store's garbage, not a count. */
#define LSTORE_BYTES_MAX (1ULL << 56)

/* The fleet total of a quota hash's n pairs: the epoch (field "e", 0 if none) into *epoch,
 * the sum of the shares written under that epoch returned (malformed values and shares above
 * LSTORE_BYTES_MAX are skipped and counted in *bad if not NULL); UINT64_MAX if the sum is
 * above LSTORE_BYTES_MAX (the reply is refused: the local count stands). */
uint64_t lstore_quota_total(const struct lstore_kv *kv, size_t n, uint64_t *epoch, size_t *bad);

/* Local bytes not yet shared: used now (snap) minus what was accounted (base); a local reset
 * since (snap < base: a new period, an explicit reset) makes all of snap new. */
uint64_t lstore_delta(uint64_t snap, uint64_t base);

/* The new local `used` when the fleet total fleet arrives for a flush that read used = snap:
 * the fleet total plus what was counted here since (cur - snap). If cur < snap (a local reset
 * since the flush was sent) cur is kept and *stale set (the next flush brings the total). */
uint64_t lstore_adjust(uint64_t cur, uint64_t snap, uint64_t fleet, int *stale);

/* The expiry of an instance's live hash for flushes every interval_ms: LSTORE_LIVE_TTL_INTERVALS
 * intervals, at least LSTORE_LIVE_TTL_MIN_MS (a crashed instance stops counting then). */
#define LSTORE_LIVE_TTL_INTERVALS 3
#define LSTORE_LIVE_TTL_MIN_MS 2000
long long lstore_live_ttl_ms(unsigned interval_ms);

/* The expiry (ms from now) of a periodic quota's hash: a day past the period's end next
 * (unix s); 0 for a lifetime quota (next = 0: no expiry). */
long long lstore_quota_ttl_ms(int64_t next, int64_t now);

/* Parses the bytes of replies (as the store's connection reads them, RSTORE_BIG limits) and
 * interprets each as a quota hash, a live hash and a member list, the way a flush does. Returns
 * the number of complete replies, or -1 once the bytes are not RESP. For the fuzz target. */
int lstore_parse_replies(const char *buf, size_t len);

/* --- the flusher ----------------------------------------------------------------------------- */

struct users;
struct gen;
struct lstore;

enum lstore_state { LSTORE_OFF = 0, LSTORE_UP, LSTORE_DOWN };

/* What /metrics and /stats show (lstore_read). */
struct lstore_view {
    int state;                 /* enum lstore_state */
    uint64_t flushes;          /* flushes answered in full */
    uint64_t failures;         /* flushes that failed (down, error, no answer in time) */
    uint64_t commands;         /* commands sent */
    uint64_t users;            /* users in the last flush */
    uint64_t instances;        /* other live instances seen in the last flush */
    double cpu_seconds;        /* the flusher thread's CPU time */
    double last_flush_seconds; /* the last answered flush's round trip */
};

/* Starts the flusher for generation g's limits-store (does nothing and returns NULL with
 * err empty if it is off; NULL with err on failure). The users registry's fleet pointer is
 * set (users->fleet) so the metrics and API threads find it. Main thread, once. */
struct lstore *lstore_start(struct users *u, struct gen *g, char *err, size_t errlen);

/* A new generation (a reload): its limits are used from the next flush. Main thread. */
void lstore_post_gen(struct lstore *ls, struct gen *g);

/* Makes user's quota start over across the fleet: the next flush (within one interval)
 * zeroes the local count and bumps the user's epoch in the store, so every instance's share
 * of the current period stops counting (each instance drops its own at its next flush).
 * Any thread (the API's reset-quota). Returns 0, or -1 (no flusher, or out of memory). The
 * caller need not zero the local count itself. */
int lstore_reset_quota(struct lstore *ls, const char *user);

/* Copies the counters (any thread; ls may be NULL: state LSTORE_OFF). */
void lstore_read(const struct lstore *ls, struct lstore_view *out);

/* Stops the flusher: one last flush (the deltas, this instance's live counts removed) waited
 * for at most a second, then the thread joined and everything freed. Call after the workers
 * stopped. NULL is fine. */
void lstore_stop(struct lstore *ls);

#endif
