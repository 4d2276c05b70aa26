//! The SIGMETRICS'23 characterisation study's parts that do not depend on who runs it:
//! the records of a sweep and their CSV ([`runs`]), the power modes it runs ([`modes`]),
//! and the real-time path on a board through the agent: the built-in workload's dataset
//! on disk ([`dataset`]), its epoch with real loader threads ([`loader`]) and the runs
//! ([`live`]). The simulated-time sweep is [`crate::sim::characterize`].

pub mod dataset;
pub mod live;
pub mod loader;
pub mod modes;
pub mod runs;
