//! The writing side of the ring: creating it (under a temporary name, then renamed over
//! the path), writing samples and header fields, and marking it closed or replaced.

use super::layout::{
    self, ActivitySection, Header, WriterSection, ABSENT_U32, ABSENT_U64, EXT_OFFSET, HEADER_SIZE,
    MAGIC, MAX_CPUS, MAX_DISKS, MAX_RAILS, SECTION_ACTIVITY, SECTION_WRITER, TEMP_UNREADABLE,
    VERSION, WRITER_CLOSED, WRITER_LIVE, WRITER_REPLACED,
};
use super::{seqlock, ActivityInfo, Mapped, RingError, RingInfo};
use crate::telemetry::activity::Activity;
use crate::telemetry::Sample;
use memmap2::{Mmap, MmapMut};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
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
    pub fn create(
        path: &Path,
        info: &RingInfo,
        group: Option<u32>,
    ) -> Result<RingWriter, RingError> {
        Self::create_then(path, info, group, || {})
    }

    /// [`RingWriter::create`], calling `before_publish` once the new ring is complete and
    /// only its rename over `path` is left: the last moment its old writer may stop, after
    /// every step that can fail but the rename.
    pub fn create_then(
        path: &Path,
        info: &RingInfo,
        group: Option<u32>,
        before_publish: impl FnOnce(),
    ) -> Result<RingWriter, RingError> {
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
        // Its group before its path: a reader of that group that reopens the path as soon
        // as it sees the old ring replaced must not find a file it may not open.
        if let Some(gid) = group {
            if let Err(e) = std::os::unix::fs::fchown(&file, None, Some(gid)) {
                log::warn!("cannot give {} to group {gid}: {e}", path.display());
            }
        }
        before_publish();
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
