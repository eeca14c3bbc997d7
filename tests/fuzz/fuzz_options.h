/* fuzz_options.h: invariants every parsed mtproxy configuration must hold, for config fuzzers. */
#ifndef MTPROXY_FUZZ_OPTIONS_H
#define MTPROXY_FUZZ_OPTIONS_H

#include <sys/socket.h>

#include "fuzz_common.h"
#include "upstream/dc.h"
#include "config/options.h"

/* Every stored error is a terminated string that starts with prefix (NULL: any). */
static inline void fuzz_check_errors(const struct config_parser *p, int from, const char *prefix) {
    FUZZ_CHECK(p->errors.count >= from);
    for (int i = from; i < p->errors.count && i < CONFIG_MAX_ERRORS; i++) {
        FUZZ_CHECK(fuzz_terminated(p->errors.msg[i], CONFIG_ERR_LEN));
        FUZZ_CHECK(p->errors.msg[i][0] != 0);
        if (prefix)
            FUZZ_CHECK(strncmp(p->errors.msg[i], prefix, strlen(prefix)) == 0);
    }
}

static inline void fuzz_check_addr(const struct sock_addr *a) {
    int fam = a->u.sa.sa_family;
    FUZZ_CHECK(fam == AF_INET || fam == AF_INET6);
    FUZZ_CHECK(a->len == (fam == AF_INET ? sizeof a->u.in4 : sizeof a->u.in6));
}

/* Whatever the input, each field stays inside what its option allows. */
static inline void fuzz_check_options(const struct options *o) {
    for (size_t i = 0; i < options_count; i++) {
        const struct config_option *t = &options_table[i];
        const char *field = (const char *)o + t->offset;
        long long v = 0;
        switch (t->type) {
        case CFG_BOOL:
            v = *(const int *)(const void *)field;
            FUZZ_CHECK(v == 0 || v == 1);
            continue;
        case CFG_INT:
            v = *(const int *)(const void *)field;
            break;
        case CFG_SIZE:
            v = (long long)*(const size_t *)(const void *)field;
            break;
        case CFG_DURATION:
            v = *(const unsigned *)(const void *)field;
            break;
        case CFG_STRING:
            FUZZ_CHECK(fuzz_terminated(field, t->str_size));
            continue;
        case CFG_ENUM: {
            int n = 0;
            while (t->names[n])
                n++;
            v = *(const int *)(const void *)field;
            FUZZ_CHECK(v >= 0 && v < n);
            continue;
        }
        case CFG_CUSTOM:
            continue;
        }
        FUZZ_CHECK(v >= t->min);
        FUZZ_CHECK(!t->max || v <= t->max);
    }
    FUZZ_CHECK(o->nlisten >= 0 && o->nlisten <= OPT_MAX_LISTEN);
    FUZZ_CHECK(o->nsecrets >= 0 && o->nsecrets <= OPT_MAX_SECRETS);
    FUZZ_CHECK(o->ndcs >= 0 && o->ndcs <= OPT_MAX_DC_ADDRS);
    for (int i = 0; i < o->nlisten; i++)
        fuzz_check_addr(&o->listen[i]);
    for (int i = 0; i < o->ndcs; i++) {
        fuzz_check_addr(&o->dcs[i].addr);
        FUZZ_CHECK(o->dcs[i].id != 0 && o->dcs[i].id >= -32768 && o->dcs[i].id <= 32767);
    }
    for (int i = 0; i < o->nsecrets; i++) {
        const struct secret *s = &o->secrets[i];
        FUZZ_CHECK(fuzz_terminated(s->name, sizeof s->name) && s->name[0]);
        FUZZ_CHECK(s->kind == SECRET_PLAIN || s->kind == SECRET_DD || s->kind == SECRET_EE);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(o->secrets[j].name, s->name) != 0);
    }
}

/* A clean configuration builds a DC table whose lookups stay inside it. */
static inline void fuzz_check_dc_table(const struct options *o) {
    static struct dc_table t;
    FUZZ_CHECK(dc_table_build(&t, o) == 0);
    FUZZ_CHECK(t.n >= 0 && t.n <= DC_MAX_ADDRS);
    static const int ids[] = {1, 2, -2, 5, 203, -203, 0, 32767, -32768, 999};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int first = -1, resolved = 0;
        int n = dc_lookup(&t, ids[i], &first, &resolved);
        FUZZ_CHECK(n >= 0 && n <= t.n);
        if (n) {
            FUZZ_CHECK(first >= 0 && first + n <= t.n);
            for (int j = first; j < first + n; j++) {
                FUZZ_CHECK(t.e[j].id == resolved);
                if (o->only_ipv4)
                    FUZZ_CHECK(t.e[j].addr.u.sa.sa_family == AF_INET);
            }
        }
    }
}

#endif
