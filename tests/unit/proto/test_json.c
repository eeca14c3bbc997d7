/* test_json.c: the API's bounded JSON object parser and string escaping. */
#include "proto/json.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int parse(const char *s, struct json_obj *o)
{
    char err[128];
    return json_parse_object(s, strlen(s), o, err, sizeof err);
}

static void test_good(void **state)
{
    struct json_obj o;
    assert_int_equal(parse(" {\"name\" : \"al\\u00e9\\n\\\"x\", \"n\":-1.5e3, \"t\":true,"
                           "\"f\":false,\"z\":null, \"limits\":{\"conns\":3,\"quota\":\"1G\"},"
                           "\"e\":{}}\r\n", &o), 0);
    const struct json_field *f = json_get(&o, NULL, "name");
    assert_non_null(f);
    assert_int_equal(f->type, JSON_STRING);
    assert_string_equal(f->val, "al\xc3\xa9\n\"x");
    assert_string_equal(json_get(&o, NULL, "n")->val, "-1.5e3");
    assert_int_equal(json_get(&o, NULL, "n")->type, JSON_NUMBER);
    assert_int_equal(json_get(&o, NULL, "t")->type, JSON_TRUE);
    assert_int_equal(json_get(&o, NULL, "f")->type, JSON_FALSE);
    assert_int_equal(json_get(&o, NULL, "z")->type, JSON_NULL);
    const struct json_field *l = json_get(&o, NULL, "limits");
    assert_int_equal(l->type, JSON_OBJECT);
    assert_string_equal(json_get(&o, l, "conns")->val, "3");
    assert_string_equal(json_get(&o, l, "quota")->val, "1G");
    assert_null(json_get(&o, NULL, "conns")); /* a nested key is not a top-level one */
    assert_null(json_get(&o, l, "name"));
    assert_int_equal(parse("{}", &o), 0);
    assert_int_equal(o.n, 0);
    /* a surrogate pair: U+1F600 */
    assert_int_equal(parse("{\"s\":\"\\ud83d\\ude00\"}", &o), 0);
    assert_string_equal(json_get(&o, NULL, "s")->val, "\xf0\x9f\x98\x80");
}

static void test_bad(void **state)
{
    static const char *const bad[] = {
        "", "[]", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":1 \"b\":2}", "{a:1}",
        "{\"a\":[1]}", "{\"a\":{\"b\":{}}}", "{\"a\":1}x", "{\"a\":1}{}", "{\"a\":01}",
        "{\"a\":1.}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":tru}", "{\"a\":\"x}", "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u00zz\"}", "{\"a\":\"\\u0000\"}", "{\"a\":\"\\udc00\"}",
        "{\"a\":\"\\ud800x\"}", "{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"\t\"}",
        "{\"a\":1,\"a\":2}", "{\"l\":{\"a\":1,\"a\":2}}", "{\"a\":'x'}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct json_obj o;
        char err[128] = "";
        if (json_parse_object(bad[i], strlen(bad[i]), &o, err, sizeof err) != -1)
            fail_msg("accepted: %s", bad[i]);
        assert_true(strncmp(err, "at byte ", 8) == 0);
    }
    /* a NUL inside the text is not white space */
    struct json_obj o;
    char err[128];
    assert_int_equal(json_parse_object("{}\0", 3, &o, err, sizeof err), -1);
}

static void test_bounds(void **state)
{
    struct json_obj o;
    char buf[4096];
    /* JSON_MAX_FIELDS members, counting nested ones, then one more */
    size_t n = (size_t)snprintf(buf, sizeof buf, "{");
    for (int i = 0; i < JSON_MAX_FIELDS; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"k%d\":%d", i ? "," : "", i, i);
    snprintf(buf + n, sizeof buf - n, "}");
    assert_int_equal(parse(buf, &o), 0);
    assert_int_equal(o.n, JSON_MAX_FIELDS);
    snprintf(buf + n, sizeof buf - n, ",\"x\":1}");
    assert_int_equal(parse(buf, &o), -1);
    /* a key of JSON_KEY_MAX - 1 bytes fits, one more does not */
    snprintf(buf, sizeof buf, "{\"%0*d\":1}", JSON_KEY_MAX - 1, 0);
    assert_int_equal(parse(buf, &o), 0);
    snprintf(buf, sizeof buf, "{\"%0*d\":1}", JSON_KEY_MAX, 0);
    assert_int_equal(parse(buf, &o), -1);
    /* a value of JSON_VAL_MAX - 1 bytes fits, one more does not */
    snprintf(buf, sizeof buf, "{\"v\":\"%0*d\"}", JSON_VAL_MAX - 1, 0);
    assert_int_equal(parse(buf, &o), 0);
    snprintf(buf, sizeof buf, "{\"v\":\"%0*d\"}", JSON_VAL_MAX, 0);
    assert_int_equal(parse(buf, &o), -1);
    /* the parser reads only text[0..len) */
    assert_int_equal(json_parse_object("{}garbage", 2, &o, buf, 64), 0);
}

static void test_escape(void **state)
{
    char out[64];
    assert_int_equal(json_escape("a\"b\\c\n\x01\x7f\xc3\xa9", out, sizeof out), 27);
    assert_string_equal(out, "a\\\"b\\\\c\\u000a\\u0001\\u007f\xc3\xa9");
    /* cut, but terminated, and the length needed still returned */
    char small[4];
    assert_int_equal(json_escape("\"\"\"", small, sizeof small), 6);
    assert_string_equal(small, "\\\"\\");
    assert_int_equal(json_escape("abc", NULL, 0), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
