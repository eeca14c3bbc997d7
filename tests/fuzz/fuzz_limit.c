/* fuzz_limit.c: libFuzzer target for the `limit` line parser (users_limit_parse). */
#include "users/users.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: one limit value. What parses must name a user and give at least one limit within
 * its documented range; what fails must say why in a terminated message. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    struct user_limit l;
    char err[256] = "";
    if (users_limit_parse(text, &l, err, sizeof err) == 0) {
        size_t n = strnlen(l.name, sizeof l.name);
        FUZZ_CHECK(n > 0 && n < sizeof l.name);
        FUZZ_CHECK(l.conns || l.ips || l.quota || l.expires || l.rate || l.disabled);
        FUZZ_CHECK(l.disabled == 0 || l.disabled == 1);
        FUZZ_CHECK(l.conns <= 1000000 && l.ips <= 1000000);
        FUZZ_CHECK(!l.rate || (l.rate >= 1024 && l.rate <= (1ULL << 40)));
        FUZZ_CHECK(l.expires >= 0 && l.expires < 253402300800LL); /* before year 10000 */
        /* a quota period only with a quota; its day within the period's range */
        FUZZ_CHECK(l.quota_period <= QP_MONTH && (l.quota || !l.quota_period));
        FUZZ_CHECK(l.quota_period == QP_WEEK ? l.quota_day >= 1 && l.quota_day <= 7
                   : l.quota_period == QP_MONTH ? l.quota_day <= 28 : !l.quota_day);
    } else {
        FUZZ_CHECK(err[0] && fuzz_terminated(err, sizeof err));
    }
    free(text);
    return 0;
}
