//! `regexp_matches(string, pattern [, flags])` as PostgreSQL's set-returning function:
//! one `text[]` row per match (only the first without the `g` flag, none when nothing
//! matches), holding the capture groups or else the whole match. The select-list
//! call is planned as `unnest(regexp_matches_all(...))`; this is that array function.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use regex::{Regex, RegexBuilder};

use super::sql_error;

/// The name the select-list rewrite calls.
pub const MATCHES_ALL: &str = "regexp_matches_all";

/// See the module documentation.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RegexpMatchesAll {
    signature: Signature,
}

impl Default for RegexpMatchesAll {
    fn default() -> Self {
        RegexpMatchesAll {
            signature: Signature::one_of(
                vec![TypeSignature::String(2), TypeSignature::String(3)],
                Volatility::Immutable,
            ),
        }
    }
}

fn text_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

/// A pattern compiled with PostgreSQL's flags; whether `g` was given.
fn compile(pattern: &str, flags: &str) -> Result<(Regex, bool)> {
    let mut b = RegexBuilder::new(pattern);
    // PostgreSQL's default: `.` matches a newline, `^`/`$` only at the ends.
    b.dot_matches_new_line(true);
    let mut global = false;
    for f in flags.chars() {
        match f {
            'g' => global = true,
            'i' => {
                b.case_insensitive(true);
            }
            'c' => {
                b.case_insensitive(false);
            }
            'n' | 'm' => {
                b.dot_matches_new_line(false).multi_line(true);
            }
            'p' => {
                b.dot_matches_new_line(false).multi_line(false);
            }
            'w' => {
                b.dot_matches_new_line(true).multi_line(true);
            }
            's' => {
                b.dot_matches_new_line(true).multi_line(false);
            }
            'x' => {
                b.ignore_whitespace(true);
            }
            't' => {
                b.ignore_whitespace(false);
            }
            other => {
                return Err(sql_error(
                    "22023",
                    &format!("invalid regular expression option: \"{other}\""),
                ));
            }
        }
    }
    let re = b.build().map_err(|e| {
        sql_error(
            "2201B",
            &format!(
                "invalid regular expression: {}",
                e.to_string().lines().last().unwrap_or("")
            ),
        )
    })?;
    Ok((re, global))
}

impl ScalarUDFImpl for RegexpMatchesAll {
    fn name(&self) -> &str {
        MATCHES_ALL
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new(
            "item",
            text_list(),
            true,
        ))))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (arrays, scalar) = super::arrays_of(&args)?;
        let texts = arrays
            .iter()
            .map(|a| arrow::compute::cast(a, &DataType::Utf8))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let s = texts[0].as_string::<i32>();
        let p = texts[1].as_string::<i32>();
        let flags = texts.get(2).map(|f| f.as_string::<i32>());
        let mut compiled: HashMap<(String, String), (Regex, bool)> = HashMap::new();
        let mut out = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
        for i in 0..args.number_rows {
            let flag = match flags {
                Some(f) if f.is_null(i) => None,
                Some(f) => Some(f.value(i)),
                None => Some(""),
            };
            // A NULL argument: no rows (the function is strict).
            if let (true, true, Some(flag)) = (s.is_valid(i), p.is_valid(i), flag) {
                let key = (p.value(i).to_string(), flag.to_string());
                if !compiled.contains_key(&key) {
                    let c = compile(&key.0, &key.1)?;
                    compiled.insert(key.clone(), c);
                }
                if let Some((re, global)) = compiled.get(&key) {
                    for caps in re.captures_iter(s.value(i)) {
                        let row = out.values();
                        if caps.len() > 1 {
                            for g in 1..caps.len() {
                                row.values().append_option(caps.get(g).map(|m| m.as_str()));
                            }
                        } else {
                            row.values().append_option(caps.get(0).map(|m| m.as_str()));
                        }
                        row.append(true);
                        if !global {
                            break;
                        }
                    }
                }
            }
            out.append(true);
        }
        super::columnar(Arc::new(out.finish()), scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_as_postgresql() {
        let (re, g) = compile("a.c", "").unwrap();
        assert!(!g);
        assert!(re.is_match("a\nc"), "dot matches a newline by default");
        let (re, g) = compile("^B", "gn").unwrap();
        assert!(g);
        assert!(!re.is_match("a\nb"), "case-sensitive by default");
        assert!(
            compile("^B", "in").unwrap().0.is_match("a\nb"),
            "^ at a line start"
        );
        assert!(compile("a", "z").is_err());
        assert!(compile("(", "").is_err());
    }
}
