/* users.h: the users registry (one user per secret name), per-user counters and shared limit state. */
#ifndef MTPROXY_PROXY_USERS_H
#define MTPROXY_PROXY_USERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/shared64.h"

#include "core/sock.h"
#include "core/stat.h"
#include "proto/secret.h"
#include "users/ja4stat.h"

/*
 * Every `secret = NAME:SECRET` is a user. A user gets a stable id the first time its name is
 * seen (users_intern, main thread only) and keeps it for the life of the process (unless the
 * reload that named it failed: users_rollback gives it back), across reloads, also while it is removed from the config (its counters and quota stay; a user
 * added back gets them again). Storage grows in chunks of USERS_CHUNK ids as users are
 * configured: nothing is sized for the maximum.
 *
 * Counters (struct user_stats) are per user and per worker: written only by the owning
 * worker (STAT_*), read by anyone; users_stats_sum adds one user's counters over all workers.
 *
 * Limit state (struct user_shared) is one per user, shared by all workers, and lock-free:
 * active connections and quota bytes are atomic counters (a connection of a user with
 * a limit does one atomic add per relay read; users without limits pay nothing), the rate
 * limit is one atomic "theoretical arrival time" per direction (GCRA, compare-and-swap). The
 * one lock is per user and only for users with an `ips` limit: the set of their recent
 * client addresses, touched once per handshake of that user.
 */

#define USERS_CHUNK 1024        /* ids per storage chunk */
#define USERS_MAX_CHUNKS 1024   /* => at most USERS_MAX users */
#define USERS_MAX (USERS_CHUNK * USERS_MAX_CHUNKS)

/* Why a user's new connection was refused (or a live one ended). */
enum user_refusal {
    UR_CONNS = 0, /* conns=N concurrent connections reached */
    UR_IPS,       /* ips=N distinct addresses within ips-window reached */
    UR_QUOTA,     /* quota=SIZE used up (both directions) */
    UR_EXPIRED,   /* past expires= */
    UR_DISABLED,  /* `disabled` in its limit line (API / `mtproxy user disable`) */
    UR_STORE,     /* limits-store down with limits-store-fail = closed */
    UR_COUNT
};

/* Name of a refusal reason ("conns", "ips", "quota", "expired", "disabled"). */
const char *users_refusal_name(enum user_refusal r);

/* How often a quota starts over (quota=SIZE/day, /week, /month; plain quota=SIZE: never). */
enum quota_period { QP_LIFETIME = 0, QP_DAY, QP_WEEK, QP_MONTH };

/* One user's limits (`limit = NAME ...`); 0 = no limit for each field. */
struct user_limit {
    char name[SECRET_NAME_MAX];
    uint32_t conns;   /* concurrent connections, whole process */
    uint32_t ips;     /* distinct client addresses within ips-window */
    uint64_t quota;   /* bytes both ways, kept across restarts in the state file */
    int64_t expires;  /* unix time (UTC) after which the user is refused; 0 = never */
    uint64_t rate;    /* bytes per second, each direction, shared by the user's connections */
    uint8_t quota_period; /* enum quota_period */
    /* QP_MONTH: day of the month 1-28 (0 = quota-reset-day, filled in by options_validate);
     * QP_WEEK: weekday 1-7, Monday = 1 (the parser fills in Monday); else 0 */
    uint8_t quota_day;
    uint8_t disabled; /* `disabled`: new connections refused, live ones end as for a removal */
};

/* "day", "week", "month" (NULL for QP_LIFETIME). */
const char *users_period_name(enum quota_period p);

/* The quota period of kind p that holds time now (unix seconds, UTC): returns its start and
 * sets *next to the next one's start (the reset). Periods start at 00:00:00 UTC: every day
 * (QP_DAY), on weekday day (QP_WEEK, 1-7, Monday = 1), on day day of each month (QP_MONTH,
 * 1-28). A day out of range counts as 1. QP_LIFETIME: returns 0, *next = 0. Pure. */
int64_t users_period_start(enum quota_period p, unsigned day, int64_t now, int64_t *next);

/* Parses the value of a `limit` line:
 *
 *   NAME [conns=N] [ips=N] [quota=SIZE[/day|/week|/month]] [quota-day=DAY]
 *        [expires=YYYY-MM-DD[THH:MM:SSZ]] [rate=SIZE/s] [disabled]
 *
 * (fields separated by blanks, each at most once, in any order; SIZE as elsewhere: 16k, 4M,
 * 10G; a date alone means 00:00:00 UTC that day; quota-day only with /month (1-28) or /week
 * (1-7, Monday = 1, or a weekday's name: mon, monday ...); `disabled`, a bare word, turns the
 * user off while keeping its secret, limits and usage). Returns 0, or -1 with a message
 * in err. */
int users_limit_parse(const char *text, struct user_limit *out, char *err, size_t errlen);

/* One user's counters in one worker (written by that worker only). */
struct user_stats {
    stat_t bytes_up;   /* client -> DC payload bytes */
    stat_t bytes_down; /* DC -> client payload bytes */
    stat_t active;     /* connections now relaying (or connecting) for this user */
    stat_t conns;      /* connections accepted for this user (valid handshake), total */
    stat_t refused[UR_COUNT]; /* new connections refused, by reason */
    stat_t closed_limit;      /* live connections ended by a limit (quota, expiry, removal) */
    stat_t foreign_addr;      /* listen-prefix: refused, on an address not the user's */
    struct ja4stat_user ja4;  /* its valid hellos' top JA4 fingerprints (proxy/ja4stat.h) */
};

/* A user's counters summed over the workers (users_stats_sum), plus its shared state. */
struct user_totals {
    uint64_t bytes_up, bytes_down, active, conns, refused[UR_COUNT], closed_limit;
    uint64_t foreign_addr;
    uint64_t quota_used; /* bytes counted against the quota (persisted), whole process */
};

/* Limit state of one user shared by all workers. */
struct user_ips;
struct user_shared {
    char name[SECRET_NAME_MAX];
    _Atomic uint32_t active;     /* connections holding a conns slot, whole process */
    shared64 used;               /* quota bytes used (loaded from / saved to the state file) */
    shared64 period;             /* start (unix s) of the quota period of used; 0 = lifetime
                                  * or not known yet (main thread only: users_quota_roll) */
    shared64 epoch;              /* limits-store: the fleet epoch of used + 1, 0 = not known
                                  * (kept in the state file: a store that lost its epoch is
                                  * told from a reset made while this process was down) */
    shared64 tat[2];             /* rate: theoretical arrival time per direction, in us */
    _Atomic uint32_t last_log;   /* refusal log: the second of the last line (0 = never) */
    struct user_ips *_Atomic ips; /* recent addresses (ips limit), NULL until needed */
    /* limits-store: the other instances' live connections (also folded into active) and
     * recent addresses (counted against ips), as of the last flush; 0 without the store */
    _Atomic uint32_t fleet_conns;
    _Atomic uint32_t fleet_ips;
    /* `quota-reset = NAME` in the state file (an offline reset-quota): the fleet's count is
     * reset at start too (main thread only) */
    uint8_t reset_asked;
};

struct users {
    int nworkers;
    _Atomic uint32_t n; /* ids handed out; chunks below n are allocated (release/acquire) */
    struct user_shared *shared[USERS_MAX_CHUNKS];
    struct user_stats ***stats; /* [worker][chunk] -> USERS_CHUNK counters */
    /* name -> id + 1 (open addressing; main thread only) */
    uint32_t *slots;
    size_t nslots;
    uint32_t max; /* ids that may be handed out: USERS_MAX (a test lowers it) */
    _Atomic uint32_t resets; /* quotas started over so far (users_quota_roll on the main
                              * thread, users_quota_reset from the API's thread) */
    /* limits-store (proxy/lstore.h): the flusher, NULL when off; set while it is down with
     * limits-store-fail = closed: new connections of users with limits are refused */
    struct lstore *fleet;
    _Atomic int fleet_refuse;
};

/* A rollback point of the registry's names (users_mark): a reload that fails after interning
 * new names gives them back (users_rollback), so repeated bad reloads do not grow the table. */
struct users_mark {
    uint32_t n;      /* ids handed out at the mark */
    uint32_t *slots; /* a copy of the name index then (NULL if it was empty) */
    size_t nslots;
};

/* Sets up an empty registry for nworkers workers. Returns 0, or -1 (out of memory). */
int users_init(struct users *u, int nworkers);

/* Frees everything (after the workers stopped). */
void users_destroy(struct users *u);

/* The id of user name, created if new. Main thread only (or before workers start).
 * Returns the id, or -1 (out of memory, or USERS_MAX reached). */
int32_t users_intern(struct users *u, const char *name);

/* The id of user name, or -1 if it never existed. Main thread only. */
int32_t users_find(const struct users *u, const char *name);

/* Marks the registry as it is now, before interning names that may have to be given back.
 * Main thread only. Returns 0, or -1 (out of memory; m then holds nothing). */
int users_mark(const struct users *u, struct users_mark *m);
/* Forgets every name interned since users_mark(m): ids and the name index are exactly as at
 * the mark (no generation may use the ids given back). Frees m. Main thread only. */
void users_rollback(struct users *u, struct users_mark *m);
/* Keeps what was interned since the mark; frees m. */
void users_mark_drop(struct users_mark *m);
/* Number of ids handed out (ids are 0..n-1); any thread. */
uint32_t users_count(const struct users *u);

/* User id's shared state / name (id < users_count); any thread. */
struct user_shared *users_shared(const struct users *u, uint32_t id);
const char *users_name(const struct users *u, uint32_t id);

/* Worker's counters for user id (the worker writes them with STAT_*). */
struct user_stats *users_wstats(const struct users *u, int worker, uint32_t id);

/* Sums user id's counters over every worker into out (relaxed reads; any thread). */
void users_stats_sum(const struct users *u, uint32_t id, struct user_totals *out);

/* --- limit checks (any worker) ------------------------------------------------------------ */

/* Admits a new connection of user id from addr under lim (may be NULL: no limit) at time now
 * (unix seconds). On success the connection holds a conns slot (release it with
 * users_release) and its address was recorded for the ips limit. Returns -1 if admitted,
 * else the enum user_refusal reason. ips_window in seconds. */
int users_admit(const struct users *u, uint32_t id, const struct user_limit *lim,
                const struct sock_addr *addr, double now, double ips_window);

/* Gives back the conns slot taken by users_admit (and refreshes the address's last use). */
void users_release(const struct users *u, uint32_t id, const struct sock_addr *addr,
                   double now);

/* The addresses of user id that hold a connection or were used within window seconds of
 * now (what this instance tells the fleet for the ips limit). Any thread. */
uint32_t users_ips_recent(const struct users *u, uint32_t id, double now, double window);

/* Counts n relayed bytes against user id's quota. Returns 1 if the quota is now used up
 * (quota > 0), else 0. */
int users_charge(const struct users *u, uint32_t id, uint64_t quota, uint64_t n);

/* Rate limit: takes n bytes in direction dir (0 up, 1 down) at rate bytes/s at time now
 * (seconds). Returns the seconds to wait before reading more in that direction (0 = go on).
 * burst: bytes that may go at once after a pause. */
double users_rate_take(const struct users *u, uint32_t id, int dir, uint64_t rate,
                       uint64_t burst, uint64_t n, double now);

/* 1 if a refusal of user id should be logged now (once per user per minute). */
int users_log_allowed(const struct users *u, uint32_t id, double now);

/* Periodic quotas: for each of the n limits lim with a quota period, the user's usage starts
 * over (0 bytes, one info line logged) if its period is older than the one holding now; a
 * usage whose period is not known (an old state file's line, a quota made periodic by a
 * reload) is taken as this period's. A user refused for its quota is served again at once.
 * Main thread only (each generation built, each state save). Returns the number of users
 * reset (also added to u->resets: the state file must be rewritten, even if empty). */
int users_quota_roll(struct users *u, const struct user_limit *lim, int n, int64_t now);

/* reset-quota (the API, `mtproxy user reset-quota`): user id's quota usage starts over now
 * (0 bytes, whole process; a user refused for its quota is served again at once) and
 * u->resets moves, so the next state save rewrites its quota-used line. Any thread. Returns
 * the bytes it had used.
 * FLEET HOOK: the fleet-wide counter (limits-store) is to be reset here too. */
uint64_t users_quota_reset(struct users *u, uint32_t id);

/* State file: writes `quota-used = NAME BYTES [PERIOD_START]` lines (the period's start only
 * for a periodic quota) for every user with bytes used into buf (NUL-terminated, grown with
 * realloc). Returns the length, or -1 (out of memory). */
long users_state_format(const struct users *u, char **buf, size_t *cap);

/* Applies one `quota-used` value ("NAME BYTES [PERIOD_START]") read from the state file. Returns 0, or -1
 * with err. Main thread only, before workers use the user. */
int users_state_apply(struct users *u, const char *value, char *err, size_t errlen);

/* Reads the quota-used lines of state file path (other lines are skipped; a missing file is
 * no error). Returns 0, or -1 with err ("PATH:LINE: message"). Main thread, before workers. */
int users_state_load(struct users *u, const char *path, char *err, size_t errlen);

#endif
