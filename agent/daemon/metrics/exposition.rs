//! What the agent knows, in the Prometheus text exposition format (version 0.0.4, the one
//! node_exporter's textfile collector and promtool read), written by the `prometheus`
//! crate's `TextEncoder` from a [`Snapshot`]: names and units by Prometheus conventions
//! (base units, `_total` for counters, `_info` for labels carried by a metric of value 1).
//!
//! Each exposition is built in a registry of its own from one snapshot, so a metric that
//! no longer applies (a lease that ended, a budget cleared, a rail without a voltage
//! reading, a counter the board lacks) is absent rather than stale.

use super::energy::EnergyCounters;
use crate::ipc::protocol::{ActivityReply, Holder, LeaseKind, Status};
use crate::telemetry::{flags, Sample};
use prometheus::core::{Collector, GenericCounterVec, GenericGaugeVec};
use prometheus::{Encoder, Opts, Registry, TextEncoder};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What one exposition shows, gathered by the agent from its state and its ring.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The board and its knobs, lease and budget, as `status` answers.
    pub status: Status,
    /// For each CPU cluster, whether all its CPUs are offline: its running clock, the one
    /// it last ran at, is left out.
    pub clusters_offline: Vec<bool>,
    /// The preset the knobs hold (id, name); `None`: a custom mode.
    pub preset: Option<(u32, String)>,
    /// Budget-guard caps in force.
    pub guard_caps: usize,
    /// Whether the guard has no reading of the total (a rail of it fails to read).
    pub guard_blind: bool,
    /// Budget-guard caps added or lifted since the agent started.
    pub guard_steps: u64,
    /// The ring's rails, in its order.
    pub rails: Vec<String>,
    /// The newest sample.
    pub latest: Option<Sample>,
    /// When the snapshot was taken (`CLOCK_MONOTONIC` ns), for the newest sample's age.
    pub now_ns: u64,
    /// Energy since the agent started.
    pub energy: EnergyCounters,
    /// The sampler's requested rate, Hz.
    pub target_rate_hz: f64,
    /// Samples published since the sampler started.
    pub samples: u64,
    /// Missed sampling periods.
    pub overruns: u64,
    /// Failed sensor reads.
    pub read_errors: u64,
    /// Thermal zones: name and temperature in m°C where readable.
    pub zones: Vec<(String, Option<i32>)>,
    /// The throttle flags ([`flags`]).
    pub throttle: u32,
    /// The activity counters' newest record (`None` with them off).
    pub activity: Option<ActivityReply>,
}

/// The exposition of `s`.
pub fn render(s: &Snapshot) -> Result<Vec<u8>, prometheus::Error> {
    let r = Exposition::default();
    let st = &s.status;
    r.gauge(
        "jpower_board_info",
        "The board the agent serves (value 1).",
        &["board", "soc", "simulated", "version"],
    )?
    .with_label_values(&[
        &*st.board,
        &st.soc,
        if st.simulated { "true" } else { "false" },
        env!("CARGO_PKG_VERSION"),
    ])
    .set(1.0);

    rails(&r, s)?;
    energy(&r, s)?;
    mode(&r, s)?;
    budget_and_lease(&r, s)?;
    sampler(&r, s)?;
    thermal(&r, s)?;
    if let Some(a) = &s.activity {
        load(&r, a)?;
    }

    let mut out = Vec::new();
    TextEncoder::new().encode(&r.registry.gather(), &mut out)?;
    Ok(out)
}

/// A registry and the shorthand to add gauges and counters to it.
#[derive(Default)]
struct Exposition {
    registry: Registry,
}

/// The label values of a metric without labels.
const NO_LABELS: &[&str] = &[];

type GaugeVec = GenericGaugeVec<prometheus::core::AtomicF64>;
type CounterVec = GenericCounterVec<prometheus::core::AtomicF64>;

impl Exposition {
    fn add<C: Collector + Clone + 'static>(&self, c: C) -> Result<C, prometheus::Error> {
        self.registry.register(Box::new(c.clone()))?;
        Ok(c)
    }

    fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<GaugeVec, prometheus::Error> {
        self.add(GaugeVec::new(Opts::new(name, help), labels)?)
    }

    fn counter(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<CounterVec, prometheus::Error> {
        self.add(CounterVec::new(Opts::new(name, help), labels)?)
    }
}

fn rails(r: &Exposition, s: &Snapshot) -> Result<(), prometheus::Error> {
    let power = r.gauge(
        "jpower_rail_power_watts",
        "Power of each INA3221 rail, newest sample.",
        &["rail"],
    )?;
    let volts = r.gauge(
        "jpower_rail_voltage_volts",
        "Bus voltage of each rail, newest sample (absent where only the power is read: L4T 32's IIO driver).",
        &["rail"],
    )?;
    let amps = r.gauge(
        "jpower_rail_current_amperes",
        "Current of each rail, newest sample (absent where only the power is read: L4T 32's IIO driver).",
        &["rail"],
    )?;
    let module = r.gauge(
        "jpower_module_power_watts",
        "Module power, newest sample: the input rail where the board has one, else the sum of the module rails (a rail whose read failed counts its last good value).",
        &[],
    )?;
    let Some(latest) = &s.latest else {
        return Ok(());
    };
    for (r, (name, v)) in s.rails.iter().zip(latest.rails()).enumerate() {
        // A rail whose last read failed holds an old value: absent, not stale.
        if latest.failed() & 1 << r != 0 {
            continue;
        }
        power
            .with_label_values(&[name.as_str()])
            .set(f64::from(v.power_uw) / 1e6);
        // Voltage 0: an L4T 32 IIO rail, read for its power alone.
        if v.voltage_mv > 0 {
            volts
                .with_label_values(&[name.as_str()])
                .set(f64::from(v.voltage_mv) / 1e3);
            amps.with_label_values(&[name.as_str()])
                .set(f64::from(v.current_ma) / 1e3);
        }
    }
    module
        .with_label_values(NO_LABELS)
        .set(f64::from(latest.module_uw) / 1e6);
    Ok(())
}

fn energy(r: &Exposition, s: &Snapshot) -> Result<(), prometheus::Error> {
    let rails = r.counter(
        "jpower_rail_energy_joules_total",
        "Energy of each rail since the agent started.",
        &["rail"],
    )?;
    // Every rail from the start: a counter that has counted nothing yet is 0, not absent
    // (the first sample alone spans no time).
    for (i, name) in s.rails.iter().enumerate() {
        let j = s.energy.rails_j.get(i).copied().unwrap_or(0.0);
        rails.with_label_values(&[name.as_str()]).inc_by(j);
    }
    let failed = r.counter(
        "jpower_rail_read_failed_seconds_total",
        "Time over which each rail's reads failed since the agent started (its last good value stood in for them, in its energy and the module's).",
        &["rail"],
    )?;
    for (i, name) in s.rails.iter().enumerate() {
        let f = s.energy.failed_s.get(i).copied().unwrap_or(0.0);
        failed.with_label_values(&[name.as_str()]).inc_by(f);
    }
    r.counter(
        "jpower_module_energy_joules_total",
        "Module energy since the agent started.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .inc_by(s.energy.module_j);
    Ok(())
}

fn mode(r: &Exposition, s: &Snapshot) -> Result<(), prometheus::Error> {
    let st = &s.status;
    let (name, id) = s
        .preset
        .as_ref()
        .map_or(("custom".to_string(), String::new()), |(id, name)| {
            (name.clone(), id.to_string())
        });
    r.gauge(
        "jpower_mode_info",
        "The power mode in force (value 1): the nvpmodel preset the knobs hold, or custom.",
        &["mode", "preset_id"],
    )?
    .with_label_values(&[name.as_str(), &id])
    .set(1.0);
    r.gauge("jpower_cpu_online", "CPUs online.", &[])?
        .with_label_values(NO_LABELS)
        .set(st.online_cpus.len() as f64);
    let cpu = [
        r.gauge(
            "jpower_cpu_frequency_min_hertz",
            "Each CPU cluster's minimum frequency setting.",
            &["cluster"],
        )?,
        r.gauge(
            "jpower_cpu_frequency_max_hertz",
            "Each CPU cluster's maximum frequency setting.",
            &["cluster"],
        )?,
        r.gauge(
            "jpower_cpu_frequency_hertz",
            "Each CPU cluster's running frequency.",
            &["cluster"],
        )?,
    ];
    // A running clock of 0 could not be read; an offline cluster's is the one it last
    // ran at: both are left out.
    for (i, khz) in st.cpu_khz.iter().enumerate() {
        let offline = s.clusters_offline.get(i).copied().unwrap_or(false);
        let shown = if offline || khz[2] == 0 { 2 } else { 3 };
        for (g, v) in cpu.iter().zip(khz).take(shown) {
            g.with_label_values(&[i.to_string().as_str()])
                .set(*v as f64 * 1e3);
        }
    }
    let gpu = [
        r.gauge(
            "jpower_gpu_frequency_min_hertz",
            "The GPU's minimum frequency setting.",
            &[],
        )?,
        r.gauge(
            "jpower_gpu_frequency_max_hertz",
            "The GPU's maximum frequency setting.",
            &[],
        )?,
        r.gauge(
            "jpower_gpu_frequency_hertz",
            "The GPU's running frequency.",
            &[],
        )?,
    ];
    if let Some(hz) = st.gpu_hz {
        let shown = if hz[2] == 0 { 2 } else { 3 };
        for (g, v) in gpu.iter().zip(hz).take(shown) {
            g.with_label_values(NO_LABELS).set(v as f64);
        }
    }
    let emc = r.gauge(
        "jpower_emc_cap_hertz",
        "The nvpmodel EMC (memory clock) cap; absent when uncapped.",
        &[],
    )?;
    if let Some(hz) = st.emc_cap_hz {
        emc.with_label_values(NO_LABELS).set(hz as f64);
    }
    Ok(())
}

fn budget_and_lease(r: &Exposition, s: &Snapshot) -> Result<(), prometheus::Error> {
    let budget = r.gauge(
        "jpower_power_budget_watts",
        "The power budget; absent without one.",
        &[],
    )?;
    if let Some(w) = s.status.budget_w {
        budget.with_label_values(NO_LABELS).set(w);
    }
    r.gauge(
        "jpower_guard_caps",
        "Budget-guard caps in force (each one table step of GPU, CPU, EMC or cores).",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .set(s.guard_caps as f64);
    r.gauge(
        "jpower_guard_blind",
        "1 while the budget guard has no reading of the total (a rail of it fails to read): it holds its caps, adds and lifts none.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .set(f64::from(u8::from(s.guard_blind)));
    r.counter(
        "jpower_guard_steps_total",
        "Budget-guard caps added or lifted since the agent started.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .inc_by(s.guard_steps as f64);
    let held = r.gauge(
        "jpower_lease_held",
        "Whether a client holds the lease on the board (0 or 1).",
        &[],
    )?;
    held.with_label_values(NO_LABELS)
        .set(f64::from(u8::from(s.status.holder.is_some())));
    let holder = r.gauge(
        "jpower_lease_info",
        "Who holds the lease (value 1); absent when nobody does.",
        &["client", "pid", "uid", "lease"],
    )?;
    // The holder's name without the `(pid P)` the status adds: the pid is its own label.
    if let Some(Holder {
        client,
        pid,
        uid,
        lease,
    }) = &s.status.holder
    {
        let kind = match lease {
            LeaseKind::Session => "session",
            LeaseKind::Persistent => "persistent",
        };
        let pid = pid.to_string();
        let name = (client.strip_suffix(')'))
            .and_then(|c| c.strip_suffix(&*pid))
            .and_then(|c| c.strip_suffix(" (pid "))
            .unwrap_or(client);
        holder
            .with_label_values(&[name, &pid, &uid.to_string(), kind])
            .set(1.0);
    }
    Ok(())
}

fn sampler(r: &Exposition, s: &Snapshot) -> Result<(), prometheus::Error> {
    r.gauge(
        "jpower_sampler_target_rate_hertz",
        "The sampler's requested rate (the achieved rate is rate(jpower_samples_total)).",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .set(s.target_rate_hz);
    if let Some(latest) = &s.latest {
        r.gauge(
            "jpower_sample_age_seconds",
            "Age of the newest sample: past a few sampler periods, the sampler has stalled and the power gauges hold its last values.",
            &[],
        )?
        .with_label_values(NO_LABELS)
        .set(s.now_ns.saturating_sub(latest.t_ns) as f64 * 1e-9);
    }
    for (name, help, v) in [
        (
            "jpower_samples_total",
            "Samples published to the ring.",
            s.samples,
        ),
        (
            "jpower_sampler_overruns_total",
            "Sampling periods the sampler missed.",
            s.overruns,
        ),
        (
            "jpower_sampler_read_errors_total",
            "Failed sensor reads.",
            s.read_errors,
        ),
    ] {
        r.counter(name, help, &[])?
            .with_label_values(NO_LABELS)
            .inc_by(v as f64);
    }
    Ok(())
}

fn thermal(r: &Exposition, s: &Snapshot) -> Result<(), prometheus::Error> {
    let temp = r.gauge(
        "jpower_thermal_zone_celsius",
        "Temperature of each thermal zone (unreadable zones are absent).",
        &["zone"],
    )?;
    for (zone, mc) in &s.zones {
        if let Some(mc) = mc {
            temp.with_label_values(&[zone.as_str()])
                .set(f64::from(*mc) / 1e3);
        }
    }
    let flag = r.gauge(
        "jpower_throttle_flag",
        "Throttling and INA3221 alarms now (0 or 1): throttled is a running clock below its requested minimum.",
        &["flag"],
    )?;
    for (name, bit) in [
        ("throttled", flags::THROTTLED),
        ("warning_alarm", flags::WARN_ALARM),
        ("critical_alarm", flags::CRIT_ALARM),
    ] {
        flag.with_label_values(&[name])
            .set(f64::from(u8::from(s.throttle & bit != 0)));
    }
    Ok(())
}

/// The activity counters' loads and memory; what the board lacks (or, for a CPU, while it
/// is offline) is absent.
fn load(r: &Exposition, a: &ActivityReply) -> Result<(), prometheus::Error> {
    let ratio = |pm: u32| f64::from(pm) / 1e3;
    for (name, help, pm) in [
        (
            "jpower_gpu_load_ratio",
            "GPU load over the activity window (0 to 1).",
            a.gpu_load_pm,
        ),
        (
            "jpower_emc_load_ratio",
            "EMC (memory controller) activity over the activity window, of its running clock (0 to 1).",
            a.emc_activity_pm,
        ),
    ] {
        let g = r.gauge(name, help, &[])?;
        if let Some(pm) = pm {
            g.with_label_values(NO_LABELS).set(ratio(pm));
        }
    }
    let cpu = r.gauge(
        "jpower_cpu_load_ratio",
        "Each online CPU's utilisation over the activity window (0 to 1).",
        &["cpu"],
    )?;
    for c in &a.cpus {
        if let Some(pm) = c.util_pm {
            cpu.with_label_values(&[c.cpu.to_string().as_str()])
                .set(ratio(pm));
        }
    }
    for (name, help, kb) in [
        (
            "jpower_memory_used_bytes",
            "RAM in use (MemTotal - MemAvailable).",
            a.ram_used_kb,
        ),
        ("jpower_memory_total_bytes", "RAM in all.", a.ram_total_kb),
    ] {
        let g = r.gauge(name, help, &[])?;
        if let Some(kb) = kb {
            g.with_label_values(NO_LABELS).set(kb as f64 * 1024.0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        let mut latest = Sample {
            n: 9,
            module_uw: 12_500_000,
            rail_count: 2,
            ..Sample::default()
        };
        latest.rails[0].power_uw = 7_000_000;
        latest.rails[0].voltage_mv = 5_000;
        latest.rails[0].current_ma = 1_400;
        latest.rails[1].power_uw = 5_500_000;
        let mut energy = EnergyCounters::default();
        energy.module_j = 100.5;
        energy.rails_j = vec![40.0, 60.5];
        Snapshot {
            status: Status {
                board: "Jetson \"AGX\"\nOrin".into(),
                soc: "t234".into(),
                simulated: true,
                online_cpus: smallvec::smallvec![0, 1, 2],
                cpu_khz: smallvec::smallvec![[115_200, 2_201_600, 2_201_600]],
                gpu_hz: Some([306_000_000, 1_300_500_000, 1_300_500_000]),
                emc_cap_hz: None,
                holder: Some(Holder {
                    client: "trainer (pid 7)".into(),
                    pid: 7,
                    uid: 1000,
                    lease: LeaseKind::Session,
                }),
                budget_w: Some(30.0),
                guard: None,
                module_w: None,
                ring_path: "".into(),
                last_switch_us: None,
            },
            clusters_offline: vec![false],
            preset: Some((0, "MAXN".into())),
            guard_caps: 1,
            guard_blind: false,
            guard_steps: 3,
            rails: vec!["VDD_GPU_SOC".into(), "VDD_IN".into()],
            latest: Some(latest),
            now_ns: 1_500_000_000,
            energy,
            target_rate_hz: 1000.0,
            samples: 10,
            overruns: 2,
            read_errors: 1,
            zones: vec![("cpu-thermal".into(), Some(45_500)), ("gone".into(), None)],
            throttle: flags::THROTTLED,
            activity: Some(ActivityReply {
                age_ms: 3.0,
                window_ms: 1000.0,
                gpu_load_pm: Some(625),
                gpu_hz: Some(1_300_500_000),
                emc_activity_pm: None,
                emc_hz: None,
                fan_pwm: None,
                fan_rpm: None,
                ram_used_kb: Some(2_048),
                ram_total_kb: Some(4_096),
                swap_used_kb: None,
                swap_total_kb: None,
                cpus: vec![
                    crate::ipc::protocol::CpuActivityReply {
                        cpu: 0,
                        util_pm: Some(250),
                        khz: Some(2_201_600),
                    },
                    crate::ipc::protocol::CpuActivityReply {
                        cpu: 1,
                        util_pm: None,
                        khz: None,
                    },
                ],
                disks: vec![],
            }),
        }
    }

    fn text(s: &Snapshot) -> String {
        String::from_utf8(render(s).unwrap()).unwrap()
    }

    #[test]
    fn every_family_is_named_with_its_unit_and_typed() {
        let t = text(&snapshot());
        for line in [
            "# TYPE jpower_rail_energy_joules_total counter",
            "jpower_rail_energy_joules_total{rail=\"VDD_IN\"} 60.5",
            "jpower_module_energy_joules_total 100.5",
            "jpower_module_power_watts 12.5",
            "jpower_rail_power_watts{rail=\"VDD_GPU_SOC\"} 7",
            "jpower_rail_voltage_volts{rail=\"VDD_GPU_SOC\"} 5",
            "jpower_rail_current_amperes{rail=\"VDD_GPU_SOC\"} 1.4",
            "jpower_mode_info{mode=\"MAXN\",preset_id=\"0\"} 1",
            "jpower_cpu_frequency_max_hertz{cluster=\"0\"} 2201600000",
            "jpower_gpu_frequency_hertz 1300500000",
            "jpower_power_budget_watts 30",
            "jpower_guard_caps 1",
            "jpower_guard_blind 0",
            "jpower_guard_steps_total 3",
            "jpower_lease_held 1",
            "jpower_lease_info{client=\"trainer\",lease=\"session\",pid=\"7\",uid=\"1000\"} 1",
            "jpower_sampler_overruns_total 2",
            "jpower_thermal_zone_celsius{zone=\"cpu-thermal\"} 45.5",
            "jpower_throttle_flag{flag=\"throttled\"} 1",
            "jpower_throttle_flag{flag=\"critical_alarm\"} 0",
            "jpower_cpu_online 3",
            "jpower_gpu_load_ratio 0.625",
            "jpower_cpu_load_ratio{cpu=\"0\"} 0.25",
            "jpower_memory_used_bytes 2097152",
            "jpower_memory_total_bytes 4194304",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
        }
        // A power-only rail has no voltage or current; an unreadable zone no temperature.
        assert!(
            !t.contains("jpower_rail_voltage_volts{rail=\"VDD_IN\"}"),
            "{t}"
        );
        assert!(!t.contains("zone=\"gone\""), "{t}");
        // No EMC cap: absent, not zero; likewise an EMC activity the board could not read,
        // and an offline CPU's load.
        assert!(!t.contains("\njpower_emc_cap_hertz "), "{t}");
        assert!(!t.contains("\njpower_emc_load_ratio "), "{t}");
        assert!(!t.contains("cpu=\"1\""), "{t}");
        // The activity counters off: no load at all.
        let mut off = snapshot();
        off.activity = None;
        assert!(!text(&off).contains("\njpower_gpu_load_ratio "));
    }

    /// Found by review: a rail whose reads failed was exported at its last good value as
    /// if newly read; it is absent while they fail, and the time they failed is counted.
    #[test]
    fn a_rail_whose_reads_fail_is_absent_and_its_failed_time_counted() {
        let mut s = snapshot();
        if let Some(l) = &mut s.latest {
            l.flags |= 1 << flags::RAIL_FAILED_SHIFT;
        }
        s.energy.failed_s = vec![2.5, 0.0];
        let t = text(&s);
        for gone in ["power_watts", "voltage_volts", "current_amperes"] {
            let series = format!("jpower_rail_{gone}{{rail=\"VDD_GPU_SOC\"}}");
            assert!(!t.contains(&series), "{series} in\n{t}");
        }
        for line in [
            "jpower_rail_power_watts{rail=\"VDD_IN\"} 5.5",
            "jpower_rail_read_failed_seconds_total{rail=\"VDD_GPU_SOC\"} 2.5",
            "jpower_rail_read_failed_seconds_total{rail=\"VDD_IN\"} 0",
        ] {
            assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
        }
    }

    /// Regression: right after the first sample nothing has been integrated yet, and the
    /// per-rail counters were missing from the scrape instead of reading 0.
    #[test]
    fn rail_energy_counters_start_at_zero() {
        let mut s = snapshot();
        s.energy = EnergyCounters::default();
        let t = text(&s);
        for rail in ["VDD_GPU_SOC", "VDD_IN"] {
            let line = format!("jpower_rail_energy_joules_total{{rail=\"{rail}\"}} 0");
            assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
        }
    }

    /// Found by a review: a cluster whose CPUs were all offline was exported running at
    /// the clock it last ran at, and an unreadable running clock as 0 Hz.
    #[test]
    fn an_offline_clusters_or_unreadable_running_clock_is_absent() {
        let mut s = snapshot();
        s.status.cpu_khz.push([729_600, 2_201_600, 0]);
        s.status.cpu_khz.push([729_600, 2_201_600, 2_201_600]);
        s.clusters_offline = vec![false, false, true];
        if let Some(g) = &mut s.status.gpu_hz {
            g[2] = 0;
        }
        let t = text(&s);
        assert!(
            t.contains("jpower_cpu_frequency_hertz{cluster=\"0\"}"),
            "{t}"
        );
        for gone in [
            "jpower_cpu_frequency_hertz{cluster=\"1\"}",
            "jpower_cpu_frequency_hertz{cluster=\"2\"}",
            "\njpower_gpu_frequency_hertz ",
        ] {
            assert!(!t.contains(gone), "{gone} in\n{t}");
        }
        assert!(
            t.contains("jpower_cpu_frequency_max_hertz{cluster=\"2\"} 2201600000"),
            "{t}"
        );
        assert!(t.contains("\njpower_gpu_frequency_max_hertz "), "{t}");
    }

    #[test]
    fn label_values_are_escaped_and_what_ended_is_absent() {
        let mut s = snapshot();
        assert!(text(&s).contains("board=\"Jetson \\\"AGX\\\"\\nOrin\""));
        s.status.holder = None;
        s.status.budget_w = None;
        s.preset = None;
        s.latest = None;
        let t = text(&s);
        assert!(t.lines().any(|l| l == "jpower_lease_held 0"), "{t}");
        assert!(!t.contains("\njpower_lease_info{"), "{t}");
        assert!(!t.contains("\njpower_power_budget_watts "), "{t}");
        assert!(!t.contains("\njpower_module_power_watts "), "{t}");
        assert!(
            t.contains("jpower_mode_info{mode=\"custom\",preset_id=\"\"} 1"),
            "{t}"
        );
    }
}
