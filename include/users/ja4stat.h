/* ja4stat.h: FakeTLS hellos counted by JA4 fingerprint in fixed per-worker heavy-hitter tables. */
#ifndef MTPROXY_PROXY_JA4STAT_H
#define MTPROXY_PROXY_JA4STAT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/ja4.h"

/*
 * Every hello that reaches the FakeTLS parser gets its JA4 (proto/ja4.h) once, kept in the
 * connection in a compact key; when the connection closes it is counted by the worker, with
 * valid = the proxy answered it (a secret's HMAC, and every gate after it, passed), else not
 * (a probe, a replay, a user over a limit: fronted or held). A hello that is not a complete,
 * well-formed ClientHello counts as "malformed".
 *
 * Each worker counts in a table of JA4STAT_SLOTS entries with the Space-Saving algorithm
 * (Metwally, Agrawal, El Abbadi 2005): a key already in the table adds 1 to its count; a new
 * key takes the entry with the least count and adds 1 to it. So memory and label cardinality
 * are fixed, any key seen more than total/JA4STAT_SLOTS times is in the table, a count is never
 * below the key's true count (it may be above by at most the evicted minimum), and the counts
 * always sum to the number of hellos counted. Merged over workers, counts add up (a key a worker
 * evicted adds nothing from that worker, so a merged count may be below the true one; the sum
 * stays exact). Each user keeps the same for its valid hellos in JA4STAT_USER_SLOTS entries (in
 * its per-worker struct user_stats).
 *
 * Threads: a table is written only by its worker (no lock, no allocation); any thread reads it
 * through its sequence counter (a seqlock: odd while an update is in progress; a reader copies
 * and retries if it changed). Every word is a 32-bit relaxed atomic, so no 64-bit atomics are
 * needed (32-bit targets) and nothing races in the C11 sense.
 */
#define JA4STAT_SLOTS 64      /* entries per worker */
#define JA4STAT_USER_SLOTS 3  /* entries per user per worker */
#define JA4STAT_TOP 10        /* fingerprints shown in /metrics and /stats; the rest is "other" */

/*
 * The compact key of a JA4 "t13d1516h2_8daaf6152771_e5627efa2ab1": its part a as 10 characters,
 * then parts b and c as 6 bytes each. All zero: none (not a TLS hello). A first byte of '-':
 * the hello was malformed.
 */
#define JA4STAT_KEY_LEN 22
#define JA4STAT_WORDS 6 /* key, valid flag (byte 22) and padding as 32-bit words */

struct ja4stat_ent {
    _Atomic uint32_t w[JA4STAT_WORDS];
    _Atomic uint32_t count_lo, count_hi; /* 0: the entry is empty */
};

/* One worker's table (zeroed = empty). */
struct ja4stat {
    _Atomic uint32_t seq;
    struct ja4stat_ent ent[JA4STAT_SLOTS];
};

/* One user's table in one worker (zeroed = empty): valid hellos only. */
struct ja4stat_user {
    _Atomic uint32_t seq;
    struct ja4stat_ent ent[JA4STAT_USER_SLOTS];
};

/* A merged row: a fingerprint, whether valid, and its count over the tables merged. */
struct ja4stat_row {
    uint8_t key[JA4STAT_KEY_LEN];
    uint8_t valid;
    uint64_t count;
};

/* The key of ja4 (JA4_LEN characters as ja4_from_hello writes them; NULL or "" for a
 * malformed hello) into key. Returns 0, or -1 (not a JA4: key is then the malformed key). */
int ja4stat_key(const char *ja4, uint8_t key[JA4STAT_KEY_LEN]);

/* The text of key: the JA4, "malformed", or "" (no key). out holds JA4_LEN + 1 bytes. */
const char *ja4stat_key_str(const uint8_t key[JA4STAT_KEY_LEN], char out[JA4_LEN + 1]);

/* Counts one hello of key (valid 0/1) in t / in user table u. Owner thread only; no
 * allocation, no lock; O(slots). */
void ja4stat_add(struct ja4stat *t, const uint8_t key[JA4STAT_KEY_LEN], int valid);
void ja4stat_user_add(struct ja4stat_user *u, const uint8_t key[JA4STAT_KEY_LEN]);

/*
 * Merges n worker tables (any thread) into rows (cap entries; n * JA4STAT_SLOTS always
 * suffice): one row per (key, valid), counts summed, sorted by count (highest first, then key).
 * Returns the number of rows; *total (if not NULL) gets the sum of all counts.
 */
size_t ja4stat_merge(const struct ja4stat *const *t, int n, struct ja4stat_row *rows, size_t cap,
                     uint64_t *total);

/* The same for n user tables (rows' valid is 1). */
size_t ja4stat_user_merge(const struct ja4stat_user *const *u, int n, struct ja4stat_row *rows,
                          size_t cap, uint64_t *total);

/* --- the proxy's side (proxy/conn_int.h's struct conn and struct proxy_worker) ---------- */

struct conn;
struct gen;
struct proxy_worker;
struct sbuf;

/* The hook in the FakeTLS handshake (hs_tls.c): the first time a connection's buffered hello
 * is complete (or rejected as malformed), its JA4 is computed into the connection. */
void ja4stat_hello(struct conn *c);

/* At close (conn_close.c): counts the connection's hello, if it had one, in its worker's table
 * and, valid, in its user's. */
void ja4stat_conn_close(struct conn *c);

/* The connection's JA4 as text ("" if it had no hello); out holds JA4_LEN + 1 bytes. */
const char *ja4stat_conn_str(const struct conn *c, char out[JA4_LEN + 1]);

/*
 * /metrics: the worker tables of pws[0..n) merged, as
 *   mtproxy_tls_hello_fingerprint_total{ja4,valid}   the JA4STAT_TOP highest, then ja4="other"
 *                                                    per valid with the rest (sums to all hellos)
 *   mtproxy_tls_hello_fingerprint_share{ja4,valid}   each of those over all hellos (0..1)
 *   mtproxy_user_tls_fingerprint_total{user,ja4}     each of g's users' top JA4STAT_USER_SLOTS
 * Any thread holding a reference to g. Returns 0, or -1 (out of memory: out->failed).
 */
int ja4stat_render_prometheus(const struct proxy_worker *pws, int n, const struct gen *g,
                              struct sbuf *out);

/* /stats: the same samples as entries of its "metrics" array, each `,\n{"name":"mtproxy_..",
 * "labels":{..},"value":..}` (to append after the array's other entries). */
int ja4stat_render_json(const struct proxy_worker *pws, int n, const struct gen *g,
                        struct sbuf *out);

#endif
