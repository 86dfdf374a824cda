//! Fuzz target: arbitrary bytes as a Postgres client's message stream (startup,
//! then any messages), decoded as a connection decodes them; every Parse and Query
//! goes through the SQL front door and every Bind through the parameter decoding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sundial::server::pg::fuzz::frontend(data);
});
