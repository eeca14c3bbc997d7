/* hs_tls.c: handshake: a FakeTLS hello checked and answered, the header read from records. */
#include "conn/conn_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/replay.h"
#include "upstream/tlslearn.h"

/* --- FakeTLS handshake ------------------------------------------------------------------- */

/* Grows the hello buffer to at least want bytes. Returns 0, or -1. */
int hs_hbuf_reserve(struct conn *c, size_t want)
{
    if (want <= c->hcap)
        return 0;
    size_t cap = c->hcap ? c->hcap : 1024;
    while (cap < want)
        cap *= 2;
    /* Hello buffers of all connections in handshake count against a worker budget (the
     * fronted connections' one): partial hellos cannot eat memory without bound. */
    while (c->pw->hbuf_bytes + (cap - c->hcap) > c->pw->hbuf_max) {
        /* Full: the oldest unfinished hello goes (a flood of stalled hellos cannot lock new
         * clients out; the live list is newest first). */
        struct conn *old = NULL;
        for (struct conn *x = c->pw->live; x; x = x->next)
            if (x != c && x->state == CS_TLS_HELLO && x->hcap)
                old = x;
        STAT_INC(&c->pw->stats.hello_budget);
        if (!old)
            return -1;
        conn_close_later(old, CR_HANDSHAKE_TIMEOUT);
        hbuf_free(old); /* its budget is free now: it closes before the loop sleeps */
    }
    uint8_t *p = realloc(c->hbuf, cap);
    if (!p)
        return -1;
    c->pw->hbuf_bytes += cap - c->hcap;
    c->hbuf = p;
    c->hcap = (uint32_t)cap;
    return 0;
}

/* Answers a verified hello and moves on to reading the obfuscated2 header in records. */
static enum conn_reason tls_answer(struct conn *c, const struct faketls_hello *h, int secret_idx)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    struct faketls_reply r = {.order = (enum faketls_ext_order)o->tls_ext_order};
    uint16_t suite = 0;
    size_t lo = (size_t)o->tls_appdata_min, hi = (size_t)o->tls_appdata_max;
    if (pw->learn && o->tls_profile) {
        /* the site's shape: its extension order, and its encrypted records' bytes in one */
        const struct tlsprofile *p = tlslearn_current(pw->learn);
        r.order = tlsprofile_ext_order(p);
        tlsprofile_appdata_range(p, (unsigned)o->tls_profile_vary, &lo, &hi);
        /* the suite the site chose for a browser, if this client offered it too */
        if (p->cipher >= 0x1301 && p->cipher <= 0x1303 &&
            (h->tls13_suites & (1u << (p->cipher - 0x1301))))
            suite = p->cipher;
    }
    r.app_data_len = faketls_draw_len(lo, hi);
    size_t len = faketls_server_hello_len(h->client.sid_len, r.app_data_len);
    struct faketls_client client = h->client; /* h points into the buffer we overwrite */
    if (suite)
        client.cipher_suite = suite;
    if (hs_hbuf_reserve(c, len) ||
        faketls_server_hello(c->hbuf, c->hcap, o->secrets[secret_idx].key, &client, &r) != len ||
        conn_stop(side_queue(c, &c->cli, c->hbuf, len)))
        return CR_NO_MEMORY;
    hbuf_free(c);
    STAT_INC(&pw->stats.tls_handshakes);
    c->authed = 1;
    stranger_done(c);
    c->tls = 1;
    c->secret_idx = (uint32_t)secret_idx;
    c->hdr_len = 0;
    faketls_deframer_init(&c->defr);
    c->state = CS_TLS_HEADER;
    /* Answered: the client has the rest of the handshake timeout (not just probe-wait) to send
     * its header, one round trip later. */
    double left = o->handshake_timeout_ms / 1000.0 - (ev_now(pw->w->loop) - c->born);
    timer_arm(c, left > 0.1 ? left : 0.1);
    enum conn_reason v = side_flush(c, &c->cli, &c->dc);
    if (conn_stop(v))
        return v;
    side_watch(c, &c->cli, EV_READ | (c->cli.queued ? EV_WRITE : 0));
    return CR_NONE;
}

/* 1 if the hello names one of our ee domains. */
static int hello_names_ours(const struct options *o, const struct faketls_hello *h)
{
    for (int i = 0; i < o->nsecrets; i++)
        if (o->secrets[i].kind == SECRET_EE && faketls_hello_has_sni(h, o->secrets[i].domain))
            return 1;
    return 0;
}

/* Checks the hello's HMAC against the candidate secrets (the domain index's with
 * tls-sni-check; after the store answered, the one that matched before). On
 * FAKETLS_VERIFY_OK m->secret_index is an index into the generation's secrets. */
static enum faketls_verify tls_hello_verify(struct conn *c, const struct faketls_hello *h,
                                            struct faketls_match *m)
{
    const struct options *o = &c->gen->opt;
    int64_t now = (int64_t)ev_now(c->pw->w->loop);
    uint32_t skew = o->tls_time_skew_ms / 1000;
    struct faketls_time tp = {skew, skew, o->tls_ignore_time};
    size_t first = c->rs_verdict ? c->secret_idx : 0; /* after the store: that secret only */
    size_t count = c->rs_verdict ? 1 : (size_t)o->nsecrets;
    unsigned tries = 0;
    /* With tls-sni-check, the hello's candidates come from the generation's domain index. */
    enum faketls_verify v =
        o->tls_sni_check && !c->rs_verdict
            ? faketls_hello_verify_index(c->hbuf, h, o->secrets, &c->gen->sni, now, &tp, m,
                                         &tries)
            : faketls_hello_verify_sni(c->hbuf, h, o->secrets + first, count, now, &tp,
                                       o->tls_sni_check, m, &tries);
    STAT_ADD(&c->pw->stats.tls_hmacs, tries);
    if (v == FAKETLS_VERIFY_OK)
        m->secret_index += (int)first;
    return v;
}

/* The gates after a valid signature with secret idx: its domain, the replay cache, the
 * fleet's store, the user's limits. Returns NULL if it passed (or waits for the store:
 * *wait set), else why it is rejected. */
static const char *tls_hello_gates(struct conn *c, const struct faketls_hello *h, int idx,
                                   int *wait)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    if (o->tls_sni_check && !faketls_hello_has_sni(h, o->secrets[idx].domain))
        return "FakeTLS hello: SNI is not the secret's domain";
    int64_t now = (int64_t)ev_now(pw->w->loop);
    if (!c->rs_verdict && pw->replay &&
        replay_check_and_add(pw->replay, h->client.random, (uint32_t)now)) {
        STAT_INC(&pw->stats.replays);
        return "FakeTLS hello: replayed";
    }
    c->secret_idx = (uint32_t)idx;
    /* A hello is only valid within the time skew: the store keeps it that long (both ways). */
    enum store_gate g = gate_store(c, h->client.random, 2 * o->tls_time_skew_ms);
    if (g == STORE_WAIT) {
        *wait = 1;
        return NULL;
    }
    if (g == STORE_REPLAY) {
        STAT_INC(&pw->stats.replays);
        return "FakeTLS hello: replayed (replay store)";
    }
    int refused = gate_user(c, (uint32_t)idx); /* fronted like a probe */
    if (refused)
        return refused == GATE_FOREIGN_ADDR ? "FakeTLS hello: not the user's address"
                                            : "FakeTLS hello: user over a limit";
    return NULL;
}

enum conn_reason hs_tls_hello_check(struct conn *c)
{
    const struct options *o = &c->gen->opt;
    struct faketls_hello h;
    struct faketls_match m;
    char why[96];
    enum faketls_status st = faketls_hello_parse(c->hbuf, c->hlen, &h);
    if (st == FAKETLS_NEED_MORE)
        return hs_hbuf_reserve(c, c->hlen + h.need) ? CR_NO_MEMORY : CR_NONE;
    ja4stat_hello(c); /* the hello is whole (or malformed): its JA4, once */
    if (st == FAKETLS_BAD) {
        snprintf(why, sizeof why, "not a FakeTLS hello (%s)", faketls_reason_name(h.reason));
        return front_reject(c, c->hbuf, c->hlen, NULL, why);
    }
    const char *sni = h.nsni ? h.sni[0] : NULL;
    if (o->unknown_sni != SNI_MASK && o->tls_sni_check && !hello_names_ours(o, &h))
        return front_unknown_sni(c, sni);
    if (h.consumed != c->hlen)
        return front_reject(c, c->hbuf, c->hlen, sni, "bytes after the hello");
    enum faketls_verify v = tls_hello_verify(c, &h, &m);
    if (v != FAKETLS_VERIFY_OK) {
        snprintf(why, sizeof why, "FakeTLS hello: %s", faketls_verify_name(v));
        return front_reject(c, c->hbuf, c->hlen, sni, why);
    }
    int wait = 0;
    const char *no = tls_hello_gates(c, &h, m.secret_index, &wait);
    if (wait)
        return CR_NONE;
    if (no)
        return front_reject(c, c->hbuf, c->hlen, sni, no);
    return tls_answer(c, &h, m.secret_index);
}

enum conn_reason hs_tls_hello_read(struct conn *c)
{
    if (c->hlen == c->hcap && hs_hbuf_reserve(c, (size_t)c->hcap + 1))
        return CR_NO_MEMORY;
    ssize_t n = read(c->cli.fd, c->hbuf + c->hlen, c->hcap - c->hlen);
    if (n > 0) {
        c->hlen += (uint32_t)n;
        return hs_tls_hello_check(c);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return CR_NONE;
    return CR_CLIENT_EARLY_EOF;
}

enum conn_reason hs_tls_header_read(struct conn *c, int revents)
{
    if (revents & EV_WRITE) {
        enum conn_reason r = side_flush(c, &c->cli, &c->dc);
        if (conn_stop(r))
            return r;
    }
    if (revents & EV_READ) {
        uint8_t buf[4096];
        ssize_t n = read(c->cli.fd, buf, sizeof buf);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return CR_NONE;
            return CR_CLIENT_EARLY_EOF;
        }
        size_t m;
        if (faketls_deframe(&c->defr, buf, (size_t)n, &m) != FAKETLS_OK)
            return CR_CLIENT_PROTOCOL;
        size_t want = (size_t)(OBFS2_HDR_LEN - c->hdr_len), k = want < m ? want : m;
        memcpy(c->hdr + c->hdr_len, buf, k);
        c->hdr_len += (uint8_t)k;
        if (c->hdr_len == OBFS2_HDR_LEN)
            return hs_obfs2_done(c, buf + k, m - k);
    }
    side_watch(c, &c->cli, EV_READ | (c->cli.queued ? EV_WRITE : 0));
    return CR_NONE;
}
