/* dc.c: Telegram's published DC addresses (PROTOCOL.md 5.1), overrides and lookup. */
#include "upstream/dc.h"

#include <stdlib.h>
#include <string.h>

/* Telegram's published production DCs, port 443 (direct mode). */
static const struct {
    int id;
    const char *addr;
} builtin[] = {
    {1, "149.154.175.50:443"},   {1, "[2001:b28:f23d:f001::a]:443"},
    {2, "149.154.167.51:443"},   {2, "95.161.76.100:443"},
    {2, "[2001:67c:4e8:f002::a]:443"},
    {3, "149.154.175.100:443"},  {3, "[2001:b28:f23d:f003::a]:443"},
    {4, "149.154.167.91:443"},   {4, "[2001:67c:4e8:f004::a]:443"},
    {5, "149.154.171.5:443"},    {5, "[2001:b28:f23f:f005::a]:443"},
    {203, "91.105.192.100:443"}, {203, "[2a0a:f280:203:a:5000::100]:443"},
};

static int configured(const struct options *o, int id)
{
    for (int i = 0; i < o->ndcs; i++)
        if (o->dcs[i].id == id)
            return 1;
    return 0;
}

static void add(struct dc_table *t, int id, const struct sock_addr *a, const struct options *o)
{
    if (t->n >= DC_MAX_ADDRS || (o->only_ipv4 && a->u.sa.sa_family == AF_INET6))
        return;
    t->e[t->n].id = id;
    t->e[t->n].addr = *a;
    t->n++;
}

/* Preference rank inside one id: lower goes first. */
static int rank(const struct dc_entry *e, int prefer_ipv6)
{
    int v6 = e->addr.u.sa.sa_family == AF_INET6;
    return prefer_ipv6 ? !v6 : v6;
}

int dc_table_build(struct dc_table *t, const struct options *o)
{
    memset(t, 0, sizeof *t);
    t->default_dc = o->default_dc;
    for (int i = 0; i < o->ndcs; i++)
        add(t, o->dcs[i].id, &o->dcs[i].addr, o);
    if (o->dc_builtin) {
        for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
            if (configured(o, builtin[i].id))
                continue;
            struct sock_addr a;
            char err[128];
            if (sock_addr_parse(builtin[i].addr, 0, 0, &a, err, sizeof err) == 0)
                add(t, builtin[i].id, &a, o);
        }
    }
    /* Stable insertion sort by (first appearance of id, family rank): groups stay
     * contiguous and keep their configured order within a family. */
    int order[DC_MAX_ADDRS];
    for (int i = 0; i < t->n; i++) {
        order[i] = i;
        for (int j = 0; j < i; j++)
            if (t->e[j].id == t->e[i].id) {
                order[i] = order[j];
                break;
            }
    }
    for (int i = 1; i < t->n; i++) {
        struct dc_entry e = t->e[i];
        int oi = order[i], r = rank(&e, o->prefer_ipv6), j = i - 1;
        while (j >= 0 && (order[j] > oi || (order[j] == oi && rank(&t->e[j], o->prefer_ipv6) > r))) {
            t->e[j + 1] = t->e[j];
            order[j + 1] = order[j];
            j--;
        }
        t->e[j + 1] = e;
        order[j + 1] = oi;
    }
    return 0;
}

static int find(const struct dc_table *t, int id, int *first)
{
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->e[i].id == id) {
            if (!n)
                *first = i;
            n++;
        }
    }
    return n;
}

int dc_lookup(const struct dc_table *t, int id, int *first, int *resolved)
{
    int n;
    if ((n = find(t, id, first))) {
        *resolved = id;
        return n;
    }
    if (id < 0 && (n = find(t, -id, first))) {
        *resolved = -id;
        return n;
    }
    *resolved = t->default_dc;
    return find(t, t->default_dc, first);
}
