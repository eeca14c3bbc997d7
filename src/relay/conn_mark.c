/* conn_mark.c: closing a connection other than the one being handled: marked now, closed before
 * the loop sleeps; and the worker's lists a connection waits on. It calls nothing above it. */
#include "conn/conn_int.h"

#include <stddef.h>

/* Unlinks c from the singly linked list at head whose link field sits at link_off. */
static void conn_unlink(struct conn **head, struct conn *c, size_t link_off)
{
    for (struct conn **pp = head; *pp; pp = (struct conn **)(void *)((char *)*pp + link_off)) {
        if (*pp == c) {
            struct conn **link = (struct conn **)(void *)((char *)c + link_off);
            *pp = *link;
            *link = NULL;
            return;
        }
    }
}

void waiters_remove(struct proxy_worker *pw, struct conn *c)
{
    conn_unlink(c->mode == CONN_MODE_MASK ? &pw->mask_waiters : &pw->waiters, c,
                offsetof(struct conn, wait_next));
    c->waiting_block = 0;
}

void batch_remove(struct proxy_worker *pw, struct conn *c)
{
    conn_unlink(&pw->batch, c, offsetof(struct conn, batch_next));
    c->batched = 0;
}

/* Stops a side's watcher (side_watch(c, s, 0) without calling up into the relay). */
static void mark_side_stop(struct ev_loop *loop, struct conn_side *s)
{
    if (s->fd >= 0 && s->events) {
        ev_io_stop(loop, &s->io);
        s->events = 0;
    }
}

void conn_close_later(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    struct ev_loop *loop = pw->w->loop;
    if (c->closing)
        return;
    c->closing = 1;
    c->close_reason = (int8_t)r;
    /* No event reaches it any more: its watchers and timers stop, it leaves the waiters' and
     * the batch list (wait_next links it into the close queue), and the ME link sees
     * c->closing and passes it by. */
    mark_side_stop(loop, &c->cli);
    mark_side_stop(loop, &c->dc);
    ev_clear_pending(loop, &c->cli.io);
    ev_clear_pending(loop, &c->dc.io);
    ev_timer_stop(loop, &c->timer);
    ev_timer_stop(loop, &c->rate_timer);
    if (c->waiting_block)
        waiters_remove(pw, c);
    if (c->batched)
        batch_remove(pw, c);
    c->wait_next = pw->closing;
    pw->closing = c;
    if (!ev_is_active(&pw->close_prepare))
        ev_prepare_start(loop, &pw->close_prepare);
}
