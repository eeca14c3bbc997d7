/* fuzz_proxyproto.c: libFuzzer target for proxyproto_parse, with prefix-consistency checks. */
#include "proto/proxyproto.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: the bytes a client sends first. The parse must be consistent across reads: on OK,
 * every shorter prefix of the header is NEED_MORE and the header alone parses the same; on
 * NEED_MORE, need is past what was given; a BAD verdict never turns good with more bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees any over-read */
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    const size_t cap = 512;
    struct proxyproto_result r;
    enum proxyproto_status st = proxyproto_parse(buf, size, cap, &r);
    if (st == PROXYPROTO_NEED_MORE) {
        FUZZ_CHECK(r.need > size);
    } else if (st == PROXYPROTO_BAD) {
        FUZZ_CHECK(r.why != NULL);
    } else {
        FUZZ_CHECK(st == PROXYPROTO_OK);
        FUZZ_CHECK(r.consumed > 0 && r.consumed <= size);
        FUZZ_CHECK(r.version == 1 || r.version == 2);
        FUZZ_CHECK(r.consumed <= (r.version == 1 ? (size_t)PROXYPROTO_V1_MAX : cap));
        if (r.kind == PROXYPROTO_PROXIED) {
            FUZZ_CHECK(r.src.ss_family == AF_INET || r.src.ss_family == AF_INET6);
            FUZZ_CHECK(r.dst.ss_family == r.src.ss_family);
        }
        struct proxyproto_result again;
        FUZZ_CHECK(proxyproto_parse(buf, r.consumed, cap, &again) == PROXYPROTO_OK);
        FUZZ_CHECK(again.consumed == r.consumed && again.kind == r.kind);
        FUZZ_CHECK(!memcmp(&again.src, &r.src, sizeof r.src));
        for (size_t i = 0; i < r.consumed; i++) {
            struct proxyproto_result p;
            FUZZ_CHECK(proxyproto_parse(buf, i, cap, &p) == PROXYPROTO_NEED_MORE);
            FUZZ_CHECK(p.need > i && p.need <= r.consumed);
        }
    }
    if (st == PROXYPROTO_BAD) {
        /* Any prefix that already is BAD stays BAD at full length (checked the other way:
         * a prefix that is OK would have made the whole OK). */
        for (size_t i = 1; i < size && i < 128; i++) {
            struct proxyproto_result p;
            FUZZ_CHECK(proxyproto_parse(buf, i, cap, &p) != PROXYPROTO_OK);
        }
    }
    free(buf);
    return 0;
}
