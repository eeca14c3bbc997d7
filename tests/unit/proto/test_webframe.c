/* test_webframe.c: WEB shared frames: round trips, every invalid combination, credit, replay. */
#include "proto/webframe.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* Builds a frame into buf and parses it back into *f (which must succeed). */
static void make(uint8_t *buf, size_t cap, uint8_t type, uint32_t stream, const void *payload,
                 uint32_t len, struct webframe *f)
{
    size_t n = webframe_build(type, stream, payload, len, buf, cap);
    assert_int_equal(n, WEBFRAME_HDR_LEN + len);
    assert_int_equal(webframe_parse(buf, n, WEBFRAME_MAX_PAYLOAD, f, NULL), WEBFRAME_OK);
}

/* One frame of a table: its fields and the direction it travels in. */
struct row {
    uint8_t type;
    uint32_t stream;
    const char *payload;
    uint32_t len;
    enum webframe_dir dir;
};

static void test_round_trip(void **state)
{
    (void)state;
    static const struct row ok[] = {
        {WEBFRAME_OPEN, 1, "", 0, WEBFRAME_UP},
        {WEBFRAME_DATA, 0xabcdef, "xyz", 3, WEBFRAME_UP},
        {WEBFRAME_DATA, 17, "z", 1, WEBFRAME_DOWN},
        {WEBFRAME_CLOSE, 17, "", 0, WEBFRAME_UP},
        {WEBFRAME_CLOSE, WEBFRAME_MAX_STREAM, "", 0, WEBFRAME_DOWN},
        {WEBFRAME_WINDOW, 5, "\x00\x01\x00\x00", 4, WEBFRAME_UP},
        {WEBFRAME_WINDOW, 5, "\xff\xff\xff\xff", 4, WEBFRAME_DOWN},
        {WEBFRAME_PING, 0, "tok", 3, WEBFRAME_DOWN},
        {WEBFRAME_PING, 0, "", 0, WEBFRAME_DOWN},
        {WEBFRAME_PONG, 0, "tok", 3, WEBFRAME_UP},
        {WEBFRAME_HELLO, 0, "\x01", 1, WEBFRAME_UP},
        {WEBFRAME_WELCOME, 0, "", 0, WEBFRAME_DOWN},
        {WEBFRAME_BYE, 0, "draining", 8, WEBFRAME_DOWN},
        {WEBFRAME_BYE, 0, "", 0, WEBFRAME_DOWN},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint8_t buf[64], again[64];
        struct webframe f;
        make(buf, sizeof buf, ok[i].type, ok[i].stream, ok[i].payload, ok[i].len, &f);
        assert_int_equal(f.type, ok[i].type);
        assert_int_equal(f.stream, ok[i].stream);
        assert_int_equal(f.len, ok[i].len);
        assert_int_equal(f.total, WEBFRAME_HDR_LEN + ok[i].len);
        assert_memory_equal(f.payload, ok[i].payload, ok[i].len);
        if (webframe_check(&f, ok[i].dir) != 0)
            fail_msg("row %zu refused", i);
        assert_int_equal(webframe_check(&f, !ok[i].dir), /* only DATA, CLOSE, WINDOW go both */
                         ok[i].type >= WEBFRAME_DATA && ok[i].type <= WEBFRAME_WINDOW ? 0 : -1);
        uint8_t h[WEBFRAME_HDR_LEN];
        assert_int_equal(webframe_header(f.type, f.stream, f.len, h), WEBFRAME_HDR_LEN);
        memcpy(again, h, sizeof h);
        memcpy(again + sizeof h, f.payload, f.len);
        assert_memory_equal(again, buf, f.total);
    }
    uint8_t hello[9];
    assert_int_equal(webframe_build(WEBFRAME_HELLO, 0, "\x01", 1, hello, sizeof hello), 9);
    assert_memory_equal(hello, "\x10\x00\x00\x00\x00\x00\x00\x01\x01", 9);
    uint8_t data[10];
    assert_int_equal(webframe_build(WEBFRAME_DATA, 0x123456, "hi", 2, data, sizeof data), 10);
    assert_memory_equal(data, "\x02\x12\x34\x56\x00\x00\x00\x02hi", 10);
}

static void test_parse_limits(void **state)
{
    (void)state;
    uint8_t buf[16];
    struct webframe f;
    size_t need = 0;
    size_t n = webframe_build(WEBFRAME_DATA, 1, "abcd", 4, buf, sizeof buf);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(webframe_parse(buf, i, WEBFRAME_MAX_PAYLOAD, &f, &need),
                         WEBFRAME_NEED_MORE);
        assert_int_equal(need, i < WEBFRAME_HDR_LEN ? WEBFRAME_HDR_LEN : n);
    }
    assert_int_equal(webframe_parse(buf, n, 3, &f, &need), WEBFRAME_BAD);
    assert_int_equal(webframe_parse(buf, n, 4, &f, &need), WEBFRAME_OK);
    /* A length above the limit is refused from the header alone. */
    uint8_t big[WEBFRAME_HDR_LEN] = {WEBFRAME_DATA, 0, 0, 1, 0x00, 0x10, 0x00, 0x01};
    assert_int_equal(webframe_parse(big, sizeof big, SIZE_MAX, &f, &need), WEBFRAME_BAD);
    big[7] = 0;
    assert_int_equal(webframe_parse(big, sizeof big, SIZE_MAX, &f, &need), WEBFRAME_NEED_MORE);
    assert_int_equal(need, WEBFRAME_HDR_LEN + WEBFRAME_MAX_PAYLOAD);
    /* The builders refuse what cannot be framed. */
    uint8_t h[WEBFRAME_HDR_LEN];
    assert_int_equal(webframe_header(WEBFRAME_DATA, WEBFRAME_MAX_STREAM + 1, 1, h), 0);
    assert_int_equal(webframe_header(WEBFRAME_DATA, 1, WEBFRAME_MAX_PAYLOAD + 1, h), 0);
    assert_int_equal(webframe_header(WEBFRAME_DATA, 1, WEBFRAME_MAX_PAYLOAD, h), 8);
    assert_int_equal(webframe_build(WEBFRAME_DATA, 1, "abcd", 4, buf, 11), 0);
    assert_int_equal(webframe_build(WEBFRAME_DATA, 1, "abcd", 4, buf, 7), 0);
}

static void test_batch(void **state)
{
    (void)state;
    static uint8_t body[(WEBFRAME_MAX_BATCH + 1) * WEBFRAME_HDR_LEN];
    size_t off = 0, count = 0;
    for (uint32_t i = 0; i <= WEBFRAME_MAX_BATCH; i++)
        off += webframe_build(WEBFRAME_CLOSE, i + 1, NULL, 0, body + off, sizeof body - off);
    assert_int_equal(webframe_batch(body, off - WEBFRAME_HDR_LEN, WEBFRAME_MAX_PAYLOAD, &count),
                     WEBFRAME_OK);
    assert_int_equal(count, WEBFRAME_MAX_BATCH);
    assert_int_equal(webframe_batch(body, off, WEBFRAME_MAX_PAYLOAD, &count), WEBFRAME_BAD);
    assert_int_equal(webframe_batch(body, 0, WEBFRAME_MAX_PAYLOAD, &count), WEBFRAME_BAD);
    assert_int_equal(webframe_batch(body, 13, WEBFRAME_MAX_PAYLOAD, &count), WEBFRAME_BAD);
    uint8_t two[32];
    size_t n = webframe_build(WEBFRAME_OPEN, 3, NULL, 0, two, sizeof two);
    n += webframe_build(WEBFRAME_DATA, 3, "abc", 3, two + n, sizeof two - n);
    assert_int_equal(webframe_batch(two, n, WEBFRAME_MAX_PAYLOAD, &count), WEBFRAME_OK);
    assert_int_equal(count, 2);
    assert_int_equal(webframe_batch(two, n - 1, WEBFRAME_MAX_PAYLOAD, &count), WEBFRAME_BAD);
    assert_int_equal(webframe_batch(two, n, 2, &count), WEBFRAME_BAD);
}

/* Every stateless refusal: unknown types, wrong stream ids, wrong payloads, wrong direction. */
static void test_invalid(void **state)
{
    (void)state;
    static const struct row bad[] = {
        {0x00, 0, "", 0, WEBFRAME_UP},
        {0x07, 1, "", 0, WEBFRAME_UP},
        {0x12, 0, "", 0, WEBFRAME_DOWN},
        {0xff, 1, "x", 1, WEBFRAME_UP},
        {WEBFRAME_DATA, 0, "x", 1, WEBFRAME_UP},
        {WEBFRAME_DATA, 1, "", 0, WEBFRAME_UP},
        {WEBFRAME_OPEN, 0, "", 0, WEBFRAME_UP},
        {WEBFRAME_OPEN, 1, "x", 1, WEBFRAME_UP},
        {WEBFRAME_OPEN, 1, "", 0, WEBFRAME_DOWN},
        {WEBFRAME_CLOSE, 0, "", 0, WEBFRAME_UP},
        {WEBFRAME_CLOSE, 1, "r", 1, WEBFRAME_DOWN},
        {WEBFRAME_WINDOW, 0, "\0\0\0\1", 4, WEBFRAME_UP},
        {WEBFRAME_WINDOW, 1, "\0\0\0\0", 4, WEBFRAME_UP},
        {WEBFRAME_WINDOW, 1, "\0\0\1", 3, WEBFRAME_UP},
        {WEBFRAME_WINDOW, 1, "\0\0\0\1\0", 5, WEBFRAME_UP},
        {WEBFRAME_PING, 1, "t", 1, WEBFRAME_DOWN},
        {WEBFRAME_PING, 0, "t", 1, WEBFRAME_UP},
        {WEBFRAME_PONG, 1, "t", 1, WEBFRAME_UP},
        {WEBFRAME_PONG, 0, "t", 1, WEBFRAME_DOWN},
        {WEBFRAME_HELLO, 0, "\x02", 1, WEBFRAME_UP},
        {WEBFRAME_HELLO, 0, "", 0, WEBFRAME_UP},
        {WEBFRAME_HELLO, 0, "\x01\x01", 2, WEBFRAME_UP},
        {WEBFRAME_HELLO, 1, "\x01", 1, WEBFRAME_UP},
        {WEBFRAME_HELLO, 0, "\x01", 1, WEBFRAME_DOWN},
        {WEBFRAME_WELCOME, 0, "x", 1, WEBFRAME_DOWN},
        {WEBFRAME_WELCOME, 2, "", 0, WEBFRAME_DOWN},
        {WEBFRAME_WELCOME, 0, "", 0, WEBFRAME_UP},
        {WEBFRAME_BYE, 3, "", 0, WEBFRAME_DOWN},
        {WEBFRAME_BYE, 0, "", 0, WEBFRAME_UP},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t buf[32];
        struct webframe f;
        make(buf, sizeof buf, bad[i].type, bad[i].stream, bad[i].payload, bad[i].len, &f);
        if (webframe_check(&f, bad[i].dir) != -1)
            fail_msg("row %zu accepted", i);
    }
    static uint8_t big[WEBFRAME_HDR_LEN + WEBFRAME_BYE_MAX + 1], tok[WEBFRAME_BYE_MAX + 1];
    struct webframe f;
    make(big, sizeof big, WEBFRAME_PING, 0, tok, WEBFRAME_TOKEN_MAX, &f);
    assert_int_equal(webframe_check(&f, WEBFRAME_DOWN), 0);
    make(big, sizeof big, WEBFRAME_PING, 0, tok, WEBFRAME_TOKEN_MAX + 1, &f);
    assert_int_equal(webframe_check(&f, WEBFRAME_DOWN), -1);
    make(big, sizeof big, WEBFRAME_PONG, 0, tok, WEBFRAME_TOKEN_MAX + 1, &f);
    assert_int_equal(webframe_check(&f, WEBFRAME_UP), -1);
    make(big, sizeof big, WEBFRAME_BYE, 0, tok, WEBFRAME_BYE_MAX, &f);
    assert_int_equal(webframe_check(&f, WEBFRAME_DOWN), 0);
    make(big, sizeof big, WEBFRAME_BYE, 0, tok, WEBFRAME_BYE_MAX + 1, &f);
    assert_int_equal(webframe_check(&f, WEBFRAME_DOWN), -1);
}

/* Builds a frame for stream (0 for the session types), checks it for dir (which must pass) and
 * hands it to webframe_session_step (st NULL) or webframe_stream_step. */
static enum webframe_verdict run(struct webframe_session *s, struct webframe_stream *st,
                                 uint8_t type, const void *p, uint32_t len, enum webframe_dir dir)
{
    static uint8_t buf[WEBFRAME_HDR_LEN + WEBFRAME_MAX_PAYLOAD];
    struct webframe f;
    uint32_t stream = type >= WEBFRAME_OPEN && type <= WEBFRAME_WINDOW ? 9 : 0;
    make(buf, sizeof buf, type, stream, p, len, &f);
    assert_int_equal(webframe_check(&f, dir), 0);
    return st ? webframe_stream_step(st, &f, dir) : webframe_session_step(s, &f, dir);
}

static enum webframe_verdict step(struct webframe_stream *st, uint8_t type, const void *p,
                                  uint32_t len, enum webframe_dir dir)
{
    return run(NULL, st, type, p, len, dir);
}

/* Session frames in order: each row's frame (stream 9 for the stream types) and its verdict. */
static void test_session_order(void **state)
{
    (void)state;
    static const struct {
        uint8_t type;
        const char *payload;
        uint32_t len;
        enum webframe_dir dir;
        enum webframe_verdict want;
    } seq[] = {
        /* Nothing before HELLO up, nothing before WELCOME down. */
        {WEBFRAME_OPEN, "", 0, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_PONG, "", 0, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_DATA, "x", 1, WEBFRAME_DOWN, WEBFRAME_FATAL},
        {WEBFRAME_BYE, "", 0, WEBFRAME_DOWN, WEBFRAME_FATAL},
        {WEBFRAME_HELLO, "\x01", 1, WEBFRAME_UP, WEBFRAME_ACCEPT},
        {WEBFRAME_HELLO, "\x01", 1, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_WELCOME, "", 0, WEBFRAME_DOWN, WEBFRAME_ACCEPT},
        {WEBFRAME_WELCOME, "", 0, WEBFRAME_DOWN, WEBFRAME_FATAL},
        {WEBFRAME_OPEN, "", 0, WEBFRAME_UP, WEBFRAME_ACCEPT},
        {WEBFRAME_DATA, "x", 1, WEBFRAME_DOWN, WEBFRAME_ACCEPT},
        /* PING and PONG: one at a time, the exact token. */
        {WEBFRAME_PONG, "t1", 2, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_PING, "t1", 2, WEBFRAME_DOWN, WEBFRAME_ACCEPT},
        {WEBFRAME_PING, "t2", 2, WEBFRAME_DOWN, WEBFRAME_FATAL},
        {WEBFRAME_PONG, "t2", 2, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_PONG, "t", 1, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_PONG, "t1x", 3, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_PONG, "t1", 2, WEBFRAME_UP, WEBFRAME_ACCEPT},
        {WEBFRAME_PONG, "t1", 2, WEBFRAME_UP, WEBFRAME_FATAL},
        {WEBFRAME_PING, "", 0, WEBFRAME_DOWN, WEBFRAME_ACCEPT},
        {WEBFRAME_PONG, "", 0, WEBFRAME_UP, WEBFRAME_ACCEPT},
        /* BYE is the last frame down; up still goes (the client may still close its streams). */
        {WEBFRAME_BYE, "bye", 3, WEBFRAME_DOWN, WEBFRAME_ACCEPT},
        {WEBFRAME_CLOSE, "", 0, WEBFRAME_DOWN, WEBFRAME_FATAL},
        {WEBFRAME_BYE, "", 0, WEBFRAME_DOWN, WEBFRAME_FATAL},
        {WEBFRAME_CLOSE, "", 0, WEBFRAME_UP, WEBFRAME_ACCEPT},
    };
    struct webframe_session s = {0};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++)
        if (run(&s, NULL, seq[i].type, seq[i].payload, seq[i].len, seq[i].dir) != seq[i].want)
            fail_msg("row %zu: not the verdict expected", i);
}

static void test_stream_lifecycle(void **state)
{
    (void)state;
    struct webframe_stream st = {0};
    /* An id never opened: every stream frame is fatal; so is a session frame. */
    assert_int_equal(step(&st, WEBFRAME_DATA, "x", 1, WEBFRAME_UP), WEBFRAME_FATAL);
    assert_int_equal(step(&st, WEBFRAME_WINDOW, "\0\0\0\1", 4, WEBFRAME_DOWN), WEBFRAME_FATAL);
    assert_int_equal(step(&st, WEBFRAME_CLOSE, "", 0, WEBFRAME_UP), WEBFRAME_FATAL);
    uint8_t buf[16];
    struct webframe hello;
    make(buf, sizeof buf, WEBFRAME_HELLO, 0, "\x01", 1, &hello);
    assert_int_equal(webframe_stream_step(&st, &hello, WEBFRAME_UP), WEBFRAME_FATAL);
    assert_int_equal(st.state, WEBFRAME_STREAM_UNKNOWN);
    /* OPEN, DATA both ways, CLOSE; then late frames are dropped and the id is never reused. */
    assert_int_equal(step(&st, WEBFRAME_OPEN, NULL, 0, WEBFRAME_UP), WEBFRAME_ACCEPT);
    assert_int_equal(st.state, WEBFRAME_STREAM_LIVE);
    assert_int_equal(st.up_credit, WEBFRAME_INITIAL_WINDOW);
    assert_int_equal(st.down_credit, WEBFRAME_INITIAL_WINDOW);
    assert_int_equal(step(&st, WEBFRAME_OPEN, NULL, 0, WEBFRAME_UP), WEBFRAME_FATAL);
    assert_int_equal(step(&st, WEBFRAME_DATA, "abc", 3, WEBFRAME_UP), WEBFRAME_ACCEPT);
    assert_int_equal(st.up_credit, WEBFRAME_INITIAL_WINDOW - 3);
    assert_int_equal(step(&st, WEBFRAME_DATA, "ab", 2, WEBFRAME_DOWN), WEBFRAME_ACCEPT);
    assert_int_equal(st.down_credit, WEBFRAME_INITIAL_WINDOW - 2);
    assert_int_equal(step(&st, WEBFRAME_CLOSE, NULL, 0, WEBFRAME_UP), WEBFRAME_ACCEPT);
    assert_int_equal(st.state, WEBFRAME_STREAM_CLOSED);
    assert_int_equal(step(&st, WEBFRAME_DATA, "x", 1, WEBFRAME_UP), WEBFRAME_DROP);
    assert_int_equal(step(&st, WEBFRAME_DATA, "x", 1, WEBFRAME_DOWN), WEBFRAME_DROP);
    assert_int_equal(step(&st, WEBFRAME_WINDOW, "\0\0\0\1", 4, WEBFRAME_UP), WEBFRAME_DROP);
    assert_int_equal(step(&st, WEBFRAME_CLOSE, NULL, 0, WEBFRAME_DOWN), WEBFRAME_DROP);
    assert_int_equal(step(&st, WEBFRAME_OPEN, NULL, 0, WEBFRAME_UP), WEBFRAME_FATAL);
    assert_int_equal(st.up_credit, WEBFRAME_INITIAL_WINDOW - 3);
}

static void test_window(void **state)
{
    (void)state;
    struct webframe_stream st = {0};
    static uint8_t chunk[WEBFRAME_MAX_PAYLOAD];
    assert_int_equal(step(&st, WEBFRAME_OPEN, NULL, 0, WEBFRAME_UP), WEBFRAME_ACCEPT);
    /* The client spends the 4 MiB window in 1 MiB frames; one byte more is fatal. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(step(&st, WEBFRAME_DATA, chunk, sizeof chunk, WEBFRAME_UP),
                         WEBFRAME_ACCEPT);
    assert_int_equal(st.up_credit, 0);
    assert_int_equal(step(&st, WEBFRAME_DATA, "x", 1, WEBFRAME_UP), WEBFRAME_FATAL);
    /* The relay's WINDOW (down) gives the client credit back. */
    assert_int_equal(step(&st, WEBFRAME_WINDOW, "\0\0\0\2", 4, WEBFRAME_DOWN), WEBFRAME_ACCEPT);
    assert_int_equal(st.up_credit, 2);
    assert_int_equal(step(&st, WEBFRAME_DATA, "xyz", 3, WEBFRAME_UP), WEBFRAME_FATAL);
    assert_int_equal(step(&st, WEBFRAME_DATA, "xy", 2, WEBFRAME_UP), WEBFRAME_ACCEPT);
    /* The client's WINDOW (up) adds to the relay's credit, up to UINT32_MAX and no further. */
    uint32_t room = UINT32_MAX - WEBFRAME_INITIAL_WINDOW;
    uint8_t delta[4] = {(uint8_t)(room >> 24), (uint8_t)(room >> 16), (uint8_t)(room >> 8),
                        (uint8_t)room};
    assert_int_equal(step(&st, WEBFRAME_WINDOW, delta, 4, WEBFRAME_UP), WEBFRAME_ACCEPT);
    assert_int_equal(st.down_credit, UINT32_MAX);
    assert_int_equal(step(&st, WEBFRAME_WINDOW, "\0\0\0\1", 4, WEBFRAME_UP), WEBFRAME_FATAL);
    assert_int_equal(st.down_credit, UINT32_MAX);
    /* The arithmetic on its own. */
    uint32_t c = 10;
    assert_int_equal(webframe_credit_take(&c, 11), -1);
    assert_int_equal(c, 10);
    assert_int_equal(webframe_credit_take(&c, 10), 0);
    assert_int_equal(c, 0);
    assert_int_equal(webframe_credit_take(&c, 0), 0);
    assert_int_equal(webframe_credit_grant(&c, 0), -1);
    assert_int_equal(webframe_credit_grant(&c, UINT32_MAX), 0);
    assert_int_equal(webframe_credit_grant(&c, 1), -1);
    assert_int_equal(c, UINT32_MAX);
    c = 5;
    assert_int_equal(webframe_credit_grant(&c, UINT32_MAX - 4), -1);
    assert_int_equal(webframe_credit_grant(&c, UINT32_MAX - 5), 0);
}

static void test_up_seq(void **state)
{
    (void)state;
    struct webframe_up u = {0};
    uint8_t a[32], b[32];
    memset(a, 0xaa, sizeof a);
    memset(b, 0xaa, sizeof b);
    b[31] = 0xab;
    assert_int_equal(webframe_up_judge(&u, 0, a), WEBFRAME_REFUSE);
    assert_int_equal(webframe_up_judge(&u, 2, a), WEBFRAME_REFUSE);
    assert_int_equal(webframe_up_judge(&u, 1, a), WEBFRAME_FRESH);
    /* Not committed yet (a 503 for backpressure): the same seq is still the fresh one. */
    assert_int_equal(webframe_up_judge(&u, 1, b), WEBFRAME_FRESH);
    webframe_up_commit(&u, 1, a);
    assert_int_equal(webframe_up_judge(&u, 1, a), WEBFRAME_REPLAY);
    assert_int_equal(webframe_up_judge(&u, 1, b), WEBFRAME_REFUSE);
    assert_int_equal(webframe_up_judge(&u, 0, a), WEBFRAME_REFUSE);
    assert_int_equal(webframe_up_judge(&u, 3, a), WEBFRAME_REFUSE);
    assert_int_equal(webframe_up_judge(&u, 2, b), WEBFRAME_FRESH);
    webframe_up_commit(&u, 2, b);
    assert_int_equal(webframe_up_judge(&u, 1, a), WEBFRAME_REFUSE); /* older than the last */
    assert_int_equal(webframe_up_judge(&u, 2, b), WEBFRAME_REPLAY);
    u.committed = UINT64_MAX;
    assert_int_equal(webframe_up_judge(&u, 0, b), WEBFRAME_REFUSE); /* no wrap */
    assert_int_equal(webframe_up_judge(&u, UINT64_MAX, b), WEBFRAME_REPLAY);
}

static void test_down_cursor(void **state)
{
    (void)state;
    struct webframe_down d = {0};
    assert_int_equal(webframe_down_judge(&d, 1), WEBFRAME_REFUSE);
    assert_int_equal(webframe_down_judge(&d, 0), WEBFRAME_FRESH); /* an empty 204 keeps 0 */
    assert_int_equal(webframe_down_judge(&d, 0), WEBFRAME_FRESH);
    assert_int_equal(webframe_down_issue(&d), 1);
    assert_int_equal(webframe_down_issue(&d), 0); /* one batch at a time */
    assert_int_equal(webframe_down_judge(&d, 0), WEBFRAME_REPLAY); /* the answer was lost */
    assert_int_equal(webframe_down_judge(&d, 2), WEBFRAME_REFUSE);
    assert_int_equal(d.acked, 0);
    assert_int_equal(webframe_down_judge(&d, 1), WEBFRAME_FRESH); /* acknowledges batch 1 */
    assert_int_equal(d.acked, 1);
    assert_int_equal(d.pending, 0);
    assert_int_equal(webframe_down_judge(&d, 0), WEBFRAME_REFUSE); /* old */
    assert_int_equal(webframe_down_judge(&d, 2), WEBFRAME_REFUSE); /* never issued */
    assert_int_equal(webframe_down_issue(&d), 2);
    assert_int_equal(webframe_down_judge(&d, 1), WEBFRAME_REPLAY);
    assert_int_equal(webframe_down_judge(&d, 2), WEBFRAME_FRESH);
    d.acked = UINT64_MAX;
    assert_int_equal(webframe_down_issue(&d), 0);
}

static void test_decimal(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(webframe_decimal("0", 1, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(webframe_decimal("16777215", 8, &v), 0);
    assert_int_equal(v, 16777215);
    assert_int_equal(webframe_decimal("18446744073709551615", 20, &v), 0);
    assert_true(v == UINT64_MAX);
    const char *bad[] = {"", "01", "00", "+1", "-1", " 1", "1 ", "1a", "0x1",
                         "18446744073709551616", "99999999999999999999", "100000000000000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (webframe_decimal(bad[i], strlen(bad[i]), &v) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_batch),         cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_session_order), cmocka_unit_test(test_stream_lifecycle),
        cmocka_unit_test(test_window),        cmocka_unit_test(test_up_seq),
        cmocka_unit_test(test_down_cursor),   cmocka_unit_test(test_decimal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
