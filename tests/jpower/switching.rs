//! Mode switching on simulated boards: property tests over mode sequences, a failure
//! injected at every write position, crash recovery, owners that die, read-only knobs.

use crate::util;
use jpower::board::Board;
use jpower::board::Values;
use jpower::control::mode::{Mode, ModeSpace};
use jpower::control::plan;
use jpower::control::preset::Presets;
use jpower::control::state::{Owner, OwnerKind};
use jpower::control::{ControlError, Controller, Restored, Rollback};
use jpower::sim::kernel::Fault;
use jpower::sim::SimBoard;
use proptest::prelude::*;
use std::path::Path;

fn open(id: &str, rt: &Path) -> (SimBoard, Controller) {
    open_as(id, rt, Owner::cli())
}

fn open_as(id: &str, rt: &Path, owner: Owner) -> (SimBoard, Controller) {
    let sim = SimBoard::open(id, rt).unwrap();
    let board = Board::discover(sim.root()).unwrap();
    (sim, Controller::open(board, rt, owner).unwrap())
}

/// Arms a write that fails with EIO at each of the writes `at` from now.
fn fail_writes(sim: &SimBoard, at: impl IntoIterator<Item = u64>) {
    for n in at {
        sim.inject(Fault::FailWrite {
            n,
            errno: libc::EIO,
        });
    }
}

/// Why the rollback after a failed switch failed (panics where it did not).
fn rollback_failure(err: &ControlError) -> &str {
    match err {
        ControlError::Failed {
            rollback: Rollback::Failed(why),
            ..
        } => why,
        other => panic!("{other}"),
    }
}

fn values(c: &Controller) -> Values {
    c.board().read_knobs().unwrap()
}

/// Every (min, max) pair of the board holds min <= max in `v`.
fn ordered(b: &Board, v: &Values) -> bool {
    let pairs = b
        .clusters
        .iter()
        .map(|c| (c.min, c.max))
        .chain(b.gpu.iter().map(|g| (g.min, g.max)));
    pairs.into_iter().all(|(mn, mx)| v[mn] <= v[mx])
}

/// Checks the plan keeps min <= max after every single write.
fn assert_plan_ordered(b: &Board, from: &Values, to: &Values) {
    let mut v = from.clone();
    for s in plan::plan(b, from, to).iter() {
        v[s.knob] = s.value;
        assert!(
            ordered(b, &v),
            "min above max after writing {} to {}",
            s.value,
            b.knobs[s.knob].path.display()
        );
    }
}

fn presets(c: &Controller) -> Vec<Mode> {
    let conf = c.board().root.path("/etc/nvpmodel.conf");
    Presets::load(&conf, c.board())
        .unwrap()
        .presets
        .into_iter()
        .map(|p| p.mode)
        .collect()
}

use crate::util::SIM_BOARDS as BOARDS;

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_of_valid_modes_lands_exactly(board in 0..BOARDS.len(), picks in prop::collection::vec(any::<u32>(), 1..6)) {
        let rt = util::runtime();
        let (_sim, mut c) = open(BOARDS[board], rt.path());
        let space = ModeSpace::of(c.board());
        let presets = presets(&c);
        let initial = values(&c);
        for pick in picks {
            let mode = if pick % 4 == 0 {
                presets[(pick as usize / 4) % presets.len()].clone()
            } else {
                space.get(pick as usize % space.len()).unwrap().to_mode(c.board())
            };
            let before = c.current().clone();
            let want = plan::target(c.board(), &mode, &before).unwrap();
            assert_plan_ordered(c.board(), &before, &want);
            c.apply(&mode).unwrap();
            let now = values(&c);
            prop_assert_eq!(&now, &want, "{}: files differ from the request", BOARDS[board]);
            prop_assert_eq!(c.current(), &now);
        }
        c.restore().unwrap();
        prop_assert_eq!(values(&c), initial);
    }
}

#[test]
fn pinned_clocks_run_at_the_pinned_frequency() {
    let rt = util::runtime();
    for id in BOARDS {
        let (_sim, mut c) = open(id, rt.path());
        let space = ModeSpace::of(c.board());
        let m = space.get(space.len() / 2).unwrap();
        c.apply(&m.to_mode(c.board())).unwrap();
        // The running clocks reach a new rate their knob's settle time after the write.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            c.board().clusters[0].cur.read_u64().unwrap() * 1000,
            m.cpu_hz,
            "{id}"
        );
        assert_eq!(
            c.board().gpu.as_ref().unwrap().cur.read_u64().unwrap(),
            m.gpu_hz,
            "{id}"
        );
        c.restore().unwrap();
    }
}

/// Each knob's switch is timed from the write to its running clock at the new rate: at
/// least the simulated kernel's settle time, every switch settled; the cores have no
/// clock, their time is the hotplug writes'.
#[test]
fn each_knobs_switch_cost_is_timed_to_its_clock_settled() {
    use jpower::control::settle::{self, Knob};
    use jpower::sim::settle::SwitchTimes;
    let rt = util::runtime();
    let (_sim, mut c) = open("orin-agx", rt.path());
    let t = SwitchTimes::DEFAULT;
    for (knob, assumed_ms) in [
        (Knob::Gpu, t.gpu_ms),
        (Knob::Emc, t.emc_ms),
        (Knob::Cpu, t.cpu_ms),
        (Knob::Cores, t.cores_ms),
    ] {
        assert_eq!(settle::unmeasurable(c.board(), knob), None);
        let cost = settle::measure(&mut c, knob, 3).unwrap();
        assert_eq!(cost.unsettled, 0, "{cost:?}");
        assert_eq!(cost.moves_clock, knob != Knob::Cores, "{cost:?}");
        assert!(cost.between[1] < cost.between[0], "{cost:?}");
        for times in [cost.down, cost.up] {
            let times = times.unwrap();
            assert!(times.median_ms >= assumed_ms, "{cost:?}");
            assert!(times.median_ms <= times.p90_ms && times.p90_ms <= times.max_ms);
        }
    }
    c.restore().unwrap();
}

#[test]
fn a_failure_at_every_write_position_rolls_back_exactly() {
    for id in ["xavier-agx", "orin-agx", "orin-agx@r36"] {
        let rt = util::runtime();
        let (sim, mut c) = open(id, rt.path());
        let space = ModeSpace::of(c.board());
        let low = space.get(0).unwrap().to_mode(c.board());
        let high = space.get(space.len() - 1).unwrap().to_mode(c.board());
        for (from, to) in [(&low, &high), (&high, &low)] {
            c.apply(from).unwrap();
            let prior = values(&c);
            let n = plan::plan(
                c.board(),
                &prior,
                &plan::target(c.board(), to, &prior).unwrap(),
            )
            .len();
            assert!(n > 5, "{id}: a switch of {n} writes is too small a test");
            for k in 1..=n as u64 {
                sim.inject(Fault::FailWrite {
                    n: k,
                    errno: libc::EIO,
                });
                let err = c.apply(to).unwrap_err();
                assert!(
                    matches!(
                        err,
                        ControlError::Failed {
                            rollback: Rollback::Done(_),
                            ..
                        }
                    ),
                    "{id} write {k}: {err}"
                );
                let msg = err.to_string();
                assert!(
                    msg.contains("Input/output error (EIO)") && msg.contains("failed to write"),
                    "{msg}"
                );
                assert_eq!(
                    values(&c),
                    prior,
                    "{id}: failure at write {k} of {n} left the board changed"
                );
                assert_eq!(c.current(), &prior);
            }
            c.apply(to).unwrap();
        }
        c.restore().unwrap();
    }
}

#[test]
fn l4t32_rejects_min_above_max_and_the_planner_never_asks() {
    let rt = util::runtime();
    let (_sim, c) = open("xavier-agx", rt.path());
    let b = c.board();
    let gpu = b.gpu.as_ref().unwrap();
    // The kernel model: a min above the current max is EINVAL on L4T 32.
    let err = b.knobs[gpu.min]
        .attr
        .write_u64(gpu.table_hz[gpu.table_hz.len() - 1] + 1)
        .unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL), "{err}");
    drop(c);
    let (_sim, c) = open("orin-agx", rt.path());
    let b = c.board();
    let g = b.gpu.as_ref().unwrap();
    // L4T 35 clamps instead: the write succeeds and min reads back as max.
    let max = b.knobs[g.max].attr.read_u64().unwrap();
    b.knobs[g.max].attr.write_u64(g.table_hz[0]).unwrap();
    b.knobs[g.min].attr.write_u64(max).unwrap();
    assert_eq!(b.knobs[g.min].attr.read_u64().unwrap(), g.table_hz[0]);
}

#[test]
fn cpu0_never_goes_offline() {
    let rt = util::runtime();
    let (_sim, mut c) = open("orin-agx", rt.path());
    let mode = Mode {
        online_cpus: Some([1, 2].into_iter().collect()),
        ..Mode::default()
    };
    let e = c.apply(&mode).unwrap_err().to_string();
    assert!(e.contains("cpu0"), "{e}");
    let k = c.board().cpus[0].1.unwrap();
    let err = c.board().knobs[k].attr.write_u64(0).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EBUSY));
}

#[test]
fn a_dead_lease_owner_is_a_crash_and_the_next_start_restores() {
    let rt = util::runtime();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let owner = Owner::new(OwnerKind::Lease, dead, "test client");
    let (_sim, mut c) = open_as("orin-agx", rt.path(), owner);
    let baseline = values(&c);
    let space = ModeSpace::of(c.board());
    c.apply(&space.get(7).unwrap().to_mode(c.board())).unwrap();
    assert_ne!(values(&c), baseline);
    drop(c);
    let (_sim, c) = open("orin-agx", rt.path());
    assert_eq!(values(&c), baseline);
    assert!(c.state().is_none());
    assert!(
        c.recovered().iter().any(|r| r.contains("died")),
        "{:?}",
        c.recovered()
    );
}

#[test]
fn state_from_an_earlier_boot_is_discarded() {
    let rt = util::runtime();
    let (_sim, mut c) = open("nano", rt.path());
    c.apply(&ModeSpace::of(c.board()).get(3).unwrap().to_mode(c.board()))
        .unwrap();
    let key = c.board().key();
    drop(c);
    let path = rt.path().join("state").join(format!("{key}.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut st: serde_json::Value = serde_json::from_str(&text).unwrap();
    st["boot_id"] = "an-earlier-boot".into();
    std::fs::write(&path, st.to_string()).unwrap();
    let (_sim, mut c) = open("nano", rt.path());
    assert!(c.state().is_none());
    assert!(c.recovered().iter().any(|r| r.contains("earlier boot")));
    assert!(matches!(c.restore().unwrap(), Restored::Nothing));
}

#[test]
fn a_read_only_knob_fails_before_any_write() {
    use std::os::unix::fs::PermissionsExt;
    let rt = util::runtime();
    let sim = SimBoard::open("orin-agx", rt.path()).unwrap();
    let max = sim
        .root()
        .path("/sys/devices/platform/17000000.ga10b/devfreq/17000000.ga10b/max_freq");
    std::fs::set_permissions(&max, std::fs::Permissions::from_mode(0o444)).unwrap();
    let board = Board::discover(sim.root()).unwrap();
    // One line for all read-only knobs, naming the first (a review found one a knob).
    let said: Vec<&String> = board
        .warnings
        .iter()
        .filter(|w| w.contains("read-only"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", board.warnings);
    assert!(
        said[0].contains("1 of ") && said[0].contains("17000000.ga10b/max_freq first"),
        "{said:?}"
    );
    let mut c = Controller::open(board, rt.path(), Owner::cli()).unwrap();
    let before = values(&c);
    let mode = ModeSpace::of(c.board()).get(0).unwrap().to_mode(c.board());
    let e = c.apply(&mode).unwrap_err().to_string();
    assert!(
        e.contains("cannot write") && e.contains("max_freq") && e.contains("(E"),
        "{e}"
    );
    assert_eq!(values(&c), before);
    assert!(
        c.state().is_none(),
        "no baseline is saved for a switch that cannot start"
    );
    // Found by an integrator's review: write access granted after discovery (udev's
    // rules running after the agent started) stayed refused until a restart. The knob is
    // opened again when a switch needs it.
    std::fs::set_permissions(&max, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.apply(&mode).unwrap();
    assert_ne!(values(&c), before);
    c.restore().unwrap();
    assert_eq!(values(&c), before);
}

/// Found by a review: a first switch that failed and was rolled back kept its baseline,
/// so the board looked held by a `jpower set` that never changed it, and the next agent
/// refused every client until someone ran `jpower restore`. With the board as it was,
/// nothing is held.
#[test]
fn a_first_switch_rolled_back_holds_nothing() {
    let rt = util::runtime();
    let (sim, mut c) = open("orin-agx", rt.path());
    let before = values(&c);
    let space = ModeSpace::of(c.board());
    let low = space.get(0).unwrap().to_mode(c.board());
    sim.inject(Fault::FailWrite {
        n: 2,
        errno: libc::EINVAL,
    });
    let err = c.apply(&low).unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Failed {
                rollback: Rollback::Done(_),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(values(&c), before);
    assert!(c.state().is_none());
    drop(c);
    let board = Board::discover(sim.root()).unwrap();
    let mut c = Controller::open(board, rt.path(), Owner::cli()).unwrap();
    assert!(c.state().is_none(), "{:?}", c.state());
    assert!(matches!(c.restore().unwrap(), Restored::Nothing));
    // A failure after jpower's first write keeps the baseline of that first write.
    c.apply(&low).unwrap();
    let high = space.get(space.len() - 1).unwrap().to_mode(c.board());
    sim.inject(Fault::FailWrite {
        n: 2,
        errno: libc::EINVAL,
    });
    c.apply(&high).unwrap_err();
    assert!(c.state().is_some());
    c.restore().unwrap();
    assert_eq!(values(&c), before);
}

#[test]
fn a_set_killed_between_two_writes_is_rolled_back_by_the_next_command() {
    let rt = util::runtime();
    let status = |rt: &Path| {
        util::json(&util::ok(
            util::jpower(rt).args(["--sim", "orin-agx", "--json", "status"]),
        ))
    };
    let before = status(rt.path())["knobs"].clone();
    let out = util::run(
        util::jpower(rt.path())
            .env("JPOWER_SIM_FAULT", "abort-after-writes=3")
            .args(["--sim", "orin-agx", "set", "MODE_15W"]),
    );
    assert!(!out.status.success(), "the set should have been killed");
    // A command that only reads reports what is pending and leaves it.
    let pending = status(rt.path());
    assert!(
        pending["pending_recovery"]
            .to_string()
            .contains("unfinished switch"),
        "{pending}"
    );
    let recovered = util::json(&util::ok(util::jpower(rt.path()).args([
        "--sim",
        "orin-agx",
        "--json",
        "restore",
        "--if-crashed",
    ])));
    assert!(
        recovered["recovered"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("unfinished switch")),
        "{recovered}"
    );
    let after = status(rt.path());
    assert_eq!(after["pending_recovery"], serde_json::json!([]));
    assert_eq!(after["knobs"], before);
    // The board is back where it was; the baseline is still held for `restore`.
    util::ok(util::jpower(rt.path()).args(["--sim", "orin-agx", "restore"]));
    assert_eq!(status(rt.path())["knobs"], before);
}

/// Found by a review: a truncated state file made every command fail, `status` (which
/// only reads) included, with the parser's words alone; a state file of another layout
/// version was read as if it were this one's. `status` lists either under
/// `pending_recovery`; the commands that write refuse with what to do.
#[test]
fn a_state_file_that_is_no_state_is_reported_and_refused_with_advice() {
    let rt = util::runtime();
    let jp = |args: &[&str]| {
        let mut c = util::jpower(rt.path());
        c.args(["--sim", "orin-agx"]).args(args);
        c
    };
    util::ok(&mut jp(&["set", "MODE_15W"]));
    let dir = rt.path().join("state");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let mut newer: serde_json::Value = serde_json::from_str(&text).unwrap();
    newer["version"] = 7.into();
    for (bad, says) in [
        (text[..100].to_string(), "does not parse"),
        (newer.to_string(), "layout version 7"),
    ] {
        std::fs::write(&file, bad).unwrap();
        let status = util::json(&util::ok(&mut jp(&["--json", "status"])));
        assert!(
            status["pending_recovery"].to_string().contains(says),
            "{status}"
        );
        let out = util::run(&mut jp(&["set", "MODE_30W"]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(says) && err.contains("move the file aside"),
            "{err}"
        );
    }
}

/// `restore --if-crashed` on simulated Orin AGX rolls back the unfinished switch a dead
/// process left.
fn recovers_the_unfinished_switch(rt: &Path) {
    let after = util::json(&util::ok(util::jpower(rt).args([
        "--sim",
        "orin-agx",
        "--json",
        "restore",
        "--if-crashed",
    ])));
    assert!(
        after["recovered"].to_string().contains("unfinished switch"),
        "{after}"
    );
}

/// Regression (review finding 1): a recovery that fails must not consume the journal.
#[test]
fn a_failed_recovery_leaves_the_unfinished_switch_for_the_next_command() {
    let rt = util::runtime();
    let status = |rt: &Path| {
        util::json(&util::ok(
            util::jpower(rt).args(["--sim", "orin-agx", "--json", "status"]),
        ))
    };
    let before = status(rt.path())["knobs"].clone();
    let set = [
        "--sim",
        "orin-agx",
        "set",
        "--cores",
        "4",
        "--cpu-freq",
        "729.6MHz",
        "--gpu-freq",
        "318.75MHz",
    ];
    assert!(!util::run(
        util::jpower(rt.path())
            .env("JPOWER_SIM_FAULT", "abort-after-writes=4")
            .args(set)
    )
    .status
    .success());
    let failed = util::run(
        util::jpower(rt.path())
            .env("JPOWER_SIM_FAULT", "fail-write=2")
            .args(["--sim", "orin-agx", "restore", "--if-crashed"]),
    );
    assert!(!failed.status.success(), "the recovery's write failed");
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("journal keeps"),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    recovers_the_unfinished_switch(rt.path());
    assert_eq!(status(rt.path())["knobs"], before);
}

/// A `--root` tree whose files link outside it: an absolute link, a `../..` link and a
/// linked cpufreq policy directory, each target a valid attribute with a second line.
/// Whatever `set` and `restore` make of such a tree, they never write through the links.
#[test]
fn links_in_a_root_tree_never_lead_a_write_outside_it() {
    use std::os::unix::fs::symlink;
    use std::path::Path;
    let rt = util::runtime();
    let top = tempfile::tempdir().unwrap();
    let tree = top.path().join("tree");
    util::ok(
        util::jpower(rt.path())
            .args(["sim", "export", "orin-agx"])
            .arg(&tree),
    );
    let outside = top.path().join("outside");
    let cpufreq = "sys/devices/system/cpu/cpufreq";
    let gpu = "sys/devices/platform/17000000.ga10b/devfreq/17000000.ga10b";
    let cap = "sys/kernel/nvpmodel_emc_cap/emc_iso_cap";
    // Move each attribute (or the policy directory) outside, add a line the kernel would
    // never have, and link it back: absolute, relative, and a whole directory.
    let move_out = |rel: &str| -> std::path::PathBuf {
        let (from, to) = (tree.join(rel), outside.join(rel));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::rename(&from, &to).unwrap();
        to
    };
    let cap_out = move_out(cap);
    symlink(&cap_out, tree.join(cap)).unwrap();
    let max_out = move_out(&format!("{gpu}/max_freq"));
    let depth = Path::new(gpu).components().count() + 1; // up to `top`
    let up: std::path::PathBuf = std::iter::repeat_n("..", depth).collect();
    symlink(
        up.join("outside").join(gpu).join("max_freq"),
        tree.join(gpu).join("max_freq"),
    )
    .unwrap();
    let policy_out = move_out(&format!("{cpufreq}/policy0"));
    symlink(&policy_out, tree.join(cpufreq).join("policy0")).unwrap();
    let watched = [
        cap_out.clone(),
        max_out.clone(),
        policy_out.join("scaling_max_freq"),
        policy_out.join("scaling_min_freq"),
    ];
    let before: Vec<String> = watched
        .iter()
        .map(|p| {
            let mut s = std::fs::read_to_string(p).unwrap();
            s.push_str("a line the kernel never wrote\n");
            std::fs::write(p, &s).unwrap();
            s
        })
        .collect();
    for args in [
        vec!["set", "MODE_15W"],
        vec!["set", "--gpu-freq", "624.75MHz", "--emc-freq", "665.6MHz"],
        vec!["restore"],
    ] {
        let out = util::run(util::jpower(rt.path()).arg("--root").arg(&tree).args(&args));
        // A preset whose GPU or EMC file is a link out of the tree is refused whole; it
        // was applied without them, as if the board had no such control, and `set`
        // exited 0.
        if args == ["set", "MODE_15W"] {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{err}");
            assert!(
                err.contains("unusable knob (a link to nothing in the root)"),
                "{err}"
            );
            assert!(err.contains("preset MODE_15W sets"), "{err}");
            assert!(err.contains("not applied"), "{err}");
        }
    }
    for (p, b) in watched.iter().zip(&before) {
        assert_eq!(
            &std::fs::read_to_string(p).unwrap(),
            b,
            "{} was written through a link",
            p.display()
        );
    }
}

/// Found by a review: `restore` wrote back every knob of the baseline, the fan its daemon
/// had moved since and clocks jpower never set included (and failed whole if one of them
/// could not be written). Only the knobs jpower wrote go back; a state file of an earlier
/// version, which does not say, still restores them all.
#[test]
fn restore_writes_back_only_the_knobs_jpower_touched() {
    use jpower::board::KnobKind;
    let rt = util::runtime();
    let (_sim, mut c) = open("orin-agx", rt.path());
    let baseline = values(&c);
    let gpu = c.board().gpu.as_ref().unwrap();
    let (min, max, table) = (gpu.min, gpu.max, gpu.table_hz.clone());
    let fan = c.board().knob(KnobKind::Fan).unwrap();
    let mut target = baseline.clone();
    target[max] = table[table.len() / 2];
    c.apply_values(&target).unwrap();
    let touched = c.state().unwrap().touched.clone().unwrap();
    assert_eq!(touched, [c.board().knobs[max].path.clone()]);

    // Behind jpower's back: the fan daemon and someone's GPU floor.
    let outside = |c: &Controller, by: usize| {
        c.board().knobs[fan]
            .write((baseline[fan] + 30 * by as u64) % 256)
            .unwrap();
        c.board().knobs[min].write(table[by]).unwrap();
    };
    outside(&c, 1);
    c.refresh().unwrap();
    let before = values(&c);
    assert!(matches!(c.restore().unwrap(), Restored::Baseline { .. }));
    let mut want = before.clone();
    want[max] = baseline[max];
    assert_eq!(values(&c), want, "only the GPU's max_freq goes back");

    // A held overlay puts back only what changed under it.
    let second = values(&c);
    c.apply_values(&target).unwrap();
    c.push_overlay(Owner::new(OwnerKind::Cli, std::process::id(), "watch"))
        .unwrap();
    let held = values(&c);
    let mut lower = held.clone();
    lower[max] = table[table.len() / 2 - 1];
    c.apply_values(&lower).unwrap();
    c.board().knobs[fan]
        .write((baseline[fan] + 60) % 256)
        .unwrap();
    c.refresh().unwrap();
    let mut want = values(&c);
    want[max] = held[max];
    c.pop_overlay().unwrap().unwrap();
    assert_eq!(values(&c), want, "the fan stays where its daemon put it");

    // A state file without `touched` (an earlier version's): every knob goes back.
    let key = c.board().key();
    drop(c);
    let path = rt.path().join("state").join(format!("{key}.json"));
    let mut st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    st.as_object_mut().unwrap().remove("touched").unwrap();
    std::fs::write(&path, st.to_string()).unwrap();
    let (_sim, mut c) = open("orin-agx", rt.path());
    outside(&c, 3);
    c.refresh().unwrap();
    c.restore().unwrap();
    assert_eq!(values(&c), second);
}

/// Found by a review: a rollback stopped at its first failed write, leaving every knob
/// after it at the failed switch's value. It goes on: each knob that can go back does,
/// and the one that could not is named.
#[test]
fn a_rollback_goes_on_past_a_write_that_fails() {
    let rt = util::runtime();
    let (sim, mut c) = open("orin-agx", rt.path());
    let space = ModeSpace::of(c.board());
    let low = space.get(0).unwrap().to_mode(c.board());
    let prior = values(&c);
    let steps = plan::plan(
        c.board(),
        &prior,
        &plan::target(c.board(), &low, &prior).unwrap(),
    );
    assert!(
        steps.len() > 5,
        "a switch of {} writes is too small",
        steps.len()
    );
    // The switch's fifth write fails; the rollback's write of the GPU's max_freq fails too,
    // and the rollback's writes after it must still be made.
    let mut mid = prior.clone();
    for s in steps.iter().take(4) {
        mid[s.knob] = s.value;
    }
    let gpu_max = c.board().gpu.as_ref().unwrap().max;
    let back = plan::plan(c.board(), &mid, &prior);
    let at = back.iter().position(|s| s.knob == gpu_max).unwrap();
    assert!(at + 1 < back.len(), "the GPU is the rollback's last write");
    fail_writes(&sim, [5, 5 + at as u64 + 1]);
    let err = c.apply(&low).unwrap_err();
    let why = rollback_failure(&err);
    assert!(why.contains("EIO"), "{why}");
    let now = values(&c);
    let off: Vec<_> = (0..now.len()).filter(|&k| now[k] != prior[k]).collect();
    assert_eq!(off, [gpu_max], "only the knob whose write failed is off");
    assert_eq!(c.current(), &now);
    // The next switch starts from the board as it is.
    c.apply(&low).unwrap();
    c.restore().unwrap();
    assert_eq!(values(&c), prior);
}

/// Found by a review: with only a pair's max touched, a `jetson_clocks` that then raised
/// the min to it left the restore asking for a min above the max: EINVAL on L4T 32, every
/// time (and a dead owner's state then stopped every command). Such a pair takes both its
/// baseline values.
#[test]
fn a_restore_after_jetson_clocks_keeps_each_pair_in_order() {
    for id in ["xavier-agx", "orin-agx@r36"] {
        let rt = util::runtime();
        let (_sim, mut c) = open(id, rt.path());
        let gpu = c.board().gpu.as_ref().unwrap();
        let (min, max, table) = (gpu.min, gpu.max, gpu.table_hz.clone());
        // nvpmodel's low mode, then jpower raises the max alone.
        c.board().knobs[max].write(table[table.len() / 2]).unwrap();
        c.refresh().unwrap();
        let baseline = values(&c);
        let mut raised = baseline.clone();
        raised[max] = *table.last().unwrap();
        c.apply_values(&raised).unwrap();
        // jetson_clocks: the min to the max.
        c.board().knobs[min].write(*table.last().unwrap()).unwrap();
        c.refresh().unwrap();
        c.restore().unwrap_or_else(|e| panic!("{id}: {e}"));
        let now = values(&c);
        assert_eq!((now[min], now[max]), (baseline[min], baseline[max]), "{id}");
    }
}

/// Found by a review: a rollback planned every knob back to the values the controller
/// last knew, so a fan its daemon had moved since (the agent does not watch it) was
/// written back to a stale duty. Only the failed switch's knobs go back.
#[test]
fn a_rollback_puts_back_only_the_switchs_knobs() {
    use jpower::board::KnobKind;
    let rt = util::runtime();
    let (sim, mut c) = open("orin-agx", rt.path());
    let fan = c.board().knob(KnobKind::Fan).unwrap();
    let before = values(&c);
    let moved = (before[fan] + 40) % 256;
    c.board().knobs[fan].write(moved).unwrap();
    sim.inject(Fault::FailWrite {
        n: 2,
        errno: libc::EIO,
    });
    let low = ModeSpace::of(c.board()).get(0).unwrap().to_mode(c.board());
    let err = c.apply(&low).unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Failed {
                rollback: Rollback::Done(_),
                ..
            }
        ),
        "{err}"
    );
    let mut want = before.clone();
    want[fan] = moved;
    assert_eq!(values(&c), want);
    assert_eq!(c.current(), &want);
}

/// Found by a review: a knob the saved baseline lacks (its driver bound after jpower's
/// first write) was recorded as touched with no value to put back, so no restore ever
/// did. Its first write saves its value.
#[test]
fn a_knob_the_baseline_lacks_is_saved_at_its_first_write() {
    let rt = util::runtime();
    let (_sim, mut c) = open("orin-agx", rt.path());
    let gpu = c.board().gpu.as_ref().unwrap();
    let (max, table) = (gpu.max, gpu.table_hz.clone());
    let fan = c.board().knob(jpower::board::KnobKind::Fan).unwrap();
    let before = values(&c);
    let mut fan_up = before.clone();
    fan_up[fan] = (before[fan] + 50) % 256;
    c.apply_values(&fan_up).unwrap();
    let key = c.board().key();
    let gpu_path = c.board().knobs[max].path.clone();
    drop(c);
    let path = rt.path().join("state").join(format!("{key}.json"));
    let mut st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    st["baseline"]
        .as_array_mut()
        .unwrap()
        .retain(|s| s["path"] != gpu_path.to_str().unwrap());
    std::fs::write(&path, st.to_string()).unwrap();
    let (_sim, mut c) = open("orin-agx", rt.path());
    let mut lower = values(&c);
    lower[max] = table[1];
    c.apply_values(&lower).unwrap();
    c.restore().unwrap();
    assert_eq!(values(&c), before);
}

/// Found by a review: a rollback going on past a failed write also made the second write
/// of a (min, max) pair whose first, which was to make room for it, had failed: EINVAL on
/// L4T 32, and on 35/36 a min request left above the max. A write that would cross its
/// pair is not made, and named; one that would not is (a second review).
#[test]
fn a_rollback_does_not_cross_a_pair_whose_first_write_failed() {
    let rt = util::runtime();
    let (sim, mut c) = open("orin-agx", rt.path());
    let gpu = c.board().gpu.as_ref().unwrap();
    let (min, max, table) = (gpu.min, gpu.max, gpu.table_hz.clone());
    let mut prior = values(&c);
    prior[max] = table[3];
    c.apply_values(&prior).unwrap();
    let emc = c.board().emc.as_ref().unwrap();
    let (cap, emc_table) = (emc.cap, emc.table_hz.clone());
    let mut target = prior.clone();
    (target[min], target[max]) = (table[5], table[6]);
    target[cap] = emc_table[1];
    let steps = plan::plan(c.board(), &prior, &target);
    let knobs: Vec<usize> = steps.iter().map(|s| s.knob).collect();
    assert_eq!(
        knobs,
        [max, min, cap],
        "the GPU's pair raised, then the EMC"
    );
    // The EMC's write fails, then the rollback's first, the GPU's min: its max, back to
    // table[3], would cross the min left at table[5].
    fail_writes(&sim, [3, 4]);
    let err = c.apply_values(&target).unwrap_err();
    let why = rollback_failure(&err);
    let max_path = c.board().knobs[max].path.display().to_string();
    assert!(why.contains(&format!("{max_path} left as it is")), "{why}");
    let now = values(&c);
    assert_eq!(
        (now[min], now[max]),
        (table[5], table[6]),
        "the pair as the switch left it"
    );
    assert_eq!(c.current(), &now);

    // Lowering the pair, the min's failed rollback leaves room for the max's.
    c.apply_values(&prior).unwrap();
    let mut lower = prior.clone();
    (lower[min], lower[max]) = (table[1], table[2]);
    lower[cap] = emc_table[1];
    fail_writes(&sim, [3, 4]);
    c.apply_values(&lower).unwrap_err();
    let now = values(&c);
    assert_eq!(now[max], prior[max], "the max went back: nothing crossed");
}

/// Found by an integrator's review: a user who is not root could not switch a simulated
/// board at all (the simulated kernel opened its own read-only attributes, as
/// `scaling_cur_freq`, for writing: root, which CI runs as, ignores the mode), and the
/// failed switch's journal broke every later write. Run as `nobody` under root.
#[test]
fn a_user_who_is_not_root_switches_and_restores_a_simulated_board() {
    let rt = util::runtime();
    for (board, args) in [
        ("nano", &["set", "--gpu-freq", "76.8MHz", "--snap"][..]),
        ("orin-agx", &["set", "MODE_15W"][..]),
        ("orin-agx", &["restore"][..]),
        ("nano", &["restore"][..]),
    ] {
        util::ok(
            util::jpower_unprivileged(rt.path())
                .args(["--sim", board])
                .args(args),
        );
    }
}

/// Found by an integrator's review: the recovery of a dead process's switch wrote through
/// the knobs' descriptors as discovery opened them, so a knob whose write grant was gone
/// since failed with `Bad file descriptor`; it is opened again for writing, and its error
/// says why it cannot be and what to do.
#[test]
fn a_recovery_whose_knobs_lost_their_write_grant_says_why() {
    use std::os::unix::fs::PermissionsExt;
    let rt = util::runtime();
    assert!(!util::run(
        util::jpower(rt.path())
            .env("JPOWER_SIM_FAULT", "abort-after-writes=4")
            .args([
                "--sim",
                "orin-agx",
                "set",
                "--cores",
                "4",
                "--gpu-freq",
                "318.75MHz"
            ])
    )
    .status
    .success());
    // Every knob the switch may have written, read-only now (the simulator keeps the
    // kernel's modes, even for root).
    let root = rt.path().join("sim/orin-agx-r35/root/sys/devices");
    let knobs: Vec<std::path::PathBuf> = (4..12)
        .map(|c| root.join(format!("system/cpu/cpu{c}/online")))
        .chain(["min_freq", "max_freq"].map(|f| {
            root.join("platform/17000000.ga10b/devfreq/17000000.ga10b")
                .join(f)
        }))
        .collect();
    for k in &knobs {
        std::fs::set_permissions(k, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    let failed =
        util::run(util::jpower(rt.path()).args(["--sim", "orin-agx", "restore", "--if-crashed"]));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{err}");
    assert!(
        err.contains("cannot write") && err.contains("EACCES"),
        "{err}"
    );
    assert!(!err.contains("EBADF"), "{err}");
    for k in &knobs {
        std::fs::set_permissions(k, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    recovers_the_unfinished_switch(rt.path());
}

/// The diff's review: an EMC cap file that is a link to nothing was taken for no cap file
/// (its discovery followed the link), so a preset's cap was skipped and `set` exited 0.
#[test]
fn a_preset_whose_emc_cap_file_links_to_nothing_is_refused() {
    let rt = util::runtime();
    let tree = rt.path().join("tree");
    util::ok(
        util::jpower(rt.path())
            .args(["sim", "export", "orin-agx"])
            .arg(&tree),
    );
    let cap = tree.join("sys/kernel/nvpmodel_emc_cap/emc_iso_cap");
    std::fs::remove_file(&cap).unwrap();
    std::os::unix::fs::symlink("/sys/nonexistent_cap", &cap).unwrap();
    let out = util::run(
        util::jpower(rt.path())
            .arg("--root")
            .arg(&tree)
            .args(["set", "MODE_15W"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the EMC cap file is there but cannot be opened"),
        "{err}"
    );
}
