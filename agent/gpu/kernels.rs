//! The CUDA sources of `cuda-kernels/`, embedded in the binary; the images `build.rs`
//! prebuilt (nvcc fatbins, or cubins `ptxas` assembled from NVRTC's PTX); compiling the
//! sources with NVRTC at run time (the machine's own, to a CUBIN for the GPU or to PTX);
//! and assembling PTX with `ptxas` to check registers and spills per architecture (what
//! CI does for sm_53, sm_72 and sm_87).

use super::GpuError;
use serde::Serialize;
use std::path::Path;

/// One `.cu` file of `cuda-kernels/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaSource {
    /// Roofline microbenchmarks: intensity sweep, copy, triad.
    Roofline,
    /// The training kernels of the built-in CNN.
    Train,
}

impl CudaSource {
    /// Every source file.
    pub const ALL: [CudaSource; 2] = [CudaSource::Roofline, CudaSource::Train];

    /// The file's stem.
    pub fn name(self) -> &'static str {
        match self {
            CudaSource::Roofline => "roofline",
            CudaSource::Train => "train",
        }
    }

    /// The CUDA C source.
    pub fn code(self) -> &'static str {
        match self {
            CudaSource::Roofline => include_str!("../../cuda-kernels/roofline.cu"),
            CudaSource::Train => include_str!("../../cuda-kernels/train.cu"),
        }
    }

    /// The image `build.rs` prebuilt for a GPU of compute capability `cc`, and how it
    /// will load: a cubin for exactly `sm_<cc>`, else an nvcc fatbin (SASS for `cc` where
    /// the build compiled it, else its PTX through the driver's JIT).
    pub fn prebuilt(self, cc: u32) -> Option<(&'static [u8], Prebuilt)> {
        let of_file = || PREBUILT.iter().filter(|(f, ..)| *f == self.name());
        if let Some((_, _, image)) = of_file().find(|(_, arch, _)| *arch == cc) {
            return Some((image, Prebuilt::Sass));
        }
        of_file()
            .find(|(_, arch, _)| *arch == 0)
            .map(|(_, _, image)| {
                let sass = option_env!("JPOWER_PREBUILT_ARCHS")
                    .unwrap_or_default()
                    .split(',')
                    .any(|a| a.trim().parse() == Ok(cc));
                (
                    *image,
                    if sass {
                        Prebuilt::Sass
                    } else {
                        Prebuilt::PtxJit
                    },
                )
            })
    }

    /// The architectures of this file's prebuilt cubins (none with nvcc fatbins or
    /// without prebuilt kernels).
    pub fn prebuilt_cubins(self) -> Vec<u32> {
        PREBUILT
            .iter()
            .filter(|(f, arch, _)| *f == self.name() && *arch > 0)
            .map(|(_, arch, _)| *arch)
            .collect()
    }
}

/// How a prebuilt image runs on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prebuilt {
    /// It holds SASS for the GPU's exact architecture.
    Sass,
    /// The driver JIT-compiles its PTX.
    PtxJit,
}

// `PREBUILT`: the table `build.rs` wrote (empty when it prebuilt nothing).
include!(concat!(env!("OUT_DIR"), "/prebuilt.rs"));

/// The Jetson GPU architectures: Maxwell (Nano, compile-time check only: its JetPack's
/// CUDA 10.2 cannot run cudarc), Volta (Xavier), Ampere (Orin).
pub const JETSON_ARCHS: [u32; 3] = [53, 72, 87];

/// Compiles `source` with NVRTC to PTX for `compute_<cc>` (the driver JIT-compiles it;
/// only a driver at least as new as the NVRTC takes its PTX version).
pub fn compile(source: CudaSource, cc: u32) -> Result<String, GpuError> {
    let ptx = nvrtc(source, format!("compute_{cc}"), |prog| {
        // SAFETY: `prog` is a live program that compiled without error.
        unsafe { cudarc::nvrtc::result::get_ptx(prog) }
    })?;
    // NUL-terminated C chars: the PTX text.
    let bytes: Vec<u8> = ptx
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The real architectures this NVRTC can compile for (`[75, 80, ..., 90]`): CUDA 13
/// dropped Maxwell, Pascal and Volta, so a newer NVRTC cannot build for every Jetson.
pub fn nvrtc_archs() -> Result<Vec<u32>, GpuError> {
    use cudarc::nvrtc::sys;
    super::nvrtc_present()?;
    let failed = |e: cudarc::nvrtc::result::NvrtcError| GpuError::Compile {
        file: "(none)",
        arch: "(listing architectures)".into(),
        log: e.to_string(),
    };
    let mut n = 0;
    // SAFETY: NVRTC writes the count, then exactly that many ints into a buffer that
    // holds them.
    unsafe {
        sys::nvrtcGetNumSupportedArchs(&mut n)
            .result()
            .map_err(failed)?;
        let mut archs = vec![0i32; n.max(0) as usize];
        sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
            .result()
            .map_err(failed)?;
        Ok(archs.into_iter().map(|a| a.max(0) as u32).collect())
    }
}

/// Compiles `source` with NVRTC to a CUBIN of SASS for `sm_<cc>`: it loads on a GPU of
/// exactly that architecture with no JIT, so a driver older than the NVRTC takes it.
pub fn compile_cubin(source: CudaSource, cc: u32) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::sys;
    nvrtc(source, format!("sm_{cc}"), |prog| {
        let mut size = 0usize;
        // SAFETY: `prog` is a live program compiled for a real architecture; the buffer
        // holds the size NVRTC reported for its CUBIN.
        unsafe {
            sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
            let mut cubin = vec![0u8; size];
            sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()).result()?;
            Ok(cubin)
        }
    })
}

/// Creates, compiles for `arch` (`compute_87` or `sm_90`) and destroys an NVRTC program of
/// `source`, returning what `get` extracts from it.
fn nvrtc<T>(
    source: CudaSource,
    arch: String,
    get: impl FnOnce(cudarc::nvrtc::sys::nvrtcProgram) -> Result<T, cudarc::nvrtc::result::NvrtcError>,
) -> Result<T, GpuError> {
    use cudarc::nvrtc::result;
    super::nvrtc_present()?;
    let failed = |log: String| GpuError::Compile {
        file: source.name(),
        arch: arch.clone(),
        log,
    };
    let code = std::ffi::CString::new(source.code()).map_err(|e| failed(e.to_string()))?;
    let name = std::ffi::CString::new(format!("{}.cu", source.name()))
        .map_err(|e| failed(e.to_string()))?;
    let prog = result::create_program(&code, Some(&name)).map_err(|e| failed(e.to_string()))?;
    // SAFETY: `prog` was created above from `code` and `name`, which outlive it, and is
    // destroyed exactly once, below, after its last use.
    let got = unsafe {
        match result::compile_program(prog, &[format!("--gpu-architecture={arch}")]) {
            Ok(()) => get(prog).map_err(|e| failed(e.to_string())),
            Err(e) => {
                let log = result::get_program_log(prog).unwrap_or_default();
                let log: Vec<u8> = log
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                let log = String::from_utf8_lossy(&log).trim().to_string();
                Err(failed(if log.is_empty() { e.to_string() } else { log }))
            }
        }
    };
    // SAFETY: as above; the program is not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    got
}

/// What `ptxas -v` reports for one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resources {
    /// The entry function's name.
    pub kernel: String,
    /// Registers per thread.
    pub registers: u32,
    /// Stack frame per thread, bytes.
    pub stack_bytes: u32,
    /// Bytes spilled to local memory (stores).
    pub spill_store_bytes: u32,
    /// Bytes reloaded from spills (loads).
    pub spill_load_bytes: u32,
}

/// Assembles `ptx` for `sm_<cc>` with the `ptxas` at `ptxas` and returns each kernel's
/// resources; an assembler error is an error.
pub fn assemble(ptxas: &Path, ptx: &str, cc: u32) -> Result<Vec<Resources>, GpuError> {
    let dir = std::env::temp_dir().join(format!("jpower-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| GpuError::Ptxas(e.to_string()))?;
    let input = dir.join(format!("sm_{cc}.ptx"));
    std::fs::write(&input, ptx).map_err(|e| GpuError::Ptxas(e.to_string()))?;
    let out = std::process::Command::new(ptxas)
        .arg(format!("-arch=sm_{cc}"))
        .arg("-v")
        .arg("-o")
        .arg(dir.join(format!("sm_{cc}.cubin")))
        .arg(&input)
        .output()
        .map_err(|e| GpuError::Ptxas(format!("cannot run {}: {e}", ptxas.display())));
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        return Err(GpuError::Ptxas(format!("sm_{cc}: {}", log.trim())));
    }
    Ok(parse_ptxas(&log))
}

/// Parses `ptxas -v` output: `Compiling entry function 'k'`, then `N bytes stack frame,
/// N bytes spill stores, N bytes spill loads` and `Used N registers`.
pub fn parse_ptxas(log: &str) -> Vec<Resources> {
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let i = line.find(what)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<Resources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("entry function '").nth(1) {
            out.push(Resources {
                kernel: rest.split('\'').next().unwrap_or_default().to_string(),
                registers: 0,
                stack_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
            });
        } else if let Some(r) = out.last_mut() {
            if let Some(n) = number_before(line, "bytes stack frame") {
                r.stack_bytes = n;
            }
            if let Some(n) = number_before(line, "bytes spill stores") {
                r.spill_store_bytes = n;
            }
            if let Some(n) = number_before(line, "bytes spill loads") {
                r.spill_load_bytes = n;
            }
            if let Some(n) = number_before(line, "registers") {
                r.registers = n;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_output_is_parsed_per_kernel() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'sweep_f32' for 'sm_87'\n\
ptxas info    : Function properties for sweep_f32\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 18 registers, 376 bytes cmem[0]\n\
ptxas info    : Compiling entry function 'gemm_f32' for 'sm_87'\n\
ptxas info    : Function properties for gemm_f32\n\
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 255 registers, 2048 bytes smem, 400 bytes cmem[0]\n";
        let r = parse_ptxas(log);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].kernel.as_str(), r[0].registers), ("sweep_f32", 18));
        assert_eq!(r[0].spill_store_bytes, 0);
        assert_eq!(
            (
                r[1].registers,
                r[1].stack_bytes,
                r[1].spill_store_bytes,
                r[1].spill_load_bytes
            ),
            (255, 8, 4, 12)
        );
    }

    #[test]
    fn every_source_is_embedded_and_names_its_kernels() {
        for s in CudaSource::ALL {
            assert!(s.code().contains("extern \"C\""), "{}", s.name());
        }
        for k in ["sweep_f32", "sweep_f16x2", "copy_f32", "triad_f32"] {
            assert!(CudaSource::Roofline.code().contains(k), "{k}");
        }
    }
}
