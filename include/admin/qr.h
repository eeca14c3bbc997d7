/* qr.h: QR codes of proxy links (libqrencode) as SVG for the status page and as block characters for a terminal. */
#ifndef MTPROXY_PROXY_QR_H
#define MTPROXY_PROXY_QR_H

#include <stdio.h>

#include "core/sbuf.h"

/* 1 if this build can draw QR codes (libqrencode was found), else 0. */
int qr_available(void);

/* Appends an SVG image of text's QR code (error correction M, 4-module quiet zone, one path
 * of dark modules, scale px per module) to out. Returns 0, or -1 (no libqrencode, text too
 * long, out of memory). */
int qr_svg(const char *text, int scale, struct sbuf *out);

/* Writes text's QR code to f with Unicode half blocks (two module rows per text line, dark
 * modules drawn as the background so it scans on a dark terminal too: light modules are
 * full/half blocks). Returns 0, or -1. */
int qr_terminal(const char *text, FILE *f);

#endif
