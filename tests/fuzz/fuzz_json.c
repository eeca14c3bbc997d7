/* fuzz_json.c: libFuzzer target for json_parse_object and json_escape. */
#include "proto/json.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: an API request body. Parsing reads only the given bytes (an exact-size copy: ASan
 * sees any over-read); on success every field is terminated within its bounds, nested fields
 * point at an object before them, and a string value escaped and parsed back is the same. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    struct json_obj *o = malloc(sizeof *o);
    char err[128];
    if (!o)
        abort();
    if (json_parse_object(buf, size, o, err, sizeof err) == 0) {
        FUZZ_CHECK(o->n >= 0 && o->n <= JSON_MAX_FIELDS);
        for (int i = 0; i < o->n; i++) {
            const struct json_field *f = &o->f[i];
            FUZZ_CHECK(strlen(f->key) < JSON_KEY_MAX && strlen(f->val) < JSON_VAL_MAX);
            FUZZ_CHECK(f->parent == -1 ||
                       (f->parent < i && o->f[f->parent].type == JSON_OBJECT &&
                        o->f[f->parent].parent == -1));
            FUZZ_CHECK(json_get(o, f->parent < 0 ? NULL : &o->f[f->parent], f->key) == f);
            if (f->type == JSON_STRING) {
                char esc[JSON_VAL_MAX * 6 + 16], doc[JSON_VAL_MAX * 6 + 32];
                size_t n = json_escape(f->val, esc, sizeof esc);
                FUZZ_CHECK(n < sizeof esc);
                int dl = snprintf(doc, sizeof doc, "{\"v\":\"%s\"}", esc);
                struct json_obj *back = malloc(sizeof *back);
                if (!back)
                    abort();
                FUZZ_CHECK(json_parse_object(doc, (size_t)dl, back, err, sizeof err) == 0);
                FUZZ_CHECK(!strcmp(back->f[0].val, f->val));
                free(back);
            }
        }
    } else {
        FUZZ_CHECK(strncmp(err, "at byte ", 8) == 0);
    }
    free(o);
    free(buf);
    return 0;
}
