//! `jpower generate`: the man pages and shell completions, generated from the same clap
//! definitions that parse the command line (`clap_mangen`, `clap_complete`), so that they
//! cannot drift from it. `.ci/run` writes them into `target/assets/` before `cargo deb`
//! packs them (see the README's "Packaging").

use super::{Cli, Output};
use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// `jpower generate ...`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Man pages (section 1): jpower.1 and jpower-COMMAND.1 for every command, into DIR.
    Man {
        /// The directory to write into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Shell completion scripts into DIR: jpower.bash, _jpower (zsh), jpower.fish, ...
    Completions {
        /// The shells [default: bash, zsh and fish].
        #[arg(long = "shell", value_name = "SHELL", value_enum)]
        shells: Vec<Shell>,
        /// The directory to write into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Writes what `c` asks for and lists the files written.
pub fn run(c: &Command, out: &Output) -> Result<()> {
    let files = match c {
        Command::Man { out: dir } => man(dir)?,
        Command::Completions { shells, out: dir } => {
            let shells = if shells.is_empty() {
                &[Shell::Bash, Shell::Zsh, Shell::Fish][..]
            } else {
                &shells[..]
            };
            completions(shells, dir)?
        }
    };
    out.print(&serde_json::json!({ "files": files }), || {
        files
            .iter()
            .map(|f| format!("wrote {}\n", f.display()))
            .collect()
    })
}

fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))
}

fn listing(dir: &Path, before: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("failed to list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !before.contains(p))
        .collect();
    files.sort();
    Ok(files)
}

/// Every visible command's page; the top page lists them all under SUBCOMMANDS.
fn man(dir: &Path) -> Result<Vec<PathBuf>> {
    create(dir)?;
    let before = listing(dir, &[])?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("failed to write the man pages into {}", dir.display()))?;
    let after = listing(dir, &before)?;
    // Rewritten pages were there before: list every jpower page, new or not.
    let mut files: Vec<PathBuf> = before
        .into_iter()
        .chain(after)
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("jpower") && n.ends_with(".1"))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn completions(shells: &[Shell], dir: &Path) -> Result<Vec<PathBuf>> {
    create(dir)?;
    let mut cmd = Cli::command();
    shells
        .iter()
        .map(|&shell| {
            clap_complete::generate_to(shell, &mut cmd, "jpower", dir).with_context(|| {
                format!(
                    "failed to write the {shell} completions into {}",
                    dir.display()
                )
            })
        })
        .collect()
}
