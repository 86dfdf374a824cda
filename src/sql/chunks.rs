//! Chunk and hypertable management with TimescaleDB's API: `show_chunks`,
//! `drop_chunks`, retention policies and the background job that applies them,
//! size and row-count functions, `DELETE` (whole files dropped by their
//! statistics, others rewritten without the deleted rows) and `TRUNCATE`.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{self, Expr, FunctionArg};

use super::{Output, Session};
use crate::catalog::{Retention, TableDef};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// Management functions this module runs (through `calls`, the planner's functions).
pub const FUNCTIONS: [&str; 10] = [
    "add_continuous_aggregate_policy",
    "remove_continuous_aggregate_policy",
    "show_chunks",
    "drop_chunks",
    "add_retention_policy",
    "remove_retention_policy",
    "hypertable_size",
    "hypertable_detailed_size",
    "chunks_detailed_size",
    "approximate_row_count",
];

/// Functions that return a record: a bare `SELECT f(...)` gives its columns.
pub const RECORD_FUNCTIONS: [&str; 2] = ["hypertable_detailed_size", "chunks_detailed_size"];

/// Functions also usable in FROM (registered as DataFusion table functions).
pub const TABLE_FUNCTIONS: [&str; 7] = [
    "show_chunks",
    "hypertable_detailed_size",
    "chunks_detailed_size",
    "hypertable_compression_stats",
    "hypertable_columnstore_stats",
    "chunk_compression_stats",
    "chunk_columnstore_stats",
];

/// Default `schedule_interval` of a retention policy, as TimescaleDB.
const DEFAULT_SCHEDULE: i64 = 86_400_000_000;

/// No rows of `schema`.
fn empty_output(schema: SchemaRef) -> Result<Output> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| arrow::array::new_empty_array(f.data_type()))
        .collect();
    rows_output(schema, columns)
}

pub(crate) fn rows_output(schema: SchemaRef, columns: Vec<Arc<dyn Array>>) -> Result<Output> {
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    let stream =
        RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter(vec![Ok(batch)]));
    Ok(Output::Rows(schema, Box::pin(stream)))
}

/// Result columns of one of [`FUNCTIONS`] (for Describe in the extended protocol).
pub fn result_schema(name: &str) -> SchemaRef {
    let int = |n: &str| Field::new(n, DataType::Int64, true);
    let text = |n: &str| Field::new(n, DataType::Utf8, true);
    Arc::new(Schema::new(match name {
        "hypertable_size"
        | "approximate_row_count"
        | "add_retention_policy"
        | "add_continuous_aggregate_policy" => vec![int(name)],
        "hypertable_detailed_size" => vec![
            int("table_bytes"),
            int("index_bytes"),
            int("toast_bytes"),
            int("total_bytes"),
            text("node_name"),
        ],
        "chunks_detailed_size" => vec![
            text("chunk_schema"),
            text("chunk_name"),
            int("table_bytes"),
            int("index_bytes"),
            int("toast_bytes"),
            int("total_bytes"),
            text("node_name"),
        ],
        _ => vec![text(name)],
    }))
}

fn text_column(name: &str, values: Vec<String>) -> Result<Output> {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, true)]));
    rows_output(schema, vec![Arc::new(StringArray::from(values))])
}

fn int_column(name: &str, value: Option<i64>) -> Result<Output> {
    rows_output(
        result_schema(name),
        vec![Arc::new(Int64Array::from(vec![value]))],
    )
}

/// Arguments by position and by name; `names` gives the positional order.
pub(crate) struct Args {
    values: Vec<Option<Expr>>,
}

impl Args {
    pub(crate) fn new(func: &str, args: &[FunctionArg], names: &[&str]) -> Result<Args> {
        let (pos, named) = super::args::split_args(args);
        if pos.len() > names.len() {
            return Err(signature_error(func));
        }
        let mut values: Vec<Option<Expr>> = pos.into_iter().map(Some).collect();
        values.resize(names.len(), None);
        for (n, e) in named {
            let i = names.iter().position(|x| *x == n).ok_or_else(|| {
                Error::sql(
                    "42883",
                    format!(
                        "function {func} has no parameter named \"{n}\". Hint: {}",
                        hint(func)
                    ),
                )
            })?;
            values[i] = Some(e);
        }
        Ok(Args { values })
    }
    pub(crate) fn get(&self, i: usize) -> Option<&Expr> {
        self.values.get(i).and_then(|e| e.as_ref())
    }
}

fn hint(func: &str) -> &'static str {
    match func {
        "show_chunks" => {
            "show_chunks(relation regclass, older_than \"any\" = NULL, newer_than \"any\" = NULL)"
        }
        "drop_chunks" => {
            "drop_chunks(relation regclass, older_than \"any\" = NULL, newer_than \"any\" = NULL, verbose boolean = false)"
        }
        "add_retention_policy" => {
            "add_retention_policy(relation regclass, drop_after \"any\", if_not_exists boolean = false, schedule_interval interval = NULL)"
        }
        "remove_retention_policy" => {
            "remove_retention_policy(relation regclass, if_exists boolean = false)"
        }
        _ => "(relation regclass)",
    }
}

fn signature_error(func: &str) -> Error {
    Error::sql(
        "42883",
        format!(
            "function {func} with these arguments does not exist. Hint: {}",
            hint(func)
        ),
    )
}

/// Whether management function `name` only reads (may run in a transaction block).
pub fn is_read_only(name: &str) -> bool {
    matches!(
        name,
        "show_chunks"
            | "hypertable_size"
            | "approximate_row_count"
            | "hypertable_detailed_size"
            | "chunks_detailed_size"
            | "sundial_flush"
            | "sundial_compact"
    )
}

/// Runs one of [`FUNCTIONS`].
pub async fn call(s: &Session, name: &str, args: &[FunctionArg]) -> Result<Output> {
    match name {
        "show_chunks" | "drop_chunks" => {
            // Read by drop_chunks' positions (show_chunks' calls arrive named).
            let a = Args::new(name, args, super::signatures::params("drop_chunks"))?;
            let table = relation(s, name, a.get(0))?;
            if a.get(4).is_some() || a.get(5).is_some() {
                return Err(Error::NotSupported(
                    "created_before / created_after: Sundial does not record chunk creation times"
                        .into(),
                ));
            }
            let older = time_bound(s, a.get(1)).await?;
            let newer = time_bound(s, a.get(2)).await?;
            check_range(older, newer)?;
            if name == "show_chunks" {
                let starts = s.engine.select_chunks(&table, older, newer);
                let names = starts.iter().map(|c| qualified(&table, *c)).collect();
                return text_column("show_chunks", names);
            }
            if older.is_none() && newer.is_none() {
                return Err(Error::sql(
                    "22023",
                    "invalid time range for dropping chunks. Hint: At least one of older_than and newer_than must be provided.",
                ));
            }
            let (t, dropped) = s
                .engine
                .drop_chunks(&s.db, &table.name, older, newer)
                .await?;
            text_column(
                "drop_chunks",
                dropped.iter().map(|c| qualified(&t, *c)).collect(),
            )
        }
        "add_retention_policy" => add_retention_policy(s, args).await,
        "add_continuous_aggregate_policy" => {
            let id = super::cagg::add_policy(s, args).await?;
            int_column(name, Some(id))
        }
        "remove_continuous_aggregate_policy" => {
            super::cagg::remove_policy(s, args)?;
            text_column(name, vec![String::new()])
        }
        "remove_retention_policy" => {
            let a = Args::new(name, args, super::signatures::params(name))?;
            let table = relation(s, name, a.get(0))?;
            let if_exists = a
                .get(1)
                .and_then(super::args::literal_text)
                .is_some_and(|v| super::args::truthy(&v));
            s.engine
                .catalog()
                .remove_retention(&s.db, &table.name, if_exists)?;
            text_column("remove_retention_policy", vec![String::new()])
        }
        "hypertable_size" => {
            let a = Args::new(name, args, &["hypertable"])?;
            let table = readable_relation(s, name, a.get(0))?;
            int_column("hypertable_size", table.map(|t| table_bytes(&t)))
        }
        "approximate_row_count" => {
            let a = Args::new(name, args, &["relation"])?;
            let name = super::args::regclass_name(a.get(0).ok_or_else(|| signature_error(name))?)?;
            let table = s.engine.catalog().snapshot().table(&s.db, &name)?.clone();
            int_column("approximate_row_count", Some(row_count(&s.engine, &table)))
        }
        "hypertable_detailed_size" => {
            let a = Args::new(name, args, &["hypertable"])?;
            match readable_relation(s, name, a.get(0))? {
                Some(t) => rows_output(result_schema(name), detailed_size_columns(&t)),
                None => empty_output(result_schema(name)),
            }
        }
        "chunks_detailed_size" => {
            let a = Args::new(name, args, &["hypertable"])?;
            match readable_relation(s, name, a.get(0))? {
                Some(t) => rows_output(result_schema(name), chunk_size_columns(&s.engine, &t)),
                None => empty_output(result_schema(name)),
            }
        }
        _ => Err(Error::Internal(format!("unhandled function {name}"))),
    }
}

/// Bytes of a table's chunk files.
pub fn table_bytes(t: &TableDef) -> i64 {
    t.files.iter().map(|f| f.bytes as i64).sum()
}

/// Rows in files plus rows still in memory (duplicates of line-protocol points
/// not yet merged count twice: it is an estimate, as in TimescaleDB).
pub fn row_count(engine: &Engine, t: &TableDef) -> i64 {
    let files: i64 = t.files.iter().map(|f| f.rows as i64).sum();
    let mem: i64 = engine
        .view(t.id)
        .map(|v| {
            v.mem
                .iter()
                .flat_map(|(_, b)| b.iter())
                .map(|b| b.batch.num_rows() as i64)
                .sum()
        })
        .unwrap_or(0);
    files + mem
}

pub(crate) fn qualified(t: &TableDef, start: i64) -> String {
    format!("_timescaledb_internal.{}", t.chunk_name(start))
}

/// The hypertable named by the first argument.
pub(crate) fn relation(s: &Session, func: &str, e: Option<&Expr>) -> Result<Arc<TableDef>> {
    let e = e.ok_or_else(|| signature_error(func))?;
    let name = super::args::regclass_name(e)?;
    hypertable(&s.engine.catalog().snapshot(), &s.db, &name)
}

/// Hypertable `name` of database `db`; for a continuous aggregate, its
/// materialization hypertable (as TimescaleDB's chunk functions take either).
fn hypertable(m: &crate::catalog::Manifest, db: &str, name: &str) -> Result<Arc<TableDef>> {
    let d = m.database(db)?;
    if let Some(id) = d.views.get(name).and_then(|v| v.cagg)
        && let Some(t) = d.tables.values().find(|t| t.id == id)
    {
        return Ok(t.clone());
    }
    let t = m.table(db, name)?.clone();
    if !t.is_hypertable() {
        return Err(Error::sql(
            "TS001",
            format!("\"{name}\" is not a hypertable or a continuous aggregate"),
        ));
    }
    Ok(t)
}

/// Like [`hypertable`], for the size and row-count readers: `None` for a plain table
/// (TimescaleDB answers NULL or no rows there rather than an error).
fn readable(m: &crate::catalog::Manifest, db: &str, name: &str) -> Result<Option<Arc<TableDef>>> {
    match hypertable(m, db, name) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.sqlstate() == "TS001" => Ok(None),
        Err(e) => Err(e),
    }
}

/// The hypertable named by a reader's first argument (`None`: a plain table).
fn readable_relation(s: &Session, func: &str, e: Option<&Expr>) -> Result<Option<Arc<TableDef>>> {
    let e = e.ok_or_else(|| signature_error(func))?;
    let name = super::args::regclass_name(e)?;
    readable(&s.engine.catalog().snapshot(), &s.db, &name)
}

/// TimescaleDB rejects `older_than <= newer_than` (an empty or inverted range).
fn check_range(older: Option<i64>, newer: Option<i64>) -> Result<()> {
    match (older, newer) {
        (Some(o), Some(n)) if o <= n => Err(Error::sql(
            "22023",
            "invalid time range. Hint: The start of the time range must be before the end.",
        )),
        _ => Ok(()),
    }
}

/// An `older_than` / `newer_than` / `drop_after` argument as a point in time (µs):
/// an interval counts back from now; a timestamp or date is taken as is.
async fn time_bound(s: &Session, e: Option<&Expr>) -> Result<Option<i64>> {
    match e {
        Some(e) => bound_of(s.scalar(e).await?),
        None => Ok(None),
    }
}

/// See [`time_bound`]; for an already evaluated argument.
fn bound_of(v: ScalarValue) -> Result<Option<i64>> {
    if v.is_null() {
        return Ok(None);
    }
    if let Some(micros) = interval_micros(&v) {
        return Ok(Some(now_micros() - micros?));
    }
    let tstz = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
    match v {
        ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t)) => {
            if let Ok(micros) = super::args::parse_chunk_interval(&t) {
                return Ok(Some(now_micros() - micros));
            }
            let mut text = t.clone();
            crate::interval::complete_seconds(&mut text);
            match ScalarValue::Utf8(Some(text)).cast_to(&tstz) {
                Ok(ScalarValue::TimestampMicrosecond(Some(v), _)) => Ok(Some(v)),
                _ => Err(Error::sql(
                    "22007",
                    format!("invalid input syntax for type interval or timestamptz: \"{t}\""),
                )),
            }
        }
        other => {
            let dt = other.data_type();
            match other.cast_to(&tstz) {
                Ok(ScalarValue::TimestampMicrosecond(Some(v), _))
                    if matches!(
                        dt,
                        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64
                    ) =>
                {
                    Ok(Some(v))
                }
                _ => Err(Error::sql(
                    "22023",
                    format!(
                        "invalid time argument type \"{dt}\". Hint: use an interval, timestamptz or date"
                    ),
                )),
            }
        }
    }
}

/// An interval value in µs (months as 30 days, as PostgreSQL's interval arithmetic
/// on epochs does), or `None` when `v` is not an interval.
fn interval_micros(v: &ScalarValue) -> Option<Result<i64>> {
    let iv = match v {
        ScalarValue::IntervalMonthDayNano(Some(iv)) => *iv,
        ScalarValue::IntervalDayTime(_) | ScalarValue::IntervalYearMonth(_) => {
            match v.cast_to(&DataType::Interval(
                arrow::datatypes::IntervalUnit::MonthDayNano,
            )) {
                Ok(ScalarValue::IntervalMonthDayNano(Some(iv))) => iv,
                _ => return Some(Err(Error::Internal("interval conversion".into()))),
            }
        }
        _ => return None,
    };
    Some(Ok((iv.months as i64 * 30 + iv.days as i64)
        * 86_400_000_000
        + iv.nanoseconds / 1000))
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

async fn add_retention_policy(s: &Session, args: &[FunctionArg]) -> Result<Output> {
    let name = "add_retention_policy";
    let a = Args::new(name, args, super::signatures::params(name))?;
    let table = relation(s, name, a.get(0))?;
    if a.get(6).is_some() {
        return Err(Error::NotSupported(
            "drop_created_before: Sundial does not record chunk creation times".into(),
        ));
    }
    let drop_after = a.get(1).ok_or_else(|| signature_error(name))?;
    let bad_drop_after = || {
        Error::sql(
            "22023",
            "invalid value for drop_after. Hint: drop_after must be an interval for a hypertable partitioned by time",
        )
    };
    let drop_after_micros = match s.scalar(drop_after).await? {
        v if interval_micros(&v).is_some() => interval_micros(&v).ok_or_else(bad_drop_after)??,
        ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t))
            if t.trim().contains(|c: char| c.is_ascii_alphabetic()) =>
        {
            super::args::parse_chunk_interval(&t).map_err(|_| bad_drop_after())?
        }
        _ => return Err(bad_drop_after()),
    };
    let if_not_exists = a
        .get(2)
        .and_then(super::args::literal_text)
        .is_some_and(|v| super::args::truthy(&v));
    let schedule = match a.get(3) {
        Some(e) => match interval_micros(&s.scalar(e).await?) {
            Some(m) => m?,
            None => super::args::parse_chunk_interval(
                &super::args::literal_text(e).unwrap_or_default(),
            )?,
        },
        None => DEFAULT_SCHEDULE,
    };
    if schedule <= 0 {
        return Err(Error::sql("22023", "schedule_interval must be positive"));
    }
    let initial_start_micros = super::schedule::job_start(s, a.get(4), a.get(5)).await?;
    let policy = Retention {
        drop_after_micros,
        schedule_interval_micros: schedule,
        drop_after_text: super::args::literal_text(drop_after)
            .unwrap_or_else(|| drop_after.to_string()),
        initial_start_micros,
    };
    let job = s
        .engine
        .catalog()
        .set_retention(&s.db, &table.name, policy, if_not_exists)?;
    if job > 0 {
        s.engine.jobs().schedule_from(job, initial_start_micros);
    }
    int_column("add_retention_policy", Some(job))
}

/// `CALL run_job(job_id)`: runs a retention job now, in this session.
pub async fn run_job(s: &Session, f: &ast::Function) -> Result<Output> {
    let args = match &f.args {
        ast::FunctionArguments::List(l) => l.args.clone(),
        _ => vec![],
    };
    let a = Args::new("run_job", &args, &["job_id"])?;
    let id: i64 = a
        .get(0)
        .and_then(super::args::literal_text)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Error::sql("42883", "run_job(job_id integer)"))?;
    let m = s.engine.catalog().snapshot();
    let found = m.databases.iter().find_map(|(db, d)| {
        d.tables
            .values()
            .find(|t| t.retention.is_some() && t.retention_job_id() == id)
            .map(|t| (db.clone(), t.clone()))
    });
    // A compression (columnstore) policy.
    let compression = m.databases.iter().find_map(|(db, d)| {
        d.tables.values().find_map(|t| {
            let p = t.compression.as_ref()?.policy.as_ref()?;
            (p.job_id == id).then(|| (db.clone(), t.clone(), p.clone()))
        })
    });
    if let Some((db, t, p)) = compression {
        s.engine.jobs().started(id);
        s.engine.run_compression(&db, &t, &p).await?;
        return Ok(Output::Command("CALL".into()));
    }
    let Some((db, t)) = found else {
        // A continuous aggregate's refresh policy, in this database.
        let policy = m.database(&s.db).ok().and_then(|d| {
            d.tables.values().find_map(|t| {
                let c = t.cagg.as_ref()?;
                let p = c.policy.as_ref().filter(|p| p.job_id == id)?;
                Some((c.view.clone(), p.clone()))
            })
        });
        let Some((view, p)) = policy else {
            return Err(Error::sql("42704", format!("job {id} not found")));
        };
        s.engine.jobs().started(id);
        super::cagg::run_policy(s, &view, &p).await?;
        return Ok(Output::Command("CALL".into()));
    };
    let r = t.retention.clone().unwrap_or_else(|| Retention {
        drop_after_micros: i64::MAX,
        schedule_interval_micros: DEFAULT_SCHEDULE,
        drop_after_text: String::new(),
        initial_start_micros: None,
    });
    s.engine.jobs().started(id);
    s.engine.run_retention(&db, &t, &r).await?;
    Ok(Output::Command("CALL".into()))
}

/// `DELETE FROM t [WHERE ...]`: files whose statistics show every row matches are
/// dropped, files that may hold matching rows are rewritten without them.
pub async fn delete(s: &Session, del: &ast::Delete) -> Result<Output> {
    if del.using.is_some() || del.returning.is_some() || del.limit.is_some() {
        return Err(Error::NotSupported(
            "DELETE with USING, RETURNING or LIMIT".into(),
        ));
    }
    let from = match &del.from {
        ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
    };
    let [twj] = from.as_slice() else {
        return Err(Error::NotSupported("DELETE from several tables".into()));
    };
    let ast::TableFactor::Table { name, .. } = &twj.relation else {
        return Err(Error::NotSupported("DELETE from a non-table".into()));
    };
    if !twj.joins.is_empty() {
        return Err(Error::NotSupported("DELETE with joins".into()));
    }
    let table_name = super::args::table_name(name)?;
    let current = s
        .engine
        .catalog()
        .snapshot()
        .table(&s.db, &table_name)?
        .clone();
    super::fkeys::before_delete(s, &current, del.selection.as_ref()).await?;
    if current.dedups() && del.selection.is_some() {
        let n = super::update::delete_merged(
            s,
            &current,
            &twj.relation.to_string(),
            del.selection.as_ref(),
        )
        .await?;
        return Ok(Output::Command(format!("DELETE {n}")));
    }
    if s.staging.in_block() {
        return stage_delete(s, &table_name, del.selection.as_ref()).await;
    }
    // A compaction may replace the files between the snapshot and the swap: then
    // nothing was applied and the deletion runs again on the new files.
    let mut attempt = 0;
    loop {
        attempt += 1;
        s.engine.flush().await?;
        let m = s.engine.catalog().snapshot();
        let t = m.table(&s.db, &table_name)?.clone();
        let result = match &del.selection {
            None => s.engine.truncate(&t),
            Some(selection) => {
                let schema = t.schema();
                let df_schema = DFSchema::try_from_qualified_schema(table_name.as_str(), &schema)?;
                let state = s.ctx.state();
                let logical = state.create_logical_expr(&selection.to_string(), &df_schema)?;
                let pred = state.create_physical_expr(logical.clone(), &df_schema)?;
                let files =
                    crate::query::provider::files_to_delete_from(&state, &t, &logical, &pred)?;
                s.engine.delete_rows(&s.db, &t, &files, &pred).await
            }
        };
        match result {
            Ok(n) => return Ok(Output::Command(format!("DELETE {n}"))),
            Err(Error::Catalog(e)) if attempt < 4 => {
                tracing::info!(table = %table_name, reason = %e, "DELETE runs again");
            }
            Err(e) => return Err(e),
        }
    }
}

/// DELETE inside a transaction block: counts the rows the session sees matching
/// (its own staged rows included), then stages the deletion for COMMIT.
async fn stage_delete(
    s: &Session,
    table_name: &str,
    selection: Option<&ast::Expr>,
) -> Result<Output> {
    let t = s
        .engine
        .catalog()
        .snapshot()
        .table(&s.db, table_name)?
        .clone();
    let quoted = format!("\"{}\"", table_name.replace('"', "\"\""));
    let count_sql = match selection {
        Some(w) => format!("SELECT count(*) FROM {quoted} WHERE {w}"),
        None => format!("SELECT count(*) FROM {quoted}"),
    };
    let batches = s.ctx.sql(&count_sql).await?.collect().await?;
    let n = match super::first_value(&batches)? {
        ScalarValue::Int64(Some(n)) => n,
        _ => 0,
    };
    let pred = match selection {
        Some(w) => {
            let df_schema = crate::query::staged::qualified_schema(&t)?;
            s.ctx
                .state()
                .create_logical_expr(&w.to_string(), &df_schema)?
        }
        None => datafusion::prelude::lit(true),
    };
    s.staging.delete(t.id, pred);
    Ok(Output::Command(format!("DELETE {n}")))
}

/// `TRUNCATE [TABLE] t [, ...]`.
pub async fn truncate(s: &Session, names: &[ast::ObjectName]) -> Result<Output> {
    let tables = names
        .iter()
        .map(super::args::table_name)
        .collect::<Result<Vec<_>>>()?;
    super::fkeys::before_truncate(s, &tables)?;
    if s.staging.in_block() {
        let m = s.engine.catalog().snapshot();
        let mut ids = vec![];
        for n in names {
            ids.push(m.table(&s.db, &super::args::table_name(n)?)?.id);
        }
        for id in ids {
            s.staging.delete(id, datafusion::prelude::lit(true));
        }
        return Ok(Output::Command("TRUNCATE TABLE".into()));
    }
    s.engine.flush().await?;
    for n in names {
        let name = super::args::table_name(n)?;
        // Again on a fresh snapshot when a compaction replaced files meanwhile.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let t = s.engine.catalog().snapshot().table(&s.db, &name)?.clone();
            match s.engine.truncate(&t) {
                Err(Error::Catalog(_)) if attempt < 4 => {}
                other => {
                    other?;
                    break;
                }
            }
        }
    }
    Ok(Output::Command("TRUNCATE TABLE".into()))
}

/// Evaluates a constant logical expression (a table function argument).
fn const_value(e: &datafusion::logical_expr::Expr) -> datafusion::error::Result<ScalarValue> {
    super::functions::const_value(e, &datafusion::execution::context::ExecutionProps::new())
}

/// Table functions and scalar functions over the catalog, usable anywhere in a
/// query: `SELECT * FROM show_chunks('t')`, `pg_size_pretty(hypertable_size('t'))`.
#[derive(Debug)]
struct ChunkFn {
    name: &'static str,
    engine: Arc<Engine>,
    db: String,
}

impl ChunkFn {
    fn table(
        &self,
        e: Option<&datafusion::logical_expr::Expr>,
    ) -> datafusion::error::Result<Option<Arc<TableDef>>> {
        let name = match e.map(const_value).transpose()? {
            Some(ScalarValue::Utf8(Some(n))) | Some(ScalarValue::Utf8View(Some(n))) => n,
            _ => {
                return Err(datafusion::error::DataFusionError::from(signature_error(
                    self.name,
                )));
            }
        };
        let name = super::args::regclass_name(&Expr::value(ast::Value::SingleQuotedString(name)))
            .map_err(datafusion::error::DataFusionError::from)?;
        // show_chunks needs a hypertable; the size functions answer no rows for a
        // plain table, as TimescaleDB does.
        let m = self.engine.catalog().snapshot();
        let t = match self.name {
            "show_chunks" => hypertable(&m, &self.db, &name).map(Some),
            // An estimate of any table's rows.
            "approximate_row_count" => match readable(&m, &self.db, &name) {
                Ok(None) => m.table(&self.db, &name).map(|t| Some(t.clone())),
                other => other,
            },
            _ => readable(&m, &self.db, &name),
        };
        t.map_err(datafusion::error::DataFusionError::from)
    }
}

impl ChunkFn {
    /// The rows of this function for `exprs`, from the catalog as it is now.
    fn rows(
        &self,
        exprs: &[datafusion::logical_expr::Expr],
    ) -> datafusion::error::Result<RecordBatch> {
        let Some(t) = self.table(exprs.first())? else {
            return Ok(RecordBatch::new_empty(result_schema(self.name)));
        };
        let bound = |i: usize| -> datafusion::error::Result<Option<i64>> {
            match exprs.get(i) {
                Some(e) => {
                    bound_of(const_value(e)?).map_err(datafusion::error::DataFusionError::from)
                }
                None => Ok(None),
            }
        };
        let columns: Vec<Arc<dyn Array>> = match self.name {
            "show_chunks" => {
                let (older, newer) = (bound(1)?, bound(2)?);
                check_range(older, newer).map_err(datafusion::error::DataFusionError::from)?;
                let starts = self.engine.select_chunks(&t, older, newer);
                vec![Arc::new(StringArray::from(
                    starts.iter().map(|c| qualified(&t, *c)).collect::<Vec<_>>(),
                ))]
            }
            "hypertable_detailed_size" => detailed_size_columns(&t),
            _ => chunk_size_columns(&self.engine, &t),
        };
        Ok(RecordBatch::try_new(result_schema(self.name), columns)?)
    }
}

impl datafusion::catalog::TableFunctionImpl for ChunkFn {
    fn call_with_args(
        &self,
        args: datafusion::catalog::TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn datafusion::datasource::TableProvider>> {
        let exprs = args.exprs().to_vec();
        // Errors (no such hypertable, a bad range) when planning; the rows themselves
        // when the plan runs, so a kept or prepared plan shows the chunks of then.
        self.rows(&exprs)?;
        let f = ChunkFn {
            name: self.name,
            engine: self.engine.clone(),
            db: self.db.clone(),
        };
        crate::query::deferred::sync_table(result_schema(self.name), move || f.rows(&exprs))
    }
}

/// The row of `hypertable_detailed_size`: all bytes are table bytes (no indexes).
fn detailed_size_columns(t: &TableDef) -> Vec<Arc<dyn Array>> {
    let b = table_bytes(t);
    vec![
        Arc::new(Int64Array::from(vec![b])),
        Arc::new(Int64Array::from(vec![0])),
        Arc::new(Int64Array::from(vec![0])),
        Arc::new(Int64Array::from(vec![b])),
        Arc::new(StringArray::from(vec![None::<String>])),
    ]
}

/// The rows of `chunks_detailed_size`.
fn chunk_size_columns(engine: &Engine, t: &TableDef) -> Vec<Arc<dyn Array>> {
    let (names, sizes) = chunk_sizes(engine, t);
    let n = names.len();
    vec![
        Arc::new(StringArray::from(vec!["_timescaledb_internal"; n])),
        Arc::new(StringArray::from(names)),
        Arc::new(Int64Array::from(sizes.clone())),
        Arc::new(Int64Array::from(vec![0; n])),
        Arc::new(Int64Array::from(vec![0; n])),
        Arc::new(Int64Array::from(sizes)),
        Arc::new(StringArray::from(vec![None::<String>; n])),
    ]
}

/// Chunk names and their file bytes.
fn chunk_sizes(engine: &Engine, t: &TableDef) -> (Vec<String>, Vec<i64>) {
    engine
        .chunk_starts(t)
        .into_iter()
        .map(|start| {
            (
                t.chunk_name(start),
                t.files
                    .iter()
                    .filter(|f| f.chunk_start == start)
                    .map(|f| f.bytes as i64)
                    .sum::<i64>(),
            )
        })
        .unzip()
}

/// `hypertable_size(t)` and `approximate_row_count(t)` as scalar functions.
#[derive(Debug)]
struct SizeFn {
    inner: ChunkFn,
    signature: datafusion::logical_expr::Signature,
}

impl PartialEq for SizeFn {
    fn eq(&self, o: &Self) -> bool {
        self.inner.name == o.inner.name && Arc::ptr_eq(&self.inner.engine, &o.inner.engine)
    }
}
impl Eq for SizeFn {}
impl std::hash::Hash for SizeFn {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.inner.name.hash(h)
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for SizeFn {
    fn name(&self) -> &str {
        self.inner.name
    }
    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<datafusion::logical_expr::ColumnarValue> {
        let names = datafusion::logical_expr::ColumnarValue::values_to_arrays(&args.args)?;
        let names = arrow::compute::cast(&names[0], &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            let lit = datafusion::logical_expr::lit(names.value(i));
            // NULL for a plain table's hypertable_size, as in TimescaleDB.
            let t = self.inner.table(Some(&lit))?;
            out.push(t.map(|t| match self.inner.name {
                "hypertable_size" => table_bytes(&t),
                _ => row_count(&self.inner.engine, &t),
            }));
        }
        let arr: Arc<dyn Array> = Arc::new(Int64Array::from(out));
        crate::sql::functions::columnar(
            arr,
            args.args
                .iter()
                .all(|a| matches!(a, datafusion::logical_expr::ColumnarValue::Scalar(_))),
        )
    }
}

/// Registers the table and scalar forms of the catalog functions on a connection.
pub fn register(ctx: &datafusion::prelude::SessionContext, engine: &Arc<Engine>, db: &str) {
    let f = |name| ChunkFn {
        name,
        engine: engine.clone(),
        db: db.to_string(),
    };
    for name in [
        "show_chunks",
        "hypertable_detailed_size",
        "chunks_detailed_size",
    ] {
        ctx.register_udtf(name, Arc::new(f(name)));
    }
    for name in ["hypertable_size", "approximate_row_count"] {
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::from(SizeFn {
            inner: f(name),
            signature: datafusion::logical_expr::Signature::exact(
                vec![DataType::Utf8],
                datafusion::logical_expr::Volatility::Volatile,
            ),
        }));
    }
}
