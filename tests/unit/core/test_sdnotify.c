/* test_sdnotify.c: the READY=1 datagram reaches the socket NOTIFY_SOCKET names (a path and an
 * abstract name), nothing is sent without it, and a bad name is an error, not a crash. */
#include "core/sdnotify.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

/* A datagram socket bound to NAME ('@' = abstract); returns its descriptor. */
static int listener(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    memcpy(sa.sun_path, name, len);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)), 0);
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char buf[128];
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    assert_true(n >= 0);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

static void test_path_socket(void **state)
{
    (void)state;
    char path[] = "/tmp/mtproxy-sdnotify-XXXXXX";
    assert_non_null(mkdtemp(path));
    char sock[sizeof path + 8];
    snprintf(sock, sizeof sock, "%s/notify", path);
    int fd = listener(sock);
    setenv("NOTIFY_SOCKET", sock, 1);
    assert_int_equal(sd_notify_state("READY=1"), 1);
    expect_datagram(fd, "READY=1");
    assert_int_equal(sd_notify_state("STOPPING=1"), 1);
    expect_datagram(fd, "STOPPING=1");
    close(fd);
    unlink(sock);
    rmdir(path);
    /* The socket gone: an error the caller can log, not a crash. */
    assert_int_equal(sd_notify_state("READY=1"), -1);
    unsetenv("NOTIFY_SOCKET");
}

static void test_abstract_socket(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof name, "@mtproxy-sdnotify-test-%ld", (long)getpid());
    int fd = listener(name);
    setenv("NOTIFY_SOCKET", name, 1);
    assert_int_equal(sd_notify_state("READY=1"), 1);
    expect_datagram(fd, "READY=1");
    close(fd);
    unsetenv("NOTIFY_SOCKET");
}

static void test_unset_or_bad(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(sd_notify_state("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(sd_notify_state("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_int_equal(sd_notify_state("READY=1"), -1);
    assert_int_equal(errno, EINVAL);
    char big[200];
    memset(big, 'a', sizeof big - 1);
    big[0] = '/';
    big[sizeof big - 1] = '\0';
    setenv("NOTIFY_SOCKET", big, 1);
    assert_int_equal(sd_notify_state("READY=1"), -1);
    unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_unset_or_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
