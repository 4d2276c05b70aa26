//! The board's activity counters, opened once and read without allocating: GPU load and
//! clock, each CPU's cumulative busy and total jiffies (`/proc/stat`) and its cluster's
//! clock, EMC activity and clock, RAM and swap (`/proc/meminfo`), the fan's duty and
//! speed, and the sectors read from each disk (`/proc/diskstats`). What `tegrastats` and
//! jtop show, read fast enough for the activity thread's 50 Hz
//! ([`crate::telemetry::activity`] turns the cumulative counts into rates).
//!
//! Every counter the board lacks (or that cannot be read, as debugfs cannot without root)
//! is `None`, never zero. Where each comes from, by release, is in [`paths`](super::paths):
//! EMC activity is actmon's `mc_all` (L4T 32/35 `/sys/kernel/actmon_avg_activity`, L4T 36
//! debugfs `cactmon`), the average busy memory-clock rate in kHz, so the activity is
//! `mc_all` over the running EMC rate (as jtop computes it); the EMC rate itself is BPMP's
//! debugfs clock (Tegra210: the common clock framework's debugfs `emc`).

use super::activity::{stat_line, Memory};
use super::paths;
use super::sysfs::{parse_u64, Attr};
use super::Board;

/// CPUs the counters follow (the first 16 possible ones).
pub const MAX_CPUS: usize = 16;
/// Disks the counters follow (the first 8 in `/proc/diskstats` order).
pub const MAX_DISKS: usize = 8;
/// Bytes of the buffer `/proc/stat`, `/proc/meminfo` and `/proc/diskstats` are read into.
const TEXT_BUF: usize = 16 * 1024;

/// One reading of every counter, cumulative where the kernel counts (`Copy`, fixed size).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawCounters {
    /// GPU load, per mille (devfreq `load`).
    pub gpu_load_pm: Option<u32>,
    /// The GPU's running clock, Hz.
    pub gpu_hz: Option<u64>,
    /// EMC activity, per mille of the running EMC rate.
    pub emc_activity_pm: Option<u32>,
    /// The EMC's running clock, Hz.
    pub emc_hz: Option<u64>,
    /// RAM and swap.
    pub memory: Option<Memory>,
    /// The fan's PWM duty, 0-255.
    pub fan_pwm: Option<u32>,
    /// The fan's measured speed, revolutions per minute.
    pub fan_rpm: Option<u32>,
    /// Per CPU (index = CPU id): cumulative (busy, total) jiffies; `None` while offline.
    pub cpu_jiffies: [Option<(u64, u64)>; MAX_CPUS],
    /// Per CPU: its cluster's running clock, kHz; `None` while offline.
    pub cpu_khz: [Option<u32>; MAX_CPUS],
    /// Per disk (index into [`Counters::disks`]): cumulative sectors (512 bytes) read.
    pub disk_sectors: [Option<u64>; MAX_DISKS],
}

/// A disk the counters follow: a whole block device (no partitions, loop, RAM or zram
/// devices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Its kernel name (`mmcblk0`, `nvme0n1`, `sda`).
    pub name: String,
    /// Its device number, so a path's device (`stat`'s `st_dev`) can be matched to it.
    pub major: u32,
    /// Minor device number.
    pub minor: u32,
}

/// The counters' files, opened once.
#[derive(Debug)]
pub struct Counters {
    gpu_load: Option<Attr>,
    gpu_cur: Option<Attr>,
    emc_activity: Option<Attr>,
    emc_rate: Option<Attr>,
    stat: Option<Attr>,
    meminfo: Option<Attr>,
    diskstats: Option<Attr>,
    fan_pwm: Option<Attr>,
    fan_rpm: Option<Attr>,
    /// Possible CPUs (at most [`MAX_CPUS`]).
    cpu_count: usize,
    /// Each cluster's `scaling_cur_freq` and the CPUs it clocks.
    clusters: Vec<(Attr, Vec<usize>)>,
    /// The disks followed, in `/proc/diskstats` order.
    pub disks: Vec<Disk>,
    buf: Box<[u8; TEXT_BUF]>,
}

impl Counters {
    /// Opens every counter `board` has; the rest stay absent.
    pub fn open(board: &Board) -> Counters {
        let root = &board.root;
        let first = |list: &[&str]| list.iter().find_map(|p| root.open(p, false).ok());
        let gpu_dir = board.gpu.as_ref().map(|g| g.dir.join("load"));
        let fan_rpm = first(paths::FAN_RPM).or_else(|| {
            root.list(paths::HWMON_CLASS).iter().find_map(|h| {
                root.open(format!("{}/{h}/rpm", paths::HWMON_CLASS), false)
                    .ok()
            })
        });
        let mut c = Counters {
            gpu_load: gpu_dir.and_then(|p| root.open(p, false).ok()),
            gpu_cur: board.gpu.as_ref().and_then(|g| g.cur.try_clone().ok()),
            emc_activity: first(paths::EMC_ACTIVITY),
            emc_rate: board
                .emc
                .as_ref()
                .and_then(|e| e.rate.as_ref()?.try_clone().ok())
                .or_else(|| first(paths::EMC_RATE)),
            stat: root.open(paths::PROC_STAT, false).ok(),
            meminfo: root.open(paths::PROC_MEMINFO, false).ok(),
            diskstats: root.open(paths::PROC_DISKSTATS, false).ok(),
            fan_pwm: crate::board::fan_pwm_path(root).and_then(|p| root.open(p, false).ok()),
            fan_rpm,
            cpu_count: board.cpus.len().min(MAX_CPUS),
            clusters: board
                .clusters
                .iter()
                .filter_map(|cl| Some((cl.cur.try_clone().ok()?, cl.cpus.clone())))
                .collect(),
            disks: Vec::new(),
            buf: Box::new([0; TEXT_BUF]),
        };
        if let Some(text) = c.diskstats.as_ref().and_then(|a| a.read_string().ok()) {
            c.disks = whole_disks(&text, |name| root.exists(format!("/sys/block/{name}")));
        }
        c
    }

    /// CPUs followed (possible ones, at most [`MAX_CPUS`]).
    pub fn cpu_count(&self) -> usize {
        self.cpu_count
    }

    /// Reads every counter into `out`. Allocates nothing.
    pub fn read(&mut self, out: &mut RawCounters) {
        let num = |a: &Option<Attr>| a.as_ref().and_then(Attr::try_read_u64);
        out.gpu_load_pm = num(&self.gpu_load).map(|l| l.min(1000) as u32);
        out.gpu_hz = num(&self.gpu_cur);
        out.emc_hz = num(&self.emc_rate);
        out.emc_activity_pm = match (num(&self.emc_activity), out.emc_hz) {
            // mc_all is in kHz: per mille of the rate is mc_all * 1000 / (Hz / 1000).
            (Some(busy_khz), Some(hz)) if hz >= 1000 => {
                Some((busy_khz.saturating_mul(1000) / (hz / 1000)).min(1000) as u32)
            }
            _ => None,
        };
        out.fan_pwm = num(&self.fan_pwm).map(|p| p.min(255) as u32);
        out.fan_rpm = num(&self.fan_rpm).and_then(|r| u32::try_from(r).ok());

        out.cpu_jiffies = [None; MAX_CPUS];
        if let Some(text) = read_text(&self.stat, &mut self.buf) {
            for (cpu, busy, total) in text.lines().filter_map(stat_line) {
                if let Some(slot) = out.cpu_jiffies.get_mut(cpu) {
                    *slot = Some((busy, total));
                }
            }
        }
        out.cpu_khz = [None; MAX_CPUS];
        for (cur, cpus) in &self.clusters {
            let clock = cur.try_read_u64().and_then(|k| u32::try_from(k).ok());
            for &cpu in cpus.iter().filter(|&&c| c < MAX_CPUS) {
                // An offline CPU (absent from /proc/stat) has no clock of its own to show.
                out.cpu_khz[cpu] = clock.filter(|_| out.cpu_jiffies[cpu].is_some());
            }
        }
        out.memory = read_text(&self.meminfo, &mut self.buf).and_then(Memory::parse);
        out.disk_sectors = [None; MAX_DISKS];
        if let Some(text) = read_text(&self.diskstats, &mut self.buf) {
            for (name, sectors) in text.lines().filter_map(diskstats_line) {
                if let Some(i) = self.disks.iter().position(|d| d.name == name) {
                    out.disk_sectors[i] = Some(sectors);
                }
            }
        }
    }
}

/// `attr`'s whole text, read into `buf` (a `/proc` file longer than `buf` is cut: the
/// lines it holds are still whole but for the last, which the parsers then skip).
fn read_text<'b>(attr: &Option<Attr>, buf: &'b mut [u8; TEXT_BUF]) -> Option<&'b str> {
    let bytes = attr.as_ref()?.read_into(&mut buf[..]).ok()?;
    let full = bytes.len() == TEXT_BUF;
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).ok()?,
    };
    // A cut read ends mid-line: drop the partial line.
    Some(if full {
        text.rsplit_once('\n').map_or("", |(whole, _)| whole)
    } else {
        text
    })
}

/// A `/proc/diskstats` line: (device name, sectors read, the sixth field).
fn diskstats_line(line: &str) -> Option<(&str, u64)> {
    let mut f = line.split_ascii_whitespace();
    let (_major, _minor, name) = (f.next()?, f.next()?, f.next()?);
    let sectors = f.nth(2).and_then(|s| parse_u64(s.as_bytes()))?;
    Some((name, sectors))
}

/// Sectors (512 bytes) read from the block device `major:minor` (a disk or a
/// partition), from a `/proc/diskstats` text; `None` when it is not listed.
pub fn sectors_read(text: &str, major: u32, minor: u32) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        let ours = f.next()?.parse() == Ok(major) && f.next()?.parse() == Ok(minor);
        ours.then(|| diskstats_line(l).map(|(_, sectors)| sectors))?
    })
}

/// The whole disks of a `/proc/diskstats` text (those `is_disk` says have a
/// `/sys/block` entry, which partitions do not), without loop, RAM and zram devices; at
/// most [`MAX_DISKS`].
fn whole_disks(text: &str, is_disk: impl Fn(&str) -> bool) -> Vec<Disk> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let major = f.next()?.parse().ok()?;
            let minor = f.next()?.parse().ok()?;
            let name = f.next()?;
            diskstats_line(l)?;
            let virtual_dev = ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p));
            (!virtual_dev && is_disk(name)).then(|| Disk {
                name: name.to_string(),
                major,
                minor,
            })
        })
        .take(MAX_DISKS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diskstats_lines_give_sectors_read_and_whole_disks_skip_partitions() {
        let text = "\
 179       0 mmcblk0 120 3 4096 50 9 0 72 10 0 60 60 0 0 0 0
 179       1 mmcblk0p1 100 3 4000 40 9 0 72 10 0 50 50 0 0 0 0
   7       0 loop0 1 0 2 0 0 0 0 0 0 0 0
 259       0 nvme0n1 5 0 80
   8       0 sda 1 2
";
        assert_eq!(
            diskstats_line(text.lines().next().unwrap()),
            Some(("mmcblk0", 4096))
        );
        assert_eq!(diskstats_line("8 0 sda 1 2"), None, "too short");
        let disks = whole_disks(text, |n| !n.contains('p') || n.starts_with("nvme"));
        let names: Vec<&str> = disks.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["mmcblk0", "nvme0n1"]);
        assert_eq!((disks[1].major, disks[1].minor), (259, 0));
    }

    #[test]
    fn a_devices_sectors_are_found_by_its_numbers_partitions_included() {
        let text = "   7       0 loop0 1 0 8 0 0 0 0 0 0 0 0\n \
                    259       0 nvme0n1 100 0 4000 50 0 0 0 0 0 10 50\n \
                    259       2 nvme0n1p2 90 0 3600 45 0 0 0 0 0 9 45\n";
        assert_eq!(sectors_read(text, 259, 2), Some(3600));
        assert_eq!(sectors_read(text, 259, 0), Some(4000));
        assert_eq!(sectors_read(text, 8, 0), None);
        assert_eq!(
            sectors_read("259 2 nvme0n1p2 90", 259, 2),
            None,
            "a short line"
        );
    }

    #[test]
    fn a_cut_read_drops_its_partial_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let long: String = (0..2000)
            .map(|i| format!("cpu{i} 1 2 3 4 5 6 7 8\n"))
            .collect();
        std::fs::write(dir.path().join("stat"), &long).unwrap();
        let root = crate::board::sysfs::Root::host(dir.path());
        let attr = root.open("/stat", false).ok();
        let mut buf = Box::new([0u8; TEXT_BUF]);
        let text = read_text(&attr, &mut buf).unwrap();
        assert!(text.len() < TEXT_BUF && text.lines().all(|l| stat_line(l).is_some()));
    }
}
