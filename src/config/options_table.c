/* options_table.c: the option table (every key: its type, default, argument and help) and
 * the parsers of its custom keys. */
#include "config/options.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(struct options, f)

static int parse_listen(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    if (o->nlisten >= OPT_MAX_LISTEN) {
        snprintf(err, errlen, "at most %d listen addresses", OPT_MAX_LISTEN);
        return -1;
    }
    if (sock_addr_parse(v, 0, 0, &o->listen[o->nlisten], err, errlen))
        return -1;
    o->nlisten++;
    return 0;
}

static void reset_listen(void *conf)
{
    ((struct options *)conf)->nlisten = 0;
}

/* listen-prefix = [PREFIX]/LEN:PORT (or off). */
static int parse_listen_prefix(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    o->prefix_on = 0;
    if (!strcmp(v, "off"))
        return 0;
    const char *rb = strchr(v, ']');
    char host[INET6_ADDRSTRLEN + 1];
    char *end;
    long len = -1, port = -1;
    if (v[0] == '[' && rb && rb[1] == '/' && (size_t)(rb - v - 1) < sizeof host) {
        memcpy(host, v + 1, (size_t)(rb - v - 1));
        host[rb - v - 1] = 0;
        len = strtol(rb + 2, &end, 10);
        if (end == rb + 2 || *end != ':')
            len = -1;
        else
            port = strtol(end + 1, &end, 10);
        if (*end)
            port = -1;
    }
    if (len < 0 || port < 0 || inet_pton(AF_INET6, host, &o->prefix) != 1) {
        snprintf(err, errlen, "'%s' is not [IPV6-PREFIX]/LEN:PORT (e.g. [2001:db8:1:2::]/64:443)",
                 v);
        return -1;
    }
    if (len < 1 || len > 120 || port < 1 || port > 65535) {
        snprintf(err, errlen, "'%s': the length must be 1..120 and the port 1..65535", v);
        return -1;
    }
    for (int b = (int)len; b < 128; b++)
        if (o->prefix.s6_addr[b / 8] & (0x80 >> (b % 8))) {
            snprintf(err, errlen, "'%s': host bits set after /%ld", v, len);
            return -1;
        }
    o->prefix_len = (int)len;
    o->prefix_port = (int)port;
    o->prefix_on = 1;
    return 0;
}

static int parse_limit(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    struct user_limit l;
    if (users_limit_parse(v, &l, err, errlen))
        return -1;
    for (int i = 0; i < o->nlimits; i++) {
        if (!strcmp(o->limits[i].name, l.name)) {
            snprintf(err, errlen, "a second limit line for '%s' (put every limit of a user on "
                                  "one line)", l.name);
            return -1;
        }
    }
    if (o->nlimits == o->limits_cap) {
        int cap = o->limits_cap ? o->limits_cap * 2 : 8;
        if (cap > OPT_MAX_SECRETS) {
            snprintf(err, errlen, "at most %d limit lines", OPT_MAX_SECRETS);
            return -1;
        }
        struct user_limit *n = realloc(o->limits, (size_t)cap * sizeof *n);
        if (!n) {
            snprintf(err, errlen, "out of memory for limits");
            return -1;
        }
        o->limits = n;
        o->limits_cap = cap;
    }
    o->limits[o->nlimits++] = l;
    return 0;
}

static void reset_limit(void *conf)
{
    ((struct options *)conf)->nlimits = 0;
}

static int parse_accept_rate(void *conf, const char *v, char *err, size_t errlen)
{
    char num[32];
    size_t n = strlen(v);
    if (n >= 2 && !strcmp(v + n - 2, "/s"))
        n -= 2;
    long long r = -1;
    char e[64];
    if (n < sizeof num) {
        memcpy(num, v, n);
        num[n] = 0;
        if (config_parse_int(num, &r, e, sizeof e))
            r = -1;
    }
    if (r < 0 || r > 1000000) {
        snprintf(err, errlen, "accept-rate must be N/s with N in 0..1000000, got '%s'", v);
        return -1;
    }
    ((struct options *)conf)->accept_rate = (unsigned)r;
    return 0;
}

/* "ID ADDRESS:PORT": the first line for an id replaces the built-in addresses of that id. */
static int parse_dc(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    char *end;
    long id = strtol(v, &end, 10);
    if (end == v || (*end != ' ' && *end != '\t') || id < -32768 || id > 32767 || id == 0) {
        snprintf(err, errlen, "dc must be 'ID ADDRESS:PORT' with ID a non-zero integer "
                              "in -32768..32767, got '%s'", v);
        return -1;
    }
    while (*end == ' ' || *end == '\t')
        end++;
    if (o->ndcs >= OPT_MAX_DC_ADDRS) {
        snprintf(err, errlen, "at most %d dc addresses", OPT_MAX_DC_ADDRS);
        return -1;
    }
    struct opt_dc *d = &o->dcs[o->ndcs];
    if (sock_addr_parse(end, 1, 0, &d->addr, err, errlen))
        return -1;
    d->id = (int)id;
    o->ndcs++;
    return 0;
}

static void reset_dc(void *conf)
{
    ((struct options *)conf)->ndcs = 0;
}

/* allow/deny = CIDR and allow-file/deny-file = PATH: one parser each, told which list by
 * the option (the four share the shape "append to a bounded array"). */
static int add_cidr(struct cidr *arr, int *n, const char *v, char *err, size_t errlen)
{
    if (*n >= OPT_MAX_ACL) {
        snprintf(err, errlen, "at most %d entries here: put longer lists in allow-file/"
                 "deny-file", OPT_MAX_ACL);
        return -1;
    }
    if (cidr_parse(v, &arr[*n], err, errlen))
        return -1;
    (*n)++;
    return 0;
}

static int add_file(char (*arr)[OPT_PATH_MAX], int *n, const char *v, char *err, size_t errlen)
{
    if (*n >= OPT_MAX_ACL_FILES) {
        snprintf(err, errlen, "at most %d list files", OPT_MAX_ACL_FILES);
        return -1;
    }
    if (!*v || strlen(v) >= OPT_PATH_MAX) {
        snprintf(err, errlen, "a list file path of 1 to %d bytes", OPT_PATH_MAX - 1);
        return -1;
    }
    snprintf(arr[(*n)++], OPT_PATH_MAX, "%s", v);
    return 0;
}

static int parse_allow(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return add_cidr(o->allow, &o->nallow, v, err, errlen);
}
static int parse_deny(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return add_cidr(o->deny, &o->ndeny, v, err, errlen);
}
static int parse_allow_file(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return add_file(o->allow_files, &o->nallow_files, v, err, errlen);
}
static int parse_deny_file(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return add_file(o->deny_files, &o->ndeny_files, v, err, errlen);
}
/* proxy-protocol-from = CIDR, or "any": every source, written out (0.0.0.0/0 and ::/0). */
static int parse_pp_from(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    if (strcmp(v, "any") == 0)
        return add_cidr(o->pp_from, &o->npp_from, "0.0.0.0/0", err, errlen) ||
               add_cidr(o->pp_from, &o->npp_from, "::/0", err, errlen);
    return add_cidr(o->pp_from, &o->npp_from, v, err, errlen);
}
static void reset_pp_from(void *conf) { ((struct options *)conf)->npp_from = 0; }
static int parse_ad_tag(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    if (strcmp(v, "off") == 0 || !*v) {
        o->middle = 0;
        return 0;
    }
    if (strlen(v) != 32 || strspn(v, "0123456789abcdefABCDEF") != 32) {
        snprintf(err, errlen, "ad-tag must be 32 hex digits (from @MTProxybot), got %zu "
                 "characters", strlen(v));
        return -1;
    }
    for (int i = 0; i < 16; i++) {
        unsigned b;
        sscanf(v + 2 * i, "%2x", &b);
        o->ad_tag[i] = (unsigned char)b;
    }
    o->middle = 1;
    return 0;
}

/* One address of nat-info: A.B.C.D or [V6] (brackets optional when alone). */
static int nat_addr(const char *t, size_t n, int *v6, unsigned char *out)
{
    char buf[64];
    if (n >= 2 && t[0] == '[' && t[n - 1] == ']')
        t++, n -= 2;
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, t, n);
    buf[n] = 0;
    memset(out, 0, 16);
    if (inet_pton(AF_INET, buf, out) == 1) {
        *v6 = 0;
        return 0;
    }
    if (inet_pton(AF_INET6, buf, out) == 1) {
        *v6 = 1;
        return 0;
    }
    return -1;
}

static int parse_nat(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    if (o->nnat >= OPT_MAX_NAT) {
        snprintf(err, errlen, "at most %d nat-info lines", OPT_MAX_NAT);
        return -1;
    }
    /* PRIVATE:PUBLIC; IPv6 bracketed: [PRIVATE]:[PUBLIC] */
    const char *sep = v[0] == '[' ? strstr(v, "]:") : strchr(v, ':');
    if (sep && v[0] == '[')
        sep++;
    struct opt_nat *nt = &o->nat[o->nnat];
    int v6a = 0, v6b = 0;
    if (!sep || nat_addr(v, (size_t)(sep - v), &v6a, nt->priv) ||
        nat_addr(sep + 1, strlen(sep + 1), &v6b, nt->pub) || v6a != v6b) {
        snprintf(err, errlen, "nat-info must be PRIVATE:PUBLIC (IPv4 a.b.c.d:w.x.y.z, IPv6 "
                 "[v6]:[v6], both of one family), got '%s'", v);
        return -1;
    }
    nt->v6 = v6a;
    o->nnat++;
    return 0;
}

static void reset_nat(void *conf)
{
    ((struct options *)conf)->nnat = 0;
}

static int parse_socks5(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    if (socks5_parse_url(v, &o->socks5, err, errlen))
        return -1;
    o->socks5_on = 1;
    return 0;
}

static int parse_rstore(void *conf, const char *v, char *err, size_t errlen)
{
    return rstore_parse_url(v, &((struct options *)conf)->rstore, err, errlen);
}

static int parse_lstore(void *conf, const char *v, char *err, size_t errlen)
{
    return rstore_parse_url_as("limits-store", v, &((struct options *)conf)->lstore, err, errlen);
}

/* ADDR:PORT or off, for a listener of its own (metrics, api). */
static int parse_listener(const char *v, int *on, struct sock_addr *addr, char *err,
                          size_t errlen)
{
    if (!strcmp(v, "off")) {
        *on = 0;
        return 0;
    }
    if (sock_addr_parse(v, 0, 0, addr, err, errlen))
        return -1;
    *on = 1;
    return 0;
}

static int parse_metrics(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return parse_listener(v, &o->metrics_on, &o->metrics_addr, err, errlen);
}

static int parse_api(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return parse_listener(v, &o->api_on, &o->api_addr, err, errlen);
}

/* web-listen = ADDR:PORT|off; web-trusted-proxies = CIDR (repeated). */
static int parse_web(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return parse_listener(v, &o->web_on, &o->web_addr, err, errlen);
}
/* web-upstream = http://ADDR:PORT (an address, not a name: no lookup on a worker's loop) or
 * off. */
static int parse_web_upstream(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    if (!strcmp(v, "off")) {
        o->web_upstream_on = 0;
        return 0;
    }
    size_t n = strlen(v);
    if (strncmp(v, "http://", 7) || n < 8) {
        snprintf(err, errlen, "'%s' is not http://ADDR:PORT (plain HTTP to an address; the "
                 "TLS terminator is in front of web-listen, not behind it)", v);
        return -1;
    }
    char hp[128];
    snprintf(hp, sizeof hp, "%.*s", (int)(n - 7 - (v[n - 1] == '/')), v + 7);
    if (sock_addr_parse(hp, 0, 0, &o->web_upstream, err, errlen))
        return -1;
    o->web_upstream_on = 1;
    return 0;
}

static int parse_web_trusted(void *conf, const char *v, char *err, size_t errlen)
{
    struct options *o = conf;
    return add_cidr(o->web_trusted, &o->nweb_trusted, v, err, errlen);
}
static void reset_web_trusted(void *conf) { ((struct options *)conf)->nweb_trusted = 0; }

static void reset_allow(void *conf) { ((struct options *)conf)->nallow = 0; }
static void reset_deny(void *conf) { ((struct options *)conf)->ndeny = 0; }
static void reset_allow_file(void *conf) { ((struct options *)conf)->nallow_files = 0; }
static void reset_deny_file(void *conf) { ((struct options *)conf)->ndeny_files = 0; }

static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};
static const char *const proxy_protocols[] = {"off", "v1", "v2", NULL};
static const char *const ext_orders[] = {"key-share-first", "versions-first", NULL};
static const char *const buffer_modes[] = {"pooled", "per-connection", NULL};
static const char *const batch_modes[] = {"buffer", "cork", "msg-more", NULL};
static const char *const fail_modes[] = {"open", "closed", NULL};
static const char *const sni_policies[] = {"mask", "drop", "reject", NULL};
static const char *const rst_modes[] = {"off", "probes", "always", NULL};
static const char *const removed_modes[] = {"close", "drain", NULL};
static const char *const web_carriers[] = {"https", "https-lanes", "websocket",
                                           "websocket-lanes", NULL};

/* clang-format off */
const struct config_option options_table[] = {
    {.name = "listen", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "ADDR:PORT",
     .def = "0.0.0.0:8443", .parse = parse_listen, .reset = reset_listen,
     .help = "Address and port to accept clients on; IPv6 as [::]:443. Repeat for several."},
    {.name = "listen-prefix", .type = CFG_CUSTOM, .arg = "[PREFIX]/LEN:PORT|off", .def = "off",
     .parse = parse_listen_prefix,
     .help = "Accept on every address of this IPv6 prefix (e.g. [2001:db8:1:2::]/64:443), and "
             "give each user its own address in it, derived from listen-prefix-key and the "
             "user's name: its links carry it, and a client on another user's address (or on "
             "no user's) is treated like a bad one. Needs a local route for the prefix "
             "(`ip -6 route add local PREFIX/LEN dev lo`, added at start when permitted). "
             "Combines with listen."},
    {.name = "listen-prefix-key", .type = CFG_STRING, .offset = OFF(prefix_key), .str_size = 80,
     .arg = "HEX", .help = "Key (64 hex digits) the users' addresses are derived from. Empty: "
     "one is generated at first start and kept in STATE-FILE.addresses."},
    {.name = "listen-prefix-grace", .type = CFG_DURATION, .offset = OFF(prefix_grace_ms),
     .def = "10m", .arg = "DURATION", .help = "After `mtproxy user rotate-address NAME`, how "
     "long the user's old address keeps serving."},
    {.name = "secret", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "NAME:SECRET",
     .parse = options_parse_secret, .reset = options_reset_secret,
     .help = "A client secret as clients see it: 32 hex digits (plain obfuscated2: tags ef, "
             "ee and dd), dd + 32 hex digits (padded intermediate only), or ee + 32 hex "
             "digits + the hex of a domain (FakeTLS: looks like HTTPS to that domain, which "
             "non-clients are fronted to). NAME labels it in logs. Repeat for several. With "
             "none, a plain one is generated and kept in state-file."},
    {.name = "limit", .type = CFG_CUSTOM, .flags = CFG_REPEAT,
     .arg = "'NAME [conns=N] [ips=N] [quota=SIZE[/month]] [expires=DATE] [rate=SIZE/s] "
            "[disabled]'",
     .parse = parse_limit, .reset = reset_limit,
     .help = "Limits of the user (secret) NAME, each optional: conns = concurrent connections; "
             "ips = distinct client addresses within ips-window; quota = bytes both ways, kept "
             "across restarts in state-file (a user past it is cut off, live connections "
             "too), for good or per period: SIZE/day, SIZE/week (from Monday, or quota-day="
             "mon..sun), SIZE/month (from quota-reset-day, or quota-day=1-28), starting over "
             "at 00:00 UTC; expires = YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC); rate = bytes per "
             "second each way, shared by the user's connections (e.g. 1M/s). A refused client "
             "is treated like a bad one (ee: fronted; others: held, then closed); logged once "
             "per user per minute and counted per user and reason. The word disabled (no "
             "value; `mtproxy user disable`) refuses the user's new connections (reason "
             "disabled) and ends its live ones as removed-user says. One line per user."},
    {.name = "quota-reset-day", .type = CFG_INT, .offset = OFF(quota_reset_day), .def = "1",
     .min = 1, .max = 28, .arg = "N", .help = "Day of the month (1-28) on which monthly quotas "
     "(limit ... quota=SIZE/month) start over, at 00:00 UTC, unless the limit line names its "
     "own quota-day."},
    {.name = "ips-window", .type = CFG_DURATION, .offset = OFF(ips_window_ms), .def = "1h",
     .min = 1000, .arg = "DURATION", .help = "How long a client address counts against a "
     "user's ips limit after its last connection ended."},
    {.name = "removed-user", .type = CFG_ENUM, .offset = OFF(removed_user), .def = "close",
     .names = removed_modes, .arg = "close|drain", .help = "What a reload that removes a user "
     "(its secret line gone) does to the user's live connections: close = closed at once; "
     "drain = they go on until they end, at most drain-timeout, then are closed (reason "
     "drained). Either way the user's new connections are refused at once (treated like a "
     "bad client), and a user added back before its connections were closed keeps them."},
    {.name = "drain-timeout", .type = CFG_DURATION, .offset = OFF(drain_timeout_ms),
     .def = "10m", .min = 1000, .arg = "DURATION", .help = "removed-user = drain: how long a "
     "removed user's live connections may go on after the reload that removed it (a later "
     "reload does not extend it)."},
    {.name = "dc", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "'ID ADDRESS:PORT'",
     .parse = parse_dc, .reset = reset_dc,
     .help = "An address of Telegram data centre ID (negative = media, 203 = CDN, any id may "
             "be added). The first line for an id replaces its built-in addresses; more lines "
             "add addresses tried in order when a connect fails."},
    {.name = "dc-builtin", .type = CFG_BOOL, .offset = OFF(dc_builtin), .def = "on",
     .arg = "on|off", .help = "Use Telegram's published production DC addresses for ids that "
     "have no dc line. Off: only dc lines are used."},
    {.name = "default-dc", .type = CFG_INT, .offset = OFF(default_dc), .def = "2", .min = 1,
     .max = 32767, .arg = "ID", .help = "DC used when a client asks for an unknown id."},
    {.name = "prefer-ipv6", .type = CFG_BOOL, .offset = OFF(prefer_ipv6), .def = "off",
     .arg = "on|off", .help = "Try a DC's IPv6 addresses before its IPv4 ones."},
    {.name = "only-ipv4", .type = CFG_BOOL, .offset = OFF(only_ipv4), .def = "off",
     .arg = "on|off", .help = "Never connect to DCs over IPv6."},
    {.name = "allow-plain", .type = CFG_BOOL, .offset = OFF(allow_plain), .def = "on",
     .arg = "on|off", .help = "Serve obfuscated2 clients without padding (tags ef and ee) "
     "on plain secrets."},
    {.name = "allow-dd", .type = CFG_BOOL, .offset = OFF(allow_dd), .def = "on",
     .arg = "on|off", .help = "Serve padded-intermediate (dd) clients outside TLS."},
    {.name = "allow-ee", .type = CFG_BOOL, .offset = OFF(allow_ee), .def = "on",
     .arg = "on|off", .help = "Serve FakeTLS (ee) clients. Turn allow-plain and allow-dd off "
     "for a TLS-only proxy: everything else is then fronted."},
    {.name = "mask", .type = CFG_BOOL, .offset = OFF(mask), .def = "on", .arg = "on|off",
     .help = "Forward anything that is not a valid client for our secrets (a browser, a "
     "scanner, a censor's probe or replay) byte for byte to the real web server, so it sees "
     "what that site would show. Off, or with no ee secret and no mask-host: such "
     "connections are held silently and closed after a random delay."},
    {.name = "mask-host", .type = CFG_STRING, .offset = OFF(mask_host), .str_size = 256,
     .arg = "HOST", .help = "The server to front to. Default: the domain of the ee secret "
     "(the one the client's SNI names, else the first), resolved at start."},
    {.name = "mask-port", .type = CFG_INT, .offset = OFF(mask_port), .def = "443", .min = 1,
     .max = 65535, .arg = "N", .help = "Port of the fronting server."},
    {.name = "mask-proxy-protocol", .type = CFG_ENUM, .offset = OFF(mask_proxy_protocol),
     .def = "off", .names = proxy_protocols, .arg = "off|v1|v2", .help = "Send a PROXY "
     "protocol header to the fronting server, so it logs the real client address."},
    {.name = "tls-time-skew", .type = CFG_DURATION, .offset = OFF(tls_time_skew_ms),
     .def = "5m", .min = 1000, .max = 86400000, .arg = "DURATION", .help = "How far the "
     "timestamp in a FakeTLS hello may be from our clock, either way. Older or newer hellos "
     "are fronted. Replayed hellos are caught by the replay cache within this window."},
    {.name = "tls-ignore-time", .type = CFG_BOOL, .offset = OFF(tls_ignore_time),
     .def = "off", .arg = "on|off", .help = "Accept any hello timestamp (for boxes with a bad "
     "clock). Replays are then caught only while they are in the replay cache."},
    {.name = "tls-sni-check", .type = CFG_BOOL, .offset = OFF(tls_sni_check), .def = "on",
     .arg = "on|off", .help = "Require the hello's SNI to name the domain of the ee secret it "
     "is signed with; others are fronted."},
    {.name = "tls-ext-order", .type = CFG_ENUM, .offset = OFF(tls_ext_order),
     .def = "key-share-first", .names = ext_orders,
     .arg = "key-share-first|versions-first", .help = "Extension order of our ServerHello; "
     "match the fronted site's."},
    {.name = "tls-appdata-min", .type = CFG_INT, .offset = OFF(tls_appdata_min),
     .def = "2500", .min = 64, .max = 16384, .arg = "BYTES", .help = "Smallest fake encrypted "
     "record after the ServerHello (a real server's certificate chain)."},
    {.name = "tls-appdata-max", .type = CFG_INT, .offset = OFF(tls_appdata_max),
     .def = "4700", .min = 64, .max = 16384, .arg = "BYTES", .help = "Largest one; each "
     "handshake draws a length uniformly between the two."},
    {.name = "tls-profile", .type = CFG_BOOL, .offset = OFF(tls_profile), .def = "on",
     .arg = "on|off", .help = "Learn the fronting site's TLS first flight (at start and every "
     "tls-profile-refresh, three TLS 1.3 handshakes of our own to mask-host, or with mask on "
     "the first ee domain, on mask-port, read without decrypting; also how long the site keeps "
     "an idle connection, which held clients follow) and answer ee clients like it: the "
     "ServerHello's extension order and cipher, and the bytes of its encrypted records (sent "
     "as one record: Telegram clients read exactly one), varied by tls-profile-vary. It is "
     "kept in state-file with .tls-profile appended. Until learned (site unreachable): a "
     "built-in profile of a "
     "common server, said once in the log. off: tls-ext-order and tls-appdata-min/max."},
    {.name = "tls-profile-refresh", .type = CFG_DURATION, .offset = OFF(tls_profile_refresh_ms),
     .def = "6h", .min = 1000, .arg = "DURATION", .help = "How often the profile is learned "
     "again (after a failure: within 10 minutes)."},
    {.name = "tls-profile-idle-max", .type = CFG_DURATION, .offset = OFF(tls_profile_idle_ms),
     .def = "2m", .min = 100, .arg = "DURATION", .help = "After the handshakes the learner "
     "opens one more connection, says nothing, and times the site's close; it waits at most "
     "this long (a site that keeps it longer: held clients close at a random time around "
     "handshake-timeout)."},
    {.name = "tls-profile-vary", .type = CFG_INT, .offset = OFF(tls_profile_vary), .def = "4",
     .min = 0, .max = 256, .arg = "BYTES", .help = "Our encrypted record is drawn this many "
     "bytes around what the site sent (on top of the spread its own handshakes showed)."},
    {.name = "unknown-sni", .type = CFG_ENUM, .offset = OFF(unknown_sni), .def = "mask",
     .names = sni_policies, .arg = "mask|drop|reject", .help = "A TLS ClientHello naming none "
     "of our ee domains (with tls-sni-check on): mask = fronted to the site; drop = closed; "
     "reject = a fatal TLS unrecognized_name alert (15 03 03 00 02 02 70), then closed."},
    {.name = "replay-cache", .type = CFG_SIZE, .offset = OFF(replay_cache), .def = "4M",
     .max = 1LL << 32, .arg = "BYTES", .help = "Memory for the replay cache shared by all "
     "workers: FakeTLS hellos are remembered for twice tls-time-skew, plain and dd headers "
     "(which carry no time) until the cache is full, oldest first; a repeat is fronted as a "
     "probe (0 = off)."},
    {.name = "replay-store", .type = CFG_CUSTOM, .arg = "redis://[:PASS@]HOST:PORT[/DB]",
     .parse = parse_rstore,
     .help = "Share replay detection between instances (a fleet behind one address) through "
             "Redis or Valkey: each handshake that passes the local replay-cache is recorded "
             "there (SET NX with an expiry) and one that any instance has seen is refused "
             "like a local replay. A Unix socket: redis://[:PASS@]/PATH/TO/SOCKET[?db=N]. "
             "Needs a build with libhiredis."},
    {.name = "replay-store-fail", .type = CFG_ENUM, .offset = OFF(rstore_fail_closed),
     .def = "open", .names = fail_modes, .arg = "open|closed", .help = "What a handshake gets "
     "when the replay store does not answer within replay-store-timeout (or is down): open "
     "serves it on the local replay-cache's word alone (a replay that only another instance "
     "saw gets through meanwhile); closed refuses it like a replay (nobody is served while "
     "the store is down). Both are counted and logged."},
    {.name = "replay-store-timeout", .type = CFG_DURATION, .offset = OFF(rstore_timeout_ms),
     .def = "200ms", .min = 1, .max = 10000, .arg = "DURATION", .help = "How long a "
     "handshake waits for the replay store's answer."},
    {.name = "replay-store-ttl", .type = CFG_DURATION, .offset = OFF(rstore_ttl_ms),
     .def = "24h", .min = 1000, .max = 30LL * 86400 * 1000, .arg = "DURATION",
     .help = "How long the store remembers a plain/dd header (they carry no time stamp; "
     "FakeTLS hellos are remembered for twice tls-time-skew)."},
    {.name = "limits-store", .type = CFG_CUSTOM, .arg = "redis://[:PASS@]HOST:PORT[/DB]",
     .parse = parse_lstore,
     .help = "Share the users' limits (conns, ips, quota) between instances through Redis or "
             "Valkey (the replay-store's or another): each instance counts locally and once "
             "per limits-store-interval sends its deltas and live counts in one round trip "
             "and reads the fleet's totals back; a quota may be overshot by one interval of "
             "traffic per instance (docs/fleet.md). A Unix socket: "
             "redis://[:PASS@]/PATH/TO/SOCKET[?db=N]. Read at start only. Needs a build with "
             "libhiredis."},
    {.name = "limits-store-fail", .type = CFG_ENUM, .offset = OFF(lstore_fail_closed),
     .def = "open", .names = fail_modes, .arg = "open|closed", .help = "While the limits "
     "store is down or does not answer a flush in two intervals: open enforces each limit "
     "on this instance's own counts (and the quota on the last fleet total plus what this "
     "instance counted since); closed refuses new connections of users that have a conns, "
     "ips or quota limit (their live connections go on). Counted, logged once per change."},
    {.name = "limits-store-interval", .type = CFG_DURATION, .offset = OFF(lstore_interval_ms),
     .def = "1s", .min = 100, .max = 60000, .arg = "DURATION", .help = "How often the "
     "limits store is flushed (and the fleet's totals read back)."},
    {.name = "fast-mode", .type = CFG_BOOL, .offset = OFF(fast_mode), .def = "on",
     .arg = "on|off", .help = "Choose the header toward the DC so that the DC's encryption "
     "is the one the client expects: downloads then pass without any crypto in the proxy. "
     "Trade-off: that header carries, in clear, key material of the client's download "
     "stream, so an observer who sees both legs could link them (MTProto content stays "
     "end-to-end encrypted)."},
    {.name = "splice", .type = CFG_BOOL, .offset = OFF(splice), .def = "on", .arg = "on|off",
     .help = "In fast mode, move download bytes from the DC socket to the client socket with "
     "splice(2) through a pipe, never through user space (ee clients: see splice-tls). Pipes "
     "are lent per connection only while bytes are in flight (at most 64 per worker)."},
    {.name = "splice-tls", .type = CFG_BOOL, .offset = OFF(splice_tls), .def = "on",
     .arg = "on|off", .help = "With splice on, splice the download for ee (FakeTLS) clients "
     "too, writing each TLS record header to the client socket between spliced chunks. off: "
     "ee downloads are read into user space and written with their headers by writev(2)."},
    {.name = "record-sizing", .type = CFG_BOOL, .offset = OFF(record_sizing), .def = "on",
     .arg = "on|off", .help = "TLS records toward ee clients start at about one TCP segment "
     "(the socket's MSS, less up to 64 random bytes) and grow to 16 KiB once 64 KiB went out "
     "or 1 s passed, back to small after 1 s without a download byte, as web servers do. off: "
     "every record as large as the bytes at hand (up to 16 KiB)."},
    {.name = "dc-pool", .type = CFG_INT, .offset = OFF(dc_pool), .def = "1", .min = 0,
     .max = 64, .arg = "N", .help = "Pre-connected TCP sockets kept per DC per worker (0 = off). "
     "No header is sent until a client claims one, so its first bytes reach the DC one round "
     "trip sooner (no TCP connect to wait for); a claimed socket is replaced at once. Costs "
     "N descriptors and N idle connections to Telegram per DC (6 with the built-in table) and "
     "worker, no CPU at idle. Sockets the DC closes are replaced (with back-off while they keep "
     "failing), and unused ones are recycled before the DC's idle timeout (learnt from its "
     "closes) and after 120 s. Not used in middle-proxy mode (ad-tag). More than 1 only helps "
     "when clients arrive in bursts."},
    {.name = "ad-tag", .type = CFG_CUSTOM, .arg = "HEX32|off", .parse = parse_ad_tag,
     .def = "off",
     .help = "The proxy tag from @MTProxybot: Telegram shows your promoted channel to the "
             "clients of this proxy. Setting it switches every client (plain, dd and ee) to "
             "middle-proxy mode: their packets travel to Telegram's middle proxies (MEs, from "
             "proxy-config-file) multiplexed over a few encrypted links, instead of straight to "
             "the DCs. Needs proxy-secret-file and proxy-config-file."},
    {.name = "proxy-secret-file", .type = CFG_STRING, .offset = OFF(proxy_secret_file),
     .str_size = OPT_PATH_MAX, .arg = "PATH", .help = "Middle-proxy mode: Telegram's proxy "
     "secret (https://core.telegram.org/getProxySecret, binary, 32..256 bytes). Reread on "
     "SIGHUP. mtproxy downloads nothing: packaging/mtproxy-update-config fetches it."},
    {.name = "proxy-config-file", .type = CFG_STRING, .offset = OFF(proxy_config_file),
     .str_size = OPT_PATH_MAX, .arg = "PATH", .help = "Middle-proxy mode: Telegram's list of "
     "MEs per DC (https://core.telegram.org/getProxyConfig). Reread on SIGHUP: new clients "
     "go to the new MEs, clients already connected finish on the old ones."},
    {.name = "nat-info", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "PRIVATE:PUBLIC",
     .parse = parse_nat, .reset = reset_nat,
     .help = "Middle-proxy mode behind NAT: the public address the MEs see for a local "
             "address (IPv4 10.0.0.5:203.0.113.7, IPv6 [fd00::5]:[2001:db8::7]). It enters the "
             "link's key derivation: a wrong one makes every ME handshake fail (logged as "
             "'ME handshake failed: check nat-info'). Repeat for several addresses."},
    {.name = "me-pool", .type = CFG_INT, .offset = OFF(me_pool), .def = "2", .min = 1,
     .max = 64, .arg = "N", .help = "Middle-proxy mode: links per ME address per worker; "
     "clients are spread over them."},
    {.name = "me-ping-interval", .type = CFG_DURATION, .offset = OFF(me_ping_ms), .def = "10s",
     .min = 500, .max = 600000, .arg = "DURATION", .help = "Middle-proxy mode: a link that "
     "received nothing for this long sends the ME a ping; one still silent after another "
     "interval is closed (its clients too) and reconnected."},
    {.name = "me-client-buffer", .type = CFG_SIZE, .offset = OFF(me_client_buffer),
     .def = "4M", .min = 16384, .max = 1LL << 30, .arg = "BYTES", .help = "Middle-proxy "
     "mode: most bytes queued toward one client. A link carries no per-client window, so it "
     "is never paused for one slow client: past this that client alone is closed (counted "
     "as slow). Keep it above what a client has in flight (apps: 4 x 512 KiB parts) and "
     "below me-link-buffer, else one stalled client pauses its link (BENCHMARKS.md)."},
    {.name = "me-request-buffer", .type = CFG_SIZE, .offset = OFF(me_request_buffer),
     .def = "256k", .min = 4096, .max = 1LL << 30, .arg = "BYTES", .help = "Middle-proxy "
     "mode: most bytes of one client queued toward its ME; past it that client is not read "
     "until the link drains."},
    {.name = "me-link-buffer", .type = CFG_SIZE, .offset = OFF(me_link_buffer), .def = "8M",
     .min = 65536, .max = 1LL << 32, .arg = "BYTES", .help = "Middle-proxy mode: most bytes "
     "read from one link and not yet written to its clients; past it the link is not read "
     "until they drain. Keep it about twice me-client-buffer."},
    {.name = "me-stall-grace", .type = CFG_DURATION, .offset = OFF(me_stall_grace_ms),
     .def = "2s", .min = 100, .max = 60000, .arg = "DURATION", .help = "Middle-proxy mode: "
     "a link paused (me-link-buffer reached) this long closes the clients that hold it and "
     "whose peers took nothing (under 8 KiB) in its last three quarters: each holding more "
     "than its share of me-link-buffer, then the largest until the link is under half "
     "(counted as stalled). Clients still reading are left to drain, checked again after "
     "each grace; after 10 graces paused the largest holders go whether they read or not. "
     "Clients that stop reading below me-client-buffer would otherwise freeze the link for "
     "everyone on it."},
    {.name = "allow", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "CIDR",
     .parse = parse_allow, .reset = reset_allow,
     .help = "Serve only clients from this network (an address or CIDR, IPv4 or IPv6; "
             "repeat for several; long lists go in allow-file). Checked when a connection "
             "is accepted, before any byte is read; others are closed at once and counted. "
             "With no allow entry every source is served that no deny entry names."},
    {.name = "deny", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "CIDR",
     .parse = parse_deny, .reset = reset_deny,
     .help = "Refuse clients from this network (address or CIDR; repeat for several). Deny "
             "wins over allow."},
    {.name = "allow-file", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "PATH",
     .parse = parse_allow_file, .reset = reset_allow_file,
     .help = "A file of networks to allow: one address or CIDR a line, '#' comments (the "
             "FireHOL netset format). Read at start; a bad line is an error with its "
             "file:line. Lookups stay fast with hundreds of thousands of entries."},
    {.name = "deny-file", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "PATH",
     .parse = parse_deny_file, .reset = reset_deny_file,
     .help = "A file of networks to refuse, in the allow-file format."},
    {.name = "proxy-protocol", .type = CFG_BOOL, .offset = OFF(proxy_protocol), .def = "off",
     .arg = "on|off", .help = "Every client connection must start with a PROXY protocol header "
     "(v1 or v2, told apart by their first bytes), as a load balancer such as HAProxy sends "
     "with send-proxy or send-proxy-v2. The address in it is then the client's address for "
     "allow/deny, logs and the fronting server's own PROXY header. A connection without a "
     "valid header within handshake-timeout is closed and counted; a LOCAL header (a health "
     "check) is closed cleanly."},
    {.name = "proxy-protocol-from", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "CIDR|any",
     .parse = parse_pp_from, .reset = reset_pp_from,
     .help = "With proxy-protocol: only connections from these networks (the balancers) may "
             "send a PROXY header; others are closed at once and counted. Required when a "
             "listen address is not loopback (a source that may send a header can claim any "
             "client address); 'any' trusts every source, written out. None on loopback-only "
             "listen addresses: any local source (a balancer on the same host)."},
    {.name = "socks5", .type = CFG_CUSTOM, .arg = "socks5://[USER:PASS@]HOST:PORT",
     .parse = parse_socks5,
     .help = "Make every connection to Telegram (DCs, the DC pool, middle-mode ME links) "
             "through this SOCKS5 server (RFC 1928; username/password login, RFC 1929, when "
             "given: percent-encode ':', '@' and '%' in them). HOST may be an IPv4 address, "
             "[IPv6] or a name (resolved at start). A refusal is logged with the server's "
             "reason, and the DC's next address is tried (an ME link backs off). Middle mode: "
             "the ME keys use the server's outgoing address and port from its CONNECT reply "
             "(nat-info maps that address if the server is behind NAT); a server that reports "
             "none (microsocks) makes every ME handshake fail."},
    {.name = "socks5-mask", .type = CFG_BOOL, .offset = OFF(socks5_mask), .def = "off",
     .arg = "on|off", .help = "Also front probes to the real site, and learn its TLS profile "
     "(tls-profile), through the socks5 server (off: both connect directly)."},
    {.name = "links-file", .type = CFG_STRING, .offset = OFF(links_file),
     .str_size = OPT_PATH_MAX, .arg = "PATH|off", .help = "Where the tg:// and t.me links of "
     "every secret are written at start (mode 0600: they carry the secrets). Default: the "
     "state-file's path with .links appended. They are also printed when stdout is a "
     "terminal, and never logged."},
    {.name = "metrics", .type = CFG_CUSTOM, .arg = "ADDR:PORT|off", .def = "off",
     .parse = parse_metrics,
     .help = "Serve Prometheus metrics (/metrics), the same as JSON (/stats) and a status "
             "page (/) with every user's links and QR codes, bytes and connections, on this "
             "address: a small HTTP/1.1 server on a low-priority thread of its own, each page "
             "rendered at most about once a second however many ask. Put it on 127.0.0.1 and "
             "reach it through an SSH tunnel (ssh -L 9100:127.0.0.1:9100 HOST); without "
             "metrics-token the page shows links only when this address is loopback, and then "
             "only to requests whose Host is localhost, 127.0.0.0/8 or [::1] (others get 421: "
             "a web page cannot read them through DNS rebinding). Another address needs "
             "metrics-token or metrics-public = on."},
    {.name = "metrics-token", .type = CFG_STRING, .offset = OFF(metrics_token), .str_size = 256,
     .arg = "STRING", .help = "With this set, every metrics request must carry it "
     "(Authorization: Bearer STRING, or ?token=STRING in the URL; the status page passes it "
     "on), and the page shows the links on any address. Treat it like a secret."},
    {.name = "metrics-public", .type = CFG_BOOL, .offset = OFF(metrics_public), .def = "off",
     .arg = "on|off", .help = "Allow a metrics address that is not loopback without "
     "metrics-token (refused at start otherwise): anyone who reaches it can read every user's "
     "name and traffic and make the proxy render pages. Say on only behind a firewall that "
     "lets just your monitoring in."},
    {.name = "users-file", .type = CFG_STRING, .offset = OFF(users_file),
     .str_size = OPT_PATH_MAX, .arg = "PATH", .help = "A file of more `secret = NAME:SECRET` and "
     "`limit = NAME ...` lines (no other keys), read with the config at start and on SIGHUP "
     "(a missing file counts as empty; its errors are reported as PATH:LINE). The management "
     "API (api) rewrites it atomically (mode 0600, comments not kept) before it answers a "
     "change, so a restart, a SIGHUP and the API always agree; a hand edit plus SIGHUP works "
     "too."},
    {.name = "api", .type = CFG_CUSTOM, .arg = "ADDR:PORT|off", .def = "off",
     .parse = parse_api,
     .help = "Serve the management API (JSON under /api/v1: users listed, created, changed, "
             "disabled, enabled, rotated and deleted, their quota reset; reload; health; see "
             "docs/api.md and docs/openapi.json; `mtproxy user ...` talks to it) on this "
             "address, from the "
             "metrics server's thread. Needs api-token, on any address (loopback too: every "
             "local user and any web page the browser opens can reach loopback), and "
             "users-file for the calls that change users. Keep it on loopback, e.g. "
             "127.0.0.1:9101."},
    {.name = "api-token", .type = CFG_STRING, .offset = OFF(api_token), .str_size = 256,
     .arg = "STRING", .help = "The token every API request must carry (Authorization: Bearer "
     "STRING); not the metrics token. Whoever holds it can add users: treat it like a secret "
     "(at least 16 characters). It does not guard the metrics port: /stats there shows every "
     "secret, to anyone on a loopback address without metrics-token: set that too."},
    {.name = "web-listen", .type = CFG_CUSTOM, .arg = "ADDR:PORT|off", .def = "off",
     .parse = parse_web,
     .help = "WEB proxy mode (tg://webproxy; docs/web.md): serve the WEB carrier and an "
             "ordinary website as plain HTTP/1.1 on this address, for the TLS terminator "
             "(nginx, Caddy, a CDN) in front that answers https://web-host/ on port 443. Only "
             "plain and dd secrets are WEB secrets (ee ones get no capability). Served by "
             "every worker's event loop. A loopback or private address unless "
             "web-public = on."},
    {.name = "web-host", .type = CFG_STRING, .offset = OFF(web_host), .str_size = 256,
     .arg = "HOST", .help = "The public DNS name the WEB links and bridge capabilities are "
     "made for (what the app puts in https://HOST/?bridge=...); requests with another Host "
     "get the ordinary site. Required with web-listen."},
    {.name = "web-root", .type = CFG_STRING, .offset = OFF(web_root), .str_size = OPT_PATH_MAX,
     .arg = "DIR", .help = "The ordinary website's files (index.html for a directory, 404.html "
     "for a missing page), served to everyone who is not a WEB client, and to every request "
     "the carrier refuses. Empty: a small built-in page."},
    {.name = "web-upstream", .type = CFG_CUSTOM, .arg = "http://ADDR:PORT|off", .def = "off",
     .parse = parse_web_upstream,
     .help = "The ordinary website from an HTTP/1.1 server instead of web-root: every request "
     "that is not the WEB carrier's (and every one it refuses) goes to it as it came (with "
     "Connection: close), and its answer goes back as it is, up to 4 MiB (else 502; no "
     "answer within 10 s: 504). An address, not a name."},
    {.name = "web-carrier", .type = CFG_ENUM, .offset = OFF(web_carrier), .def = "https",
     .names = web_carriers, .arg = "https|https-lanes|websocket|websocket-lanes",
     .help = "The carrier WEB sessions get (X-Carrier-Mode): https = HTTP long poll (POST "
     "/api/v1/up and /api/v1/down; the one iOS speaks); https-lanes = the same with a "
     "sequence and a poll per stream (X-Lane-ID), so a slow stream holds up no other; "
     "websocket = one WebSocket (GET /api/v1/ws) per session; websocket-lanes = one "
     "WebSocket per stream."},
    {.name = "web-trusted-proxies", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .arg = "CIDR",
     .parse = parse_web_trusted, .reset = reset_web_trusted,
     .help = "The TLS terminators in front of web-listen: a request whose TCP peer is in one "
     "of these has its client address taken from the last hop of X-Forwarded-For (for "
     "allow/deny, per-IP limits and logs); from any other peer the header is ignored. "
     "Repeat for several."},
    {.name = "web-public", .type = CFG_BOOL, .offset = OFF(web_public), .def = "off",
     .arg = "on|off", .help = "Allow a web-listen address that is neither loopback nor "
     "private (refused at start otherwise): browsers would then reach the carrier in plain "
     "HTTP, without the TLS terminator."},
    {.name = "web-instance", .type = CFG_INT, .offset = OFF(web_instance), .def = "0",
     .min = 0, .max = 63, .arg = "N", .help = "WEB: this instance's number in a fleet behind "
     "one balancer. Every bootstrap and session token it gives out begins with the N-th "
     "character of base64url (A-Z a-z 0-9 - _: 0 is A, 1 is B), so the balancer sends each "
     "request of a session (and its WebSockets) to the instance that holds it, by the start "
     "of the Authorization bearer or of Sec-WebSocket-Protocol's token (README: a fleet)."},
    {.name = "web-sessions", .type = CFG_INT, .offset = OFF(web_sessions), .def = "128",
     .min = 1, .max = 1000000, .arg = "N", .help = "WEB: live sessions at most (more are "
     "answered 503; counted in mtproxy_web_refusals_total{reason=\"sessions\"})."},
    {.name = "web-streams", .type = CFG_INT, .offset = OFF(web_streams), .def = "4096",
     .min = 1, .max = 1000000, .arg = "N", .help = "WEB: live streams (client connections) "
     "at most, all sessions together; an OPEN beyond it is closed at once."},
    {.name = "web-streams-per-session", .type = CFG_INT, .offset = OFF(web_streams_per_session),
     .def = "128", .min = 1, .max = 1000000, .arg = "N", .help = "WEB: live streams of one "
     "session at most."},
    {.name = "web-pending-session", .type = CFG_SIZE, .offset = OFF(web_pending_session),
     .def = "32m", .min = 1 << 16, .arg = "BYTES", .help = "WEB: bytes one session may have "
     "queued, both ways (each queued piece counts 256 bytes more); an /up beyond it is "
     "answered 503 and the backend is not read."},
    {.name = "web-pending-process", .type = CFG_SIZE, .offset = OFF(web_pending_process),
     .def = "512m", .min = 1 << 16, .arg = "BYTES", .help = "WEB: bytes all sessions together "
     "may have queued."},
    {.name = "web-bootstraps", .type = CFG_INT, .offset = OFF(web_bootstraps), .def = "512",
     .min = 1, .max = 1000000, .arg = "N", .help = "WEB: bootstrap tokens (bridge pages "
     "served, not yet spent or expired) at most."},
    {.name = "web-session-rate", .type = CFG_INT, .offset = OFF(web_session_rate), .def = "600",
     .min = 1, .max = 10000000, .arg = "N", .help = "WEB: new sessions per minute (a burst of "
     "up to 128 at once, or N if less)."},
    {.name = "web-stream-rate", .type = CFG_INT, .offset = OFF(web_stream_rate), .def = "6000",
     .min = 1, .max = 10000000, .arg = "N", .help = "WEB: new streams per minute (a burst of "
     "up to 512, or N if less)."},
    {.name = "web-bootstrap-rate", .type = CFG_INT, .offset = OFF(web_bootstrap_rate),
     .def = "1200", .min = 1, .max = 10000000, .arg = "N", .help = "WEB: bridge pages (new "
     "bootstrap tokens) per minute (a burst of up to 256, or N if less); beyond it a "
     "capability gets the ordinary site."},
    {.name = "web-body-max", .type = CFG_SIZE, .offset = OFF(web_body_max), .def = "2m",
     .min = 1 << 16, .max = 16 << 20, .arg = "BYTES", .help = "WEB: the largest /up body (a "
     "batch of frames); a larger one is refused."},
    {.name = "web-bootstrap-ttl", .type = CFG_DURATION, .offset = OFF(web_bootstrap_ttl_ms),
     .def = "2m", .min = 1000, .arg = "DURATION", .help = "WEB: how long a bootstrap token "
     "(in the bridge page) may be spent."},
    {.name = "web-grace", .type = CFG_DURATION, .offset = OFF(web_grace_ms), .def = "2m",
     .min = 1000, .arg = "DURATION", .help = "WEB: a session with no request for this long is "
     "ended and its streams' connections closed (the client's reconnect grace)."},
    {.name = "web-poll", .type = CFG_DURATION, .offset = OFF(web_poll_ms), .def = "25s",
     .min = 1000, .max = 120000, .arg = "DURATION", .help = "WEB: how long an empty /down is "
     "held before it is answered 204 (the TLS terminator's read timeout must be longer)."},
    {.name = "workers", .type = CFG_INT, .offset = OFF(workers), .def = "0", .min = 0,
     .max = 256, .arg = "N", .help = "Worker threads, each with its own event loop and "
     "listening sockets (SO_REUSEPORT). 0 = one per CPU core."},
    {.name = "public-host", .type = CFG_STRING, .offset = OFF(public_host), .str_size = 256,
     .arg = "HOST", .help = "Host name or address put in the printed tg:// and t.me links. "
     "Default: the listen address, or this machine's host name if that is a wildcard."},
    {.name = "public-port", .type = CFG_INT, .offset = OFF(public_port), .def = "0", .min = 0,
     .max = 65535, .arg = "N", .help = "Port put in the printed links. 0 = the first listen "
     "port."},
    {.name = "block-size", .type = CFG_SIZE, .offset = OFF(block_size), .def = "16k",
     .min = 1024, .max = 1 << 20, .arg = "BYTES", .help = "Size of one relay buffer block. "
     "A connection takes blocks only while data is in flight; an idle one holds none."},
    {.name = "max-buffer", .type = CFG_SIZE, .offset = OFF(max_buffer), .def = "64k",
     .min = 1024, .max = 64 << 20, .arg = "BYTES", .help = "Most bytes queued per direction "
     "of one connection; past it the proxy stops reading that side until the other drains."},
    {.name = "buffers", .type = CFG_ENUM, .offset = OFF(buffers), .def = "pooled",
     .names = buffer_modes, .arg = "pooled|per-connection", .help = "pooled: a connection "
     "takes blocks from the worker's arena only while bytes are in flight (an idle one holds "
     "none). per-connection: each relayed connection owns one block per direction for its "
     "whole life (the classic design, kept to measure against; see BENCHMARKS.md)."},
    {.name = "write-batch", .type = CFG_DURATION, .offset = OFF(write_batch_ms), .def = "0",
     .max = 1000, .arg = "DURATION", .help = "Hold writes smaller than a block for up to this "
     "long to coalesce them into fewer, larger writes (0 = write at once). Adds up to this much "
     "latency; see BENCHMARKS.md for what it buys."},
    {.name = "write-batch-mode", .type = CFG_ENUM, .offset = OFF(write_batch_mode),
     .def = "buffer", .names = batch_modes, .arg = "buffer|cork|msg-more", .help = "How "
     "write-batch holds writes. buffer: in the proxy, one writev(2) when the window closes. "
     "cork: written to the kernel at once on a TCP_CORK'ed socket, uncorked when the window "
     "closes. msg-more: written at once with MSG_MORE, pushed when the window closes. cork "
     "and msg-more also hold spliced bytes."},
    {.name = "buffer-memory", .type = CFG_SIZE, .offset = OFF(buffer_memory), .def = "256M",
     .min = 0, .arg = "BYTES", .help = "Cap on relay buffer memory for the whole process "
     "(0 = none). When reached, connections wait for a free block and accepting pauses."},
    {.name = "max-connections", .type = CFG_INT, .offset = OFF(max_connections),
     .def = "8192", .min = 1, .max = 1 << 24, .arg = "N", .help = "Most client connections "
     "at once, split evenly between workers. When reached, new clients wait in the listen "
     "backlog. Each costs two file descriptors; the limit is lowered to fit RLIMIT_NOFILE."},
    {.name = "backlog", .type = CFG_INT, .offset = OFF(backlog), .def = "1024", .min = 1,
     .max = 65535, .arg = "N", .help = "Listen backlog of each listening socket."},
    {.name = "handshake-timeout", .type = CFG_DURATION, .offset = OFF(handshake_timeout_ms),
     .def = "10s", .min = 100, .arg = "DURATION", .help = "Time a client has to send its "
     "64-byte header. Clients that fail it, or send a bad header, are held silently for a "
     "random time around this value and closed."},
    {.name = "probe-wait", .type = CFG_DURATION, .offset = OFF(probe_wait_ms), .def = "3s",
     .min = 100, .arg = "DURATION", .help = "A connection that has not sent a whole header or "
     "FakeTLS hello this long after connecting is treated as a probe (fronted, or held "
     "without a fronting target); one whose first bytes no client sends (an HTTP request, "
     "say) is at once. Real clients send their header in one go. At most handshake-timeout."},
    {.name = "mask-buffer-memory", .type = CFG_SIZE, .offset = OFF(mask_buffer_memory),
     .def = "4M", .min = 64 << 10, .arg = "BYTES", .help = "Relay buffer memory for fronted "
     "connections (anyone without a secret: browsers, scanners, probes), for the whole "
     "process, on top of buffer-memory: they never take a relay's blocks, and past this they "
     "wait (a flood of fronted connections that never read cannot lock users out). The "
     "FakeTLS hello buffers of connections in handshake share the same amount."},
    {.name = "mask-lifetime", .type = CFG_DURATION, .offset = OFF(mask_lifetime_ms),
     .def = "2m", .min = 1000, .arg = "DURATION", .help = "A fronted connection is closed this "
     "long after it was accepted, whatever it does."},
    {.name = "mask-idle-timeout", .type = CFG_DURATION, .offset = OFF(mask_idle_ms),
     .def = "30s", .min = 1000, .arg = "DURATION", .help = "A fronted connection with no bytes "
     "either way for this long is closed (idle-timeout is for clients)."},
    {.name = "probe-limit-per-ip", .type = CFG_INT, .offset = OFF(probe_limit_per_ip),
     .def = "256", .min = 0, .max = 1 << 24, .arg = "N", .help = "Most connections at once "
     "from one address that have not proven a secret (handshaking, held or fronted); more "
     "are closed at once and counted. Clients that proved a secret do not count, so many "
     "users behind one NAT are not limited. 0 = no limit."},
    {.name = "accept-rate", .type = CFG_CUSTOM, .arg = "N/s", .def = "0/s",
     .parse = parse_accept_rate, .help = "New connections accepted per second from one source "
     "address (bursts of up to N); more are closed at once and counted (acc_rate). 0 = no "
     "limit."},
    {.name = "max-handshakes", .type = CFG_INT, .offset = OFF(max_handshakes), .def = "0",
     .min = 0, .max = 1 << 24, .arg = "N", .help = "Most connections, whole process, that "
     "have not finished their handshake; past it the oldest is closed (counted as "
     "handshake_cap). 0 = no limit."},
    {.name = "connect-timeout", .type = CFG_DURATION, .offset = OFF(connect_timeout_ms),
     .def = "5s", .min = 100, .arg = "DURATION", .help = "Time to connect to one DC address "
     "before trying the next."},
    {.name = "idle-timeout", .type = CFG_DURATION, .offset = OFF(idle_timeout_ms),
     .def = "5m", .min = 1000, .arg = "DURATION", .help = "A relayed connection with no "
     "bytes either way for this long is closed."},
    {.name = "tcp-keepalive", .type = CFG_DURATION, .offset = OFF(tcp_keepalive_ms),
     .def = "60s", .min = 0, .arg = "DURATION", .help = "TCP keepalive idle time on both "
     "sides (0 = off)."},
    {.name = "sndbuf", .type = CFG_SIZE, .offset = OFF(sndbuf), .def = "0", .max = 64 << 20,
     .arg = "BYTES", .help = "SO_SNDBUF of every socket (0 = kernel default, autotuned)."},
    {.name = "rcvbuf", .type = CFG_SIZE, .offset = OFF(rcvbuf), .def = "0", .max = 64 << 20,
     .arg = "BYTES", .help = "SO_RCVBUF of every socket (0 = kernel default, autotuned)."},
    {.name = "client-mss", .type = CFG_INT, .offset = OFF(client_mss), .def = "0", .min = 0,
     .max = 65535, .arg = "BYTES", .help = "TCP_MAXSEG of the client listening sockets: the "
     "segment size we announce and send to clients (small segments defeat DPI that does not "
     "reassemble). 0 = the kernel's; at least 88 otherwise. Linux fixes it at the SYN: it "
     "cannot be raised after the handshake."},
    {.name = "rst-on-close", .type = CFG_ENUM, .offset = OFF(rst_on_close), .def = "off",
     .names = rst_modes, .arg = "off|probes|always", .help = "Close with a TCP reset "
     "(SO_LINGER 0) instead of a FIN: probes = connections that never proved a secret (fronted, "
     "held, refused, unknown-sni drop/reject); always = every client connection."},
    {.name = "tcp-nodelay", .type = CFG_BOOL, .offset = OFF(tcp_nodelay), .def = "on",
     .arg = "on|off", .help = "TCP_NODELAY on both sides."},
    {.name = "busy-poll", .type = CFG_INT, .offset = OFF(busy_poll_us), .def = "20", .min = 0,
     .max = 1000, .arg = "MICROSECONDS", .help = "After handling events, a worker polls for "
     "more without sleeping for up to this long (0 = off): a reply arriving within it is relayed "
     "without the wake-up of an idle CPU, for CPU spent spinning after each burst. Ignored on a "
     "single-CPU machine. See BENCHMARKS.md (latency) for what it buys and costs."},
    {.name = "log-level", .type = CFG_ENUM, .offset = OFF(log_level), .def = "info",
     .names = log_levels, .arg = "error|warn|info|debug", .help = "Least severe messages "
     "logged."},
    {.name = "log", .type = CFG_STRING, .offset = OFF(log), .str_size = OPT_PATH_MAX,
     .def = "stderr", .arg = "stderr|syslog|PATH", .help = "Where logs go. A file is "
     "reopened on SIGHUP (for log rotation)."},
    {.name = "log-connections", .type = CFG_BOOL, .offset = OFF(log_connections),
     .def = "on", .arg = "on|off", .help = "One info line per closed client connection: user, "
     "client address, DC, kind, bytes each way, duration, close reason (never a secret)."},
    {.name = "user", .type = CFG_STRING, .offset = OFF(user), .str_size = 64, .arg = "USER",
     .help = "Drop privileges to this user after binding the listening sockets."},
    {.name = "pidfile", .type = CFG_STRING, .offset = OFF(pidfile), .str_size = OPT_PATH_MAX,
     .arg = "PATH", .help = "Write the process id here; removed on exit."},
    {.name = "daemonize", .type = CFG_BOOL, .offset = OFF(daemonize), .def = "off",
     .arg = "on|off", .help = "Detach from the terminal and run in the background."},
    {.name = "state-file", .type = CFG_STRING, .offset = OFF(state_file),
     .str_size = OPT_PATH_MAX, .def = "mtproxy.state", .arg = "PATH", .help = "Where the "
     "secret generated when none is configured is kept across restarts."},
};
/* clang-format on */
const size_t options_count = sizeof options_table / sizeof options_table[0];
