//! A declared arrival rate as requests: Poisson arrivals (exponential gaps from a fixed
//! seed, as `predict::fulcrum::interleave` draws them), each due at its own instant, for
//! clients that declare a rate instead of submitting requests. The scheduler's thread waits
//! [`Arrivals::due_in`] at most, so an arrival makes no timer of its own (no allocation).

use crate::support::clock::monotonic_ns;
use crate::support::rng::SplitMix64;
use std::time::{Duration, Instant};

/// The seed of the gaps.
const SEED: u64 = 0xF01C_A7E5;

/// The declared rate and its next arrival.
#[derive(Debug)]
pub struct Arrivals {
    rate_per_s: Option<f64>,
    next: Option<Instant>,
    gaps: SplitMix64,
}

impl Default for Arrivals {
    fn default() -> Arrivals {
        Arrivals {
            rate_per_s: None,
            next: None,
            gaps: SplitMix64::new(SEED),
        }
    }
}

impl Arrivals {
    /// The arrival after one at `from`, at `rate` per second: `None` (never) where the
    /// gap drawn is beyond what an `Instant` holds, so that no rate can panic the agent.
    fn after(&mut self, from: Instant, rate: f64) -> Option<Instant> {
        let gap = Duration::try_from_secs_f64(-(1.0 - self.gaps.unit()).ln() / rate).ok()?;
        from.checked_add(gap)
    }

    /// Declares `rate_per_s` (`None`: no arrivals of the agent's own); a changed rate
    /// draws its first gap from now.
    pub fn set_rate(&mut self, rate_per_s: Option<f64>) {
        if rate_per_s == self.rate_per_s {
            return;
        }
        self.rate_per_s = rate_per_s;
        self.next = rate_per_s.and_then(|r| self.after(Instant::now(), r));
    }

    /// How long until the next arrival is due: zero once it is, `Duration::MAX` without
    /// one.
    pub fn due_in(&self) -> Duration {
        self.next.map_or(Duration::MAX, |next| {
            next.saturating_duration_since(Instant::now())
        })
    }

    /// The due arrival happened: its time (`CLOCK_MONOTONIC` ns, when it was due even if
    /// the thread saw it late), and the next one drawn.
    pub fn arrived(&mut self) -> u64 {
        let now = Instant::now();
        let due = self.next.unwrap_or(now);
        let at_ns =
            monotonic_ns().saturating_sub(now.saturating_duration_since(due).as_nanos() as u64);
        if let Some(r) = self.rate_per_s {
            self.next = self.after(due, r);
        }
        at_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_rate_comes_due_and_no_rate_never_does() {
        let mut a = Arrivals::default();
        assert_eq!(a.due_in(), Duration::MAX);
        a.set_rate(Some(1000.0));
        let wait = a.due_in();
        assert!(wait < Duration::from_secs(5), "{wait:?}");
        std::thread::sleep(wait);
        assert_eq!(a.due_in(), Duration::ZERO);
        let first = a.arrived();
        assert!(first <= monotonic_ns());
        assert!(a.due_in() < Duration::from_secs(5));
        a.set_rate(None);
        assert_eq!(a.due_in(), Duration::MAX);
    }

    /// Rates whose gaps no `Duration` or `Instant` holds never fire instead of panicking
    /// (the agent aborts on a panic; `check` refuses such rates first).
    #[test]
    fn a_rate_too_slow_to_hold_never_fires() {
        let mut a = Arrivals::default();
        for rate in [1e-300, 1e-20, f64::MIN_POSITIVE] {
            a.set_rate(Some(rate));
            assert_eq!(a.due_in(), Duration::MAX);
        }
    }
}
