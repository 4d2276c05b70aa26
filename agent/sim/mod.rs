//! Simulated boards: a Jetson as files plus a kernel model, first-class wherever a real
//! board is.
//!
//! A simulated board lives in `<runtime-dir>/sim/<board>-<release>/`: `root/` is its tree
//! (what `--root` would see on a real board), `kernel.json` its kernel's private state,
//! `boot_id` the host boot it belongs to (a host reboot reboots it). Every jpower process
//! opening the same board sees the same state. [`spec`] says what each board is, [`tree`]
//! lays it out, [`kernel`] is its driver behaviour, [`power`] its physics,
//! [`nvpconf`] its nvpmodel file, [`workload`] its training workloads (with, opt-in, their
//! data path in [`datapath`]) and [`inference`] its
//! DNN inference (both made profiling sources in [`sources`]) and [`gpu`] its GPU's
//! performance on the roofline kernels;
//! [`settle`] how long its knobs take to settle after a write;
//! [`concurrent`] trains and serves inference at once on one GPU (Fulcrum's problem);
//! [`characterize`] sweeps the SIGMETRICS'23 study's configurations over its data path;
//! [`truth`] writes profiles of boards modelled unlike all of this, to test predictors on.

pub mod characterize;
pub mod concurrent;
pub mod datapath;
pub mod gpu;
pub mod inference;
pub mod kernel;
pub mod nvpconf;
pub mod power;
pub mod settle;
pub mod sources;
pub mod spec;
pub mod tree;
pub mod truth;
pub mod workload;

/// Assertions of the calibration tests, which print what they measured.
#[cfg(test)]
pub(crate) mod check {
    /// Asserts `got` is within `tol` (relative) of `want`.
    pub fn near(name: &str, got: f64, want: f64, tol: f64) {
        println!("{name}: {got:.3} (target {want}, tol {:.0}%)", tol * 100.0);
        assert!((got - want).abs() <= tol * want, "{name}: {got} vs {want}");
    }

    /// Asserts `got` lies in `lo..=hi`.
    pub fn within(name: &str, got: f64, lo: f64, hi: f64) {
        println!("{name}: {got:.3} (range {lo}..{hi})");
        assert!((lo..=hi).contains(&got), "{name}: {got} not in {lo}..{hi}");
    }
}

use crate::board::sysfs::Root;
use kernel::{Fault, LoadState, SimKernel};
use spec::BoardSpec;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors opening or exporting a simulated board.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No such board.
    #[error("unknown simulated board {0:?} (known: {known})", known = spec::names())]
    UnknownBoard(String),
    /// The board's files could not be laid out or read.
    #[error("simulated board {board} at {}: {source}", dir.display())]
    Io {
        /// The board's id (`orin-agx@r35`).
        board: String,
        /// The directory of its files.
        dir: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Export refuses to write into a non-empty directory.
    #[error("{} exists and is not empty; export writes into a new or empty directory", .0.display())]
    NotEmpty(PathBuf),
}

/// An open simulated board.
#[derive(Debug, Clone)]
pub struct SimBoard {
    spec: &'static BoardSpec,
    dir: PathBuf,
    kernel: Arc<SimKernel>,
}

impl SimBoard {
    /// Opens board `id` (`orin-agx`, `orin-agx@r36`, ...) in `runtime_dir`, creating it at
    /// its boot state if it does not exist yet or belongs to an earlier host boot.
    pub fn open(id: &str, runtime_dir: &Path) -> Result<SimBoard, SimError> {
        let spec = spec::find(id).ok_or_else(|| SimError::UnknownBoard(id.to_string()))?;
        let dir = runtime_dir
            .join("sim")
            .join(format!("{}-{}", spec.name, spec.release.tag()));
        let io = |source| SimError::Io {
            board: spec.id(),
            dir: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join("lock"))
            .map_err(io)?;
        let kernel = Arc::new(SimKernel::new(
            spec,
            dir.join("root"),
            dir.join("kernel.json"),
            lock,
        ));
        let board = SimBoard {
            spec,
            dir: dir.clone(),
            kernel,
        };
        board.boot_if_needed().map_err(io)?;
        Ok(board)
    }

    fn boot_if_needed(&self) -> std::io::Result<()> {
        let boot = crate::support::runtime::boot_id();
        let stamp = self.dir.join("boot_id");
        let booted = std::fs::read_to_string(&stamp).map(|s| s.trim() == boot);
        if booted.unwrap_or(false) && self.dir.join("root").exists() {
            return Ok(());
        }
        let root = self.dir.join("root");
        if root.exists() {
            std::fs::remove_dir_all(&root)?;
        }
        let _ = std::fs::remove_file(self.dir.join("kernel.json"));
        tree::lay_out(self.spec, &root)?;
        self.kernel.boot_record()?;
        std::fs::write(stamp, format!("{boot}\n"))
    }

    /// What the board is.
    pub fn spec(&self) -> &'static BoardSpec {
        self.spec
    }

    /// The board's files with its kernel model below them.
    pub fn root(&self) -> Root {
        Root::modelled(self.dir.join("root"), self.kernel.clone())
    }

    /// The directory holding the board.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets what the board is busy with; the rails follow at the next sensor refresh.
    pub fn set_load(&self, load: LoadState) -> std::io::Result<()> {
        self.kernel.set_load(load)
    }

    /// One online core busy and the rest idle: what the CPU reference of the built-in
    /// training workload does to the board while it runs on the host.
    pub fn set_one_core_busy(&self) -> std::io::Result<()> {
        let cores = self.operating()?.online_cores.max(1);
        self.set_load(LoadState {
            cpu: 1.0 / f64::from(cores),
            ..LoadState::default()
        })
    }

    /// The running clocks and online cores now.
    pub fn operating(&self) -> std::io::Result<power::Operating> {
        self.kernel.operating()
    }

    /// The noise-free power of every connected rail now, watts (ground truth for tests).
    pub fn true_rail_watts(&self) -> std::io::Result<Vec<f64>> {
        self.kernel.true_rail_watts()
    }

    /// Arms a fault in this process's view of the board (tests of rollback).
    pub fn inject(&self, fault: Fault) {
        self.kernel.inject(fault)
    }
}

/// Writes board `id`'s tree at its boot state into `dest` (new or empty).
pub fn export(id: &str, dest: &Path) -> Result<&'static BoardSpec, SimError> {
    let spec = spec::find(id).ok_or_else(|| SimError::UnknownBoard(id.to_string()))?;
    if std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) {
        return Err(SimError::NotEmpty(dest.to_path_buf()));
    }
    tree::lay_out(spec, dest).map_err(|source| SimError::Io {
        board: spec.id(),
        dir: dest.to_path_buf(),
        source,
    })?;
    Ok(spec)
}
