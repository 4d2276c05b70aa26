//! `jpower status`: what the board is and what it is doing now.

use super::{Output, Target};
use crate::board::counters::{Counters, RawCounters};
use crate::board::Board;
use crate::control::preset::Presets;
use crate::control::Peek;
use crate::daemon::activity_reply;
use crate::ipc::protocol::{ActivityReply, ReplyBody, RequestBody, Status as AgentStatus};
use crate::support::clock::monotonic_ns;
use crate::support::runtime::same_process_alive;
use crate::support::units::Freq;
use crate::telemetry::activity::Window;
use crate::telemetry::ring::ActivityInfo;
use anyhow::Result;
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::Duration;

/// Module and input power now, milliwatts, with per-rail readings; module power is `None`
/// where a rail of it cannot be read or none makes it up (a review found the sum of the
/// rest, or 0 W, given as the module's).
pub fn rails_now(board: &Board) -> (Vec<Value>, Option<u64>, Option<u64>) {
    let readings: Vec<Option<u64>> = board.rails.iter().map(|r| r.read_mw().ok()).collect();
    let rails = board
        .rails
        .iter()
        .zip(&readings)
        .map(|(r, mw)| {
            let chip = &board.ina[r.chip];
            json!({"label": r.label, "role": r.role, "chip": chip.client, "channel": r.channel,
                   "driver": chip.driver, "power_mw": mw})
        })
        .collect();
    let module = match board.totals.module.as_slice() {
        [] => None,
        rails => rails.iter().map(|&i| readings[i]).sum(),
    };
    let input = board.totals.input.and_then(|i| readings[i]);
    (rails, module, input)
}

/// The mode nvpmodel last applied, from its status file (`pmode:0002`); `None` without
/// the file or with one it cannot parse.
fn nvpmodel_mode(board: &Board) -> Option<u32> {
    let path = board
        .root
        .confined(crate::board::paths::NVPMODEL_STATUS)
        .ok()?;
    let text = std::fs::read_to_string(path).ok()?;
    // `pmode:0002`, and on some releases ` fmode:quiet` after it.
    text.trim()
        .strip_prefix("pmode:")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The window of the activity counters `status` reads itself when no agent runs.
const LOCAL_WINDOW: Duration = Duration::from_millis(100);

/// The activity counters over [`LOCAL_WINDOW`], read here (no agent runs to keep them).
fn local_activity(board: &Board) -> ActivityReply {
    let mut counters = Counters::open(board);
    let window_ns = LOCAL_WINDOW.as_nanos() as u64;
    let mut window = Window::new(window_ns, counters.cpu_count(), counters.disks.len());
    let mut raw = RawCounters::default();
    counters.read(&mut raw);
    window.push(monotonic_ns(), &raw);
    std::thread::sleep(LOCAL_WINDOW);
    counters.read(&mut raw);
    let now = monotonic_ns();
    let a = window.push(now, &raw);
    let info = ActivityInfo {
        period_ns: window_ns,
        window_ns,
        cpu_count: counters.cpu_count(),
        disks: counters.disks.clone(),
    };
    activity_reply(&info, &a, now)
}

/// The status as one JSON object, the same keys with or without an agent (`agent` is
/// `null` without one): the board read without its lock, and what the agent says.
pub fn snapshot(
    p: &Peek,
    presets: Option<&Presets>,
    agent: Option<&AgentStatus>,
    activity: Option<&ActivityReply>,
) -> Value {
    let b = &p.board;
    let v = &p.current;
    let cpus: Vec<Value> = b
        .cpus
        .iter()
        .map(|&(cpu, knob)| json!({"cpu": cpu, "online": knob.is_none_or(|k| v[k] == 1)}))
        .collect();
    let clusters: Vec<Value> = b
        .clusters
        .iter()
        .map(|cl| {
            json!({"policy": cl.policy, "cpus": cl.cpus, "min_khz": v[cl.min], "max_khz": v[cl.max],
                   "cur_khz": cl.cur.read_u64().ok(),
                   "available_khz": cl.table_hz.iter().map(|f| f / 1000).collect::<Vec<_>>()})
        })
        .collect();
    let gpu = b.gpu.as_ref().map(|g| {
        json!({"devfreq": g.devfreq, "device": g.dir, "governor": g.governor, "min_hz": v[g.min],
               "max_hz": v[g.max], "cur_hz": g.cur.read_u64().ok(), "available_hz": g.table_hz})
    });
    let emc = b.emc.as_ref().map(|e| {
        let cap = v[e.cap];
        json!({"cap_file": b.knobs[e.cap].path, "cap_hz": (cap != e.uncapped_raw()).then_some(cap),
               "rate_hz": e.rate.as_ref().and_then(|r| r.read_u64().ok()),
               "available_hz": e.table_hz, "table_source": e.table_source,
               "control": "cap (a ceiling; locking the EMC clock needs root-only debugfs)"})
    });
    let (rails, module_mw, input_mw) = rails_now(b);
    let knobs: Vec<Value> = b
        .knobs
        .iter()
        .zip(v)
        .map(|(k, val)| json!({"knob": k.kind, "path": k.path, "value": val, "writable": k.writable()}))
        .collect();
    let zones: Vec<Value> = crate::telemetry::thermal::zones(&b.root)
        .iter()
        .map(|z| json!({"zone": z.name, "temp_mc": z.read_mc()}))
        .collect();
    let preset = presets.and_then(|p| p.matching(b, v));
    let nvp = nvpmodel_mode(b);
    let nvp_name = nvp.and_then(|id| {
        presets?
            .presets
            .iter()
            .find(|p| p.id == id)
            .map(|p| p.name.clone())
    });
    json!({
        "board": b.identity,
        "root": b.root.dir(),
        "simulated": b.root.is_simulated(),
        "board_key": b.key(),
        "mode": {"name": preset.map_or("custom", |p| p.name.as_str()), "preset_id": preset.map(|p| p.id),
                 "presets_from": presets.map(|p| &p.source)},
        "nvpmodel": {"status_file": b.root.path(crate::board::paths::NVPMODEL_STATUS),
                     "preset_id": nvp, "preset_name": nvp_name,
                     "agrees": nvp.zip(presets).map(|(id, _)| preset.is_some_and(|p| p.id == id))},
        "cpus": cpus,
        "clusters": clusters,
        "gpu": gpu,
        "emc": emc,
        "rails": rails,
        "totals": {"module_mw": module_mw, "module_rails": b.totals.module_names(&b.rails),
                   "input_mw": input_mw},
        "knobs": knobs,
        "thermal": zones,
        "fan_pwm": crate::telemetry::thermal::fan_pwm(&b.root),
        "activity": activity,
        "warnings": b.warnings,
        "state": p.state.as_ref().map(|s| json!({"owner": s.owner, "alive": same_process_alive(s.owner.pid, s.owner.start),
                                                 "baseline_knobs": s.baseline.len(),
                                                 "touched_knobs": s.touched.as_ref().map(Vec::len)})),
        "last_switch_us": (p.stats.count > 0).then(|| p.stats.last_ns as f64 / 1000.0),
        "switches": p.stats.count,
        "pending_recovery": p.pending,
        "agent": agent.map(|a| json!({"lease": a.holder, "budget_w": a.budget_w, "guard": a.guard,
                                      "module_mw": a.module_w.map(|w| (w * 1000.0).floor() as u64),
                                      "ring_path": a.ring_path})),
    })
}

/// The status as text.
pub fn text(s: &Value) -> String {
    let mut o = String::new();
    let b = &s["board"];
    let _ = writeln!(
        o,
        "board   {}{}\nsoc     {}  L4T {}.{}  module {}",
        b["model"].as_str().unwrap_or("?"),
        if s["simulated"] == true {
            "  (simulated)"
        } else {
            ""
        },
        b["soc"].as_str().unwrap_or("?"),
        b["l4t_major"]
            .as_u64()
            .map_or("?".into(), |m| m.to_string()),
        b["l4t_revision"].as_str().unwrap_or("?"),
        b["module"].as_str().unwrap_or("?"),
    );
    let m = &s["mode"];
    let _ = writeln!(
        o,
        "mode    {}{}",
        m["name"].as_str().unwrap_or("?"),
        match (m["preset_id"].as_u64(), m["presets_from"].as_str()) {
            (Some(id), _) => format!(" (preset {id})"),
            (None, Some(from)) => format!(" (no preset of {from} matches: the knobs below)"),
            (None, None) => " (no nvpmodel file to name presets: the knobs below)".into(),
        }
    );
    let n = &s["nvpmodel"];
    if let Some(id) = n["preset_id"].as_u64() {
        let _ = writeln!(
            o,
            "nvpmodel believes {id}{} ({}){}",
            n["preset_name"]
                .as_str()
                .map_or(String::new(), |p| format!(" {p}")),
            n["status_file"].as_str().unwrap_or("?"),
            match n["agrees"].as_bool() {
                Some(true) => ": agrees",
                Some(false) => ": DISAGREES (`nvpmodel -q` and jtop report its mode)",
                None => "",
            }
        );
    }
    let online: Vec<String> = s["cpus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["online"] == true)
        .map(|c| c["cpu"].to_string())
        .collect();
    let _ = writeln!(
        o,
        "cpus    online {} of {}",
        online.join(","),
        s["cpus"].as_array().map_or(0, Vec::len)
    );
    for c in s["clusters"].as_array().into_iter().flatten() {
        let khz = |k: &str| {
            c[k].as_u64().map_or("unreadable".into(), |v| {
                Freq(v.saturating_mul(1000)).to_string()
            })
        };
        let _ = writeln!(
            o,
            "  policy{:<2} min {:>11}  max {:>11}  cur {:>11}",
            c["policy"],
            khz("min_khz"),
            khz("max_khz"),
            khz("cur_khz")
        );
    }
    if let Some(g) = s["gpu"].as_object() {
        let hz = |k: &str| {
            g[k].as_u64()
                .map_or("unreadable".into(), |v| Freq(v).to_string())
        };
        let _ = writeln!(
            o,
            "gpu     min {:>11}  max {:>11}  cur {:>11}  ({})",
            hz("min_hz"),
            hz("max_hz"),
            hz("cur_hz"),
            g["governor"].as_str().unwrap_or("")
        );
    }
    if let Some(e) = s["emc"].as_object() {
        let cap = e["cap_hz"]
            .as_u64()
            .map_or("none".to_string(), |c| Freq(c).to_string());
        let rate = e["rate_hz"]
            .as_u64()
            .map_or("unreadable".to_string(), |r| Freq(r).to_string());
        let _ = writeln!(o, "emc     cap {cap}  running {rate}");
    }
    for r in s["rails"].as_array().into_iter().flatten() {
        let mw = r["power_mw"]
            .as_u64()
            .map_or("?".into(), |m| format!("{:.3} W", m as f64 / 1000.0));
        let _ = writeln!(
            o,
            "rail    {:<16} {:>9}  ({})",
            r["label"].as_str().unwrap_or(""),
            mw,
            r["role"].as_str().unwrap_or("")
        );
    }
    let t = &s["totals"];
    let _ = writeln!(
        o,
        "power   module {} = {}",
        t["module_mw"]
            .as_u64()
            .map_or("- (a rail of it unreadable, or none found)".into(), |mw| {
                format!("{:.3} W", mw as f64 / 1000.0)
            }),
        t["module_rails"].as_array().map_or(String::new(), |a| a
            .iter()
            .filter_map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join(" + "))
    );
    let temps: Vec<String> = s["thermal"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|z| {
            Some(format!(
                "{} {:.1}C",
                z["zone"].as_str()?,
                z["temp_mc"].as_f64()? / 1000.0
            ))
        })
        .collect();
    if !temps.is_empty() {
        let fan = s["fan_pwm"]
            .as_u64()
            .map_or(String::new(), |p| format!("  fan pwm {p}/255"));
        let _ = writeln!(o, "thermal {}{fan}", temps.join("  "));
    }
    if let Some(a) = s["activity"].as_object() {
        activity_text(&mut o, a);
    }
    let knobs = s["knobs"].as_array().map_or(0, Vec::len);
    let writable = s["knobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["writable"] == true)
        .count();
    let _ = writeln!(o, "knobs   {knobs} found, {writable} writable");
    match s["state"].as_object() {
        Some(st) => {
            let pid = &st["owner"]["pid"];
            let name = st["owner"]["name"].as_str().unwrap_or("?");
            // A client's name may carry its pid already ("jpower cli (pid 30412)").
            let name = name.strip_suffix(&format!(" (pid {pid})")).unwrap_or(name);
            let _ = writeln!(
                o,
                "state   set by {name} (pid {pid}, {}); `jpower restore` returns to the baseline",
                if st["alive"] == true {
                    "running"
                } else {
                    "exited"
                }
            );
        }
        None => {
            let _ = writeln!(o, "state   at baseline (jpower has not changed this board)");
        }
    }
    if let Some(us) = s["last_switch_us"].as_f64() {
        let _ = writeln!(
            o,
            "switch  last {us:.1} us ({} since baseline)",
            s["switches"]
        );
    }
    for r in s["pending_recovery"].as_array().into_iter().flatten() {
        let _ = writeln!(o, "pending {}", r.as_str().unwrap_or(""));
    }
    if let Some(a) = s["agent"].as_object() {
        let lease = &a["lease"];
        let _ = match lease.as_object() {
            Some(l) => writeln!(
                o,
                "agent   lease {} held by {} (uid {})",
                l["lease"].as_str().unwrap_or("?"),
                l["client"].as_str().unwrap_or("?"),
                l["uid"]
            ),
            None => writeln!(o, "agent   serves the board; no lease held"),
        };
        if let Some(b) = a["budget_w"].as_f64() {
            let _ = writeln!(
                o,
                "budget  {b:.1} W{}",
                a["guard"]
                    .as_str()
                    .map_or(String::new(), |g| format!(" (capped: {g})"))
            );
        }
        let _ = writeln!(o, "ring    {}", a["ring_path"].as_str().unwrap_or("?"));
    }
    for w in s["warnings"].as_array().into_iter().flatten() {
        let _ = writeln!(o, "warning {}", w.as_str().unwrap_or(""));
    }
    o
}

/// The activity lines of the status text: loads and clocks, memory, disks and the fan; a
/// counter the board lacks is left out.
fn activity_text(o: &mut String, a: &serde_json::Map<String, Value>) {
    let pct = |k: &str| a[k].as_f64().map(|pm| format!("{:.1}%", pm / 10.0));
    let clock = |k: &str| a[k].as_u64().map(|hz| format!(" at {}", Freq(hz)));
    let mut load = Vec::new();
    if let Some(g) = pct("gpu_load_pm") {
        load.push(format!("GPU {g}{}", clock("gpu_hz").unwrap_or_default()));
    }
    let cpus = a["cpus"].as_array().map_or(&[][..], Vec::as_slice);
    let online: Vec<f64> = cpus.iter().filter_map(|c| c["util_pm"].as_f64()).collect();
    if !online.is_empty() {
        let mean = online.iter().sum::<f64>() / online.len() as f64 / 10.0;
        load.push(format!(
            "CPU {mean:.1}% ({} of {} online)",
            online.len(),
            cpus.len()
        ));
    }
    if let Some(e) = pct("emc_activity_pm") {
        load.push(format!("EMC {e}{}", clock("emc_hz").unwrap_or_default()));
    }
    if !load.is_empty() {
        let window = a["window_ms"].as_f64().unwrap_or(0.0);
        let _ = writeln!(o, "load    {}  (over {window:.0} ms)", load.join("  "));
    }
    let gib = |k: &str| a[k].as_f64().map(|kb| kb / (1024.0 * 1024.0));
    if let (Some(used), Some(total)) = (gib("ram_used_kb"), gib("ram_total_kb")) {
        let swap = match (gib("swap_used_kb"), gib("swap_total_kb")) {
            (Some(u), Some(t)) if t > 0.0 => format!("  swap {u:.1} / {t:.1} GiB"),
            _ => String::new(),
        };
        let _ = writeln!(o, "memory  RAM {used:.1} / {total:.1} GiB{swap}");
    }
    let disks: Vec<String> = (a["disks"].as_array().into_iter().flatten())
        .filter_map(|d| {
            let mb = d["read_bps"].as_f64()? / 1e6;
            Some(format!("{} {mb:.1} MB/s read", d["name"].as_str()?))
        })
        .collect();
    if !disks.is_empty() {
        let _ = writeln!(o, "disks   {}", disks.join("  "));
    }
    if let Some(rpm) = a["fan_rpm"].as_u64() {
        let _ = writeln!(o, "fan     {rpm} rpm");
    }
}

/// The status of the board `target` names: read without the board lock, with what a
/// running agent says.
pub fn collect(target: &Target) -> Result<Value> {
    let (agent, activity) = match target.agent()? {
        Some(mut client) => {
            let ReplyBody::Status(st) = client.request(RequestBody::Status)? else {
                anyhow::bail!("unexpected reply from the agent");
            };
            // The agent's counters (absent when it runs with them off).
            let activity = match client.request(RequestBody::Activity) {
                Ok(ReplyBody::Activity(a)) => Some(a),
                // `activity_rate_hz = 0` (a review found status failing on it).
                Err(crate::ipc::client::ClientError::Agent {
                    code: crate::ipc::protocol::ErrorCode::NotFound,
                    ..
                })
                | Ok(_) => None,
                Err(e) => return Err(e.into()),
            };
            (Some(st), activity)
        }
        None => (None, None),
    };
    let (root, _sim) = target.root()?;
    let peek = Peek::read(Board::discover(root)?, &target.runtime_dir())?;
    let activity = activity.or_else(|| agent.is_none().then(|| local_activity(&peek.board)));
    let presets = target.presets_or_warn(&peek.board);
    Ok(snapshot(
        &peek,
        presets.as_ref(),
        agent.as_ref(),
        activity.as_ref(),
    ))
}

/// `jpower status`.
pub fn run(target: &Target, out: &Output) -> Result<()> {
    let s = collect(target)?;
    out.print(&s, || text(&s))
}
