/* fuzz_faketls_deframe.c: libFuzzer target for the FakeTLS record deframer, against a model. */
#include "proto/faketls.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The model: the payload of a well-formed stream, or where the stream first goes wrong.
 * Returns the payload length; *bad_at is the index of the first bad byte (or SIZE_MAX). */
static size_t model(const uint8_t *s, size_t n, uint8_t *out, size_t *bad_at) {
    size_t i = 0, w = 0;
    *bad_at = SIZE_MAX;
    while (i < n) {
        uint8_t type = s[i];
        if (type != FAKETLS_TYPE_CCS && type != FAKETLS_TYPE_APPDATA)
            return *bad_at = i, w;
        if (i + 1 < n && s[i + 1] != 3)
            return *bad_at = i + 1, w;
        if (i + 2 < n && s[i + 2] != 3)
            return *bad_at = i + 2, w;
        if (i + FAKETLS_RECORD_HDR_LEN > n)
            return w; /* a header cut short: fine so far */
        size_t len = (size_t)s[i + 3] << 8 | s[i + 4];
        i += FAKETLS_RECORD_HDR_LEN;
        if (len == 0 || len > FAKETLS_MAX_CIPHERTEXT || (type == FAKETLS_TYPE_CCS && len != 1))
            return *bad_at = i - 1, w;
        size_t have = n - i < len ? n - i : len;
        if (type == FAKETLS_TYPE_CCS) {
            if (have && s[i] != 1)
                return *bad_at = i, w;
        } else {
            memcpy(out + w, s + i, have);
            w += have;
        }
        i += have;
    }
    return w;
}

/* Input: one byte choosing how the stream is cut into reads, then the stream. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    unsigned cut = data[0];
    const uint8_t *s = data + 1;
    size_t n = size - 1;
    uint8_t *want = malloc(n + 1), *got = malloc(n + 1);
    FUZZ_CHECK(want && got);
    size_t bad_at;
    size_t wlen = model(s, n, want, &bad_at);

    struct faketls_deframer d;
    faketls_deframer_init(&d);
    size_t pos = 0, glen = 0, step = 1 + (cut & 0x3f);
    int bad = 0;
    while (pos < n) {
        size_t len = step;
        if (cut & 0x80) /* varying sizes, from the stream itself */
            len = 1 + (s[pos] % (step + 1));
        if (len > n - pos)
            len = n - pos;
        uint8_t *chunk = malloc(len); /* exact size: the deframer must stay inside */
        FUZZ_CHECK(chunk);
        memcpy(chunk, s + pos, len);
        size_t out_len = 12345;
        enum faketls_status st = faketls_deframe(&d, chunk, len, &out_len);
        if (st == FAKETLS_OK) {
            FUZZ_CHECK(!bad && out_len <= len);
            memcpy(got + glen, chunk, out_len);
            glen += out_len;
            FUZZ_CHECK(bad_at == SIZE_MAX || bad_at >= pos + len);
        } else {
            FUZZ_CHECK(st == FAKETLS_BAD && out_len == 0);
            FUZZ_CHECK(d.reason != FAKETLS_R_NONE && faketls_reason_name(d.reason));
            if (!bad) /* the first failure is in the read holding the first bad byte */
                FUZZ_CHECK(bad_at >= pos && bad_at < pos + len);
            bad = 1;
        }
        free(chunk);
        pos += len;
    }
    FUZZ_CHECK(bad == (bad_at != SIZE_MAX));
    if (bad)
        FUZZ_CHECK(glen <= wlen && !memcmp(got, want, glen));
    else
        FUZZ_CHECK(glen == wlen && !memcmp(got, want, glen));
    free(want);
    free(got);
    return 0;
}
