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
pub mod seqlock;

pub use layout::{HEADER_SIZE, MAGIC, MAX_RAILS, MAX_ZONES, VERSION};

use super::activity::{Activity, CpuActivity};
use super::Sample;
use crate::board::counters::Disk;
use layout::{
    ActivitySection, Header, SlotHead, SlotRail, WriterSection, ABSENT_U32, ABSENT_U64, EXT_OFFSET,
    MAX_CPUS, MAX_DISKS, SECTION_ACTIVITY, SECTION_END, SECTION_WRITER, TEMP_UNREADABLE,
    WRITER_CLOSED, WRITER_LIVE, WRITER_REPLACED,
};
use memmap2::{Mmap, MmapMut};
use seqlock::Read;
use std::fs::{File, OpenOptions};
use std::io;
use std::mem::size_of;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

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

/// The writing side (the sampler, and the thermal watcher for header fields).
pub struct RingWriter {
    _map: MmapMut,
    ring: Mapped,
    path: PathBuf,
}

impl std::fmt::Debug for RingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingWriter")
            .field("path", &self.path)
            .finish()
    }
}

/// A fixed-size, NUL-padded copy of `s`, cut to leave at least one NUL and at a
/// character boundary, so the field stays valid UTF-8 (a 32-byte field holds 31 bytes).
fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let mut n = s.len().min(N - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// A zone name as the header's five little-endian words.
fn words(name: &str) -> [AtomicU32; 5] {
    let bytes: [u8; 20] = padded(name);
    std::array::from_fn(|i| {
        AtomicU32::new(u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]))
    })
}

/// The header of a new ring describing `info` with `slot_size`-byte slots, version 0.
fn new_header(info: &RingInfo, slot_size: usize) -> Header {
    let rail = |r: usize| {
        let (name, role, refresh_us) = info
            .rails
            .get(r)
            .map_or(("", 0, 0), |r| (r.name.as_str(), r.role, r.refresh_us));
        layout::RailEntry {
            name: padded(name),
            role,
            reserved0: [0; 3],
            refresh_us,
            fresh_count: AtomicU64::new(0),
            last_fresh_ns: AtomicU64::new(0),
            reserved1: [0; 16],
        }
    };
    let zone = |z: usize| layout::ZoneEntry {
        name: words(info.zones.get(z).map_or("", String::as_str)),
        temp_mc: AtomicI32::new(TEMP_UNREADABLE),
        updated_ns: AtomicU64::new(0),
    };
    Header {
        magic: MAGIC,
        version: AtomicU32::new(0),
        header_size: HEADER_SIZE as u32,
        slot_size: slot_size as u32,
        slot_count: info.slot_count,
        rail_count: info.rails.len() as u32,
        flags: u32::from(info.simulated),
        writer_pid: u64::from(std::process::id()),
        realtime_offset_ns: crate::support::clock::realtime_offset_ns(),
        period_ns: info.period_ns,
        write_seq: AtomicU64::new(0),
        overruns: AtomicU64::new(0),
        read_errors: AtomicU64::new(0),
        module_mask: info.module_mask,
        input_rail: info.input_rail.map_or(-1, |i| i as i32),
        power_exp: -6,
        voltage_exp: -3,
        current_exp: -3,
        reserved: 0,
        throttle: AtomicU32::new(0),
        board: padded(&info.board),
        rails: std::array::from_fn(rail),
        thermal: std::array::from_fn(zone),
        ext: std::cell::UnsafeCell::new([0; HEADER_SIZE - EXT_OFFSET]),
    }
}

/// A new activity section describing `info`, every counter absent until the first record.
fn new_activity_section(info: &ActivityInfo) -> ActivitySection {
    let absent32 = || AtomicU32::new(ABSENT_U32);
    let absent64 = || AtomicU64::new(ABSENT_U64);
    let disk = |d: usize| {
        let (name, major, minor) = info
            .disks
            .get(d)
            .map_or(("", 0, 0), |d| (d.name.as_str(), d.major, d.minor));
        layout::ActivityDisk {
            name: padded(name),
            major,
            minor,
            read_bps: absent64(),
        }
    };
    ActivitySection {
        id: SECTION_ACTIVITY,
        size: size_of::<ActivitySection>() as u32,
        period_ns: info.period_ns,
        window_ns: info.window_ns,
        cpu_count: info.cpu_count.min(MAX_CPUS) as u32,
        disk_count: info.disks.len().min(MAX_DISKS) as u32,
        seq: AtomicU64::new(0),
        t_ns: AtomicU64::new(0),
        gpu_load_pm: absent32(),
        emc_activity_pm: absent32(),
        fan_pwm: absent32(),
        fan_rpm: absent32(),
        gpu_hz: absent64(),
        emc_hz: absent64(),
        ram_used_kb: absent64(),
        ram_total_kb: absent64(),
        swap_used_kb: absent64(),
        swap_total_kb: absent64(),
        cpus: std::array::from_fn(|_| layout::ActivityCpu {
            util_pm: absent32(),
            khz: absent32(),
        }),
        disks: std::array::from_fn(disk),
    }
}

/// The ring a new one replaces at its path, mapped writable where permissions allow, so
/// that its readers can be told.
struct Previous {
    map: Option<MmapMut>,
    generation: u64,
}

impl Previous {
    /// The ring at `path`, if it is one this jpower reads.
    fn at(path: &Path) -> Option<Previous> {
        if let Ok(file) = OpenOptions::new().read(true).write(true).open(path) {
            // SAFETY: a shared mapping of a ring file; every field read or written after
            // publication is an atomic, and the fixed ones are only read.
            let mut map = unsafe { MmapMut::map_mut(&file) }.ok()?;
            let generation = Self::generation(map.as_mut_ptr(), map.len())?;
            return Some(Previous {
                map: Some(map),
                generation,
            });
        }
        let file = File::open(path).ok()?;
        // SAFETY: a read-only mapping; as above.
        let map = unsafe { Mmap::map(&file) }.ok()?;
        Some(Previous {
            generation: Self::generation(map.as_ptr(), map.len())?,
            map: None,
        })
    }

    /// The generation of the published ring of `len` bytes at `base` (0: it has no writer
    /// section).
    fn generation(base: *const u8, len: usize) -> Option<u64> {
        let ring = Mapped::published(base, len).ok()?;
        Some(ring.writer().map_or(0, |w| w.generation))
    }

    /// Tells its readers that a newer ring is at the path.
    fn replaced(&mut self) {
        let Some(map) = self.map.as_mut() else {
            return;
        };
        if let Ok(ring) = Mapped::published(map.as_mut_ptr(), map.len()) {
            if let Some(w) = ring.writer() {
                if w.ended_ns.load(Ordering::Relaxed) == 0 {
                    w.ended_ns
                        .store(crate::support::clock::monotonic_ns(), Ordering::Relaxed);
                }
                // Partner: the acquire load in `RingReader::writer`.
                w.state.store(WRITER_REPLACED, Ordering::Release);
            }
        }
    }
}

impl RingWriter {
    /// Creates the ring at `path`: built under a temporary name owner-only with version 0,
    /// version published, mode 0640, then renamed over `path`, so the path only ever holds
    /// a complete ring. A ring it replaces is marked replaced, and this one carries the
    /// next generation.
    pub fn create(path: &Path, info: &RingInfo) -> Result<RingWriter, RingError> {
        let io = |source| RingError::Io {
            path: path.to_path_buf(),
            source,
        };
        let invalid = |why: &str| RingError::Invalid {
            path: path.to_path_buf(),
            why: why.into(),
        };
        if info.rails.len() > MAX_RAILS {
            return Err(invalid("more than 16 rails"));
        }
        if !info.slot_count.is_power_of_two() {
            return Err(invalid("slot count must be a power of two"));
        }
        if let Some(dir) = path.parent() {
            // Searchable by all: the ring's own mode and group decide who reads it.
            crate::support::runtime::make_dir(dir, 0o755).map_err(io)?;
        }
        let slot_size = layout::slot_size(info.rails.len());
        let len = HEADER_SIZE + info.slot_count as usize * slot_size;
        let tmp = path.with_extension("ring.tmp");
        let _ = std::fs::remove_file(&tmp);
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        file.set_len(len as u64).map_err(io)?;
        // SAFETY: the file is ours (just created, owner-only) and sized before mapping.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        let mut previous = Previous::at(path);
        let writer = WriterSection {
            id: SECTION_WRITER,
            size: size_of::<WriterSection>() as u32,
            generation: previous.as_ref().map_or(0, |p| p.generation) + 1,
            state: AtomicU32::new(WRITER_LIVE),
            reserved: 0,
            ended_ns: AtomicU64::new(0),
        };
        // SAFETY: the mapping holds an aligned header (`len` covers it; mappings are
        // page-aligned), no one else can see it yet (owner-only, not yet at its final
        // path), and the slots after it are zero, which is a valid empty slot. The writer
        // and activity sections lie in the header's extension area, 8-aligned (their
        // sizes are multiples of 8), and together fit in it (checked at compile time).
        unsafe {
            std::ptr::write(map.as_mut_ptr() as *mut Header, new_header(info, slot_size));
            std::ptr::write(
                map.as_mut_ptr().add(EXT_OFFSET) as *mut WriterSection,
                writer,
            );
            if let Some(a) = &info.activity {
                std::ptr::write(
                    map.as_mut_ptr()
                        .add(EXT_OFFSET + size_of::<WriterSection>())
                        as *mut ActivitySection,
                    new_activity_section(a),
                );
            }
        }
        let ring = Mapped::new(
            map.as_mut_ptr(),
            len,
            HEADER_SIZE,
            info.slot_count,
            slot_size,
            info.rails.len(),
        )
        .ok_or_else(|| invalid("the mapping does not hold the layout"))?;
        // Partner: the reader's version check in `RingReader::open`.
        ring.header().version.store(VERSION, Ordering::Release);
        file.set_permissions(std::fs::Permissions::from_mode(0o640))
            .map_err(io)?;
        crate::support::runtime::adopt(&file, &tmp).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        if let Some(p) = previous.as_mut() {
            p.replaced();
        }
        Ok(RingWriter {
            _map: map,
            ring,
            path: path.to_path_buf(),
        })
    }

    /// This ring's generation at its path.
    pub fn generation(&self) -> u64 {
        self.ring.writer().map_or(0, |w| w.generation)
    }

    /// The ring's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Publishes sample number `n` (the caller counts from 0). Allocates nothing.
    pub fn publish(&self, n: u64, s: &Sample) {
        let (head, rails) = self.ring.slot(n);
        seqlock::write(&head.seq, n, || {
            head.t_ns.store(s.t_ns, Ordering::Relaxed);
            head.flags.store(s.flags, Ordering::Relaxed);
            head.fresh.store(s.fresh, Ordering::Relaxed);
            head.module_uw.store(s.module_uw, Ordering::Relaxed);
            head.input_uw.store(s.input_uw, Ordering::Relaxed);
            for (slot, v) in rails.iter().zip(&s.rails) {
                slot.power_uw.store(v.power_uw, Ordering::Relaxed);
                slot.voltage_mv.store(v.voltage_mv, Ordering::Relaxed);
                slot.current_ma.store(v.current_ma, Ordering::Relaxed);
            }
        });
        // Partner: `RingReader::write_seq`.
        self.ring.header().write_seq.store(n + 1, Ordering::Release);
    }

    /// Publishes activity record number `n` (the caller counts from 0) into the activity
    /// section, if the ring has one. Allocates nothing.
    pub fn publish_activity(&self, n: u64, a: &Activity) {
        let Some(sec) = self.ring.activity() else {
            return;
        };
        let put32 =
            |f: &AtomicU32, v: Option<u32>| f.store(v.unwrap_or(ABSENT_U32), Ordering::Relaxed);
        let put64 =
            |f: &AtomicU64, v: Option<u64>| f.store(v.unwrap_or(ABSENT_U64), Ordering::Relaxed);
        seqlock::write(&sec.seq, n, || {
            sec.t_ns.store(a.t_ns, Ordering::Relaxed);
            put32(&sec.gpu_load_pm, a.gpu_load_pm);
            put64(&sec.gpu_hz, a.gpu_hz);
            put32(&sec.emc_activity_pm, a.emc_activity_pm);
            put64(&sec.emc_hz, a.emc_hz);
            put32(&sec.fan_pwm, a.fan_pwm);
            put32(&sec.fan_rpm, a.fan_rpm);
            let m = a.memory;
            put64(&sec.ram_used_kb, m.map(|m| m.ram_used_kb));
            put64(&sec.ram_total_kb, m.map(|m| m.ram_total_kb));
            put64(&sec.swap_used_kb, m.map(|m| m.swap_used_kb));
            put64(&sec.swap_total_kb, m.map(|m| m.swap_total_kb));
            for (slot, c) in sec.cpus.iter().zip(a.cpus()) {
                put32(&slot.util_pm, c.util_pm);
                put32(&slot.khz, c.khz);
            }
            for (slot, bps) in sec.disks.iter().zip(&a.disk_read_bps[..a.disk_count]) {
                put64(&slot.read_bps, *bps);
            }
        });
    }

    /// Counts missed periods.
    pub fn add_overruns(&self, n: u64) {
        self.ring.header().overruns.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a failed rail read.
    pub fn add_read_error(&self) {
        self.ring
            .header()
            .read_errors
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Records a fresh value of rail `r` at `t_ns`.
    pub fn rail_fresh(&self, r: usize, t_ns: u64) {
        let e = &self.ring.header().rails[r];
        e.fresh_count.fetch_add(1, Ordering::Relaxed);
        e.last_fresh_ns.store(t_ns, Ordering::Relaxed);
    }

    /// The current throttle flags (set by the thermal watcher, copied into each sample).
    pub fn throttle(&self) -> u32 {
        self.ring.header().throttle.load(Ordering::Relaxed)
    }

    /// Sets the throttle flags.
    pub fn set_throttle(&self, flags: u32) {
        self.ring.header().throttle.store(flags, Ordering::Relaxed);
    }

    /// Records thermal zone `z`'s temperature (its name is in the header from the start).
    pub fn set_zone(&self, z: usize, temp_mc: Option<i32>, t_ns: u64) {
        let Some(e) = self.ring.header().thermal.get(z) else {
            return;
        };
        e.temp_mc
            .store(temp_mc.unwrap_or(TEMP_UNREADABLE), Ordering::Relaxed);
        e.updated_ns.store(t_ns, Ordering::Relaxed);
    }
}

impl RingWriter {
    /// A clean stop: readers learn that no sample will follow (unless a newer ring has
    /// already replaced this one, which they learn instead). Once is enough; dropping the
    /// writer does it too.
    pub fn close(&self) {
        if let Some(w) = self
            .ring
            .writer()
            .filter(|w| w.state.load(Ordering::Relaxed) == WRITER_LIVE)
        {
            w.ended_ns
                .store(crate::support::clock::monotonic_ns(), Ordering::Relaxed);
            // Partner: the acquire load in `RingReader::writer`.
            let _ = w.state.compare_exchange(
                WRITER_LIVE,
                WRITER_CLOSED,
                Ordering::Release,
                Ordering::Relaxed,
            );
        }
    }
}

impl Drop for RingWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// Why a sample could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Not written yet.
    NotYet,
    /// Overwritten by the writer lapping the ring.
    Lost,
}

/// What became of a ring's writer, from its writer section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterState {
    /// Running, or killed without cleanup (then its samples stop: see
    /// [`RingReader::silent_ns`]).
    Live,
    /// Stopped cleanly: no sample will follow.
    Closed,
    /// A newer ring replaced this one at its path: reopen the path.
    Replaced,
    /// A state this jpower does not know.
    Other(u32),
}

/// The writer section as a reader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle {
    /// 1 + the generation of the ring this one replaced at its path.
    pub generation: u64,
    /// What became of the writer.
    pub state: WriterState,
    /// When the state left [`WriterState::Live`] (`CLOCK_MONOTONIC` ns; 0 while live).
    pub ended_ns: u64,
}

/// The reading side, for any process.
pub struct RingReader {
    _map: Mmap,
    ring: Mapped,
    /// What the ring describes.
    pub info: RingInfo,
    /// The writing process.
    pub writer_pid: u32,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` when the ring was created, ns.
    pub realtime_offset_ns: i64,
}

impl std::fmt::Debug for RingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReader")
            .field("info", &self.info)
            .finish()
    }
}

/// A NUL-padded string field.
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl RingReader {
    /// Maps and checks a ring (magic, version, sizes).
    pub fn open(path: &Path) -> Result<RingReader, RingError> {
        let invalid = |why: String| RingError::Invalid {
            path: path.to_path_buf(),
            why,
        };
        let file = File::open(path).map_err(|source| RingError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        // SAFETY: read-only mapping; the writer only changes fields through atomics.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| RingError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let ring = Mapped::published(map.as_ptr(), map.len()).map_err(invalid)?;
        let h = ring.header();
        let rails = ring.rails;
        let slot_count = h.slot_count;
        let info = RingInfo {
            board: text(&h.board),
            simulated: h.flags & 1 == 1,
            period_ns: h.period_ns,
            slot_count,
            rails: h.rails[..rails]
                .iter()
                .map(|r| RailInfo {
                    name: text(&r.name),
                    role: r.role,
                    refresh_us: r.refresh_us,
                })
                .collect(),
            module_mask: h.module_mask,
            input_rail: (h.input_rail >= 0).then_some(h.input_rail as usize),
            zones: Vec::new(),
            activity: ring.activity().map(|a| ActivityInfo {
                period_ns: a.period_ns,
                window_ns: a.window_ns,
                cpu_count: (a.cpu_count as usize).min(MAX_CPUS),
                disks: a.disks[..(a.disk_count as usize).min(MAX_DISKS)]
                    .iter()
                    .map(|d| Disk {
                        name: text(&d.name),
                        major: d.major,
                        minor: d.minor,
                    })
                    .collect(),
            }),
        };
        Ok(RingReader {
            writer_pid: h.writer_pid as u32,
            realtime_offset_ns: h.realtime_offset_ns,
            _map: map,
            ring,
            info,
        })
    }

    /// The writer's lifecycle, where the ring has a writer section (rings written before
    /// jpower had one do not).
    pub fn writer(&self) -> Option<Lifecycle> {
        let w = self.ring.writer()?;
        // Partner: the writer's release stores in `Drop for RingWriter` and
        // `Previous::replaced`.
        let state = match acquire_u32(&w.state) {
            WRITER_LIVE => WriterState::Live,
            WRITER_CLOSED => WriterState::Closed,
            WRITER_REPLACED => WriterState::Replaced,
            other => WriterState::Other(other),
        };
        Some(Lifecycle {
            generation: w.generation,
            state,
            ended_ns: w.ended_ns.load(Ordering::Relaxed),
        })
    }

    /// How long the ring has gone without a new sample at `now_ns`, when that is longer
    /// than a live writer ever leaves it (four periods, and at least a second): a writer
    /// killed without cleanup stays [`WriterState::Live`] and falls silent. Works across
    /// PID namespaces, where `writer_pid` may name no visible process.
    pub fn silent_ns(&self, now_ns: u64) -> Option<u64> {
        let newest = self.latest().map_or(0, |s| s.t_ns);
        let quiet = now_ns.saturating_sub(newest);
        let allowed = (4 * self.info.period_ns).max(1_000_000_000);
        (newest > 0 && quiet > allowed).then_some(quiet)
    }

    /// Whether the process `writer_pid` names exists in this PID namespace.
    pub fn writer_pid_exists(&self) -> bool {
        if self.writer_pid == 0 {
            return false;
        }
        // SAFETY: signal 0 only checks that the process exists and may be signalled.
        let r = unsafe { libc::kill(self.writer_pid as libc::pid_t, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    /// Samples published so far.
    pub fn write_seq(&self) -> u64 {
        // Partner: the writer's release store at the end of `publish`.
        acquire_u64(&self.ring.header().write_seq)
    }

    /// Missed periods and failed reads so far.
    pub fn counters(&self) -> (u64, u64) {
        let h = self.ring.header();
        (
            h.overruns.load(Ordering::Relaxed),
            h.read_errors.load(Ordering::Relaxed),
        )
    }

    /// Fresh values counted and the time of the newest, per rail.
    pub fn rail_freshness(&self, r: usize) -> (u64, u64) {
        let e = &self.ring.header().rails[r];
        (
            e.fresh_count.load(Ordering::Relaxed),
            e.last_fresh_ns.load(Ordering::Relaxed),
        )
    }

    /// Thermal zones with a name: (name, temperature in m°C if readable).
    pub fn zones(&self) -> Vec<(String, Option<i32>)> {
        self.ring
            .header()
            .thermal
            .iter()
            .filter_map(|e| {
                let mut name = [0u8; 20];
                for (chunk, word) in name.chunks_mut(4).zip(&e.name) {
                    chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
                }
                let name = text(&name);
                let t = e.temp_mc.load(Ordering::Relaxed);
                (!name.is_empty()).then(|| (name, (t != TEMP_UNREADABLE).then_some(t)))
            })
            .collect()
    }

    /// The current throttle flags.
    pub fn throttle(&self) -> u32 {
        self.ring.header().throttle.load(Ordering::Relaxed)
    }

    /// The time of the oldest sample still in the ring, if any. Allocates nothing.
    pub fn oldest_t_ns(&self) -> Option<u64> {
        let w = self.write_seq();
        // The oldest slots may be overwritten while they are read: the next one then is.
        (w.saturating_sub(self.ring.slot_count)..w)
            .find_map(|n| self.sample(n).ok().map(|s| s.t_ns))
    }

    /// Sample number `n`, if it is in the ring and whole. Allocates nothing.
    pub fn sample(&self, n: u64) -> Result<Sample, Missing> {
        let (head, rails) = self.ring.slot(n);
        // A writer killed inside a slot leaves it odd forever: give up after many tries.
        for _ in 0..10_000 {
            let w = self.write_seq();
            if n >= w {
                return Err(Missing::NotYet);
            }
            if w - n > self.ring.slot_count {
                return Err(Missing::Lost);
            }
            let copy = seqlock::read(&head.seq, n, || {
                let mut s = Sample {
                    n,
                    t_ns: head.t_ns.load(Ordering::Relaxed),
                    flags: head.flags.load(Ordering::Relaxed),
                    fresh: head.fresh.load(Ordering::Relaxed),
                    module_uw: head.module_uw.load(Ordering::Relaxed),
                    input_uw: head.input_uw.load(Ordering::Relaxed),
                    rail_count: rails.len(),
                    ..Sample::default()
                };
                for (v, slot) in s.rails.iter_mut().zip(rails) {
                    v.power_uw = slot.power_uw.load(Ordering::Relaxed);
                    v.voltage_mv = slot.voltage_mv.load(Ordering::Relaxed);
                    v.current_ma = slot.current_ma.load(Ordering::Relaxed);
                }
                s
            });
            match copy {
                Read::Whole(s) => return Ok(s),
                Read::Lost => return Err(Missing::Lost),
                Read::Retry => std::hint::spin_loop(),
            }
        }
        Err(Missing::Lost)
    }

    /// The newest activity record, if the ring has an activity section and its writer has
    /// published one. Allocates nothing.
    pub fn activity(&self) -> Option<Activity> {
        let sec = self.ring.activity()?;
        let (cpu_count, disk_count) = (
            (sec.cpu_count as usize).min(MAX_CPUS),
            (sec.disk_count as usize).min(MAX_DISKS),
        );
        let get32 = |f: &AtomicU32| Some(f.load(Ordering::Relaxed)).filter(|&v| v != ABSENT_U32);
        let get64 = |f: &AtomicU64| Some(f.load(Ordering::Relaxed)).filter(|&v| v != ABSENT_U64);
        // A writer killed inside a record leaves it odd forever: give up after many tries.
        for _ in 0..10_000 {
            // Partner: the writer's final release store in `seqlock::write`.
            let seq = acquire_u64(&sec.seq);
            if seq == 0 {
                return None;
            }
            if seq % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let copy = seqlock::read(&sec.seq, seq / 2 - 1, || {
                let mut a = Activity {
                    t_ns: sec.t_ns.load(Ordering::Relaxed),
                    gpu_load_pm: get32(&sec.gpu_load_pm),
                    gpu_hz: get64(&sec.gpu_hz),
                    emc_activity_pm: get32(&sec.emc_activity_pm),
                    emc_hz: get64(&sec.emc_hz),
                    fan_pwm: get32(&sec.fan_pwm),
                    fan_rpm: get32(&sec.fan_rpm),
                    cpu_count,
                    disk_count,
                    ..Activity::default()
                };
                a.memory = match (get64(&sec.ram_used_kb), get64(&sec.ram_total_kb)) {
                    (Some(used), Some(total)) => Some(crate::board::activity::Memory {
                        ram_used_kb: used,
                        ram_total_kb: total,
                        swap_used_kb: get64(&sec.swap_used_kb).unwrap_or(0),
                        swap_total_kb: get64(&sec.swap_total_kb).unwrap_or(0),
                    }),
                    _ => None,
                };
                for (c, slot) in a.cpus.iter_mut().zip(&sec.cpus[..cpu_count]) {
                    *c = CpuActivity {
                        util_pm: get32(&slot.util_pm),
                        khz: get32(&slot.khz),
                    };
                }
                for (bps, slot) in a.disk_read_bps.iter_mut().zip(&sec.disks[..disk_count]) {
                    *bps = get64(&slot.read_bps);
                }
                a
            });
            match copy {
                Read::Whole(a) => return Some(a),
                Read::Lost | Read::Retry => std::hint::spin_loop(),
            }
        }
        None
    }

    /// The newest sample, if any. Allocates nothing.
    pub fn latest(&self) -> Option<Sample> {
        loop {
            let w = self.write_seq();
            if w == 0 {
                return None;
            }
            match self.sample(w - 1) {
                Ok(s) => return Some(s),
                Err(Missing::NotYet) => return None,
                Err(Missing::Lost) => continue,
            }
        }
    }

    /// Samples with `t_ns >= since_ns`, newest first (what is still in the ring).
    /// Allocates nothing.
    pub fn newest_since(&self, since_ns: u64) -> impl Iterator<Item = Sample> + '_ {
        let w = self.write_seq();
        // Keep a margin: the writer may be overwriting the oldest slots.
        let oldest = w.saturating_sub(u64::from(self.info.slot_count).saturating_sub(4));
        (oldest..w)
            .rev()
            .map_while(move |n| self.sample(n).ok().filter(|s| s.t_ns >= since_ns))
    }

    /// Samples with `t_ns >= since_ns`, oldest first (what is still in the ring).
    pub fn since(&self, since_ns: u64) -> Vec<Sample> {
        let mut out: Vec<Sample> = self.newest_since(since_ns).collect();
        out.reverse();
        out
    }
}
