//! CHECK constraints on the write path: every batch a write validates is tested
//! against its table's CHECK expressions (23514 naming the first failing row).
//! The SQL layer installs the compiler, so a condition means what it means in a
//! query; compiled expressions are kept per (condition, schema).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use parking_lot::Mutex;

use crate::catalog::{CheckDef, TableDef};
use crate::error::{Error, Result};

/// Turns a condition over a schema's columns into an expression to evaluate.
pub type Compile = dyn Fn(&SchemaRef, &str) -> Result<Arc<dyn PhysicalExpr>> + Send + Sync;

static COMPILER: OnceLock<Box<Compile>> = OnceLock::new();

type Cache = HashMap<(String, SchemaRef), Arc<dyn PhysicalExpr>>;
static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Default::default);

/// Compiled conditions kept at most; the cache starts over past it.
const CACHE_LIMIT: usize = 4096;

/// Sets the compiler (the SQL layer's, once at startup; later calls change nothing).
pub fn install(compile: Box<Compile>) {
    let _ = COMPILER.set(compile);
}

/// `expr` compiled for `schema`: the installed compiler's, else plain DataFusion's.
pub fn compiled(schema: &SchemaRef, expr: &str) -> Result<Arc<dyn PhysicalExpr>> {
    let key = (expr.to_string(), schema.clone());
    if let Some(e) = CACHE.lock().get(&key) {
        return Ok(e.clone());
    }
    let e = match COMPILER.get() {
        Some(c) => c(schema, expr)?,
        None => plain(schema, expr)?,
    };
    let mut cache = CACHE.lock();
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(key, e.clone());
    Ok(e)
}

fn plain(schema: &SchemaRef, expr: &str) -> Result<Arc<dyn PhysicalExpr>> {
    let ctx = datafusion::prelude::SessionContext::new();
    let df = datafusion::common::DFSchema::try_from(schema.as_ref().clone())?;
    let e = ctx.parse_sql_expr(expr, &df)?;
    Ok(ctx.create_physical_expr(e, &df)?)
}

/// The rows of `batch` (already in `schema` order) where `check` is false.
pub fn failing(check: &CheckDef, batch: &RecordBatch) -> Result<Vec<usize>> {
    let e = compiled(&batch.schema(), &check.expr)?;
    let v = e.evaluate(batch)?.into_array(batch.num_rows())?;
    let Some(b) = v.as_boolean_opt() else {
        return Err(Error::sql(
            "42804",
            format!(
                "argument of CHECK must be type boolean, not type {}",
                v.data_type()
            ),
        ));
    };
    if b.false_count() == 0 {
        return Ok(vec![]);
    }
    Ok((0..b.len())
        .filter(|&i| b.is_valid(i) && !b.value(i))
        .collect())
}

/// Fails with 23514 where a row of `batch` (cast to `table`'s schema) makes a
/// CHECK false: the first such row, and of its failing constraints the first by
/// name, as PostgreSQL tests a row's constraints in name order.
pub fn enforce(table: &TableDef, batch: &RecordBatch) -> Result<()> {
    match failing_rows(table, batch)?.into_iter().next() {
        None => Ok(()),
        Some((row, name)) => Err(violation(&table.name, &name, batch, row)),
    }
}

/// Every row of `batch` (cast to `table`'s schema) that makes a CHECK false, in
/// row order, each with its first failing constraint by name.
pub fn failing_rows(table: &TableDef, batch: &RecordBatch) -> Result<Vec<(usize, String)>> {
    if table.checks.is_empty() || batch.num_rows() == 0 {
        return Ok(vec![]);
    }
    let mut checks: Vec<&CheckDef> = table.checks.iter().collect();
    checks.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows: std::collections::BTreeMap<usize, String> = Default::default();
    for c in checks {
        for row in failing(c, batch)? {
            rows.entry(row).or_insert_with(|| c.name.clone());
        }
    }
    Ok(rows.into_iter().collect())
}

/// PostgreSQL's error for a new row that breaks a CHECK.
pub fn violation(table: &str, check: &str, batch: &RecordBatch, row: usize) -> Error {
    Error::sql_detail(
        "23514",
        format!("new row for relation \"{table}\" violates check constraint \"{check}\""),
        format!("Failing row contains ({}).", row_text(batch, row)),
    )
}

/// A row as PostgreSQL shows it in DETAIL lines: values in text form, `null`.
pub fn row_text(batch: &RecordBatch, row: usize) -> String {
    batch
        .columns()
        .iter()
        .map(|c| value_text(c, row))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One value as PostgreSQL's text output (UTC for timestamps with a zone).
pub fn value_text(a: &arrow::array::ArrayRef, row: usize) -> String {
    if a.is_null(row) {
        return "null".into();
    }
    match a.data_type() {
        arrow::datatypes::DataType::Timestamp(_, tz) => {
            let Ok(m) = arrow::compute::cast(
                a,
                &arrow::datatypes::DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Microsecond,
                    None,
                ),
            ) else {
                return String::new();
            };
            let v = m
                .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                .value(row);
            let Some(dt) = chrono::DateTime::from_timestamp_micros(v) else {
                return v.to_string();
            };
            let mut s = dt.format("%Y-%m-%d %H:%M:%S").to_string();
            let frac = v.rem_euclid(1_000_000);
            if frac != 0 {
                let f = format!("{frac:06}");
                s.push('.');
                s.push_str(f.trim_end_matches('0'));
            }
            if tz.is_some() {
                s.push_str("+00");
            }
            s
        }
        arrow::datatypes::DataType::Boolean => {
            if a.as_boolean().value(row) {
                "t".into()
            } else {
                "f".into()
            }
        }
        // The column's scale pads every value with zeros PostgreSQL does not show.
        arrow::datatypes::DataType::Decimal128(_, s)
        | arrow::datatypes::DataType::Decimal256(_, s)
            if *s > 0 =>
        {
            let t = arrow::util::display::array_value_to_string(a, row).unwrap_or_default();
            match t.contains('.') {
                true => t.trim_end_matches('0').trim_end_matches('.').to_string(),
                false => t,
            }
        }
        _ => arrow::util::display::array_value_to_string(a, row).unwrap_or_default(),
    }
}
