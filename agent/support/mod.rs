//! What every layer leans on and nothing else: frequency units, the runtime directory
//! and the host's boot id, the host's clocks, a stable hash, CSV text, the error of every
//! parsed file, where reference material lives, the log-log panels of jpower's plots
//! (drawn by plotters), and the page-cache residency of a dataset; in tests, an allocator
//! that counts.

#[cfg(test)]
pub mod alloc_count;
pub mod clock;
pub mod csv_text;
pub mod file_error;
pub mod hash;
pub mod plot;
pub mod reference;
pub mod residency;
pub mod rng;
pub mod runtime;
pub mod units;
