//! The file layer's [`Driver`]: which model attribute each attached file is, writes
//! dispatched to the drivers' rules, and reads of the sensor, thermal and `/proc` files.

use super::clocks::Clock;
use super::sensor::{rail_file, Quantity, T_BASE_MC, T_PER_W_MC};
use super::{einval, KernelState, SimKernel};
use crate::board::sysfs::{parse_u64, Driver};
use crate::sim::spec::InaDriver;
use crate::sim::spec::ZONES;
use crate::sim::tree::ina_channel_dir;
use std::io;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attr {
    Online(usize),
    CpuLimit { cluster: usize, max: bool },
    GpuLimit { max: bool },
    EmcCap,
    Running(Clock),
    Rail { ina: usize, ch: usize, q: Quantity },
    InaSamples(usize),
    InaInterval(usize),
    GpuLoad,
    Thermal(usize),
    ProcStat,
    MemInfo,
    EmcActivity,
}

impl SimKernel {
    /// A write of `value` to `attr` under the board's lock, by the driver's rules.
    pub(super) fn apply(&self, st: &mut KernelState, attr: Attr, value: &[u8]) -> io::Result<()> {
        let number = || parse_u64(value).ok_or_else(einval);
        match attr {
            Attr::Online(cpu) => self.store_online(cpu, number()?),
            Attr::CpuLimit { cluster, max } => self.store_cpu_limit(st, cluster, max, number()?),
            Attr::GpuLimit { max } => self.store_gpu_limit(st, max, number()?),
            Attr::EmcCap => self.store_emc_cap(st, value),
            Attr::InaSamples(chip) => self.store_samples(st, chip, number()?),
            Attr::InaInterval(chip) => self.store_interval(st, chip, number()?),
            Attr::Rail { .. }
            | Attr::Running(_)
            | Attr::GpuLoad
            | Attr::Thermal(_)
            | Attr::ProcStat
            | Attr::MemInfo
            | Attr::EmcActivity => Err(io::Error::from_raw_os_error(libc::EACCES)),
        }
    }
}

impl SimKernel {
    /// A running clock's file now, into `buf` while it settles (the bytes written); `None`
    /// once it has settled, and the file layer reads the rate written into its file.
    /// Only the clocks settling are loaded, not the whole state: `status` reads every
    /// clock.
    fn show_running(&self, clock: Clock, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let settling = match self.settling() {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        let now = super::sensor::monotonic_us();
        let s = settling
            .get(&self.clock_file(clock))
            .filter(|s| now < s.until_us)?;
        let mut tmp = [0u8; 24];
        let n = crate::board::sysfs::format_u64(s.from, &mut tmp).min(buf.len());
        buf[..n].copy_from_slice(&tmp[..n]);
        Some(Ok(n))
    }
}

impl Driver for SimKernel {
    fn attach(&self, rel: &Path) -> Option<u32> {
        let p = rel.to_str()?;
        let spec = self.spec;
        let online = p
            .strip_prefix("/sys/devices/system/cpu/cpu")
            .and_then(|rest| rest.strip_suffix("/online"))
            .and_then(|n| n.parse().ok());
        let attr = if let Some(n) = online {
            Attr::Online(n)
        } else if let Some(rest) = p.strip_prefix("/sys/devices/system/cpu/cpufreq/policy") {
            let (n, file) = rest.split_once('/')?;
            let start: usize = n.parse().ok()?;
            let cluster = spec.cluster_starts().iter().position(|&s| s == start)?;
            match file {
                "scaling_min_freq" => Attr::CpuLimit {
                    cluster,
                    max: false,
                },
                "scaling_max_freq" => Attr::CpuLimit { cluster, max: true },
                "scaling_cur_freq" | "cpuinfo_cur_freq" => Attr::Running(Clock::Cpu(cluster)),
                _ => return None,
            }
        } else if p == format!("{}/min_freq", self.devfreq()) {
            Attr::GpuLimit { max: false }
        } else if p == format!("{}/max_freq", self.devfreq()) {
            Attr::GpuLimit { max: true }
        } else if p == format!("{}/cur_freq", self.devfreq()) {
            Attr::Running(Clock::Gpu)
        } else if p == super::EMC_RATE {
            Attr::Running(Clock::Emc)
        } else if p == format!("{}/load", spec.gpu.dir) {
            Attr::GpuLoad
        } else if p == spec.emc.cap_file {
            Attr::EmcCap
        } else if p == crate::board::paths::PROC_STAT {
            Attr::ProcStat
        } else if p == crate::board::paths::PROC_MEMINFO {
            Attr::MemInfo
        } else if crate::board::paths::EMC_ACTIVITY.contains(&p) {
            Attr::EmcActivity
        } else if let Some(z) = p
            .strip_prefix("/sys/devices/virtual/thermal/thermal_zone")
            .and_then(|r| r.strip_suffix("/temp"))
            .and_then(|n| n.parse().ok())
        {
            Attr::Thermal(z)
        } else {
            let (ina, file) = spec.ina.iter().enumerate().find_map(|(i, ina)| {
                let dir = ina_channel_dir(spec.ina_driver, ina);
                p.strip_prefix(&dir)?
                    .strip_prefix('/')
                    .map(|f| (i, f.to_string()))
            })?;
            match file.as_str() {
                "samples" if spec.ina_driver == InaDriver::Hwmon => Attr::InaSamples(ina),
                "update_interval" if spec.ina_driver == InaDriver::Hwmon => Attr::InaInterval(ina),
                _ => {
                    let (q, ch) = rail_file(spec.ina_driver, &file)?;
                    Attr::Rail { ina, ch, q }
                }
            }
        };
        let mut attrs = self.attrs.lock().unwrap_or_else(|p| p.into_inner());
        attrs.push(attr);
        Some((attrs.len() - 1) as u32)
    }

    fn store(&self, id: u32, value: &[u8]) -> io::Result<()> {
        let attr = self
            .attrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id as usize)
            .copied()
            .ok_or_else(einval)?;
        self.count_write(false)?;
        self.before_change();
        let hotplug;
        {
            let _guard = self.exclusive()?;
            let mut st = self.state()?;
            // What another process wrote straight into the tree reaches the kernel first.
            self.reconcile(&mut st)?;
            hotplug = match attr {
                Attr::Online(cpu) => Some(self.online(cpu)?),
                _ => None,
            };
            // A refused write leaves the kernel's state as it was.
            let mut after = st.clone();
            let result = self.apply(&mut after, attr, value);
            let mut st = if result.is_ok() { after } else { st };
            self.record(&mut st)?;
            self.save(&st)?;
            result?;
        }
        self.invalidate();
        if let (Some(was), Attr::Online(cpu)) = (hotplug, attr) {
            if self.online(cpu)? != was {
                self.hotplug_pause();
            }
        }
        self.count_write(true)
    }

    fn show(&self, id: u32, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let attr = self.attrs.lock().ok()?.get(id as usize).copied()?;
        match attr {
            Attr::ProcStat => return Some(self.proc_stat(buf)),
            Attr::MemInfo => return Some(self.meminfo(buf)),
            Attr::EmcActivity => return Some(self.emc_activity(buf)),
            Attr::Running(clock) => return self.show_running(clock, buf),
            _ => {}
        }
        if !matches!(attr, Attr::Rail { .. } | Attr::GpuLoad | Attr::Thermal(_)) {
            // A writable attribute reads as its file, once any change made behind the
            // model's back went through the driver's rules.
            return self.notice(attr).err().map(Err);
        }
        if let Attr::Rail { q, .. } = attr {
            // The register is latched at the end of its transfer: the bus time comes first.
            self.i2c_read(q);
        }
        let mut s = self.sensor.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = self.sense(&mut s) {
            return Some(Err(e));
        }
        let value = match attr {
            Attr::Rail { ina, ch, q } => {
                let (mv, ma) = s.readings.get(ina).map(|c| c[ch]).unwrap_or((0, 0));
                match q {
                    Quantity::Volt => mv,
                    Quantity::Amp => ma,
                    Quantity::Watt => mv * ma / 1000,
                }
            }
            Attr::Thermal(z) => {
                let offset = ZONES.get(z).map_or(0, |z| z.1);
                ((T_BASE_MC + T_PER_W_MC * s.module_w) as i64 + i64::from(offset)).max(0) as u64
            }
            _ => s.gpu_load,
        };
        let mut tmp = [0u8; 24];
        let n = crate::board::sysfs::format_u64(value, &mut tmp);
        let n = n.min(buf.len());
        buf[..n].copy_from_slice(&tmp[..n]);
        Some(Ok(n))
    }
}
