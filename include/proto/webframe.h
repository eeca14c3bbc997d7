/* webframe.h: WEB proxy v1 shared frames (docs/web.md): parse, build, order, credit, replay. */
#ifndef MTPROXY_PROTO_WEBFRAME_H
#define MTPROXY_PROTO_WEBFRAME_H

#include <stddef.h>
#include <stdint.h>

/*
 * One shared frame (docs/web.md 5), every integer big-endian:
 *
 *   0        1                 4                         8
 *   +--------+-----------------+-------------------------+=================+
 *   |  type  |  stream (u24)   |    len (u32)            | payload: len B  |
 *   +--------+-----------------+-------------------------+=================+
 *
 *   type     stream  payload                           direction
 *   01 OPEN    > 0   empty                             up (client to relay)
 *   02 DATA    > 0   1..len opaque bytes               both
 *   03 CLOSE   > 0   empty                             both
 *   04 WINDOW  > 0   u32 credit delta, not 0           both
 *   05 PING      0   0..WEBFRAME_TOKEN_MAX token       down (relay to client)
 *   06 PONG      0   the PING's token, exactly         up
 *   10 HELLO     0   one byte 01                       up, and only as the first frame
 *   11 WELCOME   0   empty                             down, and only as the first frame
 *   1f BYE       0   0..WEBFRAME_BYE_MAX reason bytes  down, and the last frame
 *
 * A carrier body (an /up request, a /down answer, a WebSocket message) is 1..4096 whole frames.
 */
#define WEBFRAME_HDR_LEN 8
#define WEBFRAME_MAX_PAYLOAD (1u << 20)    /* frame payload limit */
#define WEBFRAME_DATA_CHUNK (64u << 10)    /* largest DATA the relay builds */
#define WEBFRAME_MAX_STREAM 0xffffffu      /* stream ids are 24 bits */
#define WEBFRAME_INITIAL_WINDOW (4u << 20) /* per stream, per direction */
#define WEBFRAME_MAX_BATCH 4096            /* frames in one carrier body */
#define WEBFRAME_TOKEN_MAX 64              /* PING/PONG token (our bound) */
#define WEBFRAME_BYE_MAX 256               /* BYE reason (our bound) */

enum webframe_type {
    WEBFRAME_OPEN = 0x01,
    WEBFRAME_DATA = 0x02,
    WEBFRAME_CLOSE = 0x03,
    WEBFRAME_WINDOW = 0x04,
    WEBFRAME_PING = 0x05,
    WEBFRAME_PONG = 0x06,
    WEBFRAME_HELLO = 0x10,
    WEBFRAME_WELCOME = 0x11,
    WEBFRAME_BYE = 0x1f,
};

/* Which way a frame travels. */
enum webframe_dir {
    WEBFRAME_UP = 0,  /* client (app, through the bridge) to relay */
    WEBFRAME_DOWN = 1 /* relay to client */
};

enum webframe_status { WEBFRAME_OK = 0, WEBFRAME_NEED_MORE = 1, WEBFRAME_BAD = -1 };

/* One parsed frame; payload points into the parsed buffer. */
struct webframe {
    uint8_t type;           /* any byte: webframe_check says whether it is known */
    uint32_t stream;        /* 0..WEBFRAME_MAX_STREAM */
    uint32_t len;           /* payload bytes */
    const uint8_t *payload; /* len bytes (not NULL when len is 0: it points past the header) */
    size_t total;           /* WEBFRAME_HDR_LEN + len */
};

/* Parses the frame at p[0..n). OK: *f filled. NEED_MORE: *need (if not NULL) = the bytes the
 * frame takes in all (more than n). BAD: a len above max_payload (max_payload above
 * WEBFRAME_MAX_PAYLOAD counts as WEBFRAME_MAX_PAYLOAD); decided from the header alone, before
 * the payload arrives. The type is not looked at (see webframe_check). */
enum webframe_status webframe_parse(const uint8_t *p, size_t n, size_t max_payload,
                                    struct webframe *f, size_t *need);

/* Counts the frames of a whole carrier body p[0..n): OK with *count when the body is 1..
 * WEBFRAME_MAX_BATCH whole frames each within max_payload; BAD for an empty body, a trailing
 * partial frame, an oversized frame or too many frames. The frames' types are not looked at. */
enum webframe_status webframe_batch(const uint8_t *p, size_t n, size_t max_payload,
                                    size_t *count);

/* Writes the 8-byte header of a frame into out. Returns WEBFRAME_HDR_LEN, or 0 for a stream
 * above WEBFRAME_MAX_STREAM or a len above WEBFRAME_MAX_PAYLOAD. */
size_t webframe_header(uint8_t type, uint32_t stream, uint32_t len, uint8_t out[WEBFRAME_HDR_LEN]);

/* Writes a whole frame (header and len payload bytes; payload may be NULL when len is 0) into
 * out[0..cap). Returns the bytes written, or 0 if it does not fit or webframe_header refuses. */
size_t webframe_build(uint8_t type, uint32_t stream, const void *payload, uint32_t len,
                      uint8_t *out, size_t cap);

/* The stateless rules for one frame travelling in dir: a known type, stream zero for session
 * frames and nonzero for stream frames, the payload's shape (table above) and the direction.
 * Returns 0 if it keeps them, else -1. */
int webframe_check(const struct webframe *f, enum webframe_dir dir);

/* The u32 credit delta of a WINDOW frame that webframe_check accepted. */
uint32_t webframe_window_delta(const struct webframe *f);

/* What to do with a frame given the session's and the stream's state. */
enum webframe_verdict {
    WEBFRAME_ACCEPT = 0, /* apply it (state already updated) */
    WEBFRAME_DROP = 1,   /* well-formed and late (a closed stream's id): discard it */
    WEBFRAME_FATAL = -1  /* a protocol error: the session ends */
};

/* Session frames in the order they came, both directions (the holder sends one and receives
 * the other). All zero at the start. */
struct webframe_session {
    uint8_t up_started, down_started; /* HELLO / WELCOME seen */
    uint8_t bye;                      /* BYE seen: nothing more goes down */
    uint8_t ping_out;                 /* a PING awaits its PONG */
    uint8_t ping_len;
    uint8_t ping[WEBFRAME_TOKEN_MAX];
};

/* Applies the session-order rules to f (which webframe_check accepted for dir): the first
 * frame up is HELLO and the first down WELCOME, neither comes again; nothing goes down after
 * BYE; a PING waits for the PONG with its exact token (one PING at a time); a PONG needs one.
 * Stream frames pass through (ACCEPT) for webframe_stream_step to judge. Returns ACCEPT
 * (state updated) or FATAL (state unchanged). */
enum webframe_verdict webframe_session_step(struct webframe_session *s, const struct webframe *f,
                                            enum webframe_dir dir);

enum webframe_stream_state {
    WEBFRAME_STREAM_UNKNOWN = 0, /* never opened, or its tombstone was forgotten */
    WEBFRAME_STREAM_LIVE = 1,
    WEBFRAME_STREAM_CLOSED = 2 /* a tombstone: closed by either side */
};

/* One stream id's state as its session keeps it (an all-zero struct is UNKNOWN). */
struct webframe_stream {
    uint8_t state;        /* enum webframe_stream_state */
    uint32_t up_credit;   /* DATA bytes the client may still send (the relay's receive window) */
    uint32_t down_credit; /* DATA bytes the relay may still send (the client's window) */
};

/* Applies a stream frame f (webframe_check accepted for dir) to the state of its id:
 *   OPEN on UNKNOWN: LIVE with WEBFRAME_INITIAL_WINDOW credit both ways; on LIVE or CLOSED (an
 *     id used again): FATAL.
 *   DATA on LIVE: takes len from the sender's credit (FATAL beyond it).
 *   WINDOW on LIVE: adds the delta to the receiver's sending credit (FATAL past UINT32_MAX).
 *   CLOSE on LIVE: CLOSED.
 *   DATA, WINDOW, CLOSE on CLOSED: DROP (a late frame of a close race); on UNKNOWN: FATAL.
 * A session frame is FATAL here. State is unchanged unless the verdict is ACCEPT. */
enum webframe_verdict webframe_stream_step(struct webframe_stream *st, const struct webframe *f,
                                           enum webframe_dir dir);

/* Takes n bytes of credit: 0 with *credit lowered, or -1 (unchanged) if n is above it. */
int webframe_credit_take(uint32_t *credit, uint32_t n);

/* Adds delta to *credit: 0, or -1 (unchanged) for a delta of 0 or a sum above UINT32_MAX. */
int webframe_credit_grant(uint32_t *credit, uint32_t delta);

/* The verdict on a sequence number or cursor a carrier request names. */
enum webframe_replay {
    WEBFRAME_FRESH = 0,   /* the next one: do the work */
    WEBFRAME_REPLAY = 1,  /* an exact retry: answer as before, apply nothing */
    WEBFRAME_REFUSE = -1  /* a gap, an old one, or a retry with other bytes: protocol error */
};

/* The uplink's last committed X-Up-Seq (0 before the first) and its body's digest. */
struct webframe_up {
    uint64_t committed;
    uint8_t digest[32];
};

/* Judges POST /up with seq and the SHA-256 of its body: FRESH for committed + 1, REPLAY for
 * committed (not 0) with the same digest, REFUSE otherwise (compared in constant time). */
enum webframe_replay webframe_up_judge(const struct webframe_up *u, uint64_t seq,
                                       const uint8_t digest[32]);

/* Records seq (which webframe_up_judge found FRESH) as committed with its body's digest, once
 * every frame of the body was accepted and queued. */
void webframe_up_commit(struct webframe_up *u, uint64_t seq, const uint8_t digest[32]);

/* The downlink: the last acknowledged cursor (0 at the start) and whether the batch numbered
 * acked + 1 has been issued and not yet acknowledged. */
struct webframe_down {
    uint64_t acked;
    int pending;
};

/* Judges POST /down with X-Down-Cursor cursor. With a batch pending: cursor acked + 1
 * acknowledges it (state: acked advances, nothing pending) and is FRESH; cursor acked is
 * REPLAY (send the pending batch again, byte for byte). With none pending, cursor acked is
 * FRESH. Anything else is REFUSE (state unchanged). FRESH means: wait for frames and, for a
 * nonempty batch, number it with webframe_down_issue. */
enum webframe_replay webframe_down_judge(struct webframe_down *d, uint64_t cursor);

/* Numbers a new nonempty batch: returns acked + 1 (the X-Down-Cursor to send) and marks it
 * pending; 0 if a batch is already pending or the count would wrap. */
uint64_t webframe_down_issue(struct webframe_down *d);

/* Parses a canonical decimal header value s[0..n) (X-Up-Seq, X-Down-Cursor, a lane's stream
 * id): digits only, no sign, no leading zero unless the value is 0, at most UINT64_MAX.
 * Returns 0 with *out, or -1. */
int webframe_decimal(const char *s, size_t n, uint64_t *out);

#endif
