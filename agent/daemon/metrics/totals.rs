//! The sampler's counts since the agent started (samples, overruns, read errors), for the
//! exposition's `_total` counters. Each ring counts from 0 in its header, and the agent
//! starts a new ring whenever the sensors' averaging changes; a counter that fell back to
//! 0, or restarted and passed its old value between two scrapes, would be read by
//! Prometheus as a reset or not at all. So the final counts of every ring before the
//! current one are kept and added: the previous ring is held until the next read, which
//! takes its counts once its sampler has stopped.

use crate::telemetry::ring::RingReader;
use std::sync::Arc;

/// Samples published, sampling overruns, read errors.
pub type Counts = [u64; 3];

/// The counts since the agent started (module docs).
#[derive(Debug, Default)]
pub struct SamplerTotals {
    /// The counts of the rings before the one last read.
    before: Counts,
    /// The ring last read.
    ring: Option<Arc<RingReader>>,
}

/// A ring's own counts.
fn counts(ring: &RingReader) -> Counts {
    let (overruns, read_errors) = ring.counters();
    [ring.write_seq(), overruns, read_errors]
}

impl SamplerTotals {
    /// The totals with `ring` the current ring.
    pub fn read(&mut self, ring: &Arc<RingReader>) -> Counts {
        if let Some(last) = self.ring.take().filter(|last| !Arc::ptr_eq(last, ring)) {
            let done = counts(&last);
            self.before = std::array::from_fn(|i| self.before[i] + done[i]);
        }
        self.ring = Some(ring.clone());
        let now = counts(ring);
        std::array::from_fn(|i| self.before[i] + now[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ring::{RingInfo, RingWriter};
    use crate::telemetry::Sample;

    fn ring(path: &std::path::Path) -> RingWriter {
        RingWriter::create(path, &RingInfo::for_test(&["A"], 64), None).unwrap()
    }

    fn publish(w: &RingWriter, from: u64, to: u64) {
        for n in from..to {
            let s = Sample {
                n,
                t_ns: n * 1_000_000,
                rail_count: 1,
                ..Sample::default()
            };
            w.publish(n, &s);
        }
    }

    /// A new ring adds to the counts, its predecessor's samples published after the last
    /// read included: the totals never go back, nor skip what the old ring counted last.
    #[test]
    fn the_totals_carry_on_across_rings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        let mut totals = SamplerTotals::default();
        let a = ring(&path);
        publish(&a, 0, 10);
        a.add_overruns(2);
        let first = Arc::new(RingReader::open(&path).unwrap());
        assert_eq!(totals.read(&first), [10, 2, 0]);
        assert_eq!(totals.read(&first), [10, 2, 0], "the same ring read again");
        publish(&a, 10, 15);
        a.add_read_error();
        a.close();
        let b = ring(&path);
        publish(&b, 0, 3);
        let second = Arc::new(RingReader::open(&path).unwrap());
        assert_eq!(totals.read(&second), [18, 2, 1]);
        publish(&b, 3, 4);
        assert_eq!(totals.read(&second), [19, 2, 1]);
    }
}
