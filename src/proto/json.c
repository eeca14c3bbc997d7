/* json.c: a bounded parser for flat JSON objects (one level of nesting) and JSON string escaping. */
#include "proto/json.h"

#include <stdio.h>
#include <string.h>

struct jp {
    const char *s;
    size_t len, pos;
    struct json_obj *out;
    char *err;
    size_t errlen;
};

static int fail(struct jp *p, const char *what)
{
    snprintf(p->err, p->errlen, "at byte %zu: %s", p->pos, what);
    return -1;
}

static void ws(struct jp *p)
{
    while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos])
        p->pos++;
}

static int peek(struct jp *p)
{
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int hex4(struct jp *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = peek(p);
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return fail(p, "bad \\u escape");
        *v = *v * 16 + d;
        p->pos++;
    }
    return 0;
}

/* Appends byte c to out[*n] (cap bytes with the NUL). */
static int put(struct jp *p, char *out, size_t *n, size_t cap, unsigned c)
{
    if (*n + 1 >= cap)
        return fail(p, "string too long");
    out[(*n)++] = (char)c;
    return 0;
}

/* A string at p->pos (at its opening quote), decoded into out[cap]. */
static int string(struct jp *p, char *out, size_t cap)
{
    size_t n = 0;
    p->pos++;
    for (;;) {
        int c = peek(p);
        if (c < 0)
            return fail(p, "unterminated string");
        if (c < 0x20)
            return fail(p, "control character in string");
        p->pos++;
        if (c == '"')
            break;
        if (c != '\\') {
            if (put(p, out, &n, cap, (unsigned)c))
                return -1;
            continue;
        }
        c = peek(p);
        p->pos++;
        const char *esc = strchr("\"\\/bfnrt", c > 0 ? c : 'x');
        if (c > 0 && esc) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            if (put(p, out, &n, cap, (unsigned char)map[esc - "\"\\/bfnrt"]))
                return -1;
            continue;
        }
        if (c != 'u')
            return fail(p, "bad escape");
        unsigned u;
        if (hex4(p, &u))
            return -1;
        if (u >= 0xdc00 && u <= 0xdfff)
            return fail(p, "lone low surrogate");
        if (u >= 0xd800 && u <= 0xdbff) {
            unsigned lo;
            if (peek(p) != '\\' || (p->pos++, peek(p) != 'u'))
                return fail(p, "lone high surrogate");
            p->pos++;
            if (hex4(p, &lo))
                return -1;
            if (lo < 0xdc00 || lo > 0xdfff)
                return fail(p, "lone high surrogate");
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (u == 0)
            return fail(p, "\\u0000 in string");
        int rc;
        if (u < 0x80)
            rc = put(p, out, &n, cap, u);
        else if (u < 0x800)
            rc = put(p, out, &n, cap, 0xc0 | (u >> 6)) ||
                 put(p, out, &n, cap, 0x80 | (u & 0x3f));
        else if (u < 0x10000)
            rc = put(p, out, &n, cap, 0xe0 | (u >> 12)) ||
                 put(p, out, &n, cap, 0x80 | ((u >> 6) & 0x3f)) ||
                 put(p, out, &n, cap, 0x80 | (u & 0x3f));
        else
            rc = put(p, out, &n, cap, 0xf0 | (u >> 18)) ||
                 put(p, out, &n, cap, 0x80 | ((u >> 12) & 0x3f)) ||
                 put(p, out, &n, cap, 0x80 | ((u >> 6) & 0x3f)) ||
                 put(p, out, &n, cap, 0x80 | (u & 0x3f));
        if (rc)
            return -1;
    }
    out[n] = 0;
    return 0;
}

static int digits(struct jp *p)
{
    size_t s = p->pos;
    while (peek(p) >= '0' && peek(p) <= '9')
        p->pos++;
    return p->pos > s ? 0 : fail(p, "expected a digit");
}

/* A number (RFC 8259 grammar), its text copied into out[cap]. */
static int number(struct jp *p, char *out, size_t cap)
{
    size_t s = p->pos;
    if (peek(p) == '-')
        p->pos++;
    if (peek(p) == '0')
        p->pos++;
    else if (digits(p))
        return -1;
    if (peek(p) == '.') {
        p->pos++;
        if (digits(p))
            return -1;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-')
            p->pos++;
        if (digits(p))
            return -1;
    }
    if (p->pos - s >= cap)
        return fail(p, "number too long");
    memcpy(out, p->s + s, p->pos - s);
    out[p->pos - s] = 0;
    return 0;
}

static int literal(struct jp *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
        return fail(p, "expected a value");
    p->pos += n;
    return 0;
}

static int object(struct jp *p, int parent);

static int value(struct jp *p, struct json_field *f, int self, int depth)
{
    int c = peek(p);
    f->val[0] = 0;
    if (c == '"') {
        f->type = JSON_STRING;
        return string(p, f->val, sizeof f->val);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        f->type = JSON_NUMBER;
        return number(p, f->val, sizeof f->val);
    }
    if (c == 't')
        return f->type = JSON_TRUE, literal(p, "true");
    if (c == 'f')
        return f->type = JSON_FALSE, literal(p, "false");
    if (c == 'n')
        return f->type = JSON_NULL, literal(p, "null");
    if (c == '{') {
        if (depth > 0)
            return fail(p, "objects nest one level deep at most");
        f->type = JSON_OBJECT;
        return object(p, self);
    }
    if (c == '[')
        return fail(p, "arrays are not accepted");
    return fail(p, "expected a value");
}

/* An object at p->pos (at '{'); its members get parent. */
static int object(struct jp *p, int parent)
{
    struct json_obj *o = p->out;
    p->pos++;
    ws(p);
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        ws(p);
        if (peek(p) != '"')
            return fail(p, "expected a key");
        if (o->n >= JSON_MAX_FIELDS)
            return fail(p, "too many members");
        struct json_field *f = &o->f[o->n];
        int self = o->n++;
        if (string(p, f->key, sizeof f->key))
            return -1;
        f->parent = parent;
        for (int i = 0; i < self; i++)
            if (o->f[i].parent == parent && !strcmp(o->f[i].key, f->key))
                return fail(p, "repeated key");
        ws(p);
        if (peek(p) != ':')
            return fail(p, "expected ':'");
        p->pos++;
        ws(p);
        if (value(p, f, self, parent >= 0))
            return -1;
        ws(p);
        int c = peek(p);
        p->pos++;
        if (c == '}')
            return 0;
        if (c != ',') {
            p->pos--;
            return fail(p, "expected ',' or '}'");
        }
    }
}

int json_parse_object(const char *text, size_t len, struct json_obj *out, char *err,
                      size_t errlen)
{
    struct jp p = {.s = text, .len = len, .out = out, .err = err, .errlen = errlen};
    out->n = 0;
    ws(&p);
    if (peek(&p) != '{')
        return fail(&p, "expected an object");
    if (object(&p, -1))
        return -1;
    ws(&p);
    if (p.pos != len)
        return fail(&p, "bytes after the object");
    return 0;
}

const struct json_field *json_get(const struct json_obj *o, const struct json_field *parent,
                                  const char *key)
{
    int pi = parent ? (int)(parent - o->f) : -1;
    for (int i = 0; i < o->n; i++)
        if (o->f[i].parent == pi && !strcmp(o->f[i].key, key))
            return &o->f[i];
    return NULL;
}

size_t json_escape(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        size_t k;
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            k = 2;
        } else if (c < 0x20 || c == 0x7f) {
            k = (size_t)snprintf(e, sizeof e, "\\u%04x", c);
        } else {
            e[0] = (char)c;
            k = 1;
        }
        for (size_t i = 0; i < k; i++, n++)
            if (n + 1 < cap)
                out[n] = e[i];
    }
    if (cap)
        out[n < cap ? n : cap - 1] = 0;
    return n;
}
