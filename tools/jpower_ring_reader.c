/*
 * jpower_ring_reader - print the newest samples of a jpower telemetry ring.
 *
 *     jpower_ring_reader RING [N]
 *
 * Prints the latest sample N times (default 1), 100 ms apart: a header line, one line per
 * rail with its power in watts, and "module_w=<watts>" on a line of its own. Exits 1 with
 * the reason on a bad ring, 2 on bad arguments. Uses only include/jpower_ring.h.
 */
#include "jpower_ring.h"

#include <inttypes.h>
#include <stdlib.h>

static int parse_count(const char *s, unsigned long *out)
{
    char *end;
    errno = 0;
    *out = strtoul(s, &end, 10);
    return errno == 0 && end != s && *end == '\0' && *out > 0 && s[0] != '-';
}

static void print_sample(const jp_ring *r, const jp_sample *s)
{
    uint32_t i;
    printf("sample n=%" PRIu64 " t_ns=%" PRIu64 " flags=0x%" PRIx32 " fresh=0x%" PRIx32 "\n",
           s->n, s->t_ns, s->flags, s->fresh);
    for (i = 0; i < s->rail_count; i++)
        printf("  %-24s %12.6f W\n", r->rail_names[i], s->rails[i].power_uw / 1e6);
    printf("module_w=%.6f\n", s->module_uw / 1e6);
}

static void sleep_100ms(void)
{
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    char err[512];
    unsigned long count = 1, i;
    jp_ring ring;
    jp_sample sample;

    if (argc < 2 || argc > 3 || (argc == 3 && !parse_count(argv[2], &count))) {
        fprintf(stderr, "usage: %s RING [N]\n", argv[0]);
        return 2;
    }
    if (jp_ring_open(argv[1], &ring, err, sizeof err) != 0) {
        fprintf(stderr, "jpower_ring_reader: %s\n", err);
        return 1;
    }
    for (i = 0; i < count; i++) {
        if (i > 0)
            sleep_100ms();
        switch (jp_ring_latest(&ring, &sample)) {
        case 0:
            print_sample(&ring, &sample);
            break;
        case 1:
            printf("no sample yet\n");
            break;
        default:
            printf("no consistent sample (the writer kept overwriting it)\n");
            break;
        }
        fflush(stdout);
    }
    jp_ring_close(&ring);
    return 0;
}
