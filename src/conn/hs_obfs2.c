/* hs_obfs2.c: handshake: the obfuscated2 header checked, keys set up, the upstream started. */
#include "conn/conn_int.h"

#include <string.h>

#include "core/log.h"
#include "core/replay.h"

/* Parses c->hdr: inside FakeTLS against the secret that signed the hello (padded only),
 * else against every secret (only the one that matched before, once the store answered). */
static enum obfs2_status obfs2_parse_header(struct conn *c, struct obfs2_hello *h)
{
    const struct options *o = &c->gen->opt;
    enum obfs2_status st;
    if (c->tls) {
        /* Inside FakeTLS: the secret that signed the hello, padded intermediate only. */
        struct secret s = o->secrets[c->secret_idx];
        s.kind = SECRET_DD;
        st = obfs2_parse(c->hdr, &s, 1, OBFS2_ALLOW_PADDED, h);
        h->secret_index = c->secret_idx;
    } else {
        unsigned allow = (o->allow_plain ? OBFS2_ALLOW_ABRIDGED | OBFS2_ALLOW_INTERMEDIATE : 0) |
                         (o->allow_dd ? OBFS2_ALLOW_PADDED : 0);
        /* After the replay store answered, only the secret that matched before is tried. */
        size_t first = c->rs_verdict ? c->secret_idx : 0;
        size_t count = c->rs_verdict ? 1 : (size_t)o->nsecrets;
        st = obfs2_parse(c->hdr, o->secrets + first, count, allow, h);
        if (st == OBFS2_OK)
            h->secret_index += (int)first;
    }
    return st;
}

/* A plain/dd header that matched a secret (FakeTLS hellos passed these gates already) goes
 * past the replay cache, the fleet's replay store and its user's limits. Returns 1 if it
 * passed; else 0 with *r the verdict of what happened instead (rejected, or waiting for the
 * store: CR_NONE). */
static int obfs2_admit(struct conn *c, const struct obfs2_hello *h, enum conn_reason *r)
{
    struct proxy_worker *pw = c->pw;
    const char *why = NULL;
    /* Replays: the key and IV material is 48 random bytes chosen by the client; 16 of them
     * identify it. */
    if (!c->rs_verdict && pw->replay &&
        replay_check_and_add_timeless(pw->replay, c->hdr + 8, (uint32_t)ev_now(pw->w->loop))) {
        STAT_INC(&pw->stats.replays);
        why = "replayed header";
    } else {
        c->secret_idx = (uint32_t)h->secret_index;
        enum store_gate g = gate_store(c, c->hdr + 8, c->gen->opt.rstore_ttl_ms);
        if (g == STORE_WAIT) {
            *r = CR_NONE;
            return 0;
        }
        if (g == STORE_REPLAY) {
            STAT_INC(&pw->stats.replays);
            why = "replayed header (replay store)";
        } else {
            int refused = gate_user(c, c->secret_idx);
            why = !refused ? NULL
                  : refused == GATE_FOREIGN_ADDR ? "not the user's address" : "user over a limit";
        }
    }
    if (!why)
        return 1;
    *r = front_reject(c, c->hdr, OBFS2_HDR_LEN, NULL, why);
    return 0;
}

/* The client proved its secret: counted, no longer a stranger, its kind known. */
static void obfs2_authed(struct conn *c, const struct obfs2_hello *h)
{
    STAT_INC(&c->pw->stats.handshakes);
    c->authed = 1;
    stranger_done(c);
    c->tag = h->tag;
    c->dc_id = h->dc;
    conn_set_kind(c, c->tls ? CK_TLS : h->tag == OBFS2_TAG_PADDED ? CK_DD : CK_OBFS2);
}

/* The client's streams, keyed from its header; the decrypting one goes on at byte 64. */
static enum conn_reason obfs2_client_keys(struct conn *c, const struct obfs2_hello *h)
{
    uint8_t skip[OBFS2_HDR_LEN];
    if (crypto_ctr_init(c->cli_dec, h->keys.fwd.key, h->keys.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->cli_enc, h->keys.rev.key, h->keys.rev.iv)))
        return CR_NO_MEMORY;
    crypto_ctr_apply(c->cli_dec, c->hdr, skip, sizeof skip); /* the stream goes on at 64 */
    return CR_NONE;
}

/* The client's header is spent: build ours toward the DC in its place. In fast mode its key
 * material is the client's download key and IV (reversed), so the DC encrypts for the client
 * and the download direction needs no crypto here (PROTOCOL.md 5.2). */
static enum conn_reason obfs2_dc_keys(struct conn *c, struct obfs2_hello *h)
{
    uint8_t wire[OBFS2_HDR_LEN];
    struct obfs2_keys k;
    if (obfs2_build(c->hdr, h->tag, h->dc, c->fast ? &h->keys.rev : NULL))
        return CR_NO_MEMORY;
    obfs2_derive(c->hdr, NULL, &k);
    if (crypto_ctr_init(c->dc_enc, k.fwd.key, k.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->dc_dec, k.rev.key, k.rev.iv)))
        return CR_NO_MEMORY;
    obfs2_seal(c->hdr, c->dc_enc, wire);
    memcpy(c->hdr, wire, sizeof wire); /* sent from here on connect: needs no buffer block */
    return CR_NONE;
}

/* Client bytes that came after the header (inside TLS records): re-encrypted for the DC and
 * queued behind our header, counted in the total. */
static enum conn_reason obfs2_early_bytes(struct conn *c, uint8_t *extra, size_t n)
{
    if (!n)
        return CR_NONE;
    crypto_ctr_apply(c->cli_dec, extra, extra, n);
    crypto_ctr_apply(c->dc_enc, extra, extra, n);
    c->up_bytes += n;
    STAT_ADD(&c->pw->stats.bytes_up, n);
    return side_queue(c, &c->dc, extra, n);
}

/* The early bytes in the user's and the DC's counters (once the DC is resolved). */
static void obfs2_count_early(struct conn *c, size_t n)
{
    if (!n)
        return;
    stat_t *ctr[3];
    conn_byte_counters(c, 0, ctr);
    for (int i = 1; i < 3; i++)
        if (ctr[i])
            STAT_ADD(ctr[i], n);
}

static void obfs2_log(const struct conn *c, const struct obfs2_hello *h, int resolved)
{
    if (!log_enabled(LOG_LVL_DEBUG))
        return;
    char peer[SOCK_ADDR_STRLEN];
    sock_addr_format(&c->peer, peer, sizeof peer);
    log_debug("w%d conn %llu %s: secret %s, %s%s, dc %d -> %d", c->pw->w->id,
              (unsigned long long)c->id, peer, c->gen->opt.secrets[h->secret_index].name,
              c->tls ? "faketls " : "", obfs2_tag_name(h->tag), h->dc, resolved);
}

enum conn_reason hs_obfs2_done(struct conn *c, uint8_t *extra, size_t n)
{
    struct obfs2_hello h;
    enum conn_reason r;
    if (obfs2_parse_header(c, &h) != OBFS2_OK) /* inside TLS we answered: too late to front */
        return c->tls ? CR_BAD_HEADER
                      : front_reject(c, c->hdr, OBFS2_HDR_LEN, NULL,
                                     "bad header (no secret matches)");
    if (!c->tls && !obfs2_admit(c, &h, &r))
        return r;
    c->secret_idx = (uint32_t)h.secret_index;
    obfs2_authed(c, &h);
    if (conn_stop(r = obfs2_client_keys(c, &h)))
        return r;
    if (c->pw->middle) /* middle mode: an ME link instead of a DC connection */
        return up_middle(c, extra, n);
    if (conn_stop(r = obfs2_dc_keys(c, &h)) || conn_stop(r = obfs2_early_bytes(c, extra, n)))
        return r;
    int resolved = 0;
    c->dc_count = dc_lookup(&c->gen->dcs, h.dc, &c->dc_first, &resolved);
    c->dc_resolved = (int16_t)resolved;
    obfs2_count_early(c, n);
    obfs2_log(c, &h, resolved);
    return up_start(c);
}
