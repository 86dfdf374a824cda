//! PostgreSQL functions DataFusion lacks, with PostgreSQL's results: `age`,
//! `make_interval`, interval times or divided by a number (`interval_mul` /
//! `interval_div`, planned for `*` and `/`), `pg_typeof`, `pg_sleep`,
//! `variance` (= `var_samp`) and `justify_days` / `justify_hours` /
//! `justify_interval`. Numeric arithmetic is in [`super::numeric`].

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use arrow::datatypes::{
    DataType, Field, FieldRef, IntervalMonthDayNano, IntervalUnit, TimeUnit, i256,
};
use chrono::{Datelike, NaiveDateTime, Timelike};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, ColumnarValue, EmitTo, GroupsAccumulator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;

use super::sql_error;

fn interval_type() -> DataType {
    DataType::Interval(IntervalUnit::MonthDayNano)
}

fn out_of_range() -> DataFusionError {
    sql_error("22008", "interval out of range")
}

/// `rint(x * 1e6) / 1e6`: PostgreSQL's TSROUND.
fn tsround(x: f64) -> f64 {
    (x * 1e6).round_ties_even() / 1e6
}

/// PostgreSQL's `interval_mul` (`divide`: `interval_div`): months and days scale
/// separately, their fractional parts carry down (30 days a month, 24 hours a day).
fn scale_interval(
    span: IntervalMonthDayNano,
    factor: f64,
    divide: bool,
) -> Result<IntervalMonthDayNano> {
    scale_parts(
        span.months,
        span.days,
        span.nanoseconds / 1000,
        factor,
        divide,
    )
}

/// [`scale_interval`] of an interval given as months, days and microseconds (a sum
/// of intervals whose nanoseconds may not fit 64 bits).
pub(super) fn scale_parts(
    span_months: i32,
    span_days: i32,
    span_micros: i64,
    factor: f64,
    divide: bool,
) -> Result<IntervalMonthDayNano> {
    if divide && factor == 0.0 {
        return Err(sql_error("22012", "division by zero"));
    }
    let apply = |x: f64| if divide { x / factor } else { x * factor };
    let months = apply(f64::from(span_months));
    if !months.is_finite() || months.abs() >= i32::MAX as f64 {
        return Err(out_of_range());
    }
    let days = apply(f64::from(span_days));
    if !days.is_finite() || days.abs() >= i32::MAX as f64 {
        return Err(out_of_range());
    }
    let (rmonth, rday) = (months.trunc(), days.trunc());
    let month_rem_days = tsround((months - rmonth) * 30.0);
    let mut sec_rem = tsround((days - rday + month_rem_days - month_rem_days.trunc()) * 86_400.0);
    let mut day = rday as i64;
    if sec_rem.abs() >= 86_400.0 {
        let whole = (sec_rem / 86_400.0).trunc();
        day += whole as i64;
        sec_rem -= whole * 86_400.0;
    }
    day += month_rem_days.trunc() as i64;
    let micros = (apply(span_micros as f64) + sec_rem * 1e6).round_ties_even();
    if !micros.is_finite() || micros.abs() >= i64::MAX as f64 / 1000.0 {
        return Err(out_of_range());
    }
    let day = i32::try_from(day).map_err(|_| out_of_range())?;
    Ok(IntervalMonthDayNano::new(
        rmonth as i32,
        day,
        micros as i64 * 1000,
    ))
}

/// `interval * number` / `interval / number`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalScale {
    divide: bool,
    signature: Signature,
}

impl IntervalScale {
    pub fn new(divide: bool) -> IntervalScale {
        IntervalScale {
            divide,
            signature: Signature::exact(
                vec![interval_type(), DataType::Float64],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for IntervalScale {
    fn name(&self) -> &str {
        if self.divide {
            "interval_div"
        } else {
            "interval_mul"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(interval_type())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (arrays, scalar) = super::arrays_of(&args)?;
        let spans = arrays[0].as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
        let factors = arrays[1].as_primitive::<arrow::datatypes::Float64Type>();
        let mut out = Vec::with_capacity(spans.len());
        for i in 0..spans.len() {
            out.push(if spans.is_null(i) || factors.is_null(i) {
                None
            } else {
                Some(scale_interval(
                    spans.value(i),
                    factors.value(i),
                    self.divide,
                )?)
            });
        }
        super::columnar(Arc::new(IntervalMonthDayNanoArray::from(out)), scalar)
    }
}

/// `make_interval(years, months, weeks, days, hours, mins, secs)` (arguments by
/// position; named ones are put in place before planning).
#[derive(Debug, PartialEq, Eq, Hash)]
struct MakeInterval {
    signature: Signature,
}

impl ScalarUDFImpl for MakeInterval {
    fn name(&self) -> &str {
        "make_interval"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(interval_type())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (cols, scalar) = super::arrays_of(&args)?;
        let mut out = Vec::with_capacity(n);
        for row in 0..n {
            let mut v = [0f64; 7];
            let mut null = false;
            for (i, c) in cols.iter().enumerate().take(7) {
                if c.is_null(row) {
                    null = true;
                } else {
                    v[i] = c.as_primitive::<arrow::datatypes::Float64Type>().value(row);
                }
            }
            if null {
                out.push(None);
                continue;
            }
            let months = v[0] * 12.0 + v[1];
            let days = v[2] * 7.0 + v[3];
            let micros = ((v[4] * 3600.0 + v[5] * 60.0 + v[6]) * 1e6).round_ties_even();
            if months.abs() > i32::MAX as f64 || days.abs() > i32::MAX as f64 || !micros.is_finite()
            {
                return Err(out_of_range());
            }
            out.push(Some(IntervalMonthDayNano::new(
                months as i32,
                days as i32,
                (micros as i64).saturating_mul(1000),
            )));
        }
        super::columnar(Arc::new(IntervalMonthDayNanoArray::from(out)), scalar)
    }
}

fn days_in_month(year: i32, month: u32) -> i64 {
    let (ny, nm) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let first = chrono::NaiveDate::from_ymd_opt(year, month, 1);
    let next = chrono::NaiveDate::from_ymd_opt(ny, nm, 1);
    match (first, next) {
        (Some(a), Some(b)) => (b - a).num_days(),
        _ => 30,
    }
}

/// PostgreSQL's symbolic difference `a - b` in years, months, days and time, of two
/// local date-times (`timestamp_age`).
fn age(a: NaiveDateTime, b: NaiveDateTime) -> IntervalMonthDayNano {
    let neg = a < b;
    let f = |x: i64| if neg { -x } else { x };
    let mut usec =
        f(a.and_utc().timestamp_subsec_micros() as i64
            - b.and_utc().timestamp_subsec_micros() as i64);
    let mut sec = f(a.second() as i64 - b.second() as i64);
    let mut min = f(a.minute() as i64 - b.minute() as i64);
    let mut hour = f(a.hour() as i64 - b.hour() as i64);
    let mut mday = f(a.day() as i64 - b.day() as i64);
    let mut mon = f(a.month() as i64 - b.month() as i64);
    let mut year = f(a.year() as i64 - b.year() as i64);
    while usec < 0 {
        usec += 1_000_000;
        sec -= 1;
    }
    while sec < 0 {
        sec += 60;
        min -= 1;
    }
    while min < 0 {
        min += 60;
        hour -= 1;
    }
    while hour < 0 {
        hour += 24;
        mday -= 1;
    }
    while mday < 0 {
        let from = if neg { a } else { b };
        mday += days_in_month(from.year(), from.month());
        mon -= 1;
    }
    while mon < 0 {
        mon += 12;
        year -= 1;
    }
    let g = |x: i64| if neg { -x } else { x };
    let micros = g(((hour * 60 + min) * 60 + sec) * 1_000_000 + usec);
    IntervalMonthDayNano::new(
        g(year * 12 + mon) as i32,
        g(mday) as i32,
        micros.saturating_mul(1000),
    )
}

/// `age(timestamptz, timestamptz)` and `age(timestamptz)` (from midnight today), in
/// the session time zone.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Age {
    signature: Signature,
}

impl ScalarUDFImpl for Age {
    fn name(&self) -> &str {
        "age"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(interval_type())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let (arrays, scalar) = super::arrays_of(&args)?;
        let zone = args
            .config_options
            .execution
            .time_zone
            .clone()
            .unwrap_or_else(|| "UTC".into());
        let tz: chrono_tz::Tz = zone.parse().unwrap_or(chrono_tz::UTC);
        let offset: Option<chrono::FixedOffset> = zone.parse().ok();
        let local = |micros: i64| -> Option<NaiveDateTime> {
            let utc = chrono::DateTime::from_timestamp_micros(micros)?;
            Some(match offset {
                Some(o) if zone.starts_with(['+', '-']) => utc.with_timezone(&o).naive_local(),
                _ => utc.with_timezone(&tz).naive_local(),
            })
        };
        let micros: Vec<ArrayRef> = arrays
            .iter()
            .map(|a| {
                arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))
                    .map_err(DataFusionError::from)
            })
            .collect::<Result<_>>()?;
        let today = {
            let now = chrono::Utc::now().timestamp_micros();
            local(now).map(|d| d.date().and_hms_opt(0, 0, 0).unwrap_or(d))
        };
        let mut out = Vec::with_capacity(n);
        for row in 0..n {
            let get = |i: usize| -> Option<NaiveDateTime> {
                let a = micros[i].as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
                if a.is_null(row) {
                    return None;
                }
                // A timestamp without time zone is already local.
                match arrays[i].data_type() {
                    DataType::Timestamp(_, Some(_)) => local(a.value(row)),
                    _ => {
                        chrono::DateTime::from_timestamp_micros(a.value(row)).map(|d| d.naive_utc())
                    }
                }
            };
            let v = match micros.len() {
                1 => today.zip(get(0)).map(|(t, b)| age(t, b)),
                _ => get(0).zip(get(1)).map(|(a, b)| age(a, b)),
            };
            out.push(v);
        }
        super::columnar(Arc::new(IntervalMonthDayNanoArray::from(out)), scalar)
    }
}

/// PostgreSQL's name of an Arrow type, as `pg_typeof` prints it (`integer[]` for a
/// list of int4).
pub fn pg_type_name(t: &DataType) -> std::borrow::Cow<'static, str> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", pg_type_name(f.data_type())).into()
        }
        t => scalar_type_name(t).into(),
    }
}

/// PostgreSQL's name of a non-array Arrow type.
fn scalar_type_name(t: &DataType) -> &'static str {
    match t {
        DataType::Boolean => "boolean",
        DataType::Int16 | DataType::Int8 | DataType::UInt8 => "smallint",
        DataType::Int32 | DataType::UInt16 => "integer",
        // Unsigned 64-bit results (row_number, rank) are sent as int8.
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "bigint",
        DataType::Float32 => "real",
        DataType::Float64 => "double precision",
        DataType::Decimal128(..) | DataType::Decimal256(..) => "numeric",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text",
        DataType::Binary | DataType::LargeBinary => "bytea",
        DataType::Date32 | DataType::Date64 => "date",
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone",
        DataType::Timestamp(_, None) => "timestamp without time zone",
        DataType::Time64(_) | DataType::Time32(_) => "time without time zone",
        DataType::Interval(_) | DataType::Duration(_) => "interval",
        DataType::Null => "unknown",
        _ => "unknown",
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let f = &args.arg_fields[0];
        // A value described as another PostgreSQL type than its Arrow type names.
        let name = match (
            crate::json::Kind::of(f),
            f.metadata().get(crate::query::system::PG_TYPE_KEY),
        ) {
            (Some(kind), _) => kind.pg_name().into(),
            (None, Some(t)) => t.clone().into(),
            (None, None) => pg_type_name(f.data_type()),
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            name.into_owned(),
        ))))
    }
}

/// `num_nulls(VARIADIC "any")` / `num_nonnulls(...)`: how many arguments are NULL
/// (or not), as int4.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NumNulls {
    nulls: bool,
    signature: Signature,
}

impl ScalarUDFImpl for NumNulls {
    fn name(&self) -> &str {
        if self.nulls {
            "num_nulls"
        } else {
            "num_nonnulls"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // Scalars count the same on every row; arrays row by row.
        let mut every_row = 0;
        let mut counts: Option<Vec<i32>> = None;
        for a in &args.args {
            match a {
                ColumnarValue::Scalar(v) => every_row += i32::from(v.is_null() == self.nulls),
                ColumnarValue::Array(arr) => {
                    let c = counts.get_or_insert_with(|| vec![0; args.number_rows]);
                    for (i, c) in c.iter_mut().enumerate() {
                        *c += i32::from(arr.is_null(i) == self.nulls);
                    }
                }
            }
        }
        Ok(match counts {
            None => ColumnarValue::Scalar(ScalarValue::Int32(Some(every_row))),
            Some(c) => ColumnarValue::Array(Arc::new(arrow::array::Int32Array::from_iter_values(
                c.into_iter().map(|n| n + every_row),
            ))),
        })
    }
}

/// `avg` of integers as PostgreSQL computes it: the exact sum divided by the count
/// as a numeric division (`avg(10, 20, 30)` = 20, `avg(1, 2)` = 1.5), not a float.
/// The argument is widened to int8; the sum is an i128, which no table can overflow.
/// The result is a `numeric` without typmod holding PostgreSQL's division scale
/// (20 fraction digits for an average below 1, 24 below 0.0001, ...).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntAvg {
    signature: Signature,
}

impl IntAvg {
    /// The average of a column of type `arg`.
    pub fn of(_arg: &DataType) -> Self {
        IntAvg {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// The average as a mantissa of [`crate::catalog::ANY_NUMERIC`].
fn avg_of(sum: i128, count: i64) -> Result<Option<i256>> {
    if count == 0 {
        return Ok(None);
    }
    super::numeric::numeric_div(
        i256::from_i128(sum),
        0,
        i256::from_i128(i128::from(count)),
        0,
        crate::catalog::ANY_NUMERIC_SCALE as u32,
        crate::catalog::ANY_NUMERIC_PRECISION,
    )
    .map(Some)
}

impl AggregateUDFImpl for IntAvg {
    fn name(&self) -> &str {
        "avg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [t] if t.is_integer() || t.is_null() => Ok(vec![DataType::Int64]),
            _ => exec_err!("avg of integers takes one integer argument"),
        }
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(crate::catalog::ANY_NUMERIC)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[sum]", args.name),
                DataType::Decimal128(38, 0),
                true,
            )),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::Int64,
                true,
            )),
        ])
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::<IntAvgAcc>::default())
    }
    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }
    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::<IntAvgGroups>::default())
    }
}

#[derive(Debug, Default)]
struct IntAvgAcc {
    sum: i128,
    count: i64,
}

impl Accumulator for IntAvgAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = values[0].as_primitive::<arrow::datatypes::Int64Type>();
        self.count += (a.len() - a.null_count()) as i64;
        self.sum += a.iter().flatten().map(i128::from).sum::<i128>();
        Ok(())
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = values[0].as_primitive::<arrow::datatypes::Int64Type>();
        self.count -= (a.len() - a.null_count()) as i64;
        self.sum -= a.iter().flatten().map(i128::from).sum::<i128>();
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Decimal256(
            avg_of(self.sum, self.count)?,
            crate::catalog::ANY_NUMERIC_PRECISION,
            crate::catalog::ANY_NUMERIC_SCALE,
        ))
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Decimal128(Some(self.sum), 38, 0),
            ScalarValue::Int64(Some(self.count)),
        ])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let sums = states[0].as_primitive::<arrow::datatypes::Decimal128Type>();
        let counts = states[1].as_primitive::<arrow::datatypes::Int64Type>();
        for i in 0..sums.len() {
            if sums.is_valid(i) && counts.is_valid(i) {
                self.sum += sums.value(i);
                self.count += counts.value(i);
            }
        }
        Ok(())
    }
}

/// [`IntAvg`] for many groups at once (what grouped queries use).
#[derive(Debug, Default)]
struct IntAvgGroups {
    sums: Vec<i128>,
    counts: Vec<i64>,
}

/// Whether row `i` passes the aggregate's FILTER.
fn passes(filter: Option<&arrow::array::BooleanArray>, i: usize) -> bool {
    filter.is_none_or(|f| f.is_valid(i) && f.value(i))
}

impl IntAvgGroups {
    fn take(&mut self, emit_to: EmitTo) -> (Vec<i128>, Vec<i64>) {
        (
            emit_to.take_needed(&mut self.sums),
            emit_to.take_needed(&mut self.counts),
        )
    }
}

impl GroupsAccumulator for IntAvgGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sums.resize(total_num_groups, 0);
        self.counts.resize(total_num_groups, 0);
        let a = values[0].as_primitive::<arrow::datatypes::Int64Type>();
        if a.null_count() == 0 && opt_filter.is_none() {
            for (&g, &v) in group_indices.iter().zip(a.values().iter()) {
                self.sums[g] += i128::from(v);
                self.counts[g] += 1;
            }
        } else {
            for (i, &g) in group_indices.iter().enumerate() {
                if a.is_valid(i) && passes(opt_filter, i) {
                    self.sums[g] += i128::from(a.value(i));
                    self.counts[g] += 1;
                }
            }
        }
        Ok(())
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let (sums, counts) = self.take(emit_to);
        let out = sums
            .into_iter()
            .zip(counts)
            .map(|(s, c)| avg_of(s, c))
            .collect::<Result<arrow::array::Decimal256Array>>()?
            .with_precision_and_scale(
                crate::catalog::ANY_NUMERIC_PRECISION,
                crate::catalog::ANY_NUMERIC_SCALE,
            )?;
        Ok(Arc::new(out))
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let (sums, counts) = self.take(emit_to);
        let sums = arrow::array::Decimal128Array::from(sums).with_precision_and_scale(38, 0)?;
        Ok(vec![
            Arc::new(sums),
            Arc::new(arrow::array::Int64Array::from(counts)),
        ])
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.sums.resize(total_num_groups, 0);
        self.counts.resize(total_num_groups, 0);
        let sums = values[0].as_primitive::<arrow::datatypes::Decimal128Type>();
        let counts = values[1].as_primitive::<arrow::datatypes::Int64Type>();
        for (i, &g) in group_indices.iter().enumerate() {
            if sums.is_valid(i) && counts.is_valid(i) {
                self.sums[g] += sums.value(i);
                self.counts[g] += counts.value(i);
            }
        }
        Ok(())
    }
    /// Each row as its own state: the value (or 0) and a count of 1 (or 0).
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&arrow::array::BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let a = values[0].as_primitive::<arrow::datatypes::Int64Type>();
        let keep = |i: usize| a.is_valid(i) && passes(opt_filter, i);
        let sums = (0..a.len())
            .map(|i| if keep(i) { i128::from(a.value(i)) } else { 0 })
            .collect::<Vec<_>>();
        let counts = (0..a.len()).map(|i| i64::from(keep(i))).collect::<Vec<_>>();
        let sums = arrow::array::Decimal128Array::from(sums).with_precision_and_scale(38, 0)?;
        Ok(vec![
            Arc::new(sums),
            Arc::new(arrow::array::Int64Array::from(counts)),
        ])
    }
    fn size(&self) -> usize {
        self.sums.capacity() * 16 + self.counts.capacity() * 8
    }
}

/// `pg_cast_id(x)` = `x`: keeps apart names DataFusion would give two expressions
/// that differ only in a cast (see `names::distinguish_casts`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct CastId {
    signature: Signature,
}

impl ScalarUDFImpl for CastId {
    fn name(&self) -> &str {
        "pg_cast_id"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(args.args.swap_remove(0))
    }
}

/// `pg_sleep(seconds)`: waits, then returns void (printed empty).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSleep {
    signature: Signature,
}

impl ScalarUDFImpl for PgSleep {
    fn name(&self) -> &str {
        "pg_sleep"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let secs = match &args.args[0] {
            ColumnarValue::Scalar(ScalarValue::Float64(Some(s))) => *s,
            ColumnarValue::Scalar(_) => 0.0,
            ColumnarValue::Array(_) => {
                return exec_err!("pg_sleep takes a constant number of seconds");
            }
        };
        if secs.is_finite() && secs > 0.0 {
            // Capped so one statement cannot hold a worker thread for long.
            std::thread::sleep(std::time::Duration::from_secs_f64(secs.min(300.0)));
        }
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
            Some(String::new()),
        )))
    }
}

/// Registers the functions of this module in `ctx`.
/// `width_bucket(x, low, high, n)`: which of `n` equal buckets over [low, high)
/// holds `x`; 0 below, `n + 1` at or above `high` (PostgreSQL's; 2201G for a bad n
/// or range).
fn width_bucket(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let n = args
        .iter()
        .map(|a| match a {
            ColumnarValue::Array(a) => a.len(),
            ColumnarValue::Scalar(_) => 1,
        })
        .max()
        .unwrap_or(1);
    let scalar = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
    let arrays = args
        .iter()
        .map(|a| a.to_array(n))
        .collect::<Result<Vec<_>>>()?;
    let f = |i: usize| arrays[i].as_primitive::<arrow::datatypes::Float64Type>();
    let counts = arrays[3].as_primitive::<arrow::datatypes::Int64Type>();
    let (x, lo, hi) = (f(0), f(1), f(2));
    let mut out = Vec::with_capacity(n);
    for r in 0..n {
        if x.is_null(r) || lo.is_null(r) || hi.is_null(r) || counts.is_null(r) {
            out.push(None);
            continue;
        }
        let (v, l, h) = (x.value(r), lo.value(r), hi.value(r));
        let c = i32::try_from(counts.value(r)).unwrap_or(0);
        if c <= 0 {
            return Err(sql_error("2201G", "count must be greater than zero"));
        }
        if l == h || !l.is_finite() || !h.is_finite() {
            return Err(sql_error(
                "2201G",
                "lower bound cannot equal upper bound, nor be infinite",
            ));
        }
        let b = if l < h {
            if v < l {
                0
            } else if v >= h {
                c + 1
            } else {
                (((v - l) / (h - l) * f64::from(c)).floor() as i32 + 1).min(c)
            }
        } else if v > l {
            0
        } else if v <= h {
            c + 1
        } else {
            (((l - v) / (l - h) * f64::from(c)).floor() as i32 + 1).min(c)
        };
        out.push(Some(b));
    }
    super::columnar(Arc::new(arrow::array::Int32Array::from(out)), scalar)
}

/// Which of PostgreSQL's `justify_*` functions.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Justify {
    Hours,
    Days,
    Interval,
}

const NANOS_PER_DAY: i64 = 86_400_000_000_000;
const DAYS_PER_MONTH: i32 = 30;

/// PostgreSQL's `interval_justify_hours` / `_days` / `_interval` (timestamp.c), on
/// months, days and nanoseconds.
fn justify(v: IntervalMonthDayNano, how: Justify) -> Result<IntervalMonthDayNano> {
    let (mut month, mut day, mut time) = (v.months, v.days, v.nanoseconds);
    let add = |a: i32, b: i64| -> Result<i32> {
        i32::try_from(i64::from(a) + b).map_err(|_| out_of_range())
    };
    let whole_days = |day: &mut i32, time: &mut i64| -> Result<()> {
        let whole = *time / NANOS_PER_DAY;
        *time -= whole * NANOS_PER_DAY;
        *day = add(*day, whole)?;
        Ok(())
    };
    let whole_months = |month: &mut i32, day: &mut i32| -> Result<()> {
        let whole = *day / DAYS_PER_MONTH;
        *day -= whole * DAYS_PER_MONTH;
        *month = add(*month, i64::from(whole))?;
        Ok(())
    };
    match how {
        Justify::Hours => whole_days(&mut day, &mut time)?,
        Justify::Days => {
            whole_months(&mut month, &mut day)?;
            if month > 0 && day < 0 {
                day += DAYS_PER_MONTH;
                month -= 1;
            } else if month < 0 && day > 0 {
                day -= DAYS_PER_MONTH;
                month += 1;
            }
        }
        Justify::Interval => {
            if (day > 0 && time > 0) || (day < 0 && time < 0) {
                whole_months(&mut month, &mut day)?;
            }
            whole_days(&mut day, &mut time)?;
            whole_months(&mut month, &mut day)?;
            if month > 0 && (day < 0 || (day == 0 && time < 0)) {
                day += DAYS_PER_MONTH;
                month -= 1;
            } else if month < 0 && (day > 0 || (day == 0 && time > 0)) {
                day -= DAYS_PER_MONTH;
                month += 1;
            }
        }
    }
    if how != Justify::Days {
        if day > 0 && time < 0 {
            time += NANOS_PER_DAY;
            day -= 1;
        } else if day < 0 && time > 0 {
            time -= NANOS_PER_DAY;
            day += 1;
        }
    }
    Ok(IntervalMonthDayNano::new(month, day, time))
}

/// `justify_*(interval)` as a scalar function.
fn justify_udf(name: &str, how: Justify) -> ScalarUDF {
    datafusion::logical_expr::create_udf(
        name,
        vec![interval_type()],
        interval_type(),
        Volatility::Immutable,
        Arc::new(move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
            let scalar = matches!(args[0], ColumnarValue::Scalar(_));
            let a = args[0].to_array(1)?;
            let spans = a.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
            let out = spans
                .iter()
                .map(|v| v.map(|v| justify(v, how)).transpose())
                .collect::<Result<IntervalMonthDayNanoArray>>()?;
            super::columnar(Arc::new(out), scalar)
        }),
    )
}

pub fn register(ctx: &SessionContext) {
    let imm = Volatility::Immutable;
    for nulls in [true, false] {
        ctx.register_udf(ScalarUDF::from(NumNulls {
            nulls,
            signature: Signature::variadic_any(imm),
        }));
    }
    ctx.register_udf(datafusion::logical_expr::create_udf(
        "width_bucket",
        vec![
            DataType::Float64,
            DataType::Float64,
            DataType::Float64,
            DataType::Int64,
        ],
        DataType::Int32,
        imm,
        Arc::new(width_bucket),
    ));
    // Timestamps are always finite here (no 'infinity' values are stored).
    ctx.register_udf(datafusion::logical_expr::create_udf(
        "isfinite",
        vec![DataType::Timestamp(
            TimeUnit::Microsecond,
            Some(Arc::from("UTC")),
        )],
        DataType::Boolean,
        imm,
        Arc::new(|args: &[ColumnarValue]| -> Result<ColumnarValue> {
            Ok(match &args[0] {
                ColumnarValue::Scalar(v) => {
                    ColumnarValue::Scalar(ScalarValue::Boolean((!v.is_null()).then_some(true)))
                }
                ColumnarValue::Array(a) => ColumnarValue::Array(Arc::new(
                    (0..a.len())
                        .map(|i| a.is_valid(i).then_some(true))
                        .collect::<arrow::array::BooleanArray>(),
                )),
            })
        }),
    ));
    if let Ok(f) = ctx.udf("uuid") {
        ctx.register_udf(f.as_ref().clone().with_aliases(["gen_random_uuid"]));
    }
    for (name, how) in [
        ("justify_hours", Justify::Hours),
        ("justify_days", Justify::Days),
        ("justify_interval", Justify::Interval),
    ] {
        ctx.register_udf(justify_udf(name, how));
    }
    let f64s = |n: usize| TypeSignature::Uniform(n, vec![DataType::Float64]);
    ctx.register_udf(ScalarUDF::from(IntervalScale::new(false)));
    ctx.register_udf(ScalarUDF::from(IntervalScale::new(true)));
    ctx.register_udf(ScalarUDF::from(MakeInterval {
        signature: Signature::one_of((1..=7).map(f64s).collect(), imm),
    }));
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")));
    let ts_plain = DataType::Timestamp(TimeUnit::Microsecond, None);
    ctx.register_udf(ScalarUDF::from(Age {
        signature: Signature::one_of(
            vec![
                TypeSignature::Exact(vec![ts.clone(), ts.clone()]),
                TypeSignature::Exact(vec![ts_plain.clone(), ts_plain.clone()]),
                TypeSignature::Exact(vec![ts]),
                TypeSignature::Exact(vec![ts_plain]),
            ],
            Volatility::Stable,
        ),
    }));
    ctx.register_udf(ScalarUDF::from(PgTypeof {
        signature: Signature::any(1, imm),
    }));
    ctx.register_udf(ScalarUDF::from(super::numeric::NumericDiv::default()));
    ctx.register_udf(ScalarUDF::from(super::numeric::NumericMul::default()));
    ctx.register_udf(ScalarUDF::from(super::numeric::IntegerQuotient::default()));
    ctx.register_udf(ScalarUDF::from(CastId {
        signature: Signature::any(1, imm),
    }));
    ctx.register_udf(ScalarUDF::from(PgSleep {
        signature: Signature::uniform(1, vec![DataType::Float64], Volatility::Volatile),
    }));
    super::ordered_set::register(ctx);
    if let Ok(var) = ctx.udaf("var_samp") {
        ctx.register_udaf(var.as_ref().clone().with_aliases(["variance"]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(m: i32, d: i32, secs: f64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(m, d, (secs * 1e9) as i64)
    }

    #[test]
    fn interval_scaling_carries_fractions_down() {
        // PostgreSQL: interval '1 month' * 1.5 = 1 mon 15 days; '1 day' / 2 = 12:00:00
        assert_eq!(
            scale_interval(iv(1, 0, 0.0), 1.5, false).ok(),
            Some(iv(1, 15, 0.0))
        );
        assert_eq!(
            scale_interval(iv(0, 1, 0.0), 2.0, true).ok(),
            Some(iv(0, 0, 43_200.0))
        );
        assert_eq!(
            scale_interval(iv(0, 0, 3600.0), 3.0, true).ok(),
            Some(iv(0, 0, 1200.0))
        );
        assert!(scale_interval(iv(0, 0, 1.0), 0.0, true).is_err());
    }

    #[test]
    fn age_is_symbolic() {
        let d = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        // PostgreSQL: age('2024-03-01', '2024-01-15') = 1 mon 17 days
        assert_eq!(
            age(d("2024-03-01 00:00:00"), d("2024-01-15 00:00:00")),
            iv(1, 17, 0.0)
        );
        // and the other way round: -1 mons -17 days
        assert_eq!(
            age(d("2024-01-15 00:00:00"), d("2024-03-01 00:00:00")),
            iv(-1, -17, 0.0)
        );
        assert_eq!(
            age(d("2024-01-01 10:00:00"), d("2023-12-31 12:30:00")),
            iv(0, 0, 77_400.0)
        );
    }
}

/// A window function whose result PostgreSQL types `integer` where DataFusion's is
/// unsigned 64-bit (`ntile`): the same function, its values as int4.
#[derive(Debug)]
pub struct Int4Window(pub Arc<dyn datafusion::logical_expr::WindowUDFImpl>);

impl PartialEq for Int4Window {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for Int4Window {}

impl std::hash::Hash for Int4Window {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name().hash(state);
    }
}

impl datafusion::logical_expr::WindowUDFImpl for Int4Window {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn signature(&self) -> &Signature {
        self.0.signature()
    }
    fn expressions(
        &self,
        args: datafusion::logical_expr::function::ExpressionArgs,
    ) -> Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
        self.0.expressions(args)
    }
    fn partition_evaluator(
        &self,
        args: datafusion::logical_expr::function::PartitionEvaluatorArgs,
    ) -> Result<Box<dyn datafusion::logical_expr::PartitionEvaluator>> {
        Ok(Box::new(Int4Eval(self.0.partition_evaluator(args)?)))
    }
    fn field(
        &self,
        args: datafusion::logical_expr::function::WindowUDFFieldArgs,
    ) -> Result<FieldRef> {
        let f = self.0.field(args)?;
        Ok(Arc::new(f.as_ref().clone().with_data_type(DataType::Int32)))
    }
    fn sort_options(&self) -> Option<arrow::compute::SortOptions> {
        self.0.sort_options()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.0.coerce_types(arg_types)
    }
    fn reverse_expr(&self) -> datafusion::logical_expr::ReversedUDWF {
        self.0.reverse_expr()
    }
}

/// [`Int4Window`]'s evaluator: the inner one's values cast to int4.
#[derive(Debug)]
struct Int4Eval(Box<dyn datafusion::logical_expr::PartitionEvaluator>);

fn int4(a: ArrayRef) -> Result<ArrayRef> {
    Ok(arrow::compute::cast(&a, &DataType::Int32)?)
}

impl datafusion::logical_expr::PartitionEvaluator for Int4Eval {
    fn memoize(
        &mut self,
        state: &mut datafusion::logical_expr::window_state::WindowAggState,
    ) -> Result<()> {
        self.0.memoize(state)
    }
    fn get_range(&self, idx: usize, n_rows: usize) -> Result<std::ops::Range<usize>> {
        self.0.get_range(idx, n_rows)
    }
    fn is_causal(&self) -> bool {
        self.0.is_causal()
    }
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        int4(self.0.evaluate_all(values, num_rows)?)
    }
    fn evaluate(
        &mut self,
        values: &[ArrayRef],
        range: &std::ops::Range<usize>,
    ) -> Result<ScalarValue> {
        self.0.evaluate(values, range)?.cast_to(&DataType::Int32)
    }
    fn evaluate_all_with_rank(
        &self,
        num_rows: usize,
        ranks_in_partition: &[std::ops::Range<usize>],
    ) -> Result<ArrayRef> {
        int4(
            self.0
                .evaluate_all_with_rank(num_rows, ranks_in_partition)?,
        )
    }
    fn supports_bounded_execution(&self) -> bool {
        self.0.supports_bounded_execution()
    }
    fn uses_window_frame(&self) -> bool {
        self.0.uses_window_frame()
    }
    fn include_rank(&self) -> bool {
        self.0.include_rank()
    }
}
