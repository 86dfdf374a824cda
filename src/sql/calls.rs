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
use datafusion::sql::sqlparser::ast::{self, FunctionArg, FunctionArgExpr, Visit, Visitor};
use futures::TryStreamExt;

use super::{Output, Session};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// What a management function returns, as TimescaleDB declares it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ret {
    /// `integer` (a job id).
    Int4,
    /// `boolean`.
    Bool,
    /// `void` (shown as an empty value).
    Void,
    /// `regclass` (a chunk's qualified name).
    Regclass,
    /// `SETOF text` / `SETOF regclass`: one row per chunk.
    Set,
}

impl Ret {
    fn data_type(self) -> DataType {
        match self {
            Ret::Int4 => DataType::Int32,
            Ret::Bool => DataType::Boolean,
            Ret::Void | Ret::Regclass => DataType::Utf8,
            Ret::Set => DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        }
    }

    /// The type of the table function's one column.
    fn column_type(self) -> DataType {
        match self {
            Ret::Set => DataType::Utf8,
            other => other.data_type(),
        }
    }
}

/// A management function: its name, its parameters in order, what it returns.
struct Spec {
    name: &'static str,
    params: &'static [&'static str],
    ret: Ret,
}

const CHUNK_RANGE: &[&str] = &[
    "relation",
    "older_than",
    "newer_than",
    "verbose",
    "created_before",
    "created_after",
];

const SPECS: &[Spec] = &[
    Spec {
        name: "show_chunks",
        params: &[
            "relation",
            "older_than",
            "newer_than",
            "created_before",
            "created_after",
        ],
        ret: Ret::Set,
    },
    Spec {
        name: "drop_chunks",
        params: CHUNK_RANGE,
        ret: Ret::Set,
    },
    Spec {
        name: "add_retention_policy",
        params: &[
            "relation",
            "drop_after",
            "if_not_exists",
            "schedule_interval",
            "initial_start",
            "timezone",
            "drop_created_before",
        ],
        ret: Ret::Int4,
    },
    Spec {
        name: "remove_retention_policy",
        params: &["relation", "if_exists"],
        ret: Ret::Void,
    },
    Spec {
        name: "add_continuous_aggregate_policy",
        params: &[
            "continuous_aggregate",
            "start_offset",
            "end_offset",
            "schedule_interval",
            "if_not_exists",
            "initial_start",
            "timezone",
            "include_tiered_data",
            "buckets_per_batch",
            "max_batches_per_execution",
            "refresh_newest_first",
        ],
        ret: Ret::Int4,
    },
    Spec {
        name: "remove_continuous_aggregate_policy",
        params: &["continuous_aggregate", "if_not_exists", "if_exists"],
        ret: Ret::Void,
    },
    Spec {
        name: "add_compression_policy",
        params: &[
            "hypertable",
            "compress_after",
            "if_not_exists",
            "schedule_interval",
            "initial_start",
            "timezone",
            "compress_created_before",
        ],
        ret: Ret::Int4,
    },
    Spec {
        name: "remove_compression_policy",
        params: &["hypertable", "if_exists"],
        ret: Ret::Bool,
    },
    Spec {
        name: "compress_chunk",
        params: &["uncompressed_chunk", "if_not_compressed", "recompress"],
        ret: Ret::Regclass,
    },
    Spec {
        name: "decompress_chunk",
        params: &["uncompressed_chunk", "if_compressed"],
        ret: Ret::Regclass,
    },
];

fn spec(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// The function a call names, without a `public.` schema.
fn called(name: &ast::ObjectName) -> Option<&'static Spec> {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
        .collect();
    match parts.as_slice() {
        [n] => spec(n),
        [schema, n] if schema == "public" => spec(n),
        _ => None,
    }
}

/// Whether `name` is one of the management functions that change something.
fn writes(s: &Spec) -> bool {
    s.name != "show_chunks"
}

/// Makes the arguments of a management call positional in its parameter order: a
/// parameter not given is a NULL of no type, a NULL the caller wrote is a NULL of
/// type text (so the call still tells the two apart). `None` when the call is not a
/// management function's; an error for a parameter name it does not have.
pub fn positional(name: &ast::ObjectName, args: &mut Vec<FunctionArg>) -> Result<()> {
    let Some(spec) = called(name) else {
        return Ok(());
    };
    let (pos, named) = super::args::split_args(args);
    if pos.len() + named.len() != args.len() || pos.len() > spec.params.len() {
        return Err(signature_error(spec));
    }
    let mut out: Vec<Option<ast::Expr>> = pos.into_iter().map(Some).collect();
    out.resize(spec.params.len(), None);
    for (n, e) in named {
        let i = spec.params.iter().position(|p| *p == n).ok_or_else(|| {
            Error::sql(
                "42883",
                format!("function {} has no parameter named \"{n}\"", spec.name),
            )
        })?;
        out[i] = Some(e);
    }
    // Trailing parameters not given are left out.
    while out.last().is_some_and(|e| e.is_none()) {
        out.pop();
    }
    *args = out
        .into_iter()
        .map(|e| {
            let e = match e {
                Some(ast::Expr::Value(v)) if matches!(v.value, ast::Value::Null) => {
                    ast::Expr::Cast {
                        kind: ast::CastKind::Cast,
                        expr: Box::new(ast::Expr::Value(v)),
                        data_type: ast::DataType::Text,
                        array: false,
                        format: None,
                    }
                }
                Some(e) => e,
                None => ast::Expr::value(ast::Value::Null),
            };
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
        })
        .collect();
    Ok(())
}

fn signature_error(spec: &Spec) -> Error {
    Error::sql(
        "42883",
        format!(
            "function {}({}) does not exist",
            spec.name,
            spec.params.join(", ")
        ),
    )
}

/// The select items that are set-returning management calls (`SELECT
/// drop_chunks(…)`): one row per chunk, as `unnest` of the call's list.
pub fn is_set_returning(name: &ast::ObjectName) -> bool {
    called(name).is_some_and(|s| s.ret == Ret::Set)
}

/// Functions that read a hypertable's chunks or sizes (registered elsewhere).
const READERS: [&str; 8] = [
    "hypertable_size",
    "approximate_row_count",
    "hypertable_detailed_size",
    "chunks_detailed_size",
    "hypertable_compression_stats",
    "hypertable_columnstore_stats",
    "chunk_compression_stats",
    "chunk_columnstore_stats",
];

/// Every management call in `stmt` that changes something: its name and its first
/// argument when that is a literal (the table it changes).
pub fn writing_calls(stmt: &ast::Statement) -> Vec<(&'static str, Option<String>)> {
    management_calls(stmt)
        .into_iter()
        .filter(|(n, _)| spec(n).is_some_and(writes))
        .collect()
}

/// Every management call in `stmt` (in any expression or FROM): its name and its
/// first argument when that is a literal (the table it reads or changes).
pub fn management_calls(stmt: &ast::Statement) -> Vec<(&'static str, Option<String>)> {
    struct Calls(Vec<(&'static str, Option<String>)>);
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> std::ops::ControlFlow<()> {
            if let ast::Expr::Function(f) = e
                && let ast::FunctionArguments::List(l) = &f.args
            {
                self.note(&f.name, &l.args);
            }
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, tf: &ast::TableFactor) -> std::ops::ControlFlow<()> {
            if let ast::TableFactor::Table {
                name,
                args: Some(a),
                ..
            } = tf
            {
                self.note(name, &a.args);
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    impl Calls {
        fn note(&mut self, name: &ast::ObjectName, args: &[FunctionArg]) {
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
                .collect();
            let reader = match parts.as_slice() {
                [n] => READERS.iter().find(|r| *r == n),
                [schema, n] if schema == "public" => READERS.iter().find(|r| *r == n),
                _ => None,
            };
            if let Some(name) = called(name).map(|s| s.name).or(reader.copied()) {
                let first = args.first().and_then(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                    | FunctionArg::Named {
                        arg: FunctionArgExpr::Expr(e),
                        ..
                    }
                    | FunctionArg::ExprNamed {
                        arg: FunctionArgExpr::Expr(e),
                        ..
                    } => super::args::literal_text(e),
                    _ => None,
                });
                self.0.push((name, first));
            }
        }
    }
    let mut c = Calls(vec![]);
    let _ = stmt.visit(&mut c);
    c.0
}

/// Who a call runs as: the engine, the database and the role of the calling session.
#[derive(Debug, Clone)]
struct Caller {
    engine: Arc<Engine>,
    db: String,
    user: String,
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
        let out = match spec.name {
            "compress_chunk" | "decompress_chunk" => {
                super::compression::chunk_fn(&s, spec.name, &fargs).await?
            }
            "add_compression_policy" | "remove_compression_policy" => {
                super::compression::call(&s, spec.name, &fargs).await?
            }
            other => super::chunks::call(&s, other, &fargs).await?,
        };
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

/// An argument value as the literal the management code reads.
fn literal(v: &ScalarValue) -> Result<ast::Expr> {
    let text = |s: String| ast::Expr::value(ast::Value::SingleQuotedString(s));
    let cast = |s: String, data_type: ast::DataType| ast::Expr::Cast {
        kind: ast::CastKind::Cast,
        expr: Box::new(text(s)),
        data_type,
        array: false,
        format: None,
    };
    if v.is_null() {
        return Ok(ast::Expr::value(ast::Value::Null));
    }
    Ok(match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => text(s.clone()),
        ScalarValue::Boolean(Some(b)) => ast::Expr::value(ast::Value::Boolean(*b)),
        ScalarValue::Int8(_)
        | ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::UInt8(_)
        | ScalarValue::UInt16(_)
        | ScalarValue::UInt32(_)
        | ScalarValue::UInt64(_)
        | ScalarValue::Decimal128(..)
        | ScalarValue::Decimal256(..)
        | ScalarValue::Float32(_)
        | ScalarValue::Float64(_) => ast::Expr::value(ast::Value::Number(v.to_string(), false)),
        ScalarValue::IntervalMonthDayNano(_)
        | ScalarValue::IntervalDayTime(_)
        | ScalarValue::IntervalYearMonth(_) => {
            let ScalarValue::IntervalMonthDayNano(Some(iv)) = v.cast_to(&DataType::Interval(
                arrow::datatypes::IntervalUnit::MonthDayNano,
            ))?
            else {
                return Err(Error::Internal("interval argument".into()));
            };
            ast::Expr::Interval(ast::Interval {
                value: Box::new(text(super::functions::pgtext::interval(
                    iv.months,
                    iv.days,
                    iv.nanoseconds / 1000,
                ))),
                leading_field: None,
                leading_precision: None,
                last_field: None,
                fractional_seconds_precision: None,
            })
        }
        ScalarValue::TimestampSecond(..)
        | ScalarValue::TimestampMillisecond(..)
        | ScalarValue::TimestampMicrosecond(..)
        | ScalarValue::TimestampNanosecond(..)
        | ScalarValue::Date32(_)
        | ScalarValue::Date64(_) => {
            let dt = v.data_type();
            let (ty, zoned) = match &dt {
                DataType::Timestamp(_, Some(_)) => (
                    ast::DataType::Timestamp(None, ast::TimezoneInfo::WithTimeZone),
                    true,
                ),
                DataType::Timestamp(_, None) => (
                    ast::DataType::Timestamp(None, ast::TimezoneInfo::None),
                    false,
                ),
                _ => (ast::DataType::Date, false),
            };
            // RFC 3339 in UTC for a zoned value, the wall-clock text otherwise.
            let utc = if zoned {
                v.cast_to(&DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Microsecond,
                    Some("UTC".into()),
                ))?
            } else {
                v.clone()
            };
            let s = utc.cast_to(&DataType::Utf8)?.to_string();
            cast(s, ty)
        }
        other => {
            return Err(Error::sql(
                "42804",
                format!(
                    "argument of type {} is not accepted by a management function",
                    other.data_type()
                ),
            ));
        }
    })
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

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
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
) {
    let caller = Caller {
        engine: engine.clone(),
        db: db.to_string(),
        user: user.to_string(),
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

/// The names of the management functions that change something.
pub fn writing_names() -> impl Iterator<Item = &'static str> {
    SPECS.iter().filter(|s| writes(s)).map(|s| s.name)
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
