/* test_dialer.c: the dialer against a scripted SOCKS5 server on loopback: every step, split and bad replies, refusals, EMFILE. */
#include "upstream/dialer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* One attempt: fd is the dialer's socket, srv the scripted server's end of it. */
struct rig {
    int lfd, srv, fd;
    struct sock_addr listen_at; /* the scripted server (SOCKS5, or the target itself) */
    struct sock_addr target;    /* 127.0.0.1:8888, named in the CONNECT request */
    struct socks5_server socks;
    struct dial d;
    struct dial_to to;
    struct dial_result r;
    enum dial_verdict v;
    uint8_t bound[SOCKS_BOUND_LEN];
};

static void loopback(struct sock_addr *a, int port)
{
    memset(a, 0, sizeof *a);
    a->u.in4.sin_family = AF_INET;
    a->u.in4.sin_port = htons((uint16_t)port);
    a->u.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->len = sizeof a->u.in4;
}

/* A loopback port nobody listens on: bound (so nobody else takes it) but not listening. */
static int closed_port(struct sock_addr *a)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    loopback(a, 0);
    assert_int_equal(bind(s, &a->u.sa, a->len), 0);
    assert_int_equal(getsockname(s, &a->u.sa, &a->len), 0);
    return s;
}

static void rig_listen(struct rig *t)
{
    t->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(t->lfd >= 0);
    loopback(&t->listen_at, 0);
    assert_int_equal(bind(t->lfd, &t->listen_at.u.sa, t->listen_at.len), 0);
    assert_int_equal(listen(t->lfd, 4), 0);
    assert_int_equal(getsockname(t->lfd, &t->listen_at.u.sa, &t->listen_at.len), 0);
}

static void rig_accept(struct rig *t)
{
    t->srv = accept(t->lfd, NULL, NULL);
    assert_true(t->srv >= 0);
    struct timeval tv = {.tv_sec = 5};
    assert_int_equal(setsockopt(t->srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
}

static void rig_close(struct rig *t)
{
    if (t->fd >= 0)
        close(t->fd);
    if (t->srv >= 0)
        close(t->srv);
    if (t->lfd >= 0)
        close(t->lfd);
}

/* Waits (5 s at most) for the event the last verdict asked for, then steps. */
static enum dial_verdict wait_step(struct rig *t)
{
    assert_true(t->v == DIAL_WAIT_READ || t->v == DIAL_WAIT_WRITE);
    struct pollfd p = {.fd = t->fd, .events = t->v == DIAL_WAIT_READ ? POLLIN : POLLOUT};
    assert_int_equal(poll(&p, 1, 5000), 1);
    int revents = (p.revents & (POLLIN | POLLHUP | POLLERR) ? EV_READ : 0) |
                  (p.revents & (POLLOUT | POLLHUP | POLLERR) ? EV_WRITE : 0);
    t->v = dial_step(&t->d, t->fd, &t->to, revents, &t->r);
    return t->v;
}

/* The server reads exactly these bytes. */
static void srv_expect(struct rig *t, const void *want, size_t n)
{
    uint8_t got[600];
    assert_true(n <= sizeof got);
    assert_int_equal(recv(t->srv, got, n, MSG_WAITALL), (ssize_t)n);
    assert_memory_equal(got, want, n);
}

static void srv_send(struct rig *t, const void *b, size_t n)
{
    assert_int_equal(send(t->srv, b, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* The server sends b (split: one byte at a time, every byte but the last leaving the dial
 * waiting); the dial steps on it. */
static enum dial_verdict answer_by(struct rig *t, const void *b, size_t n, int split)
{
    for (size_t i = 0; split && i + 1 < n; i++) {
        srv_send(t, (const uint8_t *)b + i, 1);
        assert_int_equal(wait_step(t), DIAL_WAIT_READ);
    }
    if (split)
        b = (const uint8_t *)b + n - 1, n = 1;
    srv_send(t, b, n);
    return wait_step(t);
}

static enum dial_verdict answer(struct rig *t, const void *b, size_t n)
{
    return answer_by(t, b, n, 0);
}

/* Dials target (127.0.0.1:8888) through the scripted server at url's credentials; returns
 * once the server read the greeting. */
static void socks_begin(struct rig *t, const char *url)
{
    char err[128];
    memset(t, 0, sizeof *t);
    t->srv = t->fd = -1;
    rig_listen(t);
    loopback(&t->target, 8888);
    assert_int_equal(socks5_parse_url(url, &t->socks, err, sizeof err), 0);
    t->to = (struct dial_to){.target = &t->target, .socks = &t->socks,
                             .socks_addr = &t->listen_at, .bound = t->bound};
    t->v = dial_start(&t->d, &t->to, &t->fd, &t->r);
    assert_int_equal(t->v, DIAL_WAIT_WRITE);
    assert_true(t->fd >= 0);
    rig_accept(t);
    assert_int_equal(wait_step(t), DIAL_WAIT_READ); /* connected: the greeting went out */
    if (t->socks.auth)
        srv_expect(t, "\x05\x02\x00\x02", 4);
    else
        srv_expect(t, "\x05\x01\x00", 3);
}

static const uint8_t CONNECT_REQ[] = {5, 1, 0, 1, 127, 0, 0, 1, 0x22, 0xb8}; /* :8888 */
static const uint8_t REPLY_OK[] = {5, 0, 0, 1, 10, 1, 2, 3, 0x30, 0x39};    /* 10.1.2.3:12345 */

static void assert_socks_fail(struct rig *t, int code)
{
    assert_int_equal(t->v, DIAL_FAIL);
    assert_int_equal(t->r.socks, 1);
    assert_int_equal(t->r.err, 0);
    assert_int_equal(t->r.code, code);
    assert_non_null(t->r.why);
}

/* Through a server that asks for the login in url, up to its answer (the login read). */
static void socks_login(struct rig *t, const char *url, const char *login, size_t n, int split)
{
    socks_begin(t, url);
    assert_int_equal(answer_by(t, "\x05\x02", 2, split), DIAL_WAIT_READ);
    srv_expect(t, login, n);
}

/* The server's answer b ends the dial: a SOCKS5 failure without a reply code. */
static void answer_fails(struct rig *t, const void *b, size_t n)
{
    answer(t, b, n);
    assert_socks_fail(t, 0);
    rig_close(t);
}

/* Through a server without login, up to its CONNECT reply (the request read). */
static void socks_to_reply(struct rig *t)
{
    socks_begin(t, "socks5://127.0.0.1:1080");
    assert_int_equal(answer(t, "\x05\x00", 2), DIAL_WAIT_READ);
    srv_expect(t, CONNECT_REQ, sizeof CONNECT_REQ);
}

/* Done: the target's first bytes stay in the socket, the bound address is kept. Closes t. */
static void assert_through(struct rig *t)
{
    assert_int_equal(t->v, DIAL_DONE);
    srv_send(t, "HI", 2);
    char rest[4];
    struct pollfd p = {.fd = t->fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(recv(t->fd, rest, sizeof rest, MSG_DONTWAIT), 2);
    assert_memory_equal(rest, "HI", 2);
    struct sockaddr_storage ss;
    assert_int_equal(socks_bound_addr(t->bound, &ss), 0);
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    assert_int_equal(ntohl(a->sin_addr.s_addr), 0x0a010203);
    assert_int_equal(ntohs(a->sin_port), 12345);
    rig_close(t);
}

static void test_direct_ok(void **state)
{
    (void)state;
    struct rig t;
    memset(&t, 0, sizeof t);
    t.srv = t.fd = -1;
    rig_listen(&t);
    struct sock_opts o = {.nodelay = 1};
    t.to = (struct dial_to){.target = &t.listen_at, .opts = &o};
    t.v = dial_start(&t.d, &t.to, &t.fd, &t.r);
    assert_int_equal(t.v, DIAL_WAIT_WRITE);
    rig_accept(&t);
    assert_int_equal(wait_step(&t), DIAL_DONE);
    assert_int_equal(dial_step(&t.d, t.fd, &t.to, EV_READ, &t.r), DIAL_DONE); /* stays done */
    srv_send(&t, "HI", 2);
    char rest[4];
    struct pollfd p = {.fd = t.fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(recv(t.fd, rest, sizeof rest, MSG_DONTWAIT), 2);
    rig_close(&t);
}

/* A connect refused at once or after the wait: either way FAIL with ECONNREFUSED. */
static void dial_refused(const struct dial_to *to, int *keep)
{
    struct dial d;
    struct dial_result r;
    int fd;
    enum dial_verdict v = dial_start(&d, to, &fd, &r);
    if (v == DIAL_WAIT_WRITE) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        assert_int_equal(poll(&p, 1, 5000), 1);
        v = dial_step(&d, fd, to, EV_WRITE, &r);
        close(fd);
    } else {
        assert_int_equal(fd, -1);
    }
    assert_int_equal(v, DIAL_FAIL);
    /* qemu-user hands SO_ERROR through untranslated: under qemu-mipsel the host's
     * ECONNREFUSED (111) arrives, not MIPS's (146). */
    if (r.err != ECONNREFUSED && r.err != 111)
        fail_msg("err %d, not ECONNREFUSED", r.err);
    assert_int_equal(r.socks, 0);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.why, strerror(r.err));
    close(*keep);
}

static void test_direct_refused(void **state)
{
    (void)state;
    struct sock_addr a;
    int keep = closed_port(&a);
    dial_refused(&(struct dial_to){.target = &a}, &keep);
}

/* The SOCKS5 server itself is not there: a TCP failure, not a SOCKS one. */
static void test_socks_server_refused(void **state)
{
    (void)state;
    struct sock_addr a, target;
    struct socks5_server s;
    char err[128];
    int keep = closed_port(&a);
    loopback(&target, 8888);
    assert_int_equal(socks5_parse_url("socks5://127.0.0.1:1080", &s, err, sizeof err), 0);
    dial_refused(&(struct dial_to){.target = &target, .socks = &s, .socks_addr = &a}, &keep);
}

static void test_socks_no_auth(void **state)
{
    (void)state;
    struct rig t;
    socks_to_reply(&t);
    answer(&t, REPLY_OK, sizeof REPLY_OK);
    assert_through(&t);
}

/* Login, CONNECT and its reply, each reply whole or a byte at a time. */
static void login_through(const char *url, const char *login, size_t n, int split)
{
    struct rig t;
    socks_login(&t, url, login, n, split);
    assert_int_equal(answer_by(&t, "\x01\x00", 2, split), DIAL_WAIT_READ);
    srv_expect(&t, CONNECT_REQ, sizeof CONNECT_REQ);
    answer_by(&t, REPLY_OK, sizeof REPLY_OK, split);
    assert_through(&t);
}

static void test_socks_auth(void **state)
{
    (void)state;
    login_through("socks5://user:p%40ss@127.0.0.1:1080", "\x01\x04user\x04p@ss", 11, 0);
}

static void test_socks_auth_rejected(void **state)
{
    (void)state;
    struct rig t;
    socks_login(&t, "socks5://user:pass@127.0.0.1:1080", "\x01\x04user\x04pass", 11, 0);
    answer_fails(&t, "\x01\x01", 2);
}

/* A refused CONNECT: the reply code and its RFC 1928 text, known from the first two bytes. */
static void test_socks_connect_refused(void **state)
{
    (void)state;
    struct rig t;
    socks_to_reply(&t);
    answer(&t, "\x05\x05", 2);
    assert_socks_fail(&t, 5);
    assert_string_equal(t.r.why, socks5_reply_name(5));
    rig_close(&t);
}

/* The server closes: the dial fails saying so. Closes t. */
static void hang_up(struct rig *t)
{
    close(t->srv);
    t->srv = -1;
    wait_step(t);
    assert_socks_fail(t, 0);
    assert_non_null(strstr(t->r.why, "closed"));
    rig_close(t);
}

static void test_socks_closed_midway(void **state)
{
    (void)state;
    /* after the greeting */
    struct rig t;
    socks_begin(&t, "socks5://127.0.0.1:1080");
    hang_up(&t);
    /* in the middle of the CONNECT reply */
    socks_to_reply(&t);
    assert_int_equal(answer(&t, REPLY_OK, 7), DIAL_WAIT_READ);
    hang_up(&t);
}

static void test_socks_garbage(void **state)
{
    (void)state;
    struct rig t;
    /* not a SOCKS5 server: an HTTP answer */
    socks_begin(&t, "socks5://127.0.0.1:1080");
    answer_fails(&t, "HTTP/1.1 400", 12);
    /* a method we did not offer */
    socks_begin(&t, "socks5://127.0.0.1:1080");
    answer_fails(&t, "\x05\x02", 2);
    /* a CONNECT reply with a bad version, then one with a bad address type */
    socks_to_reply(&t);
    answer_fails(&t, "\x04\x00\x00\x01\x00", 5);
    socks_to_reply(&t);
    answer_fails(&t, "\x05\x00\x00\x09\x00\x00\x00\x00\x00\x00", 10);
}

/* Every reply a byte at a time: the dial waits after each, and ends exactly at the last. */
static void test_socks_split(void **state)
{
    (void)state;
    login_through("socks5://user:pass@127.0.0.1:1080", "\x01\x04user\x04pass", 11, 1);
}

/* A wake-up without the awaited event changes nothing (the connect is not even checked). */
static void test_other_event(void **state)
{
    (void)state;
    struct rig t;
    socks_begin(&t, "socks5://127.0.0.1:1080");
    srv_send(&t, "\x05\x00", 2);
    assert_int_equal(dial_step(&t.d, t.fd, &t.to, EV_WRITE, &t.r), DIAL_WAIT_READ);
    char b[4];
    assert_int_equal(recv(t.fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT), 2); /* still unread */
    assert_int_equal(wait_step(&t), DIAL_WAIT_READ);
    srv_expect(&t, CONNECT_REQ, sizeof CONNECT_REQ);
    rig_close(&t);
    struct dial d;
    memset(&d, 0, sizeof d);
    struct dial_result r;
    assert_int_equal(dial_step(&d, -1, &t.to, EV_READ, &r), DIAL_WAIT_WRITE);
}

/* Out of descriptors: NO_FD (not FAIL), no socket, errno kept. In a child whose limit is
 * lowered and whose descriptors are used up. */
static void test_emfile(void **state)
{
    (void)state;
    struct sock_addr a;
    loopback(&a, 9); /* never reached: there is no descriptor to connect with */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int p[2];
        struct rlimit rl = {.rlim_cur = 32, .rlim_max = 32};
        if (pipe(p) || setrlimit(RLIMIT_NOFILE, &rl))
            _exit(2);
        while (dup(p[0]) >= 0)
            ;
        if (errno != EMFILE)
            _exit(3);
        struct dial d;
        struct dial_result r;
        int fd = 0;
        enum dial_verdict v = dial_start(&d, &(struct dial_to){.target = &a}, &fd, &r);
        _exit(v == DIAL_NO_FD && fd == -1 && r.err == EMFILE && r.socks == 0 ? 0 : 4);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_ok),
        cmocka_unit_test(test_direct_refused),
        cmocka_unit_test(test_socks_server_refused),
        cmocka_unit_test(test_socks_no_auth),
        cmocka_unit_test(test_socks_auth),
        cmocka_unit_test(test_socks_auth_rejected),
        cmocka_unit_test(test_socks_connect_refused),
        cmocka_unit_test(test_socks_closed_midway),
        cmocka_unit_test(test_socks_garbage),
        cmocka_unit_test(test_socks_split),
        cmocka_unit_test(test_other_event),
        cmocka_unit_test(test_emfile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
