//! nvpmodel import: project-written fixtures, malformed files with file:line errors, and
//! the real NVIDIA files of the reference directory mapped onto boards by kind.

use crate::util;
use jpower::board::sysfs::Root;
use jpower::board::Board;
use jpower::control::mode::{EmcLimit, Range};
use jpower::control::preset::Presets;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvpmodel")
        .join(name)
}

fn exported(id: &str) -> (tempfile::TempDir, Board) {
    let dir = tempfile::tempdir().unwrap();
    jpower::sim::export(id, dir.path()).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    (dir, b)
}

#[test]
fn r35_paths_map_onto_an_r36_layout_by_kind() {
    // The fixture names 17000000.ga10b paths; the r36 board's GPU is 17000000.gpu.
    let (_d, b) = exported("orin-agx@r36");
    let p = Presets::load(&fixture("orin-style.conf"), &b).unwrap();
    assert_eq!(p.default_id, 1);
    let fast = p.find("fast").unwrap();
    // FAST names cpu4-7 online and no other: as nvpmodel, it leaves the others alone
    // (Xavier NX's files never name the cpu6 and cpu7 its boot scripts take offline).
    assert_eq!(fast.mode.online_cpus.as_deref(), Some(&[4, 5, 6, 7][..]));
    assert_eq!(fast.mode.cpus_named.as_deref(), Some(&[4, 5, 6, 7][..]));
    let mut current = b.read_knobs().unwrap();
    let online = |v: &jpower::board::Values, cpu: usize| v[b.cpus[cpu].1.unwrap()];
    current[b.cpus[2].1.unwrap()] = 0;
    current[b.cpus[5].1.unwrap()] = 0;
    let t = jpower::control::plan::target(&b, &fast.mode, &current).unwrap();
    assert_eq!(
        (online(&t, 2), online(&t, 5), online(&t, 9)),
        (0, 1, 1),
        "cpu2 stays offline, cpu5 comes online, cpu9 stays online"
    );
    assert_eq!(
        fast.mode.gpu,
        Some(Range {
            min_hz: 306_000_000,
            max_hz: 1_300_500_000
        })
    );
    assert_eq!(fast.mode.emc, Some(EmcLimit::Uncapped));
    assert_eq!(
        fast.mode.cpu[0],
        Some(Range {
            min_hz: 729_600_000,
            max_hz: 2_201_600_000
        })
    );
    assert_eq!(fast.mode.cpu[2], None, "CPU_A78_2 is not in the file");
    let skipped: Vec<&str> = fast.skipped.iter().map(|s| s.param.as_str()).collect();
    assert_eq!(skipped, ["TPC_POWER_GATING", "DLA0_CORE"]);
    assert!(fast.skipped[0].why.contains("reboot"));

    let slow = p.find("1").unwrap();
    assert_eq!(slow.mode.online_cpus.as_deref(), Some(&[][..]));
    assert_eq!(slow.mode.cpus_named, Some((1..=11).collect()));
    // 1200000 kHz is no table entry: nvpmodel takes the largest entry below it.
    assert_eq!(
        slow.mode.cpu[0],
        Some(Range {
            min_hz: 729_600_000,
            max_hz: 1_190_400_000
        })
    );
    assert!(
        slow.snapped
            .iter()
            .any(|s| s.contains("1200000 -> 1190400")),
        "{:?}",
        slow.snapped
    );
    assert_eq!(slow.mode.gpu.unwrap().max_hz, 408_000_000);
    assert_eq!(slow.mode.emc, Some(EmcLimit::CapHz(665_600_000)));
    let e = p.find("nope").unwrap_err().to_string();
    assert!(e.contains("FAST (0), SLOW (1)"), "{e}");
}

#[test]
fn malformed_files_report_file_and_line_through_the_cli() {
    let rt = util::runtime();
    for (file, line, what) in [
        ("truncated-block.conf", 3, "not closed"),
        ("unknown-param.conf", 5, "DLA"),
        ("bad-number.conf", 5, "13O0500000"),
    ] {
        let out = util::run(
            util::jpower(rt.path())
                .args(["--sim", "orin-agx", "modes", "--nvpmodel"])
                .arg(fixture(file)),
        );
        assert_eq!(out.status.code(), Some(1), "{file}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains(&format!("{file}:{line}:")), "{file}: {err}");
        assert!(err.contains(what), "{file}: {err}");
        // Its kind is the nvpmodel layer's (a review found `preset`, the layer above).
        let out = util::run(
            util::jpower(rt.path())
                .args(["--sim", "orin-agx", "--json", "modes", "--nvpmodel"])
                .arg(fixture(file)),
        );
        let j = util::json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(j["kind"], "nvpmodel", "{file}: {j}");
    }
}

#[test]
fn simulated_boards_presets_come_from_their_nvpmodel_file() {
    for spec in jpower::sim::spec::BOARDS {
        let (dir, b) = exported(&spec.id());
        let p = Presets::load(&dir.path().join("etc/nvpmodel.conf"), &b).unwrap();
        assert_eq!(p.presets.len(), spec.presets.len(), "{}", spec.id());
        assert_eq!(p.default_id, spec.default_preset);
        for (pr, ps) in p.presets.iter().zip(spec.presets) {
            assert_eq!(pr.name, ps.name);
            assert_eq!(
                pr.mode.online_cpus.as_ref().unwrap().len(),
                ps.cores,
                "{} {}",
                spec.id(),
                pr.name
            );
        }
    }
}

/// Found by a review: with preset 1 named `2`, `jpower set 2` applied preset 1. A number
/// is an id, as `nvpmodel -m` takes it; names are matched only where no id is.
#[test]
fn a_number_is_an_id_before_it_is_a_name() {
    let (dir, b) = exported("orin-agx");
    let conf = dir.path().join("etc/nvpmodel.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, text.replace("ID=1 NAME=MODE_15W", "ID=1 NAME=2")).unwrap();
    let p = Presets::load(&conf, &b).unwrap();
    assert_eq!(p.find("2").unwrap().name, "MODE_30W");
    assert_eq!(p.find("1").unwrap().name, "2");
    assert_eq!(p.find("mode_30w").unwrap().id, 2);
    assert!(p.find("7").is_err());
}

fn reference_import(conf: &str, board: &str, test: &str) -> Option<Presets> {
    let confs = util::reference("nvpmodel", test)?;
    let tree = util::reference_tree(board, test)?;
    let b = Board::discover(Root::host(tree.path())).unwrap();
    Some(Presets::load(&confs.join(conf), &b).unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn reference_p3701_conf_on_the_orin_r36_tree() {
    let Some(p) = reference_import(
        "nvpmodel_p3701_0000.conf",
        "orin-agx-r36",
        "reference_p3701_conf_on_the_orin_r36_tree",
    ) else {
        return;
    };
    let names: Vec<&str> = p.presets.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["MAXN", "MODE_15W", "MODE_30W", "MODE_50W"]);
    assert_eq!(p.default_id, 2);
    let maxn = p.find("MAXN").unwrap();
    assert_eq!(
        maxn.mode.cpu[0],
        Some(Range {
            min_hz: 729_600_000,
            max_hz: 2_201_600_000
        })
    );
    assert_eq!(
        maxn.mode.gpu,
        Some(Range {
            min_hz: 306_000_000,
            max_hz: 1_300_500_000
        })
    );
    assert_eq!(maxn.mode.emc, Some(EmcLimit::Uncapped));
    let m15 = p.find("MODE_15W").unwrap();
    assert_eq!(m15.mode.online_cpus.as_deref(), Some(&[0, 1, 2, 3][..]));
    assert_eq!(m15.mode.gpu.unwrap().max_hz, 408_000_000);
    assert_eq!(m15.mode.emc, Some(EmcLimit::CapHz(2_133_000_000)));
    assert_eq!(m15.mode.cpu[0].unwrap().max_hz, 1_113_600_000);
    let skipped: std::collections::BTreeSet<&str> =
        m15.skipped.iter().map(|s| s.param.as_str()).collect();
    for p in [
        "TPC_POWER_GATING",
        "DLA0_CORE",
        "PVA0_VPS",
        "GPU_POWER_CONTROL_ENABLE",
    ] {
        assert!(skipped.contains(p), "{p} not skipped: {skipped:?}");
    }
}

#[test]
fn reference_t194_conf_on_the_xavier_tree() {
    let Some(p) = reference_import(
        "nvpmodel_t194.conf",
        "xavier-agx-r32",
        "reference_t194_conf_on_the_xavier_tree",
    ) else {
        return;
    };
    assert_eq!(p.presets.len(), 8);
    let m10 = p.find("MODE_10W").unwrap();
    assert_eq!(m10.mode.online_cpus.as_ref().map(|c| c.len()), Some(2));
    // 1200000 kHz reads back as 1190400 on a real Xavier: the table entry below.
    assert_eq!(m10.mode.cpu[0].unwrap().max_hz, 1_190_400_000);
    assert_eq!(m10.mode.emc, Some(EmcLimit::CapHz(1_065_600_000)));
}

#[test]
fn reference_t186_conf_parses_and_maps_what_it_can() {
    let Some(dir) = util::reference(
        "nvpmodel",
        "reference_t186_conf_parses_and_maps_what_it_can",
    ) else {
        return;
    };
    // No TX2 tree: map onto the Xavier layout, which shares cpufreq and devfreq kinds.
    let (_d, b) = exported("xavier-agx");
    let p = Presets::load(&dir.join("nvpmodel_t186.conf"), &b).unwrap();
    let names: Vec<&str> = p.presets.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["MAXN", "MAXQ", "MAXP_CORE_ALL", "MAXP_CORE_ARM"]);
    let maxq = p.find("MAXQ").unwrap();
    let online = maxq.mode.online_cpus.as_ref().unwrap();
    assert!(
        !online.contains(&1) && !online.contains(&2),
        "Denver cores offline: {online:?}"
    );
}

/// Regression (review finding 2): L4T 32 files put DLA/PVA/CVNAS caps next to the EMC cap.
#[test]
fn nafll_caps_beside_the_emc_cap_are_not_the_emc_cap() {
    let (dir, b) = exported("xavier-agx");
    let conf = dir.path().join("extra.conf");
    let text = std::fs::read_to_string(dir.path().join("etc/nvpmodel.conf")).unwrap();
    let text = text
        .replacen("< POWER_MODEL", "< PARAM TYPE=CLOCK NAME=CVNAS >\nMAX_FREQ /sys/kernel/nvpmodel_emc_cap/nafll_cvnas\n< POWER_MODEL", 1)
        .replacen("EMC MAX_FREQ 1331200000", "EMC MAX_FREQ 1331200000\nCVNAS MAX_FREQ 576000000", 1);
    std::fs::write(&conf, text).unwrap();
    let p = Presets::load(&conf, &b).unwrap();
    let m15 = p.find("MODE_15W").unwrap();
    assert_eq!(m15.mode.emc, Some(EmcLimit::CapHz(1_331_200_000)));
    assert!(
        m15.skipped.iter().any(|s| s.param == "CVNAS"),
        "{:?}",
        m15.skipped
    );
}

/// Found on board trees unlike the references: L4T links `/etc/nvpmodel.conf` to
/// `/etc/nvpmodel/nvpmodel_<module>.conf` with an absolute link, which must resolve inside
/// `--root`, not on the host; and one line the parser refuses must not stop the commands
/// that work without presets (`status`, the agent), only those that need them.
#[test]
fn the_boards_own_file_is_followed_inside_the_root_and_a_bad_one_only_warns() {
    let (dir, _) = exported("orin-agx@r36");
    let rt = util::runtime();
    let etc = dir.path().join("etc");
    std::fs::create_dir(etc.join("nvpmodel")).unwrap();
    std::fs::rename(
        etc.join("nvpmodel.conf"),
        etc.join("nvpmodel/nvpmodel_p3701_0000.conf"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "/etc/nvpmodel/nvpmodel_p3701_0000.conf",
        etc.join("nvpmodel.conf"),
    )
    .unwrap();
    let status = |expect_ok: bool| {
        let out = util::run(
            util::jpower(rt.path())
                .arg("--root")
                .arg(dir.path())
                .args(["--json", "status"]),
        );
        assert_eq!(out.status.success(), expect_ok, "{out:?}");
        (
            util::json(&String::from_utf8_lossy(&out.stdout)),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (j, _) = status(true);
    let from = j["mode"]["presets_from"].as_str().unwrap().to_string();
    assert!(
        from.starts_with(dir.path().to_str().unwrap())
            && from.ends_with("nvpmodel_p3701_0000.conf"),
        "{from}"
    );
    // One line NVIDIA's parser might take but jpower's refuses.
    let conf = etc.join("nvpmodel/nvpmodel_p3701_0000.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}\nCPU_ONLINE CORE_1 1 # trailing\n")).unwrap();
    let (j, err) = status(true);
    assert_eq!(j["mode"]["presets_from"], serde_json::Value::Null, "{j}");
    assert!(
        err.contains("nvpmodel_p3701_0000.conf:") && err.contains("without presets"),
        "{err}"
    );
    let out = util::run(
        util::jpower(rt.path())
            .arg("--root")
            .arg(dir.path())
            .arg("modes"),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nvpmodel_p3701_0000.conf:"),
        "{out:?}"
    );
}

/// Found by fuzzing nvpmodel files: a limit whose kHz overflow 64 bits in Hz wrapped to a
/// few hundred Hz (the table's lowest clock). It is above every entry: the top.
#[test]
fn a_limit_beyond_64_bits_is_the_top_of_the_table() {
    let (_d, b) = exported("orin-agx@r36");
    let text = std::fs::read_to_string(fixture("orin-style.conf"))
        .unwrap()
        .replacen(
            "CPU_A78_0 MAX_FREQ -1",
            "CPU_A78_0 MAX_FREQ 18446744073709552",
            1,
        );
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("huge.conf");
    std::fs::write(&conf, text).unwrap();
    let p = Presets::load(&conf, &b).unwrap();
    assert_eq!(
        p.find("fast").unwrap().mode.cpu[0],
        Some(Range {
            min_hz: 729_600_000,
            max_hz: 2_201_600_000
        })
    );
}

/// Found on board trees unlike the references: where the board lacks a knob's table (or
/// the knob), a preset's setting of it vanished without a word, so `set` dropped it and
/// `status` still named the preset; and the EMC cap's "no cap" was kept without an EMC
/// control while a cap was dropped, so `set MAXN` failed where `set MODE_15W` did not.
/// Each is skipped with its reason, and every preset applies.
#[test]
fn settings_the_board_cannot_take_are_skipped_with_the_reason() {
    let (dir, _) = exported("orin-agx@r36");
    std::fs::write(
        dir.path().join(
            "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/available_frequencies",
        ),
        "",
    )
    .unwrap();
    std::fs::remove_file(dir.path().join("sys/kernel/nvpmodel_clk_cap/emc")).unwrap();
    let b = Board::discover(Root::host(dir.path())).unwrap();
    let p = Presets::load(&dir.path().join("etc/nvpmodel.conf"), &b).unwrap();
    for pr in &p.presets {
        let why = |param: &str| {
            pr.skipped
                .iter()
                .find(|s| s.param == param)
                .map(|s| s.why)
                .unwrap_or_else(|| panic!("{}: {param} not skipped: {:?}", pr.name, pr.skipped))
        };
        assert!(
            why("GPU").contains("no GPU frequency control"),
            "{}",
            pr.name
        );
        assert!(why("EMC").contains("no EMC cap control"), "{}", pr.name);
        assert_eq!((pr.mode.gpu, pr.mode.emc), (None, None), "{}", pr.name);
    }
    let rt = util::runtime();
    for preset in ["MAXN", "MODE_15W"] {
        util::ok(
            util::jpower(rt.path())
                .arg("--root")
                .arg(dir.path())
                .args(["set", preset]),
        );
    }
}

/// Found by fuzzing nvpmodel files: arguments were mapped by their names where nvpmodel
/// writes their paths. A `CORE_8` argument whose path is cpu1's is cpu1; CPU clocks
/// addressed through `cpufreq/policyN` are that policy's cluster.
#[test]
fn arguments_map_by_their_paths_not_their_names() {
    let (_d, b) = exported("orin-agx@r36");
    let text = std::fs::read_to_string(fixture("orin-style.conf")).unwrap();
    let text =
        text.replace(
            "CORE_1 /sys/devices/system/cpu/cpu1/online",
            "CORE_1 /sys/devices/system/cpu/cpu8/online",
        )
        .replace(
            "CORE_8 /sys/devices/system/cpu/cpu8/online",
            "CORE_8 /sys/devices/system/cpu/cpu1/online",
        )
        .replace(
            "/sys/devices/system/cpu/cpu4/cpufreq/",
            "/sys/devices/system/cpu/cpufreq/policy4/",
        ) + "\n< POWER_MODEL ID=2 NAME=ONE >\nCPU_ONLINE CORE_1 0\nCPU_ONLINE CORE_0 0\n";
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("renamed.conf");
    std::fs::write(&conf, text).unwrap();
    let p = Presets::load(&conf, &b).unwrap();
    let one = p.find("ONE").unwrap();
    assert_eq!(
        (
            one.mode.online_cpus.as_deref(),
            one.mode.cpus_named.as_deref()
        ),
        (Some(&[][..]), Some(&[8][..])),
        "CORE_1's file is cpu8's"
    );
    assert!(
        one.skipped[0].why.contains("cpu0 cannot go offline"),
        "{:?}",
        one.skipped
    );
    let fast = p.find("FAST").unwrap();
    assert_eq!(
        fast.mode.cpu[1],
        Some(Range {
            min_hz: 729_600_000,
            max_hz: 2_201_600_000
        }),
        "policy4's limits are the second cluster's"
    );
}

/// Found by a review: `CPU_ONLINE CORE_4 2` was taken as online and `GPU MAX_FREQ -5` as
/// the table maximum. Found by a later one: skipped with a note instead, a skipped limit's
/// side was filled from the table: `GPU MAX_FREQ -2` in a 15 W preset set
/// its GPU cap to the top clock, and `status` called the board in that preset. Such a value
/// is an error naming the file and line, as a malformed line is.
#[test]
fn a_value_no_knob_can_take_is_an_error_naming_its_line() {
    let (dir, b) = exported("orin-agx@r36");
    let own = std::fs::read_to_string(dir.path().join("etc/nvpmodel.conf")).unwrap();
    for (from, to, says) in [
        ("GPU MAX_FREQ", "GPU MAX_FREQ -2", "not a frequency"),
        (
            "CPU_ONLINE CORE_4",
            "CPU_ONLINE CORE_4 on",
            "not an integer",
        ),
        ("CPU_ONLINE CORE_4", "CPU_ONLINE CORE_4 2", "0 or 1"),
    ] {
        let (n, _) = (own.lines().enumerate())
            .find(|(_, l)| l.starts_with(from))
            .unwrap();
        let text: Vec<String> = (own.lines().enumerate())
            .map(|(i, l)| if i == n { to.into() } else { l.into() })
            .collect();
        let conf = dir.path().join("bad.conf");
        std::fs::write(&conf, text.join("\n")).unwrap();
        let e = Presets::load(&conf, &b).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}:{}: `{to}", conf.display(), n + 1)) && e.contains(says),
            "{e}"
        );
    }
}

/// Found by running unseen nvpmodel files: Xavier AGX's file (8 CPUs, two-CPU clusters)
/// on an Orin AGX (12 CPUs) left cpu8-11 and their cluster's clock untouched without a
/// word. The presets say what no preset of the file sets; the board's own file sets all.
#[test]
fn what_no_preset_sets_is_said() {
    let (dir, b) = exported("orin-agx@r36");
    let own = Presets::load(&dir.path().join("etc/nvpmodel.conf"), &b).unwrap();
    assert!(own.unset.is_empty(), "{:?}", own.unset);
    let p = Presets::load(&fixture("orin-style.conf"), &b).unwrap();
    assert_eq!(
        p.unset,
        ["policy8 (cpu8-11) clocks (no preset limits them)"],
        "the fixture names every CPU in SLOW but cpu0, and limits two clusters of three"
    );
}

/// Found by a review: a file for a bigger board (a TX2's on a Nano) loaded without a word,
/// its CPUs beyond the board dropped and two of its clusters mapped onto one, and values
/// in another unit were snapped to a table edge with only a note. Each is a warning naming
/// the file's line; a board's own file has none.
#[test]
fn a_file_for_another_board_is_warned_with_its_lines() {
    let rt = util::runtime();
    for id in util::SIM_BOARDS {
        let (dir, b) = exported(id);
        let own = Presets::load(&dir.path().join("etc/nvpmodel.conf"), &b).unwrap();
        assert!(own.warnings.is_empty(), "{id}: {:?}", own.warnings);
    }
    let (xavier, xavier_board) = exported("xavier-agx");
    let conf = xavier.path().join("etc/nvpmodel.conf");
    let own = std::fs::read_to_string(&conf).unwrap();
    // MAXN sets the two clusters apart: on a Nano's one cluster they conflict.
    let text = own.replacen("CPU_1 MAX_FREQ -1", "CPU_1 MAX_FREQ 1200000", 1);
    std::fs::write(&conf, &text).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let (_nano, nano) = exported("nano");
    let p = Presets::load(&conf, &nano).unwrap();
    let conf_on_nano = conf.clone();
    let name = conf.display().to_string();
    let online = format!(
        "{name}:{}: CPU_ONLINE is about cpu4-7,",
        line_of("NAME=CPU_ONLINE")
    );
    let conflict = format!(
        "{name}:{}: CPU_1 sets policy0 (cpu0-3)'s MAX_FREQ to another value than CPU_0 (line {})",
        line_of("CPU_1 MAX_FREQ 1200000"),
        line_of("CPU_0 MAX_FREQ -1")
    );
    for want in [&online, &conflict] {
        assert!(
            p.warnings.iter().any(|w| w.starts_with(want.as_str())),
            "{want}: {:?}",
            p.warnings
        );
    }
    // Per-core parameters that agree (L4T 36.5's CPU_A78_0..7) are no conflict.
    let per_core = own
        .replacen(
            "< PARAM TYPE=CLOCK NAME=CPU_1 >",
            "< PARAM TYPE=CLOCK NAME=CPU_0B >\nMAX_FREQ /sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq\nMIN_FREQ /sys/devices/system/cpu/cpu1/cpufreq/scaling_min_freq\n< PARAM TYPE=CLOCK NAME=CPU_1 >",
            1,
        )
        .replace(
            "CPU_0 MAX_FREQ 1200000\n",
            "CPU_0 MAX_FREQ 1200000\nCPU_0B MAX_FREQ 1200000\n",
        );
    let per_core_conf = xavier.path().join("per-core.conf");
    std::fs::write(&per_core_conf, per_core).unwrap();
    let p = Presets::load(&per_core_conf, &xavier_board).unwrap();
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    // A GPU limit in MHz, and one beyond the table by far.
    let (dir, orin) = exported("orin-agx");
    let conf = dir.path().join("etc/nvpmodel.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    let text = text
        .replacen("GPU MAX_FREQ 408000000", "GPU MAX_FREQ 408", 1)
        .replacen("GPU MIN_FREQ 0", "GPU MIN_FREQ 306000000000", 1);
    std::fs::write(&conf, &text).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let p = Presets::load(&conf, &orin).unwrap();
    let name = conf.display().to_string();
    for (needle, side) in [
        ("GPU MAX_FREQ 408", "below the board's table (lowest"),
        (
            "GPU MIN_FREQ 306000000000",
            "above the board's table (highest",
        ),
    ] {
        let want = format!(
            "{name}:{}: {needle} is over ten times {side}",
            line_of(needle)
        );
        assert!(
            p.warnings.iter().any(|w| w.starts_with(&want)),
            "{want}: {:?}",
            p.warnings
        );
    }

    // The commands log them.
    let out = util::run(
        util::jpower(rt.path())
            .args(["--sim", "nano", "modes", "--nvpmodel"])
            .arg(&conf_on_nano),
    );
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CPU_ONLINE is about cpu4-7"), "{err}");
}
