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
