//! Build script: prebuilds `cuda-kernels/*.cu` into `OUT_DIR/prebuilt.rs`, a table of
//! images the binary embeds (`agent/gpu/kernels.rs` includes it), the first way that works:
//!
//! 1. `nvcc` found: one fatbin per file with exact SASS for the Jetson architectures
//!    sm_53, sm_72, sm_87 and the build host's GPU given as `CUDA_COMPUTE_CAP=90`, plus
//!    PTX of the newest for the JIT;
//! 2. else NVRTC loadable and `ptxas` found (`PTXAS`, else on `PATH`: NVIDIA's wheels give
//!    both, which is what CI has): NVRTC's PTX of each file for compute_53/72/87/90, each
//!    assembled by `ptxas` into a cubin for its exact architecture;
//! 3. else nothing: the table is empty and the binary compiles the embedded sources with
//!    the machine's NVRTC at run time, so it always builds, without CUDA too.
//!
//! `JPOWER_NO_NVCC=1` skips the first way, `JPOWER_NO_PREBUILT=1` all of them. Tegra has
//! no SASS compatibility across minor versions, hence exact architectures.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCES: [&str; 2] = ["roofline", "train"];
const JETSON: [u32; 3] = [53, 72, 87];
/// The architectures `ptxas` assembles cubins for: the Jetsons and Hopper.
const CUBIN_ARCHS: [u32; 4] = [53, 72, 87, 90];

fn main() {
    println!("cargo:rerun-if-changed=cuda-kernels");
    for var in [
        "NVCC",
        "PTXAS",
        "PATH",
        "LD_LIBRARY_PATH",
        "JPOWER_NO_NVCC",
        "JPOWER_NO_PREBUILT",
        "CUDA_COMPUTE_CAP",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let images = if std::env::var_os("JPOWER_NO_PREBUILT").is_some() {
        Vec::new()
    } else {
        nvcc_fatbins(&out).unwrap_or_else(|| ptxas_cubins(&out))
    };
    // (file, architecture of its SASS or 0 for a fatbin, path), as Rust.
    let mut table = String::from(
        "/// Prebuilt kernel images: (file stem, the architecture of a cubin's SASS or 0 for\n\
         /// a fatbin, the image).\n\
         pub static PREBUILT: &[(&str, u32, &[u8])] = &[\n",
    );
    for (file, arch, path) in &images {
        let _ = writeln!(table, "    ({file:?}, {arch}, include_bytes!({path:?})),");
    }
    table.push_str("];\n");
    std::fs::write(out.join("prebuilt.rs"), table).expect("writing OUT_DIR/prebuilt.rs");
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

/// The nvcc fatbins and the architectures whose SASS they hold, or `None` without nvcc.
fn nvcc_fatbins(out: &Path) -> Option<Vec<(String, u32, String)>> {
    if std::env::var_os("JPOWER_NO_NVCC").is_some() {
        return None;
    }
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let supported = supported_archs(&nvcc)?;
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
        println!("cargo:warning=nvcc supports none of sm_53/72/87: no fatbins");
        return None;
    };
    let mut images = Vec::new();
    for name in SOURCES {
        let path = out.join(format!("{name}.fatbin"));
        if let Err(e) = fatbin(&nvcc, name, &archs, newest, &path) {
            println!("cargo:warning={e}; no fatbins");
            return None;
        }
        images.push((name.to_string(), 0, path.display().to_string()));
    }
    let names: Vec<String> = archs.iter().map(u32::to_string).collect();
    println!("cargo:rustc-env=JPOWER_PREBUILT_ARCHS={}", names.join(","));
    Some(images)
}

fn fatbin(nvcc: &str, name: &str, archs: &[u32], newest: u32, out: &Path) -> Result<(), String> {
    let mut cmd = Command::new(nvcc);
    cmd.args(["--fatbin", "-O3", "-o"])
        .arg(out)
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

/// Cubins assembled by `ptxas` from NVRTC's PTX, for each architecture both support;
/// none without either tool (or on any failure, said as a warning).
fn ptxas_cubins(out: &Path) -> Vec<(String, u32, String)> {
    let ptxas = std::env::var_os("PTXAS").map(PathBuf::from).or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("ptxas"))
            .find(|p| p.is_file())
    });
    // SAFETY: only tries to dlopen the library by its candidate names.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let Some(ptxas) = ptxas.filter(|_| nvrtc) else {
        return Vec::new();
    };
    let mut images = Vec::new();
    for name in SOURCES {
        let path = format!("cuda-kernels/{name}.cu");
        let code = std::fs::read_to_string(&path).expect("reading a kernel source");
        for cc in CUBIN_ARCHS {
            let opts = cudarc::nvrtc::CompileOptions {
                options: vec![format!("--gpu-architecture=compute_{cc}")],
                name: Some(format!("{name}.cu")),
                ..Default::default()
            };
            // An NVRTC that dropped this architecture (CUDA 13: Maxwell, Volta) skips it.
            let Ok(ptx) = cudarc::nvrtc::compile_ptx_with_opts(&code, opts) else {
                continue;
            };
            let ptx_path = out.join(format!("{name}.compute_{cc}.ptx"));
            let cubin = out.join(format!("{name}.sm_{cc}.cubin"));
            std::fs::write(&ptx_path, ptx.to_src()).expect("writing PTX into OUT_DIR");
            let assembled = Command::new(&ptxas)
                .arg(format!("-arch=sm_{cc}"))
                .arg("-o")
                .arg(&cubin)
                .arg(&ptx_path)
                .output();
            match assembled {
                Ok(o) if o.status.success() => {
                    images.push((name.to_string(), cc, cubin.display().to_string()))
                }
                Ok(o) => println!(
                    "cargo:warning=ptxas sm_{cc} refused {path}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => println!("cargo:warning=cannot run {}: {e}", ptxas.display()),
            }
        }
    }
    images
}
