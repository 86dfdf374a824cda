//! `time_bucket` with TimescaleDB's semantics and every overload: interval widths on
//! timestamptz, timestamp and date (with origin, offset, or a time zone plus optional
//! origin and offset), and integer widths on int2/int4/int8 with an optional offset.
//! Buckets align to Monday 2000-01-03 by default; month widths count calendar months.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Int64Type, IntervalMonthDayNanoType, TimeUnit, TimestampMicrosecondType,
};
use chrono::{Datelike, NaiveDate, NaiveDateTime, Offset, TimeZone};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// Default origin of sub-month buckets: Monday 2000-01-03 00:00 UTC, in µs.
pub const DEFAULT_ORIGIN: i64 = 946_857_600_000_000;
/// Default origin of month buckets: 2000-01-01 00:00 UTC, in µs.
pub const MONTH_ORIGIN: i64 = 946_684_800_000_000;

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The signatures, for error hints.
const HINT: &str = "time_bucket(bucket_width interval, ts timestamptz|timestamp|date [, origin | \"offset\" interval]), time_bucket(bucket_width interval, ts timestamptz, timezone text [, origin timestamptz [, \"offset\" interval]]), time_bucket(bucket_width int, ts int [, \"offset\" int])";

/// The `time_bucket` scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TimeBucket {
    signature: Signature,
}

impl Default for TimeBucket {
    fn default() -> Self {
        TimeBucket {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn is_time(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
    )
}

fn is_int(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
    )
}

fn is_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null
    )
}

fn no_such(args: &[DataType]) -> Result<Vec<DataType>> {
    let list: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    Err(user_err(
        "42883",
        &format!(
            "function time_bucket({}) does not exist. Hint: {HINT}",
            list.join(", ")
        ),
    ))
}

impl ScalarUDFImpl for TimeBucket {
    fn name(&self) -> &str {
        "time_bucket"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if !(2..=5).contains(&args.len()) {
            return no_such(args);
        }
        // Integer time: every argument takes the type of `ts`.
        if is_int(&args[0]) || (is_int(&args[1]) && args[0] == DataType::Null) {
            if !is_int(&args[1]) || args.len() > 3 {
                return no_such(args);
            }
            let t = match &args[1] {
                DataType::Int8 => DataType::Int16,
                t => t.clone(),
            };
            if args
                .get(2)
                .is_some_and(|a| !is_int(a) && *a != DataType::Null)
            {
                return no_such(args);
            }
            return Ok(vec![t; args.len()]);
        }
        let iv = DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano);
        let tstz = DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")));
        let width = match &args[0] {
            DataType::Interval(_) => iv.clone(),
            t if is_text(t) => iv.clone(),
            _ => return no_such(args),
        };
        let ts = match &args[1] {
            t if is_time(t) => t.clone(),
            t if is_text(t) => tstz.clone(),
            _ => return no_such(args),
        };
        let mut out = vec![width, ts.clone()];
        let tz_form = args.len() > 3
            || matches!(
                (&args[1], args.get(2)),
                (
                    DataType::Timestamp(_, Some(_)),
                    Some(DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
                )
            );
        if tz_form {
            if !matches!(ts, DataType::Timestamp(_, Some(_))) || !is_text(&args[2]) {
                return no_such(args);
            }
            out.push(DataType::Utf8);
            if let Some(o) = args.get(3) {
                if !(is_time(o) || is_text(o)) {
                    return no_such(args);
                }
                out.push(tstz.clone());
            }
            if let Some(o) = args.get(4) {
                if !(matches!(o, DataType::Interval(_)) || is_text(o)) {
                    return no_such(args);
                }
                out.push(iv);
            }
            return Ok(out);
        }
        if let Some(third) = args.get(2) {
            out.push(match third {
                DataType::Interval(_) => iv,
                t if is_time(t) || is_text(t) => ts,
                _ => return no_such(args),
            });
        }
        Ok(out)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args.get(1).cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let is_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out_type = arrays[1].data_type().clone();
        if is_int(&out_type) {
            let result = int_buckets(&arrays)?;
            return super::columnar(cast(&result, &out_type)?, is_scalar && rows <= 1);
        }
        let widths = arrays[0].as_primitive::<IntervalMonthDayNanoType>();
        if matches!(out_type, DataType::Date32 | DataType::Date64)
            && widths
                .iter()
                .flatten()
                .any(|w| w.nanoseconds % (MICROS_PER_DAY * 1000) != 0)
        {
            return Err(user_err(
                "0A000",
                "interval must not have sub-day precision",
            ));
        }
        let ts = to_micros(&arrays[1])?;
        let zones = match arrays.get(2) {
            Some(a) if matches!(a.data_type(), DataType::Utf8) => Some(a.as_string::<i32>()),
            _ => None,
        };
        let (origins, offsets) = if zones.is_some() {
            (
                arrays.get(3).map(to_micros).transpose()?,
                arrays
                    .get(4)
                    .map(|a| a.as_primitive::<IntervalMonthDayNanoType>().clone()),
            )
        } else {
            match arrays.get(2) {
                Some(a) if matches!(a.data_type(), DataType::Interval(_)) => (
                    None,
                    Some(a.as_primitive::<IntervalMonthDayNanoType>().clone()),
                ),
                Some(a) => (Some(to_micros(a)?), None),
                None => (None, None),
            }
        };
        // Without a time zone every argument is required (STRICT); with one, origin and
        // offset may be NULL (absent).
        let strict = zones.is_none();
        let mut zone_cache: Option<(String, chrono_tz::Tz)> = None;
        let mut out: Vec<Option<i64>> = Vec::with_capacity(ts.len());
        for i in 0..ts.len() {
            if ts.is_null(i) || widths.is_null(i) {
                out.push(None);
                continue;
            }
            let w = widths.value(i);
            let origin = match &origins {
                Some(o) if o.is_null(i) && strict => {
                    out.push(None);
                    continue;
                }
                Some(o) if o.is_null(i) => None,
                Some(o) => Some(o.value(i)),
                None => None,
            };
            let offset = match &offsets {
                Some(o) if o.is_null(i) && strict => {
                    out.push(None);
                    continue;
                }
                Some(o) if o.is_null(i) => None,
                Some(o) => Some(o.value(i)),
                None => None,
            };
            let offset = match offset {
                Some(o) if o.months != 0 => {
                    return Err(user_err(
                        "0A000",
                        "time_bucket offset cannot have a month component",
                    ));
                }
                Some(o) => o.days as i64 * MICROS_PER_DAY + o.nanoseconds / 1000,
                None => 0,
            };
            let Some(zones) = zones else {
                out.push(Some(bucket(
                    w.months,
                    w.days,
                    w.nanoseconds,
                    ts.value(i),
                    origin,
                    offset,
                )?));
                continue;
            };
            if zones.is_null(i) {
                out.push(None);
                continue;
            }
            let name = zones.value(i);
            let tz = match &zone_cache {
                Some((n, tz)) if n == name => *tz,
                _ => match parse_zone(name) {
                    Ok(tz) => {
                        zone_cache = Some((name.to_string(), tz));
                        tz
                    }
                    // `time_bucket(w, ts, '2024-01-01')`: a quoted origin, not a zone.
                    Err(e) => match (arrays.len(), parse_origin(name)) {
                        (3, Some(o)) => {
                            out.push(Some(bucket(
                                w.months,
                                w.days,
                                w.nanoseconds,
                                ts.value(i),
                                Some(o),
                                0,
                            )?));
                            continue;
                        }
                        _ => return Err(e),
                    },
                },
            };
            out.push(Some(bucket_in_zone(
                &tz,
                w.months,
                w.days,
                w.nanoseconds,
                ts.value(i),
                origin,
                offset,
            )?));
        }
        let arr: ArrayRef = Arc::new(TimestampMicrosecondArray::from(out));
        let result = cast(&arr, &out_type)?;
        super::columnar(result, is_scalar && rows <= 1)
    }
}

/// Integer `time_bucket(width, ts [, offset])`, computed in i64.
fn int_buckets(arrays: &[ArrayRef]) -> Result<ArrayRef> {
    let as_i64 = |a: &ArrayRef| -> Result<Int64Array> {
        Ok(cast(a, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .clone())
    };
    let widths = as_i64(&arrays[0])?;
    let ts = as_i64(&arrays[1])?;
    let offsets = arrays.get(2).map(as_i64).transpose()?;
    let mut out = Vec::with_capacity(ts.len());
    for i in 0..ts.len() {
        if widths.is_null(i) || ts.is_null(i) || offsets.as_ref().is_some_and(|o| o.is_null(i)) {
            out.push(None);
            continue;
        }
        let period = widths.value(i);
        if period <= 0 {
            return Err(user_err("22023", "period must be greater than 0"));
        }
        let offset = offsets.as_ref().map(|o| o.value(i) % period).unwrap_or(0);
        let shifted = ts
            .value(i)
            .checked_sub(offset)
            .ok_or_else(|| user_err("22008", "timestamp out of range"))?;
        let b = shifted.div_euclid(period) * period;
        out.push(Some(
            b.checked_add(offset)
                .ok_or_else(|| user_err("22008", "timestamp out of range"))?,
        ));
    }
    Ok(Arc::new(Int64Array::from(out)))
}

/// A time zone name as PostgreSQL accepts it (IANA names, `UTC`, case-insensitive).
pub fn parse_zone(name: &str) -> Result<chrono_tz::Tz> {
    name.parse::<chrono_tz::Tz>()
        .or_else(|_| chrono_tz::Tz::from_str_insensitive(name))
        .map_err(|_| user_err("22023", &format!("time zone \"{name}\" not recognized")))
}

/// A quoted origin timestamp (UTC unless it names an offset), in µs.
fn parse_origin(text: &str) -> Option<i64> {
    let mut text = text.to_string();
    crate::interval::complete_seconds(&mut text);
    let arr: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![text]));
    let c = cast(
        &arr,
        &DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
    )
    .ok()?;
    let c = c.as_primitive::<TimestampMicrosecondType>();
    (!c.is_null(0)).then(|| c.value(0))
}

/// UTC µs → the same instant's wall-clock time in `tz`, as µs since the epoch.
pub fn to_local(tz: &chrono_tz::Tz, utc: i64) -> Result<i64> {
    let dt = chrono::DateTime::from_timestamp_micros(utc)
        .ok_or_else(|| user_err("22008", "timestamp out of range"))?;
    let off = tz.offset_from_utc_datetime(&dt.naive_utc()).fix();
    Ok(utc + off.local_minus_utc() as i64 * 1_000_000)
}

/// Wall-clock µs in `tz` → UTC µs, resolving DST like PostgreSQL: a time skipped by a
/// spring-forward gap uses the offset from before the gap, an ambiguous fall-back time
/// the offset from after it.
pub fn from_local(tz: &chrono_tz::Tz, local: i64) -> Result<i64> {
    let naive = chrono::DateTime::from_timestamp_micros(local)
        .ok_or_else(|| user_err("22008", "timestamp out of range"))?
        .naive_utc();
    let off = match tz.offset_from_local_datetime(&naive) {
        chrono::LocalResult::Single(o) => o.fix(),
        chrono::LocalResult::Ambiguous(_, later) => later.fix(),
        chrono::LocalResult::None => {
            let before = naive - chrono::Duration::hours(3);
            tz.offset_from_utc_datetime(&before).fix()
        }
    };
    Ok(local - off.local_minus_utc() as i64 * 1_000_000)
}

fn to_micros(a: &ArrayRef) -> Result<arrow::array::PrimitiveArray<TimestampMicrosecondType>> {
    let c = cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    Ok(c.as_primitive::<TimestampMicrosecondType>().clone())
}

/// A client error with a SQLSTATE, carried through DataFusion.
fn user_err(code: &'static str, msg: &str) -> datafusion::error::DataFusionError {
    crate::Error::sql(code, msg).into()
}

/// Start of the bucket holding `ts` (all values in µs since the epoch, UTC).
pub fn bucket(
    months: i32,
    days: i32,
    nanos: i64,
    ts: i64,
    origin: Option<i64>,
    offset: i64,
) -> Result<i64> {
    if months != 0 {
        if days != 0 || nanos != 0 {
            return Err(user_err(
                "0A000",
                "month intervals cannot have day or time component",
            ));
        }
        if months < 0 {
            return Err(user_err("22023", "period must be greater than 0"));
        }
        // TimescaleDB uses only the origin's month: month buckets start on the 1st.
        let origin = origin.unwrap_or(MONTH_ORIGIN);
        let (oy, om, _) = split_month(origin)?;
        let orest = 0;
        let (y, m, rest) = split_month(ts - offset)?;
        let mut diff = (y * 12 + m) - (oy * 12 + om);
        if rest < orest {
            diff -= 1;
        }
        let b = diff.div_euclid(months as i64) * months as i64;
        let total = oy * 12 + om + b;
        let start = month_start(total.div_euclid(12), total.rem_euclid(12))? + orest;
        return Ok(start + offset);
    }
    let period = days as i64 * MICROS_PER_DAY + nanos / 1000;
    if period <= 0 {
        return Err(user_err("22023", "period must be greater than 0"));
    }
    let origin = origin.unwrap_or(DEFAULT_ORIGIN);
    let shifted = ts - offset;
    let b = (shifted - origin).div_euclid(period) * period + origin;
    Ok(b + offset)
}

/// Start of the bucket holding `ts` when buckets are cut in time zone `tz`, as
/// TimescaleDB 2.28 does: the offset is taken off in UTC, the local wall-clock time
/// is bucketed (origin taken as local time too) and converted back, and a bucket
/// that would start after `ts` (an ambiguous fall-back hour read as standard time)
/// steps back one period.
pub fn bucket_in_zone(
    tz: &chrono_tz::Tz,
    months: i32,
    days: i32,
    nanos: i64,
    ts: i64,
    origin: Option<i64>,
    offset: i64,
) -> Result<i64> {
    let shifted = ts.saturating_sub(offset);
    let local = to_local(tz, shifted)?;
    let origin = origin.map(|o| to_local(tz, o)).transpose()?;
    let b = bucket(months, days, nanos, local, origin, 0)?;
    let mut start = from_local(tz, b)?;
    let period = i64::from(days)
        .saturating_mul(MICROS_PER_DAY)
        .saturating_add(nanos / 1000);
    if months == 0 && period > 0 {
        while start > shifted {
            start -= period;
        }
    }
    Ok(start.saturating_add(offset))
}

/// (year, month0, µs since the start of that month).
fn split_month(ts: i64) -> Result<(i64, i64, i64)> {
    let dt = chrono::DateTime::from_timestamp_micros(ts)
        .ok_or_else(|| user_err("22008", "timestamp out of range"))?
        .naive_utc();
    let start = month_start(dt.year() as i64, dt.month0() as i64)?;
    Ok((dt.year() as i64, dt.month0() as i64, ts - start))
}

fn month_start(year: i64, month0: i64) -> Result<i64> {
    let d = NaiveDate::from_ymd_opt(year as i32, month0 as u32 + 1, 1)
        .ok_or_else(|| user_err("22008", "timestamp out of range"))?;
    let dt: NaiveDateTime = d.and_hms_opt(0, 0, 0).unwrap_or_default();
    Ok(dt.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> i64 {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc()
            .timestamp_micros()
    }

    #[test]
    fn weeks_align_to_monday_2000_01_03() {
        let week = 7 * MICROS_PER_DAY;
        // 2024-01-10 is a Wednesday; its week starts Monday 2024-01-08.
        let b = bucket(0, 0, week * 1000, ts("2024-01-10 12:00:00"), None, 0).unwrap();
        assert_eq!(b, ts("2024-01-08 00:00:00"));
        let b = bucket(0, 7, 0, ts("2024-01-07 23:59:59"), None, 0).unwrap();
        assert_eq!(b, ts("2024-01-01 00:00:00"));
    }

    #[test]
    fn months_and_offsets() {
        let b = bucket(1, 0, 0, ts("2024-03-17 05:00:00"), None, 0).unwrap();
        assert_eq!(b, ts("2024-03-01 00:00:00"));
        let b = bucket(3, 0, 0, ts("2024-05-17 05:00:00"), None, 0).unwrap();
        assert_eq!(b, ts("2024-04-01 00:00:00"));
        let b = bucket(0, 0, 900_000_000_000, ts("2024-01-01 10:07:00"), None, 0).unwrap();
        assert_eq!(b, ts("2024-01-01 10:00:00"));
        // 1 hour buckets shifted by 15 minutes
        let b = bucket(
            0,
            0,
            3_600_000_000_000,
            ts("2024-01-01 10:07:00"),
            None,
            900_000_000,
        )
        .unwrap();
        assert_eq!(b, ts("2024-01-01 09:15:00"));
        // before the origin
        let b = bucket(0, 1, 0, ts("1999-12-31 10:00:00"), None, 0).unwrap();
        assert_eq!(b, ts("1999-12-31 00:00:00"));
        assert!(bucket(1, 1, 0, 0, None, 0).is_err());
    }
}
