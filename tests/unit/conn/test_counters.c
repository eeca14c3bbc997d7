/* test_counters.c: the counter table's outputs (/metrics, /stats, SIGUSR1 lines, the sum) for counters that each hold a value of their own. */
#include "conn/counters.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#include "core/sbuf.h"
#include "conn/conn.h"
#include "admin/metrics.h"
#include "config/reload.h"
#include "users/users.h"

/* Every scalar counter by name (the test's own list, not the table's): counter k holds
 * 1000 + k, so a value names its counter. */
#define SCALARS(X)                                                                             \
    X(accepted) X(active) X(handshakes) X(dc_connects) X(dc_connect_fails) X(bytes_up)         \
    X(bytes_down) X(reads) X(writes) X(spliced) X(pipe_full) X(block_waits)                    \
    X(tls_handshakes) X(rejected) X(masked) X(replays) X(acl_denied) X(acl_not_allowed)        \
    X(pp_untrusted) X(pp_bad) X(pp_local) X(socks_fails) X(store_replays) X(store_failed)      \
    X(strangers_refused) X(hello_budget) X(user_refused) X(acc_rate) X(handshake_cap)          \
    X(unknown_sni) X(wide_reads) X(ctr_parked) X(tls_hmacs) X(me_handshakes)                   \
    X(me_handshake_fails) X(me_connect_fails) X(me_link_drops) X(me_links_open)                \
    X(me_dead_closed) X(me_slow_closed) X(me_link_pauses) X(me_requests) X(me_answers)         \
    X(me_acks) X(me_pings) X(me_unknown) X(me_stalled_evicted)

static void fill(struct proxy_stats *s)
{
    memset(s, 0, sizeof *s);
    uint64_t v = 1000;
#define SET(f) STAT_ADD(&s->f, v++);
    SCALARS(SET)
#undef SET
    for (int r = 0; r < CR_COUNT; r++)
        STAT_ADD(&s->closed[r], 3000 + (uint64_t)r);
    for (int k = 0; k < CK_COUNT; k++) {
        STAT_ADD(&s->kind_total[k], 4000 + (uint64_t)k);
        STAT_ADD(&s->kind_active[k], 10 + (uint64_t)k);
    }
    for (int d = 0; d < CONN_DC_SLOTS; d++)
        for (int dir = 0; dir < 2; dir++)
            if (d < 7) /* slots from 5 on are shown only once used */
                STAT_ADD(&s->dc_bytes[d][dir], 5000 + 2 * (uint64_t)d + (uint64_t)dir);
}

/* One worker whose counters are fill()'s, and a generation with two users (alice with a
 * quota and an expiry, bob without) whose counters hold values of their own too. */
struct fixture {
    struct proxy_worker pw;
    struct worker w;
    struct gen g;
    struct metrics_shared ms;
    struct users users;
    struct secret secrets[2];
    uint32_t uid[2];
    struct user_limit alice;
    const struct user_limit *lim[2];
};

static void users_fill(struct fixture *f)
{
    assert_int_equal(users_init(&f->users, 1), 0);
    static const char *const names[2] = {"alice", "bob"};
    for (int i = 0; i < 2; i++) {
        snprintf(f->secrets[i].name, sizeof f->secrets[i].name, "%s", names[i]);
        f->secrets[i].kind = i ? SECRET_EE : SECRET_PLAIN;
        int32_t id = users_intern(&f->users, names[i]);
        assert_true(id >= 0);
        f->uid[i] = (uint32_t)id;
        struct user_stats *us = users_wstats(&f->users, 0, (uint32_t)id);
        uint64_t v = 7000 + 100 * (uint64_t)i;
        STAT_ADD(&us->bytes_up, v + 1);
        STAT_ADD(&us->bytes_down, v + 2);
        STAT_ADD(&us->active, v + 3);
        STAT_ADD(&us->conns, v + 4);
        for (int r = 0; r < UR_COUNT; r++)
            STAT_ADD(&us->refused[r], v + 10 + (uint64_t)r);
        shared64_store(&users_shared(&f->users, (uint32_t)id)->used, v + 50);
    }
    f->alice.quota = 1000000;
    f->alice.expires = 1900000000;
    f->lim[0] = &f->alice;
    f->g.opt.secrets = f->secrets;
    f->g.opt.nsecrets = 2;
    f->g.users = &f->users;
    f->g.uid = f->uid;
    f->g.lim = f->lim;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    fill(&f->pw.stats);
    uint64_t v = 6000;
#define POOL_SET(fld, label) STAT_ADD(&f->pw.dcpool.stats.fld, v++);
    DCPOOL_COUNTERS(POOL_SET)
#undef POOL_SET
    STAT_ADD(&f->pw.dcpool.stats.ready, 6100);
    users_fill(f);
    f->g.serial = 3;
    snprintf(f->g.opt.public_host, sizeof f->g.opt.public_host, "proxy.example");
    f->ms.opt = &f->g.opt;
    f->ms.pws = &f->pw;
    f->ms.ws = &f->w;
    f->ms.nworkers = 1;
    f->ms.start_time = 1700000000;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    users_destroy(&f->users);
    free(f);
    return 0;
}

/* The contents of $MTPROXY_VECTORS/name (NUL-terminated; the caller frees). */
static char *vector(const char *name)
{
    char *v = testutil_vector(name, NULL);
    if (!v)
        fail_msg("cannot read vector %s", name);
    return v;
}

/* Compares text with the vector name line by line, naming the first line that differs; the
 * build's version, "VERSION" in the vector. With MTPROXY_WRITE_VECTORS set, writes text there
 * instead (to make the vector). */
static void check_vector(const char *name, const char *rendered)
{
    const char *ver = "\"" MTPROXY_VERSION "\"";
    char *text = malloc(2 * strlen(rendered) + 1), *t = text;
    assert_non_null(text);
    for (const char *p = rendered; *p;) {
        if (!strncmp(p, ver, strlen(ver))) {
            t += sprintf(t, "\"VERSION\"");
            p += strlen(ver);
        } else {
            *t++ = *p++;
        }
    }
    *t = 0;
    const char *out = getenv("MTPROXY_WRITE_VECTORS");
    if (out) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", out, name);
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        fputs(text, fp);
        fclose(fp);
        free(text);
        return;
    }
    char *want = vector(name);
    const char *a = text, *b = want;
    for (int line = 1; *a || *b; line++) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la))
            fail_msg("%s line %d: got \"%.*s\", want \"%.*s\"", name, line, (int)la, a,
                     (int)lb, b);
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
    free(want);
    free(text);
}

/* /metrics, every sample and HELP/TYPE line, as it was before the table (the vector was made
 * by this test against the hand-written emitters). */
static void test_prometheus(void **state)
{
    struct fixture *f = *state;
    struct sbuf b = {.max = 1 << 20};
    assert_int_equal(metrics_render_prometheus(&f->ms, &f->g, &b), 0);
    sbuf_add(&b, "", 1);
    check_vector("counters_metrics.prom", b.p);
    sbuf_free(&b);
}

/* /stats, with "now" and "uptime" (the clock) cut out. */
static void test_json(void **state)
{
    struct fixture *f = *state;
    struct sbuf b = {.max = 1 << 20};
    assert_int_equal(metrics_render_json(&f->ms, &f->g, 0, &b), 0);
    sbuf_add(&b, "", 1);
    char *now = strstr(b.p, ",\"now\":"), *workers = strstr(b.p, ",\"workers\":");
    assert_non_null(now);
    assert_non_null(workers);
    memmove(now, workers, strlen(workers) + 1);
    check_vector("counters_stats.json", b.p);
    sbuf_free(&b);
}

/* The SIGUSR1 lines' counters, each with its label and its own value, in the lines' order. */
static void test_log_lines(void **state)
{
    struct fixture *f = *state;
    static const char *const want[COUNTERS_LOG_COUNT] = {
        [COUNTERS_LOG_MAIN] = " accepted 1000 active 1001 handshakes 1002 dc_connects 1003 "
                              "dc_connect_fails 1004 bytes_up 1005 bytes_down 1006 reads 1007 "
                              "writes 1008 spliced 1009 pipe_full 1010 block_waits 1011",
        [COUNTERS_LOG_LIMITS] = " user_refused 1026 acc_rate 1027 handshake_cap 1028",
        [COUNTERS_LOG_RELAY] = " ctr_parked 1031 wide_reads 1030",
        [COUNTERS_LOG_TLS] = " tls_handshakes 1012 rejected 1013 masked 1014 replays 1015 "
                             "tls_hmacs 1032 strangers_refused 1024 hello_budget 1025 "
                             "unknown_sni 1029",
        [COUNTERS_LOG_ACCESS] = " acl_denied 1016 acl_not_allowed 1017 pp_untrusted 1018 "
                                "pp_bad 1019 pp_local 1020 socks_fails 1021 store_replays "
                                "1022 store_failed 1023",
        [COUNTERS_LOG_ME] = " handshakes 1033 handshake_fails 1034 connect_fails 1035 "
                            "link_drops 1036 dead_closed 1038 slow_closed 1039 link_pauses "
                            "1040 requests 1041 answers 1042 acks 1043 pings 1044 unknown "
                            "1045 links_open 1037 stalled_evicted 1046",
    };
    char line[1024];
    for (int l = 0; l < COUNTERS_LOG_COUNT; l++)
        assert_string_equal(counters_log_line(&f->pw.stats, l, line, sizeof line), want[l]);
    /* A short buffer: cut, still a string. */
    char tiny[12];
    assert_string_equal(counters_log_line(&f->pw.stats, COUNTERS_LOG_MAIN, tiny, sizeof tiny),
                        " accepted 1");
}

/* Each line's positions are 0, 1, 2 ... once each, and each summary key's too. */
static void test_positions(void **state)
{
    (void)state;
    int seen[COUNTERS_LOG_COUNT][64] = {{0}}, json[64] = {0};
    for (size_t i = 0; i < counters_nrows; i++) {
        const struct counters_row *r = &counters_rows[i];
        if (r->kind != CROW_COUNTER)
            continue;
        if (r->log) {
            assert_true(r->log_pos >= 0 && r->log_pos < 64);
            assert_int_equal(seen[r->log_line][r->log_pos]++, 0);
        }
        if (r->json)
            json[r->json_pos]++;
    }
    for (int l = 0; l < COUNTERS_LOG_COUNT; l++) {
        int n = 64;
        while (n > 0 && !seen[l][n - 1])
            n--;
        for (int p = 0; p < n; p++)
            assert_int_equal(seen[l][p], 1);
    }
    for (int p = 1; p < 64; p++)
        assert_true(!json[p] || json[p - 1]);
}

/* The sum adds every counter, arrays too. */
static void test_sum(void **state)
{
    (void)state;
    struct proxy_stats *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    fill(a);
    fill(b);
    proxy_stats_add(b, a);
    proxy_stats_add(b, a);
    const stat_t *x = (const stat_t *)(const void *)a, *y = (const stat_t *)(const void *)b;
    for (size_t i = 0; i < sizeof *a / sizeof(stat_t); i++)
        assert_true(STAT_GET(&y[i]) == 3 * STAT_GET(&x[i]));
    free(a);
    free(b);
}

/* The metrics server's Host check (DNS rebinding): loopback names and addresses, any port. */
static void test_host_is_loopback(void **state)
{
    static const char *const yes[] = {"localhost", "LocalHost:19090", "127.0.0.1",
                                      "127.1.2.3:80", "[::1]", "[::1]:9100",
                                      "[0:0:0:0:0:0:0:1]:1"};
    static const char *const no[] = {"", "evil.example", "evil.example:19090",
                                     "localhost.evil.example", "128.0.0.1", "127.0.0.1.nip.io",
                                     "[::2]", "[::1", "::1", "localhost:", "localhost:x",
                                     "localhost:123456", "127.0.0.1:80:80", "[::1]x",
                                     "0x7f.0.0.1", "127.1"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        assert_true(metrics_host_is_loopback(yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (metrics_host_is_loopback(no[i]))
            fail_msg("%s taken for loopback", no[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prometheus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_lines, setup, teardown),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_sum),
        cmocka_unit_test(test_host_is_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
