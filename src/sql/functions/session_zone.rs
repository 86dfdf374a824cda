//! `date_trunc` and `date_part` / `extract` on `timestamptz` in the session time
//! zone, as PostgreSQL computes them (`date_trunc('day', t)` under
//! `TimeZone = 'Europe/Berlin'` is Berlin's midnight): DataFusion's own functions
//! work in the zone of the value's type, which is always UTC for stored columns.
//! `date_part` is float8 with fractional seconds, and `AT TIME ZONE` converts
//! between timestamptz and wall-clock timestamp, as in PostgreSQL;
//! `make_timestamptz` reads its fields as wall-clock time in the session zone (or
//! the one given).

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::error::Result;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// Wraps one of DataFusion's functions: `timestamptz` arguments are re-zoned to the
/// session time zone (the same instants) before it runs, and a `timestamptz` result
/// gets its planned zone back.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct InSessionZone {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for InSessionZone {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if self.is_date_part() {
            return Ok(DataType::Float64);
        }
        self.inner.return_type(args)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let f = self.inner.return_field_from_args(args)?;
        if self.is_date_part() {
            return Ok(Arc::new(
                f.as_ref().clone().with_data_type(DataType::Float64),
            ));
        }
        Ok(f)
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(args)
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let want = args.return_field.data_type().clone();
        let zone = args.config_options.execution.time_zone.clone();
        if let Some(zone) = zone.filter(|z| !z.eq_ignore_ascii_case("UTC")) {
            if let DataType::Timestamp(unit, Some(_)) = &want {
                let dt = DataType::Timestamp(*unit, Some(Arc::from(zone.as_str())));
                args.return_field = Arc::new(args.return_field.as_ref().clone().with_data_type(dt));
            }
            for (arg, field) in args.args.iter_mut().zip(args.arg_fields.iter_mut()) {
                if let DataType::Timestamp(unit, Some(tz)) = field.data_type()
                    && tz.as_ref() != zone
                {
                    let dt = DataType::Timestamp(*unit, Some(Arc::from(zone.as_str())));
                    *arg = arg.cast_to(&dt, None)?;
                    *field = Arc::new(field.as_ref().clone().with_data_type(dt));
                }
            }
        }
        if self.is_date_part() {
            return date_part_float(&self.inner, args);
        }
        let out = self.inner.invoke_with_args(args)?;
        match &want {
            DataType::Timestamp(_, Some(_)) if out.data_type() != want => out.cast_to(&want, None),
            _ => Ok(out),
        }
    }
}

impl InSessionZone {
    fn is_date_part(&self) -> bool {
        self.inner.name() == "date_part"
    }
}

/// `date_part` as PostgreSQL has it: float8, with the fraction of a second in
/// `second` and `milliseconds` (DataFusion's are integers: 59 for 59.999999).
fn date_part_float(inner: &ScalarUDF, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    use datafusion::common::ScalarValue;
    let part = match args.args.first() {
        Some(ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(p))
            | ScalarValue::LargeUtf8(Some(p))
            | ScalarValue::Utf8View(Some(p)),
        )) => p.to_ascii_lowercase(),
        _ => String::new(),
    };
    let divisor = match part.trim() {
        "second" | "seconds" | "s" | "sec" | "secs" => Some(1e6),
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => Some(1e3),
        _ => None,
    };
    if divisor.is_some() {
        args.args[0] = ColumnarValue::Scalar(ScalarValue::Utf8(Some("microsecond".into())));
    }
    let n = args.number_rows;
    let planned = {
        let scalars: Vec<Option<&ScalarValue>> = args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Scalar(v) => Some(v),
                ColumnarValue::Array(_) => None,
            })
            .collect();
        inner.return_field_from_args(ReturnFieldArgs {
            arg_fields: &args.arg_fields,
            scalar_arguments: &scalars,
        })?
    };
    args.return_field = planned;
    let out = inner
        .invoke_with_args(args)?
        .cast_to(&DataType::Float64, None)?;
    let Some(d) = divisor else {
        return Ok(out);
    };
    let arr = out.into_array(n)?;
    let f = arrow::array::AsArray::as_primitive::<arrow::datatypes::Float64Type>(&arr);
    let scaled: arrow::array::Float64Array = f.unary(|v| v / d);
    Ok(ColumnarValue::Array(Arc::new(scaled)))
}

/// Replaces DataFusion's `date_trunc` and `date_part` in `ctx` by their
/// session-zone forms.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::from(AtTimeZone::default()));
    ctx.register_udf(ScalarUDF::from(MakeTimestamptz::default()));
    for name in ["date_trunc", "date_part"] {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(InSessionZone { inner }));
        }
    }
}

/// `ts AT TIME ZONE zone` (PostgreSQL's `timezone(zone, ts)`): a `timestamptz`
/// becomes the wall-clock `timestamp` in `zone`; a `timestamp` is read as wall-clock
/// time in `zone` and becomes a `timestamptz`. (DataFusion only relabels the zone
/// of a timestamptz, which PostgreSQL never does.)
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AtTimeZone {
    signature: Signature,
}

impl Default for AtTimeZone {
    fn default() -> Self {
        AtTimeZone {
            signature: Signature::user_defined(datafusion::logical_expr::Volatility::Immutable),
        }
    }
}

fn micros(zone_aware: bool) -> DataType {
    use arrow::datatypes::TimeUnit;
    if zone_aware {
        DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
    } else {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }
}

/// A zone name (`Europe/Berlin`, `UTC`) or offset (`+02:00`).
enum Zone {
    Named(chrono_tz::Tz),
    Fixed(chrono::FixedOffset),
}

fn zone_of(name: &str) -> Result<Zone> {
    if let Ok(z) = name.parse::<chrono_tz::Tz>() {
        return Ok(Zone::Named(z));
    }
    // A bare offset is POSIX-style in PostgreSQL: '+05:30' is west of Greenwich.
    if let Some(o) = super::pgtext::parse_offset(name)
        && let Some(west) = chrono::FixedOffset::east_opt(-o.local_minus_utc())
    {
        return Ok(Zone::Fixed(west));
    }
    Err(crate::Error::sql("22023", format!("time zone \"{name}\" not recognized")).into())
}

impl ScalarUDFImpl for AtTimeZone {
    fn name(&self) -> &str {
        "timezone"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [_, DataType::Timestamp(_, tz)] => Ok(vec![DataType::Utf8, micros(tz.is_some())]),
            [_, DataType::Date32] => Ok(vec![DataType::Utf8, micros(false)]),
            // An untyped literal is a timestamptz, as PostgreSQL resolves it.
            [_, _] => Ok(vec![DataType::Utf8, micros(true)]),
            _ => datafusion::common::plan_err!("timezone(zone, timestamp) takes two arguments"),
        }
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(micros(!matches!(
            args.get(1),
            Some(DataType::Timestamp(_, Some(_)))
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::array::{Array, AsArray, TimestampMicrosecondArray};
        use chrono::{Offset, TimeZone};
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let zones = arrays[0].as_string::<i32>();
        let ts = &arrays[1];
        let aware = matches!(ts.data_type(), DataType::Timestamp(_, Some(_)));
        let ts = ts.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            if zones.is_null(i) || ts.is_null(i) {
                out.push(None);
                continue;
            }
            let zone = zone_of(zones.value(i))?;
            let bad = || crate::Error::sql("22008", "timestamp out of range");
            let v = ts.value(i);
            let at = chrono::DateTime::from_timestamp_micros(v).ok_or_else(bad)?;
            let shifted = if aware {
                // UTC instant → wall clock in the zone.
                let offset = match &zone {
                    Zone::Named(z) => z.offset_from_utc_datetime(&at.naive_utc()).fix(),
                    Zone::Fixed(o) => *o,
                };
                v + i64::from(offset.local_minus_utc()) * 1_000_000
            } else {
                // Wall clock in the zone → UTC instant.
                let local = at.naive_utc();
                let offset = match &zone {
                    Zone::Named(z) => z
                        .offset_from_local_datetime(&local)
                        .earliest()
                        .map(|o| o.fix())
                        .unwrap_or_else(|| z.offset_from_utc_datetime(&local).fix()),
                    Zone::Fixed(o) => *o,
                };
                v - i64::from(offset.local_minus_utc()) * 1_000_000
            };
            out.push(Some(shifted));
        }
        let arr = TimestampMicrosecondArray::from(out);
        let arr: arrow::array::ArrayRef = if aware {
            Arc::new(arr)
        } else {
            Arc::new(arr.with_timezone("UTC"))
        };
        super::columnar(arr, scalar)
    }
}

/// `make_timestamptz(year, month, day, hour, min, sec [, timezone])`: the wall-clock
/// time in `timezone` (the session's when absent), DST resolved as PostgreSQL does.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MakeTimestamptz {
    signature: Signature,
}

impl Default for MakeTimestamptz {
    fn default() -> Self {
        use datafusion::logical_expr::TypeSignature;
        let mut fields = vec![DataType::Int64; 5];
        fields.push(DataType::Float64);
        let mut zoned = fields.clone();
        zoned.push(DataType::Utf8);
        MakeTimestamptz {
            signature: Signature::one_of(
                vec![TypeSignature::Exact(fields), TypeSignature::Exact(zoned)],
                // The session's time zone: not folded into a kept plan.
                datafusion::logical_expr::Volatility::Stable,
            ),
        }
    }
}

/// Wall-clock microseconds since the epoch of PostgreSQL's date and time fields.
fn local_micros(y: i64, mo: i64, d: i64, h: i64, mi: i64, sec: f64) -> Result<i64> {
    use chrono::NaiveDate;
    // PostgreSQL's year -44 is 44 BC: astronomical year -43.
    let year = if y < 0 { y + 1 } else { y };
    let date = i32::try_from(year)
        .ok()
        .zip(u32::try_from(mo).ok())
        .zip(u32::try_from(d).ok())
        .filter(|_| y != 0)
        .and_then(|((y, m), d)| NaiveDate::from_ymd_opt(y, m, d))
        .ok_or_else(|| {
            crate::Error::sql(
                "22008",
                format!("date field value out of range: {y}-{mo:02}-{d:02}"),
            )
        })?;
    let micros = (sec * 1e6).round_ties_even();
    let time_ok = (0..=24).contains(&h)
        && (0..60).contains(&mi)
        && micros.is_finite()
        && (0.0..60e6).contains(&micros)
        && (h < 24 || (mi == 0 && micros == 0.0));
    if !time_ok {
        return Err(crate::Error::sql(
            "22008",
            format!("time field value out of range: {h:02}:{mi:02}:{sec:02}"),
        )
        .into());
    }
    let days = date
        .signed_duration_since(NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default())
        .num_days();
    Ok(days * 86_400_000_000 + h * 3_600_000_000 + mi * 60_000_000 + micros as i64)
}

impl ScalarUDFImpl for MakeTimestamptz {
    fn name(&self) -> &str {
        "make_timestamptz"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(micros(true))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::array::{Array, AsArray};
        use arrow::datatypes::{Float64Type, Int64Type};
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let session = args
            .config_options
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "UTC".into());
        let ints: Vec<_> = arrays[..5]
            .iter()
            .map(|a| a.as_primitive::<Int64Type>())
            .collect();
        let secs = arrays[5].as_primitive::<Float64Type>();
        let zones = arrays.get(6).map(|a| a.as_string::<i32>());
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            if ints.iter().any(|a| a.is_null(i))
                || secs.is_null(i)
                || zones.is_some_and(|z| z.is_null(i))
            {
                out.push(None);
                continue;
            }
            let v = |k: usize| ints[k].value(i);
            let local = local_micros(v(0), v(1), v(2), v(3), v(4), secs.value(i))?;
            let name = zones.map(|z| z.value(i)).unwrap_or(session.as_str());
            // An offset here is ISO's ('+02' is east of Greenwich), unlike AT TIME ZONE.
            let utc = if let Some(o) = super::pgtext::parse_offset(name) {
                local - i64::from(o.local_minus_utc()) * 1_000_000
            } else {
                let tz = name.parse::<chrono_tz::Tz>().map_err(|_| {
                    crate::Error::sql("22023", format!("time zone \"{name}\" not recognized"))
                })?;
                super::time_bucket::from_local(&tz, local)?
            };
            out.push(Some(utc));
        }
        let arr = arrow::array::TimestampMicrosecondArray::from(out).with_timezone("UTC");
        super::columnar(Arc::new(arr), scalar)
    }
}
