//! The agent's sampler, kept in step with the INA3221 averaging.
//!
//! The sampler reads each rail around its sensor's refresh, and picks its default rate
//! from it, so a change of averaging (`set_averaging`, or the restore when that lease
//! ends) restarts it: a new ring at the same path, which marks the old one replaced
//! (`docs/telemetry-ring.md`), so readers reopen the path. The agent's own readers (the
//! connections, the budget guard) take the current ring from a [`CurrentRing`] and never
//! hold its lock while they read.
//!
//! Each ring counts its samples, overruns and read errors from 0 in its header; the
//! [`CurrentRing`] keeps the final counts of the rings before the current one, taken as
//! each is replaced (its sampler stopped first), so the totals since the
//! agent started never go back, nor lose a ring that lived between two of their readers
//! (a review found a `watch`'s 1 kHz ring, begun and ended between two scrapes, missing
//! from `jpower_samples_total`).

use crate::board::{Board, KnobKind, Values};
use crate::telemetry::ring::RingReader;
use crate::telemetry::sampler::{SamplerConfig, SamplerError};
use crate::telemetry::Telemetry;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// Samples published, sampling overruns, read errors.
pub type Counts = [u64; 3];

/// A ring's own counts.
fn counts(ring: &RingReader) -> Counts {
    let (overruns, read_errors) = ring.counters();
    [ring.write_seq(), overruns, read_errors]
}

fn add(a: Counts, b: Counts) -> Counts {
    std::array::from_fn(|i| a[i] + b[i])
}

/// The ring the sampler writes now, shared by every reader in the agent, and the counts
/// of the rings before it (module docs).
#[derive(Debug, Clone)]
pub struct CurrentRing(Arc<RwLock<Current>>);

#[derive(Debug)]
struct Current {
    ring: Arc<RingReader>,
    /// The counts of the rings before `ring`.
    retired: Counts,
}

impl CurrentRing {
    fn new(ring: RingReader) -> CurrentRing {
        CurrentRing(Arc::new(RwLock::new(Current {
            ring: Arc::new(ring),
            retired: [0; 3],
        })))
    }

    // A poisoned lock still holds a valid state: the writers only swap an Arc and add.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Current> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The current ring; a restart that follows does not disturb the caller's copy.
    pub fn get(&self) -> Arc<RingReader> {
        self.read().ring.clone()
    }

    /// Samples published, overruns and read errors since the agent started, over every
    /// ring it used; never decreasing.
    pub fn totals(&self) -> Counts {
        let c = self.read();
        add(c.retired, counts(&c.ring))
    }

    /// Makes `ring` the current one; the old one's sampler has stopped, so its counts
    /// are final.
    fn replace(&self, ring: RingReader) {
        let mut c = self.write();
        let old = std::mem::replace(&mut c.ring, Arc::new(ring));
        c.retired = add(c.retired, counts(&old));
    }
}

/// Why the sampler could not (re)start.
#[derive(Debug, thiserror::Error)]
pub enum SensorsError {
    /// The sampler did not start.
    #[error("starting the sampler: {0}")]
    Sampler(#[from] SamplerError),
    /// Its ring could not be opened for reading.
    #[error("reading the sampler's ring: {0}")]
    Ring(#[from] crate::telemetry::ring::RingError),
}

/// The running sampler and the averaging it was started for.
#[derive(Debug)]
pub struct Sensors {
    telemetry: Telemetry,
    cfg: SamplerConfig,
    /// The INA3221 knob values the sampler's refresh intervals come from; `None` once a
    /// restart left no sampler running, so that any next switch tries again.
    averaging: Option<Averaging>,
    /// The knob values the sampler was started for.
    started: Values,
    ring: CurrentRing,
}

/// INA3221 averaging knob values, inline (compared at every switch, built without
/// allocating).
type Averaging = smallvec::SmallVec<[u64; 8]>;

/// The values of `board`'s INA3221 averaging knobs in `values`.
fn averaging_of(board: &Board, values: &Values) -> Averaging {
    board
        .knobs
        .iter()
        .zip(values.iter())
        .filter(|(k, _)| {
            matches!(
                k.kind,
                KnobKind::InaSamples(_) | KnobKind::InaUpdateInterval(_)
            )
        })
        .map(|(_, v)| *v)
        .collect()
}

impl Sensors {
    /// Starts sampling `board` (its knobs at `values`) into the ring at `path`, readable
    /// by `read_group`.
    pub fn start(
        board: &Board,
        values: &Values,
        path: &Path,
        mut cfg: SamplerConfig,
        read_group: &str,
    ) -> Result<Sensors, SensorsError> {
        cfg.read_gid = nix::unistd::Group::from_name(read_group)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw());
        let telemetry = Telemetry::start(board, values, path, &cfg)?;
        let ring = CurrentRing::new(RingReader::open(&telemetry.path)?);
        Ok(Sensors {
            telemetry,
            cfg,
            averaging: Some(averaging_of(board, values)),
            started: values.clone(),
            ring,
        })
    }

    /// The ring, for readers in other threads.
    pub fn ring(&self) -> &CurrentRing {
        &self.ring
    }

    /// The ring's path.
    pub fn path(&self) -> &Path {
        &self.telemetry.path
    }

    /// The rate the sampler runs at, samples per second.
    pub fn rate_hz(&self) -> f64 {
        self.telemetry.sampler.rate_hz
    }

    /// Stops sampling and marks the ring closed (the agent's clean stop: connections
    /// may still hold the core, so this cannot wait for the drop).
    pub fn close(&mut self) {
        self.telemetry.close();
    }

    /// Restarts the sampler if `values` average differently from what it was started
    /// for; returns whether it did.
    ///
    /// The old sampler stops only once the new ring is complete, just before the new ring
    /// replaces it at its path: readers learn `replaced`, not `closed`, and no sample
    /// follows (a review's reader found one 4 ms after `replaced` when the new ring started
    /// first). A start that fails before that leaves the old sampler running; one that
    /// fails after it restarts sampling at the refresh it had, in a new ring.
    pub fn follow(&mut self, board: &Board, values: &Values) -> Result<bool, SensorsError> {
        let averaging = averaging_of(board, values);
        if self.averaging.as_ref() == Some(&averaging) {
            return Ok(false);
        }
        let path = self.telemetry.path.clone();
        let old = &mut self.telemetry;
        let mut halted = false;
        let started = Telemetry::start_then(board, values, &path, &self.cfg, || {
            old.halt();
            halted = true;
        });
        match started {
            Ok(telemetry) => {
                self.swap(telemetry, &path)?;
                self.started = values.clone();
                self.averaging = Some(averaging);
                Ok(true)
            }
            Err(e) if !halted => Err(e.into()),
            Err(e) => {
                match Telemetry::start(board, &self.started, &path, &self.cfg) {
                    Ok(t) => self.swap(t, &path)?,
                    Err(_) => {
                        self.telemetry.close();
                        self.averaging = None;
                    }
                }
                Err(e.into())
            }
        }
    }

    /// Makes `telemetry`, writing the ring at `path`, the running one.
    fn swap(&mut self, telemetry: Telemetry, path: &Path) -> Result<(), SensorsError> {
        // The old telemetry, halted, is dropped: its ring, replaced, stays so.
        self.telemetry = telemetry;
        self.ring.replace(RingReader::open(path)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ring::{RingInfo, RingWriter, WriterState};
    use crate::telemetry::sampler::SamplerConfig;
    use crate::telemetry::Sample;

    fn ring(path: &Path) -> RingWriter {
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

    /// The totals carry on across rings: a replaced ring's final counts stay, and a ring
    /// that began and ended between two reads is counted whole.
    #[test]
    fn the_totals_carry_on_across_rings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        let open = || RingReader::open(&path).unwrap();
        let a = ring(&path);
        publish(&a, 0, 10);
        a.add_overruns(2);
        let current = CurrentRing::new(open());
        assert_eq!(current.totals(), [10, 2, 0]);
        // The old sampler stops before the next ring starts, as `follow` does.
        publish(&a, 10, 15);
        a.add_read_error();
        let b = ring(&path);
        current.replace(open());
        assert_eq!(current.totals(), [15, 2, 1], "never back");
        publish(&b, 0, 3);
        assert_eq!(current.totals(), [18, 2, 1]);
        // A ring that lives between two reads.
        publish(&b, 3, 4);
        let c = ring(&path);
        current.replace(open());
        publish(&c, 0, 100);
        c.add_overruns(5);
        let _d = ring(&path);
        current.replace(open());
        assert_eq!(current.totals(), [119, 7, 1]);
    }

    /// Found by a review: the old sampler stopped before the new one was sure to start,
    /// so a start that failed left the agent without a sampler, and a switch back to the
    /// old averaging did not try again. Now a new ring that cannot be built leaves the old
    /// sampler running, and the next switch tries again.
    #[test]
    fn a_restart_that_cannot_build_its_ring_leaves_the_old_sampler_running() {
        let dir = tempfile::tempdir().unwrap();
        crate::sim::export("orin-agx", &dir.path().join("tree")).unwrap();
        let board =
            Board::discover(crate::board::sysfs::Root::host(dir.path().join("tree"))).unwrap();
        let values = board.read_knobs().unwrap();
        let path = dir.path().join("r.ring");
        let cfg = SamplerConfig {
            rate_hz: Some(500.0),
            activity_hz: 0.0,
            ..SamplerConfig::default()
        };
        let mut sensors = Sensors::start(&board, &values, &path, cfg, "nogroup").unwrap();
        let other = crate::board::ina3221::averaging_target(&board, &values, 8_000);
        assert_ne!(averaging_of(&board, &other), averaging_of(&board, &values));
        // The new ring's temporary name is taken by a folder: the ring cannot be built.
        let tmp = path.with_extension("ring.tmp");
        std::fs::create_dir(&tmp).unwrap();
        assert!(sensors.follow(&board, &other).is_err());
        let ring = sensors.ring().get();
        assert_eq!(ring.writer().map(|w| w.state), Some(WriterState::Live));
        let before = ring.write_seq();
        // Polled, not slept on: a loaded host may not run the sampler for 50 ms.
        let within_10_s = |what: &str, f: &dyn Fn() -> bool| {
            let start = std::time::Instant::now();
            while !f() {
                assert!(start.elapsed().as_secs() < 10, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        within_10_s("the old sampler still samples", &|| {
            ring.write_seq() > before
        });
        std::fs::remove_dir(&tmp).unwrap();
        assert!(sensors.follow(&board, &other).unwrap(), "tried again");
        assert_eq!(ring.writer().map(|w| w.state), Some(WriterState::Replaced));
        within_10_s("the new sampler samples", &|| {
            sensors.ring().get().write_seq() > 0
        });
        sensors.close();
    }
}
