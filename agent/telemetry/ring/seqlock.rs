//! The ring's sequence lock, alone: one writer publishes numbered samples into a slot
//! guarded by a sequence word, any number of readers copy them out, and no one waits.
//! The writer never loops; a reader returns only a whole sample, or says it must retry
//! or that the sample was overwritten.
//!
//! The protocol is Boehm's ("Can seqlocks get along with programming language memory
//! models?", MSPC 2012): the writer stores `2n + 1` (relaxed), a release fence, the
//! payload (relaxed), then `2n + 2` (release); a reader loads the word (acquire), the
//! payload (relaxed), an acquire fence, and the word again (relaxed), and keeps the copy
//! only if both loads saw `2n + 2`. The reader's acquire load is a relaxed load and an
//! acquire fence, which orders the same: readers map the ring read-only, and atomic loads
//! on read-only memory are sound only relaxed.
//!
//! The code is generic over [`SeqWord`], a shim over the atomics, so that `loom`
//! model-checks this exact code with its own atomics (`RUSTFLAGS="--cfg loom" cargo test
//! --lib seqlock`, as `.ci/run` does) while the ring uses the standard ones.

use std::sync::atomic::Ordering;

/// The sequence word and the fence of one atomics implementation.
pub trait SeqWord {
    /// Loads the word.
    fn load(&self, order: Ordering) -> u64;
    /// Stores the word.
    fn store(&self, value: u64, order: Ordering);
    /// A fence of this implementation.
    fn fence(order: Ordering);
}

impl SeqWord for std::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        self.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.store(value, order)
    }
    fn fence(order: Ordering) {
        std::sync::atomic::fence(order)
    }
}

/// Publishes sample `n`: `payload` stores it (relaxed) while the word says it is being
/// written. Wait-free.
pub fn write<W: SeqWord>(seq: &W, n: u64, payload: impl FnOnce()) {
    // Partner: the reader's second load; odd means being written.
    seq.store(2 * n + 1, Ordering::Relaxed);
    W::fence(Ordering::Release);
    payload();
    // Partner: the reader's first (acquire) load.
    seq.store(2 * n + 2, Ordering::Release);
}

/// What one attempt to read sample `n` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<T> {
    /// The whole sample.
    Whole(T),
    /// The slot holds a newer sample: `n` was overwritten.
    Lost,
    /// The slot was being written (or still holds an older sample): try again.
    Retry,
}

/// Copies sample `n` out with `payload` (relaxed loads), if the slot held it whole
/// throughout.
pub fn read<W: SeqWord, T>(seq: &W, n: u64, payload: impl FnOnce() -> T) -> Read<T> {
    // Partner: the writer's final release store.
    let before = seq.load(Ordering::Relaxed);
    W::fence(Ordering::Acquire);
    let copy = payload();
    W::fence(Ordering::Acquire);
    // Partner: the writer's odd store and the release fence after it.
    let after = seq.load(Ordering::Relaxed);
    let whole = 2 * n + 2;
    match (before, after) {
        (b, a) if b == a && b == whole => Read::Whole(copy),
        (b, a) if b == a && b % 2 == 0 && b > whole => Read::Lost,
        _ => Read::Retry,
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicU32, AtomicU64};
    use loom::sync::Arc;

    impl SeqWord for AtomicU64 {
        fn load(&self, order: Ordering) -> u64 {
            self.load(order)
        }
        fn store(&self, value: u64, order: Ordering) {
            self.store(value, order)
        }
        fn fence(order: Ordering) {
            loom::sync::atomic::fence(order)
        }
    }

    /// One slot: the word and a two-word payload that is whole when `b == 3 a`.
    struct Slot {
        seq: AtomicU64,
        a: AtomicU32,
        b: AtomicU32,
    }

    /// A writer publishes samples 0 and 1 into one slot (so the second overwrites the
    /// first) while a reader reads either: whatever the interleaving, every sample the
    /// reader keeps is whole and is the one it asked for, and the writer finishes.
    #[test]
    fn no_torn_sample_is_ever_returned_and_the_writer_never_waits() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let slot = Arc::new(Slot {
                seq: AtomicU64::new(0),
                a: AtomicU32::new(0),
                b: AtomicU32::new(0),
            });
            let writer = {
                let slot = slot.clone();
                loom::thread::spawn(move || {
                    for n in 0..2u32 {
                        write(&slot.seq, u64::from(n), || {
                            slot.a.store(n + 1, Ordering::Relaxed);
                            slot.b.store(3 * (n + 1), Ordering::Relaxed);
                        });
                    }
                })
            };
            for n in 0..2u64 {
                // Bounded: loom explores each interleaving of these attempts.
                for _ in 0..2 {
                    let got = read(&slot.seq, n, || {
                        (
                            slot.a.load(Ordering::Relaxed),
                            slot.b.load(Ordering::Relaxed),
                        )
                    });
                    match got {
                        Read::Whole((a, b)) => {
                            assert_eq!(u64::from(a), n + 1, "the sample asked for");
                            assert_eq!(b, 3 * a, "never torn");
                            break;
                        }
                        Read::Lost => {
                            assert_eq!(n, 0, "only sample 0 can be overwritten");
                            break;
                        }
                        Read::Retry => loom::thread::yield_now(),
                    }
                }
            }
            writer.join().unwrap();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_reader_sees_whole_lost_or_retry() {
        let seq = AtomicU64::new(0);
        assert_eq!(read(&seq, 0, || ()), Read::Retry, "not written yet");
        write(&seq, 0, || ());
        assert_eq!(read(&seq, 0, || 7), Read::Whole(7));
        write(&seq, 1, || ());
        assert_eq!(read(&seq, 0, || 7), Read::Lost, "overwritten by sample 1");
        seq.store(2 * 2 + 1, Ordering::Relaxed);
        assert_eq!(read(&seq, 2, || 7), Read::Retry, "being written");
    }
}
