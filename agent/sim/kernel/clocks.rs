//! The clock and hotplug drivers: CPU `online`, cpufreq and devfreq min/max with each
//! release's rules (`EINVAL` on L4T 32, PM-QoS requests on L4T 35/36), the governors'
//! choice of the running clock, the EMC cap, and the operating point they make.

use super::{einval, KernelState, SimKernel};
use crate::board::sysfs::format_cpu_list;
use crate::sim::power::Operating;
use std::io;

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
        let cur = pick(table, eff_min, eff_max, true).to_string();
        self.put(&format!("{p}/scaling_cur_freq"), &cur)?;
        self.put(&format!("{p}/cpuinfo_cur_freq"), &cur)
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
    pub(super) fn refresh_gpu_clock(&self, st: &KernelState) -> io::Result<()> {
        let d = self.devfreq();
        let table = self.spec.gpu.table_hz;
        let hi = match self.read(&format!("{d}/max_freq"))? {
            0 => *table.last().unwrap_or(&0),
            v => v,
        };
        let lo = self.read(&format!("{d}/min_freq"))?;
        let cur = pick(table, lo, hi, st.load.gpu > 0.05);
        self.put(&format!("{d}/cur_freq"), &cur.to_string())
    }

    pub(super) fn store_emc_cap(&self, value: &[u8]) -> io::Result<()> {
        let text = std::str::from_utf8(value).map_err(|_| einval())?.trim();
        let v: i64 = text.parse().map_err(|_| einval())?;
        let e = &self.spec.emc;
        let top = *e.table_hz.last().unwrap_or(&0);
        let shown = if v <= 0 { e.uncapped } else { v as u64 };
        self.put(e.cap_file, &shown.to_string())?;
        let cap = if shown == 0 { top } else { shown };
        let rate = pick(e.table_hz, 0, cap, true);
        self.put(super::EMC_RATE, &rate.to_string())
    }

    /// Reads the operating point from the tree.
    /// The running clocks and online cores, as the rails see them.
    pub fn operating(&self) -> io::Result<Operating> {
        let mut cores = 0u32;
        let mut cpu_khz_sum = 0u64;
        for cl in 0..self.spec.clusters.len() {
            let mut on = 0u32;
            for c in self.cluster_cpus(cl) {
                on += u32::from(self.online(c)?);
            }
            if on > 0 {
                cpu_khz_sum +=
                    u64::from(on) * self.read(&format!("{}/scaling_cur_freq", self.policy(cl)))?;
            }
            cores += on;
        }
        Ok(Operating {
            online_cores: cores,
            cpu_hz: cpu_khz_sum as f64 * 1000.0 / f64::from(cores.max(1)),
            gpu_hz: self.read(&format!("{}/cur_freq", self.devfreq()))? as f64,
            emc_hz: self.read(super::EMC_RATE)? as f64,
        })
    }
}

/// A table entry in `[lo, hi]`: the highest when busy, the lowest when idle; the nearest
/// entry when the range holds none.
fn pick(table: &[u64], lo: u64, hi: u64, busy: bool) -> u64 {
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
}
