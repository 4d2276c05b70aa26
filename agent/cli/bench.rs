//! `jpower bench switch`: what a full mode switch costs next to the raw `pwrite` and
//! read-back `pread` calls it has to make, measured side by side in one run on a board
//! tree exported to tmpfs (the baseline already saved).

use super::{scratch_dir, Output};
use crate::board::Board;
use crate::control::state::Owner;
use crate::control::{plan, Controller};
use crate::mode::ModeSpace;
use crate::sysfs::{format_u64, Root};
use anyhow::{Context, Result};
use serde_json::json;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// `jpower bench ...`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Mode switch cost against its raw syscalls (target: at most 1.5x).
    Switch {
        /// Fewer iterations (for CI).
        #[arg(long)]
        quick: bool,
        /// Switches to time (alternating between two modes).
        #[arg(long)]
        iterations: Option<usize>,
        /// The simulated board whose tree is exported.
        #[arg(long, default_value = "orin-agx")]
        board: String,
    },
}

/// Runs a benchmark.
pub fn run(cmd: &Command, out: &Output) -> Result<()> {
    let Command::Switch {
        quick,
        iterations,
        board,
    } = cmd;
    let iterations = iterations.unwrap_or(if *quick { 2_000 } else { 20_000 });
    let dir = scratch_dir("jpower-bench")?;
    let result = switch(board, iterations, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let r = result?;
    out.print(&r, || {
        format!(
            "bench switch on an exported {} tree ({} switches of {:.1} writes on average)\n  \
             switch      {:>9.0} ns\n  raw syscalls {:>8.0} ns  (pwrite{} + pread per write)\n  \
             ratio       {:>9.3}x  (target <= 1.5x)\n",
            r["board"].as_str().unwrap_or(""),
            r["iterations"],
            r["writes_per_switch"].as_f64().unwrap_or(0.0),
            r["switch_ns"].as_f64().unwrap_or(0.0),
            r["raw_ns"].as_f64().unwrap_or(0.0),
            if r["truncates"] == true {
                " + ftruncate"
            } else {
                ""
            },
            r["ratio"].as_f64().unwrap_or(0.0),
        )
    })
}

fn switch(board_id: &str, iterations: usize, dir: &std::path::Path) -> Result<serde_json::Value> {
    let tree = dir.join("root");
    let spec = crate::sim::export(board_id, &tree)?;
    let board = Board::discover(Root::host(&tree))?;
    let space = ModeSpace::of(&board);
    let (a, b) = (space.get(space.len() - 1), space.get(space.len() / 3));
    let (Some(a), Some(b)) = (a, b) else {
        anyhow::bail!("the board has an empty mode space");
    };
    let (ma, mb) = (a.to_mode(&board), b.to_mode(&board));
    let mut c = Controller::open(board, &dir.join("run"), Owner::cli())?;
    c.apply(&ma)?; // saves the baseline
    let ta = plan::target(c.board(), &ma, c.current())?;
    c.apply(&mb)?;
    let tb = plan::target(c.board(), &mb, c.current())?;
    c.apply(&ma)?;

    // The writes of each direction, for the raw loop.
    let forward = plan::plan(c.board(), &ta, &tb);
    let back = plan::plan(c.board(), &tb, &ta);
    let writes = (forward.len() + back.len()) as f64 / 2.0;

    let start = Instant::now();
    for i in 0..iterations {
        c.apply(if i % 2 == 0 { &mb } else { &ma })?;
    }
    let switch_ns = start.elapsed().as_nanos() as f64 / iterations as f64;

    // The same calls, made directly on separately opened descriptors.
    let files: Vec<std::fs::File> = c
        .board()
        .knobs
        .iter()
        .map(|k| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(c.board().root.path(&k.path))
        })
        .collect::<std::io::Result<_>>()
        .context("opening the exported knobs")?;
    let truncates = true; // a tmpfs export is a plain filesystem
    let encode = |p: &plan::Plan| -> Vec<(usize, [u8; 24], usize)> {
        p.iter()
            .map(|s| {
                let mut buf = [0u8; 24];
                let n = format_u64(s.value, &mut buf);
                (s.knob, buf, n)
            })
            .collect()
    };
    let (fw, bw) = (encode(&forward), encode(&back));
    let mut rbuf = [0u8; 64];
    let start = Instant::now();
    for i in 0..iterations {
        for (knob, buf, n) in if i % 2 == 0 { &fw } else { &bw } {
            let fd = files[*knob].as_raw_fd();
            // SAFETY: valid descriptors and buffers that outlive each call.
            unsafe {
                libc::pwrite(fd, buf.as_ptr().cast(), *n, 0);
                libc::ftruncate(fd, *n as libc::off_t);
                libc::pread(fd, rbuf.as_mut_ptr().cast(), rbuf.len(), 0);
            }
        }
    }
    let raw_ns = start.elapsed().as_nanos() as f64 / iterations as f64;
    c.restore()?;
    Ok(json!({
        "board": spec.id(),
        "iterations": iterations,
        "writes_per_switch": writes,
        "switch_ns": switch_ns,
        "raw_ns": raw_ns,
        "ratio": switch_ns / raw_ns,
        "truncates": truncates,
        "target_ratio": 1.5,
    }))
}
