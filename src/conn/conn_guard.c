/* conn_guard.c: admission guards: access list, accept-rate, probe-limit-per-ip, max-handshakes. */
#include "conn/conn_int.h"

#include "core/log.h"

/* Counts a connection from a new address (at accept, or once a PROXY header named it).
 * Returns 1 (counted as refused) if its address has probe-limit-per-ip strangers already. */
int guard_stranger(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (!pw->strangers_max)
        return 0;
    uint32_t n = ipcount_add(&pw->strangers, &c->peer.u.sa);
    if (n)
        c->stranger = 1;
    if (n > pw->strangers_max || n == 0) { /* 0: the table is full of other addresses */
        STAT_INC(&pw->stats.strangers_refused);
        return 1;
    }
    return 0;
}

/* Counts a new connection's handshake; at the cap the oldest unfinished one is closed (the
 * live list is newest first). */
void guard_handshake_start(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (!pw->handshakes_max)
        return;
    while (pw->handshakes >= pw->handshakes_max) {
        struct conn *old = NULL;
        for (struct conn *x = pw->live; x; x = x->next)
            if (x != c && x->handshaking && !x->closing)
                old = x;
        if (!old)
            break;
        STAT_INC(&pw->stats.handshake_cap);
        conn_close_later(old, CR_HANDSHAKE_CAP);
        handshake_done(old); /* its slot is free now: it closes before the loop sleeps */
    }
    c->handshaking = 1;
    pw->handshakes++;
}

/* The access list's verdict for a client address: 1 (and counted) if refused. */
/* accept-rate: 1 (counted in acc_rate) if this source opened its share of new connections this
 * second at this worker already. Counts per second in a table cleared each second. The caller
 * counts the close (closed[CR_ACCEPT_RATE]): at accept itself, or through conn_close once a
 * PROXY header named the source. */
int guard_accept_rate(struct proxy_worker *pw, const struct sock_addr *peer)
{
    if (!pw->accepts_max)
        return 0;
    ev_tstamp sec = (ev_tstamp)(long long)ev_now(pw->w->loop);
    if (sec != pw->accepts_second) {
        pw->accepts_second = sec;
        ipcount_free(&pw->accepts);
        if (ipcount_init(&pw->accepts, pw->conns.max_objs * 2 + 64))
            return 0;
    }
    uint32_t n = ipcount_add(&pw->accepts, &peer->u.sa);
    if (n == 0 || n > pw->accepts_max) { /* 0: the table is full of other addresses */
        STAT_INC(&pw->stats.acc_rate);
        return 1;
    }
    return 0;
}

int guard_acl(struct proxy_worker *pw, const struct acl *acl, const struct sock_addr *peer)
{
    if (!acl || !acl_active(acl))
        return 0;
    enum acl_verdict v = acl_check(acl, &peer->u.sa);
    if (v == ACL_PASS)
        return 0;
    /* Logged at debug only: a scan from a denied network must not fill the log. */
    STAT_INC(v == ACL_DENIED ? &pw->stats.acl_denied : &pw->stats.acl_not_allowed);
    if (log_enabled(LOG_LVL_DEBUG)) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(peer, a, sizeof a);
        log_debug("w%d refused %s: %s", pw->w->id, a,
                  v == ACL_DENIED ? "denied" : "not allowed");
    }
    return 1;
}
