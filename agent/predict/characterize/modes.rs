//! The power modes a sweep runs: nvpmodel presets by name, or pinned knobs drawn from the
//! board's mode space (`--modes sample:N`, spread over each knob's range by
//! [`profile::select`]'s stratified design). A pinned mode is named by its knobs
//! (`8c-2201.6MHz-1300.5MHz-3199MHz`: cores, then CPU, GPU and EMC clocks as
//! [`Freq`] writes them), so a CSV row names its mode whichever kind it is, and
//! [`SweepMode::parse`] reads the name back exactly ([`parse_freq`]).

use crate::control::mode::{ModeSpace, PinnedMode};
use crate::predict::profile::{self, Strategy};
use crate::support::units::{parse_freq, Freq, FreqUnit};

/// A clock as a name carries it: [`Freq`]'s text without the space (`1300.5MHz`).
fn clock(hz: u64) -> String {
    Freq(hz).to_string().replace(' ', "")
}

/// One power mode of a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepMode {
    /// A preset of the board's nvpmodel file, by name.
    Preset(String),
    /// Pinned knobs.
    Pinned(PinnedMode),
}

impl SweepMode {
    /// The name rows carry: the preset's, or the knobs'.
    pub fn name(&self) -> String {
        match self {
            SweepMode::Preset(p) => p.clone(),
            SweepMode::Pinned(m) => format!(
                "{}c-{}-{}-{}",
                m.cores,
                clock(m.cpu_hz),
                clock(m.gpu_hz),
                clock(m.emc_hz)
            ),
        }
    }

    /// The mode a [`SweepMode::name`] names: pinned knobs when it has their form, else a
    /// preset.
    pub fn parse(name: &str) -> SweepMode {
        let pinned = || -> Option<PinnedMode> {
            let mut parts = name.split('-');
            let cores = parts.next()?.strip_suffix('c')?.parse().ok()?;
            let mut clock = || parse_freq(parts.next()?, FreqUnit::Hz).ok();
            let m = PinnedMode {
                cores,
                cpu_hz: clock()?,
                gpu_hz: clock()?,
                emc_hz: clock()?,
            };
            parts.next().is_none().then_some(m)
        };
        pinned().map_or_else(|| SweepMode::Preset(name.to_string()), SweepMode::Pinned)
    }
}

/// `n` modes of `space` spread over each knob's range (deterministic from `seed`), in the
/// space's order.
pub fn sample(space: &ModeSpace, n: usize, seed: u64) -> Vec<SweepMode> {
    let all: Vec<PinnedMode> = space.iter().collect();
    let mut picked = profile::select(&all, Strategy::Stratified(n), seed);
    picked.sort_by_key(|m| all.iter().position(|a| a == m));
    picked.dedup();
    picked.into_iter().map(SweepMode::Pinned).collect()
}

/// `sample:N` as N, `None` for any other `--modes` value; an error for a malformed N.
pub fn sample_count(list: &str) -> Result<Option<usize>, String> {
    match list.strip_prefix("sample:") {
        None => Ok(None),
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err("sample:N takes a positive N".to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ModeSpace {
        ModeSpace {
            cores: (1..=8).collect(),
            cpu_hz: vec![115_200_000, 1_420_800_000, 2_201_600_000],
            gpu_hz: vec![114_750_000, 624_750_000, 1_300_500_000],
            emc_hz: vec![204_000_000, 3_199_000_000],
        }
    }

    #[test]
    fn pinned_names_read_back_exactly_and_presets_stay_names() {
        for m in space().iter() {
            let s = SweepMode::Pinned(m);
            assert_eq!(SweepMode::parse(&s.name()), s, "{}", s.name());
        }
        let m = SweepMode::Pinned(space().get(space().len() - 1).unwrap());
        assert_eq!(m.name(), "8c-2201.6MHz-1300.5MHz-3199MHz");
        let no_emc = PinnedMode {
            emc_hz: 0,
            ..space().get(0).unwrap()
        };
        assert_eq!(
            SweepMode::parse(&SweepMode::Pinned(no_emc).name()),
            SweepMode::Pinned(no_emc)
        );
        for p in [
            "MAXN",
            "MODE_30W_ALL",
            "15W",
            "8c-1MHz-2MHz",
            "2c-1.2345678Hz-1MHz-1MHz",
        ] {
            assert_eq!(SweepMode::parse(p), SweepMode::Preset(p.into()));
        }
    }

    #[test]
    fn a_sample_is_distinct_modes_of_the_space_spread_over_the_knobs() {
        let s = sample(&space(), 6, 7);
        assert_eq!(s.len(), 6);
        let pinned: Vec<PinnedMode> = s
            .iter()
            .map(|m| match m {
                SweepMode::Pinned(p) => *p,
                SweepMode::Preset(_) => panic!("a sample is pinned"),
            })
            .collect();
        assert!(pinned.iter().all(|m| space().contains(m)));
        assert!(pinned.windows(2).all(|w| w[0] != w[1]));
        let gpus: std::collections::BTreeSet<u64> = pinned.iter().map(|m| m.gpu_hz).collect();
        assert!(gpus.len() > 1, "{pinned:?}");
        assert_eq!(s, sample(&space(), 6, 7), "deterministic");
        assert_eq!(sample_count("sample:12"), Ok(Some(12)));
        assert_eq!(sample_count("presets"), Ok(None));
        assert!(sample_count("sample:0").is_err() && sample_count("sample:x").is_err());
    }
}
