//! CPU discovery: the cores with their `online` files, and the clusters, one per cpufreq
//! policy (`related_cpus`), each with its frequency table and min/max knobs.

use super::sysfs::{parse_cpu_list, Attr};
use super::{parse_table, paths, Board, KnobKind};
use crate::support::units::FreqUnit;

/// A CPU cluster (one cpufreq policy).
#[derive(Debug)]
pub struct Cluster {
    /// `policyN`'s N, the cluster's first CPU.
    pub policy: usize,
    /// Its CPUs.
    pub cpus: Vec<usize>,
    /// Available frequencies, Hz, ascending.
    pub table_hz: Vec<u64>,
    /// Knob indices of its min and max.
    pub min: usize,
    /// Knob index of its max.
    pub max: usize,
    /// `scaling_cur_freq`.
    pub cur: Attr,
}

impl Board {
    pub(super) fn discover_cpus(&mut self) {
        let mut cpus = self
            .root
            .read_string(paths::CPU_POSSIBLE)
            .ok()
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        if cpus.is_empty() {
            // The `cpuN` directories, where the list is missing (a review found every
            // cluster then taken for offline and `set` reporting nothing to change).
            cpus = self
                .root
                .list(paths::CPU_DIR)
                .iter()
                .filter_map(|n| n.strip_prefix("cpu")?.parse().ok())
                .collect();
            cpus.sort_unstable();
            self.warnings.push(format!(
                "no CPUs listed in {}: took the {} cpuN directories",
                paths::CPU_POSSIBLE,
                cpus.len()
            ));
        }
        for cpu in cpus {
            let online = format!("{}/cpu{cpu}/online", paths::CPU_DIR);
            let knob = if self.root.exists(&online) {
                self.add_knob(KnobKind::CpuOnline(cpu), &online, None)
            } else {
                None
            };
            self.cpus.push((cpu, knob));
        }
        let policies: Vec<String> = self
            .root
            .list(paths::CPUFREQ_DIR)
            .into_iter()
            .filter(|n| n.starts_with("policy"))
            .collect();
        if policies.is_empty() {
            self.warnings
                .push(format!("no cpufreq policies in {}", paths::CPUFREQ_DIR));
        }
        for name in policies {
            let Ok(policy) = name.trim_start_matches("policy").parse::<usize>() else {
                continue;
            };
            let dir = format!("{}/{name}", paths::CPUFREQ_DIR);
            let cpus = self
                .root
                .read_string(format!("{dir}/related_cpus"))
                .ok()
                .and_then(|s| parse_cpu_list(&s))
                .unwrap_or_else(|| vec![policy]);
            let table = format!("{dir}/scaling_available_frequencies");
            let table_hz = match self.root.read_string(&table) {
                Ok(s) => parse_table(&s, FreqUnit::KHz, &table, &mut self.warnings),
                Err(e) => {
                    self.warnings.push(format!("cluster {name}: {e}"));
                    Vec::new()
                }
            };
            // Clusters are numbered in policy order; an incomplete one leaves no knobs.
            let cluster = self.clusters.len();
            let knobs_before = self.knobs.len();
            let min = self.add_knob(
                KnobKind::CpuMin(cluster),
                &format!("{dir}/scaling_min_freq"),
                Some(FreqUnit::KHz),
            );
            let max = self.add_knob(
                KnobKind::CpuMax(cluster),
                &format!("{dir}/scaling_max_freq"),
                Some(FreqUnit::KHz),
            );
            let cur = self.root.open(format!("{dir}/scaling_cur_freq"), false);
            match (min, max, cur) {
                (Some(min), Some(max), Ok(cur)) => self.clusters.push(Cluster {
                    policy,
                    cpus,
                    table_hz,
                    min,
                    max,
                    cur,
                }),
                _ => {
                    self.knobs.truncate(knobs_before);
                    self.warnings.push(format!(
                        "cluster {name} is incomplete and is not controlled"
                    ));
                }
            }
        }
        // Some releases list no policy for a cluster whose CPUs are all offline at boot:
        // those CPUs come online at their own clocks, which no knob found here controls.
        let orphans: Vec<String> = self
            .cpus
            .iter()
            .map(|(cpu, _)| *cpu)
            .filter(|cpu| !self.clusters.iter().any(|c| c.cpus.contains(cpu)))
            .map(|cpu| cpu.to_string())
            .collect();
        if !orphans.is_empty() && !self.clusters.is_empty() {
            self.warnings.push(format!(
                "CPUs {} are in no cpufreq policy found (offline at boot?): their clocks are not controlled; discover again with them online",
                orphans.join(", ")
            ));
        }
        if let Some(c) = self.clusters.iter().find(|c| c.table_hz.is_empty()) {
            self.warnings.push(format!(
                "cluster policy{} lists no frequencies: its clock is left out of the mode space",
                c.policy
            ));
        }
    }
}
