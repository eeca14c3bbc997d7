/* ipcount.c: source-address connection counts: linear probing with backward-shift deletion. */
#include "core/ipcount.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static void key_of(const struct sockaddr *sa, uint8_t k[16])
{
    if (sa->sa_family == AF_INET) {
        memset(k, 0, 10);
        k[10] = k[11] = 0xff;
        memcpy(k + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else {
        memcpy(k, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
}

static size_t hash(const struct ipcount *m, const uint8_t k[16])
{
    return (size_t)siphash13_16(&m->key, k) & m->mask;
}

int ipcount_init(struct ipcount *m, size_t max_addrs)
{
    size_t cap = 16;
    while (cap < 2 * max_addrs)
        cap *= 2;
    m->t = calloc(cap, sizeof *m->t);
    if (!m->t)
        return -1;
    m->mask = cap - 1;
    m->used = 0;
    siphash_key_random(&m->key); /* on failure a clock mix: still spreads, not secret */
    return 0;
}

static size_t find(const struct ipcount *m, const uint8_t k[16])
{
    size_t i = hash(m, k);
    while (m->t[i].n && memcmp(m->t[i].addr, k, 16) != 0)
        i = (i + 1) & m->mask;
    return i; /* the key's slot, or the empty slot where it would go */
}

uint32_t ipcount_add(struct ipcount *m, const struct sockaddr *sa)
{
    uint8_t k[16];
    key_of(sa, k);
    size_t i = find(m, k);
    if (!m->t[i].n) {
        if (2 * (m->used + 1) > m->mask + 1)
            return 0; /* at most half full: probe runs stay short */
        memcpy(m->t[i].addr, k, 16);
        m->used++;
    }
    return ++m->t[i].n;
}

uint32_t ipcount_get(const struct ipcount *m, const struct sockaddr *sa)
{
    uint8_t k[16];
    key_of(sa, k);
    return m->t[find(m, k)].n;
}

void ipcount_del(struct ipcount *m, const struct sockaddr *sa)
{
    uint8_t k[16];
    key_of(sa, k);
    size_t i = find(m, k);
    if (!m->t[i].n || --m->t[i].n)
        return;
    m->used--;
    /* Backward shift: move later members of the probe run into the hole where allowed. */
    for (size_t j = i;;) {
        j = (j + 1) & m->mask;
        if (!m->t[j].n)
            break;
        size_t home = hash(m, m->t[j].addr);
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            m->t[i] = m->t[j];
            m->t[j].n = 0;
            i = j;
        }
    }
}

void ipcount_free(struct ipcount *m)
{
    free(m->t);
    m->t = NULL;
}
