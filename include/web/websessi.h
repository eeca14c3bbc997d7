/* websessi.h: the session table's insides, shared by websess.c (tokens, bootstraps, sessions,
 * the carriers' up and down) and webqueue.c below it (queues, their charge against the limits,
 * streams and closed ids). Nothing else includes it. */
#ifndef MTPROXY_WEB_WEBSESSI_H
#define MTPROXY_WEB_WEBSESSI_H

#include <stdint.h>

#include "core/siphash.h"
#include "proto/webframe.h"
#include "web/websess.h"

#define RATE_UNIT 60000u /* a token bucket counts in events x ms-per-minute */

/* A queued piece: a whole frame (down) or DATA payload bytes from off on (up). */
struct item {
    struct item *next;
    uint32_t len, off;
    uint8_t b[];
};

struct queue {
    struct item *head, *tail;
};

struct stream {
    uint32_t id;
    uint8_t client_closed;
    struct webframe_stream st;
    struct queue up; /* client DATA for the backend */
};

/* What the token tables chain: bootstraps and sessions start with it. */
struct entry {
    struct entry *next;
    char token[WEBSESS_TOKEN_LEN + 1];
};

struct boot {
    struct entry e;
    int user;
    uint8_t spent;
    int64_t expires;
    struct websess *sess; /* the session it created, while both live */
};

/* A lane: an uplink sequence, a downlink cursor, the frames queued down and the issued batch.
 * Lane 0 is the session's own: every frame in the https and websocket carriers, session frames
 * only in the lanes carriers, where each stream has a lane of its own from its OPEN until its
 * CLOSE went down and was acknowledged (docs/web.md 4, "Lanes"). */
struct lane {
    uint32_t id;
    uint8_t closed;  /* its stream is gone: the lane ends once its frames are delivered */
    uint8_t dropped; /* no one reads it any more (its WebSocket failed): frames are discarded */
    struct webframe_up up;
    struct webframe_down down;
    struct queue downq;
    uint8_t *batch; /* the issued, unacknowledged batch */
    size_t batch_len;
    uint64_t batch_bytes, batch_items; /* the charge its frames carried */
};

struct websess {
    struct entry e;
    enum websess_mode mode;
    int user;
    int64_t last;
    struct boot *boot;
    struct webframe_session fs;
    struct lane l0;
    struct lane *lanes; /* the streams' lanes (lanes carriers) */
    uint32_t nlanes, cap_lanes;
    struct stream *streams;
    uint32_t nstreams, cap_streams;
    uint32_t *closed; /* recently closed ids: linear until full, then a ring */
    uint32_t nclosed, cap_closed, closed_head;
    uint64_t pending_bytes, pending_items;
};

struct bucket {
    uint64_t tokens;
    int64_t last;
};

struct websess_table {
    struct websess_limits l;
    struct websess_shared *g;
    struct websess_hooks h;
    struct siphash_key key;
    struct entry **sess, **boots;
    size_t smask, bmask, nsess, nboot;
    struct bucket session_rate, stream_rate, boot_rate;
    struct websess_counters c;
};

/* webqueue.c */

/* Adds add to *c unless the sum passes max. 0, or -1 (unchanged). */
int wsq_reserve(atomic_size_t *c, size_t add, uint64_t max);

/* Counts a refusal for r; returns r. */
int wsq_refuse(struct websess_table *t, enum websess_reason r);

/* Whether bytes and items more fit s and the process: -1 if so, else the reason. */
int wsq_fits(const struct websess_table *t, const struct websess *s, uint64_t bytes,
             uint64_t items);
void wsq_charge(struct websess_table *t, struct websess *s, uint64_t bytes, uint64_t items);
void wsq_uncharge(struct websess_table *t, struct websess *s, uint64_t bytes, uint64_t items);

/* What a queued item of len bytes counts for. */
uint64_t wsq_cost(const struct websess_table *t, size_t len);

void wsq_queue_push(struct queue *q, struct item *it);
struct item *wsq_queue_pop(struct queue *q);

/* Frees every item of q and takes their charge off s. */
void wsq_queue_drop(struct websess_table *t, struct websess *s, struct queue *q);

/* The heap bytes q holds. */
size_t wsq_queue_bytes(const struct queue *q);

/* Queues one frame down (charged). force: control frames a limit must not stop. 0, or the
 * refusal reason (counted). */
int wsq_queue_frame(struct websess_table *t, struct websess *s, uint8_t type, uint32_t stream,
                    const void *payload, uint32_t len, int force);

/* 1 if s's carrier gives each stream a lane (https-lanes, websocket-lanes). */
int wsq_lanes(const struct websess *s);

/* The lane frames of stream go down on (lane 0 unless s has lanes), or NULL (none: dropped). */
struct lane *wsq_lane_of(struct websess *s, uint32_t stream);

/* A new lane id of s (room checked by the caller). NULL if out of memory. */
struct lane *wsq_lane_add(struct websess *s, uint32_t id);

/* Drops ln's queue and batch (their charge off s). */
void wsq_lane_clear(struct websess_table *t, struct websess *s, struct lane *ln);

/* Ends ln (cleared, removed from s) if it is a stream's lane whose stream is gone and that has
 * nothing left to deliver, or no one to deliver it to. 1 if it ended (ln is invalid), else 0. */
int wsq_lane_reap(struct websess_table *t, struct websess *s, struct lane *ln);

/* The heap bytes ln's frames hold. */
size_t wsq_lane_bytes(const struct lane *ln);

/* The live stream id of s, or NULL; whether id is one of the recently closed. */
struct stream *wsq_stream_find(const struct websess *s, uint32_t id);
int wsq_closed_has(const struct websess *s, uint32_t id);

/* Remembers id as closed; the oldest is forgotten once closed_ids are held. */
void wsq_closed_add(struct websess_table *t, struct websess *s, uint32_t id);

/* Adds a live stream id (room checked by the caller). NULL if out of memory. */
struct stream *wsq_stream_add(struct websess *s, uint32_t id);

/* Forgets stream st of s (its queue dropped, its id remembered as closed). */
void wsq_stream_remove(struct websess_table *t, struct websess *s, struct stream *st);

#endif
