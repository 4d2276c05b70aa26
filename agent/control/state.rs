//! What survives a jpower process: the board's baseline and its owner (the state file),
//! and the transaction journal that makes a killed switch recoverable.
//!
//! - `<runtime>/state/<board-key>.json`: written once, before the first write to the
//!   board (temp file, fsync, rename, fsync of the directory). It holds the value of every
//!   knob jpower may touch, which of them it has written (each recorded before its first
//!   write: what a restore puts back), the host boot id (state from an earlier boot is discarded: a
//!   reboot already reset the board) and the owner: a direct CLI `set` (persists until
//!   `jpower restore`), or an agent or lease with its pid and start time (if that process is gone, the
//!   next start restores the baseline: it crashed).
//! - `<runtime>/state/<board-key>.journal`: one fixed record, opened once, written with a
//!   single `pwrite` before a switch's first write (the values of all knobs before the
//!   switch, flagged in flight) and a single `pwrite` after the last (flag cleared, switch
//!   time). A process killed in between leaves the flag set; the next jpower command rolls
//!   the board back to those values before doing anything else. No fsync: the runtime
//!   directory is tmpfs, and a power loss reboots the board anyway.
//!
//! The directory is 0750 and its files 0640 whatever the umask: the group may read them
//! (`jpower status` reports the last switch), only their owner may change what a restore
//! writes back. What root makes there for an agent's runtime directory belongs to the
//! agent's user ([`runtime::adopt`]), and none is opened through a symbolic link.

use crate::board::Values;
use crate::board::{Board, MAX_KNOBS};
use crate::support::runtime::{self, make_dir, open_private};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Version of the state file layout.
pub const STATE_VERSION: u32 = 1;
/// The state directory's mode: the group reads, only the owner writes.
const STATE_DIR_MODE: u32 = 0o750;
/// The mode of the state, journal and lock files.
const STATE_FILE_MODE: u32 = 0o640;

/// Who holds the board's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// What kind of owner it is.
    pub kind: OwnerKind,
    /// The owning process.
    pub pid: u32,
    /// A label for logs (`jpower set`, a client's name).
    pub name: String,
    /// When the owning process started ([`runtime::start_time`]), so that another process
    /// given the same pid (a reused pid, or an agent in a PID namespace seen from the
    /// host) is not taken for it; absent in the files of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
}

/// Kinds of owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerKind {
    /// A direct `jpower set`, or the holder of an agent's persistent lease: holds until
    /// `jpower restore`, through the agent's stop or crash.
    Cli,
    /// The agent itself (its own guard or default mode).
    Agent,
    /// A client's session lease through the agent.
    Lease,
}

impl Owner {
    /// Process `pid` as an owner of `kind`, named `name` in logs.
    pub fn new(kind: OwnerKind, pid: u32, name: impl Into<String>) -> Owner {
        Owner {
            kind,
            pid,
            name: name.into(),
            start: runtime::start_time(pid),
        }
    }

    /// This process, as a direct CLI user.
    pub fn cli() -> Owner {
        Owner::new(OwnerKind::Cli, std::process::id(), "jpower set")
    }

    /// This process, as the agent.
    pub fn agent() -> Owner {
        Owner::new(OwnerKind::Agent, std::process::id(), "jpower agent")
    }

    /// Whether the owner's death means a crash to recover from.
    pub fn crashed(&self) -> bool {
        self.kind != OwnerKind::Cli && !runtime::same_process_alive(self.pid, self.start)
    }
}

/// One saved knob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The knob's path on the board.
    pub path: PathBuf,
    /// Its value, in the file's unit.
    pub value: u64,
}

/// The state file's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Layout version ([`STATE_VERSION`]).
    pub version: u32,
    /// The board's key ([`Board::key`]): its model and root.
    pub board_key: String,
    /// The board's device-tree model.
    pub model: String,
    /// The root the board was found under.
    pub root: PathBuf,
    /// The host's boot id when the state was saved; state from another boot is discarded.
    pub boot_id: String,
    /// Who holds the board's settings.
    pub owner: Owner,
    /// Every knob jpower may touch, with its value before jpower's first write.
    pub baseline: Vec<Saved>,
    /// The knobs jpower has written since (their paths): what a restore writes back, so
    /// that a knob it never wrote (the fan its daemon moves, a clock someone else set) is
    /// left as it is. Each is recorded before its first write, so a crash never leaves a
    /// written knob out. Absent in the files of earlier versions: every baseline knob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub touched: Option<Vec<PathBuf>>,
}

impl State {
    /// The baseline of `board` as it is now (`values` are its knobs' current values).
    pub fn baseline(board: &Board, values: &Values, owner: Owner) -> State {
        State {
            version: STATE_VERSION,
            board_key: board.key(),
            model: board.identity.model.clone(),
            root: board.root.dir().to_path_buf(),
            boot_id: crate::support::runtime::boot_id(),
            owner,
            baseline: board
                .knobs
                .iter()
                .zip(values)
                .map(|(k, &value)| Saved {
                    path: k.path.clone(),
                    value,
                })
                .collect(),
            touched: Some(Vec::new()),
        }
    }

    /// Whether a restore writes `path` back.
    fn restores(&self, path: &Path) -> bool {
        self.touched
            .as_ref()
            .is_none_or(|t| t.iter().any(|p| p == path))
    }

    /// The touched knobs of `board` as a mask of knob indices (every knob for a file of an
    /// earlier version).
    pub fn touched_mask(&self, board: &Board) -> u64 {
        board
            .knobs
            .iter()
            .enumerate()
            .filter(|(_, k)| self.restores(&k.path))
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Records the knobs of `board` in `mask` as touched; one the baseline lacks (its
    /// driver bound after the baseline was saved) is saved at its value in `current`.
    pub fn touch(&mut self, board: &Board, mask: u64, current: &Values) {
        let Some(touched) = &mut self.touched else {
            return;
        };
        for (i, k) in board.knobs.iter().enumerate() {
            if mask & 1 << i != 0 && !touched.contains(&k.path) {
                touched.push(k.path.clone());
                if !self.baseline.iter().any(|s| s.path == k.path) {
                    self.baseline.push(Saved {
                        path: k.path.clone(),
                        value: current[i],
                    });
                }
            }
        }
    }

    /// The baseline of the touched knobs as knob values of `board` (the other knobs keep
    /// `current`), and the touched paths `board` does not have. A (min, max) pair put back
    /// on one side only that would cross the other side (`jetson_clocks` raised a min to
    /// the max jpower had raised) takes both its baseline values, which were in order.
    pub fn values(&self, board: &Board, current: &Values) -> (Values, Vec<PathBuf>) {
        let saved = |i: usize| {
            let path = &board.knobs[i].path;
            self.baseline
                .iter()
                .find(|s| &s.path == path)
                .map(|s| s.value)
        };
        let mut v = current.clone();
        let mut unknown = Vec::new();
        for s in self.baseline.iter().filter(|s| self.restores(&s.path)) {
            match board.knobs.iter().position(|k| k.path == s.path) {
                Some(i) => v[i] = s.value,
                None => unknown.push(s.path.clone()),
            }
        }
        for (min, max) in super::plan::pairs(board) {
            if v[min] > v[max] {
                if let (Some(lo), Some(hi)) = (saved(min), saved(max)) {
                    (v[min], v[max]) = (lo, hi);
                }
            }
        }
        super::plan::make_ordered(board, &mut v);
        (v, unknown)
    }
}

/// State-file errors.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state, journal or lock file could not be read or written.
    #[error("state file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Another process held the board's lock for longer than the wait.
    #[error("another jpower process (pid {pid}) controls this board; if it is the agent, go through it (--socket)")]
    Busy {
        /// The holder's pid, as its lock file says (empty if unreadable).
        pid: String,
    },
    /// Another process holds the board's knob lock: a jpower given another runtime
    /// directory, or another program locking the knob.
    #[error("another process holds a write lock on {} (`grep OFDLCK /proc/locks` names it): \
             a jpower agent or command given another runtime directory (--runtime-dir, \
             JPOWER_RUNTIME_DIR) controls this board: go through it, or stop it", knob.display())]
    BusyElsewhere {
        /// The knob file locked.
        knob: PathBuf,
    },
    /// The state file does not parse.
    #[error("state file {} does not parse ({source}): the board's baseline in it is lost; \
             move the file aside, and the board stays as it is until a mode is set or the \
             board reboots", path.display())]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The state file is of a layout this jpower does not read.
    #[error("state file {} is of layout version {found}, this jpower reads {STATE_VERSION}: \
             restore with the jpower that wrote it, or move the file aside", path.display())]
    Version {
        /// The state file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
}

impl StateError {
    /// Whether the state file itself is unreadable as a state (not the file system): what
    /// a command that only reads reports and goes on.
    pub fn unreadable_state(&self) -> bool {
        matches!(
            self,
            StateError::Corrupt { .. } | StateError::Version { .. }
        )
    }
}

/// The files of one board's state.
#[derive(Debug, Clone)]
pub struct StatePaths {
    /// `<runtime>/state/<board-key>.json`, the baseline and its owner.
    pub state: PathBuf,
    /// `<runtime>/state/<board-key>.overlay.json`, a temporary change on top of a held
    /// state (a `watch` lowering the sensors' averaging over a `jpower set` mode): its
    /// owner and the values to put back, as a [`State`].
    pub overlay: PathBuf,
    /// `<runtime>/state/<board-key>.journal`, the transaction journal.
    pub journal: PathBuf,
    /// `<runtime>/state/<board-key>.lock`, the lock file a controlling process holds.
    pub lock: PathBuf,
}

impl StatePaths {
    /// Paths for `board_key` in `runtime_dir`.
    pub fn new(runtime_dir: &Path, board_key: &str) -> StatePaths {
        let dir = runtime_dir.join("state");
        StatePaths {
            state: dir.join(format!("{board_key}.json")),
            overlay: dir.join(format!("{board_key}.overlay.json")),
            journal: dir.join(format!("{board_key}.journal")),
            lock: dir.join(format!("{board_key}.lock")),
        }
    }

    /// Reads the state file, if there is one.
    pub fn load(&self) -> Result<Option<State>, StateError> {
        load(&self.state)
    }

    /// Writes the state file atomically: temp file, fsync, rename, fsync the directory.
    pub fn save(&self, state: &State) -> Result<(), StateError> {
        save(&self.state, state)
    }

    /// Removes the state file, any overlay on it, and the journal.
    pub fn remove(&self) -> Result<(), StateError> {
        remove(&[&self.overlay, &self.state, &self.journal])
    }

    /// Reads the overlay, if there is one.
    pub fn load_overlay(&self) -> Result<Option<State>, StateError> {
        load(&self.overlay)
    }

    /// Writes the overlay as the state file is written.
    pub fn save_overlay(&self, overlay: &State) -> Result<(), StateError> {
        save(&self.overlay, overlay)
    }

    /// Removes the overlay.
    pub fn remove_overlay(&self) -> Result<(), StateError> {
        remove(&[&self.overlay])
    }
}

/// An exclusive claim on a board by one jpower process (`flock`, released when the
/// process exits, however it exits), so that two processes never interleave switches or
/// mistake each other's switch in flight for a crash.
///
/// Two locks: the lock file in the runtime directory, which names its holder's pid, and an
/// open-file-description write lock on one of the board's writable knob files, which two
/// processes given different runtime directories still share (a review ran two agents on
/// one board that way: each undid the other's modes). A write lock needs the file open for
/// writing, so only those who may write the board can hold it (a lock on the board's root
/// directory, the first try, let any local user shut jpower out).
#[derive(Debug)]
pub struct BoardLock {
    _file: File,
    _board: Option<File>,
}

impl BoardLock {
    /// Takes the lock of a board through the lock file at `path` and the knob file at
    /// `knob` (the host path of one it may write, if any), waiting up to `wait` for
    /// another process to finish.
    pub fn acquire(
        path: &Path,
        knob: Option<&Path>,
        wait: std::time::Duration,
    ) -> Result<BoardLock, StateError> {
        let io = |source| StateError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            make_dir(dir, STATE_DIR_MODE).map_err(io)?;
        }
        let file = open_private(path, STATE_FILE_MODE, false).map_err(io)?;
        let deadline = std::time::Instant::now() + wait;
        if !lock_until(&file, deadline, flock_now).map_err(io)? {
            let holder = std::fs::read_to_string(path).unwrap_or_default();
            return Err(StateError::Busy {
                pid: holder.trim().to_string(),
            });
        }
        let _ = file.set_len(0);
        let _ = file.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0);
        // A knob this process cannot open for writing is no knob it would write.
        let board = knob.and_then(|k| std::fs::OpenOptions::new().write(true).open(k).ok());
        if let (Some(b), Some(knob)) = (&board, knob) {
            let locked =
                lock_until(b, deadline, write_lock_now).map_err(|source| StateError::Io {
                    path: knob.to_path_buf(),
                    source,
                })?;
            if !locked {
                return Err(StateError::BusyElsewhere {
                    knob: knob.to_path_buf(),
                });
            }
        }
        Ok(BoardLock {
            _file: file,
            _board: board,
        })
    }
}

/// Tries `lock` on `file` until `deadline`; whether it took it.
fn lock_until(
    file: &File,
    deadline: std::time::Instant,
    lock: fn(&File) -> io::Result<bool>,
) -> io::Result<bool> {
    loop {
        if lock(file)? {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// An exclusive `flock` on `file`, if free now.
fn flock_now(file: &File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own; released when the file closes.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

/// An open-file-description write lock on the whole of `file` (open for writing), if free
/// now; released when the file closes.
fn write_lock_now(file: &File) -> io::Result<bool> {
    use nix::fcntl::{fcntl, FcntlArg};
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is plain old data; zeroed is a valid value, filled in below.
    let mut whole: libc::flock = unsafe { std::mem::zeroed() };
    whole.l_type = libc::F_WRLCK as _;
    whole.l_whence = libc::SEEK_SET as _;
    match fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&whole)) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The pid its lock file names, when another process holds the board lock at `path` now
/// (a look that takes the lock for an instant when it is free, as a reader may: it never
/// waits, and a process that wants the lock waits for it anyway).
pub fn lock_holder(path: &Path) -> Option<String> {
    use std::os::fd::AsRawFd;
    let file = File::open(path).ok()?;
    // SAFETY: flock on a descriptor we own; released when the file closes, at once.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if free {
        return None;
    }
    Some(
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .trim()
            .to_string(),
    )
}

fn io_error(path: &Path, source: io::Error) -> StateError {
    StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads the state at `path`, if there is one.
fn load(path: &Path) -> Result<Option<State>, StateError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let st: State =
                serde_json::from_slice(&bytes).map_err(|source| StateError::Corrupt {
                    path: path.to_path_buf(),
                    source,
                })?;
            if st.version != STATE_VERSION {
                return Err(StateError::Version {
                    path: path.to_path_buf(),
                    found: st.version,
                });
            }
            Ok(Some(st))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Writes `state` at `path` atomically: temp file, fsync, rename, fsync the directory.
fn save(path: &Path, state: &State) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    make_dir(dir, STATE_DIR_MODE).map_err(|e| io_error(path, e))?;
    let tmp = path.with_extension("json.tmp");
    let bytes =
        serde_json::to_vec_pretty(state).map_err(|e| io_error(path, io::Error::other(e)))?;
    let write = || -> io::Result<()> {
        let f = open_private(&tmp, STATE_FILE_MODE, true)?;
        f.write_all_at(&bytes, 0)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| io_error(path, e))
}

/// Removes the files of `paths` that exist.
fn remove(paths: &[&Path]) -> Result<(), StateError> {
    for p in paths {
        match std::fs::remove_file(p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_error(p, e)),
            _ => {}
        }
    }
    Ok(())
}

const MAGIC: &[u8; 4] = b"JPJ1";
/// Offsets in the journal record.
const STATE_AT: usize = 4;
const STATS_END: usize = 24;
const HEADER: usize = 48;
const RECORD: usize = HEADER + 8 * MAX_KNOBS;

/// An unfinished switch found in a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// Values of every knob before the switch.
    pub prior: Values,
    /// Whether the record matches this board's knob layout (else restore the baseline).
    pub layout_matches: bool,
}

/// Switch timing kept in the journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Time of the last switch, request to verified, nanoseconds.
    pub last_ns: u64,
    /// Switches since the baseline was saved.
    pub count: u64,
}

/// The transaction journal, opened once.
#[derive(Debug)]
pub struct Journal {
    file: File,
    layout: u64,
    seq: u64,
    stats: SwitchStats,
}

impl Journal {
    /// Opens (creating) the journal of a board whose knob layout hashes to `layout`.
    pub fn open(path: &Path, layout: u64) -> io::Result<(Journal, Option<Unfinished>)> {
        if let Some(dir) = path.parent() {
            make_dir(dir, STATE_DIR_MODE)?;
        }
        let file = open_private(path, STATE_FILE_MODE, false)?;
        let (seq, stats, unfinished) = Journal::parse(&file, layout)?;
        Ok((
            Journal {
                file,
                layout,
                seq,
                stats,
            },
            unfinished,
        ))
    }

    /// Reads the journal at `path` without opening it for writing (a missing journal is an
    /// empty one): what a command that only reads reports.
    pub fn peek(path: &Path, layout: u64) -> io::Result<(SwitchStats, Option<Unfinished>)> {
        match File::open(path) {
            Ok(file) => Journal::parse(&file, layout).map(|(_, stats, u)| (stats, u)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((SwitchStats::default(), None)),
            Err(e) => Err(e),
        }
    }

    /// The sequence number, the switch timing and the unfinished switch of a journal file.
    fn parse(file: &File, layout: u64) -> io::Result<(u64, SwitchStats, Option<Unfinished>)> {
        let mut rec = [0u8; RECORD];
        let n = file.read_at(&mut rec, 0)?;
        if n != RECORD || &rec[..4] != MAGIC || checksum(&rec) != u32_at(&rec, 44) {
            return Ok((0, SwitchStats::default(), None));
        }
        let stats = SwitchStats {
            last_ns: u64_at(&rec, 8),
            count: u64_at(&rec, 16),
        };
        let unfinished = (u32_at(&rec, STATE_AT) == 1).then(|| {
            let count = (u32_at(&rec, 40) as usize).min(MAX_KNOBS);
            Unfinished {
                prior: (0..count).map(|i| u64_at(&rec, HEADER + 8 * i)).collect(),
                layout_matches: u64_at(&rec, 32) == layout,
            }
        });
        Ok((u64_at(&rec, 24), stats, unfinished))
    }

    /// Switch timing recorded so far.
    pub fn stats(&self) -> SwitchStats {
        self.stats
    }

    /// Marks a switch in flight, saving `prior` (one `pwrite`).
    pub fn begin(&mut self, prior: &Values) -> io::Result<()> {
        self.seq += 1;
        let mut rec = [0u8; RECORD];
        rec[..4].copy_from_slice(MAGIC);
        put_u32(&mut rec, STATE_AT, 1);
        put_u64(&mut rec, 8, self.stats.last_ns);
        put_u64(&mut rec, 16, self.stats.count);
        put_u64(&mut rec, 24, self.seq);
        put_u64(&mut rec, 32, self.layout);
        put_u32(&mut rec, 40, prior.len() as u32);
        for (i, v) in prior.iter().enumerate() {
            put_u64(&mut rec, HEADER + 8 * i, *v);
        }
        let sum = checksum(&rec);
        put_u32(&mut rec, 44, sum);
        write_all(&self.file, &rec, 0)
    }

    /// Marks the switch finished, recording its time (one `pwrite`).
    pub fn commit(&mut self, elapsed_ns: Option<u64>) -> io::Result<()> {
        if let Some(ns) = elapsed_ns {
            self.stats.last_ns = ns;
            self.stats.count += 1;
        }
        let mut head = [0u8; STATS_END - STATE_AT];
        put_u32(&mut head, 0, 0);
        put_u64(&mut head, 8 - STATE_AT, self.stats.last_ns);
        put_u64(&mut head, 16 - STATE_AT, self.stats.count);
        write_all(&self.file, &head, STATE_AT as u64)
    }
}

fn write_all(file: &File, bytes: &[u8], at: u64) -> io::Result<()> {
    let n = file.write_at(bytes, at)?;
    if n == bytes.len() {
        Ok(())
    } else {
        file.write_all_at(&bytes[n..], at + n as u64)
    }
}

/// FNV-1a over the record except the in-flight flag, the stats and the checksum itself.
fn checksum(rec: &[u8; RECORD]) -> u32 {
    let parts = [&rec[..STATE_AT], &rec[24..44], &rec[HEADER..]];
    let h = parts
        .iter()
        .flat_map(|p| p.iter())
        .fold(0x811c_9dc5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
    h
}

fn u32_at(rec: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&rec[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(rec: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&rec[at..at + 8]);
    u64::from_le_bytes(b)
}

fn put_u32(rec: &mut [u8], at: usize, v: u32) {
    rec[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(rec: &mut [u8], at: usize, v: u64) {
    rec[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A hash of a board's knob paths, so a journal is only replayed on the same layout.
pub fn layout_hash(board: &Board) -> u64 {
    let mut h = crate::support::hash::Fnv64::default();
    for k in &board.knobs {
        h.write(k.path.to_string_lossy().as_bytes()).write(&[0]);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by a review: an agent in a PID namespace recorded pid 1, which on the host is
    /// init, alive: its crash was never recovered, and a restarted agent given the dead
    /// one's pid took its state for its own. The start time tells the processes apart.
    #[test]
    fn an_owner_is_its_pid_and_start_time_and_older_files_still_load() {
        let me = Owner::new(OwnerKind::Agent, std::process::id(), "jpower agent");
        assert!(me.start.is_some() && !me.crashed());
        let namesake = Owner {
            start: me.start.map(|s| s + 1),
            ..me.clone()
        };
        assert!(namesake.crashed());
        let older: Owner =
            serde_json::from_str(r#"{"kind": "agent", "pid": 1, "name": "jpower agent"}"#).unwrap();
        assert_eq!(older.start, None);
        assert!(
            !older.crashed(),
            "pid 1 lives, and nothing says it is another"
        );
    }

    /// Found by a review: the lock lived in the runtime directory alone, so two agents
    /// given different runtime directories both controlled one board, each undoing the
    /// other's modes. The board's own directory is locked too.
    #[test]
    fn one_board_has_one_controller_whatever_the_runtime_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("max_freq");
        std::fs::write(&path, "1\n").unwrap();
        let knob = Some(path.as_path());
        let wait = std::time::Duration::from_millis(60);
        assert_eq!(lock_holder(&dir.path().join("a/b.lock")), None, "no file");
        let first = BoardLock::acquire(&dir.path().join("a/b.lock"), knob, wait).unwrap();
        // What `status` says of an unfinished switch: one in progress, by its holder.
        let pid = std::process::id().to_string();
        assert_eq!(lock_holder(&dir.path().join("a/b.lock")), Some(pid.clone()));
        let same = BoardLock::acquire(&dir.path().join("a/b.lock"), knob, wait).unwrap_err();
        assert!(
            matches!(&same, StateError::Busy { pid: p } if *p == pid),
            "{same}"
        );
        let other = BoardLock::acquire(&dir.path().join("c/b.lock"), knob, wait).unwrap_err();
        assert!(matches!(other, StateError::BusyElsewhere { .. }), "{other}");
        assert!(other.to_string().contains("another runtime directory"));
        // The knob's lock needs it open for writing: a reader cannot take it (a review
        // found any local user able to flock the board's root directory, shutting jpower
        // out), so a knob this process cannot write is no lock.
        let reader = File::open(&path).unwrap();
        assert!(
            write_lock_now(&reader).is_err(),
            "a read-only descriptor takes no write lock"
        );
        drop(first);
        assert_eq!(lock_holder(&dir.path().join("a/b.lock")), None, "free");
        BoardLock::acquire(&dir.path().join("c/b.lock"), knob, wait).unwrap();
    }

    #[test]
    fn journal_round_trip_and_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, none) = Journal::open(&path, 7).unwrap();
        assert_eq!(none, None);
        let prior: Values = [1, 2, 3].into_iter().collect();
        j.begin(&prior).unwrap();
        let (_, found) = Journal::open(&path, 7).unwrap();
        assert_eq!(
            found,
            Some(Unfinished {
                prior: prior.clone(),
                layout_matches: true
            })
        );
        let (_, other_layout) = Journal::open(&path, 8).unwrap();
        assert!(!other_layout.unwrap().layout_matches);
        j.commit(Some(1234)).unwrap();
        let (j2, none) = Journal::open(&path, 7).unwrap();
        assert_eq!(none, None);
        assert_eq!(
            j2.stats(),
            SwitchStats {
                last_ns: 1234,
                count: 1
            }
        );
    }

    #[test]
    fn a_torn_record_is_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, _) = Journal::open(&path, 7).unwrap();
        j.begin(&[5u64, 6].into_iter().collect()).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_at(&[0xff], HEADER as u64).unwrap();
        let (_, found) = Journal::open(&path, 7).unwrap();
        assert_eq!(found, None);
    }
}
