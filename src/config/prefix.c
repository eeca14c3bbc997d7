/* prefix.c: listen-prefix: per-user addresses (derived, rotated, kept) and the address map. */
#include "config/prefix.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "core/anyip.h"
#include "core/fsutil.h"
#include "core/siphash.h"
#include "crypto/crypto.h"
#include "config/options.h"
#include "config/reload.h"

void prefix_user_addr(const uint8_t key[PREFIX_KEY_LEN], const struct in6_addr *net, int len,
                      const char *name, uint32_t gen, struct in6_addr *out)
{
    static const char tag[] = "mtproxy-addr"; /* with its NUL */
    uint8_t g[4] = {(uint8_t)gen, (uint8_t)(gen >> 8), (uint8_t)(gen >> 16),
                    (uint8_t)(gen >> 24)};
    struct crypto_span spans[] = {
        {tag, sizeof tag}, {name, strlen(name) + 1}, {g, sizeof g}};
    uint8_t d[32];
    crypto_hmac_sha256_spans(key, PREFIX_KEY_LEN, spans, 3, d);
    int zero = 1;
    *out = *net;
    for (int b = len; b < 128; b++) {
        int bit = (d[(b - len) / 8] >> (7 - (b - len) % 8)) & 1;
        zero &= !bit;
        if (bit)
            out->s6_addr[b / 8] |= (uint8_t)(0x80 >> (b % 8));
    }
    if (zero) /* the subnet-router anycast address is no host's */
        out->s6_addr[15] |= 1;
}

/* --- STATE-FILE.addresses ---------------------------------------------------------------- */

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* 64 hex digits -> key. Returns 0, or -1. */
static int key_parse(const char *s, uint8_t key[PREFIX_KEY_LEN])
{
    if (strlen(s) != 2 * PREFIX_KEY_LEN)
        return -1;
    for (int i = 0; i < PREFIX_KEY_LEN; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static struct prefix_user_gen *state_slot(struct prefix_state *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (!strcmp(st->u[i].name, name))
            return &st->u[i];
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 16;
        struct prefix_user_gen *u = realloc(st->u, cap * sizeof *u);
        if (!u)
            return NULL;
        st->u = u;
        st->cap = cap;
    }
    struct prefix_user_gen *e = &st->u[st->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

const struct prefix_user_gen *prefix_state_find(const struct prefix_state *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (!strcmp(st->u[i].name, name))
            return &st->u[i];
    return NULL;
}

int prefix_state_load(const char *path, struct prefix_state *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%.300s: %s", path, strerror(errno));
        return -1;
    }
    char line[512];
    int ln = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        char hex[80], name[SECRET_NAME_MAX];
        unsigned long gen;
        long long at;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "key = %79s", hex) == 1) {
            rc = key_parse(hex, st->key);
            st->has_key = !rc;
        } else if (sscanf(line, "user = %63s %lu %lld", name, &gen, &at) == 3 &&
                   gen <= UINT32_MAX) {
            struct prefix_user_gen *e = state_slot(st, name);
            if (!e)
                rc = -1;
            else {
                e->gen = (uint32_t)gen;
                e->rotated = at;
            }
        } else {
            rc = -1;
        }
        if (rc)
            snprintf(err, errlen, "%.300s:%d: not `key = HEX64` or `user = NAME GEN TIME`", path,
                     ln);
    }
    fclose(f);
    if (rc)
        prefix_state_free(st);
    return rc;
}

int prefix_state_save(const char *path, const struct prefix_state *st, char *err,
                      size_t errlen)
{
    size_t cap = 256 + st->n * (SECRET_NAME_MAX + 48), n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        snprintf(err, errlen, "%.300s: out of memory", path);
        return -1;
    }
    n += (size_t)snprintf(buf, cap, "# mtproxy listen-prefix: the key the users' addresses are "
                                    "derived from, and each user's address generation.\n"
                                    "# Keep it private; deleting it gives every user a new "
                                    "address.\n");
    if (st->has_key) { /* (none with listen-prefix-key: that one stays in the config) */
        n += (size_t)snprintf(buf + n, cap - n, "key = ");
        for (int i = 0; i < PREFIX_KEY_LEN; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%02x", st->key[i]);
        n += (size_t)snprintf(buf + n, cap - n, "\n");
    }
    for (size_t i = 0; i < st->n; i++)
        n += (size_t)snprintf(buf + n, cap - n, "user = %s %u %lld\n", st->u[i].name,
                              st->u[i].gen, (long long)st->u[i].rotated);
    char e[512];
    struct stat sb; /* the file stays its owner's (the user the proxy runs as reads it) */
    uid_t owner = stat(path, &sb) == 0 ? sb.st_uid : (uid_t)-1;
    int rc = fs_write_atomic(path, buf, n, 0600, owner, e, sizeof e);
    free(buf);
    if (rc)
        snprintf(err, errlen, "cannot write %.400s", e);
    return rc;
}

void prefix_state_free(struct prefix_state *st)
{
    free(st->u);
    memset(st, 0, sizeof *st);
}

/* --- the map ----------------------------------------------------------------------------- */

/* SipHash-1-3 of the address under the map's random key: a client picks the address it dials
 * (2^64 of them in a /64) and cannot line up collisions it cannot predict. */
static uint32_t map_hash(const struct prefix_map *m, const struct in6_addr *a)
{
    return (uint32_t)siphash13_16(&m->key, a->s6_addr);
}

int prefix_map_init(struct prefix_map *m, uint32_t n)
{
    memset(m, 0, sizeof *m);
    uint32_t size = 16;
    while (size < 2 * n + 2)
        size *= 2;
    if (!(m->slots = malloc(size * sizeof *m->slots)))
        return -1;
    for (uint32_t i = 0; i < size; i++)
        m->slots[i].uid = PREFIX_NOBODY;
    m->mask = size - 1;
    siphash_key_random(&m->key);
    return 0;
}

int prefix_map_add(struct prefix_map *m, const struct in6_addr *a, int32_t uid, double until)
{
    if (2 * (m->n + 1) > m->mask + 1)
        return -1;
    uint32_t i = map_hash(m, a) & m->mask;
    for (; m->slots[i].uid != PREFIX_NOBODY; i = (i + 1) & m->mask)
        if (!memcmp(&m->slots[i].a, a, sizeof *a))
            return m->slots[i].uid == uid ? 0 : -1;
    m->slots[i].a = *a;
    m->slots[i].uid = uid;
    m->slots[i].until = until;
    m->n++;
    return 0;
}

int32_t prefix_map_lookup(const struct prefix_map *m, const struct in6_addr *a, double now)
{
    for (uint32_t i = map_hash(m, a) & m->mask; m->slots[i].uid != PREFIX_NOBODY;
         i = (i + 1) & m->mask) {
        const struct prefix_slot *s = &m->slots[i];
        if (!memcmp(&s->a, a, sizeof *a))
            return s->until == 0 || now < s->until ? s->uid : PREFIX_NOBODY;
    }
    return PREFIX_NOBODY;
}

void prefix_map_free(struct prefix_map *m)
{
    free(m->slots);
    m->slots = NULL;
}

/* --- the build --------------------------------------------------------------------------- */

static void addresses_path(const struct options *o, char *path, size_t len)
{
    snprintf(path, len, "%s.addresses", o->state_file);
}

/* The key (into key): listen-prefix-key, else the file's; with start, a new one saved in the
 * file (st). */
static int build_key(const struct options *o, struct prefix_state *st, int start,
                     uint8_t key[PREFIX_KEY_LEN], char *err, size_t errlen)
{
    if (o->prefix_key[0]) { /* the file's own key, if any, stays as it is */
        if (key_parse(o->prefix_key, key)) {
            snprintf(err, errlen, "listen-prefix-key: give 64 hex digits");
            return -1;
        }
        return 0;
    }
    memcpy(key, st->key, PREFIX_KEY_LEN);
    if (st->has_key)
        return 0;
    char path[OPT_PATH_MAX + 16];
    addresses_path(o, path, sizeof path);
    if (!start) {
        snprintf(err, errlen, "listen-prefix: no address key yet (%.300s): start the proxy once, "
                              "or set listen-prefix-key", path);
        return -1;
    }
    if (crypto_random(st->key, sizeof st->key)) {
        snprintf(err, errlen, "listen-prefix: no random source");
        return -1;
    }
    st->has_key = 1;
    memcpy(key, st->key, PREFIX_KEY_LEN);
    return prefix_state_save(path, st, err, errlen);
}

int prefix_build(struct gen *g, int start, int64_t now, char *err, size_t errlen)
{
    struct options *o = &g->opt;
    if (!o->prefix_on)
        return 0;
    if (128 - o->prefix_len < 32) {
        snprintf(err, errlen, "listen-prefix /%d: give it at least 32 host bits (a /96 or "
                              "shorter; a VPS's /64 is best)", o->prefix_len);
        return -1;
    }
    char path[OPT_PATH_MAX + 16];
    addresses_path(o, path, sizeof path);
    struct prefix_state st;
    if (prefix_state_load(path, &st, err, errlen))
        return -1;
    uint8_t key[PREFIX_KEY_LEN];
    int rc = build_key(o, &st, start, key, err, errlen);
    size_t n = (size_t)o->nsecrets;
    free(o->user_addr);
    o->user_addr = rc ? NULL : calloc(n + 1, sizeof *o->user_addr);
    if (!rc && !o->user_addr) {
        snprintf(err, errlen, "listen-prefix: out of memory");
        rc = -1;
    }
    struct prefix_map *m = NULL;
    if (!rc && g->uid && (!(m = calloc(1, sizeof *m)) || prefix_map_init(m, 2 * (uint32_t)n))) {
        free(m);
        m = NULL;
        snprintf(err, errlen, "listen-prefix: out of memory");
        rc = -1;
    }
    double grace = o->prefix_grace_ms / 1000.0;
    for (size_t i = 0; !rc && i < n; i++) {
        const struct prefix_user_gen *e = prefix_state_find(&st, o->secrets[i].name);
        uint32_t gen = e ? e->gen : 0;
        prefix_user_addr(key, &o->prefix, o->prefix_len, o->secrets[i].name, gen,
                         &o->user_addr[i]);
        if (!m)
            continue;
        int32_t uid = (int32_t)g->uid[i];
        if (prefix_map_add(m, &o->user_addr[i], uid, 0)) {
            snprintf(err, errlen, "listen-prefix: user %s's address is another user's: "
                                  "`mtproxy user rotate-address %s` gives it another",
                     o->secrets[i].name, o->secrets[i].name);
            rc = -1;
        }
        if (!rc && e && gen > 0 && (double)now < (double)e->rotated + grace) {
            struct in6_addr old; /* the previous address, until its grace ends */
            prefix_user_addr(key, &o->prefix, o->prefix_len, o->secrets[i].name, gen - 1,
                             &old);
            prefix_map_add(m, &old, uid, (double)e->rotated + grace);
        }
    }
    prefix_state_free(&st);
    if (rc && m) {
        prefix_map_free(m);
        free(m);
        m = NULL;
    }
    g->pmap = m;
    return rc;
}

int32_t prefix_accept(const struct gen *g, int fd, double now)
{
    const struct options *o = &g->opt;
    struct sockaddr_in6 a;
    socklen_t len = sizeof a;
    if (!g->pmap || getsockname(fd, (struct sockaddr *)&a, &len) || a.sin6_family != AF_INET6)
        return PREFIX_NOBODY;
    int whole = o->prefix_len / 8, rest = o->prefix_len % 8;
    if (memcmp(a.sin6_addr.s6_addr, o->prefix.s6_addr, (size_t)whole) ||
        (rest && ((a.sin6_addr.s6_addr[whole] ^ o->prefix.s6_addr[whole]) &
                  (uint8_t)(0xff00 >> rest))))
        return PREFIX_NOBODY;
    return prefix_map_lookup(g->pmap, &a.sin6_addr, now);
}

int prefix_link_host(const struct options *o, int i, char *host, size_t hostlen, int port)
{
    if (!o->prefix_on || !o->user_addr)
        return port;
    inet_ntop(AF_INET6, &o->user_addr[i], host, (socklen_t)hostlen);
    return o->prefix_port;
}

/* --- the subcommand and start-up --------------------------------------------------------- */

/* Sends SIGHUP to the pid in o's pidfile. Returns 0, or -1 with why in err. */
static int signal_daemon(const struct options *o, char *err, size_t errlen)
{
    if (!o->pidfile[0]) {
        snprintf(err, errlen, "no pidfile configured");
        return -1;
    }
    FILE *f = fopen(o->pidfile, "re");
    long pid = 0;
    if (!f || fscanf(f, "%ld", &pid) != 1 || pid <= 1) {
        snprintf(err, errlen, "no pid in %.300s", o->pidfile);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    if (kill((pid_t)pid, SIGHUP)) {
        snprintf(err, errlen, "pid %ld (%.300s): %s", pid, o->pidfile, strerror(errno));
        return -1;
    }
    return 0;
}

int prefix_rotate_cmd(const struct options *o, const char *name, FILE *out)
{
    if (!o->prefix_on) {
        fprintf(stderr, "mtproxy: user rotate-address: listen-prefix is not configured\n");
        return 2;
    }
    int i = options_find_secret(o, name);
    if (i < 0) {
        fprintf(stderr, "mtproxy: user rotate-address: no user (secret) named '%s'\n", name);
        return 2;
    }
    char path[OPT_PATH_MAX + 16], err[600];
    addresses_path(o, path, sizeof path);
    struct prefix_state st;
    uint8_t key[PREFIX_KEY_LEN];
    if (prefix_state_load(path, &st, err, sizeof err) || build_key(o, &st, 0, key, err, sizeof err)) {
        fprintf(stderr, "mtproxy: user rotate-address: %s\n", err);
        prefix_state_free(&st);
        return 1;
    }
    struct prefix_user_gen *e = state_slot(&st, name);
    int rc = 1;
    if (!e) {
        fprintf(stderr, "mtproxy: user rotate-address: out of memory\n");
    } else {
        e->gen++;
        e->rotated = (int64_t)time(NULL);
        struct in6_addr a;
        prefix_user_addr(key, &o->prefix, o->prefix_len, name, e->gen, &a);
        char text[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, &a, text, sizeof text);
        if (prefix_state_save(path, &st, err, sizeof err)) {
            fprintf(stderr, "mtproxy: user rotate-address: %s\n", err);
        } else {
            rc = 0;
            fprintf(out, "user %s: new address %s (the old one serves for %u s more)\n", name,
                    text, o->prefix_grace_ms / 1000);
            if (signal_daemon(o, err, sizeof err))
                fprintf(out, "could not tell the running proxy (%s): send it SIGHUP to take "
                             "the new address\n", err);
            else
                fprintf(out, "the running proxy was sent SIGHUP: it serves the new address "
                             "now\n");
        }
    }
    prefix_state_free(&st);
    return rc;
}

void prefix_give_to(const struct options *o, uid_t uid)
{
    char path[OPT_PATH_MAX + 16];
    addresses_path(o, path, sizeof path);
    if (o->prefix_on && !o->prefix_key[0] && chown(path, uid, (gid_t)-1))
        return; /* reload then says it cannot read it */
}

int prefix_route_setup(const struct options *o, char *msg, size_t msglen)
{
    msg[0] = 0;
    if (!o->prefix_on || anyip_ready(&o->prefix, o->prefix_len))
        return 0;
    char cmd[128], err[256] = "added, but the prefix is still not local";
    anyip_route_command(&o->prefix, o->prefix_len, cmd, sizeof cmd);
    if (anyip_route_add(&o->prefix, o->prefix_len, err, sizeof err) == 0 &&
        anyip_ready(&o->prefix, o->prefix_len)) {
        snprintf(msg, msglen, "listen-prefix: added the local route (%s)", cmd);
        return 0;
    }
    snprintf(msg, msglen, "listen-prefix: the prefix is not routed to this machine and the "
                          "route could not be added (%s): run `%s` (as root; and at boot)",
             err, cmd);
    return -1;
}
