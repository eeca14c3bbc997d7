/* counters.c: the counter table as data, and what is made from it: the sum, the SIGUSR1 lines, /stats's summary. */
#include "conn/counters.h"

#include <stdio.h>

#include "core/sbuf.h"
#include "conn/conn.h"

#define ROW_F(m, t, h) {.kind = CROW_FAMILY, .name = m, .type = ROW_TYPE_##t, .help = h},
#define ROW_TYPE_COUNTER "counter"
#define ROW_TYPE_GAUGE "gauge"
#define ROW_C(f, s, j, l)                                                                      \
    {.kind = CROW_COUNTER, .name = #f, .off = offsetof(struct proxy_stats, f), s, j, l},
#define ROW_V(x, s)                                                                            \
    {.kind = CROW_VIEW, .name = #x, .off = offsetof(struct proxy_stats, x), s},
#define ROW_A(f, d) {.kind = CROW_ARRAY, .name = #f, .off = offsetof(struct proxy_stats, f)},
#define ROW_H(id) {.kind = CROW_HAND, .name = #id, .hand = CH_##id},

const struct counters_row counters_rows[] = {PROXY_COUNTERS(ROW_F, ROW_C, ROW_V, ROW_A, ROW_H)};
const size_t counters_nrows = sizeof counters_rows / sizeof counters_rows[0];

/* The counter at byte offset off of s. */
static const stat_t *at(const struct proxy_stats *s, size_t off)
{
    return (const stat_t *)((const char *)s + off);
}

/* Adds the counters in bytes [off, off + size) of src into dst's. */
static void add_span(struct proxy_stats *dst, const struct proxy_stats *src, size_t off,
                     size_t size)
{
    for (size_t o = off; o < off + size; o += sizeof(stat_t))
        STAT_ADD((stat_t *)((char *)dst + o), STAT_GET(at(src, o)));
}

#define ADD_C(f, s, j, l) add_span(dst, src, offsetof(struct proxy_stats, f), sizeof dst->f);
#define ADD_A(f, d) ADD_C(f, , , )

void proxy_stats_add(struct proxy_stats *dst, const struct proxy_stats *src)
{
    PROXY_COUNTERS(COUNTERS_NONE_F, ADD_C, COUNTERS_NONE_V, ADD_A, COUNTERS_NONE_H)
}

uint64_t counters_get(const struct proxy_stats *s, const struct counters_row *r)
{
    return STAT_GET(at(s, r->off));
}

char *counters_log_line(const struct proxy_stats *s, enum counters_log line, char *buf,
                        size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int pos = 0, found = 1; found; pos++) {
        found = 0;
        for (size_t i = 0; i < counters_nrows && !found; i++) {
            const struct counters_row *r = &counters_rows[i];
            if (r->kind != CROW_COUNTER || !r->log || r->log_line != (int)line ||
                r->log_pos != pos)
                continue;
            found = 1;
            if (n < len)
                n += (size_t)snprintf(buf + n, len - n, " %s %llu", r->log,
                                      (unsigned long long)counters_get(s, r));
        }
    }
    return buf;
}

void counters_json_summary(const struct proxy_stats *s, struct sbuf *out)
{
    sbuf_printf(out, "{");
    for (int pos = 0, found = 1; found; pos++) {
        const char *key = NULL;
        uint64_t v = 0;
        for (size_t i = 0; i < counters_nrows; i++) {
            const struct counters_row *r = &counters_rows[i];
            if (r->kind == CROW_COUNTER && r->json && r->json_pos == pos) {
                key = r->json;
                v += counters_get(s, r);
            }
        }
        found = key != NULL;
        if (found)
            sbuf_printf(out, "%s\"%s\":%llu", pos ? "," : "", key, (unsigned long long)v);
    }
    sbuf_printf(out, "}");
}
