//! The budget guard's caps are the agent's, not the lease holder's. Over a persistent
//! lease's mode, which outlives the agent, the request of the capped knobs is kept as an
//! overlay of the agent's ([`Controller::save_overlay_of`]), so that should the agent die
//! with caps in force, the next jpower command (the next agent, or `jpower restore
//! --if-crashed`) writes the holder's request back, and the next agent holds the mode the
//! holder asked for rather than the caps. A clean stop lifts them itself.
//!
//! [`Controller::save_overlay_of`]: crate::control::Controller::save_overlay_of

use super::Core;
use crate::board::Values;
use crate::control::state::Owner;
use crate::ipc::protocol::LeaseKind;

impl Core {
    /// Brings the overlay in step with the caps in force (`effective`: the request limited
    /// by them) over a persistent lease: saved when the capped knobs or their request
    /// change, removed (if `remove`) when none is capped or no persistent lease holds.
    /// Written only on such a change: a switch whose capped knobs and their request stay
    /// costs nothing. Callers save before the change they make and remove after it, so
    /// that a kill in between leaves the overlay of the request being made.
    pub(super) fn sync_caps_overlay(&mut self, effective: &Values, remove: bool) {
        let persistent = self
            .lease
            .as_ref()
            .is_some_and(|l| l.holder.lease == LeaseKind::Persistent);
        let capped = (0..effective.len().min(self.requested.len()))
            .filter(|&i| persistent && effective[i] != self.requested[i])
            .fold(0u64, |m, i| m | 1 << i);
        let unchanged = match &self.caps_overlay {
            None => capped == 0,
            Some((mask, saved)) => {
                *mask == capped
                    && (0..saved.len())
                        .filter(|i| mask & 1 << i != 0)
                        .all(|i| saved[i] == self.requested[i])
            }
        };
        if unchanged {
            return;
        }
        if capped == 0 {
            if !remove {
                return;
            }
            match self.controller.forget_overlay() {
                Ok(()) => self.caps_overlay = None,
                Err(e) => log::error!("removing the budget caps' overlay: {e}"),
            }
            return;
        }
        match self
            .controller
            .save_overlay_of(Owner::agent(), &self.requested, capped)
        {
            Ok(()) => self.caps_overlay = Some((capped, self.requested.clone())),
            Err(e) => log::error!(
                "saving the persistent mode under the budget caps: {e} (a crash now leaves the caps as the held mode)"
            ),
        }
    }

    /// Takes the request back to `before` after a switch to another failed, and the
    /// overlay with it (saved for the refused request before the switch: a kill now would
    /// have written that back; found by review).
    pub(super) fn take_request_back(&mut self, before: Values) {
        self.requested = before;
        let effective = self.guard.clamp(self.controller.board(), &self.requested);
        self.sync_caps_overlay(&effective, true);
    }

    /// At a clean stop with a persistent lease, writes the holder's request back where the
    /// caps hold it down: the guard ends with the agent, the mode holds as asked.
    pub(super) fn lift_caps_at_stop(&mut self) {
        if self.caps_overlay.is_none() {
            return;
        }
        let requested = self.requested.clone();
        match self.controller.apply_values(&requested) {
            Ok(sw) => {
                log::info!(
                    "the budget guard's caps end with the agent: lifted with {} write(s)",
                    sw.steps.len()
                );
                self.sync_caps_overlay(&requested, true);
            }
            Err(e) => log::error!(
                "stopping: lifting the budget guard's caps failed ({e}): the next jpower command puts the held mode back"
            ),
        }
    }
}
