//! TimescaleDB's management functions as functions of the planner, so they compose
//! like any SQL function: `SELECT count(*) FROM drop_chunks(…)`, `SELECT
//! add_retention_policy(…) IS NOT NULL`, a call in a CTE, under an alias, per row of a
//! query. Each is an async scalar function and a table function; both run the call
//! when the plan runs (never when it is planned, EXPLAINed or kept), through the same
//! code as the statements that change the catalog.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ListArray, RecordBatch, new_null_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{self, FunctionArg, FunctionArgExpr};
use futures::TryStreamExt;

use super::signatures::{Ret, SPECS, Spec};
use super::tx::BlockDdl;
use super::{Output, Session};
use crate::engine::Engine;
use crate::engine::tx::Staging;
use crate::error::{Error, Result};

/// Who a call runs as: the engine, the database and the role of the calling session.
#[derive(Debug, Clone)]
struct Caller {
    engine: Arc<Engine>,
    db: String,
    user: String,
    /// The calling session's block: a call that changes definitions inside it is
    /// recorded for ROLLBACK.
    block: Option<(Arc<Staging>, Arc<BlockDdl>)>,
}

impl Caller {
    /// Runs `spec` once with `values` (a missing parameter is a NULL of no type) and
    /// gives its result column.
    async fn run(&self, spec: &Spec, values: &[ScalarValue]) -> Result<ArrayRef> {
        let mut fargs = vec![];
        for (p, v) in spec.params.iter().zip(values) {
            if matches!(v, ScalarValue::Null) {
                continue;
            }
            fargs.push(FunctionArg::Named {
                name: ast::Ident::new(*p),
                arg: FunctionArgExpr::Expr(literal(v)?),
                operator: ast::FunctionArgOperator::RightArrow,
            });
        }
        // The call runs on a session of its own (the calling one is busy running
        // this plan), as the calling role, in the same database.
        let s = Session::new(self.engine.clone(), &self.db, &self.user, 0)?;
        let recorded = self
            .block
            .as_ref()
            .filter(|(staging, _)| staging.in_block() && spec.name != "show_chunks")
            .map(|(_, ddl)| (ddl, self.engine.catalog().snapshot()));
        let out = self.call(&s, spec, &fargs).await;
        if let Some((ddl, before)) = recorded {
            ddl.record(before, self.engine.catalog());
        }
        let out = out?;
        let Output::Rows(_, stream) = out else {
            return Err(Error::Internal(format!("{} returned no rows", spec.name)));
        };
        let batches: Vec<RecordBatch> = stream.try_collect().await?;
        let ty = spec.ret.column_type();
        let cols = batches
            .iter()
            .map(|b| arrow::compute::cast(b.column(0), &ty))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let refs: Vec<&dyn Array> = cols.iter().map(|c| c.as_ref()).collect();
        Ok(if refs.is_empty() {
            new_null_array(&ty, 0)
        } else {
            arrow::compute::concat(&refs)?
        })
    }

    /// Runs the management function `spec` on session `s`.
    async fn call(&self, s: &Session, spec: &Spec, fargs: &[FunctionArg]) -> Result<Output> {
        match spec.name {
            "compress_chunk" | "decompress_chunk" => {
                super::compression::chunk_fn(s, spec.name, fargs).await
            }
            "add_compression_policy" | "remove_compression_policy" => {
                super::compression::call(s, spec.name, fargs).await
            }
            other => super::chunks::call(s, other, fargs).await,
        }
    }

    /// The rows of `spec` called once with `values`, as its table function gives them.
    async fn table_rows(&self, spec: &Spec, values: &[ScalarValue]) -> Result<RecordBatch> {
        let col = self.run(spec, values).await?;
        let col = if spec.ret == Ret::Set {
            col
        } else {
            // One row (a void function's value is empty).
            match col.len() {
                0 => new_null_array(&spec.ret.column_type(), 1),
                _ => col.slice(0, 1),
            }
        };
        Ok(RecordBatch::try_new(table_schema(spec), vec![col])?)
    }
}

fn table_schema(spec: &Spec) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        spec.name,
        spec.ret.column_type(),
        true,
    )]))
}

/// An argument value as the literal the management code reads: intervals in
/// PostgreSQL's text (which policy configs show), everything else as a bound
/// parameter's literal.
fn literal(v: &ScalarValue) -> Result<ast::Expr> {
    if matches!(
        v,
        ScalarValue::IntervalMonthDayNano(Some(_))
            | ScalarValue::IntervalDayTime(Some(_))
            | ScalarValue::IntervalYearMonth(Some(_))
    ) {
        let ScalarValue::IntervalMonthDayNano(Some(iv)) = v.cast_to(&DataType::Interval(
            arrow::datatypes::IntervalUnit::MonthDayNano,
        ))?
        else {
            return Err(Error::Internal("interval argument".into()));
        };
        return Ok(ast::Expr::Interval(ast::Interval {
            value: Box::new(ast::Expr::value(ast::Value::SingleQuotedString(
                super::functions::pgtext::interval(iv.months, iv.days, iv.nanoseconds / 1000),
            ))),
            leading_field: None,
            leading_precision: None,
            last_field: None,
            fractional_seconds_precision: None,
        }));
    }
    Ok(super::args::value_literal(v))
}

/// A management function as an async scalar function (one call per row).
#[derive(Debug)]
struct CallFn {
    spec: &'static Spec,
    caller: Caller,
    signature: Signature,
}

impl PartialEq for CallFn {
    fn eq(&self, o: &Self) -> bool {
        self.spec.name == o.spec.name && Arc::ptr_eq(&self.caller.engine, &o.caller.engine)
    }
}
impl Eq for CallFn {}
impl std::hash::Hash for CallFn {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.spec.name.hash(h)
    }
}

impl ScalarUDFImpl for CallFn {
    fn name(&self) -> &str {
        self.spec.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(self.spec.ret.data_type())
    }
    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> datafusion::error::Result<arrow::datatypes::FieldRef> {
        let f = Field::new(self.spec.name, self.spec.ret.data_type(), true);
        let pg = match self.spec.ret {
            Ret::Void => "void",
            Ret::Regclass => "regclass",
            _ => return Ok(Arc::new(f)),
        };
        Ok(Arc::new(f.with_metadata(std::collections::HashMap::from(
            [(
                crate::query::system::PG_TYPE_KEY.to_string(),
                pg.to_string(),
            )],
        ))))
    }
    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        Err(Error::Internal(format!("{} runs only asynchronously", self.spec.name)).into())
    }
}

#[async_trait]
impl AsyncScalarUDFImpl for CallFn {
    async fn invoke_async_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ty = self.spec.ret.data_type();
        let mut out: Vec<ScalarValue> = Vec::with_capacity(rows);
        for i in 0..rows {
            let values = arrays
                .iter()
                .map(|a| ScalarValue::try_from_array(a, i))
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            let col = self.caller.run(self.spec, &values).await?;
            out.push(match self.spec.ret {
                Ret::Set => ScalarValue::List(Arc::new(ListArray::new(
                    Arc::new(Field::new_list_field(DataType::Utf8, true)),
                    arrow::buffer::OffsetBuffer::from_lengths([col.len()]),
                    col,
                    None,
                ))),
                _ if col.is_empty() => ScalarValue::try_from(&ty)?,
                _ => ScalarValue::try_from_array(&col, 0)?,
            });
        }
        if out.is_empty() {
            return Ok(ColumnarValue::Array(new_null_array(&ty, 0)));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(out)?))
    }
}

/// A management function as a table function: `SELECT count(*) FROM drop_chunks(…)`.
#[derive(Debug)]
struct CallTable {
    spec: &'static Spec,
    caller: Caller,
}

impl datafusion::catalog::TableFunctionImpl for CallTable {
    fn call_with_args(
        &self,
        args: datafusion::catalog::TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn datafusion::datasource::TableProvider>> {
        let exprs = args.exprs().to_vec();
        let spec = self.spec;
        let caller = self.caller.clone();
        crate::query::deferred::table(
            table_schema(spec),
            Arc::new(move || {
                let caller = caller.clone();
                let exprs = exprs.clone();
                Box::pin(async move {
                    // Evaluated when the plan runs: `now()` is the time of this run.
                    let props = datafusion::execution::context::ExecutionProps::new();
                    let values = exprs
                        .iter()
                        .map(|e| super::functions::const_value(e, &props))
                        .collect::<datafusion::error::Result<Vec<_>>>()?;
                    Ok(caller.table_rows(spec, &values).await?)
                })
            }),
        )
    }
}

/// Registers every management function, scalar and table form, on a connection.
pub fn register(
    ctx: &datafusion::prelude::SessionContext,
    engine: &Arc<Engine>,
    db: &str,
    user: &str,
    block: Option<(Arc<Staging>, Arc<BlockDdl>)>,
) {
    let caller = Caller {
        engine: engine.clone(),
        db: db.to_string(),
        user: user.to_string(),
        block,
    };
    for spec in SPECS {
        let f = CallFn {
            spec,
            caller: caller.clone(),
            signature: Signature::variadic_any(Volatility::Volatile),
        };
        ctx.register_udf(AsyncScalarUDF::new(Arc::new(f)).into_scalar_udf());
        // show_chunks keeps its own table function (it answers without a session).
        if spec.name != "show_chunks" {
            ctx.register_udtf(
                spec.name,
                Arc::new(CallTable {
                    spec,
                    caller: caller.clone(),
                }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_read_back_as_the_values() {
        let iv = ScalarValue::IntervalMonthDayNano(Some(
            arrow::datatypes::IntervalMonthDayNano::new(1, 2, 3_000_000_000),
        ));
        assert_eq!(
            literal(&iv).unwrap().to_string(),
            "INTERVAL '1 mon 2 days 00:00:03'"
        );
        let ts = ScalarValue::TimestampMicrosecond(Some(0), Some("UTC".into()));
        assert!(literal(&ts).unwrap().to_string().contains("1970-01-01"));
        assert_eq!(
            literal(&ScalarValue::Int32(Some(7))).unwrap().to_string(),
            "7"
        );
    }
}
