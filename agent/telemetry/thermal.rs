//! The low-rate watcher: thermal zones, the fan, INA3221 alarms and throttling.
//!
//! Every 100 ms it reads each thermal zone's temperature into the ring header, checks
//! whether any running clock sits below its requested minimum (each cluster's
//! `scaling_cur_freq` against `scaling_min_freq`, the GPU's `cur_freq` against `min_freq`)
//! and whether any INA3221 warning or critical alarm is raised, and sets the ring's
//! throttle flags, which the sampler copies into every sample: a profile taken while
//! throttled can be marked as such.

use super::flags;
use super::periodic::Periodic;
use super::ring::{RingWriter, MAX_ZONES};
use crate::board::sysfs::{Attr, Root};
use crate::board::Board;
use crate::support::clock::monotonic_ns;
use std::sync::Arc;
use std::time::Duration;

/// Thermal zones (`/sys/class/thermal/thermal_zone*`).
const THERMAL_CLASS: &str = "/sys/class/thermal";
/// How often the watcher looks at the clocks and alarms.
const PERIOD: Duration = Duration::from_millis(100);

/// A thermal zone: its `type` and its `temp` attribute.
#[derive(Debug)]
pub struct Zone {
    /// The zone's `type` (`cpu-thermal`, `CPU-therm` on L4T 32, ...).
    pub name: String,
    /// Its `temp` attribute, milli-degrees Celsius.
    pub temp: Attr,
}

impl Zone {
    /// Temperature, milli-degrees Celsius (`None` while the zone is powered off).
    pub fn read_mc(&self) -> Option<i32> {
        self.temp
            .read_i64()
            .ok()
            .and_then(|t| i32::try_from(t).ok())
            .filter(|t| *t > -40_000)
    }
}

/// Every thermal zone of the board.
pub fn zones(root: &Root) -> Vec<Zone> {
    root.list(THERMAL_CLASS)
        .into_iter()
        .filter(|n| n.starts_with("thermal_zone"))
        .filter_map(|n| {
            let dir = format!("{THERMAL_CLASS}/{n}");
            Some(Zone {
                name: root.read_string(format!("{dir}/type")).ok()?,
                temp: root.open(format!("{dir}/temp"), false).ok()?,
            })
        })
        .collect()
}

/// The fan's PWM duty (0-255), where the board has a fan jpower can read.
pub fn fan_pwm(root: &Root) -> Option<u64> {
    let path = crate::board::fan_pwm_path(root)?;
    root.open(path, false).ok()?.read_u64().ok()
}

/// (running, requested minimum) clock pairs and alarm attributes to watch.
struct Checks {
    clocks: Vec<(Attr, Attr)>,
    warn: Vec<Attr>,
    crit: Vec<Attr>,
}

impl Checks {
    fn of(board: &Board) -> std::io::Result<Checks> {
        let mut clocks = Vec::new();
        for c in &board.clusters {
            clocks.push((c.cur.try_clone()?, board.knobs[c.min].attr.try_clone()?));
        }
        if let Some(g) = &board.gpu {
            clocks.push((g.cur.try_clone()?, board.knobs[g.min].attr.try_clone()?));
        }
        let (mut warn, mut crit) = (Vec::new(), Vec::new());
        for chip in board.ina.iter().filter(|c| c.driver == "ina3221") {
            for k in 1..=3 {
                if let Ok(a) = board
                    .root
                    .open(format!("{}/curr{k}_max_alarm", chip.dir), false)
                {
                    warn.push(a);
                }
                if let Ok(a) = board
                    .root
                    .open(format!("{}/curr{k}_crit_alarm", chip.dir), false)
                {
                    crit.push(a);
                }
            }
        }
        Ok(Checks { clocks, warn, crit })
    }

    fn flags(&self) -> u32 {
        let raised = |v: &[Attr]| v.iter().any(|a| a.read_u64().is_ok_and(|x| x != 0));
        let mut f = 0;
        // A running clock below the requested minimum: thermal or power capping.
        if self
            .clocks
            .iter()
            .any(|(cur, min)| match (cur.read_u64(), min.read_u64()) {
                (Ok(c), Ok(m)) => m > 0 && c < m,
                _ => false,
            })
        {
            f |= flags::THROTTLED;
        }
        if raised(&self.warn) {
            f |= flags::WARN_ALARM;
        }
        if raised(&self.crit) {
            f |= flags::CRIT_ALARM;
        }
        f
    }
}

/// Starts watching `board`, writing into `ring`'s header every 100 ms until the handle is
/// dropped.
pub fn start(board: &Board, ring: Arc<RingWriter>) -> std::io::Result<Periodic> {
    let zones = zones(&board.root);
    let checks = Checks::of(board)?;
    Periodic::start("jpower-thermal", PERIOD, move || {
        let t = monotonic_ns();
        for (z, zone) in zones.iter().take(MAX_ZONES).enumerate() {
            ring.set_zone(z, zone.read_mc(), t);
        }
        ring.set_throttle(checks.flags());
    })
}
