/* test_client.c: obfuscated2 test client: runs the test protocol through the proxy, checks it. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "crypto/crypto.h"
#include "pattern.h"
#include "proto/obfs2.h"
#include "proto/secret.h"
#include "tlsclient.h"
#include "toolnet.h"

/*
 * Usage: test_client --proxy HOST:PORT --secret SECRET --tag ef|ee|dd --dc N --up BYTES
 *          --down BYTES [--seed S] [--conns N] [--expect-id ID] [--expect-dc N]
 *          [--close-halfway] [--slow-read BYTES_PER_SEC] [--rcvbuf BYTES] [--timeout SECONDS]
 *          [--rst-after-trailer] [--hold SECONDS] [--events] [--direct]
 *          [--tls-split N] [--tls-records N] [--tls-time-offset SECONDS] [--tls-wrong-key]
 *          [--tls-sni NAME] [--tls-save-hello FILE] [--tls-replay-hello FILE]
 *
 * Each connection: 64-byte obfuscated2 header keyed with the secret + the test request
 * (pattern.h), the hello (checked), then up and down at once with every byte verified, the
 * trailer (checked), then a half-close and a clean EOF from the proxy. Connection i uses
 * seed S + i. --hold waits SECONDS after the hello (failing if the peer closes meanwhile), then
 * sends the GO byte (pattern.h) that starts the transfer;
 * --events prints {"event":"connected"|"hello",...} lines as they happen. --direct (a self-check
 * of the tools) talks to fake_dc itself: raw keys, no secret. The last line is
 * one JSON summary; the exit code is 0 iff every connection succeeded. HOST must be a
 * loopback address.
 *
 * With an ee secret (ee + key + hex domain) each connection first does the FakeTLS handshake
 * the way Telegram's clients do (tdlib): a ~1.8 KB ClientHello (GREASE, SNI = the domain or
 * --tls-sni, a large hybrid key share, ECH, shuffled extensions) signed with HMAC-SHA256 and
 * stamped with the time (+ --tls-time-offset); --tls-wrong-key signs with another key. The
 * hello goes out in --tls-split TCP segments, cut into --tls-records TLS records. The answer
 * must be exactly ServerHello, CCS and one ApplicationData record whose digest checks out;
 * then the obfuscated2 stream travels in records (CCS first, payloads <= 2878 bytes) and every
 * record from the proxy must be 17 03 03 with a payload of at most 16384 bytes. If the answer
 * is our own hello byte for byte (an echoing mask server behind the proxy), the outcome is
 * "echoed". --tls-save-hello writes connection 0's hello to FILE; --tls-replay-hello sends
 * FILE instead of a new hello. The summary's "tls" names the outcome: off, server-hello,
 * echoed, eof, reset, timeout, bad-response, hash-mismatch (or mixed).
 */

#define IO_CHUNK 65536
#define MAX_CONNS 5000
#define MAX_REPORTED_ERRORS 5

struct opts {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct secret secret;
    uint32_t tag;
    int16_t dc;
    uint64_t up, down;
    uint32_t seed;
    int conns;
    int64_t expect_id; /* -1: any */
    bool expect_dc_set;
    int16_t expect_dc;
    bool close_halfway;
    uint64_t slow_read; /* bytes per second, 0 = unlimited */
    int rcvbuf;         /* SO_RCVBUF before connect (with --slow-read: the proxy feels it) */
    int timeout_s;
    bool rst_after_trailer;
    int hold_s;
    bool events;
    bool direct; /* debug: raw keys, no secret, straight to fake_dc */
    /* FakeTLS (ee secret) */
    bool tls;
    int tls_split;        /* TCP segments the hello is sent in */
    int tls_records;      /* TLS records the hello is cut into */
    long tls_time_offset; /* seconds added to the hello's timestamp */
    bool tls_wrong_key;
    const char *tls_sni; /* server name sent (default: the secret's domain) */
    const char *save_hello, *replay_hello;
    uint8_t *replay; /* the hello read from replay_hello */
    size_t replay_len;
};

struct result {
    bool ok;
    bool got_hello;
    uint32_t id, tag;
    int16_t dc;
    uint64_t up_sent, down_got;
    size_t rx_before_hello;
    int64_t hello_ms;
    const char *tls;        /* FakeTLS outcome (see the usage comment) */
    size_t tls_hello_bytes; /* ClientHello bytes sent */
    uint64_t records_in;    /* records received after the ServerHello */
    uint32_t max_record;    /* largest record payload received */
    char err[240];
};

/* One connection's byte stream: raw, or inside FakeTLS records once the handshake is done. */
struct link {
    int fd;
    bool tls;
    bool ccs_pending; /* the first record we send is preceded by a CCS, as tdlib does */
    struct tlsc_in in;
};

struct conn_ctx {
    const struct opts *o;
    int index;
    bool started;
    struct result r;
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t t_start;

static void fail(struct result *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    r->ok = false;
}


static const char *io_what(enum tn_status st, int err) {
    if (st == TN_ERR)
        return err == ECONNRESET || err == EPIPE ? "reset" : strerror(err);
    return tn_status_name(st);
}

/* Like recv() on the stream's payload. In TLS mode a read that brought only record headers
 * fails with EAGAIN, an illegal record with EPROTO (lk->in.why says which). Never returns more
 * than cap payload bytes, and never reads more raw bytes than cap: no payload is read ahead. */
static ssize_t link_recv(struct link *lk, uint8_t *buf, size_t cap) {
    ssize_t n = recv(lk->fd, buf, cap, 0);
    if (n <= 0 || !lk->tls)
        return n;
    size_t m = 0;
    if (tlsc_in_feed(&lk->in, buf, (size_t)n, &m) != 0) {
        errno = EPROTO;
        return -1;
    }
    if (m == 0) {
        errno = EAGAIN;
        return -1;
    }
    return (ssize_t)m;
}

/* What went wrong with a link operation, for messages. */
static const char *link_what(const struct link *lk, enum tn_status st, int err) {
    if (st == TN_ERR && err == EPROTO && lk->in.bad)
        return lk->in.why;
    return io_what(st, err);
}

static enum tn_status link_read_full(struct link *lk, uint8_t *buf, size_t n, int64_t deadline,
                                     size_t *got) {
    size_t done = 0;
    enum tn_status st = TN_OK;
    while (done < n && st == TN_OK) {
        ssize_t r = link_recv(lk, buf + done, n - done);
        if (r > 0)
            done += (size_t)r;
        else
            st = tn_recv_wait(lk->fd, r, deadline);
    }
    if (got)
        *got = done;
    return st;
}

static enum tn_status link_write_all(struct link *lk, const uint8_t *buf, size_t n,
                                     int64_t deadline) {
    if (!lk->tls)
        return tn_write_all(lk->fd, buf, n, deadline);
    uint8_t *framed = malloc(tlsc_framed_len(n));
    if (!framed) {
        errno = ENOMEM;
        return TN_ERR;
    }
    size_t len = tlsc_frame(buf, n, &lk->ccs_pending, framed);
    enum tn_status st = tn_write_all(lk->fd, framed, len, deadline);
    free(framed);
    return st;
}

/* Payload bytes until EOF; EOF inside a record counts as an error (EPROTO). */
static enum tn_status link_drain_to_eof(struct link *lk, int64_t deadline, size_t *extra) {
    uint8_t buf[4096];
    size_t total = 0;
    enum tn_status st = TN_OK;
    while (st == TN_OK) {
        ssize_t r = link_recv(lk, buf, sizeof(buf));
        if (r > 0)
            total += (size_t)r;
        else
            st = tn_recv_wait(lk->fd, r, deadline);
    }
    if (st == TN_EOF && lk->tls && (lk->in.hdr_len || lk->in.left) && !lk->in.bad) {
        snprintf(lk->in.why, sizeof(lk->in.why), "eof inside a TLS record");
        lk->in.bad = true;
        errno = EPROTO;
        st = TN_ERR;
    }
    if (extra)
        *extra = total;
    return st;
}

static void event(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tn_print_line(&out_lock, fmt, ap);
    va_end(ap);
}

static int connect_to(const struct opts *o, int64_t deadline, struct result *r) {
    int fd = socket(o->addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        fail(r, "socket: %s", strerror(errno));
        return -1;
    }
    tn_set_nonblock(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (o->rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf, sizeof(o->rcvbuf));
    if (connect(fd, (const struct sockaddr *)&o->addr, o->addrlen) != 0 && errno != EINPROGRESS) {
        fail(r, "connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    int w = tn_wait(fd, POLLOUT, deadline);
    int e = 0;
    socklen_t el = sizeof(e);
    if (w <= 0) {
        fail(r, "connect: %s", w == 0 ? "timeout" : strerror(errno));
        close(fd);
        return -1;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
    if (e != 0) {
        fail(r, "connect: %s", strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

/* Waits hold_ms after the hello; the proxy must neither send nor close meanwhile. */
static int hold(int fd, int64_t hold_ms, int64_t deadline, struct result *r) {
    int64_t until = tn_now_ms() + hold_ms;
    if (until > deadline)
        until = deadline;
    while (tn_now_ms() < until) {
        int w = tn_wait(fd, POLLIN, until);
        if (w == 0)
            break;
        uint8_t b[64];
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n == 0) {
            fail(r, "hold: eof from proxy");
            return -1;
        }
        if (n > 0) {
            fail(r, "hold: unexpected %zd bytes", n);
            return -1;
        }
        if (errno != EAGAIN && errno != EINTR) {
            fail(r, "hold: %s", io_what(TN_ERR, errno));
            return -1;
        }
    }
    return 0;
}

/* Sends up and receives down at once. Returns 0, 1 after a deliberate half-way close,
 * or -1 on failure. In TLS mode the up bytes go out in records and r->up_sent counts payload
 * bytes of chunks fully written. */
static int transfer(const struct opts *o, struct link *lk, struct crypto_ctr *enc,
                    struct crypto_ctr *dec, uint32_t seed, int64_t deadline, struct result *r) {
    struct pattern pup, pdown;
    pattern_init(&pup, seed, TP_DIR_UP);
    pattern_init(&pdown, seed, TP_DIR_DOWN);
    int fd = lk->fd;
    /* In TLS mode a chunk is 20 full client records; framed it still fits in IO_CHUNK. */
    size_t chunk_max = lk->tls ? 20 * TLSC_CLIENT_RECORD : IO_CHUNK;
    uint8_t *sbuf = malloc(IO_CHUNK), *rbuf = malloc(IO_CHUNK), *pbuf = malloc(IO_CHUNK);
    int rc = -1;
    if (!sbuf || !rbuf || !pbuf) {
        fail(r, "malloc");
        goto out;
    }
    uint64_t up_limit = o->close_halfway ? o->up / 2 : o->up;
    uint64_t queued = 0; /* up bytes generated so far */
    size_t slen = 0, soff = 0, chunk = 0;
    int64_t t0 = tn_now_ms();
    for (;;) {
        if (o->close_halfway && r->up_sent >= up_limit) {
            tn_close_rst(fd);
            lk->fd = -1;
            rc = 1;
            goto out;
        }
        if (r->up_sent >= up_limit && r->down_got >= o->down)
            break;
        if (soff == slen && queued < up_limit) {
            uint64_t left = up_limit - queued;
            chunk = left < chunk_max ? (size_t)left : chunk_max;
            if (lk->tls) {
                pattern_fill(&pup, pbuf, chunk);
                crypto_ctr_apply(enc, pbuf, pbuf, chunk);
                slen = tlsc_frame(pbuf, chunk, &lk->ccs_pending, sbuf);
            } else {
                slen = chunk;
                pattern_fill(&pup, sbuf, slen);
                crypto_ctr_apply(enc, sbuf, sbuf, slen);
            }
            queued += chunk;
            soff = 0;
        }
        size_t can_read = 0;
        if (r->down_got < o->down) {
            uint64_t left = o->down - r->down_got;
            can_read = left < IO_CHUNK ? (size_t)left : IO_CHUNK;
            if (o->slow_read) {
                int64_t allowed = 16384 +
                                  (int64_t)(o->slow_read * (uint64_t)(tn_now_ms() - t0) / 1000) -
                                  (int64_t)r->down_got;
                if (allowed <= 0)
                    can_read = 0;
                else if ((uint64_t)allowed < can_read)
                    can_read = (size_t)allowed;
            }
        }
        struct pollfd pfd = {.fd = fd, .events = 0};
        if (soff < slen)
            pfd.events |= POLLOUT;
        if (can_read)
            pfd.events |= POLLIN;
        int wait_ms = tn_left_ms(deadline);
        bool throttled = r->down_got < o->down && can_read == 0;
        if (throttled && wait_ms > 10)
            wait_ms = 10;
        if (wait_ms == 0 && !throttled) {
            fail(r, "transfer: timeout (up %" PRIu64 "/%" PRIu64 ", down %" PRIu64 "/%" PRIu64 ")",
                 r->up_sent, o->up, r->down_got, o->down);
            goto out;
        }
        int n = poll(&pfd, 1, wait_ms);
        if (n < 0 && errno != EINTR) {
            fail(r, "poll: %s", strerror(errno));
            goto out;
        }
        if (n <= 0)
            continue;
        if (pfd.revents & POLLERR) {
            /* A reset that came after bytes still unread: read those first (recv reports
             * the reset once they are gone); while throttled, wait for the reader's turn. */
            int unread = 0;
            if (ioctl(fd, FIONREAD, &unread) == 0 && unread > 0 && r->down_got < o->down) {
                if (!can_read) {
                    usleep(1000);
                    continue;
                }
                pfd.revents |= POLLIN;
            }
        }
        if ((pfd.revents & POLLERR) && !(pfd.revents & POLLIN)) {
            int e = 0;
            socklen_t el = sizeof(e);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
            fail(r, "transfer: %s (up %" PRIu64 "/%" PRIu64 ", down %" PRIu64 "/%" PRIu64 ")",
                 io_what(TN_ERR, e), r->up_sent, o->up, r->down_got, o->down);
            goto out;
        }
        if ((pfd.revents & (POLLIN | POLLHUP)) && can_read) {
            ssize_t got = link_recv(lk, rbuf, can_read);
            if (got == 0) {
                fail(r, "transfer: eof (up %" PRIu64 "/%" PRIu64 ", down %" PRIu64 "/%" PRIu64 ")",
                     r->up_sent, o->up, r->down_got, o->down);
                goto out;
            }
            if (got < 0 && errno != EAGAIN && errno != EINTR) {
                fail(r, "transfer: %s (up %" PRIu64 "/%" PRIu64 ", down %" PRIu64 "/%" PRIu64 ")",
                     link_what(lk, TN_ERR, errno), r->up_sent, o->up, r->down_got, o->down);
                goto out;
            }
            if (got > 0) {
                crypto_ctr_apply(dec, rbuf, rbuf, (size_t)got);
                long bad = pattern_check(&pdown, rbuf, (size_t)got);
                if (bad >= 0) {
                    fail(r, "down: mismatch at byte %" PRIu64, r->down_got + (uint64_t)bad);
                    goto out;
                }
                r->down_got += (uint64_t)got;
            }
        }
        if ((pfd.revents & (POLLOUT | POLLHUP)) && soff < slen) {
            ssize_t w = send(fd, sbuf + soff, slen - soff, MSG_NOSIGNAL);
            if (w > 0) {
                soff += (size_t)w;
                if (!lk->tls)
                    r->up_sent += (uint64_t)w;
                else if (soff == slen)
                    r->up_sent += chunk;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                fail(r, "transfer: send %s (up %" PRIu64 "/%" PRIu64 ")", io_what(TN_ERR, errno),
                     r->up_sent, o->up);
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(sbuf);
    free(rbuf);
    free(pbuf);
    return rc;
}

/* Names the answer to a hello that was not a ServerHello: our own bytes echoed back (a mask
 * server behind the proxy), or something else. have[0..hlen) was read already. */
static const char *tls_classify_other(int fd, const uint8_t *hello, size_t len, uint8_t *have,
                                      size_t hlen, int64_t deadline, struct result *r) {
    if (memcmp(have, hello, hlen) != 0) {
        fail(r, "tls: answer is neither a ServerHello nor our hello echoed");
        return "bad-response";
    }
    uint8_t *rest = malloc(len);
    size_t got = 0;
    if (!rest) {
        fail(r, "malloc");
        return "bad-response";
    }
    enum tn_status st = tn_read_full(fd, rest, len - hlen, deadline, &got);
    bool same = memcmp(rest, hello + hlen, got) == 0;
    free(rest);
    if (st != TN_OK || !same) {
        fail(r, "tls: %zu of %zu hello bytes echoed, then %s", hlen + got, len,
             same ? io_what(st, errno) : "different bytes");
        return "bad-response";
    }
    fail(r, "tls: the hello came back unchanged (fronted to the mask server)");
    return "echoed";
}

/* The FakeTLS handshake: sends the ClientHello, reads and checks the answer. On success lk is
 * in TLS mode and 0 is returned; else r->tls names the outcome and -1 is returned. */
static int tls_handshake(struct conn_ctx *cx, struct link *lk, int64_t deadline) {
    const struct opts *o = cx->o;
    struct result *r = &cx->r;
    uint8_t one[TLSC_HELLO_MAX], cut[TLSC_HELLO_MAX + 5 * 64];
    const uint8_t *hello = one;
    size_t len;
    r->tls = "bad-response";
    if (o->replay) {
        hello = o->replay;
        len = o->replay_len;
    } else {
        uint8_t key[SECRET_KEY_LEN];
        memcpy(key, o->secret.key, sizeof(key));
        if (o->tls_wrong_key)
            for (size_t i = 0; i < sizeof(key); i++)
                key[i] ^= 0x5a;
        uint32_t now = (uint32_t)((int64_t)time(NULL) + o->tls_time_offset);
        len = tlsc_build_hello(one, sizeof(one), key, o->tls_sni ? o->tls_sni : o->secret.domain,
                               now);
        if (len == 0) {
            fail(r, "tls: cannot build the hello");
            return -1;
        }
        if (o->tls_records > 1) {
            len = tlsc_cut_hello(one, len, o->tls_records, cut, sizeof(cut));
            if (len == 0) {
                fail(r, "tls: cannot cut the hello into %d records", o->tls_records);
                return -1;
            }
            hello = cut;
        }
    }
    if (len < TLSC_RANDOM_OFF + 32) {
        fail(r, "tls: hello of %zu bytes is too short", len);
        return -1;
    }
    if (o->save_hello && cx->index == 0) {
        FILE *f = fopen(o->save_hello, "wb");
        if (!f || fwrite(hello, 1, len, f) != len || fclose(f) != 0) {
            fail(r, "tls: cannot write %s", o->save_hello);
            return -1;
        }
    }
    uint8_t client_random[32];
    memcpy(client_random, hello + TLSC_RANDOM_OFF, 32);
    r->tls_hello_bytes = len;
    /* In split TCP segments, each pushed out on its own (TCP_NODELAY) after a short pause. */
    int parts = o->tls_split > 1 ? o->tls_split : 1;
    for (int i = 0, off = 0; i < parts; i++) {
        size_t n = len / (size_t)parts + ((size_t)i < len % (size_t)parts ? 1 : 0);
        if (i > 0)
            usleep(30000);
        enum tn_status st = tn_write_all(lk->fd, hello + off, n, deadline);
        if (st != TN_OK) {
            fail(r, "tls: hello write %s", io_what(st, errno));
            r->tls = st == TN_TIMEOUT ? "timeout" : "reset";
            return -1;
        }
        off += (int)n;
    }
    /* The answer: 16 03 03 LLLL <ServerHello> 14 03 03 00 01 01 17 03 03 LLLL <data>. A real
     * ServerHello is ~130 bytes and the fake data at most one record. */
    enum { SH_MAX = 2048, APP_MAX = 16640 };
    uint8_t resp[5 + SH_MAX + 11 + APP_MAX];
    size_t have = 0, got = 0, total = 5;
    enum tn_status st = tn_read_full(lk->fd, resp, 5, deadline, &got);
    have = got;
    if (st == TN_OK && memcmp(resp, "\x16\x03\x03", 3) != 0) {
        r->tls = tls_classify_other(lk->fd, hello, len, resp, 5, deadline, r);
        return -1;
    }
    size_t sh = 5 + ((size_t)resp[3] << 8 | resp[4]);
    if (st == TN_OK && sh > 5 + SH_MAX) {
        fail(r, "tls: ServerHello record of %zu bytes", sh - 5);
        return -1;
    }
    if (st == TN_OK) {
        total = sh + 11;
        st = tn_read_full(lk->fd, resp + have, total - have, deadline, &got);
        have += got;
    }
    if (st == TN_OK) {
        size_t app = (size_t)resp[sh + 9] << 8 | resp[sh + 10];
        if (app > APP_MAX) {
            fail(r, "tls: ApplicationData record of %zu bytes", app);
            return -1;
        }
        total = sh + 11 + app;
        st = tn_read_full(lk->fd, resp + have, total - have, deadline, &got);
        have += got;
    }
    if (st != TN_OK) {
        if (have == 0)
            r->tls = st == TN_EOF ? "eof" : st == TN_TIMEOUT ? "timeout" : "reset";
        fail(r, "tls: %s after %zu of %zu answer bytes", io_what(st, errno), have, total);
        return -1;
    }
    char why[120];
    if (tlsc_check_server_hello(resp, total, o->secret.key, client_random, why, sizeof(why))) {
        r->tls = strstr(why, "digest") ? "hash-mismatch" : "bad-response";
        fail(r, "tls: %s", why);
        return -1;
    }
    r->tls = "server-hello";
    lk->tls = true;
    lk->ccs_pending = true;
    return 0;
}

static void session(struct conn_ctx *cx) {
    const struct opts *o = cx->o;
    struct result *r = &cx->r;
    int64_t t0 = tn_now_ms();
    int64_t deadline = t0 + (int64_t)o->timeout_s * 1000;
    uint32_t seed = o->seed + (uint32_t)cx->index;
    struct crypto_ctr *enc = crypto_ctr_new(), *dec = crypto_ctr_new();
    struct link lk = {.fd = -1};
    r->tls = "off";
    if (!enc || !dec) {
        fail(r, "crypto_ctr_new");
        goto out;
    }
    lk.fd = connect_to(o, deadline, r);
    if (lk.fd < 0)
        goto out;
    if (o->events)
        event("{\"event\":\"connected\",\"conn\":%d,\"ms\":%" PRId64 "}", cx->index,
              tn_now_ms() - t_start);
    if (o->tls && tls_handshake(cx, &lk, deadline) != 0)
        goto out;

    uint8_t plain[OBFS2_HDR_LEN], out[OBFS2_HDR_LEN + TP_REQ_LEN];
    struct obfs2_keys k;
    if (obfs2_build(plain, o->tag, o->dc, NULL) != 0) {
        fail(r, "obfs2_build failed");
        goto out;
    }
    obfs2_derive(plain, o->direct ? NULL : o->secret.key, &k);
    if (crypto_ctr_init(enc, k.fwd.key, k.fwd.iv) != 0 ||
        crypto_ctr_init(dec, k.rev.key, k.rev.iv) != 0) {
        fail(r, "crypto_ctr_init failed");
        goto out;
    }
    obfs2_seal(plain, enc, out);
    uint8_t *req = out + OBFS2_HDR_LEN;
    memcpy(req, TP_MAGIC, 8);
    tp_put32(req + 8, TP_VERSION);
    tp_put64(req + 12, o->up);
    tp_put64(req + 20, o->down);
    tp_put32(req + 28, seed);
    tp_put32(req + 32, (o->rst_after_trailer ? TP_FLAG_RST : 0) | (o->hold_s ? TP_FLAG_GO : 0));
    crypto_ctr_apply(enc, req, req, TP_REQ_LEN);
    enum tn_status st = link_write_all(&lk, out, sizeof(out), deadline);
    if (st != TN_OK) {
        fail(r, "header: write %s", io_what(st, errno));
        goto out;
    }

    uint8_t hello[TP_HELLO_LEN];
    st = link_read_full(&lk, hello, sizeof(hello), deadline, &r->rx_before_hello);
    if (st != TN_OK) {
        fail(r, "hello: %s after %zu bytes, %" PRId64 " ms", link_what(&lk, st, errno),
             r->rx_before_hello, tn_now_ms() - t0);
        goto out;
    }
    crypto_ctr_apply(dec, hello, hello, sizeof(hello));
    if (memcmp(hello, TP_HELLO_MAGIC, 8) != 0) {
        fail(r, "hello: bad magic (wrong keys?)");
        goto out;
    }
    r->got_hello = true;
    r->hello_ms = tn_now_ms() - t0;
    r->id = tp_get32(hello + 8);
    r->tag = tp_get32(hello + 12);
    r->dc = (int16_t)tp_get16(hello + 16);
    if (o->events)
        event("{\"event\":\"hello\",\"conn\":%d,\"id\":%u,\"tag\":\"%s\",\"dc\":%d,\"ms\":%" PRId64
              "}",
              cx->index, r->id, tn_tag_short(r->tag), (int)r->dc, tn_now_ms() - t_start);
    if (o->expect_id >= 0 && r->id != (uint32_t)o->expect_id) {
        fail(r, "hello: listener id %u, expected %" PRId64, r->id, o->expect_id);
        goto out;
    }
    if (r->tag != o->tag) {
        fail(r, "hello: DC saw tag %08x, sent %08x", r->tag, o->tag);
        goto out;
    }
    if (o->expect_dc_set && r->dc != o->expect_dc) {
        fail(r, "hello: DC saw dc %d, expected %d", (int)r->dc, (int)o->expect_dc);
        goto out;
    }
    if (o->hold_s > 0) {
        if (hold(lk.fd, (int64_t)o->hold_s * 1000, deadline, r) != 0)
            goto out;
        uint8_t go = 'G';
        crypto_ctr_apply(enc, &go, &go, 1);
        st = link_write_all(&lk, &go, 1, deadline);
        if (st != TN_OK) {
            fail(r, "go: write %s", io_what(st, errno));
            goto out;
        }
    }

    int rc = transfer(o, &lk, enc, dec, seed, deadline, r);
    if (rc == 1) {
        r->ok = true; /* closed with RST half-way, as asked */
        goto out;
    }
    if (rc != 0)
        goto out;

    uint8_t done[TP_DONE_LEN];
    size_t got = 0;
    st = link_read_full(&lk, done, sizeof(done), deadline, &got);
    if (st != TN_OK) {
        if (o->rst_after_trailer && got == 0 && st != TN_TIMEOUT && !lk.in.bad) {
            r->ok = true; /* the DC's RST may overtake its trailer inside the proxy */
            goto out;
        }
        fail(r, "trailer: %s after %zu bytes", link_what(&lk, st, errno), got);
        goto out;
    }
    crypto_ctr_apply(dec, done, done, sizeof(done));
    uint64_t up_ok = tp_get64(done + 8);
    uint32_t mismatch = tp_get32(done + 16);
    if (memcmp(done, TP_DONE_MAGIC, 8) != 0) {
        fail(r, "trailer: bad magic");
        goto out;
    }
    if (up_ok != o->up || mismatch != TP_NO_MISMATCH) {
        fail(r, "trailer: DC verified %" PRIu64 "/%" PRIu64 " up bytes, first mismatch %d", up_ok,
             o->up, mismatch == TP_NO_MISMATCH ? -1 : (int)mismatch);
        goto out;
    }
    size_t extra = 0;
    if (o->rst_after_trailer) {
        st = link_drain_to_eof(&lk, deadline, &extra);
        if (st == TN_TIMEOUT) {
            fail(r, "close: proxy kept the connection open after the DC reset");
            goto out;
        }
        if (lk.in.bad) {
            fail(r, "close: %s", lk.in.why);
            goto out;
        }
    } else {
        shutdown(lk.fd, SHUT_WR);
        st = link_drain_to_eof(&lk, deadline, &extra);
        if (st != TN_EOF) {
            fail(r, "close: %s instead of a clean EOF after the trailer",
                 link_what(&lk, st, errno));
            goto out;
        }
    }
    if (extra > 0) {
        fail(r, "close: %zu unexpected bytes after the trailer", extra);
        goto out;
    }
    r->ok = true;
out:
    r->records_in = lk.in.records;
    r->max_record = lk.in.max_payload;
    if (lk.fd >= 0)
        close(lk.fd);
    crypto_ctr_free(enc);
    crypto_ctr_free(dec);
}

static void *session_thread(void *arg) {
    session(arg);
    return NULL;
}

static void usage(void) {
    fprintf(stderr,
            "usage: test_client --proxy HOST:PORT --secret SECRET --tag ef|ee|dd --dc N "
            "--up BYTES --down BYTES [--seed S] [--conns N] [--expect-id ID] [--expect-dc N] "
            "[--close-halfway] [--slow-read BPS] [--rcvbuf BYTES] [--timeout S] [--rst-after-trailer] "
            "[--hold S] [--events] [--direct] [--tls-split N] [--tls-records N] "
            "[--tls-time-offset S] [--tls-wrong-key] [--tls-sni NAME] [--tls-save-hello FILE] "
            "[--tls-replay-hello FILE]\n");
    exit(2);
}

static uint64_t parse_u64(const char *s, const char *what) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "test_client: bad %s '%s'\n", what, s);
        exit(2);
    }
    return v;
}

static long parse_long(const char *s, const char *what, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "test_client: bad %s '%s'\n", what, s);
        exit(2);
    }
    return v;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    struct opts o = {.conns = 1, .expect_id = -1, .timeout_s = 30, .tag = 0};
    const char *proxy = NULL, *secret = NULL;
    bool have_dc = false, have_up = false, have_down = false, have_seed = false;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--close-halfway") == 0) {
            o.close_halfway = true;
        } else if (strcmp(a, "--rst-after-trailer") == 0) {
            o.rst_after_trailer = true;
        } else if (strcmp(a, "--events") == 0) {
            o.events = true;
        } else if (strcmp(a, "--direct") == 0) {
            o.direct = true;
        } else if (strcmp(a, "--tls-wrong-key") == 0) {
            o.tls_wrong_key = true;
        } else if (!v) {
            usage();
        } else {
            i++;
            if (strcmp(a, "--proxy") == 0)
                proxy = v;
            else if (strcmp(a, "--secret") == 0)
                secret = v;
            else if (strcmp(a, "--tag") == 0) {
                if (strcmp(v, "ef") == 0)
                    o.tag = OBFS2_TAG_ABRIDGED;
                else if (strcmp(v, "ee") == 0)
                    o.tag = OBFS2_TAG_INTERMEDIATE;
                else if (strcmp(v, "dd") == 0)
                    o.tag = OBFS2_TAG_PADDED;
                else
                    usage();
            } else if (strcmp(a, "--dc") == 0) {
                o.dc = (int16_t)parse_long(v, "dc", -32768, 32767);
                have_dc = true;
            } else if (strcmp(a, "--up") == 0) {
                o.up = parse_u64(v, "up");
                have_up = true;
            } else if (strcmp(a, "--down") == 0) {
                o.down = parse_u64(v, "down");
                have_down = true;
            } else if (strcmp(a, "--seed") == 0) {
                o.seed = (uint32_t)parse_u64(v, "seed");
                have_seed = true;
            } else if (strcmp(a, "--conns") == 0)
                o.conns = (int)parse_long(v, "conns", 1, MAX_CONNS);
            else if (strcmp(a, "--expect-id") == 0)
                o.expect_id = (int64_t)parse_u64(v, "expect-id");
            else if (strcmp(a, "--expect-dc") == 0) {
                o.expect_dc = (int16_t)parse_long(v, "expect-dc", -32768, 32767);
                o.expect_dc_set = true;
            } else if (strcmp(a, "--slow-read") == 0)
                o.slow_read = parse_u64(v, "slow-read");
            else if (strcmp(a, "--rcvbuf") == 0)
                o.rcvbuf = (int)parse_long(v, "rcvbuf", 1024, 1 << 26);
            else if (strcmp(a, "--timeout") == 0)
                o.timeout_s = (int)parse_long(v, "timeout", 1, 3600);
            else if (strcmp(a, "--hold") == 0)
                o.hold_s = (int)parse_long(v, "hold", 0, 3600);
            else if (strcmp(a, "--tls-split") == 0)
                o.tls_split = (int)parse_long(v, "tls-split", 1, 1000);
            else if (strcmp(a, "--tls-records") == 0)
                o.tls_records = (int)parse_long(v, "tls-records", 1, 64);
            else if (strcmp(a, "--tls-time-offset") == 0)
                o.tls_time_offset = parse_long(v, "tls-time-offset", -100000000, 100000000);
            else if (strcmp(a, "--tls-sni") == 0)
                o.tls_sni = v;
            else if (strcmp(a, "--tls-save-hello") == 0)
                o.save_hello = v;
            else if (strcmp(a, "--tls-replay-hello") == 0)
                o.replay_hello = v;
            else
                usage();
        }
    }
    if (o.direct && !secret)
        secret = "00000000000000000000000000000000";
    if (!proxy || !secret || !o.tag || !have_dc || !have_up || !have_down)
        usage();
    char err[200];
    if (tn_parse_addr(proxy, 1, &o.addr, &o.addrlen, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "test_client: %s\n", err);
        return 2;
    }
    if (secret_parse(NULL, secret, &o.secret, err, sizeof(err)) != 0) {
        fprintf(stderr, "test_client: bad secret: %s\n", err);
        return 2;
    }
    if (!have_seed && crypto_random(&o.seed, sizeof(o.seed)) != 0)
        return 2;
    o.tls = o.secret.kind == SECRET_EE && !o.direct;
    if (!o.tls && (o.tls_split || o.tls_records || o.tls_time_offset || o.tls_wrong_key ||
                   o.tls_sni || o.save_hello || o.replay_hello)) {
        fprintf(stderr, "test_client: --tls-* options need an ee secret\n");
        return 2;
    }
    if (o.replay_hello) {
        FILE *f = fopen(o.replay_hello, "rb");
        o.replay = malloc(TLSC_HELLO_MAX * 4);
        if (!f || !o.replay) {
            fprintf(stderr, "test_client: cannot read %s\n", o.replay_hello);
            return 2;
        }
        o.replay_len = fread(o.replay, 1, TLSC_HELLO_MAX * 4, f);
        fclose(f);
    }

    struct conn_ctx *cx = calloc((size_t)o.conns, sizeof(*cx));
    pthread_t *th = calloc((size_t)o.conns, sizeof(*th));
    if (!cx || !th)
        return 2;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    t_start = tn_now_ms();
    for (int i = 0; i < o.conns; i++) {
        cx[i].o = &o;
        cx[i].index = i;
        if (pthread_create(&th[i], &attr, session_thread, &cx[i]) != 0)
            fail(&cx[i].r, "pthread_create failed");
        else
            cx[i].started = true;
    }
    int failed = 0, hellos = 0;
    for (int i = 0; i < o.conns; i++) {
        if (cx[i].started)
            pthread_join(th[i], NULL);
        if (!cx[i].r.ok)
            failed++;
        if (cx[i].r.got_hello)
            hellos++;
    }
    double secs = (double)(tn_now_ms() - t_start) / 1000.0;

    uint64_t up_total = 0, down_total = 0;
    size_t rx_before_hello = 0;
    uint64_t records_in = 0;
    uint32_t max_record = 0;
    const char *tls = cx[0].r.tls ? cx[0].r.tls : "off";
    for (int i = 0; i < o.conns; i++) {
        up_total += cx[i].r.up_sent;
        down_total += cx[i].r.down_got;
        rx_before_hello += cx[i].r.rx_before_hello;
        records_in += cx[i].r.records_in;
        if (cx[i].r.max_record > max_record)
            max_record = cx[i].r.max_record;
        if (!cx[i].r.tls || strcmp(cx[i].r.tls, tls) != 0)
            tls = "mixed";
    }
    pthread_mutex_lock(&out_lock);
    printf("{\"ok\":%s,\"conns\":%d,\"failed\":%d,\"hellos\":%d,\"seed\":%u,"
           "\"up\":%" PRIu64 ",\"down\":%" PRIu64 ",\"up_total\":%" PRIu64
           ",\"down_total\":%" PRIu64 ",\"rx_before_hello\":%zu,\"seconds\":%.3f,",
           failed == 0 ? "true" : "false", o.conns, failed, hellos, o.seed, o.up, o.down, up_total,
           down_total, rx_before_hello, secs);
    printf("\"tls\":\"%s\",\"hello_bytes\":%zu,\"records_in\":%" PRIu64 ",\"max_record\":%u,", tls,
           cx[0].r.tls_hello_bytes, records_in, max_record);
    /* Distinct hello fields seen (listener ids, dc fields), for routing checks. */
    printf("\"ids\":[");
    int n = 0;
    for (int i = 0; i < o.conns; i++) {
        if (!cx[i].r.got_hello)
            continue;
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen |= cx[j].r.got_hello && cx[j].r.id == cx[i].r.id;
        if (!seen)
            printf("%s%u", n++ ? "," : "", cx[i].r.id);
    }
    printf("],\"dcs\":[");
    n = 0;
    for (int i = 0; i < o.conns; i++) {
        if (!cx[i].r.got_hello)
            continue;
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen |= cx[j].r.got_hello && cx[j].r.dc == cx[i].r.dc;
        if (!seen)
            printf("%s%d", n++ ? "," : "", (int)cx[i].r.dc);
    }
    printf("],\"errors\":[");
    n = 0;
    for (int i = 0; i < o.conns && n < MAX_REPORTED_ERRORS; i++) {
        if (cx[i].r.ok)
            continue;
        char line[300];
        snprintf(line, sizeof(line), "conn %d: %s", i, cx[i].r.err);
        if (n++)
            putchar(',');
        json_str(line);
    }
    printf("]}\n");
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    pthread_attr_destroy(&attr);
    free(cx);
    free(th);
    free(o.replay);
    return failed == 0 ? 0 : 1;
}
