//! PostgreSQL's type names where DataFusion maps them differently: `numeric`
//! without a typmod is [`crate::catalog::ANY_NUMERIC`] (DataFusion would make it
//! `Decimal128(38, 10)` and round past ten fraction digits), and `numeric(p, s)`
//! takes up to 76 digits. Used by casts (`x::numeric`) and every other SQL type name.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::error::Result;
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::sql::sqlparser::ast::{self, ExactNumberInfo};

/// The type planner; see the module documentation.
#[derive(Debug, Default)]
pub struct PgTypes;

/// The Arrow type of `numeric` with this typmod, or `None` for DataFusion's own
/// handling (which reports bad typmods).
fn numeric(info: &ExactNumberInfo) -> Option<DataType> {
    use crate::catalog::{ANY_NUMERIC, ANY_NUMERIC_PRECISION, numeric_type};
    match *info {
        ExactNumberInfo::None => Some(ANY_NUMERIC),
        ExactNumberInfo::Precision(p) if (39..=u64::from(ANY_NUMERIC_PRECISION)).contains(&p) => {
            Some(numeric_type(p as u8, 0))
        }
        ExactNumberInfo::PrecisionAndScale(p, s)
            if (39..=u64::from(ANY_NUMERIC_PRECISION)).contains(&p)
                && (0..=p as i64).contains(&s) =>
        {
            Some(numeric_type(p as u8, s as i8))
        }
        _ => None,
    }
}

impl TypePlanner for PgTypes {
    fn plan_type_field(&self, sql_type: &ast::DataType) -> Result<Option<FieldRef>> {
        Ok(match sql_type {
            ast::DataType::Numeric(info) | ast::DataType::Decimal(info) => {
                numeric(info).map(|t| Arc::new(Field::new("", t, true)))
            }
            t => super::json::type_field(t),
        })
    }
}
