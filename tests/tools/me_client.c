/* me_client.c: many obfuscated2 clients speaking framed MTProto packets through the proxy to
 * fake_me (echo with quick acks, downloads, clients that stop reading). */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>

#include "crypto/crypto.h"
#include "pattern.h"
#include "proto/frame.h"
#include "proto/obfs2.h"
#include "proto/secret.h"
#include "tlsclient.h"
#include "toolnet.h"

/*
 * Usage: me_client --proxy ADDR:PORT --secret HEX [--tag ef|ee|dd] [--dc N] [--clients N]
 *                  [--echo COUNT [--size BYTES] [--quickack] [--gap-ms MS]]
 *                  [--download BYTES [--chunk B] [--part B --window N]]
 *                  [--stall K [--stall-bytes B]] [--rate KIB] [--hold-ms MS]
 *                  [--timeout S]
 *
 * Each client connects (an ee secret: FakeTLS first, then everything in records), sends the
 * obfuscated2 header, then:
 *   --echo COUNT: COUNT packets "ECHOECHO" | client u32 | seq u32 | random, each answered by
 *     fake_me with the same packet (and, with --quickack, a quick-ack token before it); every
 *     byte is checked, so an answer for another client is a failure.
 *   --download BYTES: one "DOWNLOAD" request (--part P --window W: requests of P bytes, W
 *     outstanding, as apps fetch files); the answers must carry the fake ME's pattern.
 *   --stall K: the first K clients send their request (for --stall-bytes), then never read
 *     (until the others end, and --hold-ms more).
 *   --rate KIB: each reading client reads at most KIB KiB per second, through a 64 KiB
 *     receive buffer (a slow, far client: what reaches it queues in the proxy).
 *   --hold-ms MS with --echo: each client stays connected, idle, MS after its echoes.
 * Output: CLIENT i port=P (once connected), then per client OK i bytes=N secs=S or
 * FAIL i why=TEXT, then SUMMARY ok=N fail=N bytes=N secs=S mibps=X min_mibps=X med_mibps=X
 * (over the clients that read; secs until the last of them ended).
 */

struct opts {
    struct sockaddr_storage proxy;
    socklen_t proxy_len;
    uint8_t key[16];
    char sni[SECRET_DOMAIN_MAX + 1]; /* an ee secret: FakeTLS to this name */
    uint32_t tag;
    int dc, clients, echo, size, quickack, stall, timeout_s;
    uint64_t download;
    uint32_t chunk;
    int hold_ms;
    int gap_ms;           /* --echo: pause between packets */
    uint32_t part;        /* --download in requests of this many bytes (0 = one request) */
    int window;           /* ... with at most this many outstanding */
    uint64_t stall_bytes; /* --download: what a stalled client asks for (default: --download) */
    uint64_t rate;        /* bytes per second a reading client reads at most (0: no limit) */
};

struct client {
    const struct opts *o;
    int idx, fd;
    struct crypto_ctr *enc, *dec;
    int tls;                 /* FakeTLS: records both ways */
    bool ccs_pending;
    struct tlsc_in tin;
    uint8_t *buf;
    size_t len, cap;
    int ok;
    double rtt_sum, rtt_max; /* --echo: round trips, seconds */
    uint64_t bytes;
    double secs;
    int64_t t0_us; /* --rate: when the client started reading */
    char why[96];
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int readers_left;
static volatile int64_t readers_done_ms; /* when the last reading client ended */

static void out(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tn_print_line(&out_lock, fmt, ap);
    va_end(ap);
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t deadline_of(const struct client *c) {
    return tn_now_ms() + (int64_t)c->o->timeout_s * 1000;
}

static int fail(struct client *c, const char *why) {
    snprintf(c->why, sizeof c->why, "%s", why);
    return -1;
}

/* Writes n bytes (already encrypted) to the proxy, in TLS records for an ee secret. */
static int send_raw(struct client *c, const uint8_t *p, size_t n) {
    uint8_t *b = NULL;
    if (c->tls) {
        if (!(b = malloc(tlsc_framed_len(n))))
            return fail(c, "malloc");
        n = tlsc_frame(p, n, &c->ccs_pending, b);
        p = b;
    }
    enum tn_status st = tn_write_all(c->fd, p, n, deadline_of(c));
    free(b);
    return st == TN_OK ? 0 : fail(c, "write");
}

/* The FakeTLS handshake: our hello, the proxy's ServerHello + CCS + one record, checked. */
static int tls_handshake(struct client *c) {
    uint8_t hello[TLSC_HELLO_MAX], resp[32768];
    size_t len = tlsc_build_hello(hello, sizeof hello, c->o->key, c->o->sni, (uint32_t)time(NULL));
    if (!len || tn_write_all(c->fd, hello, len, deadline_of(c)) != TN_OK)
        return fail(c, "tls hello");
    size_t have = 0;
    for (int rec = 0; rec < 3; rec++) { /* ServerHello, CCS, ApplicationData */
        if (have + 5 > sizeof resp ||
            tn_read_full(c->fd, resp + have, 5, deadline_of(c), NULL) != TN_OK)
            return fail(c, "tls: no answer (fronted?)");
        size_t body = (size_t)resp[have + 3] << 8 | resp[have + 4];
        have += 5;
        if (have + body > sizeof resp ||
            tn_read_full(c->fd, resp + have, body, deadline_of(c), NULL) != TN_OK)
            return fail(c, "tls: short answer");
        have += body;
    }
    char why[96];
    if (tlsc_check_server_hello(resp, have, c->o->key, hello + TLSC_RANDOM_OFF, why, sizeof why))
        return fail(c, why);
    c->tls = 1;
    c->ccs_pending = true;
    return 0;
}

/* Sends one packet in the client's framing (encrypted). */
static int send_packet(struct client *c, const uint8_t *p, size_t n, int qa) {
    uint8_t *b = malloc(n + 20);
    if (!b)
        return fail(c, "malloc");
    size_t pad = c->o->tag == OBFS2_TAG_PADDED ? (size_t)(c->idx % 4) : 0;
    size_t h = frame_header(c->o->tag, n, pad, b);
    if (qa)
        b[c->o->tag == OBFS2_TAG_ABRIDGED ? 0 : 3] |= 0x80;
    memcpy(b + h, p, n);
    memset(b + h + n, 0xaa, pad);
    crypto_ctr_apply(c->enc, b, b, h + n + pad);
    int rc = send_raw(c, b, h + n + pad);
    free(b);
    return rc;
}

/* Reads until buf holds want bytes (decrypted). */
static int fill(struct client *c, size_t want) {
    if (want > c->cap) {
        size_t cap = c->cap ? c->cap : 65536;
        while (cap < want)
            cap *= 2;
        uint8_t *b = realloc(c->buf, cap);
        if (!b)
            return fail(c, "malloc");
        c->buf = b;
        c->cap = cap;
    }
    while (c->len < want) {
        if (c->o->rate) { /* --rate: no further than rate * elapsed */
            int64_t due = c->t0_us + (int64_t)(c->bytes * 1000000 / c->o->rate);
            int64_t t = now_us();
            if (due > t)
                usleep((useconds_t)(due - t < 100000 ? due - t : 100000));
            if (due > t)
                continue;
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r > 0 && c->tls) {
            size_t m = 0;
            if (tlsc_in_feed(&c->tin, c->buf + c->len, (size_t)r, &m))
                return fail(c, c->tin.why);
            c->bytes += (uint64_t)r - m; /* record headers */
            r = (ssize_t)m;
            if (!r)
                continue;
        }
        if (r > 0) {
            crypto_ctr_apply(c->dec, c->buf + c->len, c->buf + c->len, (size_t)r);
            c->len += (size_t)r;
            c->bytes += (uint64_t)r;
            continue;
        }
        enum tn_status st = tn_recv_wait(c->fd, r, deadline_of(c));
        if (st != TN_OK)
            return fail(c, st == TN_EOF ? "eof" : st == TN_TIMEOUT ? "timeout" : "read");
    }
    return 0;
}

static void consume(struct client *c, size_t n) {
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* Reads one answer: a quick-ack token (returns 1, *confirm) or a packet (returns 0, its
 * bytes at c->buf + *hdr, *len long; call consume(*total) after). */
static int read_answer(struct client *c, uint32_t *confirm, size_t *hdr, size_t *len,
                       size_t *total) {
    if (fill(c, c->o->tag == OBFS2_TAG_ABRIDGED ? 1 : 4))
        return -1;
    int token = c->o->tag == OBFS2_TAG_ABRIDGED ? c->buf[0] & 0x80 : c->buf[3] & 0x80;
    if (token) {
        if (fill(c, 4))
            return -1;
        *confirm = c->o->tag == OBFS2_TAG_ABRIDGED
                       ? (uint32_t)c->buf[0] << 24 | (uint32_t)c->buf[1] << 16 |
                             (uint32_t)c->buf[2] << 8 | c->buf[3]
                       : tp_get32(c->buf);
        consume(c, 4);
        return 1;
    }
    for (;;) {
        struct frame f;
        size_t need = 0;
        enum frame_status st = frame_parse(c->o->tag, c->buf, c->len, &f, &need);
        if (st == FRAME_BAD)
            return fail(c, "bad frame from proxy");
        if (st == FRAME_OK) {
            *hdr = f.hdr_len;
            *len = f.len;
            *total = f.total;
            return 0;
        }
        if (fill(c, need))
            return -1;
    }
}

static int run_echo(struct client *c) {
    uint8_t *p = malloc((size_t)c->o->size);
    if (!p)
        return fail(c, "malloc");
    int rc = 0;
    for (int i = 0; i < c->o->echo && !rc; i++) {
        memcpy(p, "ECHOECHO", 8);
        tp_put32(p + 8, (uint32_t)c->idx);
        tp_put32(p + 12, (uint32_t)i);
        crypto_random(p + 16, (size_t)c->o->size - 16);
        if (i && c->o->gap_ms)
            usleep((useconds_t)c->o->gap_ms * 1000);
        if (send_packet(c, p, (size_t)c->o->size, c->o->quickack)) {
            rc = -1;
            break;
        }
        uint32_t confirm = 0;
        size_t h, n, t;
        int64_t sent_us = now_us();
        int r = read_answer(c, &confirm, &h, &n, &t);
        if (c->o->quickack) {
            if (r != 1 || confirm != ((uint32_t)c->o->size | 0x80000000u)) {
                rc = r < 0 ? -1 : fail(c, "no or wrong quick ack");
                break;
            }
            r = read_answer(c, &confirm, &h, &n, &t);
        }
        if (r != 0) {
            rc = r < 0 ? -1 : fail(c, "unexpected quick ack");
            break;
        }
        if (n != (size_t)c->o->size || memcmp(c->buf + h, p, n) != 0)
            rc = fail(c, "echo mismatch (an answer for another client?)");
        consume(c, t);
        double rtt = (double)(now_us() - sent_us) / 1e6;
        c->rtt_sum += rtt;
        if (rtt > c->rtt_max)
            c->rtt_max = rtt;
    }
    if (!rc && c->o->hold_ms && !c->o->stall) { /* stay connected, idle (memory figures) */
        int64_t end = tn_now_ms() + c->o->hold_ms;
        while (tn_now_ms() < end)
            usleep(50000);
    }
    free(p);
    return rc;
}

/* One DOWNLOAD request for n bytes. */
static int download_req(struct client *c, uint64_t n, uint32_t seed) {
    uint8_t req[20];
    memcpy(req, "DOWNLOAD", 8);
    tp_put32(req + 8, (uint32_t)n);
    tp_put32(req + 12, c->o->chunk);
    tp_put32(req + 16, seed);
    return send_packet(c, req, sizeof req, 0);
}

/* Downloads --download bytes: one request, or (--part) requests of part bytes with --window
 * outstanding, as a Telegram client fetches a file in parts. Each part restarts the pattern. */
static int run_download(struct client *c) {
    const struct opts *o = c->o;
    uint32_t seed = (uint32_t)c->idx * 977u;
    int stalled = c->idx < o->stall;
    uint64_t part = o->part && !stalled ? o->part : stalled && o->stall_bytes ? o->stall_bytes
                                                                              : o->download;
    uint64_t total = stalled && o->stall_bytes ? o->stall_bytes : o->download;
    uint64_t asked = 0, got = 0, in_part = 0;
    int window = o->part && o->window > 0 ? o->window : 1;
    while (asked < total && (asked - got) / part < (uint64_t)window) {
        uint64_t n = total - asked < part ? total - asked : part;
        if (download_req(c, n, seed))
            return -1;
        asked += n;
    }
    if (stalled) { /* never read: until the readers are done, then --hold-ms more */
        while (readers_left > 0)
            usleep(20000);
        usleep((useconds_t)o->hold_ms * 1000);
        return 0;
    }
    while (got < total) {
        uint32_t confirm;
        size_t h, n, t;
        int r = read_answer(c, &confirm, &h, &n, &t);
        if (r)
            return r < 0 ? -1 : fail(c, "unexpected quick ack");
        uint64_t this_part = total - (got - in_part) < part ? total - (got - in_part) : part;
        size_t use = n < this_part - in_part ? n : (size_t)(this_part - in_part);
        for (size_t i = 0; i < use; i++)
            if (c->buf[h + i] != (uint8_t)((in_part + i) * 7 + seed))
                return fail(c, "download pattern mismatch");
        got += use;
        in_part += use;
        consume(c, t);
        if (in_part == this_part) { /* a part is done: ask for the next */
            in_part = 0;
            if (asked < total) {
                uint64_t k = total - asked < part ? total - asked : part;
                if (download_req(c, k, seed))
                    return -1;
                asked += k;
            }
        }
    }
    return 0;
}

static void *run_client(void *arg) {
    struct client *c = arg;
    const struct opts *o = c->o;
    int64_t t0 = tn_now_ms();
    c->fd = socket(o->proxy.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = -1;
    if (c->idx < o->stall && c->fd >= 0) { /* little kernel buffering for one that never reads */
        int small = 4096;
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    } else if (o->rate && c->fd >= 0) {
        int rcv = 65536;
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    }
    if (c->fd < 0 || connect(c->fd, (const struct sockaddr *)&o->proxy, o->proxy_len)) {
        fail(c, "connect");
        goto done;
    }
    tn_set_nonblock(c->fd);
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    getsockname(c->fd, (struct sockaddr *)&me, &ml);
    out("CLIENT %d port=%d", c->idx, ntohs(((struct sockaddr_in *)&me)->sin_port));
    uint8_t plain[OBFS2_HDR_LEN], wire[OBFS2_HDR_LEN];
    struct obfs2_keys k;
    c->enc = crypto_ctr_new();
    c->dec = crypto_ctr_new();
    if (o->sni[0] && tls_handshake(c))
        goto done;
    if (!c->enc || !c->dec || obfs2_build(plain, o->tag, (int16_t)o->dc, NULL)) {
        fail(c, "setup");
        goto done;
    }
    obfs2_derive(plain, o->key, &k);
    crypto_ctr_init(c->enc, k.fwd.key, k.fwd.iv);
    crypto_ctr_init(c->dec, k.rev.key, k.rev.iv);
    obfs2_seal(plain, c->enc, wire);
    if (send_raw(c, wire, sizeof wire))
        goto done;
    c->t0_us = now_us();
    rc = o->echo ? run_echo(c) : run_download(c);
done:
    c->secs = (double)(tn_now_ms() - t0) / 1000.0;
    c->ok = rc == 0;
    if (c->idx >= o->stall && __atomic_sub_fetch(&readers_left, 1, __ATOMIC_SEQ_CST) == 0)
        readers_done_ms = tn_now_ms();
    if (c->ok)
        out("OK %d bytes=%llu secs=%.3f", c->idx, (unsigned long long)c->bytes, c->secs);
    else
        out("FAIL %d why=%s", c->idx, c->why);
    if (c->fd >= 0)
        close(c->fd);
    crypto_ctr_free(c->enc);
    crypto_ctr_free(c->dec);
    free(c->buf);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void) {
    fprintf(stderr, "usage: me_client --proxy ADDR:PORT --secret HEX [--tag ef|ee|dd] [--dc N] "
                    "[--clients N] [--echo N [--size B] [--quickack]] [--download B [--chunk B]] "
                    "[--stall K] [--rate KIB] [--hold-ms MS] [--timeout S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    static struct opts o = {.tag = OBFS2_TAG_INTERMEDIATE, .dc = 2, .clients = 1, .size = 64,
                            .timeout_s = 30, .chunk = 65536};
    int have_proxy = 0, have_secret = 0;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char err[160];
        if (!strcmp(a, "--quickack")) {
            o.quickack = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--proxy")) {
            if (tn_parse_addr(v, 1, &o.proxy, &o.proxy_len, NULL, err, sizeof err))
                usage();
            have_proxy = 1;
        } else if (!strcmp(a, "--secret")) {
            struct secret s;
            if (secret_parse(NULL, v, &s, err, sizeof err))
                usage();
            memcpy(o.key, s.key, 16);
            if (s.kind == SECRET_EE)
                snprintf(o.sni, sizeof o.sni, "%s", s.domain);
            have_secret = 1;
        } else if (!strcmp(a, "--tag")) {
            o.tag = !strcmp(v, "ef") ? OBFS2_TAG_ABRIDGED
                    : !strcmp(v, "dd") ? OBFS2_TAG_PADDED
                                       : OBFS2_TAG_INTERMEDIATE;
        } else if (!strcmp(a, "--dc")) {
            o.dc = atoi(v);
        } else if (!strcmp(a, "--clients")) {
            o.clients = atoi(v);
        } else if (!strcmp(a, "--echo")) {
            o.echo = atoi(v);
        } else if (!strcmp(a, "--size")) {
            o.size = atoi(v) & ~3;
        } else if (!strcmp(a, "--download")) {
            o.download = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--chunk")) {
            o.chunk = (uint32_t)atoi(v);
        } else if (!strcmp(a, "--part")) {
            o.part = (uint32_t)atoi(v);
        } else if (!strcmp(a, "--window")) {
            o.window = atoi(v);
        } else if (!strcmp(a, "--gap-ms")) {
            o.gap_ms = atoi(v);
        } else if (!strcmp(a, "--stall-bytes")) {
            o.stall_bytes = strtoull(v, NULL, 10);
        } else if (!strcmp(a, "--stall")) {
            o.stall = atoi(v);
        } else if (!strcmp(a, "--rate")) {
            o.rate = strtoull(v, NULL, 10) * 1024;
        } else if (!strcmp(a, "--hold-ms")) {
            o.hold_ms = atoi(v);
        } else if (!strcmp(a, "--timeout")) {
            o.timeout_s = atoi(v);
        } else {
            usage();
        }
    }
    if (!have_proxy || !have_secret || o.clients < 1 || o.size < 16 || (!o.echo && !o.download))
        usage();
    struct client *cs = calloc((size_t)o.clients, sizeof *cs);
    pthread_t *ts = calloc((size_t)o.clients, sizeof *ts);
    if (!cs || !ts)
        return 1;
    readers_left = o.clients - (o.stall < o.clients ? o.stall : o.clients);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    int64_t t0 = tn_now_ms();
    for (int i = 0; i < o.clients; i++) {
        cs[i] = (struct client){.o = &o, .idx = i, .fd = -1};
        if (pthread_create(&ts[i], &attr, run_client, &cs[i]))
            return 1;
    }
    for (int i = 0; i < o.clients; i++)
        pthread_join(ts[i], NULL);
    /* throughput of the clients that read, until the last of them ended */
    double secs = (double)((readers_done_ms ? readers_done_ms : tn_now_ms()) - t0) / 1000.0;
    int ok = 0, nrate = 0;
    uint64_t bytes = 0;
    double *rates = calloc((size_t)o.clients, sizeof *rates);
    for (int i = 0; i < o.clients; i++) {
        ok += cs[i].ok;
        if (i >= o.stall) {
            bytes += cs[i].bytes;
            if (cs[i].ok && cs[i].secs > 0)
                rates[nrate++] = (double)cs[i].bytes / cs[i].secs / 1048576.0;
        }
    }
    qsort(rates, (size_t)nrate, sizeof *rates, cmp_double);
    double rtt_sum = 0, rtt_max = 0;
    for (int i = 0; i < o.clients; i++) {
        rtt_sum += cs[i].rtt_sum;
        rtt_max = cs[i].rtt_max > rtt_max ? cs[i].rtt_max : rtt_max;
    }
    out("SUMMARY ok=%d fail=%d bytes=%llu secs=%.3f mibps=%.2f min_mibps=%.2f med_mibps=%.2f "
        "rtt_avg_us=%.1f rtt_max_us=%.1f", ok, o.clients - ok, (unsigned long long)bytes, secs,
        (double)bytes / secs / 1048576.0, nrate ? rates[0] : 0.0, nrate ? rates[nrate / 2] : 0.0,
        o.echo ? rtt_sum / ((double)o.clients * o.echo) * 1e6 : 0.0, rtt_max * 1e6);
    free(rates);
    free(cs);
    free(ts);
    crypto_thread_cleanup();
    return ok == o.clients ? 0 : 1;
}
