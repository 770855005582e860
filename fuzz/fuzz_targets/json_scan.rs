//! libFuzzer target `json_scan`: its body is `controller_runtime_fuzz::json_scan` (fuzz/src/lib.rs),
//! which the stable corpus replay (tests/fuzz_corpus.rs) runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| controller_runtime_fuzz::json_scan(data));
