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

    /// DRAM bytes/s at `emc_hz` (the fixed vendor figure where the clock is unknown, or
    /// the part has no EMC-cycle figure). Not capped at the vendor figure: the Orin Nano
    /// and NX "Super" modes run the EMC at 3199 MHz, above the data sheet's top clock.
    pub fn dram(&self, emc_hz: Option<f64>) -> f64 {
        match emc_hz {
            Some(f) if self.bytes_per_emc_cycle > 0.0 => self.bytes_per_emc_cycle * f,
            _ => self.dram_bytes_per_s,
        }
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
        // A 64-bit bus: half the 8GB module's.
        peaks("Jetson Orin Nano 4GB", 512, 16.0, 34.1e9),
    ),
    ("p3767", peaks("Jetson Orin Nano 8GB", 1024, 32.0, 68.3e9)),
    ("p2888", peaks("Jetson AGX Xavier", 512, 64.0, 136.5e9)),
    ("p3668", peaks("Jetson Xavier NX", 384, 32.0, 59.7e9)),
    ("p3448", peaks("Jetson Nano", 128, 16.0, 25.6e9)),
];

/// Data-centre GPUs' vendor DRAM peaks, by a part of the CUDA device name, most specific
/// first (the CUDA cores come from the device's SM count).
const DISCRETE_DRAM: &[(&str, &str, f64)] = &[
    ("H200", "NVIDIA H200", 4.8e12),
    ("H100 PCIe", "NVIDIA H100 PCIe", 2.0e12),
    ("H100 NVL", "NVIDIA H100 NVL", 3.9e12),
    ("H100", "NVIDIA H100 SXM", 3.35e12),
    ("A100-SXM4-80GB", "NVIDIA A100 SXM 80GB", 2.039e12),
    ("A100-PCIE-80GB", "NVIDIA A100 PCIe 80GB", 1.935e12),
    ("A100", "NVIDIA A100 40GB", 1.555e12),
];

/// FP32 CUDA cores per SM of compute capability `cc` (`90`), for the architectures
/// jpower runs on (Volta and newer; the Jetson Maxwell and Pascal parts for the table).
pub fn cores_per_sm(cc: u32) -> Option<u32> {
    match cc {
        50..=53 | 61 | 62 => Some(128),
        60 | 70 | 72 | 75 | 80 => Some(64),
        86 | 87 | 89 | 90 => Some(128),
        _ => None,
    }
}

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
        // 128-bit LPDDR4 at 1866 MHz: 32 bytes per EMC cycle.
        Soc::T186 => peaks("TX2 (gp10b)", 256, 32.0, 59.7e9),
        Soc::T210 => peaks("Nano (gm20b)", 128, 16.0, 25.6e9),
    }
}

/// The peaks of a discrete GPU by its CUDA name (`NVIDIA H200`), SM count and compute
/// capability, if jpower knows its DRAM peak and its SM's cores.
pub fn discrete(name: &str, sms: u32, cc: u32) -> Option<Peaks> {
    let &(_, part, dram) = DISCRETE_DRAM.iter().find(|(key, ..)| name.contains(key))?;
    Some(peaks(part, sms * cores_per_sm(cc)?, 0.0, dram))
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
        assert_eq!(
            discrete("NVIDIA H200", 132, 90).map(|p| p.cuda_cores),
            Some(16896)
        );
        let pcie = discrete("NVIDIA H100 PCIe", 114, 90).unwrap();
        assert_eq!((pcie.cuda_cores, pcie.dram_bytes_per_s), (14592, 2.0e12));
        assert_eq!(
            discrete("NVIDIA H100 80GB HBM3", 132, 90)
                .unwrap()
                .dram(None),
            3.35e12
        );
        assert!(discrete("GeForce GT 710", 1, 35).is_none());
    }

    #[test]
    fn dram_peaks_follow_the_bus_and_the_running_emc_clock() {
        // Orin Nano 4GB: a 64-bit bus, 34.1 GB/s at 2133 MHz.
        let nano4 = jetson(Some("p3767-0004"), Soc::T234);
        assert!((nano4.dram(Some(2.133e9)) / 34.1e9 - 1.0).abs() < 0.01);
        // A "Super" mode's 3199 MHz EMC is above the data sheet's: the peak follows it.
        let nano8 = jetson(Some("p3767-0003"), Soc::T234);
        assert!((nano8.dram(Some(3.199e9)) / 102.4e9 - 1.0).abs() < 0.01);
        // TX2: 128-bit LPDDR4, 59.7 GB/s at 1866 MHz.
        let tx2 = jetson(None, Soc::T186);
        assert!((tx2.dram(Some(1.866e9)) / 59.7e9 - 1.0).abs() < 0.01);
    }
}
