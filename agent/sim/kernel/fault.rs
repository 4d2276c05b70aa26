//! Fault injection for tests of rollback and crash recovery: a write that fails, or an
//! abort right after a write, counted from when the fault is armed.

use super::SimKernel;
use std::io;

/// A fault to inject, for tests of rollback and crash recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The `n`-th write from now (1-based) fails with `errno` and changes nothing.
    FailWrite {
        /// Which write from now fails, 1-based.
        n: u64,
        /// The errno it fails with.
        errno: i32,
    },
    /// The process aborts (as if killed) right after the `n`-th write from now.
    AbortAfterWrites {
        /// Which write from now the process aborts after, 1-based.
        n: u64,
    },
}

impl Fault {
    /// Parses `fail-write=N[:ERRNO]` or `abort-after-writes=N` (the `JPOWER_SIM_FAULT`
    /// variable, read when a simulated board is opened).
    pub fn parse(text: &str) -> Option<Fault> {
        let (key, value) = text.trim().split_once('=')?;
        match key {
            "fail-write" => {
                let (n, errno) = match value.split_once(':') {
                    Some((n, e)) => (n.parse().ok()?, errno_from_name(e)?),
                    None => (value.parse().ok()?, libc::EIO),
                };
                Some(Fault::FailWrite { n, errno })
            }
            "abort-after-writes" => Some(Fault::AbortAfterWrites {
                n: value.parse().ok()?,
            }),
            _ => None,
        }
    }
}

fn errno_from_name(name: &str) -> Option<i32> {
    Some(match name {
        "EIO" => libc::EIO,
        "EINVAL" => libc::EINVAL,
        "EBUSY" => libc::EBUSY,
        "EACCES" => libc::EACCES,
        "EPERM" => libc::EPERM,
        other => other.parse().ok()?,
    })
}

/// The armed faults: each with the count of writes (since the kernel opened) it fires at.
#[derive(Debug, Default)]
pub(super) struct Faults {
    writes: u64,
    pending: Vec<(u64, Fault)>,
}

impl Faults {
    /// `fault`, armed from the start.
    pub(super) fn new(fault: Option<Fault>) -> Faults {
        let mut f = Faults::default();
        f.arm(fault.into_iter());
        f
    }

    fn arm(&mut self, faults: impl Iterator<Item = Fault>) {
        for fault in faults {
            let (Fault::FailWrite { n, .. } | Fault::AbortAfterWrites { n }) = fault;
            self.pending.push((self.writes + n, fault));
        }
    }
}

impl SimKernel {
    /// Arms a fault, counted from the next write, beside those already armed.
    pub fn inject(&self, fault: Fault) {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.arm(std::iter::once(fault));
    }

    pub(super) fn count_write(&self, completed: bool) -> io::Result<()> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if !completed {
            f.writes += 1;
            let now = f.writes;
            let fired = f
                .pending
                .iter()
                .position(|&(at, fault)| at == now && matches!(fault, Fault::FailWrite { .. }));
            if let Some(i) = fired {
                if let (_, Fault::FailWrite { errno, .. }) = f.pending.remove(i) {
                    return Err(io::Error::from_raw_os_error(errno));
                }
            }
        } else if f
            .pending
            .iter()
            .any(|&(at, fault)| at == f.writes && matches!(fault, Fault::AbortAfterWrites { .. }))
        {
            std::process::abort();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(
            Fault::parse("fail-write=3:EINVAL"),
            Some(Fault::FailWrite {
                n: 3,
                errno: libc::EINVAL
            })
        );
        assert_eq!(
            Fault::parse("fail-write=2"),
            Some(Fault::FailWrite {
                n: 2,
                errno: libc::EIO
            })
        );
        assert_eq!(
            Fault::parse("abort-after-writes=4"),
            Some(Fault::AbortAfterWrites { n: 4 })
        );
        assert_eq!(Fault::parse("nonsense"), None);
    }
}
