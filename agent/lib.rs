//! jpower: power-mode control and power telemetry for NVIDIA Jetson boards.
pub mod board;
pub mod cli;
pub mod control;
pub mod mode;
pub mod nvpmodel;
pub mod preset;
pub mod runtime;
pub mod sim;
pub mod sysfs;
pub mod units;
