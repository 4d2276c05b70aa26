//! Fuzzes the JSON-lines decoder: every input is read as a client's JSON stream.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut input = b"{".to_vec();
    input.extend_from_slice(data);
    jpower::ipc::codec::decode_requests(&input);
});
