//! Opening a file of a board tree so that no link can lead outside it: every path is
//! resolved the way `openat2(RESOLVE_IN_ROOT)` resolves it (Linux 5.6+), absolute links
//! taken relative to the root and `..` unable to climb above it. On older kernels (L4T
//! 32 runs 4.9) the same resolution is done component by component in user space and
//! the result opened with `O_NOFOLLOW`; a tree changed while it is being resolved can
//! race that fallback, which the kernel's own resolution does not. The kernel's may
//! answer `EAGAIN` when a rename anywhere in the system races a `..`: it is retried, then
//! left to the fallback, so a busy system never makes a file seem missing.
//!
//! On a Jetson the root is `/` and this is ordinary resolution; under `--root DIR` and on
//! simulated boards it keeps a crafted or broken tree from making jpower read or write
//! anything outside the directory it was given.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The kernel's `struct open_how` (linux/openat2.h), version 0.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Links followed before giving up, as the kernel does (`MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// `openat2` tries before resolving in user space: with `RESOLVE_IN_ROOT` the kernel
/// answers `EAGAIN` when a rename or mount anywhere in the system raced the resolution of
/// a `..` (hwmon and devfreq links climb with `..`), and asks the caller to retry.
const OPENAT2_TRIES: usize = 8;

/// Opens `rel` (a path as on the board) under `root`, for reading or reading and writing.
/// Never creates and never truncates, and never blocks: a FIFO where a board has a file
/// (a broken `--root` tree) opens at once and reads empty, which parses as an error,
/// instead of hanging the command (sysfs, debugfs and `/proc` files ignore `O_NONBLOCK`).
pub fn open(root: &Path, rel: &Path, writable: bool) -> io::Result<File> {
    let flags = if writable {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    } | libc::O_CLOEXEC
        | libc::O_NONBLOCK;
    let mut result = openat2(root, rel, flags);
    for _ in 1..OPENAT2_TRIES {
        match &result {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => result = openat2(root, rel, flags),
            _ => break,
        }
    }
    match result {
        // No openat2 (before 5.6), a seccomp filter that forbids it, or renames elsewhere
        // that kept racing it.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EAGAIN)
            ) =>
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(writable)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(resolve(root, rel)?)
        }
        other => other,
    }
}

fn openat2(root: &Path, rel: &Path, flags: i32) -> io::Result<File> {
    let dir = File::open(root)?;
    let rel = rel.strip_prefix("/").unwrap_or(rel);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let name = CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: the directory fd is open for the call, `name` is NUL-terminated, and `how`
    // is a live `open_how` of the size passed; the kernel only reads them.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 returned a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// The components of `p` that name something: `..` kept, `/` and `.` dropped.
fn parts(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// `rel` resolved under `root` with every link followed inside it: the user-space
/// equivalent of `RESOLVE_IN_ROOT`.
pub fn resolve(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    let mut done: Vec<OsString> = Vec::new();
    let mut todo = parts(rel);
    todo.reverse();
    let mut links = 0;
    while let Some(part) = todo.pop() {
        if part == ".." {
            done.pop();
            continue;
        }
        let here: PathBuf = root.join(done.iter().collect::<PathBuf>()).join(&part);
        match std::fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = std::fs::read_link(&here)?;
                if target.is_absolute() {
                    done.clear();
                }
                todo.extend(parts(&target).into_iter().rev());
            }
            _ => done.push(part),
        }
    }
    Ok(root.join(done.iter().collect::<PathBuf>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A tree with every form of escape: an absolute link, a relative `../..` link, and a
    /// linked directory, each pointing at a file outside the tree.
    fn escapes() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let outside = top.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let secret = outside.join("secret");
        std::fs::write(&secret, "line one\nline two\n").unwrap();
        let tree = top.path().join("tree");
        std::fs::create_dir_all(tree.join("sys/kernel")).unwrap();
        symlink(&secret, tree.join("sys/kernel/absolute")).unwrap();
        symlink("../../../outside/secret", tree.join("sys/kernel/relative")).unwrap();
        symlink(&outside, tree.join("sys/linked_dir")).unwrap();
        std::fs::write(tree.join("sys/kernel/real"), "1\n").unwrap();
        (top, tree, secret)
    }

    #[test]
    fn no_link_leads_outside_the_root() {
        let (_top, tree, secret) = escapes();
        for rel in [
            "/sys/kernel/absolute",
            "/sys/kernel/relative",
            "/sys/linked_dir/secret",
            "/../outside/secret",
        ] {
            // Inside the tree the targets do not exist: nothing is opened.
            assert!(open(&tree, Path::new(rel), true).is_err(), "{rel} escaped");
            let p = resolve(&tree, Path::new(rel)).unwrap();
            assert!(p.starts_with(&tree), "{rel} resolved to {}", p.display());
        }
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "line one\nline two\n"
        );
        assert!(open(&tree, Path::new("/sys/kernel/real"), true).is_ok());
    }

    /// Renames elsewhere in the system make the kernel's `..` resolution answer `EAGAIN`
    /// now and then; an open through a climbing link (as hwmon's are) must never fail for
    /// it (a chip missed at discovery changed the board's knobs between two commands).
    #[test]
    fn renames_elsewhere_never_make_a_file_behind_a_climbing_link_seem_missing() {
        let top = tempfile::tempdir().unwrap();
        let tree = top.path().join("tree");
        std::fs::create_dir_all(tree.join("sys/devices/chip/hwmon")).unwrap();
        std::fs::write(tree.join("sys/devices/chip/hwmon/name"), "ina3221\n").unwrap();
        std::fs::create_dir_all(tree.join("sys/class/hwmon")).unwrap();
        symlink(
            "../../devices/chip/hwmon",
            tree.join("sys/class/hwmon/hwmon0"),
        )
        .unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let (a, b) = (top.path().join("a"), top.path().join("b"));
                std::fs::write(&a, "x").unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::fs::rename(&a, &b).unwrap();
                    std::fs::rename(&b, &a).unwrap();
                }
            });
            let failed = (0..20_000)
                .filter(|_| open(&tree, Path::new("/sys/class/hwmon/hwmon0/name"), false).is_err())
                .count();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(failed, 0, "opens failed while renames ran elsewhere");
        });
    }

    #[test]
    fn links_inside_the_root_resolve_as_on_the_board() {
        let (_top, tree, secret) = escapes();
        // An absolute link means the board's root, and `..` stops there: the targets the
        // links name exist inside the tree too, and those are what opens.
        let inside = |abs: &Path| tree.join(abs.strip_prefix("/").unwrap());
        for (rel, target) in [
            ("/sys/kernel/absolute", inside(&secret)),
            ("/sys/kernel/relative", tree.join("outside/secret")),
            ("/sys/linked_dir/secret", inside(&secret)),
        ] {
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, "the tree's own\n").unwrap();
            assert_eq!(resolve(&tree, Path::new(rel)).unwrap(), target, "{rel}");
            let mut s = String::new();
            io::Read::read_to_string(&mut open(&tree, Path::new(rel), false).unwrap(), &mut s)
                .unwrap();
            assert_eq!(s, "the tree's own\n", "{rel}");
        }
    }
}
