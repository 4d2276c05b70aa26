//! Fuzzes the agent's configuration parser (`jpower.toml`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = jpower::daemon::Config::parse(text, std::path::Path::new("fuzz.toml"));
    }
});
