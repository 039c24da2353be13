/* copybench: the CPU side of NET-dmacopy (000 §4.4 Fig. 6), one buffer copy by memcpy.
 *
 *   copybench SIZE SECONDS POOL_BYTES
 *
 * hot   the same source and destination buffers copied again and again: after the first copy
 *       both are in the cache (000's copy-cache)
 * cold  a new source and destination pair for every copy, taken in a shuffled order from two
 *       pools of POOL_BYTES each (several times the last-level cache, every page touched
 *       before the clock starts): neither is in the cache when it is copied (copy-nocache)
 *
 * Each half runs for about SECONDS / 2 in batches timed with CLOCK_MONOTONIC. memcpy is called
 * through a volatile pointer so that the compiler neither inlines nor removes it: what is
 * timed is the C library's memcpy, as a program would call it. One JSON object on stdout.
 * The caller checks POOL_BYTES against free memory before it starts this. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *(*volatile copy)(void *, const void *, size_t) = memcpy;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *buffer(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes) != 0) {
        fprintf(stderr, "copybench: cannot allocate %zu bytes\n", bytes);
        exit(2);
    }
    memset(p, 0x5a, bytes); /* every page present before any clock starts */
    return p;
}

static unsigned long parse(const char *text, const char *what, unsigned long low)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < low) {
        fprintf(stderr, "copybench: %s must be a whole number of at least %lu, not '%s'\n",
                what, low, text);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: copybench SIZE SECONDS POOL_BYTES\n");
        return 2;
    }
    size_t size = parse(argv[1], "SIZE", 1);
    double half = (double)parse(argv[2], "SECONDS", 1) / 2;
    size_t pool = parse(argv[3], "POOL_BYTES", 1);
    size_t stride = (size + 4095) / 4096 * 4096; /* each pair on pages of its own */
    size_t slots = pool / stride;
    if (slots < 2) {
        fprintf(stderr, "copybench: POOL_BYTES (%zu) holds fewer than two %zu-byte buffers\n",
                pool, size);
        return 2;
    }

    /* hot: one pair, the first copy fills the cache */
    char *src = buffer(size), *dst = buffer(size);
    copy(dst, src, size);
    unsigned long hot = 0, batch = 1;
    double began = now_s(), hot_s = 0;
    while ((hot_s = now_s() - began) < half) {
        for (unsigned long i = 0; i < batch; i++)
            copy(dst, src, size);
        hot += batch;
        if (batch < (1UL << 16))
            batch *= 2;
    }
    hot_s = now_s() - began;

    /* cold: a pair of slots per copy, in a shuffled order (a fixed seed) */
    char *srcs = buffer(slots * stride), *dsts = buffer(slots * stride);
    uint32_t *order = malloc(slots * sizeof *order);
    if (order == NULL) {
        fprintf(stderr, "copybench: cannot allocate the order of %zu slots\n", slots);
        return 2;
    }
    for (size_t i = 0; i < slots; i++)
        order[i] = (uint32_t)i;
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    for (size_t i = slots - 1; i > 0; i--) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t j = (size_t)((state >> 33) % (i + 1));
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    unsigned long cold = 0;
    size_t next = 0;
    began = now_s();
    double cold_s = 0;
    while ((cold_s = now_s() - began) < half) {
        for (unsigned long i = 0; i < 256; i++) {
            size_t slot = order[next];
            next = next + 1 == slots ? 0 : next + 1;
            copy(dsts + slot * stride, srcs + slot * stride, size);
        }
        cold += 256;
    }
    cold_s = now_s() - began;

    printf("{\"size\": %zu, \"hot_copies\": %lu, \"hot_s\": %.9f, \"cold_copies\": %lu, "
           "\"cold_s\": %.9f, \"pool_bytes\": %zu, \"slots\": %zu}\n",
           size, hot, hot_s, cold, cold_s, slots * stride, slots);
    return 0;
}
