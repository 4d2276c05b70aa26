//! Fuzzes the nvpmodel.conf parser: any text is a clear error or a configuration, never a
//! panic or a hang.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = jpower::board::nvpmodel::NvpConfig::parse(text, std::path::Path::new("fuzz.conf"));
    }
});
