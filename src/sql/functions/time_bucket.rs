//! `time_bucket(width, ts [, origin | offset])` with TimescaleDB's semantics:
//! buckets aligned to Monday 2000-01-03 by default, month widths counted in
//! calendar months from 2000-01-01, on timestamptz, timestamp and date.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, IntervalMonthDayNanoType, TimeUnit, TimestampMicrosecondType};
use chrono::{Datelike, NaiveDate, NaiveDateTime};
use datafusion::common::plan_err;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// Default origin of sub-month buckets: Monday 2000-01-03 00:00 UTC, in µs.
pub const DEFAULT_ORIGIN: i64 = 946_857_600_000_000;
/// Default origin of month buckets: 2000-01-01 00:00 UTC, in µs.
pub const MONTH_ORIGIN: i64 = 946_684_800_000_000;

const MICROS_PER_DAY: i64 = 86_400_000_000;

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

impl ScalarUDFImpl for TimeBucket {
    fn name(&self) -> &str {
        "time_bucket"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if !(2..=3).contains(&args.len()) {
            return plan_err!(
                "function time_bucket with {} arguments does not exist. Hint: time_bucket(bucket_width interval, ts timestamptz [, origin timestamptz | \"offset\" interval])",
                args.len()
            );
        }
        let iv = DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano);
        let width = match &args[0] {
            DataType::Interval(_)
            | DataType::Utf8
            | DataType::Utf8View
            | DataType::LargeUtf8
            | DataType::Null => iv.clone(),
            other => {
                return plan_err!(
                    "function time_bucket({other}, ...) does not exist. Hint: the bucket width must be an interval"
                );
            }
        };
        let ts = match &args[1] {
            t if is_time(t) => t.clone(),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null => {
                DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
            }
            other => {
                return plan_err!(
                    "function time_bucket(interval, {other}) does not exist. Hint: the second argument must be a timestamptz, timestamp or date"
                );
            }
        };
        let mut out = vec![width, ts.clone()];
        if let Some(third) = args.get(2) {
            out.push(match third {
                DataType::Interval(_) => iv,
                t if is_time(t) => ts,
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null => ts,
                other => {
                    return plan_err!(
                        "function time_bucket(interval, timestamp, {other}) does not exist. Hint: the third argument is an origin (timestamp) or an offset (interval)"
                    );
                }
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
        let widths = arrays[0].as_primitive::<IntervalMonthDayNanoType>();
        let ts = to_micros(&arrays[1])?;
        let (origins, offsets) = match arrays.get(2) {
            Some(a) if matches!(a.data_type(), DataType::Interval(_)) => (
                None,
                Some(a.as_primitive::<IntervalMonthDayNanoType>().clone()),
            ),
            Some(a) => (Some(to_micros(a)?), None),
            None => (None, None),
        };
        let mut out: Vec<Option<i64>> = Vec::with_capacity(ts.len());
        for i in 0..ts.len() {
            if ts.is_null(i) || widths.is_null(i) {
                out.push(None);
                continue;
            }
            let w = widths.value(i);
            let origin = match &origins {
                Some(o) if o.is_null(i) => {
                    out.push(None);
                    continue;
                }
                Some(o) => Some(o.value(i)),
                None => None,
            };
            let offset = match &offsets {
                Some(o) if o.is_null(i) => {
                    out.push(None);
                    continue;
                }
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
            out.push(Some(bucket(
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

fn to_micros(a: &ArrayRef) -> Result<arrow::array::PrimitiveArray<TimestampMicrosecondType>> {
    let c = cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    Ok(c.as_primitive::<TimestampMicrosecondType>().clone())
}

/// A client error with a SQLSTATE, carried through DataFusion.
fn user_err(code: &'static str, msg: &str) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(crate::Error::sql(code, msg)))
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
        let origin = origin.unwrap_or(MONTH_ORIGIN);
        let (oy, om, orest) = split_month(origin)?;
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

/// (year, month0, µs since the start of that month).
fn split_month(ts: i64) -> Result<(i64, i64, i64)> {
    let dt = chrono::DateTime::from_timestamp_micros(ts)
        .ok_or_else(|| {
            datafusion::error::DataFusionError::Execution("timestamp out of range".into())
        })?
        .naive_utc();
    let start = month_start(dt.year() as i64, dt.month0() as i64)?;
    Ok((dt.year() as i64, dt.month0() as i64, ts - start))
}

fn month_start(year: i64, month0: i64) -> Result<i64> {
    let d = NaiveDate::from_ymd_opt(year as i32, month0 as u32 + 1, 1).ok_or_else(|| {
        datafusion::error::DataFusionError::Execution("timestamp out of range".into())
    })?;
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
