//! Energy from NVML, for GPUs without INA3221 rails (data-centre and desktop cards).
//! NVML's power reading is a one-second average on recent GPUs, so the meter reads its
//! total-energy counter (millijoules since the driver loaded, Volta and newer) at both
//! ends of a window; windows should last a second or more. `libnvidia-ml` is loaded at
//! run time: without it, [`NvmlMeter::open`] returns an error, nothing panics.

use super::roofline::{Meter, Run};
use super::GpuError;
use nvml_wrapper::Nvml;
use std::time::Instant;

/// NVML's energy counter of one GPU as a meter.
pub struct NvmlMeter {
    nvml: Nvml,
    index: u32,
    start: Option<(u64, Instant)>,
}

fn nvml_error(e: nvml_wrapper::error::NvmlError) -> GpuError {
    GpuError::Power(format!("NVML: {e}"))
}

impl NvmlMeter {
    /// Opens GPU `index` through NVML and checks that its energy counter works.
    pub fn open(index: u32) -> Result<NvmlMeter, GpuError> {
        let nvml = Nvml::init().map_err(nvml_error)?;
        let meter = NvmlMeter {
            nvml,
            index,
            start: None,
        };
        meter.counter_mj()?;
        Ok(meter)
    }

    fn counter_mj(&self) -> Result<u64, GpuError> {
        self.nvml
            .device_by_index(self.index)
            .and_then(|d| d.total_energy_consumption())
            .map_err(nvml_error)
    }
}

impl Meter for NvmlMeter {
    fn name(&self) -> String {
        let name = self
            .nvml
            .device_by_index(self.index)
            .and_then(|d| d.name())
            .unwrap_or_else(|_| format!("GPU {}", self.index));
        format!("NVML total energy of {name}")
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
        // The window also holds the warm-up launch and its edges: the launches' share of
        // it, at the window's mean power.
        let window_s = t0.elapsed().as_secs_f64().max(run.total_s());
        Ok(mj1.saturating_sub(mj0) as f64 * 1e-3 * run.total_s() / window_s)
    }
}
