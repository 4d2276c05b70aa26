//! Fuzzes the JSON layer-list reader (`jpower flops MODEL.json`): a list that parses
//! counts without overflow at any batch up to the bound.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = std::path::Path::new("fuzz.json");
    if let Ok(m) = jpower::predict::pagoda::layer_file::parse(&text, path) {
        let _ = m.count(jpower::predict::pagoda::op::MAX_BATCH, jpower::gpu::roofline::Precision::F32, true);
    }
});
