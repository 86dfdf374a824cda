//! `generate_series` and `range` in `FROM` as PostgreSQL takes them, over numbers or
//! times: the bounds may be any constant expression (`1e9`, `10 * 1000`,
//! `now() - interval '1 day'`, `'2024-01-01'` beside a typed bound). They are folded
//! and typed when the query is planned, then DataFusion's series table streams the
//! rows, so a long series is never built whole.

use std::sync::Arc;

use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::Expr;

use super::sql_error;

/// A series table function whose arguments are folded to literals first.
#[derive(Debug)]
pub struct Series {
    inner: Arc<dyn TableFunctionImpl>,
    name: &'static str,
}

impl Series {
    pub fn generate_series() -> Series {
        Series {
            inner: Arc::new(datafusion::functions_table::generate_series::GenerateSeriesFunc {}),
            name: "generate_series",
        }
    }

    pub fn range() -> Series {
        Series {
            inner: Arc::new(datafusion::functions_table::generate_series::RangeFunc {}),
            name: "range",
        }
    }
}

impl TableFunctionImpl for Series {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let props = args.session().execution_props();
        let values = args
            .exprs()
            .iter()
            .map(|e| self.value(e, props))
            .collect::<Result<Vec<_>>>()?;
        let values = if values.iter().any(is_time) {
            let zone = args
                .session()
                .config_options()
                .execution
                .time_zone
                .clone()
                .unwrap_or_else(|| "UTC".into());
            self.times(values, &zone)?
        } else {
            self.numbers(values)?
        };
        let folded: Vec<Expr> = values.into_iter().map(|v| Expr::Literal(v, None)).collect();
        self.inner
            .call_with_args(TableFunctionArgs::new(&folded, args.session()))
    }
}

impl Series {
    /// The value a bound evaluates to when the query is planned.
    fn value(&self, e: &Expr, props: &ExecutionProps) -> Result<ScalarValue> {
        if let Expr::Literal(v, _) = e {
            return Ok(v.clone());
        }
        super::const_value(e, props).map_err(|err| match err {
            DataFusionError::External(_)
            | DataFusionError::ArrowError(..)
            | DataFusionError::Execution(_) => err,
            _ => sql_error(
                "0A000",
                &format!("{}: the bounds must be constants here", self.name),
            ),
        })
    }

    /// Numeric bounds as bigint; a string bound beside a number is read as one.
    fn numbers(&self, values: Vec<ScalarValue>) -> Result<Vec<ScalarValue>> {
        if !values.is_empty() && values.iter().all(is_text) {
            return Err(self.not_unique(values.len()));
        }
        values
            .into_iter()
            .map(|v| {
                let v = if is_text(&v) {
                    v.cast_to(&DataType::Int64).map_err(|_| {
                        sql_error(
                            "22P02",
                            &format!("invalid input syntax for type bigint: \"{v}\""),
                        )
                    })?
                } else {
                    v
                };
                integral(self.name, v)
            })
            .collect()
    }

    /// Time bounds as PostgreSQL resolves `generate_series(a, b, step)`: a
    /// `timestamp` bound makes a `timestamp` series unless the other is a
    /// `timestamptz`; dates and untyped text otherwise make a `timestamptz` series.
    /// A `timestamptz` series steps in the session time zone, as PostgreSQL's does
    /// (a day across a DST change is 23 or 25 hours).
    fn times(&self, values: Vec<ScalarValue>, zone: &str) -> Result<Vec<ScalarValue>> {
        let [start, end, step] = <[ScalarValue; 3]>::try_from(values).map_err(|v| {
            sql_error(
                "42883",
                &format!(
                    "function {}({}) does not exist",
                    self.name,
                    v.iter()
                        .map(|x| x.data_type().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let zoned = |v: &ScalarValue| matches!(v.data_type(), DataType::Timestamp(_, Some(_)));
        let naive = |v: &ScalarValue| matches!(v.data_type(), DataType::Timestamp(_, None));
        let target = if zoned(&start) || zoned(&end) || !(naive(&start) || naive(&end)) {
            Some(Arc::<str>::from(zone))
        } else {
            None
        };
        let ty = DataType::Timestamp(TimeUnit::Nanosecond, target);
        let bound = |v: ScalarValue| -> Result<ScalarValue> {
            let bad = || {
                sql_error(
                    "22007",
                    &format!("invalid input syntax for type timestamp: \"{v}\""),
                )
            };
            match v.data_type() {
                _ if v.is_null() => ScalarValue::try_from(&ty),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    let mut text = v.try_as_str().flatten().unwrap_or_default().to_string();
                    crate::interval::complete_seconds(&mut text);
                    ScalarValue::Utf8(Some(text))
                        .cast_to(&ty)
                        .map_err(|_| bad())
                }
                // a date is midnight, and midnight in the session zone for timestamptz
                DataType::Date32 | DataType::Date64 => v
                    .cast_to(&DataType::Timestamp(TimeUnit::Nanosecond, None))
                    .and_then(|t| t.cast_to(&ty)),
                DataType::Timestamp(_, _) => v.cast_to(&ty),
                other => Err(sql_error(
                    "42883",
                    &format!("function {}({other}, ...) does not exist", self.name),
                )),
            }
        };
        let step = match step.data_type() {
            _ if step.is_null() => ScalarValue::IntervalMonthDayNano(None),
            // text in PostgreSQL's interval forms (`'1 day 01:00'`)
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                let text = step.try_as_str().flatten().unwrap_or_default();
                let i =
                    crate::interval::parse_pg_interval(text).map_err(|m| sql_error("22007", &m))?;
                ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(
                    i.months,
                    i.days,
                    i.micros.saturating_mul(1000),
                )))
            }
            DataType::Interval(_) => step
                .cast_to(&DataType::Interval(IntervalUnit::MonthDayNano))
                .map_err(|_| {
                    sql_error(
                        "22007",
                        &format!("invalid input syntax for type interval: \"{step}\""),
                    )
                })?,
            other => {
                return Err(sql_error(
                    "42883",
                    &format!("function {}(..., {other}) does not exist", self.name),
                ));
            }
        };
        if let ScalarValue::IntervalMonthDayNano(Some(i)) = &step {
            check_step(i)?;
        }
        Ok(vec![bound(start)?, bound(end)?, step])
    }

    /// 42725, as PostgreSQL answers a call whose arguments are all untyped text.
    fn not_unique(&self, n: usize) -> DataFusionError {
        sql_error(
            "42725",
            &format!(
                "function {}({}) is not unique",
                self.name,
                vec!["unknown"; n].join(", ")
            ),
        )
    }
}

fn is_text(v: &ScalarValue) -> bool {
    matches!(
        v.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

fn is_time(v: &ScalarValue) -> bool {
    matches!(
        v.data_type(),
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Interval(_)
    )
}

/// PostgreSQL's step checks: zero is an error, and the direction is the sign of the
/// whole interval (a month as 30 days). DataFusion takes any negative field as a
/// step down, so a step whose fields differ in sign is refused rather than walked
/// the wrong way.
fn check_step(i: &IntervalMonthDayNano) -> Result<()> {
    const DAY: i128 = 86_400_000_000_000;
    let total =
        i128::from(i.months) * 30 * DAY + i128::from(i.days) * DAY + i128::from(i.nanoseconds);
    if total == 0 {
        return Err(sql_error("22023", "step size cannot equal zero"));
    }
    let down = i.months < 0 || i.days < 0 || i.nanoseconds < 0;
    let up = i.months > 0 || i.days > 0 || i.nanoseconds > 0;
    if up && down {
        return Err(sql_error(
            "0A000",
            "generate_series: a step whose fields differ in sign is not supported",
        ));
    }
    Ok(())
}

/// Numbers as bigint (an integral decimal or float too, as `1e9` is); a fraction is
/// an error rather than a rounded bound. Timestamps, dates and intervals pass as
/// they are.
fn integral(name: &str, v: ScalarValue) -> Result<ScalarValue> {
    let fraction = || {
        sql_error(
            "0A000",
            &format!("{name} with non-integer numeric bounds is not supported"),
        )
    };
    let out_of_range = || sql_error("22003", "bigint out of range");
    Ok(match v {
        _ if v.is_null() => v,
        ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::UInt8(_)
        | ScalarValue::UInt16(_)
        | ScalarValue::UInt32(_)
        | ScalarValue::UInt64(_) => v
            .cast_to(&arrow::datatypes::DataType::Int64)
            .map_err(|_| out_of_range())?,
        ScalarValue::Decimal128(Some(x), _, s) => {
            let scale = 10i128
                .checked_pow(u32::try_from(s.max(0)).unwrap_or(0))
                .ok_or_else(out_of_range)?;
            if x % scale != 0 {
                return Err(fraction());
            }
            ScalarValue::Int64(Some(i64::try_from(x / scale).map_err(|_| out_of_range())?))
        }
        ScalarValue::Decimal256(Some(_), _, _) => {
            let text = v.to_string();
            let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
            if frac.bytes().any(|b| b != b'0') {
                return Err(fraction());
            }
            ScalarValue::Int64(Some(int.parse().map_err(|_| out_of_range())?))
        }
        ScalarValue::Float32(Some(f)) => float(f64::from(f)).ok_or_else(fraction)?,
        ScalarValue::Float64(Some(f)) => float(f).ok_or_else(fraction)?,
        other => other,
    })
    .map(|v| {
        // a NULL bound gives no rows; DataFusion's series takes it untyped
        if v.is_null() && (v.data_type().is_numeric() || v.data_type().is_null()) {
            ScalarValue::Null
        } else {
            v
        }
    })
}

fn float(f: f64) -> Option<ScalarValue> {
    // 2^63 is the first float past i64::MAX
    (f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0)
        .then(|| ScalarValue::Int64(Some(f as i64)))
}
