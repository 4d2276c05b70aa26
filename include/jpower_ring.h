/*
 * jpower_ring.h - header-only C99 reader of jpower's telemetry ring (layout version 1).
 *
 * The layout and the reader protocol are specified in docs/telemetry-ring.md; the structs
 * below mirror it field for field (natural alignment, no packing), and static assertions pin
 * every offset and size. Usable from C++ (extern "C", static_assert).
 *
 *     jp_ring ring;
 *     jp_sample s;
 *     char err[256];
 *     // The agent's ring_path (`jpower status --json`: .agent.ring_path), e.g.
 *     // /run/jpower/telemetry/nvidia-jetson-orin-nano-developer-kit-af63a24c860189fe.ring
 *     if (jp_ring_open(ring_path, &ring, err, sizeof err) != 0)
 *         fprintf(stderr, "%s\n", err);
 *     else if (jp_ring_latest(&ring, &s) == 0)
 *         printf("%u uW\n", s.module_uw);
 *
 * Needs POSIX (open, fstat, mmap, nanosleep) and GCC/Clang __atomic builtins: compile with
 * _DEFAULT_SOURCE or _POSIX_C_SOURCE >= 199309L defined under a strict -std=cNN (c99, c11).
 */
#ifndef JPOWER_RING_H
#define JPOWER_RING_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JP_RING_MAGIC "JPWRRING"
#define JP_RING_VERSION 1u
#define JP_RING_HEADER_SIZE 4096u
#define JP_RING_MAX_RAILS 16
#define JP_RING_MAX_ZONES 16
#define JP_RING_SLOT_HEAD_SIZE 32u
#define JP_RING_SLOT_RAIL_SIZE 12u
#define JP_RING_TEMP_UNREADABLE INT32_MIN
/* The extension area: sections from this offset up to header_size (docs: "Extensions"). */
#define JP_RING_EXT_OFFSET 1664u
#define JP_RING_SECTION_END 0u
#define JP_RING_SECTION_WRITER 1u
#define JP_RING_SECTION_ACTIVITY 2u
/* An activity counter the board lacks (or could not read): all ones of its width. */
#define JP_ACTIVITY_ABSENT_U32 0xffffffffu
#define JP_ACTIVITY_ABSENT_U64 0xffffffffffffffffull
#define JP_ACTIVITY_MAX_CPUS 16
#define JP_ACTIVITY_MAX_DISKS 8
/* jp_ring_writer_section.state */
enum { JP_WRITER_LIVE = 1, JP_WRITER_CLOSED = 2, JP_WRITER_REPLACED = 3 };
/* jp_ring_open polls a version-0 (initialising) ring this many times, 100 ms apart. */
#define JP_RING_INIT_TRIES 10
/* jp_ring_latest gives up after this many inconsistent copies (returns -1). */
#define JP_RING_LATEST_TRIES 1000

/* Role of a rail (jp_ring_rail_entry.role). */
enum { JP_RAIL_INPUT = 0, JP_RAIL_MODULE = 1, JP_RAIL_SUB = 2, JP_RAIL_CARRIER = 3 };

/* Slot and throttle flags. */
enum { JP_FLAG_THROTTLED = 1u, JP_FLAG_WARNING = 2u, JP_FLAG_CRITICAL = 4u };
/* Slot flags bit JP_FLAG_RAIL_FAILED_SHIFT + r: rail r's last read failed, its values are the
 * last good ones held, 0 before any read succeeded (JP_RAIL_FAILED(flags, r) is nonzero). */
#define JP_FLAG_RAIL_FAILED_SHIFT 16u
#define JP_RAIL_FAILED(flags, r) (((flags) >> (JP_FLAG_RAIL_FAILED_SHIFT + (unsigned)(r))) & 1u)

/* Rail table entry: 64 bytes, rail r at offset 128 + 64 * r. */
typedef struct jp_ring_rail_entry {
    uint8_t name[24];        /* UTF-8, NUL-padded (not terminated when 24 bytes long) */
    uint8_t role;            /* JP_RAIL_* */
    uint8_t reserved0[3];
    uint32_t refresh_us;     /* the sensor's refresh interval for this rail */
    uint64_t fresh_count;    /* atomic: samples in which this rail's value was new */
    uint64_t last_fresh_ns;  /* atomic: time of the newest fresh value (0: none yet) */
    uint8_t reserved1[16];
} jp_ring_rail_entry;

/* Thermal zone entry: 32 bytes, zone z at offset 1152 + 32 * z. */
typedef struct jp_ring_zone_entry {
    uint8_t name[20];        /* thermal zone type, NUL-padded; empty = unused */
    int32_t temp_mc;         /* atomic: milli-degrees C; JP_RING_TEMP_UNREADABLE */
    uint64_t updated_ns;     /* atomic: when temp_mc was read */
} jp_ring_zone_entry;

/* The 4096-byte header at offset 0. */
typedef struct jp_ring_header {
    uint8_t magic[8];            /* "JPWRRING" */
    uint32_t version;            /* 1; 0 while the writer initialises */
    uint32_t header_size;        /* 4096, or more whole pages; slots start here */
    uint32_t slot_size;          /* bytes per slot, a multiple of 8 */
    uint32_t slot_count;         /* a power of two */
    uint32_t rail_count;         /* at most 16 */
    uint32_t flags;              /* bit 0: simulated board */
    uint64_t writer_pid;
    int64_t realtime_offset_ns;  /* CLOCK_REALTIME - CLOCK_MONOTONIC */
    uint64_t period_ns;
    uint64_t write_seq;          /* atomic: samples published */
    uint64_t overruns;           /* atomic */
    uint64_t read_errors;        /* atomic */
    uint32_t module_mask;
    int32_t input_rail;          /* -1: none */
    int8_t power_exp;            /* -6 */
    int8_t voltage_exp;          /* -3 */
    int8_t current_exp;          /* -3 */
    uint8_t reserved;
    uint32_t throttle;           /* atomic: JP_FLAG_* */
    uint8_t board[32];           /* UTF-8, NUL-padded */
    jp_ring_rail_entry rails[JP_RING_MAX_RAILS];
    jp_ring_zone_entry thermal[JP_RING_MAX_ZONES];
    uint8_t ext[4096 - 1664];    /* sections (id, size, ...), ended by id 0 */
} jp_ring_header;

/* Section 1, the writer's lifecycle: 32 bytes. */
typedef struct jp_ring_writer_section {
    uint32_t id;          /* JP_RING_SECTION_WRITER */
    uint32_t size;        /* 32 */
    uint64_t generation;  /* 1 + the generation of the ring this one replaced */
    uint32_t state;       /* atomic: JP_WRITER_* */
    uint32_t reserved;
    uint64_t ended_ns;    /* atomic: when state left JP_WRITER_LIVE (0 while live) */
} jp_ring_writer_section;

/* Section 2, the activity counters: 496 bytes, one record under its own sequence word
 * (seq 2n + 1 while record n is written, 2n + 2 once whole, 0 before the first). Every
 * counter is JP_ACTIVITY_ABSENT_U32/_U64 where the board lacks it. */
typedef struct jp_ring_activity_cpu {
    uint32_t util_pm;    /* atomic: utilisation over window_ns, per mille */
    uint32_t khz;        /* atomic: its cluster's running clock, kHz */
} jp_ring_activity_cpu;

typedef struct jp_ring_activity_disk {
    uint8_t name[16];    /* mmcblk0, NUL-padded */
    uint32_t major;      /* device number */
    uint32_t minor;
    uint64_t read_bps;   /* atomic: bytes read per second over window_ns */
} jp_ring_activity_disk;

typedef struct jp_ring_activity_section {
    uint32_t id;               /* JP_RING_SECTION_ACTIVITY */
    uint32_t size;             /* 496 */
    uint64_t period_ns;        /* the records' period */
    uint64_t window_ns;        /* utilisations and rates are taken over this */
    uint32_t cpu_count;        /* entries of cpus in use */
    uint32_t disk_count;       /* entries of disks in use */
    uint64_t seq;              /* atomic: the record's sequence word */
    uint64_t t_ns;             /* atomic: CLOCK_MONOTONIC of the reading */
    uint32_t gpu_load_pm;      /* atomic: per mille */
    uint32_t emc_activity_pm;  /* atomic: per mille of emc_hz */
    uint32_t fan_pwm;          /* atomic: 0-255 */
    uint32_t fan_rpm;          /* atomic */
    uint64_t gpu_hz;           /* atomic */
    uint64_t emc_hz;           /* atomic */
    uint64_t ram_used_kb;      /* atomic */
    uint64_t ram_total_kb;     /* atomic */
    uint64_t swap_used_kb;     /* atomic */
    uint64_t swap_total_kb;    /* atomic */
    jp_ring_activity_cpu cpus[JP_ACTIVITY_MAX_CPUS];     /* indexed by CPU id */
    jp_ring_activity_disk disks[JP_ACTIVITY_MAX_DISKS];
} jp_ring_activity_section;

/* The first 32 bytes of a slot; rail_count jp_ring_slot_rail follow. */
typedef struct jp_ring_slot {
    uint64_t seq;        /* atomic: 2n + 1 while sample n is written, 2n + 2 once complete */
    uint64_t t_ns;       /* CLOCK_MONOTONIC */
    uint32_t flags;      /* JP_FLAG_* */
    uint32_t fresh;      /* bit r: rail r's value is new */
    uint32_t module_uw;
    uint32_t input_uw;
} jp_ring_slot;

typedef struct jp_ring_slot_rail {
    uint32_t power_uw;
    uint32_t voltage_mv;
    uint32_t current_ma;
} jp_ring_slot_rail;

#if defined(__cplusplus)
#define JP_RING_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define JP_RING_STATIC_ASSERT(cond, msg) __extension__ _Static_assert(cond, msg)
#endif

JP_RING_STATIC_ASSERT(sizeof(jp_ring_rail_entry) == 64, "rail entry is 64 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, name) == 0, "rail.name");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, role) == 24, "rail.role");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, reserved0) == 25, "rail.reserved");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, refresh_us) == 28, "rail.refresh_us");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, fresh_count) == 32, "rail.fresh_count");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, last_fresh_ns) == 40, "rail.last_fresh_ns");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_rail_entry, reserved1) == 48, "rail.reserved");

JP_RING_STATIC_ASSERT(sizeof(jp_ring_zone_entry) == 32, "zone entry is 32 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_zone_entry, name) == 0, "zone.name");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_zone_entry, temp_mc) == 20, "zone.temp_mc");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_zone_entry, updated_ns) == 24, "zone.updated_ns");

JP_RING_STATIC_ASSERT(sizeof(jp_ring_header) == 4096, "header is 4096 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, magic) == 0, "magic");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, version) == 8, "version");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, header_size) == 12, "header_size");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, slot_size) == 16, "slot_size");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, slot_count) == 20, "slot_count");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, rail_count) == 24, "rail_count");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, flags) == 28, "flags");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, writer_pid) == 32, "writer_pid");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, realtime_offset_ns) == 40, "realtime_offset_ns");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, period_ns) == 48, "period_ns");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, write_seq) == 56, "write_seq");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, overruns) == 64, "overruns");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, read_errors) == 72, "read_errors");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, module_mask) == 80, "module_mask");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, input_rail) == 84, "input_rail");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, power_exp) == 88, "power_exp");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, voltage_exp) == 89, "voltage_exp");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, current_exp) == 90, "current_exp");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, reserved) == 91, "reserved");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, throttle) == 92, "throttle");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, board) == 96, "board");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, rails) == 128, "rails");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, thermal) == 1152, "thermal");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_header, ext) == 1664, "extension area");
JP_RING_STATIC_ASSERT(sizeof(jp_ring_writer_section) == 32, "writer section is 32 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_writer_section, generation) == 8, "writer.generation");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_writer_section, state) == 16, "writer.state");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_writer_section, ended_ns) == 24, "writer.ended_ns");
JP_RING_STATIC_ASSERT(sizeof(jp_ring_activity_section) == 496, "activity section is 496 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_activity_section, seq) == 32, "activity.seq");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_activity_section, cpus) == 112, "activity.cpus");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_activity_section, disks) == 240, "activity.disks");

JP_RING_STATIC_ASSERT(sizeof(jp_ring_slot) == 32, "slot head is 32 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot, seq) == 0, "slot.seq");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot, t_ns) == 8, "slot.t_ns");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot, flags) == 16, "slot.flags");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot, fresh) == 20, "slot.fresh");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot, module_uw) == 24, "slot.module_uw");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot, input_uw) == 28, "slot.input_uw");
JP_RING_STATIC_ASSERT(sizeof(jp_ring_slot_rail) == 12, "slot rail is 12 bytes");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot_rail, power_uw) == 0, "slot rail power_uw");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot_rail, voltage_mv) == 4, "slot rail voltage_mv");
JP_RING_STATIC_ASSERT(offsetof(jp_ring_slot_rail, current_ma) == 8, "slot rail current_ma");

/* One rail's values in a sample. */
typedef struct jp_sample_rail {
    uint32_t power_uw;
    uint32_t voltage_mv;
    uint32_t current_ma;
} jp_sample_rail;

/* A consistent copy of one sample; rails past rail_count are zero. */
typedef struct jp_sample {
    uint64_t n;           /* sample number */
    uint64_t t_ns;        /* CLOCK_MONOTONIC */
    uint32_t flags;       /* JP_FLAG_* */
    uint32_t fresh;       /* bit r: rail r's value is new */
    uint32_t module_uw;
    uint32_t input_uw;
    uint32_t rail_count;
    jp_sample_rail rails[JP_RING_MAX_RAILS];
} jp_sample;

/* An open ring. The header fields that never change are copied out at open. */
typedef struct jp_ring {
    const unsigned char *map;   /* the whole file, mapped read-only */
    size_t map_size;
    const jp_ring_header *hdr;  /* == map; read atomic fields with jp_ring_load_* */
    uint32_t header_size;
    uint32_t slot_size;
    uint32_t slot_count;
    uint32_t rail_count;
    const jp_ring_writer_section *writer;  /* NULL: the ring has no writer section */
    char board[33];
    char rail_names[JP_RING_MAX_RAILS][25];
} jp_ring;

/* Load an atomic u64 / u32 header field, e.g. jp_ring_load_u64(&r->hdr->overruns). */
static inline uint64_t jp_ring_load_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline uint32_t jp_ring_load_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Samples published so far; the newest is write_seq - 1. */
static inline uint64_t jp_ring_write_seq(const jp_ring *r)
{
    return jp_ring_load_u64(&r->hdr->write_seq);
}

/*
 * The writer's state: JP_WRITER_LIVE (publishing, or killed without cleanup: then the
 * newest sample's t_ns stops advancing), JP_WRITER_CLOSED (stopped cleanly),
 * JP_WRITER_REPLACED (a newer ring is at the path: reopen it); 0 when the ring has no
 * writer section.
 */
static inline uint32_t jp_ring_writer_state(const jp_ring *r)
{
    return r->writer == NULL ? 0u : jp_ring_load_u32(&r->writer->state);
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline void jp__ring_error(char *err, size_t errlen, const char *path, const char *fmt,
                                  ...)
{
    va_list ap;
    int used;
    if (err == NULL || errlen == 0)
        return;
    used = snprintf(err, errlen, "%s: ", path);
    if (used < 0 || (size_t)used >= errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err + used, errlen - (size_t)used, fmt, ap);
    va_end(ap);
}

static inline void jp__ring_copy_name(char *dst, const uint8_t *src, size_t len)
{
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* 0: valid; 1: version 0 (initialising); -1: refused, err says why. */
static inline int jp__ring_check(const jp_ring_header *h, size_t size, const char *path,
                                 char *err, size_t errlen)
{
    uint32_t version = __atomic_load_n(&h->version, __ATOMIC_ACQUIRE);
    static const uint8_t zero_magic[8] = {0};
    uint64_t need = JP_RING_SLOT_HEAD_SIZE + JP_RING_SLOT_RAIL_SIZE * (uint64_t)h->rail_count;
    uint64_t want = (uint64_t)h->header_size + (uint64_t)h->slot_count * h->slot_size;

    if (version == 0 && (memcmp(h->magic, JP_RING_MAGIC, 8) == 0
                         || memcmp(h->magic, zero_magic, 8) == 0))
        return 1;
    if (memcmp(h->magic, JP_RING_MAGIC, 8) != 0)
        jp__ring_error(err, errlen, path, "bad magic: not a jpower telemetry ring");
    else if (version != JP_RING_VERSION)
        jp__ring_error(err, errlen, path, "unsupported layout version %u (this reader knows %u)",
                       (unsigned)version, JP_RING_VERSION);
    else if (h->header_size < JP_RING_HEADER_SIZE || h->header_size % JP_RING_HEADER_SIZE != 0)
        jp__ring_error(err, errlen, path, "header_size is %u, expected a multiple of %u",
                       (unsigned)h->header_size, JP_RING_HEADER_SIZE);
    else if (h->rail_count > JP_RING_MAX_RAILS)
        jp__ring_error(err, errlen, path, "rail_count is %u, at most %d",
                       (unsigned)h->rail_count, JP_RING_MAX_RAILS);
    else if (h->slot_size < need || h->slot_size % 8 != 0)
        jp__ring_error(err, errlen, path,
                       "slot_size %u is not a multiple of 8 of at least %llu",
                       (unsigned)h->slot_size, (unsigned long long)need);
    else if (h->slot_count == 0 || (h->slot_count & (h->slot_count - 1)) != 0)
        jp__ring_error(err, errlen, path, "slot_count %u is not a power of two",
                       (unsigned)h->slot_count);
    else if (size < want)
        jp__ring_error(err, errlen, path, "too short: %llu bytes, the slots need %llu",
                       (unsigned long long)size, (unsigned long long)want);
    else
        return 0;
    return -1;
}

/* Map path read-only into r; 0: valid, 1: initialising (unmapped), -1: refused (unmapped). */
static inline int jp__ring_try_open(const char *path, jp_ring *r, char *err, size_t errlen)
{
    struct stat st;
    void *map;
    int rc, fd = open(path, O_RDONLY
#ifdef O_CLOEXEC
                                | O_CLOEXEC
#endif
    );

    if (fd < 0) {
        jp__ring_error(err, errlen, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        jp__ring_error(err, errlen, path, "cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (st.st_size < (off_t)JP_RING_HEADER_SIZE) {
        jp__ring_error(err, errlen, path, "too short: %llu bytes, the header alone is %u",
                       (unsigned long long)st.st_size, JP_RING_HEADER_SIZE);
        close(fd);
        return -1;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        jp__ring_error(err, errlen, path, "cannot map: %s", strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    rc = jp__ring_check((const jp_ring_header *)map, (size_t)st.st_size, path, err, errlen);
    if (rc != 0) {
        munmap(map, (size_t)st.st_size);
        return rc;
    }
    r->map = (const unsigned char *)map;
    r->map_size = (size_t)st.st_size;
    r->hdr = (const jp_ring_header *)map;
    return 0;
}

static inline void jp__ring_sleep_ms(long ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Walk the section list: 0 (r->writer set or NULL), -1 when it is malformed. */
static inline int jp__ring_sections(jp_ring *r)
{
    uint32_t off = JP_RING_EXT_OFFSET;
    r->writer = NULL;
    while (off + 8 <= r->header_size) {
        uint32_t id, size;
        memcpy(&id, r->map + off, 4);
        memcpy(&size, r->map + off + 4, 4);
        if (id == JP_RING_SECTION_END)
            break;
        if (size < 8 || size % 8 != 0 || size > r->header_size - off)
            return -1;
        if (id == JP_RING_SECTION_WRITER && size >= sizeof(jp_ring_writer_section)
            && r->writer == NULL)
            r->writer = (const jp_ring_writer_section *)(r->map + off);
        off += size;
    }
    return 0;
}

static inline void jp__ring_copy_static(jp_ring *r)
{
    uint32_t i;
    r->header_size = r->hdr->header_size;
    r->slot_size = r->hdr->slot_size;
    r->slot_count = r->hdr->slot_count;
    r->rail_count = r->hdr->rail_count;
    jp__ring_copy_name(r->board, r->hdr->board, sizeof r->hdr->board);
    memset(r->rail_names, 0, sizeof r->rail_names);
    for (i = 0; i < r->rail_count; i++)
        jp__ring_copy_name(r->rail_names[i], r->hdr->rails[i].name, sizeof r->hdr->rails[i].name);
}

static inline void jp_ring_close(jp_ring *r);

/*
 * Open, map read-only and validate the ring at path (per the doc's "Checking a ring"),
 * waiting up to about a second while its version is 0. Returns 0, or -1 with a message
 * naming the file and the problem in err (errlen bytes, may be 0).
 */
static inline int jp_ring_open(const char *path, jp_ring *r, char *err, size_t errlen)
{
    int tries;
    memset(r, 0, sizeof *r);
    for (tries = 1;; tries++) {
        int rc = jp__ring_try_open(path, r, err, errlen);
        if (rc == 0) {
            jp__ring_copy_static(r);
            if (jp__ring_sections(r) != 0) {
                jp__ring_error(err, errlen, path, "malformed section list in the header");
                jp_ring_close(r);
                return -1;
            }
            return 0;
        }
        if (rc < 0)
            return -1;
        if (tries >= JP_RING_INIT_TRIES) {
            jp__ring_error(err, errlen, path,
                           "version 0: the writer is still initialising the ring");
            return -1;
        }
        jp__ring_sleep_ms(100);
    }
}

/* Unmap the ring. */
static inline void jp_ring_close(jp_ring *r)
{
    if (r->map != NULL)
        munmap((void *)r->map, r->map_size);
    memset(r, 0, sizeof *r);
}

/* Copy sample n if its slot holds it complete and untouched during the copy: 0, else -1. */
static inline int jp__ring_copy(const jp_ring *r, uint64_t n, jp_sample *out)
{
    const unsigned char *base =
        r->map + r->header_size + (size_t)(n & (r->slot_count - 1)) * r->slot_size;
    const jp_ring_slot *slot = (const jp_ring_slot *)base;
    const jp_ring_slot_rail *rails = (const jp_ring_slot_rail *)(slot + 1);
    const uint64_t want = 2 * n + 2;
    uint32_t i;

    if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != want)
        return -1;
    out->t_ns = __atomic_load_n(&slot->t_ns, __ATOMIC_RELAXED);
    out->flags = __atomic_load_n(&slot->flags, __ATOMIC_RELAXED);
    out->fresh = __atomic_load_n(&slot->fresh, __ATOMIC_RELAXED);
    out->module_uw = __atomic_load_n(&slot->module_uw, __ATOMIC_RELAXED);
    out->input_uw = __atomic_load_n(&slot->input_uw, __ATOMIC_RELAXED);
    for (i = 0; i < r->rail_count; i++) {
        out->rails[i].power_uw = __atomic_load_n(&rails[i].power_uw, __ATOMIC_RELAXED);
        out->rails[i].voltage_mv = __atomic_load_n(&rails[i].voltage_mv, __ATOMIC_RELAXED);
        out->rails[i].current_ma = __atomic_load_n(&rails[i].current_ma, __ATOMIC_RELAXED);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != want)
        return -1;
    out->n = n;
    out->rail_count = r->rail_count;
    memset(out->rails + r->rail_count, 0,
           (JP_RING_MAX_RAILS - r->rail_count) * sizeof out->rails[0]);
    return 0;
}

/*
 * The newest sample. Returns 0 with *out filled, 1 when no sample has been published yet,
 * -1 when JP_RING_LATEST_TRIES copies in a row were spoiled by the writer (a starved reader).
 */
static inline int jp_ring_latest(const jp_ring *r, jp_sample *out)
{
    int tries;
    for (tries = 0; tries < JP_RING_LATEST_TRIES; tries++) {
        uint64_t w = jp_ring_write_seq(r);
        if (w == 0)
            return 1;
        if (jp__ring_copy(r, w - 1, out) == 0)
            return 0;
    }
    return -1;
}

/*
 * Sample number n. Returns 0 with *out filled, -1 when it has been overwritten or is not
 * written yet.
 */
static inline int jp_ring_sample(const jp_ring *r, uint64_t n, jp_sample *out)
{
    uint64_t w = jp_ring_write_seq(r);
    if (n < w && w - n > r->slot_count)
        return -1;
    return jp__ring_copy(r, n, out);
}

#ifdef __cplusplus
}
#endif

#endif /* JPOWER_RING_H */
