//! What `jpower watch` shows at one refresh, gathered from the board's files and the
//! telemetry ring apart from any drawing, so both views (the terminal UI and the plain
//! rows) and the tests use the same data.

use crate::board::activity::{self, CpuTimes, Memory};
use crate::board::Board;
use crate::control::preset::Presets;
use crate::support::clock::monotonic_ns;
use crate::telemetry::flags;
use crate::telemetry::ring::RingReader;

/// One rail's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RailRow {
    /// The rail's name.
    pub name: String,
    /// Volts and amperes; `None` where only the power is read (L4T 32's IIO driver).
    pub volts_amps: Option<(f64, f64)>,
    /// Watts.
    pub watts: f64,
    /// New values per second since the last refresh.
    pub fresh_per_s: f64,
    /// Age of the newest new value, milliseconds; `None` before the first.
    pub age_ms: Option<f64>,
}

/// One refresh of `jpower watch`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The board's model.
    pub board: String,
    /// The preset the knobs hold, or `custom`; `None` when the knobs cannot be read.
    pub mode: Option<String>,
    /// Sample rates: requested and achieved since the last refresh.
    pub rates_hz: (f64, f64),
    /// Each CPU cluster (`policyN`) and its running clock, kHz.
    pub clusters: Vec<(usize, Option<u64>)>,
    /// The GPU's running clock, Hz.
    pub gpu_hz: Option<u64>,
    /// The EMC's running clock, Hz (root-only debugfs on a Jetson).
    pub emc_hz: Option<u64>,
    /// The GPU's load, 0 to 1.
    pub gpu_load: Option<f64>,
    /// The EMC's activity, 0 to 1 (from the ring's activity section only).
    pub emc_activity: Option<f64>,
    /// Each online CPU's load, 0 to 1 (empty without `/proc/stat`): over the activity
    /// section's window, or since the last refresh where the ring has no such section.
    pub cpu_load: Vec<(usize, f64)>,
    /// RAM and swap.
    pub memory: Option<Memory>,
    /// The fan's duty, 0 to 1.
    pub fan: Option<f64>,
    /// Thermal zones, °C.
    pub temps: Vec<(String, f64)>,
    /// The rails; empty before the first sample.
    pub rails: Vec<RailRow>,
    /// The module's power, watts; `None` before the first sample.
    pub module_w: Option<f64>,
    /// Samples so far, overruns and read errors.
    pub counters: (u64, u64, u64),
    /// Throttling and INA3221 alarms, in words.
    pub alerts: Vec<&'static str>,
}

/// What a refresh needs from the one before: the time, each rail's fresh count, the
/// ring's write position and the CPUs' times.
#[derive(Debug, Clone, Default)]
pub struct Previous {
    t_ns: u64,
    fresh: Vec<u64>,
    written: u64,
    cpu: CpuTimes,
}

impl Previous {
    /// Where the first refresh counts from.
    pub fn now(board: &Board, ring: &RingReader) -> Previous {
        Previous {
            t_ns: monotonic_ns(),
            fresh: (0..ring.info.rails.len())
                .map(|r| ring.rail_freshness(r).0)
                .collect(),
            written: ring.write_seq(),
            cpu: CpuTimes::read(board),
        }
    }

    /// Moves the ring's counts to `ring`, a new one: its samples and fresh values count
    /// from 0, over the refresh's whole time (the time and the CPUs' times stay, so the
    /// refresh after a follow spans what the one before it left).
    pub fn follow(&mut self, ring: &RingReader) {
        self.written = 0;
        self.fresh = vec![0; ring.info.rails.len()];
    }
}

/// Gathers a snapshot of `board` (its presets `presets`) and `ring`, sampled at
/// `requested_hz`, since `prev`, which it moves on to now.
pub fn gather(
    board: &Board,
    presets: Option<&Presets>,
    ring: &RingReader,
    requested_hz: f64,
    prev: &mut Previous,
) -> Snapshot {
    let next = Previous::now(board, ring);
    let dt = (next.t_ns.saturating_sub(prev.t_ns) as f64 * 1e-9).max(1e-9);
    let latest = ring.latest();
    let rails = latest.map_or_else(Vec::new, |s| {
        ring.info
            .rails
            .iter()
            .zip(s.rails())
            .enumerate()
            .map(|(r, (info, v))| {
                let last = ring.rail_freshness(r).1;
                let before = prev.fresh.get(r).copied().unwrap_or(0);
                RailRow {
                    name: info.name.clone(),
                    volts_amps: (v.voltage_mv != 0).then(|| {
                        (
                            f64::from(v.voltage_mv) / 1000.0,
                            f64::from(v.current_ma) / 1000.0,
                        )
                    }),
                    watts: f64::from(v.power_uw) * 1e-6,
                    fresh_per_s: next.fresh[r].saturating_sub(before) as f64 / dt,
                    age_ms: (last != 0).then(|| next.t_ns.saturating_sub(last) as f64 * 1e-6),
                }
            })
            .collect()
    });
    let sample_flags = latest.map_or(0, |s| s.flags);
    let mut alerts = Vec::new();
    if sample_flags & flags::THROTTLED != 0 {
        alerts.push("THROTTLED");
    }
    if sample_flags & (flags::WARN_ALARM | flags::CRIT_ALARM) != 0 {
        alerts.push("INA3221 ALARM");
    }
    if latest.is_some_and(|s| s.failed() != 0) {
        // The failing rail shows its last good value, its age growing.
        alerts.push("RAIL READ FAILED");
    }
    let (overruns, errors) = ring.counters();
    // The activity section's record where the ring has one (the agent's, or this watch's
    // own sampler's); the board's files where its writer runs with the counters off.
    let act = ring.activity();
    let per_mille = |pm: Option<u32>| pm.map(|pm| f64::from(pm) / 1e3);
    let snapshot = Snapshot {
        board: board.identity.model.clone(),
        mode: board.read_knobs().ok().map(|v| {
            presets
                .and_then(|p| p.matching(board, &v))
                .map_or_else(|| "custom".to_string(), |p| p.name.clone())
        }),
        rates_hz: (
            requested_hz,
            next.written.saturating_sub(prev.written) as f64 / dt,
        ),
        clusters: board
            .clusters
            .iter()
            .map(|c| (c.policy, c.cur.try_read_u64()))
            .collect(),
        gpu_hz: board.gpu.as_ref().and_then(|g| g.cur.try_read_u64()),
        emc_hz: board
            .emc
            .as_ref()
            .and_then(|e| e.rate.as_ref())
            .and_then(|r| r.try_read_u64()),
        gpu_load: act.map_or_else(|| activity::gpu_load(board), |a| per_mille(a.gpu_load_pm)),
        emc_activity: act.and_then(|a| per_mille(a.emc_activity_pm)),
        cpu_load: act.map_or_else(
            || next.cpu.load_since(&prev.cpu),
            |a| {
                (a.cpus().iter().enumerate())
                    .filter_map(|(cpu, c)| Some((cpu, per_mille(c.util_pm)?)))
                    .collect()
            },
        ),
        memory: act.map_or_else(|| Memory::read(board), |a| a.memory),
        fan: activity::fan_duty(board),
        temps: ring
            .zones()
            .into_iter()
            .filter_map(|(n, t)| Some((n, f64::from(t?) / 1000.0)))
            .collect(),
        rails,
        module_w: latest.map(|s| f64::from(s.module_uw) * 1e-6),
        counters: (latest.map_or(0, |s| s.n + 1), overruns, errors),
        alerts,
    };
    *prev = next;
    snapshot
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::sampler::SamplerConfig;

    #[test]
    fn a_snapshot_of_a_simulated_board_has_its_clocks_rails_and_what_its_root_holds() {
        let dir = tempfile::tempdir().unwrap();
        let sim = crate::sim::SimBoard::open("orin-agx", dir.path()).unwrap();
        let board = Board::discover(sim.root()).unwrap();
        let values = board.read_knobs().unwrap();
        let path = dir.path().join("t.ring");
        let cfg = SamplerConfig {
            rate_hz: Some(200.0),
            ..SamplerConfig::default()
        };
        let t = crate::telemetry::Telemetry::start(&board, &values, &path, &cfg).unwrap();
        let ring = RingReader::open(&t.path).unwrap();
        while ring.latest().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // The simulated kernel writes /proc/stat from the board's load.
        sim.set_load(crate::sim::kernel::LoadState {
            cpu: 0.5,
            ..Default::default()
        })
        .unwrap();
        let mut prev = Previous::now(&board, &ring);
        std::thread::sleep(std::time::Duration::from_millis(400));
        let s = gather(&board, None, &ring, 200.0, &mut prev);
        assert_eq!(s.board, "NVIDIA Jetson AGX Orin Developer Kit");
        assert_eq!(s.mode.as_deref(), Some("custom"), "no presets given");
        assert_eq!(s.clusters.len(), 3);
        assert!(s.clusters.iter().all(|(_, khz)| khz.is_some()));
        assert!(s.gpu_hz.is_some() && s.fan.is_some());
        assert_eq!(s.rails.len(), 4);
        assert!(s.module_w.is_some_and(|w| w > 0.0));
        // Every online CPU at the board's load; the module's memory.
        assert_eq!(s.cpu_load.len(), 12, "{:?}", s.cpu_load);
        assert!(
            s.cpu_load.iter().all(|(_, l)| (l - 0.5).abs() < 0.1),
            "{:?}",
            s.cpu_load
        );
        assert!(s.memory.is_some_and(|m| m.ram_total_kb > 30_000_000));
    }
}
