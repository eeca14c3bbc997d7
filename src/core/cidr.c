/* cidr.c: CIDR parsing and sorted-range address sets (binary search) for access lists. */
#include "core/cidr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cidr_parse(const char *text, struct cidr *out, char *err, size_t errlen)
{
    char addr[64];
    const char *slash = strchr(text, '/');
    size_t alen = slash ? (size_t)(slash - text) : strlen(text);
    if (alen == 0 || alen >= sizeof addr) {
        snprintf(err, errlen, "'%.80s' is not an address or CIDR", text);
        return -1;
    }
    memcpy(addr, text, alen);
    addr[alen] = '\0';
    memset(out, 0, sizeof *out);
    int bits;
    if (inet_pton(AF_INET, addr, out->addr) == 1) {
        out->family = AF_INET;
        bits = 32;
    } else if (inet_pton(AF_INET6, addr, out->addr) == 1) {
        out->family = AF_INET6;
        bits = 128;
    } else {
        snprintf(err, errlen, "'%.80s' is not an IPv4 or IPv6 address", addr);
        return -1;
    }
    int prefix = bits;
    if (slash) {
        const char *p = slash + 1;
        if (!*p || strlen(p) > 3) {
            snprintf(err, errlen, "'%.80s': bad prefix length", text);
            return -1;
        }
        prefix = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9') {
                snprintf(err, errlen, "'%.80s': bad prefix length", text);
                return -1;
            }
            prefix = prefix * 10 + (*p - '0');
        }
        if (prefix > bits) {
            snprintf(err, errlen, "'%.80s': prefix length above %d", text, bits);
            return -1;
        }
    }
    out->prefix = (uint8_t)prefix;
    for (int i = prefix; i < bits; i++) {
        if (out->addr[i / 8] & (0x80u >> (i % 8))) {
            struct cidr fixed = *out;
            for (int j = prefix; j < bits; j++)
                fixed.addr[j / 8] &= (uint8_t) ~(0x80u >> (j % 8));
            char want[64];
            cidr_format(&fixed, want, sizeof want);
            snprintf(err, errlen, "'%.80s' has host bits set (did you mean %s?)", text, want);
            return -1;
        }
    }
    return 0;
}

void cidr_format(const struct cidr *c, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    if (!inet_ntop(c->family, c->addr, a, sizeof a))
        snprintf(a, sizeof a, "?");
    snprintf(buf, len, "%s/%u", a, c->prefix);
}

void cidr_set_init(struct cidr_set *s)
{
    memset(s, 0, sizeof *s);
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? 2 * *cap : 64;
    void *na = realloc(*arr, ncap * elem);
    if (!na)
        return -1;
    *arr = na;
    *cap = ncap;
    return 0;
}

int cidr_set_add(struct cidr_set *s, const struct cidr *c)
{
    if (c->family == AF_INET) {
        if (grow((void **)&s->v4, &s->cap4, s->n4, sizeof *s->v4))
            return -1;
        uint32_t a = (uint32_t)c->addr[0] << 24 | (uint32_t)c->addr[1] << 16 |
                     (uint32_t)c->addr[2] << 8 | c->addr[3];
        uint32_t span = c->prefix == 0 ? 0xffffffffu : (uint32_t)((1ull << (32 - c->prefix)) - 1);
        s->v4[s->n4++] = (struct cidr_range4){a, a | span};
    } else {
        if (grow((void **)&s->v6, &s->cap6, s->n6, sizeof *s->v6))
            return -1;
        struct cidr_u128 lo = {be64(c->addr), be64(c->addr + 8)}, hi = lo;
        int host = 128 - c->prefix;
        if (host >= 64) {
            hi.lo = ~0ull;
            hi.hi |= host == 128 ? ~0ull : ((1ull << (host - 64)) - 1);
        } else if (host > 0) {
            hi.lo |= (1ull << host) - 1;
        }
        s->v6[s->n6++] = (struct cidr_range6){lo, hi};
    }
    s->added++;
    return 0;
}

int cidr_set_load_file(struct cidr_set *s, const char *path,
                       void (*report)(void *ctx, const char *msg), void *ctx)
{
    char msg[512];
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(msg, sizeof msg, "%s: cannot open: %s", path, strerror(errno));
        report(ctx, msg);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, bad = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        const char *why = n > 512 ? "line too long" : memchr(line, '\0', (size_t)n) ? "NUL byte" : 0;
        if (why) {
            snprintf(msg, sizeof msg, "%s:%d: %s", path, lineno, why);
            report(ctx, msg);
            bad++;
            continue;
        }
        char *p = line, *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        char *e = p + strlen(p);
        while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
            *--e = '\0';
        if (!*p)
            continue;
        struct cidr c;
        char err[256];
        if (cidr_parse(p, &c, err, sizeof err)) {
            snprintf(msg, sizeof msg, "%s:%d: %s", path, lineno, err);
            report(ctx, msg);
            bad++;
            continue;
        }
        if (cidr_set_add(s, &c)) {
            snprintf(msg, sizeof msg, "%s:%d: out of memory", path, lineno);
            report(ctx, msg);
            free(line);
            fclose(f);
            return bad + 1;
        }
    }
    if (ferror(f)) {
        snprintf(msg, sizeof msg, "%s: read error", path);
        report(ctx, msg);
        bad++;
    }
    free(line);
    fclose(f);
    return bad;
}

static int cmp4(const void *a, const void *b)
{
    const struct cidr_range4 *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int lt128(struct cidr_u128 a, struct cidr_u128 b)
{
    return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}

static int cmp6(const void *a, const void *b)
{
    const struct cidr_range6 *x = a, *y = b;
    return lt128(x->lo, y->lo) ? -1 : lt128(y->lo, x->lo);
}

void cidr_set_finish(struct cidr_set *s)
{
    if (s->n4) {
        qsort(s->v4, s->n4, sizeof *s->v4, cmp4);
        size_t k = 0;
        for (size_t i = 1; i < s->n4; i++) {
            struct cidr_range4 *cur = &s->v4[k];
            if (cur->hi == 0xffffffffu || s->v4[i].lo <= cur->hi + 1) {
                if (s->v4[i].hi > cur->hi)
                    cur->hi = s->v4[i].hi;
            } else {
                s->v4[++k] = s->v4[i];
            }
        }
        s->n4 = k + 1;
    }
    if (s->n6) {
        qsort(s->v6, s->n6, sizeof *s->v6, cmp6);
        size_t k = 0;
        for (size_t i = 1; i < s->n6; i++) {
            struct cidr_range6 *cur = &s->v6[k];
            struct cidr_u128 next = cur->hi; /* cur->hi + 1, saturating */
            int top = next.hi == ~0ull && next.lo == ~0ull;
            if (!top && ++next.lo == 0)
                next.hi++;
            if (top || !lt128(next, s->v6[i].lo)) {
                if (lt128(cur->hi, s->v6[i].hi))
                    cur->hi = s->v6[i].hi;
            } else {
                s->v6[++k] = s->v6[i];
            }
        }
        s->n6 = k + 1;
    }
    /* Give back what merging freed: the set is read-only from here on. */
    if (s->n4 < s->cap4) {
        void *p = realloc(s->v4, (s->n4 ? s->n4 : 1) * sizeof *s->v4);
        if (p)
            s->v4 = p, s->cap4 = s->n4 ? s->n4 : 1;
    }
    if (s->n6 < s->cap6) {
        void *p = realloc(s->v6, (s->n6 ? s->n6 : 1) * sizeof *s->v6);
        if (p)
            s->v6 = p, s->cap6 = s->n6 ? s->n6 : 1;
    }
}

int cidr_set_contains(const struct cidr_set *s, const struct sockaddr *sa)
{
    const uint8_t *b;
    if (sa->sa_family == AF_INET) {
        b = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        const uint8_t *a = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, 12) == 0) {
            b = a + 12;
        } else {
            struct cidr_u128 x = {be64(a), be64(a + 8)};
            size_t lo = 0, hi = s->n6; /* first range with lo > x, minus one */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (lt128(x, s->v6[mid].lo))
                    hi = mid;
                else
                    lo = mid + 1;
            }
            return lo > 0 && !lt128(s->v6[lo - 1].hi, x);
        }
    } else {
        return 0;
    }
    uint32_t x = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    size_t lo = 0, hi = s->n4;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x < s->v4[mid].lo)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo > 0 && s->v4[lo - 1].hi >= x;
}

size_t cidr_set_count(const struct cidr_set *s)
{
    return s->n4 + s->n6;
}

size_t cidr_set_memory(const struct cidr_set *s)
{
    return s->cap4 * sizeof *s->v4 + s->cap6 * sizeof *s->v6;
}

void cidr_set_free(struct cidr_set *s)
{
    free(s->v4);
    free(s->v6);
    cidr_set_init(s);
}
