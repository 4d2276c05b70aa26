//! The INA3221 model: conversion settings per chip, readings computed once per conversion
//! cycle from the operating point and load, with conversion noise and the chip's LSBs;
//! and the thermal model's zones and constants (temperatures follow the module power
//! found here).

use super::{KernelState, SimKernel};
use crate::sim::power::{self, Load};
use crate::sim::spec::InaDriver;
use crate::sim::tree::{ina_channel_dir, rail_watts, HWMON_SAMPLES};
use crate::support::rng;
use serde::{Deserialize, Serialize};
use std::io;

/// The L4T 32 IIO driver's fixed continuous configuration: 64 samples, 1.1 ms + 1.1 ms.
const IIO_SAMPLES: u32 = 64;
const IIO_REFRESH_US: u64 = 3 * 64 * 2200;
/// Noise of one conversion, one sigma: this share of the reading plus this many current
/// LSBs; averaging `samples` conversions divides it by sqrt(samples).
const NOISE_REL: f64 = 0.01;
const NOISE_LSB: f64 = 2.0;
/// Idle temperature and heating per watt of module power, m°C.
pub(super) const T_BASE_MC: f64 = 30_000.0;
pub(super) const T_PER_W_MC: f64 = 600.0;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A reading, in the driver's milli-units.
pub(super) enum Quantity {
    Volt,
    Amp,
    Watt,
}

#[derive(Debug, Default)]
pub(super) struct Sensor {
    /// Conversion cycle each chip's readings belong to (`None`: none read yet).
    epochs: Vec<Option<u64>>,
    /// Each chip's refresh interval on the grid its epoch counts, microseconds.
    refresh_us: Vec<u64>,
    /// (mV, mA) per chip and channel.
    pub(super) readings: Vec<[(u64, u64); 3]>,
    pub(super) gpu_load: u64,
    pub(super) module_w: f64,
    /// The operating point or load changed since `gpu_load` and `module_w` were taken.
    dirty: bool,
}

impl Quantity {
    /// Register reads behind one read of this quantity's file: the shunt or the bus
    /// register, or both for the IIO driver's power.
    fn registers(self) -> u64 {
        match self {
            Quantity::Volt | Quantity::Amp => 1,
            Quantity::Watt => crate::board::ina3221::REGISTER_READS_PER_RAIL,
        }
    }
}

impl SimKernel {
    /// Something the readings follow is about to change: the current conversion cycle's
    /// readings are taken first, from the state it ran under, so the change shows at the
    /// next conversion boundary and never inside a cycle already under way.
    pub(super) fn before_change(&self) {
        let mut s = self.sensor.lock().unwrap_or_else(|p| p.into_inner());
        // A failure here only means the next read computes the cycle afresh.
        let _ = self.sense(&mut s);
    }

    /// The operating point or load changed: the GPU's `load` and the thermal zones follow
    /// at once; the rails at their next conversion boundary.
    pub(super) fn invalidate(&self) {
        self.sensor.lock().unwrap_or_else(|p| p.into_inner()).dirty = true;
    }

    /// Charges a read of a rail file its I2C time: the bus is held for `q`'s register
    /// reads and the reading thread sleeps (never spins) until they end, as a thread in
    /// the kernel's I2C driver blocks on the transfer.
    pub(super) fn i2c_read(&self, q: Quantity) {
        let _bus = self.bus.lock().unwrap_or_else(|p| p.into_inner());
        let ns = q.registers()
            * crate::board::ina3221::register_read_ns(crate::board::ina3221::I2C_BUS_HZ);
        crate::telemetry::sampler::sleep_until(crate::support::clock::monotonic_ns() + ns);
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

    /// Readings of each chip's current conversion cycle. A chip's conversions end on a
    /// grid of its refresh interval (`CLOCK_MONOTONIC`, so every process simulating the
    /// board sees the same boundaries); the values of a cycle are computed once, from the
    /// operating point and load at its first read or before the first change inside it
    /// ([`SimKernel::before_change`]), and hold until the next boundary. A new refresh
    /// interval (averaging written) restarts the averaging: the registers keep their
    /// values until the first boundary of the new grid.
    pub(super) fn sense(&self, s: &mut Sensor) -> io::Result<()> {
        let now = monotonic_us();
        let chips = self.spec.ina.len();
        // Within every chip's current cycle nothing changes: no file is read.
        if !s.dirty
            && s.epochs.len() == chips
            && s.epochs
                .iter()
                .zip(&s.refresh_us)
                .all(|(e, r)| *e == Some(now / r))
        {
            return Ok(());
        }
        let st = self.state()?;
        let load = st.load;
        let op = self.operating_in(&st)?;
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
        s.refresh_us.resize(chips, 0);
        for (i, ina) in self.spec.ina.iter().enumerate() {
            let refresh = self.refresh_us(&st, i);
            let epoch = now / refresh;
            let restarted = s.epochs[i].is_some() && s.refresh_us[i] != refresh;
            s.refresh_us[i] = refresh;
            if s.epochs[i] == Some(epoch) || restarted {
                s.epochs[i] = Some(epoch);
                continue;
            }
            let averaged = f64::from(self.samples(&st, i)).sqrt();
            let lsb_ma = 40_000.0 / f64::from(ina.shunt_uohm);
            for (ch, rail) in ina.channels.iter().enumerate() {
                if rail.mv == 0 {
                    continue;
                }
                let seed = rng::spread(epoch) ^ ((i * 3 + ch) as u64);
                let mv = (f64::from(rail.mv) / 8.0).round() * 8.0;
                let true_ma = rail_watts(self.spec, rail, &d).max(0.0) * 1e6 / mv;
                let sigma = (NOISE_REL * true_ma + NOISE_LSB * lsb_ma) / averaged;
                let ma = ((true_ma + sigma * rng::gaussian(seed)) / lsb_ma)
                    .round()
                    .max(0.0)
                    * lsb_ma;
                s.readings[i][ch] = (mv as u64, ma as u64);
            }
            s.epochs[i] = Some(epoch);
        }
        s.gpu_load = (load.gpu.clamp(0.0, 1.0) * 1000.0) as u64;
        s.module_w = d.module_total();
        s.dirty = false;
        Ok(())
    }

    pub(super) fn store_samples(
        &self,
        st: &mut KernelState,
        chip: usize,
        v: u64,
    ) -> io::Result<()> {
        let snapped = nearest(&crate::board::ina3221::SAMPLES, v as f64);
        st.ina_mut(chip).samples = snapped;
        let dir = ina_channel_dir(self.spec.ina_driver, &self.spec.ina[chip]);
        self.put(&format!("{dir}/samples"), &snapped.to_string())
    }

    /// The mainline driver: the conversion time is `interval / 2 / (channels x samples)`,
    /// snapped to the chip's table; the read-back leaves `samples` out (CVRF patch).
    pub(super) fn store_interval(
        &self,
        st: &mut KernelState,
        chip: usize,
        ms: u64,
    ) -> io::Result<()> {
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

/// `CLOCK_MONOTONIC` now, microseconds (the simulated kernel's time).
pub(super) fn monotonic_us() -> u64 {
    crate::support::clock::monotonic_ns() / 1000
}

/// Which reading and channel a rail file holds.
pub(super) fn rail_file(driver: InaDriver, file: &str) -> Option<(Quantity, usize)> {
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
