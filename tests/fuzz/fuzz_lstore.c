/* fuzz_lstore.c: libFuzzer target for limits-store's reply path (hash and member replies read
 * with the big-array limits) and its value parsers. */
#include "config/lstore.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Values: "CONNS IPS" / "EPOCH BYTES" parse only as two decimal numbers and one blank. */
static void check_values(const char *s, size_t n)
{
    uint32_t c, i;
    uint64_t e, b;
    int live = lstore_parse_live(s, n, &c, &i), share = lstore_parse_share(s, n, &e, &b);
    FUZZ_CHECK(live == 0 || live == -1);
    FUZZ_CHECK(share == 0 || share == -1);
    if (live == 0)
        FUZZ_CHECK(share == 0 && e == c && b == i);
    if (share == 0) {
        const char *sp = memchr(s, ' ', n);
        FUZZ_CHECK(sp && sp != s && sp != s + n - 1);
    }
    /* the same bytes as a hash of pairs split at each newline: a total that never wraps */
    struct lstore_kv kv[16];
    size_t nk = 0, start = 0;
    for (size_t k = 0; k <= n && nk < 16; k++) {
        if (k == n || s[k] == '\n') {
            const char *f = s + start;
            size_t len = k - start;
            const char *eq = memchr(f, '=', len);
            kv[nk++] = eq ? (struct lstore_kv){f, eq + 1, (size_t)(eq - f), len - (size_t)(eq - f) - 1}
                          : (struct lstore_kv){f, f, len, len};
            start = k + 1;
        }
    }
    uint64_t epoch;
    size_t bad;
    uint64_t total = lstore_quota_total(kv, nk, &epoch, &bad);
    FUZZ_CHECK(bad <= nk);
    (void)total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *buf = fuzz_cstr(data + 1, size - 1); /* exact size (+ NUL): ASan sees over-reads */
    if (data[0] & 1) {
        check_values(buf, size - 1);
    } else {
        int n = lstore_parse_replies(buf, size - 1);
        FUZZ_CHECK(n >= -1);
        if (n >= 0) { /* a prefix reads as the whole's first replies */
            int m = lstore_parse_replies(buf, (size - 1) / 2);
            FUZZ_CHECK(m >= 0 && m <= n);
        }
    }
    free(buf);
    return 0;
}
