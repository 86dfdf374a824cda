//! `generate_series` and `range` in `FROM` over numbers as PostgreSQL takes them: the
//! bounds may be any constant expression (`1e9`, `10 * 1000`, `2::int2`). They are
//! folded when the query is planned, then DataFusion's series table streams the rows.

use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::Result;
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
        let folded = args
            .exprs()
            .iter()
            .map(|e| self.fold(e, props))
            .collect::<Result<Vec<_>>>()?;
        self.inner
            .call_with_args(TableFunctionArgs::new(&folded, args.session()))
    }
}

impl Series {
    /// The literal a bound evaluates to; integral numbers of any type become bigint.
    fn fold(&self, e: &Expr, props: &ExecutionProps) -> Result<Expr> {
        if let Expr::Literal(..) = e {
            return Ok(Expr::Literal(integral(self.name, literal_of(e))?, None));
        }
        let v = super::const_value(e, props).map_err(|_| {
            sql_error(
                "0A000",
                &format!("{}: the bounds must be constants here", self.name),
            )
        })?;
        Ok(Expr::Literal(integral(self.name, v)?, None))
    }
}

fn literal_of(e: &Expr) -> ScalarValue {
    match e {
        Expr::Literal(v, _) => v.clone(),
        _ => ScalarValue::Null,
    }
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
