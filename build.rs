//! Build script. The CUDA kernels in `cuda-kernels/` are compiled here once the GPU
//! layer lands; until then it only asks Cargo to rerun when they change, and never
//! fails on a machine without CUDA.
fn main() {
    println!("cargo:rerun-if-changed=cuda-kernels");
}
