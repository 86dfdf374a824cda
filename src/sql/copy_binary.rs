//! PostgreSQL's binary COPY format (`COPY ... (FORMAT BINARY)`): the `PGCOPY`
//! header, then per row a field count and length-prefixed values in each type's
//! binary send format. Rows coming in are turned into the text the COPY text path
//! already converts; rows going out are encoded from the Arrow columns.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{self as t, DataType, TimeUnit};
use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, NaiveDate};

use crate::error::{Error, Result};

/// The 11-byte signature that starts a binary COPY stream.
const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";
/// Microseconds from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days from 1970-01-01 to 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;

fn bad(msg: impl Into<String>) -> Error {
    Error::sql("22P04", format!("invalid COPY binary data: {}", msg.into()))
}

/// Whether binary COPY can carry a column of this type, either way.
pub fn supported(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Boolean
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(..)
            | DataType::Decimal256(..)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Date32
            | DataType::Timestamp(..)
    )
}

/// Reads binary COPY data: the header once, then whole tuples. Each field comes
/// out as the text the COPY text format would have carried.
#[derive(Debug, Default)]
pub struct Reader {
    header_done: bool,
    /// The trailer (field count -1) was read.
    pub ended: bool,
}

impl Reader {
    /// Parses what `buf` holds completely; returns the bytes used. `types` are the
    /// target column types in the order the client sends them.
    pub fn parse(
        &mut self,
        buf: &[u8],
        types: &[DataType],
        rows: &mut Vec<Vec<Option<String>>>,
    ) -> Result<usize> {
        let mut pos = 0;
        if !self.header_done {
            if buf.len() < SIGNATURE.len() + 8 {
                return Ok(0);
            }
            if &buf[..SIGNATURE.len()] != SIGNATURE {
                return Err(bad("COPY file signature not recognized"));
            }
            let flags = i32::from_be_bytes(buf[11..15].try_into().map_err(|_| bad("header"))?);
            if flags & 0x0001_0000 != 0 {
                return Err(bad("rows with OIDs are not supported"));
            }
            let ext = i32::from_be_bytes(buf[15..19].try_into().map_err(|_| bad("header"))?);
            let ext = usize::try_from(ext).map_err(|_| bad("negative header extension"))?;
            if buf.len() < 19 + ext {
                return Ok(0);
            }
            pos = 19 + ext;
            self.header_done = true;
        }
        while !self.ended {
            let Some(count) = buf.get(pos..pos + 2) else {
                return Ok(pos);
            };
            let count = i16::from_be_bytes([count[0], count[1]]);
            if count == -1 {
                self.ended = true;
                return Ok(buf.len());
            }
            if count as usize != types.len() {
                return Err(bad(format!(
                    "row field count is {count}, expected {}",
                    types.len()
                )));
            }
            let mut p = pos + 2;
            let mut row = Vec::with_capacity(types.len());
            for dt in types {
                let Some(len) = buf.get(p..p + 4) else {
                    return Ok(pos);
                };
                let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                p += 4;
                if len == -1 {
                    row.push(None);
                    continue;
                }
                let len = usize::try_from(len).map_err(|_| bad("negative field length"))?;
                let Some(v) = buf.get(p..p + len) else {
                    return Ok(pos);
                };
                p += len;
                row.push(Some(field_text(v, dt)?));
            }
            rows.push(row);
            pos = p;
        }
        Ok(buf.len())
    }
}

fn fixed<const N: usize>(v: &[u8], what: &str) -> Result<[u8; N]> {
    v.try_into()
        .map_err(|_| bad(format!("{what} must be {N} bytes, got {}", v.len())))
}

/// One binary field as COPY text.
fn field_text(v: &[u8], dt: &DataType) -> Result<String> {
    Ok(match dt {
        DataType::Boolean => match fixed::<1>(v, "bool")?[0] {
            0 => "f".into(),
            _ => "t".into(),
        },
        DataType::Int16 => i16::from_be_bytes(fixed(v, "int2")?).to_string(),
        DataType::Int32 => i32::from_be_bytes(fixed(v, "int4")?).to_string(),
        DataType::Int64 => i64::from_be_bytes(fixed(v, "int8")?).to_string(),
        DataType::Float32 => f32::from_be_bytes(fixed(v, "float4")?).to_string(),
        DataType::Float64 => f64::from_be_bytes(fixed(v, "float8")?).to_string(),
        DataType::Decimal128(..) | DataType::Decimal256(..) => super::pgnumeric::binary_text(v)?,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => std::str::from_utf8(v)
            .map_err(|_| bad("text is not UTF-8"))?
            .to_string(),
        DataType::Date32 => {
            let days = i32::from_be_bytes(fixed(v, "date")?);
            NaiveDate::from_num_days_from_ce_opt(days + PG_EPOCH_DAYS + 719_163)
                .ok_or_else(|| bad("date out of range"))?
                .format("%Y-%m-%d")
                .to_string()
        }
        DataType::Timestamp(_, tz) => {
            let us = i64::from_be_bytes(fixed(v, "timestamp")?);
            let at = DateTime::from_timestamp_micros(us.saturating_add(PG_EPOCH_MICROS))
                .ok_or_else(|| bad("timestamp out of range"))?
                .naive_utc();
            let text = at.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
            if tz.is_some() {
                format!("{text}+00:00")
            } else {
                text
            }
        }
        other => {
            return Err(Error::NotSupported(format!(
                "binary COPY of a {other} column"
            )));
        }
    })
}

/// The binary COPY header (sent before the first row).
pub fn header() -> Bytes {
    let mut b = BytesMut::with_capacity(19);
    b.put_slice(SIGNATURE);
    b.put_i32(0);
    b.put_i32(0);
    b.freeze()
}

/// A batch as binary COPY tuples, one buffer per row.
pub fn encode(batch: &RecordBatch) -> Result<Vec<Bytes>> {
    let cols: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Timestamp(u, tz) if *u != TimeUnit::Microsecond => Ok(arrow::compute::cast(
                c,
                &DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
            )?),
            DataType::LargeUtf8 | DataType::Utf8View => {
                Ok(arrow::compute::cast(c, &DataType::Utf8)?)
            }
            dt if supported(dt) => Ok(c.clone()),
            other => Err(Error::NotSupported(format!(
                "binary COPY of a {other} column"
            ))),
        })
        .collect::<Result<_>>()?;
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut b = BytesMut::new();
    for r in 0..batch.num_rows() {
        b.put_i16(cols.len() as i16);
        for c in &cols {
            if c.is_null(r) {
                b.put_i32(-1);
                continue;
            }
            match c.data_type() {
                DataType::Boolean => {
                    b.put_i32(1);
                    b.put_u8(u8::from(c.as_boolean().value(r)));
                }
                DataType::Int16 => {
                    b.put_i32(2);
                    b.put_i16(c.as_primitive::<t::Int16Type>().value(r));
                }
                DataType::Int32 => {
                    b.put_i32(4);
                    b.put_i32(c.as_primitive::<t::Int32Type>().value(r));
                }
                DataType::Int64 => {
                    b.put_i32(8);
                    b.put_i64(c.as_primitive::<t::Int64Type>().value(r));
                }
                DataType::Float32 => {
                    b.put_i32(4);
                    b.put_f32(c.as_primitive::<t::Float32Type>().value(r));
                }
                DataType::Float64 => {
                    b.put_i32(8);
                    b.put_f64(c.as_primitive::<t::Float64Type>().value(r));
                }
                DataType::Decimal128(_, s) => {
                    let v = c.as_primitive::<t::Decimal128Type>().value(r);
                    let n = crate::sql::functions::pgtext::pg_numeric_binary(v, (*s).max(0) as u32);
                    b.put_i32(n.len() as i32);
                    b.put_slice(&n);
                }
                DataType::Decimal256(_, s) => {
                    let v = c.as_primitive::<t::Decimal256Type>().value(r);
                    let n =
                        crate::sql::functions::pgtext::pg_numeric_binary256(v, (*s).max(0) as u32);
                    b.put_i32(n.len() as i32);
                    b.put_slice(&n);
                }
                DataType::Utf8 => {
                    let v = c.as_string::<i32>().value(r);
                    b.put_i32(v.len() as i32);
                    b.put_slice(v.as_bytes());
                }
                DataType::Date32 => {
                    b.put_i32(4);
                    b.put_i32(c.as_primitive::<t::Date32Type>().value(r) - PG_EPOCH_DAYS);
                }
                DataType::Timestamp(..) => {
                    b.put_i32(8);
                    b.put_i64(
                        c.as_primitive::<t::TimestampMicrosecondType>().value(r) - PG_EPOCH_MICROS,
                    );
                }
                other => {
                    return Err(Error::NotSupported(format!(
                        "binary COPY of a {other} column"
                    )));
                }
            }
        }
        out.push(b.split().freeze());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_read_back_as_text() {
        let mut buf = header().to_vec();
        // (int8 7, NULL text, timestamptz 2000-01-01 00:00:01, date 2000-01-02)
        buf.extend(4i16.to_be_bytes());
        buf.extend(8i32.to_be_bytes());
        buf.extend(7i64.to_be_bytes());
        buf.extend((-1i32).to_be_bytes());
        buf.extend(8i32.to_be_bytes());
        buf.extend(1_000_000i64.to_be_bytes());
        buf.extend(4i32.to_be_bytes());
        buf.extend(1i32.to_be_bytes());
        buf.extend((-1i16).to_be_bytes());
        let types = [
            DataType::Int64,
            DataType::Utf8,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::Date32,
        ];
        let mut rows = vec![];
        let mut r = Reader::default();
        // Fed in two pieces: the first holds half a tuple.
        let used = r.parse(&buf[..30], &types, &mut rows).unwrap();
        assert_eq!(used, 19);
        assert!(rows.is_empty());
        r.parse(&buf[used..], &types, &mut rows).unwrap();
        assert!(r.ended);
        assert_eq!(
            rows,
            vec![vec![
                Some("7".to_string()),
                None,
                Some("2000-01-01 00:00:01.000000+00:00".to_string()),
                Some("2000-01-02".to_string()),
            ]]
        );
        assert!(
            Reader::default()
                .parse(b"PGCOPY\nXXXXXXXXXXXXXXXXX", &types, &mut rows)
                .is_err()
        );
    }
}
