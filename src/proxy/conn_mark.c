/* conn_mark.c: what code may ask of a connection it is not handling: close later, pause reads. */
#include "proxy/conn_int.h"

/* Pauses accepting while the connection slots or the buffer arena are used up. */
void conn_check_accept(struct proxy_worker *pw)
{
    if (pool_full(&pw->conns) || relay_blocks_full(pw) || arena_exhausted(&pw->arena))
        worker_pause_accept(pw->w);
    else
        worker_resume_accept(pw->w);
}

void conn_unhook(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    ev_timer_stop(pw->w->loop, &c->timer);
    ev_timer_stop(pw->w->loop, &c->rate_timer);
    if (c->waiting_block)
        waiters_remove(pw, c);
    if (c->batched)
        batch_remove(pw, c);
    if (c->mc)
        middle_detach(c);
}

void conn_close_later(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    if (c->closing)
        return;
    c->closing = 1;
    c->close_reason = (int8_t)r;
    /* Nothing reaches it any more: no I/O, no timer, no buffer wake-up, no batch flush, no
     * bytes from an ME link. */
    side_watch(c, &c->cli, 0);
    side_watch(c, &c->dc, 0);
    conn_unhook(c);
    c->close_next = pw->closing;
    pw->closing = c;
    if (!ev_is_active(&pw->close_prepare))
        ev_prepare_start(pw->w->loop, &pw->close_prepare);
}

void conn_rate_pause(struct conn *c, int dir, double wait)
{
    struct ev_loop *loop = c->pw->w->loop;
    ev_tstamp until = ev_now(loop) + wait;
    c->rate_until[dir] = until;
    if (ev_is_active(&c->rate_timer)) {
        if (ev_timer_remaining(loop, &c->rate_timer) <= wait)
            return;
        ev_timer_stop(loop, &c->rate_timer);
    }
    ev_timer_set(&c->rate_timer, wait, 0);
    ev_timer_start(loop, &c->rate_timer);
}
