//! A per-knob basis for the target's own shape: piecewise-linear hat functions of each
//! knob's logarithm, with knots spread over the range the target's profiled modes cover.
//! The physics method's read-out reads them beside the transferred network, so that where
//! the target's time or power bends along one knob in a way neither the reference's
//! network nor the physics anchor does (a voltage table's steps, loaders that slow down
//! past some core count, a throttled clock range), the profiled modes can say so, as far
//! as leave-one-out lets them. Beyond the profiled range each function holds its edge value.

use super::features::ghz;
use crate::control::mode::PinnedMode;
use crate::predict::profile::Row;
use serde::{Deserialize, Serialize};

/// Knots per knob at most (fewer where the profiled modes have fewer distinct values, then
/// one at each value).
const KNOTS: usize = 5;

/// The hat functions' knots of each knob (cores, CPU, GPU, EMC), in log units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobBasis {
    knots: [Vec<f64>; 4],
}

fn logs(m: &PinnedMode) -> [f64; 4] {
    [
        f64::from(m.cores.max(1)).ln(),
        ghz(m.cpu_hz).ln(),
        ghz(m.gpu_hz).ln(),
        ghz(m.emc_hz).ln(),
    ]
}

impl KnobBasis {
    /// Knots spread evenly over each knob's profiled range (in logs); `None` without rows.
    pub fn of(rows: &[Row]) -> Option<KnobBasis> {
        let first = logs(&rows.first()?.mode);
        let knots = std::array::from_fn(|k| {
            let mut values: Vec<f64> = rows.iter().map(|r| logs(&r.mode)[k]).collect();
            values.sort_by(f64::total_cmp);
            values.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
            let (lo, hi) = (values[0], values[values.len() - 1]);
            let n = values.len().min(KNOTS);
            if n < 2 {
                return vec![first[k]];
            }
            if n == values.len() {
                return values;
            }
            (0..n)
                .map(|i| lo + (hi - lo) * i as f64 / (n - 1) as f64)
                .collect()
        });
        Some(KnobBasis { knots })
    }

    /// How many columns [`KnobBasis::values_into`] writes.
    pub fn width(&self) -> usize {
        self.knots
            .iter()
            .map(|k| if k.len() < 2 { 0 } else { k.len() })
            .sum()
    }

    /// How many of the columns read the host knobs (the first ones).
    pub fn host_width(&self) -> usize {
        self.parts().filter(|&p| p == 0).count()
    }

    /// Which part of a mode each column reads, in order: 0 the host knobs (cores, CPU
    /// clock), 1 the device knobs (GPU, EMC clock).
    pub fn parts(&self) -> impl Iterator<Item = usize> + '_ {
        let columns = |k: &Vec<f64>| if k.len() < 2 { 0 } else { k.len() };
        (0..4).flat_map(move |k| std::iter::repeat_n(k / 2, columns(&self.knots[k])))
    }

    /// Writes the hat functions of `m` into `out` ([`KnobBasis::width`] long).
    pub fn values_into(&self, m: &PinnedMode, out: &mut [f64]) {
        let x = logs(m);
        let mut at = 0;
        for (k, knots) in self.knots.iter().enumerate() {
            if knots.len() < 2 {
                continue;
            }
            // Within the segment from knot j to knot j + 1, the two hats share the unit.
            let row = &mut out[at..at + knots.len()];
            row.fill(0.0);
            let v = x[k].clamp(knots[0], knots[knots.len() - 1]);
            let j = knots[1..knots.len() - 1].partition_point(|&c| c <= v);
            let w = (knots[j + 1] - v) / (knots[j + 1] - knots[j]);
            row[j] = w;
            row[j + 1] = 1.0 - w;
            at += knots.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cores: u32, cpu_mhz: u64, gpu_mhz: u64, emc_mhz: u64) -> Row {
        Row {
            mode: PinnedMode {
                cores,
                cpu_hz: cpu_mhz * 1_000_000,
                gpu_hz: gpu_mhz * 1_000_000,
                emc_hz: emc_mhz * 1_000_000,
            },
            time_ms: 1.0,
            power_w: 1.0,
            time_std_ms: 0.0,
            power_std_w: 0.0,
        }
    }

    #[test]
    fn the_hats_share_the_unit_and_hold_their_edges() {
        // Two EMC clocks, one GPU clock (no columns), many cores and CPU clocks.
        let rows: Vec<Row> = (1..=8)
            .flat_map(|c| {
                [
                    row(c, 300 * u64::from(c), 600, 665),
                    row(c, 2000, 600, 3199),
                ]
            })
            .collect();
        let b = KnobBasis::of(&rows).unwrap();
        assert_eq!(b.width(), 5 + 5 + 2);
        let parts: Vec<usize> = b.parts().collect();
        assert_eq!(parts, [[0; 10].as_slice(), &[1; 2]].concat());
        assert_eq!(b.host_width(), 10);
        assert_eq!(KnobBasis::of(&[]), None);
        let mut out = vec![f64::NAN; b.width()];
        for m in [
            row(3, 1000, 600, 665).mode,
            row(5, 2000, 1300, 1500).mode,
            row(1, 300, 600, 3199).mode,
            // Beyond every profiled range.
            row(12, 100, 100, 5000).mode,
        ] {
            b.values_into(&m, &mut out);
            // Each knob's hats sum to one, at most two of them non-zero.
            for part in [&out[..5], &out[5..10], &out[10..]] {
                assert!(
                    (part.iter().sum::<f64>() - 1.0).abs() < 1e-12,
                    "{m:?}: {out:?}"
                );
                assert!(part.iter().filter(|v| **v != 0.0).count() <= 2);
                assert!(part.iter().all(|v| (0.0..=1.0).contains(v)));
            }
        }
        // Past the top of each range the last hat holds: 12 cores as 8, 5 GHz EMC as 3199 MHz.
        assert_eq!(out[4], 1.0);
        assert_eq!(out[11], 1.0);
        // Two distinct EMC clocks are their own knots: the top one is all of the last hat.
        b.values_into(&row(2, 500, 600, 3199).mode, &mut out);
        assert_eq!((out[10], out[11]), (0.0, 1.0));
    }
}
