//! The one error type of every file jpower parses (configuration, profiles): what could
//! not be read, or which line is wrong and why, as `FILE:LINE: message`.

use std::path::PathBuf;

/// A file that could not be read or has a bad line.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}
