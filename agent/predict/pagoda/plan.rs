//! Planning an inference power mode from a model's counts and each mode's rooflines.
//!
//! Each layer runs at its roofline: `t = max(FLOPs / peak FLOP/s, bytes / DRAM bandwidth)`
//! (the precision's peak), and costs `E = eps_flop FLOPs + eps_byte bytes + pi0 t` (Choi et
//! al.'s energy roofline, as `jpower roofline` fits it); a model's latency and energy are the
//! sums over its layers. The reference is the mode named MAXN (else the one at the highest
//! GPU then memory clock, else the fastest predicted);
//! the plan is the mode of least predicted energy whose latency is within the bound (an
//! absolute latency, or a slowdown against the reference, 5% by default).
//!
//! What the roofline misses, the plan misses: kernel launch overheads, per-layer efficiency
//! below the peaks, caches between layers, CPU-side dispatch (measured MAXN batch-1
//! latencies are far above roofline time). Calibrating by running the model itself on a few
//! modes is not done yet.

use super::Report;
use crate::gpu::roofline::Precision;
use crate::support::file_error::{read_text, FileError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A mode's time roofline, as `jpower roofline --json` writes it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TimeFit {
    /// Peak FP32 FLOP/s.
    pub peak_f32_flops: f64,
    /// Peak FP16 FLOP/s.
    pub peak_f16_flops: f64,
    /// Peak DRAM bytes/s.
    pub peak_bytes_per_s: f64,
}

/// A mode's energy roofline, as `jpower roofline --json` writes it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct EnergyFit {
    /// Joules per FP32 FLOP.
    pub eps_flop_j: f64,
    /// Joules per FP16 FLOP, where measured.
    pub eps_flop_f16_j: Option<f64>,
    /// Joules per DRAM byte.
    pub eps_byte_j: f64,
    /// Constant power, watts.
    pub pi0_w: f64,
}

/// One mode's rooflines.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeRoofline {
    /// The mode's name (a preset, or `GPU 1300 MHz, EMC 3199 MHz`).
    pub mode: String,
    /// The GPU clock it ran at, Hz.
    pub gpu_hz: Option<f64>,
    /// The memory clock, Hz.
    pub emc_hz: Option<f64>,
    /// Its time roofline.
    pub time: TimeFit,
    /// Its energy roofline.
    pub energy: EnergyFit,
}

/// Every mode's rooflines and what measured them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rooflines {
    /// What ran the sweep.
    pub device: String,
    /// Whether it was a simulated board's GPU model.
    pub simulated: bool,
    /// The modes.
    pub modes: Vec<ModeRoofline>,
}

impl Rooflines {
    /// Parses `jpower roofline --json` output read from `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Rooflines, FileError> {
        let invalid = |line, message| FileError::Invalid {
            path: path.to_path_buf(),
            line,
            message,
        };
        let r: Rooflines = serde_json::from_str(text).map_err(|e| {
            invalid(
                e.line().max(1),
                format!("not `jpower roofline --json` output: {e}"),
            )
        })?;
        r.check().map_err(|m| {
            // The line of the bad mode's name (a review found every error on line 1).
            let name = r.modes.iter().find(|m| !m.valid()).map(|m| &m.mode);
            let quoted = name.and_then(|n| serde_json::to_string(n).ok());
            let line = quoted.and_then(|q| {
                text.lines()
                    .position(|l| l.contains("\"mode\"") && l.contains(&q))
                    .map(|i| i + 1)
            });
            invalid(line.unwrap_or(1), m)
        })?;
        Ok(r)
    }

    /// Reads `jpower roofline --json` output from `path`.
    pub fn load(path: &Path) -> Result<Rooflines, FileError> {
        Rooflines::parse(&read_text(path)?, path)
    }

    /// Whether every mode's peaks are positive and its energy terms non-negative.
    pub fn check(&self) -> Result<(), String> {
        if self.modes.is_empty() {
            return Err("no modes".into());
        }
        match self.modes.iter().find(|m| !m.valid()) {
            Some(m) => Err(format!(
                "mode {:?}: peaks must be positive and energy terms non-negative",
                m.mode
            )),
            None => Ok(()),
        }
    }
}

impl ModeRoofline {
    /// Whether its peaks are positive and its energy terms non-negative, all finite.
    fn valid(&self) -> bool {
        let (t, e) = (&self.time, &self.energy);
        let finite = [
            t.peak_f32_flops,
            t.peak_f16_flops,
            t.peak_bytes_per_s,
            e.eps_flop_j,
            e.eps_byte_j,
            e.pi0_w,
            e.eps_flop_f16_j.unwrap_or(0.0),
        ]
        .iter()
        .all(|v| v.is_finite());
        finite
            && t.peak_f32_flops > 0.0
            && t.peak_bytes_per_s > 0.0
            && e.eps_flop_j >= 0.0
            && e.eps_flop_f16_j.is_none_or(|v| v >= 0.0)
            && e.eps_byte_j >= 0.0
            && e.pi0_w >= 0.0
    }
}

/// One layer on one mode.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LayerPrediction {
    /// Seconds.
    pub time_s: f64,
    /// Joules.
    pub energy_j: f64,
    /// Whether bandwidth, not arithmetic, bounds it.
    pub memory_bound: bool,
}

/// A model on one mode.
#[derive(Debug, Clone, Serialize)]
pub struct ModePrediction {
    /// The mode's name.
    pub mode: String,
    /// Predicted latency of one forward pass of the batch, seconds.
    pub latency_s: f64,
    /// Predicted energy of it, joules.
    pub energy_j: f64,
    /// Their ratio, watts.
    pub power_w: f64,
    /// Every layer, in the model's order.
    pub layers: Vec<LayerPrediction>,
}

/// Predicts `report` (counted at its precision) on the mode `m`.
pub fn predict(report: &Report, m: &ModeRoofline) -> ModePrediction {
    let (peak, eps_flop) = match report.precision {
        Precision::F32 => (m.time.peak_f32_flops, m.energy.eps_flop_j),
        // Without an FP16 peak (or energy), FP16 runs at the FP32 one.
        Precision::F16 => (
            if m.time.peak_f16_flops > 0.0 {
                m.time.peak_f16_flops
            } else {
                m.time.peak_f32_flops
            },
            m.energy.eps_flop_f16_j.unwrap_or(m.energy.eps_flop_j),
        ),
    };
    let layers: Vec<LayerPrediction> = report
        .layers
        .iter()
        .map(|l| {
            let (f, b) = (l.counts.flops as f64, l.counts.bytes() as f64);
            let (compute, memory) = (f / peak, b / m.time.peak_bytes_per_s);
            let time_s = compute.max(memory);
            LayerPrediction {
                time_s,
                energy_j: eps_flop * f + m.energy.eps_byte_j * b + m.energy.pi0_w * time_s,
                memory_bound: memory > compute,
            }
        })
        .collect();
    let latency_s: f64 = layers.iter().map(|l| l.time_s).sum();
    let energy_j: f64 = layers.iter().map(|l| l.energy_j).sum();
    ModePrediction {
        mode: m.mode.clone(),
        latency_s,
        energy_j,
        power_w: if latency_s > 0.0 {
            energy_j / latency_s
        } else {
            0.0
        },
        layers,
    }
}

/// How slow the planned mode may be.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// At most this latency, seconds.
    LatencyS(f64),
    /// At most this fraction slower than the reference mode.
    Slowdown(f64),
}

/// The plan: every mode predicted, the reference, the bound and the choice.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Every mode, in the rooflines' order.
    pub modes: Vec<ModePrediction>,
    /// The reference mode's index (MAXN).
    pub reference: usize,
    /// The latency bound, seconds.
    pub bound_s: f64,
    /// The modes within the bound, least energy first (the first is the plan).
    pub feasible: Vec<usize>,
}

/// The mode named MAXN, else (every mode's clocks known, as `jpower roofline --sample`
/// reports them) the one at the highest GPU clock, then the highest memory clock.
fn reference(rooflines: &Rooflines) -> Option<usize> {
    let modes = &rooflines.modes;
    if let Some(i) = modes
        .iter()
        .position(|m| m.mode.eq_ignore_ascii_case("maxn"))
    {
        return Some(i);
    }
    let clocks: Option<Vec<(f64, f64)>> = modes.iter().map(|m| m.gpu_hz.zip(m.emc_hz)).collect();
    let clocks = clocks?;
    (0..modes.len()).max_by(|&a, &b| {
        let (x, y) = (clocks[a], clocks[b]);
        x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1))
    })
}

/// Why no plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// No mode is fast enough.
    #[error("no mode is predicted within {bound_ms:.3} ms; the fastest, {fastest}, takes {fastest_ms:.3} ms")]
    Infeasible {
        /// The bound, ms.
        bound_ms: f64,
        /// The fastest mode.
        fastest: String,
        /// Its latency, ms.
        fastest_ms: f64,
    },
    /// A bound that is not a positive number.
    #[error("the latency bound must be positive and finite")]
    BadBound,
}

impl Plan {
    /// Predicts `report` on every mode of `rooflines` and plans under `bound`.
    pub fn new(report: &Report, rooflines: &Rooflines, bound: Bound) -> Result<Plan, PlanError> {
        let modes: Vec<ModePrediction> =
            rooflines.modes.iter().map(|m| predict(report, m)).collect();
        let fastest = (0..modes.len())
            .min_by(|&a, &b| modes[a].latency_s.total_cmp(&modes[b].latency_s))
            .expect("rooflines have modes");
        let reference = reference(rooflines).unwrap_or(fastest);
        let bound_s = match bound {
            Bound::LatencyS(s) => s,
            Bound::Slowdown(f) => modes[reference].latency_s * (1.0 + f),
        };
        if !(bound_s.is_finite() && bound_s > 0.0) || matches!(bound, Bound::Slowdown(f) if f < 0.0)
        {
            return Err(PlanError::BadBound);
        }
        let mut feasible: Vec<usize> = (0..modes.len())
            .filter(|&i| modes[i].latency_s <= bound_s)
            .collect();
        feasible.sort_by(|&a, &b| modes[a].energy_j.total_cmp(&modes[b].energy_j));
        if feasible.is_empty() {
            return Err(PlanError::Infeasible {
                bound_ms: bound_s * 1e3,
                fastest: modes[fastest].mode.clone(),
                fastest_ms: modes[fastest].latency_s * 1e3,
            });
        }
        Ok(Plan {
            modes,
            reference,
            bound_s,
            feasible,
        })
    }

    /// The planned mode.
    pub fn chosen(&self) -> &ModePrediction {
        &self.modes[self.feasible[0]]
    }

    /// The reference mode.
    pub fn reference(&self) -> &ModePrediction {
        &self.modes[self.reference]
    }

    /// The planned mode's energy saved against the reference, as a fraction.
    pub fn saving(&self) -> f64 {
        1.0 - self.chosen().energy_j / self.reference().energy_j
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::pagoda::op::Op;
    use crate::predict::pagoda::Model;

    fn mode(name: &str, flops: f64, bw: f64, pi0: f64) -> ModeRoofline {
        ModeRoofline {
            mode: name.into(),
            gpu_hz: None,
            emc_hz: None,
            time: TimeFit {
                peak_f32_flops: flops,
                peak_f16_flops: 2.0 * flops,
                peak_bytes_per_s: bw,
            },
            energy: EnergyFit {
                eps_flop_j: 1e-12,
                eps_flop_f16_j: None,
                eps_byte_j: 1e-10,
                pi0_w: pi0,
            },
        }
    }

    /// One linear layer: 1000 x 1000 at batch 1000 (2 G FLOPs, 12 MB: compute-bound at
    /// 1 TFLOP/s and 100 GB/s), then a ReLU (1 M FLOPs, 8 MB: memory-bound).
    fn report() -> Report {
        let mut m = Model::new("t", vec![1000]);
        m.push(
            "fc",
            Op::Linear {
                out_features: 1000,
                bias: false,
            },
            None,
        )
        .unwrap();
        m.push(
            "relu",
            Op::Activation {
                function: crate::predict::pagoda::op::Activation::Relu,
            },
            None,
        )
        .unwrap();
        m.count(1000, Precision::F32, false)
    }

    #[test]
    fn each_layer_runs_at_its_roofline_and_pays_its_energy() {
        let r = report();
        let p = predict(&r, &mode("MAXN", 1e12, 1e11, 10.0));
        let fc = p.layers[0];
        assert!(!fc.memory_bound);
        assert!((fc.time_s - 2e9 / 1e12).abs() < 1e-12);
        let bytes = r.layers[0].counts.bytes() as f64;
        assert_eq!(bytes, 4.0 * (1e6 + 2.0 * 1e6));
        assert!((fc.energy_j - (1e-12 * 2e9 + 1e-10 * bytes + 10.0 * fc.time_s)).abs() < 1e-9);
        let relu = p.layers[1];
        assert!(relu.memory_bound);
        assert!((relu.time_s - 8e6 / 1e11).abs() < 1e-12);
        assert!((p.latency_s - fc.time_s - relu.time_s).abs() < 1e-15);
    }

    #[test]
    fn the_plan_is_the_least_energy_within_the_bound() {
        let r = report();
        let rooflines = Rooflines {
            device: "test".into(),
            simulated: true,
            modes: vec![
                // Slower by 2% with a much lower constant power: the plan.
                mode("low", 0.98e12, 1e11, 4.0),
                mode("MAXN", 1e12, 1e11, 10.0),
                // Slower by half: outside 5%, though it needs the least energy.
                mode("slow", 0.5e12, 1e11, 1.0),
            ],
        };
        let plan = Plan::new(&r, &rooflines, Bound::Slowdown(0.05)).unwrap();
        assert_eq!(plan.reference().mode, "MAXN");
        assert_eq!(plan.chosen().mode, "low");
        assert!(plan.saving() > 0.0);
        assert_eq!(plan.feasible.len(), 2);
        let loose = Plan::new(&r, &rooflines, Bound::Slowdown(1.5)).unwrap();
        assert_eq!(loose.chosen().mode, "slow");
        // Without a MAXN, the highest clocks are the reference, not the fastest predicted.
        let mut unnamed = rooflines.clone();
        for (m, (gpu, emc)) in
            unnamed
                .modes
                .iter_mut()
                .zip([(1.2e9, 3.2e9), (1.3e9, 2.1e9), (1.3e9, 3.2e9)])
        {
            m.mode = format!("GPU {gpu}");
            (m.gpu_hz, m.emc_hz) = (Some(gpu), Some(emc));
        }
        let p = Plan::new(&r, &unnamed, Bound::Slowdown(0.05)).unwrap();
        assert_eq!(p.reference, 2);
        let e = Plan::new(&r, &rooflines, Bound::LatencyS(1e-6)).unwrap_err();
        assert!(e.to_string().contains("the fastest, MAXN"), "{e}");
    }

    #[test]
    fn roofline_files_are_checked() {
        let path = Path::new("r.json");
        let e = Rooflines::parse("{\"device\": \"x\",\n \"modes\": 3}", path).unwrap_err();
        assert!(e.to_string().starts_with("r.json:2: "), "{e}");
        let e = Rooflines::parse(
            "{\"device\": \"x\", \"simulated\": true, \"modes\": []}",
            path,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no modes"), "{e}");
    }
}
