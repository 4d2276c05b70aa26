//! The shared-memory telemetry ring: the sampler writes, any local process reads, no one
//! waits. The byte layout and both protocols are specified in `docs/telemetry-ring.md`;
//! [`layout`] is that document in code, and [`seqlock`] the slot protocol on its own.
//!
//! Every field a reader may see change is accessed as an atomic of its width (relaxed for
//! slot payloads, which the per-slot sequence word guards), so the protocol is free of data
//! races in the Rust memory model and costs plain loads and stores on arm64 and x86.
//! Each atomic names its partner: `seq` in [`seqlock`]; `write_seq` (writer, release) with
//! the reader's acquire load; the writer section's `state` (release) with
//! [`RingReader::writer`]'s acquire load.
//!
//! Lifecycle: [`RingWriter::create`] builds the ring under a temporary name (owner-only,
//! version 0), publishes the version, gives it mode 0640 and only then renames it over
//! the path, so the path never shows an incomplete header; the ring it replaces is marked
//! [`layout::WRITER_REPLACED`] and the new one carries the next generation. Dropping the
//! writer marks it [`layout::WRITER_CLOSED`].

pub mod layout;
mod reader;
pub mod seqlock;
mod writer;

pub use layout::{HEADER_SIZE, MAGIC, MAX_RAILS, MAX_ZONES, VERSION};
pub use reader::{Lifecycle, Missing, RingReader, WriterState};
pub use writer::RingWriter;

use crate::board::counters::Disk;
use layout::{
    ActivitySection, Header, SlotHead, SlotRail, WriterSection, EXT_OFFSET, SECTION_ACTIVITY,
    SECTION_END, SECTION_WRITER,
};
use std::io;
use std::mem::size_of;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What a ring describes, fixed when it is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingInfo {
    /// The board model (cut to 31 bytes in the ring).
    pub board: String,
    /// Whether the board is simulated.
    pub simulated: bool,
    /// The requested sampling period, ns (0 until the sampler knows it).
    pub period_ns: u64,
    /// Slots, a power of two.
    pub slot_count: u32,
    /// The rails, in the order of each sample's values.
    pub rails: Vec<RailInfo>,
    /// Bit `r`: rail `r` is summed into module power.
    pub module_mask: u32,
    /// The module's input rail, where the board has one.
    pub input_rail: Option<usize>,
    /// The thermal zones' names (at most [`MAX_ZONES`], cut to 19 bytes): in the header
    /// before it is published, so a reader never sees a table being filled.
    pub zones: Vec<String>,
    /// The activity section's fixed part, where the ring has one.
    pub activity: Option<ActivityInfo>,
}

/// The fixed part of a ring's activity section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityInfo {
    /// The counters' sampling period, ns.
    pub period_ns: u64,
    /// The window utilisations and rates are taken over, ns.
    pub window_ns: u64,
    /// CPUs covered (at most [`MAX_CPUS`]).
    pub cpu_count: usize,
    /// The disks, in the section's order (at most [`MAX_DISKS`]).
    pub disks: Vec<Disk>,
}

impl RingInfo {
    /// The slowest rail's refresh interval, seconds: how long the sensor may hold a value.
    pub fn slowest_refresh_s(&self) -> f64 {
        self.rails.iter().map(|r| r.refresh_us).max().unwrap_or(0) as f64 * 1e-6
    }

    /// A simulated 1 kHz ring of `slots` slots whose module rails are `rails` (tests).
    #[cfg(test)]
    pub(crate) fn for_test(rails: &[&str], slots: u32) -> RingInfo {
        RingInfo {
            board: "b".into(),
            simulated: true,
            period_ns: 1_000_000,
            slot_count: slots,
            rails: rails
                .iter()
                .map(|&name| RailInfo {
                    name: name.into(),
                    role: 1,
                    refresh_us: 1,
                })
                .collect(),
            module_mask: (1u32 << rails.len()) - 1,
            input_rail: None,
            zones: Vec::new(),
            activity: None,
        }
    }
}

/// One rail of the ring's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailInfo {
    /// Its label (`VDD_GPU_SOC`), cut to 23 bytes in the ring.
    pub name: String,
    /// 0 input, 1 module, 2 sub-rail, 3 carrier.
    pub role: u8,
    /// The sensor's refresh interval, microseconds.
    pub refresh_us: u32,
}

/// Ring errors.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The file could not be created, opened or mapped.
    #[error("telemetry ring {}: {source}", path.display())]
    Io {
        /// The ring's path.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file is not a ring this jpower reads.
    #[error("telemetry ring {}: {why}", path.display())]
    Invalid {
        /// The ring's path.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// A mapped ring seen through its layout: the header and the slots. Bounds and
/// alignment are checked when it is made (the mapping is page-aligned and slots are a
/// multiple of 8 bytes), so every access after that is in bounds.
struct Mapped {
    base: *const u8,
    header_size: usize,
    slot_count: u64,
    slot_size: usize,
    rails: usize,
    /// Offset of the writer section, where the ring has one.
    writer: Option<usize>,
    /// Offset of the activity section, where the ring has one.
    activity: Option<usize>,
}

// SAFETY: every field a thread may see change is an atomic (the sections' inside the
// header's `ext` cell, reached only by raw offset); the rest is written before the ring is
// published (or before the mapping is shared) and never again.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// The layout over `len` mapped bytes at `base`, if they hold the header and the slots
    /// and the section list is well formed.
    fn new(
        base: *const u8,
        len: usize,
        header_size: usize,
        slot_count: u32,
        slot_size: usize,
        rails: usize,
    ) -> Option<Mapped> {
        let fits = rails <= MAX_RAILS
            && header_size >= HEADER_SIZE
            && header_size % HEADER_SIZE == 0
            && slot_size >= layout::slot_size(rails)
            && slot_size % 8 == 0
            && slot_count.is_power_of_two()
            && len >= header_size + slot_count as usize * slot_size
            && base as usize % std::mem::align_of::<Header>() == 0;
        if !fits {
            return None;
        }
        let list: Vec<_> = sections(base, header_size)?.collect();
        let find = |want: u32, least: usize| {
            list.iter()
                .find(|&&(id, size, _)| id == want && size >= least)
                .map(|&(_, _, at)| at)
        };
        Some(Mapped {
            base,
            header_size,
            slot_count: u64::from(slot_count),
            slot_size,
            rails,
            writer: find(SECTION_WRITER, size_of::<WriterSection>()),
            activity: find(SECTION_ACTIVITY, size_of::<ActivitySection>()),
        })
    }

    /// The published ring of `len` mapped bytes at `base`, checked as `docs/telemetry-ring.md`
    /// says a reader checks it; the error says why it is refused.
    fn published(base: *const u8, len: usize) -> Result<Mapped, String> {
        if len < HEADER_SIZE {
            return Err(format!("{len} bytes, shorter than its 4096-byte header"));
        }
        if base as usize % std::mem::align_of::<Header>() != 0 {
            return Err("misaligned mapping".into());
        }
        // SAFETY: the mapping holds a whole, aligned header (checked above) and outlives
        // `h`; fields that change are atomics.
        let h = unsafe { &*(base as *const Header) };
        if h.magic != MAGIC {
            return Err("not a jpower telemetry ring (bad magic)".into());
        }
        // Partner: the writer's release store of the version in `RingWriter::create`.
        match acquire_u32(&h.version) {
            VERSION => {}
            0 => return Err("the writer is still initialising it (version 0); retry".into()),
            v => {
                return Err(format!(
                    "layout version {v}, this jpower reads version {VERSION}"
                ))
            }
        }
        let (header_size, slot_size, slot_count, rails) = (
            h.header_size as usize,
            h.slot_size as usize,
            h.slot_count,
            h.rail_count as usize,
        );
        if header_size < HEADER_SIZE
            || header_size % HEADER_SIZE != 0
            || rails > MAX_RAILS
            || slot_size < layout::slot_size(rails)
            || slot_size % 8 != 0
            || !slot_count.is_power_of_two()
        {
            return Err("inconsistent header sizes".into());
        }
        if len < header_size + slot_count as usize * slot_size {
            return Err(format!("truncated: {len} bytes for {slot_count} slots"));
        }
        Mapped::new(base, len, header_size, slot_count, slot_size, rails)
            .ok_or_else(|| "malformed section list in the header's extension area".into())
    }

    /// The writer section, where the ring has one.
    fn writer(&self) -> Option<&WriterSection> {
        // SAFETY: `new` found the section within the header (8-aligned, its size at least
        // the struct's); the mapping lives as long as `self`; fields that change are atomics.
        self.writer
            .map(|at| unsafe { &*(self.base.add(at) as *const WriterSection) })
    }

    /// The activity section, where the ring has one.
    fn activity(&self) -> Option<&ActivitySection> {
        // SAFETY: as for `writer`: found within the header, 8-aligned, at least the
        // struct's size; fields that change are atomics.
        self.activity
            .map(|at| unsafe { &*(self.base.add(at) as *const ActivitySection) })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping holds a whole, aligned header (checked in `new`) and lives
        // as long as `self`; fields that change are atomics.
        unsafe { &*(self.base as *const Header) }
    }

    /// The slot of sample `n`: its head and its rails.
    fn slot(&self, n: u64) -> (&SlotHead, &[SlotRail]) {
        let at = self.header_size + (n % self.slot_count) as usize * self.slot_size;
        // SAFETY: the slot lies inside the mapping and is 8-aligned (checked in `new`:
        // slots are a multiple of 8 bytes after a header of whole pages); its rails follow its
        // head within the slot's size; every field is atomic.
        unsafe {
            let head = self.base.add(at);
            (
                &*(head as *const SlotHead),
                std::slice::from_raw_parts(
                    head.add(std::mem::size_of::<SlotHead>()) as *const SlotRail,
                    self.rails,
                ),
            )
        }
    }
}

/// An acquire load as a reader's read-only mapping allows it: atomic loads on read-only
/// memory are sound only `Relaxed` (std's "atomic accesses to read-only memory"), so a
/// relaxed load then an acquire fence, which orders the same.
fn acquire_u64(a: &AtomicU64) -> u64 {
    let v = a.load(Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Acquire);
    v
}

/// [`acquire_u64`] for a 32-bit word.
fn acquire_u32(a: &AtomicU32) -> u32 {
    let v = a.load(Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Acquire);
    v
}

/// The sections of the header of `header_size` bytes at `base`, as `(id, size, offset)`,
/// or `None` when the list is malformed (a size under 8, not a multiple of 8, or past
/// the header). The header must be mapped and published.
fn sections(
    base: *const u8,
    header_size: usize,
) -> Option<impl Iterator<Item = (u32, usize, usize)>> {
    let word = |at: usize| {
        let mut b = [0u8; 4];
        // SAFETY: `at + 4 <= header_size`, inside the mapped header (checked by callers);
        // a section's head is written before the version is published and never again.
        unsafe { std::ptr::copy_nonoverlapping(base.add(at), b.as_mut_ptr(), 4) };
        u32::from_le_bytes(b)
    };
    let mut found = Vec::new();
    let mut at = EXT_OFFSET;
    while at + 8 <= header_size {
        let (id, size) = (word(at), word(at + 4) as usize);
        if id == SECTION_END {
            break;
        }
        if size < 8 || size % 8 != 0 || at + size > header_size {
            return None;
        }
        found.push((id, size, at));
        at += size;
    }
    Some(found.into_iter())
}
