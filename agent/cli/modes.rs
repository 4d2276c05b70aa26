//! `jpower modes`: presets and the mode space.

use super::{Output, Target};
use crate::control::mode::{EmcLimit, Mode, ModeSpace, Range};
use crate::support::units::Freq;
use anyhow::Result;
use serde_json::json;
use std::fmt::Write;

/// Arguments of `jpower modes`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// List every mode of the mode space.
    #[arg(long)]
    pub all: bool,
}

/// A mode in one line: `cores 0-7  cpu 729.6 MHz..1728 MHz  gpu ..612 MHz  emc no cap`.
pub fn summary(m: &Mode) -> String {
    let r = |r: &Range| {
        if r.min_hz == r.max_hz {
            Freq(r.max_hz).to_string()
        } else {
            format!("{}..{}", Freq(r.min_hz), Freq(r.max_hz))
        }
    };
    let mut s = String::new();
    if let Some(on) = &m.online_cpus {
        let list = crate::board::sysfs::format_cpu_list;
        let _ = write!(s, "cores {} ", list(on));
        if let Some(named) = &m.cpus_named {
            let _ = write!(s, "(of {}; the others as they are) ", list(named));
        }
    }
    if let Some(Some(c)) = m.cpu.iter().find(|c| c.is_some()) {
        let _ = write!(s, " cpu {} ", r(c));
    }
    if let Some(g) = &m.gpu {
        let _ = write!(s, " gpu {} ", r(g));
    }
    match m.emc {
        Some(EmcLimit::Uncapped) => s.push_str(" emc no cap"),
        Some(EmcLimit::CapHz(hz)) => {
            let _ = write!(s, " emc cap {}", Freq(hz));
        }
        None => {}
    }
    s.trim().to_string()
}

/// `jpower modes`.
pub fn run(target: &Target, a: &Args, out: &Output) -> Result<()> {
    // Modes only reads the board: no lock, so it works beside an agent.
    let (root, _sim) = target.root()?;
    let board = &crate::board::Board::discover(root)?;
    let presets = target.presets(board)?;
    let space = ModeSpace::of(board);
    let mut j = json!({
        "presets": presets,
        "space": {"size": space.len(), "cores": space.cores,
                  "cpu_khz": space.cpu_hz.iter().map(|f| f / 1000).collect::<Vec<_>>(),
                  "gpu_hz": space.gpu_hz, "emc_hz": space.emc_hz},
    });
    if a.all {
        j["modes"] = space.iter().map(|m| json!(m)).collect();
    }
    out.print(&j, || {
        let mut t = String::new();
        match &presets {
            Some(p) => {
                let _ = writeln!(t, "presets from {}:", p.source.display());
                if !p.unset.is_empty() {
                    let _ = writeln!(
                        t,
                        "  no preset sets {}: a file for another board? they stay as they are",
                        p.unset.join(", ")
                    );
                }
                for pr in &p.presets {
                    let default = if pr.id == p.default_id {
                        " (default)"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        t,
                        "  {:>2} {:<16} {}{default}",
                        pr.id,
                        pr.name,
                        summary(&pr.mode)
                    );
                    let skipped: Vec<_> = pr
                        .skipped
                        .iter()
                        .map(|s| s.param.as_str())
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    if !skipped.is_empty() {
                        let _ = writeln!(t, "     skipped: {}", skipped.join(", "));
                    }
                }
            }
            None => t.push_str("no nvpmodel file on this board (pass --nvpmodel FILE)\n"),
        }
        let _ = writeln!(
            t,
            "mode space: {} modes = {} core counts x {} CPU x {} GPU x {} EMC frequencies",
            space.len(),
            space.cores.len(),
            space.cpu_hz.len(),
            space.gpu_hz.len(),
            space.emc_hz.len()
        );
        if a.all {
            for (i, m) in space.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "{i:>6} cores {:>2} cpu {:>11} gpu {:>11} emc {:>10}",
                    m.cores,
                    Freq(m.cpu_hz).to_string(),
                    Freq(m.gpu_hz).to_string(),
                    Freq(m.emc_hz).to_string()
                );
            }
        }
        t
    })
}
