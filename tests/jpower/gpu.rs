//! The GPU layer: `jpower roofline` and `jpower train` end to end on simulated boards
//! (switch, lock, settle, measure, fit, plot, restore, crash recovery), `jpower kernels`
//! where NVRTC is present, and, where a CUDA GPU is present, every kernel against the CPU
//! reference. The tests that need a GPU are `#[ignore]`d; `scripts/gpu-check.sh` runs
//! them with `--ignored` on a machine with an NVIDIA GPU.

use crate::util::{self, jpower, json, ok, run};
use jpower::gpu::cuda::{Cuda, SWEEP_A, SWEEP_A_H2, SWEEP_B, SWEEP_B_H2};
use jpower::gpu::kernels::{CudaSource, Prebuilt};
use jpower::gpu::net::{Backend, Cpu, Net, Synthetic};
use jpower::gpu::ops::{Bias, Conv, Gemm, Pool2, Relu, Sgd, Softmax, Sweep};
use jpower::gpu::reference;
use jpower::gpu::roofline::{Kernel, Point};
use std::path::{Path, PathBuf};

/// Short points: enough for the roofs and the lock, not for the energy terms.
const QUICK: [&str; 10] = [
    "--point-seconds",
    "0.03",
    "--settle",
    "0.05",
    "--elements",
    "4194304",
    "--max-iters",
    "64",
    "--sample",
    "2",
];
/// Points long enough to resolve the FLOP energy at the slowest GPU clock, where the
/// FLOPs draw about 0.5 W over 11 W and one 1 kHz sample carries about 1.2 W of INA3221
/// conversion noise (the fit's FLOP energy there is about 4.5 sigma from zero), and
/// sweeping past the ridge of the slowest mode (39 FLOP/byte).
const FIT: [&str; 10] = [
    "--point-seconds",
    "0.3",
    "--settle",
    "0.05",
    "--elements",
    "4194304",
    "--max-iters",
    "256",
    "--sample",
    "2",
];

/// A file of the simulated board's tree.
fn sim_file(rt: &Path, board_dir: &str, file: &str) -> PathBuf {
    rt.join("sim")
        .join(board_dir)
        .join("root")
        .join(file.trim_start_matches('/'))
}

const RAILGATE: &str = "/sys/devices/platform/17000000.ga10b/railgate_enable";
const POWER_CONTROL: &str = "/sys/devices/platform/17000000.ga10b/power/control";
const FAN: &str = "/sys/devices/platform/pwm-fan/hwmon/hwmon0/pwm1";

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

#[test]
fn roofline_on_a_simulated_board_switches_measures_fits_plots_and_restores() {
    let rt = util::runtime();
    let before = json(&ok(
        jpower(rt.path()).args(["--sim", "orin-agx", "--json", "status"])
    ));
    let (svg, csv, modes_csv) = (
        rt.path().join("r.svg"),
        rt.path().join("points.csv"),
        rt.path().join("modes.csv"),
    );
    let r = json(&ok(jpower(rt.path())
        .args(["--sim", "orin-agx", "--json", "roofline"])
        .args(FIT)
        .arg("--svg")
        .arg(&svg)
        .arg("--csv")
        .arg(&csv)
        .arg("--modes-csv")
        .arg(&modes_csv)));
    assert_eq!(r["simulated"], true, "{r}");
    assert!(r["device"].as_str().unwrap().contains("simulated"));
    // The simulated GPU meters itself: no note on the sensors' averaging or refresh, and
    // no `--averaging` roofline does not have (found by a review).
    assert!(
        !r["notes"].to_string().contains("averaging"),
        "{}",
        r["notes"]
    );
    let lock = r["lock"].to_string();
    assert!(lock.contains("PM QoS latency 0"), "{lock}");
    assert!(
        lock.contains("railgate_enable = 0") && lock.contains("power/control = on"),
        "{lock}"
    );
    let modes = r["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 2);
    for m in modes {
        let f32 = m["f32_fraction_of_peak"].as_f64().unwrap();
        let copy = m["copy_fraction_of_dram_peak"].as_f64().unwrap();
        assert!((0.9..=1.0).contains(&f32), "FP32 at {f32} of peak: {m}");
        assert!(
            (0.8..=0.95).contains(&copy),
            "copy at {copy} of the DRAM peak"
        );
        let e = &m["energy"];
        assert!(e["eps_flop_j"].as_f64().unwrap() > 0.0, "{e}");
        assert!(e["pi0_w"].as_f64().unwrap() > 1.0, "{e}");
        assert!(e["rms_rel_error"].as_f64().unwrap() < 0.1, "{e}");
        assert!(m["time"]["ridge_f32"].as_f64().unwrap() > 1.0);
        assert_eq!(m["points"].as_array().unwrap().len(), 2 + 2 * 9);
    }
    // The sample spans the grid: the first mode is the slowest GPU and EMC, the last the
    // fastest, and the measured roofs follow the clocks.
    let peak = |i: usize, k: &str| modes[i]["time"][k].as_f64().unwrap();
    assert!(peak(1, "peak_f32_flops") > 3.0 * peak(0, "peak_f32_flops"));
    assert!(peak(1, "peak_bytes_per_s") > 3.0 * peak(0, "peak_bytes_per_s"));
    // Energy: DRAM traffic costs energy where the memory runs fast, and the constant power
    // rises with the clocks.
    let energy = |i: usize, k: &str| modes[i]["energy"][k].as_f64().unwrap();
    assert!(energy(1, "eps_byte_j") > 0.0);
    assert!(energy(1, "pi0_w") > 2.0 * energy(0, "pi0_w"));
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("SIMULATED") && plot.contains("pJ per FLOP"));
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap().lines().count(),
        1 + 2 * 20
    );
    assert_eq!(
        std::fs::read_to_string(&modes_csv).unwrap().lines().count(),
        3
    );
    // Everything the lock and the modes touched is back.
    let after = json(&ok(
        jpower(rt.path()).args(["--sim", "orin-agx", "--json", "status"])
    ));
    assert_eq!(before["knobs"], after["knobs"]);
    assert_eq!(read(&sim_file(rt.path(), "orin-agx-r35", RAILGATE)), "1");
    assert_eq!(
        read(&sim_file(rt.path(), "orin-agx-r35", POWER_CONTROL)),
        "auto"
    );
}

#[test]
fn a_roofline_killed_mid_measurement_is_undone_by_the_next_command() {
    let rt = util::runtime();
    ok(jpower(rt.path()).args(["--sim", "orin-agx", "status"]));
    let railgate = sim_file(rt.path(), "orin-agx-r35", RAILGATE);
    let fan = sim_file(rt.path(), "orin-agx-r35", FAN);
    let fan_before = read(&fan);
    // A simulated roofline runs in simulated time, too fast to kill from outside at the
    // right moment: the simulated board aborts the process (as SIGKILL would) after its
    // n-th write, n raised until the lock is in place when it dies.
    let mut held = false;
    for n in 1..100 {
        let out = jpower(rt.path())
            .env("JPOWER_SIM_FAULT", format!("abort-after-writes={n}"))
            .args(["--sim", "orin-agx", "roofline", "--sample", "2"])
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "the roofline made fewer than {n} writes"
        );
        if read(&railgate) == "0" && read(&fan) == "255" {
            held = true;
            break;
        }
        ok(jpower(rt.path()).args(["--sim", "orin-agx", "restore", "--if-crashed"]));
    }
    assert!(held, "the lock never applied");
    // `status` only reads: it names what is pending, and the next writing command
    // (here `restore --if-crashed`) undoes it.
    let st = json(&ok(
        jpower(rt.path()).args(["--sim", "orin-agx", "--json", "status"])
    ));
    assert!(st["pending_recovery"].to_string().contains("died"), "{st}");
    let st = json(&ok(jpower(rt.path()).args([
        "--sim",
        "orin-agx",
        "--json",
        "restore",
        "--if-crashed",
    ])));
    assert_eq!(read(&railgate), "1", "{st}");
    assert_eq!(
        read(&sim_file(rt.path(), "orin-agx-r35", POWER_CONTROL)),
        "auto"
    );
    assert_eq!(read(&fan), fan_before);
}

#[test]
fn a_lock_knob_jpower_may_not_write_is_left_alone_and_said() {
    use std::os::unix::fs::PermissionsExt;
    let rt = util::runtime();
    ok(jpower(rt.path()).args(["--sim", "orin-agx", "status"]));
    let railgate = sim_file(rt.path(), "orin-agx-r35", RAILGATE);
    std::fs::set_permissions(&railgate, std::fs::Permissions::from_mode(0o444)).unwrap();
    let r = json(&ok(jpower(rt.path())
        .args(["--sim", "orin-agx", "--json", "roofline"])
        .args(QUICK)));
    let lock = r["lock"].to_string();
    assert!(
        lock.contains("railgate_enable left as it is: not writable"),
        "{lock}"
    );
    assert!(lock.contains("power/control = on"), "{lock}");
    assert_eq!(read(&railgate), "1");
}

#[test]
fn train_on_the_cpu_reference_learns_and_meters_every_minibatch() {
    let rt = util::runtime();
    let csv = rt.path().join("train.csv");
    let t = json(&ok(jpower(rt.path())
        .args([
            "--sim",
            "xavier-agx",
            "--json",
            "train",
            "--cpu",
            "--steps",
            "60",
            "--batch",
            "16",
        ])
        .arg("--csv")
        .arg(&csv)));
    let (first, last) = (
        t["first_loss"].as_f64().unwrap(),
        t["final_loss"].as_f64().unwrap(),
    );
    assert!(last < first / 3.0, "{first} -> {last}");
    assert!(t["held_out_accuracy"].as_f64().unwrap() > 0.9, "{t}");
    let batches = t["minibatches"].as_array().unwrap();
    assert_eq!(batches.len(), 60);
    for b in batches {
        assert!(
            b["energy_j"].as_f64().unwrap() > 0.0 && b["mean_w"].as_f64().unwrap() > 1.0,
            "{b}"
        );
        assert!(b["duration_s"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 61);
}

#[test]
fn gpu_commands_say_what_is_missing_in_one_line() {
    let rt = util::runtime();
    let bad =
        run(jpower(rt.path()).args(["--sim", "orin-agx", "roofline", "--point-seconds", "0"]));
    // A bad command line (clap's exit status), naming the option.
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--point-seconds"));
    let no_agent = run(jpower(rt.path()).args(["--sim", "orin-agx", "profile", "--live", "--cpu"]));
    assert_eq!(no_agent.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&no_agent.stderr).contains("start `jpower agent`"));
    // Issue 15: `train --sim` trains on the simulated board, never saying "use --sim".
    let sim = run(jpower(rt.path()).args(["--sim", "orin-agx", "--json", "train", "--steps", "2"]));
    let err = String::from_utf8_lossy(&sim.stderr);
    assert!(sim.status.success() && !err.contains("use --sim"), "{err}");
    assert_eq!(
        json(&String::from_utf8_lossy(&sim.stdout))["device"],
        "simulated GPU"
    );
    if jpower::gpu::probe(None).is_ok() {
        eprintln!("CUDA present: the no-driver error is not checked here");
        return;
    }
    let tree = rt.path().join("tree");
    ok(jpower(rt.path())
        .args(["sim", "export", "orin-agx"])
        .arg(&tree));
    let out = run(jpower(rt.path())
        .arg("--root")
        .arg(&tree)
        .args(["train", "--steps", "2"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no CUDA driver found") || err.contains("no NVRTC"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
}

/// Found by a CLI review: `--steps 1e11` or `--batch 1e8` aborted on an allocation with
/// the board changed and the simulated load left on; `--lr nan` trained to NaN; `--gpu`
/// was ignored beside `--cpu` or `--sim`; `roofline --sample 0` and `--nvml-check` on a
/// Jetson exited 1 as errors of the board; an unwritable `--csv` failed after training.
/// Each is now a usage error (exit 2, kind `usage`) found before the board is touched.
#[test]
fn train_and_roofline_refuse_what_they_cannot_do_before_touching_the_board() {
    let rt = util::runtime();
    let status = || {
        json(&ok(
            jpower(rt.path()).args(["--sim", "orin-agx", "--json", "status"])
        ))
    };
    let before = status()["knobs"].clone();
    for args in [
        &["train", "--steps", "0"][..],
        &["train", "--steps", "100000000000"],
        &["train", "--batch", "100000000"],
        &["train", "--lr", "nan"],
        &["train", "--lr=-5"],
        &["train", "--cpu", "--gpu", "1"],
        &["train", "--gpu", "0"],
        &["roofline", "--sample", "0"],
        &["roofline", "--gpu", "0"],
        &["roofline", "--nvml-check", "3"],
    ] {
        let out = run(jpower(rt.path())
            .args(["--sim", "orin-agx", "--json"])
            .args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{args:?}: {stdout}");
        assert_eq!(json(&stdout)["kind"], "usage", "{args:?}");
    }
    let out = run(jpower(rt.path()).args([
        "--sim",
        "orin-agx",
        "train",
        "--steps",
        "2",
        "--csv",
        "/nonexistent/dir/x.csv",
    ]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write /nonexistent/dir/x.csv"), "{err}");
    // A file where a folder should be: permission bits said yes (for root, always).
    let file = rt.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = run(jpower(rt.path())
        .args(["--sim", "orin-agx", "roofline", "--sample", "2", "--svg"])
        .arg(file.join("r.svg")));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write"));
    let after = status();
    assert_eq!(after["knobs"], before);
    assert!(after["state"].is_null(), "{after}");
}

/// Found by a CLI review: Ctrl-C or SIGTERM killed `train` (as `roofline` and
/// `switch-cost`, which share the interrupt module; a simulated roofline ends too fast to
/// interrupt) where it stood, leaving the board pinned and a simulated board loaded until
/// some later command; `restore` then said both "restored" (a warning) and "nothing to
/// restore". Now the signal stops it at its next minibatch and it puts the board back; a
/// hard kill is undone by the next command, which also ends the dead command's simulated
/// load.
#[test]
fn an_interrupted_train_puts_the_board_back_and_a_killed_one_is_undone_next() {
    let rt = util::runtime();
    let jp = || {
        let mut c = jpower(rt.path());
        c.args(["--sim", "orin-agx"]);
        c
    };
    let sim = jpower::sim::SimBoard::open("orin-agx", rt.path()).unwrap();
    let status = || {
        let mut c = jp();
        json(&ok(c.args(["--json", "status"])))
    };
    let before = status()["knobs"].clone();
    let idle_w: f64 = sim.true_rail_watts().unwrap().iter().sum();
    for (signal, stopped) in [
        (nix::sys::signal::Signal::SIGINT, true),
        (nix::sys::signal::Signal::SIGTERM, true),
        (nix::sys::signal::Signal::SIGKILL, false),
    ] {
        let child = jp()
            .args(["train", "--steps", "1000000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Training: the simulated board draws a training load's power.
        let started = std::time::Instant::now();
        while sim.true_rail_watts().unwrap().iter().sum::<f64>() < idle_w + 5.0 {
            assert!(
                started.elapsed().as_secs() < 30,
                "train never loaded the board"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if stopped {
            assert_eq!(out.status.code(), Some(1), "{signal}: {err}");
            assert!(err.contains("interrupted"), "{signal}: {err}");
            let st = status();
            assert_eq!(st["knobs"], before, "{signal}");
            assert!(st["state"].is_null(), "{signal}: {st}");
        } else {
            let restored = ok(jp().arg("restore"));
            assert!(
                restored.contains("restored on opening the board"),
                "{restored}"
            );
            assert_eq!(status()["knobs"], before);
        }
        let w: f64 = sim.true_rail_watts().unwrap().iter().sum();
        assert!(w < idle_w + 1.0, "{signal}: {w} W, idle {idle_w} W");
    }
}

#[test]
fn kernels_compile_for_the_jetson_archs_without_spills() {
    if let Err(e) = jpower::gpu::nvrtc_present() {
        // CI installs NVIDIA's NVRTC and ptxas wheels and requires the test to run.
        assert!(
            std::env::var_os("JPOWER_REQUIRE_NVRTC").is_none(),
            "JPOWER_REQUIRE_NVRTC is set but {e}"
        );
        eprintln!("skipped kernels_compile_for_the_jetson_archs_without_spills: {e}");
        return;
    }
    let rt = util::runtime();
    let out = rt.path().join("ptx");
    let k = json(&ok(jpower(rt.path())
        .args(["--json", "kernels", "--out"])
        .arg(&out)));
    assert_eq!(k["spills"].as_array().unwrap().len(), 0, "{k}");
    // A CUDA 13 NVRTC cannot build for Maxwell or Volta: those are skipped with a notice.
    let supported = jpower::gpu::kernels::nvrtc_archs().unwrap();
    // Every file compiled for every architecture is listed, ptxas or not (a review found
    // the JSON empty where the text listed them).
    assert_eq!(
        k["compiled"].as_array().unwrap().len(),
        2 * [53, 72, 87]
            .iter()
            .filter(|cc| supported.contains(cc))
            .count(),
        "{k}"
    );
    kernels_fail_on_spills_on_no_kernels_and_on_nothing_compiled(rt.path());
    let skipped = |cc: u32| {
        let skip = !supported.contains(&cc);
        if skip {
            eprintln!("compute_{cc} skipped: {}", jpower::gpu::versions());
        }
        skip
    };
    assert_eq!(
        k["skipped_archs"].as_array().unwrap().len(),
        [53, 72, 87].into_iter().filter(|&cc| skipped(cc)).count()
    );
    for cc in [53, 72, 87].into_iter().filter(|&cc| !skipped(cc)) {
        for f in ["roofline", "train"] {
            let ptx = std::fs::read_to_string(out.join(format!("{f}.compute_{cc}.ptx"))).unwrap();
            assert!(ptx.contains(&format!(".target sm_{cc}")));
        }
    }
    if k["assembled"] == true && supported.contains(&53) {
        // 4 roofline and 11 training kernels on each of 3 architectures.
        assert_eq!(k["kernels"].as_array().unwrap().len(), 3 * 15);
    }
    // The sweep's inner loop is nearly all FMAs (unrolled 16 times: 128 FMAs and a few
    // loop instructions), so it can reach the FP32 and FP16 peaks.
    for cc in [53, 72, 87, 90].into_iter().filter(|&cc| !skipped(cc)) {
        let ptx = jpower::gpu::kernels::compile(CudaSource::Roofline, cc).unwrap();
        for (kernel, fma) in [("sweep_f32", "fma.rn.f32"), ("sweep_f16x2", "fma.rn.f16x2")] {
            let share = loop_fma_share(&ptx, kernel, fma);
            assert!(
                share >= 0.95,
                "{kernel} on compute_{cc}: FMAs are {share:.3} of its hottest block"
            );
        }
    }
    // Built with NVRTC and ptxas present (as CI is), the binary embeds their cubins, so a
    // machine without either loads prebuilt SASS.
    if std::env::var_os("JPOWER_REQUIRE_NVRTC").is_some() {
        for source in CudaSource::ALL {
            let cubins = source.prebuilt_cubins();
            for cc in [72, 87, 90].into_iter().filter(|&cc| !skipped(cc)) {
                assert!(
                    cubins.contains(&cc),
                    "{}: prebuilt {cubins:?}",
                    source.name()
                );
                let (image, how) = source.prebuilt(cc).unwrap();
                assert_eq!((&image[..4], how), (&b"\x7fELF"[..], Prebuilt::Sass));
            }
        }
    }
    // NVRTC's CUBIN (exact SASS, no JIT) for the Jetson and data-centre architectures.
    for cc in [72, 87, 90].into_iter().filter(|&cc| !skipped(cc)) {
        let cubin = jpower::gpu::kernels::compile_cubin(CudaSource::Roofline, cc).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "sm_{cc} CUBIN");
    }
}

/// Found by a CLI review: with a spill, `kernels --json` printed the result and then the
/// error, two objects; a ptxas that reported nothing, or architectures NVRTC could not
/// compile for, passed having checked nothing.
fn kernels_fail_on_spills_on_no_kernels_and_on_nothing_compiled(rt: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let spilling = rt.join("spilling-ptxas");
    std::fs::write(
        &spilling,
        "#!/bin/sh\n{\n echo \"ptxas info    : Compiling entry function 'k' for 'sm_87'\"\n echo 'ptxas info    : 8 bytes stack frame, 8 bytes spill stores, 0 bytes spill loads'\n echo 'ptxas info    : Used 40 registers'\n} >&2\n",
    )
    .unwrap();
    std::fs::set_permissions(&spilling, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (ptxas, arch, needle) in [
        (spilling.as_path(), "87", "register spills: k on sm_87"),
        (Path::new("/bin/true"), "87", "reported no kernel"),
        (spilling.as_path(), "99", "nothing compiled"),
    ] {
        let out = run(jpower(rt)
            .args(["--json", "kernels", "--arch", arch, "--ptxas"])
            .arg(ptxas));
        assert_eq!(out.status.code(), Some(1), "{needle}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{needle}: {stdout}");
        let e = json(&stdout);
        assert!(e["error"].as_str().unwrap().contains(needle), "{e}");
    }
}

/// Found by a CLI review: minibatches shorter than an IIO board's 422 ms refresh were
/// given the idle readings held over them with an error bound of exactly 0 J.
#[test]
fn train_gives_no_bound_for_minibatches_shorter_than_the_sensors_refresh() {
    let rt = util::runtime();
    let t = json(&ok(
        jpower(rt.path()).args(["--sim", "nano", "--json", "train", "--steps", "3"])
    ));
    for b in t["minibatches"].as_array().unwrap() {
        assert!(b["error_bound_j"].is_null(), "{b}");
    }
    let notes = t["notes"].to_string();
    assert!(
        notes.contains("3 minibatch(es) shorter than the sensors'"),
        "{notes}"
    );
}

#[test]
fn the_sweep_loops_are_nearly_all_fmas_in_the_sass() {
    // nvdisasm (CUDA 13's reads sm_87 and sm_90) on the cubins the build prebuilt.
    let nvdisasm = std::env::var_os("NVDISASM").map(PathBuf::from).or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("nvdisasm"))
            .find(|p| p.is_file())
    });
    let required = std::env::var_os("JPOWER_REQUIRE_NVDISASM").is_some();
    let images: Vec<_> = [87, 90]
        .into_iter()
        .filter_map(|cc| match CudaSource::Roofline.prebuilt(cc) {
            Some((image, Prebuilt::Sass)) => Some((cc, image)),
            _ => None,
        })
        .collect();
    let (Some(nvdisasm), 2) = (nvdisasm, images.len()) else {
        // CI installs nvdisasm and builds with NVRTC and ptxas, and requires the test.
        assert!(!required, "JPOWER_REQUIRE_NVDISASM is set but nvdisasm or the prebuilt sm_87/sm_90 cubins are missing");
        eprintln!("skipped the_sweep_loops_are_nearly_all_fmas_in_the_sass: no nvdisasm or no prebuilt cubins");
        return;
    };
    let dir = util::runtime();
    for (cc, image) in images {
        let path = dir.path().join(format!("roofline.sm_{cc}.cubin"));
        std::fs::write(&path, image).unwrap();
        let out = std::process::Command::new(&nvdisasm)
            .arg("-c")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "nvdisasm sm_{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sass = String::from_utf8_lossy(&out.stdout);
        for (kernel, fma) in [("sweep_f32", "FFMA"), ("sweep_f16x2", "HFMA2")] {
            let share = sass_fma_share(&sass, kernel, fma);
            assert!(
                share >= 0.95,
                "{kernel} on sm_{cc}: {fma} is {share:.3} of its hottest block"
            );
        }
    }
}

/// The share of `fma` instructions (`FFMA`, `HFMA2`) in the basic block of `kernel`'s
/// SASS (`nvdisasm -c` output) that holds the most of them.
fn sass_fma_share(sass: &str, kernel: &str, fma: &str) -> f64 {
    let body = sass
        .split(&format!(".text.{kernel}:\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{kernel} not in the SASS"));
    let body = body.split("//----").next().unwrap_or_default();
    // (FMAs, instructions) per basic block: labels (`.L_x_3:`) start one.
    let mut blocks = vec![(0usize, 0usize)];
    for line in body.lines() {
        if line.starts_with(".L") && line.trim_end().ends_with(':') {
            blocks.push((0, 0));
            continue;
        }
        // `/*0120*/  @!P0 FFMA R1, ... ;`: the opcode after an optional predicate.
        let Some(rest) = line.trim_start().strip_prefix("/*") else {
            continue;
        };
        let Some((_, instr)) = rest.split_once("*/") else {
            continue;
        };
        let mut words = instr.split_whitespace();
        let mut op = words.next().unwrap_or_default();
        if op.starts_with('@') {
            op = words.next().unwrap_or_default();
        }
        let op = op.split('.').next().unwrap_or_default();
        let b = blocks.last_mut().expect("one block at least");
        b.1 += 1;
        b.0 += usize::from(op == fma);
    }
    let (fmas, all) = blocks.into_iter().max().expect("one block at least");
    fmas as f64 / all.max(1) as f64
}

/// The share of `fma` instructions in the basic block of `kernel`'s PTX that holds the
/// most of them (the unrolled chain loop).
fn loop_fma_share(ptx: &str, kernel: &str, fma: &str) -> f64 {
    let body = ptx
        .split(".entry ")
        .find(|f| f.starts_with(kernel) && f[kernel.len()..].starts_with('('))
        .unwrap_or_else(|| panic!("{kernel} not in the PTX"));
    // (FMAs, instructions) per basic block: labels (`$L__BB0_3:`) start one.
    let mut blocks = vec![(0usize, 0usize)];
    for line in body.lines().map(str::trim) {
        if line.starts_with('$') && line.ends_with(':') {
            blocks.push((0, 0));
        } else if line.ends_with(';') && !line.starts_with('.') && !line.starts_with("//") {
            let b = blocks.last_mut().expect("one block at least");
            b.1 += 1;
            b.0 += usize::from(line.starts_with(fma));
        }
    }
    let (fmas, all) = blocks.into_iter().max().expect("one block at least");
    fmas as f64 / all.max(1) as f64
}

/// What a device test runs on: the CUDA GPU (it runs only with `--ignored`, where one is
/// present), or with `JPOWER_GPU_STANDIN=cpu` the CPU reference standing in for it, so CI
/// runs the same test code and only the device itself is missing.
enum TestGpu {
    Cuda(Box<Cuda>),
    Standin,
}

fn gpu() -> TestGpu {
    if std::env::var("JPOWER_GPU_STANDIN").as_deref() == Ok("cpu") {
        eprintln!("JPOWER_GPU_STANDIN=cpu: the CPU reference stands in for the GPU");
        return TestGpu::Standin;
    }
    TestGpu::Cuda(Box::new(
        Cuda::open(0, None).unwrap_or_else(|e| panic!("this test needs an NVIDIA GPU: {e}")),
    ))
}

impl TestGpu {
    /// One launch of `p`: (its input, its output).
    fn sweep_once(&mut self, p: &Point) -> (Vec<f32>, Vec<f32>) {
        match self {
            TestGpu::Cuda(cuda) => cuda.sweep_once(p).unwrap(),
            TestGpu::Standin => {
                // The pattern the GPU's sweep buffers are filled with.
                let x: Vec<f32> = (0..p.elements)
                    .map(|i| (i % 1024) as f32 / 1024.0)
                    .collect();
                let y = reference_sweep(p, &x);
                (x, y)
            }
        }
    }
}

/// The CPU reference's output of sweep point `p` on input `x` (FP16 results as the bit
/// patterns the GPU stores).
fn reference_sweep(p: &Point, x: &[f32]) -> Vec<f32> {
    let d = Sweep {
        n: p.elements as usize,
        iters: p.iters,
    };
    let mut want = vec![0.0f32; x.len()];
    match p.kernel {
        Kernel::SweepF32 => reference::sweep_f32(&d, SWEEP_A, SWEEP_B, x, &mut want),
        Kernel::SweepF16x2 => {
            let bits: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
            let mut out = vec![0u32; bits.len()];
            reference::sweep_f16x2(&d, SWEEP_A_H2, SWEEP_B_H2, &bits, &mut out);
            want = out.into_iter().map(f32::from_bits).collect();
        }
        Kernel::Copy => want.copy_from_slice(x),
        Kernel::Triad => {
            // y = x + a * z with z = x (both uploaded from the same pattern), fused.
            for (w, v) in want.iter_mut().zip(x) {
                *w = SWEEP_A.mul_add(*v, *v);
            }
        }
    }
    want
}

fn close(name: &str, gpu: &[f32], cpu: &[f32], rel: f32) {
    assert_eq!(gpu.len(), cpu.len(), "{name}");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= rel * c.abs().max(1.0),
            "{name}[{i}]: GPU {g}, CPU {c}"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh; JPOWER_GPU_STANDIN=cpu runs it on the CPU stand-in"]
fn gpu_sweep_kernels_match_the_cpu_reference() {
    let mut device = gpu();
    let n = 1 << 16;
    for (kernel, iters) in [
        (Kernel::SweepF32, 9),
        (Kernel::SweepF16x2, 9),
        (Kernel::Copy, 0),
        (Kernel::Triad, 0),
    ] {
        let p = Point {
            kernel,
            iters,
            elements: n,
        };
        let (x, y) = device.sweep_once(&p);
        // Bit-exact: the same fused operations in the same order (FP16 as bit patterns).
        let want = reference_sweep(&p, &x);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y), bits(&want), "{} bit for bit", kernel.symbol());
    }
}

/// One kernel output of [`exercise`]: what made it, and whether the CPU reference is
/// bit-exact for it (see `agent/gpu/reference.rs`) or within a relative 1e-5 (the
/// tree reductions and `expf`/`logf`).
struct Output {
    name: String,
    exact: bool,
    values: Vec<f32>,
}

/// Runs every training kernel on fixed inputs, including the shapes only the CNN reached
/// before (a bias gradient over more than 256 values per channel, a softmax over more than
/// 256 classes, GEMM with beta = 0, operands at offsets inside larger buffers), and
/// returns every output, named.
fn exercise<B: Backend>(b: &B) -> Result<Vec<Output>, B::Error> {
    let data =
        |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * 0.37 + k).sin()).collect() };
    let mut outs = Vec::new();
    let mut push = |name: String, exact: bool, values: Vec<f32>| {
        outs.push(Output {
            name,
            exact,
            values,
        })
    };
    for (ta, tb, beta) in [
        (false, false, 0.3),
        (true, false, 0.3),
        (false, true, 0.3),
        (true, true, 0.3),
        (false, false, 0.0),
        (true, true, 0.0),
    ] {
        let g = Gemm::new(ta, tb, 37, 29, 19);
        let mut c = b.upload(&data(37 * 29, 3.0))?;
        b.gemm(
            &g,
            0.7,
            &b.upload(&data(37 * 19, 1.0))?,
            &b.upload(&data(19 * 29, 2.0))?,
            beta,
            &mut c,
        )?;
        push(
            format!("gemm_f32 ta={ta} tb={tb} beta={beta}"),
            true,
            b.download(&c)?,
        );
    }
    // The second and third matrices of three-matrix buffers: sub-buffer offsets.
    let g = Gemm::new(false, true, 13, 11, 7).at(1, 2, 1);
    let mut c = b.upload(&data(3 * 13 * 11, 4.5))?;
    b.gemm(
        &g,
        1.0,
        &b.upload(&data(3 * 13 * 7, 1.5))?,
        &b.upload(&data(3 * 11 * 7, 2.5))?,
        0.0,
        &mut c,
    )?;
    push(
        "gemm_f32 at offsets (1, 2, 1)".into(),
        true,
        b.download(&c)?,
    );
    for bias in [
        Bias { n: 3, c: 5, hw: 7 },
        Bias {
            n: 4,
            c: 3,
            hw: 300,
        },
    ] {
        let len = bias.n * bias.c * bias.hw;
        let mut y = b.upload(&data(len, 4.0))?;
        b.add_bias(&bias, &mut y, &b.upload(&data(bias.c, 5.0))?)?;
        push(format!("add_bias_f32 {bias:?}"), true, b.download(&y)?);
        let mut db = b.zeros(bias.c)?;
        b.bias_grad(&bias, &y, &mut db)?;
        push(format!("bias_grad_f32 {bias:?}"), false, b.download(&db)?);
    }
    let relu = Relu { n: 105 };
    let y = b.upload(&data(105, 4.0))?;
    let (mut r, mut dr) = (b.zeros(105)?, b.zeros(105)?);
    b.relu_fwd(&relu, &y, &mut r)?;
    b.relu_bwd(&relu, &y, &b.upload(&data(105, 6.0))?, &mut dr)?;
    push("relu_fwd_f32".into(), true, b.download(&r)?);
    push("relu_bwd_f32".into(), true, b.download(&dr)?);
    let conv = Conv {
        c: 2,
        h: 9,
        w: 7,
        kh: 3,
        kw: 3,
        pad: 1,
        stride: 2,
    };
    let x = b.upload(&data(2 * conv.x_len(), 7.0))?;
    let mut col = b.zeros(2 * conv.col_len())?;
    let mut dx = b.zeros(2 * conv.x_len())?;
    for image in 0..2 {
        b.im2col(&conv, image, &x, &mut col)?;
        b.col2im(&conv, image, &col, &mut dx)?;
    }
    push("im2col_f32 (two images)".into(), true, b.download(&col)?);
    push("col2im_f32 (two images)".into(), true, b.download(&dx)?);
    let pool = Pool2 { nc: 6, h: 8, w: 6 };
    let (mut py, mut arg, mut pdx) = (
        b.zeros(pool.out_len())?,
        b.zeros_i(pool.out_len())?,
        b.zeros(288)?,
    );
    let px = b.upload(&data(288, 8.0))?;
    b.maxpool2_fwd(&pool, &px, &mut py, &mut arg)?;
    b.maxpool2_bwd(
        &pool,
        &b.upload(&data(pool.out_len(), 9.0))?,
        &arg,
        &mut pdx,
    )?;
    push("maxpool2_fwd_f32".into(), true, b.download(&py)?);
    push("maxpool2_bwd_f32".into(), true, b.download(&pdx)?);
    for sm in [
        Softmax {
            batch: 4,
            classes: 10,
        },
        Softmax {
            batch: 3,
            classes: 300,
        },
    ] {
        let n = sm.batch * sm.classes;
        let labels: Vec<i32> = (0..sm.batch).map(|i| (i * 7 % sm.classes) as i32).collect();
        let (mut loss, mut dl) = (b.zeros(sm.batch)?, b.zeros(n)?);
        b.softmax_xent(
            &sm,
            &b.upload(&data(n, 10.0))?,
            &b.upload_i(&labels)?,
            &mut loss,
            &mut dl,
        )?;
        push(
            format!("softmax_xent_f32 loss {sm:?}"),
            false,
            b.download(&loss)?,
        );
        push(
            format!("softmax_xent_f32 dlogits {sm:?}"),
            false,
            b.download(&dl)?,
        );
    }
    let sgd = Sgd {
        n: 50,
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-3,
    };
    let (mut w, mut v) = (b.upload(&data(50, 11.0))?, b.upload(&data(50, 12.0))?);
    b.sgd_momentum(&sgd, &mut w, &b.upload(&data(50, 13.0))?, &mut v)?;
    push("sgd_momentum_f32 weights".into(), true, b.download(&w)?);
    push("sgd_momentum_f32 velocity".into(), true, b.download(&v)?);
    Ok(outs)
}

#[test]
fn the_cpu_reference_runs_every_training_kernel_shape() {
    // The shapes the GPU test uses pass every descriptor's check on the CPU reference.
    let outs = exercise(&Cpu).unwrap();
    for o in &outs {
        assert!(
            !o.values.is_empty() && o.values.iter().all(|x| x.is_finite()),
            "{}",
            o.name
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh; JPOWER_GPU_STANDIN=cpu runs it on the CPU stand-in"]
fn gpu_training_kernels_and_the_cnn_match_the_cpu_reference() {
    match gpu() {
        TestGpu::Cuda(cuda) => training_matches(|| cuda.train_backend().unwrap()),
        TestGpu::Standin => training_matches(|| Cpu),
    }
}

/// Every training kernel on `backend()` against the CPU reference, then ten steps of the
/// CNN on both.
fn training_matches<B: Backend>(backend: impl Fn() -> B) {
    let want = exercise(&Cpu).unwrap();
    let device = backend();
    let got = exercise(&device).unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        // Bit-exact kernels at tolerance 0, the reductions within 1e-5: each failure
        // names the kernel and the shape.
        close(
            &g.name,
            &g.values,
            &w.values,
            if w.exact { 0.0 } else { 1e-5 },
        );
    }
    // Ten steps of the CNN on both: the same losses and parameters.
    let task = Synthetic::new(5, 16);
    let mut on_gpu = Net::new(backend(), 16, 9).unwrap();
    let mut on_cpu = Net::new(Cpu, 16, 9).unwrap();
    for i in 0..10 {
        let (x, y) = task.batch(i);
        let (gx, gy) = (device.upload(&x).unwrap(), device.upload_i(&y).unwrap());
        let lg = on_gpu.step(&gx, &gy, 0.02).unwrap();
        let lc = on_cpu.step(&x, &y, 0.02).unwrap();
        assert!(
            (lg - lc).abs() <= 1e-3 * lc.max(1.0),
            "step {i}: GPU loss {lg}, CPU {lc}"
        );
    }
    for (g, c) in on_gpu
        .params()
        .unwrap()
        .iter()
        .zip(&on_cpu.params().unwrap())
    {
        close("parameters after 10 steps", g, c, 1e-3);
    }
}
