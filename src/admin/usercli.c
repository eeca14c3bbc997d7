/* usercli.c: `mtproxy user add|list|show|set|disable|enable|del|rotate|reset-quota`: through the running daemon's API, or in-process on users-file when it is stopped. */
#include "admin/usercli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "core/sbuf.h"
#include "proto/json.h"
#include "admin/api.h"
#include "config/options.h"
#include "admin/qr.h"
#include "config/reload.h"
#include "config/statefile.h"
#include "users/users.h"

#define CLI_USAGE 2
#define CLI_FAIL 1
#define CLI_TIMEOUT_S 90 /* an API change waits for its reload (API_RELOAD_WAIT) */

void usercli_usage(FILE *f)
{
    fprintf(f,
            "Usage: mtproxy user COMMAND [NAME] [OPTIONS] [--config FILE] [--json]\n\n"
            "  add NAME [--dd | --web | --tls DOMAIN] [--secret HEX32]\n"
            "           [--limit 'conns=2 quota=50G/month']\n"
            "                         a new user; prints its links (--web: a dd secret, and\n"
            "                         its tg://webproxy links: WEB proxy mode must be on)\n"
            "  list                   every user, its state and usage\n"
            "  show NAME [--qr]       one user, its links (--qr: the QR code on the terminal)\n"
            "  set NAME --limit '...' change limits (KEY=VALUE; KEY=none removes one)\n"
            "  disable NAME           refuse its new connections (live ones as removed-user)\n"
            "  enable NAME            serve it again\n"
            "  del NAME               delete it (and NAME.prev)\n"
            "  rotate NAME [--grace DURATION]\n"
            "                         a new secret; the old one stops now or after DURATION\n"
            "  reset-quota NAME       its quota usage starts over\n"
            "  rotate-address NAME    listen-prefix: a new address (see mtproxy --help)\n\n"
            "With the proxy running and `api` + `api-token` in the config, the command goes to\n"
            "its management API (the change is in force when it answers). With the proxy\n"
            "stopped (no process holds STATE-FILE.lock), users-file (and for reset-quota the\n"
            "state file) is changed directly, with the same checks, holding that lock (one\n"
            "change at a time; a proxy started meanwhile waits): the change is used at the\n"
            "next start. A running proxy without `api` is not changed behind its back: the\n"
            "command fails. --json prints the API's JSON answer (the same in both cases).\n"
            "Exit codes: 0 done; 1 refused (no such user, a bad value, ...); 2 usage or\n"
            "configuration error.\n");
}

/* --- the answer, read back (a JSON walker for the human output) ---------------------- */

/* Every scalar of a JSON document as "path" -> value (objects' keys and arrays' indexes
 * joined with '.'; strings unescaped, \u escapes above ASCII as '?'). */
struct jflat {
    char (*path)[96];
    char **val;
    int n, cap;
};

static void jflat_free(struct jflat *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->val[i]);
    free(f->path);
    free(f->val);
    memset(f, 0, sizeof *f);
}

static const char *jget(const struct jflat *f, const char *path)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->path[i], path))
            return f->val[i];
    return NULL;
}

static void ws(const char **p)
{
    while (**p == ' ' || **p == '\n' || **p == '\r' || **p == '\t')
        (*p)++;
}

/* A string at *p ('"' first) into out (malloc'ed). Returns 0, or -1. */
static int jstring(const char **p, char **out)
{
    struct sbuf b = {.max = 8 << 20};
    const char *s = *p + 1;
    while (*s && *s != '"') {
        char c = *s++;
        if (c == '\\') {
            c = *s++;
            if (c == 'n')
                c = '\n';
            else if (c == 't')
                c = '\t';
            else if (c == 'r')
                c = '\r';
            else if (c == 'u') {
                unsigned v = 0;
                for (int k = 0; k < 4 && *s; k++, s++)
                    v = v * 16 + (unsigned)(*s <= '9' ? *s - '0' : (*s | 0x20) - 'a' + 10);
                c = v < 0x80 ? (char)v : '?';
            } else if (!c) {
                break;
            }
        }
        sbuf_add(&b, &c, 1);
    }
    if (*s != '"' || b.failed) {
        sbuf_free(&b);
        return -1;
    }
    sbuf_add(&b, "", 1);
    *p = s + 1;
    *out = b.p ? b.p : strdup("");
    return *out ? 0 : -1;
}

static int jadd(struct jflat *f, const char *path, char *v)
{
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        char(*np)[96] = realloc(f->path, (size_t)cap * sizeof *np);
        if (np)
            f->path = np;
        char **nv = realloc(f->val, (size_t)cap * sizeof *nv);
        if (nv)
            f->val = nv;
        if (!np || !nv) {
            free(v);
            return -1;
        }
        f->cap = cap;
    }
    snprintf(f->path[f->n], sizeof f->path[0], "%s", path);
    f->val[f->n++] = v;
    return 0;
}

static int jvalue(const char **p, const char *path, struct jflat *f, int depth)
{
    char sub[96];
    ws(p);
    if (depth > 16)
        return -1;
    if (**p == '{' || **p == '[') {
        int obj = **p == '{', i = 0;
        (*p)++;
        ws(p);
        if (**p == (obj ? '}' : ']')) {
            (*p)++;
            return 0;
        }
        for (;; i++) {
            ws(p);
            if (obj) {
                char *key;
                if (**p != '"' || jstring(p, &key))
                    return -1;
                snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
                free(key);
                ws(p);
                if (*(*p)++ != ':')
                    return -1;
            } else {
                snprintf(sub, sizeof sub, "%s%s%d", path, *path ? "." : "", i);
            }
            if (jvalue(p, sub, f, depth + 1))
                return -1;
            ws(p);
            if (**p == ',') {
                (*p)++;
                continue;
            }
            if (*(*p)++ != (obj ? '}' : ']'))
                return -1;
            return 0;
        }
    }
    char *v;
    if (**p == '"') {
        if (jstring(p, &v))
            return -1;
    } else {
        size_t n = strcspn(*p, ",}] \n\r\t");
        if (!n || !(v = strndup(*p, n)))
            return -1;
        *p += n;
    }
    return jadd(f, path, v);
}

/* --- talking to the API --------------------------------------------------------------- */

struct cli {
    const char *cmd, *name;
    int json, qr, dd, web;
    const char *tls, *secret, *limit, *grace, *config;
    char **args;
    int nargs;
    struct reload rl;
    struct users users;
    int have_users;
    struct gen *g;
    int offline;
    int lock_fd; /* STATE-FILE.lock, held for the whole offline change */
    int api_fd;  /* the running proxy's API, reached while waiting for the lock */
};

static struct gen *cli_current(void *arg)
{
    return ((struct cli *)arg)->g;
}

/* The offline "reload": the generation rebuilt from the config and the changed users-file. */
static int cli_rebuild(void *arg, char *err, size_t errlen)
{
    struct cli *c = arg;
    struct config_errors *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    struct gen *g = reload_build(&c->rl, NULL, e);
    if (!g) {
        snprintf(err, errlen, "%s", e->count ? e->msg[0] : "configuration rejected");
        free(e);
        return -1;
    }
    free(e);
    reload_commit(&c->rl, g);
    gen_unref(c->g);
    c->g = g;
    return 0;
}

/* Connects to the API of the config (a wildcard address: its loopback). Returns the fd, or
 * -1 with errno. */
static int api_connect(const struct options *o)
{
    struct sock_addr a = o->api_addr;
    if (sock_addr_is_any(&a)) {
        if (a.u.sa.sa_family == AF_INET)
            a.u.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else
            a.u.in6.sin6_addr = in6addr_loopback;
    }
    int fd = socket(a.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {CLI_TIMEOUT_S, 0}, ctv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &ctv, sizeof ctv);
    if (connect(fd, &a.u.sa, a.len)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* One request over fd: the status, the body in out. Returns the status, or -1 with err. */
static int http_call(int fd, const struct options *o, const char *method, const char *path,
                     const char *body, struct sbuf *out, char *err, size_t errlen)
{
    struct sbuf rq = {.max = 1 << 20};
    size_t blen = body ? strlen(body) : 0;
    sbuf_printf(&rq, "%s %s HTTP/1.1\r\nHost: mtproxy\r\nAuthorization: Bearer %s\r\n"
                     "Connection: close\r\n", method, path, o->api_token);
    if (body)
        sbuf_printf(&rq, "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    sbuf_printf(&rq, "\r\n");
    if (body)
        sbuf_add(&rq, body, blen);
    size_t off = 0;
    while (!rq.failed && off < rq.len) {
        ssize_t n = send(fd, rq.p + off, rq.len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            snprintf(err, errlen, "cannot send to the API: %s", strerror(errno));
            sbuf_free(&rq);
            return -1;
        }
        off += (size_t)n;
    }
    sbuf_free(&rq);
    struct sbuf in = {.max = 64 << 20};
    char chunk[16384];
    ssize_t n;
    while ((n = recv(fd, chunk, sizeof chunk, 0)) > 0)
        sbuf_add(&in, chunk, (size_t)n);
    if (n < 0) {
        snprintf(err, errlen, "no answer from the API: %s", strerror(errno));
        sbuf_free(&in);
        return -1;
    }
    sbuf_add(&in, "", 1);
    int status = 0;
    const char *head = in.p ? strstr(in.p, "\r\n\r\n") : NULL;
    if (!head || sscanf(in.p, "HTTP/1.%*d %d", &status) != 1) {
        snprintf(err, errlen, "the API's answer is not HTTP");
        sbuf_free(&in);
        return -1;
    }
    sbuf_printf(out, "%s", head + 4);
    sbuf_free(&in);
    return status;
}

/* statefile_lock_wait's poll: a proxy that started meanwhile takes the call (its API answers). */
static int cli_poll_api(void *arg)
{
    struct cli *c = arg;
    if (c->g->opt.api_on && c->api_fd < 0)
        c->api_fd = api_connect(&c->g->opt);
    return c->api_fd >= 0;
}

/* --- the request ---------------------------------------------------------------------- */

/* --limit 'k=v k=v' as the API's "limits" object (k=none: null). Returns 0, or -1 (err). */
static int limits_json(const char *text, struct sbuf *b, char *err, size_t errlen)
{
    sbuf_printf(b, "\"limits\":{");
    int n = 0;
    for (const char *p = text; *p;) {
        p += strspn(p, " \t");
        size_t w = strcspn(p, " \t");
        if (!w)
            break;
        const char *eq = memchr(p, '=', w);
        if (!eq || eq == p || eq + 1 == p + w) {
            snprintf(err, errlen, "--limit: '%.*s' is not KEY=VALUE (e.g. conns=2 quota=50G/month"
                     " expires=2027-01-01 rate=1M/s; KEY=none removes one)", (int)w, p);
            return -1;
        }
        char key[64], val[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
        snprintf(val, sizeof val, "%.*s", (int)(p + w - eq - 1), eq + 1);
        sbuf_printf(b, "%s", n++ ? "," : "");
        api_json_str(b, key);
        sbuf_printf(b, ":");
        if (!strcmp(val, "none"))
            sbuf_printf(b, "null");
        else
            api_json_str(b, val);
        p += w;
    }
    sbuf_printf(b, "}");
    return 0;
}

/* The API call of the command: method, path, body ("" none). Returns 0, or -1 (err). */
static int build_call(const struct cli *c, const char **method, char *path, size_t plen,
                      struct sbuf *body, char *err, size_t errlen)
{
    const char *cmd = c->cmd;
    *method = "POST";
    if (!strcmp(cmd, "list")) {
        *method = "GET";
        snprintf(path, plen, "/api/v1/users");
        return 0;
    }
    if (!strcmp(cmd, "add")) {
        snprintf(path, plen, "/api/v1/users");
        sbuf_printf(body, "{\"name\":");
        api_json_str(body, c->name);
        sbuf_printf(body, ",\"kind\":\"%s\"", c->tls ? "ee" : c->dd ? "dd" : "plain");
        if (c->tls) {
            sbuf_printf(body, ",\"domain\":");
            api_json_str(body, c->tls);
        }
        if (c->secret) {
            sbuf_printf(body, ",\"secret\":");
            api_json_str(body, c->secret);
        }
        if (c->limit) {
            sbuf_printf(body, ",");
            if (limits_json(c->limit, body, err, errlen))
                return -1;
        }
        sbuf_printf(body, "}");
        return 0;
    }
    /* NAME is checked by the API; here it must only stay one path segment */
    if (strchr(c->name, '/') || strchr(c->name, '?') || strchr(c->name, ' ') ||
        strlen(c->name) >= SECRET_NAME_MAX) {
        snprintf(err, errlen, "no user '%s'", c->name);
        return -1;
    }
    snprintf(path, plen, "/api/v1/users/%s", c->name);
    if (!strcmp(cmd, "show")) {
        *method = "GET";
    } else if (!strcmp(cmd, "del")) {
        *method = "DELETE";
    } else if (!strcmp(cmd, "set")) {
        *method = "PATCH";
        sbuf_printf(body, "{");
        if (limits_json(c->limit, body, err, errlen))
            return -1;
        sbuf_printf(body, "}");
    } else if (!strcmp(cmd, "rotate")) {
        snprintf(path, plen, "/api/v1/users/%s/rotate", c->name);
        if (c->grace) {
            unsigned long long ms;
            char e2[128];
            if (config_parse_duration(c->grace, &ms, e2, sizeof e2)) {
                snprintf(err, errlen, "--grace: %s", e2);
                return -1;
            }
            sbuf_printf(body, "{\"grace_seconds\":%llu}", (ms + 999) / 1000);
        }
    } else { /* disable, enable, reset-quota */
        snprintf(path, plen, "/api/v1/users/%s/%s", c->name, cmd);
    }
    return 0;
}

/* --- output for a person -------------------------------------------------------------- */

static const char *or_dash(const char *s)
{
    return s && *s && strcmp(s, "null") ? s : "-";
}

static void print_user(const struct jflat *f, const char *pre, int links, int qr)
{
    char k[96];
#define J(key) (snprintf(k, sizeof k, "%s%s", pre, key), jget(f, k))
    const char *ll = J("limit_line");
    const char *lim = ll && strcmp(ll, "null") ? ll + strcspn(ll, " ") : NULL;
    printf("user %s (%s%s%s, %s): %s\n", or_dash(J("name")), or_dash(J("kind")),
           J("domain") ? " " : "", J("domain") ? J("domain") : "", or_dash(J("source")),
           or_dash(J("state")));
    printf("  limits: %s\n", lim ? lim + strspn(lim, " ") : "none");
    printf("  usage:  %s bytes up, %s down, %s active, %s connections, quota used %s\n",
           or_dash(J("usage.bytes_up")), or_dash(J("usage.bytes_down")),
           or_dash(J("usage.active")), or_dash(J("usage.connections")),
           or_dash(J("usage.quota_used")));
    if (links) {
        printf("  secret: %s\n", or_dash(J("secret")));
        printf("  link:   %s\n  link:   %s\n", or_dash(J("links.tg")), or_dash(J("links.https")));
        if (J("links.web_tg")) /* WEB proxy mode is on and the secret is plain or dd */
            printf("  web:    %s\n  web:    %s\n", J("links.web_tg"),
                   or_dash(J("links.web_https")));
        if (qr && J("links.https")) {
            if (!qr_available())
                printf("  (no QR code: this build has no libqrencode)\n");
            else
                qr_terminal(J("links.https"), stdout);
        }
    }
#undef J
}

/* One row of `list`: the fields of users.N (in the order the walk met them). */
struct row {
    const char *name, *kind, *state, *source, *used, *line;
};

static void print_row(const struct row *r)
{
    const char *lim = r->line && strcmp(r->line, "null") ? r->line + strcspn(r->line, " ") : "";
    if (r->name)
        printf("%-24s %-6s %-9s %-10s %-14s %s\n", r->name, or_dash(r->kind), or_dash(r->state),
               or_dash(r->source), or_dash(r->used), *lim ? lim + strspn(lim, " ") : "-");
}

/* The users of a list answer, one line each, in one pass over the walk (10,000 users). */
static void print_list(const struct jflat *f)
{
    printf("%-24s %-6s %-9s %-10s %-14s %s\n", "NAME", "KIND", "STATE", "SOURCE", "QUOTA-USED",
           "LIMITS");
    struct row r = {0};
    long cur = -1;
    for (int i = 0; i < f->n; i++) {
        const char *p = f->path[i];
        if (strncmp(p, "users.", 6))
            continue;
        char *end;
        long idx = strtol(p + 6, &end, 10);
        if (*end != '.')
            continue;
        if (idx != cur) {
            print_row(&r);
            memset(&r, 0, sizeof r);
            cur = idx;
        }
        const char *k = end + 1, *v = f->val[i];
        if (!strcmp(k, "name"))
            r.name = v;
        else if (!strcmp(k, "kind"))
            r.kind = v;
        else if (!strcmp(k, "state"))
            r.state = v;
        else if (!strcmp(k, "source"))
            r.source = v;
        else if (!strcmp(k, "usage.quota_used"))
            r.used = v;
        else if (!strcmp(k, "limit_line"))
            r.line = v;
    }
    print_row(&r);
}

static void print_human(const struct cli *c, const struct jflat *f)
{
    if (!strcmp(c->cmd, "list")) {
        print_list(f);
        return;
    }
    if (!strcmp(c->cmd, "del")) {
        printf("user %s deleted\n", or_dash(jget(f, "deleted")));
        return;
    }
    int links = !strcmp(c->cmd, "add") || !strcmp(c->cmd, "show") || !strcmp(c->cmd, "rotate");
    print_user(f, "", links, c->qr && !strcmp(c->cmd, "show"));
}

/* --- main ----------------------------------------------------------------------------- */

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "mtproxy user: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(mtproxy user --help for usage)\n");
    return CLI_USAGE;
}

static int parse_args(struct cli *c, int argc, char **argv)
{
    static const char *const cmds[] = {"add", "list", "show", "set", "disable", "enable",
                                       "del", "rotate", "reset-quota", NULL};
    int known = 0;
    for (int i = 0; cmds[i]; i++)
        known |= !strcmp(argv[0], cmds[i]);
    if (!known)
        return usage_error("unknown command '%s'", argv[0]);
    c->cmd = argv[0];
    int i = 1;
    if (strcmp(c->cmd, "list")) {
        if (argc < 2 || argv[1][0] == '-')
            return usage_error("%s needs a user NAME", c->cmd);
        c->name = argv[1];
        i = 2;
    }
    for (; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
#define OPT_VAL(opt, field, cmdok)                                                             \
    if (!strcmp(a, opt)) {                                                                     \
        if (!(cmdok))                                                                          \
            return usage_error("%s does not go with this command", opt);                      \
        if (!more)                                                                             \
            return usage_error("%s needs a value", opt);                                      \
        c->field = argv[++i];                                                                  \
        continue;                                                                              \
    }
        int add = !strcmp(c->cmd, "add");
        OPT_VAL("--config", config, 1);
        OPT_VAL("-c", config, 1);
        OPT_VAL("--tls", tls, add);
        OPT_VAL("--secret", secret, add);
        OPT_VAL("--limit", limit, add || !strcmp(c->cmd, "set"));
        OPT_VAL("--grace", grace, !strcmp(c->cmd, "rotate"));
#undef OPT_VAL
        if (!strncmp(a, "--config=", 9)) {
            c->config = a + 9;
        } else if (!strcmp(a, "--json")) {
            c->json = 1;
        } else if (!strcmp(a, "--dd") && add) {
            c->dd = 1;
        } else if (!strcmp(a, "--web") && add) {
            c->web = c->dd = 1; /* a dd secret: what WEB clients carry (plain works too) */
        } else if (!strcmp(a, "--qr") && !strcmp(c->cmd, "show")) {
            c->qr = 1;
        } else if (a[0] == '-' && a[1] == '-' && a[2] && strchr(a, '=')) {
            c->args[c->nargs++] = argv[i]; /* --KEY=VALUE for the config */
        } else if (a[0] == '-' && a[1] == '-' && a[2] && more && argv[i + 1][0] != '-' &&
                   strcmp(a, "--dd") && strcmp(a, "--qr")) {
            c->args[c->nargs++] = argv[i++]; /* --KEY VALUE for the config, as links takes */
            c->args[c->nargs++] = argv[i];
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    if (c->web && c->tls)
        return usage_error("%s", "--web and --tls DOMAIN: ee secrets are not WEB secrets (WEB "
                                 "clients carry plain or dd bytes)");
    if (c->dd && c->tls)
        return usage_error("%s", "--dd and --tls DOMAIN are two kinds: give one");
    if (!strcmp(c->cmd, "set") && !c->limit)
        return usage_error("%s", "set NAME needs --limit 'KEY=VALUE ...'");
    return 0;
}

/* Reads the configuration into c->g (the users as the proxy would read them). Returns 0, or
 * CLI_USAGE (why printed). */
static int cli_load(struct cli *c, struct config_errors *e)
{
    if (users_init(&c->users, 1)) {
        fprintf(stderr, "mtproxy user: out of memory\n");
        return CLI_USAGE;
    }
    c->have_users = 1;
    reload_init(&c->rl, &c->users, c->config, c->nargs, c->args);
    c->rl.tool = 1;
    c->rl.no_resolve = 1;
    if (!(c->g = reload_build(&c->rl, NULL, e))) {
        int shown = e->count < CONFIG_MAX_ERRORS ? e->count : CONFIG_MAX_ERRORS;
        for (int i = 0; i < shown; i++)
            fprintf(stderr, "%s\n", e->msg[i]);
        fprintf(stderr, "mtproxy user: the configuration has errors: fix them first\n");
        return CLI_USAGE;
    }
    reload_commit(&c->rl, c->g);
    return 0;
}

/* Says why the running proxy cannot take the call: its API did not answer (cerr), or none. */
static void cli_unreachable(const struct cli *c, const struct options *o, int cerr)
{
    char addr[SOCK_ADDR_STRLEN];
    sock_addr_format(&o->api_addr, addr, sizeof addr);
    if (o->api_on)
        fprintf(stderr, "mtproxy user %s: mtproxy is running (%s.lock is held) but its API "
                "at %s does not answer (%s): nothing changed\n", c->cmd, o->state_file,
                addr, strerror(cerr));
    else
        fprintf(stderr, "mtproxy user %s: mtproxy is running (%s.lock is held) and the "
                "config has no `api`: add `api = 127.0.0.1:PORT` and `api-token` and "
                "restart it, or edit users-file by hand and send SIGHUP\n", c->cmd,
                o->state_file);
}

/* The proxy is stopped: the same call served in this process, on users-file and the state
 * file; the answer to out. Returns its HTTP status, or -1 (out of memory, printed). */
static int cli_call_offline(struct cli *c, const char *method, const char *path,
                            const struct sbuf *body, struct sbuf *out, char *err, size_t errlen)
{
    c->offline = 1;
    if (users_state_load(&c->users, c->g->opt.state_file, err, errlen))
        fprintf(stderr, "mtproxy user: warning: %s (quota usage not shown)\n", err);
    struct api *a = api_new_offline(cli_current, cli_rebuild, c);
    if (!a) {
        fprintf(stderr, "mtproxy user: out of memory\n");
        return -1;
    }
    struct http_request rq = {.method = !strcmp(method, "GET")      ? HTTP_GET
                                        : !strcmp(method, "PATCH")  ? HTTP_PATCH
                                        : !strcmp(method, "DELETE") ? HTTP_DELETE
                                                                    : HTTP_POST};
    snprintf(rq.path, sizeof rq.path, "%s", path);
    int status = api_serve(a, &rq, body->p ? body->p : "", body->len, out);
    api_free(a);
    return status;
}

/* Prints the answer in out (HTTP status): the JSON itself, an error line or the human form.
 * Returns the exit code. */
static int cli_report(const struct cli *c, int status, struct sbuf *out)
{
    const struct options *o = &c->g->opt; /* a change offline rebuilt the generation */
    sbuf_add(out, "", 1);
    int ok = status >= 200 && status < 300;
    struct jflat f = {0};
    const char *p = out->p ? out->p : "";
    int parsed = !jvalue(&p, "", &f, 0);
    if (c->json) {
        fputs(out->p ? out->p : "", stdout);
    } else if (!ok) {
        const char *field = parsed ? jget(&f, "field") : NULL;
        fprintf(stderr, "mtproxy user %s: %s%s%s%s (HTTP %d)\n", c->cmd,
                parsed && jget(&f, "error") ? jget(&f, "error") : "error",
                field && strcmp(field, "null") ? " [field " : "",
                field && strcmp(field, "null") ? field : "",
                field && strcmp(field, "null") ? "]" : "", status);
    } else if (parsed) {
        print_human(c, &f);
    }
    if (ok && c->offline && strcmp(c->cmd, "list") && strcmp(c->cmd, "show"))
        fprintf(stderr, "mtproxy is not running: %s changed; the change is used at the next "
                        "start\n", !strcmp(c->cmd, "reset-quota") ? o->state_file
                                                                 : o->users_file);
    jflat_free(&f);
    return ok ? 0 : CLI_FAIL;
}

int usercli_main(int argc, char **argv)
{
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") ||
        !strcmp(argv[0], "help")) {
        usercli_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? CLI_USAGE : 0;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usercli_usage(stdout);
            return 0;
        }
    struct cli *c = calloc(1, sizeof *c);
    char err[CONFIG_ERR_LEN + 256] = "";
    struct sbuf body = {.max = 1 << 20}, out = {.max = 64 << 20};
    struct config_errors *e = calloc(1, sizeof *e);
    int rc = CLI_FAIL;
    if (c)
        c->lock_fd = c->api_fd = -1;
    if (!c || !e || !(c->args = calloc((size_t)argc + 1, sizeof *c->args))) {
        fprintf(stderr, "mtproxy user: out of memory\n");
        goto done;
    }
    char logerr[128];
    log_open("stderr", LOG_LVL_WARN, logerr, sizeof logerr); /* the CLI's own lines only */
    if ((rc = parse_args(c, argc, argv)) || (rc = cli_load(c, e)))
        goto done;
    const struct options *o = &c->g->opt;
    if (c->web && !o->web_on) {
        fprintf(stderr, "mtproxy user add: --web: WEB proxy mode is off in this configuration "
                        "(set web-listen and web-host: README.md, WEB proxy mode)\n");
        rc = CLI_USAGE;
        goto done;
    }
    const char *method;
    char path[256];
    rc = CLI_FAIL;
    if (build_call(c, &method, path, sizeof path, &body, err, sizeof err)) {
        fprintf(stderr, "mtproxy user %s: %s\n", c->cmd, err);
        rc = strncmp(err, "no user", 7) ? CLI_USAGE : CLI_FAIL;
        goto done;
    }
    /* One change at a time: the lock (a running proxy's, or another `mtproxy user`'s, waited
     * for) is held from the read of users-file to the last write; a proxy that starts
     * meanwhile waits for it (before it reads users-file). */
    int status;
    c->lock_fd = statefile_lock_wait(o->state_file, STATEFILE_LOCK_WAIT_MS, cli_poll_api, c,
                                     err, sizeof err);
    if (c->lock_fd >= 0) { /* stopped: users-file read again, under the lock */
        if (cli_rebuild(c, err, sizeof err)) {
            fprintf(stderr, "mtproxy user: %s\n", err);
            rc = CLI_USAGE;
            goto done;
        }
        o = &c->g->opt;
    }
    int fd = c->api_fd >= 0 ? c->api_fd : c->lock_fd < 0 && o->api_on ? api_connect(o) : -1;
    int cerr = errno;
    c->api_fd = -1;
    if (fd >= 0) {
        status = http_call(fd, o, method, path, body.len ? body.p : NULL, &out, err,
                           sizeof err);
        close(fd);
        if (status < 0) {
            fprintf(stderr, "mtproxy user %s: %s\n", c->cmd, err);
            goto done;
        }
    } else if (c->lock_fd == -2) {
        cli_unreachable(c, o, cerr);
        goto done;
    } else if ((status = cli_call_offline(c, method, path, &body, &out, err, sizeof err)) < 0) {
        goto done;
    }
    rc = cli_report(c, status, &out);
done:
    sbuf_free(&body);
    sbuf_free(&out);
    if (c) {
        if (c->lock_fd >= 0)
            close(c->lock_fd); /* after the last write and the report */
        gen_unref(c->g);
        if (c->have_users)
            users_destroy(&c->users);
        free(c->args);
    }
    free(c);
    free(e);
    return rc;
}
