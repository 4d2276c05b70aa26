//! jpower's integration tests: one binary driving the library and the real `jpower`
//! binary against simulated boards, exported trees and (when present) the reference
//! material in `../shared`.

mod agent;
mod characterize;
mod cli;
mod discovery;
mod fulcrum;
mod gpu;
mod layers;
mod metrics;
mod nvpmodel;
mod packaging;
mod pagoda;
mod protocol_doc;
mod ring_layout;
mod schedule;
mod switching;
mod telemetry;
mod util;
