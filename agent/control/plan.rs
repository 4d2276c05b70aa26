//! From a mode to knob values, and from current values to an ordered list of writes that
//! is safe on every kernel release.
//!
//! The order ([`plan`]):
//! 1. cores coming online, lowest first (a cluster's limits can only be written while one
//!    of its CPUs is online: a cluster offline before and after whose limits change, as a
//!    restore may ask, has its first CPU brought online for them);
//! 2. each cluster's, then the GPU's: min/max writes ordered so that
//!    min <= max holds after every single write (moving up: max first; down: min first).
//!    L4T 32 rejects the other order with `EINVAL`, L4T 35/36 silently clamp;
//! 3. the EMC cap, then the settings (GPU rail gating and runtime PM, INA3221 sensors,
//!    the fan);
//! 4. cores going offline, highest first (a CPU brought online for its cluster's limits
//!    too). cpu0 never goes offline.
//!
//! Only knobs whose value changes are written (a lit CPU's `online`, twice). Values are in
//! each file's unit. Nothing here allocates: plans and value sets are fixed-capacity.

use crate::board::{Board, Values, MAX_KNOBS};
use crate::control::mode::{validate, EmcLimit, Mode, ModeError, Range};

/// One write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Index of the knob in the board's list.
    pub knob: usize,
    /// The value to write, in the file's unit.
    pub value: u64,
}

/// An ordered list of writes: each knob at most once, but a CPU lit for its cluster's
/// limits, twice.
pub type Plan = heapless::Vec<Step, { 2 * MAX_KNOBS }>;

/// Why a mode cannot be turned into knob values.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A value the board's tables do not have.
    #[error(transparent)]
    Mode(#[from] ModeError),
    /// The mode would take cpu0 offline.
    #[error("cpu0 cannot go offline")]
    Cpu0Offline,
    /// The mode would take offline a CPU whose `online` file is missing or unreadable.
    #[error(
        "cpu{0} cannot go offline: its online file is missing or unreadable (see `jpower status`)"
    )]
    NoOnlineKnob(usize),
    /// A range whose min is above its max.
    #[error("{domain} range {min_hz}..{max_hz} Hz has its min above its max")]
    Inverted {
        /// `CPU` or `GPU`.
        domain: &'static str,
        /// The range's min, Hz.
        min_hz: u64,
        /// The range's max, Hz.
        max_hz: u64,
    },
    /// The mode names more CPU clusters than the board has.
    #[error("the mode names {named} CPU clusters, the board has {present}")]
    Clusters {
        /// Clusters the mode names.
        named: usize,
        /// Clusters the board has.
        present: usize,
    },
}

fn range_values(
    domain: &'static str,
    table: &[u64],
    r: &Range,
    scale: u64,
) -> Result<(u64, u64), PlanError> {
    if r.min_hz > r.max_hz {
        return Err(PlanError::Inverted {
            domain,
            min_hz: r.min_hz,
            max_hz: r.max_hz,
        });
    }
    let min = validate(domain, table, r.min_hz, false)?;
    let max = validate(domain, table, r.max_hz, false)?;
    Ok((min / scale, max / scale))
}

/// The knob values `mode` asks for, starting from `current` (what it leaves alone stays).
pub fn target(board: &Board, mode: &Mode, current: &Values) -> Result<Values, PlanError> {
    let mut t = current.clone();
    if let Some(online) = &mode.online_cpus {
        let decides = |cpu: usize| mode.cpus_named.as_ref().is_none_or(|n| n.contains(&cpu));
        if !online.contains(&0) && decides(0) && board.cpus.iter().any(|c| c.0 == 0) {
            return Err(PlanError::Cpu0Offline);
        }
        for &(cpu, knob) in board.cpus.iter().filter(|c| decides(c.0)) {
            match knob {
                Some(k) => t[k] = u64::from(online.contains(&cpu)),
                None if !online.contains(&cpu) => return Err(PlanError::NoOnlineKnob(cpu)),
                None => {}
            }
        }
    }
    if mode.cpu.len() > board.clusters.len() {
        return Err(PlanError::Clusters {
            named: mode.cpu.len(),
            present: board.clusters.len(),
        });
    }
    for (c, range) in board.clusters.iter().zip(&mode.cpu) {
        if let Some(r) = range {
            (t[c.min], t[c.max]) = range_values("CPU", &c.table_hz, r, 1000)?;
        }
    }
    if let (Some(r), Some(g)) = (&mode.gpu, &board.gpu) {
        (t[g.min], t[g.max]) = range_values("GPU", &g.table_hz, r, 1)?;
    } else if mode.gpu.is_some() {
        return Err(ModeError::Absent("GPU frequency").into());
    }
    if let Some(limit) = &mode.emc {
        let emc = board.emc.as_ref().ok_or(ModeError::Absent("EMC cap"))?;
        t[emc.cap] = match limit {
            EmcLimit::Uncapped => emc.uncapped_raw(),
            EmcLimit::CapHz(hz) => validate("EMC", &emc.table_hz, *hz, false)?,
        };
    }
    keep_offline_clusters(board, current, &mut t);
    Ok(t)
}

/// The knob indices of every (min, max) pair of `board`: its CPU clusters' and its GPU's.
pub fn pairs(board: &Board) -> impl Iterator<Item = (usize, usize)> + '_ {
    board
        .clusters
        .iter()
        .map(|c| (c.min, c.max))
        .chain(board.gpu.iter().map(|g| (g.min, g.max)))
}

/// Makes every (min, max) pair of `t` valid (min lowered to max where they cross), as a
/// merge of values from different moments may leave them.
pub fn make_ordered(board: &Board, t: &mut Values) {
    for (mn, mx) in pairs(board) {
        if t[mn] > t[mx] {
            t[mn] = t[mx];
        }
    }
}

/// A cluster with no online CPU in `t` cannot take limit writes: keep its values.
pub fn keep_offline_clusters(board: &Board, current: &Values, t: &mut Values) {
    for c in &board.clusters {
        if !cluster_online(board, c.cpus.as_slice(), t) {
            t[c.min] = current[c.min];
            t[c.max] = current[c.max];
        }
    }
}

/// Whether any of `cpus` is online in `values` (a CPU without an `online` file always is).
pub fn cluster_online(board: &Board, cpus: &[usize], values: &Values) -> bool {
    board
        .cpus
        .iter()
        .filter(|(cpu, _)| cpus.contains(cpu))
        .any(|(_, knob)| knob.is_none_or(|k| values[k] == 1))
}

fn push(plan: &mut Plan, knob: usize, value: u64) {
    // Capacity is twice the knob count bound, and each knob is pushed at most twice.
    let _ = plan.push(Step { knob, value });
}

/// Writes moving a (min, max) pair from `cur` to `t` with min <= max at every moment.
fn pair(plan: &mut Plan, min: usize, max: usize, cur: &Values, t: &Values) {
    let (cmin, cmax, tmin, tmax) = (cur[min], cur[max], t[min], t[max]);
    match (cmin != tmin, cmax != tmax) {
        (false, false) => {}
        (true, false) => push(plan, min, tmin),
        (false, true) => push(plan, max, tmax),
        (true, true) if tmin <= cmax => {
            push(plan, min, tmin);
            push(plan, max, tmax);
        }
        (true, true) => {
            push(plan, max, tmax);
            push(plan, min, tmin);
        }
    }
}

/// The ordered writes taking the board from `cur` to `t`.
pub fn plan(board: &Board, cur: &Values, t: &Values) -> Plan {
    let mut p = Plan::new();
    let lit = lit_for_limits(board, cur, t);
    for &(_, knob) in &board.cpus {
        if let Some(k) = knob {
            if (cur[k] == 0 && t[k] == 1) || lit & 1 << k != 0 {
                push(&mut p, k, 1);
            }
        }
    }
    // Every cluster whose limits change has a CPU online now: in `cur`, in `t` (just
    // onlined) or lit for the writes.
    for c in &board.clusters {
        pair(&mut p, c.min, c.max, cur, t);
    }
    if let Some(g) = &board.gpu {
        pair(&mut p, g.min, g.max, cur, t);
    }
    if let Some(e) = &board.emc {
        if cur[e.cap] != t[e.cap] {
            push(&mut p, e.cap, t[e.cap]);
        }
    }
    // Settings, in discovery order: the GPU's rail gating before its runtime PM, each
    // sensor's `samples` before its `update_interval` (the driver derives the conversion
    // time from both), the fan.
    for (i, k) in board.knobs.iter().enumerate() {
        if k.kind.is_setting() && cur[i] != t[i] {
            push(&mut p, i, t[i]);
        }
    }
    for &(cpu, knob) in board.cpus.iter().rev() {
        if let Some(k) = knob {
            if cpu != 0 && ((cur[k] == 1 && t[k] == 0) || lit & 1 << k != 0) {
                push(&mut p, k, 0);
            }
        }
    }
    p
}

/// The `online` knobs (a mask of knob indices) of the CPUs brought online only for their
/// cluster's limit writes: one per cluster offline before and after whose limits change,
/// its first hotpluggable CPU. A mode keeps an offline cluster's limits
/// ([`keep_offline_clusters`]); a restore does not, since limits written while a cluster
/// was online, left there, pin its clock when its CPUs next come online.
fn lit_for_limits(board: &Board, cur: &Values, t: &Values) -> u64 {
    let mut lit = 0;
    for c in &board.clusters {
        let moves = cur[c.min] != t[c.min] || cur[c.max] != t[c.max];
        if moves && !cluster_online(board, &c.cpus, cur) && !cluster_online(board, &c.cpus, t) {
            let first = (board.cpus.iter())
                .filter(|(cpu, _)| c.cpus.contains(cpu))
                .find_map(|&(_, k)| k);
            lit |= first.map_or(0, |k| 1 << k);
        }
    }
    lit
}
