/* test_options.c: the mtproxy option table: defaults, listen/secret/dc parsers, checks, state file.
 */
#include "config/options.h"

#include <arpa/inet.h>
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

#define KEY1 "367a189aee18fa31c190054efd4a8e95"
#define KEY2 "000102030405060708090a0b0c0d0e0f"

static struct options O;
static struct config_parser P;

static int setup(void **state) {
    (void)state;
    assert_int_equal(options_init(&P, &O), 0);
    return 0;
}

static int load(const char *text) {
    return config_load_buffer(&P, "m.conf", text, strlen(text));
}

static int set(const char *key, const char *value) {
    return config_set(&P, key, value, CFG_FROM_FILE, "m.conf:1");
}

static int has_error(const char *needle) {
    for (int i = 0; i < P.errors.count && i < CONFIG_MAX_ERRORS; i++)
        if (strstr(P.errors.msg[i], needle))
            return 1;
    return 0;
}

static void assert_addr(const struct sock_addr *a, const char *text) {
    char buf[SOCK_ADDR_STRLEN];
    sock_addr_format(a, buf, sizeof buf);
    assert_string_equal(buf, text);
}

/* --- the table and its defaults ----------------------------------------------------------- */

static void test_table_well_formed(void **state) {
    (void)state;
    assert_true(options_count > 20);
    assert_true(options_count <= sizeof P.origin);
    for (size_t i = 0; i < options_count; i++) {
        const struct config_option *o = &options_table[i];
        assert_non_null(o->name);
        assert_true(o->name[0] != 0);
        assert_non_null(o->help);
        assert_true(strlen(o->help) > 10);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(o->name, options_table[j].name);
        if (o->flags & CFG_REPEAT) {
            assert_int_equal(o->type, CFG_CUSTOM);
            assert_non_null(o->reset);
        }
        if (o->type == CFG_CUSTOM)
            assert_non_null(o->parse);
        if (o->type == CFG_STRING)
            assert_true(o->str_size > 1 && o->offset + o->str_size <= sizeof(struct options));
        if (o->type == CFG_ENUM)
            assert_non_null(o->names);
    }
}

static void test_every_default_parses(void **state) {
    (void)state;
    assert_int_equal(P.errors.count, 0);
    /* and each default, given again as a file value, is accepted as is */
    for (size_t i = 0; i < options_count; i++) {
        const struct config_option *o = &options_table[i];
        if (o->def && *o->def) {
            if (set(o->name, o->def) != 0)
                fail_msg("default of %s ('%s') rejected: %s", o->name, o->def, P.errors.msg[0]);
        }
    }
    assert_int_equal(P.errors.count, 0);
}

static void test_documented_defaults(void **state) {
    (void)state;
    assert_int_equal(O.nlisten, 1);
    assert_addr(&O.listen[0], "0.0.0.0:8443");
    assert_int_equal(O.nsecrets, 0);
    assert_int_equal(O.ndcs, 0);
    assert_int_equal(O.dc_builtin, 1);
    assert_int_equal(O.default_dc, 2);
    assert_int_equal(O.prefer_ipv6, 0);
    assert_int_equal(O.only_ipv4, 0);
    assert_int_equal(O.workers, 0);
    assert_int_equal(O.block_size, 16384);
    assert_int_equal(O.max_connections, 8192);
    assert_int_equal(O.tcp_nodelay, 1);
    assert_int_equal(O.daemonize, 0);
    assert_string_equal(O.log, "stderr");
    assert_string_equal(O.state_file, "mtproxy.state");
    assert_int_equal(O.handshake_timeout_ms, 10000);
    assert_int_equal(O.idle_timeout_ms, 300000);
    /* a clean default configuration validates */
    assert_int_equal(options_validate(&P, &O), 0);
}

/* --- listen ----------------------------------------------------------------------------- */

static void test_listen(void **state) {
    (void)state;
    assert_int_equal(load("listen = 127.0.0.1:443\nlisten = [::1]:8443\nlisten = [::]:1\n"), 0);
    assert_int_equal(O.nlisten, 3); /* the file's list replaced the default */
    assert_addr(&O.listen[0], "127.0.0.1:443");
    assert_addr(&O.listen[1], "[::1]:8443");
    assert_addr(&O.listen[2], "[::]:1");
    char *argv[] = {"--listen", "127.0.0.2:9"};
    assert_int_equal(config_load_args(&P, 2, argv), 0);
    assert_int_equal(O.nlisten, 1); /* the command line replaced the file's */
    assert_addr(&O.listen[0], "127.0.0.2:9");
}

static void test_listen_errors(void **state) {
    (void)state;
    static const char *const bad[] = {
        "0.0.0.0",       "0.0.0.0:0", "0.0.0.0:65536", "::1:443", "[::1]443",
        "localhost:443", "1.2.3:4",   "[::1]:",        ":443",    "0.0.0.0:44x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int before = P.errors.count;
        assert_int_equal(set("listen", bad[i]), -1);
        assert_int_equal(P.errors.count, before + 1);
        assert_true(strncmp(P.errors.msg[before], "m.conf:1: ", 10) == 0);
    }
    assert_true(O.nlisten <= 1); /* nothing was added */
    assert_true(has_error("write IPv6 addresses as [ADDRESS]:PORT"));
    assert_true(has_error("is not a numeric IPv4 or IPv6 address"));
    assert_true(has_error("bad port"));
}

static void test_listen_limit(void **state) {
    (void)state;
    char line[64];
    for (int i = 0; i < OPT_MAX_LISTEN; i++) {
        snprintf(line, sizeof line, "127.0.0.1:%d", 1000 + i);
        assert_int_equal(set("listen", line), 0);
    }
    assert_int_equal(set("listen", "127.0.0.1:2000"), -1);
    assert_true(has_error("at most 16 listen addresses"));
    assert_int_equal(O.nlisten, OPT_MAX_LISTEN);
}

/* --- secret ----------------------------------------------------------------------------- */

static void test_secrets(void **state) {
    (void)state;
    assert_int_equal(load("secret = main:" KEY1 "\nsecret = \"phones:dd" KEY2 "\"\n"), 0);
    assert_int_equal(O.nsecrets, 2);
    assert_string_equal(O.secrets[0].name, "main");
    assert_int_equal(O.secrets[0].kind, SECRET_PLAIN);
    assert_int_equal(O.secrets[0].key[0], 0x36);
    assert_string_equal(O.secrets[1].name, "phones");
    assert_int_equal(O.secrets[1].kind, SECRET_DD);
    assert_int_equal(O.secrets[1].key[15], 0x0f);
}

static void test_secret_errors(void **state) {
    (void)state;
    assert_int_equal(set("secret", KEY1), -1); /* no name */
    assert_true(has_error("NAME:SECRET"));
    assert_int_equal(set("secret", "a:" KEY1 "0"), -1);
    assert_int_equal(set("secret", "bad name:" KEY1), -1);
    assert_int_equal(set("secret", ":" KEY1), -1);
    assert_int_equal(O.nsecrets, 0);
    assert_int_equal(P.errors.count, 4);
}

static void test_duplicate_secret_names(void **state) {
    (void)state;
    assert_int_equal(load("secret = a:" KEY1 "\nsecret = b:" KEY2 "\nsecret = a:dd" KEY2 "\n"), 1);
    assert_string_equal(P.errors.msg[0], "m.conf:3: secret name 'a' is used twice");
    assert_int_equal(O.nsecrets, 2);
    assert_int_equal(O.secrets[0].kind, SECRET_PLAIN); /* the first 'a' is untouched */
    /* the same name on the command line is fine: it replaces the file's list */
    char *argv[] = {"--secret", "a:dd" KEY2};
    assert_int_equal(config_load_args(&P, 2, argv), 0);
    assert_int_equal(O.nsecrets, 1);
    assert_int_equal(O.secrets[0].kind, SECRET_DD);
}

static void test_secret_limit(void **state) {
    (void)state;
    char line[80];
    for (int i = 0; i < OPT_MAX_SECRETS; i++) {
        snprintf(line, sizeof line, "s%d:" KEY1, i);
        assert_int_equal(set("secret", line), 0);
    }
    assert_int_equal(set("secret", "extra:" KEY1), -1);
    assert_true(has_error("at most 100000 secrets"));
}

/* --- dc --------------------------------------------------------------------------------- */

static void test_dc_lines(void **state) {
    (void)state;
    assert_int_equal(load("dc = 2 127.0.0.1:9002\n"
                          "dc = -2\t[::1]:9003\n"
                          "dc = 203   127.0.0.1:9203\n"
                          "dc = 32767 127.0.0.1:1\n"
                          "dc = -32768 127.0.0.1:2\n"),
                     0);
    assert_int_equal(O.ndcs, 5);
    assert_int_equal(O.dcs[0].id, 2);
    assert_addr(&O.dcs[0].addr, "127.0.0.1:9002");
    assert_int_equal(O.dcs[1].id, -2);
    assert_addr(&O.dcs[1].addr, "[::1]:9003");
    assert_int_equal(O.dcs[2].id, 203);
    assert_int_equal(O.dcs[3].id, 32767);
    assert_int_equal(O.dcs[4].id, -32768);
}

static void test_dc_errors(void **state) {
    (void)state;
    static const char *const bad[] = {"0 127.0.0.1:1",      "32768 127.0.0.1:1",
                                      "-32769 127.0.0.1:1", "x 127.0.0.1:1",
                                      "2:127.0.0.1:1",      "2",
                                      "2 127.0.0.1",        "2 [::1]",
                                      "2 127.0.0.1:0",      "99999999999999999999 127.0.0.1:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int before = P.errors.count;
        if (set("dc", bad[i]) != -1)
            fail_msg("dc '%s' accepted", bad[i]);
        assert_int_equal(P.errors.count, before + 1);
    }
    assert_int_equal(O.ndcs, 0);
    assert_true(has_error("ID a non-zero integer in -32768..32767"));
}

static void test_dc_limit(void **state) {
    (void)state;
    char line[64];
    for (int i = 0; i < OPT_MAX_DC_ADDRS; i++) {
        snprintf(line, sizeof line, "%d 127.0.0.1:%d", 1 + i % 5, 1000 + i);
        assert_int_equal(set("dc", line), 0);
    }
    assert_int_equal(set("dc", "1 127.0.0.1:5"), -1);
    assert_true(has_error("at most 128 dc addresses"));
}

/* --- validate --------------------------------------------------------------------------- */

static void test_validate_cross_key(void **state) {
    (void)state;
    assert_int_equal(load("block-size = 64k\n"
                          "max-buffer = 32k\n"
                          "only-ipv4 = on\n"
                          "prefer-ipv6 = on\n"
                          "buffer-memory = 100k\n"
                          "dc-builtin = off\n"
                          "default-dc = 3\n"
                          "dc = 2 127.0.0.1:1\n"),
                     0);
    O.nlisten = 0;
    assert_int_equal(options_validate(&P, &O), 5); /* every problem, not just the first */
    assert_true(has_error("no listen address"));
    assert_true(has_error("max-buffer (32768) must be at least block-size (65536)"));
    assert_true(has_error("only-ipv4 and prefer-ipv6 contradict each other"));
    assert_true(has_error("buffer-memory (102400) must hold at least two blocks"));
    assert_true(has_error("dc-builtin is off and default-dc 3 has no dc line"));
}

static void test_validate_passes_at_the_edges(void **state) {
    (void)state;
    assert_int_equal(load("block-size = 32k\n"
                          "max-buffer = 32k\n"
                          "buffer-memory = 64k\n"
                          "dc-builtin = off\n"
                          "default-dc = 3\n"
                          "dc = 3 127.0.0.1:1\n"),
                     0);
    assert_int_equal(options_validate(&P, &O), 0);
    assert_int_equal(set("buffer-memory", "0"), 0); /* 0 = no cap: fine */
    assert_int_equal(options_validate(&P, &O), 0);
    assert_int_equal(set("buffer-memory", "65535"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
}

/* --- state file ------------------------------------------------------------------------- */

static char dir[64];

static int setup_dir(void **state) {
    setup(state);
    strcpy(dir, "/tmp/test_options_XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* daemonize closes stderr: logging there would lose every line. */
static void test_daemonize_needs_a_log(void **state) {
    (void)state;
    assert_int_equal(load("listen = 127.0.0.1:1\ndaemonize = on\n"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
    assert_true(has_error("daemonize = on closes stderr"));
    assert_int_equal(options_init(&P, &O), 0);
    assert_int_equal(load("listen = 127.0.0.1:1\ndaemonize = on\nlog = /var/log/m.log\n"), 0);
    assert_int_equal(options_validate(&P, &O), 0);
}

/* The key the documentation showed is refused in every kind; a neighbour key is not. */
static void test_documented_secret_refused(void **state) {
    (void)state;
    assert_int_equal(load("listen = 127.0.0.1:1\n"
                          "secret = a:0123456789abcdef0123456789abcdef\n"
                          "secret = b:dd0123456789abcdef0123456789abcdef\n"
                          "secret = c:ee0123456789abcdef0123456789abcdef7777772e6578616d706c652e636f6d\n"
                          "secret = d:0123456789abcdef0123456789abcdee\n"),
                     0);
    assert_int_equal(options_validate(&P, &O), 3);
    assert_true(has_error("secret a is the example from mtproxy's documentation"));
    assert_true(has_error("secret b is the example"));
    assert_true(has_error("secret c is the example"));
    assert_false(has_error("secret d "));
}

/* users-file: secret and limit lines only, appended to the config's, errors as NAME:LINE. */
static void test_users_file_lines(void **state) {
    (void)state;
    assert_int_equal(load("secret = main:" KEY1 "\n"), 0);
    struct config_errors e = {0};
    const char *u = "# users\nsecret = u1:" KEY2 "\nlimit = u1 conns=2\n\n";
    assert_int_equal(options_load_users(&O, "u.conf", u, strlen(u), &e), 0);
    assert_int_equal(O.nsecrets, 2); /* the config's secret stays: appended, not replaced */
    assert_int_equal(options_find_secret(&O, "u1"), 1);
    assert_int_equal(O.nlimits, 1);
    assert_int_equal(O.limits[0].conns, 2);
    const char *bad = "secret = u2:zz\nlisten = 0.0.0.0:1\nsecret = main:" KEY2 "\n"
                      "limit = u1 conns=3\n";
    assert_int_equal(options_load_users(&O, "u.conf", bad, strlen(bad), &e), 4);
    assert_true(strncmp(e.msg[0], "u.conf:1: ", 10) == 0);
    assert_true(strstr(e.msg[1], "u.conf:2: unknown key 'listen'") != NULL);
    assert_true(strstr(e.msg[2], "u.conf:3: secret name 'main' is used twice") != NULL);
    assert_true(strstr(e.msg[3], "u.conf:4: a second limit line for 'u1'") != NULL);
    /* a missing file is an empty one */
    struct config_errors e2 = {0};
    assert_int_equal(options_load_users_file(&O, "/nonexistent/users.conf", &e2), 0);
    assert_int_equal(e2.count, 0);
}

static void test_api_needs_a_token(void **state) {
    (void)state;
    assert_int_equal(set("api", "127.0.0.1:9101"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
    assert_true(has_error("api-token is not set"));
    P.errors.count = 0;
    assert_int_equal(set("api-token", "short"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
    assert_true(has_error("shorter than 16"));
    P.errors.count = 0;
    assert_int_equal(set("api-token", "0123456789abcdef"), 0);
    assert_int_equal(options_validate(&P, &O), 0);
    assert_int_equal(set("api", "off"), 0);
    assert_false(O.api_on);
}

static void test_web_keys(void **state) {
    (void)state;
    assert_int_equal(set("web-listen", "127.0.0.1:8080"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
    assert_true(has_error("web-listen needs web-host"));
    P.errors.count = 0;
    assert_int_equal(set("web-host", "127.0.0.1"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
    assert_true(has_error("is not a DNS name"));
    P.errors.count = 0;
    assert_int_equal(set("web-host", "Proxy.Example.com."), 0);
    assert_int_equal(set("web-trusted-proxies", "10.0.0.0/8"), 0);
    assert_int_equal(set("web-trusted-proxies", "::1"), 0);
    assert_int_equal(O.nweb_trusted, 2);
    assert_int_equal(options_validate(&P, &O), 0);
    assert_int_equal(set("web-carrier", "websocket"), 0);
    assert_int_equal(options_validate(&P, &O), 0);
    const char *const lanes[] = {"https-lanes", "websocket-lanes"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(set("web-carrier", lanes[i]), 0);
        assert_int_equal(options_validate(&P, &O), 0);
        assert_int_equal(O.web_carrier, i == 0 ? WEB_HTTPS_LANES : WEB_WEBSOCKET_LANES);
    }
    assert_int_equal(set("web-carrier", "https"), 0);
    assert_int_not_equal(set("web-carrier", "quic"), 0);
    /* web-upstream: http://ADDR:PORT (an address), not with web-root */
    assert_int_equal(set("web-upstream", "http://127.0.0.1:3000/"), 0);
    assert_int_equal(O.web_upstream_on, 1);
    assert_int_not_equal(set("web-upstream", "https://127.0.0.1:3000"), 0);
    assert_int_not_equal(set("web-upstream", "http://"), 0);
    assert_int_not_equal(set("web-upstream", "127.0.0.1:3000"), 0);
    assert_int_not_equal(set("web-upstream", "http://site.example:80"), 0);
    P.errors.count = 0;
    assert_int_equal(options_validate(&P, &O), 0);
    assert_int_equal(set("web-root", "/srv/site"), 0);
    assert_int_equal(options_validate(&P, &O), 1);
    assert_true(has_error("set one"));
    P.errors.count = 0;
    assert_int_equal(set("web-root", ""), 0);
    assert_int_equal(set("web-upstream", "off"), 0);
    assert_int_equal(O.web_upstream_on, 0);
    P.errors.count = 0;
    const char *const private[] = {"10.1.2.3:80", "172.16.0.1:80", "192.168.1.1:80",
                                   "[fd00::1]:80", "[::1]:80", "[::ffff:10.0.0.1]:80"};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(set("web-listen", private[i]), 0);
        assert_int_equal(options_validate(&P, &O), 0);
    }
    const char *const public[] = {"0.0.0.0:80", "8.8.8.8:80", "172.32.0.1:80", "[::]:80",
                                  "[2001:db8::1]:80"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(set("web-listen", public[i]), 0);
        assert_int_equal(options_validate(&P, &O), 1);
        assert_true(has_error("neither a loopback nor a private address"));
        P.errors.count = 0;
    }
    assert_int_equal(set("web-public", "on"), 0);
    assert_int_equal(options_validate(&P, &O), 0);
    assert_int_equal(set("web-listen", "off"), 0);
    assert_false(O.web_on);
}

static void test_state_round_trip(void **state) {
    (void)state;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/mtproxy.state", dir);
    assert_int_equal(options_load_state(&O, path, err, sizeof err), 0); /* none yet */
    assert_int_equal(O.nsecrets, 0);

    struct secret s;
    assert_int_equal(secret_parse("default", "dd" KEY2, &s, err, sizeof err), 0);
    assert_int_equal(options_save_state(&s, path, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* the secret is private */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0); /* renamed into place */

    assert_int_equal(options_load_state(&O, path, err, sizeof err), 1);
    assert_int_equal(O.nsecrets, 1);
    assert_string_equal(O.secrets[0].name, "default");
    assert_int_equal(O.secrets[0].kind, SECRET_DD);
    assert_memory_equal(O.secrets[0].key, s.key, SECRET_KEY_LEN);

    /* saving again replaces, never appends */
    assert_int_equal(secret_parse("default", KEY1, &s, err, sizeof err), 0);
    assert_int_equal(options_save_state(&s, path, err, sizeof err), 0);
    O.nsecrets = 0;
    assert_int_equal(options_load_state(&O, path, err, sizeof err), 1);
    assert_int_equal(O.nsecrets, 1);
    assert_int_equal(O.secrets[0].kind, SECRET_PLAIN);
    assert_memory_equal(O.secrets[0].key, s.key, SECRET_KEY_LEN);
}

static void test_state_bad_files(void **state) {
    (void)state;
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/bad.state", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# comment only\n", f);
    fclose(f);
    assert_int_equal(options_load_state(&O, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "no secret in state file"));
    assert_non_null(strstr(err, path));

    f = fopen(path, "w");
    assert_non_null(f);
    fputs("secret = default:" KEY1 "\nsecret = x:zz\n", f);
    fclose(f);
    err[0] = 0;
    assert_int_equal(options_load_state(&O, path, err, sizeof err), -1);
    char want[160];
    snprintf(want, sizeof want, "%s:2: ", path);
    assert_true(strncmp(err, want, strlen(want)) == 0);

    f = fopen(path, "w");
    assert_non_null(f);
    fputs("listen = 127.0.0.1:1\n", f); /* only secrets belong in a state file */
    fclose(f);
    O.nsecrets = 0;
    assert_int_equal(options_load_state(&O, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown key 'listen'"));

    struct secret s;
    assert_int_equal(secret_parse("default", KEY1, &s, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/no/such/dir/x.state", dir);
    err[0] = 0;
    assert_int_equal(options_save_state(&s, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot write state file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_well_formed),
        cmocka_unit_test_setup(test_every_default_parses, setup),
        cmocka_unit_test_setup(test_documented_defaults, setup),
        cmocka_unit_test_setup(test_listen, setup),
        cmocka_unit_test_setup(test_listen_errors, setup),
        cmocka_unit_test_setup(test_listen_limit, setup),
        cmocka_unit_test_setup(test_secrets, setup),
        cmocka_unit_test_setup(test_secret_errors, setup),
        cmocka_unit_test_setup(test_duplicate_secret_names, setup),
        cmocka_unit_test_setup(test_secret_limit, setup),
        cmocka_unit_test_setup(test_dc_lines, setup),
        cmocka_unit_test_setup(test_dc_errors, setup),
        cmocka_unit_test_setup(test_dc_limit, setup),
        cmocka_unit_test_setup(test_validate_cross_key, setup),
        cmocka_unit_test_setup(test_validate_passes_at_the_edges, setup),
        cmocka_unit_test_setup(test_documented_secret_refused, setup),
        cmocka_unit_test_setup(test_daemonize_needs_a_log, setup),
        cmocka_unit_test_setup(test_users_file_lines, setup),
        cmocka_unit_test_setup(test_api_needs_a_token, setup),
        cmocka_unit_test_setup(test_web_keys, setup),
        cmocka_unit_test_setup_teardown(test_state_round_trip, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_state_bad_files, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
