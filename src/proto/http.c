/* http.c: strict HTTP/1.x request-head parser (pure: bytes in, verdict out; see http.h). */
#include "proto/http.h"

#include <string.h>

static enum http_status bad(struct http_request *out, int code, const char *why)
{
    out->code = code;
    out->why = why;
    return HTTP_BAD;
}

static int is_tchar(uint8_t c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Case-insensitive compare of n bytes of s with the lower-case literal lit. */
static int ieq(const uint8_t *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (n != m)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != lit[i])
            return 0;
    return 1;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (uint8_t)lower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int http_pct_decode(const char *s, size_t n, char *out, size_t cap, int plus)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval((uint8_t)s[i + 1]), lo = hexval((uint8_t)s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == 0 || o + 1 >= cap)
            return -1;
        out[o++] = (char)c;
    }
    if (!cap)
        return -1;
    out[o] = 0;
    return (int)o;
}

int http_query_param(const char *query, size_t n, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && query[e] != '&')
            e++;
        if (e - i >= kl && !memcmp(query + i, key, kl) && (e - i == kl || query[i + kl] == '=')) {
            size_t v = e - i > kl ? i + kl + 1 : e; /* the value's start */
            return http_pct_decode(query + v, e - v, out, cap, 1) < 0 ? -1 : 1;
        }
        i = e + 1;
    }
    return 0;
}

/* The query's token=VALUE (percent-decoded, '+' is a space). Returns 0, or -1 if malformed. */
static int query_token(const uint8_t *q, size_t n, struct http_request *out)
{
    int r = http_query_param((const char *)q, n, "token", out->token, HTTP_TOKEN_MAX);
    out->has_token = r == 1;
    return r < 0 ? -1 : 0;
}

static enum http_status request_line(const uint8_t *l, size_t n, struct http_request *out)
{
    size_t sp1 = 0;
    while (sp1 < n && l[sp1] != ' ')
        sp1++;
    if (sp1 == 0 || sp1 == n)
        return bad(out, 400, "malformed request line");
    for (size_t i = 0; i < sp1; i++)
        if (!is_tchar(l[i]))
            return bad(out, 400, "malformed method");
    if (sp1 == 3 && memcmp(l, "GET", 3) == 0)
        out->method = HTTP_GET;
    else if (sp1 == 4 && memcmp(l, "HEAD", 4) == 0)
        out->method = HTTP_HEAD;
    else if (out->max_body && sp1 == 4 && memcmp(l, "POST", 4) == 0)
        out->method = HTTP_POST;
    else if (out->max_body && sp1 == 3 && memcmp(l, "PUT", 3) == 0)
        out->method = HTTP_PUT;
    else if (out->max_body && sp1 == 5 && memcmp(l, "PATCH", 5) == 0)
        out->method = HTTP_PATCH;
    else if (out->max_body && sp1 == 6 && memcmp(l, "DELETE", 6) == 0)
        out->method = HTTP_DELETE;
    else
        return bad(out, 405, "method not allowed");
    size_t t = sp1 + 1, sp2 = t;
    while (sp2 < n && l[sp2] != ' ')
        sp2++;
    if (sp2 == n || sp2 == t || n - sp2 - 1 != 8)
        return bad(out, 400, "malformed request line");
    const uint8_t *v = l + sp2 + 1;
    if (memcmp(v, "HTTP/1.", 7) != 0)
        return bad(out, 505, "not HTTP/1.x");
    if (v[7] != '0' && v[7] != '1')
        return bad(out, 505, "not HTTP/1.0 or 1.1");
    out->minor = v[7] - '0';
    if (l[t] != '/')
        return bad(out, 400, "target is not an absolute path");
    size_t q = t;
    for (size_t i = t; i < sp2; i++) {
        if (l[i] <= 0x20 || l[i] >= 0x7f || l[i] == '#')
            return bad(out, 400, "bad character in target");
        if (l[i] == '?' && q == t)
            q = i;
    }
    if (q == t)
        q = sp2;
    if (q - t >= HTTP_PATH_MAX)
        return bad(out, 414, "path too long");
    memcpy(out->path, l + t, q - t);
    out->path[q - t] = 0;
    if (q < sp2 && query_token(l + q + 1, sp2 - q - 1, out))
        return bad(out, 400, "malformed token in query");
    return HTTP_OK;
}

static enum http_status header_line(const uint8_t *l, size_t n, struct http_request *out)
{
    if (l[0] == ' ' || l[0] == '\t')
        return bad(out, 400, "obsolete line folding");
    size_t c = 0;
    while (c < n && l[c] != ':')
        c++;
    if (c == 0 || c == n)
        return bad(out, 400, "malformed header");
    for (size_t i = 0; i < c; i++)
        if (!is_tchar(l[i]))
            return bad(out, 400, "malformed header name");
    size_t vs = c + 1, ve = n;
    for (size_t i = vs; i < n; i++)
        if ((l[i] < 0x20 && l[i] != '\t') || l[i] == 0x7f)
            return bad(out, 400, "control character in header value");
    while (vs < ve && (l[vs] == ' ' || l[vs] == '\t'))
        vs++;
    while (ve > vs && (l[ve - 1] == ' ' || l[ve - 1] == '\t'))
        ve--;
    const uint8_t *v = l + vs;
    size_t vn = ve - vs;
    if (ieq(l, c, "transfer-encoding"))
        return bad(out, 400, "request body not accepted");
    if (ieq(l, c, "content-length") && !out->max_body && !(vn == 1 && v[0] == '0'))
        return bad(out, 400, "request body not accepted");
    if (ieq(l, c, "content-length")) {
        if (out->has_length)
            return bad(out, 400, "repeated content-length");
        size_t cl = 0;
        if (vn == 0 || vn > 12)
            return bad(out, vn ? 413 : 400, vn ? "request body too large" : "malformed content-length");
        for (size_t i = 0; i < vn; i++) {
            if (v[i] < '0' || v[i] > '9')
                return bad(out, 400, "malformed content-length");
            cl = cl * 10 + (size_t)(v[i] - '0');
        }
        if (cl > out->max_body && cl)
            return bad(out, 413, "request body too large");
        out->content_length = cl;
        out->has_length = 1;
    }
    if (ieq(l, c, "host")) {
        if (out->has_host)
            return bad(out, 400, "repeated host");
        if (vn >= HTTP_HOST_MAX)
            return bad(out, 400, "host too long");
        memcpy(out->host, v, vn);
        out->host[vn] = 0;
        out->has_host = 1;
    }
    if (ieq(l, c, "authorization")) {
        if (out->has_bearer)
            return bad(out, 400, "repeated authorization");
        if (vn > 7 && ieq(v, 6, "bearer") && v[6] == ' ') {
            size_t s = 7;
            while (s < vn && v[s] == ' ')
                s++;
            if (vn - s >= HTTP_TOKEN_MAX || s == vn)
                return bad(out, 400, "malformed bearer token");
            memcpy(out->bearer, v + s, vn - s);
            out->bearer[vn - s] = 0;
            out->has_bearer = 1;
        }
    }
    return HTTP_OK;
}

enum http_status http_parse_request(const uint8_t *buf, size_t len, size_t max,
                                    size_t max_headers, struct http_request *out)
{
    return http_parse_request_body(buf, len, max, max_headers, 0, out);
}

enum http_status http_parse_request_body(const uint8_t *buf, size_t len, size_t max,
                                         size_t max_headers, size_t max_body,
                                         struct http_request *out)
{
    memset(out, 0, sizeof *out);
    out->max_body = max_body;
    size_t lim = len < max ? len : max;
    size_t pos = 0;
    int line_no = 0;
    for (;;) {
        size_t e = pos;
        while (e < lim && buf[e] != '\n')
            e++;
        if (e == lim)
            break; /* no complete line yet */
        if (e == pos || buf[e - 1] != '\r')
            return bad(out, 400, "bare LF");
        size_t n = e - 1 - pos;
        for (size_t i = pos; i < e - 1; i++)
            if (buf[i] == '\r' || buf[i] == 0)
                return bad(out, 400, "stray CR or NUL");
        if (line_no == 0) {
            if (n == 0)
                return bad(out, 400, "empty request line");
            if (request_line(buf + pos, n, out) != HTTP_OK)
                return HTTP_BAD;
        } else if (n == 0) {
            out->consumed = e + 1;
            return HTTP_OK;
        } else {
            if ((size_t)out->nheaders >= max_headers)
                return bad(out, 431, "too many headers");
            out->nheaders++;
            if (header_line(buf + pos, n, out) != HTTP_OK)
                return HTTP_BAD;
        }
        line_no++;
        pos = e + 1;
    }
    /* A partial line: bytes no request may hold are BAD at once. */
    for (size_t i = pos; i < lim; i++)
        if (buf[i] == 0 || (buf[i] == '\r' && i + 1 < lim))
            return bad(out, 400, "stray CR or NUL");
    if (len >= max)
        return bad(out, line_no == 0 ? 414 : 431, "request head too large");
    return HTTP_NEED_MORE;
}

int http_header(const uint8_t *buf, size_t n, const char *name, const char **v, size_t *vn)
{
    int found = 0;
    const uint8_t *end = buf + n, *l = memchr(buf, '\n', n); /* past the request line */
    while (l && ++l < end) {
        const uint8_t *e = memchr(l, '\n', (size_t)(end - l));
        if (!e || e - l < 2)
            break;
        const uint8_t *c = memchr(l, ':', (size_t)(e - l));
        if (c && ieq(l, (size_t)(c - l), name) && found++ == 0) {
            const uint8_t *vs = c + 1, *ve = e - 1; /* before the CR */
            while (vs < ve && (*vs == ' ' || *vs == '\t'))
                vs++;
            while (ve > vs && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *v = (const char *)vs;
            *vn = (size_t)(ve - vs);
        }
        l = e;
    }
    return found > 2 ? 2 : found;
}

int http_token_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned diff = na != nb;
    for (size_t i = 0; i < na && i < nb; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}
