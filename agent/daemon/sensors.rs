//! The agent's sampler, kept in step with the INA3221 averaging.
//!
//! The sampler reads each rail around its sensor's refresh, and picks its default rate
//! from it, so a change of averaging (`set_averaging`, or the restore when that lease
//! ends) restarts it: a new ring at the same path, which marks the old one replaced
//! (`docs/telemetry-ring.md`), so readers reopen the path. The agent's own readers (the
//! connections, the budget guard) take the current ring from a [`CurrentRing`] and never
//! hold its lock while they read.

use crate::board::{Board, KnobKind, Values};
use crate::telemetry::ring::RingReader;
use crate::telemetry::sampler::{SamplerConfig, SamplerError};
use crate::telemetry::Telemetry;
use std::path::Path;
use std::sync::{Arc, RwLock};

/// The ring the sampler writes now, shared by every reader in the agent.
#[derive(Debug, Clone)]
pub struct CurrentRing(Arc<RwLock<Arc<RingReader>>>);

impl CurrentRing {
    /// The current ring; a restart that follows does not disturb the caller's copy.
    pub fn get(&self) -> Arc<RingReader> {
        // A poisoned lock still holds a valid ring: the writer only swaps an Arc.
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, ring: RingReader) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ring);
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
    /// The INA3221 knob values the sampler's refresh intervals come from.
    averaging: Averaging,
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
        let ring = CurrentRing(Arc::new(RwLock::new(Arc::new(RingReader::open(
            &telemetry.path,
        )?))));
        Ok(Sensors {
            telemetry,
            cfg,
            averaging: averaging_of(board, values),
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
    pub fn follow(&mut self, board: &Board, values: &Values) -> Result<bool, SensorsError> {
        let averaging = averaging_of(board, values);
        if averaging == self.averaging {
            return Ok(false);
        }
        let path = self.telemetry.path.clone();
        // The new ring replaces the old at its path before the old sampler stops, so its
        // readers learn `replaced`, not `closed`.
        let telemetry = Telemetry::start(board, values, &path, &self.cfg)?;
        self.ring.set(RingReader::open(&path)?);
        self.telemetry = telemetry;
        self.averaging = averaging;
        Ok(true)
    }
}
