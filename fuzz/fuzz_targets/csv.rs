//! Fuzzes the truth/profile CSV parser (`profile --truth`, `predict --profile`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = jpower::predict::profile::parse_csv(text, std::path::Path::new("fuzz.csv"));
    }
});
