/* metrics_page.c: the status page, its JSON (/users, /history), and the links' QR codes. */
#include "admin/metrics_page.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/metrics_render.h"
#include "admin/qr.h"
#include "config/prefix.h"
#include "config/reload.h"

/* The status page (src/admin/status.html), embedded at build time. */
extern const char metrics_status_html[];
extern const size_t metrics_status_html_len;

int metrics_page_init(struct metrics_page *p)
{
    p->status_page = httpd_body_new(metrics_status_html, metrics_status_html_len, 0);
    if (!p->status_page)
        return -1;
    p->hist = calloc(1, sizeof *p->hist);
    return 0;
}

void metrics_page_free(struct metrics_page *p)
{
    httpd_body_unref(p->status_page);
    free(p->hist);
    hist_users_free(&p->hist_users);
    free(p->rows);
}

/* /qr/NAME.svg: the t.me link of user NAME of g as a QR code, or NULL. */
static struct httpd_body *qr_body(const struct gen *g, const char *name)
{
    size_t n = strlen(name);
    const struct options *o = &g->opt;
    char host[256];
    int port = options_link_host(o, host, sizeof host);
    for (int i = 0; n > 4 && !strcmp(name + n - 4, ".svg") && i < o->nsecrets; i++) {
        if (strlen(o->secrets[i].name) != n - 4 || memcmp(o->secrets[i].name, name, n - 4))
            continue;
        char tg[1024], https[1024];
        struct sbuf out = {.max = METRICS_BODY_MAX};
        port = prefix_link_host(o, i, host, sizeof host, port);
        if (secret_links(&o->secrets[i], host, port, tg, sizeof tg, https, sizeof https) ||
            qr_svg(https, 4, &out)) {
            sbuf_free(&out);
            return NULL;
        }
        return httpd_body_of(&out);
    }
    return NULL;
}

/* The index of user name in g, or -1. */
static int user_index(const struct gen *g, const char *name)
{
    for (int i = 0; i < g->opt.nsecrets; i++)
        if (!strcmp(g->opt.secrets[i].name, name))
            return i;
    return -1;
}

/* GET /users?offset=&limit=&q=&sort=&order=: one page of the users searched and sorted, no
 * links. NULL with *why set on a bad query (or out of memory). */
static struct httpd_body *users_body(struct metrics_page *s, const struct metrics_shared *ms,
                                     const struct gen *g, const char *query, int links,
                                     const char **why)
{
    struct upage_query uq;
    if (upage_parse(query, &uq, why))
        return NULL;
    *why = "out of memory"; /* from here on, the only failure */
    size_t n = (size_t)g->opt.nsecrets;
    if (n > s->rows_cap) {
        struct upage_row *r = realloc(s->rows, n * sizeof *r);
        if (!r)
            return NULL;
        s->rows = r;
        s->rows_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        struct user_totals ut;
        metrics_user_totals(g, (int)i, &ut);
        s->rows[i] = (struct upage_row){.name = g->opt.secrets[i].name, .idx = (uint32_t)i,
                                        .bytes = ut.bytes_up + ut.bytes_down,
                                        .conns = ut.conns, .active = ut.active,
                                        .quota_used = ut.quota_used};
    }
    size_t k = upage_filter(s->rows, n, uq.q);
    upage_sort(s->rows, k, uq.sort, uq.desc);
    char host[256];
    int port = options_link_host(&g->opt, host, sizeof host);
    struct sbuf out = {.max = METRICS_BODY_MAX};
    struct metrics_totals *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    metrics_totals_collect(ms, t);
    metrics_stats_head(ms, t, links, &out);
    free(t);
    sbuf_printf(&out, ",\"user_addr\":%s,\"total\":%zu,\"matched\":%zu,\"offset\":%zu,"
                "\"limit\":%zu,\"sort\":\"%s\",\"order\":\"%s\",\"users\":[",
                g->opt.user_addr ? "true" : "false", n, k, uq.offset, uq.limit,
                upage_sort_name(uq.sort), uq.desc ? "desc" : "asc");
    for (size_t i = uq.offset; i < k && i < uq.offset + uq.limit; i++) {
        sbuf_printf(&out, "%s", i > uq.offset ? "," : "");
        metrics_user_json(g, (int)s->rows[i].idx, host, port, 0, &out);
    }
    sbuf_printf(&out, "]}\n");
    return httpd_body_of(&out);
}

/* GET /users/NAME: user NAME with its links (if links), or NULL (no such user). */
static struct httpd_body *user_body(const struct gen *g, const char *path, int links)
{
    char name[SECRET_NAME_MAX + 1];
    int i;
    if (http_pct_decode(path, strlen(path), name, sizeof name, 0) < 0 ||
        (i = user_index(g, name)) < 0)
        return NULL;
    char host[256];
    int port = options_link_host(&g->opt, host, sizeof host);
    struct sbuf out = {.max = METRICS_BODY_MAX};
    sbuf_printf(&out, "{\"links\":%s,\"user\":", links ? "true" : "false");
    metrics_user_json(g, i, host, port, links, &out);
    sbuf_printf(&out, "}\n");
    return httpd_body_of(&out);
}

/* GET /history (name NULL) or /history/NAME: the last hour per second. A user's is kept
 * from the first time it is asked for (HIST_USERS users at most: the least recently viewed
 * is dropped). NULL: no such user, or out of memory. */
static struct httpd_body *history_body(struct metrics_page *s, const struct gen *g,
                                       const char *path)
{
    const struct hist_ring *r = s->hist;
    char name[SECRET_NAME_MAX + 1] = "";
    if (path) {
        if (http_pct_decode(path, strlen(path), name, sizeof name, 0) < 0 ||
            user_index(g, name) < 0)
            return NULL;
        r = hist_users_get(&s->hist_users, name, httpd_clock(CLOCK_MONOTONIC));
    }
    if (!r)
        return NULL;
    struct sbuf out = {.max = METRICS_BODY_MAX};
    sbuf_printf(&out, "{\"user\":");
    if (path)
        sbuf_printf(&out, "\"%s\"", name);
    else
        sbuf_printf(&out, "null");
    sbuf_printf(&out, ",\"users_kept\":%d,\"history\":", HIST_USERS);
    hist_json(r, &out);
    sbuf_printf(&out, "}\n");
    return httpd_body_of(&out);
}

/* On the server's thread: nothing runs on the relays' loops. */
void metrics_page_sample(struct metrics_page *s, const struct metrics_shared *ms,
                         const struct gen *g)
{
    int64_t now = (int64_t)httpd_clock(CLOCK_MONOTONIC);
    struct metrics_totals *tt = malloc(sizeof *tt);
    if (s->hist && tt) {
        metrics_totals_collect(ms, tt);
        hist_sample(s->hist, now, STAT_GET(&tt->s.bytes_up) + STAT_GET(&tt->s.bytes_down),
                    STAT_GET(&tt->s.accepted), STAT_GET(&tt->s.active));
    }
    free(tt);
    for (int k = 0; k < HIST_USERS; k++) {
        struct hist_user *hu = &s->hist_users.u[k];
        int i = hu->name[0] && hu->ring ? user_index(g, hu->name) : -1;
        struct user_totals ut = {0};
        if (i >= 0)
            metrics_user_totals(g, i, &ut);
        if (hu->name[0] && hu->ring) /* a user gone counts nothing */
            hist_sample(hu->ring, now, ut.bytes_up + ut.bytes_down, ut.conns, ut.active);
    }
}

/* Serves the user list, one user and the history; 0 if path is not one of them. */
static int serve_userpage(struct metrics_page *s, const struct metrics_shared *ms,
                          const struct gen *g, struct httpd_conn *m,
                          const struct http_request *rq, int links, int head)
{
    struct httpd_body *body = NULL;
    if (!strcmp(rq->path, "/users")) {
        char query[METRICS_REQ_MAX];
        const char *why = NULL;
        httpd_conn_query(m, query, sizeof query);
        if (!(body = users_body(s, ms, g, query, links, &why))) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s\n", why);
            httpd_respond_text(m, strcmp(why, "out of memory") ? 400 : 503, msg, head);
            return 1;
        }
    } else if (!strncmp(rq->path, "/users/", 7)) {
        body = user_body(g, rq->path + 7, links);
    } else if (!strcmp(rq->path, "/history")) {
        body = history_body(s, g, NULL);
    } else if (!strncmp(rq->path, "/history/", 9)) {
        body = history_body(s, g, rq->path + 9);
    } else {
        return 0;
    }
    if (!body)
        httpd_respond_text(m, 404, "no such user\n", head);
    else
        httpd_respond(m, 200, "application/json", body, NULL, head);
    return 1;
}

int metrics_page_serve(struct metrics_page *p, const struct metrics_shared *ms,
                       const struct gen *g, struct httpd_conn *c, const struct http_request *rq,
                       int links)
{
    int head = rq->method == HTTP_HEAD;
    struct httpd_body *body;
    if (!strcmp(rq->path, "/")) {
        if (!(body = p->status_page)) {
            httpd_respond_text(c, 503, "out of memory\n", head);
            return 1;
        }
        body->refs++;
        httpd_respond(c, 200, "text/html; charset=utf-8", body, NULL, head);
        return 1;
    }
    if (serve_userpage(p, ms, g, c, rq, links, head))
        return 1;
    if (strncmp(rq->path, "/qr/", 4) || !links)
        return 0;
    if (!(body = qr_body(g, rq->path + 4)))
        httpd_respond_text(c, 404, "no such user, or no QR codes in this build\n", head);
    else
        httpd_respond(c, 200, "image/svg+xml", body, NULL, head);
    return 1;
}
