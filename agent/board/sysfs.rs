//! The file layer: a board's sysfs seen from an injected root.
//!
//! Every path jpower reads or writes is relative to a [`Root`]: `/` on a Jetson, any
//! directory laid out like a board (`--root DIR`, the reference trees, an exported
//! simulated board), or a simulated board, whose kernel model plugs in here as a
//! [`Driver`] below the file API. Everything above this module is the same code on a
//! real board and in the simulator.
//!
//! An [`Attr`] is opened once and kept: reads are one `pread` at offset 0 into a stack
//! buffer, writes one `pwrite` of the whole value (what `echo` does; sysfs ignores
//! `O_TRUNC`). On a plain filesystem (tests, tmpfs exports) a shorter value would leave
//! stale bytes behind, so there the write is followed by `ftruncate`; on real sysfs it is
//! not. Nothing on these paths allocates unless it fails.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `statfs` magic of sysfs (`SYSFS_MAGIC` in linux/magic.h).
const SYSFS_MAGIC: i64 = 0x6265_6572;
/// Longest attribute value the typed accessors read (frequency tables use [`Attr::read_string`]).
const VALUE_BUF: usize = 64;

/// A kernel model that answers for some attributes of a root (the simulated boards).
pub trait Driver: Send + Sync + std::fmt::Debug {
    /// Whether the model handles this attribute; returns its handle if so.
    fn attach(&self, rel: &Path) -> Option<u32>;
    /// A write of `value` (as `write(2)` received it) to an attached attribute.
    fn store(&self, id: u32, value: &[u8]) -> io::Result<()>;
    /// The attribute's contents now, or `None` to read the file as it is.
    fn show(&self, id: u32, buf: &mut [u8]) -> Option<io::Result<usize>>;
}

/// Errors of the file layer; each names the file and, for writes, the value.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// The attribute could not be opened.
    #[error("cannot open {}: {}", path.display(), errno_text(source))]
    Open {
        /// The attribute's path.
        path: PathBuf,
        /// The error from `open`.
        source: io::Error,
    },
    /// A read failed.
    #[error("failed to read {}: {}", path.display(), errno_text(source))]
    Read {
        /// The attribute's path.
        path: PathBuf,
        /// The error from `read`.
        source: io::Error,
    },
    /// A write failed.
    #[error("failed to write {value} to {}: {}", path.display(), errno_text(source))]
    Write {
        /// The attribute's path.
        path: PathBuf,
        /// The value written (`choice N` for a word index with no word).
        value: String,
        /// The error from `write`.
        source: io::Error,
    },
    /// The contents were not what the attribute should hold.
    #[error("unexpected contents {text:?} in {}", path.display())]
    Parse {
        /// The attribute's path.
        path: PathBuf,
        /// What it held, trimmed.
        text: String,
    },
}

impl SysfsError {
    /// The OS error number behind this error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            SysfsError::Open { source, .. }
            | SysfsError::Read { source, .. }
            | SysfsError::Write { source, .. } => source.raw_os_error(),
            SysfsError::Parse { .. } => None,
        }
    }
}

/// `Invalid argument (EINVAL)`: the message and the symbolic errno.
pub fn errno_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let name = format!("{:?}", nix::errno::Errno::from_raw(code));
            let msg = e.to_string();
            let msg = msg.split(" (os error").next().unwrap_or(&msg);
            format!("{msg} ({name})")
        }
        None => e.to_string(),
    }
}

/// Where a board's files live.
#[derive(Debug, Clone)]
pub struct Root {
    dir: PathBuf,
    driver: Option<Arc<dyn Driver>>,
}

impl Root {
    /// Files under `dir`, read and written as they are.
    pub fn host(dir: impl Into<PathBuf>) -> Root {
        Root {
            dir: dir.into(),
            driver: None,
        }
    }

    /// Files under `dir` with a kernel model answering for the attributes it attaches.
    pub fn modelled(dir: impl Into<PathBuf>, driver: Arc<dyn Driver>) -> Root {
        Root {
            dir: dir.into(),
            driver: Some(driver),
        }
    }

    /// The directory this root stands for.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether a kernel model (a simulated board) sits below this root.
    pub fn is_simulated(&self) -> bool {
        self.driver.is_some()
    }

    /// The absolute path of `rel` (a path as on the board, with or without leading `/`).
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        let rel = rel.as_ref();
        self.dir.join(rel.strip_prefix("/").unwrap_or(rel))
    }

    /// The host path of `rel` with every link in it followed inside the root (absolute
    /// links taken relative to it, `..` unable to climb above it), for files read whole
    /// by path (nvpmodel's configuration and status): on a Jetson, `rel` itself.
    pub fn confined(&self, rel: impl AsRef<Path>) -> io::Result<PathBuf> {
        super::in_root::resolve(&self.dir, rel.as_ref())
    }

    /// The board path (`/sys/...`) of an absolute path under this root.
    pub fn board_path(&self, abs: &Path) -> PathBuf {
        match abs.strip_prefix(&self.dir) {
            Ok(rel) => Path::new("/").join(rel),
            Err(_) => abs.to_path_buf(),
        }
    }

    /// Whether `rel` exists (following links).
    pub fn exists(&self, rel: impl AsRef<Path>) -> bool {
        self.path(rel).exists()
    }

    /// Whether there is an entry at `rel`, a link to nothing included.
    pub fn is_present(&self, rel: impl AsRef<Path>) -> bool {
        self.path(rel).symlink_metadata().is_ok()
    }

    /// Resolves links inside the root; `None` if the target is missing or outside it.
    pub fn resolve(&self, rel: impl AsRef<Path>) -> Option<PathBuf> {
        let real = std::fs::canonicalize(self.path(rel)).ok()?;
        let base = std::fs::canonicalize(&self.dir).ok()?;
        real.strip_prefix(&base)
            .ok()
            .map(|r| Path::new("/").join(r))
    }

    /// Opens an attribute once, for reading or for reading and writing.
    pub fn open(&self, rel: impl AsRef<Path>, writable: bool) -> Result<Attr, SysfsError> {
        let path = self.path(rel.as_ref());
        let board = self.board_path(&path);
        let open_err = |source| SysfsError::Open {
            path: path.clone(),
            source,
        };
        // Inside the root whatever its links say (`super::in_root`).
        let file = super::in_root::open(&self.dir, &board, writable).map_err(open_err)?;
        let hook = match &self.driver {
            Some(driver) => {
                // A model emulates the kernel's file modes even for root.
                let mode = file.metadata().map_err(open_err)?.mode();
                if writable && mode & 0o222 == 0 {
                    return Err(open_err(io::Error::from_raw_os_error(libc::EACCES)));
                }
                // The model knows attributes by their real path, whatever alias was used.
                let real = self.resolve(&board).unwrap_or(board);
                driver.attach(&real).map(|id| (driver.clone(), id))
            }
            None => None,
        };
        let truncate = writable && hook.is_none() && !on_sysfs(&file);
        Ok(Attr {
            path,
            file,
            hook,
            truncate,
        })
    }

    /// Reads a whole attribute as text (discovery-time reads; NUL bytes of device-tree
    /// properties become separators).
    pub fn read_string(&self, rel: impl AsRef<Path>) -> Result<String, SysfsError> {
        self.open(rel, false)?.read_string()
    }

    /// Lists the entry names of a directory, sorted; empty if it does not exist.
    pub fn list(&self, rel: impl AsRef<Path>) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort_by(|a, b| natural_cmp(a, b));
        names
    }
}

/// Orders `cpu2` before `cpu10` and `hwmon3` before `hwmon12`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let i = s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (head, tail) = s.split_at(i);
        (
            head.to_string(),
            tail.parse::<u64>().unwrap_or(0),
            tail.len(),
        )
    };
    split(a).cmp(&split(b)).then_with(|| a.cmp(b))
}

fn on_sysfs(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: `statfs` only writes into the zeroed struct we own, and the fd is valid for
    // the duration of the call because `file` is borrowed.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == SYSFS_MAGIC
    }
}

/// One attribute, opened once.
#[derive(Debug)]
pub struct Attr {
    path: PathBuf,
    file: File,
    hook: Option<(Arc<dyn Driver>, u32)>,
    truncate: bool,
}

impl Attr {
    /// The same attribute on a duplicated descriptor (another thread's own handle).
    pub fn try_clone(&self) -> io::Result<Attr> {
        Ok(Attr {
            path: self.path.clone(),
            file: self.file.try_clone()?,
            hook: self.hook.clone(),
            truncate: self.truncate,
        })
    }

    /// The absolute path this attribute was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the raw contents into `buf`, returning the bytes read.
    pub fn read_into<'b>(&self, buf: &'b mut [u8]) -> Result<&'b [u8], SysfsError> {
        let n = self.read_raw(buf).map_err(|source| SysfsError::Read {
            path: self.path.clone(),
            source,
        })?;
        Ok(&buf[..n])
    }

    /// Reads the first whitespace-separated token as an unsigned integer.
    pub fn read_u64(&self) -> Result<u64, SysfsError> {
        self.read_parsed(parse_u64)
    }

    /// Reads the first token as an unsigned integer, or `None` on any failure, without
    /// building an error (the sampler's hot path counts failures instead).
    pub fn try_read_u64(&self) -> Option<u64> {
        self.try_read_parsed(parse_u64)
    }

    /// Reads a sensor's reading ([`parse_reading`]: a negative one is 0).
    pub fn read_reading(&self) -> Result<u64, SysfsError> {
        self.read_parsed(parse_reading)
    }

    /// [`Attr::read_reading`] for the sampler's hot path: `None` on any failure, no error
    /// built.
    pub fn try_read_reading(&self) -> Option<u64> {
        self.try_read_parsed(parse_reading)
    }

    fn read_parsed(&self, parse: fn(&[u8]) -> Option<u64>) -> Result<u64, SysfsError> {
        let mut buf = [0u8; VALUE_BUF];
        let bytes = self.read_into(&mut buf)?;
        parse(bytes).ok_or_else(|| self.parse_error(bytes))
    }

    fn try_read_parsed(&self, parse: fn(&[u8]) -> Option<u64>) -> Option<u64> {
        let mut buf = [0u8; VALUE_BUF];
        let n = self.read_raw(&mut buf).ok()?;
        parse(&buf[..n])
    }

    /// One `pread` at offset 0 (or the kernel model's answer).
    fn read_raw(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.hook {
            Some((driver, id)) => driver
                .show(*id, buf)
                .unwrap_or_else(|| self.file.read_at(buf, 0)),
            None => self.file.read_at(buf, 0),
        }
    }

    /// Reads the first token as a signed integer (EMC caps may read `-1`).
    pub fn read_i64(&self) -> Result<i64, SysfsError> {
        let mut buf = [0u8; VALUE_BUF];
        let bytes = self.read_into(&mut buf)?;
        let token = first_token(bytes);
        std::str::from_utf8(token)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| self.parse_error(bytes))
    }

    /// Reads the whole attribute as text (allocates; not for hot paths).
    pub fn read_string(&self) -> Result<String, SysfsError> {
        let mut buf = vec![0u8; 16 * 1024];
        let bytes = self.read_into(&mut buf)?;
        Ok(String::from_utf8_lossy(bytes)
            .replace('\0', "\n")
            .trim()
            .to_string())
    }

    /// Writes a decimal value followed by a newline, in one `write`.
    pub fn write_u64(&self, value: u64) -> Result<(), SysfsError> {
        let mut buf = [0u8; 24];
        let len = format_u64(value, &mut buf);
        self.write_bytes(&buf[..len])
    }

    /// Reads the first token as the index of one of `words` (`power/control`: `auto`, `on`).
    pub fn read_word(&self, words: &[&str]) -> Result<u64, SysfsError> {
        let mut buf = [0u8; VALUE_BUF];
        let bytes = self.read_into(&mut buf)?;
        let token = first_token(bytes);
        words
            .iter()
            .position(|w| w.as_bytes() == token)
            .map(|i| i as u64)
            .ok_or_else(|| self.parse_error(bytes))
    }

    /// Writes `words[index]` followed by a newline, in one `write`, without allocating.
    pub fn write_word(&self, words: &[&str], index: u64) -> Result<(), SysfsError> {
        let mut buf = [0u8; 32];
        let word = words
            .get(index as usize)
            .map(|w| w.as_bytes())
            .filter(|w| w.len() < buf.len())
            .ok_or_else(|| SysfsError::Write {
                path: self.path.clone(),
                value: format!("choice {index}"),
                source: io::Error::from_raw_os_error(libc::EINVAL),
            })?;
        buf[..word.len()].copy_from_slice(word);
        buf[word.len()] = b'\n';
        self.write_bytes(&buf[..=word.len()])
    }

    /// Writes raw bytes (a whole value, newline included) in one `write`.
    pub fn write_bytes(&self, value: &[u8]) -> Result<(), SysfsError> {
        let result = match &self.hook {
            Some((driver, id)) => driver.store(*id, value),
            None => self.file.write_at(value, 0).and_then(|n| {
                if n != value.len() {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                if self.truncate {
                    self.file.set_len(n as u64)?;
                }
                Ok(())
            }),
        };
        result.map_err(|source| SysfsError::Write {
            path: self.path.clone(),
            value: String::from_utf8_lossy(value).trim().to_string(),
            source,
        })
    }

    fn parse_error(&self, bytes: &[u8]) -> SysfsError {
        SysfsError::Parse {
            path: self.path.clone(),
            text: String::from_utf8_lossy(bytes).trim().to_string(),
        }
    }
}

/// The first whitespace-separated token of an attribute's contents.
pub fn first_token(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let rest = &bytes[start..];
    let end = rest
        .iter()
        .position(|b| b.is_ascii_whitespace() || *b == 0)
        .unwrap_or(rest.len());
    &rest[..end]
}

/// Parses the first token as decimal digits, without allocating.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    let token = first_token(bytes);
    if token.is_empty() {
        return None;
    }
    token.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// A sensor's reading as a non-negative integer: a negative one is 0 (hwmon's INA3221
/// current is signed, and a rail near idle can read a little below zero).
pub fn parse_reading(bytes: &[u8]) -> Option<u64> {
    match first_token(bytes).split_first() {
        Some((b'-', digits)) => parse_u64(digits).map(|_| 0),
        _ => parse_u64(bytes),
    }
}

/// Writes `value` and a newline into `buf`, returning the length.
pub fn format_u64(mut value: u64, buf: &mut [u8; 24]) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (value % 10) as u8;
        n += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for i in 0..n {
        buf[i] = digits[n - 1 - i];
    }
    buf[n] = b'\n';
    n + 1
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split([',', ' ', '\n']).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Formats CPUs as the kernel does (`0-3,8`), or an empty string.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Writes a file whole, creating parent directories (used to lay out trees).
pub fn write_file(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, contents)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_without_allocation() {
        let mut buf = [0u8; 24];
        for v in [0, 7, 115200, 1_300_500_000, u64::MAX] {
            let n = format_u64(v, &mut buf);
            assert_eq!(parse_u64(&buf[..n]), Some(v));
        }
        assert_eq!(parse_u64(b"  42 ma\n"), Some(42));
        assert_eq!(parse_u64(b"x"), None);
        assert_eq!(parse_u64(b""), None);
    }

    #[test]
    fn a_negative_sensor_reading_is_zero_and_garbage_is_none() {
        assert_eq!(parse_reading(b"-8\n"), Some(0));
        assert_eq!(parse_reading(b" 1986\n"), Some(1986));
        assert_eq!(parse_reading(b"-\n"), None);
        assert_eq!(parse_reading(b"-x"), None);
        assert_eq!(parse_u64(b"-8"), None, "a knob's value stays unsigned");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("\n"), Some(vec![]));
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn shorter_writes_replace_the_value_on_plain_files() {
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("f"), b"1300500000\n", 0o644).unwrap();
        let root = Root::host(dir.path());
        let attr = root.open("/f", true).unwrap();
        attr.write_u64(5).unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"5\n");
        assert_eq!(attr.read_u64().unwrap(), 5);
    }

    #[test]
    fn errors_name_the_file_value_and_errno() {
        let e = SysfsError::Write {
            path: "/sys/x/max_freq".into(),
            value: "1300500000".into(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        };
        assert_eq!(
            e.to_string(),
            "failed to write 1300500000 to /sys/x/max_freq: Invalid argument (EINVAL)"
        );
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["cpu10", "cpu2", "cpu1", "policy8", "policy0"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["cpu1", "cpu2", "cpu10", "policy0", "policy8"]);
    }
}
