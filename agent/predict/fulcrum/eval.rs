//! The sweep that scores the strategies: for each problem, the exhaustive oracle on the
//! board's truth, each strategy's choice deployed on the board (met or not, measured: the
//! board's run, not the plan), and the per-phase pairs' oracle at several switch times
//! with the break-even time at which switching per phase stops paying.
//!
//! A configuration is feasible when the oracle (fixed modes, and per-phase pairs at the
//! default switch time) meets it. Over the feasible ones, per strategy: the share where
//! its choice met both targets, its throughput over the oracle's (a miss scores 0), mean
//! and 10th percentile, and the modes it profiled.

use super::interleave::Outcome;
use super::oracle::{self, Best};
use super::search::{self, Strategy};
use super::{Board, Problem, Setting};
use serde::Serialize;
use std::time::Instant;

/// Switch times of the per-phase analysis, ms.
pub const SWITCH_MS: [f64; 3] = [0.1, 1.0, 10.0];
/// The switch time the strategies plan and are scored at, ms.
pub const DEFAULT_SWITCH_MS: f64 = 1.0;

/// One strategy's figures over the feasible configurations.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyScore {
    /// Share of feasible configurations where the choice met the SLO and budget, %.
    pub met_pct: f64,
    /// Mean throughput over the oracle's (a miss scores 0).
    pub mean_ratio_to_oracle: f64,
    /// 10th percentile of that ratio.
    pub p10_ratio_to_oracle: f64,
    /// Mean distinct modes profiled.
    pub mean_modes_profiled: f64,
    /// Feasible configurations scored.
    pub configurations: usize,
    /// Share of the choices that switch modes per phase, %.
    pub per_phase_pct: f64,
}

/// Per-phase pairs against fixed modes at one switch time.
#[derive(Debug, Clone, Serialize)]
pub struct PerPhase {
    /// The switch time, ms.
    pub switch_ms: f64,
    /// Share of feasible configurations where the best pair beat the best fixed mode, %.
    pub won_pct: f64,
    /// Mean throughput gain where it won, %.
    pub mean_gain_pct: f64,
}

/// What the sweep measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Configurations run.
    pub configurations: usize,
    /// Those the oracle could meet.
    pub feasible: usize,
    /// Per strategy.
    pub strategies: std::collections::BTreeMap<String, StrategyScore>,
    /// Per switch time of [`SWITCH_MS`].
    pub per_phase: Vec<PerPhase>,
    /// Median switch time at which the winning pairs (at 0.1 ms) stop paying, ms.
    pub break_even_ms_median: Option<f64>,
    /// Mean wall time of the fixed-mode oracle per configuration, s.
    pub oracle_fixed_s: f64,
    /// Mean settings the fixed-mode oracle ran per configuration.
    pub oracle_fixed_runs: f64,
    /// Mean wall time of one strategy's search per configuration, s (GMD).
    pub gmd_s: f64,
}

/// A board able to change its knobs' switch times (what the sweep varies).
pub trait SweepBoard: Board {
    /// Sets both fast knobs' switch time, ms.
    fn set_fast_switch(&mut self, ms: f64);
    /// Starts the noise of [`Board::profile`]'s measurements on stream `stream`, so that
    /// what one strategy measures does not depend on how many modes another profiled
    /// before it.
    fn set_draws(&mut self, stream: u64);
}

/// Per configuration: the oracle and each strategy's deployed outcome.
struct Scored {
    oracle: Option<f64>,
    strategies: Vec<(Strategy, Outcome, bool, usize, bool)>,
    gains: [Option<f64>; 3],
    break_even: Option<f64>,
    fixed_s: f64,
    fixed_runs: usize,
    gmd_s: f64,
}

/// The switch time at which `pair` stops beating `fixed` throughput, by bisection on
/// log time in 0.1..1000 ms.
fn break_even(board: &mut impl SweepBoard, p: &Problem, pair: &Setting, fixed: f64) -> f64 {
    let (mut lo, mut hi) = (0.1f64.ln(), 1000f64.ln());
    for _ in 0..12 {
        let mid = 0.5 * (lo + hi);
        board.set_fast_switch(mid.exp());
        let o = board.run(pair, p, false);
        if o.met(p) && o.throughput_per_s > fixed {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).exp()
}

fn score(board: &mut impl SweepBoard, p: &Problem, seed: u64) -> Scored {
    let started = Instant::now();
    board.set_fast_switch(DEFAULT_SWITCH_MS);
    let fixed = oracle::fixed(board, p);
    let fixed_s = started.elapsed().as_secs_f64();
    let mut gains = [None; 3];
    let mut best_pair: Option<(Best, f64)> = None;
    let mut oracle = fixed.best.map(|b| b.outcome.throughput_per_s);
    if let Some(f) = fixed.best {
        for (i, &s) in SWITCH_MS.iter().enumerate() {
            board.set_fast_switch(s);
            let pair = oracle::per_phase(board, &Problem { switch_ms: s, ..*p }, f);
            let Some(b) = pair.best else { continue };
            let gain = b.outcome.throughput_per_s / f.outcome.throughput_per_s - 1.0;
            let won = b.setting.per_phase() && gain > 0.0;
            gains[i] = Some(if won { gain } else { 0.0 });
            if s == DEFAULT_SWITCH_MS && won {
                oracle = Some(b.outcome.throughput_per_s);
            }
            if i == 0 && won {
                best_pair = Some((b, f.outcome.throughput_per_s));
            }
        }
    }
    let break_even = best_pair.map(|(b, f)| break_even(board, p, &b.setting, f));
    board.set_fast_switch(DEFAULT_SWITCH_MS);
    let mut gmd_s = 0.0;
    let strategies = Strategy::ALL
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            board.set_draws(seed.wrapping_mul(Strategy::ALL.len() as u64) + i as u64);
            let started = Instant::now();
            let c = search::choose(s, board, p, seed);
            if s == Strategy::Gmd {
                gmd_s = started.elapsed().as_secs_f64();
            }
            let o = board.run(&c.setting, p, false);
            // Each choice against the targets and the oracle, for `-vv`: where a strategy
            // misses, and by how much.
            log::debug!(
                "fulcrum eval: budget {:.1} W, p{} {:.0} ms, {:.0}/s: {} profiled {}{}, {:.2}/s of the oracle's {:.2}/s, p{} {:.1} ms (planned {:.1}), guard {:.2} W (planned {:.2}){}",
                p.budget_w,
                p.percentile,
                p.slo_ms,
                p.rate_per_s,
                s.name(),
                c.modes_profiled,
                if c.setting.per_phase() { " (per phase)" } else { "" },
                o.throughput_per_s,
                oracle.unwrap_or(f64::NAN),
                p.percentile,
                o.slo_pct_ms,
                c.planned.outcome.slo_pct_ms,
                o.guard_w,
                c.planned.outcome.guard_w,
                if o.met(p) { "" } else { ": MISSED" }
            );
            (s, o, o.met(p), c.modes_profiled, c.setting.per_phase())
        })
        .collect();
    Scored {
        oracle,
        strategies,
        gains,
        break_even,
        fixed_s,
        fixed_runs: fixed.runs,
        gmd_s,
    }
}

/// The 10th percentile of `v` (nearest rank), 0 when empty.
fn p10(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[(v.len() as f64 * 0.1).ceil().max(1.0) as usize - 1]
}

/// Runs the sweep: for each group (a board with its workload pair, a thread each), each
/// problem of it. `p.switch_ms` is set to [`DEFAULT_SWITCH_MS`]. Times are wall times of
/// the threads, so they grow when the groups outnumber the cores.
pub fn sweep<B: SweepBoard + Send>(groups: Vec<(B, Vec<Problem>)>, seed: u64) -> Report {
    // One thread per group (a board and its workload pair): the groups share nothing.
    let all: Vec<Scored> = std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(g, (mut board, problems))| {
                scope.spawn(move || {
                    problems
                        .into_iter()
                        .enumerate()
                        .map(|(i, p)| {
                            let p = Problem {
                                switch_ms: DEFAULT_SWITCH_MS,
                                ..p
                            };
                            score(&mut board, &p, seed ^ ((g as u64) << 32 | i as u64))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a sweep thread"))
            .collect()
    });
    let feasible: Vec<&Scored> = all.iter().filter(|s| s.oracle.is_some()).collect();
    let n = feasible.len().max(1) as f64;
    let strategies = Strategy::ALL
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut ratios: Vec<f64> = feasible
                .iter()
                .map(|f| {
                    let (_, o, met, ..) = f.strategies[i];
                    if met {
                        o.throughput_per_s / f.oracle.unwrap_or(f64::NAN)
                    } else {
                        0.0
                    }
                })
                .collect();
            let count = |pick: fn(&(Strategy, Outcome, bool, usize, bool)) -> f64| {
                feasible.iter().map(|f| pick(&f.strategies[i])).sum::<f64>()
            };
            let score = StrategyScore {
                met_pct: 100.0 * count(|x| f64::from(u8::from(x.2))) / n,
                mean_ratio_to_oracle: ratios.iter().sum::<f64>() / n,
                p10_ratio_to_oracle: p10(&mut ratios),
                mean_modes_profiled: count(|x| x.3 as f64) / n,
                configurations: feasible.len(),
                per_phase_pct: 100.0 * count(|x| f64::from(u8::from(x.4))) / n,
            };
            (s.name().to_string(), score)
        })
        .collect();
    let per_phase = SWITCH_MS
        .iter()
        .enumerate()
        .map(|(i, &switch_ms)| {
            let won: Vec<f64> = feasible
                .iter()
                .filter_map(|f| f.gains[i].filter(|&g| g > 0.0))
                .collect();
            PerPhase {
                switch_ms,
                won_pct: 100.0 * won.len() as f64 / n,
                // Folded from +0: an empty f64 sum is -0, printed "-0.0 %".
                mean_gain_pct: 100.0 * won.iter().fold(0.0, |a, g| a + g) / won.len().max(1) as f64,
            }
        })
        .collect();
    let mut even: Vec<f64> = all.iter().filter_map(|s| s.break_even).collect();
    even.sort_by(f64::total_cmp);
    let runs = all.len().max(1) as f64;
    Report {
        configurations: all.len(),
        feasible: feasible.len(),
        strategies,
        per_phase,
        break_even_ms_median: even.get(even.len() / 2).copied(),
        oracle_fixed_s: all.iter().map(|s| s.fixed_s).sum::<f64>() / runs,
        oracle_fixed_runs: all.iter().map(|s| s.fixed_runs as f64).sum::<f64>() / runs,
        gmd_s: all.iter().map(|s| s.gmd_s).sum::<f64>() / runs,
    }
}
