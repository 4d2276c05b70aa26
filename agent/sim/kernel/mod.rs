//! The simulated board's kernel: what cpufreq, devfreq, CPU hotplug, the nvpmodel EMC
//! cap and the INA3221 drivers do when jpower writes or reads their attributes.
//!
//! It plugs into the file layer as a [`Driver`], so the code above it is the code that
//! runs on a Jetson. Per release (see `../shared/research/jetson-sysfs.md` section 10.4):
//! - **L4T 32 (kernel 4.9)**: a cpufreq or devfreq min above the current max, or a max
//!   below the current min, fails with `EINVAL` and changes nothing; values are stored as
//!   written (clamped to the hardware limits), only the running clock snaps to the table.
//! - **L4T 35/36 (5.10/5.15)**: min and max are PM-QoS requests that always succeed; the
//!   effective min is clamped to the effective max, and a raised max makes an earlier min
//!   request effective again. devfreq requests are kept in kHz (sub-kHz digits dropped).
//! - cpu0 cannot go offline (`EBUSY`); a fully offline cluster refuses limit writes
//!   (`EINVAL`); files whose mode has no write bit refuse writes even for root (in the
//!   file layer).
//! - INA3221 readings follow the running clocks, the online cores and the load through
//!   the physics model in [`super::power`], refresh only once per conversion cycle
//!   (`channels x samples x (bus + shunt conversion time)`, about 430 ms at NVIDIA's
//!   boot-time 512 samples; `samples` and `update_interval` are writable as on the
//!   mainline driver), carry conversion noise (one conversion: 1 % of the reading plus
//!   2 current LSBs, one sigma, divided by sqrt(samples) by the averaging) and are
//!   quantised to the chip's LSBs (8 mV bus, 40 uV shunt);
//! - thermal zones heat with module power (30 °C + 0.6 °C/W, per-zone offsets).
//!
//! The board's state lives in its files and in `kernel.json` beside the tree (QoS
//! requests, load), under an exclusive `flock` for every write, so separate jpower
//! processes see one board.

use super::power::{self, Load, Operating};
use super::spec::{BoardSpec, InaDriver};
use super::tree::{ina_channel_dir, rail_watts, HWMON_SAMPLES};
use crate::board::sysfs::{format_cpu_list, parse_u64, Driver};
use crate::support::rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The L4T 32 IIO driver's fixed continuous configuration: 64 samples, 1.1 ms + 1.1 ms.
const IIO_SAMPLES: u32 = 64;
const IIO_REFRESH_US: u64 = 3 * 64 * 2200;
/// Noise of one conversion, one sigma: this share of the reading plus this many current
/// LSBs; averaging `samples` conversions divides it by sqrt(samples).
const NOISE_REL: f64 = 0.01;
const NOISE_LSB: f64 = 2.0;
/// Zones of the simulated thermal model: name and offset from the base temperature (m°C).
pub const ZONES: [(&str, i32); 4] = [
    ("cpu-thermal", 0),
    ("gpu-thermal", 2000),
    ("soc0-thermal", -1000),
    ("tj-thermal", 3000),
];
/// Idle temperature and heating per watt of module power, m°C.
const T_BASE_MC: f64 = 30_000.0;
const T_PER_W_MC: f64 = 600.0;

/// The kernel's private state, persisted beside the tree.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KernelState {
    /// PM-QoS requests (L4T 35/36) by knob, in the file's unit (devfreq: kHz).
    pub requests: BTreeMap<String, u64>,
    /// What the board is busy with.
    pub load: LoadState,
    /// Averaging and conversion time per INA3221 chip (hwmon boards).
    #[serde(default)]
    pub ina: Vec<InaConfig>,
}

/// One chip's conversion settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InaConfig {
    /// Conversions averaged per reading (hwmon `samples`).
    pub samples: u32,
    /// Bus and shunt conversion time each, microseconds.
    pub ct_us: u32,
}

impl Default for InaConfig {
    fn default() -> Self {
        InaConfig {
            samples: HWMON_SAMPLES,
            ct_us: 140,
        }
    }
}

/// Conversion times the chip supports, microseconds.
const CT_US: [u32; 8] = [140, 204, 332, 588, 1100, 2116, 4156, 8244];

fn nearest(table: &[u32], v: f64) -> u32 {
    table
        .iter()
        .copied()
        .min_by(|a, b| {
            (f64::from(*a) - v)
                .abs()
                .total_cmp(&(f64::from(*b) - v).abs())
        })
        .unwrap_or(table[0])
}

impl KernelState {
    fn ina(&self, chip: usize) -> InaConfig {
        self.ina.get(chip).copied().unwrap_or_default()
    }

    fn ina_mut(&mut self, chip: usize) -> &mut InaConfig {
        if self.ina.len() <= chip {
            self.ina.resize(chip + 1, InaConfig::default());
        }
        &mut self.ina[chip]
    }
}

/// Utilisation of each domain, 0..=1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadState {
    /// CPU utilisation.
    pub cpu: f64,
    /// GPU utilisation.
    pub gpu: f64,
    /// Memory (EMC) bandwidth utilisation.
    pub emc: f64,
}

/// A fault to inject, for tests of rollback and crash recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The `n`-th write from now (1-based) fails with `errno` and changes nothing.
    FailWrite {
        /// Which write from now fails, 1-based.
        n: u64,
        /// The errno it fails with.
        errno: i32,
    },
    /// The process aborts (as if killed) right after the `n`-th write from now.
    AbortAfterWrites {
        /// Which write from now the process aborts after, 1-based.
        n: u64,
    },
}

impl Fault {
    /// Parses `fail-write=N[:ERRNO]` or `abort-after-writes=N` (the `JPOWER_SIM_FAULT`
    /// variable, read when a simulated board is opened).
    pub fn parse(text: &str) -> Option<Fault> {
        let (key, value) = text.trim().split_once('=')?;
        match key {
            "fail-write" => {
                let (n, errno) = match value.split_once(':') {
                    Some((n, e)) => (n.parse().ok()?, errno_from_name(e)?),
                    None => (value.parse().ok()?, libc::EIO),
                };
                Some(Fault::FailWrite { n, errno })
            }
            "abort-after-writes" => Some(Fault::AbortAfterWrites {
                n: value.parse().ok()?,
            }),
            _ => None,
        }
    }
}

fn errno_from_name(name: &str) -> Option<i32> {
    Some(match name {
        "EIO" => libc::EIO,
        "EINVAL" => libc::EINVAL,
        "EBUSY" => libc::EBUSY,
        "EACCES" => libc::EACCES,
        "EPERM" => libc::EPERM,
        other => other.parse().ok()?,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attr {
    Online(usize),
    CpuLimit { cluster: usize, max: bool },
    GpuLimit { max: bool },
    EmcCap,
    Rail { ina: usize, ch: usize, q: Quantity },
    InaSamples(usize),
    InaInterval(usize),
    GpuLoad,
    Thermal(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A reading, in the driver's milli-units.
enum Quantity {
    Volt,
    Amp,
    Watt,
}

#[derive(Debug, Default)]
struct Sensor {
    /// Conversion cycle each chip's readings belong to.
    epochs: Vec<Option<u64>>,
    /// Each chip's refresh interval when the readings were taken, microseconds.
    refresh_us: Vec<u64>,
    /// (mV, mA) per chip and channel.
    readings: Vec<[(u64, u64); 3]>,
    gpu_load: u64,
    module_w: f64,
}

#[derive(Debug, Default)]
struct Faults {
    writes: u64,
    pending: Option<Fault>,
}

/// The kernel model of one simulated board.
#[derive(Debug)]
pub struct SimKernel {
    spec: &'static BoardSpec,
    root: PathBuf,
    state_path: PathBuf,
    lock: File,
    attrs: Mutex<Vec<Attr>>,
    faults: Mutex<Faults>,
    sensor: Mutex<Sensor>,
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl SimKernel {
    /// The kernel of the board whose tree is `root`, state in `state_path`.
    pub fn new(spec: &'static BoardSpec, root: PathBuf, state_path: PathBuf, lock: File) -> Self {
        let fault = std::env::var("JPOWER_SIM_FAULT")
            .ok()
            .and_then(|v| Fault::parse(&v));
        SimKernel {
            spec,
            root,
            state_path,
            lock,
            attrs: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults {
                writes: 0,
                pending: fault,
            }),
            sensor: Mutex::new(Sensor::default()),
        }
    }

    /// Arms a fault, counted from the next write.
    pub fn inject(&self, fault: Fault) {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.writes = 0;
        f.pending = Some(fault);
    }

    /// Loads the persisted state.
    pub fn state(&self) -> io::Result<KernelState> {
        match std::fs::read(&self.state_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(KernelState::default()),
            Err(e) => Err(e),
        }
    }

    fn save(&self, st: &KernelState) -> io::Result<()> {
        let tmp = self.state_path.with_extension("tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(st).map_err(io::Error::other)?,
        )?;
        std::fs::rename(tmp, &self.state_path)
    }

    /// Sets the load the rails follow (and the GPU's `load` attribute shows).
    pub fn set_load(&self, load: LoadState) -> io::Result<()> {
        let _guard = self.exclusive()?;
        let mut st = self.state()?;
        st.load = load;
        self.save(&st)?;
        self.refresh_gpu_clock(&st)?;
        self.invalidate();
        Ok(())
    }

    fn invalidate(&self) {
        self.sensor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .epochs
            .clear();
    }

    fn exclusive(&self) -> io::Result<LockGuard<'_>> {
        // SAFETY: flock on a descriptor we own; it is released in LockGuard::drop.
        if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LockGuard(&self.lock))
    }

    fn path(&self, board: &str) -> PathBuf {
        self.root.join(board.trim_start_matches('/'))
    }

    fn read(&self, board: &str) -> io::Result<u64> {
        let bytes = std::fs::read(self.path(board))?;
        parse_u64(&bytes).ok_or_else(einval)
    }

    /// Replaces a file's value in place, so descriptors opened on it stay valid and a
    /// concurrent reader always sees a whole first token.
    fn put(&self, board: &str, text: &str) -> io::Result<()> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.path(board))?;
        let bytes = format!("{text}\n");
        f.write_at(bytes.as_bytes(), 0)?;
        f.set_len(bytes.len() as u64)
    }

    fn policy(&self, cluster: usize) -> String {
        format!(
            "/sys/devices/system/cpu/cpufreq/policy{}",
            self.spec.cluster_starts()[cluster]
        )
    }

    fn devfreq(&self) -> String {
        format!("{}/devfreq/{}", self.spec.gpu.dir, self.spec.gpu.devfreq)
    }

    fn online(&self, cpu: usize) -> io::Result<bool> {
        Ok(self.read(&format!("/sys/devices/system/cpu/cpu{cpu}/online"))? == 1)
    }

    fn cluster_cpus(&self, cluster: usize) -> std::ops::Range<usize> {
        let start = self.spec.cluster_starts()[cluster];
        start..start + self.spec.clusters[cluster]
    }

    fn store_online(&self, cpu: usize, v: u64) -> io::Result<()> {
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

    fn store_cpu_limit(
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

    fn store_gpu_limit(&self, st: &mut KernelState, max: bool, v: u64) -> io::Result<()> {
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
    fn refresh_gpu_clock(&self, st: &KernelState) -> io::Result<()> {
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

    fn store_emc_cap(&self, value: &[u8]) -> io::Result<()> {
        let text = std::str::from_utf8(value).map_err(|_| einval())?.trim();
        let v: i64 = text.parse().map_err(|_| einval())?;
        let e = &self.spec.emc;
        let top = *e.table_hz.last().unwrap_or(&0);
        let shown = if v <= 0 { e.uncapped } else { v as u64 };
        self.put(e.cap_file, &shown.to_string())?;
        let cap = if shown == 0 { top } else { shown };
        let rate = pick(e.table_hz, 0, cap, true);
        self.put(
            "/sys/kernel/debug/bpmp/debug/clk/emc/rate",
            &rate.to_string(),
        )
    }

    fn count_write(&self, completed: bool) -> io::Result<()> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if !completed {
            f.writes += 1;
            if let Some(Fault::FailWrite { n, errno }) = f.pending {
                if f.writes == n {
                    f.pending = None;
                    return Err(io::Error::from_raw_os_error(errno));
                }
            }
        } else if let Some(Fault::AbortAfterWrites { n }) = f.pending {
            if f.writes == n {
                std::process::abort();
            }
        }
        Ok(())
    }

    /// The noise-free power of every connected rail now, watts, in the board's rail
    /// order: the simulator's ground truth for tests of the telemetry.
    pub fn true_rail_watts(&self) -> io::Result<Vec<f64>> {
        let load = self.state()?.load;
        let op = self.operating()?;
        let load = Load {
            cpu: load.cpu,
            gpu: load.gpu,
            emc: load.emc,
        };
        let d = power::domain_power(self.spec.silicon, &op, &load);
        Ok(self
            .spec
            .ina
            .iter()
            .flat_map(|i| i.channels.iter())
            .filter(|r| r.mv > 0)
            .map(|r| rail_watts(self.spec, r, &d))
            .collect())
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
            emc_hz: self.read("/sys/kernel/debug/bpmp/debug/clk/emc/rate")? as f64,
        })
    }

    /// A chip's refresh interval: channels x samples x (bus + shunt conversion time).
    fn refresh_us(&self, st: &KernelState, chip: usize) -> u64 {
        match self.spec.ina_driver {
            InaDriver::Hwmon => {
                let c = st.ina(chip);
                3 * u64::from(c.samples) * 2 * u64::from(c.ct_us)
            }
            InaDriver::Iio => IIO_REFRESH_US,
        }
    }

    fn samples(&self, st: &KernelState, chip: usize) -> u32 {
        match self.spec.ina_driver {
            InaDriver::Hwmon => st.ina(chip).samples,
            InaDriver::Iio => IIO_SAMPLES,
        }
    }

    /// Readings of each chip's current conversion cycle, computed once per cycle from the
    /// operating point and load at the first read in that cycle.
    fn sense(&self, s: &mut Sensor) -> io::Result<()> {
        let now = monotonic_us();
        let chips = self.spec.ina.len();
        // Within every chip's current cycle nothing changes: no file is read.
        if s.epochs.len() == chips
            && s.epochs
                .iter()
                .zip(&s.refresh_us)
                .all(|(e, r)| *e == Some(now / r))
        {
            return Ok(());
        }
        let st = self.state()?;
        s.refresh_us = (0..chips).map(|c| self.refresh_us(&st, c)).collect();
        let epochs: Vec<u64> = s.refresh_us.iter().map(|r| now / r).collect();
        let load = st.load;
        let op = self.operating()?;
        let d = power::domain_power(
            self.spec.silicon,
            &op,
            &Load {
                cpu: load.cpu,
                gpu: load.gpu,
                emc: load.emc,
            },
        );
        s.readings.resize(chips, [(0, 0); 3]);
        s.epochs.resize(chips, None);
        for (i, ina) in self.spec.ina.iter().enumerate() {
            if s.epochs[i] == Some(epochs[i]) {
                continue;
            }
            let averaged = f64::from(self.samples(&st, i)).sqrt();
            let lsb_ma = 40_000.0 / f64::from(ina.shunt_uohm);
            for (ch, rail) in ina.channels.iter().enumerate() {
                if rail.mv == 0 {
                    continue;
                }
                let seed = rng::spread(epochs[i]) ^ ((i * 3 + ch) as u64);
                let mv = (f64::from(rail.mv) / 8.0).round() * 8.0;
                let true_ma = rail_watts(self.spec, rail, &d).max(0.0) * 1e6 / mv;
                let sigma = (NOISE_REL * true_ma + NOISE_LSB * lsb_ma) / averaged;
                let ma = ((true_ma + sigma * rng::gaussian(seed)) / lsb_ma)
                    .round()
                    .max(0.0)
                    * lsb_ma;
                s.readings[i][ch] = (mv as u64, ma as u64);
            }
            s.epochs[i] = Some(epochs[i]);
        }
        s.gpu_load = (load.gpu.clamp(0.0, 1.0) * 1000.0) as u64;
        s.module_w = d.module_total();
        Ok(())
    }

    fn store_samples(&self, st: &mut KernelState, chip: usize, v: u64) -> io::Result<()> {
        let snapped = nearest(&crate::board::ina3221::SAMPLES, v as f64);
        st.ina_mut(chip).samples = snapped;
        let dir = ina_channel_dir(self.spec.ina_driver, &self.spec.ina[chip]);
        self.put(&format!("{dir}/samples"), &snapped.to_string())
    }

    /// The mainline driver: the conversion time is `interval / 2 / (channels x samples)`,
    /// snapped to the chip's table; the read-back leaves `samples` out (CVRF patch).
    fn store_interval(&self, st: &mut KernelState, chip: usize, ms: u64) -> io::Result<()> {
        let c = st.ina(chip);
        let ct = nearest(
            &CT_US,
            ms as f64 * 1000.0 / 2.0 / (3.0 * f64::from(c.samples)),
        );
        st.ina_mut(chip).ct_us = ct;
        let readback = ((3 * 2 * ct) as f64 / 1000.0).round() as u64;
        let dir = ina_channel_dir(self.spec.ina_driver, &self.spec.ina[chip]);
        self.put(&format!("{dir}/update_interval"), &readback.to_string())
    }
}

struct LockGuard<'a>(&'a File);

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking the descriptor locked in `exclusive`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
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

fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
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
                _ => return None,
            }
        } else if p == format!("{}/min_freq", self.devfreq()) {
            Attr::GpuLimit { max: false }
        } else if p == format!("{}/max_freq", self.devfreq()) {
            Attr::GpuLimit { max: true }
        } else if p == format!("{}/load", spec.gpu.dir) {
            Attr::GpuLoad
        } else if p == spec.emc.cap_file {
            Attr::EmcCap
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
        {
            let _guard = self.exclusive()?;
            let mut st = self.state()?;
            let number = || parse_u64(value).ok_or_else(einval);
            match attr {
                Attr::Online(cpu) => self.store_online(cpu, number()?)?,
                Attr::CpuLimit { cluster, max } => {
                    self.store_cpu_limit(&mut st, cluster, max, number()?)?
                }
                Attr::GpuLimit { max } => self.store_gpu_limit(&mut st, max, number()?)?,
                Attr::EmcCap => self.store_emc_cap(value)?,
                Attr::InaSamples(chip) => self.store_samples(&mut st, chip, number()?)?,
                Attr::InaInterval(chip) => self.store_interval(&mut st, chip, number()?)?,
                Attr::Rail { .. } | Attr::GpuLoad | Attr::Thermal(_) => {
                    return Err(io::Error::from_raw_os_error(libc::EACCES))
                }
            }
            self.save(&st)?;
        }
        self.invalidate();
        self.count_write(true)
    }

    fn show(&self, id: u32, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let attr = self.attrs.lock().ok()?.get(id as usize).copied()?;
        if !matches!(attr, Attr::Rail { .. } | Attr::GpuLoad | Attr::Thermal(_)) {
            return None;
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

/// Which reading and channel a rail file holds.
fn rail_file(driver: InaDriver, file: &str) -> Option<(Quantity, usize)> {
    let num = |s: &str| s.parse::<usize>().ok();
    match driver {
        InaDriver::Hwmon => {
            let (q, rest) = if let Some(r) = file.strip_prefix("curr") {
                (Quantity::Amp, r)
            } else {
                (Quantity::Volt, file.strip_prefix("in")?)
            };
            let k = num(rest.strip_suffix("_input")?)?;
            (1..=3).contains(&k).then_some((q, k - 1))
        }
        InaDriver::Iio => {
            let rest = file.strip_suffix("_input")?;
            for (prefix, q) in [
                ("in_voltage", Quantity::Volt),
                ("in_current", Quantity::Amp),
                ("in_power", Quantity::Watt),
            ] {
                if let Some(k) = rest.strip_prefix(prefix).and_then(num) {
                    return (k < 3).then_some((q, k));
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(
            Fault::parse("fail-write=3:EINVAL"),
            Some(Fault::FailWrite {
                n: 3,
                errno: libc::EINVAL
            })
        );
        assert_eq!(
            Fault::parse("fail-write=2"),
            Some(Fault::FailWrite {
                n: 2,
                errno: libc::EIO
            })
        );
        assert_eq!(
            Fault::parse("abort-after-writes=4"),
            Some(Fault::AbortAfterWrites { n: 4 })
        );
        assert_eq!(Fault::parse("nonsense"), None);
    }

    #[test]
    fn governor_picks_within_range() {
        let t = [100, 200, 300, 400];
        assert_eq!(pick(&t, 150, 350, true), 300);
        assert_eq!(pick(&t, 150, 350, false), 200);
        assert_eq!(pick(&t, 250, 260, true), 200);
    }

    #[test]
    fn rail_files_map_to_channels() {
        assert_eq!(
            rail_file(InaDriver::Hwmon, "in2_input"),
            Some((Quantity::Volt, 1))
        );
        assert_eq!(
            rail_file(InaDriver::Hwmon, "curr3_input"),
            Some((Quantity::Amp, 2))
        );
        assert_eq!(rail_file(InaDriver::Hwmon, "in7_input"), None);
        assert_eq!(
            rail_file(InaDriver::Iio, "in_power0_input"),
            Some((Quantity::Watt, 0))
        );
        assert_eq!(rail_file(InaDriver::Iio, "in_current2_trigger_input"), None);
    }
}
