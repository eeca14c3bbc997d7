/* fake_dc.c: a fake Telegram DC on loopback: obfuscated2 responder (test protocol, MTProto). */
#include <linux/sockios.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/ioctl.h>

#include "crypto/crypto.h"
#include "pattern.h"
#include "respq.h"
#include "proto/obfs2.h"
#include "toolnet.h"

/*
 * Usage: fake_dc --listen ADDR:PORT[,ID[,MODE]] [--listen ...] [--quiet] [--timeout SECONDS]
 *
 * MODE: normal (default) | reset (accept, then RST) | stall (accept, never read or write)
 *       | close (read the 64-byte header, then close cleanly: FIN, drain until the peer's EOF)
 *       | echo (the mask web server of fronting tests: every byte received is sent back
 *         unchanged until the peer's EOF, then FIN)
 *       | idleclose:MS (a DC dropping idle pre-connected sockets: a connection that has sent
 *         nothing within MS ms is closed with a FIN; one that sends behaves as normal).
 *
 * Output (stdout, one event per line, flushed): READY once every listener is bound, then
 *   ACCEPT listener=ID mode=MODE
 *   HEADER listener=ID tag=ef|ee|dd dc=N
 *   BAD_HEADER listener=ID tag=0xXXXXXXXX
 *   TEST listener=ID up=N down=N seed=S flags=F
 *   DONE listener=ID up_ok=N mismatch=OFFSET|none
 *   REQ_PQ_MULTI listener=ID tag=ef|ee|dd dc=N nonce=HEX
 *   MTPROTO_BAD listener=ID why=TEXT
 *   CLOSED listener=ID reason=TEXT
 *   ECHO listener=ID bytes=N end=eof|reset|timeout|error fnv=HEX16 head=HEX
 *     (at close; fnv = FNV-1a 64 of all bytes received, head = hex of the first 256)
 *   IDLECLOSE listener=ID ms=MS
 * --quiet keeps only READY and REQ_PQ_MULTI. --timeout (default 120) bounds every wait of
 * a connection for its peer. --chunk BYTES: the test protocol's download leaves in sends of
 * at most BYTES (TCP_NODELAY is on), so the proxy receives it in small segments as from a DC
 * across a real network (loopback otherwise coalesces it into 64 KiB segments).
 */

#define MAX_LISTENERS 64
#define IO_CHUNK 65536
#define MTP_MAX_PACKET (1 << 20)

enum dc_mode { MODE_NORMAL, MODE_RESET, MODE_STALL, MODE_CLOSE, MODE_ECHO, MODE_IDLECLOSE };
static const char *const mode_names[] = {"normal", "reset", "stall", "close", "echo", "idleclose"};
#define MODE_COUNT 6
#define ECHO_HEAD 256

struct listener {
    int fd;
    uint32_t id;
    enum dc_mode mode;
    int idle_ms; /* idleclose */
};

struct dc_conn {
    int fd;
    const struct listener *l;
    struct crypto_ctr *dec; /* proxy -> DC */
    struct crypto_ctr *enc; /* DC -> proxy */
    uint32_t tag;
    int16_t dc;
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static bool quiet;
static int conn_timeout_s = 120;
static size_t send_chunk; /* --chunk: most bytes per send() of the download, 0 = all */

/* Prints one event line and flushes; important lines ignore --quiet. */
static void emit(bool important, const char *fmt, ...) {
    if (quiet && !important)
        return;
    va_list ap;
    va_start(ap, fmt);
    tn_print_line(&out_lock, fmt, ap);
    va_end(ap);
}


static int64_t conn_deadline(void) {
    return tn_now_ms() + (int64_t)conn_timeout_s * 1000;
}

/* Reads n bytes and decrypts them. Returns TN_* . */
static enum tn_status read_dec(struct dc_conn *c, uint8_t *buf, size_t n) {
    size_t got = 0;
    enum tn_status st = tn_read_full(c->fd, buf, n, conn_deadline(), &got);
    if (st == TN_OK)
        crypto_ctr_apply(c->dec, buf, buf, n);
    return st;
}

/* Encrypts n bytes in place and writes them. */
static enum tn_status write_enc(struct dc_conn *c, uint8_t *buf, size_t n) {
    crypto_ctr_apply(c->enc, buf, buf, n);
    return tn_write_all(c->fd, buf, n, conn_deadline());
}

static void closed(struct dc_conn *c, const char *reason, enum tn_status st) {
    if (st == TN_ERR)
        emit(false, "CLOSED listener=%u reason=%s:%s", c->l->id, reason, strerror(errno));
    else if (st != TN_OK)
        emit(false, "CLOSED listener=%u reason=%s:%s", c->l->id, reason, tn_status_name(st));
    else
        emit(false, "CLOSED listener=%u reason=%s", c->l->id, reason);
}

/* Waits until the kernel has sent (and had acked) everything queued, at most ms. */
static void wait_outq_empty(int fd, int ms) {
    int64_t until = tn_now_ms() + ms;
    while (tn_now_ms() < until) {
        int q = 0;
        if (ioctl(fd, SIOCOUTQ, &q) < 0 || q == 0)
            return;
        usleep(2000);
    }
}

/* The test protocol after "MTPXTEST" (PROTOCOL: see pattern.h). */
static void run_test(struct dc_conn *c) {
    uint8_t req[TP_REQ_LEN - 8];
    enum tn_status st = read_dec(c, req, sizeof(req));
    if (st != TN_OK) {
        closed(c, "request", st);
        return;
    }
    uint32_t version = tp_get32(req);
    uint64_t up = tp_get64(req + 4);
    uint64_t down = tp_get64(req + 12);
    uint32_t seed = tp_get32(req + 20);
    uint32_t flags = tp_get32(req + 24);
    if (version != TP_VERSION) {
        closed(c, "bad_version", TN_OK);
        return;
    }
    emit(false, "TEST listener=%u up=%llu down=%llu seed=%u flags=%u", c->l->id,
         (unsigned long long)up, (unsigned long long)down, seed, flags);

    uint8_t hello[TP_HELLO_LEN];
    memcpy(hello, TP_HELLO_MAGIC, 8);
    tp_put32(hello + 8, c->l->id);
    tp_put32(hello + 12, c->tag);
    tp_put16(hello + 16, (uint16_t)c->dc);
    tp_put16(hello + 18, 0);
    st = write_enc(c, hello, sizeof(hello));
    if (st != TN_OK) {
        closed(c, "hello", st);
        return;
    }

    if (flags & TP_FLAG_GO) {
        uint8_t go;
        st = read_dec(c, &go, 1);
        if (st != TN_OK || go != 'G') {
            closed(c, st != TN_OK ? "go" : "bad_go", st);
            return;
        }
    }
    struct pattern pup, pdown;
    pattern_init(&pup, seed, TP_DIR_UP);
    pattern_init(&pdown, seed, TP_DIR_DOWN);
    uint8_t *sbuf = malloc(IO_CHUNK), *rbuf = malloc(IO_CHUNK);
    if (!sbuf || !rbuf) {
        closed(c, "malloc", TN_OK);
        goto out;
    }
    size_t slen = 0, soff = 0;
    uint64_t up_left = up, down_left = down, up_ok = 0;
    uint32_t mismatch = TP_NO_MISMATCH;
    int64_t deadline = conn_deadline();

    while (up_left > 0 || down_left > 0 || soff < slen) {
        if (soff == slen && down_left > 0) {
            slen = down_left < IO_CHUNK ? (size_t)down_left : IO_CHUNK;
            pattern_fill(&pdown, sbuf, slen);
            crypto_ctr_apply(c->enc, sbuf, sbuf, slen);
            down_left -= slen;
            soff = 0;
        }
        struct pollfd pfd = {.fd = c->fd, .events = 0};
        if (up_left > 0)
            pfd.events |= POLLIN;
        if (soff < slen)
            pfd.events |= POLLOUT;
        int r = poll(&pfd, 1, tn_left_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            closed(c, "poll", TN_ERR);
            goto out;
        }
        if (r == 0) {
            closed(c, "transfer", TN_TIMEOUT);
            goto out;
        }
        deadline = conn_deadline(); /* the timeout bounds inactivity */
        if (pfd.revents & POLLERR) {
            int e = 0;
            socklen_t el = sizeof(e);
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &el);
            errno = e;
            closed(c, "socket", TN_ERR);
            goto out;
        }
        if ((pfd.revents & (POLLIN | POLLHUP)) && up_left > 0) {
            size_t want = up_left < IO_CHUNK ? (size_t)up_left : IO_CHUNK;
            ssize_t n = recv(c->fd, rbuf, want, 0);
            if (n == 0) {
                emit(false, "EARLY_EOF listener=%u up_left=%llu down_left=%llu", c->l->id,
                     (unsigned long long)up_left, (unsigned long long)down_left);
                closed(c, "early_eof", TN_OK);
                goto out;
            }
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                closed(c, "recv", TN_ERR);
                goto out;
            }
            if (n > 0) {
                crypto_ctr_apply(c->dec, rbuf, rbuf, (size_t)n);
                long bad = pattern_check(&pup, rbuf, (size_t)n);
                if (mismatch == TP_NO_MISMATCH) {
                    if (bad >= 0) {
                        uint64_t off = up - up_left + (uint64_t)bad;
                        mismatch = off >= TP_NO_MISMATCH ? TP_NO_MISMATCH - 1 : (uint32_t)off;
                        up_ok += (uint64_t)bad;
                    } else {
                        up_ok += (uint64_t)n;
                    }
                }
                up_left -= (uint64_t)n;
            }
        }
        if ((pfd.revents & (POLLOUT | POLLHUP)) && soff < slen) {
            size_t k = slen - soff;
            if (send_chunk && k > send_chunk)
                k = send_chunk;
            ssize_t w = send(c->fd, sbuf + soff, k, MSG_NOSIGNAL);
            if (w > 0) {
                soff += (size_t)w;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                closed(c, "send", TN_ERR);
                goto out;
            }
        }
    }

    if (mismatch != TP_NO_MISMATCH)
        emit(false, "DONE listener=%u up_ok=%llu mismatch=%u", c->l->id, (unsigned long long)up_ok,
             mismatch);
    else
        emit(false, "DONE listener=%u up_ok=%llu mismatch=none", c->l->id,
             (unsigned long long)up_ok);

    uint8_t done[TP_DONE_LEN];
    memcpy(done, TP_DONE_MAGIC, 8); /* includes the NUL */
    tp_put64(done + 8, up_ok);
    tp_put32(done + 16, mismatch);
    st = write_enc(c, done, sizeof(done));
    if (st != TN_OK) {
        closed(c, "trailer", st);
        goto out;
    }
    if (flags & TP_FLAG_RST) {
        wait_outq_empty(c->fd, 5000);
        closed(c, "rst_after_trailer", TN_OK);
        tn_close_rst(c->fd);
        c->fd = -1;
        goto out;
    }
    shutdown(c->fd, SHUT_WR);
    size_t extra = 0;
    st = tn_drain_to_eof(c->fd, conn_deadline(), &extra);
    if (extra > 0)
        emit(false, "EXTRA listener=%u bytes=%zu", c->l->id, extra);
    closed(c, "done", st == TN_EOF ? TN_OK : st);
out:
    free(sbuf);
    free(rbuf);
}

/* Serialises one unencrypted MTProto message into the framing of c->tag; returns length. */
static size_t mtp_frame(const struct dc_conn *c, const uint8_t *msg, size_t len, uint8_t *out) {
    size_t off = 0;
    if (c->tag == OBFS2_TAG_ABRIDGED) {
        if (len / 4 < 0x7f) {
            out[off++] = (uint8_t)(len / 4);
        } else {
            out[off++] = 0x7f;
            out[off++] = (uint8_t)(len / 4);
            out[off++] = (uint8_t)(len / 4 >> 8);
            out[off++] = (uint8_t)(len / 4 >> 16);
        }
        memcpy(out + off, msg, len);
        return off + len;
    }
    size_t pad = 0;
    if (c->tag == OBFS2_TAG_PADDED) {
        uint8_t r = 0;
        crypto_random(&r, 1);
        pad = r % 4; /* 0..3 like the proxies; clients strip len % 4 */
    }
    tp_put32(out, (uint32_t)(len + pad));
    memcpy(out + 4, msg, len);
    if (pad)
        crypto_random(out + 4 + len, pad);
    return 4 + len + pad;
}

/* MTProto mode: the first 8 decrypted bytes are already in first[]. Reads one transport
 * packet, expects an unencrypted req_pq_multi, answers resPQ in the same framing. */
static void mtproto_answer(struct dc_conn *c, const uint8_t first[8], uint8_t *pkt) {
    size_t have = 8, hdr, len;
    enum tn_status st;
    memcpy(pkt, first, 8);

    /*
     * abridged:      b (len/4, b & 0x7f < 0x7f) | or 7f LL LL LL (len/4, 3 bytes LE) | payload
     * intermediate:  u32 len (bit 31 = quick ack) | payload
     * padded:        u32 len (incl. 0..15 random tail bytes) | payload | padding
     */
    if (c->tag == OBFS2_TAG_ABRIDGED) {
        if ((pkt[0] & 0x7f) == 0x7f) {
            hdr = 4;
            len = ((size_t)pkt[1] | (size_t)pkt[2] << 8 | (size_t)pkt[3] << 16) * 4;
        } else {
            hdr = 1;
            len = (size_t)(pkt[0] & 0x7f) * 4;
        }
    } else {
        hdr = 4;
        len = tp_get32(pkt) & 0x7fffffffu;
    }
    if (len < 20 + 4 || len > MTP_MAX_PACKET) {
        emit(false, "MTPROTO_BAD listener=%u why=length_%zu", c->l->id, len);
        closed(c, "mtproto_bad", TN_OK);
        return;
    }
    if (hdr + len > have) {
        st = read_dec(c, pkt + have, hdr + len - have);
        if (st != TN_OK) {
            closed(c, "mtproto_read", st);
            return;
        }
    }
    const uint8_t *m = pkt + hdr;
    const char *why = respq_check(m, len, c->tag != OBFS2_TAG_PADDED);
    if (why) {
        emit(false, "MTPROTO_BAD listener=%u why=%s ctor=0x%08x", c->l->id, why,
             len >= 24 ? tp_get32(m + 20) : 0);
        closed(c, "mtproto_bad", TN_OK);
        return;
    }
    char nonce_hex[33];
    tn_hex(m + 24, 16, nonce_hex);
    emit(true, "REQ_PQ_MULTI listener=%u tag=%s dc=%d nonce=%s", c->l->id, tn_tag_short(c->tag),
         (int)c->dc, nonce_hex);
    uint8_t msg[RESPQ_LEN];
    respq_build(m, msg);
    uint8_t out[4 + sizeof(msg) + 4];
    size_t olen = mtp_frame(c, msg, sizeof(msg), out);
    st = write_enc(c, out, olen);
    if (st != TN_OK) {
        closed(c, "mtproto_write", st);
        return;
    }
    size_t extra = 0;
    st = tn_drain_to_eof(c->fd, conn_deadline(), &extra);
    closed(c, "mtproto_done", st == TN_EOF ? TN_OK : st);
}

static void run_mtproto(struct dc_conn *c, const uint8_t first[8]) {
    uint8_t *pkt = malloc(MTP_MAX_PACKET + 8);
    if (!pkt) {
        closed(c, "malloc", TN_OK);
        return;
    }
    mtproto_answer(c, first, pkt);
    free(pkt);
}

static void run_normal(struct dc_conn *c) {
    uint8_t hdr[OBFS2_HDR_LEN];
    size_t got = 0;
    enum tn_status st = tn_read_full(c->fd, hdr, sizeof(hdr), conn_deadline(), &got);
    if (st != TN_OK) {
        emit(false, "SHORT_HEADER listener=%u bytes=%zu", c->l->id, got);
        closed(c, "header", st);
        return;
    }
    struct obfs2_keys k;
    obfs2_derive(hdr, NULL, &k);
    c->dec = crypto_ctr_new();
    c->enc = crypto_ctr_new();
    if (!c->dec || !c->enc || crypto_ctr_init(c->dec, k.fwd.key, k.fwd.iv) != 0 ||
        crypto_ctr_init(c->enc, k.rev.key, k.rev.iv) != 0) {
        closed(c, "crypto_init", TN_OK);
        return;
    }
    uint8_t plain[OBFS2_HDR_LEN];
    crypto_ctr_apply(c->dec, hdr, plain, sizeof(plain));
    c->tag = tp_get32(plain + 56);
    c->dc = (int16_t)tp_get16(plain + 60);
    if (c->tag != OBFS2_TAG_ABRIDGED && c->tag != OBFS2_TAG_INTERMEDIATE &&
        c->tag != OBFS2_TAG_PADDED) {
        emit(false, "BAD_HEADER listener=%u tag=0x%08x", c->l->id, c->tag);
        closed(c, "bad_tag", TN_OK);
        return;
    }
    emit(false, "HEADER listener=%u tag=%s dc=%d", c->l->id, tn_tag_short(c->tag), (int)c->dc);
    if (c->l->mode == MODE_CLOSE) {
        /* A clean close: FIN now, then swallow what the peer still sends (no RST). */
        shutdown(c->fd, SHUT_WR);
        st = tn_drain_to_eof(c->fd, tn_now_ms() + 10000, NULL);
        closed(c, "mode_close", st == TN_EOF ? TN_OK : st);
        return;
    }
    uint8_t first[8];
    st = read_dec(c, first, sizeof(first));
    if (st != TN_OK) {
        closed(c, "first_bytes", st);
        return;
    }
    if (memcmp(first, TP_MAGIC, 8) == 0)
        run_test(c);
    else
        run_mtproto(c, first);
}

/* Echo mode: sends every byte back; logs what it got at the end. */
static void run_echo(struct dc_conn *c) {
    uint8_t buf[IO_CHUNK], head[ECHO_HEAD];
    uint64_t total = 0, fnv = 0xcbf29ce484222325ull;
    size_t head_len = 0;
    const char *end = "eof";
    for (;;) {
        int w = tn_wait(c->fd, POLLIN, conn_deadline());
        if (w <= 0) {
            end = w == 0 ? "timeout" : "error";
            break;
        }
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            end = errno == ECONNRESET ? "reset" : "error";
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            fnv = (fnv ^ buf[i]) * 0x100000001b3ull;
        size_t k = (size_t)n < ECHO_HEAD - head_len ? (size_t)n : ECHO_HEAD - head_len;
        memcpy(head + head_len, buf, k);
        head_len += k;
        total += (uint64_t)n;
        enum tn_status st = tn_write_all(c->fd, buf, (size_t)n, conn_deadline());
        if (st != TN_OK) {
            end = st == TN_TIMEOUT                        ? "timeout"
                  : errno == ECONNRESET || errno == EPIPE ? "reset"
                                                          : "error";
            break;
        }
    }
    if (strcmp(end, "eof") == 0) {
        shutdown(c->fd, SHUT_WR);
        wait_outq_empty(c->fd, 2000);
    }
    char hex[2 * ECHO_HEAD + 1];
    tn_hex(head, head_len, hex);
    emit(false, "ECHO listener=%u bytes=%llu end=%s fnv=%016llx head=%s", c->l->id,
         (unsigned long long)total, end, (unsigned long long)fnv, hex);
}

/* Idleclose mode: returns 1 if the peer sent something within the listener's idle_ms, else
 * logs IDLECLOSE and returns 0 (the caller closes: FIN). */
static int idle_wait(struct dc_conn *c) {
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int64_t until = tn_now_ms() + c->l->idle_ms;
    int r;
    do
        r = poll(&pfd, 1, tn_left_ms(until));
    while (r < 0 && errno == EINTR);
    if (r > 0)
        return 1;
    /* Last look, so a header that arrived as the timer ran out is still served. */
    char b;
    if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
        return 1;
    emit(false, "IDLECLOSE listener=%u ms=%d", c->l->id, c->l->idle_ms);
    return 0;
}

static void *conn_main(void *arg) {
    struct dc_conn *c = arg;
    tn_set_nonblock(c->fd);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (c->l->mode == MODE_STALL) {
        /* Never read or write; only notice when the peer goes away. */
        struct pollfd pfd = {.fd = c->fd, .events = POLLRDHUP};
        int r;
        do
            r = poll(&pfd, 1, conn_timeout_s * 1000);
        while (r < 0 && errno == EINTR);
        closed(c, r == 0 ? "stall_timeout" : "stall_peer_closed", TN_OK);
    } else if (c->l->mode == MODE_CLOSE || c->l->mode == MODE_NORMAL) {
        run_normal(c);
    } else if (c->l->mode == MODE_ECHO) {
        run_echo(c);
    } else if (c->l->mode == MODE_IDLECLOSE) {
        if (idle_wait(c))
            run_normal(c);
    }
    if (c->fd >= 0)
        close(c->fd);
    crypto_ctr_free(c->dec);
    crypto_ctr_free(c->enc);
    free(c);
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: fake_dc --listen "
                    "ADDR:PORT[,ID[,normal|reset|stall|close|echo|idleclose:MS]] "
                    "[--listen ...] [--quiet] [--timeout SECONDS] [--chunk BYTES]\n");
    exit(2);
}

static int parse_listen(const char *arg, struct listener *l) {
    struct sockaddr_storage ss;
    socklen_t sl;
    const char *rest;
    char err[160];
    if (tn_parse_addr(arg, 1, &ss, &sl, &rest, err, sizeof(err)) != 0) {
        fprintf(stderr, "fake_dc: %s\n", err);
        return -1;
    }
    l->id = 0;
    l->mode = MODE_NORMAL;
    if (*rest == ',') {
        char *end;
        unsigned long id = strtoul(rest + 1, &end, 10);
        if (end == rest + 1 || id > 0xffffffffu) {
            fprintf(stderr, "fake_dc: bad listener id in '%s'\n", arg);
            return -1;
        }
        l->id = (uint32_t)id;
        rest = end;
        if (*rest == ',') {
            int found = 0;
            for (int m = 0; m < MODE_COUNT; m++) {
                if (m != MODE_IDLECLOSE && strcmp(rest + 1, mode_names[m]) == 0) {
                    l->mode = (enum dc_mode)m;
                    found = 1;
                }
            }
            if (strncmp(rest + 1, "idleclose:", 10) == 0) {
                char *e;
                long ms = strtol(rest + 11, &e, 10);
                if (e != rest + 11 && !*e && ms > 0 && ms <= 3600000) {
                    l->mode = MODE_IDLECLOSE;
                    l->idle_ms = (int)ms;
                    found = 1;
                }
            }
            if (!found) {
                fprintf(stderr, "fake_dc: bad mode in '%s'\n", arg);
                return -1;
            }
            rest = "";
        }
    }
    if (*rest) {
        fprintf(stderr, "fake_dc: trailing text in '%s'\n", arg);
        return -1;
    }
    l->fd = socket(ss.ss_family, SOCK_STREAM, 0);
    int one = 1;
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(l->fd, (struct sockaddr *)&ss, sl) != 0 || listen(l->fd, 1024) != 0) {
        fprintf(stderr, "fake_dc: cannot listen on %s: %s\n", arg, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    struct listener ls[MAX_LISTENERS];
    int nl = 0;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            if (nl == MAX_LISTENERS || parse_listen(argv[++i], &ls[nl]) != 0)
                return 2;
            nl++;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = true;
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            conn_timeout_s = atoi(argv[++i]);
            if (conn_timeout_s <= 0)
                usage();
        } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            int k = atoi(argv[++i]);
            if (k <= 0)
                usage();
            send_chunk = (size_t)k;
        } else {
            usage();
        }
    }
    if (nl == 0)
        usage();
    emit(true, "READY");

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    struct pollfd pfds[MAX_LISTENERS];
    for (int i = 0; i < nl; i++)
        pfds[i] = (struct pollfd){.fd = ls[i].fd, .events = POLLIN};
    for (;;) {
        int r = poll(pfds, (nfds_t)nl, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            perror("fake_dc: poll");
            return 1;
        }
        for (int i = 0; i < nl; i++) {
            if (!(pfds[i].revents & POLLIN))
                continue;
            int fd = accept(ls[i].fd, NULL, NULL);
            if (fd < 0) {
                if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                    fprintf(stderr, "fake_dc: accept: %s\n", strerror(errno));
                if (errno == EMFILE || errno == ENFILE)
                    usleep(10000);
                continue;
            }
            emit(false, "ACCEPT listener=%u mode=%s", ls[i].id, mode_names[ls[i].mode]);
            if (ls[i].mode == MODE_RESET) {
                tn_close_rst(fd);
                emit(false, "CLOSED listener=%u reason=reset", ls[i].id);
                continue;
            }
            struct dc_conn *c = calloc(1, sizeof(*c));
            pthread_t th;
            if (!c) {
                close(fd);
                continue;
            }
            c->fd = fd;
            c->l = &ls[i];
            if (pthread_create(&th, &attr, conn_main, c) != 0) {
                fprintf(stderr, "fake_dc: pthread_create failed\n");
                close(fd);
                free(c);
            }
        }
    }
}
