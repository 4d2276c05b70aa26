//! The runtime directory and the few facts of the host jpower needs: its boot id and
//! whether a process is still alive.
//!
//! The runtime directory holds the state files, the simulated boards and (later) the
//! socket and telemetry ring. It is `--runtime-dir DIR`, else `JPOWER_RUNTIME_DIR`, else
//! `/run/jpower` when that is writable, or when an agent answers on its socket there (the
//! agent's home on a board, which the package makes 0750 for the group `jpower`: its
//! members reach the agent there though they cannot write to it, and everything they do
//! goes through it), else `$XDG_RUNTIME_DIR/jpower` for an unprivileged user on a laptop. What must outlive a
//! reboot (a board's measured profile) goes to the state directory ([`state_dir`]).

use std::path::{Path, PathBuf};

/// The system-wide runtime directory on a board.
pub const SYSTEM_RUNTIME_DIR: &str = "/run/jpower";
/// The kernel's boot id of the host (not of `--root`: state belongs to this boot).
const HOST_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Picks the runtime directory (see the module doc).
pub fn runtime_dir(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_path_buf();
    }
    if let Some(dir) = std::env::var_os("JPOWER_RUNTIME_DIR") {
        return PathBuf::from(dir);
    }
    let system = Path::new(SYSTEM_RUNTIME_DIR);
    // Decided once a process: a command asks many times, and each answer costs a connection.
    static SYSTEM_IS_OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SYSTEM_IS_OURS.get_or_init(|| writable(system) || answers(&system.join("jpower.sock"))) {
        return system.to_path_buf();
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(xdg) => PathBuf::from(xdg).join("jpower"),
        None => std::env::temp_dir().join(format!("jpower-{}", nix::unistd::getuid())),
    }
}

/// Why the board itself may not be written with its state in `chosen`, where the default
/// choice fell back from the package's `system` directory (there, but neither writable by
/// this user nor served by an agent: a member of the knobs' group with the agent stopped).
/// The baseline and lock would be private: the agent would take the mode for the board's
/// baseline, its unit's crash restore and the package's `jpower restore` would not undo
/// it, and two controllers could hold the board at once.
pub fn hidden_state(chosen: &Path, system: &Path) -> Option<String> {
    (chosen != system && system.is_dir()).then(|| {
        format!(
            "{} is this board's runtime directory (its state and lock), which you cannot write, and no agent answers you there: start the agent (systemctl start jpower) and go through it (its socket's group, or read_group/control_group, must take you in), or run as root or the agent's user",
            system.display()
        )
    })
}

/// Whether `dir` exists and is writable, or could be created.
fn writable(dir: &Path) -> bool {
    let probe = if dir.exists() {
        dir
    } else {
        dir.parent().unwrap_or(dir)
    };
    nix::unistd::access(probe, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Whether an agent accepts a connection on `socket` (one this caller may connect to: a
/// stale socket, or one of another group, does not count).
fn answers(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

/// Makes `dir` (and the directories missing above it, as `create_dir_all` does), `dir`
/// itself with exactly `mode` (not narrowed by the umask: the agent's unit sets 0007,
/// which would keep a `read_group` other than its own out of the telemetry directory) and
/// [`adopt`]ed.
pub fn make_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
        Ok(()) => {
            // Changed through a descriptor of the directory just made, never through a
            // link put in its place.
            let made = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(dir)?;
            made.set_permissions(std::fs::Permissions::from_mode(mode))?;
            adopt(&made, dir)
        }
    }
}

/// Opens the file at `path` in the runtime directory for reading and writing, creating it
/// with `mode` (emptied with `truncate`), never through a symbolic link: whoever owns the
/// directory could plant one for root to write, and [`adopt`], through. The file is
/// [`adopt`]ed.
pub fn open_private(path: &Path, mode: u32, truncate: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    adopt(&file, path)?;
    Ok(file)
}

/// Hands `file`, which this process opened at `path`, to the owner of the directory it
/// lies in, when this process is root and that directory is another user's: what `sudo
/// jpower set` leaves in the agent's runtime directory beside a stopped agent, the agent
/// (running as its own user) must be able to write when it starts. Through the
/// descriptor, so never to whatever a link at `path` names.
pub fn adopt(file: &std::fs::File, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let owner = std::fs::metadata(parent)?;
    if owner.uid() == 0 {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, Some(owner.uid()), Some(owner.gid()))
}

/// The system-wide state directory on a board (what survives a reboot: board profiles).
pub const SYSTEM_STATE_DIR: &str = "/var/lib/jpower";

/// Picks the state directory, where measured board profiles are kept:
/// `JPOWER_STATE_DIR`, else `/var/lib/jpower` when writable or already there, else
/// `$XDG_STATE_HOME/jpower`, else `~/.local/state/jpower`.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("JPOWER_STATE_DIR") {
        return PathBuf::from(dir);
    }
    let system = Path::new(SYSTEM_STATE_DIR);
    if system.is_dir() || writable(system) {
        return system.to_path_buf();
    }
    let nonempty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty());
    match (nonempty("XDG_STATE_HOME"), nonempty("HOME")) {
        (Some(xdg), _) => PathBuf::from(xdg).join("jpower"),
        (None, Some(home)) => PathBuf::from(home).join(".local/state/jpower"),
        (None, None) => {
            std::env::temp_dir().join(format!("jpower-state-{}", nix::unistd::getuid()))
        }
    }
}

/// The host's boot id; empty if the kernel does not provide one.
pub fn boot_id() -> String {
    std::fs::read_to_string(HOST_BOOT_ID)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether process `pid` exists (a zombie counts as dead).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => !is_zombie(pid),
        Err(_) => false,
    }
}

/// When process `pid` started, in clock ticks after boot (`/proc/PID/stat`'s 22nd field):
/// with its pid, what tells it from a later process given the same pid.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces and parentheses) start at
    // the third, the state.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether the process that had pid `pid` and started at `start` (where known) is alive:
/// a live process with that pid that started at another time is another process.
pub fn same_process_alive(pid: u32, start: Option<u64>) -> bool {
    // Only a start time read and found different is another process: one that cannot be
    // read now (a transient error, a /proc mounted hidepid) is no evidence of death.
    process_alive(pid) && start.is_none_or(|s| start_time(pid).is_none_or(|now| now == s))
}

/// Whether process `pid` has exited and waits for its parent. Its state is `Z` then, but
/// so is that of a live process whose main thread exited while others run
/// (`pthread_exit`; a review found such a client's connections closed as dead): that one
/// has more than one thread. A file that cannot be read is no zombie.
fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The fields after the command name start at the third, the state; the 20th is the
    // thread count.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let zombie = fields.next() == Some("Z");
    let threads: u64 = fields.nth(20 - 4).and_then(|t| t.parse().ok()).unwrap_or(1);
    zombie && threads <= 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live agent's socket is one to go to; a stale one (its agent gone) or none is not.
    #[test]
    fn only_a_socket_an_agent_answers_on_counts() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("jpower.sock");
        assert!(!answers(&socket));
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(answers(&socket));
        drop(listener);
        assert!(socket.exists() && !answers(&socket));
    }

    /// Found by an integrator's review: a member of the knobs' group, with the agent
    /// stopped, `jpower set` the board with its baseline saved in a private directory.
    #[test]
    fn the_board_is_not_written_with_its_state_hidden_from_the_package() {
        let top = tempfile::tempdir().unwrap();
        let (system, private) = (top.path().join("run"), top.path().join("private"));
        // No package on this host: the private directory is the board's.
        assert_eq!(hidden_state(&private, &system), None);
        std::fs::create_dir(&system).unwrap();
        let e = hidden_state(&private, &system).expect("refused");
        assert!(e.contains("start the agent"), "{e}");
        assert_eq!(hidden_state(&system, &system), None);
    }

    #[test]
    fn a_made_directory_has_its_mode_whatever_the_umask_and_roots_files_go_to_the_owner() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let top = tempfile::tempdir().unwrap();
        // SAFETY: umask has no preconditions; the test puts the old mask back.
        let old = unsafe { libc::umask(0o077) };
        let made = make_dir(&top.path().join("a/state"), 0o750);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        made.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&top.path().join("a/state")), 0o750);
        if !nix::unistd::geteuid().is_root() {
            eprintln!("notice: not root, so no file is handed to another owner here");
            return;
        }
        // A runtime directory that belongs to the agent's user: what root makes in it is
        // the agent's.
        let agents = top.path().join("run");
        std::fs::create_dir(&agents).unwrap();
        std::os::unix::fs::chown(&agents, Some(4321), Some(4322)).unwrap();
        make_dir(&agents.join("state"), 0o750).unwrap();
        let file = agents.join("state/board.journal");
        open_private(&file, 0o640, false).unwrap();
        for p in [agents.join("state"), file] {
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!((m.uid(), m.gid()), (4321, 4322), "{}", p.display());
        }
        // A link planted where a file will be is not written, nor handed over, through.
        let victim = top.path().join("victim");
        std::fs::write(&victim, b"root's").unwrap();
        let lock = agents.join("state/board.lock");
        std::os::unix::fs::symlink(&victim, &lock).unwrap();
        assert!(open_private(&lock, 0o640, true).is_err());
        let m = std::fs::metadata(&victim).unwrap();
        assert_eq!(
            (m.uid(), std::fs::read(&victim).unwrap()),
            (0, b"root's".to_vec())
        );
    }

    #[test]
    fn a_process_is_its_pid_and_its_start_time() {
        let me = std::process::id();
        let start = start_time(me);
        assert!(start.is_some_and(|s| s > 0), "{start:?}");
        assert!(same_process_alive(me, start));
        assert!(same_process_alive(me, None));
        assert!(!same_process_alive(me, start.map(|s| s + 1)));
    }

    /// A child that exited and was not waited for is dead; a process whose main thread
    /// exited while another runs is alive, though its state reads `Z` too.
    #[test]
    fn a_zombie_is_dead_and_a_process_without_its_main_thread_is_not() {
        use std::process::Command;
        let mut zombie = Command::new("true").spawn().unwrap();
        let leader_gone = Command::new("python3")
            .args(["-c", "import ctypes, threading, time\nthreading.Thread(target=time.sleep, args=(3,)).start()\nctypes.CDLL(None).pthread_exit(None)"])
            .spawn();
        std::thread::sleep(std::time::Duration::from_millis(1000));
        assert!(!process_alive(zombie.id()), "a zombie");
        zombie.wait().unwrap();
        match leader_gone {
            Ok(mut p) => {
                assert!(process_alive(p.id()), "threads run on");
                p.wait().unwrap();
            }
            Err(e) => println!("python3 not run ({e}): the leader-exit half skipped"),
        }
    }

    #[test]
    fn this_process_is_alive_and_a_bogus_one_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }

    #[test]
    fn explicit_dir_wins() {
        assert_eq!(runtime_dir(Some(Path::new("/x"))), PathBuf::from("/x"));
    }
}
