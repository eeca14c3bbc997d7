/* website.c: the ordinary site behind WEB mode: web-root's files or a built-in page, and 404. */
#include "web/webint.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *reason(int code)
{
    switch (code) {
    case 200: return "OK";
    case 204: return "No Content";
    case 404: return "Not Found";
    case 502: return "Bad Gateway";
    case 504: return "Gateway Timeout";
    default: return "Service Unavailable";
    }
}

void web_respond(struct httpd_conn *c, int code, const char *extra, const char *type,
                 struct httpd_body *body, int head_only)
{
    char len[160] = "";
    if (code != 204)
        snprintf(len, sizeof len, "Content-Type: %s\r\nContent-Length: %zu\r\n", type,
                 body ? body->len : 0);
    int n = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 %d %s\r\n%sConnection: close\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n%s\r\n",
                     code, reason(code), len, extra);
    c->head_len = n < 0 ? 0 : (size_t)n < sizeof c->head ? (size_t)n : sizeof c->head - 1;
    if (head_only || code == 204) {
        httpd_body_unref(body);
        body = NULL;
    }
    c->body = body;
}

static const char site_index[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width\"><title>Welcome</title></head>\n"
    "<body><h1>Welcome</h1><p>This site is being set up. Please come back later.</p></body>"
    "</html>\n";

static const char site_404[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>404 Not Found"
    "</title></head>\n<body><h1>Not Found</h1><p>The requested URL was not found on this "
    "server.</p></body></html>\n";

static const char *type_of(const char *path)
{
    static const char *const types[][2] = {
        {".html", "text/html; charset=utf-8"}, {".htm", "text/html; charset=utf-8"},
        {".css", "text/css"},                  {".js", "text/javascript"},
        {".json", "application/json"},         {".txt", "text/plain; charset=utf-8"},
        {".svg", "image/svg+xml"},             {".png", "image/png"},
        {".jpg", "image/jpeg"},                {".jpeg", "image/jpeg"},
        {".gif", "image/gif"},                 {".ico", "image/x-icon"},
        {".webp", "image/webp"},               {".woff2", "font/woff2"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i][0]))
            return types[i][1];
    return "application/octet-stream";
}

/* 1 if path is a plain absolute path: [A-Za-z0-9._~/-] only, no "..", no "//". */
static int path_plain(const char *path)
{
    if (path[0] != '/' || strstr(path, "..") || strstr(path, "//"))
        return 0;
    return strspn(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._~/-") ==
           strlen(path);
}

/* The regular file at full (at most WEB_SITE_MAX bytes) as a body; NULL if none. */
static struct httpd_body *file_read(const char *full)
{
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return NULL;
    char *p = NULL;
    size_t n = 0;
    if (!fstat(fd, &st) && S_ISREG(st.st_mode) && (size_t)st.st_size <= WEB_SITE_MAX &&
        (p = malloc((size_t)st.st_size + 1))) {
        while (n < (size_t)st.st_size) {
            ssize_t k = read(fd, p + n, (size_t)st.st_size - n);
            if (k <= 0)
                break;
            n += (size_t)k;
        }
    }
    close(fd);
    struct httpd_body *b = p && n == (size_t)st.st_size ? httpd_body_new(p, n, 1) : NULL;
    if (!b)
        free(p);
    return b;
}

/* path's file under root (a directory's index.html) as a body and its type; NULL if none. */
static struct httpd_body *site_file(const char *root, const char *path, const char **type)
{
    char full[OPT_PATH_MAX + HTTP_PATH_MAX + 16];
    if (!path_plain(path))
        return NULL;
    size_t len = strlen(path);
    snprintf(full, sizeof full, "%s%s%s", root, path, path[len - 1] == '/' ? "index.html" : "");
    struct stat st;
    if (!stat(full, &st) && S_ISDIR(st.st_mode))
        snprintf(full, sizeof full, "%s%s/index.html", root, path);
    *type = type_of(full);
    return file_read(full);
}

void website_answer(const struct webhttp *h, struct httpd_conn *c, int method, const char *path)
{
    int head = method == HTTP_HEAD;
    const char *type = "text/html; charset=utf-8";
    struct httpd_body *b = NULL;
    if (method == HTTP_GET || head) {
        if (h->root[0])
            b = site_file(h->root, path, &type);
        else if (!strcmp(path, "/") || !strcmp(path, "/index.html"))
            b = httpd_body_new(site_index, sizeof site_index - 1, 0);
        if (b) {
            web_respond(c, 200, "", type, b, head);
            return;
        }
    }
    if (h->root[0])
        b = site_file(h->root, "/404.html", &type);
    if (!b) {
        type = "text/html; charset=utf-8";
        b = httpd_body_new(site_404, sizeof site_404 - 1, 0);
    }
    web_respond(c, 404, "", type, b, head);
}
