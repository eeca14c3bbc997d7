/* siphash.c: SipHash-c-d written from the paper (Aumasson & Bernstein, "SipHash: a fast short-input PRF"). */
#include "core/siphash.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/*
 * The state is four 64-bit words initialised from the key k0 || k1 and the constants
 * "somepseudorandomlygeneratedbytes" (paper, section 2). The message is read as 64-bit
 * little-endian words m_i; the last word holds the remaining 0..7 bytes and, in its top byte,
 * the message length mod 256. Each word is absorbed as v3 ^= m; c SipRounds; v0 ^= m. Then
 * v2 ^= 0xff, d SipRounds, and the output is v0 ^ v1 ^ v2 ^ v3.
 */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

struct sip {
    uint64_t v0, v1, v2, v3;
};

static inline void sipround(struct sip *s)
{
    s->v0 += s->v1;
    s->v1 = ROTL(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = ROTL(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = ROTL(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = ROTL(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = ROTL(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = ROTL(s->v2, 32);
}

static inline uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

static inline void sip_init(struct sip *s, const struct siphash_key *key)
{
    s->v0 = key->k[0] ^ 0x736f6d6570736575ull; /* "somepseu" */
    s->v1 = key->k[1] ^ 0x646f72616e646f6dull; /* "dorandom" */
    s->v2 = key->k[0] ^ 0x6c7967656e657261ull; /* "lygenera" */
    s->v3 = key->k[1] ^ 0x7465646279746573ull; /* "tedbytes" */
}

static inline void sip_absorb(struct sip *s, uint64_t m, int c)
{
    s->v3 ^= m;
    for (int i = 0; i < c; i++)
        sipround(s);
    s->v0 ^= m;
}

static inline uint64_t sip_final(struct sip *s, int d)
{
    s->v2 ^= 0xff;
    for (int i = 0; i < d; i++)
        sipround(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

static inline uint64_t sip(const struct siphash_key *key, const void *msg, size_t len, int c,
                           int d)
{
    const uint8_t *p = msg;
    struct sip s;
    sip_init(&s, key);
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8)
        sip_absorb(&s, load_le64(p + i), c);
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (size_t i = 0; i < (len & 7); i++)
        last |= (uint64_t)p[whole + i] << (8 * i);
    sip_absorb(&s, last, c);
    return sip_final(&s, d);
}

uint64_t siphash24(const struct siphash_key *key, const void *msg, size_t len)
{
    return sip(key, msg, len, 2, 4);
}

uint64_t siphash13(const struct siphash_key *key, const void *msg, size_t len)
{
    return sip(key, msg, len, 1, 3);
}

uint64_t siphash13_16(const struct siphash_key *key, const uint8_t msg[16])
{
    struct sip s;
    sip_init(&s, key);
    sip_absorb(&s, load_le64(msg), 1);
    sip_absorb(&s, load_le64(msg + 8), 1);
    sip_absorb(&s, (uint64_t)16 << 56, 1);
    return sip_final(&s, 3);
}

static int read_urandom(void *buf, size_t len)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (uint8_t *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return got == len ? 0 : -1;
}

int siphash_key_random(struct siphash_key *key)
{
    for (;;) {
        ssize_t n = getrandom(key->k, sizeof key->k, GRND_NONBLOCK); /* never waits at boot */
        if (n == (ssize_t)sizeof key->k)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    if (read_urandom(key->k, sizeof key->k) == 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct siphash_key mix = {{(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec}};
    key->k[0] = siphash24(&mix, &key, sizeof key);
    key->k[1] = siphash24(&mix, &ts, sizeof ts);
    return -1;
}
