/* qr.c: QR codes of links through libqrencode (Debian libqrencode-dev); none without it. */
#include "admin/qr.h"

#include <stdlib.h>
#include <string.h>

#ifdef MTPROXY_HAVE_QRENCODE
#include <qrencode.h>

#define QUIET 4

/* The code of text, or NULL. Dark module (x, y): q->data[y * q->width + x] & 1. */
static QRcode *encode(const char *text)
{
    return QRcode_encodeString8bit(text, 0, QR_ECLEVEL_M);
}

static int dark(const QRcode *q, int x, int y)
{
    if (x < 0 || y < 0 || x >= q->width || y >= q->width)
        return 0;
    return q->data[y * q->width + x] & 1;
}

int qr_available(void)
{
    return 1;
}

int qr_svg(const char *text, int scale, struct sbuf *out)
{
    QRcode *q = encode(text);
    if (!q)
        return -1;
    int size = q->width + 2 * QUIET;
    sbuf_printf(out,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" "
                "height=\"%d\" shape-rendering=\"crispEdges\"><rect width=\"%d\" height=\"%d\" "
                "fill=\"#fff\"/><path fill=\"#000\" d=\"",
                size, size, size * scale, size * scale, size, size);
    /* One run of dark modules in a row is one rectangle. */
    for (int y = 0; y < q->width; y++) {
        for (int x = 0; x < q->width;) {
            if (!dark(q, x, y)) {
                x++;
                continue;
            }
            int s = x;
            while (x < q->width && dark(q, x, y))
                x++;
            sbuf_printf(out, "M%d %dh%dv1h-%dz", s + QUIET, y + QUIET, x - s, x - s);
        }
    }
    sbuf_printf(out, "\"/></svg>\n");
    QRcode_free(q);
    return out->failed ? -1 : 0;
}

int qr_terminal(const char *text, FILE *f)
{
    QRcode *q = encode(text);
    if (!q)
        return -1;
    /* Light is drawn, dark is left blank: upper half block = top light, bottom dark. */
    static const char *const cell[4] = {" ", "\xe2\x96\x84", "\xe2\x96\x80", "\xe2\x96\x88"};
    for (int y = -QUIET; y < q->width + QUIET; y += 2) {
        for (int x = -QUIET; x < q->width + QUIET; x++) {
            int top = !dark(q, x, y), bottom = y + 1 >= q->width + QUIET || !dark(q, x, y + 1);
            fputs(cell[top * 2 + bottom], f);
        }
        fputc('\n', f);
    }
    QRcode_free(q);
    return 0;
}

#else

int qr_available(void)
{
    return 0;
}

int qr_svg(const char *text, int scale, struct sbuf *out)
{
    return -1;
}

int qr_terminal(const char *text, FILE *f)
{
    return -1;
}

#endif
