//! The one error type of every file jpower parses (configuration, profiles): what could
//! not be read, or which line is wrong and why, as `FILE:LINE: message`.

use std::path::{Path, PathBuf};

/// A file that could not be read or has a bad line.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error from reading it.
        source: std::io::Error,
    },
    /// A line of the file is wrong.
    #[error("{}:{line}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The wrong line, 1-based.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
}

/// Reads `path` as UTF-8 text; a file that is not says which line its first bad byte is on.
pub fn read_text(path: &Path) -> Result<String, FileError> {
    let bytes = std::fs::read(path).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..good];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = good
            - before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        FileError::Invalid {
            path: path.to_path_buf(),
            line,
            message: format!("not UTF-8 text (byte {column} of the line)"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_utf8_names_its_first_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"ok\nstill ok\nbad \xff here\n").unwrap();
        let e = read_text(&p).unwrap_err().to_string();
        assert!(
            e.ends_with("f:3: not UTF-8 text (byte 5 of the line)"),
            "{e}"
        );
        std::fs::write(&p, "fine\n").unwrap();
        assert_eq!(read_text(&p).unwrap(), "fine\n");
    }
}
