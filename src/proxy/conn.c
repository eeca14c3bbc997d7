/* conn.c: client connection state machine (header -> DC connect -> relay) and the relay. */
#include "proxy/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/relay.h"

#define HOLD_DISCARD_MAX (64 * 1024) /* a held bad client may send this much, then is ignored */


static const char *const reason_names[CR_COUNT] = {
    [CR_DONE] = "done",
    [CR_CLIENT_CLOSED] = "client-closed",
    [CR_DC_CLOSED] = "dc-closed",
    [CR_CLIENT_EARLY_EOF] = "client-early-eof",
    [CR_HANDSHAKE_TIMEOUT] = "handshake-timeout",
    [CR_BAD_HEADER] = "bad-header",
    [CR_DC_UNREACHABLE] = "dc-unreachable",
    [CR_IDLE] = "idle-timeout",
    [CR_NO_MEMORY] = "no-memory",
    [CR_SHUTDOWN] = "shutdown",
};

const char *conn_reason_name(enum conn_reason r)
{
    return r < CR_COUNT ? reason_names[r] : "?";
}

static void on_cli_io(struct ev_loop *loop, ev_io *io, int revents);
static void on_dc_io(struct ev_loop *loop, ev_io *io, int revents);
static void on_timer(struct ev_loop *loop, ev_timer *t, int revents);

/* --- accept-side limits -------------------------------------------------------------- */

/* Pauses accepting while the connection slots or the buffer arena are used up. */
void conn_check_accept(struct proxy_worker *pw)
{
    if (pool_full(&pw->conns) || arena_exhausted(&pw->arena))
        worker_pause_accept(pw->w);
    else
        worker_resume_accept(pw->w);
}

/* --- close ----------------------------------------------------------------------------- */

/* Ends a connection: logs once, counts, frees everything. The caller must not touch c
 * afterwards; every path that may close returns -1 up to the callback. */
int conn_close(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    enum log_level lvl = (r == CR_DONE || r == CR_CLIENT_CLOSED || r == CR_SHUTDOWN)
                             ? LOG_LVL_DEBUG
                             : LOG_LVL_INFO;
    if (log_enabled(lvl)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_msg(lvl, "w%d conn %llu %s dc %d: closed (%s), up %llu down %llu bytes",
                pw->w->id, (unsigned long long)c->id, peer, c->dc_id, conn_reason_name(r),
                (unsigned long long)c->up_bytes, (unsigned long long)c->down_bytes);
    }
    STAT_INC(&pw->stats.closed[r]);
    STAT_DEC(&pw->stats.active);
    ev_timer_stop(pw->w->loop, &c->timer);
    if (c->waiting_block)
        waiters_remove(pw, c);
    side_release(c, &c->cli);
    side_release(c, &c->dc);
    if (c->prev)
        c->prev->next = c->next;
    else
        pw->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->state = CS_FREE;
    pool_put(&pw->conns, c);
    waiters_wake(pw);
    conn_check_accept(pw);
    return -1;
}

/* --- DC connect ------------------------------------------------------------------------ */

static void timer_arm(struct conn *c, double seconds)
{
    ev_timer_stop(c->pw->w->loop, &c->timer);
    ev_timer_set(&c->timer, seconds, 0);
    ev_timer_start(c->pw->w->loop, &c->timer);
}

/* Starts connecting to the next candidate address. Returns 0, or -1 if closed. */
static int dc_connect_next(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    while (c->dc_try < c->dc_count) {
        const struct dc_entry *e = &pw->dcs->e[c->dc_first + c->dc_try++];
        int fd = sock_connect(&e->addr, &pw->sockopts);
        if (fd < 0) {
            STAT_INC(&pw->stats.dc_connect_fails);
            if (log_enabled(LOG_LVL_DEBUG)) {
                char a[SOCK_ADDR_STRLEN];
                sock_addr_format(&e->addr, a, sizeof a);
                log_debug("w%d conn %llu: connect dc %d %s: %s", pw->w->id,
                          (unsigned long long)c->id, e->id, a, strerror(errno));
            }
            continue;
        }
        c->dc.fd = fd;
        c->dc.events = 0;
        ev_io_init(&c->dc.io, on_dc_io, fd, EV_WRITE);
        c->dc.io.data = c;
        side_watch(c, &c->dc, EV_WRITE);
        timer_arm(c, pw->opt->connect_timeout_ms / 1000.0);
        return 0;
    }
    return conn_close(c, CR_DC_UNREACHABLE);
}

/* Drops the current DC attempt (failed or timed out) and tries the next address. */
static int dc_retry(struct conn *c, int err)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.dc_connect_fails);
    if (log_enabled(LOG_LVL_DEBUG)) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&pw->dcs->e[c->dc_first + c->dc_try - 1].addr, a, sizeof a);
        log_debug("w%d conn %llu: connect dc %d %s: %s", pw->w->id, (unsigned long long)c->id,
                  c->dc_resolved, a, err ? strerror(err) : "timed out");
    }
    side_watch(c, &c->dc, 0);
    close(c->dc.fd);
    c->dc.fd = -1;
    return dc_connect_next(c);
}

/* The DC socket is connected: send our own obfuscated2 header and start relaying. */
static int dc_established(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    uint8_t wire[OBFS2_HDR_LEN];
    struct obfs2_keys k;
    obfs2_derive(c->hdr, NULL, &k); /* c->hdr holds the plain DC header built by header_done */
    if (crypto_ctr_init(c->dc_enc, k.fwd.key, k.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->dc_dec, k.rev.key, k.rev.iv)))
        return conn_close(c, CR_NO_MEMORY);
    obfs2_seal(c->hdr, c->dc_enc, wire);
    struct arena_block *b = arena_get(&pw->arena);
    if (!b)
        return conn_close(c, CR_NO_MEMORY);
    memcpy(b->data, wire, sizeof wire);
    b->end = sizeof wire;
    c->dc.qhead = c->dc.qtail = b;
    c->dc.queued = sizeof wire;
    STAT_INC(&pw->stats.dc_connects);
    c->state = CS_RELAY;
    c->last_io = ev_now(pw->w->loop);
    timer_arm(c, pw->opt->idle_timeout_ms / 1000.0);
    if (side_flush(c, &c->dc, &c->cli))
        return -1;
    ev_io_init(&c->cli.io, on_cli_io, c->cli.fd, EV_READ);
    c->cli.io.data = c;
    c->cli.events = 0;
    relay_watch(c);
    return 0;
}

/* --- client header --------------------------------------------------------------------- */

/* Enters HOLD: the client gets no answer; it is read and discarded until a random deadline
 * between 0.5 and 1.5 handshake timeouts, then closed. */
static void hold(struct conn *c)
{
    uint16_t r = 0;
    crypto_random(&r, sizeof r);
    double base = c->pw->opt->handshake_timeout_ms / 1000.0;
    c->state = CS_HOLD;
    timer_arm(c, base * (0.5 + r / 65535.0));
}

static void header_done(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    struct obfs2_hello h;
    char peer[SOCK_ADDR_STRLEN];
    if (obfs2_parse(c->hdr, pw->opt->secrets, (size_t)pw->opt->nsecrets, OBFS2_ALLOW_ALL, &h) !=
        OBFS2_OK) {
        if (log_enabled(LOG_LVL_INFO)) {
            sock_addr_format(&c->peer, peer, sizeof peer);
            log_info("w%d conn %llu %s: bad header (no secret matches); holding", pw->w->id,
                     (unsigned long long)c->id, peer);
        }
        hold(c);
        return;
    }
    STAT_INC(&pw->stats.handshakes);
    c->tag = h.tag;
    c->dc_id = h.dc;
    c->secret_idx = (uint8_t)h.secret_index;
    uint8_t skip[OBFS2_HDR_LEN];
    if (crypto_ctr_init(c->cli_dec, h.keys.fwd.key, h.keys.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->cli_enc, h.keys.rev.key, h.keys.rev.iv))) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    crypto_ctr_apply(c->cli_dec, c->hdr, skip, sizeof skip); /* the stream goes on at 64 */
    /* The client's header is spent: build ours toward the DC in its place. In fast mode its
     * key material is the client's download key and IV (reversed), so the DC encrypts for
     * the client and the download direction needs no crypto here (PROTOCOL.md 5.2). */
    if (obfs2_build(c->hdr, h.tag, h.dc, c->fast ? &h.keys.rev : NULL)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    int resolved = 0;
    c->dc_count = dc_lookup(pw->dcs, h.dc, &c->dc_first, &resolved);
    c->dc_resolved = (int16_t)resolved;
    c->dc_try = 0;
    if (log_enabled(LOG_LVL_DEBUG)) {
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_debug("w%d conn %llu %s: secret %s, %s, dc %d -> %d", pw->w->id,
                  (unsigned long long)c->id, peer, pw->opt->secrets[h.secret_index].name,
                  obfs2_tag_name(h.tag), h.dc, resolved);
    }
    side_watch(c, &c->cli, 0); /* the client's next bytes wait in its socket */
    c->state = CS_CONNECTING;
    int fd = dcpool_claim(&pw->dcpool, resolved);
    if (fd >= 0) { /* pre-connected: the header goes out now, no TCP handshake to wait for */
        c->dc.fd = fd;
        c->dc.events = 0;
        ev_io_init(&c->dc.io, on_dc_io, fd, EV_READ);
        c->dc.io.data = c;
        dc_established(c);
        return;
    }
    dc_connect_next(c);
}

static void header_read(struct conn *c)
{
    ssize_t n = read(c->cli.fd, c->hdr + c->hdr_len, OBFS2_HDR_LEN - c->hdr_len);
    if (n > 0) {
        c->hdr_len += (uint8_t)n;
        if (c->hdr_len == OBFS2_HDR_LEN)
            header_done(c);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    conn_close(c, CR_CLIENT_EARLY_EOF);
}

static void hold_read(struct conn *c)
{
    uint8_t sink[4096];
    ssize_t n = read(c->cli.fd, sink, sizeof sink);
    if (n > 0) {
        c->up_bytes += (uint64_t)n; /* in HOLD, up_bytes counts what was discarded */
        if (c->up_bytes >= HOLD_DISCARD_MAX)
            side_watch(c, &c->cli, 0); /* enough: let its window fill up */
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    conn_close(c, CR_BAD_HEADER);
}

/* --- callbacks ------------------------------------------------------------------------- */

static void on_cli_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    switch (c->state) {
    case CS_HEADER:
        header_read(c);
        break;
    case CS_HOLD:
        hold_read(c);
        break;
    case CS_RELAY:
        relay_event(c, &c->cli, revents);
        break;
    default:
        break;
    }
}

static void on_dc_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    if (c->state == CS_CONNECTING) {
        int err = sock_connect_result(c->dc.fd);
        if (err)
            dc_retry(c, err);
        else
            dc_established(c);
        return;
    }
    if (c->state == CS_RELAY)
        relay_event(c, &c->dc, revents);
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;
    switch (c->state) {
    case CS_HEADER:
        conn_close(c, CR_HANDSHAKE_TIMEOUT);
        break;
    case CS_HOLD:
        conn_close(c, CR_BAD_HEADER);
        break;
    case CS_CONNECTING:
        dc_retry(c, 0);
        break;
    case CS_RELAY: {
        /* The idle timer is armed lazily: traffic only moves last_io. */
        double idle = c->pw->opt->idle_timeout_ms / 1000.0;
        double left = c->last_io + idle - ev_now(loop);
        if (left <= 0)
            conn_close(c, CR_IDLE);
        else
            timer_arm(c, left);
        break;
    }
    default:
        break;
    }
}

/* --- accept ---------------------------------------------------------------------------- */

/* Allocates the cipher contexts this connection needs that its slot lacks (fast mode needs
 * only the two upload-direction streams). */
static int conn_ciphers(struct conn *c)
{
    struct crypto_ctr **s[4] = {&c->cli_dec, &c->dc_enc, &c->cli_enc, &c->dc_dec};
    for (int i = 0; i < (c->fast ? 2 : 4); i++)
        if (!*s[i] && !(*s[i] = crypto_ctr_new()))
            return -1;
    return 0;
}

void proxy_on_accept(struct worker *w, int fd, const struct sock_addr *peer)
{
    struct proxy_worker *pw = w->ctx;
    struct conn *c = pool_get(&pw->conns);
    if (!c) {
        close(fd); /* not reached while accepting pauses at the cap */
        conn_check_accept(pw);
        return;
    }
    STAT_INC(&pw->stats.accepted);
    STAT_INC(&pw->stats.active);
    /* Keep the cipher contexts of a reused slot; reset the rest. */
    struct crypto_ctr *keep[4] = {c->cli_dec, c->cli_enc, c->dc_enc, c->dc_dec};
    memset(c, 0, sizeof *c);
    c->cli_dec = keep[0], c->cli_enc = keep[1], c->dc_enc = keep[2], c->dc_dec = keep[3];
    c->pw = pw;
    c->id = ++pw->next_id;
    c->peer = *peer;
    c->cli.fd = fd;
    c->dc.fd = -1;
    c->state = CS_HEADER;
    c->fast = (uint8_t)pw->opt->fast_mode;
    c->splice = (uint8_t)(c->fast && pw->opt->splice);
    c->cli.pipe_r = c->cli.pipe_w = c->dc.pipe_r = c->dc.pipe_w = -1;
    c->next = pw->live;
    if (pw->live)
        pw->live->prev = c;
    pw->live = c;
    ev_init(&c->timer, on_timer);
    c->timer.data = c;
    if (conn_ciphers(c)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    sock_tune(fd, &pw->sockopts);
    ev_io_init(&c->cli.io, on_cli_io, fd, EV_READ);
    c->cli.io.data = c;
    side_watch(c, &c->cli, EV_READ);
    timer_arm(c, pw->opt->handshake_timeout_ms / 1000.0);
    conn_check_accept(pw);
}

void proxy_on_stop(struct worker *w)
{
    struct proxy_worker *pw = w->ctx;
    dcpool_stop(&pw->dcpool);
    while (pw->live)
        conn_close(pw->live, CR_SHUTDOWN);
    crypto_thread_cleanup(); /* the thread's one-shot cipher context */
}

/* --- worker setup ---------------------------------------------------------------------- */

int proxy_worker_init(struct proxy_worker *pw, struct worker *w, const struct options *opt,
                      const struct dc_table *dcs, int nworkers)
{
    memset(pw, 0, sizeof *pw);
    pw->w = w;
    pw->opt = opt;
    pw->dcs = dcs;
    size_t per_conns = ((size_t)opt->max_connections + (size_t)nworkers - 1) / (size_t)nworkers;
    pool_init(&pw->conns, sizeof(struct conn), per_conns);
    size_t max_blocks = 0;
    if (opt->buffer_memory) {
        max_blocks = opt->buffer_memory / (size_t)nworkers / opt->block_size;
        if (max_blocks < ARENA_SLAB_BLOCKS)
            max_blocks = ARENA_SLAB_BLOCKS;
    }
    arena_init(&pw->arena, opt->block_size, max_blocks, ARENA_SLAB_BLOCKS * 2);
    pw->pipes_cap = PROXY_PIPES_PER_WORKER;
    pw->pipes = calloc((size_t)pw->pipes_cap, sizeof *pw->pipes);
    if (!pw->pipes)
        return -1;
    pw->pipe_size = (int)opt->max_buffer;
    pw->sockopts.nodelay = opt->tcp_nodelay;
    pw->sockopts.keepalive_s = (int)(opt->tcp_keepalive_ms / 1000);
    pw->sockopts.sndbuf = (int)opt->sndbuf;
    pw->sockopts.rcvbuf = (int)opt->rcvbuf;
    if (dcpool_init(&pw->dcpool, w->loop, dcs, opt->dc_pool, &pw->sockopts,
                    opt->connect_timeout_ms / 1000.0))
        return -1;
    w->ctx = pw;
    w->on_accept = proxy_on_accept;
    w->on_stop = proxy_on_stop;
    return 0;
}

static void conn_free_ciphers(void *obj)
{
    struct conn *c = obj;
    crypto_ctr_free(c->cli_dec);
    crypto_ctr_free(c->cli_enc);
    crypto_ctr_free(c->dc_enc);
    crypto_ctr_free(c->dc_dec);
}

void proxy_worker_destroy(struct proxy_worker *pw)
{
    dcpool_destroy(&pw->dcpool);
    pool_destroy(&pw->conns, conn_free_ciphers);
    for (int i = 0; i < pw->npipes; i++) {
        close(pw->pipes[i][0]);
        close(pw->pipes[i][1]);
    }
    free(pw->pipes);
    pw->pipes = NULL;
    arena_destroy(&pw->arena);
}

void proxy_stats_add(struct proxy_stats *dst, const struct proxy_stats *src)
{
#define ADD(f) STAT_ADD(&dst->f, atomic_load_explicit(&src->f, memory_order_relaxed))
    ADD(accepted);
    ADD(active);
    ADD(handshakes);
    ADD(dc_connects);
    ADD(dc_connect_fails);
    ADD(bytes_up);
    ADD(bytes_down);
    ADD(reads);
    ADD(writes);
    ADD(spliced);
    ADD(block_waits);
    for (int i = 0; i < CR_COUNT; i++)
        ADD(closed[i]);
#undef ADD
}
