//! Vendor peaks per Jetson module, to report what fraction of the hardware a measurement
//! reached. From the modules' data sheets (shared/research/roofline-cuda.md section 2),
//! never from CUDA attributes: on Tegra the memory-clock attribute is wrong (it gives
//! 83 GB/s on an AGX Orin that measures 153).

use crate::board::Soc;
use serde::Serialize;

/// The peaks of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Peaks {
    /// Which part this row describes.
    pub part: &'static str,
    /// CUDA cores: the FP32 peak is `cores * 2 * clock`, FP16 (`half2`) twice that.
    pub cuda_cores: u32,
    /// DRAM bytes per memory-controller (EMC) cycle: the DRAM peak is this times the EMC
    /// clock (Orin AGX: 64 B x 3199 MHz = 204.8 GB/s).
    pub bytes_per_emc_cycle: f64,
    /// The vendor DRAM peak at the module's top EMC clock, bytes/s.
    pub dram_bytes_per_s: f64,
}

impl Peaks {
    /// FP32 FLOP/s at `gpu_hz`.
    pub fn f32_flops(&self, gpu_hz: f64) -> f64 {
        f64::from(self.cuda_cores) * 2.0 * gpu_hz
    }

    /// DRAM bytes/s at `emc_hz` (the fixed vendor figure where the clock is unknown).
    pub fn dram(&self, emc_hz: Option<f64>) -> f64 {
        emc_hz.map_or(self.dram_bytes_per_s, |f| {
            (self.bytes_per_emc_cycle * f).min(self.dram_bytes_per_s)
        })
    }
}

/// (module part prefix, peaks), most specific first.
const MODULES: &[(&str, Peaks)] = &[
    (
        "p3701-0004",
        peaks("Jetson AGX Orin 32GB", 1792, 64.0, 204.8e9),
    ),
    (
        "p3701",
        peaks("Jetson AGX Orin 64GB / devkit", 2048, 64.0, 204.8e9),
    ),
    (
        "p3767-0000",
        peaks("Jetson Orin NX 16GB", 1024, 32.0, 102.4e9),
    ),
    (
        "p3767-0001",
        peaks("Jetson Orin NX 8GB", 1024, 32.0, 102.4e9),
    ),
    (
        "p3767-0004",
        peaks("Jetson Orin Nano 4GB", 512, 32.0, 68.3e9),
    ),
    ("p3767", peaks("Jetson Orin Nano 8GB", 1024, 32.0, 68.3e9)),
    ("p2888", peaks("Jetson AGX Xavier", 512, 64.0, 136.5e9)),
    ("p3668", peaks("Jetson Xavier NX", 384, 32.0, 59.7e9)),
    ("p3448", peaks("Jetson Nano", 128, 16.0, 25.6e9)),
];

/// Data-centre GPUs jpower's GPU check runs on, by CUDA device name.
const DISCRETE: &[(&str, Peaks)] = &[
    ("H200", peaks("NVIDIA H200 SXM", 16896, 0.0, 4.8e12)),
    ("H100", peaks("NVIDIA H100 SXM", 16896, 0.0, 3.35e12)),
];

const fn peaks(part: &'static str, cuda_cores: u32, bpc: f64, dram: f64) -> Peaks {
    Peaks {
        part,
        cuda_cores,
        bytes_per_emc_cycle: bpc,
        dram_bytes_per_s: dram,
    }
}

/// The peaks of a Jetson module (`p3701-0000`), else of its SoC.
pub fn jetson(module: Option<&str>, soc: Soc) -> Peaks {
    if let Some((_, p)) = module.and_then(|m| MODULES.iter().find(|(part, _)| m.starts_with(part)))
    {
        return *p;
    }
    match soc {
        Soc::T234 => peaks("Orin (ga10b)", 2048, 64.0, 204.8e9),
        Soc::T194 => peaks("Xavier (gv11b)", 512, 64.0, 136.5e9),
        Soc::T186 => peaks("TX2 (gp10b)", 256, 16.0, 59.7e9),
        Soc::T210 => peaks("Nano (gm20b)", 128, 16.0, 25.6e9),
    }
}

/// The peaks of a discrete GPU by its CUDA name (`NVIDIA H200`), if jpower knows it.
pub fn discrete(name: &str) -> Option<Peaks> {
    DISCRETE
        .iter()
        .find(|(key, _)| name.contains(key))
        .map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orin_agx_matches_its_data_sheet() {
        let p = jetson(Some("p3701-0000"), Soc::T234);
        assert!((p.f32_flops(1.3005e9) / 5.33e12 - 1.0).abs() < 0.01);
        assert!((p.dram(Some(3.199e9)) / 204.8e9 - 1.0).abs() < 0.01);
        assert_eq!(jetson(Some("p3701-0004"), Soc::T234).cuda_cores, 1792);
        assert_eq!(jetson(None, Soc::T210).cuda_cores, 128);
        assert_eq!(discrete("NVIDIA H200").map(|p| p.cuda_cores), Some(16896));
        assert!(discrete("GeForce GT 710").is_none());
    }
}
