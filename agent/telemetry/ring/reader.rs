//! The reading side of the ring, for any process: mapping it read-only, the latest sample
//! and those since a time without a syscall, and what became of its writer.

use super::layout::{
    ABSENT_U32, ABSENT_U64, MAX_CPUS, MAX_DISKS, TEMP_UNREADABLE, WRITER_CLOSED, WRITER_LIVE,
    WRITER_REPLACED,
};
use super::seqlock::{self, Read};
use super::{acquire_u32, acquire_u64, ActivityInfo, Mapped, RailInfo, RingError, RingInfo};
use crate::board::counters::Disk;
use crate::telemetry::activity::{Activity, CpuActivity};
use crate::telemetry::Sample;
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
