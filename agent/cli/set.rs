//! `jpower set` and `jpower restore`.

use super::{Output, Target};
use crate::board::Board;
use crate::control::mode::{KnobRequest, Mode};
use crate::control::{Restored, Switch};
use crate::ipc::client::{Client, ClientError};
use crate::ipc::protocol::{LeaseKind, ModeRequest, ReplyBody, RequestBody, SNAP_ADVICE};
use crate::support::units::{parse_freq, FreqUnit};
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::fmt::Write;

/// Arguments of `jpower set`: a preset or a knob at least (else a usage error).
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("what")
        .required(true)
        .multiple(true)
        .args(["preset", "cores", "cpu_freq", "gpu_freq", "emc_freq"])
))]
pub struct Args {
    /// A preset of the board's nvpmodel file, by name or id (knob options override it).
    pub preset: Option<String>,
    /// Online CPU cores (the lowest-numbered first; cpu0 always).
    #[arg(long)]
    pub cores: Option<usize>,
    /// CPU frequency of every cluster: 2201600 (kHz, the file's unit), 2.2016GHz, 729.6MHz.
    #[arg(long, value_name = "FREQ", value_parser = |s: &str| parse_freq(s, FreqUnit::KHz))]
    pub cpu_freq: Option<u64>,
    /// GPU frequency: 1300500000 (Hz), 1300.5MHz.
    #[arg(long, value_name = "FREQ", value_parser = |s: &str| parse_freq(s, FreqUnit::Hz))]
    pub gpu_freq: Option<u64>,
    /// EMC (memory) frequency cap: 3199000000 (Hz), 3.199GHz.
    #[arg(long, value_name = "FREQ", value_parser = |s: &str| parse_freq(s, FreqUnit::Hz))]
    pub emc_freq: Option<u64>,
    /// Use the nearest available frequency instead of refusing a value not in the table.
    #[arg(long)]
    pub snap: bool,
}

/// Every write of a switch, as JSON and as text lines.
pub fn describe(board: &Board, sw: &Switch) -> (Vec<Value>, String) {
    let mut text = String::new();
    // A CPU brought online for its cluster's limits is written twice.
    let mut now = sw.prior.clone();
    let changes = sw
        .steps
        .iter()
        .map(|s| {
            let k = &board.knobs[s.knob];
            let from = std::mem::replace(&mut now[s.knob], s.value);
            let _ = writeln!(text, "  {}: {from} -> {}", k.path.display(), s.value);
            json!({"path": k.path, "from": from, "to": s.value})
        })
        .collect();
    (changes, text)
}

fn overlay(mut base: Mode, over: Mode) -> Mode {
    if over.online_cpus.is_some() {
        base.online_cpus = over.online_cpus;
        base.cpus_named = over.cpus_named;
    }
    if base.cpu.len() < over.cpu.len() {
        base.cpu.resize(over.cpu.len(), None);
    }
    for (b, o) in base.cpu.iter_mut().zip(over.cpu) {
        if o.is_some() {
            *b = o;
        }
    }
    base.gpu = over.gpu.or(base.gpu);
    base.emc = over.emc.or(base.emc);
    base
}

/// `jpower set`.
pub fn run(target: &Target, a: &Args, out: &Output) -> Result<()> {
    let knobs = KnobRequest {
        cores: a.cores,
        cpu_hz: a.cpu_freq,
        gpu_hz: a.gpu_freq,
        emc_hz: a.emc_freq,
        snap: a.snap,
    };
    if let Some(client) = target.agent()? {
        return set_through_agent(client, a, &knobs, out);
    }
    let (mut c, _sim) = target.open()?;
    // What discovery could not find is what this mode cannot set (a review found a CPU
    // cluster without its files left at full clock, `set` saying nothing).
    for w in &c.board().warnings {
        log::warn!("{w}");
    }
    let mut notes = Vec::new();
    let mut mode = Mode::default();
    if let Some(name) = &a.preset {
        let Some(presets) = target.presets(c.board())? else {
            bail!(
                "this board has no nvpmodel file ({}); pass --nvpmodel FILE",
                crate::board::paths::NVPMODEL_CONF
            );
        };
        let p = presets.find(name)?;
        for s in &p.skipped {
            notes.push(format!(
                "skipped {} {} {}: {}",
                s.param, s.arg, s.value, s.why
            ));
        }
        for s in &p.snapped {
            notes.push(format!("snapped to the board's table: {s}"));
        }
        mode = p.mode.clone();
    }
    let mode = overlay(mode, knobs.resolve(c.board())?);
    let sw = c.apply(&mode)?;
    if mode.emc.is_some() {
        notes.push(
            "EMC: set as a cap (a ceiling); locking the memory clock needs root-only debugfs"
                .into(),
        );
    }
    let (changes, lines) = describe(c.board(), &sw);
    let us = sw.elapsed_ns as f64 / 1000.0;
    out.print(
        &json!({"changes": changes, "switch_us": us, "notes": notes, "recovered": c.recovered()}),
        || {
            let mut t = match sw.steps.len() {
                0 => "nothing to change: the board is already in that mode\n".to_string(),
                n => format!("{n} write(s), switched and verified in {us:.1} us\n{lines}"),
            };
            for n in &notes {
                let _ = writeln!(t, "note: {n}");
            }
            t.push_str("the mode holds until `jpower restore`\n");
            t
        },
    )
}

/// `jpower set` when an agent runs: a persistent lease through its socket.
fn set_through_agent(
    mut client: Client,
    a: &Args,
    knobs: &KnobRequest,
    out: &Output,
) -> Result<()> {
    // The protocol speaks kHz, cpufreq's unit: a clock between two kHz is in no table
    // (truncated, it named one that is), unless --snap asks for the nearest.
    if let Some(hz) = knobs.cpu_hz.filter(|hz| hz % 1000 != 0 && !knobs.snap) {
        bail!("CPU frequency {hz} Hz is not available on this board: cpufreq's table is in whole kHz; pass --snap to use the nearest");
    }
    let mode = match &a.preset {
        Some(name) if knobs.is_empty() => ModeRequest::Preset { name: name.clone() },
        Some(_) => bail!("through the agent, give a preset or knob values, not both"),
        None => ModeRequest::Knobs {
            cores: knobs.cores.map(|c| c as u32),
            cpu_khz: knobs.cpu_hz.map(|h| (h + 500) / 1000),
            gpu_hz: knobs.gpu_hz,
            emc_hz: knobs.emc_hz,
            snap: knobs.snap,
        },
    };
    let reply = client
        .request(RequestBody::SetMode {
            mode,
            lease: LeaseKind::Persistent,
            timeout_ms: None,
        })
        .map_err(|e| match e {
            // The agent advises the protocol's `snap`; this command's is `--snap`.
            ClientError::Agent { message, .. } => {
                anyhow!(message.replace(SNAP_ADVICE, "; pass --snap to take the nearest"))
            }
            e => e.into(),
        })?;
    let ReplyBody::ModeSet {
        writes,
        switch_us,
        capped,
        ..
    } = reply
    else {
        bail!("unexpected reply from the agent: {reply:?}");
    };
    out.print(
        &json!({"through_agent": true, "writes": writes, "switch_us": switch_us, "capped": capped}),
        || {
            let cap = if capped { "; the budget guard caps it below the request" } else { "" };
            format!("{writes} write(s) through the agent in {switch_us:.1} us{cap}\nthe mode holds (persistent lease) until `jpower restore`\n")
        },
    )
}

/// `jpower restore`.
pub fn restore(target: &Target, if_crashed: bool, out: &Output) -> Result<()> {
    if if_crashed {
        // Opening the board finishes what a dead process left; a live owner's mode stays.
        if target.agent()?.is_some() {
            return out.print(&json!({"restored": false, "agent_running": true}), || {
                "an agent serves the board: nothing to recover\n".into()
            });
        }
        let (c, _sim) = target.open()?;
        let recovered = c.recovered().to_vec();
        return out.print(&json!({"recovered": recovered}), || {
            if recovered.is_empty() {
                "nothing to recover\n".into()
            } else {
                recovered.iter().map(|r| format!("{r}\n")).collect()
            }
        });
    }
    if let Some(mut client) = target.agent()? {
        let ReplyBody::Released { restored } = client.request(RequestBody::Release)? else {
            bail!("unexpected reply from the agent");
        };
        return out.print(
            &json!({"through_agent": true, "restored": restored}),
            || {
                if restored {
                    "released the lease: the agent restored the settings from before it\n".into()
                } else {
                    "nothing to restore: no lease is held\n".into()
                }
            },
        );
    }
    let (mut c, _sim) = target.open()?;
    match c.restore()? {
        Restored::Nothing => out.print(
            &json!({"restored": false, "recovered": c.recovered()}),
            || match c.recovered() {
                [] => "nothing to restore: jpower holds no saved state for this board\n".into(),
                // Opening the board finished what a dead process left (the warning above).
                done => format!(
                    "restored on opening the board: {}; nothing more is saved\n",
                    done.join("; ")
                ),
            },
        ),
        Restored::Baseline { switch, unknown } => {
            let (changes, lines) = describe(c.board(), &switch);
            let mut t = format!(
                "restored the baseline ({} write(s))\n{lines}",
                switch.steps.len()
            );
            for p in &unknown {
                let _ = writeln!(t, "warning: saved knob {} no longer exists", p.display());
            }
            out.print(
                &json!({"restored": true, "changes": changes, "unknown": unknown}),
                || t,
            )
        }
    }
}
