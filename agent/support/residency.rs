//! Page-cache residency of a directory's files, as vmtouch measures it: each regular file is
//! mapped read-only and `mincore(2)` says which of its pages are in memory (mapping reads
//! nothing from the disk). And eviction, as `vmtouch -e` does it: `posix_fadvise(2)` with
//! `POSIX_FADV_DONTNEED` drops a file's clean cached pages, which needs only read access
//! (dropping the whole page cache, `/proc/sys/vm/drop_caches`, needs root).
//!
//! Whether a dataset is cached decides whether training waits on the disk (the SIGMETRICS'23
//! study's storage-media finding), so `jpower residency` measures it before a run. It runs
//! in the caller's process with the caller's permissions, not in the agent: the agent may
//! run as root, and a client should not learn what it could not read.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// What a directory's regular files hold in the page cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Residency {
    /// Regular files measured (symbolic links are not followed).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their pages.
    pub pages: u64,
    /// Of those, the pages in memory.
    pub resident_pages: u64,
    /// The page size, bytes.
    pub page_size: u64,
    /// Files that could not be measured, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

impl Residency {
    /// The share of the pages in memory, 0 to 1; `None` for no pages (empty files), which
    /// are neither cached nor not.
    pub fn fraction(&self) -> Option<f64> {
        (self.pages > 0).then(|| self.resident_pages as f64 / self.pages as f64)
    }
}

/// Measures the residency of every regular file under `dir` (or `dir` itself, a file).
pub fn measure(dir: &Path) -> io::Result<Residency> {
    walk(dir, &mut |_| Ok(()))
}

/// Asks the kernel to drop the cached pages of every regular file under `dir`, then
/// measures what is left (dirty pages and pages mapped by others stay).
pub fn evict(dir: &Path) -> io::Result<Residency> {
    walk(dir, &mut |f| {
        // SAFETY: plain system call on a descriptor this function owns.
        match unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    })
}

/// Reads every regular file under `dir` once (what a warm page cache holds after an
/// epoch), then measures what is resident.
pub fn warm(dir: &Path) -> io::Result<Residency> {
    walk(dir, &mut |mut f| {
        io::copy(&mut f, &mut io::sink()).map(drop)
    })
}

/// Visits every regular file under `root`: `before` runs on the open file, then its pages
/// are counted.
fn walk(root: &Path, before: &mut dyn FnMut(&File) -> io::Result<()>) -> io::Result<Residency> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let mut r = Residency {
        page_size: page,
        ..Residency::default()
    };
    // The root must exist and be a file or a directory (a link to one is followed); what
    // goes missing below it while walking is only skipped, and links below it are not
    // followed.
    let root = std::fs::canonicalize(root)?;
    let kind = std::fs::metadata(&root)?.file_type();
    if !(kind.is_file() || kind.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file or a directory", root.display()),
        ));
    }
    let mut stack = vec![root];
    while let Some(path) = stack.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                r.skipped.push((path, e.to_string()));
                continue;
            }
        };
        if meta.is_dir() {
            match std::fs::read_dir(&path) {
                Ok(entries) => stack.extend(entries.filter_map(|e| e.ok().map(|e| e.path()))),
                Err(e) => r.skipped.push((path, e.to_string())),
            }
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        match count(&path, meta.size(), page, before) {
            Ok(resident) => {
                r.files += 1;
                r.bytes += meta.size();
                r.pages += meta.size().div_ceil(page);
                r.resident_pages += resident;
            }
            Err(e) => r.skipped.push((path, e.to_string())),
        }
    }
    r.skipped.sort();
    Ok(r)
}

/// The resident pages of the file at `path`, `size` bytes long.
fn count(
    path: &Path,
    size: u64,
    page: u64,
    before: &mut dyn FnMut(&File) -> io::Result<()>,
) -> io::Result<u64> {
    let file = File::open(path)?;
    before(&file)?;
    if size == 0 {
        return Ok(0);
    }
    // SAFETY: a read-only mapping that this function only hands to mincore, which reads
    // no page through it, so a file changed meanwhile cannot make it observe torn data.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let mut vec = vec![0u8; size.div_ceil(page) as usize];
    // SAFETY: `map` covers `map.len()` bytes from a page-aligned address, and `vec` holds
    // one byte per page of that length, as mincore requires.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|&&b| b & 1 == 1).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_just_written_is_resident_and_links_and_empty_files_count_nothing() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let mut f = File::create(data.join("shard0")).unwrap();
        f.write_all(&vec![7u8; 300_000]).unwrap();
        f.sync_all().unwrap();
        File::create(data.join("empty")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", data.join("link")).unwrap();
        let r = measure(dir.path()).unwrap();
        assert_eq!((r.files, r.bytes), (2, 300_000));
        assert_eq!(r.pages, 300_000u64.div_ceil(r.page_size));
        assert_eq!(r.resident_pages, r.pages, "just written: {r:?}");
        assert!(r.skipped.is_empty(), "{r:?}");
        // Eviction asks; the kernel decides (tmpfs keeps everything): never more resident.
        let after = evict(dir.path()).unwrap();
        assert!(after.resident_pages <= r.resident_pages, "{after:?}");
        // Reading every file brings it all back.
        assert_eq!(warm(dir.path()).unwrap().resident_pages, r.pages);
        assert!(measure(&dir.path().join("missing")).is_err());
        // A named link is followed; a device is neither a file nor a directory.
        let named = dir.path().join("named");
        std::os::unix::fs::symlink(data.join("shard0"), &named).unwrap();
        assert_eq!(measure(&named).unwrap().files, 1);
        let e = measure(Path::new("/dev/null")).unwrap_err().to_string();
        assert!(e.contains("is not a regular file or a directory"), "{e}");
    }
}
