//! When a policy job first runs: the `initial_start` and `timezone` arguments the
//! policy functions (retention, compression, continuous aggregate refresh) share.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast;

use super::Session;
use crate::error::{Error, Result};

/// A policy's `initial_start` (µs since the epoch; `None` for NULL or not given).
/// `timezone` (which aligns fixed schedules across DST) is refused: Sundial's
/// schedules run `schedule_interval` after the previous start.
pub async fn job_start(
    s: &Session,
    initial: Option<&ast::Expr>,
    timezone: Option<&ast::Expr>,
) -> Result<Option<i64>> {
    if let Some(z) = timezone
        && !s.scalar(z).await?.is_null()
    {
        return Err(Error::NotSupported(
            "the timezone of a job schedule is not supported by Sundial".into(),
        ));
    }
    let Some(e) = initial else { return Ok(None) };
    let v = s.scalar(e).await?;
    if v.is_null() {
        return Ok(None);
    }
    let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    match v.cast_to(&ts) {
        Ok(ScalarValue::TimestampMicrosecond(Some(t), _)) => Ok(Some(t)),
        _ => Err(Error::sql(
            "22007",
            format!("invalid input syntax for type timestamp with time zone: \"{v}\""),
        )),
    }
}
