//! The sampler: a dedicated thread reading every rail at a fixed period into the ring.
//!
//! Its loop is boring on purpose: it sleeps to an absolute deadline
//! (`clock_nanosleep(TIMER_ABSTIME)`), takes a `CLOCK_MONOTONIC` timestamp (vDSO), makes one
//! `pread` per rail file into stack buffers, and publishes with atomic stores. No
//! allocation, no lock, no formatting, no panic; overruns and read errors are counted in
//! the ring header instead of being logged.
//!
//! A value is *fresh* when it comes from a conversion the sampler has not published yet.
//! The files do not say when the chip converted, so the sampler decides from the values:
//! a reading is fresh when it differs from the rail's previous reading and at least half
//! the rail's refresh interval has passed since its last fresh value. The first reading
//! of each rail is fresh. A change sooner than half an interval is the rest of the same
//! conversion (a rail's two registers are read one after the other, and a conversion
//! may end between them): the value is published, its bit stays clear. A new conversion
//! that reads exactly as the previous one is not counted (no timer ever marks a value
//! fresh), so `fresh_count` can only undercount conversions, never overcount them.
//!
//! Every rail read is I2C traffic on a Jetson (about 120 us per register at 400 kHz,
//! during which the thread sleeps in the kernel): the sampler measures the time its reads
//! take apart from its CPU time, and the rate it achieves is the rate it reports. It reads
//! no more than it needs: the chip's registers change only when a conversion ends, so
//! after a fresh value a rail is not read again until shortly before its next conversion
//! is due (a window of a tenth of the refresh interval plus two periods either side), and
//! a window that passes without a change counts as a conversion that read the same. Its
//! samples in between repeat the rail's last value, as the register would have. A rail
//! whose refresh interval is under four sample periods is read every period.

use super::ring::{RailInfo, RingError, RingInfo, RingWriter, MAX_RAILS};
use super::Sample;
use crate::board::rails::Rail;
use crate::board::rails::RailValue;
use crate::support::clock::monotonic_ns;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Samples per second; `None`: the lower of 1 kHz and what the sensors refresh at.
    pub rate_hz: Option<f64>,
    /// Ring slots (a power of two): how much history readers can reach.
    pub slot_count: u32,
    /// `SCHED_FIFO` priority for the sampler thread (needs CAP_SYS_NICE).
    pub rt_priority: Option<i32>,
    /// Pin the sampler to this CPU.
    pub cpu: Option<usize>,
    /// Activity counter records per second into the ring's activity section (0: none).
    pub activity_hz: f64,
    /// The window the activity counters' utilisations and rates are taken over, ms.
    pub activity_window_ms: u64,
    /// The group the ring file is given to before it appears at its path (the agent's
    /// `read_group`); `None`: this process's.
    pub read_gid: Option<u32>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            rate_hz: None,
            slot_count: 1 << 16,
            rt_priority: None,
            cpu: None,
            activity_hz: 50.0,
            activity_window_ms: 200,
            read_gid: None,
        }
    }
}

/// The default rate: 1 kHz, or slower where the fastest sensor refreshes slower.
pub fn default_rate_hz(fastest_refresh_us: u32) -> f64 {
    if fastest_refresh_us == 0 {
        return 1000.0;
    }
    (1e6 / f64::from(fastest_refresh_us)).min(1000.0)
}

/// What a stopped sampler did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Samples written to the ring.
    pub samples: u64,
    /// CPU time of the sampler thread ([`crate::support::clock::thread_cpu_ns`]).
    pub cpu_ns: u64,
    /// Wall-clock time the sampler ran, nanoseconds.
    pub wall_ns: u64,
    /// Wall-clock time spent reading the rails (blocked on the I2C bus on a Jetson or a
    /// simulated board), nanoseconds.
    pub read_ns: u64,
    /// Rail reads made (each reads a rail's registers; skipped between conversions).
    pub rail_reads: u64,
}

impl SamplerStats {
    /// Samples per second achieved.
    pub fn rate_hz(&self) -> f64 {
        if self.wall_ns == 0 {
            return 0.0;
        }
        self.samples as f64 * 1e9 / self.wall_ns as f64
    }

    /// The sampler thread's CPU time over its wall-clock time, percent of one core (the
    /// time blocked on the bus is not CPU time).
    pub fn cpu_share_pct(&self) -> f64 {
        if self.wall_ns == 0 {
            return 0.0;
        }
        100.0 * self.cpu_ns as f64 / self.wall_ns as f64
    }
}

/// Sampler errors.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The ring could not be created.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// Duplicating the rails' file descriptors, or starting the sampler or thermal thread, failed.
    #[error("cannot duplicate rail descriptors: {0}")]
    Clone(std::io::Error),
    /// The board has no rails.
    #[error("no rails to sample")]
    NoRails,
    /// More rails than a ring holds ([`MAX_RAILS`]).
    #[error("more than {MAX_RAILS} rails")]
    TooManyRails,
    /// A sampling rate that is not finite, positive and at most 100 kHz; the rate, Hz.
    #[error("invalid sampling rate {0} Hz")]
    Rate(f64),
}

/// A running sampler.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<SamplerStats>>,
    /// The ring; only the sampler thread publishes, others may set header fields.
    ring: Arc<RingWriter>,
    /// The rate it samples at.
    pub rate_hz: f64,
}

impl Sampler {
    /// Starts sampling `rails` into a new ring at `path`. `info` gives the board, each
    /// rail's refresh interval and the totals; the period and slots come from `cfg`.
    pub fn start(
        rails: &[Rail],
        info: RingInfo,
        path: &Path,
        cfg: &SamplerConfig,
    ) -> Result<Sampler, SamplerError> {
        Self::start_then(rails, info, path, cfg, || {})
    }

    /// [`Sampler::start`], calling `before_publish` when the new ring is ready to replace
    /// the one at `path` ([`RingWriter::create_then`]).
    pub fn start_then(
        rails: &[Rail],
        mut info: RingInfo,
        path: &Path,
        cfg: &SamplerConfig,
        before_publish: impl FnOnce(),
    ) -> Result<Sampler, SamplerError> {
        if rails.is_empty() {
            return Err(SamplerError::NoRails);
        }
        if rails.len() > MAX_RAILS {
            return Err(SamplerError::TooManyRails);
        }
        let fastest = info.rails.iter().map(|r| r.refresh_us).min().unwrap_or(0);
        let rate_hz = cfg.rate_hz.unwrap_or_else(|| default_rate_hz(fastest));
        if !(rate_hz.is_finite() && rate_hz > 0.0 && rate_hz <= 100_000.0) {
            return Err(SamplerError::Rate(rate_hz));
        }
        info.period_ns = (1e9 / rate_hz) as u64;
        info.slot_count = cfg.slot_count;
        let rails: Vec<Rail> = rails
            .iter()
            .map(Rail::try_clone)
            .collect::<std::io::Result<_>>()
            .map_err(SamplerError::Clone)?;
        let ring = Arc::new(RingWriter::create_then(
            path,
            &info,
            cfg.read_gid,
            before_publish,
        )?);
        // A second change sooner than this is the same conversion read across its boundary.
        let same_conversion_ns: Vec<u64> = info
            .rails
            .iter()
            .map(|r| u64::from(r.refresh_us) * 500)
            .collect();
        let refresh_ns: Vec<u64> = info
            .rails
            .iter()
            .map(|r| u64::from(r.refresh_us) * 1000)
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let loop_stop = stop.clone();
        let (rt, cpu) = (cfg.rt_priority, cfg.cpu);
        let module_mask = info.module_mask;
        let input = info.input_rail;
        let period_ns = info.period_ns;
        let loop_ring = ring.clone();
        let thread = std::thread::Builder::new()
            .name("jpower-sampler".into())
            .spawn(move || {
                tune_thread(rt, cpu);
                let mut lp = Loop {
                    ring: loop_ring,
                    rails,
                    same_conversion_ns,
                    refresh_ns,
                    module_mask,
                    input,
                    period_ns,
                };
                lp.run(&loop_stop)
            })
            .map_err(SamplerError::Clone)?;
        Ok(Sampler {
            stop,
            thread: Some(thread),
            ring,
            rate_hz,
        })
    }

    /// The ring it writes.
    pub fn ring(&self) -> &Arc<RingWriter> {
        &self.ring
    }

    /// Stops the thread and returns what it did.
    pub fn stop(mut self) -> SamplerStats {
        self.halt()
    }

    /// Stops the sampling thread (once; later calls return nothing); what it measured.
    pub fn halt(&mut self) -> SamplerStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Applies the configured real-time priority and CPU affinity (best effort, logged), and
/// a 1 us timer slack: the default 50 us would make every wake-up late by up to that much
/// (each period's deadline, and on a simulated board each register read's bus time).
///
/// A CPU this process may not run on is refused beforehand ([`check_cpu`]); a priority the
/// process lacks the privilege for is a warning (the sampler still runs, less steadily).
fn tune_thread(rt: Option<i32>, cpu: Option<usize>) {
    // SAFETY: prctl on the calling thread with an integer argument; it cannot fail for a
    // valid slack and changes nothing else.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    if let Some(cpu) = cpu {
        let mut set = nix::sched::CpuSet::new();
        let pinned = set
            .set(cpu)
            .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
        if let Err(e) = pinned {
            log::warn!("sampler: cannot pin to CPU {cpu}: {e}");
        }
    }
    if let Some(prio) = rt {
        let param = libc::sched_param {
            sched_priority: prio,
        };
        // SAFETY: plain syscall on this thread with a valid parameter struct.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            log::warn!(
                "sampler: cannot set SCHED_FIFO priority {prio}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Whether the sampler can be pinned to `cpu`: one this process may run on (an existing,
/// online CPU in its affinity mask).
pub fn check_cpu(cpu: usize) -> Result<(), String> {
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| format!("cannot read this process's CPUs: {e}"))?;
    let usable: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    if usable.contains(&cpu) {
        Ok(())
    } else {
        Err(format!(
            "CPU {cpu} is not one this process may run on ({})",
            crate::board::sysfs::format_cpu_list(&usable)
        ))
    }
}

struct Loop {
    ring: Arc<RingWriter>,
    rails: Vec<Rail>,
    same_conversion_ns: Vec<u64>,
    /// Each rail's refresh interval (its conversion period), nanoseconds.
    refresh_ns: Vec<u64>,
    module_mask: u32,
    input: Option<usize>,
    period_ns: u64,
}

impl Loop {
    fn run(&mut self, stop: &AtomicBool) -> SamplerStats {
        let start = monotonic_ns();
        let mut prev = [RailValue::default(); MAX_RAILS];
        let mut last_fresh = [0u64; MAX_RAILS];
        let mut next = start;
        let mut n = 0u64;
        let mut read_ns = 0u64;
        let mut rail_reads = 0u64;
        // When each rail's next conversion is due (0: read every period).
        let mut due = [0u64; MAX_RAILS];
        // Bit `r`: rail `r` has been read once (its first reading is fresh).
        let mut seen = 0u32;
        // Bit `r`: rail `r`'s last read failed; its value is held until one succeeds.
        let mut failed = 0u32;
        while !stop.load(Ordering::Relaxed) {
            // Long periods sleep in slices so a stop is noticed within 100 ms.
            let now = monotonic_ns();
            if next > now + 100_000_000 {
                sleep_until(now + 100_000_000);
                continue;
            }
            sleep_until(next);
            let t = monotonic_ns();
            if t >= next + self.period_ns {
                let missed = (t - next) / self.period_ns;
                self.ring.add_overruns(missed);
                next += missed * self.period_ns;
            }
            let mut s = Sample {
                n,
                t_ns: t,
                rail_count: self.rails.len(),
                flags: self.ring.throttle(),
                ..Sample::default()
            };
            for (r, rail) in self.rails.iter().enumerate() {
                let refresh = self.refresh_ns[r];
                let window = refresh / 10 + 2 * self.period_ns;
                if due[r] > 0 && t + window < due[r] {
                    // No conversion can have ended since the last one read.
                    s.rails[r] = prev[r];
                    continue;
                }
                if due[r] > 0 && t > due[r] + window {
                    // The window passed unchanged: a conversion that read the same.
                    due[r] += refresh;
                }
                rail_reads += 1;
                let v = match rail.sample() {
                    Some(v) => v,
                    None => {
                        self.ring.add_read_error();
                        failed |= 1 << r;
                        s.rails[r] = prev[r];
                        continue;
                    }
                };
                failed &= !(1 << r);
                let first = seen & (1 << r) == 0;
                seen |= 1 << r;
                let fresh = first
                    || (v != prev[r]
                        && t.saturating_sub(last_fresh[r]) >= self.same_conversion_ns[r]);
                if fresh {
                    s.fresh |= 1 << r;
                    last_fresh[r] = t;
                    self.ring.rail_fresh(r, t);
                    if refresh >= 4 * self.period_ns {
                        due[r] = t + refresh;
                    }
                }
                s.rails[r] = v;
                prev[r] = v;
            }
            read_ns += monotonic_ns().saturating_sub(t);
            s.flags |= failed << super::flags::RAIL_FAILED_SHIFT;
            s.input_uw = self.input.map_or(0, |i| s.rails[i].power_uw);
            s.module_uw = match self.input {
                Some(_) => s.input_uw,
                None => (0..s.rail_count)
                    .filter(|r| self.module_mask & (1 << r) != 0)
                    .map(|r| s.rails[r].power_uw)
                    .fold(0u32, u32::saturating_add),
            };
            self.ring.publish(n, &s);
            n += 1;
            next += self.period_ns;
        }
        SamplerStats {
            samples: n,
            cpu_ns: crate::support::clock::thread_cpu_ns(),
            wall_ns: monotonic_ns() - start,
            read_ns,
            rail_reads,
        }
    }
}

/// Sleeps until an absolute `CLOCK_MONOTONIC` time.
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: absolute sleep on CLOCK_MONOTONIC with a valid timespec; EINTR just returns
    // early and the loop recomputes.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        );
    }
}

/// The ring's rail table for `rails`, each with its sensor refresh interval.
pub fn rail_table(rails: &[Rail], refresh_us: impl Fn(&Rail) -> u32) -> Vec<RailInfo> {
    rails
        .iter()
        .map(|r| RailInfo {
            name: r.label.clone(),
            role: match r.role {
                crate::board::rails::RailRole::Input => 0,
                crate::board::rails::RailRole::Module => 1,
                crate::board::rails::RailRole::Sub => 2,
                crate::board::rails::RailRole::Carrier => 3,
            },
            refresh_us: refresh_us(r),
        })
        .collect()
}
