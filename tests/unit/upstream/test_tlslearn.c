/* test_tlslearn.c: the stored TLS profile as `mtproxy doctor` will print it (tlslearn_describe_file). */
#include "upstream/tlslearn.h"

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

static void test_describe_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_tlslearn.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char st[256], path[300], out[512];
    snprintf(st, sizeof st, "%s/mtproxy.state", dir);
    snprintf(path, sizeof path, "%s.tls-profile", st);
    /* nothing stored yet: says so and names the built-in in use */
    assert_true(tlslearn_describe_file(st, "www.example.com", 1000, out, sizeof out) > 0);
    assert_non_null(strstr(out, "none learned for www.example.com yet"));
    assert_non_null(strstr(out, "built-in:"));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("host www.example.com\nlearned 400\nversion 0304\ncipher 1301\n"
          "extensions 002b 0033\nccs 1\nrecords 23/23 1623/1623 281/281 53/53\n"
          "idle-close-ms 60000\n", f);
    fclose(f);
    assert_true(tlslearn_describe_file(st, "www.example.com", 1000, out, sizeof out) > 0);
    assert_non_null(strstr(out, "www.example.com (learned 600s ago)"));
    assert_non_null(strstr(out, "versions first"));
    assert_non_null(strstr(out, "[23,1623,281,53]"));
    assert_non_null(strstr(out, "idle close 60000 ms"));
    /* a profile of another domain is not this proxy's */
    assert_true(tlslearn_describe_file(st, "other.example", 1000, out, sizeof out) > 0);
    assert_non_null(strstr(out, "none learned"));
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_describe_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
