//! A named thread that runs a task every period until it is dropped: the thermal watcher
//! and the activity thread are both one. The task's own time counts against the period,
//! so a 20 ms task period stays 20 ms; dropping the handle wakes the thread at once, even
//! mid-wait, and joins it.

use crate::support::clock::monotonic_ns;
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// The running thread; dropping it stops and joins it.
#[derive(Debug)]
pub struct Periodic {
    /// Dropped to stop the thread: its wait ends as the channel disconnects.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts a thread named `name` running `task` every `period`.
    pub fn start(
        name: &str,
        period: Duration,
        mut task: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let (stop, stopped) = bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                let t = monotonic_ns();
                task();
                let spent = Duration::from_nanos(monotonic_ns().saturating_sub(t));
                match stopped.recv_timeout(period.saturating_sub(spent)) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            })?;
        Ok(Periodic {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    /// Found by a review: a slow period kept the agent from stopping for a whole period
    /// (17 s at 0.05 Hz), the thread asleep until it ended.
    #[test]
    fn dropping_stops_a_long_wait_at_once() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let p = Periodic::start("test-periodic", Duration::from_secs(3600), move || {
            counted.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        while runs.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        drop(p);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(runs.load(Ordering::Relaxed), 1);
    }
}
