/* http.h: a strict, bounded HTTP/1.x request-head parser for the metrics server (pure: bytes in, verdict out). */
#ifndef MTPROXY_PROTO_HTTP_H
#define MTPROXY_PROTO_HTTP_H

#include <stddef.h>
#include <stdint.h>

/*
 * A request head (RFC 9112), CRLF line ends only:
 *   METHOD SP /path[?query] SP HTTP/1.0|HTTP/1.1 CRLF
 *   (NAME ":" OWS VALUE OWS CRLF){0..max_headers}
 *   CRLF
 * METHOD is GET or HEAD (others: BAD, status 405); the target must be origin-form (starts
 * with '/', printable ASCII, no '#'); header names are tokens, values printable ASCII or
 * HTAB; obs-fold (a line starting with SP/HTAB), a request body (Content-Length other than 0,
 * any Transfer-Encoding) and bare LF are BAD. From the query only `token` is taken
 * (percent-decoded); from the headers only `Authorization: Bearer TOKEN` and `Host` (a second
 * Host, or one longer than HTTP_HOST_MAX - 1 bytes, is BAD, 400).
 */
#define HTTP_PATH_MAX 256
#define HTTP_TOKEN_MAX 256
#define HTTP_HOST_MAX 272 /* a DNS name, ':' and a port */

enum http_status { HTTP_OK = 0, HTTP_NEED_MORE = 1, HTTP_BAD = -1 };

enum http_method { HTTP_GET = 0, HTTP_HEAD, HTTP_POST, HTTP_PUT, HTTP_PATCH, HTTP_DELETE };

struct http_request {
    size_t consumed;              /* OK: length of the head (through the empty line) */
    enum http_method method;
    int minor;                    /* HTTP/1.minor */
    char path[HTTP_PATH_MAX];     /* the target before '?', as sent (not decoded) */
    char token[HTTP_TOKEN_MAX];   /* ?token= value, percent-decoded ("" if absent) */
    char bearer[HTTP_TOKEN_MAX];  /* Authorization: Bearer value ("" if absent) */
    char host[HTTP_HOST_MAX];     /* the Host header's value ("" if absent) */
    int has_token, has_bearer, has_host;
    int nheaders;
    size_t max_body;              /* as given to http_parse_request_body (0: no body) */
    size_t content_length;        /* the body's length (0: none); it follows the head */
    int has_length;
    int code;                     /* BAD: the status to answer with (400, 405, 413, 414, 431, 505) */
    const char *why;              /* BAD: what was wrong (a static string) */
};

/* Parses the request head at buf[0..len). max bounds the head: if no complete head is within
 * the first max bytes it is BAD (431). Returns OK (out filled; bytes after out->consumed are
 * not looked at), NEED_MORE (no empty line yet, nothing bad so far) or BAD (out->code,
 * out->why) as soon as a complete line is bad. A BAD prefix stays BAD with more bytes. Reads
 * only buf[0..len). */
enum http_status http_parse_request(const uint8_t *buf, size_t len, size_t max,
                                    size_t max_headers, struct http_request *out);

/* As http_parse_request, but with max_body > 0 the methods POST, PUT, PATCH and DELETE are
 * accepted too, and a body of Content-Length bytes up to max_body (a larger one is BAD, 413;
 * a malformed or repeated Content-Length, or any Transfer-Encoding, is BAD, 400): the body is
 * buf[consumed .. consumed + content_length), for the caller to wait for. max_body 0 is
 * http_parse_request. */
enum http_status http_parse_request_body(const uint8_t *buf, size_t len, size_t max,
                                         size_t max_headers, size_t max_body,
                                         struct http_request *out);

/* Percent-decodes s[0..n) into out (cap bytes with the NUL); plus: '+' is a space (a query).
 * Returns the length, or -1 (a bad escape, a NUL, longer than cap - 1). */
int http_pct_decode(const char *s, size_t n, char *out, size_t cap, int plus);

/* The value of key in query[0..n) (the part after '?', '&'-separated; "key" alone is an empty
 * value) percent-decoded into out. 1 if there, 0 if not, -1 if malformed or too long. */
int http_query_param(const char *query, size_t n, const char *key, char *out, size_t cap);

/* Looks up header name (lower case) in the request head buf[0..n) that http_parse_request*
 * accepted (n: its consumed). Returns how many times it occurs (0, 1, or 2 for two or more);
 * when at least once, *v[0..*vn) is the first one's value, optional whitespace trimmed. */
int http_header(const uint8_t *buf, size_t n, const char *name, const char **v, size_t *vn);

/* 1 if a and b are equal strings, in time that depends only on their lengths. */
int http_token_equal(const char *a, const char *b);

#endif
