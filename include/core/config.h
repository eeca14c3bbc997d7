/* config.h: generic option-table machinery: defaults, `key = value` files, `--key value` args. */
#ifndef MTPROXY_CORE_CONFIG_H
#define MTPROXY_CORE_CONFIG_H

#include <stddef.h>

enum config_type {
    CFG_BOOL,     /* int: on/off, yes/no, true/false, 1/0 */
    CFG_INT,      /* int, within [min, max] */
    CFG_SIZE,     /* size_t bytes: 4096, 16k, 1M, 1G (binary multiples), within [min, max] */
    CFG_DURATION, /* unsigned milliseconds: 500ms, 10s, 10 (= s), 5m, 1h, within [min, max] */
    CFG_STRING,   /* char[str_size] */
    CFG_ENUM,     /* int index into names[] */
    CFG_CUSTOM,   /* parse() callback; with CFG_REPEAT also reset() */
};

#define CFG_REPEAT 1u /* key may repeat; a higher source (CLI over file) replaces, not appends */

struct config_option {
    const char *name;    /* key, e.g. "block-size"; CLI form is --block-size */
    enum config_type type;
    size_t offset;       /* offset of the field in the caller's config struct */
    const char *def;     /* default, in the value syntax ("" or NULL = none) */
    const char *arg;     /* argument name for help, e.g. "ADDR:PORT" */
    const char *help;    /* one-paragraph description */
    unsigned flags;      /* CFG_REPEAT */
    long long min, max;  /* bounds for INT/SIZE/DURATION (max 0 = unbounded) */
    size_t str_size;     /* STRING buffer size */
    const char *const *names; /* ENUM value names, NULL-terminated */
    /* CUSTOM: parses value into conf. Returns 0, or -1 with a message in err. */
    int (*parse)(void *conf, const char *value, char *err, size_t errlen);
    /* CUSTOM + REPEAT: clears the values accumulated so far. */
    void (*reset)(void *conf);
};

/* Where an option's current value came from. */
enum config_origin { CFG_FROM_DEFAULT = 0, CFG_FROM_FILE = 1, CFG_FROM_ARGS = 2 };

#define CONFIG_MAX_ERRORS 64
#define CONFIG_ERR_LEN 320

/* Accumulated errors; every error is kept (up to CONFIG_MAX_ERRORS) so an operator sees all. */
struct config_errors {
    int count; /* total, may exceed what is stored */
    char msg[CONFIG_MAX_ERRORS][CONFIG_ERR_LEN];
};

/* Adds an error (printf's format) to e: kept while e has room, counted always. */
void config_error(struct config_errors *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A parse session over one option table and one config struct. */
struct config_parser {
    const struct config_option *opts;
    size_t nopts;
    void *conf;
    unsigned char origin[128]; /* per option; nopts must be <= 128 */
    struct config_errors errors;
};

/* Starts a session and applies every default. Defaults that fail to parse are a programming
 * error reported as errors. Returns 0 if all defaults parsed. */
int config_init(struct config_parser *p, const struct config_option *opts, size_t nopts,
                void *conf);

/* Finds an option by key; NULL if unknown. */
const struct config_option *config_find(const struct config_parser *p, const char *name);

/* Sets key=value from a source; errors are recorded with the prefix `where` (e.g. "f:3").
 * Returns 0, or -1 if an error was recorded. */
int config_set(struct config_parser *p, const char *key, const char *value,
               enum config_origin from, const char *where);

#define CONFIG_LINE_MAX 4096        /* a longer line is an error (line too long) */
#define CONFIG_FILE_MAX (16 << 20) /* a larger config file is refused */

/* Parses config text from memory: `key = value` per line, `#` comments (whole line, or
 * after whitespace), blank lines, optional double quotes around the value; lines of
 * CONFIG_LINE_MAX - 1 bytes or more are errors. data need not be NUL-terminated and may hold
 * any bytes (a NUL ends the line's text). Every bad line is recorded as `name:LINE: message`.
 * Returns the number of errors added (0 = clean). */
int config_load_buffer(struct config_parser *p, const char *name, const char *data, size_t len);

/* Reads a config file (at most CONFIG_FILE_MAX bytes) and parses it as config_load_buffer
 * does, with name = path. Returns the number of errors added (0 = clean); an unreadable or
 * too large file is one error. */
int config_load_file(struct config_parser *p, const char *path);

/* Applies `--key value` / `--key=value` pairs from argv[0..argc). Unknown keys and missing
 * values are recorded as errors (`--key: message`). Returns the number of errors added. */
int config_load_args(struct config_parser *p, int argc, char **argv);

/* Writes a help listing of every option (name, arg, default, help) to buf[len] (always
 * terminated; truncated if short), each help text wrapped at width columns (0: unwrapped). */
void config_help(const struct config_option *opts, size_t nopts, size_t width, char *buf,
                 size_t len);

/* Value parsers, exposed for tests and custom callbacks. Return 0, or -1 with err. */
int config_parse_bool(const char *s, int *out, char *err, size_t errlen);
int config_parse_size(const char *s, unsigned long long *out, char *err, size_t errlen);
int config_parse_duration(const char *s, unsigned long long *ms, char *err, size_t errlen);
int config_parse_int(const char *s, long long *out, char *err, size_t errlen);

#endif
