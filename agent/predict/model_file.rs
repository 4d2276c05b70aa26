//! The saved pair of models ([`ModelFile`]): its versioned JSON layout, and the errors
//! of saving and loading it.

use super::{Method, Model};
use crate::control::mode::PinnedMode;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Version of saved model files. Version 6 keeps a physics transfer's correction by its
/// residuals at the profiled modes and each profiled mode's share of the expected miss
/// (`correction`, `miss.local`); version 5 wrote a fitted network's layers in f32
/// (`"f32": true`, [`crate::predict::regress::Layer`]), and a physics transfer's per-knob
/// basis and expected miss; version 4 files (every weight in f64, the anchor's left-out
/// error in place of the miss) and version 5 files still read and predict as they did
/// when written (version 4's spreads without the miss): refit them for what version 6
/// keeps. Version 7 writes each mode's CPU clock as `cpu_khz`, the unit of every other
/// JSON output ([`PinnedMode`]); earlier files' `cpu_hz` still reads. Since version 7 a
/// file may name its profile's `source` (without it, `optimize --verify` trusts the
/// workload's name, as it did).
pub const MODEL_VERSION: u32 = 7;

/// The oldest version of model files this jpower reads.
const OLDEST_READABLE: u32 = 4;

/// The fewest profiled modes a fit takes: fewer fit a constant (every mode predicted
/// alike, one point on the front).
pub const FIT_MODES: usize = 3;

/// A saved pair of models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// File layout version ([`MODEL_VERSION`]).
    pub version: u32,
    /// The board's id (`orin-agx@r35`) or model string.
    pub board: String,
    /// The workload the models predict (`resnet18`, ...).
    pub workload: String,
    /// The method that fitted them.
    pub method: Method,
    /// The minibatch-time model.
    pub time: Model,
    /// The power model.
    pub power: Model,
    /// Modes the models were fitted on (they are measured, not predicted).
    pub profiled: Vec<PinnedMode>,
    /// What the profile was of: `simulated WORKLOAD on BOARD`
    /// ([`crate::predict::profile::simulated_source`]) or `recorded`; absent in files
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Model-file errors.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The model file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not JSON of a model file (a missing or extra weight included).
    #[error("{}:{}: not a jpower model file: {source}", path.display(), source.line())]
    Format {
        /// The model file.
        path: std::path::PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The file's layout version is not one this jpower reads.
    #[error("{}: model file version {found}, this jpower reads versions {OLDEST_READABLE} to {MODEL_VERSION}", path.display())]
    Version {
        /// The model file.
        path: std::path::PathBuf,
        /// The version it has, as the file writes it (`none` without one).
        found: String,
    },
    /// The file parses, but its models do not predict its own profiled modes (an edited
    /// or damaged file).
    #[error("{}: damaged: {why}", path.display())]
    Damaged {
        /// The model file.
        path: std::path::PathBuf,
        /// What it predicts.
        why: String,
    },
    /// The models were fitted for another board.
    #[error("{}: the model was fitted for {found}, not {wanted}", path.display())]
    Board {
        /// The model file.
        path: std::path::PathBuf,
        /// The board the file names.
        found: String,
        /// The board asked for.
        wanted: String,
    },
}

impl ModelFile {
    /// Writes the file (JSON).
    pub fn save(&self, path: &Path) -> Result<(), ModelFileError> {
        let text = serde_json::to_vec(self).map_err(|source| ModelFileError::Format {
            path: path.into(),
            source,
        })?;
        std::fs::write(path, text).map_err(|source| ModelFileError::Io {
            path: path.into(),
            source,
        })
    }

    /// Reads a file and checks its version (from 4, the oldest readable, to [`MODEL_VERSION`])
    /// and, if given, its board.
    pub fn load(path: &Path, board: Option<&str>) -> Result<ModelFile, ModelFileError> {
        let text = std::fs::read(path).map_err(|source| ModelFileError::Io {
            path: path.into(),
            source,
        })?;
        ModelFile::parse(&text, path, board)
    }

    /// Parses the bytes of a model file read from `path` (which errors name), checking its
    /// version and, if given, its board.
    pub fn parse(
        text: &[u8],
        path: &Path,
        board: Option<&str>,
    ) -> Result<ModelFile, ModelFileError> {
        let probe: serde_json::Value =
            serde_json::from_slice(text).map_err(|source| ModelFileError::Format {
                path: path.into(),
                source,
            })?;
        let version = &probe["version"];
        if !version
            .as_u64()
            .is_some_and(|v| (u64::from(OLDEST_READABLE)..=u64::from(MODEL_VERSION)).contains(&v))
        {
            return Err(ModelFileError::Version {
                path: path.into(),
                found: match version {
                    serde_json::Value::Null => "none".into(),
                    v => v.to_string(),
                },
            });
        }
        // Parsed again from the text, not from `probe`: the errors then carry the line.
        let f: ModelFile =
            serde_json::from_slice(text).map_err(|source| ModelFileError::Format {
                path: path.into(),
                source,
            })?;

        if let Some(b) = board {
            if f.board != b {
                return Err(ModelFileError::Board {
                    path: path.into(),
                    found: f.board,
                    wanted: b.into(),
                });
            }
        }
        // A model needs its profiled modes: the check below is made at them (a file whose
        // list was emptied predicted NaN W unchecked, a review found).
        if f.profiled.len() < FIT_MODES {
            return Err(ModelFileError::Damaged {
                path: path.into(),
                why: format!(
                    "it lists {} profiled modes; a model is fitted on {FIT_MODES} at least",
                    f.profiled.len()
                ),
            });
        }
        // Values no check of the parts catches (an ensemble member's weight of 1e308, which
        // the members' median hides) show in what the models predict at the modes they were
        // fitted on: a time and a power above 0, each with a spread below itself (or none
        // that bounds it: infinite, as a model without members gives outside its data).
        let (t, p) = super::time_and_power(&f.time, &f.power, &f.profiled);
        let unusable =
            |v: &(f64, f64)| !(v.0.is_finite() && v.0 > 0.0 && (v.1 < v.0 || v.1 == f64::INFINITY));
        if let Some(i) = (0..f.profiled.len()).find(|&i| unusable(&t[i]) || unusable(&p[i])) {
            let m = &f.profiled[i];
            return Err(ModelFileError::Damaged {
                path: path.into(),
                why: format!(
                    "at its profiled mode ({} cores, CPU {} kHz, GPU {} Hz, EMC {} Hz) it predicts {:.4} ± {:.4} ms and {:.4} ± {:.4} W",
                    m.cores,
                    m.cpu_hz / 1000,
                    m.gpu_hz,
                    m.emc_hz,
                    t[i].0,
                    t[i].1,
                    p[i].0,
                    p[i].1
                ),
            });
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::profile::Row;
    use crate::predict::{fit_time_and_power, FitConfig};

    #[test]
    fn model_files_check_version_and_board() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<Row> = (1..30)
            .map(|i| Row {
                mode: PinnedMode {
                    cores: 1 + i % 4,
                    cpu_hz: 1_000_000_000 + i as u64 * 10_000_000,
                    gpu_hz: 300_000_000 + i as u64 * 20_000_000,
                    emc_hz: 2_000_000_000,
                },
                time_ms: 10.0 + i as f64,
                power_w: 5.0 + 0.1 * i as f64,
                time_std_ms: 0.0,
                power_std_w: 0.0,
            })
            .collect();
        let cfg = FitConfig::default();
        let (time, power) = fit_time_and_power(Method::Linear, &rows, None, &cfg).unwrap();
        let f = ModelFile {
            version: MODEL_VERSION,
            board: "orin-agx@r35".into(),
            workload: "x".into(),
            method: Method::Linear,
            time,
            power,
            profiled: rows.iter().map(|r| r.mode).collect(),
            source: Some("recorded".into()),
        };
        let p = dir.path().join("m.json");
        f.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p, Some("orin-agx@r35")).unwrap(), f);
        let e = ModelFile::load(&p, Some("nano@r32"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fitted for orin-agx@r35, not nano@r32"), "{e}");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        // A file whose profiled modes were emptied escaped the check made at them, and
        // predicted NaN W (found by a review).
        let mut emptied = v.clone();
        emptied["profiled"] = serde_json::json!([]);
        std::fs::write(&p, emptied.to_string()).unwrap();
        let e = ModelFile::load(&p, None).unwrap_err().to_string();
        assert!(e.contains("damaged: it lists 0 profiled modes"), "{e}");
        // Version 4 (every weight in f64) still reads; 3 and 8 do not.
        v["version"] = 4.into();
        std::fs::write(&p, v.to_string()).unwrap();
        assert_eq!(ModelFile::load(&p, None).unwrap().time, f.time);
        for old_or_new in [3, 8] {
            v["version"] = old_or_new.into();
            std::fs::write(&p, v.to_string()).unwrap();
            let e = ModelFile::load(&p, None).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "version {old_or_new}, this jpower reads versions 4 to {MODEL_VERSION}"
                )),
                "{e}"
            );
        }
        std::fs::write(&p, "nope").unwrap();
        assert!(ModelFile::load(&p, None)
            .unwrap_err()
            .to_string()
            .contains("not a jpower model file"));
        // Values an edited file may hold that once panicked (bounds out of order, a
        // correction's weights and modes apart) or predicted NaN (a zero scale).
        v["version"] = MODEL_VERSION.into();
        type Edit = fn(&mut serde_json::Value);
        let edits: [(&str, Edit); 3] = [
            ("are not an interval", |t| {
                t["bounds"] = serde_json::json!([10.0, 1.0])
            }),
            ("an input scale of 0", |t| t["scale"]["std"][0] = 0.0.into()),
            ("a correction of 1 weights at 2 modes", |t| {
                t["correction"] = serde_json::json!({"at": [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], "weights": [0.5]})
            }),
        ];
        for (why, edit) in edits {
            let mut bad = v.clone();
            edit(&mut bad["time"]);
            std::fs::write(&p, bad.to_string()).unwrap();
            let e = ModelFile::load(&p, None).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
        // Found by a review: a version that is not a whole number was reported as 0, and
        // values no check of the parts catches loaded, to predict inf or negative watts.
        for (version, found) in [
            (serde_json::json!(7.0), "version 7.0,"),
            (serde_json::json!("7"), "version \"7\","),
            (serde_json::Value::Null, "version none,"),
        ] {
            let mut bad = v.clone();
            bad["version"] = version;
            std::fs::write(&p, bad.to_string()).unwrap();
            let e = ModelFile::load(&p, None).unwrap_err().to_string();
            assert!(e.contains(found), "{found}: {e}");
        }
        v["profiled"] = serde_json::json!(rows.iter().map(|r| r.mode).collect::<Vec<_>>());
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(ModelFile::load(&p, None).is_ok(), "its own modes predict");
        let edits: [(&str, Edit); 2] = [
            ("and -1.0000 ±", |t| {
                t["bounds"] = serde_json::json!([-50.0, -1.0])
            }),
            ("and 0.0000 ±", |t| {
                t["bounds"] = serde_json::json!([0.0, 0.0])
            }),
        ];
        for (unit, edit) in edits {
            let mut bad = v.clone();
            edit(&mut bad["power"]);
            std::fs::write(&p, bad.to_string()).unwrap();
            let e = ModelFile::load(&p, None).unwrap_err().to_string();
            assert!(
                e.contains("damaged: at its profiled mode") && e.contains(unit),
                "{e}"
            );
        }
    }
}
