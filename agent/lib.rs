//! jpower: power-mode control and power telemetry for NVIDIA Jetson boards.
//!
//! The folders are the layers; data flows down, and no module imports one above its own
//! layer (`tests/jpower/layers.rs` holds the table and checks every import):
//!
//! ```text
//!  cli        one module per command; the only layer that chooses a board (and so may
//!    │        name the simulator) and that talks to people
//!  sim        simulated boards: a kernel model below the file layer, and workloads and a
//!    │        GPU model behind the traits the layers above define
//!  predict    profiling over modes (simulated, replayed or live through the agent),
//!    │        predictors, optimisation under a budget, the PowerTrain evaluation, the
//!    │        characterisation study's records and its live runs
//!  gpu        CUDA kernels through cudarc (probed at run time), their CPU reference, the
//!    │        built-in CNN, time and energy rooflines
//!  daemon     the agent: leases, budget guard, configuration, the real-time scheduler
//!    │        of training and inference turns; implements ipc's handler and serves
//!    │        Prometheus metrics (HTTP, node_exporter textfile)
//!    │
//!  ipc        the socket protocol (self-contained wire types), codec, client, server
//!    │
//!  telemetry  the sampler thread, the shared-memory ring, energy, thermal watching
//!    │
//!  control    modes and presets, plans, the Controller (one owner per board under its
//!    │        lock: journal, read-back, rollback, restore), Peek (what the commands that
//!    │        only read see, without the lock), state files, the measurement lock
//!  board      the file layer (sysfs: files opened once, pread/pwrite inside the root),
//!    │        discovery (identity, CPU clusters, GPU devfreq, EMC cap, INA3221 rails and
//!    │        their math), nvpmodel files
//!  support    units, the runtime directory and boot id, file errors, reference material
//! ```
//!
//! Everything above the file layer is the same code on a Jetson, on a tree given with
//! `--root` and on a simulated board, whose kernel model answers the file layer's reads
//! and writes ([`sim`]).

pub mod support;

pub mod board;

pub mod control;

pub mod telemetry;

pub mod ipc;

pub mod daemon;

pub mod gpu;

pub mod predict;

pub mod sim;

pub mod cli;
