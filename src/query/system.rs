//! System views computed from the catalog at scan time:
//! `timescaledb_information.{hypertables,chunks,dimensions,jobs,job_stats}` and
//! `sundial_chunk_files`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Int16Array, Int64Array, IntervalMonthDayNanoArray, RecordBatch,
    StringArray, TimestampMicrosecondArray,
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

const INFO_TABLES: [&str; 5] = ["hypertables", "chunks", "dimensions", "jobs", "job_stats"];

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

fn hypertables_schema() -> Schema {
    Schema::new(vec![
        text("hypertable_schema"),
        text("hypertable_name"),
        text("owner"),
        Field::new("num_dimensions", DataType::Int16, false),
        Field::new("num_chunks", DataType::Int64, false),
        Field::new("compression_enabled", DataType::Boolean, false),
        text("tablespaces"),
        text("primary_dimension"),
        text("primary_dimension_type"),
    ])
}

fn hypertables(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let hts: Vec<_> = tables_of(engine, db)
        .into_iter()
        .filter(|t| t.is_hypertable())
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
            Arc::new(BooleanArray::from(vec![false; n])),
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
        Field::new("job_id", DataType::Int64, false),
        text("application_name"),
        Field::new("schedule_interval", iv(), true),
        Field::new("max_runtime", iv(), true),
        Field::new("max_retries", DataType::Int64, true),
        Field::new("retry_period", iv(), true),
        text("proc_schema"),
        text("proc_name"),
        text("owner"),
        Field::new("scheduled", DataType::Boolean, false),
        Field::new("fixed_schedule", DataType::Boolean, false),
        text("config"),
        Field::new("next_start", tstz(), true),
        Field::new("initial_start", tstz(), true),
        text("hypertable_schema"),
        text("hypertable_name"),
        text("check_schema"),
        text("check_name"),
    ])
}

/// Retention policies, one job each.
fn retention_jobs(engine: &Engine, db: &str) -> Vec<(Arc<TableDef>, crate::catalog::Retention)> {
    tables_of(engine, db)
        .into_iter()
        .filter_map(|t| t.retention.clone().map(|r| (t, r)))
        .collect()
}

fn jobs(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let js = retention_jobs(engine, db);
    let n = js.len();
    let ids: Vec<i64> = js.iter().map(|(t, _)| t.retention_job_id()).collect();
    batch(
        jobs_schema(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(StringArray::from(
                ids.iter()
                    .map(|id| format!("Retention Policy [{id}]"))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(IntervalMonthDayNanoArray::from(
                js.iter()
                    .map(|(_, r)| Some(interval_of(r.schedule_interval_micros)))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(IntervalMonthDayNanoArray::from(vec![
                Some(interval_of(0));
                n
            ])),
            Arc::new(Int64Array::from(vec![-1i64; n])),
            Arc::new(IntervalMonthDayNanoArray::from(
                js.iter()
                    .map(|(_, r)| Some(interval_of(r.schedule_interval_micros)))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(vec!["_timescaledb_functions"; n])),
            Arc::new(StringArray::from(vec!["policy_retention"; n])),
            Arc::new(StringArray::from(vec!["sundial"; n])),
            Arc::new(BooleanArray::from(vec![true; n])),
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(StringArray::from(
                js.iter()
                    .map(|(t, r)| {
                        serde_json::json!({"drop_after": r.drop_after_text, "hypertable_id": t.id})
                            .to_string()
                    })
                    .collect::<Vec<_>>(),
            )),
            ts_array(
                ids.iter()
                    .map(|id| engine.jobs().get(*id).next_start)
                    .collect(),
            ),
            ts_array(vec![None; n]),
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(
                js.iter().map(|(t, _)| t.name.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(vec!["_timescaledb_functions"; n])),
            Arc::new(StringArray::from(vec!["policy_retention_check"; n])),
        ],
    )
}

fn job_stats_schema() -> Schema {
    Schema::new(vec![
        text("hypertable_schema"),
        text("hypertable_name"),
        Field::new("job_id", DataType::Int64, false),
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
    let js = retention_jobs(engine, db);
    let n = js.len();
    let st: Vec<crate::engine::JobState> = js
        .iter()
        .map(|(t, _)| engine.jobs().get(t.retention_job_id()))
        .collect();
    batch(
        job_stats_schema(),
        vec![
            Arc::new(StringArray::from(vec!["public"; n])),
            Arc::new(StringArray::from(
                js.iter().map(|(t, _)| t.name.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                js.iter()
                    .map(|(t, _)| t.retention_job_id())
                    .collect::<Vec<_>>(),
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
        text("hypertable_schema"),
        text("hypertable_name"),
        text("chunk_schema"),
        text("chunk_name"),
        text("primary_dimension"),
        text("primary_dimension_type"),
        Field::new("range_start", tstz(), true),
        Field::new("range_end", tstz(), true),
        Field::new("range_start_integer", DataType::Int64, true),
        Field::new("range_end_integer", DataType::Int64, true),
        Field::new("is_compressed", DataType::Boolean, false),
        text("chunk_tablespace"),
    ])
}

fn chunks(engine: &Engine, db: &str) -> DfResult<RecordBatch> {
    let (mut ht, mut cn, mut pd, mut pt, mut rs, mut re) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in tables_of(engine, db)
        .into_iter()
        .filter(|t| t.is_hypertable())
    {
        let tc = t.time_column.clone().unwrap_or_default();
        let ty = time_type(&t);
        for start in engine.chunk_starts(&t) {
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
            Arc::new(BooleanArray::from(vec![false; n])),
            Arc::new(StringArray::from(vec![None::<String>; n])),
        ],
    )
}

fn dimensions_schema() -> Schema {
    Schema::new(vec![
        text("hypertable_schema"),
        text("hypertable_name"),
        Field::new("dimension_number", DataType::Int64, false),
        text("column_name"),
        text("column_type"),
        text("dimension_type"),
        Field::new(
            "time_interval",
            DataType::Interval(IntervalUnit::MonthDayNano),
            true,
        ),
        Field::new("integer_interval", DataType::Int64, true),
        text("integer_now_func"),
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
