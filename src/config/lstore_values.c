/* lstore_values.c: the limits store's pure parts: its hashes' values and replies read, and
 * the fleet arithmetic of a flush (unit tests and fuzzing reach them). */
#include "config/lstore.h"

#include <stdlib.h>
#include <string.h>

#include "users/rstore.h"

#ifdef MTPROXY_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif


int lstore_parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 19)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

/* "A B": two decimal numbers and one blank. */
static int parse_pair(const char *s, size_t n, uint64_t *a, uint64_t *b)
{
    const char *sp = memchr(s, ' ', n);
    if (!sp)
        return -1;
    size_t k = (size_t)(sp - s);
    return lstore_parse_u64(s, k, a) || lstore_parse_u64(sp + 1, n - k - 1, b) ? -1 : 0;
}

int lstore_parse_live(const char *s, size_t n, uint32_t *conns, uint32_t *ips)
{
    uint64_t c, i;
    if (parse_pair(s, n, &c, &i) || c > UINT32_MAX || i > UINT32_MAX)
        return -1;
    *conns = (uint32_t)c;
    *ips = (uint32_t)i;
    return 0;
}

int lstore_parse_share(const char *s, size_t n, uint64_t *epoch, uint64_t *bytes)
{
    return parse_pair(s, n, epoch, bytes);
}

uint64_t lstore_quota_total(const struct lstore_kv *kv, size_t n, uint64_t *epoch, size_t *bad)
{
    uint64_t e = 0, sum = 0;
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++)
        if (kv[i].kn == 1 && kv[i].k[0] == 'e' && lstore_parse_u64(kv[i].v, kv[i].vn, &e))
            nbad++;
    for (size_t i = 0; i < n; i++) {
        uint64_t pe, b;
        if (kv[i].kn == 1 && kv[i].k[0] == 'e')
            continue;
        if (lstore_parse_share(kv[i].v, kv[i].vn, &pe, &b) || b > LSTORE_BYTES_MAX) {
            nbad++;
            continue;
        }
        if (pe == e)
            sum += b; /* at most 2^56 each, fewer than 2^7 of them before the check below */
        if (sum > LSTORE_BYTES_MAX)
            break;
    }
    *epoch = e;
    if (bad)
        *bad = nbad;
    return sum > LSTORE_BYTES_MAX ? UINT64_MAX : sum;
}

long long lstore_live_ttl_ms(unsigned interval_ms)
{
    long long t = (long long)interval_ms * LSTORE_LIVE_TTL_INTERVALS;
    return t < LSTORE_LIVE_TTL_MIN_MS ? LSTORE_LIVE_TTL_MIN_MS : t;
}

long long lstore_quota_ttl_ms(int64_t next, int64_t now)
{
    if (!next)
        return 0;
    long long s = (long long)(next - now) + 86400;
    return (s < 1 ? 1 : s) * 1000;
}

uint64_t lstore_delta(uint64_t snap, uint64_t base)
{
    return snap >= base ? snap - base : snap;
}

uint64_t lstore_adjust(uint64_t cur, uint64_t snap, uint64_t fleet, int *stale)
{
    *stale = cur < snap;
    if (cur < snap)
        return cur;
    uint64_t since = cur - snap;
    return fleet + since < fleet ? UINT64_MAX : fleet + since;
}

#ifdef MTPROXY_HAVE_HIREDIS
long lstore_parse_pairs(const struct redisReply *r, struct lstore_kv **kv)
{
    *kv = NULL;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements % 2)
        return -1;
    size_t n = r->elements / 2;
    if (!n)
        return 0;
    struct lstore_kv *p = malloc(n * sizeof *p);
    if (!p)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const redisReply *k = r->element[2 * i], *v = r->element[2 * i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
            free(p);
            return -1;
        }
        p[i] = (struct lstore_kv){k->str, v->str, k->len, v->len};
    }
    *kv = p;
    return (long)n;
}

/* A reply read the ways a flush reads one: a hash (quota shares, live counts). */
static void interpret(void *reply, void *ctx)
{
    (void)ctx;
    struct lstore_kv *kv;
    long np = lstore_parse_pairs(reply, &kv);
    if (np > 0) {
        uint64_t e;
        lstore_quota_total(kv, (size_t)np, &e, NULL);
        for (long i = 0; i < np; i++) {
            uint32_t c, ip;
            lstore_parse_live(kv[i].v, kv[i].vn, &c, &ip);
        }
    }
    free(kv);
}

int lstore_parse_replies(const char *buf, size_t len)
{
    return rstore_each_reply(buf, len, 1, interpret, NULL);
}
#else
int lstore_parse_replies(const char *buf, size_t len)
{
    (void)buf, (void)len;
    return -1;
}
#endif
