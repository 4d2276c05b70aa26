//! The board's identity: the device tree's `model` and `compatible`, the SoC (from
//! `compatible` or the `tegra_fuse` chip id) and the L4T release (`/etc/nv_tegra_release`).

use super::paths;
use super::sysfs::Root;
use super::BoardError;
use serde::Serialize;

/// The Tegra SoC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Soc {
    /// Tegra X1 (Jetson Nano, TX1).
    T210,
    /// Tegra X2, Parker (Jetson TX2).
    T186,
    /// Xavier (Jetson AGX Xavier, Xavier NX).
    T194,
    /// Orin (Jetson AGX Orin, Orin NX, Orin Nano).
    T234,
}

/// Substrings of `compatible`, chip ids of `tegra_fuse`, and each SoC's EMC rates (Hz).
pub(super) const SOCS: &[(Soc, &str, u32, &[u64])] = &[
    (
        Soc::T234,
        "tegra234",
        35,
        &[204000000, 665600000, 2133000000, 3199000000],
    ),
    (
        Soc::T194,
        "tegra194",
        25,
        &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
            1866000000, 2133000000,
        ],
    ),
    (
        Soc::T186,
        "tegra186",
        24,
        &[
            204000000, 408000000, 665600000, 800000000, 1062400000, 1331200000, 1600000000,
            1866000000,
        ],
    ),
    (
        Soc::T210,
        "tegra210",
        33,
        &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
        ],
    ),
];

/// What the board is.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    /// Device-tree model (`NVIDIA Jetson AGX Orin Developer Kit`).
    pub model: String,
    /// Device-tree compatible entries.
    pub compatible: Vec<String>,
    /// The module part number (`p3701-0000`), if the compatible list names one.
    pub module: Option<String>,
    /// The SoC, from `compatible` or the `tegra_fuse` chip id.
    pub soc: Soc,
    /// L4T major release (`36`) and revision (`5.0`), from `/etc/nv_tegra_release`.
    pub l4t_major: Option<u32>,
    /// L4T revision (`5.0`), from `/etc/nv_tegra_release`.
    pub l4t_revision: Option<String>,
}

pub(super) fn identify(root: &Root, warnings: &mut Vec<String>) -> Result<Identity, BoardError> {
    let first = |candidates: &[&str]| {
        candidates
            .iter()
            .find_map(|p| root.read_string(p).ok())
            .unwrap_or_default()
    };
    let model = first(paths::DT_MODEL)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let compatible: Vec<String> = first(paths::DT_COMPATIBLE)
        .lines()
        .map(str::to_string)
        .filter(|s| !s.is_empty())
        .collect();
    let chip_id: Option<u32> = root
        .read_string(paths::TEGRA_CHIP_ID)
        .ok()
        .and_then(|s| s.parse().ok());
    let soc = SOCS
        .iter()
        .find(|(_, name, id, _)| {
            compatible.iter().any(|c| c.contains(name)) || chip_id == Some(*id)
        })
        .map(|s| s.0)
        .ok_or_else(|| {
            let root = root.dir().to_path_buf();
            match compatible.iter().find(|c| c.starts_with("nvidia,tegra")) {
                Some(soc) => BoardError::UnknownSoc {
                    root,
                    soc: soc.clone(),
                },
                None => BoardError::NotJetson { root },
            }
        })?;
    // The module's part number: `nvidia,p3701-0005`, or after the `+` of a carrier and
    // its module (`nvidia,p3509-0000+p3668-0001`: an NX or Nano devkit names its module
    // only there).
    let module = compatible.iter().find_map(|c| {
        let part = c.strip_prefix("nvidia,")?.rsplit('+').next()?;
        (part.starts_with('p') && part.len() >= 10).then(|| part.to_string())
    });
    let release = root.read_string(paths::TEGRA_RELEASE).unwrap_or_default();
    let (l4t_major, l4t_revision) = parse_tegra_release(&release);
    let model = if model.is_empty() {
        let named = format!("Jetson ({soc:?})");
        warnings.push(format!(
            "no device-tree model ({}): the board is named {named:?}, and its state and profiles are kept under that name",
            paths::DT_MODEL[0]
        ));
        named
    } else {
        model
    };
    Ok(Identity {
        model,
        compatible,
        module,
        soc,
        l4t_major,
        l4t_revision,
    })
}

/// `# R36 (release), REVISION: 5.0, ...` -> (36, "5.0").
fn parse_tegra_release(text: &str) -> (Option<u32>, Option<String>) {
    let major = text
        .split_once('R')
        .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok());
    let revision = text
        .split_once("REVISION:")
        .and_then(|(_, r)| r.split(',').next())
        .map(|r| r.trim().to_string());
    (major, revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tegra_release_lines() {
        assert_eq!(
            parse_tegra_release("# R36 (release), REVISION: 5.0, GCID: 1, BOARD: generic"),
            (Some(36), Some("5.0".into()))
        );
        assert_eq!(parse_tegra_release(""), (None, None));
    }

    /// Found by a review: an NX or Nano devkit names its module only after the `+` of its
    /// carrier, so the module was unknown and its EMC maximum and GPU peaks never applied;
    /// and a carrier named alone before the module was taken for the module.
    #[test]
    fn the_module_is_read_after_a_carriers_plus_too() {
        for (compatible, module) in [
            ("nvidia,p3509-0000+p3668-0001\0nvidia,jetson-xavier-nx\0nvidia,tegra194\0", "p3668-0001"),
            ("nvidia,p3737-0000+p3701-0005\0nvidia,p3737-0000\0nvidia,p3701-0005\0nvidia,tegra234\0", "p3701-0005"),
            ("nvidia,p3701-0000\0nvidia,tegra234\0", "p3701-0000"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let dt = dir.path().join("proc/device-tree");
            std::fs::create_dir_all(&dt).unwrap();
            std::fs::write(dt.join("compatible"), compatible).unwrap();
            let mut warnings = Vec::new();
            let id = identify(&Root::host(dir.path()), &mut warnings).unwrap();
            assert_eq!(id.module.as_deref(), Some(module), "{compatible:?}");
            // These trees have no model: named after the SoC, with a warning.
            assert!(id.model.starts_with("Jetson ("), "{}", id.model);
            assert!(warnings[0].contains("no device-tree model"), "{warnings:?}");
        }
    }
}
