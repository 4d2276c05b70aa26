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

#[derive(Debug, Default)]
pub(super) struct Faults {
    pub(super) writes: u64,
    pub(super) pending: Option<Fault>,
}

impl SimKernel {
    /// Arms a fault, counted from the next write.
    pub fn inject(&self, fault: Fault) {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.writes = 0;
        f.pending = Some(fault);
    }

    pub(super) fn count_write(&self, completed: bool) -> io::Result<()> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if !completed {
            f.writes += 1;
            if let Some(Fault::FailWrite { n, errno }) = f.pending {
                if f.writes == n {
                    f.pending = None;
                    return Err(io::Error::from_raw_os_error(errno));
                }
            }
        } else if let Some(Fault::AbortAfterWrites { n }) = f.pending {
            if f.writes == n {
                std::process::abort();
            }
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
