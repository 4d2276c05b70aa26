//! jpower: power-mode control and power telemetry for NVIDIA Jetson boards.
//!
//! ```text
//!   cli, daemon ──────┐   one binary: CLI commands and the agent (ipc: its protocol)
//!    │                │
//!    ▼                ▼
//!  preset ◄─ nvpmodel   mode (Mode, ModeSpace, KnobRequest)
//!    │                │
//!    ▼                ▼
//!  control (plan ─► Controller: journal, read-back, rollback, restore; state files)
//!    │
//!    ▼
//!  board (discovery: identity, CPU clusters, GPU devfreq, EMC cap, INA3221 rails)
//!    │
//!    ▼
//!  sysfs (Root + Attr: files opened once, pread/pwrite at offset 0)
//!    │                         │
//!    ▼                         ▼
//!  a real board (`/`)        sim (a board as files + its kernel model below the file layer)
//! ```
//!
//! Beside the control path:
//! - [`telemetry`]: the sampler thread, the shared-memory ring, energy and thermal
//!   watching, fed by the board's rails;
//! - [`daemon`] and [`ipc`]: the agent, its leases and budget guard, and its socket
//!   protocol, all on top of [`control`] and [`telemetry`];
//! - [`profile`], [`predict`], [`optimize`], [`powertrain`]: profiling training workloads
//!   over modes (simulated ones in [`sim::workload`], replayed ones, or live through the
//!   agent: [`live`]), predicting every mode, choosing one;
//! - [`gpu`]: the CUDA kernels through cudarc (probed at run time), their CPU reference,
//!   the built-in CNN, and the time and energy rooflines per mode (a simulated board's GPU
//!   model in [`sim::gpu`]); the measurement lock it holds is [`control::lock`].
//!
//! Everything above [`sysfs`] is the same code on a Jetson, on a tree given with `--root`
//! and on a simulated board. [`runtime`] picks the runtime directory and knows the host's
//! boot id; [`units`] parses and prints frequencies; [`mod@reference`] finds the reference
//! material tests use; [`file_error`] is the error of every parsed file.

pub mod board;
pub mod cli;
pub mod control;
pub mod daemon;
pub mod file_error;
pub mod gpu;
pub mod ipc;
pub mod live;
pub mod mode;
pub mod nvpmodel;
pub mod optimize;
pub mod powertrain;
pub mod predict;
pub mod preset;
pub mod profile;
pub mod reference;
pub mod runtime;
pub mod sim;
pub mod sysfs;
pub mod telemetry;
pub mod units;
