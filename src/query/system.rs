//! System views computed from the catalog at scan time:
//! `timescaledb_information.{hypertables,chunks,dimensions,jobs,job_stats}` and
//! `sundial_chunk_files`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int16Array, Int32Array, Int64Array, IntervalMonthDayNanoArray,
    RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{
    DataType, Field, IntervalMonthDayNano, IntervalUnit, Schema, SchemaRef, TimeUnit,
};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session};
use datafusion::datasource::TableProvider;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::TableDef;
use crate::engine::Engine;

pub const INFO_SCHEMA: &str = "timescaledb_information";
pub const CHUNK_FILES: &str = "sundial_chunk_files";
/// What the last refresh of each continuous aggregate recomputed.
pub const CAGG_REFRESHES: &str = "sundial_cagg_refreshes";

type Builder = fn(&Engine, &str) -> DfResult<RecordBatch>;

/// Computes a system table's rows.
type Rows = Box<dyn Fn() -> DfResult<RecordBatch> + Send + Sync>;

/// A read-only table whose rows are computed when it is scanned (the
/// TimescaleDB-style views here, pg_catalog and information_schema).
pub struct SystemTable {
    schema: SchemaRef,
    build: Rows,
}

impl std::fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemTable")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl SystemTable {
    pub fn new(
        schema: SchemaRef,
        build: impl Fn() -> DfResult<RecordBatch> + Send + Sync + 'static,
    ) -> SystemTable {
        SystemTable {
            schema,
            build: Box::new(build),
        }
    }

    /// A view of database `db` computed by `build` from the engine's catalog.
    fn of(engine: Arc<Engine>, db: String, schema: Schema, build: Builder) -> SystemTable {
        SystemTable::new(Arc::new(schema), move || build(&engine, &db))
    }
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::View
    }
    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let batch = (self.build)()?;
        let src =
            MemorySourceConfig::try_new(&[vec![batch]], self.schema.clone(), projection.cloned())?;
        Ok(DataSourceExec::from_data_source(src))
    }
}

fn tstz() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC")))
}

fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

/// Field metadata naming the PostgreSQL type a column is described as where Arrow's
/// type names another: `name` for a text column (the values are the same in both
/// formats), `void` for the empty text of a function that returns nothing,
/// `regclass` for a chunk's name (`pg_typeof` only: sent as text).
pub const PG_TYPE_KEY: &str = "sundial.pg_type";

/// A column of PostgreSQL type `name`.
pub fn name(name: &str) -> Field {
    text(name).with_metadata(std::collections::HashMap::from([(
        PG_TYPE_KEY.to_string(),
        "name".to_string(),
    )]))
}

/// A column of PostgreSQL type `regclass` (sent as its text).
fn regclass(name: &str) -> Field {
    text(name).with_metadata(std::collections::HashMap::from([(
        PG_TYPE_KEY.to_string(),
        "regclass".to_string(),
    )]))
}

/// The `timescaledb_information` schema.
#[derive(Debug)]
pub struct InfoSchema {
    engine: Arc<Engine>,
    db: String,
}

impl InfoSchema {
    pub fn new(engine: Arc<Engine>, db: String) -> Self {
        InfoSchema { engine, db }
    }
}

const INFO_TABLES: [&str; 11] = [
    "hypertables",
    "compression_settings",
    "hypertable_compression_settings",
    "hypertable_columnstore_settings",
    "chunk_compression_settings",
    "chunk_columnstore_settings",
    "chunks",
    "dimensions",
    "jobs",
    "job_stats",
    "continuous_aggregates",
];

#[async_trait]
impl SchemaProvider for InfoSchema {
    fn table_names(&self) -> Vec<String> {
        INFO_TABLES.iter().map(|s| s.to_string()).collect()
    }
    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let (schema, build): (Schema, Builder) = match name {
            "hypertables" => (hypertables_schema(), hypertables),
            "chunks" => (chunks_schema(), chunks),
            "dimensions" => (dimensions_schema(), dimensions),
            "jobs" => (jobs_schema(), jobs),
            "job_stats" => (job_stats_schema(), job_stats),
            "continuous_aggregates" => (caggs_schema(), caggs),
            "compression_settings" => (compression_settings_schema(), compression_settings),
            "hypertable_compression_settings" | "hypertable_columnstore_settings" => {
                (table_settings_schema(), table_settings)
            }
            "chunk_compression_settings" | "chunk_columnstore_settings" => {
                (chunk_settings_schema(), chunk_settings)
            }
            _ => return Ok(None),
        };
        Ok(Some(Arc::new(SystemTable::of(
            self.engine.clone(),
            self.db.clone(),
            schema,
            build,
        ))))
    }
    fn table_exist(&self, name: &str) -> bool {
        INFO_TABLES.contains(&name)
    }
}

/// Schema of the `timescaledb_information` view `name`.
pub fn info_schema_of(name: &str) -> Option<SchemaRef> {
    Some(Arc::new(match name {
        "hypertables" => hypertables_schema(),
        "chunks" => chunks_schema(),
        "dimensions" => dimensions_schema(),
        "continuous_aggregates" => caggs_schema(),
        _ => return None,
    }))
}

fn chunk_files_schema() -> Schema {
    Schema::new(vec![
        text("hypertable_name"),
        text("chunk_name"),
        Field::new("range_start", tstz(), true),
        Field::new("range_end", tstz(), true),
        text("file_path"),
        Field::new("row_count", DataType::Int64, false),
        Field::new("byte_size", DataType::Int64, false),
    ])
}

/// `sundial_chunk_files`.
pub fn chunk_files(engine: Arc<Engine>, db: String) -> Arc<dyn TableProvider> {
    Arc::new(SystemTable::of(
        engine,
        db,
        chunk_files_schema(),
        chunk_files_rows,
    ))
}

fn cagg_refreshes_schema() -> Schema {
    Schema::new(vec![
        text("view_name"),
        Field::new("buckets", DataType::Int64, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("refreshes", DataType::Int64, false),
        Field::new("refreshed_at", tstz(), true),
    ])
}

/// `sundial_cagg_refreshes`: per continuous aggregate, the buckets and rows its
/// last refresh recomputed, and how many refreshes ran since start-up.
pub fn cagg_refreshes(engine: Arc<Engine>, db: String) -> Arc<dyn TableProvider> {
    Arc::new(SystemTable::of(
        engine,
        db,
        cagg_refreshes_schema(),
        cagg_refreshes_rows,
    ))
}

fn cagg_refreshes_rows(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let rows = engine.shared::<crate::engine::jobs::CaggRefreshes>().of(db);
    batch(
        cagg_refreshes_schema(),
        vec![
            Arc::new(StringArray::from(
                rows.iter().map(|(v, _)| v.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter()
                    .map(|(_, r)| r.buckets as i64)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|(_, r)| r.rows as i64).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|(_, r)| r.count as i64).collect::<Vec<_>>(),
            )),
            ts_array(rows.iter().map(|(_, r)| Some(r.at)).collect()),
        ],
    )
}

fn tables_of(engine: &Engine, db: &str) -> Vec<Arc<TableDef>> {
    engine
        .catalog()
        .snapshot()
        .database(db)
        .map(|d| d.tables.values().cloned().collect())
        .unwrap_or_default()
}

fn batch(schema: Schema, cols: Vec<ArrayRef>) -> DfResult<RecordBatch> {
    Ok(RecordBatch::try_new(Arc::new(schema), cols)?)
}

fn ts_array(v: Vec<Option<i64>>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC"))
}

fn chunk_files_rows(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let (mut ht, mut cn, mut rs, mut re, mut fp, mut rc, mut bs) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in tables_of(engine, db) {
        for f in &t.files {
            ht.push(t.name.clone());
            cn.push(t.chunk_name(f.chunk_start));
            let iv = t.chunk_interval_micros;
            rs.push(iv.map(|_| f.chunk_start));
            re.push(iv.map(|_| t.file_chunk_end(f)));
            fp.push(f.path.clone());
            rc.push(f.rows as i64);
            bs.push(f.bytes as i64);
        }
    }
    batch(
        chunk_files_schema(),
        vec![
            Arc::new(StringArray::from(ht)),
            Arc::new(StringArray::from(cn)),
            ts_array(rs),
            ts_array(re),
            Arc::new(StringArray::from(fp)),
            Arc::new(Int64Array::from(rc)),
            Arc::new(Int64Array::from(bs)),
        ],
    )
}

fn caggs_schema() -> Schema {
    Schema::new(vec![
        name("hypertable_schema"),
        name("hypertable_name"),
        name("view_schema"),
        name("view_name"),
        name("view_owner"),
        Field::new("materialized_only", DataType::Boolean, true),
        Field::new("compression_enabled", DataType::Boolean, true),
        name("materialization_hypertable_schema"),
        name("materialization_hypertable_name"),
        text("view_definition"),
    ])
}

/// `timescaledb_information.continuous_aggregates`: one row per continuous
/// aggregate; `hypertable_name` is the table it reads (for one on another
/// continuous aggregate, that one's materialization, as in TimescaleDB).
fn caggs(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let m = engine.catalog().snapshot();
    let mut rows = vec![];
    if let Ok(d) = m.database(db) {
        for t in d.tables.values() {
            let Some(c) = &t.cagg else { continue };
            let source = d
                .tables
                .values()
                .find(|s| s.id == c.source_id)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            let owner = d
                .owners
                .get(&c.view)
                .cloned()
                .unwrap_or_else(|| "sundial".to_string());
            rows.push((
                source,
                c.view.clone(),
                owner,
                c.materialized_only,
                t.name.clone(),
                c.sql.clone(),
            ));
        }
    }
    rows.sort_by(|a, b| a.1.cmp(&b.1));
    let n = rows.len();
    type Row = (String, String, String, bool, String, String);
    let col = |f: &dyn Fn(&Row) -> String| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    batch(
        caggs_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            col(&|r| r.0.clone()),
            Arc::new(StringArray::from(vec!["public"; n])),
            col(&|r| r.1.clone()),
            col(&|r| r.2.clone()),
            Arc::new(BooleanArray::from(
                rows.iter().map(|r| r.3).collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(StringArray::from(vec!["_timescaledb_internal"; n])),
            col(&|r| r.4.clone()),
            col(&|r| format!(" {};", r.5)),
        ],
    )
}

fn hypertables_schema() -> Schema {
    Schema::new(vec![
        name("hypertable_schema"),
        name("hypertable_name"),
        name("owner"),
        Field::new("num_dimensions", DataType::Int16, false),
        Field::new("num_chunks", DataType::Int64, false),
        Field::new("compression_enabled", DataType::Boolean, false),
        text("tablespaces"),
        name("primary_dimension"),
        text("primary_dimension_type"),
    ])
}

fn hypertables(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    // TimescaleDB lists no materialization hypertables here.
    let hts: Vec<_> = tables_of(engine, db)
        .into_iter()
        .filter(|t| t.is_hypertable() && t.cagg.is_none())
        .collect();
    let n = hts.len();
    batch(
        hypertables_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(
                hts.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(vec!["sundial"; n])),
            Arc::new(Int16Array::from(vec![1i16; n])),
            Arc::new(Int64Array::from(
                hts.iter()
                    .map(|t| engine.chunk_starts(t).len() as i64)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(
                hts.iter()
                    .map(|t| t.compression.as_ref().is_some_and(|c| c.enabled))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(vec![None::<String>; n])),
            time_column_names(&hts),
            time_column_types(&hts),
        ],
    )
}

/// The partitioning column of each hypertable.
fn time_column_names(hts: &[Arc<TableDef>]) -> ArrayRef {
    Arc::new(StringArray::from(
        hts.iter()
            .map(|t| t.time_column.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
    ))
}

/// The PostgreSQL type of each hypertable's partitioning column.
fn time_column_types(hts: &[Arc<TableDef>]) -> ArrayRef {
    Arc::new(StringArray::from(
        hts.iter().map(time_type).collect::<Vec<_>>(),
    ))
}

fn time_type(t: &Arc<TableDef>) -> String {
    t.time_column
        .as_deref()
        .and_then(|c| t.column(c))
        .map(|c| c.sql_type.pg_name())
        .unwrap_or_default()
}

fn interval_of(micros: i64) -> IntervalMonthDayNano {
    IntervalMonthDayNano::new(
        0,
        (micros / 86_400_000_000) as i32,
        (micros % 86_400_000_000) * 1000,
    )
}

fn jobs_schema() -> Schema {
    let iv = || DataType::Interval(IntervalUnit::MonthDayNano);
    Schema::new(vec![
        Field::new("job_id", DataType::Int32, false),
        name("application_name"),
        Field::new("schedule_interval", iv(), true),
        Field::new("max_runtime", iv(), true),
        Field::new("max_retries", DataType::Int32, true),
        Field::new("retry_period", iv(), true),
        name("proc_schema"),
        name("proc_name"),
        text("owner"),
        Field::new("scheduled", DataType::Boolean, false),
        Field::new("fixed_schedule", DataType::Boolean, false),
        crate::json::Kind::Jsonb.field("config", true),
        Field::new("next_start", tstz(), true),
        Field::new("initial_start", tstz(), true),
        name("hypertable_schema"),
        name("hypertable_name"),
        name("check_schema"),
        name("check_name"),
    ])
}

/// Columns of `timescaledb_information.compression_settings`.
fn compression_settings_schema() -> Schema {
    Schema::new(vec![
        name("hypertable_schema"),
        name("hypertable_name"),
        name("attname"),
        Field::new("segmentby_column_index", DataType::Int16, true),
        Field::new("orderby_column_index", DataType::Int16, true),
        Field::new("orderby_asc", DataType::Boolean, true),
        Field::new("orderby_nullsfirst", DataType::Boolean, true),
    ])
}

/// hypertable, column, segmentby index, orderby index, ascending, nulls first.
type SettingRow = (
    String,
    String,
    Option<i16>,
    Option<i16>,
    Option<bool>,
    Option<bool>,
);

/// One row per segmentby column, then per orderby column, of each hypertable with
/// compression enabled (TimescaleDB's view, ordered as it orders it).
fn compression_settings(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let mut rows: Vec<SettingRow> = vec![];
    for t in tables_of(engine, db) {
        let Some(c) = t.compression.as_ref().filter(|c| c.enabled) else {
            continue;
        };
        for (i, col) in c.segmentby.iter().enumerate() {
            rows.push((
                t.name.clone(),
                col.clone(),
                Some(i as i16 + 1),
                None,
                None,
                None,
            ));
        }
        for (i, o) in c.orderby.iter().enumerate() {
            rows.push((
                t.name.clone(),
                o.column.clone(),
                None,
                Some(i as i16 + 1),
                Some(!o.desc),
                Some(o.nulls_first),
            ));
        }
    }
    rows.sort_by(|a, b| (&a.0, a.2.is_none(), a.2, a.3).cmp(&(&b.0, b.2.is_none(), b.2, b.3)));
    let n = rows.len();
    batch(
        compression_settings_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(arrow::array::Int16Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
            Arc::new(arrow::array::Int16Array::from(
                rows.iter().map(|r| r.3).collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(
                rows.iter().map(|r| r.4).collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(
                rows.iter().map(|r| r.5).collect::<Vec<_>>(),
            )),
        ],
    )
}

/// Columns of `timescaledb_information.hypertable_compression_settings` (and its
/// columnstore name).
fn table_settings_schema() -> Schema {
    Schema::new(vec![
        regclass("hypertable"),
        text("segmentby"),
        text("orderby"),
        text("compress_interval_length"),
        text("index"),
    ])
}

/// Columns of `timescaledb_information.chunk_compression_settings`.
fn chunk_settings_schema() -> Schema {
    Schema::new(vec![
        regclass("hypertable"),
        regclass("chunk"),
        text("segmentby"),
        text("orderby"),
        text("index"),
    ])
}

/// `segmentby`, `orderby` and the sparse `index` of a table's settings as
/// TimescaleDB prints them (`dev,site`, `v,"time" DESC`, the min/max and first/last
/// index of each orderby column); NULL where none is set. A chunk's order
/// (`chunk`) also names the time column Sundial sorts by when orderby does not.
fn settings_text(
    t: &TableDef,
    c: &crate::catalog::CompressionDef,
    chunk: bool,
) -> [Option<String>; 3] {
    let quote = crate::pgident::quote_ident;
    let mut order: Vec<(String, String)> = c
        .orderby
        .iter()
        .map(|o| {
            let mut s = quote(&o.column);
            if o.desc {
                s.push_str(" DESC");
            }
            if o.nulls_first != o.desc {
                s.push_str(if o.nulls_first {
                    " NULLS FIRST"
                } else {
                    " NULLS LAST"
                });
            }
            (o.column.clone(), s)
        })
        .collect();
    if chunk
        && let Some(tc) = &t.time_column
        && !c.orderby.iter().any(|o| &o.column == tc)
        && !c.segmentby.contains(tc)
    {
        order.push((tc.clone(), quote(tc)));
    }
    let some = |s: String| (!s.is_empty()).then_some(s);
    let index = order
        .iter()
        .flat_map(|(col, _)| {
            ["minmax", "firstlast"].map(|kind| {
                jsonb_text(&[
                    ("type", serde_json::json!(kind)),
                    ("column", serde_json::json!(col)),
                    ("source", serde_json::json!("orderby")),
                ])
            })
        })
        .collect::<Vec<_>>();
    [
        some(c.segmentby.join(",")),
        some(
            order
                .iter()
                .map(|o| o.1.clone())
                .collect::<Vec<_>>()
                .join(","),
        ),
        (!index.is_empty()).then(|| format!("[{}]", index.join(", "))),
    ]
}

fn table_settings(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let mut cols: [Vec<Option<String>>; 5] = Default::default();
    for t in tables_of(engine, db) {
        let Some(c) = t.compression.as_ref().filter(|c| c.enabled) else {
            continue;
        };
        let [seg, ord, idx] = settings_text(&t, c, false);
        for (col, v) in cols
            .iter_mut()
            .zip([Some(t.name.clone()), seg, ord, None, idx])
        {
            col.push(v);
        }
    }
    batch(
        table_settings_schema(),
        cols.into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
            .collect(),
    )
}

fn chunk_settings(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let mut cols: [Vec<Option<String>>; 5] = Default::default();
    for t in tables_of(engine, db) {
        let Some(c) = t.compression.as_ref().filter(|c| c.enabled) else {
            continue;
        };
        let [seg, ord, idx] = settings_text(&t, c, true);
        for chunk in engine.chunk_compression(&t).iter().filter(|c| c.compressed) {
            let name = format!("_timescaledb_internal.{}", t.chunk_name(chunk.chunk_start));
            let row = [
                Some(t.name.clone()),
                Some(name),
                seg.clone(),
                ord.clone(),
                idx.clone(),
            ];
            for (col, v) in cols.iter_mut().zip(row) {
                col.push(v);
            }
        }
    }
    batch(
        chunk_settings_schema(),
        cols.into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
            .collect(),
    )
}

/// One policy job as the `jobs` views show it.
struct JobRow {
    id: i64,
    application_name: String,
    schedule_interval_micros: i64,
    proc_name: &'static str,
    check_name: &'static str,
    config: String,
    hypertable_name: String,
    initial_start: Option<i64>,
}

/// The database's policy jobs: retention policies and continuous-aggregate
/// refresh policies (whose hypertable is the materialization, as in TimescaleDB).
fn policy_jobs(engine: &Engine, db: &str) -> Vec<JobRow> {
    let mut out = vec![];
    for t in tables_of(engine, db) {
        if let Some(r) = &t.retention {
            let id = t.retention_job_id();
            out.push(JobRow {
                id,
                application_name: format!("Retention Policy [{id}]"),
                schedule_interval_micros: r.schedule_interval_micros,
                proc_name: "policy_retention",
                check_name: "policy_retention_check",
                config: jsonb_text(&[
                    ("drop_after", serde_json::json!(r.drop_after_text)),
                    ("hypertable_id", serde_json::json!(t.id)),
                ]),
                hypertable_name: t.name.clone(),
                initial_start: r.initial_start_micros,
            });
        }
        if let Some(p) = t.compression.as_ref().and_then(|c| c.policy.as_ref()) {
            out.push(JobRow {
                id: p.job_id,
                application_name: format!("Columnstore Policy [{}]", p.job_id),
                schedule_interval_micros: p.schedule_interval_micros,
                proc_name: "policy_compression",
                check_name: "policy_compression_check",
                config: p.config.clone(),
                hypertable_name: t.name.clone(),
                initial_start: p.initial_start_micros,
            });
        }
        if let Some(p) = t.cagg.as_ref().and_then(|c| c.policy.as_ref()) {
            out.push(JobRow {
                id: p.job_id,
                application_name: format!("Refresh Continuous Aggregate Policy [{}]", p.job_id),
                schedule_interval_micros: p.schedule_interval_micros,
                proc_name: "policy_refresh_continuous_aggregate",
                check_name: "policy_refresh_continuous_aggregate_check",
                config: jsonb_text(&[
                    ("end_offset", serde_json::json!(p.end_offset_text)),
                    ("start_offset", serde_json::json!(p.start_offset_text)),
                    ("mat_hypertable_id", serde_json::json!(t.id)),
                ]),
                // TimescaleDB names the continuous aggregate here.
                hypertable_name: t
                    .cagg
                    .as_ref()
                    .map_or_else(|| t.name.clone(), |c| c.view.clone()),
                initial_start: p.initial_start_micros,
            });
        }
    }
    out.sort_by_key(|j| j.id);
    out
}

/// An object as PostgreSQL prints a `jsonb`: keys shortest first, then by bytes,
/// with `": "` and `", "` between.
fn jsonb_text(pairs: &[(&str, serde_json::Value)]) -> String {
    let mut pairs: Vec<&(&str, serde_json::Value)> = pairs.iter().collect();
    pairs.sort_by(|a, b| (a.0.len(), a.0).cmp(&(b.0.len(), b.0)));
    let items: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}: {v}", serde_json::Value::from(*k)))
        .collect();
    format!("{{{}}}", items.join(", "))
}

fn jobs(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let js = policy_jobs(engine, db);
    let n = js.len();
    let texts = |f: &dyn Fn(&JobRow) -> String| -> ArrayRef {
        Arc::new(StringArray::from(js.iter().map(f).collect::<Vec<_>>()))
    };
    let intervals = || -> ArrayRef {
        Arc::new(IntervalMonthDayNanoArray::from(
            js.iter()
                .map(|j| Some(interval_of(j.schedule_interval_micros)))
                .collect::<Vec<_>>(),
        ))
    };
    batch(
        jobs_schema(),
        vec![
            Arc::new(Int32Array::from(
                js.iter().map(|j| j.id as i32).collect::<Vec<_>>(),
            )),
            texts(&|j| j.application_name.clone()),
            intervals(),
            Arc::new(IntervalMonthDayNanoArray::from(vec![
                Some(interval_of(0));
                n
            ])),
            Arc::new(Int32Array::from(vec![-1i32; n])),
            intervals(),
            Arc::new(StringArray::from(vec!["_timescaledb_functions"; n])),
            texts(&|j| j.proc_name.to_string()),
            Arc::new(StringArray::from(vec!["sundial"; n])),
            Arc::new(BooleanArray::from(vec![true; n])),
            Arc::new(BooleanArray::from(vec![false; n])),
            texts(&|j| j.config.clone()),
            ts_array(
                js.iter()
                    .map(|j| engine.jobs().get(j.id).next_start.or(j.initial_start))
                    .collect(),
            ),
            ts_array(js.iter().map(|j| j.initial_start).collect()),
            Arc::new(StringArray::from(vec!["public"; n])),
            texts(&|j| j.hypertable_name.clone()),
            Arc::new(StringArray::from(vec!["_timescaledb_functions"; n])),
            texts(&|j| j.check_name.to_string()),
        ],
    )
}

fn job_stats_schema() -> Schema {
    Schema::new(vec![
        name("hypertable_schema"),
        name("hypertable_name"),
        Field::new("job_id", DataType::Int32, false),
        Field::new("last_run_started_at", tstz(), true),
        Field::new("last_successful_finish", tstz(), true),
        text("last_run_status"),
        text("job_status"),
        Field::new("next_start", tstz(), true),
        Field::new("total_runs", DataType::Int64, false),
        Field::new("total_successes", DataType::Int64, false),
        Field::new("total_failures", DataType::Int64, false),
    ])
}

fn job_stats(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let js = policy_jobs(engine, db);
    let n = js.len();
    let st: Vec<crate::engine::JobState> = js.iter().map(|j| engine.jobs().get(j.id)).collect();
    batch(
        job_stats_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(
                js.iter()
                    .map(|j| j.hypertable_name.clone())
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int32Array::from(
                js.iter().map(|j| j.id as i32).collect::<Vec<_>>(),
            )),
            ts_array(st.iter().map(|s| s.last_run_started_at).collect()),
            ts_array(st.iter().map(|s| s.last_successful_finish).collect()),
            Arc::new(StringArray::from(
                st.iter().map(|s| s.last_run_status).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(vec!["Scheduled"; n])),
            ts_array(st.iter().map(|s| s.next_start).collect()),
            Arc::new(Int64Array::from(
                st.iter().map(|s| s.total_runs).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                st.iter()
                    .map(|s| s.total_runs - s.total_failures)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                st.iter().map(|s| s.total_failures).collect::<Vec<_>>(),
            )),
        ],
    )
}

fn chunks_schema() -> Schema {
    Schema::new(vec![
        name("hypertable_schema"),
        name("hypertable_name"),
        name("chunk_schema"),
        name("chunk_name"),
        name("primary_dimension"),
        text("primary_dimension_type"),
        Field::new("range_start", tstz(), true),
        Field::new("range_end", tstz(), true),
        Field::new("range_start_integer", DataType::Int64, true),
        Field::new("range_end_integer", DataType::Int64, true),
        Field::new("is_compressed", DataType::Boolean, false),
        name("chunk_tablespace"),
    ])
}

fn chunks(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let (mut ht, mut cn, mut pd, mut pt, mut rs, mut re, mut comp) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in tables_of(engine, db)
        .into_iter()
        .filter(|t| t.is_hypertable())
    {
        let tc = t.time_column.clone().unwrap_or_default();
        let ty = time_type(&t);
        for c in engine.chunk_compression(&t) {
            let start = c.chunk_start;
            comp.push(c.compressed);
            ht.push(t.name.clone());
            cn.push(t.chunk_name(start));
            pd.push(tc.clone());
            pt.push(ty.clone());
            rs.push(Some(start));
            re.push(Some(t.chunk_end(start)));
        }
    }
    let n = ht.len();
    batch(
        chunks_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(ht)),
            Arc::new(StringArray::from(vec!["_timescaledb_internal"; n])),
            Arc::new(StringArray::from(cn)),
            Arc::new(StringArray::from(pd)),
            Arc::new(StringArray::from(pt)),
            ts_array(rs),
            ts_array(re),
            Arc::new(Int64Array::from(vec![None; n])),
            Arc::new(Int64Array::from(vec![None; n])),
            Arc::new(BooleanArray::from(comp)),
            Arc::new(StringArray::from(vec![None::<String>; n])),
        ],
    )
}

fn dimensions_schema() -> Schema {
    Schema::new(vec![
        name("hypertable_schema"),
        name("hypertable_name"),
        Field::new("dimension_number", DataType::Int64, false),
        name("column_name"),
        text("column_type"),
        text("dimension_type"),
        Field::new(
            "time_interval",
            DataType::Interval(IntervalUnit::MonthDayNano),
            true,
        ),
        Field::new("integer_interval", DataType::Int64, true),
        name("integer_now_func"),
        Field::new("num_partitions", DataType::Int16, true),
    ])
}

fn dimensions(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let hts: Vec<_> = tables_of(engine, db)
        .into_iter()
        .filter(|t| t.is_hypertable())
        .collect();
    let n = hts.len();
    let iv: Vec<Option<IntervalMonthDayNano>> = hts
        .iter()
        .map(|t| {
            let micros = t.chunk_interval_micros.unwrap_or(0);
            let days = micros / 86_400_000_000;
            let rest = micros % 86_400_000_000;
            Some(IntervalMonthDayNano::new(0, days as i32, rest * 1000))
        })
        .collect();
    batch(
        dimensions_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(
                hts.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(vec![1i64; n])),
            time_column_names(&hts),
            time_column_types(&hts),
            Arc::new(StringArray::from(vec!["Time"; n])),
            Arc::new(IntervalMonthDayNanoArray::from(iv)),
            Arc::new(Int64Array::from(vec![None; n])),
            Arc::new(StringArray::from(vec![None::<String>; n])),
            Arc::new(Int16Array::from(vec![None; n])),
        ],
    )
}
