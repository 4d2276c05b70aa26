//! The host's clocks as jpower reads them: `CLOCK_MONOTONIC` (every timestamp in the ring
//! and on the wire), the offset of `CLOCK_REALTIME` from it, and a thread's CPU time. Read
//! through the vDSO, without a system call.

/// `CLOCK_MONOTONIC` now, nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, nanoseconds.
pub fn realtime_offset_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread, nanoseconds (`CLOCK_THREAD_CPUTIME_ID`: to the
/// nanosecond, where `getrusage` counts scheduler ticks, which a thread waking at 1 kHz
/// meets in step).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) as u64
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; these clocks always exist
    // on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}
