//! The measurement lock: what `jetson_clocks` does before the papers' measurements, held
//! only for the measurement. GPU rail gating off and runtime PM `on` (the GPU stays
//! powered between kernels), the fan at full duty (no thermal throttling mid-sweep): knob
//! values applied through the [`super::Controller`] like a mode, so they are journaled and
//! put back like every other knob, after a crash too. CPU idle states: a PM QoS request of
//! zero latency on `/dev/cpu_dma_latency`, which keeps every CPU out of deep idle states
//! while the file is open and is dropped by the kernel when the process exits, however it
//! exits.

use crate::board::Values;
use crate::board::{paths, Board, KnobKind};
use std::fs::File;
use std::io::Write;

/// The fan's full duty.
const FAN_FULL: u64 = 255;

/// `current` with the lock's knobs set: rail gating off, runtime PM `on`, fan at full.
/// Knobs jpower may not write are left alone (the measurement runs without them; the
/// report says so) rather than failing the whole switch.
pub fn target(board: &Board, current: &Values) -> Values {
    let mut t = current.clone();
    for (i, k) in board.knobs.iter().enumerate().filter(|(_, k)| k.writable()) {
        match k.kind {
            KnobKind::GpuRailgate => t[i] = 0,
            KnobKind::GpuPowerControl => t[i] = 1,
            KnobKind::Fan => t[i] = FAN_FULL,
            _ => {}
        }
    }
    t
}

/// What the lock holds beside the knobs: the PM QoS request, while this lives.
#[derive(Debug)]
pub struct IdleHold {
    _request: File,
}

/// Keeps every CPU out of deep idle states until the returned hold is dropped; `Err`
/// says why not (no `/dev/cpu_dma_latency` on this root, or no permission).
pub fn hold_idle(board: &Board) -> Result<IdleHold, String> {
    let path = board.root.path(paths::CPU_DMA_LATENCY);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // The request is a binary s32 in microseconds.
    f.write_all(&0i32.to_ne_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(IdleHold { _request: f })
}

/// The lock's knobs this board has, as `path = value` lines for reports.
pub fn describe(board: &Board) -> Vec<String> {
    let locked = target(board, &board.knobs.iter().map(|_| 0).collect());
    board
        .knobs
        .iter()
        .enumerate()
        .filter(|(_, k)| {
            matches!(
                k.kind,
                KnobKind::GpuRailgate | KnobKind::GpuPowerControl | KnobKind::Fan
            )
        })
        .map(|(i, k)| match (k.writable(), k.words) {
            (false, _) => format!("{} left as it is: not writable", k.path.display()),
            (true, Some(w)) => format!("{} = {}", k.path.display(), w[locked[i] as usize]),
            (true, None) => format!("{} = {}", k.path.display(), locked[i]),
        })
        .collect()
}
