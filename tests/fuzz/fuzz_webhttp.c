/* fuzz_webhttp.c: libFuzzer target for WEB proxy mode's HTTP requests, through the real server
 * (src/web/webhttp.c) on a worker's loop: each input is up to 8 requests, separated by a line
 * "--"; in each, @CAP@ becomes the plain user's capability and @BOOT@ / @SESS@ the bootstrap
 * and session tokens the server gave out earlier in the run, so inputs reach session creation,
 * /up with frames (OPEN makes a connection of the proxy's state machine), /down and DELETE.
 * An input that starts with "WS:", "HL:" or "WL:" goes to a server whose carrier is websocket,
 * https-lanes or websocket-lanes (else https): requests may carry X-Lane-ID, or upgrade (GET
 * /api/v1/ws, tproxy-v1.@SESS@ or tproxy-lane-v1.@SESS@.N) and go on with WebSocket frames in
 * the same bytes.
 * Every answer must start as one HTTP/1.1 response (or be none: a request still held when the
 * input ends). Loopback only: the config's DC is 127.0.0.1:1 and the run is in a namespace. */
#include <fcntl.h>
#include <sys/un.h>
#include <unistd.h>

#include <ev.h>

#include "config/reload.h"
#include "conn/conn.h"
#include "core/replay.h"
#include "core/worker.h"
#include "proto/webcap.h"
#include "users/users.h"
#include "web/webhttp.h"
#include "web/webint.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY_HEX "00112233445566778899aabbccddeeff"
#define HOST "proxy.example.com"

static struct {
    int ready;
    struct users users;
    struct reload rl;
    struct gen *g;
    struct replay *replay;
    struct worker w[4];
    struct proxy_worker pw[4];
    struct webhttp *h[4]; /* https, websocket, https-lanes, websocket-lanes */
    struct webhttp *cur;
    struct ev_loop *loop;
    char cap[WEBCAP_LEN + 1];
    char boot[WEBSESS_TOKEN_LEN + 1], sess[WEBSESS_TOKEN_LEN + 1];
} F;

static void setup(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_webhttp.%d.conf", (int)getpid());
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f);
    fprintf(f, "listen = 127.0.0.1:1\nworkers = 1\nlog-level = error\ndc-builtin = off\n"
               "dc = 2 127.0.0.1:1\ndefault-dc = 2\ndc-pool = 0\n"
               "secret = plain:" KEY_HEX "\nsecret = padded:dd" KEY_HEX "\n"
               "web-listen = 127.0.0.1:1\nweb-host = " HOST "\n");
    fclose(f);
    FUZZ_CHECK(users_init(&F.users, 1) == 0);
    reload_init(&F.rl, &F.users, path, 0, NULL);
    static struct config_errors e;
    F.g = reload_build(&F.rl, NULL, &e);
    unlink(path);
    if (!F.g)
        fprintf(stderr, "fuzz_webhttp: config: %s\n", e.count ? e.msg[0] : "?");
    FUZZ_CHECK(F.g);
    F.g->users = &F.users;
    FUZZ_CHECK(gen_map_users(F.g) == 0);
    reload_commit(&F.rl, F.g);
    struct replay_config rc = {.max_entries = 1024, .window = 0};
    F.replay = replay_new(&rc);
    FUZZ_CHECK(F.replay);
    static const enum opt_web_carrier carrier[4] = {WEB_HTTPS, WEB_WEBSOCKET, WEB_HTTPS_LANES,
                                                    WEB_WEBSOCKET_LANES};
    for (int i = 0; i < 4; i++) {
        struct options o = F.g->opt; /* the same keys, another carrier (read at start only) */
        o.web_carrier = carrier[i];
        FUZZ_CHECK(worker_init(&F.w[i], i, NULL, NULL, NULL, NULL) == 0);
        FUZZ_CHECK(proxy_worker_init(&F.pw[i], &F.w[i], F.g, &F.users, F.replay, 1) == 0);
        /* a listener nobody connects to (an autobound abstract name): requests come in
         * through webhttp_adopt */
        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        FUZZ_CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&un, sizeof(sa_family_t)) == 0 &&
                   listen(lfd, 1) == 0);
        F.h[i] = webgroup_server(webgroup_new(&F.pw[i], 1, &lfd, &o), 0);
        FUZZ_CHECK(F.h[i]);
    }
    uint8_t key[WEBCAP_SECRET_MAX];
    int n = webcap_secret_bytes(&F.g->opt.secrets[0], key);
    FUZZ_CHECK(n > 0 && webcap_derive(key, (size_t)n, HOST, F.cap) == 0);
    F.ready = 1;
}

/* req[0..n) with the placeholders replaced, into out (cap bytes). Its length. */
static size_t expand(const uint8_t *req, size_t n, uint8_t *out, size_t cap)
{
    static const struct {
        const char *name;
        const char *val;
    } subs[] = {{"@CAP@", F.cap}, {"@BOOT@", F.boot}, {"@SESS@", F.sess}};
    size_t o = 0;
    for (size_t i = 0; i < n && o < cap;) {
        size_t k = 0;
        for (; k < 3; k++) {
            size_t ln = strlen(subs[k].name);
            if (n - i >= ln && !memcmp(req + i, subs[k].name, ln))
                break;
        }
        if (k == 3) {
            out[o++] = req[i++];
            continue;
        }
        size_t vl = strlen(subs[k].val);
        if (vl > cap - o)
            vl = cap - o;
        memcpy(out + o, subs[k].val, vl);
        o += vl;
        i += strlen(subs[k].name);
    }
    return o;
}

/* Remembers the tokens an answer gives out: the bridge page's bootstrap, X-Session-Token. */
static void learn(const char *resp, size_t n)
{
    static const char *const keys[2] = {"bootstrap=\"", "X-Session-Token: "};
    char *dst[2] = {F.boot, F.sess};
    for (int k = 0; k < 2; k++) {
        const char *p = memmem(resp, n, keys[k], strlen(keys[k]));
        if (p && (size_t)(resp + n - p) >= strlen(keys[k]) + WEBSESS_TOKEN_LEN) {
            memcpy(dst[k], p + strlen(keys[k]), WEBSESS_TOKEN_LEN);
            dst[k][WEBSESS_TOKEN_LEN] = 0;
        }
    }
}

/* One request through the server; checks the answer's shape. */
static void one(const uint8_t *req, size_t n)
{
    static uint8_t buf[70000];
    static char resp[1 << 20];
    size_t len = expand(req, n, buf, sizeof buf);
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    static const uint8_t src[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};
    webhttp_adopt(F.cur, sv[0], src);
    size_t off = 0, got = 0;
    int eof = 0;
    for (int round = 0; round < 64 && !eof; round++) {
        if (off < len) {
            ssize_t k = write(sv[1], buf + off, len - off);
            if (k > 0) /* no half-close after it: the server takes EOF for a client gone */
                off += (size_t)k;
        }
        ev_run(F.loop, EVRUN_NOWAIT);
        for (;;) {
            ssize_t k = read(sv[1], resp + got, sizeof resp - 1 - got);
            if (k > 0 && (got += (size_t)k) < sizeof resp - 1)
                continue;
            eof = k == 0 || got == sizeof resp - 1;
            break;
        }
    }
    close(sv[1]);
    ev_run(F.loop, EVRUN_NOWAIT); /* the server sees the close (a held /down lets go) */
    resp[got] = 0;
    if (got) {
        FUZZ_CHECK(got >= 12 && !memcmp(resp, "HTTP/1.1 ", 9));
        FUZZ_CHECK(resp[9] >= '1' && resp[9] <= '5' && resp[12] == ' ');
        FUZZ_CHECK(memmem(resp, got, "\r\n\r\n", 4) != NULL);
        learn(resp, got);
    }
    if (getenv("FUZZ_WEBHTTP_TRACE")) /* what each request got: checking the seeds go deep */
        fprintf(stderr, "%.*s -> %.*s\n", (int)strcspn((char *)buf, "\r"), (char *)buf,
                got ? (int)strcspn(resp, "\r") : 4, got ? resp : "none");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!F.ready)
        setup();
    if (size > 65536)
        return 0;
    static const char *const prefix[4] = {"", "WS:", "HL:", "WL:"};
    int k = 3;
    while (k > 0 && (size < 3 || memcmp(data, prefix[k], 3)))
        k--;
    F.cur = F.h[k];
    F.loop = F.w[k].loop;
    const uint8_t *p = data + (k ? 3 : 0), *end = data + size;
    for (int i = 0; i < 8 && p <= end; i++) {
        const uint8_t *sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
        one(p, (size_t)((sep ? sep : end) - p));
        if (!sep)
            break;
        p = sep + 4;
    }
    return 0;
}
