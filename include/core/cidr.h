/* cidr.h: IPv4/IPv6 CIDR parsing and address sets that stay fast at 100,000+ entries. */
#ifndef MTPROXY_CORE_CIDR_H
#define MTPROXY_CORE_CIDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* One network: family AF_INET or AF_INET6, the address bytes (4 or 16, network order, host
 * bits cleared) and the prefix length (0..32 or 0..128). */
struct cidr {
    uint8_t family;
    uint8_t prefix;
    uint8_t addr[16];
};

/* Parses "A.B.C.D", "A.B.C.D/N", "V6", "V6/N" (no brackets, no port). Surrounding blanks are
 * not accepted; host bits set below the prefix are an error ("10.0.0.1/8": did you mean
 * 10.0.0.0/8?), so a typo never widens a list silently. Returns 0, or -1 with err. */
int cidr_parse(const char *text, struct cidr *out, char *err, size_t errlen);

/* Writes "A.B.C.D/N" or "V6/N". */
void cidr_format(const struct cidr *c, char *buf, size_t len);

/* A set of networks, kept as sorted, merged, disjoint ranges per family: a lookup is one
 * binary search (about 17 steps at 100,000 ranges). Build: cidr_set_add ... then
 * cidr_set_finish; after finish the set is read-only and may be shared between threads. */
struct cidr_range4 {
    uint32_t lo, hi; /* inclusive, host order */
};
struct cidr_u128 {
    uint64_t hi, lo;
};
struct cidr_range6 {
    struct cidr_u128 lo, hi; /* inclusive */
};
struct cidr_set {
    struct cidr_range4 *v4;
    struct cidr_range6 *v6;
    size_t n4, n6, cap4, cap6;
    size_t added; /* entries given to cidr_set_add (before merging) */
};

/* Empty set (all zero is also empty). */
void cidr_set_init(struct cidr_set *s);

/* Adds a network. Returns 0, or -1 when out of memory. */
int cidr_set_add(struct cidr_set *s, const struct cidr *c);

/* Loads a list file: one address or CIDR a line, '#' starts a comment (whole line or after
 * the entry), blank lines skipped; the FireHOL netset format. Every bad line is reported
 * as "PATH:LINE: message" through report(ctx, msg) (at most a few hundred are worth
 * reading: the caller may stop keeping them). Returns the number of bad lines, or -1 when
 * the file cannot be read (message reported as "PATH: ..."). */
int cidr_set_load_file(struct cidr_set *s, const char *path,
                       void (*report)(void *ctx, const char *msg), void *ctx);

/* Sorts and merges overlapping and adjacent ranges; call once after the last add. */
void cidr_set_finish(struct cidr_set *s);

/* 1 if the address (struct sockaddr_in or sockaddr_in6; an IPv4-mapped IPv6 address is
 * looked up as IPv4) is in the finished set, else 0. */
int cidr_set_contains(const struct cidr_set *s, const struct sockaddr *sa);

/* Ranges held and bytes of heap they take. */
size_t cidr_set_count(const struct cidr_set *s);
size_t cidr_set_memory(const struct cidr_set *s);

void cidr_set_free(struct cidr_set *s);

#endif
