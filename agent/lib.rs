//! jpower: power-mode control and power telemetry for NVIDIA Jetson boards.
pub mod runtime;
pub mod sim;
pub mod sysfs;
pub mod units;
