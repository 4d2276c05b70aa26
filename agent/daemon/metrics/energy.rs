//! Energy counters for the exposition: joules per rail and for the module since the agent
//! started, accumulated in the agent (the ring holds about a minute at 1 kHz, a counter
//! must keep counting for months).
//!
//! Each [`EnergyCounters::advance`] integrates the samples published since the previous
//! one (trapezoids, [`crate::telemetry::energy::integrate`]); samples the ring no longer
//! holds, because the sampler lapped the reader, are bridged by the trapezoid between the
//! last sample read and the oldest still there, and so are the samples lost when the agent
//! replaces its ring. The counters only grow.

use crate::telemetry::energy::integrate;
use crate::telemetry::ring::RingReader;
use crate::telemetry::Sample;

/// Joules since the agent started, per rail (in the ring's rail order) and for the module.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnergyCounters {
    /// Module energy, joules.
    pub module_j: f64,
    /// Per rail, joules.
    pub rails_j: Vec<f64>,
    /// Per rail, seconds over which its reads failed (its last good value held).
    pub failed_s: Vec<f64>,
    /// The newest sample integrated so far: the next stretch starts there.
    last: Option<Sample>,
}

/// How many of the ring's oldest slots are left alone: the writer may be overwriting them.
const WRITER_MARGIN: u64 = 4;

impl EnergyCounters {
    /// Adds what the ring published since the last call.
    pub fn advance(&mut self, ring: &RingReader) {
        let published = ring.write_seq();
        let oldest_held =
            published.saturating_sub(u64::from(ring.info.slot_count).saturating_sub(WRITER_MARGIN));
        // The first time, from the oldest sample held: the sampler's first, at the start.
        // Likewise when the last sample absorbed is no longer this ring's as it was read:
        // lapped, or a new ring (the agent restarts the sampler when the sensors' averaging
        // changes); the trapezoid from it to the oldest sample held bridges the gap.
        let next = match self.last {
            Some(l) if ring.sample(l.n).is_ok_and(|s| s.t_ns == l.t_ns) => l.n + 1,
            _ => 0,
        };
        let fresh = (next.max(oldest_held)..published).filter_map(|n| ring.sample(n).ok());
        let stretch: Vec<Sample> = self.last.into_iter().chain(fresh).collect();
        self.absorb(&stretch);
    }

    /// Adds the energy of `stretch` (oldest first; its first sample the last one absorbed,
    /// where there was one) and remembers its last sample.
    fn absorb(&mut self, stretch: &[Sample]) {
        let (Some(first), Some(last)) = (stretch.first(), stretch.last()) else {
            return;
        };
        let e = integrate(stretch, first.t_ns, last.t_ns, 0.0);
        self.module_j += e.module_j;
        self.rails_j
            .resize(e.rails_j.len().max(self.rails_j.len()), 0.0);
        for (total, j) in self.rails_j.iter_mut().zip(&e.rails_j) {
            *total += j;
        }
        self.failed_s
            .resize(e.failed_s.len().max(self.failed_s.len()), 0.0);
        for (total, s) in self.failed_s.iter_mut().zip(&e.failed_s) {
            *total += s;
        }
        self.last = Some(*last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ring::{RingInfo, RingWriter};

    fn sample(n: u64, watts: f64) -> Sample {
        let mut s = Sample {
            n,
            t_ns: n * 1_000_000,
            module_uw: (watts * 1e6) as u32,
            rail_count: 2,
            ..Sample::default()
        };
        s.rails[0].power_uw = s.module_uw / 4;
        s.rails[1].power_uw = s.module_uw - s.module_uw / 4;
        s
    }

    fn ring(dir: &std::path::Path, slots: u32) -> RingWriter {
        RingWriter::create(
            &dir.join("r.ring"),
            &RingInfo::for_test(&["A", "B"], slots),
            None,
        )
        .unwrap()
    }

    #[test]
    fn counters_read_often_count_every_joule_once() {
        let dir = tempfile::tempdir().unwrap();
        let w = ring(dir.path(), 1024);
        let r = RingReader::open(&dir.path().join("r.ring")).unwrap();
        let mut c = EnergyCounters::default();
        // 8 W for 3 s at 1 kHz, read every 100 samples.
        for n in 0..=3000 {
            w.publish(n, &sample(n, 8.0));
            if n % 100 == 0 {
                c.advance(&r);
            }
        }
        assert!((c.module_j - 24.0).abs() < 1e-6, "{c:?}");
        assert!((c.rails_j[0] - 6.0).abs() < 1e-6, "{c:?}");
        assert!((c.rails_j[1] - 18.0).abs() < 1e-6, "{c:?}");
        assert_eq!(c.failed_s, [0.0, 0.0]);
    }

    /// The time a rail's reads failed adds up over the reads of the counters: every
    /// segment with the rail flagged at either end.
    #[test]
    fn counters_count_the_time_a_rails_reads_failed() {
        let dir = tempfile::tempdir().unwrap();
        let w = ring(dir.path(), 1024);
        let r = RingReader::open(&dir.path().join("r.ring")).unwrap();
        let mut c = EnergyCounters::default();
        for n in 0..=2000 {
            let mut s = sample(n, 8.0);
            if (500..1000).contains(&n) {
                s.flags |= 2 << crate::telemetry::flags::RAIL_FAILED_SHIFT;
            }
            w.publish(n, &s);
            if n % 100 == 0 {
                c.advance(&r);
            }
        }
        // Samples 500..=999 flagged: the segments from 499 to 1000, 501 ms.
        assert_eq!(c.failed_s[0], 0.0);
        assert!((c.failed_s[1] - 0.501).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn counters_survive_the_ring_wrapping_between_reads() {
        let dir = tempfile::tempdir().unwrap();
        // 64 slots, read every 1,000 samples: most samples are gone before each read.
        let w = ring(dir.path(), 64);
        let r = RingReader::open(&dir.path().join("r.ring")).unwrap();
        let mut c = EnergyCounters::default();
        let mut seen = Vec::new();
        for n in 0..=5000 {
            w.publish(n, &sample(n, 10.0));
            if n % 1000 == 0 {
                c.advance(&r);
                seen.push(c.module_j);
            }
        }
        assert!(seen.windows(2).all(|p| p[1] > p[0]), "{seen:?}");
        assert!((c.module_j - 50.0).abs() < 1e-6, "{c:?}");
    }

    #[test]
    fn the_first_read_counts_from_the_samplers_first_sample() {
        let dir = tempfile::tempdir().unwrap();
        let w = ring(dir.path(), 4096);
        let r = RingReader::open(&dir.path().join("r.ring")).unwrap();
        for n in 0..=1000 {
            w.publish(n, &sample(n, 8.0));
        }
        let mut c = EnergyCounters::default();
        c.advance(&r);
        assert!((c.module_j - 8.0).abs() < 1e-6, "{c:?}");
    }

    #[test]
    fn counters_carry_on_into_a_new_ring() {
        // The agent replaces its ring when the averaging changes: the new ring's sequence
        // starts again at 0, its clock carries on.
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (wa, wb) = (ring(a.path(), 4096), ring(b.path(), 4096));
        let mut c = EnergyCounters::default();
        for n in 0..=2000 {
            wa.publish(n, &sample(n, 8.0));
        }
        c.advance(&RingReader::open(&a.path().join("r.ring")).unwrap());
        let at = |n: u64, watts: f64| Sample {
            t_ns: (2000 + n) * 1_000_000,
            ..sample(n, watts)
        };
        let rb = RingReader::open(&b.path().join("r.ring")).unwrap();
        for n in 0..=1000 {
            wb.publish(n, &at(n, 8.0));
        }
        c.advance(&rb);
        // 2 s in the first ring and 1 s in the second, at 8 W.
        assert!((c.module_j - 24.0).abs() < 1e-6, "{c:?}");
        for n in 1001..=2000 {
            wb.publish(n, &at(n, 8.0));
        }
        c.advance(&rb);
        assert!((c.module_j - 32.0).abs() < 1e-6, "{c:?}");
    }

    #[test]
    fn a_reader_with_nothing_new_adds_nothing() {
        let mut c = EnergyCounters::default();
        c.absorb(&[sample(0, 5.0)]);
        assert_eq!(c.module_j, 0.0);
        c.absorb(&[sample(0, 5.0), sample(1000, 5.0)]);
        assert!((c.module_j - 5.0).abs() < 1e-9);
        c.absorb(&[sample(1000, 5.0)]);
        assert!((c.module_j - 5.0).abs() < 1e-9);
    }
}
