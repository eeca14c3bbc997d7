/* fuzz_tlsprofile.c: libFuzzer target for the server flight reader and the profile text form. */
#include "proto/tlsprofile.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: reads past size are caught */
    FUZZ_CHECK(buf);
    if (size)
        memcpy(buf, data, size);
    struct tlsprofile p;
    struct tlsprofile_flight f;
    enum faketls_status st = tlsprofile_parse_flight(buf, size, &p, &f);
    if (st == FAKETLS_OK) {
        FUZZ_CHECK(f.consumed <= size && p.nrec >= 1 && p.nrec <= TLSPROFILE_MAX_RECORDS);
        FUZZ_CHECK(p.version == 0x0304);
    } else if (st == FAKETLS_NEED_MORE) {
        FUZZ_CHECK(f.need >= 1 && f.consumed <= size);
        FUZZ_CHECK(!f.quiet_ok || p.nrec >= 1);
    } else {
        FUZZ_CHECK(st == FAKETLS_BAD && f.why != NULL);
    }
    /* the same bytes as a stored profile: a profile read back formats and reads again alike */
    struct tlsprofile q, r;
    if (tlsprofile_parse_text((const char *)buf, size, &q) == FAKETLS_OK) {
        char text[TLSPROFILE_FILE_MAX];
        size_t tl = tlsprofile_format(&q, text, sizeof text);
        FUZZ_CHECK(tl > 0);
        FUZZ_CHECK(tlsprofile_parse_text(text, tl, &r) == FAKETLS_OK);
        FUZZ_CHECK(r.nrec == q.nrec && !memcmp(r.rec_min, q.rec_min, sizeof r.rec_min) &&
                   !memcmp(r.rec_max, q.rec_max, sizeof r.rec_max) && !strcmp(r.host, q.host));
        size_t lo, hi;
        tlsprofile_appdata_range(&q, 4, &lo, &hi);
        FUZZ_CHECK(lo >= 1 && lo <= hi && hi <= FAKETLS_MAX_CIPHERTEXT);
        char d[256];
        tlsprofile_describe(&q, 0, d, sizeof d);
    }
    free(buf);
    return 0;
}
