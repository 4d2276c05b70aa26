//! A sweep's runs on a board in real time, through the agent: each run's power mode is
//! applied under a session lease (so the agent restores the board when the sweep ends, is
//! interrupted or dies), the built-in workload trains on a real dataset on disk with real
//! loader threads ([`loader`]), each minibatch's fetch and compute phases are marked to
//! the agent, which answers with its energy, and a second connection polls the agent's
//! activity counters for the run's utilisation. The page cache is dropped for the
//! dataset's files alone (`posix_fadvise`, as `vmtouch -e` does: no root needed for clean
//! pages) and checked with `mincore`; where a filesystem ignores that, root drops the
//! whole page cache (`/proc/sys/vm/drop_caches`) and anyone else gets an error saying so.
//! The read throughput is the dataset's block device's, from this machine's
//! `/proc/diskstats`.

use super::dataset::{Dataset, Shape};
use super::loader::{self, EpochError, Marks};
use super::modes::SweepMode;
use super::runs::{Cache, Config, EpochRow, Run};
use crate::board::{counters, paths};
use crate::gpu::net::{Backend, Net};
use crate::ipc::client::{Client, ClientError};
use crate::ipc::codec::Encoding;
use crate::ipc::protocol::{Kind, LeaseKind, ModeRequest, Phase, ReplyBody, RequestBody};
use crate::support::residency;
use crate::support::rng::{hash, SplitMix64};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The learning rate of the built-in CNN's SGD.
const LR: f32 = 0.05;
/// How often the activity counters are polled during a run.
const POLL: Duration = Duration::from_millis(100);
/// The share of a dataset that may stay resident after its pages were dropped.
const DROPPED: f64 = 0.02;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The agent refused a request or the connection failed.
    #[error("{what}: {source}")]
    Agent {
        /// What was asked.
        what: String,
        /// The error.
        source: ClientError,
    },
    /// The epoch failed.
    #[error(transparent)]
    Epoch(#[from] EpochError),
    /// The dataset's cache could not be set up.
    #[error("{path}: {why}")]
    Cache {
        /// The dataset's folder.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// A configuration names a dataset location the sweep lacks.
    #[error("no dataset location named {0:?}")]
    NoLocation(String),
    /// The compute backend could not be set up.
    #[error("compute backend: {0}")]
    Backend(String),
    /// The agent answered a request with a reply of another kind.
    #[error("unexpected reply to {request}: {reply}")]
    Reply {
        /// The request.
        request: &'static str,
        /// The reply, as debug text.
        reply: String,
    },
    /// A `--run` command could not start or failed.
    #[error("the command {command:?} failed: {why}")]
    Command {
        /// The command as run.
        command: String,
        /// Its exit status or the error starting it.
        why: String,
    },
}

/// A dataset location: a name (the `medium` of the rows) and the folder whose pages
/// the cache state is about (the built-in dataset's, or a `--run` command's dataset).
#[derive(Debug, Clone)]
pub struct Location {
    /// Its name.
    pub name: String,
    /// The dataset's folder.
    pub dir: PathBuf,
}

/// What one epoch measured.
struct Measured {
    time_s: f64,
    energy_j: f64,
    /// The time `energy_j` covers, s (a command's minibatches, not its start-up).
    metered_s: f64,
    stall_s: f64,
    compute_s: f64,
}

/// Runs configurations on the agent's board.
pub struct LiveSweep {
    client: Client,
    socket: PathBuf,
    locations: Vec<Location>,
    epochs: u32,
    applied: Option<String>,
    leased: bool,
    settle: Duration,
    next_id: u64,
}

/// The agent's error for `what`.
fn agent(what: &str) -> impl FnOnce(ClientError) -> LiveError + '_ {
    move |source| LiveError::Agent {
        what: what.to_string(),
        source,
    }
}

impl LiveSweep {
    /// A sweep of `epochs` epochs per run over `locations`, through the agent at `socket`.
    pub fn connect(
        socket: &Path,
        locations: Vec<Location>,
        epochs: u32,
    ) -> Result<LiveSweep, LiveError> {
        let (client, _) = Client::connect(socket, Encoding::Bincode, "jpower characterize")
            .map_err(agent("connecting"))?;
        Ok(LiveSweep {
            client,
            socket: socket.to_path_buf(),
            locations,
            epochs,
            applied: None,
            leased: false,
            settle: Duration::ZERO,
            next_id: 1,
        })
    }

    /// Lowers the agent's INA3221 averaging under the sweep's lease until the sensors of
    /// `channels` channels refresh every `refresh_us` or faster, so that a mode's power
    /// shows within two refreshes of a switch (the sweep waits that long) and an epoch
    /// spans many readings. Returns the refresh reached, µs.
    pub fn resolve(&mut self, channels: u32, refresh_us: u32) -> Result<u32, LiveError> {
        let samples = crate::board::ina3221::averaging_for(refresh_us, channels);
        let reply = self
            .client
            .request(RequestBody::SetAveraging { samples })
            .map_err(agent("lowering the INA3221 averaging"))?;
        self.leased = true;
        let ReplyBody::Averaging { refresh_us, .. } = reply else {
            return Err(LiveError::Reply {
                request: "set_averaging",
                reply: format!("{reply:?}"),
            });
        };
        self.settle = Duration::from_micros(2 * u64::from(refresh_us));
        Ok(refresh_us)
    }

    /// Ends the lease: the agent puts back the settings from before the sweep.
    pub fn release(&mut self) -> Result<(), LiveError> {
        self.applied = None;
        if std::mem::take(&mut self.leased) {
            self.client
                .request(RequestBody::Release)
                .map_err(agent("releasing the lease"))?;
        }
        Ok(())
    }

    /// Applies `mode` under the sweep's session lease (nothing when it is applied already).
    fn apply(&mut self, mode: &str) -> Result<(), LiveError> {
        if self.applied.as_deref() == Some(mode) {
            return Ok(());
        }
        let request = match SweepMode::parse(mode) {
            SweepMode::Preset(name) => ModeRequest::Preset { name },
            SweepMode::Pinned(m) => ModeRequest::Knobs {
                cores: Some(m.cores),
                cpu_khz: Some(m.cpu_hz / 1000),
                gpu_hz: Some(m.gpu_hz).filter(|&hz| hz > 0),
                emc_hz: Some(m.emc_hz).filter(|&hz| hz > 0),
                snap: false,
            },
        };
        self.client
            .request(RequestBody::SetMode {
                mode: request,
                lease: LeaseKind::Session,
                timeout_ms: Some(0),
            })
            .map_err(agent(&format!("applying mode {mode}")))?;
        self.applied = Some(mode.to_string());
        self.leased = true;
        // The new mode's power reaches the sensors' readings.
        std::thread::sleep(self.settle);
        Ok(())
    }

    /// Runs `c` with the built-in CNN on `backend`, over the dataset of `shape` at the
    /// location `c` names.
    pub fn run_builtin<B: Backend>(
        &mut self,
        c: &Config,
        shape: Shape,
        backend: B,
    ) -> Result<Run, LiveError> {
        let mut net = Net::new(backend, c.batch as usize, c.seed())
            .map_err(|e| LiveError::Backend(e.to_string()))?;
        let mut next_id = self.next_id;
        let run = self.epochs(c, &mut |client, dir, e| {
            let ds = Dataset {
                dir: dir.to_path_buf(),
                shape,
            };
            let mut order: Vec<u32> = (0..shape.samples).collect();
            SplitMix64::new(hash(c.seed() ^ u64::from(e))).shuffle(&mut order);
            let f = loader::epoch(
                &ds,
                &order,
                c.workers,
                &mut net,
                LR,
                &mut AgentMarks(client),
                next_id,
            )?;
            next_id += f.minibatches;
            Ok(Measured {
                time_s: f.time_s,
                energy_j: f.energy_j.unwrap_or(f64::NAN),
                metered_s: f.time_s,
                stall_s: f.stall_s,
                compute_s: f.compute_s,
            })
        });
        self.next_id = next_id;
        run
    }

    /// Runs `c` as the shell command `template` with its placeholders filled
    /// ([`fill`]), once per epoch: the epoch's time is the command's, its energy, stall
    /// and compute those of the minibatches it marked to the agent meanwhile (from
    /// `minibatch_totals`; absent when it marked none or no phases), and its power their
    /// energy over their time (the command's start-up is not metered).
    pub fn run_command(&mut self, c: &Config, template: &str) -> Result<Run, LiveError> {
        let socket = self.socket.clone();
        self.epochs(c, &mut |client, dir, e| {
            let totals = |client: &mut Client| match client.request(RequestBody::MinibatchTotals) {
                Ok(ReplyBody::MinibatchTotals(t)) => Ok(t.train),
                Ok(other) => Err(LiveError::Reply {
                    request: "minibatch_totals",
                    reply: format!("{other:?}"),
                }),
                Err(source) => Err(LiveError::Agent {
                    what: "reading the minibatch totals".into(),
                    source,
                }),
            };
            let before = totals(client)?;
            let command = fill(template, c, dir, e, &socket);
            let start = std::time::Instant::now();
            let status = std::process::Command::new("sh")
                .args(["-c", &command])
                .env("JPOWER_SOCKET", &socket)
                .stdout(std::io::stderr())
                .status()
                .map_err(|e| LiveError::Command {
                    command: command.clone(),
                    why: e.to_string(),
                })?;
            let time_s = start.elapsed().as_secs_f64();
            if !status.success() {
                return Err(LiveError::Command {
                    command,
                    why: status.to_string(),
                });
            }
            let after = totals(client)?;
            let phased = after.phased > before.phased;
            let marked = after.minibatches > before.minibatches;
            // Said, not left to a NaN in the table (found by review).
            if !marked {
                log::warn!("`{command}` marked no training minibatch through the agent (minibatch_begin/minibatch_end on $JPOWER_SOCKET, kind train): its energy, stall and compute are not measured");
            } else if !phased {
                log::warn!("`{command}` marked no fetch and compute phases (minibatch_phase): its stall and compute are not measured");
            }
            let or_absent = |yes: bool, v: f64| if yes { v } else { f64::NAN };
            Ok(Measured {
                time_s,
                energy_j: or_absent(marked, after.energy_j - before.energy_j),
                metered_s: (after.duration_ms - before.duration_ms) / 1e3,
                stall_s: or_absent(phased, (after.fetch_ms - before.fetch_ms) / 1e3),
                compute_s: or_absent(phased, (after.compute_ms - before.compute_ms) / 1e3),
            })
        })
    }

    /// Applies `c`'s mode and runs its epochs through `epoch` (given the agent's client,
    /// the dataset's folder and the epoch's number), setting up the cache before each and
    /// measuring utilisation, disk throughput and residency around it.
    fn epochs(
        &mut self,
        c: &Config,
        epoch: &mut dyn FnMut(&mut Client, &Path, u32) -> Result<Measured, LiveError>,
    ) -> Result<Run, LiveError> {
        let dir = self
            .locations
            .iter()
            .find(|l| l.name == c.medium)
            .ok_or_else(|| LiveError::NoLocation(c.medium.clone()))?
            .dir
            .clone();
        self.apply(&c.mode)?;
        let device = std::fs::metadata(&dir)
            .map(|m| (libc::major(m.dev()), libc::minor(m.dev())))
            .ok();
        let sectors = || device.and_then(|(ma, mi)| disk_sectors(ma, mi));
        let mut epochs = Vec::new();
        for e in 0..self.epochs {
            let resident = prepare_cache(&dir, c.cache, e == 0)?;
            let before = sectors();
            let poller = Poller::start(&self.socket);
            let m = epoch(&mut self.client, &dir, e);
            let util = poller.stop();
            let m = m?;
            let disk_mb_s = match (before, sectors()) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 * 512.0 / 1e6 / m.time_s,
                _ => f64::NAN,
            };
            epochs.push(EpochRow {
                time_s: m.time_s,
                energy_j: m.energy_j,
                power_w: m.energy_j / m.metered_s,
                stall_s: m.stall_s,
                compute_s: m.compute_s,
                util,
                disk_mb_s,
                resident,
            });
        }
        Ok(Run {
            config: c.clone(),
            epochs,
        })
    }
}

/// `s` quoted for `sh` (single quotes; a single quote inside as `'\''`).
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `template` with its placeholders filled, each value quoted for `sh`: `{bs}` the
/// minibatch size, `{workers}`, `{data}` the dataset's folder, `{mode}`, `{epoch}`,
/// `{repeat}`, `{seed}` and `{socket}` the agent's socket.
pub fn fill(template: &str, c: &Config, data: &Path, epoch: u32, socket: &Path) -> String {
    [
        ("{bs}", c.batch.to_string()),
        ("{workers}", c.workers.to_string()),
        ("{data}", data.display().to_string()),
        ("{mode}", c.mode.clone()),
        ("{epoch}", epoch.to_string()),
        ("{repeat}", c.repeat.to_string()),
        ("{seed}", c.seed().to_string()),
        ("{socket}", socket.display().to_string()),
    ]
    .iter()
    .fold(template.to_string(), |t, (k, v)| t.replace(k, &quoted(v)))
}

/// Sets the dataset's pages up for an epoch; returns the share resident at its start.
/// Dropped: every epoch, its pages dropped and the drop checked. Warm: before a run's
/// first epoch, every file read once.
fn prepare_cache(dir: &Path, cache: Cache, first: bool) -> Result<f64, LiveError> {
    let fail = |why: String| LiveError::Cache {
        path: dir.to_path_buf(),
        why,
    };
    match cache {
        Cache::Dropped => {
            // No pages (empty files) are no pages left.
            let mut left = residency::evict(dir)
                .map_err(|e| fail(format!("dropping its pages: {e}")))?
                .fraction()
                .unwrap_or(0.0);
            if left > DROPPED && nix::unistd::geteuid().is_root() {
                // This filesystem ignores the per-file drop: drop the whole page cache.
                nix::unistd::sync();
                std::fs::write(paths::PROC_DROP_CACHES, "1\n")
                    .map_err(|e| fail(format!("writing {}: {e}", paths::PROC_DROP_CACHES)))?;
                left = residency::measure(dir)
                    .map_err(|e| fail(format!("measuring its residency: {e}")))?
                    .fraction()
                    .unwrap_or(0.0);
            }
            if left > DROPPED {
                return Err(fail(format!(
                    "{:.1}% of the dataset stayed in the page cache after posix_fadvise \
                     (DONTNEED){}: put the dataset on a disk filesystem, or leave the cache warm",
                    left * 100.0,
                    if nix::unistd::geteuid().is_root() {
                        " and drop_caches"
                    } else {
                        "; dropping the whole page cache needs root"
                    }
                )));
            }
            Ok(left)
        }
        Cache::Warm => if first {
            residency::warm(dir)
        } else {
            residency::measure(dir)
        }
        // No pages (empty files) are all warm.
        .map(|r| r.fraction().unwrap_or(1.0))
        .map_err(|e| fail(format!("warming or measuring its pages: {e}"))),
    }
}

/// Sectors read from `major:minor` so far, from this machine's `/proc/diskstats` (the
/// dataset is on this machine, whatever board the agent serves).
fn disk_sectors(major: u32, minor: u32) -> Option<u64> {
    let text = std::fs::read_to_string(paths::PROC_DISKSTATS).ok()?;
    counters::sectors_read(&text, major, minor)
}

/// The markers of the built-in loop, sent to the agent.
struct AgentMarks<'c>(&'c mut Client);

impl Marks for AgentMarks<'_> {
    fn begin(&mut self, id: u64) -> Result<(), String> {
        let kind = Kind::Train;
        self.0
            .request(RequestBody::MinibatchBegin { kind, id })
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn compute(&mut self, id: u64) -> Result<(), String> {
        let (kind, phase) = (Kind::Train, Phase::Compute);
        self.0
            .request(RequestBody::MinibatchPhase { kind, id, phase })
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn end(&mut self, id: u64) -> Result<Option<f64>, String> {
        let kind = Kind::Train;
        match self.0.request(RequestBody::MinibatchEnd { kind, id }) {
            Ok(ReplyBody::PhasedMinibatch(m)) => Ok(Some(m.energy_j)),
            Ok(ReplyBody::Minibatch(m)) => Ok(Some(m.energy_j)),
            Ok(other) => Err(format!("unexpected reply to minibatch_end: {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A thread polling the agent's activity counters on a connection of its own; the means
/// of CPU (over the online CPUs), GPU and EMC utilisation, 0..=1, NaN for a counter never
/// read.
struct Poller {
    stop: std::sync::Arc<AtomicBool>,
    thread: std::thread::JoinHandle<[f64; 3]>,
}

impl Poller {
    fn start(socket: &Path) -> Poller {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (flag, socket) = (stop.clone(), socket.to_path_buf());
        let thread = std::thread::spawn(move || {
            let mut sums = [(0.0, 0u32); 3];
            let Ok((mut c, _)) = Client::connect(&socket, Encoding::Bincode, "jpower activity")
            else {
                return [f64::NAN; 3];
            };
            // Acquire: pairs with the Release store of `stop`.
            while !flag.load(Ordering::Acquire) {
                if let Ok(ReplyBody::Activity(a)) = c.request(RequestBody::Activity) {
                    let online: Vec<f64> = a
                        .cpus
                        .iter()
                        .filter_map(|c| c.util_pm)
                        .map(f64::from)
                        .collect();
                    let cpu = (!online.is_empty())
                        .then(|| online.iter().sum::<f64>() / online.len() as f64);
                    let read = [
                        cpu,
                        a.gpu_load_pm.map(f64::from),
                        a.emc_activity_pm.map(f64::from),
                    ];
                    for (s, v) in sums.iter_mut().zip(read) {
                        if let Some(v) = v {
                            *s = (s.0 + v / 1000.0, s.1 + 1);
                        }
                    }
                }
                std::thread::sleep(POLL);
            }
            sums.map(|(s, n)| if n > 0 { s / f64::from(n) } else { f64::NAN })
        });
        Poller { stop, thread }
    }

    fn stop(self) -> [f64; 3] {
        // Release: pairs with the poller's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or([f64::NAN; 3])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_quoted_for_the_shell() {
        let c = Config {
            mode: "MAXN".into(),
            batch: 32,
            workers: 4,
            medium: "sd".into(),
            cache: Cache::Warm,
            repeat: 1,
        };
        let t = "train --bs {bs} -j {workers} --data {data} --tag {mode}-{epoch}/{repeat} {socket}";
        let got = fill(
            t,
            &c,
            Path::new("/mnt/it's here"),
            2,
            Path::new("/run/j.sock"),
        );
        assert_eq!(
            got,
            r"train --bs '32' -j '4' --data '/mnt/it'\''s here' --tag 'MAXN'-'2'/'1' '/run/j.sock'"
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf %s {}", quoted("a'b $HOME"))])
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"a'b $HOME");
        assert!(
            fill("{seed}", &c, Path::new("/"), 0, Path::new("/")).contains(&c.seed().to_string())
        );
    }
}
