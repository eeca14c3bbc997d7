/* test_hs_steps.c: the handshake steps, called one by one on a socket pair, and their verdicts; how the worker takes a posted generation. */
#include "conn/conn_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../tools/tlsclient.h"

#define K1 "00112233445566778899aabbccddeef1"
#define K2 "00112233445566778899aabbccddeef2"

/* One worker (never run: the tests call the steps themselves), a generation, a listening
 * loopback socket standing for DC 2, and the client's end of the connection under test. */
struct fx {
    char path[64];
    struct users users;
    struct reload reload;
    struct gen *g;
    struct worker w;
    struct proxy_worker pw;
    int dc_listen;
    int client; /* the test's end of the socket pair */
    struct conn *c;
};

/* secrets: the generation's secret lines (NULL: secret a, plain); extra: more lines. */
static struct fx *fx_new(const char *secrets, const char *extra)
{
    struct fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->path, sizeof f->path, "/tmp/test_hs_steps.%d.conf", (int)getpid());
    f->dc_listen = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->dc_listen >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(f->dc_listen, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->dc_listen, 8), 0);
    assert_int_equal(getsockname(f->dc_listen, (struct sockaddr *)&a, &al), 0);
    FILE *cf = fopen(f->path, "w");
    assert_non_null(cf);
    fprintf(cf,
            "listen = 127.0.0.1:9443\nmask = off\n%s"
            "dc-builtin = off\ndc = 2 127.0.0.1:%d\ndc-pool = 0\n%s",
            secrets ? secrets : "secret = a:" K1 "\n", ntohs(a.sin_port), extra);
    fclose(cf);
    assert_int_equal(users_init(&f->users, 2), 0);
    reload_init(&f->reload, &f->users, f->path, 0, NULL);
    static struct config_errors e;
    memset(&e, 0, sizeof e);
    f->g = reload_build(&f->reload, NULL, &e);
    if (!f->g)
        fail_msg("%s", e.msg[0]);
    reload_commit(&f->reload, f->g);
    assert_int_equal(worker_init(&f->w, 0, NULL, NULL, NULL, NULL), 0);
    assert_int_equal(proxy_worker_init(&f->pw, &f->w, f->g, &f->users, NULL, 1), 0);
    return f;
}

/* A connection accepted from 127.0.0.1 on a socket pair; f->client is the client's end. */
static struct conn *fx_accept(struct fx *f)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    f->client = sv[0];
    struct sock_addr peer;
    memset(&peer, 0, sizeof peer);
    peer.u.in4.sin_family = AF_INET;
    peer.u.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    peer.u.in4.sin_port = htons(40000);
    peer.len = sizeof peer.u.in4;
    f->w.on_accept(&f->w, sv[1], &peer); /* as the worker does (proxy_worker_init set it) */
    f->c = f->pw.live;
    assert_non_null(f->c);
    return f->c;
}

static void fx_send(struct fx *f, const void *p, size_t n)
{
    assert_int_equal(send(f->client, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Ends the connection under test (as the state machine would with verdict r). */
static void fx_close(struct fx *f, enum conn_reason r)
{
    if (f->c && f->c->state != CS_FREE)
        conn_close(f->c, r);
    f->c = NULL;
    close(f->client);
}

static void fx_free(struct fx *f)
{
    proxy_on_stop(&f->w);
    proxy_worker_destroy(&f->pw);
    worker_join(&f->w);
    gen_unref(f->g);
    users_destroy(&f->users);
    close(f->dc_listen);
    unlink(f->path);
    free(f);
}

/* A client's 64-byte obfuscated2 header for secret key (hex), tag and dc. */
static void client_header(const char *hex, uint32_t tag, int16_t dc, uint8_t wire[OBFS2_HDR_LEN])
{
    struct secret s;
    char err[128];
    assert_int_equal(secret_parse("t", hex, &s, err, sizeof err), 0);
    uint8_t plain[OBFS2_HDR_LEN];
    struct obfs2_keys k;
    struct crypto_ctr enc;
    memset(&enc, 0, sizeof enc);
    assert_int_equal(obfs2_build(plain, tag, dc, NULL), 0);
    obfs2_derive(plain, s.key, &k);
    assert_int_equal(crypto_ctr_init(&enc, k.fwd.key, k.fwd.iv), 0);
    obfs2_seal(plain, &enc, wire);
    crypto_ctr_wipe(&enc);
}

/* A valid header in two reads: the first one waits (HEADER), the second proves the secret and
 * goes on to CONNECTING toward DC 2 (the loopback listener). */
static void test_obfs2_split(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, "");
    struct conn *c = fx_accept(f);
    uint8_t h[OBFS2_HDR_LEN];
    client_header(K1, OBFS2_TAG_ABRIDGED, 2, h);
    fx_send(f, h, 30);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_HEADER);
    assert_int_equal(c->authed, 0);
    fx_send(f, h + 30, sizeof h - 30);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_CONNECTING);
    assert_int_equal(c->authed, 1);
    assert_int_equal(c->kind, CK_OBFS2);
    assert_int_equal(c->dc_id, 2);
    assert_int_equal(c->uid, (int32_t)f->g->uid[0]);
    assert_int_equal(STAT_GET(&f->pw.stats.handshakes), 1);
    fx_close(f, CR_SHUTDOWN);
    fx_free(f);
}

/* The padded tag (dd) is its own kind. */
static void test_obfs2_padded(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, "");
    struct conn *c = fx_accept(f);
    uint8_t h[OBFS2_HDR_LEN];
    client_header(K1, OBFS2_TAG_PADDED, 2, h);
    fx_send(f, h, sizeof h);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_CONNECTING);
    assert_int_equal(c->kind, CK_DD);
    fx_close(f, CR_SHUTDOWN);
    fx_free(f);
}

/* EOF before a whole header: the verdict is client-early-eof (the machine closes). */
static void test_early_eof(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, "");
    struct conn *c = fx_accept(f);
    fx_send(f, "\x01\x02\x03\x04", 4);
    assert_int_equal(hs_first_read(c), CR_NONE);
    shutdown(f->client, SHUT_WR);
    assert_int_equal(hs_first_read(c), CR_CLIENT_EARLY_EOF);
    assert_int_equal(c->state, CS_HEADER); /* a verdict, not a close */
    fx_close(f, CR_CLIENT_EARLY_EOF);
    assert_int_equal(STAT_GET(&f->pw.stats.closed[CR_CLIENT_EARLY_EOF]), 1);
    fx_free(f);
}

/* Nothing to front to (mask = off): an HTTP probe and a header no secret opens are held
 * (HOLD, no answer), read and discarded; their EOF is bad-header. */
static void test_rejected_held(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, "");
    struct conn *c = fx_accept(f);
    fx_send(f, "GET / HTTP/1.1\r\n", 16);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_HOLD);
    assert_int_equal(STAT_GET(&f->pw.stats.rejected), 1);
    fx_send(f, "Host: x\r\n\r\n", 11);
    assert_int_equal(front_hold_read(c), CR_NONE);
    shutdown(f->client, SHUT_WR);
    assert_int_equal(front_hold_read(c), CR_BAD_HEADER);
    fx_close(f, CR_BAD_HEADER);

    c = fx_accept(f);
    uint8_t h[OBFS2_HDR_LEN];
    client_header(K2, OBFS2_TAG_ABRIDGED, 2, h); /* a secret this proxy does not have */
    fx_send(f, h, sizeof h);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_HOLD);
    assert_int_equal(c->authed, 0);
    assert_int_equal(STAT_GET(&f->pw.stats.rejected), 2);
    fx_close(f, CR_BAD_HEADER);
    fx_free(f);
}

/* A TLS-only proxy (no plain, no dd): the first three bytes that are not a TLS record are
 * enough to reject. */
static void test_tls_only_rejects(void **state)
{
    (void)state;
    struct fx *f = fx_new("secret = t:ee" K2 "7777772e6578616d706c652e636f6d\n",
                          "allow-plain = off\nallow-dd = off\n");
    struct conn *c = fx_accept(f);
    uint8_t h[OBFS2_HDR_LEN];
    client_header(K1, OBFS2_TAG_ABRIDGED, 2, h);
    fx_send(f, h, sizeof h);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_HOLD);
    assert_int_equal(c->authed, 0);
    fx_close(f, CR_BAD_HEADER);
    fx_free(f);
}

/* proxy-protocol: a LOCAL header (a balancer's health check) is done; a bad one refused; a
 * v1 header split across reads names the client and moves on to HEADER. */
static void test_proxy_header(void **state)
{
    (void)state;
    struct fx *f = fx_new(NULL, "proxy-protocol = on\n");
    struct conn *c = fx_accept(f);
    assert_int_equal(c->state, CS_PROXY_HDR);
    static const uint8_t local[16] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51,
                                      0x55, 0x49, 0x54, 0x0a, 0x20, 0x00, 0x00, 0x00};
    fx_send(f, local, sizeof local);
    assert_int_equal(hs_proxy_read(c), CR_DONE);
    assert_int_equal(STAT_GET(&f->pw.stats.pp_local), 1);
    fx_close(f, CR_DONE);

    c = fx_accept(f);
    fx_send(f, "HELLO there\r\n", 13);
    assert_int_equal(hs_proxy_read(c), CR_REFUSED);
    assert_int_equal(STAT_GET(&f->pw.stats.pp_bad), 1);
    fx_close(f, CR_REFUSED);

    c = fx_accept(f);
    const char *v1 = "PROXY TCP4 192.0.2.7 127.0.0.1 5555 443\r\n";
    fx_send(f, v1, 10);
    assert_int_equal(hs_proxy_read(c), CR_NONE);
    assert_int_equal(c->state, CS_PROXY_HDR);
    uint8_t h[OBFS2_HDR_LEN];
    client_header(K1, OBFS2_TAG_ABRIDGED, 2, h);
    fx_send(f, v1 + 10, strlen(v1) - 10);
    fx_send(f, h, sizeof h); /* the client's bytes wait in the socket for HEADER */
    assert_int_equal(hs_proxy_read(c), CR_NONE);
    assert_int_equal(c->state, CS_HEADER);
    assert_int_equal(c->peer.u.in4.sin_addr.s_addr, inet_addr("192.0.2.7"));
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_CONNECTING);
    fx_close(f, CR_SHUTDOWN);
    fx_free(f);
}

#define EE_DOMAIN "www.example.com"
#define EE_SECRET "secret = t:ee" K2 "7777772e6578616d706c652e636f6d\n"

/* The 16-byte key of the ee secret above. */
static void ee_key(uint8_t key[16])
{
    struct secret s;
    char err[128];
    assert_int_equal(secret_parse("t", "ee" K2 "7777772e6578616d706c652e636f6d", &s, err,
                                  sizeof err),
                     0);
    memcpy(key, s.key, 16);
}

/* A valid hello in two reads: TLS_HELLO waits, then the answer goes out (a ServerHello signed
 * for this client) and the connection reads the header inside records (TLS_HEADER). */
static void test_tls_answered(void **state)
{
    (void)state;
    struct fx *f = fx_new(EE_SECRET, "");
    struct conn *c = fx_accept(f);
    uint8_t key[16], hello[TLSC_HELLO_MAX];
    ee_key(key);
    size_t n = tlsc_build_hello(hello, sizeof hello, key, EE_DOMAIN, (uint32_t)time(NULL));
    assert_true(n > 100);
    fx_send(f, hello, 100);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(c->state, CS_TLS_HELLO);
    fx_send(f, hello + 100, n - 100);
    assert_int_equal(hs_tls_hello_read(c), CR_NONE);
    assert_int_equal(c->state, CS_TLS_HEADER);
    assert_int_equal(c->authed, 1);
    assert_int_equal(c->tls, 1);
    assert_int_equal(STAT_GET(&f->pw.stats.tls_handshakes), 1);
    static uint8_t resp[16384];
    ssize_t r = recv(f->client, resp, sizeof resp, 0);
    assert_true(r > 0);
    char why[128];
    if (tlsc_check_server_hello(resp, (size_t)r, key, hello + TLSC_RANDOM_OFF, why, sizeof why))
        fail_msg("%s", why);
    /* a record that is not application data, after our answer: too late to front */
    fx_send(f, "\x15\x03\x03\x00\x02\x02\x28", 7);
    assert_int_equal(hs_tls_header_read(c, EV_READ), CR_CLIENT_PROTOCOL);
    fx_close(f, CR_CLIENT_PROTOCOL);
    fx_free(f);
}

/* A hello signed with another key is not answered: held (nothing to front to). */
static void test_tls_bad_hmac(void **state)
{
    (void)state;
    struct fx *f = fx_new(EE_SECRET, "");
    struct conn *c = fx_accept(f);
    uint8_t key[16], hello[TLSC_HELLO_MAX];
    ee_key(key);
    key[0] ^= 1;
    size_t n = tlsc_build_hello(hello, sizeof hello, key, EE_DOMAIN, (uint32_t)time(NULL));
    fx_send(f, hello, n);
    assert_int_equal(hs_first_read(c), CR_NONE); /* the first 64 bytes: a TLS record */
    assert_int_equal(c->state, CS_TLS_HELLO);
    assert_int_equal(hs_tls_hello_read(c), CR_NONE);
    assert_int_equal(c->state, CS_HOLD);
    assert_int_equal(c->authed, 0);
    uint8_t b;
    assert_int_equal(recv(f->client, &b, 1, 0), -1); /* no answer */
    fx_close(f, CR_BAD_HEADER);
    fx_free(f);
}

/* unknown-sni = reject: a hello naming none of our domains gets the alert, and the verdict
 * closes it. */
static void test_tls_unknown_sni(void **state)
{
    (void)state;
    struct fx *f = fx_new(EE_SECRET, "unknown-sni = reject\n");
    struct conn *c = fx_accept(f);
    uint8_t key[16], hello[TLSC_HELLO_MAX];
    ee_key(key);
    size_t n =
        tlsc_build_hello(hello, sizeof hello, key, "other.example.net", (uint32_t)time(NULL));
    fx_send(f, hello, n);
    assert_int_equal(hs_first_read(c), CR_NONE);
    assert_int_equal(hs_tls_hello_read(c), CR_UNKNOWN_SNI);
    uint8_t alert[7];
    assert_int_equal(recv(f->client, alert, sizeof alert, 0), 7);
    assert_memory_equal(alert, "\x15\x03\x03\x00\x02\x02\x70", 7);
    assert_int_equal(STAT_GET(&f->pw.stats.unknown_sni), 1);
    fx_close(f, CR_UNKNOWN_SNI);
    fx_free(f);
}

/* Rewrites the fixture's config with these secret lines (the DC line kept) and builds the
 * next generation from the running one. */
static struct gen *fx_reload(struct fx *f, const char *secrets)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(f->dc_listen, (struct sockaddr *)&a, &al), 0);
    FILE *cf = fopen(f->path, "w");
    assert_non_null(cf);
    fprintf(cf, "listen = 127.0.0.1:9443\nmask = off\n%sdc-builtin = off\ndc = 2 127.0.0.1:%d\n"
            "dc-pool = 0\n", secrets, ntohs(a.sin_port));
    fclose(cf);
    static struct config_errors e;
    memset(&e, 0, sizeof e);
    struct gen *g = reload_build(&f->reload, f->pw.gen, &e);
    if (!g)
        fail_msg("%s", e.msg[0]);
    reload_commit(&f->reload, g);
    return g;
}

/* A generation that removed nobody does not wake the worker: its next accept takes it first;
 * one that removed a user wakes it (the user's live connections end now). */
static void test_gen_posted(void **state)
{
    (void)state;
    struct fx *f = fx_new("secret = a:" K1 "\nsecret = b:" K2 "\n", "");
    struct conn *c1 = fx_accept(f);
    int client1 = f->client;
    assert_ptr_equal(c1->gen, f->g);
    struct gen *g2 = fx_reload(f, "secret = a:" K1 "\nsecret = b:" K2 "\nlimit = b conns=3\n");
    assert_int_equal(g2->removed, 0);
    proxy_worker_post_gen(&f->pw, g2);
    assert_int_equal(atomic_load(&f->w.cmd_pending), 0); /* no wake-up */
    assert_ptr_equal(f->pw.gen, f->g);
    struct conn *c2 = fx_accept(f);
    assert_ptr_equal(f->pw.gen, g2); /* taken before the connection took its generation */
    assert_ptr_equal(c2->gen, g2);
    assert_ptr_equal(c1->gen, f->g); /* a live connection keeps its own */

    struct gen *g3 = fx_reload(f, "secret = a:" K1 "\n");
    assert_int_equal(g3->removed, 1);
    proxy_worker_post_gen(&f->pw, g3);
    assert_int_equal(atomic_load(&f->w.cmd_pending), PROXY_CMD_GEN);
    proxy_worker_take_gen(&f->pw);
    assert_ptr_equal(f->pw.gen, g3);
    proxy_worker_take_gen(&f->pw); /* nothing posted: nothing done */
    assert_ptr_equal(f->pw.gen, g3);

    gen_unref(g2);
    gen_unref(g3);
    conn_close(c1, CR_SHUTDOWN);
    close(client1);
    fx_close(f, CR_SHUTDOWN);
    fx_free(f);
}

/* removed-user = drain: a user removed, then back in a generation posted without a wake-up,
 * stops draining even when the drain timer's own callback is what takes that generation (a
 * fired one-shot timer is no longer active there). */
static void test_gen_back_stops_drain(void **state)
{
    (void)state;
    struct fx *f = fx_new("secret = a:" K1 "\nsecret = b:" K2 "\n",
                          "removed-user = drain\ndrain-timeout = 60s\n");
    struct conn *c = fx_accept(f);
    c->uid = users_find(&f->users, "b"); /* as if admitted (hs_gate) */
    assert_true(c->uid >= 0);
    c->us = users_wstats(&f->users, 0, (uint32_t)c->uid);
    STAT_INC(&c->us->active);
    struct gen *g2 = fx_reload(f, "secret = a:" K1 "\nremoved-user = drain\n"
                                  "drain-timeout = 60s\n");
    proxy_worker_post_gen(&f->pw, g2);
    assert_int_equal(atomic_exchange(&f->w.cmd_pending, 0), PROXY_CMD_GEN); /* the wake-up */
    proxy_worker_take_gen(&f->pw);
    assert_true(c->drain_at > 0); /* b's connection drains */
    c->drain_at = 1;              /* and its drain-timeout has passed */
    struct gen *g3 = fx_reload(f, "secret = a:" K1 "\nsecret = b:" K2 "\n"
                                  "removed-user = drain\ndrain-timeout = 60s\n");
    assert_int_equal(g3->removed, 0);
    proxy_worker_post_gen(&f->pw, g3);
    assert_int_equal(atomic_load(&f->w.cmd_pending), 0);
    ev_timer_stop(f->w.loop, &f->pw.drain_timer); /* what libev does before the callback */
    ev_invoke(f->w.loop, &f->pw.drain_timer, EV_TIMER);
    assert_ptr_equal(f->pw.gen, g3);
    assert_int_not_equal(c->state, CS_FREE); /* not closed as drained */
    assert_true(c->drain_at == 0);
    gen_unref(g2);
    gen_unref(g3);
    fx_close(f, CR_SHUTDOWN);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_obfs2_split),    cmocka_unit_test(test_obfs2_padded),
        cmocka_unit_test(test_early_eof),      cmocka_unit_test(test_rejected_held),
        cmocka_unit_test(test_tls_only_rejects), cmocka_unit_test(test_proxy_header),
        cmocka_unit_test(test_tls_answered),   cmocka_unit_test(test_tls_bad_hmac),
        cmocka_unit_test(test_tls_unknown_sni), cmocka_unit_test(test_gen_posted),
        cmocka_unit_test(test_gen_back_stops_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
