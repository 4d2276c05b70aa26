//! Fuzzes the ONNX reader (`jpower flops MODEL.onnx`): no graph, however malformed or
//! oversized, may panic; what it cannot count it lists.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.onnx");
    if let Ok(o) = jpower::predict::pagoda::onnx::parse(data, path, &Default::default()) {
        let _ = o.model.count(64, jpower::gpu::roofline::Precision::F32, true);
    }
});
