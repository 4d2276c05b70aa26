//! Energy from NVML, for GPUs without INA3221 rails (data-centre and desktop cards).
//! NVML's power reading is a one-second average on recent GPUs, so the meter reads its
//! total-energy counter (millijoules since the driver loaded, Volta and newer) at both
//! ends of a window; windows should last a second or more. The GPU is found by its PCI
//! bus id, not by index: NVML numbers every GPU of the machine, CUDA only those
//! `CUDA_VISIBLE_DEVICES` shows, in its own order. `libnvidia-ml` is loaded at run time:
//! without it, [`NvmlMeter::open`] returns an error, nothing panics.

use super::roofline::{Meter, Run};
use super::GpuError;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::Nvml;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// NVML's view of one GPU: its energy counter as a meter, its power and SM clock.
pub struct NvmlMeter {
    nvml: Arc<Nvml>,
    index: u32,
    /// The bus id as NVML spells it (`00000000:19:00.0`).
    pub bus_id: String,
    start: Option<(u64, Instant)>,
}

fn nvml_error(e: nvml_wrapper::error::NvmlError) -> GpuError {
    GpuError::Power(format!("NVML: {e}"))
}

impl NvmlMeter {
    /// Opens the GPU at PCI bus id `bus_id` (CUDA's `0000:19:00.0` form) through NVML
    /// and checks that its energy counter works.
    pub fn open(bus_id: &str) -> Result<NvmlMeter, GpuError> {
        let nvml = Nvml::init().map_err(nvml_error)?;
        let device = nvml
            .device_by_pci_bus_id(bus_id)
            .map_err(|e| GpuError::Power(format!("NVML has no GPU at PCI {bus_id}: {e}")))?;
        let index = device.index().map_err(nvml_error)?;
        let bus_id = device.pci_info().map_err(nvml_error)?.bus_id;
        let meter = NvmlMeter {
            nvml: Arc::new(nvml),
            index,
            bus_id,
            start: None,
        };
        meter.counter_mj()?;
        Ok(meter)
    }

    fn counter_mj(&self) -> Result<u64, GpuError> {
        counter_mj(&self.nvml, self.index)
    }

    /// A reader of the GPU's SM clock, Hz, for [`super::cuda::Cuda::watch_clock`].
    pub fn sm_clock(&self) -> super::cuda::ClockReader {
        let (nvml, index) = (self.nvml.clone(), self.index);
        Box::new(move || {
            nvml.device_by_index(index)
                .and_then(|d| d.clock_info(Clock::SM))
                .ok()
                .map(|mhz| f64::from(mhz) * 1e6)
        })
    }

    /// Checks NVML against itself while `work` keeps the GPU busy for `seconds`: the
    /// energy counter's mean power against the mean of power readings taken every 10 ms,
    /// both over the same span, after dropping the first `skip_s` seconds (the clocks and
    /// NVML's one-second average settling).
    pub fn agreement(
        &self,
        seconds: f64,
        skip_s: f64,
        work: impl FnOnce(f64) -> Result<(), GpuError>,
    ) -> Result<Agreement, GpuError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (nvml, index, flag) = (self.nvml.clone(), self.index, stop.clone());
        let sampler = std::thread::spawn(move || -> Result<Agreement, GpuError> {
            let t0 = Instant::now();
            while t0.elapsed().as_secs_f64() < skip_s && !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let (mj0, from) = (counter_mj(&nvml, index)?, Instant::now());
            let (mut sum_w, mut readings) = (0.0, 0u32);
            while !flag.load(Ordering::Relaxed) {
                let mw = nvml
                    .device_by_index(index)
                    .and_then(|d| d.power_usage())
                    .map_err(nvml_error)?;
                sum_w += f64::from(mw) * 1e-3;
                readings += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            let (mj1, span_s) = (counter_mj(&nvml, index)?, from.elapsed().as_secs_f64());
            let counter_w = mj1.saturating_sub(mj0) as f64 * 1e-3 / span_s;
            let readings_w = sum_w / f64::from(readings.max(1));
            Ok(Agreement {
                seconds: span_s,
                readings,
                counter_w,
                readings_w,
                rel_diff: (counter_w - readings_w) / readings_w,
            })
        });
        let worked = work(seconds);
        stop.store(true, Ordering::Relaxed);
        let agreement = sampler
            .join()
            .map_err(|_| GpuError::Power("the NVML sampler panicked".into()))?;
        worked?;
        agreement
    }
}

/// What [`NvmlMeter::agreement`] found.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Agreement {
    /// The span compared, seconds.
    pub seconds: f64,
    /// Power readings taken in it.
    pub readings: u32,
    /// Mean power from the energy counter, W.
    pub counter_w: f64,
    /// Mean of the power readings, W.
    pub readings_w: f64,
    /// `(counter_w - readings_w) / readings_w`.
    pub rel_diff: f64,
}

fn counter_mj(nvml: &Nvml, index: u32) -> Result<u64, GpuError> {
    nvml.device_by_index(index)
        .and_then(|d| d.total_energy_consumption())
        .map_err(nvml_error)
}

impl Meter for NvmlMeter {
    fn name(&self) -> String {
        let name = self
            .nvml
            .device_by_index(self.index)
            .and_then(|d| d.name())
            .unwrap_or_else(|_| format!("GPU {}", self.index));
        format!("NVML total energy of {name} (PCI {})", self.bus_id)
    }

    fn begin(&mut self) -> Result<(), GpuError> {
        self.start = Some((self.counter_mj()?, Instant::now()));
        Ok(())
    }

    fn end(&mut self, run: &Run) -> Result<f64, GpuError> {
        let (mj0, t0) = self
            .start
            .take()
            .ok_or_else(|| GpuError::Power("NVML window ended before it began".into()))?;
        let mj1 = self.counter_mj()?;
        // The window's edges (the first and last counter reads) around the launches: the
        // launches' share of it, at the window's mean power.
        let window_s = t0.elapsed().as_secs_f64().max(run.total_s());
        Ok(mj1.saturating_sub(mj0) as f64 * 1e-3 * run.total_s() / window_s)
    }
}

/// Whether CUDA's PCI bus id (`0000:19:00.0`) and NVML's (`00000000:19:00.0`) name the
/// same device: the same bus, device and function in the same domain.
pub fn same_bus_id(cuda: &str, nvml: &str) -> bool {
    let parse = |s: &str| -> Option<(u64, String)> {
        let (domain, rest) = s.split_once(':')?;
        Some((
            u64::from_str_radix(domain, 16).ok()?,
            rest.to_ascii_lowercase(),
        ))
    };
    parse(cuda).is_some_and(|c| parse(nvml) == Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_match_across_domain_widths_and_case() {
        assert!(same_bus_id("0000:19:00.0", "00000000:19:00.0"));
        assert!(same_bus_id("0000:AB:00.0", "00000000:ab:00.0"));
        assert!(!same_bus_id("0000:19:00.0", "00000000:1a:00.0"));
        assert!(!same_bus_id("0001:19:00.0", "00000000:19:00.0"));
        assert!(!same_bus_id("garbage", "00000000:19:00.0"));
    }
}
