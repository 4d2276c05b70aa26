//! `jpower agent`: the one process that owns the board.
//!
//! ```text
//!  main thread: recovery, default mode, sampler; then waits for SIGTERM/SIGINT (and
//!  pings the systemd watchdog)
//!    ├─ accept thread (ipc::server): one thread per client, at most `max_clients`,
//!    │  answered through the Handler in `connection`
//!    ├─ tick thread (100 ms): lease expiry and holder death, changes behind jpower's
//!    │  back, the budget guard
//!    ├─ schedule thread (`schedule`): the real-time scheduler's turns, its queue and
//!    │  gates on crossbeam channels, phase modes switched through the core
//!    ├─ metrics threads, when configured (`metrics`): energy counters and textfile,
//!    │  HTTP `GET /metrics`
//!    └─ sampler + thermal threads (telemetry), writing the ring
//!  board state: Core behind one mutex, never held across socket I/O; what only reads
//!  the ring (telemetry, subscriptions, minibatch markers) never takes it
//! ```
//!
//! On SIGTERM/SIGINT it restores what session leases hold, removes the socket and exits 0.
//! Its state file names it as owner: if it is killed, the next start (or
//! `ExecStopPost=jpower restore`) restores the board.

pub mod config;
mod connection;
pub use connection::activity_reply;
mod core;
pub mod guard;
pub mod metrics;
pub mod schedule;
mod sensors;

pub use config::Config;

use crate::board::ina3221;
use crate::board::Board;
use crate::control::preset::Presets;
use crate::control::state::{Owner, OwnerKind};
use crate::control::Controller;
use crate::ipc::server::{self, Server};
use crate::telemetry::sampler::SamplerConfig;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Who may control: root, the agent's own user, and members of the control group.
#[derive(Debug, Clone)]
pub struct Access {
    control_gid: Option<u32>,
    own_uid: u32,
}

/// The default of `read_group` and `control_group`, which a machine without jpower's
/// package (a laptop running a simulated board) may lack: then nobody but root and the
/// agent's user is let in, as documented.
const DEFAULT_GROUP: &str = "jpower";

/// A `read_group` or `control_group` the configuration names but the system lacks is an
/// error with the file and line: the socket would otherwise stay in root's group and
/// refuse every client the integrator meant to let in.
///
/// So is a `read_group` the agent cannot give its socket and ring to (`chown` needs the
/// group among its own, or root).
fn check_groups(config: &config::Config) -> anyhow::Result<()> {
    for (key, group) in [
        ("read_group", &config.read_group),
        ("control_group", &config.control_group),
    ] {
        if group == DEFAULT_GROUP {
            continue;
        }
        let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
            return Err(config.error_at(key, format!("no group {group:?} on this system")));
        };
        let own = nix::unistd::getgroups().unwrap_or_default();
        let (euid, egid) = (nix::unistd::geteuid(), nix::unistd::getegid());
        if key == "read_group" && !may_give_to(g.gid, euid.is_root(), egid, &own) {
            return Err(config.error_at(
                key,
                format!(
                    "the agent (uid {euid}) is not in group {group:?}, so cannot give its socket \
                     and ring to it: add its user to the group (with jpower.service, a drop-in \
                     with SupplementaryGroups={group})"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether a process (root or not, of effective group `egid` and supplementary groups
/// `own`) may give its files to group `gid`.
fn may_give_to(
    gid: nix::unistd::Gid,
    root: bool,
    egid: nix::unistd::Gid,
    own: &[nix::unistd::Gid],
) -> bool {
    root || egid == gid || own.contains(&gid)
}

impl Access {
    /// Access for `control_group` (a group that does not exist grants nothing).
    pub fn new(control_group: &str) -> Access {
        Access {
            control_gid: nix::unistd::Group::from_name(control_group)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw()),
            own_uid: nix::unistd::getuid().as_raw(),
        }
    }

    /// Whether a peer may control. `SO_PEERCRED` gives only the primary gid (and
    /// `SO_PEERGROUPS` needs kernel 4.13, newer than L4T 32's 4.9), so supplementary
    /// groups come from `/proc/PID/status`.
    pub fn may_control(&self, pid: u32, uid: u32, gid: u32) -> bool {
        if uid == 0 || uid == self.own_uid {
            return true;
        }
        let Some(cg) = self.control_gid else {
            return false;
        };
        gid == cg || supplementary_groups(pid).contains(&cg)
    }
}

fn supplementary_groups(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// What every thread shares.
pub struct Shared {
    /// The board's state; shared with the scheduler's thread, which switches phase modes.
    core: Arc<Mutex<core::Core>>,
    /// The ring the sampler writes now, read without the core's lock.
    pub ring: sensors::CurrentRing,
    /// The ring's path, as `status` and `telemetry` report it.
    pub ring_path: String,
    /// Who may control.
    pub access: Access,
    /// When the tick last completed (`CLOCK_MONOTONIC` ns): the watchdog's proof of life.
    pub last_tick: AtomicU64,
    /// Every connection's ended minibatches, summed (`minibatch_totals`).
    pub minibatch_totals: Mutex<crate::ipc::protocol::MinibatchTotalsReply>,
    /// The real-time scheduler (`schedule_*` requests).
    pub schedule: schedule::Scheduler,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, core::Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the agent runs on, as the caller found it: the configuration, the discovered
/// board (real, a `--root` tree or a simulated one: the agent cannot tell), its presets,
/// the runtime directory, and the socket path given on the command line.
#[derive(Debug)]
pub struct Options {
    /// The agent's configuration.
    pub config: Config,
    /// The discovered board.
    pub board: Board,
    /// The board's nvpmodel presets (`None` without an nvpmodel file).
    pub presets: Option<Presets>,
    /// Where state files, the telemetry ring and, by default, the socket live.
    pub runtime_dir: PathBuf,
    /// The socket given on the command line (`None`: the configuration's, else
    /// `<runtime-dir>/jpower.sock`).
    pub socket: Option<PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGTERM and SIGINT a request to stop (restore, remove the socket, exit 0) and a
/// vanished client an EPIPE instead of a kill. Called before the agent does anything, so
/// a signal at any instant of its start is a clean stop once setup is done.
pub fn handle_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_stop as *const () as libc::sighandler_t) };
    }
    // SAFETY: ignoring SIGPIPE changes no memory; writes to a closed socket return EPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// The socket path: `--socket`, else the config's, else `<runtime-dir>/jpower.sock`.
pub fn socket_path(explicit: Option<&Path>, config: &Config, runtime_dir: &Path) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| config.socket.clone())
        .unwrap_or_else(|| runtime_dir.join("jpower.sock"))
}

/// Tells systemd (`Type=notify`) something, if it is listening: `NOTIFY_SOCKET` is a path,
/// or with a leading `@` a name in the abstract namespace (as `sd_notify(3)` takes it).
fn sd_notify(msg: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let addr = match path.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(&path),
    };
    if let (Ok(sock), Ok(addr)) = (UnixDatagram::unbound(), addr) {
        let _ = sock.send_to_addr(msg.as_bytes(), &addr);
    }
}

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(opts: Options) -> Result<()> {
    let Options {
        config,
        board,
        presets,
        runtime_dir,
        socket,
    } = opts;
    for w in &board.warnings {
        log::warn!("{w}");
    }
    let owner = Owner::agent();
    let mut controller = Controller::open(board, &runtime_dir, owner.clone())?;
    // The configuration's checks against the board come before the agent writes anything,
    // the held state's owner included (a review found the averaging written, or a mode
    // held by `jpower set` handed to an agent that then exited on a bad name).
    if config.budget_total == config::BudgetTotal::Input
        && controller.board().totals.input.is_none()
    {
        return Err(config.error_at(
            "budget_total",
            "\"input\", but this board has no input rail (its module power is the sum of its rails): use \"module\"",
        ));
    }
    let default_error = |e: anyhow::Error| {
        let name = config.default_mode.as_deref().unwrap_or_default();
        config.error_at("default_mode", format!("{name:?}: {e:#}"))
    };
    if let Some(name) = &config.default_mode {
        core::default_target(
            controller.board(),
            presets.as_ref(),
            name,
            controller.current(),
        )
        .map_err(default_error)?;
    }
    // A mode left by `jpower set` (or a stopped agent's persistent lease) is held as a
    // persistent lease below and stays its holder's: it outlives a crash of the agent, and
    // a start that fails on a later check (found by review: a bad `sampler_cpu` at a
    // watchdog restart gave the board its baseline). A state of any other owner becomes
    // the agent's: if the agent dies, it is restored.
    let left = controller.state().map(|s| s.owner.clone());
    if left
        .as_ref()
        .is_some_and(|o| !matches!(o.kind, OwnerKind::Agent | OwnerKind::Cli))
    {
        controller.set_state_owner(owner);
    }
    let left_mode = left.filter(|o| o.kind == OwnerKind::Cli);
    let has_averaging = controller
        .board()
        .knobs
        .iter()
        .any(|k| matches!(k.kind, crate::board::KnobKind::InaSamples(_)));
    if config.sensor_averaging != "keep" && !has_averaging {
        log::warn!(
            "sensor_averaging = {:?} ignored: this board's sensors have no averaging setting (an IIO board's refresh is fixed)",
            config.sensor_averaging
        );
    }
    let rate = config.sample_rate_hz;
    let period_us = (1e6 / rate.unwrap_or(1000.0)) as u32;
    let averaging = match config.sensor_averaging.as_str() {
        "keep" => None,
        "auto" => Some(ina3221::averaging_target(
            controller.board(),
            controller.current(),
            period_us,
        )),
        // A count, validated when the configuration was read.
        n => Some(ina3221::averaging_count_target(
            controller.board(),
            controller.current(),
            n.parse().unwrap_or(512),
        )),
    };
    // The metrics address first: once the socket accepts, every listener is up.
    let metrics_listener =
        metrics::Metrics::bind(&config).map_err(|e| config.error_at("metrics_listen", e))?;
    check_groups(&config)?;
    if let Some(cpu) = config.sampler_cpu {
        crate::telemetry::sampler::check_cpu(cpu).map_err(|e| config.error_at("sampler_cpu", e))?;
    }
    let socket = socket_path(socket.as_deref(), &config, &runtime_dir);
    let mode = config.socket_mode_bits();
    if mode & 0o060 != 0o060 {
        log::warn!(
            "socket_mode {:04o} lacks the group's read and write: members of {} cannot connect (only root and the agent's user can)",
            mode,
            config.read_group
        );
    }
    let listener = server::bind(&socket, mode, &config.read_group)?;

    // Telemetry starts after the sensor settings so the ring knows the refresh.
    let cfg = SamplerConfig {
        rate_hz: rate,
        rt_priority: config.rt_priority,
        cpu: config.sampler_cpu,
        activity_hz: config.activity_rate_hz,
        activity_window_ms: config.activity_window_ms,
        ..SamplerConfig::default()
    };
    if let Some(t) = averaging.clone().filter(|t| t != controller.current()) {
        controller.apply_values(&t)?;
        match config.sensor_averaging.as_str() {
            "auto" => log::warn!(
                "set INA3221 averaging for {:.0} Hz: {}",
                rate.unwrap_or(1000.0),
                ina3221::NOISE_NOTE
            ),
            n => log::info!("set INA3221 averaging to {n} conversions (sensor_averaging)"),
        }
    }
    let sensors = sensors::Sensors::start(
        controller.board(),
        controller.current(),
        &crate::telemetry::ring_path(&runtime_dir, &controller.board().key()),
        cfg,
        &config.read_group,
    )?;
    let ring = sensors.ring().clone();
    let ring_path = sensors.path().display().to_string();
    let mut core = core::Core::new(controller, presets, config.clone(), sensors);
    if let (None, Some(name)) = (&left_mode, &config.default_mode) {
        core.apply_default(name).map_err(default_error)?;
    }
    let own_averaging = averaging.is_some();
    if let Some(v) = averaging {
        // The sensor setting is the agent's own request from now on.
        let mut requested = core.controller.current().clone();
        for (i, k) in core.controller.board().knobs.iter().enumerate() {
            if matches!(
                k.kind,
                crate::board::KnobKind::InaSamples(_)
                    | crate::board::KnobKind::InaUpdateInterval(_)
            ) {
                requested[i] = v[i];
            }
        }
        core.apply_own(requested)?;
    }
    // After the agent's own sensor setting, which the left mode's end keeps.
    if let Some(by) = &left_mode {
        core.adopt_left_mode(by, config.default_mode.as_deref(), own_averaging)
            .map_err(default_error)?;
    }
    let core = Arc::new(Mutex::new(core));
    let schedule = schedule::Scheduler::start(core.clone())?;
    let shared = Arc::new(Shared {
        core,
        schedule,
        ring,
        ring_path,
        access: Access::new(&config.control_group),
        last_tick: AtomicU64::new(crate::support::clock::monotonic_ns()),
        minibatch_totals: Mutex::default(),
    });

    let stop = Arc::new(AtomicBool::new(false));
    let limits = server::Limits {
        max_clients: config.max_clients,
        idle: (config.idle_timeout_ms > 0).then(|| Duration::from_millis(config.idle_timeout_ms)),
    };
    let metrics = metrics::Metrics::start(shared.clone(), metrics_listener, &config, stop.clone())?;
    let server = Server::start(listener, shared.clone(), limits, stop.clone())?;
    let ticker = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::Builder::new()
            .name("jpower-tick".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    shared.lock().tick();
                    shared
                        .last_tick
                        .store(crate::support::clock::monotonic_ns(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?
    };

    log::info!(
        "serving {} on {}",
        shared.lock().controller.board().identity.model,
        socket.display()
    );
    sd_notify("READY=1");
    let watchdog = std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|us| Duration::from_micros(us / 2));
    let mut since_ping = Duration::ZERO;
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        since_ping += Duration::from_millis(50);
        // Only a ticking agent feeds the watchdog: a wedged one gets restarted.
        let ticking = crate::support::clock::monotonic_ns()
            .saturating_sub(shared.last_tick.load(Ordering::Relaxed))
            < 2_000_000_000;
        if ticking && watchdog.is_some_and(|w| since_ping >= w) {
            sd_notify("WATCHDOG=1");
            since_ping = Duration::ZERO;
        }
    }
    sd_notify("STOPPING=1");
    log::info!("stopping");
    stop.store(true, Ordering::Relaxed);
    server.join();
    if let Some(m) = metrics {
        m.join();
    }
    let _ = ticker.join();
    shared.schedule.stop();
    shared.lock().shutdown();
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Gid;

    /// Found by an integrator's review: a `read_group` the agent's user was not in left
    /// the socket in the agent's group with a warning, and every reader refused.
    #[test]
    fn only_root_and_members_may_give_their_files_to_a_group() {
        let (readers, own) = (Gid::from_raw(1234), Gid::from_raw(999));
        assert!(!may_give_to(readers, false, own, &[Gid::from_raw(5)]));
        assert!(may_give_to(
            readers,
            false,
            own,
            &[Gid::from_raw(5), readers]
        ));
        assert!(may_give_to(readers, false, readers, &[]));
        assert!(may_give_to(readers, true, own, &[]));
    }
}
