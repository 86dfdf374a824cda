//! Decimal text as an exact decimal mantissa, and floats into decimal columns as
//! PostgreSQL converts them (through the float's significant digits). Shared by the
//! SQL layer (casts, bound parameters, COPY) and storage (line-protocol floats into
//! `numeric` columns).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Decimal256Array};
use arrow::datatypes::{DataType, Float32Type, Float64Type, i256};

use crate::error::{Error, Result};

/// Decimal text (`-12.345`, `1e-3`, ` 7 `) as a mantissa with `scale` fractional
/// digits and at most `precision` (up to 76) digits in all, rounded half away from
/// zero past `scale`.
pub fn scaled(text: &str, precision: u8, scale: i8) -> Result<i256> {
    let invalid = || {
        Error::sql(
            "22P02",
            format!("invalid input syntax for type numeric: \"{text}\""),
        )
    };
    let overflow = || {
        Error::sql(
            "22003",
            format!("numeric field overflow: {text} does not fit numeric({precision}, {scale})"),
        )
    };
    let t = text.trim();
    if t.eq_ignore_ascii_case("nan") {
        return Err(Error::sql("22003", "numeric NaN does not fit a decimal"));
    }
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (body, exp) = match t.find(['e', 'E']) {
        Some(k) => (&t[..k], t[k + 1..].parse::<i32>().map_err(|_| invalid())?),
        None => (t, 0),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
    {
        return Err(invalid());
    }
    // All digits, and where the decimal point falls among them.
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|c| c - b'0').collect();
    let point = int.len() as i64 + i64::from(exp);
    // Digits kept: those left of point + scale; the next one rounds.
    let keep = point + i64::from(scale);
    let ten = i256::from_i128(10);
    let mut m = i256::ZERO;
    let mut push = |d: u8| -> Result<()> {
        m = m
            .checked_mul(ten)
            .and_then(|m| m.checked_add(i256::from_i128(i128::from(d))))
            .ok_or_else(overflow)?;
        Ok(())
    };
    for k in 0..keep.max(0) {
        push(digits.get(k as usize).copied().unwrap_or(0))?;
    }
    if keep >= 0 && digits.get(keep as usize).is_some_and(|&d| d >= 5) {
        m = m.checked_add(i256::ONE).ok_or_else(overflow)?;
    }
    let limit = ten
        .checked_pow(u32::from(precision.min(76)))
        .ok_or_else(overflow)?;
    if m >= limit {
        return Err(overflow());
    }
    Ok(if neg { m.wrapping_neg() } else { m })
}

/// Floats into a decimal column as PostgreSQL's `float8_numeric` does: each value
/// rounded to 15 significant digits (float4: 6), then to `dt`'s scale half away
/// from zero (`0.1` stays `0.1`, not the binary fraction's digits); NaN and
/// infinities, which a decimal cannot hold, and values past `dt`'s precision are
/// 22003.
pub fn float_to_decimal(c: &ArrayRef, dt: &DataType) -> Result<ArrayRef> {
    let (precision, scale) = match dt {
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => (*p, *s),
        other => {
            return Err(Error::sql(
                "42804",
                format!("{other} is not a decimal type"),
            ));
        }
    };
    let value = |i: usize| -> Option<(f64, usize)> {
        if c.is_null(i) {
            return None;
        }
        match c.data_type() {
            DataType::Float32 => Some((f64::from(c.as_primitive::<Float32Type>().value(i)), 5)),
            DataType::Float64 => Some((c.as_primitive::<Float64Type>().value(i), 14)),
            _ => None,
        }
    };
    let mut mantissas = Vec::with_capacity(c.len());
    for i in 0..c.len() {
        mantissas.push(match value(i) {
            None => None,
            Some((v, _)) if !v.is_finite() => {
                return Err(Error::sql(
                    "22003",
                    format!("cannot convert {v} to numeric: NaN and infinity are not stored"),
                ));
            }
            Some((v, digits)) => Some(scaled(&format!("{v:.digits$e}"), precision, scale)?),
        });
    }
    Ok(match dt {
        DataType::Decimal128(..) => {
            let narrow: Vec<Option<i128>> = mantissas
                .into_iter()
                .map(|m| m.and_then(|m| m.to_i128()))
                .collect();
            Arc::new(Decimal128Array::from(narrow).with_precision_and_scale(precision, scale)?)
        }
        _ => Arc::new(Decimal256Array::from(mantissas).with_precision_and_scale(precision, scale)?),
    })
}
