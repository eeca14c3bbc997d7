/* metrics_page.h: the metrics server's status page: the page, its JSON, QR codes, history. */
#ifndef MTPROXY_ADMIN_METRICS_PAGE_H
#define MTPROXY_ADMIN_METRICS_PAGE_H

#include <stddef.h>

#include "http/httpd.h"
#include "admin/metrics.h"
#include "admin/userpage.h"
#include "proto/http.h"

/* What the page keeps between requests (only the server's thread touches it). */
struct metrics_page {
    struct httpd_body *status_page; /* src/admin/status.html (static memory) */
    struct hist_ring *hist;         /* the whole proxy's history (NULL: out of memory) */
    struct hist_users hist_users;   /* the users being viewed */
    struct upage_row *rows;         /* the user list's rows, one per user */
    size_t rows_cap;
};

/* Sets up p (zeroed before). Returns 0, or -1 (out of memory: p holds nothing). */
int metrics_page_init(struct metrics_page *p);

/* Frees what p holds. */
void metrics_page_free(struct metrics_page *p);

/* Once a second: ms's counters (relaxed reads, as /stats) and those of the users being viewed
 * (g's) into the history rings. */
void metrics_page_sample(struct metrics_page *p, const struct metrics_shared *ms,
                         const struct gen *g);

/* Serves GET / (the page), /users, /users/NAME, /history, /history/NAME and, with links,
 * /qr/NAME.svg from ms and g: sets c's response (httpd_respond) and returns 1; 0 if rq's path
 * is none of them (c untouched). links: the users' links may be shown. */
int metrics_page_serve(struct metrics_page *p, const struct metrics_shared *ms,
                       const struct gen *g, struct httpd_conn *c, const struct http_request *rq,
                       int links);

#endif
