//! The power budget guard: caps the mode down when the moving average of power exceeds
//! the budget (GPU frequency first, then CPU, then EMC, then cores, one table step at a
//! time) and lifts the caps, last first, when there is headroom below the budget minus
//! the hysteresis. The effective mode is the holder's request limited by the caps.

use crate::board::Board;
use crate::board::Values;
use crate::support::units::Freq;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// GPU frequency at most this, Hz.
    GpuHz(u64),
    /// CPU frequency of every cluster at most this, Hz.
    CpuHz(u64),
    /// EMC cap at most this, Hz.
    EmcHz(u64),
    /// At most this many cores online.
    Cores(usize),
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cap::GpuHz(h) => write!(f, "GPU <= {}", Freq(*h)),
            Cap::CpuHz(h) => write!(f, "CPU <= {}", Freq(*h)),
            Cap::EmcHz(h) => write!(f, "EMC <= {}", Freq(*h)),
            Cap::Cores(n) => write!(f, "cores <= {n}"),
        }
    }
}

/// The guard's state.
#[derive(Debug, Default)]
pub struct Guard {
    /// The budget, watts (`None`: no budget).
    pub budget_w: Option<f64>,
    caps: Vec<Cap>,
    /// The caps in words, kept as they change (a status shares it, allocating nothing).
    described: Option<Arc<str>>,
    last_change: Option<Instant>,
    /// Caps added or lifted since the agent started.
    steps: u64,
}

fn next_below(table: &[u64], v: u64) -> Option<u64> {
    table.iter().copied().filter(|&f| f < v).max()
}

impl Guard {
    /// Sets or clears the budget; clearing lifts every cap.
    pub fn set_budget(&mut self, watts: Option<f64>) {
        self.budget_w = watts;
        if watts.is_none() {
            self.steps += self.caps.len() as u64;
            self.caps.clear();
            self.redescribe();
        }
    }

    /// The caps in force, in words (`None` when there are none).
    pub fn describe(&self) -> Option<Arc<str>> {
        self.described.clone()
    }

    fn redescribe(&mut self) {
        self.described = (!self.caps.is_empty()).then(|| {
            let words: Vec<String> = self.caps.iter().map(Cap::to_string).collect();
            words.join(", ").into()
        });
    }

    /// How many caps are in force.
    pub fn caps_in_force(&self) -> usize {
        self.caps.len()
    }

    /// Caps added or lifted since the agent started.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// `requested` limited by the caps. A cluster with no CPU online keeps its requested
    /// limits: it draws nothing, and lowering them would bring one of its CPUs online for
    /// the writes at every step ([`crate::control::plan`]; a review found four hotplugs
    /// per CPU cap step in a preset with two clusters offline).
    pub fn clamp(&self, b: &Board, requested: &Values) -> Values {
        let mut v = self.capped(b, requested);
        for c in &b.clusters {
            if !crate::control::plan::cluster_online(b, &c.cpus, &v) {
                (v[c.min], v[c.max]) = (requested[c.min], requested[c.max]);
            }
        }
        v
    }

    fn capped(&self, b: &Board, requested: &Values) -> Values {
        let mut v = requested.clone();
        for cap in &self.caps {
            match *cap {
                Cap::GpuHz(hz) => {
                    if let Some(g) = &b.gpu {
                        v[g.max] = v[g.max].min(hz);
                        v[g.min] = v[g.min].min(v[g.max]);
                    }
                }
                Cap::CpuHz(hz) => {
                    for c in &b.clusters {
                        v[c.max] = v[c.max].min(hz / 1000);
                        v[c.min] = v[c.min].min(v[c.max]);
                    }
                }
                Cap::EmcHz(hz) => {
                    if let Some(e) = &b.emc {
                        let now = if v[e.cap] == e.uncapped_raw() || v[e.cap] == 0 {
                            u64::MAX
                        } else {
                            v[e.cap]
                        };
                        v[e.cap] = now.min(hz);
                    }
                }
                Cap::Cores(n) => {
                    let mut online = 0;
                    for &(_, knob) in &b.cpus {
                        match knob {
                            Some(k) if v[k] == 1 => {
                                online += 1;
                                if online > n {
                                    v[k] = 0;
                                }
                            }
                            None => online += 1,
                            _ => {}
                        }
                    }
                }
            }
        }
        v
    }

    /// The next cap down from `effective`: GPU, then CPU, then EMC, then cores.
    fn next_cap(b: &Board, effective: &Values) -> Option<Cap> {
        if let Some(g) = &b.gpu {
            if let Some(f) = next_below(&g.table_hz, effective[g.max]) {
                return Some(Cap::GpuHz(f));
            }
        }
        if let Some(c) = b.clusters.first() {
            if let Some(f) = next_below(&c.table_hz, effective[c.max] * 1000) {
                return Some(Cap::CpuHz(f));
            }
        }
        if let Some(e) = &b.emc {
            let raw = effective[e.cap];
            let top = e.table_hz.last().copied().unwrap_or(0);
            let cur = if raw == e.uncapped_raw() || raw == 0 {
                top
            } else {
                raw
            };
            if let Some(f) = next_below(&e.table_hz, cur) {
                return Some(Cap::EmcHz(f));
            }
        }
        let online = b
            .cpus
            .iter()
            .filter(|(_, k)| k.is_none_or(|k| effective[k] == 1))
            .count();
        (online > 1).then_some(Cap::Cores(online - 1))
    }

    /// One decision from the mean power over the last window: returns what changed.
    pub fn tick(
        &mut self,
        b: &Board,
        effective: &Values,
        mean_w: f64,
        window: Duration,
        hysteresis_w: f64,
        now: Instant,
    ) -> Option<String> {
        let budget = self.budget_w?;
        // Let each change show in a whole window before the next.
        if self
            .last_change
            .is_some_and(|t| now.duration_since(t) < window)
        {
            return None;
        }
        if mean_w > budget {
            let cap = Guard::next_cap(b, effective)?;
            self.caps.push(cap);
            self.redescribe();
            self.last_change = Some(now);
            self.steps += 1;
            Some(format!(
                "{mean_w:.2} W over the {budget:.2} W budget: capped {cap}"
            ))
        } else if mean_w < budget - hysteresis_w {
            let cap = self.caps.pop()?;
            self.redescribe();
            self.last_change = Some(now);
            self.steps += 1;
            Some(format!(
                "{mean_w:.2} W under the {budget:.2} W budget: lifted {cap}"
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by a review: a CPU cap lowered the limits of clusters with no CPU online, and
    /// the plan then brought one of each online for the writes, at every cap step.
    #[test]
    fn a_cpu_cap_leaves_an_offline_clusters_limits_alone() {
        let dir = tempfile::tempdir().unwrap();
        crate::sim::export("xavier-agx", dir.path()).unwrap();
        let b = Board::discover(crate::board::sysfs::Root::host(dir.path())).unwrap();
        let mut v = b.read_knobs().unwrap();
        for &(cpu, knob) in &b.cpus {
            if let Some(k) = knob.filter(|_| cpu >= 2) {
                v[k] = 0;
            }
        }
        let g = Guard {
            caps: vec![Cap::CpuHz(1_190_400_000)],
            ..Guard::default()
        };
        let t = g.clamp(&b, &v);
        assert_eq!(t[b.clusters[0].max], 1_190_400);
        for c in &b.clusters[1..] {
            assert_eq!((t[c.min], t[c.max]), (v[c.min], v[c.max]));
        }
        let online_knob = |k: usize| b.cpus.iter().any(|&(_, o)| o == Some(k));
        let steps = crate::control::plan::plan(&b, &v, &t);
        assert!(
            !steps.is_empty() && steps.iter().all(|s| !online_knob(s.knob)),
            "{steps:?}"
        );
    }
}
