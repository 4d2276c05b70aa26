//! Lays a simulated board out as files: the sysfs, procfs and `/etc` entries jpower reads,
//! with the kernel's relative links and file modes, at the board's boot state.
//!
//! The same tree backs a live simulated board (below its kernel model) and
//! `jpower sim export`, which writes it for anyone to inspect or to test `--root` against.

use super::power::{self, DomainPower, Load, Operating};
use super::spec::{BoardSpec, Dom, InaDriver, InaSpec, PresetSpec, RailSpec, Release};
use crate::board::sysfs::{format_cpu_list, write_file};
use std::io;
use std::path::{Component, Path, PathBuf};

/// The INA3221 averaging count NVIDIA's boot script programs (`samples`).
pub const HWMON_SAMPLES: u32 = 512;

/// The clocks a board runs at with `preset` applied and all cores busy.
pub fn boot_clocks(spec: &BoardSpec, p: &PresetSpec) -> (u64, u64, u64) {
    let cpu = resolve(spec.cpu_khz, p.cpu_max_khz);
    let gpu = resolve(spec.gpu.table_hz, p.gpu_max_hz);
    let emc = resolve(spec.emc.table_hz, p.emc_max_hz);
    (cpu, gpu, emc)
}

/// nvpmodel semantics of one limit: `-1` or `0` is the table's maximum, anything else the
/// largest entry not above it (or the lowest entry).
pub fn resolve(table: &[u64], value: i64) -> u64 {
    let top = table.last().copied().unwrap_or(0);
    if value <= 0 {
        return top;
    }
    table
        .iter()
        .rev()
        .find(|&&f| f <= value as u64)
        .or(table.first())
        .copied()
        .unwrap_or(0)
}

/// nvpmodel semantics of a lower limit: `0` (or `-1`) is the table's minimum.
pub fn resolve_min(table: &[u64], value: i64) -> u64 {
    if value <= 0 {
        table.first().copied().unwrap_or(0)
    } else {
        resolve(table, value)
    }
}

/// The preset a simulated board boots into: MAXN, as the reference trees are captured,
/// else (a board without one: Xavier NX, whose preset 0 is a 2-core mode) its default
/// preset. Every CPU is online in it, as the tree lays them out.
pub fn boot_preset(spec: &BoardSpec) -> &'static PresetSpec {
    let default = || spec.presets.iter().find(|p| p.id == spec.default_preset);
    spec.presets
        .iter()
        .find(|p| p.name == "MAXN")
        .or_else(default)
        .unwrap_or(&spec.presets[0])
}

/// Writes the whole tree of `spec` under `dir` at its boot state ([`boot_preset`]).
pub fn lay_out(spec: &BoardSpec, dir: &Path) -> io::Result<()> {
    let t = Tree { dir };
    let boot = boot_preset(spec);
    let (cpu_khz, gpu_hz, emc_hz) = boot_clocks(spec, boot);
    let cpu_min = resolve_min(spec.cpu_khz, boot.cpu_min_khz).min(cpu_khz);

    let release = spec.release.tag().trim_start_matches('r');
    t.file(
        "/etc/nv_tegra_release",
        &format!(
            "# R{release} (release), REVISION: {}, GCID: 0, BOARD: {}, EABI: aarch64, DATE: simulated by jpower\n",
            spec.revision, spec.release_board
        ),
        0o644,
    )?;
    t.file("/etc/nvpmodel.conf", &super::nvpconf::render(spec), 0o644)?;
    t.file(
        crate::board::paths::NVPMODEL_STATUS,
        &format!("pmode:{:04}\n", boot.id),
        0o644,
    )?;
    t.link("/proc/device-tree", "/sys/firmware/devicetree/base")?;
    t.file(
        "/sys/firmware/devicetree/base/model",
        &format!("{}\0", spec.model),
        0o444,
    )?;
    let compat: String = spec.compatible.iter().map(|c| format!("{c}\0")).collect();
    t.file("/sys/firmware/devicetree/base/compatible", &compat, 0o444)?;

    // CPUs and cpufreq policies.
    let n = spec.cpus();
    let all: Vec<usize> = (0..n).collect();
    let cpu = "/sys/devices/system/cpu";
    for name in ["possible", "present", "online"] {
        t.file(
            &format!("{cpu}/{name}"),
            &format!("{}\n", format_cpu_list(&all)),
            0o444,
        )?;
    }
    t.file(&format!("{cpu}/offline"), "\n", 0o444)?;
    let starts = spec.cluster_starts();
    for c in 0..n {
        let policy = starts[spec.cluster_of(c)];
        t.file(&format!("{cpu}/cpu{c}/online"), "1\n", 0o644)?;
        t.link(
            &format!("{cpu}/cpu{c}/cpufreq"),
            &format!("{cpu}/cpufreq/policy{policy}"),
        )?;
        for (i, idle) in ["WFI", "c7"].iter().enumerate() {
            t.file(
                &format!("{cpu}/cpu{c}/cpuidle/state{i}/name"),
                &format!("{idle}\n"),
                0o444,
            )?;
            t.file(
                &format!("{cpu}/cpu{c}/cpuidle/state{i}/disable"),
                "0\n",
                0o644,
            )?;
        }
    }
    let table: String = spec.cpu_khz.iter().map(|f| format!("{f} ")).collect();
    for (i, &start) in starts.iter().enumerate() {
        let p = format!("{cpu}/cpufreq/policy{start}");
        let cpus: Vec<String> = (start..start + spec.clusters[i])
            .map(|c| c.to_string())
            .collect();
        let cpus = format!("{}\n", cpus.join(" "));
        let f = |v: u64| format!("{v}\n");
        for (name, text, mode) in [
            ("affected_cpus", cpus.clone(), 0o444),
            ("related_cpus", cpus, 0o444),
            ("cpuinfo_min_freq", f(spec.cpu_khz[0]), 0o444),
            (
                "cpuinfo_max_freq",
                f(*spec.cpu_khz.last().unwrap_or(&0)),
                0o444,
            ),
            ("cpuinfo_cur_freq", f(cpu_khz), 0o400),
            ("scaling_available_frequencies", format!("{table}\n"), 0o444),
            (
                "scaling_available_governors",
                "conservative ondemand userspace powersave performance schedutil \n".into(),
                0o444,
            ),
            ("scaling_cur_freq", f(cpu_khz), 0o444),
            ("scaling_driver", "tegra194\n".into(), 0o444),
            ("scaling_governor", "schedutil\n".into(), 0o644),
            ("scaling_max_freq", f(cpu_khz), 0o644),
            ("scaling_min_freq", f(cpu_min), 0o644),
        ] {
            t.file(&format!("{p}/{name}"), &text, mode)?;
        }
    }

    // GPU: nvgpu device, devfreq, aliases, device tree node.
    let g = &spec.gpu;
    let devfreq = format!("{}/devfreq/{}", g.dir, g.devfreq);
    let gtable: String = g
        .table_hz
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    t.file(
        &format!("{}/name", g.of_node),
        &format!("{}\0", g.of_name),
        0o444,
    )?;
    t.file(
        &format!("{}/compatible", g.of_node),
        &format!("{}\0", g.of_compatible),
        0o444,
    )?;
    for (name, text, mode) in [
        ("load", "0\n".to_string(), 0o444),
        ("railgate_enable", "1\n".into(), 0o744),
        ("enable_3d_scaling", "1\n".into(), 0o744),
        ("tpc_pg_mask", "0\n".into(), 0o744),
        ("is_railgated", "no\n".into(), 0o444),
        ("power/control", "auto\n".into(), 0o644),
        ("power/runtime_status", "active\n".into(), 0o444),
    ] {
        t.file(&format!("{}/{name}", g.dir), &text, mode)?;
    }
    t.link(&format!("{}/of_node", g.dir), g.of_node)?;
    if g.devfreq_dev {
        t.link(&format!("{}/devfreq_dev", g.dir), &devfreq)?;
    }
    let gpu_min = g.table_hz[0];
    for (name, text, mode) in [
        ("available_frequencies", format!("{gtable}\n"), 0o444),
        (
            "available_governors",
            "nvhost_podgov userspace performance simple_ondemand\n".into(),
            0o444,
        ),
        ("governor", "nvhost_podgov\n".into(), 0o644),
        ("cur_freq", format!("{gpu_min}\n"), 0o444),
        ("min_freq", format!("{gpu_min}\n"), 0o644),
        ("max_freq", format!("{gpu_hz}\n"), 0o644),
    ] {
        t.file(&format!("{devfreq}/{name}"), &text, mode)?;
    }
    t.link(&format!("{devfreq}/device"), g.dir)?;
    for (link, target) in g.aliases {
        let parent = Path::new(link).parent().unwrap_or(Path::new("/"));
        t.link(link, &parent.join(target).to_string_lossy())?;
    }
    t.link(&format!("/sys/class/devfreq/{}", g.devfreq), &devfreq)?;

    // EMC: the nvpmodel cap (the boot preset's, if it sets one) and the root-only
    // debugfs clock.
    let e = &spec.emc;
    let cap = if boot.emc_max_hz > 0 {
        emc_hz
    } else {
        e.uncapped
    };
    t.file(e.cap_file, &format!("{cap}\n"), 0o644)?;
    let dbg = "/sys/kernel/debug/bpmp/debug/clk/emc";
    for (name, v) in [
        ("rate", emc_hz),
        ("min_rate", e.table_hz[0]),
        ("max_rate", *e.table_hz.last().unwrap_or(&0)),
        ("mrq_rate_locked", 0),
    ] {
        t.file(&format!("{dbg}/{name}"), &format!("{v}\n"), 0o600)?;
    }

    // actmon's EMC activity (the kernel model computes it): debugfs on L4T 36.
    let (actmon, mode) = match spec.release {
        Release::R36 => (crate::board::paths::EMC_ACTIVITY[0], 0o600),
        _ => (crate::board::paths::EMC_ACTIVITY[1], 0o444),
    };
    t.file(actmon, "0\n", mode)?;

    // PM QoS CPU latency (the kernel's default request: no limit, 2000 s).
    t.file(crate::board::paths::CPU_DMA_LATENCY, "2000000000\n", 0o600)?;
    // CPU time and memory: the kernel model writes what each read shows.
    t.file(crate::board::paths::PROC_STAT, "", 0o444)?;
    t.file(crate::board::paths::PROC_MEMINFO, "", 0o444)?;
    // The module's eMMC (the Nano's SD card), idle: the simulated boards read no disk.
    t.file(
        crate::board::paths::PROC_DISKSTATS,
        " 179       0 mmcblk0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n 179       1 mmcblk0p1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        0o444,
    )?;
    t.file("/sys/block/mmcblk0/size", "122142720\n", 0o444)?;

    // Thermal zones (the kernel model computes their temperature) and the fan.
    for (z, (name, _)) in super::spec::ZONES.iter().enumerate() {
        let dir = format!("/sys/devices/virtual/thermal/thermal_zone{z}");
        t.file(&format!("{dir}/type"), &format!("{name}\n"), 0o444)?;
        t.file(&format!("{dir}/temp"), "30000\n", 0o444)?;
        t.link(&format!("/sys/class/thermal/thermal_zone{z}"), &dir)?;
    }
    match spec.release {
        Release::R32 => {
            t.file("/sys/devices/pwm-fan/target_pwm", "0\n", 0o644)?;
            t.file("/sys/devices/pwm-fan/cur_pwm", "0\n", 0o444)?;
        }
        _ => {
            t.file(
                "/sys/devices/platform/pwm-fan/hwmon/hwmon0/name",
                "pwmfan\n",
                0o444,
            )?;
            t.file(
                "/sys/devices/platform/pwm-fan/hwmon/hwmon0/pwm1",
                "96\n",
                0o644,
            )?;
        }
    }

    // INA3221 monitors with a reading of the boot state at rest.
    let op = Operating {
        online_cores: n as u32,
        cpu_hz: (cpu_khz * 1000) as f64,
        gpu_hz: gpu_min as f64,
        emc_hz: emc_hz as f64,
    };
    let domains = power::domain_power(spec.silicon, &op, &Load::default());
    for ina in spec.ina {
        lay_out_ina(&t, spec, ina, &domains)?;
    }
    Ok(())
}

/// Power of one rail, watts, from the domains that flow through it.
pub fn rail_watts(spec: &BoardSpec, rail: &RailSpec, d: &DomainPower) -> f64 {
    let sum: f64 = rail
        .domains
        .iter()
        .map(|dom| match dom {
            Dom::Cpu => d.cpu,
            Dom::Gpu => d.gpu,
            Dom::Cv => d.cv,
            Dom::Soc => d.soc,
            Dom::Dram => d.dram,
            Dom::Carrier => d.carrier,
        })
        .sum();
    if rail.input {
        sum / spec.silicon.input_efficiency()
    } else {
        sum
    }
}

/// The directory holding a chip's channels (`hwmon/hwmonN` or `iio:deviceN`).
pub fn ina_channel_dir(driver: InaDriver, ina: &InaSpec) -> String {
    match driver {
        InaDriver::Hwmon => format!("{}/hwmon/hwmon{}", ina.dir, ina.index),
        InaDriver::Iio => format!("{}/iio:device{}", ina.dir, ina.index),
    }
}

fn lay_out_ina(t: &Tree, spec: &BoardSpec, ina: &InaSpec, d: &DomainPower) -> io::Result<()> {
    let client = BoardSpec::ina_client(ina);
    let ch = ina_channel_dir(spec.ina_driver, ina);
    let (drv, name) = match spec.ina_driver {
        InaDriver::Hwmon => ("ina3221", "ina3221"),
        InaDriver::Iio => ("ina3221x", "ina3221x"),
    };
    t.file(&format!("{}/name", ina.dir), &format!("{name}\n"), 0o444)?;
    t.file(&format!("{ch}/name"), &format!("{name}\n"), 0o444)?;
    t.link(&format!("/sys/bus/i2c/devices/{client}"), ina.dir)?;
    t.link(&format!("/sys/bus/i2c/drivers/{drv}/{client}"), ina.dir)?;
    for (i, rail) in ina.channels.iter().enumerate() {
        let w = rail_watts(spec, rail, d);
        let ma = if rail.mv == 0 {
            0
        } else {
            (w * 1e6 / f64::from(rail.mv)) as u64
        };
        let mw = u64::from(rail.mv) * ma / 1000;
        match spec.ina_driver {
            InaDriver::Hwmon => {
                let k = i + 1;
                t.file(
                    &format!("{ch}/in{k}_label"),
                    &format!("{}\n", rail.label),
                    0o444,
                )?;
                t.file(
                    &format!("{ch}/in{k}_input"),
                    &format!("{}\n", rail.mv),
                    0o444,
                )?;
                t.file(&format!("{ch}/curr{k}_input"), &format!("{ma}\n"), 0o444)?;
                t.file(&format!("{ch}/in{k}_enable"), "1\n", 0o644)?;
                for lim in ["max", "crit"] {
                    t.file(&format!("{ch}/curr{k}_{lim}"), "81900\n", 0o644)?;
                    t.file(&format!("{ch}/curr{k}_{lim}_alarm"), "0\n", 0o444)?;
                }
                t.file(
                    &format!("{ch}/shunt{k}_resistor"),
                    &format!("{}\n", ina.shunt_uohm),
                    0o644,
                )?;
            }
            InaDriver::Iio => {
                t.file(
                    &format!("{ch}/rail_name_{i}"),
                    &format!("{}\n", rail.label),
                    0o644,
                )?;
                t.file(
                    &format!("{ch}/in_voltage{i}_input"),
                    &format!("{}\n", rail.mv),
                    0o444,
                )?;
                t.file(
                    &format!("{ch}/in_current{i}_input"),
                    &format!("{ma}\n"),
                    0o444,
                )?;
                t.file(
                    &format!("{ch}/in_power{i}_input"),
                    &format!("{mw}\n"),
                    0o444,
                )?;
                t.file(&format!("{ch}/warn_current_limit_{i}"), "32760 ma\n", 0o644)?;
                t.file(&format!("{ch}/crit_current_limit_{i}"), "32760 ma\n", 0o644)?;
            }
        }
    }
    match spec.ina_driver {
        InaDriver::Hwmon => {
            t.file(&format!("{ch}/in7_label"), "sum of shunt voltages\n", 0o444)?;
            t.file(
                &format!("{ch}/samples"),
                &format!("{HWMON_SAMPLES}\n"),
                0o644,
            )?;
            t.file(&format!("{ch}/update_interval"), "1\n", 0o644)?;
            t.link(&format!("{ch}/device"), ina.dir)?;
            t.link(&format!("/sys/class/hwmon/hwmon{}", ina.index), &ch)?;
        }
        InaDriver::Iio => {
            t.file(&format!("{ch}/running_mode"), "1\n", 0o644)?;
        }
    }
    Ok(())
}

struct Tree<'a> {
    dir: &'a Path,
}

impl Tree<'_> {
    fn abs(&self, board: &str) -> PathBuf {
        self.dir.join(board.trim_start_matches('/'))
    }

    fn file(&self, board: &str, text: &str, mode: u32) -> io::Result<()> {
        write_file(&self.abs(board), text.as_bytes(), mode)
    }

    /// A relative symlink at `link` pointing to `target` (both board paths).
    fn link(&self, link: &str, target: &str) -> io::Result<()> {
        let at = self.abs(link);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let from = Path::new(link).parent().unwrap_or(Path::new("/"));
        let rel = relative(from, &normalise(Path::new(target)));
        match std::os::unix::fs::symlink(&rel, &at) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        }
    }
}

fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The relative path from directory `from` to `to` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let a: Vec<_> = from.components().collect();
    let b: Vec<_> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_match_the_kernel_style() {
        assert_eq!(
            relative(
                Path::new("/sys/devices/system/cpu/cpu0"),
                Path::new("/sys/devices/system/cpu/cpufreq/policy0")
            ),
            PathBuf::from("../cpufreq/policy0")
        );
        assert_eq!(
            relative(
                Path::new("/proc"),
                Path::new("/sys/firmware/devicetree/base")
            ),
            PathBuf::from("../sys/firmware/devicetree/base")
        );
    }

    #[test]
    fn nvpmodel_limits_resolve_like_nvpmodel() {
        let t = [100, 200, 300];
        assert_eq!(resolve(&t, -1), 300);
        assert_eq!(resolve(&t, 0), 300);
        assert_eq!(resolve(&t, 250), 200);
        assert_eq!(resolve(&t, 50), 100);
    }
}
