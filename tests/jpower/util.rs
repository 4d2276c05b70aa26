//! Helpers shared by the integration tests: temporary runtime directories, the jpower
//! binary, one-line errors, and the reference directory (skipped with a notice when
//! absent).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every simulated board (`--sim`), each release of one.
pub const SIM_BOARDS: &[&str] = &[
    "orin-agx",
    "orin-agx@r36",
    "xavier-agx",
    "xavier-nx",
    "nano",
    "orin-nano",
];

/// A fresh runtime directory, removed when dropped.
pub fn runtime() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The jpower binary under test: `JPOWER_BIN` where set (a test executable carried to
/// another machine, whose build path does not exist there), else the one cargo built.
pub fn bin() -> PathBuf {
    std::env::var_os("JPOWER_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_jpower")),
        PathBuf::from,
    )
}

/// The jpower binary with `--runtime-dir dir` and a clean environment.
pub fn jpower(runtime: &Path) -> Command {
    with_runtime(Command::new(bin()), runtime)
}

/// [`jpower`] run by a user who is not root: `nobody` where the tests run as root (as CI
/// does, where root's disregard of file modes hid a simulator that failed every other
/// user), else this user. `runtime` is opened to every user and the binary copied into
/// it: the build's own may sit under a directory only its owner can enter (a clone in
/// `mktemp -d`).
pub fn jpower_unprivileged(runtime: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    std::fs::set_permissions(runtime, std::fs::Permissions::from_mode(0o777)).unwrap();
    let copy = runtime.join("jpower");
    if !copy.exists() {
        std::fs::copy(bin(), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = with_runtime(Command::new(&copy), runtime);
    if nix::unistd::geteuid().is_root() {
        c.uid(65534).gid(65534);
    }
    c
}

fn with_runtime(mut c: Command, runtime: &Path) -> Command {
    c.arg("--runtime-dir").arg(runtime);
    // Caches (pre-trained reference models) stay in the test's directory.
    c.env("XDG_CACHE_HOME", runtime.join("cache"));
    // So are the boards' measured profiles.
    c.env("JPOWER_STATE_DIR", runtime.join("var-lib"));
    c.env_remove("JPOWER_RUNTIME_DIR")
        .env_remove("JPOWER_SIM_FAULT");
    c
}

/// Runs and returns stdout, failing the test with stderr if the command failed.
pub fn ok(c: &mut Command) -> String {
    let out = c.output().expect("run jpower");
    assert!(
        out.status.success(),
        "{:?} failed: {}\n{}",
        c,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs and returns the output, whatever the status.
pub fn run(c: &mut Command) -> Output {
    c.output().expect("run jpower")
}

/// Runs `python3 -c script arg`, which must succeed; its stdout.
pub fn python(script: &str, arg: &Path) -> Vec<u8> {
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(arg)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Parses a `--json` stdout.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad JSON ({e}): {s}"))
}

/// The reference directory's `sub`, or `None` after a notice that `test` was skipped.
pub fn reference(sub: &str, test: &str) -> Option<PathBuf> {
    jpower::support::reference::locate(sub, test)
}

/// A reference board tree, copied into a temp dir with its links made real.
///
/// The shared reference copy stores each symlink as a plain file holding the link's
/// target (no trailing newline; every sysfs attribute ends in `\n` or `\0`). Real links
/// in a faithful copy are kept as they are.
pub fn reference_tree(name: &str, test: &str) -> Option<tempfile::TempDir> {
    let src = reference(&format!("boards/{name}"), test)?;
    let dst = tempfile::tempdir().expect("temp dir");
    copy_tree(&src, dst.path());
    Some(dst)
}

fn copy_tree(src: &Path, dst: &Path) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&from).unwrap();
        if meta.file_type().is_symlink() {
            symlink(std::fs::read_link(&from).unwrap(), &to).unwrap();
        } else if meta.is_dir() {
            copy_tree(&from, &to);
        } else {
            let bytes = std::fs::read(&from).unwrap();
            match bytes.last() {
                Some(b'\n') | Some(0) | None => {
                    std::fs::write(&to, &bytes).unwrap();
                    let mode = meta.permissions().mode() & 0o777;
                    // Keep the kernel's mode, but let the test's owner replace contents.
                    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode | 0o200))
                        .unwrap();
                }
                Some(_) => symlink(String::from_utf8(bytes).unwrap(), &to).unwrap(),
            }
        }
    }
}

/// Polls `f` every 20 ms until it holds, failing the test after `limit` (a test that
/// sleeps, then asserts that something has happened, fails on a loaded host).
pub fn wait_for(what: &str, limit: std::time::Duration, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs jpower with `args` and checks it fails with exit status 1 and one line on stderr,
/// `jpower: error: ...` holding `needle`, never a panic.
pub fn one_line_error(args: &[&str], needle: &str) {
    fails_in_one_line(args, needle, 1);
}

/// [`one_line_error`] for a command line refused after parsing: exit status 2, as clap's.
pub fn one_line_usage_error(args: &[&str], needle: &str) {
    fails_in_one_line(args, needle, 2);
}

fn fails_in_one_line(args: &[&str], needle: &str, code: i32) {
    let rt = runtime();
    let out = run(jpower(rt.path()).args(args));
    assert_eq!(out.status.code(), Some(code), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("jpower: error: ") && err.contains(needle),
        "{args:?}: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}
