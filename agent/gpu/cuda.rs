//! A CUDA GPU through cudarc: the context and stream, the kernel modules loaded once (the
//! build's prebuilt image when it has one for this GPU, else the embedded sources compiled
//! by this machine's NVRTC to a CUBIN, else to PTX), the roofline sweep timed with CUDA
//! events, and the training backend of [`super::net`].
//!
//! Every launch is `unsafe` (cudarc cannot check a kernel's parameter list): each one says
//! why its arguments match the kernel's signature in `cuda-kernels/` and stay in bounds.

use super::kernels::{CudaSource, Prebuilt};
use super::net::Backend;
use super::ops::{Bias, Conv, Gemm, Launch, Pool2, Relu, Sgd, Softmax, Stream, Sweep};
use super::roofline::{Device, Kernel, Point, Run};
use super::GpuError;
use crate::support::clock::monotonic_ns;
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;
use std::time::Instant;

/// FMA constants of the sweep (public so the GPU tests can run the reference with them): |a| < 1 keeps the chains bounded; both are exact in FP16
/// (a = 0.99951171875 = 0x3BFF, b = 2^-10 = 0x1400), so FP32 and FP16 chains agree.
pub const SWEEP_A: f32 = 1.0 - 1.0 / 2048.0;
/// The sweep's additive constant, b = 2^-10 (`0x1400` in FP16).
pub const SWEEP_B: f32 = 1.0 / 1024.0;
/// [`SWEEP_A`] in FP16, twice: both halves of a `half2`.
pub const SWEEP_A_H2: u32 = 0x3BFF_3BFF;
/// [`SWEEP_B`] in FP16, twice: both halves of a `half2`.
pub const SWEEP_B_H2: u32 = 0x1400_1400;

/// Reads a GPU's running clock, Hz (`None`: not readable now).
pub type ClockReader = Box<dyn Fn() -> Option<f64>>;

/// An open GPU.
pub struct Cuda {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    modules: Vec<(CudaSource, Arc<CudaModule>, LoadPath)>,
    /// The compute capability (`90`).
    cc: u32,
    /// Sweep buffers (x, y, z) of `elements` floats, allocated at the first run.
    sweep: Option<[CudaSlice<f32>; 3]>,
    /// Reads the running GPU clock, Hz, while the sweep runs: a Jetson's devfreq
    /// `cur_freq` or NVML's SM clock (CUDA's clock attribute is the maximum).
    clock: Option<ClockReader>,
}

impl Cuda {
    /// Opens GPU `ordinal` after probing the libraries (`l4t_major`: the board's L4T
    /// release, refused below JetPack 5), and loads every kernel module.
    pub fn open(ordinal: usize, l4t_major: Option<u32>) -> Result<Cuda, GpuError> {
        super::probe(l4t_major)?;
        let count = CudaContext::device_count().map_err(GpuError::driver("device count"))?;
        if count < 1 || ordinal >= count as usize {
            return Err(GpuError::NoDevice);
        }
        let ctx = CudaContext::new(ordinal).map_err(GpuError::driver("context"))?;
        let stream = ctx.default_stream();
        let (major, minor) = ctx
            .compute_capability()
            .map_err(GpuError::driver("compute capability"))?;
        let cc = (major * 10 + minor) as u32;
        let modules = CudaSource::ALL
            .iter()
            .map(|&s| load(&ctx, s, cc).map(|(m, path)| (s, m, path)))
            .collect::<Result<_, GpuError>>()?;
        Ok(Cuda {
            ctx,
            stream,
            modules,
            cc,
            sweep: None,
            clock: None,
        })
    }

    /// Reads the running GPU clock with `read` during each sweep point.
    pub fn watch_clock(&mut self, read: ClockReader) {
        self.clock = Some(read);
    }

    /// The compute capability (`90`).
    pub fn compute_capability(&self) -> u32 {
        self.cc
    }

    /// The number of streaming multiprocessors.
    pub fn sm_count(&self) -> Result<u32, GpuError> {
        self.ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|n| n.max(0) as u32)
            .map_err(GpuError::driver("SM count"))
    }

    /// How each kernel module was loaded.
    pub fn load_paths(&self) -> Vec<(&'static str, LoadPath)> {
        self.modules
            .iter()
            .map(|(s, _, path)| (s.name(), *path))
            .collect()
    }

    /// The device's PCI bus id (`0000:19:00.0`), to find the same GPU in NVML.
    pub fn pci_bus_id(&self) -> Result<String, GpuError> {
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer's length is passed with it; the driver writes a
        // NUL-terminated string of at most that many bytes for a valid device handle.
        let r = unsafe {
            cudarc::driver::sys::cuDeviceGetPCIBusId(
                buf.as_mut_ptr(),
                buf.len() as i32,
                self.ctx.cu_device(),
            )
        };
        r.result().map_err(GpuError::driver("PCI bus id"))?;
        // SAFETY: NUL-terminated by the driver, inside `buf`.
        let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Ok(id.to_string_lossy().into_owned())
    }

    /// The stream every launch goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Kernel `name` of `source`.
    pub fn function(&self, source: CudaSource, name: &str) -> Result<CudaFunction, GpuError> {
        let (_, m, _) = self
            .modules
            .iter()
            .find(|(s, ..)| *s == source)
            .ok_or(GpuError::NoDevice)?;
        m.load_function(name)
            .map_err(GpuError::driver(format!("kernel {name}")))
    }

    /// One launch of `point` on fresh buffers: (its input, its output), for comparing
    /// with [`super::reference`] (the GPU tests and `scripts/gpu-check.sh`).
    pub fn sweep_once(&mut self, point: &Point) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
        self.sweep = None;
        self.sweep_buffers(point.elements)?;
        let f = self.function(CudaSource::Roofline, point.kernel.symbol())?;
        self.launch_point(&f, point)?;
        let [x, y, _] = self.sweep.as_ref().ok_or(GpuError::NoDevice)?;
        let download = |b| {
            self.stream
                .clone_dtoh(b)
                .map_err(GpuError::driver("download"))
        };
        Ok((download(x)?, download(y)?))
    }

    fn sweep_buffers(&mut self, elements: u64) -> Result<(), GpuError> {
        if self
            .sweep
            .as_ref()
            .is_some_and(|b| b[0].len() as u64 == elements)
        {
            return Ok(());
        }
        self.sweep = None;
        let init: Vec<f32> = (0..elements).map(|i| (i % 1024) as f32 / 1024.0).collect();
        let x = self
            .stream
            .clone_htod(&init)
            .map_err(GpuError::driver("upload"))?;
        let y = self
            .stream
            .alloc_zeros::<f32>(elements as usize)
            .map_err(GpuError::driver("alloc"))?;
        let z = self
            .stream
            .clone_htod(&init)
            .map_err(GpuError::driver("upload"))?;
        self.sweep = Some([x, y, z]);
        Ok(())
    }

    fn launch_point(&mut self, f: &CudaFunction, point: &Point) -> Result<(), GpuError> {
        let n = point.elements;
        let n4 = n / 4;
        let [x, y, z] = self.sweep.as_mut().ok_or(GpuError::NoDevice)?;
        let mut b = self.stream.launch_builder(f);
        let launch = match point.kernel {
            Kernel::SweepF32 | Kernel::SweepF16x2 => {
                let d = Sweep {
                    n: n as usize,
                    iters: point.iters,
                };
                d.check(x.len(), y.len())?;
                b.arg(&*x).arg(&mut *y).arg(&n).arg(&point.iters);
                if point.kernel == Kernel::SweepF32 {
                    b.arg(&SWEEP_A).arg(&SWEEP_B);
                } else {
                    b.arg(&SWEEP_A_H2).arg(&SWEEP_B_H2);
                }
                d.launch()
            }
            Kernel::Copy => {
                let d = Stream { n4: n4 as usize };
                d.check(&[("a", x.len()), ("b", y.len())])?;
                b.arg(&*x).arg(&mut *y).arg(&n4);
                d.launch()
            }
            Kernel::Triad => {
                let d = Stream { n4: n4 as usize };
                d.check(&[("a", y.len()), ("b", x.len()), ("c", z.len())])?;
                b.arg(&mut *y).arg(&*x).arg(&*z).arg(&SWEEP_A).arg(&n4);
                d.launch()
            }
        };
        // SAFETY: the arguments follow each kernel's signature in cuda-kernels/roofline.cu
        // (pointers, then u64 n, u32 iters, f32/u32 constants; whole allocations, so 16-byte
        // aligned for the float4 kernels); the descriptor's check proved every buffer holds
        // the n floats (n half2 words, n4 float4s) the grid-stride loop indexes.
        unsafe { b.launch(config(launch)) }
            .map_err(GpuError::driver(format!("launch {}", point.label())))?;
        Ok(())
    }
}

/// How a kernel module reached the GPU, most direct first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadPath {
    /// The build's cubin or fatbin, holding SASS for this exact architecture.
    PrebuiltSass,
    /// The build's fatbin, its PTX compiled by the driver's JIT.
    PrebuiltPtxJit,
    /// NVRTC's CUBIN for this exact architecture.
    NvrtcCubin,
    /// NVRTC's PTX, compiled by the driver's JIT.
    NvrtcPtx,
}

/// Names the ways kernel modules may load, in order, comma-separated (`prebuilt`,
/// `cubin`, `ptx`; default all three): `ptx` alone proves the JIT path on a GPU that would
/// take a CUBIN, `cubin,ptx` loads as a binary built without prebuilt kernels would.
pub const KERNEL_LOAD_ENV: &str = "JPOWER_KERNEL_LOAD";

/// Loads `source` for a GPU of compute capability `cc`, trying in turn (as far as
/// [`KERNEL_LOAD_ENV`] allows) the build's prebuilt image, NVRTC's CUBIN for `sm_<cc>` (no JIT,
/// so a driver older than the NVRTC takes it), and NVRTC's PTX. The error names every
/// way tried, with the driver's and NVRTC's versions.
fn load(
    ctx: &Arc<CudaContext>,
    source: CudaSource,
    cc: u32,
) -> Result<(Arc<CudaModule>, LoadPath), GpuError> {
    use cudarc::nvrtc::Ptx;
    let allowed = std::env::var(KERNEL_LOAD_ENV).unwrap_or_else(|_| "prebuilt,cubin,ptx".into());
    let allowed: Vec<&str> = allowed.split(',').map(str::trim).collect();
    // Loads what NVRTC compiled, or says what failed (`what`: the way, for the error).
    let compiled = |image: Result<Ptx, GpuError>, path: LoadPath, what: String| {
        image
            .map_err(|e| e.to_string())
            .and_then(|image| ctx.load_module(image).map_err(|e| e.to_string()))
            .map(|m| (m, path))
            .map_err(|e| format!("{what}: {e}"))
    };
    let mut tried = Vec::new();
    for way in &allowed {
        let loaded = match *way {
            "prebuilt" => match source.prebuilt(cc) {
                Some((image, how)) => ctx
                    .load_module(Ptx::from_binary(image.to_vec()))
                    .map_err(|e| format!("prebuilt image: {e}"))
                    .map(|m| match how {
                        Prebuilt::Sass => (m, LoadPath::PrebuiltSass),
                        Prebuilt::PtxJit => (m, LoadPath::PrebuiltPtxJit),
                    }),
                None => Err(format!("no prebuilt image for sm_{cc} in this build")),
            },
            "cubin" => compiled(
                super::kernels::compile_cubin(source, cc).map(Ptx::from_binary),
                LoadPath::NvrtcCubin,
                format!("NVRTC CUBIN for sm_{cc}"),
            ),
            "ptx" => compiled(
                super::kernels::compile(source, cc).map(Ptx::from_src),
                LoadPath::NvrtcPtx,
                format!("NVRTC PTX for compute_{cc}"),
            ),
            other => Err(format!(
                "{KERNEL_LOAD_ENV} names `{other}`: the ways are prebuilt, cubin and ptx"
            )),
        };
        match loaded {
            Ok(found) => return Ok(found),
            Err(e) => tried.push(e),
        }
    }
    Err(GpuError::Load {
        file: source.name(),
        cc,
        versions: super::versions(),
        tried: tried.join("; "),
    })
}

impl Device for Cuda {
    fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "CUDA GPU".into())
    }

    fn simulated(&self) -> bool {
        false
    }

    fn prepare(&mut self, point: &Point) -> Result<(), GpuError> {
        self.sweep_buffers(point.elements)?;
        let f = self.function(CudaSource::Roofline, point.kernel.symbol())?;
        self.launch_point(&f, point)?;
        self.stream
            .synchronize()
            .map_err(GpuError::driver("warm-up"))
    }

    fn run(&mut self, point: &Point, min_s: f64) -> Result<Run, GpuError> {
        self.sweep_buffers(point.elements)?;
        let f = self.function(CudaSource::Roofline, point.kernel.symbol())?;
        let event = |what| {
            self.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(GpuError::driver(what))
        };
        let (e0, e1) = (event("event")?, event("event")?);
        let start = Instant::now();
        let start_ns = monotonic_ns();
        // Single launches, each on an idle GPU: they include the launch latency.
        let mut single_s = f64::INFINITY;
        for _ in 0..3 {
            e0.record(&self.stream)
                .map_err(GpuError::driver("record"))?;
            self.launch_point(&f, point)?;
            e1.record(&self.stream)
                .map_err(GpuError::driver("record"))?;
            let ms = e0.elapsed_ms(&e1).map_err(GpuError::driver("event time"))?;
            single_s = single_s.min(f64::from(ms) * 1e-3);
        }
        // Batches of back-to-back launches lasting at least BATCH_S between one event
        // pair: the GPU never waits for the host, so short kernels time what they cost.
        let per_batch = (BATCH_S / single_s.max(1e-7)).ceil().clamp(1.0, 1e6) as u32;
        let (mut launches, mut batches, mut best_s) = (3u32, 0u32, f64::INFINITY);
        let (mut clock_sum, mut clock_reads) = (0.0, 0u32);
        while batches < 3 || start.elapsed().as_secs_f64() < min_s {
            e0.record(&self.stream)
                .map_err(GpuError::driver("record"))?;
            for _ in 0..per_batch {
                self.launch_point(&f, point)?;
            }
            e1.record(&self.stream)
                .map_err(GpuError::driver("record"))?;
            // The clock while the batch runs (the GPU is busy until the event).
            if let Some(hz) = self.clock.as_ref().and_then(|read| read()) {
                clock_sum += hz;
                clock_reads += 1;
            }
            let ms = e0.elapsed_ms(&e1).map_err(GpuError::driver("event time"))?;
            best_s = best_s.min(f64::from(ms) * 1e-3 / f64::from(per_batch));
            launches += per_batch;
            batches += 1;
        }
        let end_ns = monotonic_ns();
        // The mean of the reads; without a clock source, the SM clock attribute (kHz):
        // the boost clock, an upper bound of the running one.
        let clock_hz = (clock_reads > 0)
            .then(|| clock_sum / f64::from(clock_reads))
            .or_else(|| {
                self.ctx
                    .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
                    .ok()
                    .map(|khz| f64::from(khz) * 1e3)
            });
        Ok(Run {
            launches,
            best_s,
            single_s,
            start_ns,
            end_ns,
            clock_hz,
        })
    }
}

/// The shortest span of one timed batch of back-to-back launches, seconds.
const BATCH_S: f64 = 2e-3;

/// The training kernels of `cuda-kernels/train.cu`, looked up once.
struct TrainKernels {
    gemm: CudaFunction,
    add_bias: CudaFunction,
    bias_grad: CudaFunction,
    relu_fwd: CudaFunction,
    relu_bwd: CudaFunction,
    im2col: CudaFunction,
    col2im: CudaFunction,
    pool_fwd: CudaFunction,
    pool_bwd: CudaFunction,
    softmax_xent: CudaFunction,
    sgd: CudaFunction,
}

/// The CUDA backend of [`super::net::Net`]: every method checks its descriptor, then
/// launches the matching kernel of `train.cu` with the descriptor's grid.
pub struct CudaTrain {
    stream: Arc<CudaStream>,
    k: TrainKernels,
}

impl Cuda {
    /// The training backend on this GPU.
    pub fn train_backend(&self) -> Result<CudaTrain, GpuError> {
        let f = |name: &str| self.function(CudaSource::Train, name);
        Ok(CudaTrain {
            stream: self.stream.clone(),
            k: TrainKernels {
                gemm: f("gemm_f32")?,
                add_bias: f("add_bias_f32")?,
                bias_grad: f("bias_grad_f32")?,
                relu_fwd: f("relu_fwd_f32")?,
                relu_bwd: f("relu_bwd_f32")?,
                im2col: f("im2col_f32")?,
                col2im: f("col2im_f32")?,
                pool_fwd: f("maxpool2_fwd_f32")?,
                pool_bwd: f("maxpool2_bwd_f32")?,
                softmax_xent: f("softmax_xent_f32")?,
                sgd: f("sgd_momentum_f32")?,
            },
        })
    }
}

fn config(l: Launch) -> LaunchConfig {
    LaunchConfig {
        grid_dim: l.grid,
        block_dim: l.block,
        shared_mem_bytes: l.shared_bytes,
    }
}

/// A checked size as the kernels' `int` (the descriptors' checks bound every size by
/// `i32::MAX`).
fn int(v: usize) -> i32 {
    v as i32
}

impl CudaTrain {
    fn launch(&self, b: &mut cudarc::driver::LaunchArgs<'_>, l: Launch) -> Result<(), GpuError> {
        // SAFETY: every caller pushed the arguments of its kernel's signature in
        // cuda-kernels/train.cu, in order and with its C types (pointers, `int`, `float`),
        // after the descriptor's `check` proved each buffer (or the sub-range passed) holds
        // every element the kernel indexes for that descriptor, and `l` is that
        // descriptor's own launch shape, which the kernel's bounds checks assume.
        unsafe { b.launch(config(l)) }
            .map(|_| ())
            .map_err(GpuError::driver("training kernel launch"))
    }
}

impl Backend for CudaTrain {
    type F = CudaSlice<f32>;
    type I = CudaSlice<i32>;
    type Error = GpuError;

    fn upload(&self, data: &[f32]) -> Result<Self::F, GpuError> {
        self.stream
            .clone_htod(data)
            .map_err(GpuError::driver("upload"))
    }

    fn upload_i(&self, data: &[i32]) -> Result<Self::I, GpuError> {
        self.stream
            .clone_htod(data)
            .map_err(GpuError::driver("upload"))
    }

    fn zeros(&self, n: usize) -> Result<Self::F, GpuError> {
        self.stream
            .alloc_zeros(n)
            .map_err(GpuError::driver("alloc"))
    }

    fn zeros_i(&self, n: usize) -> Result<Self::I, GpuError> {
        self.stream
            .alloc_zeros(n)
            .map_err(GpuError::driver("alloc"))
    }

    fn download(&self, buf: &Self::F) -> Result<Vec<f32>, GpuError> {
        self.stream
            .clone_dtoh(buf)
            .map_err(GpuError::driver("download"))
    }

    fn fill_zero(&self, buf: &mut Self::F) -> Result<(), GpuError> {
        self.stream
            .memset_zeros(buf)
            .map_err(GpuError::driver("memset"))
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        self.stream
            .synchronize()
            .map_err(GpuError::driver("synchronize"))
    }

    fn gemm(
        &self,
        d: &Gemm,
        alpha: f32,
        a: &Self::F,
        b: &Self::F,
        beta: f32,
        c: &mut Self::F,
    ) -> Result<(), GpuError> {
        let [ra, rb, rc] = d.check(a.len(), b.len(), c.len())?;
        let (a, b, mut c) = (a.slice(ra), b.slice(rb), c.slice_mut(rc));
        let (ta, tb) = (i32::from(d.trans_a), i32::from(d.trans_b));
        let (m, n, k) = (int(d.m), int(d.n), int(d.k));
        let mut l = self.stream.launch_builder(&self.k.gemm);
        l.arg(&ta).arg(&tb).arg(&m).arg(&n).arg(&k).arg(&alpha);
        l.arg(&a).arg(&b).arg(&beta).arg(&mut c);
        self.launch(&mut l, d.launch())
    }

    fn add_bias(&self, d: &Bias, y: &mut Self::F, bias: &Self::F) -> Result<(), GpuError> {
        d.check(y.len(), bias.len())?;
        let (n, c, hw) = (int(d.n), int(d.c), int(d.hw));
        let mut l = self.stream.launch_builder(&self.k.add_bias);
        l.arg(y).arg(bias).arg(&n).arg(&c).arg(&hw);
        self.launch(&mut l, d.launch_add())
    }

    fn bias_grad(&self, d: &Bias, dy: &Self::F, db: &mut Self::F) -> Result<(), GpuError> {
        d.check(dy.len(), db.len())?;
        let (n, c, hw) = (int(d.n), int(d.c), int(d.hw));
        let mut l = self.stream.launch_builder(&self.k.bias_grad);
        l.arg(dy).arg(db).arg(&n).arg(&c).arg(&hw);
        self.launch(&mut l, d.launch_grad())
    }

    fn relu_fwd(&self, d: &Relu, x: &Self::F, y: &mut Self::F) -> Result<(), GpuError> {
        d.check(&[("x", x.len()), ("y", y.len())])?;
        let n = int(d.n);
        let mut l = self.stream.launch_builder(&self.k.relu_fwd);
        l.arg(x).arg(y).arg(&n);
        self.launch(&mut l, d.launch())
    }

    fn relu_bwd(
        &self,
        d: &Relu,
        x: &Self::F,
        dy: &Self::F,
        dx: &mut Self::F,
    ) -> Result<(), GpuError> {
        d.check(&[("x", x.len()), ("dy", dy.len()), ("dx", dx.len())])?;
        let n = int(d.n);
        let mut l = self.stream.launch_builder(&self.k.relu_bwd);
        l.arg(x).arg(dy).arg(dx).arg(&n);
        self.launch(&mut l, d.launch())
    }

    fn im2col(
        &self,
        d: &Conv,
        image: usize,
        x: &Self::F,
        col: &mut Self::F,
    ) -> Result<(), GpuError> {
        let (rx, rc) = d.check(image, x.len(), col.len())?;
        let (x, mut col) = (x.slice(rx), col.slice_mut(rc));
        let dims = conv_dims(d);
        let mut l = self.stream.launch_builder(&self.k.im2col);
        l.arg(&x).arg(&mut col);
        for v in &dims {
            l.arg(v);
        }
        self.launch(&mut l, d.launch_im2col())
    }

    fn col2im(
        &self,
        d: &Conv,
        image: usize,
        col: &Self::F,
        dx: &mut Self::F,
    ) -> Result<(), GpuError> {
        let (rx, rc) = d.check(image, dx.len(), col.len())?;
        let (col, mut dx) = (col.slice(rc), dx.slice_mut(rx));
        let dims = conv_dims(d);
        let mut l = self.stream.launch_builder(&self.k.col2im);
        l.arg(&col).arg(&mut dx);
        for v in &dims {
            l.arg(v);
        }
        self.launch(&mut l, d.launch_col2im())
    }

    fn maxpool2_fwd(
        &self,
        d: &Pool2,
        x: &Self::F,
        y: &mut Self::F,
        argmax: &mut Self::I,
    ) -> Result<(), GpuError> {
        d.check(x.len(), y.len(), argmax.len())?;
        let (nc, h, w) = (int(d.nc), int(d.h), int(d.w));
        let mut l = self.stream.launch_builder(&self.k.pool_fwd);
        l.arg(x).arg(y).arg(argmax).arg(&nc).arg(&h).arg(&w);
        self.launch(&mut l, d.launch())
    }

    fn maxpool2_bwd(
        &self,
        d: &Pool2,
        dy: &Self::F,
        argmax: &Self::I,
        dx: &mut Self::F,
    ) -> Result<(), GpuError> {
        d.check(dx.len(), dy.len(), argmax.len())?;
        let (nc, h, w) = (int(d.nc), int(d.h), int(d.w));
        let mut l = self.stream.launch_builder(&self.k.pool_bwd);
        l.arg(dy).arg(argmax).arg(dx).arg(&nc).arg(&h).arg(&w);
        self.launch(&mut l, d.launch())
    }

    fn softmax_xent(
        &self,
        d: &Softmax,
        logits: &Self::F,
        labels: &Self::I,
        loss: &mut Self::F,
        dlogits: &mut Self::F,
    ) -> Result<(), GpuError> {
        d.check(logits.len(), labels.len(), loss.len(), dlogits.len())?;
        let (batch, classes) = (int(d.batch), int(d.classes));
        let mut l = self.stream.launch_builder(&self.k.softmax_xent);
        l.arg(logits).arg(labels).arg(loss).arg(dlogits);
        l.arg(&batch).arg(&classes);
        self.launch(&mut l, d.launch())
    }

    fn sgd_momentum(
        &self,
        d: &Sgd,
        w: &mut Self::F,
        g: &Self::F,
        v: &mut Self::F,
    ) -> Result<(), GpuError> {
        d.check(w.len(), g.len(), v.len())?;
        let n = int(d.n);
        let mut l = self.stream.launch_builder(&self.k.sgd);
        l.arg(w).arg(g).arg(v).arg(&n);
        l.arg(&d.lr).arg(&d.momentum).arg(&d.weight_decay);
        self.launch(&mut l, d.launch())
    }
}

/// The `int` geometry arguments of `im2col_f32` and `col2im_f32`, in order.
fn conv_dims(d: &Conv) -> [i32; 9] {
    [d.c, d.h, d.w, d.kh, d.kw, d.pad, d.stride, d.oh(), d.ow()].map(int)
}
