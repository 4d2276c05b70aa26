//! The activity thread: reads the board's counters every period (50 Hz by default) and
//! publishes each [`Activity`](super::activity::Activity) record in the ring's activity
//! section. It allocates nothing after it starts.

use super::activity::{effective_window_ns, Window};
use super::periodic::Periodic;
use super::ring::RingWriter;
use crate::board::counters::{Counters, RawCounters};
use crate::support::clock::monotonic_ns;
use std::sync::Arc;
use std::time::Duration;

/// Starts reading `counters` every `period` into `ring`'s activity section, over `window`
/// (cut to 63 periods); the thread runs until the handle is dropped.
pub fn start(
    mut counters: Counters,
    ring: Arc<RingWriter>,
    period: Duration,
    window: Duration,
) -> std::io::Result<Periodic> {
    let window_ns = effective_window_ns(period, window);
    let mut win = Window::new(window_ns, counters.cpu_count(), counters.disks.len());
    let mut raw = RawCounters::default();
    let mut n = 0u64;
    Periodic::start("jpower-activity", period, move || {
        counters.read(&mut raw);
        ring.publish_activity(n, &win.push(monotonic_ns(), &raw));
        n += 1;
    })
}
