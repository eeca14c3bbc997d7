/* options_secrets.c: the configured secrets, kept by name (an open-addressing index), and the
 * `secret` key's parser that fills them (the option table's and the state file's). */
#include "config/options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

/* The slot of name in the name index: where it is, or the empty slot where it would go. */
static size_t secret_slot(const struct options *o, const char *name)
{
    size_t mask = o->nsecret_slots - 1, i = name_hash(name) & mask;
    while (o->secret_slots[i] && strcmp(o->secrets[o->secret_slots[i] - 1].name, name))
        i = (i + 1) & mask;
    return i;
}

/* Room for one more secret (and its name in the index). Returns 0, or -1. */
static int secrets_grow(struct options *o)
{
    if (o->nsecrets == o->secrets_cap) {
        int cap = o->secrets_cap ? o->secrets_cap * 2 : 8;
        struct secret *s = realloc(o->secrets, (size_t)cap * sizeof *s);
        if (!s)
            return -1;
        o->secrets = s;
        o->secrets_cap = cap;
    }
    if ((size_t)(o->nsecrets + 1) * 2 > o->nsecret_slots) {
        size_t n = o->nsecret_slots ? o->nsecret_slots * 2 : 16;
        uint32_t *slots = calloc(n, sizeof *slots);
        if (!slots)
            return -1;
        free(o->secret_slots);
        o->secret_slots = slots;
        o->nsecret_slots = n;
        for (int i = 0; i < o->nsecrets; i++)
            o->secret_slots[secret_slot(o, o->secrets[i].name)] = (uint32_t)i + 1;
    }
    return 0;
}

int options_add_secret(struct options *o, const struct secret *sp, char *err, size_t errlen)
{
    struct secret s = *sp;
    if (o->nsecrets >= OPT_MAX_SECRETS) {
        snprintf(err, errlen, "at most %d secrets", OPT_MAX_SECRETS);
        return -1;
    }
    if (secrets_grow(o)) {
        snprintf(err, errlen, "out of memory for secrets");
        return -1;
    }
    size_t slot = secret_slot(o, s.name);
    if (o->secret_slots[slot]) {
        snprintf(err, errlen, "secret name '%s' is used twice", s.name);
        return -1;
    }
    o->secrets[o->nsecrets] = s;
    o->secret_slots[slot] = (uint32_t)++o->nsecrets;
    return 0;
}

int options_parse_secret(void *conf, const char *v, char *err, size_t errlen)
{
    struct secret s;
    if (secret_parse_named(v, &s, err, errlen))
        return -1;
    return options_add_secret(conf, &s, err, errlen);
}

void options_reset_secret(void *conf)
{
    struct options *o = conf;
    o->nsecrets = 0;
    if (o->secret_slots)
        memset(o->secret_slots, 0, o->nsecret_slots * sizeof *o->secret_slots);
}

int options_find_secret(const struct options *o, const char *name)
{
    if (!o->nsecret_slots)
        return -1;
    uint32_t v = o->secret_slots[secret_slot(o, name)];
    return v ? (int)v - 1 : -1;
}
