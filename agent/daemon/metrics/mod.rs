//! Prometheus metrics from the agent, off by default: served over HTTP (`metrics_listen`)
//! and/or written for node_exporter's textfile collector (`metrics_textfile`).
//!
//! ```text
//!  jpower-metrics-energy thread (1 s): energy counters <- ring samples since last time
//!      │                                 every metrics_textfile_interval_ms: textfile
//!  jpower-metrics thread: accept; one thread per connection (at most 8): GET /metrics
//!      └─ both render a Snapshot (at most once per MIN_RENDER_INTERVAL, shared): the
//!         core's state (its lock, briefly), the ring's newest sample and header
//!         counters, the energy counters
//! ```
//!
//! The sampler is untouched: everything here reads the ring from threads of its own, as
//! any reader does, and renders at most every [`MIN_RENDER_INTERVAL`] however fast the
//! scrapes come. README "Prometheus metrics" lists the metrics and their units.

pub mod energy;
pub mod exposition;
pub mod http;
pub mod textfile;

use super::{Config, Shared};
use energy::EnergyCounters;
use exposition::Snapshot;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the energy counters take in the ring's new samples: well inside the ring's
/// span (65,536 slots, over a minute at 1 kHz), so no sample is ever bridged in practice.
const ENERGY_TICK: Duration = Duration::from_secs(1);

/// How often the energy thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// The metrics outputs could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listening address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("metrics: could not start a thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The least time between two renders of the exposition: scrapes closer together (a
/// flood, or several scrapers at once) share the last one, so that however fast they come
/// they take at most a render's CPU time every this often from the sampler's cores.
pub const MIN_RENDER_INTERVAL: Duration = Duration::from_millis(100);

/// What the exposition is made from: the agent's shared state (the sampler's counts over
/// every ring included) and the energy counters; and the last render.
struct Source {
    shared: Arc<Shared>,
    energy: Mutex<EnergyCounters>,
    rendered: Mutex<Option<(Instant, Vec<u8>)>>,
}

impl Source {
    /// The exposition now (energy brought up to the ring's newest sample first), or the
    /// one rendered within [`MIN_RENDER_INTERVAL`]. One render at a time: a scrape that
    /// comes during one waits for it and takes it.
    fn exposition(&self) -> Result<Vec<u8>, prometheus::Error> {
        let mut last = self.rendered.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, bytes)) = &*last {
            if at.elapsed() < MIN_RENDER_INTERVAL {
                return Ok(bytes.clone());
            }
        }
        let bytes = exposition::render(&self.snapshot())?;
        *last = Some((Instant::now(), bytes.clone()));
        Ok(bytes)
    }

    fn snapshot(&self) -> Snapshot {
        // The ring in use now: the agent starts a new one when the sensors' averaging
        // changes, and the counters carry on from its first sample.
        let ring = self.shared.ring.get();
        let energy = {
            let mut e = self.energy.lock().unwrap_or_else(|p| p.into_inner());
            e.advance(&ring);
            e.clone()
        };
        let (status, clusters_offline, preset, guard_caps, guard_steps, guard_blind) = {
            let core = self.shared.lock();
            (
                core.board_status(),
                core.clusters_offline(),
                core.preset(),
                core.guard().caps_in_force(),
                core.guard().steps(),
                core.guard_blind(),
            )
        };
        let [samples, overruns, read_errors] = self.shared.ring.totals();
        Snapshot {
            status,
            clusters_offline,
            preset,
            guard_caps,
            guard_steps,
            guard_blind,
            rails: ring.info.rails.iter().map(|r| r.name.clone()).collect(),
            latest: ring.latest(),
            now_ns: crate::support::clock::monotonic_ns(),
            energy,
            target_rate_hz: match ring.info.period_ns {
                0 => 0.0,
                p => 1e9 / p as f64,
            },
            samples,
            overruns,
            read_errors,
            zones: ring.zones(),
            throttle: ring.throttle(),
            activity: match (&ring.info.activity, ring.activity()) {
                (Some(info), Some(a)) => Some(super::connection::activity_reply(
                    info,
                    &a,
                    crate::support::clock::monotonic_ns(),
                )),
                _ => None,
            },
        }
    }
}

/// The running outputs.
#[derive(Debug)]
pub struct Metrics {
    energy: JoinHandle<()>,
    responder: Option<http::Responder>,
    textfile: Option<PathBuf>,
}

impl Metrics {
    /// Binds `metrics_listen`, where the configuration names one: before the agent
    /// serves anything, so that a scraper can connect once the agent is up.
    pub fn bind(config: &Config) -> Result<Option<TcpListener>, MetricsError> {
        config
            .metrics_listen
            .map(|addr| {
                TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })
            })
            .transpose()
    }

    /// Starts the outputs (`None` when the configuration asks for neither): serving
    /// `listener` (from [`Metrics::bind`]) and writing `metrics_textfile`, until `stop` is
    /// set.
    pub fn start(
        shared: Arc<Shared>,
        listener: Option<TcpListener>,
        config: &Config,
        stop: Arc<AtomicBool>,
    ) -> Result<Option<Metrics>, MetricsError> {
        if listener.is_none() && config.metrics_textfile.is_none() {
            return Ok(None);
        }
        let source = Arc::new(Source {
            shared,
            energy: Mutex::new(EnergyCounters::default()),
            rendered: Mutex::new(None),
        });
        let responder = match listener {
            Some(listener) => {
                let source = source.clone();
                let body = move || source.exposition().map_err(|e| e.to_string());
                Some(http::Responder::start(listener, body, stop.clone())?)
            }
            None => None,
        };
        let textfile = config.metrics_textfile.clone();
        let every = Duration::from_millis(config.metrics_textfile_interval_ms);
        let energy = {
            let textfile = textfile.clone();
            std::thread::Builder::new()
                .name("jpower-metrics-energy".into())
                .spawn(move || tick(&source, textfile.as_deref(), every, &stop))?
        };
        Ok(Some(Metrics {
            energy,
            responder,
            textfile,
        }))
    }

    /// Waits for the threads to see the stop flag, and removes the textfile so that
    /// node_exporter stops serving the values of an agent that is gone.
    pub fn join(self) {
        let _ = self.energy.join();
        if let Some(r) = self.responder {
            r.join();
        }
        if let Some(path) = self.textfile {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    log::warn!("metrics textfile {}: not removed: {e}", path.display())
                }
                _ => {}
            }
        }
    }
}

/// The energy thread: counters every [`ENERGY_TICK`], the textfile every `every`. A
/// textfile that cannot be written is logged when it starts failing and when it recovers.
fn tick(source: &Source, textfile: Option<&std::path::Path>, every: Duration, stop: &AtomicBool) {
    let (mut next_energy, mut next_write) = (Instant::now(), Instant::now());
    let mut failing = false;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        match textfile {
            Some(path) if now >= next_write => {
                next_write = now + every;
                next_energy = now + ENERGY_TICK;
                let written = source
                    .exposition()
                    .map_err(|e| format!("metrics textfile {}: {e}", path.display()))
                    .and_then(|b| textfile::write(path, &b).map_err(|e| e.to_string()));
                match &written {
                    Err(e) if !failing => log::warn!("{e}"),
                    Ok(()) if failing => {
                        log::info!("metrics textfile {}: written again", path.display())
                    }
                    _ => {}
                }
                failing = written.is_err();
            }
            _ if now >= next_energy => {
                next_energy = now + ENERGY_TICK;
                let mut e = source.energy.lock().unwrap_or_else(|p| p.into_inner());
                e.advance(&source.shared.ring.get());
            }
            _ => {}
        }
        std::thread::sleep(STOP_POLL);
    }
}
