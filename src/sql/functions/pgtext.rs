//! PostgreSQL's text output for the types whose Rust/Arrow rendering differs:
//! timestamps (`2024-01-01 00:00:00+00`, trailing zeros trimmed), floats
//! (`21`, `1e+20`, `NaN`, `Infinity`) and intervals (`1 day 02:00:00`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, IntervalMonthDayNanoType, IntervalUnit, Schema, TimeUnit,
    TimestampMicrosecondType, i256,
};
use chrono::{DateTime, Offset, TimeZone};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use pgwire::api::results::{FieldFormat, FieldInfo};

/// `pg_text(x)`: what `x::text` gives in PostgreSQL. Casts to text are rewritten to it.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgText {
    signature: Signature,
}

impl Default for PgText {
    fn default() -> Self {
        PgText {
            signature: Signature::any(1, Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for PgText {
    fn name(&self) -> &str {
        "pg_text"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let tz = args
            .config_options
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "UTC".into());
        let arr = args.args[0].to_array(args.number_rows)?;
        let out = text_column(&args.arg_fields[0], &arr, &tz)?;
        super::columnar(out, scalar)
    }
}

/// PostgreSQL's text of every value of `arr` (field `f`), timestamps with time
/// zone shown in zone `tz`.
pub fn text_column(f: &arrow::datatypes::Field, arr: &ArrayRef, tz: &str) -> Result<ArrayRef> {
    let arr = match arr.data_type() {
        DataType::Timestamp(u, Some(_)) => {
            arrow::compute::cast(arr, &DataType::Timestamp(*u, Some(Arc::from(tz))))?
        }
        _ => arr.clone(),
    };
    let out = match to_text(f, &arr)? {
        Some(a) => a,
        None => match arr.data_type() {
            DataType::Boolean => {
                let b = arr.as_boolean();
                Arc::new(StringArray::from(
                    (0..b.len())
                        .map(|i| {
                            b.is_valid(i)
                                .then_some(if b.value(i) { "true" } else { "false" })
                        })
                        .collect::<Vec<_>>(),
                ))
            }
            _ => arrow::compute::cast(&arr, &DataType::Utf8)?,
        },
    };
    Ok(out)
}

/// The precision passed to Arrow's decimal formatting, which cuts digits past it:
/// every digit a value has is printed (an overflowing sum is never shown shortened).
const FULL: u8 = u8::MAX;

/// A decimal's text without trailing fractional zeros (`12.5000000000` → `12.5`).
pub fn trimmed_decimal(v: i128, scale: i8) -> String {
    use arrow::datatypes::DecimalType;
    trim_zeros(arrow::datatypes::Decimal128Type::format_decimal(
        v, FULL, scale,
    ))
}

fn trim_zeros(text: String) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// PostgreSQL's binary `numeric` of `v × 10^-scale` with the value's own scale
/// (trailing fractional zeros dropped, as its text form prints): ndigits, weight,
/// sign, dscale, then base-10000 digits.
pub fn pg_numeric_binary(v: i128, scale: u32) -> Vec<u8> {
    numeric_binary(v < 0, &v.unsigned_abs().to_string(), scale, true)
}

/// [`pg_numeric_binary`] of a 256-bit mantissa.
pub fn pg_numeric_binary256(v: i256, scale: u32) -> Vec<u8> {
    numeric_binary(v.is_negative(), &abs_digits(v), scale, true)
}

/// The decimal digits of `|v|`.
fn abs_digits(v: i256) -> String {
    match v.to_i128() {
        Some(v) => v.unsigned_abs().to_string(),
        None => v.to_string().trim_start_matches('-').to_string(),
    }
}

/// PostgreSQL's binary numeric of the mantissa whose absolute value has the decimal
/// `digits`, at `scale`; `scale` stays the display scale when `trim` is false (a
/// `numeric(p, s)` column: PostgreSQL sends `12.50` with dscale 2).
fn numeric_binary(negative: bool, digits: &str, scale: u32, trim: bool) -> Vec<u8> {
    let mut digits = digits.trim_start_matches('0').to_string();
    let mut dscale = if trim && digits.is_empty() {
        0
    } else {
        scale as usize
    };
    while trim && dscale > 0 && digits.ends_with('0') {
        digits.pop();
        dscale -= 1;
    }
    // Left-pad so that there is at least one integer digit position.
    if digits.len() <= dscale {
        digits = format!("{}{digits}", "0".repeat(dscale + 1 - digits.len()));
    }
    let (int, frac) = digits.split_at(digits.len() - dscale);
    // Base-10000 groups: the integer part aligned right, the fraction left.
    let int_pad = (4 - int.len() % 4) % 4;
    let frac_pad = (4 - frac.len() % 4) % 4;
    let int = format!("{}{int}", "0".repeat(int_pad));
    let frac = format!("{frac}{}", "0".repeat(frac_pad));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0i16, |a, d| a * 10 + i16::from(d - b'0')))
            .collect()
    };
    let mut groups = group(&int);
    let mut weight = groups.len() as i16 - 1;
    groups.extend(group(&frac));
    let lead = groups.iter().take_while(|d| **d == 0).count();
    groups.drain(..lead);
    weight -= lead as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let sign: u16 = if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    };
    let mut out = Vec::with_capacity(8 + 2 * groups.len());
    out.extend_from_slice(&(groups.len() as i16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&(dscale as u16).to_be_bytes());
    for d in groups {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

/// Whether a decimal column prints without trailing fractional zeros: `numeric`
/// without a typmod, and computed values that carry their own scale.
fn trims(f: &arrow::datatypes::Field) -> bool {
    crate::catalog::is_any_numeric(f.data_type()) || own_scale(f)
}

/// Binary-format intervals as PostgreSQL's binary interval, and binary-format
/// `numeric` columns as PostgreSQL's binary numeric (of each value's own scale for
/// `numeric` without a typmod, so binary results equal the text ones: `100`, not
/// `100.0000000000`). The encoder writes the bytes as they are.
fn to_binary(f: &arrow::datatypes::Field, c: &ArrayRef) -> Option<ArrayRef> {
    if crate::json::Kind::of(f) == Some(crate::json::Kind::Jsonb) {
        // PostgreSQL's binary jsonb: a version byte (1), then the text.
        let out: arrow::array::BinaryArray = c
            .as_string_opt::<i32>()?
            .iter()
            .map(|v| {
                v.map(|v| {
                    let mut b = Vec::with_capacity(v.len() + 1);
                    b.push(1u8);
                    b.extend_from_slice(v.as_bytes());
                    b
                })
            })
            .collect();
        return Some(Arc::new(out));
    }
    if let DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano) = c.data_type() {
        // PostgreSQL's binary interval: microseconds, days, months (arrow-pg's own
        // encoder wrote NULL as a zero interval).
        let a = c.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
        let out: arrow::array::BinaryArray = a
            .iter()
            .map(|v| {
                v.map(|v| {
                    let mut b = Vec::with_capacity(16);
                    b.extend_from_slice(&(v.nanoseconds / 1000).to_be_bytes());
                    b.extend_from_slice(&v.days.to_be_bytes());
                    b.extend_from_slice(&v.months.to_be_bytes());
                    b
                })
            })
            .collect();
        return Some(Arc::new(out));
    }
    // Every decimal: arrow-pg's own encoder goes through rust_decimal, which
    // fails past 28 digits.
    let trim = trims(f);
    let binary = |n: usize, s: &i8, value: &dyn Fn(usize) -> Option<(bool, String)>| {
        let scale = (*s).max(0) as u32;
        (0..n)
            .map(|i| value(i).map(|(neg, digits)| numeric_binary(neg, &digits, scale, trim)))
            .collect::<arrow::array::BinaryArray>()
    };
    let out = match c.data_type() {
        DataType::Decimal128(_, s) => {
            let a = c.as_primitive::<arrow::datatypes::Decimal128Type>();
            binary(a.len(), s, &|i| {
                a.is_valid(i)
                    .then(|| (a.value(i) < 0, a.value(i).unsigned_abs().to_string()))
            })
        }
        DataType::Decimal256(_, s) => {
            let a = c.as_primitive::<arrow::datatypes::Decimal256Type>();
            binary(a.len(), s, &|i| {
                a.is_valid(i)
                    .then(|| (a.value(i).is_negative(), abs_digits(a.value(i))))
            })
        }
        _ => return None,
    };
    Some(Arc::new(out))
}

/// Replaces text-format columns of those types by their PostgreSQL text, and
/// binary-format `numeric` columns without a typmod by PostgreSQL's binary numeric.
pub fn pg_text_batch(batch: RecordBatch, fields: &[FieldInfo]) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut changed = false;
    let mut cols = Vec::with_capacity(batch.num_columns());
    let mut out_fields = Vec::with_capacity(batch.num_columns());
    for (i, (f, c)) in schema.fields().iter().zip(batch.columns()).enumerate() {
        // PostgreSQL has no unsigned type: row_number(), rank(), dense_rank() and
        // ntile() (UInt64 in DataFusion) are bigint, as the column is described.
        let unsigned;
        let (f, c) = if c.data_type() == &DataType::UInt64 {
            let u = c
                .as_any()
                .downcast_ref::<arrow::array::UInt64Array>()
                .ok_or_else(|| crate::Error::Internal("uint64 column".into()))?;
            let signed: arrow::array::Int64Array = u
                .iter()
                .map(|v| v.map(i64::try_from).transpose())
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| crate::Error::sql("22003", "bigint out of range"))?;
            changed = true;
            unsigned = Arc::new(f.as_ref().clone().with_data_type(DataType::Int64));
            (&unsigned, &(Arc::new(signed) as arrow::array::ArrayRef))
        } else {
            (f, c)
        };
        let text = fields
            .get(i)
            .map(|fi| fi.format() == FieldFormat::Text)
            .unwrap_or(false);
        let converted = if text {
            to_text(f, c)?.map(|a| {
                let t = a.data_type().clone();
                (a, t)
            })
        } else if fields.get(i).is_some() {
            to_binary(f, c).map(|a| (a, DataType::Binary))
        } else {
            None
        };
        match converted {
            Some((a, dt)) => {
                changed = true;
                out_fields.push(f.as_ref().clone().with_data_type(dt));
                cols.push(a);
            }
            None => {
                out_fields.push(f.as_ref().clone());
                cols.push(c.clone());
            }
        }
    }
    if !changed {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(out_fields)),
        cols,
    )?)
}

/// Field metadata of a computed `numeric` whose values carry their own scale (a
/// division rounded to PostgreSQL's result scale): printed without trailing zeros.
pub const OWN_SCALE: &str = "sundial.numeric_own_scale";

fn own_scale(f: &arrow::datatypes::Field) -> bool {
    f.metadata().contains_key(OWN_SCALE)
}

/// Column `c` as PostgreSQL prints it, where arrow-pg's text would differ (numerics,
/// floats, timestamps, intervals, and arrays of them: a list of element texts);
/// None where arrow-pg's own text is PostgreSQL's.
fn to_text(f: &arrow::datatypes::Field, c: &ArrayRef) -> Result<Option<ArrayRef>> {
    let out: Vec<Option<String>> = match c.data_type() {
        // Decimals are printed here: arrow-pg's encoder goes through rust_decimal,
        // which fails past 28 digits.
        DataType::Decimal128(_, s) => {
            use arrow::datatypes::DecimalType;
            let trim = trims(f);
            let a = c.as_primitive::<arrow::datatypes::Decimal128Type>();
            (0..a.len())
                .map(|i| {
                    a.is_valid(i).then(|| {
                        let t =
                            arrow::datatypes::Decimal128Type::format_decimal(a.value(i), FULL, *s);
                        if trim { trim_zeros(t) } else { t }
                    })
                })
                .collect()
        }
        DataType::Decimal256(_, s) => {
            use arrow::datatypes::DecimalType;
            let trim = trims(f);
            let a = c.as_primitive::<arrow::datatypes::Decimal256Type>();
            (0..a.len())
                .map(|i| {
                    a.is_valid(i).then(|| {
                        let v = a.value(i);
                        // Most values fit 128 bits, whose formatting is far cheaper.
                        let t = match v.to_i128() {
                            Some(v) => {
                                arrow::datatypes::Decimal128Type::format_decimal(v, FULL, *s)
                            }
                            None => arrow::datatypes::Decimal256Type::format_decimal(v, FULL, *s),
                        };
                        if trim { trim_zeros(t) } else { t }
                    })
                })
                .collect()
        }
        DataType::Float64 => {
            let a = c.as_primitive::<Float64Type>();
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| float(a.value(i), 15)))
                .collect()
        }
        DataType::Float32 => {
            let a = c.as_primitive::<Float32Type>();
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| float32(a.value(i))))
                .collect()
        }
        DataType::Timestamp(_, tz) => {
            let micros =
                arrow::compute::cast(c, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            let a = micros.as_primitive::<TimestampMicrosecondType>();
            let zone: Option<chrono_tz::Tz> = tz.as_deref().and_then(|t| t.parse().ok());
            let fixed: Option<chrono::FixedOffset> = match (&zone, tz.as_deref()) {
                (None, Some(t)) => parse_offset(t),
                _ => None,
            };
            (0..a.len())
                .map(|i| {
                    a.is_valid(i).then(|| {
                        let v = a.value(i);
                        match (tz, zone, fixed) {
                            (None, _, _) => timestamp(v, None),
                            (Some(_), Some(z), _) => timestamp_tz(v, &z),
                            (Some(_), None, Some(f)) => timestamp_tz(v, &f),
                            (Some(_), None, None) => timestamp_tz(v, &chrono::Utc),
                        }
                    })
                })
                .collect()
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let a = c.as_primitive::<IntervalMonthDayNanoType>();
            (0..a.len())
                .map(|i| {
                    a.is_valid(i).then(|| {
                        let v = a.value(i);
                        interval(v.months, v.days, v.nanoseconds / 1000)
                    })
                })
                .collect()
        }
        // Arrays: their elements as PostgreSQL prints them, quoted by pgwire's
        // array encoder where PostgreSQL's `array_out` quotes them.
        DataType::List(item) => {
            let l = c.as_list::<i32>();
            let Some(texts) = to_text(item, l.values())? else {
                return Ok(None);
            };
            let field = Arc::new(item.as_ref().clone().with_data_type(DataType::Utf8));
            return Ok(Some(Arc::new(arrow::array::ListArray::try_new(
                field,
                l.offsets().clone(),
                texts,
                l.nulls().cloned(),
            )?)));
        }
        _ => return Ok(None),
    };
    Ok(Some(Arc::new(StringArray::from(out))))
}

pub fn parse_offset(t: &str) -> Option<chrono::FixedOffset> {
    let (sign, rest) = match t.as_bytes().first()? {
        b'+' => (1, &t[1..]),
        b'-' => (-1, &t[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let secs = h.parse::<i32>().ok()? * 3600 + m.parse::<i32>().ok()? * 60;
    chrono::FixedOffset::east_opt(sign * secs)
}

/// PostgreSQL float text with extra_float_digits = 1: shortest round-trip digits,
/// exponent form below 1e-4 and from 1e15 (float8) / 1e6 (float4).
pub fn float(v: f64, max_exp: i32) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let exp = v.abs().log10().floor() as i32;
    if exp < -4 || exp >= max_exp {
        let s = format!("{v:e}");
        let (mant, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", e.abs())
    } else {
        format!("{v}")
    }
}

fn float32(v: f32) -> String {
    if v.is_finite() && v != 0.0 {
        let exp = v.abs().log10().floor() as i32;
        if !(-4..6).contains(&exp) {
            let s = format!("{v:e}");
            let (mant, e) = s.split_once('e').unwrap_or((&s, "0"));
            let e: i32 = e.parse().unwrap_or(0);
            let sign = if e < 0 { '-' } else { '+' };
            return format!("{mant}e{sign}{:02}", e.abs());
        }
        return format!("{v}");
    }
    float(v as f64, 6)
}

fn frac(micros: u32) -> String {
    if micros == 0 {
        String::new()
    } else {
        let s = format!(".{micros:06}");
        s.trim_end_matches('0').to_string()
    }
}

fn timestamp(v: i64, _tz: Option<&str>) -> String {
    match DateTime::from_timestamp_micros(v) {
        Some(dt) => {
            let n = dt.naive_utc();
            format!(
                "{}{}",
                n.format("%Y-%m-%d %H:%M:%S"),
                frac(n.and_utc().timestamp_subsec_micros())
            )
        }
        None => v.to_string(),
    }
}

fn timestamp_tz<Z: TimeZone>(v: i64, zone: &Z) -> String {
    let Some(dt) = DateTime::from_timestamp_micros(v) else {
        return v.to_string();
    };
    let local = dt.with_timezone(zone);
    let off = local.offset().fix().local_minus_utc();
    let sign = if off < 0 { '-' } else { '+' };
    let off = off.abs();
    let (h, m, s) = (off / 3600, (off % 3600) / 60, off % 60);
    let mut offs = format!("{sign}{h:02}");
    if m != 0 || s != 0 {
        offs.push_str(&format!(":{m:02}"));
    }
    if s != 0 {
        offs.push_str(&format!(":{s:02}"));
    }
    format!(
        "{}{}{}",
        local.naive_local().format("%Y-%m-%d %H:%M:%S"),
        frac(dt.timestamp_subsec_micros()),
        offs
    )
}

/// PostgreSQL's `IntervalStyle = postgres` output.
pub fn interval(months: i32, days: i32, micros: i64) -> String {
    let mut parts = vec![];
    let (y, mo) = (months / 12, months % 12);
    // PostgreSQL: singular only for exactly 1 ("-1 mons", "-1 days").
    let plural = |n: i64, unit: &str| {
        if n == 1 {
            format!("{n} {unit}")
        } else {
            format!("{n} {unit}s")
        }
    };
    if y != 0 {
        parts.push(plural(y as i64, "year"));
    }
    if mo != 0 {
        parts.push(plural(mo as i64, "mon"));
    }
    if days != 0 {
        parts.push(plural(days as i64, "day"));
    }
    if micros != 0 || parts.is_empty() {
        let neg = micros < 0;
        let m = micros.unsigned_abs();
        let (h, rem) = (m / 3_600_000_000, m % 3_600_000_000);
        let (mi, rem) = (rem / 60_000_000, rem % 60_000_000);
        let (s, us) = (rem / 1_000_000, rem % 1_000_000);
        let sign = if neg {
            "-"
        } else if parts.iter().any(|p| p.starts_with('-')) {
            "+"
        } else {
            ""
        };
        parts.push(format!("{sign}{h:02}:{mi:02}:{s:02}{}", frac(us as u32)));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected bytes from PostgreSQL 15.18: `SELECT numeric_send('x'::numeric)`.
    #[test]
    fn numeric_binary_like_postgres() {
        let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let scaled = |text: &str| -> i128 {
            let (int, frac) = text.split_once('.').unwrap_or((text, ""));
            let neg = int.starts_with('-');
            let digits = format!("{}{:0<10}", int.trim_start_matches('-'), frac);
            let v: i128 = digits.parse().expect("digits");
            if neg { -v } else { v }
        };
        for (text, pg) in [
            ("100", "00010000000000000064"),
            ("12.5", "0002000000000001000c1388"),
            ("-0.0001", "0001ffff400000040001"),
            ("0", "0000000000000000"),
            ("0.00001", "0001fffe0000000503e8"),
            ("10000", "00010001000000000001"),
            (
                "123456789.0123456789",
                "000600020000000a000109291a85007b11d722c4",
            ),
            (
                "-99999999999999999999999999.5",
                "00080006400000010063270f270f270f270f270f270f1388",
            ),
            ("1.1", "0002000000000001000103e8"),
        ] {
            assert_eq!(hex(pg_numeric_binary(scaled(text), 10)), pg, "{text}");
            let wide = crate::sql::pgnumeric::scaled(text, 76, 38).expect("fits");
            assert_eq!(hex(pg_numeric_binary256(wide, 38)), pg, "{text} (256-bit)");
        }
        // 38 integer and 38 fraction digits: 20 groups, weight 9, dscale 38.
        let big = format!("{}.{}", "9".repeat(38), "1".repeat(38));
        let wide = crate::sql::pgnumeric::scaled(&big, 76, 38).expect("fits");
        let b = pg_numeric_binary256(wide, 38);
        assert_eq!(&b[..8], &[0, 20, 0, 9, 0, 0, 0, 38]);
        assert_eq!(crate::sql::pgnumeric::binary_text(&b).expect("reads"), big);
    }

    #[test]
    fn floats_like_postgres() {
        assert_eq!(float(21.0, 15), "21");
        assert_eq!(float(20.5, 15), "20.5");
        assert_eq!(float(1e20, 15), "1e+20");
        assert_eq!(float(1.5e-7, 15), "1.5e-07");
        assert_eq!(float(0.1 + 0.2, 15), "0.30000000000000004");
        assert_eq!(float(f64::NAN, 15), "NaN");
        assert_eq!(float(123456789012345.0, 15), "123456789012345");
        assert_eq!(float(1234567890123456.0, 15), "1.234567890123456e+15");
    }

    #[test]
    fn timestamps_and_intervals() {
        assert_eq!(
            timestamp_tz(1_704_067_200_000_000, &chrono::Utc),
            "2024-01-01 00:00:00+00"
        );
        assert_eq!(
            timestamp(1_704_067_200_500_000, None),
            "2024-01-01 00:00:00.5"
        );
        let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(
            timestamp_tz(1_704_067_200_000_000, &berlin),
            "2024-01-01 01:00:00+01"
        );
        let kolkata: chrono_tz::Tz = "Asia/Kolkata".parse().unwrap();
        assert_eq!(
            timestamp_tz(1_704_067_200_012_340, &kolkata),
            "2024-01-01 05:30:00.01234+05:30"
        );
        let ny: chrono_tz::Tz = "America/New_York".parse().unwrap();
        assert_eq!(
            timestamp_tz(1_451_649_599_999_999, &ny),
            "2016-01-01 06:59:59.999999-05"
        );
        assert_eq!(
            timestamp(-62_135_596_800_000_000, None),
            "0001-01-01 00:00:00"
        );
        assert_eq!(interval(0, 1, 7_200_000_000), "1 day 02:00:00");
        assert_eq!(interval(14, 0, 0), "1 year 2 mons");
        assert_eq!(interval(-1, -17, 0), "-1 mons -17 days");
        assert_eq!(interval(0, 0, 0), "00:00:00");
        assert_eq!(interval(0, -3, 0), "-3 days");
    }
}
