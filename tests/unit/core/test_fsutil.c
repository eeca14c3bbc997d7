/* test_fsutil.c: atomic file writes never follow a planted symlink nor keep a leftover's mode. */
#include "core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_fsutil_XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[400];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    return 0;
}

static void put(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void assert_content(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    assert_string_equal(buf, text);
}

static int entries(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' || (e->d_name[1] && !(e->d_name[1] == '.' && !e->d_name[2]));
    closedir(d);
    return n;
}

static void test_planted_symlinks(void **state)
{
    (void)state;
    char path[128], victim[128], tmp[140], err[512];
    snprintf(path, sizeof path, "%s/mtproxy.state", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(victim, "precious\n", 0644);
    /* the old scheme's fixed temporary name, planted as a symlink to the victim */
    assert_int_equal(symlink(victim, tmp), 0);
    assert_int_equal(fs_write_atomic(path, "secret = a:00\n", 14, 0600, (uid_t)-1, err,
                                     sizeof err), 0);
    assert_content(victim, "precious\n");
    assert_content(path, "secret = a:00\n");
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    /* a symlink at the path itself is replaced, not followed */
    unlink(path);
    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(fs_write_atomic(path, "x\n", 2, 0600, (uid_t)-1, err, sizeof err), 0);
    assert_content(victim, "precious\n");
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    /* nothing but what was there, the planted link, and the result: no temporary left */
    assert_int_equal(entries(), 3);
}

static void test_mode_is_exact(void **state)
{
    (void)state;
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/state", dir);
    put(path, "old\n", 0666); /* a leftover world-readable file */
    mode_t old = umask(0);
    assert_int_equal(fs_write_atomic(path, "new\n", 4, 0600, (uid_t)-1, err, sizeof err), 0);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_content(path, "new\n");
    assert_int_equal(fs_write_atomic(path, "pid\n", 4, 0644, (uid_t)-1, err, sizeof err), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
}

static void test_errors(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(fs_write_atomic("/nonexistent-dir/x", "a", 1, 0600, (uid_t)-1, err,
                                     sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir"));
    char path[128];
    snprintf(path, sizeof path, "%s/", dir);
    assert_int_equal(fs_write_atomic(path, "a", 1, 0600, (uid_t)-1, err, sizeof err), -1);
    assert_int_equal(entries(), 0);
}

/* A killed write's leftovers (.BASE.XXXXXXXX.tmp, old enough) go; anything else stays. */
static void test_stale_tmp_removed(void **state)
{
    (void)state;
    static const char *const gone[] = {".users.conf.0123abcd.tmp", ".users.conf.ffffffff.tmp"};
    static const char *const kept[] = {"users.conf", ".users.conf.0123abcd.tmpx",
                                       ".users.conf.0123ABCD.tmp", ".users.conf.123abcd.tmp",
                                       ".other.conf.0123abcd.tmp", ".users.conf.0000beef.tmp"};
    char path[400], p[400];
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, gone[i]);
        put(p, "x", 0600);
        assert_int_equal(utimensat(AT_FDCWD, p, old, 0), 0);
    }
    for (size_t i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, kept[i]);
        put(p, "x", 0600);
        if (i < 5) /* the last one is being written now (fresh) */
            assert_int_equal(utimensat(AT_FDCWD, p, old, 0), 0);
    }
    snprintf(p, sizeof p, "%s/.users.conf.00000000.tmp", dir); /* a symlink: not followed */
    assert_int_equal(symlink("/nonexistent", p), 0);
    snprintf(path, sizeof path, "%s/users.conf", dir);
    assert_int_equal(fs_remove_stale_tmp(path, 60), 2);
    assert_int_equal(entries(), 7);
    assert_int_equal(fs_remove_stale_tmp(path, 0), 1); /* the fresh one, not before */
    assert_int_equal(entries(), 6);
    assert_int_equal(fs_remove_stale_tmp("/nonexistent-dir/x", 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_planted_symlinks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_tmp_removed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
