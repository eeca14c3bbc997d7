/* options.c: the configuration once parsed: set up and freed, the cross-key checks, the state
 * file and users-file. */
#include "config/options.h"

#include "core/fsutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int options_resolve_socks5(struct options *o, char *err, size_t errlen)
{
    if (!o->socks5_on)
        return 0;
    char hp[300];
    snprintf(hp, sizeof hp, strchr(o->socks5.host, ':') ? "[%s]:%d" : "%s:%d", o->socks5.host,
             o->socks5.port);
    char e[256];
    if (sock_addr_parse(hp, 1, 0, &o->socks5_addr, e, sizeof e)) {
        snprintf(err, errlen, "socks5: %s", e);
        return -1;
    }
    return 0;
}

void options_free(struct options *o)
{
    free(o->limits);
    o->limits = NULL;
    o->nlimits = o->limits_cap = 0;
    free(o->secrets);
    free(o->secret_slots);
    free(o->user_addr);
    o->user_addr = NULL;
    o->secrets = NULL;
    o->secret_slots = NULL;
    o->nsecrets = o->secrets_cap = 0;
    o->nsecret_slots = 0;
}

int options_init(struct config_parser *p, struct options *o)
{
    options_free(o);
    memset(o, 0, sizeof *o);
    return config_init(p, options_table, options_count, o);
}

/* Keys shown in mtproxy's own documentation, now or in an earlier release: anyone who read
 * them could use a proxy configured with one, so they are refused (in any kind: plain, dd, ee).
 * tests/check_doc_secrets.sh fails if a document shows a key that this list lacks. */
static const char *const documented_keys[] = {
    "0123456789abcdef0123456789abcdef", /* README's command-line example up to 0.1.0 */
    "000102030405060708090a0b0c0d0e0f", /* docs/web.md: the WEB capability vectors' key */
};

int options_documented_secret(const struct secret *s)
{
    char hex[2 * SECRET_KEY_LEN + 1];
    for (int i = 0; i < SECRET_KEY_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", s->key[i]);
    for (size_t i = 0; i < sizeof documented_keys / sizeof documented_keys[0]; i++)
        if (strcmp(hex, documented_keys[i]) == 0)
            return 1;
    return 0;
}

/* 1 if a is a loopback address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104): not a wildcard. */
int options_validate(struct config_parser *p, struct options *o)
{
    int before = p->errors.count;
    struct config_errors *e = &p->errors;
#define ERR(...)                                                                               \
    do {                                                                                       \
        if (e->count < CONFIG_MAX_ERRORS)                                                      \
            snprintf(e->msg[e->count], CONFIG_ERR_LEN, __VA_ARGS__);                           \
        e->count++;                                                                            \
    } while (0)
    if (o->nlisten == 0)
        ERR("no listen address");
    for (int i = 0; i < o->nlisten && o->prefix_on; i++)
        if (o->listen[i].u.sa.sa_family == AF_INET6 && sock_addr_is_any(&o->listen[i]) &&
            sock_addr_port(&o->listen[i]) == o->prefix_port)
            ERR("listen [::]:%d and listen-prefix share a port: listen-prefix already takes "
                "every IPv6 address on it (give listen another port)", o->prefix_port);
    if (o->max_buffer < o->block_size)
        ERR("max-buffer (%zu) must be at least block-size (%zu)", o->max_buffer,
            o->block_size);
    if (o->daemonize && strcmp(o->log, "stderr") == 0)
        ERR("daemonize = on closes stderr: set log = syslog or log = PATH, or it loses every "
            "log line");
    for (int i = 0; o->proxy_protocol && !o->npp_from && i < o->nlisten; i++) {
        if (sock_addr_is_loopback(&o->listen[i]))
            continue;
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(&o->listen[i], a, sizeof a);
        ERR("proxy-protocol = on without proxy-protocol-from on listen %s: any host could "
            "claim any client address, past allow/deny and per-IP limits; name the balancers "
            "(proxy-protocol-from = CIDR) or write proxy-protocol-from = any", a);
        break;
    }
    if (o->metrics_on && !o->metrics_token[0] && !o->metrics_public &&
        !sock_addr_is_loopback(&o->metrics_addr))
        ERR("metrics is not a loopback address and metrics-token is not set: anyone who can "
            "reach it could read every user's name and traffic and load the process; set "
            "metrics-token, or metrics-public = on if that is meant");
    if (o->api_on && strlen(o->api_token) < 16)
        ERR("api is set but api-token is %s: the API can add users, so every request must "
            "carry a token of at least 16 characters, on any address",
            o->api_token[0] ? "shorter than 16 characters" : "not set");
    options_validate_web(p, o);
    if (o->only_ipv4 && o->prefer_ipv6)
        ERR("only-ipv4 and prefer-ipv6 contradict each other");
    if (o->buffer_memory && o->buffer_memory < 2 * o->block_size)
        ERR("buffer-memory (%zu) must hold at least two blocks of block-size", o->buffer_memory);
    if (o->tls_appdata_min > o->tls_appdata_max)
        ERR("tls-appdata-min (%d) is above tls-appdata-max (%d)", o->tls_appdata_min,
            o->tls_appdata_max);
    if (o->client_mss > 0 && o->client_mss < 88)
        ERR("client-mss %d is below 88, the smallest segment size Linux takes (0 = the "
            "kernel's)", o->client_mss);
    for (int i = 0; i < o->nsecrets; i++) {
        if (options_documented_secret(&o->secrets[i]))
            ERR("secret %s is the example from mtproxy's documentation: anyone who read it "
                "could use this proxy; make your own with `mtproxy generate-secret`",
                o->secrets[i].name);
        enum secret_kind k = o->secrets[i].kind;
        if ((k == SECRET_EE && !o->allow_ee) || (k == SECRET_DD && !o->allow_dd) ||
            (k == SECRET_PLAIN && !o->allow_plain && !o->allow_dd))
            ERR("secret %s is of a kind that allow-plain/allow-dd/allow-ee forbid",
                o->secrets[i].name);
    }
    if (o->middle && (!o->proxy_secret_file[0] || !o->proxy_config_file[0]))
        ERR("ad-tag (middle-proxy mode) needs proxy-secret-file and proxy-config-file "
            "(packaging/mtproxy-update-config fetches both)");
    for (int i = 0; i < o->nlimits; i++)
        if (options_find_secret(o, o->limits[i].name) < 0)
            ERR("limit %s: no secret has that name", o->limits[i].name);
    for (int i = 0; i < o->nlimits; i++) /* quota=SIZE/month without its own quota-day */
        if (o->limits[i].quota_period == QP_MONTH && !o->limits[i].quota_day)
            o->limits[i].quota_day = (uint8_t)o->quota_reset_day;
    if (!o->dc_builtin && !o->middle) { /* middle mode dials MEs, never DCs */
        int found = 0;
        for (int i = 0; i < o->ndcs; i++)
            found |= o->dcs[i].id == o->default_dc;
        if (!found)
            ERR("dc-builtin is off and default-dc %d has no dc line", o->default_dc);
    }
#undef ERR
    return p->errors.count - before;
}

static int skip_value(void *conf, const char *v, char *err, size_t errlen)
{
    return 0;
}

static void skip_reset(void *conf)
{
}

/* The state file holds the generated secret and what users.c keeps (quota-used lines). */
static const struct config_option state_table[] = {
    {.name = "secret", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = options_parse_secret,
     .reset = options_reset_secret, .help = "generated secret"},
    {.name = "quota-used", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = skip_value,
     .reset = skip_reset, .help = "read by users_state_load"},
    {.name = "quota-reset", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = skip_value,
     .reset = skip_reset, .help = "read by users_state_load"},
};

int options_load_state(struct options *o, const char *path, char *err, size_t errlen)
{
    if (access(path, F_OK) != 0)
        return 0;
    struct config_parser p;
    config_init(&p, state_table, sizeof state_table / sizeof state_table[0], o);
    if (config_load_file(&p, path) || o->nsecrets == 0) {
        snprintf(err, errlen, "%s", p.errors.count ? p.errors.msg[0] : "no secret in state file");
        if (!p.errors.count)
            snprintf(err, errlen, "%s: no secret in state file", path);
        return -1;
    }
    return 1;
}

int options_save_state_text(const struct secret *s, const char *extra, const char *path,
                            char *err, size_t errlen)
{
    char hex[2 * (SECRET_KEY_LEN + 1 + SECRET_DOMAIN_MAX) + 1] = "";
    if (s)
        secret_to_hex(s, hex, sizeof hex);
    size_t xl = extra ? strlen(extra) : 0, cap = sizeof hex + 512 + xl;
    char *buf = malloc(cap);
    if (!buf) {
        snprintf(err, errlen, "cannot write state file: out of memory");
        return -1;
    }
    int n = snprintf(buf, cap, "# mtproxy state: %s\n# Keep it private.%s\n",
                     s ? "the secret generated at first start (no secret was configured)"
                       : "the quota each user has used",
                     s ? " Delete this file to get a new one." : "");
    if (s)
        n += snprintf(buf + n, cap - (size_t)n, "secret = %s:%s\n", s->name, hex);
    if (xl)
        memcpy(buf + n, extra, xl);
    char e[512];
    int rc = fs_write_atomic(path, buf, (size_t)n + xl, 0600, (uid_t)-1, e, sizeof e);
    free(buf);
    if (rc) {
        snprintf(err, errlen, "cannot write state file: %s", e);
        return -1;
    }
    return 0;
}

/* users-file's keys: the options table's own secret and limit entries. */
static const struct config_option *users_key(const char *name)
{
    for (size_t i = 0; i < options_count; i++)
        if (!strcmp(options_table[i].name, name))
            return &options_table[i];
    return NULL;
}

int options_load_users(struct options *o, const char *name, const char *data, size_t len,
                       struct config_errors *errs)
{
    struct config_option keys[2] = {*users_key("secret"), *users_key("limit")};
    struct config_parser *p = malloc(sizeof *p);
    if (!p) {
        if (errs->count < CONFIG_MAX_ERRORS)
            snprintf(errs->msg[errs->count], CONFIG_ERR_LEN, "%s: out of memory", name);
        errs->count++;
        return 1;
    }
    config_init(p, keys, 2, o);
    /* Appended to the config's lines: no source replaces them (see CFG_REPEAT). */
    p->origin[0] = p->origin[1] = CFG_FROM_ARGS;
    int n = config_load_buffer(p, name, data, len);
    int shown = p->errors.count < CONFIG_MAX_ERRORS ? p->errors.count : CONFIG_MAX_ERRORS;
    for (int i = 0; i < shown; i++) {
        if (errs->count < CONFIG_MAX_ERRORS)
            memcpy(errs->msg[errs->count], p->errors.msg[i], CONFIG_ERR_LEN);
        errs->count++;
    }
    errs->count += p->errors.count - shown;
    free(p);
    return n;
}

int options_load_users_file(struct options *o, const char *path, struct config_errors *errs)
{
    FILE *f = fopen(path, "re");
    if (!f && errno == ENOENT)
        return 0;
    char *data = f ? malloc(CONFIG_FILE_MAX + 1) : NULL;
    size_t len = data ? fread(data, 1, CONFIG_FILE_MAX + 1, f) : 0;
    const char *why = !f ? strerror(errno) : !data ? "out of memory"
                      : ferror(f) ? "read error" : len > CONFIG_FILE_MAX ? "too large" : NULL;
    if (f)
        fclose(f);
    int n = 1;
    if (why) {
        if (errs->count < CONFIG_MAX_ERRORS)
            snprintf(errs->msg[errs->count], CONFIG_ERR_LEN, "%s: cannot read: %s", path, why);
        errs->count++;
    } else {
        n = options_load_users(o, path, data, len, errs);
    }
    free(data);
    return n;
}

int options_save_state(const struct secret *s, const char *path, char *err, size_t errlen)
{
    return options_save_state_text(s, NULL, path, err, errlen);
}

int options_link_host(const struct options *o, char *host, size_t hostlen)
{
    if (o->public_host[0])
        snprintf(host, hostlen, "%s", o->public_host);
    else if (!sock_addr_is_any(&o->listen[0]))
        sock_addr_host(&o->listen[0], host, hostlen);
    else if (gethostname(host, hostlen) != 0)
        snprintf(host, hostlen, "localhost");
    return o->public_port ? o->public_port : sock_addr_port(&o->listen[0]);
}
