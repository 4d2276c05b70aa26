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
    // systemd 237 (L4T 32) ignores @system-service (239): the groups 239 made it of, and
    // the memory calls then in none, are allowed by name (a review found the agent left
    // with almost no system call there).
    let allowed: Vec<&str> = d
        .iter()
        .filter(|(k, v)| k == "SystemCallFilter" && !v.starts_with('~'))
        .flat_map(|(_, v)| v.split_whitespace())
        .collect();
    for needed in [
        "@aio",
        "@basic-io",
        "@chown",
        "@default",
        "@file-system",
        "@io-event",
        "@ipc",
        "@keyring",
        "@memlock",
        "@network-io",
        "@process",
        "@resources",
        "@setuid",
        "@signal",
        "@sync",
        "@timer",
        "brk",
        "mmap",
        "mprotect",
        "ioctl",
        "flock",
        "getrandom",
    ] {
        assert!(
            allowed.contains(&needed),
            "{needed} is not allowed by name: {unit}"
        );
    }
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
    // The EMC cap files' grants, made when NVIDIA's module loads (maybe after the boot's
    // tmpfiles run), are applied again at each start.
    assert!(
        has(
            "ExecStartPre",
            "-+/bin/systemd-tmpfiles --create --prefix=/sys/kernel jpower.conf"
        ),
        "{unit}"
    );
    // systemd 237 (L4T 32) rejects a `u` line's uid:gid form.
    let users = read("udev/sysusers.d/jpower.conf");
    for l in users.lines().filter(|l| l.starts_with("u ")) {
        let id = l.split_whitespace().nth(2).unwrap_or_default();
        assert!(!id.contains(':'), "{l}: systemd 237 rejects it");
    }
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
        .find("systemd-sysusers ")
        .expect("postinst creates the user");
    assert!(users < postinst.find("#DEBHELPER#").unwrap(), "{postinst}");
    script("prerm");
    let postrm = script("postrm");
    let purge = postrm.find("\"purge\" ]").expect("postrm handles purge");
    let removed = &postrm[purge..];
    for dir in ["/run/jpower", "/var/lib/jpower", "/etc/jpower"] {
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

/// The attribute files the udev rules (`/sys%p/...` in their loops) and the tmpfiles `z`
/// lines hand to group `jpower`, each as its last path components (`device/` dropped: the
/// devfreq rule reaches the GPU through that link).
fn granted_files() -> Vec<String> {
    let rules = read("udev/99-jpower.rules");
    let tmpfiles = read("udev/tmpfiles.d/jpower.conf");
    let from_rules = rules
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("/sys%p/"))
        .map(|f| f.trim_end_matches(';'))
        .map(|f| f.strip_prefix("device/").unwrap_or(f).to_owned());
    let from_tmpfiles = tmpfiles
        .lines()
        .filter_map(|l| l.strip_prefix("z "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned);
    from_rules.chain(from_tmpfiles).collect()
}

/// Whether `granted` (a tail of path components, or an absolute path) names `path`, a
/// knob's path as the board names it (from its root).
fn grants(granted: &str, path: &std::path::Path) -> bool {
    match granted.strip_prefix('/') {
        Some(_) => path == std::path::Path::new(granted),
        // cpuN/cpufreq is a link to the cluster's policyN: compare from the file name up.
        None => granted
            .rsplit('/')
            .zip(path.iter().rev())
            .take_while(|(g, _)| *g != "cpufreq")
            .all(|(g, p)| p == g),
    }
}

#[test]
fn the_udev_rules_grant_exactly_the_files_jpower_writes() {
    use jpower::board::{sysfs::Root, Board};
    let granted = granted_files();
    let mut used = vec![false; granted.len()];
    for spec in jpower::sim::spec::BOARDS {
        let dir = tempfile::tempdir().unwrap();
        jpower::sim::export(&spec.id(), dir.path()).unwrap();
        let board = Board::discover(Root::host(dir.path())).unwrap();
        for knob in board.knobs.iter().filter(|k| k.writable()) {
            let hit = granted.iter().position(|g| grants(g, &knob.path));
            let i = hit.unwrap_or_else(|| {
                panic!(
                    "{}: {} ({:?}) is written but no udev rule or tmpfiles line grants it",
                    spec.id(),
                    knob.path.display(),
                    knob.kind
                )
            });
            used[i] = true;
        }
    }
    for (g, u) in granted.iter().zip(&used) {
        assert!(u, "{g} is granted but no simulated board writes it");
    }
    // The PM QoS device the measurement lock opens (a device node, not a knob).
    let latency = std::path::Path::new(jpower::board::paths::CPU_DMA_LATENCY);
    let node = latency.file_name().unwrap().to_str().unwrap();
    assert!(
        read("udev/99-jpower.rules").contains(&format!("KERNEL==\"{node}\"")),
        "{node} is not granted"
    );
}

#[test]
fn the_gpu_rule_matches_the_gpus_jpower_discovers_and_nothing_else() {
    let rules = read("udev/99-jpower.rules");
    let names = rules
        .split("ATTR{device/of_node/name}==\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the devfreq rule matches the GPU's device-tree node name");
    let names: Vec<&str> = names.split('|').collect();
    assert_eq!(names, jpower::board::paths::GPU_OF_NAMES);
    let devfreq_rules = rules
        .lines()
        .filter(|l| l.contains("SUBSYSTEM==\"devfreq\""))
        .collect::<Vec<_>>();
    assert_eq!(devfreq_rules.len(), 1, "{devfreq_rules:?}");
    assert!(
        devfreq_rules[0].contains("of_node/name"),
        "{devfreq_rules:?}"
    );
}

/// Found by an integrator's review: a rule's loop ended in `[ -e $$f ] && ...`, so a last
/// file that was missing (a CPU without its cpufreq policy yet) made the command exit 1,
/// and udevd logged every such event as failed. Each rule's command, run on a device with
/// none of its files, succeeds.
#[test]
fn a_udev_rule_on_a_device_without_its_files_succeeds() {
    let rules = read("udev/99-jpower.rules");
    let dir = tempfile::tempdir().unwrap();
    let commands: Vec<String> = rules
        .split("RUN+=\"/bin/sh -c '")
        .skip(1)
        .map(|rest| rest.split("'\"").next().unwrap().to_owned())
        .collect();
    assert!(commands.len() >= 3, "{commands:?}");
    for command in commands {
        let script = command
            .replace("/sys%p", &dir.path().display().to_string())
            .replace("$$", "$");
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }
}
