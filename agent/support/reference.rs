//! Where the reference material lives (real nvpmodel files, reference board trees,
//! calibration figures), for tests and calibration checks.
//!
//! It is `$JPOWER_REFERENCE_DIR`, default `../shared` next to the project. A fresh clone
//! may not have it: a test that needs it calls [`locate`], which prints a notice and
//! returns `None` so the test can pass without it. With `JPOWER_REFERENCE_LOG=FILE` each
//! call also appends `ran <test>` or `skipped <test>` to FILE, which is how `.ci/run`
//! counts the reference tests that ran and were skipped.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The reference directory's `sub` entry, or `None` (with a notice) if it is absent.
pub fn locate(sub: &str, test: &str) -> Option<PathBuf> {
    let base = std::env::var_os("JPOWER_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let path = base.join(sub);
    let found = path.exists();
    if !found {
        eprintln!(
            "reference dir absent: skipping {test} ({} not found)",
            path.display()
        );
    }
    if let Some(log) = std::env::var_os("JPOWER_REFERENCE_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{} {test}", if found { "ran" } else { "skipped" });
        }
    }
    found.then_some(path)
}
