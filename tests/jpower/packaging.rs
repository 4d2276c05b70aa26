//! What `cargo deb` ships from `udev/`: the systemd unit's hardening and ordering, checked
//! by reading the files (`.ci/run` also scores the unit with `systemd-analyze security`).

fn read(rel: &str) -> String {
    let path = format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The unit's `Key=value` lines (comments and sections left out).
fn directives(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[test]
fn the_unit_filters_system_calls_and_does_not_wait_for_udev_settle() {
    let unit = read("udev/jpower.service");
    let d = directives(&unit);
    let has = |k: &str, v: &str| d.iter().any(|(dk, dv)| dk == k && dv == v);
    assert!(has("SystemCallFilter", "@system-service"), "{unit}");
    assert!(has("SystemCallErrorNumber", "EPERM"), "{unit}");
    assert!(has("MemoryDenyWriteExecute", "yes"), "{unit}");
    // The sampler's SCHED_FIFO priority needs CAP_SYS_NICE and realtime scheduling.
    assert!(has("CapabilityBoundingSet", "CAP_SYS_NICE"), "{unit}");
    assert!(!d.iter().any(|(k, _)| k == "RestrictRealtime"), "{unit}");
    // No filter line may take away what @system-service grants the agent.
    for (k, v) in &d {
        if k == "SystemCallFilter" && v.starts_with('~') {
            for needed in [
                "@resources",
                "sched_setscheduler",
                "sched_setaffinity",
                "@chown",
            ] {
                assert!(!v.contains(needed), "{k}={v} denies {needed}");
            }
        }
    }
    for (k, v) in &d {
        assert!(
            !v.contains("systemd-udev-settle"),
            "{k}={v}: systemd-udev-settle is deprecated"
        );
    }
    assert!(
        has("ExecStopPost", "/usr/bin/jpower restore --if-crashed"),
        "{unit}"
    );
}

/// A maintainer script of `udev/debian/`, with `sh -n`'s verdict on its syntax.
fn script(name: &str) -> String {
    let rel = format!("udev/debian/{name}");
    let text = read(&rel);
    let check = std::process::Command::new("sh")
        .arg("-n")
        .arg(format!("{}/{rel}", env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "sh -n {rel}: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(text.starts_with("#!/bin/sh\n"), "{rel}");
    assert!(
        text.lines().any(|l| l.trim() == "set -e"),
        "{rel} lacks set -e"
    );
    let code: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(
        (
            text.matches("#DEBHELPER#").count(),
            text.lines().filter(|l| l.trim() == "#DEBHELPER#").count()
        ),
        (1, 1),
        "{rel}: cargo deb's systemd blocks go where #DEBHELPER# stands, once, on its own line \
         (it is replaced wherever it appears, comments included)"
    );
    // debhelper's blocks enable, start and stop the unit: the scripts must not as well.
    for l in &code {
        assert!(
            !l.contains("systemctl"),
            "{rel}: `{l}` does what #DEBHELPER# does"
        );
        for never in ["userdel", "deluser", "groupdel", "delgroup"] {
            assert!(
                !l.contains(never),
                "{rel}: `{l}` removes the system user or group"
            );
        }
    }
    text
}

#[test]
fn the_maintainer_scripts_follow_debhelper() {
    let postinst = script("postinst");
    // The user before #DEBHELPER#'s tmpfiles and start, which need it.
    let users = postinst
        .find("systemd-sysusers jpower.conf")
        .expect("postinst creates the user");
    assert!(users < postinst.find("#DEBHELPER#").unwrap(), "{postinst}");
    script("prerm");
    let postrm = script("postrm");
    let purge = postrm.find("\"purge\" ]").expect("postrm handles purge");
    let removed = &postrm[purge..];
    for dir in ["/run/jpower", "/etc/jpower"] {
        assert!(removed.contains(dir), "purge leaves {dir}:\n{postrm}");
    }

    let manifest = read("Cargo.toml");
    let units = manifest
        .split("[package.metadata.deb.systemd-units]")
        .nth(1)
        .expect("Cargo.toml has cargo deb's systemd-units table");
    let units = units.split("\n[").next().unwrap();
    for line in ["enable = true", "start = true", "stop-on-upgrade = true"] {
        assert!(
            units.lines().any(|l| l.trim() == line),
            "systemd-units lacks `{line}`"
        );
    }
    assert!(manifest.contains("maintainer-scripts = \"udev/debian/\""));
}
