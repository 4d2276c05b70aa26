//! Fuzzes the model-file parser (`optimize --model`): a file that parses has models whose
//! parts agree, so predicting from it cannot index out of bounds.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = jpower::predict::ModelFile::parse(data, std::path::Path::new("fuzz.json"), None);
});
