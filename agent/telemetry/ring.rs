//! The shared-memory telemetry ring: the sampler writes, any local process reads, no one
//! waits. The byte layout and both protocols are specified in `docs/telemetry-ring.md`;
//! the constants below are that document in code.
//!
//! Every field a reader may see change is accessed as an atomic of its width (relaxed for
//! slot payloads, which the per-slot sequence word guards), so the protocol is free of data
//! races in the Rust memory model and costs plain loads and stores on arm64 and x86.
//! Each atomic names its partner: `seq` odd/even (writer) pairs with the two `seq` loads
//! of [`RingReader::sample`]; `write_seq` (writer, release) with the reader's acquire load.

use super::Sample;
use memmap2::{Mmap, MmapMut};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64, Ordering};

pub const MAGIC: &[u8; 8] = b"JPWRRING";
pub const VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 4096;
pub const MAX_RAILS: usize = 16;
pub const MAX_ZONES: usize = 16;
const RAIL_TABLE: usize = 128;
const RAIL_ENTRY: usize = 64;
const ZONE_TABLE: usize = 1152;
const ZONE_ENTRY: usize = 32;
const SLOT_HEADER: usize = 32;
const RAIL_VALUES: usize = 12;

/// Header offsets.
mod off {
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const SLOT_SIZE: usize = 16;
    pub const SLOT_COUNT: usize = 20;
    pub const RAIL_COUNT: usize = 24;
    pub const FLAGS: usize = 28;
    pub const WRITER_PID: usize = 32;
    pub const REALTIME_OFFSET: usize = 40;
    pub const PERIOD: usize = 48;
    pub const WRITE_SEQ: usize = 56;
    pub const OVERRUNS: usize = 64;
    pub const READ_ERRORS: usize = 72;
    pub const MODULE_MASK: usize = 80;
    pub const INPUT_RAIL: usize = 84;
    pub const EXPONENTS: usize = 88;
    pub const THROTTLE: usize = 92;
    pub const BOARD: usize = 96;
}

/// What a ring describes, fixed when it is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingInfo {
    pub board: String,
    pub simulated: bool,
    pub period_ns: u64,
    pub slot_count: u32,
    pub rails: Vec<RailInfo>,
    pub module_mask: u32,
    pub input_rail: Option<usize>,
}

/// One rail of the ring's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailInfo {
    pub name: String,
    /// 0 input, 1 module, 2 sub-rail, 3 carrier.
    pub role: u8,
    /// The sensor's refresh interval, microseconds.
    pub refresh_us: u32,
}

/// Ring errors.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("telemetry ring {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("telemetry ring {}: {why}", path.display())]
    Invalid { path: PathBuf, why: String },
}

fn slot_size(rails: usize) -> usize {
    (SLOT_HEADER + RAIL_VALUES * rails).div_ceil(8) * 8
}

/// Typed atomic views of a mapped region. Offsets are checked against the mapping and
/// aligned by construction (the layout puts every field at its natural alignment).
struct Cells {
    base: *mut u8,
    len: usize,
}

impl Cells {
    fn at<T>(&self, off: usize) -> &T {
        assert!(off + std::mem::size_of::<T>() <= self.len && off % std::mem::align_of::<T>() == 0);
        // SAFETY: in bounds and aligned (asserted; the mapping is page-aligned), the mapping
        // lives as long as `self`, and the atomics tolerate concurrent access by other
        // processes.
        unsafe { &*(self.base.add(off) as *const T) }
    }
    fn u32(&self, off: usize) -> &AtomicU32 {
        self.at(off)
    }
    fn u64(&self, off: usize) -> &AtomicU64 {
        self.at(off)
    }
    fn i32(&self, off: usize) -> &AtomicI32 {
        self.at(off)
    }
}

// SAFETY: all access through `Cells` is atomic.
unsafe impl Send for Cells {}
// SAFETY: as above.
unsafe impl Sync for Cells {}

/// The writing side (the sampler, and the thermal watcher for header fields).
pub struct RingWriter {
    _map: MmapMut,
    cells: Cells,
    path: PathBuf,
    slot_count: u64,
    slot_size: usize,
    rails: usize,
}

impl std::fmt::Debug for RingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingWriter")
            .field("path", &self.path)
            .finish()
    }
}

impl RingWriter {
    /// Creates the ring at `path`: owner-only, initialised, version published last, then
    /// mode 0640. An older ring at `path` is replaced atomically.
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
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let slot_size = slot_size(info.rails.len());
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
        {
            let h = &mut map[..HEADER_SIZE];
            h[..8].copy_from_slice(MAGIC);
            let put32 =
                |h: &mut [u8], o: usize, v: u32| h[o..o + 4].copy_from_slice(&v.to_le_bytes());
            let put64 =
                |h: &mut [u8], o: usize, v: u64| h[o..o + 8].copy_from_slice(&v.to_le_bytes());
            put32(h, off::HEADER_SIZE, HEADER_SIZE as u32);
            put32(h, off::SLOT_SIZE, slot_size as u32);
            put32(h, off::SLOT_COUNT, info.slot_count);
            put32(h, off::RAIL_COUNT, info.rails.len() as u32);
            put32(h, off::FLAGS, u32::from(info.simulated));
            put64(h, off::WRITER_PID, u64::from(std::process::id()));
            put64(h, off::REALTIME_OFFSET, realtime_offset_ns() as u64);
            put64(h, off::PERIOD, info.period_ns);
            put32(h, off::MODULE_MASK, info.module_mask);
            put32(
                h,
                off::INPUT_RAIL,
                info.input_rail.map_or(-1, |i| i as i32) as u32,
            );
            h[off::EXPONENTS..off::EXPONENTS + 3].copy_from_slice(&[
                (-6i8) as u8,
                (-3i8) as u8,
                (-3i8) as u8,
            ]);
            put_str(&mut h[off::BOARD..off::BOARD + 32], &info.board);
            for (r, rail) in info.rails.iter().enumerate() {
                let e = RAIL_TABLE + r * RAIL_ENTRY;
                put_str(&mut h[e..e + 24], &rail.name);
                h[e + 24] = rail.role;
                put32(h, e + 28, rail.refresh_us);
            }
            for z in 0..MAX_ZONES {
                put32(h, ZONE_TABLE + z * ZONE_ENTRY + 20, i32::MIN as u32);
            }
        }
        std::fs::rename(&tmp, path).map_err(io)?;
        let cells = Cells {
            base: map.as_mut_ptr(),
            len,
        };
        // Partner: the reader's version check in `RingReader::open`.
        cells.u32(off::VERSION).store(VERSION, Ordering::Release);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640)).map_err(io)?;
        Ok(RingWriter {
            _map: map,
            cells,
            path: path.to_path_buf(),
            slot_count: u64::from(info.slot_count),
            slot_size,
            rails: info.rails.len(),
        })
    }

    /// The ring's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Publishes sample number `n` (the caller counts from 0). Allocates nothing.
    pub fn publish(&self, n: u64, s: &Sample) {
        let base = HEADER_SIZE + (n % self.slot_count) as usize * self.slot_size;
        let c = &self.cells;
        let seq = c.u64(base);
        // Partner: the reader's first `seq` load; odd = being written.
        seq.store(2 * n + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        c.u64(base + 8).store(s.t_ns, Ordering::Relaxed);
        c.u32(base + 16).store(s.flags, Ordering::Relaxed);
        c.u32(base + 20).store(s.fresh, Ordering::Relaxed);
        c.u32(base + 24).store(s.module_uw, Ordering::Relaxed);
        c.u32(base + 28).store(s.input_uw, Ordering::Relaxed);
        for (r, v) in s.rails[..self.rails].iter().enumerate() {
            let o = base + SLOT_HEADER + r * RAIL_VALUES;
            c.u32(o).store(v.power_uw, Ordering::Relaxed);
            c.u32(o + 4).store(v.voltage_mv, Ordering::Relaxed);
            c.u32(o + 8).store(v.current_ma, Ordering::Relaxed);
        }
        // Partner: the reader's second `seq` load (after its acquire fence).
        seq.store(2 * n + 2, Ordering::Release);
        // Partner: `RingReader::write_seq`.
        c.u64(off::WRITE_SEQ).store(n + 1, Ordering::Release);
    }

    /// Counts a missed period.
    pub fn add_overruns(&self, n: u64) {
        self.cells
            .u64(off::OVERRUNS)
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a failed rail read.
    pub fn add_read_error(&self) {
        self.cells
            .u64(off::READ_ERRORS)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Records a fresh value of rail `r` at `t_ns`.
    pub fn rail_fresh(&self, r: usize, t_ns: u64) {
        let e = RAIL_TABLE + r * RAIL_ENTRY;
        self.cells.u64(e + 32).fetch_add(1, Ordering::Relaxed);
        self.cells.u64(e + 40).store(t_ns, Ordering::Relaxed);
    }

    /// The current throttle flags (set by the thermal watcher, copied into each sample).
    pub fn throttle(&self) -> u32 {
        self.cells.u32(off::THROTTLE).load(Ordering::Relaxed)
    }

    /// Sets the throttle flags.
    pub fn set_throttle(&self, flags: u32) {
        self.cells
            .u32(off::THROTTLE)
            .store(flags, Ordering::Relaxed);
    }

    /// Names thermal zone `z` (at start, before readers care) and records a temperature.
    pub fn set_zone(&self, z: usize, name: &str, temp_mc: Option<i32>, t_ns: u64) {
        if z >= MAX_ZONES {
            return;
        }
        let e = ZONE_TABLE + z * ZONE_ENTRY;
        let mut buf = [0u8; 20];
        put_str(&mut buf, name);
        for (i, chunk) in buf.chunks(4).enumerate() {
            let v = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            self.cells.u32(e + 4 * i).store(v, Ordering::Relaxed);
        }
        self.cells
            .i32(e + 20)
            .store(temp_mc.unwrap_or(i32::MIN), Ordering::Relaxed);
        self.cells.u64(e + 24).store(t_ns, Ordering::Relaxed);
    }
}

fn put_str(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn get_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `CLOCK_MONOTONIC` now, nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own (vDSO: no syscall).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn realtime_offset_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

/// Why a sample could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Not written yet.
    NotYet,
    /// Overwritten by the writer lapping the ring.
    Lost,
}

/// The reading side, for any process.
pub struct RingReader {
    _map: Mmap,
    cells: Cells,
    pub info: RingInfo,
    pub writer_pid: u32,
    pub realtime_offset_ns: i64,
    slot_size: usize,
}

impl std::fmt::Debug for RingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReader")
            .field("info", &self.info)
            .finish()
    }
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
        if map.len() < HEADER_SIZE {
            return Err(invalid(format!(
                "{} bytes, shorter than its 4096-byte header",
                map.len()
            )));
        }
        if &map[..8] != MAGIC {
            return Err(invalid("not a jpower telemetry ring (bad magic)".into()));
        }
        let cells = Cells {
            base: map.as_ptr() as *mut u8,
            len: map.len(),
        };
        // Partner: the writer's release store of the version in `create`.
        match cells.u32(off::VERSION).load(Ordering::Acquire) {
            VERSION => {}
            0 => {
                return Err(invalid(
                    "the writer is still initialising it (version 0); retry".into(),
                ))
            }
            v => {
                return Err(invalid(format!(
                    "layout version {v}, this jpower reads version {VERSION}"
                )))
            }
        }
        // Copy the header through atomic loads: the writer may be updating its counters.
        let mut header = [0u8; HEADER_SIZE];
        for (i, chunk) in header.chunks_mut(4).enumerate() {
            chunk.copy_from_slice(&cells.u32(4 * i).load(Ordering::Acquire).to_le_bytes());
        }
        let h = &header[..];
        let r32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let r64 = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap_or([0; 8]));
        let (slot_size, slot_count, rails) = (
            r32(off::SLOT_SIZE) as usize,
            r32(off::SLOT_COUNT),
            r32(off::RAIL_COUNT) as usize,
        );
        if r32(off::HEADER_SIZE) as usize != HEADER_SIZE
            || rails > MAX_RAILS
            || slot_size < SLOT_HEADER + RAIL_VALUES * rails
            || slot_size % 8 != 0
            || !slot_count.is_power_of_two()
        {
            return Err(invalid("inconsistent header sizes".into()));
        }
        if map.len() < HEADER_SIZE + slot_count as usize * slot_size {
            return Err(invalid(format!(
                "truncated: {} bytes for {slot_count} slots",
                map.len()
            )));
        }
        let input = r32(off::INPUT_RAIL) as i32;
        let info = RingInfo {
            board: get_str(&h[off::BOARD..off::BOARD + 32]),
            simulated: r32(off::FLAGS) & 1 == 1,
            period_ns: r64(off::PERIOD),
            slot_count,
            rails: (0..rails)
                .map(|r| {
                    let e = RAIL_TABLE + r * RAIL_ENTRY;
                    RailInfo {
                        name: get_str(&h[e..e + 24]),
                        role: h[e + 24],
                        refresh_us: r32(e + 28),
                    }
                })
                .collect(),
            module_mask: r32(off::MODULE_MASK),
            input_rail: (input >= 0).then_some(input as usize),
        };
        Ok(RingReader {
            writer_pid: r64(off::WRITER_PID) as u32,
            realtime_offset_ns: r64(off::REALTIME_OFFSET) as i64,
            _map: map,
            cells,
            info,
            slot_size,
        })
    }

    /// Samples published so far.
    pub fn write_seq(&self) -> u64 {
        // Partner: the writer's release store at the end of `publish`.
        self.cells.u64(off::WRITE_SEQ).load(Ordering::Acquire)
    }

    /// Missed periods and failed reads so far.
    pub fn counters(&self) -> (u64, u64) {
        (
            self.cells.u64(off::OVERRUNS).load(Ordering::Relaxed),
            self.cells.u64(off::READ_ERRORS).load(Ordering::Relaxed),
        )
    }

    /// Fresh values counted and the time of the newest, per rail.
    pub fn rail_freshness(&self, r: usize) -> (u64, u64) {
        let e = RAIL_TABLE + r * RAIL_ENTRY;
        (
            self.cells.u64(e + 32).load(Ordering::Relaxed),
            self.cells.u64(e + 40).load(Ordering::Relaxed),
        )
    }

    /// Thermal zones with a name: (name, temperature in m°C if readable).
    pub fn zones(&self) -> Vec<(String, Option<i32>)> {
        (0..MAX_ZONES)
            .filter_map(|z| {
                let e = ZONE_TABLE + z * ZONE_ENTRY;
                let mut name = [0u8; 20];
                for i in 0..5 {
                    let v = self.cells.u32(e + 4 * i).load(Ordering::Relaxed);
                    name[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
                }
                let name = get_str(&name);
                let t = self.cells.i32(e + 20).load(Ordering::Relaxed);
                (!name.is_empty()).then(|| (name, (t != i32::MIN).then_some(t)))
            })
            .collect()
    }

    /// The current throttle flags.
    pub fn throttle(&self) -> u32 {
        self.cells.u32(off::THROTTLE).load(Ordering::Relaxed)
    }

    /// Sample number `n`, if it is in the ring and whole. Allocates nothing.
    pub fn sample(&self, n: u64) -> Result<Sample, Missing> {
        let slots = u64::from(self.info.slot_count);
        let base = HEADER_SIZE + (n % slots) as usize * self.slot_size;
        let c = &self.cells;
        // A writer killed inside a slot leaves it odd forever: give up after many tries.
        for _ in 0..10_000 {
            let w = self.write_seq();
            if n >= w {
                return Err(Missing::NotYet);
            }
            if w - n > slots {
                return Err(Missing::Lost);
            }
            // Partner: the writer's odd store and release fence.
            let s1 = c.u64(base).load(Ordering::Acquire);
            let mut s = Sample {
                n,
                t_ns: c.u64(base + 8).load(Ordering::Relaxed),
                flags: c.u32(base + 16).load(Ordering::Relaxed),
                fresh: c.u32(base + 20).load(Ordering::Relaxed),
                module_uw: c.u32(base + 24).load(Ordering::Relaxed),
                input_uw: c.u32(base + 28).load(Ordering::Relaxed),
                rail_count: self.info.rails.len(),
                ..Sample::default()
            };
            for r in 0..s.rail_count {
                let o = base + SLOT_HEADER + r * RAIL_VALUES;
                s.rails[r].power_uw = c.u32(o).load(Ordering::Relaxed);
                s.rails[r].voltage_mv = c.u32(o + 4).load(Ordering::Relaxed);
                s.rails[r].current_ma = c.u32(o + 8).load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            // Partner: the writer's final release store of `seq`.
            let s2 = c.u64(base).load(Ordering::Relaxed);
            if s1 == s2 && s1 == 2 * n + 2 {
                return Ok(s);
            }
            if s1 == s2 && s1 % 2 == 0 && s1 > 2 * n + 2 {
                return Err(Missing::Lost);
            }
            std::hint::spin_loop();
        }
        Err(Missing::Lost)
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
