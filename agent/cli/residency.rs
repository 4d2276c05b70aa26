//! `jpower residency DIR [--evict]`: how much of a dataset is in the page cache.

use super::Output;
use crate::support::residency;
use anyhow::{Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Arguments of `jpower residency`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The dataset: a directory (every regular file under it) or one file.
    pub path: PathBuf,
    /// First drop its files' cached pages (posix_fadvise DONTNEED; no root needed), so the
    /// next read comes from the disk.
    #[arg(long)]
    pub evict: bool,
}

/// `jpower residency`.
pub fn run(a: &Args, out: &Output) -> Result<()> {
    let r = if a.evict {
        residency::evict(&a.path)
    } else {
        residency::measure(&a.path)
    }
    .with_context(|| format!("residency of {}", a.path.display()))?;
    // The device the dataset lives on (its partition), to match the ring's disk read rates.
    let dev = std::fs::metadata(&a.path)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let json = serde_json::json!({
        "path": a.path, "evicted": a.evict, "device": {"major": major, "minor": minor}, "files": r.files, "bytes": r.bytes,
        "pages": r.pages, "resident_pages": r.resident_pages, "page_size": r.page_size,
        "resident_fraction": r.fraction(),
        "skipped": r.skipped.iter().map(|(p, why)| serde_json::json!({"path": p, "error": why})).collect::<Vec<_>>(),
    });
    out.print(&json, || {
        let mut t = format!(
            "{} (device {major}:{minor}): {} files, {:.1} MB, {} of {} pages in the page cache{}\n",
            a.path.display(),
            r.files,
            r.bytes as f64 / 1e6,
            r.fraction()
                .map_or("-".to_string(), |f| format!("{:.1}%", f * 100.0)),
            r.pages,
            if a.evict { " (after eviction)" } else { "" }
        );
        for (p, why) in &r.skipped {
            t += &format!("skipped {}: {why}\n", p.display());
        }
        t
    })
}
