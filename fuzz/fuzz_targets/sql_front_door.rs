//! Fuzz target: arbitrary text through everything Sundial does to SQL before
//! planning (INSERT scanner, plan-cache shape and literal lifting, nesting bound,
//! pre-pass rewrites, sqlparser, normalization, result names, gap-fill rewrite).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sql) = std::str::from_utf8(data) {
        sundial::sql::front_door(sql);
    }
});
