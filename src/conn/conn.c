/* conn.c: the connection state machine (events in, verdicts out; it closes) and accept. */
#include "conn/conn_int.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "config/prefix.h"
#include "upstream/tlslearn.h"

/* --- verdicts ------------------------------------------------------------------------- */

/* The one place a step's verdict takes effect: a close reason ends c; CR_NONE (go on: the
 * step moved c to the state it wanted) leaves it be. */
static void conn_verdict(struct conn *c, enum conn_reason r)
{
    if (r != CR_NONE)
        conn_close(c, r);
}

/* --- the replay store's answer ---------------------------------------------------------- */

/* The store answered (or its deadline passed: RSTORE_FAILED): the handshake check runs again
 * from where it stopped, with the answer. */
static enum conn_reason store_resume(struct conn *c, enum rstore_verdict v)
{
    c->rs_verdict = (uint8_t)(v + 1);
    c->state = c->rs_resume;
    timer_arm(c, c->gen->opt.handshake_timeout_ms / 1000.0);
    if (c->state == CS_TLS_HELLO)
        return hs_tls_hello_check(c);
    return hs_obfs2_done(c, NULL, 0);
}

void conn_store_answer(void *owner, uint64_t token, enum rstore_verdict v)
{
    struct conn *c = owner; /* a pool slot: its memory outlives the connection */
    if (c->state != CS_STORE_WAIT || c->id != token)
        return; /* closed (or gave up waiting) meanwhile */
    conn_verdict(c, store_resume(c, v));
}

/* --- events ------------------------------------------------------------------------------ */

/* The client's socket is ready: the step of c's state. */
static enum conn_reason cli_step(struct conn *c, int revents)
{
    switch (c->state) {
    case CS_PROXY_HDR:
        return hs_proxy_read(c);
    case CS_HEADER:
        return hs_first_read(c);
    case CS_TLS_HELLO:
        return hs_tls_hello_read(c);
    case CS_TLS_HEADER:
        return hs_tls_header_read(c, revents);
    case CS_CONNECTING: { /* our ServerHello may still be going out */
        enum conn_reason r = side_flush(c, &c->cli, &c->dc);
        if (!conn_stop(r))
            side_watch(c, &c->cli, c->cli.queued ? EV_WRITE : 0);
        return r;
    }
    case CS_HOLD:
        return front_hold_read(c);
    case CS_RELAY:
        return c->mc ? middle_client_event(c, revents) : relay_event(c, &c->cli, revents);
    default:
        return CR_NONE;
    }
}

static void on_cli_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    if (c->closing)
        return;
    conn_verdict(c, cli_step(c, revents));
}

static void on_dc_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    if (c->closing)
        return;
    if (c->state == CS_CONNECTING)
        conn_verdict(c, up_event(c, revents));
    else if (c->state == CS_RELAY)
        conn_verdict(c, relay_event(c, &c->dc, revents));
}

/* RELAY: the idle timer is armed lazily: traffic only moves last_io. A fronted connection has
 * a shorter idle time and a bound on its whole life. */
static enum conn_reason idle_check(struct conn *c, ev_tstamp now)
{
    const struct options *o = &c->gen->opt;
    int mask = c->mode == CONN_MODE_MASK;
    double idle = (mask ? o->mask_idle_ms : o->idle_timeout_ms) / 1000.0;
    double left = c->last_io + idle - now;
    double life = mask ? c->born + o->mask_lifetime_ms / 1000.0 - now : left;
    if (left <= 0 || life <= 0)
        return CR_IDLE;
    timer_arm(c, left < life ? left : life);
    return CR_NONE;
}

/* c's deadline came: the step of c's state. */
static enum conn_reason timer_step(struct conn *c, ev_tstamp now)
{
    switch (c->state) {
    case CS_HEADER:
    case CS_TLS_HELLO:
        /* No valid handshake in time: like any other non-client, it goes to the real site
         * (which decides how long to wait), or is closed when there is none. */
        if (!mask_lookup(&c->gen->masks, NULL))
            return CR_HANDSHAKE_TIMEOUT;
        if (c->state == CS_TLS_HELLO)
            return front_reject(c, c->hbuf, c->hlen, NULL, "handshake timeout");
        return front_reject(c, c->hdr, c->hdr_len, NULL, "handshake timeout");
    case CS_TLS_HEADER:
        return CR_HANDSHAKE_TIMEOUT;
    case CS_STORE_WAIT: /* the store is slow: its failure policy decides */
        return store_resume(c, RSTORE_FAILED);
    case CS_PROXY_HDR: /* never fronted: this is the balancer, not a client or a probe */
        STAT_INC(&c->pw->stats.pp_bad);
        return CR_HANDSHAKE_TIMEOUT;
    case CS_HOLD:
        return CR_BAD_HEADER;
    case CS_CONNECTING:
        return up_timeout(c);
    case CS_RELAY:
        return idle_check(c, now);
    default:
        return CR_NONE;
    }
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;
    if (c->closing)
        return;
    conn_verdict(c, timer_step(c, ev_now(loop)));
}

/* --- accept ---------------------------------------------------------------------------- */

/* Points the connection's stream pointers at its inline streams (un-keyed, no context). */
static void conn_ciphers(struct conn *c)
{
    struct crypto_ctr **s[4] = {&c->cli_dec, &c->cli_enc, &c->dc_enc, &c->dc_dec};
    for (int i = 0; i < 4; i++)
        *s[i] = &c->ctr[i];
}

/* Rate limit: a paused direction's time came; read again. */
static void on_rate_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;
    if (c->closing)
        return;
    ev_tstamp now = ev_now(loop), next = 0;
    for (int d = 0; d < 2; d++) {
        if (c->rate_until[d] && c->rate_until[d] <= now + 0.0005)
            c->rate_until[d] = 0;
        else if (c->rate_until[d] && (!next || c->rate_until[d] < next))
            next = c->rate_until[d];
    }
    if (next) {
        ev_timer_set(t, next - now, 0);
        ev_timer_start(loop, t);
    }
    if (c->state == CS_RELAY)
        relay_watch(c);
}


/* Checked before any byte is read, against g (the generation the connection would take): the
 * access list (on the socket's peer unless a PROXY header will name the client), or who may
 * send PROXY headers; then accept-rate (behind a balancer, on the header's address instead, in
 * hs_proxy_read). 1 if refused (counted, fd closed). */
static int accept_refused(struct proxy_worker *pw, const struct gen *g, int fd,
                          const struct sock_addr *peer)
{
    const struct options *o = &g->opt;
    int refused = o->proxy_protocol ? !acl_pp_trusted(&g->acl, &peer->u.sa)
                                    : guard_acl(pw, &g->acl, peer);
    if (refused) {
        if (o->proxy_protocol)
            STAT_INC(&pw->stats.pp_untrusted);
        if (o->rst_on_close != RST_OFF)
            conn_reset_on_close(fd);
    } else if (o->proxy_protocol || !guard_accept_rate(pw, peer)) {
        return 0;
    } else {
        STAT_INC(&pw->stats.closed[CR_ACCEPT_RATE]);
    }
    close(fd);
    worker_reserve_release(pw->w);
    return 1;
}

/* Slot c becomes a new connection for fd from peer, under generation g (one reference), first
 * on the worker's live list, its watchers' callbacks set. */
static void conn_init(struct proxy_worker *pw, struct conn *c, struct gen *g, int fd,
                      const struct sock_addr *peer)
{
    const struct options *o = &g->opt;
    memset(c, 0, sizeof *c); /* a freed slot's streams were wiped (no context held) */
    conn_ciphers(c);
    c->pw = pw;
    c->id = ++pw->next_id;
    c->peer = *peer;
    c->uid = -1;
    c->gen = g;
    gen_ref(c->gen);
    c->cli.fd = fd;
    c->dc.fd = -1;
    c->state = o->proxy_protocol ? CS_PROXY_HDR : CS_HEADER;
    c->born = ev_now(pw->w->loop);
    c->fast = (uint8_t)(o->fast_mode && !pw->middle); /* middle mode reframes */
    c->splice = (uint8_t)(c->fast && o->splice);
    c->cli.pipe_r = c->cli.pipe_w = c->dc.pipe_r = c->dc.pipe_w = -1;
    c->next = pw->live;
    if (pw->live)
        pw->live->prev = c;
    pw->live = c;
    ev_init(&c->timer, on_timer);
    c->timer.data = c;
    ev_init(&c->rate_timer, on_rate_timer);
    c->rate_timer.data = c;
}

/* Seconds until a new connection's first deadline: a client sends its whole header (or hello)
 * at once, so a connection still short of one after probe-wait is a probe, fronted then (never
 * later than the handshake timeout); with nowhere to front to, a silent connection is closed
 * when the site would close it (front_hold() then closes at once), if that comes first. */
static double accept_deadline(const struct conn *c)
{
    const struct options *o = &c->gen->opt;
    unsigned first =
        o->probe_wait_ms < o->handshake_timeout_ms ? o->probe_wait_ms : o->handshake_timeout_ms;
    const struct tlsprofile *prof = c->pw->learn ? tlslearn_current(c->pw->learn) : NULL;
    if (prof && prof->idle_close_ms && !c->gen->masks.enabled && prof->idle_close_ms < first)
        first = prof->idle_close_ms;
    return first / 1000.0;
}

void proxy_on_accept(struct worker *w, int fd, const struct sock_addr *peer)
{
    struct proxy_worker *pw = w->ctx;
    struct gen *g = pw->gen; /* the generation the connection takes (on_accept took the newest) */
    if (accept_refused(pw, g, fd, peer))
        return;
    struct conn *c = pool_get(&pw->conns);
    if (!c) {
        close(fd); /* not reached while accepting pauses at the cap */
        worker_reserve_release(w);
        conn_check_accept(pw);
        return;
    }
    STAT_INC(&pw->stats.accepted);
    STAT_INC(&pw->stats.active);
    conn_init(pw, c, g, fd, peer);
    c->addr_uid = w->accept_tag == PROXY_LISTENER_PREFIX ? prefix_accept(g, fd, c->born)
                                                         : PREFIX_NOT_VIA;
    const struct options *o = &c->gen->opt;
    guard_handshake_start(c);
    /* Behind a balancer the address is known only from the PROXY header (counted there). */
    if (!o->proxy_protocol && guard_stranger(c)) {
        conn_close(c, CR_REFUSED);
        return;
    }
    sock_tune(fd, &pw->sockopts);
    if (o->client_mss && log_enabled(LOG_LVL_DEBUG)) {
        int mss = 0;
        socklen_t ml = sizeof mss;
        getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
        log_debug("w%d conn %llu: client mss %d", w->id, (unsigned long long)c->id, mss);
    }
    ev_io_init(&c->cli.io, on_cli_io, fd, EV_READ);
    c->cli.io.data = c;
    ev_init(&c->dc.io, on_dc_io); /* the upstream rooms only ev_io_set it */
    c->dc.io.data = c;
    side_watch(c, &c->cli, EV_READ);
    timer_arm(c, accept_deadline(c));
    conn_check_accept(pw);
}
