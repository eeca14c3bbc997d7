/* hs_gate.c: handshake gates: the fleet replay store and user admission (limits). */
#include "conn/conn_int.h"

#include "core/log.h"
#include "config/prefix.h"

/* --- users: limits at admission --------------------------------------------------------- */

/* Why a connection begun under an older generation is refused: its user is not live in cur,
 * removed or disabled since (a walk of cur's users, on this rare path only). */
static int gone_reason(const struct gen *cur, uint32_t uid)
{
    for (int i = 0; i < cur->opt.nsecrets; i++)
        if (cur->uid[i] == uid && cur->lim[i] && cur->lim[i]->disabled)
            return UR_DISABLED;
    return UR_COUNT;
}

/* A client proved secret idx (of c->gen): its user is admitted under its limits, or refused.
 * Returns 0 (admitted: c->uid, c->us, c->lim set, counted), or -1 (refused: counted and
 * logged once per user per minute; the caller rejects it like a bad client), or
 * GATE_FOREIGN_ADDR (the same, for a listen-prefix connection on an address not the user's). */
int gate_user(struct conn *c, uint32_t idx)
{
    struct proxy_worker *pw = c->pw;
    const struct gen *g = c->gen;
    uint32_t uid = g->uid[idx];
    const struct user_limit *lim = g->lim[idx];
    double now = ev_now(pw->w->loop);
    if (c->addr_uid != PREFIX_NOT_VIA && c->addr_uid != (int32_t)uid) {
        /* listen-prefix: on another user's address (or no user's): a link shared beyond its
         * user opens no one else's address */
        STAT_INC(&users_wstats(pw->users, pw->w->id, uid)->foreign_addr);
        if (users_log_allowed(pw->users, uid, now))
            log_info("user %s: connection on %s address refused (logged once a minute per "
                     "user)", users_name(pw->users, uid),
                     c->addr_uid == PREFIX_NOBODY ? "no user's" : "another user's");
        return GATE_FOREIGN_ADDR;
    }
    /* Started under an older generation: a user removed since is refused (the one read of
     * the worker's newest generation for a connection, on purpose). */
    const struct gen *cur = pw->gen;
    int r = (g != cur && (uid >= cur->nusers || !cur->live[uid]))
                ? gone_reason(cur, uid)
                : users_admit(pw->users, uid, lim, &c->peer, now,
                              g->opt.ips_window_ms / 1000.0);
    if (r < 0) {
        c->uid = (int32_t)uid;
        c->lim = lim;
        c->us = users_wstats(pw->users, pw->w->id, uid);
        STAT_INC(&c->us->conns);
        STAT_INC(&c->us->active);
        handshake_done(c);
        return 0;
    }
    STAT_INC(&pw->stats.user_refused);
    if (r < UR_COUNT)
        STAT_INC(&users_wstats(pw->users, pw->w->id, uid)->refused[r]);
    if (users_log_allowed(pw->users, uid, now)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("user %s: new connection from %s refused: %s (logged once a minute per user)",
                 users_name(pw->users, uid), peer,
                 r == UR_COUNT ? "user removed" : users_refusal_name((enum user_refusal)r));
    }
    return -1;
}

/* Asks the replay store about a handshake the local cache passed (key: its 16 identifying
 * bytes). GO: go on now (store off, already answered new, or not answering with fail open);
 * WAIT: the connection waits in STORE_WAIT and the check runs again with the answer; REPLAY:
 * seen by some instance (or not answering with fail closed): refuse it as a replay. The
 * secret that matched is kept in c->secret_idx so the re-run tries that one only. */
enum store_gate gate_store(struct conn *c, const uint8_t *key, unsigned ttl_ms)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    if (!o->rstore.on)
        return STORE_GO;
    if (!c->rs_verdict) {
        if (rstore_check(&pw->rstore, key, ttl_ms, pw->store_answer, c, c->id) == 0) {
            c->rs_resume = c->state;
            c->state = CS_STORE_WAIT;
            side_watch(c, &c->cli, 0);
            timer_arm(c, o->rstore_timeout_ms / 1000.0);
            return STORE_WAIT;
        }
        c->rs_verdict = RSTORE_FAILED + 1; /* down right now */
    }
    switch (c->rs_verdict - 1) {
    case RSTORE_NEW:
        return STORE_GO;
    case RSTORE_SEEN:
        STAT_INC(&pw->stats.store_replays);
        return STORE_REPLAY;
    default:
        STAT_INC(&pw->stats.store_failed);
        return o->rstore_fail_closed ? STORE_REPLAY : STORE_GO;
    }
}
