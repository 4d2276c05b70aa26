//! `/proc/stat`, `/proc/meminfo` and actmon's EMC activity as the board's load makes them, so that what reads a
//! Jetson's CPU load and memory (`jpower watch`) reads a simulated board's too.
//!
//! - `/proc/stat`: a `cpu` line and a `cpuN` line for each online CPU (offline ones are
//!   absent, as the kernel leaves them out), in jiffies of 10 ms: the total is the time
//!   since boot (`CLOCK_MONOTONIC`), the busy part (`user`) the integral of the CPU load
//!   over it ([`CpuBusy`], brought up to date whenever the load changes), the rest `idle`.
//!   Every online CPU shows the board's CPU load.
//! - `/proc/meminfo`: the module's DRAM less 5 % of carve-outs as `MemTotal`, in use 1.2 GiB
//!   of system plus a quarter of the rest scaled by the heavier of the CPU and GPU loads
//!   (a training or inference process's tensors and caches), half the DRAM as zram swap,
//!   unused. An illustration of the shape, not a model of any workload's footprint.
//! - actmon's `mc_all`: the EMC load times the running EMC rate, kHz (so that `mc_all`
//!   over the rate is the load, as jtop reads it).

use super::SimKernel;
use std::io::{self, Write};

/// Jiffies per second (`USER_HZ`).
const HZ: f64 = 100.0;

impl SimKernel {
    /// `/proc/stat` now, into `buf`; the bytes written.
    pub(super) fn proc_stat(&self, buf: &mut [u8]) -> io::Result<usize> {
        let st = self.state()?;
        let now = super::sensor::monotonic_us();
        let total = (now as f64 * 1e-6 * HZ) as u64;
        let busy = ((st.cpu_busy.at(&st.load, now) * HZ) as u64).min(total);
        let online: Vec<usize> = (0..self.spec.cpus())
            .filter(|&c| self.online(c).unwrap_or(c == 0))
            .collect();
        let n = online.len() as u64;
        let mut out = io::Cursor::new(buf);
        let line = |out: &mut io::Cursor<&mut [u8]>, name: &str, busy: u64, total: u64| {
            writeln!(out, "{name} {busy} 0 0 {} 0 0 0 0 0 0", total - busy)
        };
        line(&mut out, "cpu ", busy * n, total * n)?;
        for c in online {
            line(&mut out, &format!("cpu{c}"), busy, total)?;
        }
        Ok(out.position() as usize)
    }

    /// actmon's `mc_all` now, into `buf`; the bytes written.
    pub(super) fn emc_activity(&self, buf: &mut [u8]) -> io::Result<usize> {
        let st = self.state()?;
        let busy = st.load.emc.clamp(0.0, 1.0);
        let now = super::sensor::monotonic_us();
        let khz = self.running(&st, super::clocks::Clock::Emc, now)? / 1000;
        let mut out = io::Cursor::new(buf);
        writeln!(out, "{}", (busy * khz as f64) as u64)?;
        Ok(out.position() as usize)
    }

    /// `/proc/meminfo` now, into `buf`; the bytes written.
    pub(super) fn meminfo(&self, buf: &mut [u8]) -> io::Result<usize> {
        let load = self.state()?.load;
        let dram_kb = u64::from(self.spec.ram_gib) << 20;
        let total = dram_kb * 95 / 100;
        let system = 1200 << 10;
        let busy = load.cpu.max(load.gpu).clamp(0.0, 1.0);
        let used = system + (total.saturating_sub(system) as f64 * 0.25 * busy) as u64;
        let swap = dram_kb / 2;
        let mut out = io::Cursor::new(buf);
        writeln!(out, "MemTotal: {total:>16} kB")?;
        writeln!(out, "MemFree: {:>17} kB", total.saturating_sub(used))?;
        writeln!(out, "MemAvailable: {:>12} kB", total.saturating_sub(used))?;
        writeln!(out, "SwapTotal: {swap:>15} kB")?;
        writeln!(out, "SwapFree: {swap:>16} kB")?;
        Ok(out.position() as usize)
    }
}

#[cfg(test)]
mod tests {
    use crate::sim::kernel::state::{CpuBusy, LoadState};

    #[test]
    fn busy_time_integrates_the_load_across_its_changes() {
        let half = LoadState {
            cpu: 0.5,
            ..LoadState::default()
        };
        let mut b = CpuBusy::default();
        b.advance(&LoadState::default(), 1_000_000);
        assert_eq!(b.at(&half, 3_000_000), 1.0);
        b.advance(&half, 3_000_000);
        let full = LoadState {
            cpu: 1.0,
            ..LoadState::default()
        };
        assert_eq!(b.at(&full, 4_000_000), 2.0);
        // Never before the first change: no load has been held.
        assert_eq!(CpuBusy::default().at(&full, 9_000_000), 0.0);
    }

    /// What `jpower watch` reads on a simulated board: the load it was given, on the online
    /// CPUs only, and the module's memory.
    #[test]
    fn a_simulated_board_shows_its_load_and_memory_in_proc() {
        use crate::board::activity::{CpuTimes, Memory};
        use crate::board::Board;
        let dir = tempfile::tempdir().unwrap();
        let sim = crate::sim::SimBoard::open("orin-agx", dir.path()).unwrap();
        let board = Board::discover(sim.root()).unwrap();
        sim.set_load(LoadState {
            cpu: 0.5,
            ..LoadState::default()
        })
        .unwrap();
        let before = CpuTimes::read(&board);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let load = CpuTimes::read(&board).load_since(&before);
        assert_eq!(load.len(), 12, "{load:?}");
        for (cpu, l) in &load {
            assert!((l - 0.5).abs() < 0.08, "cpu{cpu}: {l}");
        }
        board
            .root
            .open("/sys/devices/system/cpu/cpu11/online", true)
            .unwrap()
            .write_u64(0)
            .unwrap();
        let cpus: Vec<usize> = CpuTimes::read(&board)
            .load_since(&before)
            .iter()
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(cpus, (0..11).collect::<Vec<_>>());
        let idle = Memory::read(&board).unwrap();
        sim.set_load(LoadState::TRAINING).unwrap();
        let busy = Memory::read(&board).unwrap();
        assert_eq!(idle.ram_total_kb, 32 * 1024 * 1024 * 95 / 100);
        assert_eq!(idle.swap_total_kb, 16 * 1024 * 1024);
        assert!(busy.ram_used_kb > idle.ram_used_kb, "{idle:?} {busy:?}");
    }
}
