//! A named thread that runs a task every period until it is dropped: the thermal watcher
//! and the activity thread are both one. The task's own time counts against the period,
//! so a 20 ms task period stays 20 ms; dropping the handle stops the loop and joins it.

use super::ring::monotonic_ns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The running thread; dropping it stops and joins it.
#[derive(Debug)]
pub struct Periodic {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts a thread named `name` running `task` every `period`.
    pub fn start(
        name: &str,
        period: Duration,
        mut task: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    let t = monotonic_ns();
                    task();
                    let spent = Duration::from_nanos(monotonic_ns().saturating_sub(t));
                    std::thread::sleep(period.saturating_sub(spent));
                }
            })?;
        Ok(Periodic {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
