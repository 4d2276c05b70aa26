//! Ctrl-C and SIGTERM for the commands that change the board and run a while (`watch`,
//! `energy`, `characterize`, `roofline`, `train`, `switch-cost`): the signal sets a flag
//! (and says so on stderr); the command stops at its next look at it and puts the board
//! back as it does on any error. A second signal ends the process at once (a step that hangs). `energy` has a
//! SIGTERM passed on to the command it runs.

use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set by SIGINT and SIGTERM.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The command `energy` runs, while it runs (0: none): a SIGTERM is passed on to it.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Release: pairs with the Acquire load of `interrupted`.
    if INTERRUPTED.swap(true, Ordering::AcqRel) {
        // SAFETY: signal(2) and raise(3) are async-signal-safe: the default action ends
        // the process as the signal would have without the handler.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return;
    }
    // Said at once (found by review: a sweep's first Ctrl-C showed nothing until its run
    // ended, and a second then ended it silently). errno is kept for the code the signal
    // interrupted.
    const SAID: &[u8] = b"\njpower: stopping (a second signal ends at once)\n";
    // SAFETY: __errno_location and write(2) are async-signal-safe; the buffer is static,
    // and errno is this thread's.
    unsafe {
        let errno = *libc::__errno_location();
        libc::write(libc::STDERR_FILENO, SAID.as_ptr().cast(), SAID.len());
        *libc::__errno_location() = errno;
    }
    let pid = CHILD.load(Ordering::Relaxed);
    if sig == libc::SIGTERM && pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; the pid is our own running child's.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn catch() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only touches atomics and calls kill(2), both
        // async-signal-safe.
        unsafe { sigaction(s, &action) }.with_context(|| format!("catching {s}"))?;
    }
    Ok(())
}

/// Whether a SIGINT or SIGTERM came since [`catch`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Acquire)
}

/// An error once interrupted, for a command's loop to stop on, `?` taking it through the
/// same path that puts the board back after any error.
pub fn check() -> Result<()> {
    anyhow::ensure!(
        !interrupted(),
        "interrupted (SIGINT or SIGTERM): stopped before the end"
    );
    Ok(())
}

/// Passes a later SIGTERM on to process `pid` (0: to none).
pub fn forward_sigterm_to(pid: u32) {
    CHILD.store(i32::try_from(pid).unwrap_or(0), Ordering::Relaxed);
}
