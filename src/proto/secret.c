/* secret.c: proxy secrets in their client forms (hex or base64url), names, and invite links. */
#include "proto/secret.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/*
 * The binary client form, which the text is the hex or unpadded base64url encoding of:
 *
 *   plain:  | key (16) |
 *   dd:     | dd | key (16) |
 *   ee:     | ee | key (16) | domain (1..182 ASCII bytes, no terminator) |
 */
#define SECRET_BIN_MAX (1 + SECRET_KEY_LEN + SECRET_DOMAIN_MAX)
#define SECRET_LABEL_MAX 63 /* longest DNS label */

/* Which text encoding a decoded form came from; only changes how errors are worded. */
enum secret_form { FORM_HEX, FORM_BASE64URL };

static const char generic_hex_msg[] =
    "secret must be 32 hex digits, dd + 32 hex digits, or ee + 32 hex digits + hex domain";

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats a message into err (which may be NULL or empty: then nothing is written). */
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Describes byte c for an error message: 'x' when printable, else 0xNN. */
static void describe_char(unsigned char c, char buf[8]) {
    if (c > 0x20 && c < 0x7f)
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "0x%02x", c);
}

static int hex_val(unsigned char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* RFC 4648 section 5 (URL and filename safe) alphabet. */
static int b64url_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

static int is_alnum(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Decodes the first min(n / 2, cap) bytes of n hex digits (all known to be valid). */
static void hex_decode(const char *text, size_t n, uint8_t *bin, size_t cap) {
    for (size_t i = 0; i < n / 2 && i < cap; i++)
        bin[i] = (uint8_t)(hex_val((unsigned char)text[2 * i]) << 4 |
                           hex_val((unsigned char)text[2 * i + 1]));
}

/* Decodes up to cap bytes of n unpadded base64url characters (all known to be valid). */
static void b64url_decode(const char *text, size_t n, uint8_t *bin, size_t cap) {
    uint32_t acc = 0;
    int bits = 0;
    size_t out = 0;
    for (size_t i = 0; i < n && out < cap; i++) {
        acc = acc << 6 | (uint32_t)b64url_val((unsigned char)text[i]);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            bin[out++] = (uint8_t)(acc >> bits);
        }
    }
}

/* Checks the domain of an ee secret: 1..SECRET_DOMAIN_MAX bytes forming a host name (labels of
 * letters, digits, '-' and '_' separated by single dots). */
static int check_domain(const uint8_t *d, size_t n, char *err, size_t errlen) {
    if (n > SECRET_DOMAIN_MAX) {
        set_err(err, errlen, "ee secret domain is %zu bytes long; the limit is %d", n,
                SECRET_DOMAIN_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!is_alnum(d[i]) && d[i] != '-' && d[i] != '_' && d[i] != '.') {
            char c[8];
            describe_char(d[i], c);
            set_err(err, errlen,
                    "ee secret domain has invalid character %s at position %zu "
                    "(expected a host name: letters, digits, '-', '_', '.')",
                    c, i + 1);
            return -1;
        }
    }
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && d[i] != '.')
            continue;
        size_t len = i - start;
        if (len == 0) {
            set_err(err, errlen, "ee secret domain \"%.*s\" has an empty label", (int)n,
                    (const char *)d);
            return -1;
        }
        if (len > SECRET_LABEL_MAX) {
            set_err(err, errlen, "ee secret domain has a label of %zu characters; the limit is %d",
                    len, SECRET_LABEL_MAX);
            return -1;
        }
        if (d[start] == '-' || d[i - 1] == '-') {
            set_err(err, errlen,
                    "ee secret domain \"%.*s\" has a label starting or ending with '-'", (int)n,
                    (const char *)d);
            return -1;
        }
        start = i + 1;
    }
    return 0;
}

/* Classifies a decoded binary form of len bytes (only the first SECRET_BIN_MAX are in bin).
 * nchars is the length of the text it came from. Fills *out on success. */
static int check_binary(const uint8_t *bin, size_t len, enum secret_form form, size_t nchars,
                        struct secret *out, char *err, size_t errlen) {
    if (len == SECRET_KEY_LEN) {
        out->kind = SECRET_PLAIN;
        memcpy(out->key, bin, SECRET_KEY_LEN);
        out->domain[0] = '\0';
        return 0;
    }
    if (len == 1 + SECRET_KEY_LEN && bin[0] == 0xdd) {
        out->kind = SECRET_DD;
        memcpy(out->key, bin + 1, SECRET_KEY_LEN);
        out->domain[0] = '\0';
        return 0;
    }
    if (len > 1 + SECRET_KEY_LEN && bin[0] == 0xee) {
        size_t dlen = len - 1 - SECRET_KEY_LEN;
        if (check_domain(bin + 1 + SECRET_KEY_LEN, dlen, err, errlen) != 0)
            return -1;
        out->kind = SECRET_EE;
        memcpy(out->key, bin + 1, SECRET_KEY_LEN);
        memcpy(out->domain, bin + 1 + SECRET_KEY_LEN, dlen);
        out->domain[dlen] = '\0';
        return 0;
    }

    if (len == 1 + SECRET_KEY_LEN && bin[0] == 0xee) {
        set_err(err, errlen,
                "ee secret has no domain: expected ee + 32 hex digits + the domain name in hex");
    } else if (len > 1 + SECRET_KEY_LEN && bin[0] == 0xdd) {
        if (form == FORM_HEX)
            set_err(err, errlen,
                    "dd secret must be dd + exactly 32 hex digits (got %zu characters)", nchars);
        else
            set_err(err, errlen, "dd secret must decode to dd + exactly 16 bytes (got %zu bytes)",
                    len);
    } else if (form == FORM_HEX && len == 1 + SECRET_KEY_LEN) {
        set_err(err, errlen, "a secret of 34 hex digits must start with dd (got %02x)", bin[0]);
    } else if (form == FORM_HEX) {
        set_err(err, errlen, "%s (got %zu characters)", generic_hex_msg, nchars);
    } else {
        set_err(err, errlen,
                "base64url secret must decode to 16 bytes, dd + 16 bytes, or ee + 16 bytes + "
                "domain (got %zu bytes)",
                len);
    }
    return -1;
}

/* Parses the text of a secret (hex first, then base64url) into the key, kind and domain. */
static int parse_text(const char *text, struct secret *out, char *err, size_t errlen) {
    size_t n = strlen(text);
    if (n == 0) {
        set_err(err, errlen, "secret is empty");
        return -1;
    }
    size_t bad_hex = n, bad_b64 = n; /* index of the first character outside each alphabet */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (bad_hex == n && hex_val(c) < 0)
            bad_hex = i;
        if (bad_b64 == n && b64url_val(c) < 0)
            bad_b64 = i;
    }

    uint8_t bin[SECRET_BIN_MAX];
    /* Hex wins whenever it yields a valid form; base64url gets a try only after that. */
    if (bad_hex == n && n % 2 == 0) {
        hex_decode(text, n, bin, sizeof(bin));
        if (check_binary(bin, n / 2, FORM_HEX, n, out, err, errlen) == 0)
            return 0;
    }
    char b64_err[256] = "";
    if (bad_b64 == n && n % 4 != 1) {
        b64url_decode(text, n, bin, sizeof(bin));
        if (check_binary(bin, n * 3 / 4, FORM_BASE64URL, n, out, b64_err, sizeof(b64_err)) == 0)
            return 0;
    }

    /* Neither worked: explain in the terms of the form the text most looks like. */
    if (bad_hex == n) {
        if (n % 2 != 0)
            set_err(err, errlen, "%s (got %zu characters)", generic_hex_msg, n);
        return -1; /* an even-length hex error is already in err */
    }
    if (bad_b64 < n) {
        unsigned char c = (unsigned char)text[bad_b64];
        if (c == '+' || c == '/') {
            set_err(err, errlen,
                    "secret has '%c' at character %zu: base64 secrets must use the URL-safe "
                    "alphabet ('-' and '_' instead of '+' and '/')",
                    c, bad_b64 + 1);
        } else if (c == '=') {
            set_err(err, errlen,
                    "secret has '=' at character %zu: base64url secrets are written without "
                    "padding",
                    bad_b64 + 1);
        } else {
            char d[8];
            describe_char(c, d);
            set_err(err, errlen,
                    "secret has invalid character %s at character %zu (expected hex digits or "
                    "base64url)",
                    d, bad_b64 + 1);
        }
        return -1;
    }
    int hex_prefix = n >= 2 && ((text[0] | 0x20) == 'e' || (text[0] | 0x20) == 'd') &&
                     (text[1] | 0x20) == (text[0] | 0x20);
    if (n == 2 * SECRET_KEY_LEN || n == 2 + 2 * SECRET_KEY_LEN ||
        (n > 2 + 2 * SECRET_KEY_LEN && hex_prefix)) {
        char d[8];
        describe_char((unsigned char)text[bad_hex], d);
        set_err(err, errlen, "secret is not valid hex: character %zu (%s) is not a hex digit",
                bad_hex + 1, d);
    } else if (n % 4 == 1) {
        set_err(err, errlen, "base64url secret has an impossible length (%zu characters)", n);
    } else {
        set_err(err, errlen, "%s", b64_err);
    }
    return -1;
}

/* Checks a secret name: 1..SECRET_NAME_MAX-1 characters of [A-Za-z0-9_.-]. */
static int check_name(const char *name, size_t n, char *err, size_t errlen) {
    if (n == 0) {
        set_err(err, errlen, "secret name is empty");
        return -1;
    }
    if (n >= SECRET_NAME_MAX) {
        set_err(err, errlen, "secret name is %zu characters long; the limit is %d", n,
                SECRET_NAME_MAX - 1);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!is_alnum(c) && c != '_' && c != '.' && c != '-') {
            char d[8];
            describe_char(c, d);
            set_err(err, errlen,
                    "secret name has invalid character %s (allowed: letters, digits, '_', '.', "
                    "'-')",
                    d);
            return -1;
        }
    }
    return 0;
}

/* secret_parse with a name that need not be NUL-terminated (namelen bytes; NULL for none). */
static int parse_with_name(const char *name, size_t namelen, const char *text, struct secret *out,
                           char *err, size_t errlen) {
    struct secret s;
    memset(&s, 0, sizeof(s));
    if (name) {
        if (check_name(name, namelen, err, errlen) != 0)
            return -1;
        memcpy(s.name, name, namelen);
        s.name[namelen] = '\0';
    }
    if (!text) {
        set_err(err, errlen, "secret is empty");
        return -1;
    }
    if (parse_text(text, &s, err, errlen) != 0)
        return -1;
    *out = s;
    return 0;
}

int secret_parse(const char *name, const char *text, struct secret *out, char *err, size_t errlen) {
    return parse_with_name(name, name ? strlen(name) : 0, text, out, err, errlen);
}

int secret_parse_named(const char *text, struct secret *out, char *err, size_t errlen) {
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon) {
        set_err(err, errlen, "expected NAME:SECRET, but there is no ':'");
        return -1;
    }
    if (colon == text) {
        set_err(err, errlen, "secret name is empty (expected NAME:SECRET)");
        return -1;
    }
    return parse_with_name(text, (size_t)(colon - text), colon + 1, out, err, errlen);
}

int secret_to_hex(const struct secret *s, char *out, size_t outlen) {
    static const char digits[] = "0123456789abcdef";
    uint8_t bin[SECRET_BIN_MAX];
    size_t len = 0;
    switch (s->kind) {
    case SECRET_PLAIN:
        break;
    case SECRET_DD:
        bin[len++] = 0xdd;
        break;
    case SECRET_EE:
        bin[len++] = 0xee;
        break;
    default:
        return -1;
    }
    memcpy(bin + len, s->key, SECRET_KEY_LEN);
    len += SECRET_KEY_LEN;
    if (s->kind == SECRET_EE) {
        const char *end = memchr(s->domain, '\0', sizeof(s->domain));
        size_t dlen = end ? (size_t)(end - s->domain) : 0;
        if (dlen == 0)
            return -1; /* not a valid ee secret */
        memcpy(bin + len, s->domain, dlen);
        len += dlen;
    }
    if (outlen < 2 * len + 1)
        return -1;
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[bin[i] >> 4];
        out[2 * i + 1] = digits[bin[i] & 0xf];
    }
    out[2 * len] = '\0';
    return (int)(2 * len);
}

/* A bounded string builder: appends what fits and remembers whether anything did not. */
struct link_buf {
    char *p;
    size_t cap;
    size_t len;
    int overflow;
};

static void link_putc(struct link_buf *b, char c) {
    if (b->len + 1 < b->cap)
        b->p[b->len++] = c;
    else
        b->overflow = 1;
}

static void link_puts(struct link_buf *b, const char *s) {
    while (*s)
        link_putc(b, *s++);
}

/* Appends a host for a query value: unreserved characters and ':' as is, others %XX. */
static void link_put_host(struct link_buf *b, const char *host, size_t n) {
    static const char digits[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)host[i];
        if (is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == ':') {
            link_putc(b, (char)c);
        } else {
            link_putc(b, '%');
            link_putc(b, digits[c >> 4]);
            link_putc(b, digits[c & 0xf]);
        }
    }
}

static int link_write(char *out, size_t outlen, const char *prefix, const char *host,
                      size_t hostlen, int port, const char *hex) {
    char portbuf[8];
    struct link_buf b = {out, outlen, 0, 0};
    if (outlen == 0)
        return -1;
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    link_puts(&b, prefix);
    link_puts(&b, "?server=");
    link_put_host(&b, host, hostlen);
    if (port) { /* WEB links have none: always 443 */
        link_puts(&b, "&port=");
        link_puts(&b, portbuf);
    }
    link_puts(&b, "&secret=");
    link_puts(&b, hex);
    out[b.len] = '\0';
    if (b.overflow) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

int secret_links(const struct secret *s, const char *host, int port, char *tg, size_t tglen,
                 char *https, size_t httpslen) {
    char hex[SECRET_HEX_MAX];
    if (!host || port < 1 || port > 65535 || secret_to_hex(s, hex, sizeof(hex)) < 0)
        return -1;
    size_t hostlen = strlen(host);
    if (hostlen > 2 && host[0] == '[' && host[hostlen - 1] == ']') {
        host++;
        hostlen -= 2;
    }
    if (hostlen == 0)
        return -1;
    if (link_write(tg, tglen, "tg://proxy", host, hostlen, port, hex) != 0)
        return -1;
    if (link_write(https, httpslen, "https://t.me/proxy", host, hostlen, port, hex) != 0)
        return -1;
    return 0;
}

int secret_web_links(const struct secret *s, const char *host, char *tg, size_t tglen,
                     char *https, size_t httpslen) {
    char hex[SECRET_HEX_MAX];
    if (!host || !*host || s->kind == SECRET_EE || secret_to_hex(s, hex, sizeof(hex)) < 0)
        return -1;
    if (link_write(tg, tglen, "tg://webproxy", host, strlen(host), 0, hex) != 0 ||
        link_write(https, httpslen, "https://t.me/webproxy", host, strlen(host), 0, hex) != 0)
        return -1;
    return 0;
}
