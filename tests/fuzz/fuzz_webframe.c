/* fuzz_webframe.c: libFuzzer target for WEB shared frames: parse, rebuild, checks, state steps. */
#include <inttypes.h>

#include "proto/webframe.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Applies a frame that passed webframe_check to the session and stream states; a verdict other
 * than ACCEPT must leave the state as it was. */
static void apply(const struct webframe *f, enum webframe_dir dir, struct webframe_session *s,
                  struct webframe_stream *streams)
{
    struct webframe_session s0 = *s;
    enum webframe_verdict v = webframe_session_step(s, f, dir);
    FUZZ_CHECK(v == WEBFRAME_ACCEPT || v == WEBFRAME_FATAL);
    if (v != WEBFRAME_ACCEPT) {
        FUZZ_CHECK(memcmp(&s0, s, sizeof s0) == 0);
        return;
    }
    if (f->stream == 0)
        return;
    struct webframe_stream *st = &streams[f->stream % 8], st0 = *st;
    v = webframe_stream_step(st, f, dir);
    if (v != WEBFRAME_ACCEPT)
        FUZZ_CHECK(memcmp(&st0, st, sizeof st0) == 0);
    if (v == WEBFRAME_ACCEPT && f->type == WEBFRAME_DATA) {
        uint32_t before = dir == WEBFRAME_UP ? st0.up_credit : st0.down_credit;
        uint32_t after = dir == WEBFRAME_UP ? st->up_credit : st->down_credit;
        FUZZ_CHECK(before - after == f->len);
    }
}

/* The header value reading: what it accepts prints back as the same digits. */
static void decimal(const uint8_t *data, size_t size)
{
    size_t n = size < 24 ? size : 24;
    char *s = fuzz_cstr(data, n), back[32];
    uint64_t v;
    if (webframe_decimal(s, n, &v) == 0) {
        snprintf(back, sizeof back, "%" PRIu64, v);
        FUZZ_CHECK(strlen(back) == n && memcmp(back, s, n) == 0);
    }
    free(s);
}

/* Input: a carrier body. Its frames are taken one after another; each must rebuild to the same
 * bytes, its shorter prefixes must ask for more, and webframe_batch must agree with the walk. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1), *again = malloc(WEBFRAME_HDR_LEN + 4096);
    if (!buf || !again)
        abort();
    if (size)
        memcpy(buf, data, size);
    decimal(data, size);
    size_t max_payload = 4096, off = 0, frames = 0, count = 0;
    struct webframe_session s = {0};
    struct webframe_stream streams[8] = {{0}};
    while (off < size) {
        struct webframe f;
        size_t need = 0;
        enum webframe_status st = webframe_parse(buf + off, size - off, max_payload, &f, &need);
        if (st == WEBFRAME_NEED_MORE)
            FUZZ_CHECK(need > size - off && need <= WEBFRAME_HDR_LEN + max_payload);
        if (st != WEBFRAME_OK)
            break;
        FUZZ_CHECK(f.total == WEBFRAME_HDR_LEN + (size_t)f.len && f.total <= size - off);
        FUZZ_CHECK(f.len <= max_payload && f.stream <= WEBFRAME_MAX_STREAM);
        FUZZ_CHECK(f.payload == buf + off + WEBFRAME_HDR_LEN);
        size_t n = webframe_build(f.type, f.stream, f.payload, f.len, again,
                                  WEBFRAME_HDR_LEN + 4096);
        FUZZ_CHECK(n == f.total && memcmp(again, buf + off, n) == 0);
        for (size_t i = 0; i < f.total && i < 16; i++) {
            struct webframe g;
            FUZZ_CHECK(webframe_parse(buf + off, i, max_payload, &g, &need) ==
                       WEBFRAME_NEED_MORE);
        }
        for (int dir = WEBFRAME_UP; dir <= WEBFRAME_DOWN; dir++)
            if (webframe_check(&f, (enum webframe_dir)dir) == 0)
                apply(&f, (enum webframe_dir)dir, &s, streams);
        off += f.total;
        frames++;
    }
    enum webframe_status b = webframe_batch(buf, size, max_payload, &count);
    int whole = size > 0 && off == size && frames <= WEBFRAME_MAX_BATCH;
    FUZZ_CHECK(b == (whole ? WEBFRAME_OK : WEBFRAME_BAD));
    FUZZ_CHECK(!whole || count == frames);
    free(again);
    free(buf);
    return 0;
}
