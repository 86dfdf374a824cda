//! INSERT with ON CONFLICT or RETURNING: the rows the INSERT would write are taken
//! from its plan, then held against the table's unique keys. DO NOTHING drops the
//! rows whose key is taken; DO UPDATE computes each taken row's new version from
//! the stored row and EXCLUDED. A keyed hypertable gets new versions written like
//! any row (reads keep a key's latest version, as for line-protocol points);
//! elsewhere the old rows are replaced in one commit.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, lit};
use datafusion::prelude::DataFrame;
use datafusion::sql::sqlparser::ast;

use super::{Output, Prepared, Session, args};
use crate::catalog::{KeyDef, SqlType, TableDef};
use crate::engine::TableChange;
use crate::error::{Error, Result};
use crate::query::provider::CapturedInsert;
use crate::query::rowset::RowIn;

/// Whether this module runs the INSERT (DataFusion plans the others).
pub fn handles(ins: &ast::Insert) -> bool {
    ins.on.is_some() || ins.returning.is_some()
}

enum Action<'a> {
    /// No ON CONFLICT: every key must be free (23505).
    Insert,
    /// DO NOTHING on the keys listed.
    Nothing(Vec<&'a KeyDef>),
    /// DO UPDATE on one key.
    Update(&'a KeyDef, &'a ast::DoUpdate),
}

/// `INSERT … [ON CONFLICT …] [RETURNING …]`.
pub async fn insert(s: &Session, ins: &ast::Insert) -> Result<Output> {
    let ast::TableObject::TableName(name) = &ins.table else {
        return Err(Error::NotSupported("INSERT into a table function".into()));
    };
    let table_name = args::table_name(name)?;
    let t = s
        .engine
        .catalog()
        .snapshot()
        .table(&s.db, &table_name)?
        .clone();
    let alias = ins
        .table_alias
        .as_ref()
        .map(|a| args::fold(&a.alias))
        .unwrap_or_else(|| table_name.clone());
    let action = action(&t, ins)?;
    let in_block = s.staging.in_block();
    let proposed = proposed_rows(s, ins).await?;
    let _keys = if !in_block && t.checks_keys() {
        Some(s.engine.lock_keys(t.id).await)
    } else {
        None
    };
    let written = match action {
        Action::Insert => {
            if !in_block {
                s.engine.check_unique(&t, &proposed).await?;
            }
            write(s, &t, proposed.clone(), None).await?;
            proposed
        }
        Action::Nothing(keys) => {
            let mut keep = vec![true; proposed.num_rows()];
            for key in &keys {
                let (existing, repeated) = taken(s, &t, key, &proposed, in_block).await?;
                for (i, k) in keep.iter_mut().enumerate() {
                    *k &= !existing[i] && !repeated[i];
                }
            }
            let rows = arrow::compute::filter_record_batch(&proposed, &BooleanArray::from(keep))?;
            if !in_block {
                let others: Vec<KeyDef> = t
                    .keys
                    .iter()
                    .filter(|k| !keys.iter().any(|c| c.name == k.name))
                    .cloned()
                    .collect();
                check_keys(s, &t, &others, &rows).await?;
            }
            write(s, &t, rows.clone(), None).await?;
            rows
        }
        Action::Update(key, du) => do_update(s, &t, &alias, key, du, proposed, in_block).await?,
    };
    let n = written.num_rows();
    match &ins.returning {
        Some(items) => {
            let (schema, batch) = returning(s, &t, &alias, items, &written)?;
            Ok(Output::Tagged(
                "INSERT 0".into(),
                schema.clone(),
                Box::pin(
                    datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                        schema,
                        futures::stream::iter(vec![Ok(batch)]),
                    ),
                ),
            ))
        }
        None => Ok(Output::Command(format!("INSERT 0 {n}"))),
    }
}

/// The ON CONFLICT clause against the table's keys.
fn action<'a>(t: &'a TableDef, ins: &'a ast::Insert) -> Result<Action<'a>> {
    let oc = match &ins.on {
        None => return Ok(Action::Insert),
        Some(ast::OnInsert::OnConflict(oc)) => oc,
        Some(_) => {
            return Err(Error::NotSupported(
                "ON DUPLICATE KEY UPDATE (use ON CONFLICT)".into(),
            ));
        }
    };
    let key = match &oc.conflict_target {
        Some(ast::ConflictTarget::Columns(cols)) => {
            let mut want: Vec<String> = cols.iter().map(args::fold).collect();
            want.sort();
            let found = t.keys.iter().find(|k| {
                let mut have = k.columns.clone();
                have.sort();
                have == want
            });
            Some(found.ok_or_else(|| {
                Error::sql(
                    "42P10",
                    "there is no unique or exclusion constraint matching the ON CONFLICT specification",
                )
            })?)
        }
        Some(ast::ConflictTarget::OnConstraint(n)) => {
            let name = args::ident_name(n)?;
            Some(t.keys.iter().find(|k| k.name == name).ok_or_else(|| {
                Error::sql(
                    "42704",
                    format!(
                        "constraint \"{name}\" for table \"{}\" does not exist",
                        t.name
                    ),
                )
            })?)
        }
        None => None,
    };
    Ok(match (&oc.action, key) {
        (ast::OnConflictAction::DoNothing, Some(k)) => Action::Nothing(vec![k]),
        (ast::OnConflictAction::DoNothing, None) => Action::Nothing(t.keys.iter().collect()),
        (ast::OnConflictAction::DoUpdate(du), Some(k)) => Action::Update(k, du),
        (ast::OnConflictAction::DoUpdate(_), None) => {
            return Err(Error::sql(
                "42601",
                "ON CONFLICT DO UPDATE requires inference specification or constraint name",
            ));
        }
    })
}

/// The rows the INSERT proposes (defaults filled, checked for the table), from its
/// own plan with the rows taken at the sink.
async fn proposed_rows(s: &Session, ins: &ast::Insert) -> Result<RecordBatch> {
    let mut plain = ins.clone();
    plain.on = None;
    plain.returning = None;
    plain.table_alias = None;
    let captured = Arc::new(CapturedInsert::default());
    let cfg = s.ctx.copied_config().with_extension(captured.clone());
    let state = SessionStateBuilder::new_from_existing(s.ctx.state())
        .with_config(cfg)
        .build();
    let Prepared::Plan { plan, .. } = s
        .prepare_in(&state, ast::Statement::Insert(plain), &[])
        .await?
    else {
        return Err(Error::Internal("INSERT planned as native".into()));
    };
    DataFrame::new(state, plan).collect().await?;
    let ast::TableObject::TableName(name) = &ins.table else {
        return Err(Error::Internal("INSERT target".into()));
    };
    let t = s
        .engine
        .catalog()
        .snapshot()
        .table(&s.db, &args::table_name(name)?)?
        .clone();
    let batch = captured
        .0
        .lock()
        .take()
        .unwrap_or_else(|| RecordBatch::new_empty(t.schema()));
    crate::write::validate(&t, &batch)
}

/// 23505 when a row of `rows` takes a value of one of `keys` (outside a block,
/// under the table's key lock).
async fn check_keys(s: &Session, t: &TableDef, keys: &[KeyDef], rows: &RecordBatch) -> Result<()> {
    for key in keys {
        let c = s.engine.find_keys(t, key, rows).await?;
        if let Some(i) = c.first_conflict() {
            return Err(Error::Unique {
                constraint: key.name.clone(),
                detail: format!(
                    "{} already exists.",
                    crate::engine::keys::key_text(rows, key, i)
                ),
            });
        }
    }
    Ok(())
}

/// At COMMIT of a block that deletes: 23505 when an inserted row repeats a key of
/// another inserted row or of a stored row the block's deletion (`deleted`) leaves.
pub(crate) async fn check_keys_after(
    s: &Session,
    t: &TableDef,
    rows: &RecordBatch,
    deleted: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
) -> Result<()> {
    let rows = crate::storage::adapt_batch(rows, &t.schema())?;
    for key in &t.keys {
        let stored = stored_rows(s, t, key, &rows).await?;
        let stored = match deleted {
            Some(pred) if stored.num_rows() > 0 => {
                let hit = pred.evaluate(&stored)?.into_array(stored.num_rows())?;
                let hit = hit
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::Internal("deletion predicate".into()))?;
                let keep: BooleanArray = (0..hit.len())
                    .map(|i| Some(!(hit.is_valid(i) && hit.value(i))))
                    .collect();
                arrow::compute::filter_record_batch(&stored, &keep)?
            }
            _ => stored,
        };
        let found = index_keys(t, key, &stored)?;
        let mut seen = std::collections::HashSet::new();
        for (i, k) in key_bytes(t, key, &rows)?.iter().enumerate() {
            let Some(k) = k else { continue };
            if found.contains_key(k) || !seen.insert(k.clone()) {
                return Err(Error::Unique {
                    constraint: key.name.clone(),
                    detail: format!(
                        "{} already exists.",
                        crate::engine::keys::key_text(&rows, key, i)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Per proposed row: whether a stored row holds its `key` value, and whether an
/// earlier proposed row has it. In a transaction block the stored rows are the
/// ones the session sees.
async fn taken(
    s: &Session,
    t: &TableDef,
    key: &KeyDef,
    rows: &RecordBatch,
    in_block: bool,
) -> Result<(Vec<bool>, Vec<bool>)> {
    if !in_block {
        let c = s.engine.find_keys(t, key, rows).await?;
        return Ok((c.existing, c.repeated));
    }
    let stored = stored_rows(s, t, key, rows).await?;
    let found = index_keys(t, key, &stored)?;
    let keys = key_bytes(t, key, rows)?;
    let mut seen = std::collections::HashSet::new();
    let mut existing = vec![false; rows.num_rows()];
    let mut repeated = vec![false; rows.num_rows()];
    for (i, k) in keys.iter().enumerate() {
        let Some(k) = k else { continue };
        existing[i] = found.contains_key(k);
        repeated[i] = !seen.insert(k.clone());
    }
    Ok((existing, repeated))
}

/// The key values of each row (`None`: a NULL in the key, which conflicts with
/// nothing), in Arrow's row format.
pub(crate) fn key_bytes(
    t: &TableDef,
    key: &KeyDef,
    rows: &RecordBatch,
) -> Result<Vec<Option<Box<[u8]>>>> {
    let (cols, types) = key_arrays(t, key, rows)?;
    let conv = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
    let r = conv.convert_columns(&cols)?;
    Ok((0..rows.num_rows())
        .map(|i| (!cols.iter().any(|c| c.is_null(i))).then(|| Box::from(r.row(i).data())))
        .collect())
}

/// Stored rows by key value.
fn index_keys(
    t: &TableDef,
    key: &KeyDef,
    stored: &RecordBatch,
) -> Result<HashMap<Box<[u8]>, usize>> {
    Ok(key_bytes(t, key, stored)?
        .into_iter()
        .enumerate()
        .filter_map(|(i, k)| k.map(|k| (k, i)))
        .collect())
}

fn key_arrays(
    t: &TableDef,
    key: &KeyDef,
    rows: &RecordBatch,
) -> Result<(Vec<ArrayRef>, Vec<DataType>)> {
    let mut cols = vec![];
    let mut types = vec![];
    for c in &key.columns {
        let ty = t
            .column(c)
            .map(|d| d.sql_type.to_arrow())
            .ok_or_else(|| Error::UndefinedColumn(c.clone()))?;
        let i = rows
            .schema()
            .index_of(c)
            .map_err(|_| Error::UndefinedColumn(c.clone()))?;
        let a = rows.column(i);
        cols.push(if a.data_type() == &ty {
            a.clone()
        } else {
            arrow::compute::cast(a, &ty)?
        });
        types.push(ty);
    }
    Ok((cols, types))
}

/// The predicate "the row's `key` value is one of `rows`'", within their time range.
fn key_predicate(t: &TableDef, key: &KeyDef, rows: &RecordBatch) -> Result<Expr> {
    let (cols, types) = key_arrays(t, key, rows)?;
    let col = |c: &str| {
        Expr::Column(datafusion::common::Column::new(
            Some(t.name.as_str()),
            c.to_string(),
        ))
    };
    let mut pred =
        RowIn::new(&cols, types.clone())?.call(key.columns.iter().map(|c| col(c)).collect());
    if let Some(tc) = t.time_column.as_ref()
        && let Some(pos) = key.columns.iter().position(|c| c == tc)
    {
        let micros = arrow::compute::cast(
            &cols[pos],
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
        )?;
        let p = micros
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>();
        if let Some((lo, hi)) = p.and_then(|p| arrow::compute::min(p).zip(arrow::compute::max(p))) {
            let dt = types[pos].clone();
            let bound = |v: i64| ScalarValue::TimestampMicrosecond(Some(v), None).cast_to(&dt);
            pred = col(tc)
                .gt_eq(lit(bound(lo)?))
                .and(col(tc).lt_eq(lit(bound(hi)?)))
                .and(pred);
        }
    }
    Ok(pred)
}

/// The stored rows (as the session sees them) whose `key` value one of `rows` has.
async fn stored_rows(
    s: &Session,
    t: &TableDef,
    key: &KeyDef,
    rows: &RecordBatch,
) -> Result<RecordBatch> {
    let pred = key_predicate(t, key, rows)?;
    let df = s
        .ctx
        .table(datafusion::common::TableReference::bare(t.name.clone()))
        .await?
        .filter(pred)?;
    let batches = df.collect().await?;
    let schema = t.schema();
    let adapted = batches
        .iter()
        .map(|b| crate::storage::adapt_batch(b, &schema))
        .collect::<Result<Vec<_>>>()?;
    Ok(arrow::compute::concat_batches(&schema, &adapted)?)
}

/// Writes `rows` (checked), and with `replace` first removes the stored rows whose
/// `key` value the replaced rows had — in one commit outside a block, staged in one.
async fn write(
    s: &Session,
    t: &Arc<TableDef>,
    rows: RecordBatch,
    replace: Option<(&KeyDef, &RecordBatch)>,
) -> Result<()> {
    super::fkeys::check_new_rows(s, t, &rows).await?;
    let in_block = s.staging.in_block();
    let Some((key, old)) = replace.filter(|(_, old)| old.num_rows() > 0) else {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        if in_block {
            s.staging.insert(t, rows)?;
        } else {
            s.engine.write_checked(t, rows).await?;
        }
        return Ok(());
    };
    let pred = key_predicate(t, key, old)?;
    if in_block {
        s.staging.delete(t.id, pred);
        s.staging.insert(t, rows)?;
        return Ok(());
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        s.engine.flush().await?;
        let m = s.engine.catalog().snapshot();
        let (_, now) = m
            .table_by_id(t.id)
            .ok_or_else(|| Error::UndefinedTable(t.name.clone()))?;
        let state = s.ctx.state();
        let df_schema = crate::query::staged::qualified_schema(now)?;
        let physical = state.create_physical_expr(pred.clone(), &df_schema)?;
        let files = crate::query::provider::files_to_delete_from(&state, now, &pred, &physical)?;
        let change = TableChange {
            table: now.clone(),
            pred: Some(physical),
            files,
            inserts: vec![rows.clone()],
            refreshed: vec![],
            expect_removed: (!now.dedups()).then_some(old.num_rows() as u64),
        };
        match s.engine.commit_changes(&s.db, vec![change]).await {
            // A compaction replaced the files meanwhile: nothing was applied.
            Err(Error::Catalog(_)) if attempt < 4 => {}
            other => return other,
        }
    }
}

/// Evaluates SQL `expr` over `batch` whose columns `schema` names.
fn eval(
    state: &SessionState,
    schema: &DFSchema,
    batch: &RecordBatch,
    expr: &str,
) -> Result<ArrayRef> {
    use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
    let logical = state.create_logical_expr(expr, schema)?;
    // Functions such as coalesce exist only in simplified form below the planner.
    let ctx = SimplifyContext::builder()
        .with_schema(Arc::new(schema.clone()))
        .build();
    let simplifier = ExprSimplifier::new(ctx);
    let logical = simplifier.simplify(simplifier.coerce(logical, schema)?)?;
    let physical = state.create_physical_expr(logical, schema)?;
    Ok(physical.evaluate(batch)?.into_array(batch.num_rows())?)
}

#[allow(clippy::too_many_arguments)]
async fn do_update(
    s: &Session,
    t: &Arc<TableDef>,
    alias: &str,
    key: &KeyDef,
    du: &ast::DoUpdate,
    proposed: RecordBatch,
    in_block: bool,
) -> Result<RecordBatch> {
    let keys = key_bytes(t, key, &proposed)?;
    let mut seen = std::collections::HashSet::new();
    for k in keys.iter().flatten() {
        if !seen.insert(k.clone()) {
            return Err(Error::sql(
                "21000",
                "ON CONFLICT DO UPDATE command cannot affect row a second time",
            ));
        }
    }
    let stored = stored_rows(s, t, key, &proposed).await?;
    let found = index_keys(t, key, &stored)?;
    let (mut hit_new, mut hit_old, mut fresh) = (vec![], vec![], vec![]);
    for (i, k) in keys.iter().enumerate() {
        match k.as_ref().and_then(|k| found.get(k)) {
            Some(j) => {
                hit_new.push(i as u32);
                hit_old.push(*j as u32);
            }
            None => fresh.push(i as u32),
        }
    }
    let inserts = arrow::compute::take_record_batch(&proposed, &UInt32Array::from(fresh))?;
    let excluded = arrow::compute::take_record_batch(&proposed, &UInt32Array::from(hit_new))?;
    let old = arrow::compute::take_record_batch(&stored, &UInt32Array::from(hit_old))?;
    // One batch: the stored row's columns (the table's name or alias), then EXCLUDED's.
    let schema = t.schema();
    let mut fields: Vec<(Option<datafusion::common::TableReference>, Arc<Field>)> = vec![];
    for f in schema.fields() {
        fields.push((Some(alias.into()), f.clone()));
    }
    for f in schema.fields() {
        fields.push((Some("excluded".into()), f.clone()));
    }
    let df_schema = DFSchema::new_with_metadata(fields, Default::default())?;
    let arrow_fields: Vec<Field> = df_schema.fields().iter().map(|f| (**f).clone()).collect();
    let mut cols = old.columns().to_vec();
    cols.extend(excluded.columns().iter().cloned());
    let both = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(arrow_fields)),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(old.num_rows())),
    )?;
    let state = s.ctx.state();
    let mut new_cols: Vec<ArrayRef> = old.columns().to_vec();
    let mut assigned = std::collections::HashSet::new();
    for a in &du.assignments {
        let names: Vec<&ast::ObjectName> = match &a.target {
            ast::AssignmentTarget::ColumnName(n) => vec![n],
            ast::AssignmentTarget::Tuple(_) => {
                return Err(Error::NotSupported(
                    "ON CONFLICT DO UPDATE SET (columns) = …".into(),
                ));
            }
        };
        let name = args::ident_name(names[0])?;
        let Some(i) = t.columns.iter().position(|c| c.name == name) else {
            return Err(Error::sql(
                "42703",
                format!(
                    "column \"{name}\" of relation \"{}\" does not exist",
                    t.name
                ),
            ));
        };
        if !assigned.insert(i) {
            return Err(Error::sql(
                "42601",
                format!("multiple assignments to same column \"{name}\""),
            ));
        }
        let value = &a.value;
        let ty = match &t.columns[i].sql_type {
            SqlType::Varchar(_) => "text".to_string(),
            other => other.pg_name(),
        };
        let v = eval(
            &state,
            &df_schema,
            &both,
            &format!("CAST(({value}) AS {ty})"),
        )?;
        new_cols[i] = v;
    }
    let raw = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .zip(&new_cols)
                .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        )),
        new_cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(old.num_rows())),
    )?;
    let mut updated = crate::write::validate(t, &raw)?;
    let mut old = old;
    if let Some(w) = &du.selection {
        let keep = eval(&state, &df_schema, &both, &w.to_string())?;
        let keep = keep
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| Error::sql("42804", "argument of WHERE must be type boolean"))?;
        let keep: BooleanArray = (0..keep.len())
            .map(|i| Some(keep.is_valid(i) && keep.value(i)))
            .collect();
        updated = arrow::compute::filter_record_batch(&updated, &keep)?;
        old = arrow::compute::filter_record_batch(&old, &keep)?;
    }
    // Same key, keyed hypertable: the new versions are written like rows; else the
    // stored rows are replaced.
    let same_key = key_bytes(t, key, &updated)? == key_bytes(t, key, &old)?;
    let all = arrow::compute::concat_batches(&schema, [&updated, &inserts])?;
    if !in_block {
        let fresh_keys: Vec<KeyDef> = t.keys.clone();
        check_keys(s, t, &fresh_keys, &inserts).await?;
    }
    // In a block the session's view adds staged rows to stored ones unmerged: the
    // stored version is staged away instead.
    if t.dedups() && same_key && !in_block {
        write(s, t, all.clone(), None).await?;
    } else {
        write(s, t, all.clone(), Some((key, &old))).await?;
    }
    Ok(all)
}

/// RETURNING items over the written rows: their names and values.
fn returning(
    s: &Session,
    t: &TableDef,
    alias: &str,
    items: &[ast::SelectItem],
    rows: &RecordBatch,
) -> Result<(SchemaRef, RecordBatch)> {
    let schema = t.schema();
    let df_schema = DFSchema::try_from_qualified_schema(alias, &schema)?;
    let state = s.ctx.state();
    let mut fields = vec![];
    let mut cols: Vec<ArrayRef> = vec![];
    for item in items {
        let (expr, name) = match item {
            ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                for (i, f) in schema.fields().iter().enumerate() {
                    fields.push(Field::new(f.name(), f.data_type().clone(), true));
                    cols.push(rows.column(i).clone());
                }
                continue;
            }
            ast::SelectItem::UnnamedExpr(e) => (e.clone(), output_name(e)),
            ast::SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), args::fold(alias)),
            ast::SelectItem::ExprWithAliases { expr, .. } => (expr.clone(), output_name(expr)),
        };
        let v = eval(&state, &df_schema, rows, &expr.to_string())?;
        fields.push(Field::new(name, v.data_type().clone(), true));
        cols.push(v);
    }
    let out: SchemaRef = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new_with_options(
        out.clone(),
        cols,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.num_rows())),
    )?;
    Ok((out, batch))
}

/// PostgreSQL's name for an unnamed output column.
fn output_name(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Identifier(i) => args::fold(i),
        ast::Expr::CompoundIdentifier(p) => p.last().map(args::fold).unwrap_or_default(),
        ast::Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(args::fold)
            .unwrap_or_else(|| "?column?".into()),
        ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => output_name(expr),
        _ => "?column?".into(),
    }
}
