/* fake_me.c: a fake Telegram middle proxy (ME) on loopback: nonce, CBC handshake, frames,
 * RPC_PROXY_REQ in, answers out, pings; switches to misbehave. */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>

#include "crypto/crypto.h"
#include "pattern.h"
#include "proto/rpc.h"
#include "respq.h"
#include "toolnet.h"

/*
 * Usage: fake_me --secret-file PATH --listen ADDR:PORT[,ID[,MODE]] [--listen ...]
 *                [--clt-ip IP] [--ping] [--timeout SECONDS]
 *
 * MODE: normal (default) | badcrc (first answer frame has a bad CRC) | badseq (first answer
 *   frame has a wrong seqno) | garbage (random bytes for the handshake answer) | reset (RST
 *   after the first answer) | stall (never answer the handshake) | drop (close the link
 *   cleanly after the first answer)
 * --clt-ip IP: the address the ME derives keys with for the proxy (as a real ME sees a proxy
 *   behind NAT), instead of the connection's peer address.
 * --ping: after the handshake, send RPC_PING and report the answer.
 *
 * What a packet (the client's MTProto packet inside RPC_PROXY_REQ) asks for:
 *   an unencrypted req_pq_multi      -> resPQ (as fake_dc), line REQ_PQ_MULTI
 *   "ECHOECHO" + bytes               -> the same packet back (+ RPC_SIMPLE_ACK first when the
 *                                       request has the quick-ack flag, confirm = len | 1<<31)
 *   "DOWNLOAD" u32 total u32 chunk u32 seed -> total bytes in answers of chunk bytes, byte i
 *                                       of the stream = (i * 7 + seed) & 0xff
 *   "CLOSEEXT"                       -> RPC_CLOSE_EXT for that client
 *
 * Output (stdout, one event per line): READY, then
 *   ACCEPT listener=ID
 *   HANDSHAKE_OK listener=ID
 *   HANDSHAKE_BAD listener=ID why=TEXT
 *   REQ listener=ID conn=HEX16 flags=0xX tag=HEX32|none remote=IP:PORT ours=IP:PORT len=N
 *     head=HEX (first 16 bytes of the packet)
 *   REQ_PQ_MULTI listener=ID nonce=HEX
 *   CLOSE_CONN listener=ID conn=HEX16
 *   PONG listener=ID id=N
 *   CLOSED listener=ID reason=TEXT
 */

#define MAX_LISTENERS 32
#define RBUF_MAX (RPC_FRAME_MAX + 65536)

enum me_mode { M_NORMAL, M_BADCRC, M_BADSEQ, M_GARBAGE, M_RESET, M_STALL, M_DROP };
static const char *const mode_names[] = {"normal", "badcrc", "badseq", "garbage",
                                         "reset",  "stall",  "drop"};
#define MODE_COUNT 7

struct listener {
    int fd;
    unsigned id;
    enum me_mode mode;
};

struct link {
    int fd;
    const struct listener *l;
    struct crypto_cbc *enc, *dec;
    int32_t seq_out, seq_in;
    uint8_t *raw; /* received, not yet decrypted (< 16 bytes) */
    size_t rawlen;
    uint8_t *buf; /* decrypted (or, before keys, plain) bytes not yet parsed */
    size_t len;
    int answers; /* frames answered so far */
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t secret[RPC_SECRET_MAX];
static size_t secret_len;
static int clt_ip_set, clt_ip_v6;
static uint8_t clt_ip[16];
static int do_ping;
static int timeout_s = 120;

static void emit(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tn_print_line(&out_lock, fmt, ap);
    va_end(ap);
}

static int64_t deadline(void) {
    return tn_now_ms() + (int64_t)timeout_s * 1000;
}

/* Reads at least want bytes into l->buf (decrypting whole blocks once keyed). */
static enum tn_status fill(struct link *l, size_t want) {
    while (l->len < want) {
        uint8_t tmp[65536];
        ssize_t r = recv(l->fd, tmp, sizeof tmp, 0);
        if (r <= 0) {
            enum tn_status st = tn_recv_wait(l->fd, r, deadline());
            if (st != TN_OK)
                return st;
            continue;
        }
        if (l->len + (size_t)r + 16 > RBUF_MAX)
            return TN_ERR;
        if (!l->dec) {
            memcpy(l->buf + l->len, tmp, (size_t)r);
            l->len += (size_t)r;
            continue;
        }
        memcpy(l->raw + l->rawlen, tmp, (size_t)r);
        l->rawlen += (size_t)r;
        size_t k = l->rawlen & ~(size_t)15;
        crypto_cbc_apply(l->dec, l->raw, l->buf + l->len, k);
        l->len += k;
        memmove(l->raw, l->raw + k, l->rawlen - k);
        l->rawlen -= k;
    }
    return TN_OK;
}

/* Reads one frame with seqno seq (skipping padding words); its payload is copied to out (at
 * most cap). Returns the payload length, or -1 (why set). */
static long read_frame(struct link *l, int32_t seq, uint8_t *out, size_t cap, const char **why) {
    for (;;) {
        size_t need = 4;
        for (;;) {
            if (fill(l, need) != TN_OK) {
                *why = "eof";
                return -1;
            }
            struct rpc_frame f;
            enum rpc_status st = rpc_frame_parse(l->buf, l->len, seq, &f, &need, why);
            if (st == RPC_BAD)
                return -1;
            if (st == RPC_NEED_MORE)
                continue;
            long n = (long)f.len;
            if (f.payload && f.len <= cap)
                memcpy(out, f.payload, f.len);
            memmove(l->buf, l->buf + f.total, l->len - f.total);
            l->len -= f.total;
            if (!f.payload)
                break; /* padding word: next frame */
            if ((size_t)n > cap) {
                *why = "frame too large";
                return -1;
            }
            return n;
        }
    }
}

/* Sends payload as one frame (encrypted and padded once keyed). */
static enum tn_status send_frame(struct link *l, const uint8_t *p, size_t n) {
    uint8_t *f = malloc(n + RPC_FRAME_OVERHEAD + 16);
    if (!f)
        return TN_ERR;
    memcpy(f + 8, p, n);
    size_t len = rpc_frame_build(f, l->seq_out++, f + 8, n);
    int first_data = l->enc && l->answers == 0 && l->seq_out > 0; /* not the handshake */
    if (first_data && l->l->mode == M_BADCRC)
        f[len - 1] ^= 0x55;
    if (first_data && l->l->mode == M_BADSEQ) {
        tp_put32(f + 4, 1000);
        tp_put32(f + len - 4, rpc_crc32(f, len - 4));
    }
    if (l->enc) {
        len = rpc_frame_pad16(f, len);
        crypto_cbc_apply(l->enc, f, f, len);
    }
    enum tn_status st = tn_write_all(l->fd, f, len, deadline());
    free(f);
    return st;
}

static void endpoint(const struct sockaddr_storage *ss, struct rpc_endpoint *e) {
    memset(e, 0, sizeof *e);
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)ss;
        e->v6 = 1;
        memcpy(e->ip, &a->sin6_addr, 16);
        e->port = ntohs(a->sin6_port);
    } else {
        const struct sockaddr_in *a = (const void *)ss;
        memcpy(e->ip, &a->sin_addr, 4);
        e->port = ntohs(a->sin_port);
    }
}

static void addr_text(const struct rpc_addr *a, char *out, size_t len) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char ip[INET6_ADDRSTRLEN];
    if (!memcmp(a->ip, mapped, 12)) {
        inet_ntop(AF_INET, a->ip + 12, ip, sizeof ip);
        snprintf(out, len, "%s:%u", ip, a->port);
    } else {
        inet_ntop(AF_INET6, a->ip, ip, sizeof ip);
        snprintf(out, len, "[%s]:%u", ip, a->port);
    }
}

/* The ME side of the handshake. Returns 0 when ready. */
static int handshake(struct link *l) {
    const char *why = "?";
    uint8_t p[256];
    long n = read_frame(l, RPC_SEQ_NONCE, p, sizeof p, &why);
    struct rpc_nonce clt, srv;
    if (n < 0 || rpc_nonce_parse(p, (size_t)n, &clt)) {
        emit("HANDSHAKE_BAD listener=%u why=nonce_%s", l->l->id, n < 0 ? why : "parse");
        return -1;
    }
    srv.key_select = tp_get32(secret);
    srv.schema = 1;
    srv.ts = (uint32_t)time(NULL);
    crypto_random(srv.nonce, 16);
    rpc_nonce_build(p, &srv);
    l->seq_out = RPC_SEQ_NONCE;
    if (send_frame(l, p, RPC_NONCE_LEN) != TN_OK)
        return -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    struct rpc_kdf_in in = {.clt_ts = clt.ts, .secret = secret, .secret_len = secret_len};
    memcpy(in.nonce_srv, srv.nonce, 16);
    memcpy(in.nonce_clt, clt.nonce, 16);
    getpeername(l->fd, (struct sockaddr *)&ss, &sl);
    endpoint(&ss, &in.clt);
    if (clt_ip_set) {
        in.clt.v6 = clt_ip_v6;
        memcpy(in.clt.ip, clt_ip, 16);
    }
    sl = sizeof ss;
    getsockname(l->fd, (struct sockaddr *)&ss, &sl);
    endpoint(&ss, &in.srv);
    uint8_t k[32], iv[16];
    rpc_kdf(&in, "CLIENT", k, iv); /* the proxy writes with these */
    l->dec = crypto_cbc_new(k, iv, 0);
    rpc_kdf(&in, "SERVER", k, iv);
    l->enc = crypto_cbc_new(k, iv, 1);
    /* bytes after the nonce frame are encrypted: decrypt what we hold */
    memcpy(l->raw, l->buf, l->len);
    l->rawlen = l->len;
    l->len = 0;
    if (fill(l, 0) != TN_OK)
        return -1;
    if (l->rawlen >= 16) {
        size_t kk = l->rawlen & ~(size_t)15;
        crypto_cbc_apply(l->dec, l->raw, l->buf, kk);
        l->len = kk;
        memmove(l->raw, l->raw + kk, l->rawlen - kk);
        l->rawlen -= kk;
    }
    n = read_frame(l, RPC_SEQ_HANDSHAKE, p, sizeof p, &why);
    uint32_t flags;
    uint8_t sender[12], peer[12];
    if (n < 0 || rpc_handshake_parse(p, (size_t)n, &flags, sender, peer)) {
        /* what a real ME does with keys that do not match: drop the link */
        emit("HANDSHAKE_BAD listener=%u why=%s", l->l->id, n < 0 ? why : "not_handshake");
        return -1;
    }
    if (l->l->mode == M_STALL) {
        emit("STALL listener=%u", l->l->id);
        size_t extra;
        tn_drain_to_eof(l->fd, deadline(), &extra);
        return -1;
    }
    uint8_t me_pid[12] = {1, 0, 0, 127, 0x22, 0xb8, 7, 0, 1, 2, 3, 4};
    rpc_handshake_build(p, 0, me_pid, sender);
    l->seq_out = RPC_SEQ_HANDSHAKE;
    if (l->l->mode == M_GARBAGE) {
        uint8_t g[48];
        crypto_random(g, sizeof g);
        tn_write_all(l->fd, g, sizeof g, deadline());
        emit("GARBAGE listener=%u", l->l->id);
        size_t extra;
        tn_drain_to_eof(l->fd, deadline(), &extra);
        return -1;
    }
    if (send_frame(l, p, RPC_HANDSHAKE_LEN) != TN_OK)
        return -1;
    l->seq_out = 0;
    l->seq_in = 0;
    emit("HANDSHAKE_OK listener=%u", l->l->id);
    return 0;
}

static enum tn_status answer(struct link *l, uint64_t conn_id, const uint8_t *data, size_t n,
                             uint32_t flags) {
    uint8_t *p = malloc(16 + n);
    if (!p)
        return TN_ERR;
    tp_put32(p, RPC_PROXY_ANS);
    tp_put32(p + 4, flags);
    tp_put64(p + 8, conn_id);
    memcpy(p + 16, data, n);
    enum tn_status st = send_frame(l, p, 16 + n);
    free(p);
    l->answers++;
    return st;
}

/* One request. Returns 0 to go on, -1 to end the link. */
static int request(struct link *l, const uint8_t *p, size_t n) {
    struct rpc_proxy_req r;
    if (rpc_proxy_req_parse(p, n, &r) != RPC_OK) {
        emit("BAD_REQ listener=%u", l->l->id);
        return -1;
    }
    char tag[33] = "none", rem[80], ours[80], head[33];
    if (r.has_tag)
        tn_hex(r.ad_tag, 16, tag);
    addr_text(&r.remote, rem, sizeof rem);
    addr_text(&r.ours, ours, sizeof ours);
    tn_hex(r.data, r.len < 16 ? r.len : 16, head);
    emit("REQ listener=%u conn=%016llx flags=0x%x tag=%s remote=%s ours=%s len=%zu head=%s",
         l->l->id, (unsigned long long)r.conn_id, r.flags, tag, rem, ours, r.len, head);
    enum tn_status st = TN_OK;
    if (!respq_check(r.data, r.len, 0)) {
        char nonce[33];
        tn_hex(r.data + 24, 16, nonce);
        emit("REQ_PQ_MULTI listener=%u nonce=%s", l->l->id, nonce);
        uint8_t msg[RESPQ_LEN];
        respq_build(r.data, msg);
        st = answer(l, r.conn_id, msg, sizeof msg, 0);
    } else if (r.len >= 8 && !memcmp(r.data, "ECHOECHO", 8)) {
        if (r.flags & RPC_FLAG_QUICKACK) {
            uint8_t ack[16];
            tp_put32(ack, RPC_SIMPLE_ACK);
            tp_put64(ack + 4, r.conn_id);
            tp_put32(ack + 12, (uint32_t)r.len | 0x80000000u);
            st = send_frame(l, ack, sizeof ack);
        }
        if (st == TN_OK)
            st = answer(l, r.conn_id, r.data, r.len, 0);
    } else if (r.len >= 16 && !memcmp(r.data, "DOWNLOAD", 8)) {
        uint32_t total = tp_get32(r.data + 8), chunk = tp_get32(r.data + 12) & ~3u;
        uint32_t seed = r.len >= 20 ? tp_get32(r.data + 16) : 0;
        if (!chunk || chunk > (1u << 20))
            chunk = 65536;
        uint8_t *b = malloc(chunk);
        for (uint32_t off = 0; b && st == TN_OK && off < total; off += chunk) {
            uint32_t k = total - off < chunk ? (total - off + 3) & ~3u : chunk;
            for (uint32_t i = 0; i < k; i++)
                b[i] = (uint8_t)((off + i) * 7 + seed);
            st = answer(l, r.conn_id, b, k, 0);
        }
        free(b);
    } else if (r.len >= 8 && !memcmp(r.data, "CLOSEEXT", 8)) {
        uint8_t m[12];
        rpc_msg_u64(m, RPC_CLOSE_EXT, r.conn_id);
        st = send_frame(l, m, sizeof m);
    }
    if (st != TN_OK)
        return -1;
    if (l->answers && l->l->mode == M_RESET) {
        emit("RESET listener=%u", l->l->id);
        return -1;
    }
    if (l->answers && l->l->mode == M_DROP) {
        emit("DROP listener=%u", l->l->id);
        shutdown(l->fd, SHUT_RDWR);
        return -1;
    }
    return 0;
}

static void *run_link(void *arg) {
    struct link *l = arg;
    const char *reason = "eof";
    uint8_t *p = malloc(RPC_FRAME_MAX);
    l->buf = malloc(RBUF_MAX);
    l->raw = malloc(RBUF_MAX);
    if (!p || !l->buf || !l->raw || handshake(l)) {
        reason = "handshake";
        goto out;
    }
    if (do_ping) {
        uint8_t m[12];
        rpc_msg_u64(m, RPC_PING, 4242);
        send_frame(l, m, sizeof m);
    }
    for (;;) {
        const char *why = "?";
        long n = read_frame(l, l->seq_in, p, RPC_FRAME_MAX, &why);
        if (n < 0) {
            reason = why;
            break;
        }
        l->seq_in++;
        struct rpc_msg m;
        if (rpc_msg_parse(p, (size_t)n, &m) != RPC_OK) {
            reason = "short_msg";
            break;
        }
        if (m.type == RPC_PROXY_REQ) {
            if (request(l, p, (size_t)n)) {
                reason = "misbehaved";
                if (l->l->mode == M_RESET) {
                    tn_close_rst(l->fd);
                    l->fd = -1;
                }
                break;
            }
        } else if (m.type == RPC_CLOSE_CONN) {
            emit("CLOSE_CONN listener=%u conn=%016llx", l->l->id, (unsigned long long)m.conn_id);
        } else if (m.type == RPC_PONG) {
            emit("PONG listener=%u id=%llu", l->l->id, (unsigned long long)m.ping_id);
        } else if (m.type == RPC_PING) {
            uint8_t pong[12];
            rpc_msg_u64(pong, RPC_PONG, m.ping_id);
            emit("PING listener=%u", l->l->id);
            if (send_frame(l, pong, sizeof pong) != TN_OK)
                break;
        }
    }
out:
    emit("CLOSED listener=%u reason=%s", l->l->id, reason);
    if (l->fd >= 0)
        close(l->fd);
    crypto_cbc_free(l->enc);
    crypto_cbc_free(l->dec);
    free(l->buf);
    free(l->raw);
    free(p);
    free(l);
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: fake_me --secret-file PATH --listen ADDR:PORT[,ID[,MODE]] ... "
                    "[--clt-ip IP] [--ping] [--timeout S]\n");
    exit(2);
}

static int parse_listen(const char *arg, struct listener *l) {
    struct sockaddr_storage ss;
    socklen_t sl;
    const char *rest;
    char err[160];
    if (tn_parse_addr(arg, 1, &ss, &sl, &rest, err, sizeof err)) {
        fprintf(stderr, "fake_me: %s\n", err);
        return -1;
    }
    l->id = 0;
    l->mode = M_NORMAL;
    if (*rest == ',') {
        char *end;
        l->id = (unsigned)strtoul(rest + 1, &end, 10);
        rest = end;
        if (*rest == ',') {
            int found = 0;
            for (int m = 0; m < MODE_COUNT; m++)
                if (!strcmp(rest + 1, mode_names[m]))
                    l->mode = (enum me_mode)m, found = 1;
            if (!found)
                return -1;
            rest = "";
        }
    }
    if (*rest)
        return -1;
    l->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&ss, sl) || listen(l->fd, 512)) {
        fprintf(stderr, "fake_me: cannot listen on %s: %s\n", arg, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    static struct listener ls[MAX_LISTENERS];
    int nl = 0;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--listen") && i + 1 < argc) {
            if (nl == MAX_LISTENERS || parse_listen(argv[++i], &ls[nl]))
                return 2;
            nl++;
        } else if (!strcmp(argv[i], "--secret-file") && i + 1 < argc) {
            FILE *f = fopen(argv[++i], "rb");
            if (!f)
                usage();
            secret_len = fread(secret, 1, sizeof secret, f);
            fclose(f);
        } else if (!strcmp(argv[i], "--clt-ip") && i + 1 < argc) {
            const char *ip = argv[++i];
            clt_ip_set = 1;
            clt_ip_v6 = strchr(ip, ':') != NULL;
            if (inet_pton(clt_ip_v6 ? AF_INET6 : AF_INET, ip, clt_ip) != 1)
                usage();
        } else if (!strcmp(argv[i], "--ping")) {
            do_ping = 1;
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            timeout_s = atoi(argv[++i]);
        } else {
            usage();
        }
    }
    if (!nl || secret_len < RPC_SECRET_MIN)
        usage();
    emit("READY");
    struct pollfd pfds[MAX_LISTENERS];
    for (int i = 0; i < nl; i++)
        pfds[i] = (struct pollfd){.fd = ls[i].fd, .events = POLLIN};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (;;) {
        if (poll(pfds, (nfds_t)nl, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        for (int i = 0; i < nl; i++) {
            if (!(pfds[i].revents & POLLIN))
                continue;
            int fd = accept4(ls[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0)
                continue;
            emit("ACCEPT listener=%u", ls[i].id);
            struct link *l = calloc(1, sizeof *l);
            pthread_t t;
            if (!l) {
                close(fd);
                continue;
            }
            l->fd = fd;
            l->l = &ls[i];
            if (pthread_create(&t, &attr, run_link, l)) {
                close(fd);
                free(l);
            }
        }
    }
}
