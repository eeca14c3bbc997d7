/* conn_close.c: the one way a connection ends (log line, counters, frees), the close queue. */
#include "conn/conn_int.h"

#include <stdlib.h>
#include <sys/socket.h>

#include "core/log.h"

/* --- log rate limit ------------------------------------------------------------------------ */

#define LOG_BURST 5          /* lines per reason per window before they are only counted */
#define LOG_WINDOW 10.0      /* seconds */

/* 1 if a line about a stranger (slot: a close reason or LOGLIM_REJECT) may be written now; a
 * flood of probes costs a handful of lines and one summary per window, not a line each. */
int conn_loglim_allow(struct proxy_worker *pw, int slot)
{
    if (pw->loglim[slot].shown < LOG_BURST) {
        pw->loglim[slot].shown++;
        if (!ev_is_active(&pw->loglim_timer)) {
            ev_timer_set(&pw->loglim_timer, LOG_WINDOW, 0);
            ev_timer_start(pw->w->loop, &pw->loglim_timer);
        }
        return 1;
    }
    pw->loglim[slot].dropped++;
    return 0;
}

void conn_loglim_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct proxy_worker *pw = t->data;
    int again = 0;
    for (int i = 0; i <= CR_COUNT; i++) {
        if (pw->loglim[i].dropped)
            log_info("w%d: %u more %s%s in the last %.0f s (not logged one by one)", pw->w->id,
                     pw->loglim[i].dropped, i == LOGLIM_REJECT ? "rejected clients" : "closes: ",
                     i == LOGLIM_REJECT ? "" : conn_reason_name((enum conn_reason)i), LOG_WINDOW);
        again |= pw->loglim[i].shown != 0;
        pw->loglim[i].shown = pw->loglim[i].dropped = 0;
    }
    if (again) { /* keep the window running while strangers keep coming */
        ev_timer_set(t, LOG_WINDOW, 0);
        ev_timer_start(loop, t);
    }
}

/* --- close ----------------------------------------------------------------------------- */

/* rst-on-close: the coming close(2) of fd sends a TCP reset instead of a FIN (SO_LINGER 0). */
void conn_reset_on_close(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
}

/* Takes a marked connection off the worker's close queue. */
static void closing_unlink(struct proxy_worker *pw, struct conn *c)
{
    for (struct conn **p = &pw->closing; *p; p = &(*p)->wait_next)
        if (*p == c) {
            *p = c->wait_next;
            break;
        }
    c->wait_next = NULL;
}

/* The close line: one for the operator for a client that proved a secret (with
 * log-connections), else debug for normal ends and silent connections, info (rate-limited for
 * strangers) for the rest. */
static void close_log(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    if (c->uid >= 0 && o->log_connections && log_enabled(LOG_LVL_INFO)) {
        /* A client that proved a secret: one line for the operator (never a secret). */
        char peer[SOCK_ADDR_STRLEN], ja4[JA4_LEN + 1];
        sock_addr_format(&c->peer, peer, sizeof peer);
        ja4stat_conn_str(c, ja4);
        log_info("w%d conn %llu closed: user %s client %s dc %d kind %s%s up %llu down %llu "
                 "bytes duration %.1f s reason %s state %s%s%s",
                 pw->w->id, (unsigned long long)c->id, users_name(pw->users, (uint32_t)c->uid),
                 peer, c->dc_id, c->tls ? "faketls-" : "", obfs2_tag_name(c->tag),
                 (unsigned long long)c->up_bytes, (unsigned long long)c->down_bytes,
                 ev_now(pw->w->loop) - c->born, conn_reason_name(r),
                 conn_state_name((enum conn_state)c->state), ja4[0] ? " ja4=" : "", ja4);
    } else {
        /* Normal ends, and connections that closed before saying anything (health checks,
         * port scanners), are debug; the rest are worth an operator's eye. */
        enum log_level lvl = (r == CR_DONE || r == CR_CLIENT_CLOSED || r == CR_SHUTDOWN ||
                              r == CR_REFUSED || r == CR_ACCEPT_RATE || c->uid >= 0 ||
                              (r == CR_CLIENT_EARLY_EOF && c->hdr_len == 0))
                                 ? LOG_LVL_DEBUG
                                 : LOG_LVL_INFO;
        if (log_enabled(lvl) &&
            (lvl != LOG_LVL_INFO || c->authed || conn_loglim_allow(pw, (int)r))) {
            char peer[SOCK_ADDR_STRLEN], ja4[JA4_LEN + 1];
            sock_addr_format(&c->peer, peer, sizeof peer);
            ja4stat_conn_str(c, ja4);
            log_msg(lvl,
                    "w%d conn %llu %s dc %d: closed (%s, state %s), up %llu down %llu bytes%s%s",
                    pw->w->id, (unsigned long long)c->id, peer, c->dc_id, conn_reason_name(r),
                    conn_state_name((enum conn_state)c->state),
                    (unsigned long long)c->up_bytes, (unsigned long long)c->down_bytes,
                    ja4[0] ? " ja4=" : "", ja4);
        }
    }
}

/* Ends a connection: logs once, counts, frees everything. The caller must not touch c
 * afterwards. Called by the state machine's entry points only (conn.c, the worker's sweep,
 * generation adoption and stop), and, until they return verdicts, by relay.c and middle_*.c. */
int conn_close(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    if (c->closing) { /* marked before: closed now, with the reason it was marked for */
        closing_unlink(pw, c);
        r = (enum conn_reason)c->close_reason;
    }
    close_log(c, r);
    ja4stat_conn_close(c);
    const struct options *o = &c->gen->opt;
    if (c->uid >= 0) {
        users_release(pw->users, (uint32_t)c->uid, &c->peer, ev_now(pw->w->loop));
        STAT_DEC(&c->us->active);
        if (r == CR_LIMIT || r == CR_USER_REMOVED || r == CR_DRAINED)
            STAT_INC(&c->us->closed_limit);
    }
    handshake_done(c);
    STAT_INC(&pw->stats.closed[r]);
    STAT_DEC(&pw->stats.active);
    int rst = o->rst_on_close;
    if (c->cli.fd >= 0 && (rst == RST_ALWAYS || (rst == RST_PROBES && !c->authed))) {
        /* a reset instead of a FIN, as servers behind some balancers do */
        conn_reset_on_close(c->cli.fd);
    }
    if (c->kind)
        STAT_DEC(&pw->stats.kind_active[c->kind]);
    stranger_done(c);
    reserve_release(c);
    ev_timer_stop(pw->w->loop, &c->timer);
    ev_timer_stop(pw->w->loop, &c->rate_timer);
    if (c->waiting_block)
        waiters_remove(pw, c);
    if (c->batched)
        batch_remove(pw, c);
    if (c->mc)
        middle_detach(c);
    side_release(c, &c->cli);
    side_release(c, &c->dc);
    hbuf_free(c);
    for (int i = 0; i < 4; i++)
        crypto_ctr_wipe(&c->ctr[i]);
    if (c->prev)
        c->prev->next = c->next;
    else
        pw->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->state = CS_FREE;
    gen_unref(c->gen);
    c->gen = NULL;
    pool_put(&pw->conns, c);
    waiters_wake(pw);
    conn_check_accept(pw);
    return -1;
}

/* Before the loop sleeps: closes the connections marked in this pass (redis's
 * freeClientsInAsyncFreeQueue, haproxy's stream_shutdown then process_stream). A prepare
 * watcher, not a check watcher: a check runs only after the next wake-up, and the marked
 * connections' sockets would stay open for as long as the loop sleeps. */
void conn_close_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
    struct proxy_worker *pw = p->data;
    while (pw->closing)
        conn_close(pw->closing, (enum conn_reason)pw->closing->close_reason);
    ev_prepare_stop(loop, p);
}
