//! Discovery on every simulated board's exported tree (both L4T semantics) and on the
//! reference trees of real boards.

use crate::util;
use jpower::board::rails::RailRole;
use jpower::board::sysfs::Root;
use jpower::board::{Board, EmcTableSource, KnobKind, Soc};
use jpower::control::mode::ModeSpace;
use jpower::sim::spec::BOARDS;

#[test]
fn every_simulated_board_is_discovered_from_its_exported_tree() {
    for spec in BOARDS {
        let dir = tempfile::tempdir().unwrap();
        jpower::sim::export(&spec.id(), dir.path()).unwrap();
        let b = Board::discover(Root::host(dir.path())).unwrap();
        let id = spec.id();
        assert_eq!(b.identity.model, spec.model, "{id}");
        assert_eq!(b.cpu_count(), spec.cpus(), "{id}");
        assert_eq!(b.clusters.len(), spec.clusters.len(), "{id}");
        assert_eq!(b.clusters[0].table_hz.len(), spec.cpu_khz.len(), "{id}");
        let gpu = b.gpu.as_ref().unwrap_or_else(|| panic!("{id}: no GPU"));
        assert_eq!(gpu.table_hz, spec.gpu.table_hz, "{id}");
        assert!(gpu.devfreq.ends_with(spec.gpu.devfreq), "{id}");
        let emc = b.emc.as_ref().unwrap();
        assert_eq!(emc.table_hz, spec.emc.table_hz, "{id}: EMC table");
        let labels: Vec<&str> = spec
            .ina
            .iter()
            .flat_map(|i| i.channels.iter())
            .map(|c| c.label)
            .filter(|l| *l != "NC")
            .collect();
        let found: Vec<&str> = b.rails.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(found, labels, "{id}");
        assert!(!b.totals.module.is_empty(), "{id}");
        assert!(b.knobs.iter().all(|k| k.writable()), "{id}");
        assert_eq!(
            b.identity.l4t_major,
            Some(spec.release.tag()[1..].parse().unwrap())
        );
    }
}

#[test]
fn orin_agx_r35_mode_space_is_powertrains() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx", dir.path()).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    assert_eq!(ModeSpace::of(&b).len(), 18_096);
}

#[test]
fn a_tree_without_a_tegra_soc_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let e = Board::discover(Root::host(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a Jetson") && e.contains("--sim"), "{e}");
}

/// CPUs no cpufreq policy covers (offline at boot on some releases) and a cluster that
/// lists no frequencies are said, and the mode space keeps what is controlled: the GPU
/// and EMC modes stayed 0 when the CPU table was missing.
#[test]
fn cpus_without_a_policy_or_a_table_are_warnings_and_the_space_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx", dir.path()).unwrap();
    let cpufreq = dir.path().join("sys/devices/system/cpu/cpufreq");
    std::fs::remove_dir_all(cpufreq.join("policy8")).unwrap();
    for p in ["policy0", "policy4"] {
        std::fs::remove_file(cpufreq.join(p).join("scaling_available_frequencies")).unwrap();
    }
    let b = Board::discover(Root::host(dir.path())).unwrap();
    let said = |what: &str| b.warnings.iter().any(|w| w.contains(what));
    assert!(
        said("CPUs 8, 9, 10, 11 are in no cpufreq policy"),
        "{:?}",
        b.warnings
    );
    assert!(said("policy0 lists no frequencies"), "{:?}", b.warnings);
    let space = ModeSpace::of(&b);
    assert_eq!(space.cpu_hz, [0]);
    assert!(!space.is_empty() && space.gpu_hz.len() > 1, "{space:?}");
}

/// A GPU table in kHz beside clocks in Hz would be written as it reads (918 kHz): the
/// mismatch is a warning.
#[test]
fn a_gpu_table_in_another_unit_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-nano", dir.path()).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    let gpu = b.gpu.as_ref().unwrap();
    let table: Vec<String> = gpu
        .table_hz
        .iter()
        .map(|f| (f / 1000).to_string())
        .collect();
    let file = gpu.cur.path().with_file_name("available_frequencies");
    std::fs::write(file, table.join(" ")).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    assert!(
        b.warnings
            .iter()
            .any(|w| w.contains("is the table in another unit?")),
        "{:?}",
        b.warnings
    );
}

#[test]
fn missing_parts_are_warnings_not_failures() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx@r36", dir.path()).unwrap();
    std::fs::remove_file(dir.path().join("sys/kernel/nvpmodel_clk_cap/emc")).unwrap();
    std::fs::remove_dir_all(dir.path().join("sys/class/devfreq")).unwrap();
    std::fs::remove_dir_all(dir.path().join("sys/bus/i2c")).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    // The GPU is still found through nvgpu's gpu.0 alias.
    assert!(b.gpu.is_some());
    assert!(b.emc.is_none());
    assert!(b.rails.is_empty());
    assert!(
        b.warnings.iter().any(|w| w.contains("EMC")),
        "{:?}",
        b.warnings
    );
    assert!(
        b.warnings.iter().any(|w| w.contains("rails")),
        "{:?}",
        b.warnings
    );
}

/// Found on board trees unlike the references: hwmon's INA3221 current is signed, and a
/// rail that read a little below zero was dropped from discovery (its power left out of
/// the module total for the life of the process). It reads 0 instead.
#[test]
fn a_rail_that_reads_below_zero_is_kept_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx@r36", dir.path()).unwrap();
    let hwmon = dir
        .path()
        .join("sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040/hwmon/hwmon3");
    assert_eq!(
        std::fs::read_to_string(hwmon.join("in2_label"))
            .unwrap()
            .trim(),
        "VDD_CPU_CV"
    );
    std::fs::write(hwmon.join("curr2_input"), "-8\n").unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    let rail = b
        .rails
        .iter()
        .find(|r| r.label == "VDD_CPU_CV")
        .expect("kept");
    assert_eq!(rail.read_mw().unwrap(), 0);
    assert_eq!(rail.sample().unwrap().power_uw, 0);
}

/// Found on board trees unlike the references: a labelled rail whose reading file was
/// missing was left out of module power without a word; on a Nano, whose module power is
/// its input rail, module power read 0 W. Both are warnings now.
#[test]
fn a_rail_without_its_reading_is_a_warning() {
    for (board, chip, file, label) in [
        (
            "orin-agx@r36",
            "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040/hwmon/hwmon3",
            "curr2_input",
            "VDD_CPU_CV",
        ),
        ("nano", "", "in_power0_input", "POM_5V_IN"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        jpower::sim::export(board, dir.path()).unwrap();
        let path = if chip.is_empty() {
            walk(dir.path(), file).expect("the reading")
        } else {
            dir.path().join(chip).join(file)
        };
        std::fs::remove_file(&path).unwrap();
        let b = Board::discover(Root::host(dir.path())).unwrap();
        assert!(b.rails.iter().all(|r| r.label != label), "{board}");
        let said = b.warnings.join("; ");
        assert!(
            said.contains(file) && said.contains("its rail is left out"),
            "{board}: {said}"
        );
        if board == "nano" {
            assert!(said.contains("module power is not measured"), "{said}");
        }
    }
}

/// The first file named `name` under `dir`.
fn walk(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if e.file_type().ok()?.is_dir() {
            if let Some(found) = walk(&p, name) {
                return Some(found);
            }
        } else if e.file_name() == name {
            return Some(p);
        }
    }
    None
}

/// Found on board trees unlike the references: an Orin Nano whose debugfs jpower cannot
/// read (the packaged service's user) took its EMC maximum from the module's known 2133
/// MHz, so "no cap" wrote 2133 MHz into a cap file that showed 3199 MHz (JetPack 6.2's
/// faster memory). What the uncapped file shows bounds the table from below.
#[test]
fn an_uncapped_emc_file_shows_at_least_the_modules_maximum() {
    for (shown, top) in [
        (3_199_000_000u64, 3_199_000_000u64),
        (2_133_000_000, 2_133_000_000),
    ] {
        let dir = tempfile::tempdir().unwrap();
        jpower::sim::export("orin-agx@r36", dir.path()).unwrap();
        std::fs::write(
            dir.path().join("sys/firmware/devicetree/base/compatible"),
            "nvidia,p3768-0000+p3767-0005\0nvidia,p3767-0005\0nvidia,tegra234\0",
        )
        .unwrap();
        std::fs::remove_dir_all(dir.path().join("sys/kernel/debug")).unwrap();
        std::fs::write(
            dir.path().join("sys/kernel/nvpmodel_clk_cap/emc"),
            format!("{shown}\n"),
        )
        .unwrap();
        let b = Board::discover(Root::host(dir.path())).unwrap();
        let emc = b.emc.as_ref().unwrap();
        assert_eq!(emc.table_hz.last(), Some(&top), "{shown}");
        assert_eq!(emc.uncapped_raw(), top, "{shown}");
    }
}

#[test]
fn device_link_cycles_do_not_loop_discovery() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx@r36", dir.path()).unwrap();
    // Real sysfs: the i2c device links back to its parent through `subsystem`/`device`.
    let dev = dir
        .path()
        .join("sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040");
    std::os::unix::fs::symlink("..", dev.join("device")).unwrap();
    std::os::unix::fs::symlink("../../..", dev.join("hwmon/hwmon3/subsystem")).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    assert_eq!(b.rails.len(), 4);
}

fn reference_board(name: &str, test: &str) -> Option<(tempfile::TempDir, Board)> {
    let dir = util::reference_tree(name, test)?;
    let board = Board::discover(Root::host(dir.path())).unwrap();
    Some((dir, board))
}

#[test]
fn reference_orin_agx_r36() {
    let Some((_tree, b)) = reference_board("orin-agx-r36", "reference_orin_agx_r36") else {
        return;
    };
    assert_eq!(b.identity.model, "NVIDIA Jetson AGX Orin Developer Kit");
    assert_eq!(b.identity.soc, Soc::T234);
    assert_eq!(b.identity.l4t_major, Some(36));
    assert_eq!(b.identity.module.as_deref(), Some("p3701-0000"));
    assert_eq!(b.cpu_count(), 12);
    let policies: Vec<usize> = b.clusters.iter().map(|c| c.policy).collect();
    assert_eq!(policies, [0, 4, 8]);
    assert_eq!(b.clusters[2].cpus, [8, 9, 10, 11]);
    assert_eq!(b.clusters[0].table_hz.last(), Some(&2_201_600_000));
    let gpu = b.gpu.as_ref().unwrap();
    assert_eq!(
        gpu.devfreq.to_str(),
        Some("/sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu")
    );
    assert_eq!(gpu.table_hz.len(), 11);
    assert_eq!(gpu.table_hz[0], 306_000_000);
    assert_eq!(gpu.governor, "nvhost_podgov");
    let emc = b.emc.as_ref().unwrap();
    assert_eq!(
        b.knobs[emc.cap].path.to_str(),
        Some("/sys/kernel/nvpmodel_clk_cap/emc")
    );
    assert_eq!(emc.table_source, EmcTableSource::SocTableDebugfsLimited);
    assert_eq!(emc.table_hz.last(), Some(&3_199_000_000));
    assert_eq!(emc.uncapped_raw(), 3_199_000_000);
    let rails: Vec<(&str, RailRole)> = b.rails.iter().map(|r| (r.label.as_str(), r.role)).collect();
    assert_eq!(
        rails,
        [
            ("VDD_GPU_SOC", RailRole::Module),
            ("VDD_CPU_CV", RailRole::Module),
            ("VIN_SYS_5V0", RailRole::Carrier),
            ("VDDQ_VDD2_1V8AO", RailRole::Module),
        ]
    );
    // 19864 mV x 180 mA, as the reference tree's illustrative reading.
    assert_eq!(b.rails[0].read_mw().unwrap(), 19864 * 180 / 1000);
    assert_eq!(
        b.totals.module_names(&b.rails),
        ["VDD_GPU_SOC", "VDD_CPU_CV", "VDDQ_VDD2_1V8AO"]
    );
    assert_eq!(b.totals.input, None);
    assert_eq!(
        b.knobs.len(),
        12 + 6 + 2 + 1 + 2 * 2 + 2,
        "cores, clusters, GPU, EMC, INA samples and update_interval, GPU rail gating and runtime PM"
    );
    // The measurement lock's GPU knobs: rail gating on, runtime PM `auto` (word 0).
    let values = b.read_knobs().unwrap();
    let railgate = b.knob(KnobKind::GpuRailgate).unwrap();
    let pm = b.knob(KnobKind::GpuPowerControl).unwrap();
    assert_eq!((values[railgate], values[pm]), (1, 0));
    assert!(b.knobs[pm].path.ends_with("17000000.gpu/power/control"));
}

#[test]
fn reference_xavier_agx_r32() {
    let Some((_tree, b)) = reference_board("xavier-agx-r32", "reference_xavier_agx_r32") else {
        return;
    };
    assert_eq!(b.identity.soc, Soc::T194);
    assert_eq!(b.identity.l4t_major, Some(32));
    assert_eq!(b.cpu_count(), 8);
    assert_eq!(b.clusters.len(), 4);
    let gpu = b.gpu.as_ref().unwrap();
    assert_eq!(gpu.dir.to_str(), Some("/sys/devices/17000000.gv11b"));
    assert_eq!(gpu.table_hz.len(), 14);
    let emc = b.emc.as_ref().unwrap();
    assert_eq!(
        b.knobs[emc.cap].path.to_str(),
        Some("/sys/kernel/nvpmodel_emc_cap/emc_iso_cap")
    );
    assert_eq!(emc.uncapped_raw(), 0);
    let labels: Vec<&str> = b.rails.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"]);
    assert!(b.ina.iter().all(|c| c.driver == "ina3221x"));
    assert_eq!(b.rails[0].read_mw().unwrap(), 1144);
    assert_eq!(b.totals.module.len(), 5);
}

#[test]
fn reference_nano_r32() {
    let Some((_tree, b)) = reference_board("nano-r32", "reference_nano_r32") else {
        return;
    };
    assert_eq!(b.identity.soc, Soc::T210);
    assert_eq!(b.cpu_count(), 4);
    assert_eq!(b.clusters.len(), 1);
    assert_eq!(b.clusters[0].table_hz.len(), 15);
    let gpu = b.gpu.as_ref().unwrap();
    assert!(gpu.devfreq.ends_with("57000000.gpu"));
    assert_eq!(gpu.table_hz.last(), Some(&921_600_000));
    let labels: Vec<&str> = b.rails.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]);
    assert_eq!(b.totals.input, Some(0));
    assert_eq!(b.totals.module, [0]);
    assert_eq!(b.rails[1].role, RailRole::Sub);
    // No debugfs bpmp clock on t210: the SoC table up to the module's 1600 MHz.
    assert_eq!(
        b.emc.as_ref().unwrap().table_source,
        EmcTableSource::SocTable
    );
}

/// The activity counters on each reference tree: what the tree has is read (GPU load and
/// clock, each CPU's jiffies and clock, EMC activity and clock from BPMP's debugfs clock or
/// t210's `override.emc`), what it lacks (meminfo, diskstats, fan files in these trees) is
/// absent, never zero.
#[test]
fn activity_counters_on_the_reference_trees() {
    use jpower::board::counters::{Counters, RawCounters};
    let test = "activity_counters_on_the_reference_trees";
    // (tree, CPUs, GPU Hz, CPU kHz, EMC Hz)
    let want = [
        (
            "orin-agx-r36",
            12,
            306_000_000,
            1_113_600,
            Some(2_133_000_000),
        ),
        (
            "xavier-agx-r32",
            8,
            318_750_000,
            1_190_400,
            Some(2_133_000_000),
        ),
        // t210 has no BPMP: the rate comes from `clk/override.emc`.
        ("nano-r32", 4, 76_800_000, 825_600, Some(1_600_000_000)),
    ];
    for (name, cpus, gpu_hz, cpu_khz, emc_hz) in want {
        let Some((_tree, b)) = reference_board(name, test) else {
            return;
        };
        let mut c = Counters::open(&b);
        let mut raw = RawCounters::default();
        c.read(&mut raw);
        assert_eq!(
            (raw.gpu_load_pm, raw.gpu_hz),
            (Some(0), Some(gpu_hz)),
            "{name}"
        );
        assert_eq!(raw.emc_hz, emc_hz, "{name}");
        // Activity needs the rate; the trees hold an idle mc_all.
        assert_eq!(raw.emc_activity_pm, emc_hz.map(|_| 0), "{name}");
        for cpu in 0..16 {
            let online = cpu < cpus;
            assert_eq!(
                raw.cpu_jiffies[cpu],
                online.then_some((0, 0)),
                "{name} cpu{cpu}"
            );
            assert_eq!(
                raw.cpu_khz[cpu],
                online.then_some(cpu_khz),
                "{name} cpu{cpu}"
            );
        }
        assert_eq!(
            (raw.memory, raw.fan_pwm, raw.fan_rpm),
            (None, None, None),
            "{name}"
        );
        assert!(c.disks.is_empty() && raw.disk_sectors.iter().all(Option::is_none));
    }
}

/// Found on board trees unlike the references: a GPU without `cur_freq` was given up on
/// after its clock limits had become knobs, which no plan then wrote (a restore left the
/// GPU capped and said it was done). A GPU given up on leaves no knob, and says why.
#[test]
fn a_gpu_given_up_on_leaves_no_knobs_behind() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx@r36", dir.path()).unwrap();
    std::fs::remove_file(
        dir.path()
            .join("sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/cur_freq"),
    )
    .unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    assert!(b.gpu.is_none());
    assert!(
        !b.knobs
            .iter()
            .any(|k| matches!(k.kind, KnobKind::GpuMin | KnobKind::GpuMax)),
        "{:?}",
        b.knobs.iter().map(|k| k.kind).collect::<Vec<_>>()
    );
    assert!(
        b.warnings
            .iter()
            .any(|w| w.contains("cur_freq") && w.contains("not controlled")),
        "{:?}",
        b.warnings
    );
}

/// Found on board trees unlike the references: a FIFO where the board has a file (here a
/// rail's label and a CPU's running clock) hung `status` for good. Opens never block: the
/// FIFO reads empty, and discovery goes on.
#[test]
fn a_fifo_in_the_tree_does_not_hang_discovery() {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export("orin-agx@r36", dir.path()).unwrap();
    for f in [
        "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040/hwmon/hwmon3/in1_label",
        "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq",
    ] {
        let path = dir.path().join(f);
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let root = dir.path().to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Board::discover(Root::host(&root)).map(|b| b.rails.len()));
    });
    let rails = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("discovery returns")
        .unwrap();
    assert!(rails >= 3, "{rails}");
}
