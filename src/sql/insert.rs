//! Fast path for `INSERT INTO t [(cols)] VALUES (...), ...` whose values are all
//! literals: builds Arrow columns straight from the literal text and hands them to
//! the write path, skipping DataFusion planning. Anything unusual (expressions,
//! defaults, values needing PostgreSQL-specific coercion) returns `None` so the
//! general path runs and reports errors the usual way.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::DataType;
use arrow::util::display::FormatOptions;
use datafusion::sql::sqlparser::ast::{
    Expr, Insert, SetExpr, TableObject, UnaryOperator, Value,
};

use super::Session;
use crate::catalog::TableDef;
use crate::error::Result;

/// Literal text of a VALUES item, `Some(None)` for NULL, `None` if not a literal.
fn literal(e: &Expr) -> Option<Option<String>> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Null => Some(None),
            Value::Number(n, _) => Some(Some(n.clone())),
            Value::SingleQuotedString(s) => Some(Some(s.clone())),
            Value::Boolean(b) => Some(Some(b.to_string())),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => Some(Some(format!("-{n}"))),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Whether a literal can be parsed by Arrow exactly as PostgreSQL would assign it.
fn plain_for(dt: &DataType, v: &str) -> bool {
    match dt {
        // PostgreSQL rounds 2.5 into an integer column; Arrow would refuse.
        DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            !v.contains(['.', 'e', 'E'])
        }
        // PostgreSQL rounds extra fraction digits; leave those to the general path.
        DataType::Decimal128(_, scale) => v
            .split_once('.')
            .map(|(_, f)| f.len() <= (*scale).max(0) as usize)
            .unwrap_or(true),
        _ => true,
    }
}

/// Tries the fast path; `Ok(None)` means "use the general path".
pub async fn try_fast_insert(s: &Session, ins: &Insert) -> Result<Option<u64>> {
    if ins.on.is_some() || ins.returning.is_some() || !ins.assignments.is_empty() {
        return Ok(None);
    }
    let TableObject::TableName(name) = &ins.table else {
        return Ok(None);
    };
    let Some(src) = &ins.source else {
        return Ok(None);
    };
    if src.with.is_some() || src.order_by.is_some() || src.limit_clause.is_some() {
        return Ok(None);
    }
    let SetExpr::Values(values) = src.body.as_ref() else {
        return Ok(None);
    };
    let tz_is_utc = s
        .settings
        .read()
        .get("timezone")
        .map(|t| t.eq_ignore_ascii_case("utc"))
        .unwrap_or(true);
    let table_name = match name.0.as_slice() {
        [p] => p.as_ident().map(fold),
        [schema, p] if schema.as_ident().map(fold).as_deref() == Some("public") => {
            p.as_ident().map(fold)
        }
        _ => None,
    };
    let Some(table_name) = table_name else {
        return Ok(None);
    };
    let manifest = s.engine.catalog.snapshot();
    let Ok(table) = manifest.table(&s.db, &table_name) else {
        return Ok(None);
    };
    // Map target columns to table positions.
    let targets: Vec<usize> = if ins.columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        let mut v = vec![];
        for c in &ins.columns {
            let [p] = c.0.as_slice() else { return Ok(None) };
            let Some(id) = p.as_ident() else { return Ok(None) };
            match table.columns.iter().position(|tc| tc.name == fold(id)) {
                Some(i) if !v.contains(&i) => v.push(i),
                _ => return Ok(None),
            }
        }
        v
    };
    // Omitted columns must have no default (they become NULL).
    for (i, c) in table.columns.iter().enumerate() {
        if !targets.contains(&i) && c.default.is_some() {
            return Ok(None);
        }
    }
    let n_rows = values.rows.len();
    let mut texts: Vec<Vec<Option<String>>> = vec![Vec::with_capacity(n_rows); targets.len()];
    for row in &values.rows {
        if row.content.len() != targets.len() {
            return Ok(None);
        }
        for (j, e) in row.content.iter().enumerate() {
            let Some(lit) = literal(e) else { return Ok(None) };
            texts[j].push(lit);
        }
    }
    match build_batch(&table, &targets, texts, n_rows, tz_is_utc) {
        Some(batch) => Ok(Some(s.engine.writer.write(&table, batch).await?)),
        None => Ok(None),
    }
}

fn fold(i: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

fn build_batch(
    table: &Arc<TableDef>,
    targets: &[usize],
    texts: Vec<Vec<Option<String>>>,
    n_rows: usize,
    tz_is_utc: bool,
) -> Option<RecordBatch> {
    let schema = table.schema();
    let strict = CastOptions {
        safe: false,
        format_options: FormatOptions::default(),
    };
    let mut cols: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| arrow::array::new_null_array(f.data_type(), n_rows))
        .collect();
    for (vals, &i) in texts.into_iter().zip(targets) {
        let dt = schema.field(i).data_type();
        if matches!(dt, DataType::Timestamp(_, Some(_))) && !tz_is_utc {
            return None;
        }
        if !vals.iter().flatten().all(|v| plain_for(dt, v)) {
            return None;
        }
        let strings: ArrayRef = Arc::new(StringArray::from(vals));
        cols[i] = if dt == &DataType::Utf8 {
            strings
        } else {
            cast_with_options(&strings, dt, &strict).ok()?
        };
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(n_rows)),
    )
    // NOT NULL violations and the like: the general path reports them.
    .ok()
}
