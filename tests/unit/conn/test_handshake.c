/* test_handshake.c: the handshake room through the state machine's entry points, on loopback
 * sockets: every client kind, every rejection, split reads; the verdict of each is read from the
 * connection's state and the worker's close and kind counters. */
#include "conn/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "core/replay.h"
#include "proto/obfs2.h"
#include "config/reload.h"
#include "users/users.h"
#include "../tools/tlsclient.h"
#include "testutil.h"

#define KEY_HEX "00112233445566778899aabbccddeeff"
#define KEY2_HEX "ffeeddccbbaa99887766554433221100" /* a dd-only secret */
#define DOMAIN "example.com"
#define DOMAIN_HEX "6578616d706c652e636f6d"

/* One worker in this thread: its listener, a fake DC and a fronting target, all on loopback. */
struct fx {
    char conf_path[64];
    struct reload rl;
    struct users users;
    struct gen *g;
    struct replay *replay;
    struct worker w;
    struct proxy_worker pw;
    int dc_lfd, mask_lfd;   /* the fake DC's and the fronted site's listeners */
    int port;               /* the proxy's listener */
    uint8_t key[16];
};

static struct fx F;

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64))
        return -1;
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Starts the worker on a config made of the common lines plus extra (NULL: none). */
static void fx_start(const char *extra)
{
    struct fx *f = &F;
    memset(f, 0, sizeof *f);
    unhex(KEY_HEX, f->key);
    int dc_port, mask_port;
    f->dc_lfd = listen_any(&dc_port);
    f->mask_lfd = listen_any(&mask_port);
    assert_true(f->dc_lfd >= 0 && f->mask_lfd >= 0);
    snprintf(f->conf_path, sizeof f->conf_path, "/tmp/test_handshake.%d.conf", (int)getpid());
    FILE *cf = fopen(f->conf_path, "w");
    assert_non_null(cf);
    fprintf(cf,
            "listen = 127.0.0.1:1\nworkers = 1\nlog-level = error\ndc-builtin = off\n"
            "dc = 2 127.0.0.1:%d\ndefault-dc = 2\ndc-pool = 0\nmask-host = 127.0.0.1\n"
            "mask-port = %d\nsecret = plain:" KEY_HEX "\nsecret = padded:dd" KEY_HEX "\n"
            "secret = tls:ee" KEY_HEX DOMAIN_HEX "\nsecret = only-dd:dd" KEY2_HEX "\nstate-file = /tmp/test_handshake.%d.state\n"
            "%s\n",
            dc_port, mask_port, (int)getpid(), extra ? extra : "");
    fclose(cf);
    assert_int_equal(users_init(&f->users, 1), 0);
    reload_init(&f->rl, &f->users, f->conf_path, 0, NULL);
    static struct config_errors e;
    memset(&e, 0, sizeof e);
    f->g = reload_build(&f->rl, NULL, &e);
    if (!f->g)
        fail_msg("config: %s", e.count ? e.msg[0] : "?");
    f->g->users = &f->users;
    assert_int_equal(gen_map_users(f->g), 0);
    reload_commit(&f->rl, f->g);
    struct replay_config rc = {.max_entries = 1024, .window = 0};
    f->replay = replay_new(&rc);
    assert_non_null(f->replay);
    assert_int_equal(worker_init(&f->w, 0, NULL, NULL, NULL, NULL), 0);
    assert_int_equal(proxy_worker_init(&f->pw, &f->w, f->g, &f->users, f->replay, 1), 0);
    int lfd = listen_any(&f->port);
    assert_true(lfd >= 0);
    assert_int_equal(worker_add_listener(&f->w, lfd), 0);
}

static void fx_stop(void)
{
    struct fx *f = &F;
    proxy_on_stop(&f->w);
    proxy_worker_destroy(&f->pw);
    worker_join(&f->w);
    gen_unref(f->g);
    replay_free(f->replay);
    users_destroy(&f->users);
    close(f->dc_lfd);
    close(f->mask_lfd);
    unlink(f->conf_path);
    char p[64];
    snprintf(p, sizeof p, "/tmp/test_handshake.%d.state", (int)getpid());
    unlink(p);
}

/* Runs the worker's loop without blocking for about ms milliseconds. */
static void spin(int ms)
{
    for (int i = 0; i < ms; i++) {
        ev_run(F.w.loop, EVRUN_NOWAIT);
        usleep(1000);
    }
}

/* Connects a client to the proxy and lets the worker accept it. */
static int client(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)F.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int i = 0; i < 200 && !F.pw.live; i++)
        spin(1);
    assert_non_null(F.pw.live);
    return fd;
}

/* Sends n bytes in pieces of `piece` bytes (0: all at once), letting the worker read each. */
static void send_split(int fd, const uint8_t *p, size_t n, size_t piece)
{
    if (!piece)
        piece = n;
    for (size_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;
        assert_int_equal(send(fd, p + off, k, MSG_NOSIGNAL), (ssize_t)k);
        spin(2);
    }
}

static int live_state(void)
{
    return F.pw.live ? F.pw.live->state : CS_FREE;
}

static uint64_t closed(enum conn_reason r)
{
    return STAT_GET(&F.pw.stats.closed[r]);
}

/* Accepts what the proxy dialed on listener lfd (waiting up to ~1 s). */
static int accept_upstream(int lfd)
{
    for (int i = 0; i < 500; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            int fl = fcntl(fd, F_GETFL);
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            struct timeval tv = {.tv_sec = 2};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            return fd;
        }
        spin(2);
    }
    return -1;
}

/* Reads exactly n bytes from a blocking socket while the worker keeps running. */
static int read_full(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    for (int i = 0; got < n && i < 1000; i++) {
        spin(1);
        ssize_t r = recv(fd, p + got, n - got, MSG_DONTWAIT);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0)
            return -1;
    }
    return got == n ? 0 : -1;
}

/* A client's obfuscated2 header for tag and dc, keyed with key (NULL: no secret). enc is left
 * keyed for what follows. */
static void client_header(uint32_t tag, int16_t dc, const uint8_t *key, uint8_t wire[64],
                          struct crypto_ctr **enc)
{
    uint8_t plain[OBFS2_HDR_LEN];
    struct obfs2_keys k;
    assert_int_equal(obfs2_build(plain, tag, dc, NULL), 0);
    obfs2_derive(plain, key, &k);
    *enc = crypto_ctr_new();
    assert_non_null(*enc);
    assert_int_equal(crypto_ctr_init(*enc, k.fwd.key, k.fwd.iv), 0);
    obfs2_seal(plain, *enc, wire);
}

/* The DC side: reads the proxy's 64-byte header on fd and checks it carries tag and dc; then
 * checks the next bytes decrypt to want (the client's first payload). */
static void dc_expect(int fd, uint32_t tag, int16_t dc, const uint8_t *want, size_t n)
{
    uint8_t hdr[OBFS2_HDR_LEN], plain[OBFS2_HDR_LEN];
    assert_int_equal(read_full(fd, hdr, sizeof hdr), 0);
    struct obfs2_keys k;
    obfs2_derive(hdr, NULL, &k);
    struct crypto_ctr *dec = crypto_ctr_new();
    assert_int_equal(crypto_ctr_init(dec, k.fwd.key, k.fwd.iv), 0);
    crypto_ctr_apply(dec, hdr, plain, sizeof hdr);
    /* tag and dc are little-endian on the wire (s390x reads them big-endian with memcpy) */
    uint32_t t = (uint32_t)plain[56] | (uint32_t)plain[57] << 8 | (uint32_t)plain[58] << 16 |
                 (uint32_t)plain[59] << 24;
    int16_t d = (int16_t)(plain[60] | plain[61] << 8);
    assert_int_equal(t, tag);
    assert_int_equal(d, dc);
    if (n) {
        uint8_t buf[256];
        assert_true(n <= sizeof buf);
        assert_int_equal(read_full(fd, buf, n), 0);
        crypto_ctr_apply(dec, buf, buf, n);
        assert_memory_equal(buf, want, n);
    }
    crypto_ctr_free(dec);
}

static const uint8_t PAYLOAD[] = "first request of the client";

/* The proxy dialed the DC for client c: its header carries tag and DC 2, the client's first
 * payload follows, the connection relays as kind (counted once); both ends then close and the
 * connection is gone. */
static void expect_relayed(int c, uint32_t tag, enum conn_kind kind)
{
    int dc = accept_upstream(F.dc_lfd);
    assert_true(dc >= 0);
    dc_expect(dc, tag, 2, PAYLOAD, sizeof PAYLOAD);
    assert_int_equal(live_state(), CS_RELAY);
    assert_int_equal(STAT_GET(&F.pw.stats.kind_total[kind]), 1);
    close(c);
    close(dc);
    spin(5);
    assert_null(F.pw.live);
}

/* An obfuscated2 client (tag, secret key) sends its header and a payload in pieces; the proxy
 * must reach the DC with the same tag and dc and relay the payload. */
static void obfs2_client(uint32_t tag, size_t piece, enum conn_kind kind)
{
    int c = client();
    struct crypto_ctr *enc;
    uint8_t wire[OBFS2_HDR_LEN + sizeof PAYLOAD];
    client_header(tag, 2, F.key, wire, &enc);
    crypto_ctr_apply(enc, PAYLOAD, wire + OBFS2_HDR_LEN, sizeof PAYLOAD);
    send_split(c, wire, sizeof wire, piece);
    expect_relayed(c, tag, kind);
    assert_int_equal(STAT_GET(&F.pw.stats.handshakes), 1);
    assert_int_equal(STAT_GET(&F.pw.stats.rejected), 0);
    crypto_ctr_free(enc);
}

static void test_abridged(void **s)
{
    (void)s;
    fx_start(NULL);
    obfs2_client(OBFS2_TAG_ABRIDGED, 0, CK_OBFS2);
    fx_stop();
}

static void test_intermediate_split_bytewise(void **s)
{
    (void)s;
    fx_start(NULL);
    obfs2_client(OBFS2_TAG_INTERMEDIATE, 1, CK_OBFS2);
    fx_stop();
}

static void test_padded(void **s)
{
    (void)s;
    fx_start(NULL);
    obfs2_client(OBFS2_TAG_PADDED, 7, CK_DD);
    fx_stop();
}

/* A FakeTLS client: hello (split in pieces), the proxy's signed answer, then its header and a
 * payload inside records. */
static void tls_client(size_t piece, int cut)
{
    int c = client();
    uint8_t hello[TLSC_HELLO_MAX], cuth[TLSC_HELLO_MAX + 64];
    size_t n = tlsc_build_hello(hello, sizeof hello, F.key, DOMAIN, (uint32_t)time(NULL));
    assert_true(n > 0);
    uint8_t random[32];
    memcpy(random, hello + TLSC_RANDOM_OFF, 32);
    if (cut) {
        n = tlsc_cut_hello(hello, n, cut, cuth, sizeof cuth);
        assert_true(n > 0);
        send_split(c, cuth, n, piece);
    } else {
        send_split(c, hello, n, piece);
    }
    assert_int_equal(live_state(), CS_TLS_HEADER);
    /* The answer: ServerHello, CCS, one application-data record, signed with our key. */
    uint8_t ans[8192];
    size_t got = 0;
    for (int i = 0; i < 300; i++) {
        spin(1);
        ssize_t r = recv(c, ans + got, sizeof ans - got, MSG_DONTWAIT);
        if (r > 0)
            got += (size_t)r;
        if (got >= 5) {
            size_t sh = 5 + ((size_t)ans[3] << 8 | ans[4]);
            if (got >= sh + 11 && got == sh + 11 + ((size_t)ans[sh + 9] << 8 | ans[sh + 10]))
                break;
        }
    }
    char why[96];
    if (tlsc_check_server_hello(ans, got, F.key, random, why, sizeof why))
        fail_msg("server hello: %s", why);
    struct crypto_ctr *enc;
    uint8_t inner[OBFS2_HDR_LEN + sizeof PAYLOAD], framed[512];
    client_header(OBFS2_TAG_PADDED, 2, F.key, inner, &enc);
    crypto_ctr_apply(enc, PAYLOAD, inner + OBFS2_HDR_LEN, sizeof PAYLOAD);
    bool ccs = true;
    size_t fl = tlsc_frame(inner, sizeof inner, &ccs, framed);
    send_split(c, framed, fl, piece);
    expect_relayed(c, OBFS2_TAG_PADDED, CK_TLS);
    assert_int_equal(STAT_GET(&F.pw.stats.tls_handshakes), 1);
    crypto_ctr_free(enc);
}

static void test_faketls(void **s)
{
    (void)s;
    fx_start(NULL);
    tls_client(0, 0);
    fx_stop();
}

static void test_faketls_split_and_cut(void **s)
{
    (void)s;
    fx_start(NULL);
    tls_client(13, 3); /* the hello in three records, everything in 13-byte pieces */
    fx_stop();
}

/* A rejected client's bytes reach the fronted site verbatim, and nothing goes to a DC. */
static void expect_fronted(int c, const uint8_t *sent, size_t n)
{
    int m = accept_upstream(F.mask_lfd);
    assert_true(m >= 0);
    uint8_t buf[TLSC_HELLO_MAX + 64];
    assert_true(n <= sizeof buf);
    assert_int_equal(read_full(m, buf, n), 0);
    assert_memory_equal(buf, sent, n);
    assert_int_equal(STAT_GET(&F.pw.stats.masked), 1);
    assert_int_equal(accept(F.dc_lfd, NULL, NULL), -1);
    close(m);
    close(c);
    spin(5);
}

static void test_bad_header_fronted(void **s)
{
    (void)s;
    fx_start(NULL);
    int c = client();
    uint8_t junk[OBFS2_HDR_LEN];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    send_split(c, junk, sizeof junk, 16);
    assert_int_equal(STAT_GET(&F.pw.stats.rejected), 1);
    assert_int_equal(STAT_GET(&F.pw.stats.handshakes), 0);
    expect_fronted(c, junk, sizeof junk);
    fx_stop();
}

static void test_bad_header_held_without_mask(void **s)
{
    (void)s;
    fx_start("mask = off");
    int c = client();
    uint8_t junk[OBFS2_HDR_LEN];
    memset(junk, 0x5a, sizeof junk);
    send_split(c, junk, sizeof junk, 0);
    assert_int_equal(live_state(), CS_HOLD);
    assert_int_equal(STAT_GET(&F.pw.stats.rejected), 1);
    close(c);
    spin(5);
    assert_null(F.pw.live);
    fx_stop();
}

/* A first padded client is served; a second one (header w2) is refused: fronted, with
 * `counter` at 1 and the handshake count still 1. */
static void second_client_refused(const uint8_t *w1, const uint8_t *w2, stat_t *counter)
{
    int c1 = client();
    send_split(c1, w1, OBFS2_HDR_LEN, 0);
    int dc = accept_upstream(F.dc_lfd);
    assert_true(dc >= 0);
    int c2 = client();
    send_split(c2, w2, OBFS2_HDR_LEN, 0);
    assert_int_equal(STAT_GET(counter), 1);
    assert_int_equal(STAT_GET(&F.pw.stats.handshakes), 1);
    expect_fronted(c2, w2, OBFS2_HDR_LEN);
    close(c1);
    close(dc);
    spin(5);
}

static void test_replayed_header_rejected(void **s)
{
    (void)s;
    fx_start(NULL);
    struct crypto_ctr *enc;
    uint8_t wire[OBFS2_HDR_LEN];
    client_header(OBFS2_TAG_PADDED, 2, F.key, wire, &enc);
    second_client_refused(wire, wire, &F.pw.stats.replays);
    crypto_ctr_free(enc);
    fx_stop();
}

/* A dd secret serves padded clients only: an abridged header keyed with it is a stranger's. */
static void test_kind_not_allowed(void **s)
{
    (void)s;
    fx_start(NULL);
    int c = client();
    struct crypto_ctr *enc;
    uint8_t wire[OBFS2_HDR_LEN], key2[16];
    unhex(KEY2_HEX, key2);
    client_header(OBFS2_TAG_ABRIDGED, 2, key2, wire, &enc);
    send_split(c, wire, sizeof wire, 0);
    assert_int_equal(STAT_GET(&F.pw.stats.handshakes), 0);
    assert_int_equal(STAT_GET(&F.pw.stats.rejected), 1);
    expect_fronted(c, wire, sizeof wire);
    crypto_ctr_free(enc);
    fx_stop();
}

static void test_faketls_wrong_key_fronted(void **s)
{
    (void)s;
    fx_start(NULL);
    int c = client();
    uint8_t other[16], hello[TLSC_HELLO_MAX];
    memset(other, 0x42, sizeof other);
    size_t n = tlsc_build_hello(hello, sizeof hello, other, DOMAIN, (uint32_t)time(NULL));
    send_split(c, hello, n, 100);
    assert_int_equal(STAT_GET(&F.pw.stats.tls_handshakes), 0);
    assert_int_equal(STAT_GET(&F.pw.stats.rejected), 1);
    expect_fronted(c, hello, n);
    fx_stop();
}

static void test_unknown_sni_dropped(void **s)
{
    (void)s;
    fx_start("unknown-sni = drop");
    int c = client();
    uint8_t hello[TLSC_HELLO_MAX];
    size_t n = tlsc_build_hello(hello, sizeof hello, F.key, "other.example.org",
                                (uint32_t)time(NULL));
    send_split(c, hello, n, 0);
    spin(5);
    assert_null(F.pw.live);
    assert_int_equal(closed(CR_UNKNOWN_SNI), 1);
    assert_int_equal(STAT_GET(&F.pw.stats.unknown_sni), 1);
    close(c);
    fx_stop();
}

static void test_early_eof(void **s)
{
    (void)s;
    fx_start(NULL);
    int c = client();
    send_split(c, (const uint8_t *)"\x12\x34\x56", 3, 0);
    close(c);
    spin(10);
    assert_null(F.pw.live);
    assert_int_equal(closed(CR_CLIENT_EARLY_EOF), 1);
    fx_stop();
}

static void test_handshake_timeout(void **s)
{
    (void)s;
    fx_start("mask = off\nhandshake-timeout = 100ms\nprobe-wait = 100ms");
    int c = client();
    send_split(c, (const uint8_t *)"\x01\x02", 2, 0);
    spin(300);
    /* with nowhere to front to, a client short of a header is closed at the deadline */
    assert_null(F.pw.live);
    assert_int_equal(closed(CR_HANDSHAKE_TIMEOUT), 1);
    close(c);
    spin(5);
    fx_stop();
}

static void test_user_limit_refused(void **s)
{
    (void)s;
    fx_start("limit = plain conns=1"); /* a dd header with this key proves `plain` first */
    struct crypto_ctr *e1, *e2;
    uint8_t w1[OBFS2_HDR_LEN], w2[OBFS2_HDR_LEN];
    client_header(OBFS2_TAG_PADDED, 2, F.key, w1, &e1);
    client_header(OBFS2_TAG_PADDED, 2, F.key, w2, &e2);
    second_client_refused(w1, w2, &F.pw.stats.user_refused);
    crypto_ctr_free(e1);
    crypto_ctr_free(e2);
    fx_stop();
}

static void test_acl_refused_at_accept(void **s)
{
    (void)s;
    fx_start("deny = 127.0.0.0/8");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)F.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    spin(10);
    assert_null(F.pw.live);
    assert_int_equal(STAT_GET(&F.pw.stats.acl_denied), 1);
    char b;
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    assert_true(recv(fd, &b, 1, 0) <= 0); /* closed, nothing said */
    close(fd);
    fx_stop();
}

static void test_proxy_header(void **s)
{
    (void)s;
    fx_start("proxy-protocol = on\nproxy-protocol-from = 127.0.0.1/32");
    int c = client();
    assert_int_equal(live_state(), CS_PROXY_HDR);
    const char *pp = "PROXY TCP4 192.0.2.7 198.51.100.1 40000 443\r\n";
    send_split(c, (const uint8_t *)pp, strlen(pp), 5);
    assert_int_equal(live_state(), CS_HEADER);
    char peer[SOCK_ADDR_STRLEN];
    sock_addr_format(&F.pw.live->peer, peer, sizeof peer);
    assert_string_equal(peer, "192.0.2.7:40000");
    struct crypto_ctr *enc;
    uint8_t wire[OBFS2_HDR_LEN];
    client_header(OBFS2_TAG_PADDED, 2, F.key, wire, &enc);
    send_split(c, wire, sizeof wire, 0);
    int dc = accept_upstream(F.dc_lfd);
    assert_true(dc >= 0);
    dc_expect(dc, OBFS2_TAG_PADDED, 2, NULL, 0);
    crypto_ctr_free(enc);
    close(c);
    close(dc);
    spin(5);
    fx_stop();
}

static void test_bad_proxy_header_closed(void **s)
{
    (void)s;
    fx_start("proxy-protocol = on\nproxy-protocol-from = 127.0.0.1/32");
    int c = client();
    const char *pp = "PROXY NONSENSE\r\n";
    send_split(c, (const uint8_t *)pp, strlen(pp), 0);
    spin(5);
    assert_null(F.pw.live);
    assert_int_equal(STAT_GET(&F.pw.stats.pp_bad), 1);
    assert_int_equal(STAT_GET(&F.pw.stats.masked), 0); /* the balancer is never fronted */
    close(c);
    fx_stop();
}

static void test_max_handshakes_evicts_oldest(void **s)
{
    (void)s;
    fx_start("max-handshakes = 2");
    int c1 = client(), c2 = client();
    int c3 = client(); /* over the cap: the oldest unfinished handshake (c1) goes */
    spin(5);
    assert_int_equal(STAT_GET(&F.pw.stats.handshake_cap), 1);
    assert_int_equal(closed(CR_HANDSHAKE_CAP), 1);
    char b;
    assert_true(recv(c1, &b, 1, MSG_DONTWAIT) == 0 || errno == ECONNRESET);
    assert_int_equal(STAT_GET(&F.pw.stats.active), 2);
    close(c1);
    close(c2);
    close(c3);
    spin(5);
    fx_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abridged),
        cmocka_unit_test(test_intermediate_split_bytewise),
        cmocka_unit_test(test_padded),
        cmocka_unit_test(test_faketls),
        cmocka_unit_test(test_faketls_split_and_cut),
        cmocka_unit_test(test_bad_header_fronted),
        cmocka_unit_test(test_bad_header_held_without_mask),
        cmocka_unit_test(test_replayed_header_rejected),
        cmocka_unit_test(test_kind_not_allowed),
        cmocka_unit_test(test_faketls_wrong_key_fronted),
        cmocka_unit_test(test_unknown_sni_dropped),
        cmocka_unit_test(test_early_eof),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_user_limit_refused),
        cmocka_unit_test(test_acl_refused_at_accept),
        cmocka_unit_test(test_proxy_header),
        cmocka_unit_test(test_bad_proxy_header_closed),
        cmocka_unit_test(test_max_handshakes_evicts_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
