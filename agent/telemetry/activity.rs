//! Activity records: the board's counters ([`crate::board::counters`]) as utilisations and
//! rates over a short window, what the activity thread ([`super::activity_thread`])
//! publishes in the ring's activity section at its own, lower rate (50 Hz by default).
//!
//! `/proc/stat` counts in jiffies of 10 ms (`USER_HZ` 100), so a CPU's utilisation over
//! one 20 ms period could only read 0, 50 or 100%: each record's utilisations and disk
//! rates are taken against the newest earlier reading at least `window` old (200 ms by
//! default, at most 63 periods), from a fixed history allocated once. GPU load
//! is nvgpu's own moving figure and is passed through, as are the clocks and memory.

use crate::board::activity::Memory;
use crate::board::counters::{RawCounters, MAX_CPUS, MAX_DISKS};
use std::time::Duration;

/// Readings kept to take utilisations over the window.
const HISTORY: usize = 64;
/// The most periods a window spans (the history kept, less one).
pub const WINDOW_PERIODS: u32 = HISTORY as u32 - 1;
/// Bytes per `/proc/diskstats` sector.
const SECTOR_BYTES: u64 = 512;

/// One CPU's activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuActivity {
    /// Utilisation over the window, per mille; `None` while offline.
    pub util_pm: Option<u32>,
    /// Its cluster's running clock, kHz; `None` while offline.
    pub khz: Option<u32>,
}

/// One record of the activity counters; every counter `None` where the board lacks it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    /// `CLOCK_MONOTONIC` time of the reading, ns.
    pub t_ns: u64,
    /// GPU load, per mille.
    pub gpu_load_pm: Option<u32>,
    /// The GPU's running clock, Hz.
    pub gpu_hz: Option<u64>,
    /// EMC activity, per mille of its running clock.
    pub emc_activity_pm: Option<u32>,
    /// The EMC's running clock, Hz.
    pub emc_hz: Option<u64>,
    /// The fan's PWM duty, 0-255.
    pub fan_pwm: Option<u32>,
    /// The fan's speed, rpm.
    pub fan_rpm: Option<u32>,
    /// RAM and swap.
    pub memory: Option<Memory>,
    /// CPUs in `cpus`.
    pub cpu_count: usize,
    /// Per CPU, indexed by CPU id.
    pub cpus: [CpuActivity; MAX_CPUS],
    /// Disks in `disk_read_bps` (their names are in the ring's section).
    pub disk_count: usize,
    /// Bytes read per second from each disk over the window.
    pub disk_read_bps: [Option<u64>; MAX_DISKS],
}

impl Activity {
    /// The CPUs this record covers.
    pub fn cpus(&self) -> &[CpuActivity] {
        &self.cpus[..self.cpu_count]
    }

    /// The mean utilisation of the online CPUs, 0 to 1.
    pub fn cpu_load(&self) -> Option<f64> {
        let (sum, n) = (self.cpus().iter())
            .filter_map(|c| c.util_pm)
            .fold((0.0, 0), |(s, n), u| (s + f64::from(u), n + 1));
        (n > 0).then(|| sum / f64::from(n) / 1e3)
    }
}

/// Turns raw readings into [`Activity`] records over a window.
#[derive(Debug)]
pub struct Window {
    history: Box<[(u64, RawCounters); HISTORY]>,
    /// Readings so far.
    count: usize,
    window_ns: u64,
    cpu_count: usize,
    disk_count: usize,
}

impl Window {
    /// A window of `window_ns` over `cpu_count` CPUs and `disk_count` disks.
    pub fn new(window_ns: u64, cpu_count: usize, disk_count: usize) -> Window {
        Window {
            history: Box::new([(0, RawCounters::default()); HISTORY]),
            count: 0,
            window_ns,
            cpu_count: cpu_count.min(MAX_CPUS),
            disk_count: disk_count.min(MAX_DISKS),
        }
    }

    /// Adds the reading `raw` taken at `t_ns` and returns the record it makes. Allocates
    /// nothing.
    pub fn push(&mut self, t_ns: u64, raw: &RawCounters) -> Activity {
        // The newest earlier reading at least the window old: none for the first window,
        // whose utilisations and rates are absent rather than taken over a shorter span
        // (10 ms jiffies make a 20 ms utilisation 0, 50 or 100 %).
        let kept = self.count.min(HISTORY);
        let base = (1..=kept)
            .map(|back| &self.history[(self.count - back) % HISTORY])
            .find(|(t, _)| t_ns.saturating_sub(*t) >= self.window_ns);
        let mut a = Activity {
            t_ns,
            gpu_load_pm: raw.gpu_load_pm,
            gpu_hz: raw.gpu_hz,
            emc_activity_pm: raw.emc_activity_pm,
            emc_hz: raw.emc_hz,
            fan_pwm: raw.fan_pwm,
            fan_rpm: raw.fan_rpm,
            memory: raw.memory,
            cpu_count: self.cpu_count,
            disk_count: self.disk_count,
            ..Activity::default()
        };
        for cpu in 0..self.cpu_count {
            let util = match (
                base.and_then(|(_, b)| b.cpu_jiffies[cpu]),
                raw.cpu_jiffies[cpu],
            ) {
                (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                    Some((b1.saturating_sub(b0) * 1000 / (t1 - t0)).min(1000) as u32)
                }
                _ => None,
            };
            a.cpus[cpu] = CpuActivity {
                util_pm: util,
                khz: raw.cpu_khz[cpu],
            };
        }
        for d in 0..self.disk_count {
            a.disk_read_bps[d] = match (base, raw.disk_sectors[d]) {
                (Some((t0, b)), Some(s1)) if t_ns > *t0 => b.disk_sectors[d].map(|s0| {
                    let bytes = s1.saturating_sub(s0) * SECTOR_BYTES;
                    (bytes as u128 * 1_000_000_000 / u128::from(t_ns - t0)) as u64
                }),
                _ => None,
            };
        }
        self.history[self.count % HISTORY] = (t_ns, *raw);
        self.count += 1;
        a
    }
}

/// The window records are taken over: `window`, at most 63 periods (the history kept).
pub fn effective_window_ns(period: Duration, window: Duration) -> u64 {
    let most = period.as_nanos() * u128::from(WINDOW_PERIODS);
    window.as_nanos().min(most) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(busy: u64, total: u64, sectors: u64) -> RawCounters {
        let mut r = RawCounters {
            gpu_load_pm: Some(500),
            ..RawCounters::default()
        };
        r.cpu_jiffies[0] = Some((busy, total));
        r.cpu_jiffies[1] = None;
        r.disk_sectors[0] = Some(sectors);
        r
    }

    #[test]
    fn utilisation_and_read_rate_are_taken_over_the_window_not_the_last_period() {
        let ms = 1_000_000;
        let mut w = Window::new(200 * ms, 2, 1);
        // The first record has nothing to compare with: no utilisation, no rate.
        let a = w.push(0, &raw(0, 0, 0));
        assert_eq!((a.cpus[0].util_pm, a.disk_read_bps[0]), (None, None));
        assert_eq!(a.gpu_load_pm, Some(500));
        // Every 20 ms, one jiffy busy of two, 2048 sectors (1 MiB) read. Until a reading
        // a window old exists, no utilisation and no rate (found by a client written from
        // the docs: they were taken over the shorter span since the first reading).
        let mut last = a;
        for k in 1..=20u64 {
            last = w.push(k * 20 * ms, &raw(k, 2 * k, 2048 * k));
            let within_first_window = k < 10;
            assert_eq!(
                last.cpus[0].util_pm.is_none() && last.disk_read_bps[0].is_none(),
                within_first_window,
                "{k}: {last:?}"
            );
        }
        // Against the reading 200 ms before: 10 busy of 20, 10 MiB in 0.2 s.
        assert_eq!(last.cpus[0].util_pm, Some(500));
        assert_eq!(last.disk_read_bps[0], Some(10 * 1024 * 1024 * 5));
        // An offline CPU is absent, never zero.
        assert_eq!(last.cpus[1].util_pm, None);
        assert_eq!(last.cpus().len(), 2);
        assert_eq!(last.cpu_load(), Some(0.5));
    }

    #[test]
    fn the_window_is_cut_to_the_history_kept() {
        let p = Duration::from_millis(1);
        assert_eq!(effective_window_ns(p, Duration::from_secs(1)), 63_000_000);
        assert_eq!(
            effective_window_ns(Duration::from_millis(20), Duration::from_millis(200)),
            200_000_000
        );
    }
}
