//! The one error type of every file jpower parses (configuration, profiles): what could
//! not be read, or which line is wrong and why, as `FILE:LINE: message`.

use std::path::PathBuf;

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
