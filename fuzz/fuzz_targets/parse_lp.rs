//! Fuzz target: feeds arbitrary bytes to the line-protocol parser, walks every
//! line and unescapes every string, so any panic or hang shows up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sundial::lineproto::parser::{FieldValue, Parser};

fuzz_target!(|data: &[u8]| {
    let mut parser = Parser::new(data);
    let mut last = 0;
    while let Some(result) = parser.next_line() {
        let number = match result {
            Ok(line) => {
                assert!(line.text.len() <= data.len());
                let _ = line.measurement.as_str();
                for (key, value) in line.tags {
                    let _ = key.as_str();
                    let _ = value.as_str();
                }
                for (key, value) in line.fields {
                    let _ = key.as_str();
                    if let FieldValue::Str(s) = value {
                        let mut out = String::new();
                        s.write_unescaped(&mut out);
                        assert_eq!(s.as_str(), out.as_str());
                    }
                }
                line.number
            }
            Err(err) => {
                assert!(err.text.len() <= 256);
                let _ = err.to_string();
                err.line
            }
        };
        assert!(number > last, "line numbers must grow");
        last = number;
    }
});
