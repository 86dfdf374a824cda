//! `to_char(timestamp, text)` with PostgreSQL's template patterns (`YYYY`, `MM`, `DD`,
//! `HH24`, `MI`, `SS`, `MS`, `US`, `Mon`, `Dy`, `AM`, `"text"`, ...), in the session's
//! time zone. A pattern this does not know is an error (0A000), never a wrong answer:
//! DataFusion's own `to_char` reads chrono formats and prints `YYYY` as it is.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use chrono::{DateTime, TimeZone};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use super::{Settings, columnar};

/// One piece of a template: literal text, or a field in chrono's format with a case.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Lit(String),
    Field(&'static str, Case),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    AsIs,
    Upper,
    Lower,
}

/// Template patterns, longest first; `None`: PostgreSQL has it, Sundial not yet.
const PATTERNS: &[(&str, Option<(&str, Case)>)] = &[
    ("MONTH", None),
    ("Month", None),
    ("month", None),
    ("HH24", Some(("%H", Case::AsIs))),
    ("HH12", Some(("%I", Case::AsIs))),
    ("YYYY", Some(("%Y", Case::AsIs))),
    ("IYYY", None),
    ("DDD", Some(("%j", Case::AsIs))),
    ("DAY", None),
    ("Day", None),
    ("day", None),
    ("MON", Some(("%b", Case::Upper))),
    ("Mon", Some(("%b", Case::AsIs))),
    ("mon", Some(("%b", Case::Lower))),
    ("A.M.", None),
    ("P.M.", None),
    ("a.m.", None),
    ("p.m.", None),
    ("HH", Some(("%I", Case::AsIs))),
    ("YY", Some(("%y", Case::AsIs))),
    ("MM", Some(("%m", Case::AsIs))),
    ("DD", Some(("%d", Case::AsIs))),
    ("MI", Some(("%M", Case::AsIs))),
    ("SS", Some(("%S", Case::AsIs))),
    ("MS", Some(("%3f", Case::AsIs))),
    ("US", Some(("%6f", Case::AsIs))),
    ("DY", Some(("%a", Case::Upper))),
    ("Dy", Some(("%a", Case::AsIs))),
    ("dy", Some(("%a", Case::Lower))),
    ("AM", Some(("%p", Case::Upper))),
    ("PM", Some(("%p", Case::Upper))),
    ("am", Some(("%p", Case::Lower))),
    ("pm", Some(("%p", Case::Lower))),
];

fn unsupported(msg: String) -> DataFusionError {
    crate::Error::sql("0A000", msg).into()
}

/// The pieces of a PostgreSQL template.
fn parse(template: &str) -> Result<Vec<Piece>> {
    let mut out = vec![];
    let mut lit = String::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let end = rest[1..].find('"').map(|e| e + 1).unwrap_or(rest.len());
            lit.push_str(&rest[1..end]);
            rest = rest.get(end + 1..).unwrap_or("");
            continue;
        }
        // Numeric fields are case-insensitive in PostgreSQL (`yyyy-mm-dd`).
        let found = PATTERNS.iter().find(|(p, _)| {
            rest.starts_with(p)
                || (p
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
                    && rest.len() >= p.len()
                    && rest.is_char_boundary(p.len())
                    && rest[..p.len()].eq_ignore_ascii_case(p)
                    && !PATTERNS.iter().any(|(q, _)| rest.starts_with(q) && q != p))
        });
        match found {
            Some((p, Some((fmt, case)))) => {
                if !lit.is_empty() {
                    out.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                out.push(Piece::Field(fmt, *case));
                rest = &rest[p.len()..];
            }
            Some((p, None)) => {
                return Err(unsupported(format!(
                    "to_char template pattern \"{p}\" is not supported yet"
                )));
            }
            None if c.is_ascii_alphabetic() => {
                return Err(unsupported(format!(
                    "to_char template pattern at \"{}\" is not supported yet",
                    rest.chars().take(6).collect::<String>()
                )));
            }
            None => {
                lit.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !lit.is_empty() {
        out.push(Piece::Lit(lit));
    }
    Ok(out)
}

/// A PostgreSQL template as a chrono format (what `to_timestamp(text, template)`
/// parses with).
pub(super) fn chrono_format(template: &str) -> Result<String> {
    let mut out = String::new();
    for p in parse(template)? {
        match p {
            Piece::Lit(l) => out.push_str(&l.replace('%', "%%")),
            Piece::Field(f, _) => out.push_str(f),
        }
    }
    Ok(out)
}

fn render<T: TimeZone>(t: &DateTime<T>, pieces: &[Piece]) -> String
where
    T::Offset: std::fmt::Display,
{
    let mut s = String::new();
    for p in pieces {
        match p {
            Piece::Lit(l) => s.push_str(l),
            Piece::Field(f, case) => {
                let v = t.format(f).to_string();
                s.push_str(&match case {
                    Case::AsIs => v,
                    Case::Upper => v.to_uppercase(),
                    Case::Lower => v.to_lowercase(),
                });
            }
        }
    }
    s
}

/// The `to_char` UDF; it replaces DataFusion's.
#[derive(Debug)]
pub struct ToChar {
    signature: Signature,
    settings: Settings,
}

impl ToChar {
    pub fn new(settings: Settings) -> ToChar {
        ToChar {
            signature: Signature::any(2, Volatility::Stable),
            settings,
        }
    }
}

impl PartialEq for ToChar {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.settings, &o.settings)
    }
}
impl Eq for ToChar {}
impl Hash for ToChar {
    fn hash<H: Hasher>(&self, h: &mut H) {
        "to_char".hash(h)
    }
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(
                DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Null,
            ) => Ok(DataType::Utf8),
            Some(other) => Err(unsupported(format!(
                "to_char({other}, text) is not supported yet; only timestamps and dates"
            ))),
            None => Err(unsupported("to_char needs two arguments".into())),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let values = &arrays[0];
        let zone = match values.data_type() {
            DataType::Timestamp(_, Some(_)) => {
                let tz = self
                    .settings
                    .read()
                    .get("timezone")
                    .cloned()
                    .unwrap_or_else(|| "UTC".into());
                Some(crate::sql::session::normalize_tz(&tz).unwrap_or_else(|_| "UTC".into()))
            }
            _ => None,
        };
        let micros =
            arrow::compute::cast(values, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        let templates = arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let templates = templates.as_string::<i32>();
        let mut parsed: Option<(String, Vec<Piece>)> = None;
        let mut out = Vec::with_capacity(micros.len());
        for i in 0..micros.len() {
            if micros.is_null(i) || templates.is_null(i) {
                out.push(None);
                continue;
            }
            let template = templates.value(i);
            if parsed.as_ref().is_none_or(|(t, _)| t != template) {
                parsed = Some((template.to_string(), parse(template)?));
            }
            let pieces = parsed.as_ref().map(|(_, p)| p.as_slice()).unwrap_or(&[]);
            let utc = DateTime::from_timestamp_micros(micros.value(i))
                .ok_or_else(|| crate::Error::sql("22008", "timestamp out of range"))?;
            let text = match zone.as_deref() {
                None => render(&utc, pieces),
                Some(z) => match z.parse::<chrono_tz::Tz>() {
                    Ok(tz) => render(&tz.from_utc_datetime(&utc.naive_utc()), pieces),
                    Err(_) => match super::pgtext::parse_offset(z) {
                        Some(off) => render(&off.from_utc_datetime(&utc.naive_utc()), pieces),
                        None => render(&utc, pieces),
                    },
                },
            };
            out.push(Some(text));
        }
        columnar(Arc::new(StringArray::from(out)), scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_or_fail_clearly() {
        let p = parse("YYYY-MM-DD HH24:MI:SS.US \"at\" Dy").expect("parse");
        assert_eq!(p[0], Piece::Field("%Y", Case::AsIs));
        assert_eq!(p[1], Piece::Lit("-".into()));
        assert!(p.contains(&Piece::Lit(" at ".into())));
        assert!(parse("yyyy-mm-dd").is_ok());
        for bad in ["Month", "FMDD", "Q", "WW", "TZ"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
