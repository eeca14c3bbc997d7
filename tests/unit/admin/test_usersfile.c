/* test_usersfile.c: users-file records: load, the `disabled` word added and removed, a bad line refused before any write, the write and its restore, the state file's quota-used line dropped. */
#include "admin/usersfile.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[64];

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *get(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_usersfile.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#define KEY "00112233445566778899aabbccddeeff"

static void test_words(void **state)
{
    (void)state;
    struct usersfile_rec r = {.name = "alice"};
    assert_int_equal(usersfile_set_word(&r, "disabled", 1), 0);
    assert_string_equal(r.limit, "alice disabled");
    assert_int_equal(usersfile_set_word(&r, "disabled", 1), 0); /* once */
    assert_string_equal(r.limit, "alice disabled");
    assert_int_equal(usersfile_set_word(&r, "disabled", 0), 0);
    assert_null(r.limit); /* nothing left: no line */
    assert_int_equal(usersfile_set_limit(&r, "alice conns=2\tquota=1G"), 0);
    assert_int_equal(usersfile_set_word(&r, "disabled", 1), 0);
    assert_string_equal(r.limit, "alice conns=2 quota=1G disabled");
    assert_int_equal(usersfile_set_word(&r, "disabled", 0), 0);
    assert_string_equal(r.limit, "alice conns=2 quota=1G");
    assert_int_equal(usersfile_set_word(&r, "disabled", 0), 0); /* not there: unchanged */
    assert_string_equal(r.limit, "alice conns=2 quota=1G");
    free(r.limit);
}

static void test_load_write_restore(void **state)
{
    (void)state;
    char path[128], err[512], key[32];
    path_of(path, sizeof path, "users.conf");
    struct usersfile u;
    assert_int_equal(usersfile_load(&u, path, err, sizeof err), 0); /* missing: empty */
    assert_int_equal(u.n, 0);
    assert_null(u.text);
    usersfile_free(&u);
    put(path, "# by hand\nsecret = alice:" KEY "\nlimit = alice conns=2 disabled\n"
              "secret = bob:" KEY "\n");
    assert_int_equal(usersfile_load(&u, path, err, sizeof err), 0);
    assert_int_equal(u.n, 2);
    int a = usersfile_find(&u, "alice");
    assert_true(a >= 0);
    assert_string_equal(u.r[a].limit, "alice conns=2 disabled");
    assert_int_equal(usersfile_find(&u, "carol"), -1);
    assert_int_equal(usersfile_set_word(&u.r[a], "disabled", 0), 0);
    assert_int_equal(usersfile_write(path, &u, err, sizeof err, key, sizeof key), 0);
    char *text = get(path);
    assert_non_null(strstr(text, "limit = alice conns=2\n"));
    assert_null(strstr(text, "# by hand"));
    /* a bad limit is refused by the config's parser before anything is written */
    char *was = strdup(text);
    assert_int_equal(usersfile_set_limit(&u.r[a], "alice conns=lots"), 0);
    assert_int_equal(usersfile_write(path, &u, err, sizeof err, key, sizeof key),
                     USERSFILE_INVALID);
    assert_string_equal(key, "limit");
    assert_non_null(strstr(err, path));
    assert_string_equal(get(path), was);
    /* restore puts back what was read */
    assert_int_equal(usersfile_restore(path, &u, err, sizeof err), 0);
    assert_non_null(strstr(get(path), "# by hand"));
    usersfile_free(&u);
    free(was);
    /* a bad hand edit: load says where */
    put(path, "secret = alice:" KEY "\nlimit = alice disabled=1\n");
    assert_int_equal(usersfile_load(&u, path, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2:"));
    usersfile_free(&u);
}

static void test_state_drop_quota(void **state)
{
    (void)state;
    char path[128], err[512];
    int found = -1;
    path_of(path, sizeof path, "state");
    assert_int_equal(usersfile_state_drop_quota(path, "a", 0, &found, err, sizeof err), 0);
    assert_int_equal(found, 0); /* no file: nothing */
    put(path, "secret = " KEY "\nquota-used = ab 5\nquota-used = a 100 1798761600\n"
              "quota-used =  a\t7\n");
    assert_int_equal(usersfile_state_drop_quota(path, "a", 0, &found, err, sizeof err), 0);
    assert_int_equal(found, 1);
    assert_string_equal(get(path), "secret = " KEY "\nquota-used = ab 5\n");
    assert_int_equal(usersfile_state_drop_quota(path, "zz", 0, &found, err, sizeof err), 0);
    assert_int_equal(found, 0);
    /* limits-store on: the next start resets the fleet's count (found or not; made if none) */
    assert_int_equal(usersfile_state_drop_quota(path, "ab", 1, &found, err, sizeof err), 0);
    assert_int_equal(found, 1);
    assert_string_equal(get(path), "secret = " KEY "\nquota-reset = ab\n");
    unlink(path);
    assert_int_equal(usersfile_state_drop_quota(path, "q", 1, &found, err, sizeof err), 0);
    assert_string_equal(get(path), "quota-reset = q\n");
}

/* Rewritten as root (`mtproxy user` with the proxy stopped), a file keeps its owner (the
 * account the proxy runs as must still read it). */
static void test_owner_kept(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char path[128], err[512], key[32];
    path_of(path, sizeof path, "owned.conf");
    put(path, "secret = alice:" KEY "\n");
    assert_int_equal(chown(path, 65534, (gid_t)-1), 0);
    struct usersfile u;
    assert_int_equal(usersfile_load(&u, path, err, sizeof err), 0);
    assert_int_equal(usersfile_set_word(&u.r[0], "disabled", 1), 0);
    assert_int_equal(usersfile_write(path, &u, err, sizeof err, key, sizeof key), 0);
    usersfile_free(&u);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_uid, 65534);
    assert_int_equal(st.st_mode & 0777, 0600);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_load_write_restore),
        cmocka_unit_test(test_state_drop_quota),
        cmocka_unit_test(test_owner_kept),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
