//! `jpower characterize`: the quick sweep's files and report, resuming after an
//! interruption, and a bad flag value.

use crate::util::{jpower, json, ok, run, runtime};
use std::path::Path;
use std::process::Stdio;

fn sweep(rt: &Path, out: &Path) -> std::process::Command {
    let mut c = jpower(rt);
    c.args([
        "--sim",
        "xavier-agx",
        "characterize",
        "--modes",
        "MAXN,MODE_10W",
    ])
    .args(["--batch", "16,32", "--workers", "0,1", "--media", "sd"])
    .args(["--repeats", "2", "--epochs", "2", "--out"])
    .arg(out);
    c
}

#[test]
fn characterize_quick_writes_the_runs_and_a_self_contained_report() {
    let rt = runtime();
    let dir = rt.path().join("out");
    let v = json(&ok(jpower(rt.path())
        .args([
            "--sim",
            "xavier-agx",
            "characterize",
            "--quick",
            "--json",
            "--out",
        ])
        .arg(&dir)));
    assert_eq!(v["runs_done"], 8);
    let csv = std::fs::read_to_string(dir.join("runs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 8 * 2, "{csv}");
    let file = json(&std::fs::read_to_string(dir.join("runs.json")).unwrap());
    assert_eq!(file["runs"].as_array().unwrap().len(), 8);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for c in file["configurations"].as_array().unwrap() {
        let label = c["label"].as_str().unwrap();
        assert!(html.contains(label), "{label} not in the report");
        assert!(c["time_cv"].as_f64().unwrap() > 0.0);
    }
    assert!(html.contains("<svg") && html.contains("stall time per run (s)"));
    let outside = html
        .replace("http://www.w3.org/2000/svg", "")
        .matches("http")
        .count();
    assert_eq!(outside, 0, "the report refers to the network");
}

#[test]
fn characterize_resumed_after_an_interruption_equals_an_uninterrupted_sweep() {
    let rt = runtime();
    let (whole, cut) = (rt.path().join("whole"), rt.path().join("cut"));
    ok(&mut sweep(rt.path(), &whole));
    let child = sweep(rt.path(), &cut)
        .args(["--pace-ms", "400"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let csv = cut.join("runs.csv");
    // Wait for the first finished run (header and its two epochs), then interrupt.
    while std::fs::read_to_string(&csv).map_or(0, |t| t.lines().count()) < 3 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resume"));
    let partial = std::fs::read_to_string(&csv).unwrap();
    let runs = (partial.lines().count() - 1) / 2;
    assert!((1..16).contains(&runs), "{partial}");
    let v = json(&ok(sweep(rt.path(), &cut).args(["--resume", "--json"])));
    assert_eq!(v["resumed_runs"], runs);
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap(),
        std::fs::read_to_string(whole.join("runs.csv")).unwrap()
    );
}

#[test]
fn characterize_names_a_bad_value() {
    let rt = runtime();
    let out = run(jpower(rt.path())
        .args([
            "--sim",
            "xavier-agx",
            "characterize",
            "--modes",
            "TURBO",
            "--out",
        ])
        .arg(rt.path().join("o")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("TURBO") && err.contains("MAXN"),
        "{err}"
    );
    let out = run(jpower(rt.path())
        .args([
            "--sim",
            "xavier-agx",
            "characterize",
            "--cache",
            "cold",
            "--out",
        ])
        .arg(rt.path().join("o")));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cache \"cold\": one of dropped, warm"));
}
