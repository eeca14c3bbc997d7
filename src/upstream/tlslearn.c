/* tlslearn.c: learns the fronting site's TLS first flight and idle close, in worker 0's loop. */
#include "upstream/tlslearn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "crypto/crypto.h"
#include "upstream/fronting.h"

#define HS_TIMEOUT 5.0    /* a handshake round must end within this */
#define HS_QUIET 0.4      /* after a packed last record: this much silence ends the flight */
#define RETRY_MAX 600.0   /* after a failure, try again within this (or refresh if sooner) */
#define PROFILE_SUFFIX ".tls-profile"

static void hs_begin(struct tlslearn *l);
static void idle_begin(struct tlslearn *l);

static size_t pick_builtin(const char *sni)
{
    uint32_t h = 2166136261u;
    for (const char *p = sni; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return h % tlsprofile_builtin_count();
}

const struct tlsprofile *tlslearn_current(const struct tlslearn *l)
{
    unsigned c = atomic_load_explicit(&((struct tlslearn *)l)->cur, memory_order_acquire);
    if (c)
        return &l->slots[c - 1];
    return tlsprofile_builtin(l->builtin);
}

/* Makes p the current profile (its loop only). */
static void publish(struct tlslearn *l, const struct tlsprofile *p)
{
    unsigned c = atomic_load_explicit(&l->cur, memory_order_relaxed);
    unsigned next = c % TLSLEARN_SLOTS; /* the slot after the current one */
    l->slots[next] = *p;
    atomic_store_explicit(&l->cur, next + 1, memory_order_release);
}

static int read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap);
    close(fd);
    if (n < 0 || (size_t)n == cap)
        return -1;
    *len = (size_t)n;
    return 0;
}

static int load_stored(const char *path, const char *sni, struct tlsprofile *p)
{
    char text[TLSPROFILE_FILE_MAX];
    size_t n;
    if (read_file(path, text, sizeof text, &n))
        return -1;
    if (tlsprofile_parse_text(text, n, p) != FAKETLS_OK || strcasecmp(p->host, sni))
        return -1;
    return 0;
}

int tlslearn_init(struct tlslearn *l, const struct options *o, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->hs.fd = l->idle.fd = -1;
    const char *domain = NULL;
    for (int i = 0; i < o->nsecrets && !domain; i++)
        if (o->secrets[i].kind == SECRET_EE)
            domain = o->secrets[i].domain;
    if (!domain)
        return 0;
    snprintf(l->sni, sizeof l->sni, "%s", domain);
    l->builtin = pick_builtin(l->sni);
    /* only the fronting target: mask-host, or with mask on the ee domain's own server */
    if (!o->tls_profile || (!o->mask_host[0] && !o->mask))
        return 0;
    const char *host = o->mask_host[0] ? o->mask_host : domain;
    char text[600], why[300];
    snprintf(text, sizeof text, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, o->mask_port);
    if (sock_addr_parse(text, 1, 0, &l->target, why, sizeof why)) {
        log_warn("tls-profile: %s; the built-in profile %s is used",
                 why, tlsprofile_builtin(l->builtin)->host);
        return 0;
    }
    snprintf(l->path, sizeof l->path, "%s" PROFILE_SUFFIX, o->state_file);
    l->refresh_s = o->tls_profile_refresh_ms / 1000.0;
    l->idle_max_s = o->tls_profile_idle_ms / 1000.0;
    l->proxy_protocol = o->mask_proxy_protocol;
    l->via_socks = o->socks5_on && o->socks5_mask;
    if (l->via_socks) {
        l->socks = o->socks5;
        l->socks_addr = o->socks5_addr;
    }
    struct tlsprofile p;
    if (load_stored(l->path, l->sni, &p) == 0) {
        publish(l, &p);
        char d[256];
        tlsprofile_describe(&p, (int64_t)time(NULL), d, sizeof d);
        log_info("tls-profile: using the stored profile of %s", d);
    }
    (void)err;
    (void)errlen;
    l->enabled = 1;
    log_debug("tls-profile: learning from %s (SNI %s), kept in %s", text, l->sni, l->path);
    return 0;
}

size_t tlslearn_describe_file(const char *state_file, const char *sni, int64_t now, char *out,
                              size_t cap)
{
    char path[OPT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s" PROFILE_SUFFIX, state_file);
    struct tlsprofile p;
    if (load_stored(path, sni, &p) == 0)
        return tlsprofile_describe(&p, now, out, cap);
    int n = snprintf(out, cap, "none learned for %s yet (%s absent or unreadable): ", sni, path);
    if (n < 0 || (size_t)n >= cap)
        return n < 0 ? 0 : cap - 1;
    return (size_t)n + tlsprofile_describe(tlsprofile_builtin(pick_builtin(sni)), now,
                                           out + n, cap - (size_t)n);
}

/* ---- one connection ---- */

static void lconn_close(struct tlslearn *l, struct tlslearn_conn *c)
{
    if (c->fd >= 0) {
        ev_io_stop(l->loop, &c->io);
        close(c->fd);
        c->fd = -1;
    }
    ev_timer_stop(l->loop, &c->timer);
}

/* Where the learner's connections go: the site, directly or through the socks5 server. */
static struct dial_to lconn_to(struct tlslearn *l)
{
    return (struct dial_to){.target = &l->target, .socks = l->via_socks ? &l->socks : NULL,
                            .socks_addr = &l->socks_addr};
}

static int lconn_open(struct tlslearn *l, struct tlslearn_conn *c, void (*cb)(struct ev_loop *,
                      ev_io *, int), void (*tcb)(struct ev_loop *, ev_timer *, int),
                      double timeout)
{
    struct dial_to to = lconn_to(l);
    struct dial_result r;
    if (dial_start(&c->dial, &to, &c->fd, &r) != DIAL_WAIT_WRITE)
        return errno = r.err, -1;
    c->connected = 0;
    c->start = ev_now(l->loop);
    ev_io_init(&c->io, cb, c->fd, EV_WRITE);
    c->io.data = l;
    ev_io_start(l->loop, &c->io);
    ev_timer_init(&c->timer, tcb, timeout, 0);
    c->timer.data = l;
    ev_timer_start(l->loop, &c->timer);
    return 0;
}

/* A learner connection became writable or readable before it is connected: its TCP connect
 * ended, or (through socks5) the SOCKS handshake moved on. Returns 1 when the site is
 * connected, 0 to wait (watching what the dialer asked for), -1 with *why on failure. */
static int lconn_progress(struct tlslearn *l, struct tlslearn_conn *c, int revents,
                          const char **why)
{
    struct dial_to to = lconn_to(l);
    struct dial_result r;
    enum dial_verdict v = dial_step(&c->dial, c->fd, &to, revents, &r);
    if (v == DIAL_FAIL) {
        *why = r.why;
        if (r.socks) {
            char sv[SOCK_ADDR_STRLEN];
            sock_addr_format(&l->socks_addr, sv, sizeof sv);
            log_info("tls-profile: socks5 %s: %s (reply %d)", sv, r.why, r.code);
        }
        return -1;
    }
    if (v == DIAL_DONE)
        return 1;
    ev_io_stop(l->loop, &c->io);
    ev_io_set(&c->io, c->fd, v); /* the events to wait for */
    ev_io_start(l->loop, &c->io);
    return 0;
}

/* With mask-proxy-protocol, the PROXY header the site expects first (naming this socket's own
 * address as the client, as fronted clients' headers name theirs). Returns its length. */
static size_t proxy_header(const struct tlslearn *l, int fd, uint8_t *out, size_t cap)
{
    if (!l->proxy_protocol)
        return 0;
    struct sock_addr self;
    self.len = sizeof self.u;
    if (getsockname(fd, &self.u.sa, &self.len) != 0)
        return 0;
    return mask_proxy_header(out, cap, l->proxy_protocol, &self, &l->target);
}

/* ---- the handshake rounds ---- */

static void schedule(struct tlslearn *l, double s)
{
    ev_timer_stop(l->loop, &l->refresh);
    ev_timer_set(&l->refresh, s, 0);
    ev_timer_start(l->loop, &l->refresh);
}

static void save(struct tlslearn *l, const struct tlsprofile *p)
{
    char text[TLSPROFILE_FILE_MAX], err[300];
    size_t n = tlsprofile_format(p, text, sizeof text);
    if (n && fs_write_atomic(l->path, text, n, 0600, (uid_t)-1, err, sizeof err))
        log_warn("tls-profile: %s (the profile is used but not kept)", err);
}

static void hs_done(struct tlslearn *l);

static void hs_fail(struct tlslearn *l, const char *why)
{
    if (l->round > 0) { /* a later round failed: the rounds that ended make the profile */
        hs_done(l);
        return;
    }
    lconn_close(l, &l->hs);
    free(l->buf);
    l->buf = NULL;
    const struct tlsprofile *cur = tlslearn_current(l);
    if (!l->failed_logged) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&l->target, a, sizeof a);
        log_warn("tls-profile: cannot learn the first flight of %s at %s (%s); using %s %s",
                 l->sni, a, why, cur->learned ? "the profile learned before:" : "the built-in",
                 cur->host);
        l->failed_logged = 1;
    }
    schedule(l, l->refresh_s < RETRY_MAX ? l->refresh_s : RETRY_MAX);
    idle_begin(l); /* after the handshakes: a server that serves one at a time is not held */
}

static void hs_done(struct tlslearn *l)
{
    lconn_close(l, &l->hs);
    free(l->buf);
    l->buf = NULL;
    struct tlsprofile p = l->acc;
    snprintf(p.host, sizeof p.host, "%s", l->sni);
    p.learned = (int64_t)time(NULL);
    const struct tlsprofile *cur = tlslearn_current(l);
    p.idle_close_ms = cur->idle_close_ms;
    publish(l, &p);
    save(l, &p);
    char d[256];
    tlsprofile_describe(&p, p.learned, d, sizeof d);
    log_info("tls-profile: learned %s", d);
    l->failed_logged = 0;
    schedule(l, l->refresh_s);
    idle_begin(l);
}

/* The flight read so far is complete (OK, or quiet after a packed record): one more round. */
static void hs_round_end(struct tlslearn *l, const struct tlsprofile *p)
{
    if (l->round == 0)
        l->acc = *p;
    else if (tlsprofile_merge(&l->acc, p))
        log_debug("tls-profile: round %d of %s differs in shape; keeping the first", l->round + 1,
                  l->sni);
    lconn_close(l, &l->hs);
    if (++l->round < TLSLEARN_ROUNDS) {
        hs_begin(l);
        return;
    }
    hs_done(l);
}

static void on_hs_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct tlslearn *l = t->data;
    struct tlsprofile p;
    struct tlsprofile_flight f;
    enum faketls_status st = tlsprofile_parse_flight(l->buf, l->len, &p, &f);
    if (st == FAKETLS_NEED_MORE && f.quiet_ok && ev_now(l->loop) - l->hs.start < HS_TIMEOUT) {
        hs_round_end(l, &p); /* quiet after a whole record: the flight ended there */
        return;
    }
    hs_fail(l, l->hs.connected ? "no complete answer in time" : "connect timed out");
}

static void on_hs_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct tlslearn *l = io->data;
    struct tlslearn_conn *c = &l->hs;
    if (!c->connected) {
        const char *why = "connect failed";
        int r = lconn_progress(l, c, revents, &why);
        if (r < 0) {
            hs_fail(l, why);
            return;
        }
        if (r == 0)
            return;
        c->connected = 1;
        uint8_t hello[128 + TLSPROFILE_HELLO_MAX], rnd[96], key[32];
        if (crypto_random(rnd, sizeof rnd) || crypto_x25519_public(key)) {
            hs_fail(l, "no random source");
            return;
        }
        size_t ph = proxy_header(l, c->fd, hello, 128);
        size_t n = tlsprofile_client_hello(hello + ph, sizeof hello - ph, l->sni, rnd, rnd + 32,
                                           key);
        if (!n || send(c->fd, hello, ph + n, MSG_NOSIGNAL) != (ssize_t)(ph + n)) {
            hs_fail(l, "cannot send the hello");
            return;
        }
        ev_io_stop(loop, io);
        ev_io_set(io, c->fd, EV_READ);
        ev_io_start(loop, io);
        return;
    }
    ssize_t n = read(c->fd, l->buf + l->len, TLSLEARN_BUF - l->len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        hs_fail(l, n == 0 ? "closed by the server" : strerror(errno));
        return;
    }
    l->len += (size_t)n;
    struct tlsprofile p;
    struct tlsprofile_flight f;
    enum faketls_status st = tlsprofile_parse_flight(l->buf, l->len, &p, &f);
    if (st == FAKETLS_OK) {
        hs_round_end(l, &p);
        return;
    }
    if (st == FAKETLS_BAD) {
        hs_fail(l, f.why);
        return;
    }
    if (l->len == TLSLEARN_BUF) {
        hs_fail(l, "answer too long");
        return;
    }
    /* a packed flight ends with a large record: wait for a short quiet, within the deadline */
    double left = HS_TIMEOUT - (ev_now(loop) - c->start);
    ev_timer_stop(loop, &c->timer);
    ev_timer_set(&c->timer, f.quiet_ok && left > HS_QUIET ? HS_QUIET : (left > 0 ? left : 0.01),
                 0);
    ev_timer_start(loop, &c->timer);
}

static void hs_begin(struct tlslearn *l)
{
    if (!l->buf && !(l->buf = malloc(TLSLEARN_BUF))) {
        hs_fail(l, "out of memory");
        return;
    }
    l->len = 0;
    if (lconn_open(l, &l->hs, on_hs_io, on_hs_timer, HS_TIMEOUT))
        hs_fail(l, strerror(errno));
}

/* ---- the idle probe: connect, say nothing, time the site's close ---- */

static void idle_end(struct tlslearn *l, uint32_t ms)
{
    lconn_close(l, &l->idle);
    const struct tlsprofile *cur = tlslearn_current(l);
    if (ms == cur->idle_close_ms)
        return;
    struct tlsprofile p = *cur; /* learned or built in: the measure goes on top */
    p.idle_close_ms = ms;
    publish(l, &p);
    if (p.learned)
        save(l, &p);
    if (ms)
        log_info("tls-profile: %s closes an idle connection after %u ms (held clients follow)",
                 l->sni, ms);
}

static void on_idle_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct tlslearn *l = t->data;
    log_info("tls-profile: %s kept an idle connection open for %.1f s: held clients close at "
             "a random time around handshake-timeout", l->sni, l->idle_max_s);
    idle_end(l, 0); /* no close within the wait: nothing known */
}

static void on_idle_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct tlslearn *l = io->data;
    struct tlslearn_conn *c = &l->idle;
    if (!c->connected) {
        const char *why = "connect failed";
        int r = lconn_progress(l, c, revents, &why);
        if (r < 0) {
            idle_end(l, 0);
            return;
        }
        if (r == 0)
            return;
        c->connected = 1;
        c->start = ev_now(loop);
        uint8_t ph[128];
        size_t phl = proxy_header(l, c->fd, ph, sizeof ph);
        if (phl && send(c->fd, ph, phl, MSG_NOSIGNAL) != (ssize_t)phl) {
            idle_end(l, 0);
            return;
        }
        ev_io_stop(loop, io);
        ev_io_set(io, c->fd, EV_READ);
        ev_io_start(loop, io);
        return;
    }
    uint8_t b[512];
    ssize_t n = read(c->fd, b, sizeof b);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0)
        return; /* a banner: keep waiting for the close */
    ev_now_update(loop);
    double s = ev_now(loop) - c->start;
    idle_end(l, (uint32_t)(s * 1000 + 0.5) ? (uint32_t)(s * 1000 + 0.5) : 1);
}

static void idle_begin(struct tlslearn *l)
{
    if (l->idle.fd >= 0)
        return; /* the previous probe still waits */
    if (lconn_open(l, &l->idle, on_idle_io, on_idle_timer, l->idle_max_s))
        idle_end(l, 0);
}

static void on_refresh(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    struct tlslearn *l = t->data;
    l->round = 0;
    if (l->hs.fd < 0)
        hs_begin(l);
}

void tlslearn_start(struct tlslearn *l, struct ev_loop *loop)
{
    if (!l->enabled)
        return;
    l->loop = loop;
    ev_timer_init(&l->refresh, on_refresh, 0.0, 0);
    l->refresh.data = l;
    ev_timer_start(loop, &l->refresh);
}

void tlslearn_stop(struct tlslearn *l)
{
    if (!l->enabled || !l->loop)
        return;
    ev_timer_stop(l->loop, &l->refresh);
    lconn_close(l, &l->hs);
    lconn_close(l, &l->idle);
    free(l->buf);
    l->buf = NULL;
}
