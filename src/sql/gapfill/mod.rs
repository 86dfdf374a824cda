//! TimescaleDB's gap filling as plan nodes: `time_bucket_gapfill(width, ts [, zone]
//! [, start, finish])` with `locf(agg [, prev, treat_null_as_missing])` and
//! `interpolate(agg [, prev, next])`. The analyzer rule ([`rule`]) puts a `GapFill`
//! node over the aggregate; `GapFillExec` ([`exec`]) streams the missing buckets.

mod exec;
mod rule;

use std::sync::Arc;

use arrow::datatypes::{DataType, IntervalUnit, TimeUnit};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

pub use exec::GapFillPlanner;

use crate::error::Error;

/// `time_bucket_gapfill`, `locf` and `interpolate`: markers the rule replaces.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Marker {
    name: &'static str,
    signature: Signature,
}

impl Marker {
    fn new(name: &'static str) -> Marker {
        Marker {
            name,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}

fn no_such(name: &str, args: &[DataType]) -> DfResult<Vec<DataType>> {
    Err(Error::sql(
        "42883",
        format!(
            "function {name}({}) does not exist",
            args.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .into())
}

impl ScalarUDFImpl for Marker {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        match self.name {
            "time_bucket_gapfill" => {
                if !(2..=5).contains(&args.len()) {
                    return no_such(self.name, args);
                }
                // Integer time: width, time and bounds take the time's type.
                if args[1].is_integer() {
                    let t = match &args[1] {
                        DataType::Int8 | DataType::UInt8 => DataType::Int16,
                        DataType::UInt16 => DataType::Int32,
                        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
                        t => t.clone(),
                    };
                    if args.len() > 4
                        || args.iter().any(|a| !a.is_integer() && *a != DataType::Null)
                    {
                        return no_such(self.name, args);
                    }
                    return Ok(args
                        .iter()
                        .map(|a| {
                            if a.is_null() {
                                DataType::Null
                            } else {
                                t.clone()
                            }
                        })
                        .collect());
                }
                let width = match &args[0] {
                    DataType::Interval(_) => DataType::Interval(IntervalUnit::MonthDayNano),
                    t if is_text(t) => DataType::Interval(IntervalUnit::MonthDayNano),
                    _ => return no_such(self.name, args),
                };
                let ts = match &args[1] {
                    DataType::Timestamp(_, tz) => {
                        DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
                    }
                    DataType::Date32 | DataType::Date64 => DataType::Date32,
                    t if is_text(t) => {
                        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
                    }
                    _ => return no_such(self.name, args),
                };
                let mut out = vec![width, ts];
                // Zone names and bound text stay text: the rule tells them apart.
                for t in &args[2..] {
                    out.push(match t {
                        t if is_text(t) => DataType::Utf8,
                        DataType::Null => DataType::Null,
                        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
                            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
                        }
                        _ => return no_such(self.name, args),
                    });
                }
                Ok(out)
            }
            "locf" if (1..=3).contains(&args.len()) => {
                let mut out = args.to_vec();
                if args.len() == 3 && args[2] != DataType::Null {
                    out[2] = DataType::Boolean;
                }
                Ok(out)
            }
            "interpolate" if (1..=3).contains(&args.len()) => Ok(args.to_vec()),
            _ => no_such(self.name, args),
        }
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(match self.name {
            "time_bucket_gapfill" => args.get(1).cloned().unwrap_or(DataType::Null),
            _ => args.first().cloned().unwrap_or(DataType::Null),
        })
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        Err(misplaced(self.name).into())
    }
}

/// The error for a marker the rule could not place.
fn misplaced(name: &str) -> Error {
    match name {
        "time_bucket_gapfill" => Error::sql(
            "0A000",
            "time_bucket_gapfill must be a GROUP BY key of an aggregate query",
        ),
        other => Error::sql(
            "0A000",
            format!(
                "{other} must be used together with time_bucket_gapfill in an aggregate query's select list"
            ),
        ),
    }
}

/// Registers the three functions and the rule that plans them.
pub fn register(ctx: &SessionContext) {
    for name in ["time_bucket_gapfill", "locf", "interpolate"] {
        ctx.register_udf(ScalarUDF::new_from_impl(Marker::new(name)));
    }
    ctx.add_analyzer_rule(Arc::new(rule::HandleGapFill));
}
