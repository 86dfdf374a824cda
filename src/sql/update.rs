//! UPDATE: the new rows come from one query over the table's files as they are at
//! one moment (the memtable flushed first); the old rows leave and the new ones
//! arrive in one catalog step, the commit point, so a crash keeps all or none.
//! Inside a transaction block both are staged, as DELETE and INSERT are.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, lit};
use datafusion::prelude::DataFrame;
use datafusion::sql::sqlparser::ast;

use super::{Output, Prepared, Session};
use crate::catalog::{SqlType, TableDef};
use crate::engine::TableChange;
use crate::error::{Error, Result};
use crate::query::provider::PinnedFiles;
use crate::query::rowset::RowIn;

/// Prefix of the columns that carry a row's old values through the query.
const OLD: &str = "__sundial_old_";
/// The column that numbers the target's rows when FROM may join one several times.
const RID: &str = "__sundial_rid";
/// Attempts when the stored rows change between the read and the commit.
const ATTEMPTS: usize = 4;

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// What one UPDATE statement computes, independent of the moment it runs.
struct Plan {
    table: Arc<TableDef>,
    /// The name the statement calls the table by (alias or table name), folded.
    alias: String,
    /// The query: new values of every column, then old values of `old_cols`, then
    /// the row number (with FROM), then the RETURNING items.
    sql: String,
    /// Columns whose old values the query returns (by position): the first
    /// `match_len` identify the rows to replace, the rest complete unique keys.
    old_cols: Vec<usize>,
    match_len: usize,
    has_from: bool,
    /// The WHERE clause, for the plain path (rows found by a predicate on the table).
    selection: Option<String>,
    returning: bool,
}

/// `UPDATE t [AS a] SET c = e [, …] [FROM …] [WHERE …] [RETURNING …]`.
pub async fn update(s: &Session, u: &ast::Update) -> Result<Output> {
    let plan = plan(s, u)?;
    let fold = |n: &ast::ObjectName| {
        let n = n.to_string();
        let last = n.rsplit('.').next().unwrap_or(&n).to_string();
        match last.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
            Some(q) => q.to_string(),
            None => last.to_lowercase(),
        }
    };
    let set: Vec<(String, Option<String>)> = u
        .assignments
        .iter()
        .flat_map(|a| match &a.target {
            ast::AssignmentTarget::ColumnName(n) => vec![(fold(n), Some(a.value.to_string()))],
            ast::AssignmentTarget::Tuple(ns) => ns.iter().map(|n| (fold(n), None)).collect(),
        })
        .collect();
    if !plan.has_from {
        super::fkeys::before_update(s, &plan.table, &plan.alias, &set, plan.selection.as_deref())
            .await?;
    }
    let (n, returned) = if s.staging.in_block() {
        stage(s, &plan).await?
    } else {
        apply(s, &plan).await?
    };
    let tag = format!("UPDATE {n}");
    match returned {
        Some((schema, batch)) => Ok(Output::Tagged(
            "UPDATE".into(),
            schema.clone(),
            Box::pin(
                datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::iter(vec![Ok(batch)]),
                ),
            ),
        )),
        None => Ok(Output::Command(tag)),
    }
}

fn plan(s: &Session, u: &ast::Update) -> Result<Plan> {
    if u.or.is_some() || u.limit.is_some() || !u.order_by.is_empty() || u.output.is_some() {
        return Err(Error::NotSupported(
            "UPDATE with OR, ORDER BY, LIMIT or OUTPUT".into(),
        ));
    }
    let ast::TableFactor::Table { name, alias, .. } = &u.table.relation else {
        return Err(Error::NotSupported("UPDATE of a non-table".into()));
    };
    if !u.table.joins.is_empty() {
        return Err(Error::NotSupported(
            "UPDATE with joins on its target".into(),
        ));
    }
    let table_name = super::args::table_name(name)?;
    let m = s.engine.catalog().snapshot();
    let table = match m.table(&s.db, &table_name) {
        Ok(t) => t.clone(),
        Err(e) => {
            if m.database(&s.db)
                .is_ok_and(|d| d.views.contains_key(&table_name))
            {
                return Err(Error::sql(
                    "55000",
                    format!("cannot update view \"{table_name}\""),
                ));
            }
            return Err(e);
        }
    };
    let alias_sql = match alias {
        Some(a) => a.name.to_string(),
        None => name.0.last().map(|p| p.to_string()).unwrap_or_default(),
    };
    let alias_name = match alias {
        Some(a) => super::args::fold(&a.name),
        None => table_name.clone(),
    };
    let new_values = assignments(&table, &u.assignments)?;
    let from = match &u.from {
        Some(ast::UpdateTableFromKind::AfterSet(f) | ast::UpdateTableFromKind::BeforeSet(f)) => {
            Some(f)
        }
        None => None,
    };
    let has_from = from.is_some_and(|f| !f.is_empty());
    // Rows are replaced by their old values: all columns, or for a table that merges
    // points the key (series and time), so every copy of a point goes.
    // Unique keys are checked against the old values of their columns too.
    let mut old_cols: Vec<usize> = match crate::storage::dedup::key_indices(&table, &table.schema())
    {
        Some(k) => k,
        None => (0..table.columns.len()).collect(),
    };
    let match_len = old_cols.len();
    for k in &table.keys {
        for c in &k.columns {
            if let Some(i) = table.columns.iter().position(|d| &d.name == c)
                && !old_cols.contains(&i)
            {
                old_cols.push(i);
            }
        }
    }
    let mut inner = vec![];
    for (c, v) in table.columns.iter().zip(&new_values) {
        inner.push(format!("{v} AS {}", quote(&c.name)));
    }
    for (i, c) in old_cols.iter().enumerate() {
        inner.push(format!(
            "{alias_sql}.{} AS {}",
            quote(&table.columns[*c].name),
            quote(&format!("{OLD}{i}"))
        ));
    }
    let target = if has_from {
        inner.push(format!("{alias_sql}.{}", quote(RID)));
        format!(
            "(SELECT *, row_number() OVER () AS {} FROM {name}) AS {alias_sql}",
            quote(RID)
        )
    } else {
        match alias {
            Some(_) => format!("{name} AS {alias_sql}"),
            None => name.to_string(),
        }
    };
    let mut inner_sql = format!("SELECT {} FROM {target}", inner.join(", "));
    if let Some(f) = from.filter(|f| !f.is_empty()) {
        for t in f {
            inner_sql.push_str(&format!(", {t}"));
        }
    }
    if let Some(w) = &u.selection {
        inner_sql.push_str(&format!(" WHERE {w}"));
    }
    let mut outer: Vec<String> = table
        .columns
        .iter()
        .map(|c| format!("{alias_sql}.{}", quote(&c.name)))
        .collect();
    outer.extend(
        (0..old_cols.len()).map(|i| format!("{alias_sql}.{}", quote(&format!("{OLD}{i}")))),
    );
    if has_from {
        outer.push(format!("{alias_sql}.{}", quote(RID)));
    }
    let returning = u.returning.is_some();
    if let Some(items) = &u.returning {
        outer.extend(returning_items(&table, &alias_sql, &alias_name, items));
    }
    let sql = format!(
        "SELECT {} FROM ({inner_sql}) AS {alias_sql}",
        outer.join(", ")
    );
    Ok(Plan {
        table,
        alias: alias_name,
        sql,
        old_cols,
        match_len,
        has_from,
        selection: u.selection.as_ref().map(|w| w.to_string()),
        returning,
    })
}

/// For a statement that returns rows natively (`UPDATE … RETURNING`), a query whose
/// result has the same columns: the RETURNING items over the table.
pub fn returning_query(s: &Session, stmt: &ast::Statement) -> Option<String> {
    let (items, name, alias) = match stmt {
        ast::Statement::Insert(ins) => {
            let ast::TableObject::TableName(name) = &ins.table else {
                return None;
            };
            (
                ins.returning.as_ref()?,
                name,
                ins.table_alias.as_ref().map(|a| &a.alias),
            )
        }
        ast::Statement::Update(u) => {
            let ast::TableFactor::Table { name, alias, .. } = &u.table.relation else {
                return None;
            };
            (u.returning.as_ref()?, name, alias.as_ref().map(|a| &a.name))
        }
        _ => return None,
    };
    let table_name = super::args::table_name(name).ok()?;
    let table = s
        .engine
        .catalog()
        .snapshot()
        .table(&s.db, &table_name)
        .ok()?
        .clone();
    let (alias_sql, alias_name) = match alias {
        Some(a) => (a.to_string(), super::args::fold(a)),
        None => (
            name.0.last().map(|p| p.to_string()).unwrap_or_default(),
            table_name,
        ),
    };
    let items = returning_items(&table, &alias_sql, &alias_name, items);
    Some(format!(
        "SELECT {} FROM {name} AS {alias_sql}",
        items.join(", ")
    ))
}

/// RETURNING items as SQL over the new row (`*` and `t.*`: the table's columns).
pub(crate) fn returning_items(
    table: &TableDef,
    alias_sql: &str,
    alias_name: &str,
    items: &[ast::SelectItem],
) -> Vec<String> {
    let all = || {
        table
            .columns
            .iter()
            .map(|c| format!("{alias_sql}.{}", quote(&c.name)))
            .collect::<Vec<_>>()
    };
    let mut out = vec![];
    for item in items {
        match item {
            ast::SelectItem::Wildcard(_) => out.extend(all()),
            ast::SelectItem::QualifiedWildcard(
                ast::SelectItemQualifiedWildcardKind::ObjectName(n),
                _,
            ) if super::args::ident_name(n).is_ok_and(|q| q == alias_name) => out.extend(all()),
            other => out.push(other.to_string()),
        }
    }
    out
}

/// The new value of every column as SQL: the assigned expression cast to the
/// column's type, or the column itself.
fn assignments(table: &TableDef, sets: &[ast::Assignment]) -> Result<Vec<String>> {
    let mut assigned: HashMap<usize, String> = HashMap::new();
    let mut set_one = |target: &ast::ObjectName, value: &ast::Expr| -> Result<()> {
        let name = super::args::ident_name(target)?;
        let Some(i) = table.columns.iter().position(|c| c.name == name) else {
            return Err(Error::sql(
                "42703",
                format!(
                    "column \"{name}\" of relation \"{}\" does not exist",
                    table.name
                ),
            ));
        };
        let c = &table.columns[i];
        let ty = match &c.sql_type {
            // Length limits are checked as an INSERT checks them, not truncated.
            SqlType::Varchar(_) => "text".to_string(),
            t => t.pg_name(),
        };
        let is_default = matches!(value, ast::Expr::Identifier(id)
            if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default"));
        let v = if is_default {
            match &c.default {
                Some(d) => format!("CAST(({d}) AS {ty})"),
                None => format!("CAST(NULL AS {ty})"),
            }
        } else {
            format!("CAST(({value}) AS {ty})")
        };
        if assigned.insert(i, v).is_some() {
            return Err(Error::sql(
                "42601",
                format!("multiple assignments to same column \"{name}\""),
            ));
        }
        Ok(())
    };
    for a in sets {
        match &a.target {
            ast::AssignmentTarget::ColumnName(n) => set_one(n, &a.value)?,
            ast::AssignmentTarget::Tuple(names) => {
                let values: Vec<ast::Expr> = match &a.value {
                    ast::Expr::Tuple(v) => v.clone(),
                    ast::Expr::Nested(v) if names.len() == 1 => vec![(**v).clone()],
                    _ => {
                        return Err(Error::NotSupported(
                            "UPDATE SET (columns) = (sub-SELECT)".into(),
                        ));
                    }
                };
                if values.len() != names.len() {
                    return Err(Error::sql(
                        "42601",
                        "number of columns does not match number of values",
                    ));
                }
                for (n, v) in names.iter().zip(&values) {
                    set_one(n, v)?;
                }
            }
        }
    }
    Ok(table
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| assigned.remove(&i).unwrap_or_else(|| quote(&c.name)))
        .collect())
}

/// What the query found: the new rows (the table's schema), the old values of the
/// key columns, and the RETURNING rows.
struct Found {
    new_rows: RecordBatch,
    old: Vec<ArrayRef>,
    returned: Option<(SchemaRef, RecordBatch)>,
}

async fn compute(s: &Session, state: &SessionState, plan: &Plan) -> Result<Found> {
    let stmt = super::parse(&plan.sql)?
        .pop()
        .ok_or_else(|| Error::Internal("UPDATE planned no query".into()))?;
    let Prepared::Plan {
        plan: lp, names, ..
    } = s.prepare_in(state, stmt, &[]).await?
    else {
        return Err(Error::Internal("UPDATE query planned as native".into()));
    };
    let df = DataFrame::new(state.clone(), lp);
    let planned: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await?;
    // The batches' own types (an expression may compute a type its plan does not say).
    let schema = batches.first().map_or(planned, |b| b.schema());
    let mut all = arrow::compute::concat_batches(&schema, &batches)?;
    let t = &plan.table;
    let n_cols = t.columns.len();
    let n_old = plan.old_cols.len();
    let mut next = n_cols + n_old;
    if plan.has_from {
        // A row FROM joins several times is updated once (with one of them).
        let rid = arrow::compute::cast(all.column(next), &DataType::UInt64)?;
        let rid = rid.as_primitive::<arrow::datatypes::UInt64Type>();
        let mut seen = std::collections::HashSet::new();
        let keep: UInt32Array = (0..rid.len())
            .filter(|i| seen.insert(rid.value(*i)))
            .map(|i| i as u32)
            .collect();
        if keep.len() != all.num_rows() {
            all = arrow::compute::take_record_batch(&all, &keep)?;
        }
        next += 1;
    }
    let fields: Vec<Field> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| Field::new(&c.name, all.column(i).data_type().clone(), true))
        .collect();
    let raw = RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        all.columns()[..n_cols].to_vec(),
    )?;
    let new_rows = crate::write::validate(t, &raw)?;
    let old = all.columns()[n_cols..n_cols + n_old].to_vec();
    let returned = if plan.returning {
        let names = names.map(|n| n[next..].to_vec());
        let cols = all.columns()[next..].to_vec();
        let fields: Vec<Field> = schema.fields()[next..]
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = names
                    .as_ref()
                    .and_then(|n| n.get(i).cloned())
                    .unwrap_or_else(|| f.name().clone());
                Field::new(name, f.data_type().clone(), true)
            })
            .collect();
        let rs: SchemaRef = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new_with_options(
            rs.clone(),
            cols,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(all.num_rows())),
        )?;
        Some((rs, batch))
    } else {
        None
    };
    Ok(Found {
        new_rows,
        old,
        returned,
    })
}

/// Columns qualified by the table's name (how staged and committed deletions name
/// them), whatever the statement called the table.
fn requalify(e: Expr, table: &str) -> Result<Expr> {
    Ok(e.transform(|e| match e {
        Expr::Column(c) => Ok(Transformed::yes(Expr::Column(
            datafusion::common::Column::new(Some(table), c.name),
        ))),
        other => Ok(Transformed::no(other)),
    })?
    .data)
}

/// The deletion that removes the rows the query read: the WHERE clause itself when
/// it is a predicate on the table alone, else membership in the set of old rows
/// (within their time range, for pruning). Columns qualified by the table name.
fn deletion(state: &SessionState, plan: &Plan, found: &Found, by_set: bool) -> Result<Expr> {
    let t = &plan.table;
    if !by_set && !plan.has_from && !t.dedups() {
        let Some(w) = &plan.selection else {
            return Ok(lit(true));
        };
        let schema = DFSchema::try_from_qualified_schema(plan.alias.as_str(), &t.schema())?;
        if let Ok(e) = state.create_logical_expr(w, &schema) {
            let subquery = e
                .exists(|e| {
                    Ok(matches!(
                        e,
                        Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
                    ))
                })
                .unwrap_or(true);
            if !subquery && !e.is_volatile() {
                return requalify(e, &t.name);
            }
        }
    }
    let col = |i: usize| {
        Expr::Column(datafusion::common::Column::new(
            Some(t.name.as_str()),
            t.columns[i].name.clone(),
        ))
    };
    let matching = &plan.old_cols[..plan.match_len];
    let types: Vec<DataType> = matching
        .iter()
        .map(|i| t.columns[*i].sql_type.to_arrow())
        .collect();
    let set = RowIn::new(&found.old[..plan.match_len], types)?;
    let mut pred = set.call(matching.iter().map(|i| col(*i)).collect());
    if let Some(ti) = t.time_index()
        && let Some(pos) = matching.iter().position(|c| *c == ti)
        && let Some((lo, hi)) = time_span(&found.old[pos])?
    {
        let dt = t.columns[ti].sql_type.to_arrow();
        let bound = |v: i64| ScalarValue::TimestampMicrosecond(Some(v), None).cast_to(&dt);
        pred = col(ti)
            .gt_eq(lit(bound(lo)?))
            .and(col(ti).lt_eq(lit(bound(hi)?)))
            .and(pred);
    }
    Ok(pred)
}

/// 23505 when a new row takes a unique key's value that a stored row keeps (one
/// the statement does not replace) or another new row has.
async fn check_keys(s: &Session, t: &TableDef, plan: &Plan, found: &Found) -> Result<()> {
    if !t.checks_keys() {
        return Ok(());
    }
    let old_fields: Vec<Field> = plan
        .old_cols
        .iter()
        .zip(&found.old)
        .map(|(i, a)| Field::new(&t.columns[*i].name, a.data_type().clone(), true))
        .collect();
    let old = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(old_fields)),
        found.old.clone(),
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(found.new_rows.num_rows())),
    )?;
    for key in &t.keys {
        let c = s.engine.find_keys(t, key, &found.new_rows).await?;
        let replaced: std::collections::HashSet<Box<[u8]>> =
            super::upsert::key_bytes(t, key, &old)?
                .into_iter()
                .flatten()
                .collect();
        let new_keys = super::upsert::key_bytes(t, key, &found.new_rows)?;
        for (i, k) in new_keys.iter().enumerate() {
            let kept = c.existing[i] && k.as_ref().is_some_and(|k| !replaced.contains(k));
            if c.repeated[i] || kept {
                return Err(Error::Unique {
                    constraint: key.name.clone(),
                    detail: format!(
                        "{} already exists.",
                        crate::engine::keys::key_text(&found.new_rows, key, i)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Oldest and newest of a time column (microseconds).
fn time_span(a: &ArrayRef) -> Result<Option<(i64, i64)>> {
    let micros = arrow::compute::cast(
        a,
        &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
    )?;
    let p = micros.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    Ok(arrow::compute::min(p).zip(arrow::compute::max(p)))
}

/// Outside a transaction block: read, then replace in one commit; again when the
/// stored rows changed in between.
async fn apply(s: &Session, plan: &Plan) -> Result<(u64, Option<(SchemaRef, RecordBatch)>)> {
    let mut by_set = false;
    let mut attempt = 0;
    let _keys = if plan.table.checks_keys() {
        Some(s.engine.lock_keys(plan.table.id).await)
    } else {
        None
    };
    loop {
        attempt += 1;
        s.engine.flush().await?;
        let m = s.engine.catalog().snapshot();
        let (_, t) = m
            .table_by_id(plan.table.id)
            .ok_or_else(|| Error::UndefinedTable(plan.table.name.clone()))?;
        let t = t.clone();
        let mut cfg = s.ctx.copied_config();
        cfg = cfg.with_extension(Arc::new(PinnedFiles(HashMap::from([(t.id, t.clone())]))));
        let state = SessionStateBuilder::new_from_existing(s.ctx.state())
            .with_config(cfg)
            .build();
        let found = compute(s, &state, plan).await?;
        let n = found.new_rows.num_rows() as u64;
        if n == 0 {
            return Ok((0, found.returned));
        }
        check_keys(s, &t, plan, &found).await?;
        super::fkeys::check_new_rows(s, &t, &found.new_rows).await?;
        let logical = deletion(&state, plan, &found, by_set)?;
        let df_schema = crate::query::staged::qualified_schema(&t)?;
        let physical = state.create_physical_expr(logical.clone(), &df_schema)?;
        let files = crate::query::provider::files_to_delete_from(&state, &t, &logical, &physical)?;
        let change = TableChange {
            table: t.clone(),
            pred: Some(physical),
            files,
            inserts: vec![found.new_rows],
            refreshed: vec![],
            expect_removed: (!t.dedups()).then_some(n),
        };
        match s.engine.commit_changes(&s.db, vec![change]).await {
            Ok(()) => return Ok((n, found.returned)),
            Err(e @ (Error::Changed(_) | Error::Catalog(_))) if attempt < ATTEMPTS => {
                tracing::info!(table = %t.name, reason = %e, "UPDATE runs again");
                by_set = matches!(e, Error::Changed(_));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Inside a transaction block: the rows the session sees, replaced at COMMIT.
async fn stage(s: &Session, plan: &Plan) -> Result<(u64, Option<(SchemaRef, RecordBatch)>)> {
    let state = s.ctx.state();
    let found = compute(s, &state, plan).await?;
    let n = found.new_rows.num_rows() as u64;
    if n == 0 {
        return Ok((0, found.returned));
    }
    super::fkeys::check_new_rows(s, &plan.table, &found.new_rows).await?;
    let pred = deletion(&state, plan, &found, false)?;
    s.staging.delete(plan.table.id, pred);
    s.staging.insert(&plan.table, found.new_rows)?;
    Ok((n, found.returned))
}

/// DELETE on a table that merges duplicate keys (line protocol, keyed
/// hypertables): the WHERE clause picks rows as readers see them (merged), and
/// every stored version of their keys goes, so no older version comes back.
/// Returns the rows deleted as the session saw them.
pub async fn delete_merged(
    s: &Session,
    table: &Arc<TableDef>,
    from_sql: &str,
    selection: Option<&ast::Expr>,
) -> Result<u64> {
    let keys = crate::storage::dedup::key_indices(table, &table.schema())
        .ok_or_else(|| Error::Internal("delete_merged on a table without a key".into()))?;
    let cols: Vec<String> = keys
        .iter()
        .map(|i| quote(&table.columns[*i].name))
        .collect();
    let mut sql = format!("SELECT {} FROM {from_sql}", cols.join(", "));
    if let Some(w) = selection {
        sql.push_str(&format!(" WHERE {w}"));
    }
    let in_block = s.staging.in_block();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (t, state) = if in_block {
            (table.clone(), s.ctx.state())
        } else {
            s.engine.flush().await?;
            let m = s.engine.catalog().snapshot();
            let (_, t) = m
                .table_by_id(table.id)
                .ok_or_else(|| Error::UndefinedTable(table.name.clone()))?;
            let t = t.clone();
            let cfg = s
                .ctx
                .copied_config()
                .with_extension(Arc::new(PinnedFiles(HashMap::from([(t.id, t.clone())]))));
            let state = SessionStateBuilder::new_from_existing(s.ctx.state())
                .with_config(cfg)
                .build();
            (t, state)
        };
        let stmt = super::parse(&sql)?
            .pop()
            .ok_or_else(|| Error::Internal("DELETE planned no query".into()))?;
        let Prepared::Plan { plan: lp, .. } = s.prepare_in(&state, stmt, &[]).await? else {
            return Err(Error::Internal("DELETE query planned as native".into()));
        };
        let df = DataFrame::new(state.clone(), lp);
        let batches = df.collect().await?;
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        if n == 0 {
            return Ok(0);
        }
        let schema = batches[0].schema();
        let found = arrow::compute::concat_batches(&schema, &batches)?;
        let plan = Plan {
            table: t.clone(),
            alias: t.name.clone(),
            sql: String::new(),
            old_cols: keys.clone(),
            match_len: keys.len(),
            has_from: false,
            selection: None,
            returning: false,
        };
        let f = Found {
            new_rows: RecordBatch::new_empty(t.schema()),
            old: found.columns().to_vec(),
            returned: None,
        };
        let pred = deletion(&state, &plan, &f, true)?;
        if in_block {
            s.staging.delete(t.id, pred);
            return Ok(n as u64);
        }
        let df_schema = crate::query::staged::qualified_schema(&t)?;
        let physical = state.create_physical_expr(pred.clone(), &df_schema)?;
        let files = crate::query::provider::files_to_delete_from(&state, &t, &pred, &physical)?;
        let change = TableChange {
            table: t.clone(),
            pred: Some(physical),
            files,
            inserts: vec![],
            refreshed: vec![],
            expect_removed: None,
        };
        match s.engine.commit_changes(&s.db, vec![change]).await {
            Ok(()) => return Ok(n as u64),
            Err(e @ Error::Catalog(_)) if attempt < ATTEMPTS => {
                tracing::info!(table = %t.name, reason = %e, "DELETE runs again");
            }
            Err(e) => return Err(e),
        }
    }
}
