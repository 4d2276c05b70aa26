//! The node_exporter textfile collector's file, replaced atomically: the exposition goes to
//! a hidden temporary file in the same directory (same filesystem, and a name the
//! collector, which reads `*.prom` only, never picks up), then `rename` puts it in place,
//! so a scrape sees the previous file or the new one, never half of one. No fsync: the
//! file is rewritten every interval, and one lost to a power cut is simply rewritten.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The textfile could not be written.
#[derive(Debug, thiserror::Error)]
#[error("metrics textfile {}: {source}", path.display())]
pub struct TextfileError {
    /// The file (or its temporary) that failed.
    pub path: PathBuf,
    /// What the system said.
    pub source: std::io::Error,
}

/// The temporary beside `path`: `.NAME.PID.tmp`.
fn temporary(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Replaces `path` with `bytes` (mode 0644 whatever the umask, which is 0007 under the
/// shipped unit: node_exporter runs as another user).
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), TextfileError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = temporary(path);
    let failed = |p: &Path| {
        let p = p.to_path_buf();
        move |source| TextfileError { path: p, source }
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(failed(&tmp))?;
    let written = f
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .and_then(|()| f.write_all(bytes))
        .map_err(failed(&tmp));
    drop(f);
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path).map_err(failed(path)));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jpower.prom");
        write(&path, b"a 1\n").unwrap();
        // SAFETY: umask has no preconditions; the test puts the old mask back.
        let old = unsafe { libc::umask(0o007) };
        let second = write(&path, b"a 2\n");
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        second.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a 2\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644, "{mode:o}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["jpower.prom"]);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope").join("jpower.prom");
        let e = write(&path, b"").unwrap_err().to_string();
        assert!(e.contains("nope/.jpower.prom."), "{e}");
        assert!(e.contains("No such file"), "{e}");
    }
}
