//! The models' inputs: a power mode's four knobs and the physics-informed features
//! ([`features`]), which knobs each of them reads ([`PARTS`]) and the lattice of host and
//! device knobs that a set of modes spans ([`Lattice`]), and the energy terms of the
//! minibatch time that a physics power model also reads ([`energy_terms`]).

use super::optimize::residual::{log_coords, LogCoords};
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

/// Which part of a mode each input of [`features`] reads (the four knobs' inputs are the
/// first four of the physics-informed set's): `Some(HOST)` only the host knobs (cores
/// and CPU clock), `Some(DEVICE)` only the device knobs (GPU and EMC clocks), `None` both
/// (the hinges of the ratios of a host rate to a device rate). A network's first layer is
/// then split over the modes' [`Lattice`] ([`super::regress::Batch::with_tables`]).
pub(super) const PARTS: [Option<usize>; MAX_FEATURES] = {
    const H: Option<usize> = Some(HOST);
    const D: Option<usize> = Some(DEVICE);
    const B: Option<usize> = None;
    [
        H, H, D, D, // cores, CPU, GPU and EMC clocks
        D, D, H, H, // the logarithms of the GPU, EMC, CPU and loading rates
        D, D, H, H, // the GPU's and the CPU cores' V^2 f terms
        B, B, B, B, // the hinges of loading over GPU rate
        B, B, B, B, // loading over EMC
        D, D, D, D, // GPU over EMC
        B, B, B, B, // CPU over GPU
        B, B, B, B, // CPU over EMC
    ]
};

/// The part of [`PARTS`] that reads the cores and the CPU clock.
pub(super) const HOST: usize = 0;
/// The part of [`PARTS`] that reads the GPU and EMC clocks.
pub(super) const DEVICE: usize = 1;

/// The lattice that a set of modes spans: the host grid (each distinct number of cores by
/// each distinct CPU clock) and the device grid (each distinct GPU clock by each distinct
/// EMC clock), each mode's point on both, and a mode at each point of each grid (its
/// other part is the first mode's: the inputs of one part do not read it).
pub(super) struct Lattice {
    /// Each mode's points on the host and the device grid.
    pub at: Vec<[usize; 2]>,
    /// A mode at each point of the host grid and of the device grid.
    pub grid: [Vec<PinnedMode>; 2],
}

impl Lattice {
    /// `f` of each grid point and each of the modes `at` (in log knob space), one table per
    /// grid (rows: its points; columns: `at`), both read along that grid's knobs alone (the
    /// others set to 0): what splits over the host and the device knobs (a sum of squares,
    /// a product of factors) is computed once per grid point instead of once per mode.
    pub fn tables(
        &self,
        at: &[LogCoords],
        f: impl Fn(&LogCoords, &LogCoords) -> f64,
    ) -> [Vec<f64>; 2] {
        let f = &f;
        [0, 1].map(|part| {
            let keep = move |c: LogCoords| -> LogCoords {
                std::array::from_fn(|k| if k / 2 == part { c[k] } else { 0.0 })
            };
            self.grid[part]
                .iter()
                .flat_map(|m| {
                    let a = keep(log_coords(m));
                    at.iter().map(move |b| f(&a, &keep(*b)))
                })
                .collect()
        })
    }

    /// The lattice of `modes`.
    pub fn of(modes: &[PinnedMode]) -> Lattice {
        // Few distinct values (Orin AGX: 12 x 29 x 13 x 4), each repeated in runs.
        let distinct = |knob: fn(&PinnedMode) -> u64| {
            let mut v: Vec<u64> = Vec::new();
            for x in modes.iter().map(knob) {
                if v.last() != Some(&x) && !v.contains(&x) {
                    v.push(x);
                }
            }
            v.sort_unstable();
            v
        };
        let knobs: [fn(&PinnedMode) -> u64; 4] = [
            |m| u64::from(m.cores),
            |m| m.cpu_hz,
            |m| m.gpu_hz,
            |m| m.emc_hz,
        ];
        let [cores, cpu, gpu, emc] = knobs.map(distinct);
        let index = |v: &[u64], x: u64| v.partition_point(|&y| y < x);
        let at = modes
            .iter()
            .map(|m| {
                let host = index(&cores, m.cores.into()) * cpu.len() + index(&cpu, m.cpu_hz);
                let device = index(&gpu, m.gpu_hz) * emc.len() + index(&emc, m.emc_hz);
                [host, device]
            })
            .collect();
        let Some(&first) = modes.first() else {
            return Lattice {
                at,
                grid: [Vec::new(), Vec::new()],
            };
        };
        let host = cores.iter().flat_map(|&c| {
            cpu.iter().map(move |&cpu_hz| PinnedMode {
                cores: c as u32,
                cpu_hz,
                ..first
            })
        });
        let device = gpu.iter().flat_map(|&gpu_hz| {
            emc.iter().map(move |&emc_hz| PinnedMode {
                gpu_hz,
                emc_hz,
                ..first
            })
        });
        Lattice {
            at,
            grid: [host.collect(), device.collect()],
        }
    }
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

    #[test]
    fn an_input_of_one_part_does_not_move_with_the_other_parts_knobs() {
        let base = PinnedMode {
            cores: 3,
            cpu_hz: 1_200_000_000,
            gpu_hz: 600_000_000,
            emc_hz: 2_000_000_000,
        };
        let host = PinnedMode {
            cores: 8,
            cpu_hz: 2_000_000_000,
            ..base
        };
        let device = PinnedMode {
            gpu_hz: 1_300_000_000,
            emc_hz: 665_000_000,
            ..base
        };
        for physics in [false, true] {
            let [f, fh, fd] = [base, host, device].map(|m| features(&m, physics));
            for (i, part) in PARTS[..f.len()].iter().enumerate() {
                match *part {
                    Some(HOST) => assert_eq!(f[i], fd[i], "host input {i}"),
                    Some(_) => assert_eq!(f[i], fh[i], "device input {i}"),
                    None => {}
                }
            }
        }
        // The hinges of a host rate over a device rate move with both.
        let f = features(&base, true);
        let moved = |g: &[f64]| (0..f.len()).filter(|&i| g[i] != f[i]).collect::<Vec<_>>();
        let both: Vec<usize> = (0..MAX_FEATURES).filter(|&i| PARTS[i].is_none()).collect();
        let far = PinnedMode {
            cores: 1,
            cpu_hz: 115_200_000,
            ..base
        };
        assert!(both
            .iter()
            .any(|i| moved(&features(&far, true)).contains(i)));
        assert!(both
            .iter()
            .any(|i| moved(&features(&device, true)).contains(i)));
    }

    #[test]
    fn the_lattice_places_each_mode_on_both_grids() {
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let modes: Vec<PinnedMode> = spec.mode_space().iter().step_by(7).collect();
        let l = Lattice::of(&modes);
        assert_eq!(
            (l.grid[HOST].len(), l.grid[DEVICE].len()),
            (12 * 29, 13 * 4)
        );
        for (m, &[h, d]) in modes.iter().zip(&l.at) {
            let (gh, gd) = (l.grid[HOST][h], l.grid[DEVICE][d]);
            assert_eq!((gh.cores, gh.cpu_hz), (m.cores, m.cpu_hz));
            assert_eq!((gd.gpu_hz, gd.emc_hz), (m.gpu_hz, m.emc_hz));
        }
        let one = Lattice::of(&modes[5..6]);
        assert_eq!(one.at, vec![[0, 0]]);
        assert_eq!(one.grid, [vec![modes[5]], vec![modes[5]]]);
        assert!(Lattice::of(&[]).at.is_empty());
    }
}
