/* config.c: one option table drives defaults, config files and command-line flags. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_error(struct config_errors *e, const char *fmt, ...)
{
    if (e->count < CONFIG_MAX_ERRORS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg[e->count], CONFIG_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    e->count++;
}

int config_parse_int(const char *s, long long *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) {
        snprintf(err, errlen, "'%s' is not an integer", s);
        return -1;
    }
    *out = v;
    return 0;
}

int config_parse_bool(const char *s, int *out, char *err, size_t errlen)
{
    static const char *const yes[] = {"on", "yes", "true", "1"};
    static const char *const no[] = {"off", "no", "false", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    }
    snprintf(err, errlen, "'%s' is not on/off", s);
    return -1;
}

/* Splits "123k" into a number and a suffix; returns -1 if no leading digits or overflow. */
static int split_number(const char *s, unsigned long long *num, const char **suffix)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    *num = strtoull(s, &end, 10);
    if (errno)
        return -1;
    *suffix = end;
    return 0;
}

int config_parse_size(const char *s, unsigned long long *out, char *err, size_t errlen)
{
    unsigned long long n;
    const char *suf;
    if (split_number(s, &n, &suf) == 0) {
        unsigned shift = 0;
        if (!strcasecmp(suf, "") || !strcasecmp(suf, "b"))
            shift = 0;
        else if (!strcasecmp(suf, "k") || !strcasecmp(suf, "kb") || !strcasecmp(suf, "kib"))
            shift = 10;
        else if (!strcasecmp(suf, "m") || !strcasecmp(suf, "mb") || !strcasecmp(suf, "mib"))
            shift = 20;
        else if (!strcasecmp(suf, "g") || !strcasecmp(suf, "gb") || !strcasecmp(suf, "gib"))
            shift = 30;
        else
            goto bad;
        if (shift && n > (UINT64_MAX >> shift))
            goto bad;
        *out = n << shift;
        return 0;
    }
bad:
    snprintf(err, errlen, "'%s' is not a size (e.g. 16384, 16k, 4M)", s);
    return -1;
}

int config_parse_duration(const char *s, unsigned long long *ms, char *err, size_t errlen)
{
    unsigned long long n;
    const char *suf;
    if (split_number(s, &n, &suf) == 0) {
        unsigned long long mul;
        if (!strcmp(suf, "ms"))
            mul = 1;
        else if (!strcmp(suf, "") || !strcmp(suf, "s"))
            mul = 1000;
        else if (!strcmp(suf, "m"))
            mul = 60000;
        else if (!strcmp(suf, "h"))
            mul = 3600000;
        else
            goto bad;
        if (n > UINT64_MAX / mul)
            goto bad;
        *ms = n * mul;
        return 0;
    }
bad:
    snprintf(err, errlen, "'%s' is not a duration (e.g. 500ms, 10s, 5m, 1h)", s);
    return -1;
}

/* Range check shared by INT, SIZE and DURATION (values printed in the option's own unit). */
static int check_range(const struct config_option *o, long long v, char *err, size_t errlen)
{
    if (v < o->min || (o->max && v > o->max)) {
        if (o->max)
            snprintf(err, errlen, "%s must be between %lld and %lld", o->name, o->min, o->max);
        else
            snprintf(err, errlen, "%s must be at least %lld", o->name, o->min);
        return -1;
    }
    return 0;
}

/* Parses value into the field of option o. Returns 0, or -1 with err. */
static int apply(const struct config_option *o, void *conf, const char *value, char *err,
                 size_t errlen)
{
    char *field = (char *)conf + o->offset;
    unsigned long long u;
    long long v;
    switch (o->type) {
    case CFG_BOOL:
        return config_parse_bool(value, (int *)(void *)field, err, errlen);
    case CFG_INT:
        if (config_parse_int(value, &v, err, errlen) || check_range(o, v, err, errlen))
            return -1;
        if (v < INT_MIN || v > INT_MAX) {
            snprintf(err, errlen, "%s is out of range", o->name);
            return -1;
        }
        *(int *)(void *)field = (int)v;
        return 0;
    case CFG_SIZE:
        if (config_parse_size(value, &u, err, errlen))
            return -1;
        if (u > (unsigned long long)INT64_MAX || u > SIZE_MAX) {
            snprintf(err, errlen, "%s is too large", o->name);
            return -1;
        }
        if (check_range(o, (long long)u, err, errlen))
            return -1;
        *(size_t *)(void *)field = (size_t)u;
        return 0;
    case CFG_DURATION:
        if (config_parse_duration(value, &u, err, errlen))
            return -1;
        if (u > UINT32_MAX) {
            snprintf(err, errlen, "%s is too long", o->name);
            return -1;
        }
        if (check_range(o, (long long)u, err, errlen))
            return -1;
        *(unsigned *)(void *)field = (unsigned)u;
        return 0;
    case CFG_STRING:
        if (strlen(value) >= o->str_size) {
            snprintf(err, errlen, "%s is longer than %zu characters", o->name, o->str_size - 1);
            return -1;
        }
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case CFG_ENUM:
        for (int i = 0; o->names[i]; i++) {
            if (strcmp(value, o->names[i]) == 0) {
                *(int *)(void *)field = i;
                return 0;
            }
        }
        {
            size_t n = (size_t)snprintf(err, errlen, "'%s' is not one of:", value);
            for (int i = 0; o->names[i] && n < errlen; i++)
                n += (size_t)snprintf(err + n, errlen - n, " %s", o->names[i]);
        }
        return -1;
    case CFG_CUSTOM:
        return o->parse(conf, value, err, errlen);
    }
    return -1;
}

int config_init(struct config_parser *p, const struct config_option *opts, size_t nopts,
                void *conf)
{
    memset(p, 0, sizeof *p);
    p->opts = opts;
    p->nopts = nopts;
    p->conf = conf;
    if (nopts > sizeof p->origin) {
        config_error(&p->errors, "internal: too many options (%zu)", nopts);
        return -1;
    }
    for (size_t i = 0; i < nopts; i++) {
        char err[CONFIG_ERR_LEN];
        if (opts[i].def && *opts[i].def && apply(&opts[i], conf, opts[i].def, err, sizeof err))
            config_error(&p->errors, "internal: default of %s: %s", opts[i].name, err);
    }
    return p->errors.count ? -1 : 0;
}

const struct config_option *config_find(const struct config_parser *p, const char *name)
{
    for (size_t i = 0; i < p->nopts; i++)
        if (strcmp(p->opts[i].name, name) == 0)
            return &p->opts[i];
    return NULL;
}

/* What an error may quote of text that failed to parse as a key or a line: at most 60 bytes,
 * cut after "://" (a URL's credentials come next: socks5://USER:PASS@, redis://:PASS@) and,
 * with words, at the first blank (a line with no '=' may hold a secret after its key). */
static const char *quotable(const char *s, int first_word, char *buf, size_t cap)
{
    size_t n = 0;
    while (s[n] && n < 60 && !(first_word && isspace((unsigned char)s[n])) &&
           strncmp(s + n, "://", 3) != 0)
        n++;
    int url = strncmp(s + n, "://", 3) == 0;
    snprintf(buf, cap, "%.*s%s", (int)n, s, url ? "://..." : s[n] ? "..." : "");
    return buf;
}

int config_set(struct config_parser *p, const char *key, const char *value,
               enum config_origin from, const char *where)
{
    const struct config_option *o = config_find(p, key);
    if (!o) {
        char q[80];
        config_error(&p->errors, "%s: unknown key '%s'", where, quotable(key, 0, q, sizeof q));
        return -1;
    }
    size_t idx = (size_t)(o - p->opts);
    if ((o->flags & CFG_REPEAT) && p->origin[idx] < from && o->reset)
        o->reset(p->conf); /* a higher source replaces the list instead of appending to it */
    char err[CONFIG_ERR_LEN];
    if (apply(o, p->conf, value, err, sizeof err)) {
        config_error(&p->errors, "%s: %s", where, err);
        return -1;
    }
    p->origin[idx] = (unsigned char)from;
    return 0;
}

/* Trims leading and trailing white space in place; returns the new start. */
static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* Copies the next line of data[*pos..len) into line the way fgets(3) would: at most
 * cap - 1 bytes, stopping after a '\n'. Returns the bytes copied (a NUL among them is
 * copied too: the caller must not measure the line with strlen), 0 at the end of the data. */
static size_t next_line(const char *data, size_t len, size_t *pos, char *line, size_t cap)
{
    if (*pos >= len)
        return 0;
    size_t n = len - *pos;
    if (n > cap - 1)
        n = cap - 1;
    const char *nl = memchr(data + *pos, '\n', n);
    if (nl)
        n = (size_t)(nl - (data + *pos)) + 1;
    memcpy(line, data + *pos, n);
    line[n] = 0;
    *pos += n;
    return n;
}

int config_load_buffer(struct config_parser *p, const char *name, const char *data, size_t len)
{
    int before = p->errors.count;
    char line[CONFIG_LINE_MAX];
    int set_at[sizeof p->origin] = {0}; /* per option: the line of this text that set it */
    size_t pos = 0;
    int lineno = 0;
    size_t n;
    while ((n = next_line(data, len, &pos, line, sizeof line)) > 0) {
        lineno++;
        char where[300];
        snprintf(where, sizeof where, "%s:%d", name, lineno);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            config_error(&p->errors, "%s: line too long", where);
            const char *nl = memchr(data + pos, '\n', len - pos); /* skip the rest of it */
            pos = nl ? (size_t)(nl - data) + 1 : len;
            continue;
        }
        /* A comment starts at '#' at the line start or after white space. */
        for (char *h = line; (h = strchr(h, '#')); h++) {
            if (h == line || isspace((unsigned char)h[-1])) {
                *h = 0;
                break;
            }
        }
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            char q[80];
            config_error(&p->errors, "%s: expected 'key = value', got '%s'", where,
                      quotable(s, 1, q, sizeof q));
            continue;
        }
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        size_t vlen = strlen(value);
        int q0 = value[0] == '"', q1 = vlen >= 2 && value[vlen - 1] == '"';
        if (q0 != q1 || (q0 && vlen < 2)) {
            config_error(&p->errors, "%s: unterminated quote in the value of '%s'", where, key);
            continue;
        }
        if (q0) {
            value[vlen - 1] = 0;
            value++;
        }
        if (!*key) {
            config_error(&p->errors, "%s: missing key before '='", where);
            continue;
        }
        if (!*value) {
            config_error(&p->errors, "%s: missing value for '%s'", where, key);
            continue;
        }
        const struct config_option *o = config_find(p, key);
        if (o && !(o->flags & CFG_REPEAT) && set_at[o - p->opts]) {
            config_error(&p->errors, "%s: '%s' is already set at line %d (it may be given once)",
                      where, key, set_at[o - p->opts]);
            continue;
        }
        if (config_set(p, key, value, CFG_FROM_FILE, where) == 0 && o)
            set_at[o - p->opts] = lineno;
    }
    return p->errors.count - before;
}

int config_load_file(struct config_parser *p, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        config_error(&p->errors, "%s: cannot open: %s", path, strerror(errno));
        return 1;
    }
    char *data = NULL;
    size_t len = 0, cap = 0;
    int failed = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= CONFIG_FILE_MAX) {
                config_error(&p->errors, "%s: larger than %d bytes", path, CONFIG_FILE_MAX);
                failed = 1;
                break;
            }
            size_t ncap = cap ? 2 * cap : 8192;
            char *nd = realloc(data, ncap);
            if (!nd) {
                config_error(&p->errors, "%s: out of memory", path);
                failed = 1;
                break;
            }
            data = nd;
            cap = ncap;
        }
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                config_error(&p->errors, "%s: read error: %s", path, strerror(errno));
                failed = 1;
            }
            break;
        }
    }
    fclose(f);
    int n = failed ? 1 : config_load_buffer(p, path, data, len);
    free(data);
    return n;
}

int config_load_args(struct config_parser *p, int argc, char **argv)
{
    int before = p->errors.count;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            char q[80];
            config_error(&p->errors, "'%s': expected --key value", quotable(a, 0, q, sizeof q));
            continue;
        }
        char key[128];
        const char *value;
        const char *eq = strchr(a + 2, '=');
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - a - 2), a + 2);
            value = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a + 2);
            if (!config_find(p, key)) {
                char q[80];
                config_error(&p->errors, "--%s: unknown key", quotable(key, 0, q, sizeof q));
                if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                    i++; /* its value */
                continue;
            }
            if (i + 1 >= argc) {
                config_error(&p->errors, "--%s: missing value", key);
                continue;
            }
            value = argv[++i];
        }
        char where[160];
        char q[80];
        snprintf(where, sizeof where, "--%s", quotable(key, 0, q, sizeof q));
        config_set(p, key, value, CFG_FROM_ARGS, where);
    }
    return p->errors.count - before;
}

/* Appends to buf[len] at *n (stays terminated; truncates). */
static void help_append(char *buf, size_t len, size_t *n, const char *s, size_t slen)
{
    if (*n + 1 >= len)
        return;
    if (slen > len - 1 - *n)
        slen = len - 1 - *n;
    memcpy(buf + *n, s, slen);
    *n += slen;
    buf[*n] = 0;
}

/* Appends text's words as lines indented by indent spaces and at most width columns (0: one
 * line); a word longer than a line gets a line of its own. */
static void help_wrap(char *buf, size_t len, size_t *n, const char *text, size_t width,
                      size_t indent)
{
    static const char spaces[] = "                ";
    size_t col = 0;
    for (const char *p = text; *p;) {
        p += strspn(p, " ");
        size_t w = strcspn(p, " ");
        if (!w)
            break;
        if (col && width && col + 1 + w > width) {
            help_append(buf, len, n, "\n", 1);
            col = 0;
        }
        if (!col) {
            help_append(buf, len, n, spaces, indent < 16 ? indent : 16);
            col = indent;
        } else {
            help_append(buf, len, n, " ", 1);
            col++;
        }
        help_append(buf, len, n, p, w);
        col += w;
        p += w;
    }
    help_append(buf, len, n, "\n", 1);
}

void config_help(const struct config_option *opts, size_t nopts, size_t width, char *buf,
                 size_t len)
{
    size_t n = 0;
    if (len)
        buf[0] = 0;
    for (size_t i = 0; i < nopts; i++) {
        const struct config_option *o = &opts[i];
        char line[1024];
        snprintf(line, sizeof line, "  --%s %s%s\n", o->name, o->arg ? o->arg : "VALUE",
                 (o->flags & CFG_REPEAT) ? "   (repeatable)" : "");
        help_append(buf, len, &n, line, strlen(line));
        int has_def = o->def && *o->def;
        snprintf(line, sizeof line, "%s%s%s%s", o->help, has_def ? " Default: " : "",
                 has_def ? o->def : "", has_def ? "." : "");
        help_wrap(buf, len, &n, line, width, 6);
    }
}
