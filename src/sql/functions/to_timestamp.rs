//! `to_timestamp(text, template)` and `to_date(text, template)` with PostgreSQL's
//! template patterns (`YYYY-MM-DD HH24:MI:SS`), the timestamp read in the session
//! time zone as PostgreSQL does. DataFusion's functions of those names read chrono
//! formats; every other form of them (`to_timestamp(epoch)`, one argument) is
//! still theirs.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Date32Array, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use chrono::format::{Parsed, StrftimeItems};
use chrono::{NaiveDate, TimeZone};
use datafusion::error::Result;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// DataFusion's `to_timestamp` / `to_date`, with the (text, template) form taken over.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WithTemplate {
    inner: Arc<ScalarUDF>,
    date: bool,
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn templated(types: &[DataType]) -> bool {
    types.len() == 2 && types.iter().all(is_text)
}

impl WithTemplate {
    fn out_type(&self) -> DataType {
        if self.date {
            DataType::Date32
        } else {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
    }
}

fn bad(text: &str, template: &str) -> datafusion::error::DataFusionError {
    crate::Error::sql(
        "22007",
        format!("invalid value \"{text}\" for template \"{template}\""),
    )
    .into()
}

/// The date and time fields of `text` read with PostgreSQL `template`; fields
/// the template lacks are PostgreSQL's defaults (January, the 1st, midnight).
fn read(text: &str, template: &str) -> Result<chrono::NaiveDateTime> {
    let fmt = super::to_char::chrono_format(template)?;
    let mut p = Parsed::new();
    chrono::format::parse(&mut p, text.trim(), StrftimeItems::new(&fmt))
        .map_err(|_| bad(text, template))?;
    let _ = p.year().is_none().then(|| p.set_year(1));
    let _ = p.month().is_none().then(|| p.set_month(1));
    let _ = p.day().is_none().then(|| p.set_day(1));
    if p.hour_div_12().is_none() {
        let _ = p.set_ampm(false);
    }
    let _ = p.hour_mod_12().is_none().then(|| p.set_hour12(12));
    let _ = p.minute().is_none().then(|| p.set_minute(0));
    let _ = p.second().is_none().then(|| p.set_second(0));
    let date = p.to_naive_date().map_err(|_| bad(text, template))?;
    let time = p.to_naive_time().map_err(|_| bad(text, template))?;
    Ok(date.and_time(time))
}

impl ScalarUDFImpl for WithTemplate {
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
        if templated(args) {
            return Ok(self.out_type());
        }
        self.inner.return_type(args)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        if templated(&types) {
            return Ok(Arc::new(Field::new(self.name(), self.out_type(), true)));
        }
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        if !templated(&types) {
            return self.inner.invoke_with_args(args);
        }
        let n = args.number_rows;
        let zone: chrono_tz::Tz = args
            .config_options
            .execution
            .time_zone
            .as_deref()
            .and_then(|z| z.parse().ok())
            .unwrap_or(chrono_tz::UTC);
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| {
                a.to_array(n)
                    .and_then(|a| Ok(arrow::compute::cast(&a, &DataType::Utf8)?))
            })
            .collect::<Result<_>>()?;
        let (texts, templates) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let mut at = Vec::with_capacity(n);
        for i in 0..n {
            if texts.is_null(i) || templates.is_null(i) {
                at.push(None);
                continue;
            }
            at.push(Some(read(texts.value(i), templates.value(i))?));
        }
        let out: ArrayRef = if self.date {
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
            Arc::new(Date32Array::from(
                at.iter()
                    .map(|t| t.map(|t| (t.date() - epoch).num_days() as i32))
                    .collect::<Vec<_>>(),
            ))
        } else {
            let micros = at
                .iter()
                .map(|t| {
                    t.and_then(|t| zone.from_local_datetime(&t).earliest())
                        .map(|t| t.timestamp_micros())
                })
                .collect::<Vec<_>>();
            Arc::new(TimestampMicrosecondArray::from(micros).with_timezone("UTC"))
        };
        super::columnar(
            out,
            n == 1
                && args
                    .args
                    .iter()
                    .all(|a| matches!(a, ColumnarValue::Scalar(_))),
        )
    }
}

/// Wraps DataFusion's `to_timestamp` and `to_date` in `ctx`.
pub fn register(ctx: &SessionContext) {
    for (name, date) in [("to_timestamp", false), ("to_date", true)] {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(ScalarUDF::new_from_impl(WithTemplate { inner, date }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_read_as_postgresql_reads_them() {
        let t = read("2024-01-02 03:04:05", "YYYY-MM-DD HH24:MI:SS").unwrap();
        assert_eq!(t.to_string(), "2024-01-02 03:04:05");
        let t = read("02.01.2024", "DD.MM.YYYY").unwrap();
        assert_eq!(t.to_string(), "2024-01-02 00:00:00");
        let t = read("2024-03", "YYYY-MM").unwrap();
        assert_eq!(t.to_string(), "2024-03-01 00:00:00");
        assert!(read("2024-13-01", "YYYY-MM-DD").is_err());
        assert!(read("abc", "YYYY").is_err());
    }
}
