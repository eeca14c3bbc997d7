/* hs_obfs2.c: handshake: the obfuscated2 header checked, keys set up, the upstream started. */
#include "proxy/conn_int.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "core/replay.h"
#include "proto/proxyproto.h"
#include "proxy/middle.h"
#include "proxy/relay.h"
#include "proxy/tlslearn.h"

/* --- obfuscated2 header ------------------------------------------------------------------ */

/* The client's 64-byte header is complete (c->hdr). extra[0..n) are client bytes that came
 * after it (inside TLS records), still encrypted with the client's stream. */
void hs_obfs2_done(struct conn *c, uint8_t *extra, size_t n)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    struct obfs2_hello h;
    enum obfs2_status st;
    if (c->tls) {
        /* Inside FakeTLS: the secret that signed the hello, padded intermediate only. */
        struct secret s = o->secrets[c->secret_idx];
        s.kind = SECRET_DD;
        st = obfs2_parse(c->hdr, &s, 1, OBFS2_ALLOW_PADDED, &h);
        h.secret_index = c->secret_idx;
    } else {
        unsigned allow = (o->allow_plain ? OBFS2_ALLOW_ABRIDGED | OBFS2_ALLOW_INTERMEDIATE : 0) |
                         (o->allow_dd ? OBFS2_ALLOW_PADDED : 0);
        /* After the replay store answered, only the secret that matched before is tried. */
        size_t first = c->rs_verdict ? c->secret_idx : 0;
        size_t count = c->rs_verdict ? 1 : (size_t)o->nsecrets;
        st = obfs2_parse(c->hdr, o->secrets + first, count, allow, &h);
        if (st == OBFS2_OK)
            h.secret_index += (int)first;
    }
    if (st != OBFS2_OK) {
        if (c->tls) /* we answered its hello: too late to front */
            conn_close(c, CR_BAD_HEADER);
        else
            front_reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "bad header (no secret matches)");
        return;
    }
    /* Replays of a plain/dd header (FakeTLS hellos were checked already): the key and IV
     * material is 48 random bytes chosen by the client; 16 of them identify it. */
    if (!c->tls && !c->rs_verdict && pw->replay &&
        replay_check_and_add_timeless(pw->replay, c->hdr + 8, (uint32_t)ev_now(pw->w->loop))) {
        STAT_INC(&pw->stats.replays);
        front_reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "replayed header");
        return;
    }
    if (!c->tls) {
        c->secret_idx = (uint32_t)h.secret_index;
        enum store_gate g = gate_store(c, c->hdr + 8, o->rstore_ttl_ms);
        if (g == STORE_WAIT)
            return;
        if (g == STORE_REPLAY) {
            STAT_INC(&pw->stats.replays);
            front_reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "replayed header (replay store)");
            return;
        }
    }
    c->secret_idx = (uint32_t)h.secret_index;
    if (!c->tls && gate_user(c, c->secret_idx)) {
        front_reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "user over a limit");
        return;
    }
    STAT_INC(&pw->stats.handshakes);
    c->authed = 1;
    stranger_done(c);
    c->tag = h.tag;
    c->dc_id = h.dc;
    conn_set_kind(c, c->tls ? CK_TLS : h.tag == OBFS2_TAG_PADDED ? CK_DD : CK_OBFS2);
    uint8_t skip[OBFS2_HDR_LEN], wire[OBFS2_HDR_LEN];
    if (crypto_ctr_init(c->cli_dec, h.keys.fwd.key, h.keys.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->cli_enc, h.keys.rev.key, h.keys.rev.iv))) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    crypto_ctr_apply(c->cli_dec, c->hdr, skip, sizeof skip); /* the stream goes on at 64 */
    if (pw->middle) { /* middle mode: an ME link instead of a DC connection */
        reserve_release(c);
        middle_attach(c, extra, n);
        return;
    }
    /* The client's header is spent: build ours toward the DC in its place. In fast mode its
     * key material is the client's download key and IV (reversed), so the DC encrypts for
     * the client and the download direction needs no crypto here (PROTOCOL.md 5.2). */
    struct obfs2_keys k;
    if (obfs2_build(c->hdr, h.tag, h.dc, c->fast ? &h.keys.rev : NULL)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    obfs2_derive(c->hdr, NULL, &k);
    if (crypto_ctr_init(c->dc_enc, k.fwd.key, k.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->dc_dec, k.rev.key, k.rev.iv))) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    obfs2_seal(c->hdr, c->dc_enc, wire);
    memcpy(c->hdr, wire, sizeof wire); /* sent from here on connect: needs no buffer block */
    if (n) {
        crypto_ctr_apply(c->cli_dec, extra, extra, n);
        crypto_ctr_apply(c->dc_enc, extra, extra, n);
        c->up_bytes += n;
        STAT_ADD(&pw->stats.bytes_up, n);
    }
    if (n && side_queue(c, &c->dc, extra, n)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    int resolved = 0;
    c->dc_count = dc_lookup(&c->gen->dcs, h.dc, &c->dc_first, &resolved);
    c->dc_resolved = (int16_t)resolved;
    if (n) { /* the bytes after the header, counted in the total above */
        stat_t *ctr[3];
        conn_byte_counters(c, 0, ctr);
        for (int i = 1; i < 3; i++)
            if (ctr[i])
                STAT_ADD(ctr[i], n);
    }
    if (log_enabled(LOG_LVL_DEBUG)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_debug("w%d conn %llu %s: secret %s, %s%s, dc %d -> %d", pw->w->id,
                  (unsigned long long)c->id, peer, o->secrets[h.secret_index].name,
                  c->tls ? "faketls " : "", obfs2_tag_name(h.tag), h.dc, resolved);
    }
    up_start(c);
}
