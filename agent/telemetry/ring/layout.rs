//! The ring's byte layout, the one source of truth in Rust: `#[repr(C)]` structs whose
//! offsets and sizes are checked at compile time. `include/jpower_ring.h`,
//! `tools/jpower_ring.py` and `docs/telemetry-ring.md` are checked against [`STRUCTS`] by
//! `tests/jpower/ring_layout.rs`, so none of them can drift from this file.
//!
//! Fields that change after the ring is published are atomics of their width; the rest
//! are written once, before the version is published, and never again. All integers are
//! little-endian (every Jetson and every host jpower runs on).
//!
//! Extension scheme: [`VERSION`] changes only when a reader of the old layout would
//! misread the new one, and readers refuse a version they do not know. Everything a
//! reader may ignore goes into *sections* in the header's extension area (from
//! [`EXT_OFFSET`] to `header_size`): each starts with a `u32` id and a `u32` size (bytes,
//! head included, a multiple of 8), the next follows at `offset + size`, and an id of 0
//! ends the list. A reader skips ids it does not know; a section only ever grows at its
//! end, so a reader uses the fields that lie within `size` and ignores the rest. When the
//! area is full, `header_size` grows by pages and slots move with it. Sections are
//! written before the version is published; their fields that change are atomics.
//! Sections: the writer's lifecycle ([`SECTION_WRITER`]) and the activity counters
//! ([`SECTION_ACTIVITY`]).
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// The first eight bytes of every ring.
pub const MAGIC: [u8; 8] = *b"JPWRRING";
/// The layout version this file describes.
pub const VERSION: u32 = 1;
/// Bytes of the header; slots start here.
pub const HEADER_SIZE: usize = 4096;
/// Rails a ring can carry.
pub const MAX_RAILS: usize = 16;
/// Thermal zones a ring can carry.
pub const MAX_ZONES: usize = 16;
/// A thermal zone's temperature when it is unreadable or the entry is unused.
pub const TEMP_UNREADABLE: i32 = i32::MIN;
/// Where the extension area (sections) starts: the end of version 1's fixed fields.
pub const EXT_OFFSET: usize = 1664;
/// The id that ends the section list (the extension area is zero-filled).
pub const SECTION_END: u32 = 0;
/// The id of the [`WriterSection`].
pub const SECTION_WRITER: u32 = 1;
/// [`WriterSection::state`]: the writer is running and publishing.
pub const WRITER_LIVE: u32 = 1;
/// [`WriterSection::state`]: the writer stopped cleanly; no sample will follow.
pub const WRITER_CLOSED: u32 = 2;
/// The id of the [`ActivitySection`].
pub const SECTION_ACTIVITY: u32 = 2;
/// CPUs the activity section carries.
pub const MAX_CPUS: usize = 16;
/// Disks the activity section carries.
pub const MAX_DISKS: usize = 8;
/// A 32-bit activity counter the board lacks, or could not read this time.
pub const ABSENT_U32: u32 = u32::MAX;
/// A 64-bit activity counter the board lacks, or could not read this time.
pub const ABSENT_U64: u64 = u64::MAX;
/// [`WriterSection::state`]: a newer ring (the next generation) replaced this file at
/// its path; reopen the path.
pub const WRITER_REPLACED: u32 = 3;

/// One field of the layout: its struct, name, offset in the struct and size, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// `header`, `rail`, `zone`, `slot`, `slot_rail` or `writer`.
    pub within: &'static str,
    /// The field's name, as the C header and the document spell it.
    pub name: &'static str,
    /// Offset from the start of its struct.
    pub offset: usize,
    /// Size.
    pub size: usize,
}

/// Declares a `#[repr(C)]` struct of the layout and its table of [`Field`]s, so that
/// the table cannot disagree with the struct.
macro_rules! layout {
    ($(#[$meta:meta])* pub struct $ty:ident as $within:literal {
        $($(#[$fmeta:meta])* pub $name:ident: $fty:ty,)*
    }) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Debug)]
        pub struct $ty {
            $($(#[$fmeta])* pub $name: $fty,)*
        }

        impl $ty {
            /// This struct's fields, in declaration order.
            pub const FIELDS: &'static [Field] = &[$(Field {
                within: $within,
                name: stringify!($name),
                offset: offset_of!($ty, $name),
                size: size_of::<$fty>(),
            }),*];
        }
    };
}

layout! {
    /// One rail of the rail table: 64 bytes.
    pub struct RailEntry as "rail" {
        /// Label (`VDD_GPU_SOC`), UTF-8, NUL-padded.
        pub name: [u8; 24],
        /// 0 input, 1 module, 2 sub-rail, 3 carrier.
        pub role: u8,
        /// Zero.
        pub reserved0: [u8; 3],
        /// The sensor's refresh interval for this rail, microseconds.
        pub refresh_us: u32,
        /// Samples in which this rail's value was new.
        pub fresh_count: AtomicU64,
        /// Time of the newest fresh value (0: none yet).
        pub last_fresh_ns: AtomicU64,
        /// Zero.
        pub reserved1: [u8; 16],
    }
}

layout! {
    /// One thermal zone: 32 bytes.
    pub struct ZoneEntry as "zone" {
        /// The zone's `type` (`cpu-thermal`), NUL-padded, as five little-endian words; empty
        /// means unused.
        pub name: [AtomicU32; 5],
        /// Temperature, milli-degrees Celsius; [`TEMP_UNREADABLE`] when unreadable.
        pub temp_mc: AtomicI32,
        /// When `temp_mc` was read (`CLOCK_MONOTONIC` ns).
        pub updated_ns: AtomicU64,
    }
}

layout! {
    /// The header at offset 0: 4096 bytes.
    pub struct Header as "header" {
        /// [`MAGIC`].
        pub magic: [u8; 8],
        /// [`VERSION`]; 0 while the writer initialises.
        pub version: AtomicU32,
        /// [`HEADER_SIZE`].
        pub header_size: u32,
        /// Bytes per slot, a multiple of 8.
        pub slot_size: u32,
        /// Slots, a power of two.
        pub slot_count: u32,
        /// Rails per sample, at most [`MAX_RAILS`].
        pub rail_count: u32,
        /// Bit 0: the board is simulated.
        pub flags: u32,
        /// The writing process.
        pub writer_pid: u64,
        /// `CLOCK_REALTIME - CLOCK_MONOTONIC` when the ring was created, ns.
        pub realtime_offset_ns: i64,
        /// The requested sampling period, ns.
        pub period_ns: u64,
        /// Samples published so far; the newest is sample `write_seq - 1`.
        pub write_seq: AtomicU64,
        /// Sampler periods missed.
        pub overruns: AtomicU64,
        /// Failed rail reads.
        pub read_errors: AtomicU64,
        /// Bit `r`: rail `r` is summed into module power.
        pub module_mask: u32,
        /// The module's input rail, or -1.
        pub input_rail: i32,
        /// -6: power values are microwatts.
        pub power_exp: i8,
        /// -3: millivolts.
        pub voltage_exp: i8,
        /// -3: milliamperes.
        pub current_exp: i8,
        /// Zero.
        pub reserved: u8,
        /// The current throttle flags (bits 0-2 of a slot's `flags`).
        pub throttle: AtomicU32,
        /// Board model, UTF-8, NUL-padded.
        pub board: [u8; 32],
        /// The rail table; entries past `rail_count` are zero.
        pub rails: [RailEntry; MAX_RAILS],
        /// The thermal zones.
        pub thermal: [ZoneEntry; MAX_ZONES],
        /// The extension area: sections, then zero up to `header_size`. Reached only by
        /// offset from the mapping's base, as [`WriterSection`] and [`ActivitySection`]
        /// whose atomics change after publication: an `UnsafeCell`, so that a `&Header`
        /// does not claim those bytes are frozen.
        pub ext: std::cell::UnsafeCell<[u8; HEADER_SIZE - EXT_OFFSET]>,
    }
}

layout! {
    /// Section [`SECTION_WRITER`], the writer's lifecycle: 32 bytes, the first section.
    pub struct WriterSection as "writer" {
        /// [`SECTION_WRITER`].
        pub id: u32,
        /// 32.
        pub size: u32,
        /// 1 + the generation of the ring this one replaced at the same path (1: none).
        pub generation: u64,
        /// [`WRITER_LIVE`], [`WRITER_CLOSED`] or [`WRITER_REPLACED`]; a writer killed
        /// without cleanup leaves [`WRITER_LIVE`] and stops publishing.
        pub state: AtomicU32,
        /// Zero.
        pub reserved: u32,
        /// When `state` left [`WRITER_LIVE`] (`CLOCK_MONOTONIC` ns; 0 while live).
        pub ended_ns: AtomicU64,
    }
}

layout! {
    /// One CPU of the [`ActivitySection`]: 8 bytes.
    pub struct ActivityCpu as "activity_cpu" {
        /// Utilisation over the section's `window_ns`, per mille; [`ABSENT_U32`] while
        /// offline (or past `cpu_count`).
        pub util_pm: AtomicU32,
        /// Its cluster's running clock, kHz; [`ABSENT_U32`] while offline.
        pub khz: AtomicU32,
    }
}

layout! {
    /// One disk of the [`ActivitySection`]: 32 bytes.
    pub struct ActivityDisk as "activity_disk" {
        /// Kernel name (`mmcblk0`), NUL-padded; empty past `disk_count`.
        pub name: [u8; 16],
        /// Device number, major.
        pub major: u32,
        /// Device number, minor.
        pub minor: u32,
        /// Bytes read per second over the section's `window_ns`; [`ABSENT_U64`] when
        /// unreadable.
        pub read_bps: AtomicU64,
    }
}

layout! {
    /// Section [`SECTION_ACTIVITY`], the activity counters at their own rate: 496 bytes.
    /// One record under its own sequence lock; every counter [`ABSENT_U32`] /
    /// [`ABSENT_U64`] where the board lacks it.
    pub struct ActivitySection as "activity" {
        /// [`SECTION_ACTIVITY`].
        pub id: u32,
        /// 496.
        pub size: u32,
        /// The counters' sampling period, ns.
        pub period_ns: u64,
        /// The window utilisations and rates are taken over, ns.
        pub window_ns: u64,
        /// CPUs in `cpus` (the possible ones, at most [`MAX_CPUS`]).
        pub cpu_count: u32,
        /// Disks in `disks`.
        pub disk_count: u32,
        /// `2n + 1` while record `n` is being written, `2n + 2` once it is whole; 0 before
        /// the first.
        pub seq: AtomicU64,
        /// `CLOCK_MONOTONIC` time of the record, ns.
        pub t_ns: AtomicU64,
        /// GPU load, per mille.
        pub gpu_load_pm: AtomicU32,
        /// EMC activity, per mille of its running clock.
        pub emc_activity_pm: AtomicU32,
        /// The fan's PWM duty, 0-255.
        pub fan_pwm: AtomicU32,
        /// The fan's speed, rpm.
        pub fan_rpm: AtomicU32,
        /// The GPU's running clock, Hz.
        pub gpu_hz: AtomicU64,
        /// The EMC's running clock, Hz.
        pub emc_hz: AtomicU64,
        /// RAM in use (total less available), kB.
        pub ram_used_kb: AtomicU64,
        /// RAM in all, kB.
        pub ram_total_kb: AtomicU64,
        /// Swap in use, kB.
        pub swap_used_kb: AtomicU64,
        /// Swap in all, kB (0: no swap).
        pub swap_total_kb: AtomicU64,
        /// Per CPU, indexed by CPU id.
        pub cpus: [ActivityCpu; MAX_CPUS],
        /// The disks.
        pub disks: [ActivityDisk; MAX_DISKS],
    }
}

layout! {
    /// The first 32 bytes of a slot; `rail_count` [`SlotRail`]s follow.
    pub struct SlotHead as "slot" {
        /// `2n + 1` while sample `n` is being written, `2n + 2` once it is complete.
        pub seq: AtomicU64,
        /// `CLOCK_MONOTONIC` time of the sample, ns.
        pub t_ns: AtomicU64,
        /// Bit 0 throttled, bit 1 INA3221 warning alarm, bit 2 critical alarm.
        pub flags: AtomicU32,
        /// Bit `r`: rail `r`'s value is new in this sample.
        pub fresh: AtomicU32,
        /// Module power, microwatts.
        pub module_uw: AtomicU32,
        /// The input rail's power, microwatts, or 0.
        pub input_uw: AtomicU32,
    }
}

layout! {
    /// One rail's values in a slot: 12 bytes.
    pub struct SlotRail as "slot_rail" {
        /// Microwatts.
        pub power_uw: AtomicU32,
        /// Millivolts (0 where only the power is read: L4T 32's IIO driver).
        pub voltage_mv: AtomicU32,
        /// Milliamperes (0 where the voltage is).
        pub current_ma: AtomicU32,
    }
}

/// Bytes of a slot carrying `rails` rails: the head and the rails, rounded up to 8.
pub const fn slot_size(rails: usize) -> usize {
    (size_of::<SlotHead>() + size_of::<SlotRail>() * rails).div_ceil(8) * 8
}

/// Every struct of the layout: its name in the C header's and the document's tables, its
/// size, and its fields.
pub const STRUCTS: [(&str, usize, &[Field]); 9] = [
    ("header", size_of::<Header>(), Header::FIELDS),
    ("rail", size_of::<RailEntry>(), RailEntry::FIELDS),
    ("zone", size_of::<ZoneEntry>(), ZoneEntry::FIELDS),
    ("slot", size_of::<SlotHead>(), SlotHead::FIELDS),
    ("slot_rail", size_of::<SlotRail>(), SlotRail::FIELDS),
    ("writer", size_of::<WriterSection>(), WriterSection::FIELDS),
    (
        "activity",
        size_of::<ActivitySection>(),
        ActivitySection::FIELDS,
    ),
    (
        "activity_cpu",
        size_of::<ActivityCpu>(),
        ActivityCpu::FIELDS,
    ),
    (
        "activity_disk",
        size_of::<ActivityDisk>(),
        ActivityDisk::FIELDS,
    ),
];

// The documented layout, checked when the crate compiles.
const _: () = {
    assert!(size_of::<Header>() == HEADER_SIZE);
    assert!(size_of::<RailEntry>() == 64);
    assert!(size_of::<ZoneEntry>() == 32);
    assert!(size_of::<SlotHead>() == 32);
    assert!(size_of::<SlotRail>() == 12);
    assert!(offset_of!(Header, version) == 8);
    assert!(offset_of!(Header, write_seq) == 56);
    assert!(offset_of!(Header, throttle) == 92);
    assert!(offset_of!(Header, board) == 96);
    assert!(offset_of!(Header, rails) == 128);
    assert!(offset_of!(Header, thermal) == 1152);
    assert!(offset_of!(Header, ext) == EXT_OFFSET);
    assert!(size_of::<WriterSection>() == 32);
    assert!(offset_of!(WriterSection, state) == 16);
    assert!(size_of::<ActivitySection>() == 496);
    // The writer and activity sections, one after the other, fit in the extension area.
    assert!(EXT_OFFSET + size_of::<WriterSection>() + size_of::<ActivitySection>() <= HEADER_SIZE);
    assert!(offset_of!(ActivitySection, seq) == 32);
    assert!(offset_of!(ActivitySection, cpus) == 112);
    assert!(offset_of!(ActivitySection, disks) == 240);
    assert!(size_of::<ActivityDisk>() == 32);
    assert!(offset_of!(RailEntry, refresh_us) == 28);
    assert!(offset_of!(RailEntry, fresh_count) == 32);
    assert!(offset_of!(ZoneEntry, temp_mc) == 20);
    assert!(offset_of!(SlotHead, module_uw) == 24);
    // Every field at its natural alignment: the atomics need it, and a page-aligned
    // mapping gives it for the header and for slots (a multiple of 8 bytes each).
    assert!(std::mem::align_of::<Header>() == 8);
    assert!(std::mem::align_of::<SlotHead>() == 8);
    assert!(slot_size(0) == 32 && slot_size(1) == 48 && slot_size(16) == 224);
};
