/* frame.c: client transport framings (abridged, intermediate, padded intermediate). */
#include "proto/frame.h"

#include "proto/obfs2.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

enum frame_status frame_parse(uint32_t tag, const uint8_t *p, size_t n, struct frame *f,
                              size_t *need)
{
    size_t hdr, len, total;
    int qa;
    if (tag == OBFS2_TAG_ABRIDGED) {
        if (n < 1)
            goto more1;
        qa = p[0] >> 7;
        len = p[0] & 0x7f;
        hdr = 1;
        if (len == 0x7f) {
            if (n < 4) {
                if (need)
                    *need = 4;
                return FRAME_NEED_MORE;
            }
            len = (size_t)p[1] | (size_t)p[2] << 8 | (size_t)p[3] << 16;
            if (len < 0x7f)
                return FRAME_BAD;
            hdr = 4;
        }
        len *= 4;
        total = hdr + len;
    } else if (tag == OBFS2_TAG_INTERMEDIATE || tag == OBFS2_TAG_PADDED) {
        if (n < 4) {
            if (need)
                *need = 4;
            return FRAME_NEED_MORE;
        }
        uint32_t v = le32(p);
        qa = (int)(v >> 31);
        v &= 0x7fffffffu;
        hdr = 4;
        total = 4 + (size_t)v;
        if (tag == OBFS2_TAG_INTERMEDIATE) {
            if (v % 4)
                return FRAME_BAD;
            len = v;
        } else {
            len = v & ~3u;
        }
        if (v > FRAME_MAX_LEN + 15)
            return FRAME_BAD;
    } else {
        return FRAME_BAD;
    }
    if (len == 0 || len > FRAME_MAX_LEN)
        return FRAME_BAD;
    if (n < total) {
        if (need)
            *need = total;
        return FRAME_NEED_MORE;
    }
    f->hdr_len = hdr;
    f->len = len;
    f->total = total;
    f->quickack = qa;
    return FRAME_OK;
more1:
    if (need)
        *need = 1;
    return FRAME_NEED_MORE;
}

size_t frame_header(uint32_t tag, size_t len, size_t pad, uint8_t out[4])
{
    if (len % 4 || len > FRAME_MAX_LEN)
        return 0;
    if (tag == OBFS2_TAG_ABRIDGED) {
        size_t w = len / 4;
        if (w < 0x7f) {
            out[0] = (uint8_t)w;
            return 1;
        }
        out[0] = 0x7f;
        out[1] = (uint8_t)w;
        out[2] = (uint8_t)(w >> 8);
        out[3] = (uint8_t)(w >> 16);
        return 4;
    }
    if (tag != OBFS2_TAG_INTERMEDIATE && tag != OBFS2_TAG_PADDED)
        return 0;
    size_t v = len + (tag == OBFS2_TAG_PADDED ? pad : 0);
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
    out[3] = (uint8_t)(v >> 24);
    return 4;
}

void frame_quickack(uint32_t tag, uint32_t confirm, uint8_t out[4])
{
    if (tag == OBFS2_TAG_ABRIDGED) {
        out[0] = (uint8_t)(confirm >> 24);
        out[1] = (uint8_t)(confirm >> 16);
        out[2] = (uint8_t)(confirm >> 8);
        out[3] = (uint8_t)confirm;
    } else {
        out[0] = (uint8_t)confirm;
        out[1] = (uint8_t)(confirm >> 8);
        out[2] = (uint8_t)(confirm >> 16);
        out[3] = (uint8_t)(confirm >> 24);
    }
}
