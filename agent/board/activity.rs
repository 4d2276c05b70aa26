//! What the board is doing beyond its knobs: per-core CPU load (`/proc/stat`), GPU load
//! (the GPU device's `load`, per mille), RAM and swap (`/proc/meminfo`) and the fan's duty,
//! all read under the board root, so a simulated board or a `--root` tree shows its own
//! (and nothing where it has no such file: absent, never zero).

use super::sysfs::parse_u64;
use super::{Board, KnobKind};

/// Each online CPU's cumulative jiffies from `/proc/stat`: (cpu, busy, total).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuTimes(Vec<(usize, u64, u64)>);

impl CpuTimes {
    /// Reads `/proc/stat` under `board`'s root; empty without it.
    pub fn read(board: &Board) -> CpuTimes {
        board
            .root
            .read_string(super::paths::PROC_STAT)
            .map_or_else(|_| CpuTimes::default(), |text| CpuTimes::parse(&text))
    }

    /// The `cpuN` lines of a `/proc/stat` text (see [`stat_line`]).
    pub fn parse(text: &str) -> CpuTimes {
        CpuTimes(text.lines().filter_map(stat_line).collect())
    }

    /// Each CPU's load between `earlier` and these times, 0 to 1; CPUs not in both (offline
    /// in either) or without ticks between them are left out.
    pub fn load_since(&self, earlier: &CpuTimes) -> Vec<(usize, f64)> {
        self.0
            .iter()
            .filter_map(|&(cpu, busy, total)| {
                let &(_, b0, t0) = earlier.0.iter().find(|(c, ..)| *c == cpu)?;
                let dt = total.checked_sub(t0).filter(|&d| d > 0)?;
                Some((cpu, busy.saturating_sub(b0) as f64 / dt as f64))
            })
            .collect()
    }
}

/// A `cpuN` line of `/proc/stat`: (N, busy jiffies, total jiffies). The total is the sum
/// of the first eight fields (user to steal; guest time is already in user), idle and
/// iowait are not busy. The aggregate `cpu` line and short or odd lines are `None`.
pub fn stat_line(line: &str) -> Option<(usize, u64, u64)> {
    let mut f = line.split_ascii_whitespace();
    let cpu = f.next()?.strip_prefix("cpu")?.parse().ok()?;
    let (mut total, mut idle, mut fields) = (0u64, 0u64, 0);
    for (i, v) in f.take(8).map_while(|x| parse_u64(x.as_bytes())).enumerate() {
        total = total.saturating_add(v);
        if i == 3 || i == 4 {
            idle = idle.saturating_add(v);
        }
        fields += 1;
    }
    // user, nice, system, idle at least (kernels before 2.6 had four fields).
    (fields >= 4).then_some((cpu, total - idle, total))
}

/// The GPU's load, 0 to 1, from its device's `load` (per mille); `None` without one.
pub fn gpu_load(board: &Board) -> Option<f64> {
    let g = board.gpu.as_ref()?;
    let text = board.root.read_string(g.dir.join("load")).ok()?;
    text.trim()
        .parse::<f64>()
        .ok()
        .map(|l| (l / 1000.0).min(1.0))
}

/// RAM and swap, kB, from `/proc/meminfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// RAM in use (total less available).
    pub ram_used_kb: u64,
    /// RAM in all.
    pub ram_total_kb: u64,
    /// Swap in use.
    pub swap_used_kb: u64,
    /// Swap in all (0: no swap).
    pub swap_total_kb: u64,
}

impl Memory {
    /// Reads `/proc/meminfo` under `board`'s root; `None` without it.
    pub fn read(board: &Board) -> Option<Memory> {
        Memory::parse(&board.root.read_string(super::paths::PROC_MEMINFO).ok()?)
    }

    /// A `/proc/meminfo` text; `None` without `MemTotal` and `MemAvailable`.
    pub fn parse(text: &str) -> Option<Memory> {
        let kb = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        let (total, available) = (kb("MemTotal")?, kb("MemAvailable")?);
        let (swap_total, swap_free) = (kb("SwapTotal").unwrap_or(0), kb("SwapFree").unwrap_or(0));
        Some(Memory {
            ram_used_kb: total.saturating_sub(available),
            ram_total_kb: total,
            swap_used_kb: swap_total.saturating_sub(swap_free),
            swap_total_kb: swap_total,
        })
    }
}

/// The fan's PWM duty, 0 to 1; `None` without a fan.
pub fn fan_duty(board: &Board) -> Option<f64> {
    let k = board.knob(KnobKind::Fan)?;
    Some(board.knobs[k].read().ok()? as f64 / 255.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_load_is_busy_ticks_over_all_ticks_per_cpu() {
        let a = CpuTimes::parse("cpu  9 9 9 9\ncpu0 10 0 10 70 10 0 0 0\ncpu1 0 0 0 100 0\n");
        let b = CpuTimes::parse("cpu  9 9 9 9\ncpu0 40 0 20 110 30 0 0 0\ncpu1 0 0 0 100 0\n");
        // cpu0: 40 busy of 100 ticks; cpu1: no ticks (offline meanwhile), left out.
        assert_eq!(b.load_since(&a), [(0, 0.4)]);
        assert!(CpuTimes::parse("").load_since(&a).is_empty());
    }

    #[test]
    fn stat_lines_give_busy_and_total_and_skip_the_aggregate_and_odd_lines() {
        assert_eq!(
            stat_line("cpu3 10 0 10 70 10 0 0 0 5 0"),
            Some((3, 20, 100))
        );
        assert_eq!(stat_line("cpu  1 2 3 4"), None);
        assert_eq!(stat_line("cpu1 1 2"), None, "too few fields");
        assert_eq!(stat_line("cpu1 1 x 3 4"), None, "odd field");
        assert_eq!(stat_line("intr 1 2 3 4"), None);
        // Four fields (no iowait): all but idle is busy.
        assert_eq!(stat_line("cpu0 1 2 3 4"), Some((0, 6, 10)));
    }

    #[test]
    fn memory_in_use_is_total_less_available() {
        let m = Memory::parse(
            "MemTotal:       32000 kB\nMemFree:  1000 kB\nMemAvailable:   24000 kB\nSwapTotal: 1000 kB\nSwapFree: 250 kB\n",
        )
        .unwrap();
        assert_eq!((m.ram_used_kb, m.ram_total_kb), (8000, 32000));
        assert_eq!((m.swap_used_kb, m.swap_total_kb), (750, 1000));
        assert_eq!(Memory::parse("MemTotal: 1 kB\n"), None);
    }
}
