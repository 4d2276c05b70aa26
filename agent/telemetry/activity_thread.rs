//! The activity thread: reads the board's counters every period (50 Hz by default) and
//! publishes each [`Activity`](super::activity::Activity) record in the ring's activity
//! section. It allocates nothing after it starts.

use super::activity::{effective_window_ns, Window};
use super::ring::{monotonic_ns, RingWriter};
use crate::board::counters::{Counters, RawCounters};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The running activity thread.
#[derive(Debug)]
pub struct ActivityThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ActivityThread {
    /// Starts reading `counters` every `period` into `ring`'s activity section, over
    /// `window` (cut to 63 periods).
    pub fn start(
        mut counters: Counters,
        ring: Arc<RingWriter>,
        period: Duration,
        window: Duration,
    ) -> std::io::Result<ActivityThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let window_ns = effective_window_ns(period, window);
        let mut win = Window::new(window_ns, counters.cpu_count(), counters.disks.len());
        let thread = std::thread::Builder::new()
            .name("jpower-activity".into())
            .spawn(move || {
                let mut raw = RawCounters::default();
                let mut n = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    let t = monotonic_ns();
                    counters.read(&mut raw);
                    ring.publish_activity(n, &win.push(t, &raw));
                    n += 1;
                    let spent = Duration::from_nanos(monotonic_ns().saturating_sub(t));
                    std::thread::sleep(period.saturating_sub(spent));
                }
            })?;
        Ok(ActivityThread {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ActivityThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
