/* conn_front.c: rejected clients: fronting to the real site, holding, unknown-SNI drops. */
#include "conn/conn_int.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "upstream/tlslearn.h"

#define HOLD_DISCARD_MAX (64 * 1024) /* a held bad client may send this much, then is ignored */

/* Enters HOLD: the client gets no answer; it is read and discarded, then closed when the site
 * itself closes an idle connection (the learned idle close T, counted from accept, drawn in
 * [0.97 T, 1.03 T]); with no idle close known, at a random time between 0.5 and 1.5
 * handshake timeouts. */
void front_hold(struct conn *c)
{
    uint16_t r = 0;
    crypto_random(&r, sizeof r);
    double base = c->gen->opt.handshake_timeout_ms / 1000.0, at = base * (0.5 + r / 65535.0);
    const struct tlsprofile *prof = c->pw->learn ? tlslearn_current(c->pw->learn) : NULL;
    if (prof && prof->idle_close_ms) {
        double t = prof->idle_close_ms / 1000.0 * (0.97 + 0.06 * (r / 65535.0));
        at = t - (ev_now(c->pw->w->loop) - c->born);
        if (at < 0.01)
            at = 0.01;
    }
    hbuf_free(c);
    reserve_release(c);
    c->state = CS_HOLD;
    c->up_bytes = 0; /* in HOLD, up_bytes counts what was discarded */
    side_watch(c, &c->cli, EV_READ);
    timer_arm(c, at);
}

/* A client we will not serve (we have not answered it yet): forward it, with every byte it
 * sent so far, to the real web server; or hold it if there is none. seen may point into
 * c->hbuf. Returns CR_NONE (now CONNECTING to the site, or HOLD), or a reason to close. */
enum conn_reason front_reject(struct conn *c, const uint8_t *seen, size_t n, const char *sni,
                              const char *why)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.rejected);
    const struct mask_target *m = mask_lookup(&c->gen->masks, sni);
    if (log_enabled(LOG_LVL_INFO) && conn_loglim_allow(pw, LOGLIM_REJECT)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("w%d conn %llu %s: %s; %s", pw->w->id, (unsigned long long)c->id, peer, why,
                 m ? "fronting" : "holding");
    }
    if (!m) {
        front_hold(c);
        return CR_NONE;
    }
    STAT_INC(&pw->stats.masked);
    conn_set_kind(c, CK_FRONTED);
    c->mode = CONN_MODE_MASK;
    c->tls = 0;
    c->mask = m;
    c->dc_count = 1;
    c->splice = 0; /* fronted bytes go through their own block budget, never a pipe */
    const struct options *o = &c->gen->opt;
    if (o->mask_proxy_protocol) {
        struct sock_addr local;
        local.len = sizeof local.u;
        uint8_t ph[128];
        size_t phl = 0;
        if (getsockname(c->cli.fd, &local.u.sa, &local.len) == 0)
            phl = mask_proxy_header(ph, sizeof ph, o->mask_proxy_protocol, &c->peer,
                                    &local);
        enum conn_reason r = phl ? side_queue(c, &c->dc, ph, phl) : CR_NONE;
        if (conn_stop(r))
            return r;
    }
    enum conn_reason r = n ? side_queue(c, &c->dc, seen, n) : CR_NONE;
    if (conn_stop(r))
        return r;
    hbuf_free(c);
    return up_start(c);
}

/* unknown-sni drop or reject: a hello naming none of our domains is closed, after a fatal
 * unrecognized_name alert for reject (what a server without that name says). Returns
 * CR_UNKNOWN_SNI. */
enum conn_reason front_unknown_sni(struct conn *c, const char *sni)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.rejected);
    STAT_INC(&pw->stats.unknown_sni);
    int reject = c->gen->opt.unknown_sni == SNI_REJECT;
    if (log_enabled(LOG_LVL_INFO) && conn_loglim_allow(pw, LOGLIM_REJECT)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("w%d conn %llu %s: hello names an unknown server (%.64s); %s", pw->w->id,
                 (unsigned long long)c->id, peer, sni ? sni : "no SNI",
                 reject ? "unrecognized_name alert" : "dropped");
    }
    if (reject) {
        /* alert record: level fatal (2), unrecognized_name (112); one send, best effort */
        static const uint8_t alert[7] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70};
        ssize_t w = send(c->cli.fd, alert, sizeof alert, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    return CR_UNKNOWN_SNI;
}

/* HOLD: reads and discards (up to HOLD_DISCARD_MAX); EOF or an error ends it. */
enum conn_reason front_hold_read(struct conn *c)
{
    uint8_t sink[4096];
    ssize_t n = read(c->cli.fd, sink, sizeof sink);
    if (n > 0) {
        c->up_bytes += (uint64_t)n;
        if (c->up_bytes >= HOLD_DISCARD_MAX)
            side_watch(c, &c->cli, 0); /* enough: let its window fill up */
        return CR_NONE;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return CR_NONE;
    return CR_BAD_HEADER;
}
