//! The models' inputs: a power mode's four knobs and the physics-informed features
//! ([`features`]), and the energy terms of the minibatch time that a physics power
//! model also reads ([`energy_terms`]).

use crate::control::mode::PinnedMode;

pub(super) fn ghz(hz: u64) -> f64 {
    (hz as f64 * 1e-9).max(1e-3)
}

/// The inputs for `mode`: the four knobs, plus the physics-informed ones.
pub fn features(m: &PinnedMode, physics: bool) -> Vec<f64> {
    let mut f = [0.0; MAX_FEATURES];
    let n = features_into(m, physics, &mut f);
    f[..n].to_vec()
}

/// The most inputs [`features`] yields (the physics-informed set).
pub(super) const MAX_FEATURES: usize = 12 + 5 * RATIO_KNOTS.len();

/// Writes [`features`] of `mode` into the front of `f` without allocating; returns how
/// many there are.
pub(super) fn features_into(m: &PinnedMode, physics: bool, f: &mut [f64; MAX_FEATURES]) -> usize {
    let (c, f_cpu, f_gpu, f_emc) = (
        f64::from(m.cores),
        ghz(m.cpu_hz),
        ghz(m.gpu_hz),
        ghz(m.emc_hz),
    );
    if !physics {
        f[..4].copy_from_slice(&[c, f_cpu, f_gpu, f_emc]);
        return 4;
    }
    let loaders = loaders(c);
    let (g, e, l, cpu) = (f_gpu.ln(), f_emc.ln(), (loaders * f_cpu).ln(), f_cpu.ln());
    f[..12].copy_from_slice(&[
        c,
        f_cpu,
        f_gpu,
        f_emc,
        // Logarithms of the bounding rates: time is a power law of each where it binds, and
        // a log-time model stays a power law when it extrapolates.
        g,
        e,
        cpu,
        l,
        // Dynamic power goes as V^2 f, and V rises with f above its floor.
        f_gpu * f_gpu,
        f_gpu * f_gpu * f_gpu,
        c * f_cpu * f_cpu,
        c * f_cpu * f_cpu * f_cpu,
    ]);
    // Which stage binds: time is the largest of power laws in the rates, so its log bends
    // where the log-ratio of two bounding rates crosses a workload's balance point. Hinges
    // of each ratio at a few points let a linear read-out place those bends.
    let hinges = f[12..].chunks_exact_mut(RATIO_KNOTS.len());
    for (ratio, out) in [l - g, l - e, g - e, cpu - g, cpu - e]
        .into_iter()
        .zip(hinges)
    {
        for (o, k) in out.iter_mut().zip(RATIO_KNOTS) {
            *o = (ratio - k).max(0.0);
        }
    }
    MAX_FEATURES
}

/// The parallelism of four data-loader workers sharing `cores` online cores with the
/// training process.
pub(crate) fn loaders(cores: f64) -> f64 {
    (cores - 0.5).clamp(0.5, 4.0)
}

/// Where the hinges of the log-ratios of bounding rates bend (a factor of e apart).
const RATIO_KNOTS: [f64; 4] = [-1.5, -0.5, 0.5, 1.5];

/// How many [`energy_terms`] there are.
pub(super) const ENERGY_TERMS: usize = 8;

/// The energy terms a physics power model reads besides the mode's features: power is
/// static power plus each domain's dynamic energy per minibatch over the minibatch's
/// time, and a domain's dynamic energy grows with its clock (through the voltage) but
/// hardly with the time the minibatch takes, so each term is a clock polynomial over
/// the minibatch time (`time_ms`: measured on profiled modes, predicted elsewhere; NaN
/// terms where it is missing).
/// These let the power model follow a target workload whose bottlenecks, and so its
/// utilisations, differ from the reference's.
pub(super) fn energy_terms(m: &PinnedMode, time_ms: f64) -> [f64; ENERGY_TERMS] {
    let (f_cpu, f_gpu, f_emc) = (ghz(m.cpu_hz), ghz(m.gpu_hz), ghz(m.emc_hz));
    let per_s = 1000.0 / time_ms;
    [
        1.0,
        f_gpu,
        f_gpu * f_gpu,
        f_gpu * f_gpu * f_gpu,
        f_cpu,
        f_cpu * f_cpu,
        f_emc,
        // GPU cycles stalled on DRAM, whose number grows as f_gpu / f_emc.
        f_gpu / f_emc,
    ]
    .map(|v| v * per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physics_features_include_the_bounding_rates() {
        let m = PinnedMode {
            cores: 2,
            cpu_hz: 1_000_000_000,
            gpu_hz: 500_000_000,
            emc_hz: 2_000_000_000,
        };
        let f = features(&m, true);
        assert_eq!(f.len(), 32);
        // The first ratio, loading over GPU rate: ln(1.5 / 0.5) = 1.0986, past three knots.
        let ratio = 3f64.ln();
        assert!((f[12] - (ratio + 1.5)).abs() < 1e-12 && (f[14] - (ratio - 0.5)).abs() < 1e-12);
        assert_eq!(f[15], 0.0, "below the last knot");
        assert!((f[4] - 0.5f64.ln()).abs() < 1e-12 && (f[5] - 2f64.ln()).abs() < 1e-12);
        assert!(
            (f[7] - 1.5f64.ln()).abs() < 1e-12,
            "1.5 loader cores on 2 cores"
        );
        assert_eq!(features(&m, false), vec![2.0, 1.0, 0.5, 2.0]);
    }
}
