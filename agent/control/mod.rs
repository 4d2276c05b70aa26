//! Mode control: apply a mode as one transaction, restore the baseline, and recover from
//! a process that died in the middle.
//!
//! A switch ([`Controller::apply`]) plans only the knobs that change, in an order safe on
//! every release ([`plan`]), saves the baseline before the board's first write and the
//! prior values in the journal ([`state`]), writes each value and reads it back, and on
//! any failure writes the prior values back before returning an error that names the
//! file, the value and the errno. The switch allocates nothing on its way and costs one
//! `pwrite` and one `pread` per changed knob plus two journal `pwrite`s.
//!
//! One process at a time controls a board (an exclusive `flock` held for the
//! controller's life); a command that only reads takes no lock ([`Peek`]). Every [`Controller::open`] first finishes what an earlier process left: it discards
//! state from an earlier boot, rolls back an unfinished switch, and restores the baseline
//! if the owner was an agent or lease that died.

pub mod lock;
pub mod mode;
pub mod plan;
pub mod preset;
pub mod settle;
pub mod state;

use crate::board::sysfs::SysfsError;
use crate::board::Board;
use crate::board::Values;
use crate::control::mode::Mode;
use plan::PlanError;
use state::{Journal, Owner, State, StateError, StatePaths, SwitchStats};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What went wrong inside a switch.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Writing a knob failed.
    #[error(transparent)]
    Write(SysfsError),
    /// Reading a knob back after the write failed.
    #[error(transparent)]
    Read(SysfsError),
    /// A knob read back a value other than the one written.
    #[error("{} reads back {read} after writing {wrote}", path.display())]
    ReadBack {
        /// The knob's path on the board.
        path: PathBuf,
        /// The value written.
        wrote: u64,
        /// The value read back.
        read: u64,
    },
    /// A write not made: the knob cannot be opened for writing (the recovery of a dead
    /// process's switch, whose knob lost its grant since; it was written through the
    /// read-only descriptor, `Bad file descriptor`, a review found).
    #[error("cannot write {}: {}", path.display(), read_only_why(*errno))]
    ReadOnly {
        /// The knob's path on the board.
        path: PathBuf,
        /// Why it could not be opened for writing.
        errno: nix::errno::Errno,
    },
    /// A write not made: it would cross the other side of its (min, max) pair, whose own
    /// write, which was to make room for it, failed.
    #[error("{} left as it is: writing it would cross the other side of its (min, max) pair, which could not be written first", path.display())]
    Blocked {
        /// The knob's path on the board.
        path: PathBuf,
    },
}

/// How the rollback after a failure went.
#[derive(Debug, thiserror::Error)]
pub enum Rollback {
    /// Every knob is back at its prior value; the number of writes that took.
    #[error("rolled back {0} write(s): the board is as it was before")]
    Done(usize),
    /// A write (or the read of the knobs) failed during the rollback; why.
    #[error("rollback failed too ({0}); the journal keeps the prior state and the next jpower command retries")]
    Failed(String),
}

/// Control errors.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The mode could not be planned on this board.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The saved state or its lock failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The transaction journal could not be opened or written.
    #[error("transaction journal {}: {source}", path.display())]
    Journal {
        /// The journal's path.
        path: PathBuf,
        /// The error from the journal.
        source: std::io::Error,
    },
    /// Reading the knobs failed.
    #[error(transparent)]
    Read(#[from] SysfsError),
    /// The switch needs a knob jpower cannot write.
    #[error("cannot write {}: {}", path.display(), read_only_why(*errno))]
    ReadOnly {
        /// The knob's path on the board.
        path: PathBuf,
        /// Why it could not be opened for writing.
        errno: nix::errno::Errno,
    },
    /// A switch failed part way; what failed and how the rollback went.
    #[error("{cause}; {rollback}")]
    Failed {
        /// What failed.
        cause: Failure,
        /// How the rollback went.
        rollback: Rollback,
    },
}

/// Why a knob cannot be written, and for a permission denied what grants it (an
/// immutable file or a read-only mount says so instead: root would not help).
fn read_only_why(errno: nix::errno::Errno) -> String {
    let what = format!("{} ({errno:?})", errno.desc());
    if errno == nix::errno::Errno::EACCES {
        format!("{what}: run as root, or install jpower's udev rules and join group jpower")
    } else {
        what
    }
}

/// A completed switch.
#[derive(Debug, Clone)]
pub struct Switch {
    /// The writes made, in order.
    pub steps: plan::Plan,
    /// Knob values before it.
    pub prior: Values,
    /// From request to the last value verified, nanoseconds.
    pub elapsed_ns: u64,
}

/// What `restore` did.
#[derive(Debug)]
pub enum Restored {
    /// There was no saved state.
    Nothing,
    /// The baseline is back; paths in the state file this board no longer has.
    Baseline {
        /// The switch back to the baseline.
        switch: Box<Switch>,
        /// Paths in the state file this board no longer has (left alone).
        unknown: Vec<PathBuf>,
    },
}

/// A board as jpower left it, read without its lock: what the commands that only read
/// (`status`, `modes`, `watch`, `energy`) see. Nothing is recovered; [`Peek::pending`]
/// says what the next command that opens the board will finish.
#[derive(Debug)]
pub struct Peek {
    /// The board.
    pub board: Board,
    /// Every knob's value now.
    pub current: Values,
    /// The saved state, if jpower holds a baseline of this board.
    pub state: Option<State>,
    /// Timing of the switches since the baseline was saved.
    pub stats: SwitchStats,
    /// What the next command that opens the board will recover, in words.
    pub pending: Vec<String>,
}

impl Peek {
    /// Reads `board`'s knobs, state file and journal in `runtime_dir`; takes no lock. A
    /// state file that is no state is listed under `pending`, not an error.
    pub fn read(board: Board, runtime_dir: &Path) -> Result<Peek, ControlError> {
        let paths = StatePaths::new(runtime_dir, &board.key());
        let current = board.read_knobs()?;
        let mut pending = Vec::new();
        let state = match paths.load() {
            Err(e) if e.unreadable_state() => {
                pending.push(e.to_string());
                None
            }
            loaded => loaded?,
        };
        let (stats, unfinished) = Journal::peek(&paths.journal, state::layout_hash(&board))
            .map_err(|source| ControlError::Journal {
                path: paths.journal.clone(),
                source,
            })?;
        match &state {
            Some(st) if st.boot_id != crate::support::runtime::boot_id() => pending.push(format!(
                "state of {} from an earlier boot (the next command that opens the board discards it)",
                st.model
            )),
            Some(st) => {
                match (unfinished.is_some(), state::lock_holder(&paths.lock)) {
                    (false, _) => {}
                    // Found by a review: a switch in flight was called dead.
                    (true, Some(pid)) => pending.push(format!(
                        "a switch unfinished by pid {pid}, which holds the board: in progress, or its rollback failed and that process retries it (if it dies, the next command that opens the board rolls it back)"
                    )),
                    (true, None) => pending.push("an unfinished switch left by a process that died between two writes (the next command that opens the board rolls it back)".into()),
                }
                match paths.load_overlay() {
                    Ok(Some(o)) if o.owner.crashed() => pending.push(format!(
                        "{} (pid {}) died with a temporary change over the held mode (the next command that opens the board puts it back)",
                        o.owner.name, o.owner.pid
                    )),
                    Err(e) => pending.push(e.to_string()),
                    _ => {}
                }
                if st.owner.crashed() {
                    pending.push(format!(
                        "{} (pid {}) died holding the board (the next command that opens the board restores its baseline)",
                        st.owner.name, st.owner.pid
                    ));
                }
            }
            None => {}
        }
        Ok(Peek {
            board,
            current,
            state,
            stats,
            pending,
        })
    }
}

/// The owner of a board's knobs within one process.
#[derive(Debug)]
pub struct Controller {
    board: Board,
    paths: StatePaths,
    current: Values,
    state: Option<State>,
    /// The knobs the held state records as touched ([`State::touched_mask`]).
    touched: u64,
    /// The overlay this process pushed, and the knobs it records as touched.
    overlay: Option<(State, u64)>,
    journal: Option<Journal>,
    owner: Owner,
    recovered: Vec<String>,
    _lock: state::BoardLock,
}

impl Controller {
    /// Takes control of `board`, recovering what an earlier process left unfinished.
    pub fn open(
        board: Board,
        runtime_dir: &Path,
        owner: Owner,
    ) -> Result<Controller, ControlError> {
        let paths = StatePaths::new(runtime_dir, &board.key());
        let knob = (board.knobs.iter().find(|k| k.writable())).map(|k| board.root.path(&k.path));
        let lock = state::BoardLock::acquire(
            &paths.lock,
            knob.as_deref(),
            std::time::Duration::from_secs(5),
        )?;
        let current = board.read_knobs()?;
        let mut c = Controller {
            board,
            paths,
            current,
            state: None,
            touched: 0,
            overlay: None,
            journal: None,
            owner,
            recovered: Vec::new(),
            _lock: lock,
        };
        c.recover()?;
        Ok(c)
    }

    fn note(&mut self, what: String) {
        log::warn!("{what}");
        self.recovered.push(what);
    }

    fn open_journal(&mut self) -> Result<Option<state::Unfinished>, ControlError> {
        let layout = state::layout_hash(&self.board);
        let (j, unfinished) =
            Journal::open(&self.paths.journal, layout).map_err(|source| ControlError::Journal {
                path: self.paths.journal.clone(),
                source,
            })?;
        self.journal = Some(j);
        Ok(unfinished)
    }

    fn recover(&mut self) -> Result<(), ControlError> {
        let Some(st) = self.paths.load()? else {
            return Ok(());
        };
        if st.boot_id != crate::support::runtime::boot_id() {
            self.paths.remove()?;
            self.note(format!(
                "discarded state of {} from an earlier boot (a reboot reset the board)",
                st.model
            ));
            return Ok(());
        }
        let owner = st.owner.clone();
        self.touched = st.touched_mask(&self.board);
        self.state = Some(st);
        if let Some(u) = self.open_journal()? {
            if u.layout_matches && u.prior.len() == self.board.knobs.len() {
                let n = self.finish_unfinished(&u.prior)?;
                self.note(format!(
                    "rolled back an unfinished switch left by a process that died between two writes ({n} write(s))"
                ));
            } else {
                self.restore()?;
                self.note("the journal of an unfinished switch does not match this board's knobs: restored the baseline".into());
                return Ok(());
            }
        }
        if let Some(o) = self.paths.load_overlay()? {
            if o.owner.crashed() {
                self.pop_overlay()?;
                self.note(format!(
                    "{} (pid {}) died with a temporary change over the held mode: put it back",
                    o.owner.name, o.owner.pid
                ));
            }
        }
        if owner.crashed() {
            self.restore()?;
            self.note(format!(
                "{} (pid {}) died holding the board: restored its baseline",
                owner.name, owner.pid
            ));
        }
        Ok(())
    }

    /// The board.
    pub fn board(&self) -> &Board {
        &self.board
    }

    /// Knob values as jpower last verified them.
    pub fn current(&self) -> &Values {
        &self.current
    }

    /// What opening this controller recovered, for the user.
    pub fn recovered(&self) -> &[String] {
        &self.recovered
    }

    /// The saved state, if jpower has written to this board.
    pub fn state(&self) -> Option<&State> {
        self.state.as_ref()
    }

    /// Timing of switches since the baseline was saved.
    pub fn stats(&self) -> SwitchStats {
        self.journal.as_ref().map(|j| j.stats()).unwrap_or_default()
    }

    /// Who the saved state belongs to, or will when jpower first writes to the board.
    pub fn owner(&self) -> &Owner {
        self.state.as_ref().map_or(&self.owner, |s| &s.owner)
    }

    /// Sets who the baseline will belong to, if jpower has not written to the board yet
    /// (a held state keeps its owner).
    pub fn set_owner(&mut self, owner: Owner) {
        self.owner = owner;
    }

    /// Hands the saved state to a new owner (the agent, stopping with a persistent lease,
    /// hands it to whoever runs `jpower restore`).
    pub fn set_state_owner(&mut self, owner: Owner) {
        self.owner = owner.clone();
        if let Some(st) = &mut self.state {
            st.owner = owner;
            if let Err(e) = self.paths.save(st) {
                log::error!("cannot hand over the state file: {e}");
            }
        }
    }

    /// Takes the present values of `knobs` (someone else's writes, which the agent keeps)
    /// as their baseline, so that a restore, a crash's included, leaves them as that
    /// someone set them (a review found a clean stop of the agent undoing an operator's
    /// `nvpmodel -m` it had kept).
    pub fn adopt_as_baseline(&mut self, knobs: &[usize]) {
        let Some(st) = &mut self.state else {
            return;
        };
        let mut changed = false;
        for &i in knobs {
            let path = &self.board.knobs[i].path;
            if let Some(s) = st.baseline.iter_mut().find(|s| &s.path == path) {
                changed |= s.value != self.current[i];
                s.value = self.current[i];
            }
        }
        if changed {
            if let Err(e) = self.paths.save(st) {
                log::error!("cannot save the new baseline in the state file: {e}");
            }
        }
    }

    /// Takes `values`, every knob as just read, for what the knobs hold (someone else's
    /// writes noticed in them).
    pub fn observed(&mut self, values: Values) {
        self.current = values;
    }

    /// Re-reads every knob (to notice changes made behind jpower's back).
    pub fn refresh(&mut self) -> Result<(), ControlError> {
        self.current = self.board.read_knobs()?;
        Ok(())
    }

    /// Applies `mode` as one transaction.
    pub fn apply(&mut self, mode: &Mode) -> Result<Switch, ControlError> {
        let target = plan::target(&self.board, mode, &self.current)?;
        self.apply_values(&target)
    }

    /// Moves every knob to `target` as one transaction.
    pub fn apply_values(&mut self, target: &Values) -> Result<Switch, ControlError> {
        let start = Instant::now();
        let steps = plan::plan(&self.board, &self.current, target);
        let prior = self.current.clone();
        if steps.is_empty() {
            return Ok(Switch {
                steps,
                prior,
                elapsed_ns: start.elapsed().as_nanos() as u64,
            });
        }
        for s in &steps {
            // Access granted since discovery (udev's rules may run after the agent starts)
            // counts: such a knob is opened again.
            if let Some(errno) = self.board.reopen_writable(s.knob) {
                return Err(ControlError::ReadOnly {
                    path: self.board.knobs[s.knob].path.clone(),
                    errno,
                });
            }
        }
        let fresh = self.state.is_none();
        self.hold(steps.iter().fold(0, |m, s| m | 1 << s.knob))?;
        self.journal_op(|j, v| j.begin(v), &prior)?;
        for s in &steps {
            let read = match self.write_verified(s.knob, s.value) {
                Ok(read) => read,
                Err(cause) => {
                    let rollback = self.roll_back(&prior, &steps);
                    if matches!(rollback, Rollback::Done(_)) {
                        self.journal_op(|j, _| j.commit(None), &prior)?;
                        if fresh {
                            // The board is as it was before jpower's first write: nothing
                            // is held, so no baseline is kept for anyone to restore.
                            self.forget_state()?;
                        }
                    }
                    return Err(ControlError::Failed { cause, rollback });
                }
            };
            self.current[s.knob] = read;
        }
        let elapsed_ns = start.elapsed().as_nanos() as u64;
        self.journal_op(|j, _| j.commit(Some(elapsed_ns)), &prior)?;
        Ok(Switch {
            steps,
            prior,
            elapsed_ns,
        })
    }

    fn journal_op(
        &mut self,
        op: impl FnOnce(&mut Journal, &Values) -> std::io::Result<()>,
        values: &Values,
    ) -> Result<(), ControlError> {
        let j = self.journal.as_mut().ok_or_else(|| ControlError::Journal {
            path: self.paths.journal.clone(),
            source: std::io::Error::other("journal not open"),
        })?;
        op(j, values).map_err(|source| ControlError::Journal {
            path: self.paths.journal.clone(),
            source,
        })
    }

    /// Saves the baseline before the board's first write, and records the knobs of `mask`
    /// as touched in it and in this process's overlay. A file is saved only where a knob is
    /// touched for the first time, and before it is written: a switch among knobs already
    /// touched costs nothing here.
    fn hold(&mut self, mask: u64) -> Result<(), ControlError> {
        let fresh = self.state.is_none();
        if fresh || mask & !self.touched != 0 {
            let mut st = match &self.state {
                Some(st) => st.clone(),
                None => State::baseline(&self.board, &self.current, self.owner.clone()),
            };
            st.touch(&self.board, mask, &self.current);
            self.paths.save(&st)?;
            self.state = Some(st);
            self.touched |= mask;
        }
        if fresh {
            self.open_journal()?;
        }
        if let Some((overlay, touched)) = &mut self.overlay {
            if mask & !*touched != 0 {
                overlay.touch(&self.board, mask, &self.current);
                self.paths.save_overlay(overlay)?;
                *touched |= mask;
            }
        }
        Ok(())
    }

    /// Writes a value and reads it back; returns what the file now holds.
    fn write_verified(&self, knob: usize, value: u64) -> Result<u64, Failure> {
        let k = &self.board.knobs[knob];
        k.write(value).map_err(Failure::Write)?;
        let read = k.read().map_err(Failure::Read)?;
        // The INA3221 driver reads `update_interval` back without the averaging factor
        // (mainline CVRF patch): any value it accepted is what it holds.
        let exact = !matches!(k.kind, crate::board::KnobKind::InaUpdateInterval(_));
        if exact && read != value {
            return Err(Failure::ReadBack {
                path: k.path.clone(),
                wrote: value,
                read,
            });
        }
        Ok(read)
    }

    /// Rolls an unfinished switch found in the journal back to `prior`, without touching
    /// the journal's record until it succeeded (so a failure leaves it for the next try).
    /// Only the touched knobs go back (the switch's were recorded before it began): what
    /// changed elsewhere since, the fan among them, stays.
    fn finish_unfinished(&mut self, prior: &Values) -> Result<usize, ControlError> {
        let mut back = self.current.clone();
        for (i, v) in back.iter_mut().enumerate() {
            if self.touched & 1 << i != 0 {
                *v = prior[i];
            }
        }
        plan::make_ordered(&self.board, &mut back);
        let steps = plan::plan(&self.board, &self.current, &back);
        let failed = self.write_each(&steps);
        let n = failed.len();
        if let Some(cause) = failed.into_iter().next() {
            return Err(ControlError::Failed {
                cause,
                rollback: Rollback::Failed(format!(
                    "{n} of {} write(s) failed, the others went back; the journal keeps the state from before the unfinished switch",
                    steps.len()
                )),
            });
        }
        self.journal_op(|j, _| j.commit(None), prior)?;
        Ok(steps.len())
    }

    /// Writes each step, verified, going on past a failure, but not a write that would
    /// cross its (min, max) pair (the planned order makes room first; a failed write can
    /// leave none): what failed.
    fn write_each(&mut self, steps: &plan::Plan) -> Vec<Failure> {
        let mut failed = Vec::new();
        for s in steps {
            let crosses = plan::pairs(&self.board).any(|(min, max)| {
                (s.knob == min && s.value > self.current[max])
                    || (s.knob == max && s.value < self.current[min])
            });
            if crosses {
                failed.push(Failure::Blocked {
                    path: self.board.knobs[s.knob].path.clone(),
                });
                continue;
            }
            if let Some(errno) = self.board.reopen_writable(s.knob) {
                failed.push(Failure::ReadOnly {
                    path: self.board.knobs[s.knob].path.clone(),
                    errno,
                });
                continue;
            }
            match self.write_verified(s.knob, s.value) {
                Ok(read) => self.current[s.knob] = read,
                Err(e) => failed.push(e),
            }
        }
        failed
    }

    /// Writes `prior` back to the knobs of the failed switch `switch`, planning from what
    /// the files hold now (the others, the fan its daemon moves among them, are left as
    /// they are). A write that fails does not stop the others: every knob that can go back
    /// does, and each that could not is named.
    fn roll_back(&mut self, prior: &Values, switch: &plan::Plan) -> Rollback {
        let actual: Values = match self.board.read_knobs() {
            Ok(v) => v,
            Err(e) => return Rollback::Failed(e.to_string()),
        };
        let mut back = actual.clone();
        for s in switch {
            back[s.knob] = prior[s.knob];
        }
        // A pair the switch wrote one side of, whose other side moved meanwhile (a write
        // behind jpower's back), goes back whole.
        for (min, max) in plan::pairs(&self.board) {
            if back[min] > back[max] {
                (back[min], back[max]) = (prior[min], prior[max]);
            }
        }
        plan::make_ordered(&self.board, &mut back);
        let steps = plan::plan(&self.board, &actual, &back);
        self.current = actual;
        let failed = self.write_each(&steps);
        if failed.is_empty() {
            Rollback::Done(steps.len())
        } else {
            if let Ok(now) = self.board.read_knobs() {
                self.current = now;
            }
            let failed: Vec<String> = failed.iter().map(ToString::to_string).collect();
            Rollback::Failed(failed.join("; "))
        }
    }

    /// Saves the board as it is now as an overlay of `owner`'s (see [`StatePaths::overlay`]):
    /// a temporary change on a held state, which [`Controller::pop_overlay`] puts back, or
    /// the next jpower command should `owner` die first.
    pub fn push_overlay(&mut self, owner: Owner) -> Result<(), ControlError> {
        let overlay = State::baseline(&self.board, &self.current, owner);
        self.paths.save_overlay(&overlay)?;
        self.overlay = Some((overlay, 0));
        Ok(())
    }

    /// Saves `values` of the knobs of `mask` as an overlay of `owner`'s over the held state
    /// (see [`StatePaths::overlay`]): what a temporary change of `owner`'s (an agent's
    /// budget caps) holds those knobs away from, written back by the next jpower command
    /// should `owner` die first. Unlike [`Controller::push_overlay`]'s, it is not this
    /// process's own: its writes do not add to it.
    pub fn save_overlay_of(
        &self,
        owner: Owner,
        values: &Values,
        mask: u64,
    ) -> Result<(), ControlError> {
        let mut overlay = State::baseline(&self.board, values, owner);
        overlay.touch(&self.board, mask, values);
        Ok(self.paths.save_overlay(&overlay)?)
    }

    /// Forgets an overlay saved by [`Controller::save_overlay_of`].
    pub fn forget_overlay(&self) -> Result<(), ControlError> {
        Ok(self.paths.remove_overlay()?)
    }

    /// Puts back the knobs changed since the overlay was saved and forgets it; `None`
    /// without one.
    pub fn pop_overlay(&mut self) -> Result<Option<Switch>, ControlError> {
        let overlay = match self.overlay.take() {
            Some((overlay, _)) => overlay,
            None => match self.paths.load_overlay()? {
                Some(overlay) => overlay,
                None => return Ok(None),
            },
        };
        let (target, _) = overlay.values(&self.board, &self.current);
        let switch = self.apply_values(&target)?;
        self.paths.remove_overlay()?;
        Ok(Some(switch))
    }

    /// Forgets the saved state and its journal (the board is at its baseline).
    fn forget_state(&mut self) -> Result<(), ControlError> {
        self.paths.remove()?;
        self.state = None;
        self.touched = 0;
        self.overlay = None;
        self.journal = None;
        Ok(())
    }

    /// Writes back the saved baseline of every knob jpower touched, exactly, and forgets
    /// the saved state; the knobs it never wrote are left as they are.
    pub fn restore(&mut self) -> Result<Restored, ControlError> {
        let Some(st) = self.state.clone() else {
            return Ok(Restored::Nothing);
        };
        if self.journal.is_none() {
            self.open_journal()?;
        }
        let (target, unknown) = st.values(&self.board, &self.current);
        let switch = self.apply_values(&target)?;
        self.forget_state()?;
        Ok(Restored::Baseline {
            switch: Box::new(switch),
            unknown,
        })
    }
}
