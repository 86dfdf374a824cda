//! PostgreSQL's `numeric` on the wire: the binary form (base-10000 digits) as
//! decimal text, and decimal text as a mantissa at a fixed scale, exactly, with
//! 22003 when it does not fit. Used for bound parameters and binary COPY.

use crate::error::{Error, Result};

/// PostgreSQL's binary `numeric` (ndigits, weight, sign, dscale, base-10000
/// digits) as decimal text.
pub fn binary_text(b: &[u8]) -> Result<String> {
    let bad = || Error::sql("22P03", "invalid binary numeric parameter");
    let word = |k: usize| -> Result<i16> {
        b.get(2 * k..2 * k + 2)
            .map(|w| i16::from_be_bytes([w[0], w[1]]))
            .ok_or_else(bad)
    };
    let (ndigits, weight, sign, dscale) = (word(0)?, word(1)?, word(2)? as u16, word(3)?);
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Ok("NaN".into()),
        _ => {
            return Err(Error::sql(
                "22003",
                "numeric infinity does not fit a decimal",
            ));
        }
    }
    if ndigits < 0 || dscale < 0 {
        return Err(bad());
    }
    let digits: Vec<i16> = (0..ndigits as usize)
        .map(|k| word(4 + k))
        .collect::<Result<_>>()?;
    if digits.iter().any(|d| !(0..10000).contains(d)) {
        return Err(bad());
    }
    // Integer part: groups with weight >= 0; fraction: the rest, dscale digits.
    let mut int = String::new();
    for w in (0..=weight.max(-1)).rev() {
        let k = (weight - w) as usize;
        let d = digits.get(k).copied().unwrap_or(0);
        if int.is_empty() {
            if d != 0 {
                int.push_str(&d.to_string());
            }
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::new();
    let mut w = -1i32;
    while frac.len() < dscale as usize {
        let k = i32::from(weight) - w;
        let d = if k >= 0 {
            digits.get(k as usize).copied().unwrap_or(0)
        } else {
            0
        };
        frac.push_str(&format!("{d:04}"));
        w -= 1;
    }
    frac.truncate(dscale as usize);
    let sign = if sign == 0x4000 { "-" } else { "" };
    Ok(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
}

pub use crate::numeric_text::scaled;

/// [`scaled`] for a 128-bit decimal (`precision` at most 38).
pub fn scaled128(text: &str, precision: u8, scale: i8) -> Result<i128> {
    scaled(text, precision.min(38), scale)?
        .to_i128()
        .ok_or_else(|| {
            Error::sql(
                "22003",
                format!(
                    "numeric field overflow: {text} does not fit numeric({precision}, {scale})"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::i256;

    #[test]
    fn text_is_scaled_exactly_and_rounded_half_away_from_zero() {
        let scaled = scaled128;
        assert_eq!(
            scaled("12345.678901234567890", 38, 10).unwrap(),
            123456789012346
        );
        assert_eq!(scaled("-0.00000000005", 38, 10).unwrap(), -1);
        assert_eq!(scaled("1.5e3", 38, 0).unwrap(), 1500);
        assert_eq!(scaled("2.5", 38, 0).unwrap(), 3);
        assert_eq!(scaled(".5", 38, 1).unwrap(), 5);
        assert_eq!(
            scaled("1234567890123456789.0123456789012345678", 38, 19).unwrap(),
            12345678901234567890123456789012345678
        );
        // 30 integer digits do not fit 28 at scale 10: an error, not other digits.
        assert!(scaled("199999999999999999999999999999.01", 38, 10).is_err());
        assert_eq!(
            scaled("19999999999999999999999999.01", 38, 10).unwrap(),
            199999999999999999999999990100000000
        );
        assert!(scaled("12.3.4", 38, 2).is_err());
        assert!(scaled("abc", 38, 2).is_err());
        assert_eq!(scaled("123.45", 5, 2).unwrap(), 12345);
        assert!(scaled("1234.5", 5, 2).is_err());
    }

    #[test]
    fn wide_numerics_keep_every_digit() {
        let text = |v: i256| v.to_string();
        assert_eq!(
            text(super::scaled("12345.678901234567890", 76, 38).unwrap()),
            format!("12345678901234567890{}", "0".repeat(38 - 15))
        );
        assert_eq!(
            text(super::scaled("-19999999999999999999999999.01", 76, 38).unwrap()),
            format!("-1999999999999999999999999901{}", "0".repeat(36))
        );
        // 38 integer digits fit, 39 do not.
        assert!(super::scaled(&"9".repeat(38), 76, 38).is_ok());
        assert!(super::scaled(&"9".repeat(39), 76, 38).is_err());
    }

    #[test]
    fn binary_numeric_reads_as_its_text() {
        // 12345.678 = digits [1, 2345, 6780], weight 1, dscale 3.
        let b: Vec<u8> = [3i16, 1, 0, 3, 1, 2345, 6780]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(binary_text(&b).unwrap(), "12345.678");
        // -0.0005 = digits [5], weight -1, dscale 4.
        let b: Vec<u8> = [1i16, -1, 0x4000u16 as i16, 4, 5]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(binary_text(&b).unwrap(), "-0.0005");
        // 20000 = digits [2], weight 1, dscale 0.
        let b: Vec<u8> = [1i16, 1, 0, 0, 2]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(binary_text(&b).unwrap(), "20000");
    }
}
