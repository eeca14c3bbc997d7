/* fuzz_frame.c: libFuzzer target for the client framings (frame_parse), prefix-consistent. */
#include "proto/frame.h"
#include "proto/obfs2.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: first byte picks the framing, the rest is what the client sent (decrypted). Frames
 * are taken one after another; every OK frame's shorter prefixes are NEED_MORE. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const uint32_t tags[3] = {OBFS2_TAG_ABRIDGED, OBFS2_TAG_INTERMEDIATE,
                                     OBFS2_TAG_PADDED};
    uint32_t tag = tags[data[0] % 3];
    size--;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data + 1, size);
    size_t off = 0;
    while (off < size) {
        struct frame f;
        size_t need = 0;
        enum frame_status st = frame_parse(tag, buf + off, size - off, &f, &need);
        if (st == FRAME_NEED_MORE) {
            FUZZ_CHECK(need > size - off);
            break;
        }
        if (st == FRAME_BAD)
            break;
        FUZZ_CHECK(f.total <= size - off && f.hdr_len + f.len <= f.total && f.len > 0);
        FUZZ_CHECK(f.len % 4 == 0 && f.len <= FRAME_MAX_LEN);
        for (size_t i = 0; i < f.total && i < 64; i++) {
            struct frame g;
            FUZZ_CHECK(frame_parse(tag, buf + off, i, &g, &need) == FRAME_NEED_MORE);
        }
        uint8_t h[4];
        FUZZ_CHECK(frame_header(tag, f.len, 0, h) > 0);
        off += f.total;
    }
    free(buf);
    return 0;
}
