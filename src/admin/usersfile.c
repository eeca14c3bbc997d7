/* usersfile.c: users-file (secret and limit lines) read, checked with the config's parsers, changed and written atomically; shared by the API and `mtproxy user`. */
#include "admin/usersfile.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fsutil.h"
#include "core/sbuf.h"
#include "config/options.h"
#include "users/users.h"

void usersfile_free(struct usersfile *u)
{
    for (int i = 0; i < u->n; i++) {
        free(u->r[i].secret);
        free(u->r[i].limit);
    }
    free(u->r);
    free(u->text);
    memset(u, 0, sizeof *u);
}

int usersfile_find(const struct usersfile *u, const char *name)
{
    for (int i = 0; i < u->n; i++)
        if (!strcmp(u->r[i].name, name))
            return i;
    return -1;
}

/* The record of name (added if new), or NULL (out of memory). */
struct usersfile_rec *usersfile_rec(struct usersfile *u, const char *name, size_t n)
{
    char nm[SECRET_NAME_MAX];
    snprintf(nm, sizeof nm, "%.*s", (int)(n < sizeof nm ? n : sizeof nm - 1), name);
    int i = usersfile_find(u, nm);
    if (i >= 0)
        return &u->r[i];
    if (u->n == u->cap) {
        int cap = u->cap ? 2 * u->cap : 16;
        struct usersfile_rec *r = realloc(u->r, (size_t)cap * sizeof *r);
        if (!r)
            return NULL;
        u->r = r;
        u->cap = cap;
    }
    struct usersfile_rec *r = &u->r[u->n++];
    memset(r, 0, sizeof *r);
    memcpy(r->name, nm, sizeof nm);
    return r;
}

/* Records a line's value (what = the secret or the limit slot of its user). */
static int keep_line(struct usersfile *u, const char *v, size_t namelen, int limit, char *err,
                      size_t errlen)
{
    struct usersfile_rec *r = usersfile_rec(u, v, namelen);
    char *copy = strdup(v);
    if (!r || !copy) {
        free(copy);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char **slot = limit ? &r->limit : &r->secret;
    free(*slot);
    *slot = copy;
    return 0;
}

static int keep_secret(void *conf, const char *v, char *err, size_t errlen)
{
    return keep_line(conf, v, strcspn(v, ":"), 0, err, errlen);
}

static int keep_limit(void *conf, const char *v, char *err, size_t errlen)
{
    return keep_line(conf, v, strcspn(v, " \t"), 1, err, errlen);
}

static const struct config_option line_keys[] = {
    {.name = "secret", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = keep_secret},
    {.name = "limit", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = keep_limit},
};

/* Checks users-file text with the reload's own parser. Returns 0, or -1 with the first error
 * in err and the key of the line it is on in key ("" if none). */
int usersfile_check(const char *path, const char *text, size_t len, char *err, size_t errlen,
                       char *key, size_t keylen)
{
    struct options *o = calloc(1, sizeof *o);
    struct config_errors *e = calloc(1, sizeof *e);
    int rc = -1;
    key[0] = 0;
    if (!o || !e) {
        snprintf(err, errlen, "out of memory");
    } else if (options_load_users(o, path, text, len, e) == 0) {
        rc = 0;
    } else {
        snprintf(err, errlen, "%s", e->msg[0]);
        /* PATH:LINE: ...: the key of that line of text */
        const char *c = e->msg[0] + strlen(path);
        int line = *c == ':' ? atoi(c + 1) : 0;
        const char *l = text;
        for (int i = 1; l && i < line; i++)
            if ((l = memchr(l, '\n', len - (size_t)(l - text))))
                l++;
        if (l && line > 0)
            snprintf(key, keylen, "%.*s", (int)strcspn(l, " =\n"), l);
    }
    options_free(o);
    free(o);
    free(e);
    return rc;
}

/* Reads path into u (a missing file is empty). Returns 0, or -1 with err (unreadable, or
 * lines that do not parse: the operator's hand edit must be fixed first). */
int usersfile_load(struct usersfile *u, const char *path, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    FILE *f = fopen(path, "re");
    if (!f && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    if (f) {
        struct sbuf b = {.max = CONFIG_FILE_MAX};
        char chunk[8192];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            sbuf_add(&b, chunk, n);
        int bad = ferror(f) || b.failed;
        fclose(f);
        if (bad) {
            sbuf_free(&b);
            snprintf(err, errlen, "%s: cannot read (or larger than %d bytes)", path,
                     CONFIG_FILE_MAX);
            return -1;
        }
        u->text = b.p ? b.p : strdup("");
        u->len = b.len;
    }
    char key[32];
    if (u->text && usersfile_check(path, u->text, u->len, err, errlen, key, sizeof key))
        return -1;
    struct config_parser *p = malloc(sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_init(p, line_keys, 2, u);
    int bad = u->text && config_load_buffer(p, path, u->text, u->len);
    if (bad)
        snprintf(err, errlen, "%s", p->errors.msg[0]);
    free(p);
    return bad ? -1 : 0;
}

/* users-file's text for u. */
int usersfile_render(const struct usersfile *u, struct sbuf *b)
{
    sbuf_printf(b, "# mtproxy users-file: secret and limit lines, rewritten by the management "
                   "API (comments are not kept). Keep it private.\n");
    for (int i = 0; i < u->n; i++) {
        if (u->r[i].secret)
            sbuf_printf(b, "secret = %s\n", u->r[i].secret);
        if (u->r[i].limit)
            sbuf_printf(b, "limit = %s\n", u->r[i].limit);
    }
    return b->failed ? -1 : 0;
}


/* Drops the NAME.prev users (keep_previous) whose grace has passed. */
void usersfile_prune(struct usersfile *u)
{
    time_t now = time(NULL);
    for (int i = 0; i < u->n; i++) {
        size_t n = strlen(u->r[i].name);
        struct user_limit l;
        char err[CONFIG_ERR_LEN];
        if (n < 6 || strcmp(u->r[i].name + n - 5, ".prev") || !u->r[i].limit ||
            users_limit_parse(u->r[i].limit, &l, err, sizeof err) || !l.expires ||
            l.expires > (int64_t)now)
            continue;
        free(u->r[i].secret);
        free(u->r[i].limit);
        u->r[i--] = u->r[--u->n];
    }
}


int usersfile_sync_prev(struct usersfile *u, const char *name, int64_t until)
{
    char prev[SECRET_NAME_MAX + 8], line[1024], err[CONFIG_ERR_LEN], when[32];
    snprintf(prev, sizeof prev, "%s.prev", name);
    int rp = usersfile_find(u, prev), r = usersfile_find(u, name);
    struct user_limit l;
    if (rp < 0)
        return 0;
    if (!until && (!u->r[rp].limit || users_limit_parse(u->r[rp].limit, &l, err, sizeof err) ||
                   !(until = l.expires)))
        return 0; /* not a grace's line (a hand edit): left alone */
    const char *own = r >= 0 ? u->r[r].limit : NULL;
    if (own && !users_limit_parse(own, &l, err, sizeof err) && l.expires && l.expires < until)
        until = l.expires;
    size_t len = (size_t)snprintf(line, sizeof line, "%s", prev);
    for (const char *p = own ? own + strcspn(own, " \t") : ""; *p;) { /* NAME's fields */
        p += strspn(p, " \t");
        size_t k = strcspn(p, " \t");
        if (k && strncmp(p, "expires=", 8) && len < sizeof line)
            len += (size_t)snprintf(line + len, sizeof line - len, " %.*s", (int)k, p);
        p += k;
    }
    time_t t = (time_t)until;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (len < sizeof line)
        len += (size_t)snprintf(line + len, sizeof line - len, " expires=%s", when);
    return len >= sizeof line ? -1 : usersfile_set_limit(&u->r[rp], line);
}

/* Sets r's limit line's value to lim ("": none). Returns 0, or -1 (out of memory). */
int usersfile_set_limit(struct usersfile_rec *r, const char *lim)
{
    free(r->limit);
    r->limit = lim[0] ? strdup(lim) : NULL;
    return lim[0] && !r->limit ? -1 : 0;
}

/* The owner a rewritten file keeps: root (`mtproxy user` with the proxy stopped) must not
 * leave the file of the account the proxy runs as (`user`) to root, where the proxy could no
 * longer read it after dropping privileges. (uid_t)-1: not root, or a new file. */
static uid_t owner_of(const char *path)
{
    struct stat st;
    return geteuid() == 0 && lstat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
}

/* Where a rewrite of path goes: a symlink is written through (its target replaced, the link
 * kept: a users-file linked from a shared or managed place stays linked). Returns the path
 * to write (path itself, or real), or NULL with err (a link to nothing). */
static const char *write_target(const char *path, char *real, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) || !S_ISLNK(st.st_mode))
        return path;
    if (!realpath(path, real)) {
        snprintf(err, errlen, "users-file %s is a symbolic link to nothing (%s): fix the link",
                 path, strerror(errno));
        return NULL;
    }
    return real;
}

int usersfile_write(const char *path, struct usersfile *u, char *err, size_t errlen, char *key,
                    size_t keylen)
{
    char real[PATH_MAX];
    const char *dst = write_target(path, real, err, errlen);
    key[0] = 0;
    if (!dst)
        return USERSFILE_WRITE_FAILED;
    struct sbuf b = {.max = CONFIG_FILE_MAX};
    int rc = 0;
    usersfile_prune(u);
    if (usersfile_render(u, &b)) {
        snprintf(err, errlen, "users-file would be larger than %d bytes", CONFIG_FILE_MAX);
        rc = USERSFILE_TOO_BIG;
    } else if (usersfile_check(path, b.p, b.len, err, errlen, key, keylen)) {
        rc = USERSFILE_INVALID;
    } else if (fs_write_atomic(dst, b.p, b.len, 0600, owner_of(dst), err, errlen)) {
        rc = USERSFILE_WRITE_FAILED;
    }
    sbuf_free(&b);
    return rc;
}

int usersfile_restore(const char *path, const struct usersfile *u, char *err, size_t errlen)
{
    char real[PATH_MAX];
    if (!(path = write_target(path, real, err, errlen)))
        return -1;
    if (u->text)
        return fs_write_atomic(path, u->text, u->len, 0600, owner_of(path), err, errlen);
    if (unlink(path) && errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* 1 if the limit line value l (NAME k=v ... word ...) has the bare word w. */
static int has_word(const char *l, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = l + strcspn(l, " \t"); *p;) {
        p += strspn(p, " \t");
        size_t k = strcspn(p, " \t");
        if (k == n && !memcmp(p, w, n))
            return 1;
        p += k;
    }
    return 0;
}

int usersfile_set_word(struct usersfile_rec *r, const char *word, int on)
{
    char line[1024];
    size_t len = 0;
    if (!r->limit) {
        if (!on)
            return 0;
        snprintf(line, sizeof line, "%s %s", r->name, word);
        return usersfile_set_limit(r, line);
    }
    if (has_word(r->limit, word) == !!on)
        return 0;
    const char *p = r->limit;
    size_t nl = strcspn(p, " \t");
    len = (size_t)snprintf(line, sizeof line, "%.*s", (int)nl, p);
    int fields = 0;
    for (p += nl; *p;) {
        p += strspn(p, " \t");
        size_t k = strcspn(p, " \t");
        if (k && !(k == strlen(word) && !memcmp(p, word, k)) && len < sizeof line) {
            len += (size_t)snprintf(line + len, sizeof line - len, " %.*s", (int)k, p);
            fields++;
        }
        p += k;
    }
    if (on && len < sizeof line) {
        len += (size_t)snprintf(line + len, sizeof line - len, " %s", word);
        fields++;
    }
    if (len >= sizeof line)
        return -1;
    return usersfile_set_limit(r, fields ? line : "");
}

int usersfile_state_drop_quota(const char *path, const char *name, int fleet, int *found,
                               char *err, size_t errlen)
{
    *found = 0;
    FILE *f = fopen(path, "re");
    if (!f && errno == ENOENT && fleet) {
        char line[SECRET_NAME_MAX + 32];
        int n = snprintf(line, sizeof line, "quota-reset = %s\n", name);
        return fs_write_atomic(path, line, (size_t)n, 0600, (uid_t)-1, err, errlen);
    }
    if (!f) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    struct sbuf b = {.max = CONFIG_FILE_MAX};
    char line[4096];
    size_t nlen = strlen(name);
    while (fgets(line, sizeof line, f)) {
        const char *p = line + strspn(line, " \t");
        if (!strncmp(p, "quota-used", 10)) {
            const char *v = p + 10;
            v += strspn(v, " \t");
            if (*v == '=') {
                v++;
                v += strspn(v, " \t");
                if (!strncmp(v, name, nlen) && (v[nlen] == ' ' || v[nlen] == '\t')) {
                    *found = 1;
                    continue;
                }
            }
        }
        sbuf_add(&b, line, strlen(line));
    }
    if (fleet) /* the next start bumps the fleet's epoch of name (users_state_load) */
        sbuf_printf(&b, "quota-reset = %s\n", name);
    int bad = ferror(f) || b.failed;
    fclose(f);
    int rc = 0;
    if (bad) {
        snprintf(err, errlen, "%s: cannot read (or larger than %d bytes)", path, CONFIG_FILE_MAX);
        rc = -1;
    } else if ((*found || fleet) && fs_write_atomic(path, b.p ? b.p : "", b.len, 0600, owner_of(path),
                                         err, errlen)) {
        rc = -1;
    }
    sbuf_free(&b);
    return rc;
}
