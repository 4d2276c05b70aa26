//! Telemetry: INA3221 rails sampled at the sensor's real limit on a dedicated thread,
//! published in a shared-memory ring, integrated into energy per window and per minibatch.
//!
//! ```text
//!  sampler thread (pre-opened rail files, pread, no allocation, no lock)
//!      │ publish(n, sample)                 thermal watcher (10 Hz): zones, alarms,
//!      ▼                                    throttling -> ring header atomics
//!  ring file (mmap; docs/telemetry-ring.md) ◄──────────┤
//!      │                                    activity thread (50 Hz): GPU, CPU, EMC, RAM,
//!      │                                    fan, disks -> the ring's activity section
//!      │ any process: RingReader::latest / since / sample(n)
//!      ▼
//!  energy (trapezoid over timestamps; minibatch begin/end markers)
//! ```
//!
//! [`crate::board::ina3221`] knows how fast each rail can really refresh (the INA3221 averages `samples`
//! conversions; NVIDIA's boot script sets 512, a new value every ~430 ms) and can lower
//! the averaging to reach a requested rate, through the controller so it is restored
//! like every other knob.

use crate::board::rails::RailValue;

pub mod activity;
pub mod activity_thread;
pub mod energy;
pub mod periodic;
pub mod ring;
pub mod sampler;
pub mod thermal;

/// Flags of a sample.
pub mod flags {
    /// A running clock below its requested minimum.
    pub const THROTTLED: u32 = 1;
    /// An INA3221 warning alarm (`curr*_max_alarm`).
    pub const WARN_ALARM: u32 = 2;
    /// An INA3221 critical alarm (`curr*_crit_alarm`).
    pub const CRIT_ALARM: u32 = 4;
    /// Bit `RAIL_FAILED_SHIFT + r`: rail `r`'s last read failed (`EIO`, a driver gone), so
    /// its value is the last good one held (0 before any read succeeded), not a reading.
    pub const RAIL_FAILED_SHIFT: u32 = 16;
}

/// One sample of every rail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Sample number, from 0.
    pub n: u64,
    /// `CLOCK_MONOTONIC`, nanoseconds.
    pub t_ns: u64,
    /// [`flags`].
    pub flags: u32,
    /// Bit `r`: rail `r`'s value is new in this sample.
    pub fresh: u32,
    /// Module power (the input rail where the board has one), microwatts.
    pub module_uw: u32,
    /// The input rail's power, or 0.
    pub input_uw: u32,
    /// How many entries of `rails` are in use.
    pub rail_count: usize,
    /// Each rail's reading, in the ring's rail order; the first `rail_count` are in use.
    pub rails: [RailValue; ring::MAX_RAILS],
}

impl Sample {
    /// This sample's rails.
    pub fn rails(&self) -> &[RailValue] {
        &self.rails[..self.rail_count]
    }

    /// Bit `r`: rail `r`'s last read failed, its value held ([`flags::RAIL_FAILED_SHIFT`]).
    pub fn failed(&self) -> u32 {
        self.flags >> flags::RAIL_FAILED_SHIFT
    }
}

use crate::board::Board;
use crate::board::Values;
use ring::RingInfo;
use sampler::{Sampler, SamplerConfig, SamplerError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the ring of board `key` lives in `runtime_dir`: written by the board's one owner
/// (the agent, or a command holding the board lock), read by every local process.
pub fn ring_path(runtime_dir: &Path, key: &str) -> PathBuf {
    runtime_dir.join("telemetry").join(format!("{key}.ring"))
}

/// The ring of a command that samples board `key` itself (no agent runs): one per
/// process, so that two such commands never write one ring.
pub fn private_ring_path(runtime_dir: &Path, key: &str) -> PathBuf {
    runtime_dir
        .join("telemetry")
        .join(format!("{key}.{}.ring", std::process::id()))
}

/// The ring description of `board` with its knobs at `values` (which set the sensors'
/// refresh intervals).
pub fn ring_info(board: &Board, values: &Values) -> RingInfo {
    let rails = sampler::rail_table(&board.rails, |r| {
        crate::board::ina3221::refresh_us(board, r.chip, values)
    });
    let module_mask = board.totals.module.iter().fold(0u32, |m, &i| m | (1 << i));
    RingInfo {
        board: board.identity.model.clone(),
        simulated: board.root.is_simulated(),
        period_ns: 0,
        slot_count: 0,
        rails,
        module_mask,
        input_rail: board.totals.input,
        zones: thermal::zones(&board.root)
            .into_iter()
            .take(ring::MAX_ZONES)
            .map(|z| z.name)
            .collect(),
        activity: None,
    }
}

/// A running sampler, thermal watcher and activity thread writing one ring.
#[derive(Debug)]
pub struct Telemetry {
    /// The sampling thread writing the ring.
    pub sampler: Sampler,
    watcher: Option<periodic::Periodic>,
    activity: Option<periodic::Periodic>,
    /// The ring's path.
    pub path: PathBuf,
}

impl Telemetry {
    /// Starts sampling `board` into the ring at `path` ([`ring_path`] or
    /// [`private_ring_path`]).
    pub fn start(
        board: &Board,
        values: &Values,
        path: &Path,
        cfg: &SamplerConfig,
    ) -> Result<Telemetry, SamplerError> {
        Self::start_then(board, values, path, cfg, || {})
    }

    /// [`Telemetry::start`], calling `before_publish` when the new ring is ready to
    /// replace the one at `path`, after everything that can fail before it is done
    /// ([`RingWriter::create_then`](ring::RingWriter::create_then)): where the old one's
    /// threads stop, so that they still run if this fails early.
    pub fn start_then(
        board: &Board,
        values: &Values,
        path: &Path,
        cfg: &SamplerConfig,
        before_publish: impl FnOnce(),
    ) -> Result<Telemetry, SamplerError> {
        let path = path.to_path_buf();
        let mut info = ring_info(board, values);
        // The activity counters, unless turned off (a rate of 0).
        let counters = (cfg.activity_hz > 0.0).then(|| {
            let period = Duration::from_secs_f64(1.0 / cfg.activity_hz);
            let window = Duration::from_millis(cfg.activity_window_ms);
            let counters = crate::board::counters::Counters::open(board);
            info.activity = Some(ring::ActivityInfo {
                period_ns: period.as_nanos() as u64,
                window_ns: activity::effective_window_ns(period, window),
                cpu_count: counters.cpu_count(),
                disks: counters.disks.clone(),
            });
            (counters, period, window)
        });
        let sampler = Sampler::start_then(&board.rails, info, &path, cfg, before_publish)?;
        let ring = sampler.ring().clone();
        let watcher = thermal::start(board, ring.clone()).map_err(SamplerError::Clone)?;
        let activity = counters
            .map(|(c, period, window)| activity_thread::start(c, ring, period, window))
            .transpose()
            .map_err(SamplerError::Clone)?;
        Ok(Telemetry {
            sampler,
            watcher: Some(watcher),
            activity,
            path,
        })
    }

    /// Every thread writing the ring stops; the ring is left live, for a new ring at its
    /// path to replace (`replaced`, which a reader follows, rather than `closed`).
    pub fn halt(&mut self) {
        drop((self.watcher.take(), self.activity.take()));
        self.sampler.halt();
    }

    /// A clean stop before the end: every thread writing the ring stops, then the ring is
    /// marked closed, whoever still holds `self` (dropping it does the same).
    pub fn close(&mut self) {
        self.halt();
        self.sampler.ring().close();
    }
}
