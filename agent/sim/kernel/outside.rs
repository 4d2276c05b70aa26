//! Changes made behind the model's back: another process writing straight into the
//! board's tree (`echo 624750000 > .../max_freq`), which a real kernel would have received
//! as a `write(2)` to the attribute.
//!
//! A simulated board's kernel lives inside each jpower process, so it cannot intercept
//! another process's `echo`. Instead it keeps what it last left in each writable clock,
//! hotplug and EMC attribute (`shown` in `kernel.json`, updated under the board's lock by
//! every process that writes through a model) and, at its next access to the board (any
//! write, or a read of the attribute that changed), finds the difference, puts the
//! contents it had left back, and replays the new value through the driver's rules as
//! the kernel would have handled the write: clamped to the table, refused (`EINVAL`,
//! `EBUSY`: the old value stays) or coupled to its min/max partner (a max under the min
//! lowers the effective min on L4T 35/36).

use super::driver::Attr;
use super::{KernelState, SimKernel};
use std::io;

impl SimKernel {
    /// Every attribute another process may write: board path and what it is.
    fn writable(&self) -> Vec<(String, Attr)> {
        let spec = self.spec;
        let mut out: Vec<(String, Attr)> = (0..spec.cpus())
            .map(|c| {
                (
                    format!("/sys/devices/system/cpu/cpu{c}/online"),
                    Attr::Online(c),
                )
            })
            .collect();
        for cluster in 0..spec.clusters.len() {
            for (file, max) in [("scaling_min_freq", false), ("scaling_max_freq", true)] {
                out.push((
                    format!("{}/{file}", self.policy(cluster)),
                    Attr::CpuLimit { cluster, max },
                ));
            }
        }
        let d = self.devfreq();
        out.push((format!("{d}/min_freq"), Attr::GpuLimit { max: false }));
        out.push((format!("{d}/max_freq"), Attr::GpuLimit { max: true }));
        out.push((spec.emc.cap_file.to_string(), Attr::EmcCap));
        out
    }

    fn contents(&self, board: &str) -> io::Result<String> {
        Ok(std::fs::read_to_string(self.path(board))?
            .trim()
            .to_string())
    }

    /// Replays every change made behind the model's back, then records what each writable
    /// attribute holds now. Called with the board's lock held.
    pub(super) fn reconcile(&self, st: &mut KernelState) -> io::Result<()> {
        let mut changed = Vec::new();
        for (path, attr) in self.writable() {
            let now = self.contents(&path)?;
            if let Some(old) = st.shown.get(&path).filter(|old| **old != now) {
                changed.push((path, attr, old.clone(), now));
            }
        }
        // The kernel never saw the new contents: put back what it showed, then write.
        for (path, _, old, _) in &changed {
            self.put(path, old)?;
        }
        for (path, attr, old, new) in changed {
            match self.apply(st, attr, new.as_bytes()) {
                Ok(()) => log::info!("simulated kernel: {path} written behind its back: {new}"),
                Err(e) => log::info!(
                    "simulated kernel: {path} written behind its back with {new:?}, refused ({e}): keeps {old}"
                ),
            }
        }
        self.record(st)
    }

    /// Records what every writable attribute holds, as the model left it.
    pub(super) fn record(&self, st: &mut KernelState) -> io::Result<()> {
        for (path, _) in self.writable() {
            let now = self.contents(&path)?;
            st.shown.insert(path, now);
        }
        Ok(())
    }

    /// Before a read of `attr`: whether its file still holds what the model left there
    /// (checked without the lock, as a reader would); if not, every change behind the
    /// model's back is replayed under the lock.
    pub(super) fn notice(&self, attr: Attr) -> io::Result<()> {
        let st = self.state()?;
        let unchanged = match self.writable().into_iter().find(|(_, a)| *a == attr) {
            Some((path, _)) => st.shown.get(&path) == Some(&self.contents(&path)?),
            None => true,
        };
        if unchanged {
            return Ok(());
        }
        // The rails show the change from the next conversion boundary, as for any write.
        self.before_change();
        let _guard = self.exclusive()?;
        let mut st = self.state()?;
        self.reconcile(&mut st)?;
        self.save(&st)?;
        drop(_guard);
        self.invalidate();
        Ok(())
    }

    /// At boot: the tree as laid out is what the kernel shows.
    pub(crate) fn boot_record(&self) -> io::Result<()> {
        let _guard = self.exclusive()?;
        let mut st = self.state()?;
        self.record(&mut st)?;
        self.save(&st)
    }
}
