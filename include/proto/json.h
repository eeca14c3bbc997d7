/* json.h: a bounded parser for the small JSON objects of API requests, and string escaping (pure). */
#ifndef MTPROXY_PROTO_JSON_H
#define MTPROXY_PROTO_JSON_H

#include <stddef.h>

/*
 * Accepts one JSON object (RFC 8259) whose values are strings, numbers, true, false, null or
 * (at the top level only) objects of such scalars: {"name":"a","limits":{"conns":3}}. Anything
 * else (arrays, deeper objects, a repeated key, more than JSON_MAX_FIELDS members in all, a key
 * of JSON_KEY_MAX bytes or more, a string value of JSON_VAL_MAX bytes or more once decoded,
 * \u0000, a lone surrogate, bytes after the object but white space) is refused with a
 * message. Strings are returned decoded as UTF-8; numbers as their text.
 */
#define JSON_MAX_FIELDS 32
#define JSON_KEY_MAX 32
#define JSON_VAL_MAX 512

enum json_type { JSON_STRING, JSON_NUMBER, JSON_TRUE, JSON_FALSE, JSON_NULL, JSON_OBJECT };

struct json_field {
    char key[JSON_KEY_MAX];
    enum json_type type;
    char val[JSON_VAL_MAX]; /* JSON_STRING: decoded; JSON_NUMBER: as written; else "" */
    int parent;             /* -1: a member of the top object; else the index of its object */
};

struct json_obj {
    int n;
    struct json_field f[JSON_MAX_FIELDS];
};

/* Parses text[0..len) into out. Returns 0, or -1 with err (e.g. "at byte 7: expected ':'"). */
int json_parse_object(const char *text, size_t len, struct json_obj *out, char *err,
                      size_t errlen);

/* The member key of the top object (parent NULL) or of its member object parent; NULL if
 * absent. */
const struct json_field *json_get(const struct json_obj *o, const struct json_field *parent,
                                  const char *key);

/* Writes s as the inside of a JSON string (", \ and control characters escaped; other bytes
 * as they are) into out[cap] (always terminated when cap > 0). Returns the length it needs
 * without the NUL: a result >= cap means out was cut. */
size_t json_escape(const char *s, char *out, size_t cap);

#endif
