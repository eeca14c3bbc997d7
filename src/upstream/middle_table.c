/* middle_table.c: the ME table: proxy-secret-file and proxy-config-file, read and checked. */
#include "upstream/middle.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads a whole small file. Returns its length, or -1 with err. */
static long read_file(const char *path, char *buf, size_t cap, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == cap) {
            snprintf(err, errlen, "%s: larger than %zu bytes", path, cap - 1);
            close(fd);
            return -1;
        }
    }
    close(fd);
    return (long)n;
}

struct me_table *middle_table_load(const struct options *o, char *err, size_t errlen)
{
    struct me_table *t = calloc(1, sizeof *t);
    static const size_t cfg_cap = 1 << 20;
    char *text = malloc(cfg_cap);
    struct rpc_config *rc = malloc(sizeof *rc);
    long n;
    if (!t || !text || !rc) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    char sec[RPC_SECRET_MAX + 1];
    n = read_file(o->proxy_secret_file, sec, sizeof sec, err, errlen);
    if (n < 0 || rpc_secret_check(o->proxy_secret_file, (size_t)n, err, errlen))
        goto fail;
    memcpy(t->secret, sec, (size_t)n);
    t->secret_len = (size_t)n;
    n = read_file(o->proxy_config_file, text, cfg_cap, err, errlen);
    if (n < 0 || rpc_config_parse(o->proxy_config_file, text, (size_t)n, rc, err, errlen))
        goto fail;
    for (int i = 0; i < rc->n; i++) {
        struct me_addr *a = &t->addrs[t->naddrs++];
        a->dc = rc->e[i].dc;
        memset(&a->addr, 0, sizeof a->addr);
        if (rc->e[i].v6) {
            a->addr.u.in6.sin6_family = AF_INET6;
            memcpy(&a->addr.u.in6.sin6_addr, rc->e[i].ip, 16);
            a->addr.u.in6.sin6_port = htons(rc->e[i].port);
            a->addr.len = sizeof a->addr.u.in6;
        } else {
            a->addr.u.in4.sin_family = AF_INET;
            memcpy(&a->addr.u.in4.sin_addr, rc->e[i].ip, 4);
            a->addr.u.in4.sin_port = htons(rc->e[i].port);
            a->addr.len = sizeof a->addr.u.in4;
        }
        a->uniq = (int16_t)(t->naddrs - 1);
        for (int k = 0; k < t->naddrs - 1; k++)
            if (t->addrs[k].addr.len == a->addr.len &&
                !memcmp(&t->addrs[k].addr.u, &a->addr.u, a->addr.len)) {
                a->uniq = (int16_t)k;
                break;
            }
    }
    t->default_dc = rc->default_dc ? rc->default_dc : t->addrs[0].dc;
    atomic_store(&t->refs, 1);
    free(text);
    free(rc);
    return t;
fail:
    free(t);
    free(text);
    free(rc);
    return NULL;
}

void middle_table_put(struct me_table *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        free(t);
}

struct me_table *middle_table_get(struct me_table *t)
{
    if (t)
        atomic_fetch_add(&t->refs, 1);
    return t;
}
