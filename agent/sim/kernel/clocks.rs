//! The clock and hotplug drivers: CPU `online`, cpufreq and devfreq min/max with each
//! release's rules (`EINVAL` on L4T 32, PM-QoS requests on L4T 35/36), the governors'
//! choice of the running clock, the EMC cap, and the operating point they make.
//!
//! A running clock moves to a new rate its knob's settle time after the write
//! ([`crate::sim::settle`]): until then its file reads, and the rails follow, the rate it
//! ran at before. A CPU comes online or goes offline before the write to `online` returns,
//! which takes the hotplug time ([`SimKernel::hotplug_pause`]).

use super::state::Settling;
use super::{einval, KernelState, SimKernel};
use crate::board::sysfs::format_cpu_list;
use crate::sim::power::Operating;
use crate::sim::settle::SwitchTimes;
use std::io;
use std::time::Duration;

/// A running clock, by the knob that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Clock {
    /// A CPU cluster's `scaling_cur_freq` (and `cpuinfo_cur_freq`), kHz.
    Cpu(usize),
    /// The GPU's devfreq `cur_freq`, Hz.
    Gpu,
    /// The EMC's running rate (BPMP debugfs), Hz.
    Emc,
}

impl SimKernel {
    pub(super) fn policy(&self, cluster: usize) -> String {
        format!(
            "/sys/devices/system/cpu/cpufreq/policy{}",
            self.spec.cluster_starts()[cluster]
        )
    }

    pub(super) fn devfreq(&self) -> String {
        format!("{}/devfreq/{}", self.spec.gpu.dir, self.spec.gpu.devfreq)
    }

    pub(super) fn online(&self, cpu: usize) -> io::Result<bool> {
        Ok(self.read(&format!("/sys/devices/system/cpu/cpu{cpu}/online"))? == 1)
    }

    fn cluster_cpus(&self, cluster: usize) -> std::ops::Range<usize> {
        let start = self.spec.cluster_starts()[cluster];
        start..start + self.spec.clusters[cluster]
    }

    pub(super) fn store_online(&self, cpu: usize, v: u64) -> io::Result<()> {
        if v > 1 {
            return Err(einval());
        }
        if cpu == 0 && v == 0 {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.put(
            &format!("/sys/devices/system/cpu/cpu{cpu}/online"),
            &v.to_string(),
        )?;
        let mut on = Vec::new();
        let mut off = Vec::new();
        for c in 0..self.spec.cpus() {
            if self.online(c)? {
                on.push(c)
            } else {
                off.push(c)
            }
        }
        self.put("/sys/devices/system/cpu/online", &format_cpu_list(&on))?;
        self.put("/sys/devices/system/cpu/offline", &format_cpu_list(&off))?;
        for cl in 0..self.spec.clusters.len() {
            let affected: Vec<String> = self
                .cluster_cpus(cl)
                .filter(|c| on.contains(c))
                .map(|c| c.to_string())
                .collect();
            self.put(
                &format!("{}/affected_cpus", self.policy(cl)),
                &affected.join(" "),
            )?;
        }
        Ok(())
    }

    pub(super) fn store_cpu_limit(
        &self,
        st: &mut KernelState,
        cl: usize,
        max: bool,
        v: u64,
    ) -> io::Result<()> {
        let mut any_online = false;
        for c in self.cluster_cpus(cl) {
            any_online |= self.online(c)?;
        }
        if !any_online {
            return Err(einval());
        }
        let table = self.spec.cpu_khz;
        let v = v.clamp(table[0], *table.last().unwrap_or(&0));
        let p = self.policy(cl);
        let (min_f, max_f) = (
            format!("{p}/scaling_min_freq"),
            format!("{p}/scaling_max_freq"),
        );
        let (eff_min, eff_max) = if self.spec.release.clamps() {
            let key = |m: bool| format!("cpu{cl}/{}", if m { "max" } else { "min" });
            st.requests.insert(key(max), v);
            let rmax = match st.requests.get(&key(true)) {
                Some(&r) => r,
                None => self.read(&max_f)?,
            };
            let rmin = match st.requests.get(&key(false)) {
                Some(&r) => r,
                None => self.read(&min_f)?,
            };
            (rmin.min(rmax), rmax)
        } else {
            let (cur_min, cur_max) = (self.read(&min_f)?, self.read(&max_f)?);
            if (max && v < cur_min) || (!max && v > cur_max) {
                return Err(einval());
            }
            if max {
                (cur_min, v)
            } else {
                (v, cur_max)
            }
        };
        self.put(&min_f, &eff_min.to_string())?;
        self.put(&max_f, &eff_max.to_string())?;
        let cur = pick(table, eff_min, eff_max, true);
        self.retarget(st, Clock::Cpu(cl), cur, SwitchTimes::DEFAULT.cpu_ms)?;
        self.put(&format!("{p}/cpuinfo_cur_freq"), &cur.to_string())
    }

    pub(super) fn store_gpu_limit(
        &self,
        st: &mut KernelState,
        max: bool,
        v: u64,
    ) -> io::Result<()> {
        let d = self.devfreq();
        let (min_f, max_f) = (format!("{d}/min_freq"), format!("{d}/max_freq"));
        let table = self.spec.gpu.table_hz;
        let (lo, hi) = (table[0], *table.last().unwrap_or(&0));
        if self.spec.release.clamps() {
            let key = if max { "gpu/max_khz" } else { "gpu/min_khz" };
            st.requests.insert(key.to_string(), v / 1000);
            let rmin = st.requests.get("gpu/min_khz").copied().unwrap_or(0) * 1000;
            let rmax = st.requests.get("gpu/max_khz").copied().unwrap_or(0) * 1000;
            let eff_max = if rmax == 0 { hi } else { rmax.clamp(lo, hi) };
            let eff_min = rmin.max(lo).min(eff_max);
            self.put(&min_f, &eff_min.to_string())?;
            self.put(&max_f, &eff_max.to_string())?;
        } else {
            let (cur_min, cur_max) = (self.read(&min_f)?, self.read(&max_f)?);
            if max && v != 0 && v < cur_min || !max && v != 0 && cur_max != 0 && v > cur_max {
                return Err(einval());
            }
            self.put(if max { &max_f } else { &min_f }, &v.to_string())?;
        }
        self.refresh_gpu_clock(st)
    }

    /// The devfreq governor's choice: the top of the range under load, else the bottom.
    pub(super) fn refresh_gpu_clock(&self, st: &mut KernelState) -> io::Result<()> {
        let d = self.devfreq();
        let table = self.spec.gpu.table_hz;
        let hi = match self.read(&format!("{d}/max_freq"))? {
            0 => *table.last().unwrap_or(&0),
            v => v,
        };
        let lo = self.read(&format!("{d}/min_freq"))?;
        let cur = pick(table, lo, hi, st.load.gpu > 0.05);
        self.retarget(st, Clock::Gpu, cur, SwitchTimes::DEFAULT.gpu_ms)
    }

    pub(super) fn store_emc_cap(&self, st: &mut KernelState, value: &[u8]) -> io::Result<()> {
        let text = std::str::from_utf8(value).map_err(|_| einval())?.trim();
        let v: i64 = text.parse().map_err(|_| einval())?;
        let e = &self.spec.emc;
        let top = *e.table_hz.last().unwrap_or(&0);
        let shown = if v <= 0 { e.uncapped } else { v as u64 };
        self.put(e.cap_file, &shown.to_string())?;
        let cap = if shown == 0 { top } else { shown };
        let rate = pick(e.table_hz, 0, cap, true);
        self.retarget(st, Clock::Emc, rate, SwitchTimes::DEFAULT.emc_ms)
    }

    /// The board path of a running clock's file.
    pub(super) fn clock_file(&self, clock: Clock) -> String {
        match clock {
            Clock::Cpu(cl) => format!("{}/scaling_cur_freq", self.policy(cl)),
            Clock::Gpu => format!("{}/cur_freq", self.devfreq()),
            Clock::Emc => super::EMC_RATE.to_string(),
        }
    }

    /// Sends `clock` to `rate`, which it reaches `settle_ms` from now (at once if it
    /// already runs there).
    fn retarget(
        &self,
        st: &mut KernelState,
        clock: Clock,
        rate: u64,
        settle_ms: f64,
    ) -> io::Result<()> {
        let file = self.clock_file(clock);
        let now = super::sensor::monotonic_us();
        let from = self.running(st, clock, now)?;
        if from == rate {
            st.settling.remove(&file);
        } else {
            let until_us = now + (settle_ms * 1e3) as u64;
            st.settling
                .insert(file.clone(), Settling { from, until_us });
        }
        // Readers see the clock settling before its file holds the new rate.
        self.save_settling(st)?;
        self.put(&file, &rate.to_string())
    }

    /// What `clock` runs at at `now_us` (`CLOCK_MONOTONIC`, microseconds) in state `st`.
    pub(super) fn running(&self, st: &KernelState, clock: Clock, now_us: u64) -> io::Result<u64> {
        self.running_in(&st.settling, clock, now_us)
    }

    /// What `clock` runs at at `now_us`, with `settling` the clocks settling.
    pub(super) fn running_in(
        &self,
        settling: &std::collections::BTreeMap<String, Settling>,
        clock: Clock,
        now_us: u64,
    ) -> io::Result<u64> {
        let file = self.clock_file(clock);
        match settling.get(&file) {
            Some(s) if now_us < s.until_us => Ok(s.from),
            _ => self.read(&file),
        }
    }

    /// How long a write to a CPU's `online` takes when it brings the CPU up or down: the
    /// hotplug, which the writer waits out (the board is not locked meanwhile).
    pub(super) fn hotplug_pause(&self) {
        std::thread::sleep(Duration::from_secs_f64(SwitchTimes::DEFAULT.cores_ms / 1e3));
    }

    /// The running clocks and online cores, as the rails see them.
    pub fn operating(&self) -> io::Result<Operating> {
        self.operating_in(&self.state()?)
    }

    /// [`SimKernel::operating`] in state `st`.
    pub(super) fn operating_in(&self, st: &KernelState) -> io::Result<Operating> {
        let now = super::sensor::monotonic_us();
        let mut cores = 0u32;
        let mut cpu_khz_sum = 0u64;
        for cl in 0..self.spec.clusters.len() {
            let mut on = 0u32;
            for c in self.cluster_cpus(cl) {
                on += u32::from(self.online(c)?);
            }
            if on > 0 {
                cpu_khz_sum += u64::from(on) * self.running(st, Clock::Cpu(cl), now)?;
            }
            cores += on;
        }
        Ok(Operating {
            online_cores: cores,
            cpu_hz: cpu_khz_sum as f64 * 1000.0 / f64::from(cores.max(1)),
            gpu_hz: self.running(st, Clock::Gpu, now)? as f64,
            emc_hz: self.running(st, Clock::Emc, now)? as f64,
        })
    }
}

/// A table entry in `[lo, hi]`: the highest when busy, the lowest when idle; the nearest
/// entry when the range holds none.
pub(crate) fn pick(table: &[u64], lo: u64, hi: u64, busy: bool) -> u64 {
    let inside = table.iter().copied().filter(|&f| f >= lo && f <= hi);
    let chosen = if busy { inside.max() } else { inside.min() };
    chosen.unwrap_or_else(|| {
        table
            .iter()
            .copied()
            .rev()
            .find(|&f| f <= hi)
            .unwrap_or(table.first().copied().unwrap_or(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn governor_picks_within_range() {
        let t = [100, 200, 300, 400];
        assert_eq!(pick(&t, 150, 350, true), 300);
        assert_eq!(pick(&t, 150, 350, false), 200);
        assert_eq!(pick(&t, 250, 260, true), 200);
    }

    #[test]
    fn a_running_clock_reads_its_old_rate_until_it_settles_and_hotplug_takes_its_time() {
        use crate::board::Board;
        use crate::sim::kernel::sensor::monotonic_us;
        let dir = tempfile::tempdir().unwrap();
        let sim = crate::sim::SimBoard::open("orin-agx", dir.path()).unwrap();
        let (k, board) = (&sim.kernel, Board::discover(sim.root()).unwrap());
        let rate = board.emc.as_ref().unwrap().rate.as_ref().unwrap();
        let top = rate.read_u64().unwrap();
        let low = k.spec.emc.table_hz[0];
        let cap = board.root.open(k.spec.emc.cap_file, true).unwrap();
        let written = monotonic_us();
        cap.write_u64(low).unwrap();
        let returned = monotonic_us();
        let st = k.state().unwrap();
        let s = st.settling[&k.clock_file(Clock::Emc)];
        let settle_us = (SwitchTimes::DEFAULT.emc_ms * 1e3) as u64;
        assert!(
            (written + settle_us..=returned + settle_us).contains(&s.until_us),
            "{s:?}"
        );
        assert_eq!(k.running(&st, Clock::Emc, s.until_us - 1).unwrap(), top);
        assert_eq!(k.running(&st, Clock::Emc, s.until_us).unwrap(), low);
        std::thread::sleep(Duration::from_micros(settle_us));
        assert_eq!(rate.read_u64().unwrap(), low);

        let online = board
            .root
            .open("/sys/devices/system/cpu/cpu11/online", true)
            .unwrap();
        let started = std::time::Instant::now();
        online.write_u64(0).unwrap();
        let took = started.elapsed().as_secs_f64() * 1e3;
        assert!(took >= SwitchTimes::DEFAULT.cores_ms, "{took} ms");
        // Writing what it already is hotplugs nothing (the quickest of three writes: a
        // loaded host may deschedule one for as long as a hotplug).
        let noop_ms = (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                online.write_u64(0).unwrap();
                started.elapsed().as_secs_f64() * 1e3
            })
            .fold(f64::MAX, f64::min);
        assert!(noop_ms < SwitchTimes::DEFAULT.cores_ms, "{noop_ms} ms");
    }
}
