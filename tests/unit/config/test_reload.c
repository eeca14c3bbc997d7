/* test_reload.c: config generations: build, reject whole, restart keys, users mapping, the ME table, start-up's part, the reaper and the reloader. */
#include "config/reload.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "upstream/middle.h"

static char path[64], secret_path[64], me_path[64], state_path[64];
static struct users U;
static struct reload R;

static void write_file(const char *name, const char *text)
{
    FILE *f = fopen(name, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void write_conf(const char *text)
{
    write_file(path, text);
}

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/test_reload.%d.conf", (int)getpid());
    snprintf(secret_path, sizeof secret_path, "/tmp/test_reload.%d.secret", (int)getpid());
    snprintf(me_path, sizeof me_path, "/tmp/test_reload.%d.me", (int)getpid());
    snprintf(state_path, sizeof state_path, "/tmp/test_reload.%d.state", (int)getpid());
    assert_int_equal(users_init(&U, 2), 0);
    reload_init(&R, &U, path, 0, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    unlink(secret_path);
    unlink(me_path);
    unlink(state_path);
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
    assert_null(g1->me); /* direct mode */

    /* remove a, add c, change a restart key: b keeps its id */
    write_conf("listen = 127.0.0.1:9444\nmask = off\nsecret = b:" K2 "\nsecret = c:" K3 "\n");
    struct gen *g2 = reload_build(&R, g1, &e);
    assert_non_null(g2);
    assert_int_equal(g2->uid[0], g1->uid[1]);
    assert_int_equal(g2->uid[1], 2);
    assert_int_equal(reload_removed_users(g1, g2), 1);
    assert_true(g2->live[1] && g2->live[2] && !g2->live[0]);
    /* the build put the running value back (the generation is not changed after it) */
    assert_int_equal(R.nrestart, 1);
    assert_string_equal(R.restart_keys, "listen");
    assert_int_equal(sock_addr_port(&g2->opt.listen[0]), 9443); /* the running value stays */
    char keys[256];
    assert_int_equal(reload_restart_keys(g1, g2, keys, sizeof keys), 0);

    /* a broken file is rejected whole, with file:line */
    write_conf("listen = 127.0.0.1:9443\nsecret = d:zz\nworkers = 1\nworkers = 2\n");
    assert_null(reload_build(&R, g2, &e));
    assert_true(e.count >= 2);
    char want[96];
    snprintf(want, sizeof want, "%s:2: ", path);
    assert_non_null(strstr(e.msg[0], want));
    /* a limit for a user that does not exist */
    memset(&e, 0, sizeof e);
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = b:" K2 "\nlimit = zed conns=1\n");
    assert_null(reload_build(&R, g2, &e));
    assert_non_null(strstr(e.msg[0], "limit zed: no secret has that name"));

    gen_unref(g1);
    gen_unref(g2);
}

/* removed-user: what adopting a generation does to a live connection of each user. */
static void test_user_fate(void **state)
{
    (void)state;
    static struct config_errors e;
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\nsecret = b:" K2 "\n");
    struct gen *g1 = reload_build(&R, NULL, &e);
    assert_non_null(g1);
    int32_t a = (int32_t)g1->uid[0], b = (int32_t)g1->uid[1];
    double d = 0;
    assert_int_equal(g1->opt.removed_user, REMOVED_CLOSE); /* the default: today's behaviour */
    assert_int_equal(g1->opt.drain_timeout_ms, 600000);
    assert_int_equal(gen_user_fate(g1, b, 100, &d), GEN_KEEP);
    assert_true(d == 0);

    /* b removed, drain: its connections go on for drain-timeout from the first removal */
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\n"
               "removed-user = drain\ndrain-timeout = 5s\n");
    struct gen *g2 = reload_build(&R, g1, &e);
    assert_non_null(g2);
    assert_int_equal(gen_user_fate(g2, a, 100, &d), GEN_KEEP);
    assert_int_equal(gen_user_fate(g2, -1, 100, &d), GEN_KEEP); /* not admitted yet */
    assert_int_equal(gen_user_fate(g2, b, 100, &d), GEN_DRAIN);
    assert_true(d == 105);
    assert_int_equal(gen_user_fate(g2, b, 103, &d), GEN_DRAIN); /* a later reload: same end */
    assert_true(d == 105);

    /* a user interned after g2 was built (id past its table) is not in it either */
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = c:" K3 "\n");
    struct gen *g3 = reload_build(&R, g2, &e);
    assert_non_null(g3);
    int32_t c = (int32_t)g3->uid[0];
    assert_true((uint32_t)c >= g2->nusers);
    double dc = 0;
    assert_int_equal(gen_user_fate(g2, c, 200, &dc), GEN_DRAIN);
    assert_true(dc == 205);
    /* g3 says close (the default): a draining connection is closed now */
    assert_int_equal(gen_user_fate(g3, b, 101, &d), GEN_CLOSE);

    /* b added back before its drain ended: it goes on, no longer draining */
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\nsecret = b:" K2 "\n"
               "removed-user = drain\n");
    struct gen *g4 = reload_build(&R, g3, &e);
    assert_non_null(g4);
    assert_int_equal(gen_user_fate(g4, b, 102, &d), GEN_KEEP);
    assert_true(d == 0);
    assert_int_equal(gen_user_fate(g4, c, 102, &dc), GEN_DRAIN);
    assert_true(dc == 205);

    /* bad values are refused */
    memset(&e, 0, sizeof e);
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\n"
               "removed-user = keep\ndrain-timeout = 10ms\n");
    assert_null(reload_build(&R, g4, &e));
    assert_int_equal(e.count, 2);
    assert_non_null(strstr(e.msg[0], ":4: 'keep' is not one of: close drain"));
    assert_non_null(strstr(e.msg[1], ":5: drain-timeout must be at least"));
    gen_unref(g1);
    gen_unref(g2);
    gen_unref(g3);
    gen_unref(g4);
}

#define ME_SECRET_128                                                                          \
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"                         \
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* Middle mode: the ME table is part of the generation, loaded by the build; a reload that
 * cannot load the files keeps the running table (and says why); the last reference to a
 * generation drops its reference to the table. */
static void test_me_table(void **state)
{
    (void)state;
    static struct config_errors e;
    char conf[512];
    snprintf(conf, sizeof conf,
             "listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\n"
             "ad-tag = 0123456789abcdef0123456789abcdef\nproxy-secret-file = %s\n"
             "proxy-config-file = %s\n", secret_path, me_path);
    write_conf(conf);
    write_file(secret_path, ME_SECRET_128);
    write_file(me_path, "proxy_for 2 127.0.0.1:8888;\nproxy_for 2 127.0.0.1:8889;\ndefault 2;\n");
    struct gen *g1 = reload_build(&R, NULL, &e);
    assert_non_null(g1);
    assert_non_null(g1->me);
    assert_int_equal(g1->me->naddrs, 2);
    assert_int_equal(g1->me->secret_len, 128);
    assert_string_equal(R.me_err, "");

    /* a reload reads the files again: a new table */
    write_file(me_path, "proxy_for 2 127.0.0.1:8890;\ndefault 2;\n");
    struct gen *g2 = reload_build(&R, g1, &e);
    assert_non_null(g2);
    assert_int_equal(e.count, 0);
    assert_true(g2->me && g2->me != g1->me);
    assert_int_equal(g2->me->naddrs, 1);

    /* a bad file: the generation is good, with the running table */
    write_file(me_path, "proxy_for 2 nonsense;\n");
    struct gen *g3 = reload_build(&R, g2, &e);
    assert_non_null(g3);
    assert_int_equal(e.count, 0);
    assert_ptr_equal(g3->me, g2->me);
    assert_non_null(strstr(R.me_err, me_path));
    assert_int_equal(atomic_load(&g2->me->refs), 2);
    /* references: a generation's table goes with its last reference */
    gen_ref(g3);
    gen_unref(g3);
    assert_int_equal(atomic_load(&g2->me->refs), 2);
    gen_unref(g3);
    assert_int_equal(atomic_load(&g2->me->refs), 1);
    gen_unref(g2);
    gen_unref(g1);

    /* at start the same bad file is an error (--check-config and the proxy fail on it) */
    memset(&e, 0, sizeof e);
    assert_null(reload_build(&R, NULL, &e));
    assert_int_equal(e.count, 1);
    assert_non_null(strstr(e.msg[0], me_path));
    /* links and doctor build without it */
    R.tool = 1;
    memset(&e, 0, sizeof e);
    struct gen *g4 = reload_build(&R, NULL, &e);
    assert_non_null(g4);
    assert_null(g4->me);
    assert_non_null(strstr(R.me_err, me_path));
    gen_unref(g4);
}

/* Start-up's part of the first build: with no secret anywhere one is drawn (main saves it),
 * a state file's secret is used; max-connections is fitted to the descriptor limit before
 * the generation is checked; the users registry is set up. */
static void test_start(void **state)
{
    (void)state;
    static struct config_errors e;
    static struct users u;
    struct reload_start st;
    char conf[512];
    snprintf(conf, sizeof conf, "listen = 127.0.0.1:9443\nmask = off\nworkers = 2\n"
             "state-file = %s\nmax-connections = 16777216\n", state_path);
    write_conf(conf);
    unlink(state_path);
    struct reload r;
    reload_init(&r, &u, path, 0, NULL);
    r.start = &st;
    struct gen *g = reload_build(&r, NULL, &e);
    if (!g)
        fail_msg("%s", e.msg[0]);
    assert_int_equal(e.count, 0);
    assert_int_equal(st.nworkers, 2);
    assert_true(st.secret_drawn && g->state_secret);
    assert_int_equal(g->opt.nsecrets, 1);
    assert_string_equal(g->opt.secrets[0].name, "default");
    assert_ptr_equal(g->users, &u);
    assert_int_equal(users_count(&u), 1);
    assert_int_equal(st.max_connections, 16777216);
    unsigned long long lim = preflight_fd_limit();
    if (lim < 2ULL * 16777216) { /* fitted: the generation holds what the limit allows */
        assert_false(st.fds.fits);
        assert_true(g->opt.max_connections < 16777216);
        assert_int_equal(g->opt.max_connections, st.fds.fit < 1 ? 1 : st.fds.fit);
    }
    /* the state file's secret is used once there is one */
    assert_int_equal(options_save_state(&g->opt.secrets[0], state_path, conf, sizeof conf), 0);
    struct secret drawn = g->opt.secrets[0];
    gen_unref(g);
    users_destroy(&u);
    g = reload_build(&r, NULL, &e);
    if (!g)
        fail_msg("%s", e.msg[0]);
    assert_false(st.secret_drawn);
    assert_true(g->state_secret);
    assert_memory_equal(g->opt.secrets[0].key, drawn.key, sizeof drawn.key);
    gen_unref(g);
    users_destroy(&u);
}

/* conf with secrets a (the running one) and names new<round>_0..n-1 (keys distinct). */
static void write_users(int round, int n)
{
    static char conf[16384];
    int len = snprintf(conf, sizeof conf, "listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1
                       "\n");
    for (int i = 0; i < n; i++)
        len += snprintf(conf + len, sizeof conf - (size_t)len,
                        "secret = new%d_%d:00112233445566778899aabb%04x%04x\n", round, i, round, i);
    write_conf(conf);
}

/* A reload that fails after interning new names gives them back: repeated bad reloads leave
 * the registry (ids and name index, also after the index grew) exactly as before, and the
 * next good reload hands out the next ids without holes. */
static void test_failed_reload_gives_names_back(void **state)
{
    (void)state;
    static struct config_errors e;
    write_users(0, 1);
    struct gen *g1 = reload_build(&R, NULL, &e);
    assert_non_null(g1);
    assert_int_equal(users_count(&U), 2);
    size_t nslots = U.nslots;
    U.max = 2 + 40; /* room for 40 more: a reload naming 50 new users fails at the 41st */
    for (int round = 1; round <= 5; round++) {
        memset(&e, 0, sizeof e);
        write_users(round, 50); /* 40 interned (the index grows past 64 slots), then full */
        assert_null(reload_build(&R, g1, &e));
        assert_int_equal(e.count, 1);
        assert_non_null(strstr(e.msg[0], "users table is full"));
        assert_int_equal(users_count(&U), 2);
        assert_int_equal(U.nslots, nslots);
        assert_int_equal(users_find(&U, "a"), 0);
        assert_int_equal(users_find(&U, "new0_0"), 1);
        assert_int_equal(users_find(&U, "new1_0"), -1);
        char name[32];
        snprintf(name, sizeof name, "new%d_39", round);
        assert_int_equal(users_find(&U, name), -1);
    }
    memset(&e, 0, sizeof e);
    write_users(9, 40); /* fits: ids 2..41, the names found again */
    struct gen *g2 = reload_build(&R, g1, &e);
    assert_non_null(g2);
    assert_int_equal(users_count(&U), 42);
    assert_int_equal(users_find(&U, "new9_0"), 2);
    assert_int_equal(users_find(&U, "new9_39"), 41);
    assert_int_equal(users_find(&U, "a"), 0);
    assert_string_equal(users_name(&U, 41), "new9_39");
    gen_unref(g1);
    gen_unref(g2);
}

/* The reloader's job: where and how it ran. */
static struct {
    int runs;
    pthread_t thread;
    int idle;         /* it ran at SCHED_IDLE or nice 19 */
    int reaper_empty; /* the reaper was emptied before it */
    struct gen_reaper *reaper;
} J;

static void job(void *arg)
{
    (void)arg;
    J.runs++;
    J.thread = pthread_self();
    int policy = -1;
    struct sched_param sp;
    pthread_getschedparam(pthread_self(), &policy, &sp);
#ifdef SCHED_IDLE
    J.idle = policy == SCHED_IDLE;
#endif
    J.idle |= getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)) == 19;
    J.reaper_empty = atomic_load(&J.reaper->head) == NULL;
}

static void *unref_thread(void *arg)
{
    gen_unref(arg);
    return NULL;
}

/* The proxy's generations (built with a reaper): the last reference, from any thread, puts one
 * on the reaper's stack and gen_reap frees it; the build works out what a worker needs when it
 * adopts one (removed, has_ee); the reloader runs its jobs at idle priority in a thread of its
 * own, the reaper emptied first, and in the caller when it has no thread. */
static void test_reaper_and_reloader(void **state)
{
    (void)state;
    static struct config_errors e;
    struct gen_reaper rp = {NULL};
    R.reaper = &rp;
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\n"
               "secret = t:ee" K2 "6578616d706c652e636f6d\n");
    struct gen *g1 = reload_build(&R, NULL, &e);
    assert_non_null(g1);
    reload_commit(&R, g1);
    assert_int_equal(g1->removed, 0);
    assert_true(g1->has_ee);
    write_conf("listen = 127.0.0.1:9443\nmask = off\nsecret = a:" K1 "\n");
    struct gen *g2 = reload_build(&R, g1, &e);
    assert_non_null(g2);
    reload_commit(&R, g2);
    assert_int_equal(g2->removed, 1);
    assert_false(g2->has_ee);

    gen_ref(g1); /* a worker's */
    gen_unref(g1);
    assert_null(atomic_load(&rp.head));
    gen_unref(g1); /* the last: not freed, put on the stack */
    assert_ptr_equal(atomic_load(&rp.head), g1);
    assert_int_equal(g1->serial, 1);
    assert_int_equal(gen_reap(&rp), 1);
    assert_null(atomic_load(&rp.head));
    assert_int_equal(gen_reap(&rp), 0);

    pthread_t t; /* another thread's last reference */
    assert_int_equal(pthread_create(&t, NULL, unref_thread, g2), 0);
    pthread_join(t, NULL);
    assert_ptr_equal(atomic_load(&rp.head), g2);

    memset(&J, 0, sizeof J);
    J.reaper = &rp;
    struct reloader rd;
    assert_int_equal(reloader_start(&rd, job, NULL, &rp), 0);
    reloader_run(&rd);
    assert_int_equal(J.runs, 1);
    assert_false(pthread_equal(J.thread, pthread_self()));
    assert_true(J.idle);
    assert_true(J.reaper_empty); /* g2 was freed before the job */
    reloader_run(&rd);
    assert_int_equal(J.runs, 2);
    reloader_stop(&rd);
    reloader_stop(&rd); /* once is enough; again does nothing */

    struct reloader none = {.fn = job};
    reloader_run(&none);
    assert_int_equal(J.runs, 3);
    assert_true(pthread_equal(J.thread, pthread_self()));
    reloader_stop(&none);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_generations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_me_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_user_fate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_reload_gives_names_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reaper_and_reloader, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
