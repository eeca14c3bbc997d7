/* test_rpc.c: known answers for the middle-proxy link (KDF 9.3, frames + CRC32, PROXY_REQ,
 * ME messages, proxy config and secret) and the client framings (proto/frame). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <netinet/in.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/obfs2.h"
#include "proto/rpc.h"
#include "loopback_guard.h"
#include "testutil.h"

static void hex_eq(const uint8_t *got, const char *hex)
{
    uint8_t want[512];
    size_t n = unhex(hex, want);
    assert_memory_equal(got, want, n);
}

/* PROTOCOL.md 9.3 (telemt's middleproxy_prekey_sha_is_stable): the test hands the builder
 * srv_ip bytes 95 9a af 32 and clt_ip 0a 00 00 01 as they go into s; our builder takes network
 * order and reverses, so it gets them reversed. */
static void kdf_vector_in(struct rpc_kdf_in *in, uint8_t *secret)
{
    memset(in, 0, sizeof *in);
    memset(in->nonce_srv, 0x11, 16);
    memset(in->nonce_clt, 0x22, 16);
    in->clt_ts = 0x44332211u;
    unhex("32af9a95", in->srv.ip);
    in->srv.port = 8888;
    unhex("0100000a", in->clt.ip);
    in->clt.port = 8080;
    memset(secret, 0x55, 128);
    in->secret = secret;
    in->secret_len = 128;
}

static void test_kdf_vector(void **state)
{
    struct rpc_kdf_in in;
    uint8_t secret[128], s[RPC_KDF_MAX], sha[32], key[32], iv[16];
    kdf_vector_in(&in, secret);
    size_t n = rpc_kdf_input(&in, "CLIENT", s);
    assert_int_equal(n, 214);
    hex_eq(s + 36, "959aaf32901f434c49454e540a000001b822");
    crypto_sha256(s, n, NULL, 0, sha);
    hex_eq(sha, "934f5facdafd65a44d5c2df90d2f35ddc81faaaeb337949dfeef817c8a7c1e00");
    rpc_kdf(&in, "CLIENT", key, iv);
    hex_eq(key, "933c18ee8f1696c3379ac8a86e4441991428be4c294c886bf636e83b947def5d");
    hex_eq(iv, "2141a0df45c455edbf2730ac5902d65a");
    /* SERVER differs only in the purpose bytes, and so gives other keys */
    uint8_t key2[32], iv2[16];
    rpc_kdf(&in, "SERVER", key2, iv2);
    assert_memory_not_equal(key, key2, 32);
}

static void test_kdf_ipv6(void **state)
{
    struct rpc_kdf_in in;
    uint8_t secret[128], s[RPC_KDF_MAX];
    kdf_vector_in(&in, secret);
    in.clt.v6 = in.srv.v6 = 1;
    unhex("20010db8000000000000000000000001", in.clt.ip);
    unhex("20010db8000000000000000000000002", in.srv.ip);
    size_t n = rpc_kdf_input(&in, "CLIENT", s);
    assert_int_equal(n, 214 + 32);
    hex_eq(s + 36, "00000000901f434c49454e5400000000b822");
    hex_eq(s + 198, "20010db8000000000000000000000001" "20010db8000000000000000000000002");
    hex_eq(s + 230, "22222222222222222222222222222222");
}

static void test_cbc_chains(void **state)
{
    uint8_t key[32], iv[16], a[64], b[64], c[64];
    memset(key, 7, sizeof key);
    memset(iv, 9, sizeof iv);
    for (int i = 0; i < 64; i++)
        a[i] = (uint8_t)i;
    struct crypto_cbc *e1 = crypto_cbc_new(key, iv, 1), *e2 = crypto_cbc_new(key, iv, 1);
    struct crypto_cbc *d = crypto_cbc_new(key, iv, 0);
    assert_non_null(e1);
    assert_int_equal(crypto_cbc_apply(e1, a, b, 64), 0);
    /* in two calls: the chain carries over */
    assert_int_equal(crypto_cbc_apply(e2, a, c, 16), 0);
    assert_int_equal(crypto_cbc_apply(e2, a + 16, c + 16, 48), 0);
    assert_memory_equal(b, c, 64);
    assert_int_equal(crypto_cbc_apply(d, b, c, 32), 0);
    assert_int_equal(crypto_cbc_apply(d, b + 32, c + 32, 32), 0);
    assert_memory_equal(a, c, 64);
    assert_int_equal(crypto_cbc_apply(d, b, c, 15), -1);
    crypto_cbc_free(e1);
    crypto_cbc_free(e2);
    crypto_cbc_free(d);
}

static void test_frame_crc(void **state)
{
    /* zlib's CRC-32 check value */
    assert_int_equal(rpc_crc32("123456789", 9), 0xcbf43926u);
    uint8_t out[64];
    uint8_t payload[4] = {1, 2, 3, 4};
    size_t n = rpc_frame_build(out, 5, payload, 4);
    assert_int_equal(n, 16);
    hex_eq(out, "100000000500000001020304");
    uint32_t crc = rpc_crc32(out, 12);
    assert_int_equal(out[12] | out[13] << 8 | out[14] << 16 | (uint32_t)out[15] << 24, crc);
    struct rpc_frame f;
    size_t need = 0;
    const char *why = NULL;
    assert_int_equal(rpc_frame_parse(out, 15, 5, &f, &need, &why), RPC_NEED_MORE);
    assert_int_equal(need, 16);
    assert_int_equal(rpc_frame_parse(out, 16, 5, &f, &need, &why), RPC_OK);
    assert_int_equal(f.len, 4);
    assert_int_equal(f.total, 16);
    assert_memory_equal(f.payload, payload, 4);
    assert_int_equal(rpc_frame_parse(out, 16, 6, &f, &need, &why), RPC_BAD);
    assert_string_equal(why, "wrong seqno");
    out[9] ^= 1;
    assert_int_equal(rpc_frame_parse(out, 16, 5, &f, &need, &why), RPC_BAD);
    assert_string_equal(why, "bad crc");
    /* padding to 16: words of 4 that the reader skips */
    n = rpc_frame_build(out, 0, payload, 4);
    memcpy(out + 16, payload, 4);
    n = rpc_frame_build(out + 16, 1, out + 16 + 8, 0) + 16;
    assert_int_equal(n, 28);
    n = rpc_frame_pad16(out, n);
    assert_int_equal(n, 32);
    hex_eq(out + 28, "04000000");
    assert_int_equal(rpc_frame_parse(out + 28, 4, 2, &f, &need, &why), RPC_OK);
    assert_null(f.payload);
    assert_int_equal(f.total, 4);
    uint8_t bad[16] = {8, 0, 0, 0};
    assert_int_equal(rpc_frame_parse(bad, 16, 0, &f, &need, &why), RPC_BAD);
    bad[0] = 18;
    assert_int_equal(rpc_frame_parse(bad, 16, 0, &f, &need, &why), RPC_BAD);
}

static void test_nonce_handshake(void **state)
{
    struct rpc_nonce n = {.key_select = 0xfacaf9c4u, .schema = 1, .ts = 0x5f5e1000u}, m;
    memset(n.nonce, 0xab, 16);
    uint8_t out[32];
    rpc_nonce_build(out, &n);
    hex_eq(out, "aa87cb7ac4f9cafa01000000"
                "00105e5f"
                "abababababababababababababababab");
    assert_int_equal(rpc_nonce_parse(out, 32, &m), 0);
    assert_int_equal(m.key_select, n.key_select);
    assert_int_equal(rpc_nonce_parse(out, 31, &m), -1);
    uint8_t s[12], p[12], s2[12], p2[12];
    uint32_t fl;
    memset(s, 1, 12);
    memset(p, 2, 12);
    rpc_handshake_build(out, 0, s, p);
    hex_eq(out, "f5ee827600000000");
    assert_int_equal(rpc_handshake_parse(out, 32, &fl, s2, p2), 0);
    assert_memory_equal(p, p2, 12);
    hex_eq(out, "f5ee8276");
    out[0] = 0xda, out[1] = 0xbe, out[2] = 0x27, out[3] = 0x6a;
    assert_int_equal(rpc_handshake_parse(out, 32, &fl, s2, p2), -2);
}

static void test_proxy_req_ipv4(void **state)
{
    struct rpc_addr remote, ours;
    uint8_t ip[4] = {192, 0, 2, 7}, me[4] = {203, 0, 113, 9}, tag[16], out[RPC_REQ_HDR_MAX + 4];
    rpc_addr_set(&remote, ip, 0, 51000);
    rpc_addr_set(&ours, me, 0, 443);
    unhex("0123456789abcdeffedcba9876543210", tag);
    size_t n = rpc_proxy_req_header(out, RPC_FLAG_MAGIC | RPC_FLAG_EXTMODE2 |
                                         RPC_FLAG_ABRIDGED | RPC_FLAG_NOT_ENCRYPTED,
                                    0x1122334455667788ull, &remote, &ours, tag);
    assert_int_equal(n, 84);
    hex_eq(out, "eef1ce36"
                "0a100240"                          /* 0x4002100a: +HAS_AD_TAG */
                "8877665544332211"
                "00000000000000000000ffffc0000207"
                "38c70000"                          /* 51000 */
                "00000000000000000000ffffcb007109"
                "bb010000"
                "18000000"
                "ae261edb"
                "10" "0123456789abcdeffedcba9876543210" "000000");
    struct rpc_proxy_req r;
    memcpy(out + n, "\x01\x02\x03\x04", 4);
    assert_int_equal(rpc_proxy_req_parse(out, n + 4, &r), RPC_OK);
    assert_true(r.has_tag);
    assert_memory_equal(r.ad_tag, tag, 16);
    assert_int_equal(r.len, 4);
    assert_int_equal(r.remote.port, 51000);
    /* without a tag: no extra block, no flag */
    n = rpc_proxy_req_header(out, RPC_FLAG_MAGIC, 1, &remote, &ours, NULL);
    assert_int_equal(n, 56);
    hex_eq(out + 4, "00100000");
}

static void test_proxy_req_ipv6(void **state)
{
    struct rpc_addr remote, ours;
    uint8_t ip[16], me[16], tag[16], out[RPC_REQ_HDR_MAX];
    unhex("20010db8000000000000000000000abc", ip);
    unhex("20010db8000000000000000000000001", me);
    memset(tag, 0xee, sizeof tag);
    rpc_addr_set(&remote, ip, 1, 443);
    rpc_addr_set(&ours, me, 1, 8443);
    size_t n = rpc_proxy_req_header(out, RPC_FLAG_MAGIC | RPC_FLAG_EXTMODE2 |
                                         RPC_FLAG_INTERMEDIATE | RPC_FLAG_PAD |
                                         RPC_FLAG_QUICKACK, 42, &remote, &ours, tag);
    assert_int_equal(n, 84);
    hex_eq(out, "eef1ce36" "081002a8" "2a00000000000000"
                "20010db8000000000000000000000abc" "bb010000"
                "20010db8000000000000000000000001" "fb200000");
}

static void test_msgs(void **state)
{
    uint8_t ans[20], m12[12];
    struct rpc_msg m;
    unhex("0dda0344" "08000000" "0100000000000000" "deadbeef", ans);
    assert_int_equal(rpc_msg_parse(ans, 20, &m), RPC_OK);
    assert_int_equal(m.type, RPC_PROXY_ANS);
    assert_int_equal(m.conn_id, 1);
    assert_int_equal(m.len, 4);
    assert_int_equal(rpc_msg_parse(ans, 15, &m), RPC_BAD);
    unhex("9b40ac3b" "0200000000000000" "78563412", ans);
    assert_int_equal(rpc_msg_parse(ans, 16, &m), RPC_OK);
    assert_int_equal(m.confirm, 0x12345678u);
    assert_int_equal(m.conn_id, 2);
    unhex("a234b65e" "0300000000000000", ans);
    assert_int_equal(rpc_msg_parse(ans, 12, &m), RPC_OK);
    assert_int_equal(m.type, RPC_CLOSE_EXT);
    assert_int_equal(m.conn_id, 3);
    rpc_msg_u64(m12, RPC_PONG, 0x0102030405060708ull);
    hex_eq(m12, "a7ea30840807060504030201");
    rpc_msg_u64(m12, RPC_PING, 9);
    assert_int_equal(rpc_msg_parse(m12, 12, &m), RPC_OK);
    assert_int_equal(m.ping_id, 9);
    assert_int_equal(rpc_msg_parse(m12, 3, &m), RPC_BAD);
}

static const char good_config[] =
    "# force_probability 10 10\n"
    "default 2;\n"
    "proxy_for 1 149.154.175.50:8888;\n"
    "proxy_for -1 149.154.175.50:8888;\n"
    "proxy_for 2 149.154.161.144:8888;\n"
    "proxy_for 4 91.108.4.159:8888;   proxy_for 4 91.108.4.160:8888;\n"
    "proxy_for 203 [2001:b28:f23d:f001::d]:8888;\n"
    "timeout 500; min_connections 2; max_connections 8;\n"
    "\n";

static void test_config_good(void **state)
{
    static struct rpc_config c;
    char err[256];
    assert_int_equal(rpc_config_parse("cfg", good_config, strlen(good_config), &c, err,
                                      sizeof err), 0);
    assert_int_equal(c.n, 6);
    assert_int_equal(c.default_dc, 2);
    assert_int_equal(c.e[1].dc, -1);
    hex_eq(c.e[1].ip, "959aaf32");
    assert_int_equal(c.e[1].port, 8888);
    assert_int_equal(c.e[4].dc, 4);
    assert_true(c.e[5].v6);
    hex_eq(c.e[5].ip, "20010b28f23df001000000000000000d");
    /* Telegram's real ME addresses are only parsed here: the connect guard every unit test is
     * linked with refuses each of them before the kernel sees it (on a closed descriptor, so
     * nothing would be sent even without the guard). */
    for (int i = 0; i < c.n; i++) {
        struct sockaddr_storage ss = {0};
        socklen_t len;
        if (c.e[i].v6) {
            struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
            a6->sin6_family = AF_INET6;
            memcpy(&a6->sin6_addr, c.e[i].ip, 16);
            a6->sin6_port = htons((uint16_t)c.e[i].port);
            len = sizeof *a6;
        } else {
            struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
            a4->sin_family = AF_INET;
            memcpy(&a4->sin_addr, c.e[i].ip, 4);
            a4->sin_port = htons((uint16_t)c.e[i].port);
            len = sizeof *a4;
        }
        assert_false(loopback_guard_allows((struct sockaddr *)&ss, len));
        errno = 0;
        assert_int_equal(connect(-1, (struct sockaddr *)&ss, len), -1);
        assert_int_equal(errno, EACCES);
    }
}

static void test_config_bad(void **state)
{
    static struct rpc_config c;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"proxy_for 1 1.2.3.4:8888\n", "cfg:1: missing ';'"},
        {"default 2;\nproxy_for 2 1.2.3.4:88888;\n", "cfg:2: bad address"},
        {"proxy_for 1 1.2.3.4:8888;\nproxy_for x 1.2.3.4:8888;\n", "cfg:2: bad dc id"},
        {"proxy_for 1 1.2.3.4:8888;\n\nproxy_for 0 1.2.3.4:8888;\n", "cfg:3: bad dc id"},
        {"proxy_for 1 300.2.3.4:8888;\n", "cfg:1: bad address"},
        {"proxy_for 1 [::1:8888;\n", "cfg:1: bad address"},
        {"proxy_for 1 1.2.3.4:8888;\nfoo 1;\n", "cfg:2: unknown statement 'foo'"},
        {"proxy_for 1 1.2.3.4:8888;\ntimeout 5;\n", "cfg:2: bad value for 'timeout'"},
        {"proxy_for 1;\n", "cfg:1: expected 'proxy_for"},
        {"# nothing\n", "cfg: no proxy_for line"},
        {"<html>404</html>\n", "cfg:1: missing ';'"},
        {"default 3;\nproxy_for 1 1.2.3.4:8888;\n", "cfg: the default dc has no proxy_for"},
        {"proxy_for 1 1.2.3.4:8888; ;\n", "cfg:1: empty statement"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        assert_int_equal(rpc_config_parse("cfg", cases[i].text, strlen(cases[i].text), &c, err,
                                          sizeof err), -1);
        if (strncmp(err, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: got '%s', want '%s...'", i, err, cases[i].want);
    }
    char err[256];
    const char nul[] = "proxy_for 1 1.2.3.4:8888;\nproxy_for 2\0 1.2.3.4:8888;\n";
    assert_int_equal(rpc_config_parse("cfg", nul, sizeof nul - 1, &c, err, sizeof err), -1);
    assert_string_equal(err, "cfg:2: NUL byte in line");
}

static void test_secret_size(void **state)
{
    char err[256];
    assert_int_equal(rpc_secret_check("s", 128, err, sizeof err), 0);
    assert_int_equal(rpc_secret_check("s", 31, err, sizeof err), -1);
    assert_non_null(strstr(err, "this file has 31"));
    assert_int_equal(rpc_secret_check("s", 257, err, sizeof err), -1);
}

static void test_client_frames(void **state)
{
    struct frame f;
    size_t need = 0;
    uint8_t p[600];
    memset(p, 0, sizeof p);
    /* abridged short form with quick-ack */
    p[0] = 0x80 | 2;
    assert_int_equal(frame_parse(OBFS2_TAG_ABRIDGED, p, 8, &f, &need), FRAME_NEED_MORE);
    assert_int_equal(need, 9);
    assert_int_equal(frame_parse(OBFS2_TAG_ABRIDGED, p, 9, &f, &need), FRAME_OK);
    assert_int_equal(f.hdr_len, 1);
    assert_int_equal(f.len, 8);
    assert_true(f.quickack);
    /* long form */
    p[0] = 0x7f, p[1] = 0x80, p[2] = 0, p[3] = 0;
    assert_int_equal(frame_parse(OBFS2_TAG_ABRIDGED, p, 600, &f, &need), FRAME_OK);
    assert_int_equal(f.len, 512);
    assert_int_equal(f.total, 516);
    assert_false(f.quickack);
    p[1] = 0x7e; /* overlong */
    assert_int_equal(frame_parse(OBFS2_TAG_ABRIDGED, p, 600, &f, &need), FRAME_BAD);
    p[0] = 0;
    assert_int_equal(frame_parse(OBFS2_TAG_ABRIDGED, p, 600, &f, &need), FRAME_BAD);
    /* intermediate */
    unhex("08000080", p);
    assert_int_equal(frame_parse(OBFS2_TAG_INTERMEDIATE, p, 12, &f, &need), FRAME_OK);
    assert_int_equal(f.len, 8);
    assert_true(f.quickack);
    unhex("09000000", p);
    assert_int_equal(frame_parse(OBFS2_TAG_INTERMEDIATE, p, 13, &f, &need), FRAME_BAD);
    /* padded: 9 = 8 + 1 byte of padding */
    assert_int_equal(frame_parse(OBFS2_TAG_PADDED, p, 13, &f, &need), FRAME_OK);
    assert_int_equal(f.len, 8);
    assert_int_equal(f.total, 13);
    unhex("ffffff7f", p);
    assert_int_equal(frame_parse(OBFS2_TAG_PADDED, p, 13, &f, &need), FRAME_BAD);
    assert_int_equal(frame_parse(0x12345678u, p, 13, &f, &need), FRAME_BAD);
    /* headers toward the client */
    uint8_t h[4];
    assert_int_equal(frame_header(OBFS2_TAG_ABRIDGED, 8, 0, h), 1);
    assert_int_equal(h[0], 2);
    assert_int_equal(frame_header(OBFS2_TAG_ABRIDGED, 0x7f * 4, 0, h), 4);
    hex_eq(h, "7f7f0000");
    assert_int_equal(frame_header(OBFS2_TAG_PADDED, 8, 3, h), 4);
    hex_eq(h, "0b000000");
    assert_int_equal(frame_header(OBFS2_TAG_INTERMEDIATE, 6, 0, h), 0);
    frame_quickack(OBFS2_TAG_ABRIDGED, 0x81020304u, h);
    hex_eq(h, "81020304");
    frame_quickack(OBFS2_TAG_PADDED, 0x81020304u, h);
    hex_eq(h, "04030281");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kdf_vector),     cmocka_unit_test(test_kdf_ipv6),
        cmocka_unit_test(test_cbc_chains),     cmocka_unit_test(test_frame_crc),
        cmocka_unit_test(test_nonce_handshake), cmocka_unit_test(test_proxy_req_ipv4),
        cmocka_unit_test(test_proxy_req_ipv6), cmocka_unit_test(test_msgs),
        cmocka_unit_test(test_config_good),    cmocka_unit_test(test_config_bad),
        cmocka_unit_test(test_secret_size),    cmocka_unit_test(test_client_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
