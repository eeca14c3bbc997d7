/* test_acl.c: the access list built from options: deny wins, allow-only, files, errors. */
#include "users/acl.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

static struct options opt;
static struct config_parser parser;

static void load(const char *text)
{
    options_init(&parser, &opt);
    assert_int_equal(config_load_buffer(&parser, "t.conf", text, strlen(text)), 0);
}

static enum acl_verdict check(const struct acl *a, const char *addr)
{
    struct sockaddr_storage ss = sockaddr_of(addr);
    assert_int_not_equal(ss.ss_family, 0);
    return acl_check(a, (struct sockaddr *)&ss);
}

static void test_empty_passes_all(void **state)
{
    (void)state;
    load("");
    struct acl a;
    assert_int_equal(acl_build(&a, &opt, &parser.errors), 0);
    assert_false(acl_active(&a));
    assert_int_equal(check(&a, "127.0.0.1"), ACL_PASS);
    assert_int_equal(check(&a, "::1"), ACL_PASS);
    acl_free(&a);
}

static void test_deny_wins(void **state)
{
    (void)state;
    load("allow = 127.0.0.0/8\nallow = ::1\ndeny = 127.0.0.2\ndeny = 127.0.1.0/24\n");
    struct acl a;
    assert_int_equal(acl_build(&a, &opt, &parser.errors), 0);
    assert_true(acl_active(&a));
    assert_int_equal(check(&a, "127.0.0.1"), ACL_PASS);
    assert_int_equal(check(&a, "127.0.0.2"), ACL_DENIED);
    assert_int_equal(check(&a, "127.0.1.77"), ACL_DENIED);
    assert_int_equal(check(&a, "::1"), ACL_PASS);
    assert_int_equal(check(&a, "::2"), ACL_NOT_ALLOWED);
    assert_int_equal(check(&a, "10.0.0.1"), ACL_NOT_ALLOWED);
    acl_free(&a);
}

static void test_deny_only(void **state)
{
    (void)state;
    load("deny = 2001:db8::/32\ndeny = 0.0.0.0/0\n");
    struct acl a;
    assert_int_equal(acl_build(&a, &opt, &parser.errors), 0);
    assert_int_equal(check(&a, "192.0.2.1"), ACL_DENIED);
    assert_int_equal(check(&a, "2001:db8::5"), ACL_DENIED);
    assert_int_equal(check(&a, "2001:db9::5"), ACL_PASS);
    acl_free(&a);
}

static void test_files_and_errors(void **state)
{
    (void)state;
    char path[] = "/tmp/test_acl_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char list[] = "# deny list\n127.0.0.3\n127.0.2.0/24 # a block\nbogus\n";
    assert_int_equal(write(fd, list, sizeof list - 1), (ssize_t)(sizeof list - 1));
    close(fd);
    char conf[512];
    snprintf(conf, sizeof conf, "deny-file = %s\ndeny-file = /nonexistent/x.netset\n", path);
    load(conf);
    struct acl a;
    assert_int_equal(acl_build(&a, &opt, &parser.errors), 2);
    char want[300];
    snprintf(want, sizeof want, "%s:4: ", path);
    assert_memory_equal(parser.errors.msg[0], want, strlen(want));
    assert_non_null(strstr(parser.errors.msg[1], "/nonexistent/x.netset: cannot open"));
    assert_int_equal(check(&a, "127.0.0.3"), ACL_DENIED);
    assert_int_equal(check(&a, "127.0.2.9"), ACL_DENIED);
    assert_int_equal(check(&a, "127.0.0.1"), ACL_PASS);
    acl_free(&a);
    unlink(path);
}

static void test_bad_lines(void **state)
{
    (void)state;
    options_init(&parser, &opt);
    const char *text = "allow = 10.0.0.1/8\ndeny = nope\nallow-file =\n";
    assert_int_equal(config_load_buffer(&parser, "t.conf", text, strlen(text)), 3);
    assert_non_null(strstr(parser.errors.msg[0], "t.conf:1:"));
    assert_non_null(strstr(parser.errors.msg[0], "did you mean 10.0.0.0/8"));
    assert_non_null(strstr(parser.errors.msg[1], "t.conf:2:"));
    assert_non_null(strstr(parser.errors.msg[2], "t.conf:3:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_passes_all),
        cmocka_unit_test(test_deny_wins),
        cmocka_unit_test(test_deny_only),
        cmocka_unit_test(test_files_and_errors),
        cmocka_unit_test(test_bad_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
