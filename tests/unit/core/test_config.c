/* test_config.c: the option-table machinery: value parsers, files, command lines, sources. */
#include "core/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* A small table with one option of every type, independent of the proxy's own table. */
struct tconf {
    int flag;
    int num;
    size_t size;
    unsigned dur;
    char name[8];
    int color;
    int items[8];
    int nitems;
    int resets;
};

static int parse_item(void *conf, const char *v, char *err, size_t errlen) {
    struct tconf *c = conf;
    if (strcmp(v, "bad") == 0 || c->nitems >= 8) {
        snprintf(err, errlen, "bad item '%s'", v);
        return -1;
    }
    c->items[c->nitems++] = atoi(v);
    return 0;
}

static void reset_items(void *conf) {
    struct tconf *c = conf;
    c->nitems = 0;
    c->resets++;
}

static const char *const colors[] = {"red", "green", "blue", NULL};

static const struct config_option table[] = {
    {.name = "flag", .type = CFG_BOOL, .offset = offsetof(struct tconf, flag), .def = "off"},
    {.name = "num",
     .type = CFG_INT,
     .offset = offsetof(struct tconf, num),
     .def = "5",
     .min = -10,
     .max = 100},
    {.name = "size",
     .type = CFG_SIZE,
     .offset = offsetof(struct tconf, size),
     .def = "16k",
     .min = 1024,
     .max = 1 << 30},
    {.name = "dur",
     .type = CFG_DURATION,
     .offset = offsetof(struct tconf, dur),
     .def = "10s",
     .min = 100},
    {.name = "name",
     .type = CFG_STRING,
     .offset = offsetof(struct tconf, name),
     .str_size = 8,
     .def = "abc"},
    {.name = "color",
     .type = CFG_ENUM,
     .offset = offsetof(struct tconf, color),
     .names = colors,
     .def = "green"},
    {.name = "item",
     .type = CFG_CUSTOM,
     .flags = CFG_REPEAT,
     .parse = parse_item,
     .reset = reset_items,
     .def = "1"},
};
#define NOPTS (sizeof table / sizeof table[0])

static struct config_parser P;
static struct tconf C;

static int setup(void **state) {
    (void)state;
    memset(&C, 0, sizeof C);
    assert_int_equal(config_init(&P, table, NOPTS, &C), 0);
    return 0;
}

/* 1 if some stored error contains needle. */
static int has_error(const char *needle) {
    for (int i = 0; i < P.errors.count && i < CONFIG_MAX_ERRORS; i++)
        if (strstr(P.errors.msg[i], needle))
            return 1;
    return 0;
}

static int load_text(const char *text) {
    return config_load_buffer(&P, "t.conf", text, strlen(text));
}

/* --- value parsers ---------------------------------------------------------------------- */

static void test_bool(void **state) {
    (void)state;
    static const char *const yes[] = {"on", "yes", "true", "1", "ON", "Yes", "TRUE"};
    static const char *const no[] = {"off", "no", "false", "0", "OFF", "No", "False"};
    char err[128];
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        int v = 0;
        assert_int_equal(config_parse_bool(yes[i], &v, err, sizeof err), 0);
        assert_int_equal(v, 1);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        int v = 1;
        assert_int_equal(config_parse_bool(no[i], &v, err, sizeof err), 0);
        assert_int_equal(v, 0);
    }
    static const char *const bad[] = {"", "2", "onn", "y", " on", "enable"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int v = 7;
        err[0] = 0;
        assert_int_equal(config_parse_bool(bad[i], &v, err, sizeof err), -1);
        assert_int_equal(v, 7);
        assert_non_null(strstr(err, "on/off"));
    }
}

static void test_int(void **state) {
    (void)state;
    char err[128];
    long long v;
    assert_int_equal(config_parse_int("0", &v, err, sizeof err), 0);
    assert_int_equal(v, 0);
    assert_int_equal(config_parse_int("-42", &v, err, sizeof err), 0);
    assert_int_equal(v, -42);
    assert_int_equal(config_parse_int("9223372036854775807", &v, err, sizeof err), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(config_parse_int("-9223372036854775808", &v, err, sizeof err), 0);
    assert_true(v == INT64_MIN);
    static const char *const bad[] = {
        "",    "9223372036854775808",    "-9223372036854775809", "12x", "x",
        "1.5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(config_parse_int(bad[i], &v, err, sizeof err), -1);
        assert_non_null(strstr(err, "not an integer"));
    }
}

static void test_size(void **state) {
    (void)state;
    static const struct {
        const char *s;
        unsigned long long v;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"16k", 16384},
        {"16K", 16384},
        {"16kb", 16384},
        {"16KiB", 16384},
        {"1m", 1 << 20},
        {"4MB", 4u << 20},
        {"2MiB", 2u << 20},
        {"1g", 1ull << 30},
        {"3GiB", 3ull << 30},
        {"7b", 7},
        {"17179869183G", 17179869183ull << 30}, /* the largest that fits 64 bits */
        {"18446744073709551615", UINT64_MAX},
    };
    char err[128];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        unsigned long long v = 0;
        assert_int_equal(config_parse_size(ok[i].s, &v, err, sizeof err), 0);
        assert_true(v == ok[i].v);
    }
    static const char *const bad[] = {"",
                                      "k",
                                      "-1",
                                      "+1",
                                      "1t",
                                      "1 k",
                                      "1kk",
                                      "1.5k",
                                      "17179869184G",
                                      "18446744073709551616",
                                      "18014398509481984k"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned long long v = 99;
        err[0] = 0;
        assert_int_equal(config_parse_size(bad[i], &v, err, sizeof err), -1);
        assert_true(v == 99);
        assert_non_null(strstr(err, "not a size"));
    }
}

static void test_duration(void **state) {
    (void)state;
    static const struct {
        const char *s;
        unsigned long long ms;
    } ok[] = {
        {"0", 0},
        {"500ms", 500},
        {"10", 10000},
        {"10s", 10000},
        {"5m", 300000},
        {"1h", 3600000},
        {"0ms", 0},
        {"18446744073709551615ms", UINT64_MAX},
        {"5124095576030h", 5124095576030ull * 3600000ull},
    };
    char err[128];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        unsigned long long v = 1;
        assert_int_equal(config_parse_duration(ok[i].s, &v, err, sizeof err), 0);
        assert_true(v == ok[i].ms);
    }
    static const char *const bad[] = {"",
                                      "s",
                                      "-1s",
                                      "1d",
                                      "1S",
                                      "1 s",
                                      "1.5s",
                                      "18446744073709551615s",
                                      "5124095576031h",
                                      "307445734561826m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned long long v = 1;
        err[0] = 0;
        assert_int_equal(config_parse_duration(bad[i], &v, err, sizeof err), -1);
        assert_non_null(strstr(err, "not a duration"));
    }
}

/* --- defaults and config_set through the table ------------------------------------------- */

static void test_defaults(void **state) {
    (void)state;
    assert_int_equal(C.flag, 0);
    assert_int_equal(C.num, 5);
    assert_int_equal(C.size, 16384);
    assert_int_equal(C.dur, 10000);
    assert_string_equal(C.name, "abc");
    assert_int_equal(C.color, 1);
    assert_int_equal(C.nitems, 1);
    assert_int_equal(C.items[0], 1);
    assert_int_equal(P.errors.count, 0);
    assert_non_null(config_find(&P, "dur"));
    assert_null(config_find(&P, "durx"));
    assert_null(config_find(&P, ""));
}

static void test_bad_default_is_reported(void **state) {
    (void)state;
    static const struct config_option broken[] = {
        {.name = "n", .type = CFG_INT, .offset = 0, .def = "200", .min = 0, .max = 100},
    };
    int n = 0;
    struct config_parser p;
    assert_int_equal(config_init(&p, broken, 1, &n), -1);
    assert_int_equal(p.errors.count, 1);
    assert_non_null(strstr(p.errors.msg[0], "internal: default of n"));
}

static void test_ranges(void **state) {
    (void)state;
    assert_int_equal(config_set(&P, "num", "-10", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(C.num, -10);
    assert_int_equal(config_set(&P, "num", "100", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(C.num, 100);
    assert_int_equal(config_set(&P, "num", "101", CFG_FROM_ARGS, "w"), -1);
    assert_int_equal(config_set(&P, "num", "-11", CFG_FROM_ARGS, "w"), -1);
    /* far beyond int: must not wrap into range */
    assert_int_equal(config_set(&P, "num", "4294967301", CFG_FROM_ARGS, "w"), -1);
    assert_int_equal(C.num, 100);
    assert_true(has_error("num must be between -10 and 100"));

    assert_int_equal(config_set(&P, "size", "1k", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(C.size, 1024);
    assert_int_equal(config_set(&P, "size", "1023", CFG_FROM_ARGS, "w"), -1);
    assert_int_equal(config_set(&P, "size", "1G", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(config_set(&P, "size", "1073741825", CFG_FROM_ARGS, "w"), -1);
    assert_int_equal(config_set(&P, "size", "1048577k", CFG_FROM_ARGS, "w"), -1);
    /* above INT64_MAX: rejected with a message, not turned negative */
    int before = P.errors.count;
    assert_int_equal(config_set(&P, "size", "9223372036854775808", CFG_FROM_ARGS, "w"), -1);
    assert_int_equal(P.errors.count, before + 1);
    assert_string_equal(P.errors.msg[before], "w: size is too large");
    assert_int_equal(C.size, 1u << 30);

    assert_int_equal(config_set(&P, "dur", "100ms", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(C.dur, 100);
    assert_int_equal(config_set(&P, "dur", "99ms", CFG_FROM_ARGS, "w"), -1);
    assert_true(has_error("dur must be at least 100"));
    assert_int_equal(config_set(&P, "dur", "4294967295ms", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(C.dur, 4294967295u);
    assert_int_equal(config_set(&P, "dur", "4294967296ms", CFG_FROM_ARGS, "w"), -1);
    assert_int_equal(config_set(&P, "dur", "50000h", CFG_FROM_ARGS, "w"), -1);
    assert_true(has_error("dur is too long"));
    assert_int_equal(C.dur, 4294967295u);
}

static void test_string_and_enum(void **state) {
    (void)state;
    assert_int_equal(config_set(&P, "name", "1234567", CFG_FROM_ARGS, "w"), 0);
    assert_string_equal(C.name, "1234567");
    assert_int_equal(config_set(&P, "name", "12345678", CFG_FROM_ARGS, "w"), -1);
    assert_true(has_error("name is longer than 7 characters"));
    assert_string_equal(C.name, "1234567");

    assert_int_equal(config_set(&P, "color", "blue", CFG_FROM_ARGS, "w"), 0);
    assert_int_equal(C.color, 2);
    assert_int_equal(config_set(&P, "color", "Blue", CFG_FROM_ARGS, "w"), -1);
    assert_true(has_error("'Blue' is not one of: red green blue"));
    assert_int_equal(C.color, 2);
}

static void test_unknown_key(void **state) {
    (void)state;
    assert_int_equal(config_set(&P, "nope", "1", CFG_FROM_FILE, "f:9"), -1);
    assert_int_equal(P.errors.count, 1);
    assert_string_equal(P.errors.msg[0], "f:9: unknown key 'nope'");
}

static void test_errors_overflow_kept_counted(void **state) {
    (void)state;
    for (int i = 0; i < CONFIG_MAX_ERRORS + 10; i++)
        config_set(&P, "nope", "1", CFG_FROM_FILE, "x");
    assert_int_equal(P.errors.count, CONFIG_MAX_ERRORS + 10);
    assert_string_equal(P.errors.msg[CONFIG_MAX_ERRORS - 1], "x: unknown key 'nope'");
}

/* --- files ------------------------------------------------------------------------------ */

static void test_file_syntax(void **state) {
    (void)state;
    const char *text = "# a comment line\n"
                       "\n"
                       "   \t  \n"
                       "  flag = yes   # trailing comment\n"
                       "num=7\n"
                       "name = \"a#b c\"\n"
                       "\tcolor\t=\tred\t\n"
                       "dur = 2s#not a comment\n";
    assert_int_equal(load_text(text), 1); /* '#' not after a space is part of the value */
    assert_int_equal(C.flag, 1);
    assert_int_equal(C.num, 7);
    assert_string_equal(C.name, "a#b c");
    assert_int_equal(C.color, 0);
    assert_string_equal(P.errors.msg[0], "t.conf:8: '2s#not a comment' is not a duration (e.g. "
                                         "500ms, 10s, 5m, 1h)");
}

static void test_file_quotes(void **state) {
    (void)state;
    assert_int_equal(load_text("name = \"\"\n"), 1); /* quotes around nothing: no value */
    assert_true(has_error("t.conf:1: missing value for 'name'"));
    assert_int_equal(load_text("name = \"x\n"), 1); /* an unterminated quote is an error */
    assert_true(has_error("t.conf:1: unterminated quote in the value of 'name'"));
    assert_int_equal(load_text("name = x\"\n"), 1);
    assert_int_equal(load_text("name = \"\n"), 1);
    assert_int_equal(load_text("name = \" sp \"\n"), 0); /* inside quotes, spaces stay */
    assert_string_equal(C.name, " sp ");
}

static void test_file_bad_lines_all_reported(void **state) {
    (void)state;
    const char *text = "flag = on\n"
                       "just words\n"
                       "= 5\n"
                       "num =\n"
                       "num = 1000\n"
                       "nope = 1\n"
                       "color = purple\n"
                       "item = bad\n"
                       "num = 3\n";
    assert_int_equal(load_text(text), 7);
    assert_int_equal(P.errors.count, 7);
    assert_string_equal(P.errors.msg[0], "t.conf:2: expected 'key = value', got 'just...'");
    assert_string_equal(P.errors.msg[1], "t.conf:3: missing key before '='");
    assert_string_equal(P.errors.msg[2], "t.conf:4: missing value for 'num'");
    assert_string_equal(P.errors.msg[3], "t.conf:5: num must be between -10 and 100");
    assert_string_equal(P.errors.msg[4], "t.conf:6: unknown key 'nope'");
    assert_true(strncmp(P.errors.msg[5], "t.conf:7: 'purple' is not one of:", 33) == 0);
    assert_string_equal(P.errors.msg[6], "t.conf:8: bad item 'bad'");
    assert_int_equal(C.flag, 1);
    assert_int_equal(C.num, 3); /* good lines after bad ones still apply */
}

static void test_file_line_numbers_crlf_and_no_final_newline(void **state) {
    (void)state;
    assert_int_equal(load_text("flag = on\r\n\r\nnum = x\r\nnum = 9"), 1);
    assert_string_equal(P.errors.msg[0], "t.conf:3: 'x' is not an integer");
    assert_int_equal(C.num, 9);
}

static void test_file_long_line(void **state) {
    (void)state;
    size_t n = CONFIG_LINE_MAX + 100;
    char *text = malloc(n + 64);
    assert_non_null(text);
    strcpy(text, "flag = on\nname = ");
    size_t at = strlen(text);
    memset(text + at, 'a', n);
    strcpy(text + at + n, "\nnum = 4\n");
    assert_int_equal(config_load_buffer(&P, "t.conf", text, strlen(text)), 1);
    assert_string_equal(P.errors.msg[0], "t.conf:2: line too long");
    assert_int_equal(C.num, 4); /* the rest of the long line is skipped, line 3 applies */
    /* the longest line that fits is fine */
    memset(&P.errors, 0, sizeof P.errors);
    strcpy(text, "num = 6");
    memset(text + 7, ' ', CONFIG_LINE_MAX - 2 - 7);
    strcpy(text + CONFIG_LINE_MAX - 2, "\n");
    assert_int_equal(strlen(text), CONFIG_LINE_MAX - 1);
    assert_int_equal(config_load_buffer(&P, "t.conf", text, strlen(text)), 0);
    assert_int_equal(C.num, 6);
    /* A long line with a NUL early in it is still one too-long line: its tail (here a valid
     * directive past the 4,095th byte) is never parsed as another line. */
    memset(&P.errors, 0, sizeof P.errors);
    C.num = 0;
    size_t len = 0;
    memcpy(text, "name = x", 8);
    text[8] = 0;
    memset(text + 9, 'b', CONFIG_LINE_MAX - 9);
    len = CONFIG_LINE_MAX;
    memcpy(text + len, "num = 7\n", 8);
    len += 8;
    assert_int_equal(config_load_buffer(&P, "t.conf", text, len), 1);
    assert_string_equal(P.errors.msg[0], "t.conf:1: line too long");
    assert_int_equal(C.num, 0);
    free(text);
}

static void test_buffer_is_not_read_past_len(void **state) {
    (void)state;
    const char text[] = "num = 12num = 99";
    assert_int_equal(config_load_buffer(&P, "t.conf", text, 8), 0);
    assert_int_equal(C.num, 12);
    assert_int_equal(config_load_buffer(&P, "t.conf", text, 0), 0);
    assert_int_equal(config_load_buffer(&P, "t.conf", "", 0), 0);
}

static void test_load_file(void **state) {
    (void)state;
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# file\nnum = 42\ncolor = blue\nbogus\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(config_load_file(&P, path), 1);
    assert_int_equal(C.num, 42);
    assert_int_equal(C.color, 2);
    char want[128];
    snprintf(want, sizeof want, "%s:4: expected 'key = value', got 'bogus'", path);
    assert_string_equal(P.errors.msg[0], want);
    unlink(path);

    assert_int_equal(config_load_file(&P, "/nonexistent/dir/x.conf"), 1);
    assert_true(has_error("/nonexistent/dir/x.conf: cannot open:"));
}

/* --- command line ----------------------------------------------------------------------- */

static void test_args_forms(void **state) {
    (void)state;
    char *argv[] = {"--num", "8", "--color=red", "--name=a=b", "--flag", "on", "--dur=", NULL};
    assert_int_equal(config_load_args(&P, 7, argv), 1); /* --dur= has an empty value */
    assert_int_equal(C.num, 8);
    assert_int_equal(C.color, 0);
    assert_string_equal(C.name, "a=b");
    assert_int_equal(C.flag, 1);
    assert_true(has_error("--dur: '' is not a duration"));
}

static void test_args_errors(void **state) {
    (void)state;
    char *argv[] = {"positional", "--nope", "1", "--num", "x", "--num"};
    assert_int_equal(config_load_args(&P, 6, argv), 4);
    assert_string_equal(P.errors.msg[0], "'positional': expected --key value");
    assert_string_equal(P.errors.msg[1], "--nope: unknown key");
    assert_string_equal(P.errors.msg[2], "--num: 'x' is not an integer");
    assert_string_equal(P.errors.msg[3], "--num: missing value");
    assert_int_equal(C.num, 5);
}

/* Text that failed to parse is quoted only up to a URL's "://" (its credentials follow) and,
 * for a line with no '=', only its first word (a secret may follow the key). */
static void test_errors_quote_no_credentials(void **state) {
    (void)state;
    char *argv[] = {"socks5://u:pw1@h:1", "--socks5://u:pw2@h:1", "--redis://:pw3@h:1=x"};
    assert_int_equal(config_load_args(&P, 3, argv), 3);
    assert_string_equal(P.errors.msg[0], "'socks5://...': expected --key value");
    assert_string_equal(P.errors.msg[1], "--socks5://...: unknown key");
    assert_string_equal(P.errors.msg[2], "--redis://...: unknown key 'redis://...'");
    assert_int_equal(load_text("name socks5://u:pw4@h:1\nsecret a:pw5\nsocks5://u:pw6@h = 1\n"), 3);
    assert_string_equal(P.errors.msg[3], "t.conf:1: expected 'key = value', got 'name...'");
    assert_string_equal(P.errors.msg[4], "t.conf:2: expected 'key = value', got 'secret...'");
    assert_string_equal(P.errors.msg[5], "t.conf:3: unknown key 'socks5://...'");
}

static void test_unknown_key_last_and_repeated_key(void **state) {
    (void)state;
    char *argv[] = {"--bogus"}; /* an unknown key, even with no value after it */
    assert_int_equal(config_load_args(&P, 1, argv), 1);
    assert_string_equal(P.errors.msg[0], "--bogus: unknown key");
    /* a key that may be given once, twice in the file: an error naming both lines */
    assert_int_equal(load_text("num = 1\nflag = on\nnum = 2\n"), 1);
    assert_true(has_error("t.conf:3: 'num' is already set at line 1 (it may be given once)"));
    assert_int_equal(C.num, 1);
    /* the command line may still override the file */
    char *argv2[] = {"--num", "7", "--num", "8"};
    assert_int_equal(config_load_args(&P, 4, argv2), 0);
    assert_int_equal(C.num, 8);
}

static void test_repeat_replaced_by_higher_source(void **state) {
    (void)state;
    /* the file's first item replaces the default, later file items append */
    assert_int_equal(load_text("item = 10\nitem = 11\n"), 0);
    assert_int_equal(C.nitems, 2);
    assert_int_equal(C.items[0], 10);
    assert_int_equal(C.items[1], 11);
    assert_int_equal(C.resets, 1);
    /* the command line replaces the file's list, then appends */
    char *argv[] = {"--item", "20", "--item=21", "--item", "22"};
    assert_int_equal(config_load_args(&P, 5, argv), 0);
    assert_int_equal(C.nitems, 3);
    assert_int_equal(C.items[0], 20);
    assert_int_equal(C.items[2], 22);
    assert_int_equal(C.resets, 2);
    /* a file read after the command line (lower source) does not reset */
    assert_int_equal(load_text("item = 30\n"), 0);
    assert_int_equal(C.resets, 2);
    assert_int_equal(C.nitems, 4);
}

static void test_help(void **state) {
    (void)state;
    char buf[4096];
    config_help(table, NOPTS, 0, buf, sizeof buf);
    assert_non_null(strstr(buf, "--size VALUE"));
    assert_non_null(strstr(buf, "Default: 16k."));
    assert_non_null(strstr(buf, "--item VALUE   (repeatable)"));
    char tiny[16];
    memset(tiny, 'x', sizeof tiny);
    config_help(table, NOPTS, 0, tiny, sizeof tiny); /* truncates, stays terminated */
    assert_non_null(memchr(tiny, 0, sizeof tiny));
    /* wrapped at 24 columns: no help line longer unless it is one word, the words all kept in
     * order (the "--key ARG" lines are not wrapped) */
    char wrapped[4096];
    config_help(table, NOPTS, 24, wrapped, sizeof wrapped);
    size_t lines = 0;
    for (char *l = wrapped; *l; lines++) {
        size_t w = strcspn(l, "\n");
        if (!strncmp(l, "      ", 6))
            assert_true(w <= 24 || !memchr(l + 6, ' ', w - 6));
        l += w + (l[w] == '\n');
    }
    assert_true(lines > 2 * NOPTS);
    char a[4096], b[4096];
    size_t na = 0, nb = 0;
    for (const char *p = buf; *p; p++)
        if (*p != ' ' && *p != '\n')
            a[na++] = *p;
    for (const char *p = wrapped; *p; p++)
        if (*p != ' ' && *p != '\n')
            b[nb++] = *p;
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_size),
        cmocka_unit_test(test_duration),
        cmocka_unit_test_setup(test_defaults, setup),
        cmocka_unit_test(test_bad_default_is_reported),
        cmocka_unit_test_setup(test_ranges, setup),
        cmocka_unit_test_setup(test_string_and_enum, setup),
        cmocka_unit_test_setup(test_unknown_key, setup),
        cmocka_unit_test_setup(test_errors_overflow_kept_counted, setup),
        cmocka_unit_test_setup(test_file_syntax, setup),
        cmocka_unit_test_setup(test_file_quotes, setup),
        cmocka_unit_test_setup(test_file_bad_lines_all_reported, setup),
        cmocka_unit_test_setup(test_file_line_numbers_crlf_and_no_final_newline, setup),
        cmocka_unit_test_setup(test_file_long_line, setup),
        cmocka_unit_test_setup(test_buffer_is_not_read_past_len, setup),
        cmocka_unit_test_setup(test_load_file, setup),
        cmocka_unit_test_setup(test_args_forms, setup),
        cmocka_unit_test_setup(test_errors_quote_no_credentials, setup),
        cmocka_unit_test_setup(test_args_errors, setup),
        cmocka_unit_test_setup(test_unknown_key_last_and_repeated_key, setup),
        cmocka_unit_test_setup(test_repeat_replaced_by_higher_source, setup),
        cmocka_unit_test_setup(test_help, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
