//! The baselines' pre-training on a reference workload, kept on disk so that another
//! evaluation of the same reference and board need not repeat it (PowerTrain's reference
//! network trains for most of a minute; `jpower powertrain eval` times it apart).
//!
//! An entry is a JSON file `<board>-<method>-<key>.json` under the cache directory
//! (`$XDG_CACHE_HOME/jpower/pretrained`, else `~/.cache/jpower/pretrained`, or where
//! `--cache DIR` says). Its key is a hash of everything the pre-training reads: the model
//! version ([`MODEL_VERSION`]), the method, the training setting and every reference row
//! (mode, time and power, bit for bit), so a different reference, board, seed or effort,
//! or a jpower whose models changed, misses and trains afresh. An entry that does not read
//! back (cut short, edited, another version) is trained again and replaced; entries are
//! written to a temporary file and renamed, so a reader never sees half of one.

use super::{FitConfig, Method, Model, MODEL_VERSION};
use crate::predict::profile::Row;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A directory of pre-trained reference models.
#[derive(Debug, Clone)]
pub struct PretrainCache {
    dir: PathBuf,
}

/// What [`PretrainCache::get_or_train`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The entry was read back.
    Hit,
    /// There was none: trained, and stored.
    Stored,
    /// Trained, but the entry could not be written (why).
    NotStored(String),
    /// The entry did not read back (why): trained again, and replaced.
    Replaced(String),
}

/// One cache file.
#[derive(Serialize, Deserialize)]
struct Entry {
    version: u32,
    key: String,
    board: String,
    method: Method,
    time: Model,
    power: Model,
}

impl PretrainCache {
    /// A cache in `dir` (created when the first entry is written).
    pub fn new(dir: impl Into<PathBuf>) -> PretrainCache {
        PretrainCache { dir: dir.into() }
    }

    /// The default directory: `$XDG_CACHE_HOME/jpower/pretrained`, else
    /// `$HOME/.cache/jpower/pretrained`; `None` without either.
    pub fn default_dir() -> Option<PathBuf> {
        let nonempty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty());
        let base = nonempty("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| nonempty("HOME").map(|h| Path::new(&h).join(".cache")))?;
        Some(base.join("jpower").join("pretrained"))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `method`'s (time, power) models pre-trained on `rows` of board `board` with `fit`:
    /// read from the cache, or trained by `train` and stored.
    pub fn get_or_train<E>(
        &self,
        board: &str,
        method: Method,
        rows: &[Row],
        fit: &FitConfig,
        train: impl FnOnce() -> Result<(Model, Model), E>,
    ) -> Result<((Model, Model), Outcome), E> {
        let key = format!("{:016x}", key(method, rows, fit));
        let path = self.path(board, method, &key);
        let miss = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Entry>(&bytes) {
                Ok(e) if e.version == MODEL_VERSION && e.key == key && e.method == method => {
                    return Ok(((e.time, e.power), Outcome::Hit));
                }
                Ok(e) => Some(format!(
                    "{}: version {}, key {}",
                    path.display(),
                    e.version,
                    e.key
                )),
                Err(err) => Some(format!("{}: {err}", path.display())),
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => Some(format!("{}: {err}", path.display())),
        };
        let (time, power) = train()?;
        let entry = Entry {
            version: MODEL_VERSION,
            key,
            board: board.into(),
            method,
            time,
            power,
        };
        let outcome = match (self.store(&path, &entry), miss) {
            (Err(why), _) => Outcome::NotStored(why),
            (Ok(()), Some(why)) => Outcome::Replaced(why),
            (Ok(()), None) => Outcome::Stored,
        };
        Ok(((entry.time, entry.power), outcome))
    }

    fn path(&self, board: &str, method: Method, key: &str) -> PathBuf {
        let safe: String = board
            .chars()
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
                _ => '_',
            })
            .collect();
        self.dir
            .join(format!("{safe}-{}-{key}.json", method.name()))
    }

    /// Writes `entry` to a temporary file beside `path` and renames it there.
    fn store(&self, path: &Path, entry: &Entry) -> Result<(), String> {
        let fail = |p: &Path, e: &dyn std::fmt::Display| format!("{}: {e}", p.display());
        std::fs::create_dir_all(&self.dir).map_err(|e| fail(&self.dir, &e))?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let bytes = serde_json::to_vec(entry).map_err(|e| fail(path, &e))?;
        std::fs::write(&tmp, bytes).map_err(|e| fail(&tmp, &e))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            fail(path, &e)
        })
    }
}

/// FNV-1a of what pre-training reads ([`crate::support::hash`]).
fn key(method: Method, rows: &[Row], fit: &FitConfig) -> u64 {
    let mut h = crate::support::hash::Fnv64::default();
    let mut eat = |v: u64| {
        h.write(&v.to_le_bytes());
    };
    eat(u64::from(MODEL_VERSION));
    method.name().bytes().for_each(|b| eat(u64::from(b)));
    eat(fit.epochs as u64);
    eat(fit.seed);
    eat(fit.ensemble as u64);
    eat(rows.len() as u64);
    for r in rows {
        let m = r.mode;
        eat(u64::from(m.cores));
        eat(m.cpu_hz);
        eat(m.gpu_hz);
        eat(m.emc_hz);
        eat(r.time_ms.to_bits());
        eat(r.power_w.to_bits());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::{pretrain, Quantity};

    fn rows(scale: f64) -> Vec<Row> {
        (1..=12u32)
            .flat_map(|c| [500u64, 1000, 1500].map(move |g| (c, g)))
            .map(|(c, g)| Row {
                mode: crate::control::mode::PinnedMode {
                    cores: c,
                    cpu_hz: 1_000_000_000,
                    gpu_hz: g * 1_000_000,
                    emc_hz: 2_000_000_000,
                },
                time_ms: scale * (10.0 + 1e4 / g as f64 + 5.0 / f64::from(c)),
                power_w: 5.0 + g as f64 / 100.0 + f64::from(c),
                time_std_ms: 0.0,
                power_std_w: 0.0,
            })
            .collect()
    }

    #[test]
    fn a_second_pretraining_of_the_same_reference_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PretrainCache::new(dir.path().join("pretrained"));
        let fit = FitConfig {
            epochs: 2,
            seed: 1,
            ensemble: 1,
        };
        let trained = std::cell::Cell::new(0);
        let run = |rows: &[Row], fit: &FitConfig| {
            cache.get_or_train("orin-agx@r35", Method::Powertrain, rows, fit, || {
                trained.set(trained.get() + 1);
                let q = |t| pretrain(Method::Powertrain, rows, t, fit);
                Ok::<_, crate::predict::regress::RegressError>((
                    q(Quantity::TimeMs)?,
                    q(Quantity::PowerW)?,
                ))
            })
        };
        let (first, outcome) = run(&rows(1.0), &fit).unwrap();
        assert_eq!(outcome, Outcome::Stored);
        let (again, outcome) = run(&rows(1.0), &fit).unwrap();
        assert_eq!((outcome, &again), (Outcome::Hit, &first));
        // Another reference, or another setting, is another entry.
        assert_eq!(run(&rows(1.1), &fit).unwrap().1, Outcome::Stored);
        let longer = FitConfig { epochs: 3, ..fit };
        assert_eq!(run(&rows(1.0), &longer).unwrap().1, Outcome::Stored);
        assert_eq!(trained.get(), 3);
        // An entry cut short is trained again and replaced.
        let key = format!("{:016x}", key(Method::Powertrain, &rows(1.0), &fit));
        let path = cache.path("orin-agx@r35", Method::Powertrain, &key);
        assert!(path.ends_with(format!("orin-agx_r35-powertrain-{key}.json")));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(
            run(&rows(1.0), &fit).unwrap().1,
            Outcome::Replaced(_)
        ));
        assert_eq!(run(&rows(1.0), &fit).unwrap(), (first, Outcome::Hit));
        assert_eq!(trained.get(), 4);
    }

    #[test]
    fn a_cache_that_cannot_be_written_still_trains() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let cache = PretrainCache::new(&file);
        let fit = FitConfig {
            epochs: 1,
            seed: 1,
            ensemble: 1,
        };
        let (_, outcome) = cache
            .get_or_train("b", Method::Powertrain, &rows(1.0), &fit, || {
                let q = |t| pretrain(Method::Powertrain, &rows(1.0), t, &fit);
                Ok::<_, crate::predict::regress::RegressError>((
                    q(Quantity::TimeMs)?,
                    q(Quantity::PowerW)?,
                ))
            })
            .unwrap();
        assert!(matches!(outcome, Outcome::NotStored(ref why) if why.contains("a-file")));
    }
}
