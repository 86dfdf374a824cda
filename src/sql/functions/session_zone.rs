//! `date_trunc` and `date_part` / `extract` on `timestamptz` in the session time
//! zone, as PostgreSQL computes them (`date_trunc('day', t)` under
//! `TimeZone = 'Europe/Berlin'` is Berlin's midnight): DataFusion's own functions
//! work in the zone of the value's type, which is always UTC for stored columns.
//! `date_part` is float8 with fractional seconds, as in PostgreSQL.

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
    for name in ["date_trunc", "date_part"] {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(InSessionZone { inner }));
        }
    }
}
