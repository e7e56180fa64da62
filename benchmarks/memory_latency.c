/* The machine's latency of one dependent load, by working-set size.

   The simulator's cost per packet grows with the memory its busy flows keep live
   (docs/performance.md): what matters is where each size falls among this machine's L2, its
   share of the L3 and DRAM. This walks a random cycle through one pointer per 64-byte line
   of a buffer (each load's address is the previous load's value, so nothing overlaps), on
   transparent huge pages as the simulator's arenas are, and prints nanoseconds per load.

       cc -O2 -o memory_latency benchmarks/memory_latency.c && ./memory_latency
*/
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next_random(void) { /* xorshift64: reproducible, no libc rand() */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double ns_per_load(size_t bytes, size_t loads) {
    size_t lines = bytes / 64;
    char *buf = aligned_alloc(2u << 20, lines * 64);
    size_t *order = malloc(lines * sizeof *order);
    if (!buf || !order) {
        fprintf(stderr, "out of memory at %zu bytes\n", bytes);
        exit(1);
    }
    madvise(buf, lines * 64, MADV_HUGEPAGE);
    for (size_t i = 0; i < lines; i++) order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) { /* Fisher-Yates: one cycle through every line */
        size_t j = next_random() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        *(char **)(buf + order[i] * 64) = buf + order[(i + 1) % lines] * 64;
    char *p = buf + order[0] * 64;
    for (size_t i = 0; i < lines; i++) p = *(char **)p; /* once round: the pages are mapped */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < loads; i++) p = *(char **)p;
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (p == NULL) puts(""); /* keeps the walk from being optimized away */
    free(buf);
    free(order);
    return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)loads;
}

int main(void) {
    static const size_t kb[] = {256, 1024, 2048, 4096, 8192, 16384, 32768,
                                65536, 131072, 262144, 524288};
    printf("%10s %12s\n", "working set", "ns per load");
    for (size_t i = 0; i < sizeof kb / sizeof kb[0]; i++) {
        double ns = ns_per_load(kb[i] * 1024, 20000000);
        if (kb[i] >= 1024)
            printf("%8zu MB %12.1f\n", kb[i] / 1024, ns);
        else
            printf("%8zu KB %12.1f\n", kb[i], ns);
    }
    return 0;
}
