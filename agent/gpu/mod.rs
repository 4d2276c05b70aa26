//! GPU work: the CUDA kernels of `cuda-kernels/`, the devices that run them and what they
//! measure.
//!
//! ```text
//!  kernels (sources, NVRTC, ptxas check, prebuilt images) ──► cuda (cudarc device)
//!                                                                │ implements
//!  roofline (sweep points, Device + Meter, time and energy fits) ◄┤ roofline::Device
//!  net (the built-in CNN, generic over a Backend) ◄───────────────┘ net::Backend
//!    ▲ ops (launch shapes, bounds checks), reference (CPU kernels: net::Cpu)
//!  peaks (vendor peaks per module), nvml (energy where there are no INA3221 rails)
//! ```
//!
//! CUDA is optional at build and probed at run time: cudarc loads `libcuda` and
//! `libnvrtc` dynamically and panics when one is missing, so [`probe`] checks both before
//! any call. cudarc needs CUDA 11.4 or newer: boards on L4T 32 (JetPack 4, CUDA 10.2:
//! Nano, TX2, Xavier on JetPack 4) cannot run the GPU path, and say so. A simulated board
//! runs the roofline on its GPU model ([`crate::sim::gpu`]) and the training workload on
//! the CPU reference.

pub mod cuda;
pub mod kernels;
pub mod net;
pub mod nvml;
pub mod ops;
pub mod peaks;
pub mod plot;
pub mod reference;
pub mod roofline;

/// GPU errors.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The CUDA driver library could not be loaded.
    #[error("no CUDA driver found (libcuda.so could not be loaded): the GPU path needs an NVIDIA driver with CUDA 11.4 or newer; without one, use --sim BOARD, or --cpu where the command has it (train, profile --live, characterize --live)")]
    NoDriver,
    /// The NVRTC library could not be loaded.
    #[error("no NVRTC library found (libnvrtc.so): install the CUDA toolkit's NVRTC and put its lib directory on LD_LIBRARY_PATH (on a Jetson: LD_LIBRARY_PATH=/usr/local/cuda/lib64)")]
    NoNvrtc,
    /// The board's L4T release (its major number) ships a CUDA older than 11.4.
    #[error("L4T {0} ships CUDA 10.2, and jpower's CUDA layer (cudarc) needs CUDA 11.4 or newer (JetPack 5+): the GPU path cannot run on this board; the CPU reference (--cpu) can")]
    OldJetPack(u32),
    /// No CUDA device at the ordinal asked for, or a kernel module or buffer the GPU was not opened
    /// with.
    #[error("no CUDA device found")]
    NoDevice,
    /// No way to load a kernel module worked; what each way said, and the versions.
    #[error("cannot load cuda-kernels/{file}.cu on sm_{cc} ({versions}): {tried}")]
    Load {
        /// The file's stem in `cuda-kernels/`.
        file: &'static str,
        /// The GPU's compute capability (`90`).
        cc: u32,
        /// The driver's and NVRTC's versions.
        versions: Versions,
        /// Each way tried and its error, `; `-separated.
        tried: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA {what}: {source}")]
    Driver {
        /// What was being done.
        what: String,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// NVRTC could not compile a kernel file.
    #[error("compiling cuda-kernels/{file}.cu for {arch}: {log}")]
    Compile {
        /// The file's stem in `cuda-kernels/`.
        file: &'static str,
        /// The virtual architecture (`compute_87`).
        arch: String,
        /// NVRTC's log.
        log: String,
    },
    /// `ptxas` could not be run or refused the PTX; what went wrong.
    #[error("ptxas: {0}")]
    Ptxas(String),
    /// Buffers of the wrong size for an operation.
    #[error(transparent)]
    Shape(#[from] ops::ShapeError),
    /// Power could not be measured (NVML or the simulated board); why.
    #[error("power: {0}")]
    Power(String),
}

impl GpuError {
    /// Wraps a driver error with what was being done.
    pub fn driver(what: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
        let what = what.into();
        move |source| GpuError::Driver { what, source }
    }
}

/// Checks that the CUDA driver library can be loaded (cudarc panics on the first call
/// otherwise) and that the board's JetPack is new enough (`l4t_major`: the board's L4T
/// release, `None` off a Jetson). NVRTC is checked where a kernel is compiled: a binary
/// with prebuilt kernels runs without it.
pub fn probe(l4t_major: Option<u32>) -> Result<(), GpuError> {
    if let Some(r) = l4t_major.filter(|&r| r < 34) {
        return Err(GpuError::OldJetPack(r));
    }
    // SAFETY: only tries to dlopen the library by its candidate names and closes it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    Ok(())
}

/// The CUDA driver's and NVRTC's versions (`None`: the library is missing), named in every
/// kernel load error and report: a driver older than the NVRTC cannot JIT its PTX.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Versions {
    /// The CUDA version the driver supports, (major, minor).
    pub driver: Option<(i32, i32)>,
    /// NVRTC's version, (major, minor).
    pub nvrtc: Option<(i32, i32)>,
}

impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |v: Option<(i32, i32)>| v.map_or("none".into(), |(a, b)| format!("{a}.{b}"));
        write!(f, "driver CUDA {}, NVRTC {}", v(self.driver), v(self.nvrtc))
    }
}

/// Reads both versions, touching each library only where it can be loaded.
pub fn versions() -> Versions {
    // SAFETY: only tries to dlopen the libraries by their candidate names; each version
    // call writes plain integers through valid pointers.
    unsafe {
        let driver = cudarc::driver::sys::is_culib_present()
            .then(|| {
                let mut v = 0;
                (cudarc::driver::sys::cuDriverGetVersion(&mut v)
                    == cudarc::driver::sys::CUresult::CUDA_SUCCESS)
                    .then_some((v / 1000, v % 1000 / 10))
            })
            .flatten();
        let nvrtc = cudarc::nvrtc::sys::is_culib_present()
            .then(|| {
                let (mut a, mut b) = (0, 0);
                (cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b)
                    == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS)
                    .then_some((a, b))
            })
            .flatten();
        Versions { driver, nvrtc }
    }
}

/// Checks that NVRTC can be loaded (compiling kernels needs no driver).
pub fn nvrtc_present() -> Result<(), GpuError> {
    // SAFETY: as in `probe`.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(GpuError::NoNvrtc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jetpack_4_is_refused_before_any_library_is_touched() {
        let e = probe(Some(32)).unwrap_err();
        assert!(matches!(e, GpuError::OldJetPack(32)));
        assert!(e.to_string().contains("CUDA 10.2"));
    }
}
