//! The kernel's persisted state (`kernel.json` beside the tree: PM-QoS requests, load and
//! the CPU time it kept busy, INA3221 settings) and the exclusive `flock` every write holds.

use super::{InaConfig, SimKernel};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::MutexGuard;

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
    /// What the kernel last left in each writable attribute, by board path: a file that
    /// holds something else was written behind its back (see `outside.rs`).
    #[serde(default)]
    pub shown: BTreeMap<String, String>,
    /// The CPU time the load has kept busy (`/proc/stat`).
    #[serde(default)]
    pub cpu_busy: CpuBusy,
    /// Running clocks still moving to the rate last written, by the board path of their
    /// running-rate file ([`crate::sim::settle`]).
    #[serde(default)]
    pub settling: BTreeMap<String, Settling>,
}

/// A running clock on its way to a new rate: it reads `from` until `until_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settling {
    /// The rate it ran at when the write came, Hz or kHz as its file says.
    pub from: u64,
    /// `CLOCK_MONOTONIC` when it reaches the new rate, microseconds.
    pub until_us: u64,
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

impl From<crate::sim::power::Load> for LoadState {
    fn from(l: crate::sim::power::Load) -> LoadState {
        LoadState {
            cpu: l.cpu,
            gpu: l.gpu,
            emc: l.emc,
        }
    }
}

impl LoadState {
    /// Training a network on the GPU: the GPU busy, the CPU half busy feeding it, memory
    /// traffic in between (the demo's load, and `train --sim`'s).
    pub const TRAINING: LoadState = LoadState {
        cpu: 0.5,
        gpu: 0.9,
        emc: 0.6,
    };
}

impl SimKernel {
    /// Loads the persisted state.
    pub fn state(&self) -> io::Result<KernelState> {
        match std::fs::read(&self.state_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(KernelState::default()),
            Err(e) => Err(e),
        }
    }

    pub(super) fn save(&self, st: &KernelState) -> io::Result<()> {
        let tmp = self.state_path.with_extension("tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(st).map_err(io::Error::other)?,
        )?;
        std::fs::rename(tmp, &self.state_path)
    }

    /// Where the clocks still settling are kept apart from the rest of the state, so that
    /// a read of a running clock loads only them ([`SimKernel::settling`]).
    fn settling_path(&self) -> std::path::PathBuf {
        self.state_path.with_file_name("settling.json")
    }

    /// Writes the clocks of `st` still settling now, or removes the file when none is;
    /// called where a clock is sent to a new rate, the only change to them.
    pub(super) fn save_settling(&self, st: &KernelState) -> io::Result<()> {
        let now = super::sensor::monotonic_us();
        let settling: BTreeMap<&String, &Settling> = st
            .settling
            .iter()
            .filter(|(_, s)| s.until_us > now)
            .collect();
        let path = self.settling_path();
        if settling.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec(&settling).map_err(io::Error::other)?,
        )?;
        std::fs::rename(tmp, path)
    }

    /// The clocks settling as the last write left them (none: no file).
    pub(super) fn settling(&self) -> io::Result<BTreeMap<String, Settling>> {
        match std::fs::read(self.settling_path()) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(e),
        }
    }

    /// Sets the load the rails follow (and the GPU's `load` attribute shows).
    pub fn set_load(&self, load: LoadState) -> io::Result<()> {
        self.before_change();
        let _guard = self.exclusive()?;
        let mut st = self.state()?;
        let now = super::sensor::monotonic_us();
        st.cpu_busy.advance(&st.load, now);
        st.load = load;
        self.refresh_gpu_clock(&mut st)?;
        self.save(&st)?;
        self.invalidate();
        Ok(())
    }

    /// The board to this thread alone: the process's threads one at a time (they share
    /// the descriptor, and a `flock` held on it admits them all), then other processes
    /// through the `flock`.
    pub(super) fn exclusive(&self) -> io::Result<LockGuard<'_>> {
        let threads = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: flock on a descriptor we own; it is released in LockGuard::drop.
        if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LockGuard {
            file: &self.lock,
            _threads: threads,
        })
    }
}

/// The `flock`, released when dropped, and then the process's mutex.
pub(super) struct LockGuard<'a> {
    file: &'a File,
    _threads: MutexGuard<'a, ()>,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking the descriptor locked in `exclusive`.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The CPU time the load has kept busy, as `/proc/stat` counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuBusy {
    /// Busy seconds of each online CPU up to `since_us`.
    pub busy_s: f64,
    /// `CLOCK_MONOTONIC` of the last change of load, microseconds (0: never).
    pub since_us: u64,
}

impl CpuBusy {
    /// Busy seconds up to `now_us` with `load` held since the last change.
    pub fn at(&self, load: &LoadState, now_us: u64) -> f64 {
        let held_s = now_us.saturating_sub(self.since_us) as f64 * 1e-6;
        let held_s = if self.since_us == 0 { 0.0 } else { held_s };
        self.busy_s + load.cpu.clamp(0.0, 1.0) * held_s
    }

    /// Brings the count up to `now_us` under `load`, before the load changes.
    pub fn advance(&mut self, load: &LoadState, now_us: u64) {
        self.busy_s = self.at(load, now_us);
        self.since_us = now_us;
    }
}
