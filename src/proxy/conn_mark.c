/* conn_mark.c: closing a connection other than the one being handled: marked now, closed before
 * the loop sleeps. It calls nothing above it: the relay's lists and the ME link skip a marked
 * connection until conn_close takes it off them. */
#include "proxy/conn_int.h"

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
    /* No event reaches it any more: its watchers and timers stop here; the waiters' wake-up,
     * the batch timer and the ME link see c->closing and pass it by. */
    mark_side_stop(loop, &c->cli);
    mark_side_stop(loop, &c->dc);
    ev_clear_pending(loop, &c->cli.io);
    ev_clear_pending(loop, &c->dc.io);
    ev_timer_stop(loop, &c->timer);
    ev_timer_stop(loop, &c->rate_timer);
    c->close_next = pw->closing;
    pw->closing = c;
    if (!ev_is_active(&pw->close_prepare))
        ev_prepare_start(loop, &pw->close_prepare);
}
