/* bench_load.c: relay load generator: N clients through mtproxy and the fake DC they reach. */
/*
 * One single-threaded epoll program plays both ends on 127.0.0.1:
 *   - the DC: it listens on --dc-port, reads the proxy's raw obfuscated2 header (no secret, the
 *     proxy initiates) and then the 16-byte hello the client put after its own header;
 *   - the clients: --conns connections to --proxy-port, obfuscated2 with tag ef/ee/dd on a
 *     plain or dd secret, or FakeTLS (ee secret: ClientHello, ServerHello check, records).
 *
 * Client stream (client -> DC, after the 64-byte header), DC stream (DC -> client):
 *   hello (16 bytes, client -> DC only): "BLD1" | u32 client index | u64 connect time (ns)
 *   then, by workload:
 *     bulk-down, mtu      DC writes the pattern P as fast as it can, client verifies
 *     bulk-up, mtu-up     client writes P, DC verifies
 *     small               client writes 200-byte messages (u64 seq | u64 send ns | P bytes),
 *                         up to --window in flight; the DC echoes each byte back; the client
 *                         checks every echo and records the round trip
 *     trickle             small, one message per connection every --interval-ms
 *     idle                nothing: hold the connections
 *     handshake           loop: connect, handshake, DC answers one byte, close; count per s
 * P: little-endian u64 words, word i = (i + 1) * golden ^ salt (cheap to make and to check).
 *
 * Figures: bytes each way received and verified within the timed window, MB/s, round-trip
 * percentiles, connect-to-first-DC-byte percentiles, and from --proxy-pid: CPU seconds
 * (/proc/PID/stat) and read/write/splice calls (SIGUSR1 stats line in --proxy-log) per MB,
 * VmRSS and the [heap]/stack/anonymous split from /proc/PID/smaps. One CSV row per run.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crypto/crypto.h"
#include "proto/faketls.h"
#include "proto/obfs2.h"
#include "proto/secret.h"

#define BL_HELLO_LEN 16
#define BL_MSG_LEN_DEFAULT 200
#define BL_IO 65536
#define BL_GOLDEN 0x9e3779b97f4a7c15ull
#define BL_TLS_RSP_MAX 32768

enum wl { WL_BULK_DOWN, WL_BULK_UP, WL_MTU, WL_MTU_UP, WL_SMALL, WL_TRICKLE, WL_IDLE, WL_HS };
static const char *const wl_names[] = {"bulk-down", "bulk-up", "mtu",  "mtu-up",
                                       "small",     "trickle", "idle", "handshake"};

enum ckind { CK_PLAIN, CK_DD, CK_TLS };

enum epstate { S_CONNECTING, S_TLS_WAIT, S_READY, S_DC_HDR, S_DONE };

struct ep {
    int fd;
    int is_dc;
    int idx;          /* client index (DC side: learnt from the hello) */
    enum epstate st;
    struct crypto_ctr *enc, *dec;
    uint64_t t_connect;
    /* outgoing bytes not yet written */
    uint8_t *out;
    size_t out_len, out_off;
    /* receive side */
    uint8_t *in;      /* handshake accumulation (TLS response / DC header) */
    size_t in_len;
    uint64_t rx_off;  /* pattern offset of the next byte expected */
    uint64_t tx_off;  /* pattern offset of the next byte to send */
    /* TLS record reader (client side, proxy -> client) */
    uint8_t rec_hdr[5];
    unsigned rec_hdr_len;
    uint32_t rec_left;
    int tls_sent_ccs;
    uint8_t tls_random[32];
    /* small */
    uint64_t seq_sent, seq_got;
    uint8_t msg[512];
    size_t msg_have;
    uint64_t next_send_ns;
    int peer_alive;
};

struct opts {
    int proxy_port, dc_port;
    struct secret secret;
    uint32_t tag;
    enum ckind ck;
    enum wl wl;
    int conns;
    double seconds;
    int window;
    int interval_ms;
    size_t msg_len;
    int proxy_pid;
    const char *proxy_pidfile;
    const char *proxy_log;
    const char *csv;
    const char *label;
    double pre_wait;
    double settle; /* seconds between set-up and the ready RSS / the timed window */
    int direct;    /* clients dial the DC sink themselves (no proxy: the baseline) */
    int spin;      /* never block in epoll_wait */
    const char *lat_file; /* round-trip percentiles p50 p99 p999 (us) and count go here */
    int concurrency;
    int quiet;
    const char *dc_netns; /* the DC sink listens in this network namespace (a delay line's far side) */
    const char *dc_addr;  /* ... on this IPv4 address (default 127.0.0.1) */
    struct in6_addr proxy6; /* --proxy-addr6: clients dial this (::1 or a ULA on lo: listen-prefix) */
    int proxy6_on;
    const char *hs_file;  /* handshake: connect -> DC and connect -> echo percentiles go here */
    int burst, bursts;    /* handshake: start burst at once, bursts times, gap_ms apart */
    int gap_ms, gap_jitter_ms; /* the gap is gap_ms + a uniform draw in [0, gap_jitter_ms] */
    int dc_idle_close_ms; /* the DC sink closes a connection that sent nothing for this long */
    uint64_t count;       /* a fixed amount of work instead of --seconds (0: none; bench/guard) */
    size_t tls_record;    /* the client's TLS record payload (default FAKETLS_MAX_PAYLOAD) */
};

struct proxy_snap {
    double cpu_s;
    unsigned long long reads, writes, spliced, bytes_up, bytes_down;
    int have_stats;
};

static struct opts o;
static int epfd;
static struct ep **eps;      /* by fd */
static size_t eps_cap;
static uint8_t iobuf[BL_IO + 64], txbuf[BL_IO + 64];
static int phase_run;        /* 1 while the timed window is open */
static uint64_t bytes_down, bytes_up, msgs, errors, hs_done;
static int clients_ready, dcs_ready, clients_open, clients_started;
static uint64_t *lat;        /* round trips, ns */
static size_t lat_n, lat_cap;
static uint64_t *conn_lat;   /* connect -> first DC byte, ns */
static size_t conn_lat_n, conn_lat_cap;
static uint64_t *echo_lat;   /* handshake: connect -> the DC's byte back at the client, ns */
static size_t echo_lat_n, echo_lat_cap;
static const char *first_error;
static struct ep **clients;  /* by index */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *msg)
{
    fprintf(stderr, "bench_load: %s\n", msg);
    exit(2);
}

static void note_error(const char *what)
{
    errors++;
    if (!first_error) {
        first_error = what;
        fprintf(stderr, "bench_load: error: %s\n", what);
    }
}

static void push(uint64_t **arr, size_t *n, size_t *cap, uint64_t v)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4096;
        *arr = realloc(*arr, *cap * sizeof **arr);
        if (!*arr)
            die("out of memory");
    }
    (*arr)[(*n)++] = v;
}

/* ---- the pattern ---- */

static uint64_t salt_of(int down)
{
    return down ? 0x646f776e646f776eull : 0x75707570757075ull;
}

static inline uint64_t pattern_word(uint64_t salt, uint64_t w)
{
    return ((w + 1) * BL_GOLDEN) ^ salt;
}

/* Byte off of the stream (little-endian words; the check is symmetric on any host). */
static inline uint8_t pattern_byte(uint64_t salt, uint64_t off)
{
    return (uint8_t)(pattern_word(salt, off / 8) >> (8 * (off % 8)));
}

/* Writes pattern bytes [off, off + len) of a stream with salt into out. */
static void pattern_at(uint64_t salt, uint64_t off, uint8_t *out, size_t len)
{
    size_t i = 0;
    for (; i < len && (off + i) % 8; i++)
        out[i] = pattern_byte(salt, off + i);
    for (uint64_t w = (off + i) / 8; len - i >= 8; i += 8, w++) {
        uint64_t v = pattern_word(salt, w);
        memcpy(out + i, &v, 8);
    }
    for (; i < len; i++)
        out[i] = pattern_byte(salt, off + i);
}

/* 1 if buf holds pattern bytes [off, off + len), else 0. */
static int pattern_check(uint64_t salt, uint64_t off, const uint8_t *buf, size_t len)
{
    size_t i = 0;
    uint64_t bad = 0;
    for (; i < len && (off + i) % 8; i++)
        bad |= buf[i] ^ pattern_byte(salt, off + i);
    for (uint64_t w = (off + i) / 8; len - i >= 8; i += 8, w++) {
        uint64_t v;
        memcpy(&v, buf + i, 8);
        bad |= v ^ pattern_word(salt, w);
    }
    for (; i < len; i++)
        bad |= buf[i] ^ pattern_byte(salt, off + i);
    return bad == 0;
}

/* ---- epoll plumbing ---- */

static void ep_watch(struct ep *e, int want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = e};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, e->fd, &ev) != 0)
        epoll_ctl(epfd, EPOLL_CTL_ADD, e->fd, &ev);
}

static struct ep *ep_new(int fd, int is_dc)
{
    struct ep *e = calloc(1, sizeof *e);
    if (!e)
        die("out of memory");
    e->fd = fd;
    e->is_dc = is_dc;
    e->idx = -1;
    e->enc = crypto_ctr_new();
    e->dec = crypto_ctr_new();
    if (!e->enc || !e->dec)
        die("crypto_ctr_new");
    if ((size_t)fd >= eps_cap) {
        size_t nc = (size_t)fd * 2 + 64;
        eps = realloc(eps, nc * sizeof *eps);
        if (!eps)
            die("out of memory");
        memset(eps + eps_cap, 0, (nc - eps_cap) * sizeof *eps);
        eps_cap = nc;
    }
    eps[fd] = e;
    return e;
}

static void ep_free(struct ep *e)
{
    if (!e)
        return;
    if (e->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
        close(e->fd);
        eps[e->fd] = NULL;
    }
    crypto_ctr_free(e->enc);
    crypto_ctr_free(e->dec);
    free(e->out);
    free(e->in);
    free(e);
}

/* Queues bytes (already encrypted/framed) for writing. */
static void ep_queue(struct ep *e, const uint8_t *p, size_t n)
{
    if (e->out_off == e->out_len)
        e->out_off = e->out_len = 0;
    uint8_t *nb = realloc(e->out, e->out_len + n);
    if (!nb)
        die("out of memory");
    e->out = nb;
    memcpy(e->out + e->out_len, p, n);
    e->out_len += n;
}

/* Writes queued bytes; returns 1 if all went, 0 if some remain, -1 on error. */
static int ep_flush(struct ep *e)
{
    while (e->out_off < e->out_len) {
        ssize_t n = send(e->fd, e->out + e->out_off, e->out_len - e->out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            return -1;
        }
        e->out_off += (size_t)n;
    }
    e->out_off = e->out_len = 0;
    return 1;
}

/* Client side: encrypts n payload bytes in p in place and queues them (in TLS records for ee). */
static void client_send(struct ep *e, uint8_t *p, size_t n)
{
    crypto_ctr_apply(e->enc, p, p, n);
    if (o.ck != CK_TLS) {
        ep_queue(e, p, n);
        return;
    }
    if (!e->tls_sent_ccs) {
        static const uint8_t ccs[6] = {0x14, 0x03, 0x03, 0x00, 0x01, 0x01};
        ep_queue(e, ccs, sizeof ccs);
        e->tls_sent_ccs = 1;
    }
    while (n) {
        size_t c = n > o.tls_record ? o.tls_record : n;
        uint8_t h[5] = {0x17, 0x03, 0x03, (uint8_t)(c >> 8), (uint8_t)c};
        ep_queue(e, h, 5);
        ep_queue(e, p, c);
        p += c;
        n -= c;
    }
}

/* ---- connecting clients ---- */

static int set_nb(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void client_start(int idx)
{
    int v6 = o.proxy6_on && !o.direct;
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        note_error("client socket");
        return;
    }
    set_nb(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int port = o.direct ? o.dc_port : o.proxy_port;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct ep *e = ep_new(fd, 0);
    e->idx = idx;
    e->t_connect = now_ns();
    e->st = S_CONNECTING;
    clients[idx] = e;
    clients_open++;
    clients_started++;
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                              .sin6_addr = o.proxy6};
    if ((v6 ? connect(fd, (struct sockaddr *)&a6, sizeof a6)
            : connect(fd, (struct sockaddr *)&a, sizeof a)) != 0 && errno != EINPROGRESS) {
        note_error("client connect");
    }
    ep_watch(e, 1);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* Sends the obfuscated2 header and the bench hello (after the TLS handshake for ee). */
static void client_send_header(struct ep *e)
{
    uint8_t plain[OBFS2_HDR_LEN], wire[OBFS2_HDR_LEN];
    struct obfs2_keys k;
    if (obfs2_build(plain, o.tag, 2, NULL) != 0)
        die("obfs2_build");
    obfs2_derive(plain, o.direct ? NULL : o.secret.key, &k); /* direct: as the proxy would */
    crypto_ctr_init(e->enc, k.fwd.key, k.fwd.iv);
    crypto_ctr_init(e->dec, k.rev.key, k.rev.iv);
    obfs2_seal(plain, e->enc, wire);
    uint8_t hello[BL_HELLO_LEN];
    memcpy(hello, "BLD1", 4);
    put32(hello + 4, (uint32_t)e->idx);
    put64(hello + 8, e->t_connect);
    if (o.ck == CK_TLS) {
        /* the header goes through client_send's record framing, already sealed */
        static const uint8_t ccs[6] = {0x14, 0x03, 0x03, 0x00, 0x01, 0x01};
        uint8_t rec[5 + OBFS2_HDR_LEN + BL_HELLO_LEN];
        crypto_ctr_apply(e->enc, hello, hello, sizeof hello);
        rec[0] = 0x17, rec[1] = 0x03, rec[2] = 0x03, rec[3] = 0;
        rec[4] = OBFS2_HDR_LEN + BL_HELLO_LEN;
        memcpy(rec + 5, wire, OBFS2_HDR_LEN);
        memcpy(rec + 5 + OBFS2_HDR_LEN, hello, BL_HELLO_LEN);
        ep_queue(e, ccs, sizeof ccs);
        ep_queue(e, rec, sizeof rec);
        e->tls_sent_ccs = 1;
    } else {
        ep_queue(e, wire, sizeof wire);
        client_send(e, hello, sizeof hello);
    }
    e->st = S_READY;
    clients_ready++;
}

static void put_ext(uint8_t *b, size_t *n, uint16_t type, const uint8_t *d, size_t len)
{
    b[(*n)++] = (uint8_t)(type >> 8);
    b[(*n)++] = (uint8_t)type;
    b[(*n)++] = (uint8_t)(len >> 8);
    b[(*n)++] = (uint8_t)len;
    if (len) /* d may be NULL for an empty extension: memcpy must not see it (UBSan) */
        memcpy(b + *n, d, len);
    *n += len;
}

/* Builds a TLS 1.3 ClientHello signed with the ee key (digest in the random, see faketls.h). */
static size_t tls_client_hello(struct ep *e, uint8_t *out)
{
    uint8_t ext[512], d[300];
    size_t n = 0, dl = strlen(o.secret.domain);
    put_ext(ext, &n, 0x0a0a, NULL, 0);
    d[0] = (uint8_t)((dl + 3) >> 8), d[1] = (uint8_t)(dl + 3), d[2] = 0;
    d[3] = (uint8_t)(dl >> 8), d[4] = (uint8_t)dl;
    memcpy(d + 5, o.secret.domain, dl);
    put_ext(ext, &n, 0x0000, d, dl + 5);
    static const uint8_t sv[5] = {0x04, 0x0a, 0x0a, 0x03, 0x04};
    put_ext(ext, &n, 0x002b, sv, sizeof sv);
    uint8_t ks[38] = {0x00, 0x24, 0x00, 0x1d, 0x00, 0x20};
    crypto_random(ks + 6, 32);
    put_ext(ext, &n, 0x0033, ks, sizeof ks);
    size_t p = 0;
    out[p++] = 0x16, out[p++] = 0x03, out[p++] = 0x01;
    size_t reclen_at = p;
    p += 2;
    out[p++] = 0x01;
    size_t hslen_at = p;
    p += 3;
    out[p++] = 0x03, out[p++] = 0x03;
    memset(out + p, 0, 32); /* random: filled below */
    p += 32;
    out[p++] = 32;
    crypto_random(out + p, 32);
    p += 32;
    static const uint8_t cs[8] = {0x00, 0x06, 0x13, 0x01, 0x13, 0x02, 0x13, 0x03};
    memcpy(out + p, cs, sizeof cs);
    p += sizeof cs;
    out[p++] = 0x01, out[p++] = 0x00;
    out[p++] = (uint8_t)(n >> 8), out[p++] = (uint8_t)n;
    memcpy(out + p, ext, n);
    p += n;
    size_t hs = p - hslen_at - 3, rec = p - reclen_at - 2;
    out[hslen_at] = (uint8_t)(hs >> 16), out[hslen_at + 1] = (uint8_t)(hs >> 8);
    out[hslen_at + 2] = (uint8_t)hs;
    out[reclen_at] = (uint8_t)(rec >> 8), out[reclen_at + 1] = (uint8_t)rec;
    uint8_t mac[32];
    crypto_hmac_sha256(o.secret.key, SECRET_KEY_LEN, out, p, mac);
    uint32_t ts = (uint32_t)time(NULL);
    for (int i = 0; i < 4; i++)
        mac[28 + i] ^= (uint8_t)(ts >> (8 * i));
    memcpy(out + FAKETLS_RANDOM_OFF, mac, 32);
    memcpy(e->tls_random, mac, 32);
    return p;
}

/* Client, ee: collects the ServerHello, CCS and fake ApplicationData; checks the digest.
 * Returns 1 when complete (and consumes exactly those bytes), 0 if more is needed, -1 bad. */
static int tls_response(struct ep *e)
{
    size_t p = 0;
    int seen_app = 0;
    while (!seen_app) {
        if (e->in_len - p < 5)
            return 0;
        size_t len = ((size_t)e->in[p + 3] << 8) | e->in[p + 4];
        if (e->in_len - p - 5 < len)
            return 0;
        if (e->in[p] == 0x17)
            seen_app = 1;
        else if (e->in[p] != 0x16 && e->in[p] != 0x14)
            return -1;
        p += 5 + len;
    }
    if (p < 43)
        return -1;
    uint8_t digest[32], zero[32] = {0}, mac[32];
    memcpy(digest, e->in + FAKETLS_RANDOM_OFF, 32);
    struct crypto_span sp[4] = {{e->tls_random, 32},
                                {e->in, FAKETLS_RANDOM_OFF},
                                {zero, 32},
                                {e->in + 43, p - 43}};
    crypto_hmac_sha256_spans(o.secret.key, SECRET_KEY_LEN, sp, 4, mac);
    if (!crypto_memeq(mac, digest, 32))
        return -1;
    if (p != e->in_len)
        return -1; /* nothing may follow before we send our header */
    e->in_len = 0;
    return 1;
}

/* ---- workload steps ---- */

static int is_down(void)
{
    return o.wl == WL_BULK_DOWN || o.wl == WL_MTU;
}

static int is_up(void)
{
    return o.wl == WL_BULK_UP || o.wl == WL_MTU_UP;
}

static size_t write_chunk(void)
{
    return (o.wl == WL_MTU || o.wl == WL_MTU_UP) ? 1460 : BL_IO;
}

/* A bulk sender: keeps one chunk queued, refilling with pattern while the socket takes it. */
static int bulk_send(struct ep *e, int down)
{
    for (int rounds = 0; rounds < 16 && phase_run; rounds++) {
        int r = ep_flush(e);
        if (r <= 0)
            return r;
        size_t n = write_chunk();
        if (o.count && e->tx_off >= o.count)
            break; /* --count: this sender's bytes are all out */
        if (o.count && o.count - e->tx_off < n)
            n = (size_t)(o.count - e->tx_off);
        pattern_at(salt_of(down), e->tx_off, txbuf, n);
        e->tx_off += n;
        if (e->is_dc) {
            crypto_ctr_apply(e->enc, txbuf, txbuf, n);
            ep_queue(e, txbuf, n);
        } else {
            client_send(e, txbuf, n);
        }
    }
    return ep_flush(e);
}

static void small_send(struct ep *e, uint64_t t)
{
    uint8_t m[512];
    if (o.count && e->seq_sent >= o.count)
        return; /* --count: this connection's messages are all sent */
    put64(m, e->seq_sent);
    put64(m + 8, t);
    pattern_at(salt_of(0), e->seq_sent * 64, m + 16, o.msg_len - 16);
    e->seq_sent++;
    client_send(e, m, o.msg_len);
}

static void client_payload(struct ep *e, uint8_t *p, size_t n)
{
    if (o.wl == WL_HS) {
        hs_done++;
        push(&echo_lat, &echo_lat_n, &echo_lat_cap, now_ns() - e->t_connect);
        e->st = S_DONE;
        return;
    }
    if (o.wl == WL_SMALL || o.wl == WL_TRICKLE) {
        while (n) {
            size_t c = o.msg_len - e->msg_have;
            if (c > n)
                c = n;
            memcpy(e->msg + e->msg_have, p, c);
            e->msg_have += c;
            p += c;
            n -= c;
            if (e->msg_have < o.msg_len)
                continue;
            e->msg_have = 0;
            uint64_t seq, t;
            memcpy(&seq, e->msg, 8);
            memcpy(&t, e->msg + 8, 8);
            if (seq != e->seq_got || !pattern_check(salt_of(0), seq * 64, e->msg + 16,
                                                    o.msg_len - 16)) {
                note_error("echo mismatch");
                continue;
            }
            e->seq_got++;
            if (phase_run) {
                msgs++;
                bytes_down += o.msg_len;
                bytes_up += o.msg_len;
                push(&lat, &lat_n, &lat_cap, now_ns() - t);
            }
            if (o.wl == WL_SMALL && phase_run)
                small_send(e, now_ns());
        }
        return;
    }
    if (!pattern_check(salt_of(1), e->rx_off, p, n))
        note_error("download pattern mismatch");
    e->rx_off += n;
    if (phase_run)
        bytes_down += n;
}

/* Client: bytes arrived from the proxy (decrypt, strip TLS records). */
static void client_bytes(struct ep *e, uint8_t *p, size_t n)
{
    if (o.ck != CK_TLS) {
        crypto_ctr_apply(e->dec, p, p, n);
        client_payload(e, p, n);
        return;
    }
    while (n) {
        if (e->rec_left == 0) {
            while (n && e->rec_hdr_len < 5) {
                e->rec_hdr[e->rec_hdr_len++] = *p++;
                n--;
            }
            if (e->rec_hdr_len < 5)
                return;
            if (e->rec_hdr[0] != 0x17 || e->rec_hdr[1] != 3 || e->rec_hdr[2] != 3) {
                note_error("bad TLS record from proxy");
                e->st = S_DONE;
                return;
            }
            e->rec_left = ((uint32_t)e->rec_hdr[3] << 8) | e->rec_hdr[4];
            e->rec_hdr_len = 0;
            continue;
        }
        size_t c = n < e->rec_left ? n : e->rec_left;
        crypto_ctr_apply(e->dec, p, p, c);
        client_payload(e, p, c);
        p += c;
        n -= c;
        e->rec_left -= (uint32_t)c;
    }
}

/* DC: bytes arrived from the proxy, after the header and hello. */
static void dc_bytes(struct ep *e, uint8_t *p, size_t n)
{
    crypto_ctr_apply(e->dec, p, p, n);
    if (o.wl == WL_SMALL || o.wl == WL_TRICKLE) {
        crypto_ctr_apply(e->enc, p, p, n);
        ep_queue(e, p, n);
        return;
    }
    if (!pattern_check(salt_of(0), e->rx_off, p, n))
        note_error("upload pattern mismatch");
    e->rx_off += n;
    if (phase_run)
        bytes_up += n;
}

/* DC: header and hello. Returns 1 when both are in (leftover bytes handed on). */
static int dc_header(struct ep *e, uint8_t *p, size_t n)
{
    size_t need = OBFS2_HDR_LEN + BL_HELLO_LEN;
    if (!e->in && !(e->in = malloc(need)))
        die("out of memory");
    size_t c = need - e->in_len < n ? need - e->in_len : n;
    memcpy(e->in + e->in_len, p, c);
    e->in_len += c;
    if (e->in_len < need)
        return 0;
    struct obfs2_keys k;
    obfs2_derive(e->in, NULL, &k);
    crypto_ctr_init(e->dec, k.fwd.key, k.fwd.iv);
    crypto_ctr_init(e->enc, k.rev.key, k.rev.iv);
    uint8_t plain[OBFS2_HDR_LEN + BL_HELLO_LEN];
    crypto_ctr_apply(e->dec, e->in, plain, need);
    uint32_t idx;
    uint64_t t0;
    memcpy(&idx, plain + OBFS2_HDR_LEN + 4, 4);
    memcpy(&t0, plain + OBFS2_HDR_LEN + 8, 8);
    if (memcmp(plain + OBFS2_HDR_LEN, "BLD1", 4) != 0 || idx >= (uint32_t)o.conns * 64u + 1) {
        note_error("DC: bad hello (wrong keys?)");
        e->st = S_DONE;
        return 0;
    }
    push(&conn_lat, &conn_lat_n, &conn_lat_cap, now_ns() - t0);
    e->idx = (int)idx;
    e->st = S_READY;
    dcs_ready++;
    free(e->in);
    e->in = NULL;
    e->in_len = 0;
    if (o.wl == WL_HS) {
        uint8_t b = 'x';
        crypto_ctr_apply(e->enc, &b, &b, 1);
        ep_queue(e, &b, 1);
        ep_flush(e);
    }
    if (n > c)
        dc_bytes(e, p + c, n - c);
    return 1;
}

static void ep_close(struct ep *e)
{
    if (!e->is_dc) {
        if (e->idx >= 0 && clients[e->idx] == e)
            clients[e->idx] = NULL;
        clients_open--;
    }
    ep_free(e);
}

static void on_readable(struct ep *e)
{
    for (int rounds = 0; rounds < 4; rounds++) {
        ssize_t n = recv(e->fd, iobuf, BL_IO, 0);
        if (n == 0) {
            /* a DC side that never got a header is a pooled socket the proxy recycled */
            if (phase_run && o.wl != WL_HS && !(e->is_dc && e->st == S_DC_HDR && !e->in_len))
                note_error(e->is_dc ? "DC side: proxy closed" : "client: proxy closed");
            e->st = S_DONE;
            return;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                note_error("recv error");
                e->st = S_DONE;
            }
            return;
        }
        if (e->is_dc) {
            if (e->st == S_DC_HDR)
                dc_header(e, iobuf, (size_t)n);
            else if (e->st == S_READY)
                dc_bytes(e, iobuf, (size_t)n);
        } else if (e->st == S_TLS_WAIT) {
            uint8_t *nb = realloc(e->in, e->in_len + (size_t)n);
            if (!nb)
                die("out of memory");
            e->in = nb;
            memcpy(e->in + e->in_len, iobuf, (size_t)n);
            e->in_len += (size_t)n;
            int r = tls_response(e);
            if (r < 0) {
                note_error("bad ServerHello");
                e->st = S_DONE;
                return;
            }
            if (r > 0) {
                free(e->in);
                e->in = NULL;
                client_send_header(e);
                ep_flush(e);
            }
        } else if (e->st == S_READY) {
            client_bytes(e, iobuf, (size_t)n);
        }
        if (e->st == S_DONE || n < BL_IO)
            return;
    }
}

static void on_writable(struct ep *e)
{
    if (!e->is_dc && e->st == S_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            note_error("client connect failed");
            e->st = S_DONE;
            return;
        }
        if (o.ck == CK_TLS) {
            uint8_t ch[1024];
            size_t n = tls_client_hello(e, ch);
            ep_queue(e, ch, n);
            e->st = S_TLS_WAIT;
        } else {
            client_send_header(e);
        }
    }
    int r;
    if (phase_run && e->st == S_READY && ((e->is_dc && is_down()) || (!e->is_dc && is_up())))
        r = bulk_send(e, e->is_dc);
    else
        r = ep_flush(e);
    if (r < 0) {
        if (phase_run)
            note_error("send error");
        e->st = S_DONE;
    }
}

static void update_watch(struct ep *e)
{
    int bulk = phase_run && e->st == S_READY && ((e->is_dc && is_down()) || (!e->is_dc && is_up()));
    ep_watch(e, bulk || e->out_off < e->out_len || e->st == S_CONNECTING);
}

/* ---- the proxy process ---- */

static double proxy_cpu(int pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long ut = 0, st = 0;
    /* fields after ')': state(3) ... utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static unsigned long long field(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, " %s ", key);
    const char *p = strstr(line, k);
    return p ? strtoull(p + strlen(k), NULL, 10) : 0;
}

/* SIGUSR1 the proxy, wait for its next stats line in the log, parse the counters. */
static int proxy_stats(int pid, struct proxy_snap *s)
{
    if (!o.proxy_log)
        return 0;
    struct stat sb;
    off_t start = stat(o.proxy_log, &sb) == 0 ? sb.st_size : 0;
    if (kill(pid, SIGUSR1) != 0)
        return 0;
    for (int tries = 0; tries < 200; tries++) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        FILE *f = fopen(o.proxy_log, "r");
        if (!f)
            return 0;
        fseeko(f, start, SEEK_SET);
        char line[2048];
        while (fgets(line, sizeof line, f)) {
            if (strstr(line, "stats: accepted")) {
                s->reads = field(line, "reads");
                s->writes = field(line, "writes");
                s->spliced = field(line, "spliced");
                s->bytes_up = field(line, "bytes_up");
                s->bytes_down = field(line, "bytes_down");
                s->have_stats = 1;
                fclose(f);
                return 1;
            }
        }
        fclose(f);
    }
    return 0;
}

static void proxy_snap(int pid, struct proxy_snap *s)
{
    memset(s, 0, sizeof *s);
    if (pid <= 0)
        return;
    proxy_stats(pid, s);
    s->cpu_s = proxy_cpu(pid); /* after the stats wait, so the window is the same */
}

struct mem {
    long rss_kb, heap_kb, stack_kb, anon_kb;
};

/* VmRSS, and Rss of [heap], of stacks ([stack] and 8 MiB anonymous thread-stack maps) and of
 * other anonymous mappings (malloc arenas, mmapped slabs) from smaps. */
static void proxy_mem(int pid, struct mem *m)
{
    memset(m, 0, sizeof *m);
    if (pid <= 0)
        return;
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "VmRSS:", 6) == 0)
                m->rss_kb = strtol(line + 6, NULL, 10);
        fclose(f);
    }
    snprintf(path, sizeof path, "/proc/%d/smaps", pid);
    if (!(f = fopen(path, "r")))
        return;
    enum { K_OTHER, K_HEAP, K_STACK, K_ANON } kind = K_OTHER;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        int name_at = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &name_at) == 3 &&
            name_at > 0) {
            const char *name = line + name_at;
            if (strncmp(name, "[heap]", 6) == 0)
                kind = K_HEAP;
            else if (strncmp(name, "[stack]", 7) == 0)
                kind = K_STACK;
            else if (name[0] == '\n' || name[0] == 0)
                kind = (hi - lo == 8192 * 1024ul) ? K_STACK : K_ANON;
            else
                kind = K_OTHER;
            continue;
        }
        if (strncmp(line, "Rss:", 4) == 0) {
            long kb = strtol(line + 4, NULL, 10);
            if (kind == K_HEAP)
                m->heap_kb += kb;
            else if (kind == K_STACK)
                m->stack_kb += kb;
            else if (kind == K_ANON)
                m->anon_kb += kb;
        }
    }
    fclose(f);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(uint64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

/* ---- the loop ---- */

static int listen_fd;

static void run_events(int timeout_ms)
{
    struct epoll_event evs[256];
    /* --spin: never sleep (a load tool whose CPU never halts, as runtimes that spin before
     * parking behave): poll with a zero timeout until something is ready or timeout_ms passed */
    uint64_t until = o.spin ? now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
    int n = epoll_wait(epfd, evs, 256, o.spin ? 0 : timeout_ms);
    while (o.spin && n == 0 && now_ns() < until)
        n = epoll_wait(epfd, evs, 256, 0);
    for (int i = 0; i < n; i++) {
        struct ep *e = evs[i].data.ptr;
        if (!e) {
            for (;;) {
                int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0)
                    break;
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                struct ep *d = ep_new(fd, 1);
                d->st = S_DC_HDR;
                d->t_connect = now_ns(); /* accepted: for --dc-idle-close-ms */
                ep_watch(d, 0);
            }
            continue;
        }
        if (e->fd < 0 || eps[e->fd] != e)
            continue;
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            on_readable(e);
        if (e->st != S_DONE && (evs[i].events & (EPOLLOUT | EPOLLERR)))
            on_writable(e);
        if (e->st == S_DONE) {
            ep_close(e);
            continue;
        }
        update_watch(e);
    }
    if (o.dc_idle_close_ms > 0) { /* a DC that drops idle pre-connected sockets (FIN) */
        uint64_t t = now_ns(), idle = (uint64_t)o.dc_idle_close_ms * 1000000ull;
        for (size_t fd = 0; fd < eps_cap; fd++) {
            struct ep *d = eps[fd];
            if (d && d->is_dc && d->st == S_DC_HDR && d->in_len == 0 && t - d->t_connect >= idle)
                ep_close(d);
        }
    }
}

/* Handshake workload: closes finished clients (restart: starts a new one in each free slot) and
 * the DC sides whose byte went out. */
static void hs_reap(int restart)
{
    for (int i = 0; i < o.conns; i++) {
        if (clients[i] && clients[i]->st == S_DONE) {
            ep_close(clients[i]);
            clients[i] = NULL;
        }
        if (restart && !clients[i])
            client_start(i);
    }
    for (size_t fd = 0; fd < eps_cap; fd++) {
        struct ep *e = eps[fd];
        if (e && e->is_dc && e->st == S_READY && e->out_len == 0) {
            dcs_ready--;
            ep_close(e);
        }
    }
}

/* --count: the fixed amount of work is done (handshakes, or each connection's messages or
 * bytes all received); never with --count 0. */
static int count_done(void)
{
    if (!o.count)
        return 0;
    uint64_t all = o.count * (uint64_t)o.conns;
    switch (o.wl) {
    case WL_HS: return hs_done >= o.count;
    case WL_SMALL: return msgs >= all;
    case WL_BULK_DOWN: case WL_MTU: return bytes_down >= all;
    case WL_BULK_UP: case WL_MTU_UP: return bytes_up >= all;
    default: return 0;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_load --proxy-port N --dc-port N --secret SECRET [--client plain|dd|tls]\n"
            "  [--workload bulk-down|bulk-up|mtu|mtu-up|small|trickle|idle|handshake]\n"
            "  [--conns N] [--seconds S] [--window W] [--interval-ms MS] [--msg-size B]\n"
            "  [--proxy-pid PID | --proxy-pidfile F] [--proxy-log F] [--csv F] [--label S]\n"
            "  [--pre-wait S] [--settle S] [--concurrency C] [--quiet] [--direct] [--spin] [--lat-file F]\n"
            "  [--dc-netns /proc/PID/ns/net] [--dc-addr IPV4] [--proxy-addr6 ::1|ULA]\n"
            "  [--hs-file F] [--burst N --bursts K --gap-ms MS [--gap-jitter-ms MS]]  (handshake)\n"
            "  [--dc-idle-close-ms MS]  (the DC sink drops connections silent that long)\n"
            "  [--count N]  (a fixed amount instead of --seconds, which stays the cap: N bytes per\n"
            "   connection (bulk), N messages per connection (small), N handshakes)\n"
            "  [--tls-record B]  (tls: the client's records carry B bytes, 1..16384)\n"
            "The proxy must run with --dc 2 127.0.0.1:DCPORT. --client plain uses tag ef on a\n"
            "plain secret, dd the dd tag on a dd secret, tls FakeTLS on an ee secret (dd inside).\n"
            "Holding N connections takes 2N descriptors here (N clients + N DC sides).\n");
    exit(2);
}

static const char *csv_header =
    "label,client,workload,conns,seconds,bytes_down,bytes_up,mb_s_down,mb_s_up,msgs,"
    "lat_p50_us,lat_p99_us,connect_p50_us,connect_p99_us,handshakes_per_s,proxy_cpu_s,"
    "cpu_s_per_gb,proxy_reads,proxy_writes,proxy_spliced,reads_per_mb,writes_per_mb,"
    "rss_base_kb,rss_ready_kb,rss_end_kb,heap_kb,stack_kb,anon_kb,load_cpu_s,errors";

int main(int argc, char **argv)
{
    o.conns = 1;
    o.seconds = 5;
    o.window = 1;
    o.interval_ms = 100;
    o.msg_len = BL_MSG_LEN_DEFAULT;
    o.tls_record = FAKETLS_MAX_PAYLOAD;
    o.concurrency = 256;
    o.label = "-";
    const char *secret = NULL, *client = "plain", *wl = "bulk-down";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && ++i)
        if (ARG("--proxy-port"))
            o.proxy_port = atoi(v);
        else if (ARG("--dc-port"))
            o.dc_port = atoi(v);
        else if (ARG("--secret"))
            secret = v;
        else if (ARG("--client"))
            client = v;
        else if (ARG("--workload"))
            wl = v;
        else if (ARG("--conns"))
            o.conns = atoi(v);
        else if (ARG("--seconds"))
            o.seconds = atof(v);
        else if (ARG("--window"))
            o.window = atoi(v);
        else if (ARG("--interval-ms"))
            o.interval_ms = atoi(v);
        else if (ARG("--msg-size"))
            o.msg_len = (size_t)atoi(v);
        else if (ARG("--proxy-pid"))
            o.proxy_pid = atoi(v);
        else if (ARG("--proxy-pidfile"))
            o.proxy_pidfile = v;
        else if (ARG("--proxy-log"))
            o.proxy_log = v;
        else if (ARG("--csv"))
            o.csv = v;
        else if (ARG("--label"))
            o.label = v;
        else if (ARG("--pre-wait"))
            o.pre_wait = atof(v);
        else if (ARG("--settle"))
            o.settle = atof(v);
        else if (ARG("--lat-file"))
            o.lat_file = v;
        else if (strcmp(a, "--direct") == 0)
            o.direct = 1;
        else if (strcmp(a, "--spin") == 0)
            o.spin = 1;
        else if (ARG("--concurrency"))
            o.concurrency = atoi(v);
        else if (strcmp(a, "--quiet") == 0)
            o.quiet = 1;
        else if (ARG("--dc-netns"))
            o.dc_netns = v;
        else if (ARG("--dc-addr"))
            o.dc_addr = v;
        else if (ARG("--proxy-addr6")) {
            /* loopback or a unique-local address (fc00::/7, on lo in a namespace) only */
            if (inet_pton(AF_INET6, v, &o.proxy6) != 1 ||
                !(IN6_IS_ADDR_LOOPBACK(&o.proxy6) || (o.proxy6.s6_addr[0] & 0xfe) == 0xfc)) {
                fprintf(stderr, "bench_load: --proxy-addr6 takes ::1 or a fc00::/7 address\n");
                return 2;
            }
            o.proxy6_on = 1;
        }
        else if (ARG("--hs-file"))
            o.hs_file = v;
        else if (ARG("--burst"))
            o.burst = atoi(v);
        else if (ARG("--bursts"))
            o.bursts = atoi(v);
        else if (ARG("--gap-ms"))
            o.gap_ms = atoi(v);
        else if (ARG("--gap-jitter-ms"))
            o.gap_jitter_ms = atoi(v);
        else if (ARG("--tls-record"))
            o.tls_record = (size_t)atoi(v);
        else if (ARG("--count"))
            o.count = strtoull(v, NULL, 10);
        else if (ARG("--dc-idle-close-ms"))
            o.dc_idle_close_ms = atoi(v);
        else
            usage();
#undef ARG
    }
    if (!o.proxy_port || !o.dc_port || !secret || o.conns < 1 || o.msg_len < 24 ||
        o.msg_len > 512 || o.window < 1 || o.tls_record < 1 ||
        o.tls_record > FAKETLS_MAX_PAYLOAD)
        usage();
    char err[256];
    if (secret_parse("bench", secret, &o.secret, err, sizeof err) != 0)
        die(err);
    if (strcmp(client, "plain") == 0)
        o.ck = CK_PLAIN, o.tag = OBFS2_TAG_ABRIDGED;
    else if (strcmp(client, "dd") == 0)
        o.ck = CK_DD, o.tag = OBFS2_TAG_PADDED;
    else if (strcmp(client, "tls") == 0)
        o.ck = CK_TLS, o.tag = OBFS2_TAG_PADDED;
    else
        usage();
    o.wl = (enum wl)99;
    for (unsigned i = 0; i < sizeof wl_names / sizeof *wl_names; i++)
        if (strcmp(wl, wl_names[i]) == 0)
            o.wl = (enum wl)i;
    if ((int)o.wl == 99)
        usage();

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if ((rlim_t)o.conns * 2 + 32 > rl.rlim_cur) {
            fprintf(stderr, "bench_load: %d connections need %d descriptors, limit %llu\n",
                    o.conns, o.conns * 2 + 32, (unsigned long long)rl.rlim_cur);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    /* --dc-netns: the sink's socket is made in that namespace (a socket stays in the namespace
     * it was created in), then this process goes back to its own for the clients */
    int home_ns = -1;
    if (o.dc_netns) {
        int ns = open(o.dc_netns, O_RDONLY | O_CLOEXEC);
        home_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (ns < 0 || home_ns < 0 || setns(ns, CLONE_NEWNET) != 0)
            die("cannot enter --dc-netns");
        close(ns);
    }
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (home_ns >= 0 && (setns(home_ns, CLONE_NEWNET) != 0 || close(home_ns) != 0))
        die("cannot return from --dc-netns");
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.dc_port)};
    la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (o.dc_addr && inet_pton(AF_INET, o.dc_addr, &la.sin_addr) != 1)
        die("bad --dc-addr");
    if (bind(listen_fd, (struct sockaddr *)&la, sizeof la) != 0 || listen(listen_fd, 4096) != 0)
        die(strerror(errno));
    epfd = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &lev);

    if (o.pre_wait > 0) { /* serve the DC port while the proxy starts (dc-pool runs) */
        uint64_t until = now_ns() + (uint64_t)(o.pre_wait * 1e9);
        while (now_ns() < until)
            run_events(10);
    }
    if (o.proxy_pidfile) {
        FILE *f = fopen(o.proxy_pidfile, "r");
        if (!f || fscanf(f, "%d", &o.proxy_pid) != 1)
            die("cannot read the proxy pidfile");
        fclose(f);
    }
    int pid = o.proxy_pid;
    struct mem m_base, m_ready, m_end;
    proxy_mem(pid, &m_base);

    clients = calloc((size_t)o.conns, sizeof *clients);
    if (!clients)
        die("out of memory");
    struct proxy_snap s0, s1;
    double load0 = proxy_cpu(getpid()), load1;
    uint64_t t0, t1;

    if (o.wl == WL_HS && o.burst > 0) {
        /* --burst N: N handshakes started at once, all finished (or 10 s) before the next
         * burst, --gap-ms between bursts (a pool gets the time to refill), --bursts times */
        o.conns = o.concurrency = o.burst;
        free(clients);
        clients = calloc((size_t)o.conns, sizeof *clients);
        phase_run = 1;
        proxy_snap(pid, &s0);
        t0 = now_ns();
        for (int b = 0; b < (o.bursts > 0 ? o.bursts : 1); b++) {
            uint64_t started = hs_done;
            for (int i = 0; i < o.conns; i++)
                client_start(i);
            uint64_t deadline = now_ns() + 10ull * 1000000000ull;
            while (clients_open > 0 && now_ns() < deadline) {
                run_events(5);
                hs_reap(0);
            }
            if (hs_done - started < (uint64_t)o.conns)
                note_error("burst: handshakes missing");
            int gap = o.gap_ms + (o.gap_jitter_ms > 0 ? rand() % (o.gap_jitter_ms + 1) : 0);
            uint64_t gap_end = now_ns() + (uint64_t)gap * 1000000ull;
            while (now_ns() < gap_end)
                run_events(1);
        }
        t1 = now_ns();
        proxy_snap(pid, &s1);
        proxy_mem(pid, &m_end);
        m_ready = m_end;
        phase_run = 0;
    } else if (o.wl == WL_HS) {
        /* keep --concurrency handshakes in flight for the whole window */
        o.conns = o.concurrency > 0 ? o.concurrency : 1;
        free(clients);
        clients = calloc((size_t)o.conns, sizeof *clients);
        phase_run = 1;
        proxy_snap(pid, &s0);
        t0 = now_ns();
        uint64_t until = t0 + (uint64_t)(o.seconds * 1e9);
        while (now_ns() < until && !count_done()) {
            hs_reap(!o.count || (uint64_t)clients_started < o.count);
            run_events(5);
        }
        t1 = now_ns();
        proxy_snap(pid, &s1);
        proxy_mem(pid, &m_end);
        m_ready = m_end;
        phase_run = 0;
    } else {
        /* set up: every client through the handshake, every DC side through its header */
        uint64_t deadline = now_ns() + 120ull * 1000000000ull;
        int next = 0;
        while ((clients_ready < o.conns || dcs_ready < o.conns) && now_ns() < deadline) {
            while (next < o.conns && clients_started - clients_ready < o.concurrency)
                client_start(next++);
            run_events(5);
            if (errors)
                break;
        }
        if (clients_ready < o.conns || dcs_ready < o.conns) {
            fprintf(stderr, "bench_load: only %d clients / %d DC sides ready of %d\n",
                    clients_ready, dcs_ready, o.conns);
            note_error("setup incomplete");
        }
        /* let the proxy settle (its buffers from the handshake given back; after
         * CONN_PARK_IDLE seconds its idle connections' cipher contexts too) */
        uint64_t settle = now_ns() + (uint64_t)((o.settle > 0 ? o.settle : 0.3) * 1e9);
        while (now_ns() < settle)
            run_events(10);
        proxy_mem(pid, &m_ready);
        proxy_snap(pid, &s0);
        load0 = proxy_cpu(getpid());
        phase_run = 1;
        t0 = now_ns();
        for (size_t fd = 0; fd < eps_cap; fd++)
            if (eps[fd])
                update_watch(eps[fd]);
        if (o.wl == WL_SMALL)
            for (int i = 0; i < o.conns; i++)
                for (int w = 0; w < o.window && clients[i]; w++) {
                    small_send(clients[i], now_ns());
                    update_watch(clients[i]);
                }
        uint64_t until = t0 + (uint64_t)(o.seconds * 1e9), mem_at = t0 + (until - t0) * 3 / 4;
        int mem_done = 0;
        while (now_ns() < until && !count_done()) {
            if (o.wl == WL_TRICKLE) {
                uint64_t t = now_ns();
                for (int i = 0; i < o.conns; i++) {
                    struct ep *e = clients[i];
                    if (e && e->st == S_READY && t >= e->next_send_ns) {
                        if (e->next_send_ns == 0) /* spread the first sends over one interval */
                            e->next_send_ns = t + (uint64_t)(rand() % (o.interval_ms + 1)) *
                                                      1000000ull;
                        else {
                            small_send(e, t);
                            e->next_send_ns = t + (uint64_t)o.interval_ms * 1000000ull;
                            update_watch(e);
                        }
                    }
                }
            }
            run_events(o.wl == WL_TRICKLE ? 2 : 20);
            if (!mem_done && now_ns() >= mem_at) {
                proxy_mem(pid, &m_end);
                mem_done = 1;
            }
        }
        phase_run = 0;
        t1 = now_ns();
        proxy_snap(pid, &s1);
        if (!mem_done)
            proxy_mem(pid, &m_end);
    }
    load1 = proxy_cpu(getpid());

    double secs = (double)(t1 - t0) / 1e9;
    double mb_down = (double)bytes_down / 1e6, mb_up = (double)bytes_up / 1e6;
    double cpu = (pid > 0 && s0.cpu_s >= 0 && s1.cpu_s >= 0) ? s1.cpu_s - s0.cpu_s : 0;
    double gb = (mb_down + mb_up) / 1000.0;
    unsigned long long rd = s1.reads - s0.reads, wr = s1.writes - s0.writes,
                       sp = s1.spliced - s0.spliced;
    if (!s0.have_stats || !s1.have_stats)
        rd = wr = sp = 0;
    if (lat_n) /* lat is NULL when nothing was timed: qsort must not see it (UBSan) */
        qsort(lat, lat_n, sizeof *lat, cmp_u64);
    if (conn_lat_n)
        qsort(conn_lat, conn_lat_n, sizeof *conn_lat, cmp_u64);
    double hps = o.wl == WL_HS ? (double)hs_done / secs : 0;
    if (o.lat_file) {
        FILE *f = fopen(o.lat_file, "w");
        if (f) {
            fprintf(f, "%.1f %.1f %.1f %zu\n", pct_us(lat, lat_n, 0.5), pct_us(lat, lat_n, 0.99),
                    pct_us(lat, lat_n, 0.999), lat_n);
            fclose(f);
        }
    }
    if (echo_lat_n)
        qsort(echo_lat, echo_lat_n, sizeof *echo_lat, cmp_u64);
    if (o.hs_file) {
        FILE *f = fopen(o.hs_file, "w");
        if (f) {
            /* connect -> DC p50 p90 p99 max, connect -> echo p50 p90 p99 max, counts (us) */
            fprintf(f, "%.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %zu %zu\n",
                    pct_us(conn_lat, conn_lat_n, 0.5), pct_us(conn_lat, conn_lat_n, 0.9),
                    pct_us(conn_lat, conn_lat_n, 0.99), pct_us(conn_lat, conn_lat_n, 1),
                    pct_us(echo_lat, echo_lat_n, 0.5), pct_us(echo_lat, echo_lat_n, 0.9),
                    pct_us(echo_lat, echo_lat_n, 0.99), pct_us(echo_lat, echo_lat_n, 1),
                    conn_lat_n, echo_lat_n);
            fclose(f);
        }
    }
    char row[1024];
    snprintf(row, sizeof row,
             "%s,%s,%s,%d,%.3f,%llu,%llu,%.1f,%.1f,%llu,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%.3f,%llu,"
             "%llu,%llu,%.2f,%.2f,%ld,%ld,%ld,%ld,%ld,%ld,%.3f,%llu",
             o.label, client, wl_names[o.wl], o.wl == WL_HS ? o.concurrency : o.conns, secs,
             (unsigned long long)bytes_down, (unsigned long long)bytes_up, mb_down / secs,
             mb_up / secs, (unsigned long long)msgs, pct_us(lat, lat_n, 0.5),
             pct_us(lat, lat_n, 0.99), pct_us(conn_lat, conn_lat_n, 0.5),
             pct_us(conn_lat, conn_lat_n, 0.99), hps, cpu, gb > 0 ? cpu / gb : 0, rd, wr, sp,
             mb_down + mb_up > 0 ? (double)rd / (mb_down + mb_up) : 0,
             mb_down + mb_up > 0 ? (double)wr / (mb_down + mb_up) : 0, m_base.rss_kb,
             m_ready.rss_kb, m_end.rss_kb, m_end.heap_kb, m_end.stack_kb, m_end.anon_kb,
             load1 - load0, (unsigned long long)errors);
    if (!o.quiet)
        printf("%s\n%s\n", csv_header, row);
    if (o.csv) {
        struct stat sb;
        int fresh = stat(o.csv, &sb) != 0 || sb.st_size == 0;
        FILE *f = fopen(o.csv, "a");
        if (!f)
            die("cannot open the CSV");
        if (fresh)
            fprintf(f, "%s\n", csv_header);
        fprintf(f, "%s\n", row);
        fclose(f);
    }
    for (size_t fd = 0; fd < eps_cap; fd++)
        if (eps[fd])
            ep_free(eps[fd]);
    close(listen_fd);
    close(epfd);
    crypto_thread_cleanup();
    return errors ? 1 : 0;
}
