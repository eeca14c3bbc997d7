/* test_weblimits.c: the web-* limit keys: their defaults are the contract's (websess's), and
 * each key reaches its limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "config/options.h"
#include "web/websess.h"

static struct options O;
static struct config_parser P;

static void load(const char *text)
{
    assert_int_equal(options_init(&P, &O), 0);
    assert_int_equal(config_load_buffer(&P, "w.conf", text, strlen(text)), 0);
}

static void test_defaults_are_the_contracts(void **state)
{
    (void)state;
    load("");
    struct websess_limits want, got;
    websess_limits_default(&want);
    websess_limits_from(&O, &got);
#define SAME(f) assert_true(want.f == got.f)
    SAME(sessions), SAME(streams), SAME(streams_per_session), SAME(closed_ids);
    SAME(pending_session), SAME(pending_process), SAME(items_session), SAME(items_process);
    SAME(item_charge), SAME(bootstraps), SAME(session_rate), SAME(session_burst);
    SAME(stream_rate), SAME(stream_burst), SAME(bootstrap_rate), SAME(bootstrap_burst);
    SAME(body_bytes), SAME(frame_payload), SAME(data_chunk), SAME(batch_bytes);
    SAME(bootstrap_ms), SAME(grace_ms), SAME(poll_ms), SAME(dial_ms), SAME(dials);
#undef SAME
    assert_int_equal(got.sessions, 128);
    assert_int_equal(got.poll_ms, 25000);
    assert_int_equal(got.grace_ms, 120000);
    options_free(&O);
}

static void test_keys_reach_their_limits(void **state)
{
    (void)state;
    load("web-sessions = 5\nweb-streams = 70\nweb-streams-per-session = 7\n"
         "web-pending-session = 1m\nweb-pending-process = 8m\nweb-bootstraps = 9\n"
         "web-session-rate = 10\nweb-stream-rate = 2000\nweb-bootstrap-rate = 30\n"
         "web-body-max = 256k\nweb-bootstrap-ttl = 30s\nweb-grace = 3s\nweb-poll = 2s\n");
    struct websess_limits l;
    websess_limits_from(&O, &l);
    assert_int_equal(l.sessions, 5);
    assert_int_equal(l.streams, 70);
    assert_int_equal(l.streams_per_session, 7);
    assert_int_equal(l.pending_session, 1u << 20);
    assert_int_equal(l.pending_process, 8u << 20);
    assert_int_equal(l.bootstraps, 9);
    assert_int_equal(l.session_rate, 10);
    assert_int_equal(l.session_burst, 10); /* at most the rate */
    assert_int_equal(l.stream_rate, 2000);
    assert_int_equal(l.stream_burst, 512); /* the default, below the rate */
    assert_int_equal(l.bootstrap_rate, 30);
    assert_int_equal(l.bootstrap_burst, 30);
    assert_int_equal(l.body_bytes, 256u << 10);
    assert_int_equal(l.bootstrap_ms, 30000);
    assert_int_equal(l.grace_ms, 3000);
    assert_int_equal(l.poll_ms, 2000);
    options_free(&O);
}

static void test_bounds(void **state)
{
    (void)state;
    assert_int_equal(options_init(&P, &O), 0);
    const char *bad[] = {"web-sessions = 0\n", "web-poll = 10m\n", "web-body-max = 1k\n",
                         "web-grace = 10ms\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_not_equal(config_load_buffer(&P, "w.conf", bad[i], strlen(bad[i])), 0);
    options_free(&O);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_are_the_contracts),
        cmocka_unit_test(test_keys_reach_their_limits),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
