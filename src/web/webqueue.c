/* webqueue.c: the session table's queues and streams: items charged against the session's and
 * the process's pending limits, frames queued down, live streams and recently closed ids. */
#include <stdlib.h>
#include <string.h>

#include "web/websessi.h"

/* Adds add to *c unless the sum passes max. 0, or -1 (unchanged). */
int wsq_reserve(atomic_size_t *c, size_t add, uint64_t max)
{
    size_t was = atomic_fetch_add(c, add);
    if ((uint64_t)was + add > max) {
        atomic_fetch_sub(c, add);
        return -1;
    }
    return 0;
}

int wsq_refuse(struct websess_table *t, enum websess_reason r)
{
    STAT_INC(&t->c.refused[r]);
    return (int)r;
}

/* Whether bytes and items more fit s and the process: -1 if so, else the reason. */
int wsq_fits(const struct websess_table *t, const struct websess *s, uint64_t bytes,
                uint64_t items)
{
    if (s->pending_bytes + bytes > t->l.pending_session ||
        s->pending_items + items > t->l.items_session)
        return WEBSESS_R_PENDING_SESSION;
    if (atomic_load(&t->g->pending_bytes) + bytes > t->l.pending_process ||
        atomic_load(&t->g->pending_items) + items > t->l.items_process)
        return WEBSESS_R_PENDING_PROCESS;
    return -1;
}

void wsq_charge(struct websess_table *t, struct websess *s, uint64_t bytes, uint64_t items)
{
    s->pending_bytes += bytes;
    s->pending_items += items;
    atomic_fetch_add(&t->g->pending_bytes, (size_t)bytes);
    atomic_fetch_add(&t->g->pending_items, (size_t)items);
}

void wsq_uncharge(struct websess_table *t, struct websess *s, uint64_t bytes, uint64_t items)
{
    s->pending_bytes -= bytes;
    s->pending_items -= items;
    atomic_fetch_sub(&t->g->pending_bytes, (size_t)bytes);
    atomic_fetch_sub(&t->g->pending_items, (size_t)items);
}

uint64_t wsq_cost(const struct websess_table *t, size_t len)
{
    return (uint64_t)len + t->l.item_charge;
}

void wsq_queue_push(struct queue *q, struct item *it)
{
    it->next = NULL;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
}

struct item *wsq_queue_pop(struct queue *q)
{
    struct item *it = q->head;
    if (it) {
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
    }
    return it;
}

/* Frees every item of q and takes their charge off s. */
void wsq_queue_drop(struct websess_table *t, struct websess *s, struct queue *q)
{
    struct item *it;
    while ((it = wsq_queue_pop(q)) != NULL) {
        wsq_uncharge(t, s, wsq_cost(t, it->len), 1);
        free(it);
    }
}

size_t wsq_queue_bytes(const struct queue *q)
{
    size_t n = 0;
    for (const struct item *it = q->head; it; it = it->next)
        n += sizeof *it + it->len;
    return n;
}

/* Queues one frame down (charged). force: control frames a limit must not stop. 0, or the
 * refusal reason (counted). */
int wsq_queue_frame(struct websess_table *t, struct websess *s, uint8_t type, uint32_t stream,
                       const void *payload, uint32_t len, int force)
{
    size_t total = WEBFRAME_HDR_LEN + (size_t)len;
    int r = force ? -1 : wsq_fits(t, s, wsq_cost(t, total), 1);
    if (r >= 0)
        return wsq_refuse(t, (enum websess_reason)r);
    struct lane *ln = wsq_lane_of(s, stream);
    if (!ln || ln->dropped)
        return 0; /* no one to read it */
    struct item *it = malloc(sizeof *it + total);
    if (!it)
        return wsq_refuse(t, WEBSESS_R_PENDING_PROCESS);
    it->len = (uint32_t)webframe_build(type, stream, payload, len, it->b, total);
    it->off = 0;
    wsq_charge(t, s, wsq_cost(t, total), 1);
    int was_empty = ln->downq.head == NULL;
    wsq_queue_push(&ln->downq, it);
    if (was_empty && t->h.on_down)
        t->h.on_down(t->h.ctx, s, ln->id);
    return 0;
}

int wsq_lanes(const struct websess *s)
{
    return s->mode == WEBSESS_HTTPS_LANES || s->mode == WEBSESS_WEBSOCKET_LANES;
}

struct lane *wsq_lane_of(struct websess *s, uint32_t stream)
{
    if (!stream || !wsq_lanes(s))
        return &s->l0;
    for (uint32_t i = 0; i < s->nlanes; i++)
        if (s->lanes[i].id == stream)
            return &s->lanes[i];
    return NULL;
}

/* A new zeroed element at the end of the array *arr of *n elements of size bytes (room for
 * *cap: doubled from 4 when full). NULL if out of memory (nothing changed). */
static void *array_push(void *arr, uint32_t *n, uint32_t *cap, size_t size)
{
    void **a = arr;
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 4;
        void *p = realloc(*a, (size_t)c * size);
        if (!p)
            return NULL;
        *a = p;
        *cap = c;
    }
    void *e = (char *)*a + (size_t)(*n)++ * size;
    memset(e, 0, size);
    return e;
}

/* Removes element e of the array *arr (*n elements of size bytes): the last takes its place;
 * the array is freed once empty. */
static void array_remove(void *arr, uint32_t *n, uint32_t *cap, size_t size, void *e)
{
    void **a = arr;
    memmove(e, (char *)*a + (size_t)--(*n) * size, size);
    if (*n == 0) {
        free(*a);
        *a = NULL;
        *cap = 0;
    }
}

struct lane *wsq_lane_add(struct websess *s, uint32_t id)
{
    struct lane *ln = array_push(&s->lanes, &s->nlanes, &s->cap_lanes, sizeof *ln);
    if (ln)
        ln->id = id;
    return ln;
}

void wsq_lane_clear(struct websess_table *t, struct websess *s, struct lane *ln)
{
    wsq_queue_drop(t, s, &ln->downq);
    if (ln->batch)
        wsq_uncharge(t, s, ln->batch_bytes, ln->batch_items);
    free(ln->batch);
    ln->batch = NULL;
    ln->batch_len = 0;
}

int wsq_lane_reap(struct websess_table *t, struct websess *s, struct lane *ln)
{
    if (ln == &s->l0 || !(ln->closed && (ln->dropped || (!ln->downq.head && !ln->batch))))
        return 0;
    wsq_lane_clear(t, s, ln);
    array_remove(&s->lanes, &s->nlanes, &s->cap_lanes, sizeof *ln, ln);
    return 1;
}

size_t wsq_lane_bytes(const struct lane *ln)
{
    return ln->batch_len + wsq_queue_bytes(&ln->downq);
}

struct stream *wsq_stream_find(const struct websess *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->nstreams; i++)
        if (s->streams[i].id == id)
            return &s->streams[i];
    return NULL;
}

int wsq_closed_has(const struct websess *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->nclosed; i++)
        if (s->closed[i] == id)
            return 1;
    return 0;
}

/* Remembers id as closed; the oldest is forgotten once closed_ids are held. */
void wsq_closed_add(struct websess_table *t, struct websess *s, uint32_t id)
{
    uint32_t max = t->l.closed_ids;
    if (max == 0)
        return;
    if (s->nclosed == s->cap_closed && s->cap_closed < max) {
        uint32_t cap = s->cap_closed ? s->cap_closed * 2 : 8;
        if (cap > max)
            cap = max;
        uint32_t *p = realloc(s->closed, cap * sizeof *p);
        if (p) {
            s->closed = p;
            s->cap_closed = cap;
        }
    }
    if (s->nclosed < s->cap_closed) {
        s->closed[s->nclosed++] = id;
    } else if (s->cap_closed) {
        s->closed[s->closed_head] = id;
        s->closed_head = (s->closed_head + 1) % s->cap_closed;
    }
}

/* Adds a live stream id (room checked by the caller). NULL if out of memory. */
struct stream *wsq_stream_add(struct websess *s, uint32_t id)
{
    struct stream *st = array_push(&s->streams, &s->nstreams, &s->cap_streams, sizeof *st);
    if (st)
        st->id = id;
    return st;
}

/* Forgets stream st of s (its queue dropped, its id remembered as closed). */
void wsq_stream_remove(struct websess_table *t, struct websess *s, struct stream *st)
{
    wsq_queue_drop(t, s, &st->up);
    wsq_closed_add(t, s, st->id);
    atomic_fetch_sub(&t->g->streams, 1);
    array_remove(&s->streams, &s->nstreams, &s->cap_streams, sizeof *st, st);
}
