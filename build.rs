//! Build script: compiles `cuda-kernels/*.cu` into fatbins in `OUT_DIR` when `nvcc` is
//! found (exact SASS for the Jetson architectures sm_53, sm_72, sm_87, for the build
//! host's GPU given as `CUDA_COMPUTE_CAP=90`, and PTX of the newest for the JIT), and sets
//! `cfg(jpower_prebuilt)`. Without nvcc (or with `JPOWER_NO_NVCC=1`) it does nothing: the
//! binary embeds the sources and compiles them with the board's NVRTC at run time, so it
//! always builds, on a machine without CUDA too. Tegra has no SASS compatibility across
//! minor versions, hence exact architectures.
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCES: [&str; 2] = ["roofline", "train"];
const JETSON: [u32; 3] = [53, 72, 87];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(jpower_prebuilt)");
    println!("cargo:rerun-if-changed=cuda-kernels");
    for var in ["NVCC", "JPOWER_NO_NVCC", "CUDA_COMPUTE_CAP"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if std::env::var_os("JPOWER_NO_NVCC").is_some() {
        return;
    }
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let Some(supported) = supported_archs(&nvcc) else {
        return;
    };
    let mut archs: Vec<u32> = JETSON.to_vec();
    if let Some(cc) = std::env::var("CUDA_COMPUTE_CAP")
        .ok()
        .and_then(|s| s.trim().replace('.', "").parse().ok())
    {
        archs.push(cc);
    }
    archs.retain(|a| supported.contains(a));
    archs.sort_unstable();
    archs.dedup();
    let Some(&newest) = archs.last() else {
        println!("cargo:warning=nvcc supports none of sm_53/72/87: kernels will be compiled at run time by NVRTC");
        return;
    };
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in SOURCES {
        if let Err(e) = fatbin(&nvcc, name, &archs, newest, &out) {
            println!("cargo:warning={e}; kernels will be compiled at run time by NVRTC");
            return;
        }
    }
    println!("cargo:rustc-cfg=jpower_prebuilt");
    let names: Vec<String> = archs.iter().map(u32::to_string).collect();
    println!("cargo:rustc-env=JPOWER_PREBUILT_ARCHS={}", names.join(","));
}

/// The `sm_XX` numbers `nvcc --list-gpu-code` names, or `None` without a working nvcc.
fn supported_archs(nvcc: &str) -> Option<Vec<u32>> {
    let out = Command::new(nvcc).arg("--list-gpu-code").output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|s| s.strip_prefix("sm_")?.parse().ok())
            .collect(),
    )
}

fn fatbin(nvcc: &str, name: &str, archs: &[u32], newest: u32, out: &Path) -> Result<(), String> {
    let mut cmd = Command::new(nvcc);
    cmd.args(["--fatbin", "-O3", "-o"])
        .arg(out.join(format!("{name}.fatbin")))
        .arg(format!("cuda-kernels/{name}.cu"));
    for a in archs {
        cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    cmd.arg(format!(
        "-gencode=arch=compute_{newest},code=compute_{newest}"
    ));
    let o = cmd
        .output()
        .map_err(|e| format!("cannot run {nvcc}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nvcc failed on cuda-kernels/{name}.cu: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}
