/* test_socksdial.c: the SOCKS5 dial steps on a socket pair: replies a byte at a time, the bound address kept. */
#include "upstream/socks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

/* A dial over a socket pair: fds[0] is ours, fds[1] the server's. */
struct dialing {
    int fds[2];
    struct socks_dial d;
    struct socks5_server srv;
    struct sockaddr_in target;
    uint8_t bound[SOCKS_BOUND_LEN];
    const char *why;
    int code;
};

static enum socks_result step(struct dialing *t)
{
    return socks_dial_read_bound(&t->d, t->fds[0], &t->srv, (struct sockaddr *)&t->target,
                                 &t->why, &t->code, t->bound);
}

/* Dials up to the CONNECT reply (greeting, method, the request to 127.0.0.1:8888). */
static void dial_to_reply(struct dialing *t)
{
    char err[128];
    uint8_t b[64];
    memset(t, 0, sizeof *t);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, t->fds), 0);
    assert_int_equal(socks5_parse_url("socks5://127.0.0.1:1080", &t->srv, err, sizeof err), 0);
    t->target.sin_family = AF_INET;
    t->target.sin_port = htons(8888);
    t->target.sin_addr.s_addr = htonl(0x7f000001);
    assert_int_equal(socks_dial_start(&t->d, t->fds[0], &t->srv, &t->why), SOCKS_DIAL_WAIT);
    assert_true(recv(t->fds[1], b, sizeof b, 0) >= 3);
    assert_int_equal(send(t->fds[1], "\x05\x00", 2, 0), 2);
    assert_int_equal(step(t), SOCKS_DIAL_WAIT);
    assert_int_equal(recv(t->fds[1], b, sizeof b, 0), 10); /* CONNECT 127.0.0.1:8888 */
}

static void dial_close(struct dialing *t)
{
    close(t->fds[0]);
    close(t->fds[1]);
}

static void test_bound_ipv4_byte_by_byte(void **state)
{
    (void)state;
    struct dialing t;
    dial_to_reply(&t);
    static const uint8_t reply[] = {5, 0, 0, 1, 10, 1, 2, 3, 0x30, 0x39, 'H', 'I'};
    for (size_t i = 0; i < 10; i++) {
        assert_int_equal(send(t.fds[1], reply + i, 1, 0), 1);
        if (i == 9)
            assert_int_equal(send(t.fds[1], reply + 10, 2, 0), 2); /* the ME's first bytes */
        assert_int_equal(step(&t), i == 9 ? SOCKS_DIAL_DONE : SOCKS_DIAL_WAIT);
    }
    struct sockaddr_storage ss;
    assert_int_equal(socks_bound_addr(t.bound, &ss), 0);
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    assert_int_equal(a->sin_family, AF_INET);
    assert_int_equal(ntohl(a->sin_addr.s_addr), 0x0a010203);
    assert_int_equal(ntohs(a->sin_port), 12345);
    char rest[4];
    assert_int_equal(recv(t.fds[0], rest, sizeof rest, MSG_DONTWAIT), 2); /* left in the socket */
    assert_memory_equal(rest, "HI", 2);
    dial_close(&t);
}

static void test_bound_ipv6_and_zero(void **state)
{
    (void)state;
    struct dialing t;
    dial_to_reply(&t);
    uint8_t reply[22] = {5, 0, 0, 4};
    reply[4 + 15] = 1; /* ::1 */
    reply[20] = 0x01;
    reply[21] = 0xbb;
    assert_int_equal(send(t.fds[1], reply, sizeof reply, 0), (ssize_t)sizeof reply);
    assert_int_equal(step(&t), SOCKS_DIAL_DONE);
    struct sockaddr_storage ss;
    assert_int_equal(socks_bound_addr(t.bound, &ss), 0);
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    assert_int_equal(a->sin6_family, AF_INET6);
    assert_true(IN6_IS_ADDR_LOOPBACK(&a->sin6_addr));
    assert_int_equal(ntohs(a->sin6_port), 443);
    dial_close(&t);
    /* microsocks' reply: all zeros, no address known */
    dial_to_reply(&t);
    static const uint8_t zeros[10] = {5, 0, 0, 1};
    assert_int_equal(send(t.fds[1], zeros, sizeof zeros, 0), 10);
    assert_int_equal(step(&t), SOCKS_DIAL_DONE);
    assert_int_equal(socks_bound_addr(t.bound, &ss), -1);
    static const uint8_t domain[SOCKS_BOUND_LEN] = {3, 4};
    assert_int_equal(socks_bound_addr(domain, &ss), -1);
    dial_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_ipv4_byte_by_byte),
        cmocka_unit_test(test_bound_ipv6_and_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
