/* test_reload.c: config generations: build, reject whole, hooks, restart keys, users mapping. */
#include "proxy/reload.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char path[64];
static struct users U;
static struct reload R;
static int built, freed, fail_hook;

static void write_conf(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int hook_build(struct gen *g, const struct gen *old, void **data, struct config_errors *e)
{
    built++;
    if (fail_hook) {
        snprintf(e->msg[e->count++], CONFIG_ERR_LEN, "%s:1: the hook says no", path);
        return -1;
    }
    int *d = malloc(sizeof *d);
    *d = g->opt.nsecrets;
    *data = d;
    return 0;
}

static void hook_free(void *data)
{
    freed++;
    free(data);
}

static const struct reload_hook hook = {.name = "test", .build = hook_build, .free = hook_free};

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/test_reload.%d.conf", (int)getpid());
    assert_int_equal(users_init(&U, 2), 0);
    reload_init(&R, &U, path, 0, NULL);
    assert_int_equal(reload_hook_add(&R, &hook), 0);
    built = freed = fail_hook = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    users_destroy(&U);
    return 0;
}

#define K1 "00112233445566778899aabbccddeef1"
#define K2 "00112233445566778899aabbccddeef2"
#define K3 "00112233445566778899aabbccddeef3"

static void test_generations(void **state)
{
    (void)state;
    static struct config_errors e;
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\nsecret = b:" K2 "\n"
               "limit = b conns=2\n");
    struct gen *g1 = reload_build(&R, NULL, &e);
    assert_non_null(g1);
    assert_int_equal(e.count, 0);
    reload_commit(&R, g1);
    assert_int_equal(g1->serial, 1);
    assert_int_equal(g1->opt.nsecrets, 2);
    assert_int_equal(users_count(&U), 2);
    assert_null(g1->lim[0]);
    assert_int_equal(g1->lim[1]->conns, 2);
    assert_int_equal(*(int *)g1->hook_data[0], 2);

    /* remove a, add c, change a restart key: b keeps its id */
    write_conf("listen = 127.0.0.1:9444\nmask = off\nsecret = b:" K2 "\nsecret = c:" K3 "\n");
    struct gen *g2 = reload_build(&R, g1, &e);
    assert_non_null(g2);
    assert_int_equal(g2->uid[0], g1->uid[1]);
    assert_int_equal(g2->uid[1], 2);
    assert_int_equal(reload_removed_users(g1, g2), 1);
    assert_true(g2->live[1] && g2->live[2] && !g2->live[0]);
    char keys[256];
    assert_int_equal(reload_restart_keys(g1, g2, keys, sizeof keys), 1);
    assert_string_equal(keys, "listen");
    assert_int_equal(sock_addr_port(&g2->opt.listen[0]), 9443); /* the running value stays */

    /* a broken file (and a hook that fails) is rejected whole, with file:line */
    write_conf("listen = 127.0.0.1:9443\nsecret = d:zz\nworkers = 1\nworkers = 2\n");
    assert_null(reload_build(&R, g2, &e));
    assert_true(e.count >= 2);
    char want[96];
    snprintf(want, sizeof want, "%s:2: ", path);
    assert_non_null(strstr(e.msg[0], want));
    memset(&e, 0, sizeof e);
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = b:" K2 "\n");
    fail_hook = 1;
    assert_null(reload_build(&R, g2, &e));
    assert_non_null(strstr(e.msg[0], "the hook says no"));
    /* a limit for a user that does not exist */
    memset(&e, 0, sizeof e);
    fail_hook = 0;
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = b:" K2 "\nlimit = zed conns=1\n");
    assert_null(reload_build(&R, g2, &e));
    assert_non_null(strstr(e.msg[0], "limit zed: no secret has that name"));

    /* references: a generation goes (hook free) with its last one */
    int before = freed;
    gen_ref(g1);
    gen_unref(g1);
    assert_int_equal(freed, before);
    gen_unref(g1);
    assert_int_equal(freed, before + 1);
    gen_unref(g2);
    assert_int_equal(freed, before + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_generations, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
