/* websess.h: WEB proxy v1 sessions (docs/web.md): bootstraps, sessions, streams, queues, limits. */
#ifndef MTPROXY_WEB_WEBSESS_H
#define MTPROXY_WEB_WEBSESS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/stat.h"
#include "proto/webcap.h"

/*
 * One worker's table of WEB sessions, pure: no sockets, no event loop; every call that needs
 * the time takes `now` in milliseconds of a monotonic clock. The HTTP carriers drive it:
 *
 *   GET /?bridge=CAP        websess_bootstrap_mint    -> the token the page embeds
 *   POST /api/v1/session    websess_create            -> session token, WELCOME
 *   POST /api/v1/up         websess_up                -> frames applied to the streams
 *   POST /api/v1/down       websess_down              -> a batch by cursor (or wait)
 *   DELETE /api/v1/session  websess_close
 *   a timer                 websess_sweep             -> bootstraps and idle sessions expire
 *
 * and the backend side of each stream: websess_stream_up / websess_stream_written (client
 * bytes to the backend, credit back as WINDOW), websess_send (backend bytes down as DATA),
 * websess_stream_end (the backend connection is gone).
 * Tokens are WEBSESS_TOKEN_LEN characters of base64url (32 random bytes). Never log them.
 */
#define WEBSESS_TOKEN_LEN WEBCAP_LEN

/* The contract's limits (docs/web.md 7, "Limits"); websess_limits_default fills them. */
struct websess_limits {
    uint32_t sessions;            /* live sessions process-wide */
    uint32_t streams;             /* live streams process-wide */
    uint32_t streams_per_session; /* logical streams per session */
    uint32_t closed_ids;          /* recently closed stream ids remembered per session */
    uint64_t pending_session;     /* queued bytes (with the per-item charge) per session */
    uint64_t pending_process;     /* queued bytes process-wide */
    uint32_t items_session;       /* queued items per session */
    uint32_t items_process;       /* queued items process-wide */
    uint32_t item_charge;         /* bytes each queued item counts for besides its payload */
    uint32_t bootstraps;          /* live bootstrap entries process-wide */
    uint32_t session_rate, session_burst;     /* new sessions per minute, burst */
    uint32_t stream_rate, stream_burst;       /* new streams per minute, burst */
    uint32_t bootstrap_rate, bootstrap_burst; /* new bootstraps per minute, burst */
    uint32_t body_bytes;    /* binary request body (an /up batch) */
    uint32_t frame_payload; /* frame payload */
    uint32_t data_chunk;    /* relay DATA chunk */
    uint32_t batch_bytes;   /* carrier batch target (a /down answer) */
    int64_t bootstrap_ms;   /* bootstrap lifetime */
    int64_t grace_ms;       /* carrier reconnect grace (idle sessions are reclaimed after it) */
    int64_t poll_ms;        /* long-poll hold (the carrier's timer) */
    int64_t dial_ms;        /* backend dial timeout (the conn's timer) */
    uint32_t dials;         /* backend dials in flight (the conn counts them) */
    uint8_t instance;       /* web-instance (0..63): every token's first character */
    uint8_t worker;         /* the table's worker (0..63): every token's second character */
};

/* Fills l with the contract's defaults (docs/web.md 7). */
void websess_limits_default(struct websess_limits *l);

struct options;

/* Fills l with the defaults, then the web-* limit keys of opt over them (web-sessions,
 * web-streams, web-pending-session, ..., web-poll); a rate's burst is at most the rate. */
void websess_limits_from(const struct options *opt, struct websess_limits *l);

/* What every worker's table shares: the process-wide counts the process limits apply to.
 * Zero it (or websess_shared_init) before the first table uses it. */
struct websess_shared {
    /* size_t, not 64-bit: these count memory and entries, and a 64-bit atomic on 32-bit MIPS
     * is a call into libatomic (packaging/test/no-libatomic.sh) */
    atomic_size_t sessions, streams, bootstraps, pending_bytes, pending_items;
};

void websess_shared_init(struct websess_shared *g);

/* Why something was refused; each refusal counts once in websess_counters.refused. */
enum websess_reason {
    WEBSESS_R_BOOTSTRAPS = 0,     /* bootstrap entries full */
    WEBSESS_R_BOOTSTRAP_RATE,     /* new bootstraps above the rate */
    WEBSESS_R_BOOTSTRAP_UNKNOWN,  /* unknown, expired or already spent bootstrap */
    WEBSESS_R_HELLO,              /* a create body that is not one HELLO */
    WEBSESS_R_SESSIONS,           /* live sessions full */
    WEBSESS_R_SESSION_RATE,       /* new sessions above the rate */
    WEBSESS_R_STREAMS_SESSION,    /* an OPEN beyond the session's streams */
    WEBSESS_R_STREAMS,            /* an OPEN beyond the process's streams */
    WEBSESS_R_STREAM_RATE,        /* new streams above the rate */
    WEBSESS_R_PENDING_SESSION,    /* the session's queued bytes or items would pass the limit */
    WEBSESS_R_PENDING_PROCESS,    /* the process's queued bytes or items would pass the limit */
    WEBSESS_R_BODY,               /* an /up body above the body limit */
    WEBSESS_R_PROTOCOL,           /* a protocol error: the session ended */
    WEBSESS_R_RANDOM,             /* the random source failed */
    WEBSESS_R_COUNT
};

/* The reason's name in /metrics (a label value: "bootstrap_rate", "pending_process"...). */
const char *websess_reason_name(enum websess_reason r);

/* The table's counts, for /metrics: written by the table's worker only, read by any thread
 * with STAT_GET (core/stat.h). */
struct websess_counters {
    stat_t refused[WEBSESS_R_COUNT];
    stat_t bootstraps, sessions, streams; /* minted, created, opened */
    stat_t expired_bootstraps, expired_sessions, closed_sessions;
    stat_t sessions_mode[4];              /* created, by carrier (enum websess_mode) */
    stat_t bytes_up, bytes_down;          /* stream payload: client DATA taken, backend DATA queued */
};

/* The carrier a profile chose (X-Carrier-Mode). */
enum websess_mode {
    WEBSESS_HTTPS = 0,
    WEBSESS_HTTPS_LANES = 1,
    WEBSESS_WEBSOCKET = 2,
    WEBSESS_WEBSOCKET_LANES = 3
};

/* The X-Carrier-Mode value of mode ("https", "https-lanes", "websocket", "websocket-lanes"). */
const char *websess_mode_name(enum websess_mode mode);

/* The outcome of a carrier request. */
enum websess_result {
    WEBSESS_OK = 0,      /* done (a fresh answer) */
    WEBSESS_REPLAY = 1,  /* an exact retry: answer as before, nothing applied */
    WEBSESS_WAIT = 2,    /* /down: nothing to send yet: hold the poll, then 204 */
    WEBSESS_GONE = 3,    /* /down: the lane is closed and delivered: 204 with X-Lane-Closed: 1 */
    WEBSESS_REFUSED = -1, /* unknown or malformed: the site's 404 */
    WEBSESS_BUSY = -2,   /* a limit or rate: 503 with Retry-After: 1, nothing changed */
    WEBSESS_FATAL = -3   /* a protocol error: the session is gone (404) */
};

struct websess;
struct websess_table;

/* What the table tells the layer above (every member may be NULL). Called from inside the
 * table's functions; they must not free the session they are given (on_end excepted: it is
 * the last word about s, which is freed right after it returns). */
struct websess_hooks {
    void *ctx;
    void (*on_open)(void *ctx, struct websess *s, uint32_t stream);   /* dial the backend */
    void (*on_up)(void *ctx, struct websess *s, uint32_t stream);     /* client bytes queued */
    void (*on_window)(void *ctx, struct websess *s, uint32_t stream); /* down credit returned */
    void (*on_close)(void *ctx, struct websess *s, uint32_t stream);  /* the client closed it */
    void (*on_down)(void *ctx, struct websess *s, uint32_t lane);     /* frames wait to go down */
    void (*on_end)(void *ctx, struct websess *s);                     /* the session ends */
};

/* A new table under limits l (copied), counting process-wide in g (which must outlive it).
 * hooks may be NULL. NULL if out of memory. */
struct websess_table *websess_table_new(const struct websess_limits *l, struct websess_shared *g,
                                        const struct websess_hooks *hooks);

/* Ends every session (on_end for each), frees bootstraps and the table. NULL is allowed. */
void websess_table_free(struct websess_table *t);

/* The table's counters. */
const struct websess_counters *websess_counters(const struct websess_table *t);

/* Mints a bootstrap token for user (the secret index whose capability matched) into out
 * (WEBSESS_TOKEN_LEN characters and a NUL), valid for the bootstrap lifetime from now.
 * WEBSESS_OK, or WEBSESS_BUSY (entries full, rate, or no random bytes: counted). */
enum websess_result websess_bootstrap_mint(struct websess_table *t, int user, int64_t now,
                                           char out[WEBSESS_TOKEN_LEN + 1]);

/* Spends the bootstrap tok[0..n): WEBSESS_OK (with *user) the first time while it lives;
 * WEBSESS_REFUSED (counted) when unknown, expired or spent before. The comparison is
 * constant-time. The entry stays until it expires, remembering it was spent. */
enum websess_result websess_bootstrap_spend(struct websess_table *t, const char *tok, size_t n,
                                            int64_t now, int *user);

/* POST /api/v1/session: bootstrap tok[0..n) with body[0..blen) (one HELLO) creates a session in
 * mode. WEBSESS_OK: *out is new (its token websess_token, answer WELCOME and X-Down-Cursor 0).
 * WEBSESS_REPLAY: the same request again while the bootstrap lives: *out is the session it
 * created. WEBSESS_BUSY: the session limit or rate (the bootstrap stays unspent). WEBSESS_REFUSED:
 * an unknown, expired or spent bootstrap, or a body that is not one HELLO. All but OK and
 * REPLAY are counted. */
enum websess_result websess_create(struct websess_table *t, const char *tok, size_t n,
                                   const uint8_t *body, size_t blen, enum websess_mode mode,
                                   int64_t now, struct websess **out);

/* The live session whose token is tok[0..n), or NULL. Constant-time in the comparison. */
struct websess *websess_find(struct websess_table *t, const char *tok, size_t n);

/* Who holds the token tok[0..n) (a bootstrap's or a session's): *instance and *worker from its
 * first two characters. 0, or -1 if it is not a token. */
int websess_token_owner(const char *tok, size_t n, int *instance, int *worker);

/* The session's token (NUL-terminated), carrier mode and user (secret index). */
const char *websess_token(const struct websess *s);
enum websess_mode websess_mode(const struct websess *s);
int websess_user(const struct websess *s);

/* Records carrier activity at now (a request began or ended): the idle grace counts from it. */
void websess_touch(struct websess *s, int64_t now);

/* Lanes (docs/web.md 4): every /up and /down names a lane. Lane 0 is the session's: all of
 * its frames in the https and websocket carriers, session frames only (PONG) in the lanes
 * carriers (https-lanes, websocket-lanes), where stream N's frames go up and down on lane N
 * alone, with its own X-Up-Seq and X-Down-Cursor from 1 and 0; a new lane's first frame is its
 * OPEN, and a lane ends once its stream is gone and every frame of it was acknowledged. In the
 * https and websocket carriers a lane other than 0 is refused. */

/* POST /api/v1/up on lane with X-Up-Seq seq and body[0..n). WEBSESS_OK: every frame was valid
 * and is applied (X-Up-Ack: seq). WEBSESS_REPLAY: the last committed seq with the same bytes
 * again (acknowledge, apply nothing). WEBSESS_BUSY: the body's DATA would pass a pending limit,
 * or a new lane would pass twice the streams per session (nothing applied, seq not committed).
 * WEBSESS_REFUSED: a body above the body limit, or a lane the carrier has not (nothing
 * changed). WEBSESS_FATAL: a gap, an old seq, other bytes, an invalid frame, a frame of another
 * lane: the session is ended and freed (s is gone). A lane already ended takes its late frames
 * as those of a closed stream (dropped), unnumbered. Counted when not OK or REPLAY. */
enum websess_result websess_up(struct websess_table *t, struct websess *s, uint32_t lane,
                               uint64_t seq, const uint8_t *body, size_t n, int64_t now);

/* POST /api/v1/down on lane with X-Down-Cursor cursor. WEBSESS_OK: a new batch *p[0..*n)
 * numbered *next (the lane's queued frames, up to the batch target and WEBFRAME_MAX_BATCH
 * frames); the table keeps its bytes until the next cursor acknowledges it. WEBSESS_REPLAY:
 * the unacknowledged batch again, byte for byte, with its cursor in *next. WEBSESS_WAIT:
 * nothing queued, or a lane not opened yet polled with cursor 0 (hold the poll; *next is the
 * cursor to answer 204 with). WEBSESS_GONE: the lane ended (its last batch acknowledged now or
 * before; *next the cursor). WEBSESS_FATAL: any other cursor: the session is ended and freed.
 * *p stays valid until the next call on s. */
enum websess_result websess_down(struct websess_table *t, struct websess *s, uint32_t lane,
                                 uint64_t cursor, int64_t now, const uint8_t **p, size_t *n,
                                 uint64_t *next);

/* 1 if lane of s was opened (it is live, or ended), else 0. */
int websess_lane_known(const struct websess *s, uint32_t lane);

/* No one reads lane any more (websocket-lanes: its socket failed): its frames are dropped and
 * its stream closes as if the client had sent CLOSE. Nothing for lane 0 or an unknown lane. */
void websess_lane_drop(struct websess_table *t, struct websess *s, uint32_t lane);

/* Queues the backend's bytes data[0..len) down on stream as DATA frames of at most the DATA
 * chunk, as far as the stream's down credit and the pending limits allow. Returns the bytes
 * taken (0 when the stream is not live, the credit is spent or a queue is full: stop reading
 * the backend until on_window, or until a poll drains the queue). */
size_t websess_send(struct websess_table *t, struct websess *s, uint32_t stream,
                    const uint8_t *data, size_t len);

/* The client bytes queued for stream's backend: *p[0..*n) is the oldest piece (*n 0 when
 * none). Returns 0, or -1 if the stream is unknown. */
int websess_stream_up(const struct websess *s, uint32_t stream, const uint8_t **p, size_t *n);

/* Consumes n bytes (at most the oldest piece's) written to stream's backend and returns their
 * credit to the client (a WINDOW frame down). Returns 0, or -1 (nothing changed). */
int websess_stream_written(struct websess_table *t, struct websess *s, uint32_t stream, size_t n);

/* The DATA bytes the relay may still send down on stream (0 when not live). */
uint32_t websess_stream_credit(const struct websess *s, uint32_t stream);

/* The backend side of stream is done (dial failure, EOF, after the client's CLOSE): frees its
 * queues, remembers its id as closed, and sends CLOSE down unless the client closed it. */
void websess_stream_end(struct websess_table *t, struct websess *s, uint32_t stream);

/* DELETE /api/v1/session: ends s (on_end), drops its queues, invalidates its token, frees it. */
void websess_close(struct websess_table *t, struct websess *s);

/* What a sweep expired. */
struct websess_swept {
    unsigned bootstraps, sessions;
};

/* Forgets bootstraps past their lifetime and ends sessions idle for the grace (their last
 * websess_touch, create, up or down) at now. */
struct websess_swept websess_sweep(struct websess_table *t, int64_t now);

/* The heap bytes s holds: the session, its streams, queued frames and the unacknowledged
 * batch. An idle session (no streams, empty queues, batch acknowledged) holds only itself and
 * its closed ids. */
size_t websess_bytes(const struct websess *s);

/* The live sessions and bootstrap entries of the table. */
size_t websess_count(const struct websess_table *t);
size_t websess_bootstrap_count(const struct websess_table *t);

#endif
