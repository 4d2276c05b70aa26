//! Fuzzes the bincode frame decoder: every input is read as if a client sent it after a
//! frame's leading zero byte.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut input = vec![0u8];
    input.extend_from_slice(data);
    jpower::ipc::codec::decode_requests(&input);
});
