//! The hypertable `TableProvider`: prunes chunks and files by their min/max
//! statistics, scans the surviving Parquet files plus the memtable rows, and sends
//! INSERTs into the write path. `HypertableScanExec` reports the pruning in EXPLAIN.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::datatypes::UInt64Type;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::TableProvider;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::parquet::{
    CachedParquetFileReaderFactory, ParquetFileReaderFactory,
};
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result as DfResult};

use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

use crate::catalog::{FileMeta, TableDef};
use crate::engine::Engine;
use crate::engine::tx::Staging;
use crate::query::cached_scan::{self, CachedScanExec, IndexedReaderFactory};
use crate::query::dedup::{DedupExec, in_ranges};
use crate::query::staged;
use crate::storage;
use crate::storage::stats_cache::FileStats;
use crate::write::MemBatch;

/// A table of the catalog as DataFusion sees it.
#[derive(Debug, Clone)]
pub struct HypertableProvider {
    table: Arc<TableDef>,
    engine: Arc<Engine>,
    defaults: std::collections::HashMap<String, Expr>,
}

impl HypertableProvider {
    /// A provider for `table`; it keeps the definition only (scans and inserts look up
    /// the current files and memtable), so a cached plan pins no old file list.
    pub fn new(table: &TableDef, engine: &Arc<Engine>) -> Self {
        let table = Arc::new(table.without_files());
        let defaults = table
            .columns
            .iter()
            .filter_map(|c| {
                let d = c.default.as_ref()?;
                default_expr(d, &c.sql_type.to_arrow())
                    .ok()
                    .map(|e| (c.name.clone(), e))
            })
            .collect();
        HypertableProvider {
            table,
            engine: engine.clone(),
            defaults,
        }
    }
}

impl HypertableProvider {
    /// The table as it was when the provider was made (its scans read the current one).
    pub fn table(&self) -> &Arc<TableDef> {
        &self.table
    }

    /// The oldest and newest time stored now (files and memtable), the newest capped
    /// at `upper`; `None` when nothing is stored.
    pub fn time_span(&self, upper: Option<i64>) -> Option<(i64, i64)> {
        let view = self.engine.view(self.table.id)?;
        let table = &view.table;
        let spans = table.files.iter().map(|f| file_time_range(table, f)).chain(
            view.mem
                .iter()
                .flat_map(|(_, b)| b.iter().map(|b| (b.min_time, b.max_time))),
        );
        let (lo, hi) = spans.fold(None, |acc: Option<(i64, i64)>, (a, b)| {
            Some(match acc {
                None => (a, b),
                Some((lo, hi)) => (lo.min(a), hi.max(b)),
            })
        })?;
        Some((lo, upper.map_or(hi, |u| hi.min(u))))
    }

    /// How many rows a scan with `filters` may read: each file and memtable batch
    /// counts in proportion to how much of its time span the filters' time bounds
    /// cover. Chooses how a query is planned (one partition for small scans), never
    /// what it answers.
    pub fn estimated_rows(&self, filters: &[Expr]) -> u64 {
        let Some(view) = self.engine.view(self.table.id) else {
            return 0;
        };
        let table = &view.table;
        let (lo, hi) = time_bounds(table, filters);
        let mut rows = 0.0;
        if !table.files.is_empty() {
            let stats = self.engine.file_stats().for_table(table);
            let micros = |a: Option<ArrayRef>| {
                a.and_then(|a| {
                    arrow::compute::cast(
                        &a,
                        &arrow::datatypes::DataType::Timestamp(
                            arrow::datatypes::TimeUnit::Microsecond,
                            None,
                        ),
                    )
                    .ok()
                })
            };
            let time = table
                .time_column
                .as_ref()
                .map(|t| datafusion::common::Column::new_unqualified(t.clone()));
            let mins = micros(time.as_ref().and_then(|c| stats.min_values(c)));
            let maxs = micros(time.as_ref().and_then(|c| stats.max_values(c)));
            let at = |a: &Option<ArrayRef>, i: usize, unknown: i64| {
                a.as_ref()
                    .map(|a| a.as_primitive::<arrow::datatypes::TimestampMicrosecondType>())
                    .filter(|p| p.len() > i && p.is_valid(i))
                    .map_or(unknown, |p| p.value(i))
            };
            for (i, f) in table.files.iter().enumerate() {
                let (a, b) = (at(&mins, i, i64::MIN), at(&maxs, i, i64::MAX));
                rows += f.rows as f64 * covered(lo, hi, a, b);
            }
        }
        for b in view.mem.iter().flat_map(|(_, b)| b.iter()) {
            rows += b.batch.num_rows() as f64 * covered(lo, hi, b.min_time, b.max_time);
        }
        rows as u64
    }

    /// The engine whose files and memtables the scans read.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Scans of files and memtable rows that need no merging.
    #[allow(clippy::too_many_arguments)]
    fn plain_inputs(
        &self,
        state: &dyn Session,
        schema: &SchemaRef,
        files: &[&FileMeta],
        mem: &[&MemBatch],
        projection: Option<&Vec<usize>>,
        physical: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        limit: Option<usize>,
        narrow_time: bool,
    ) -> DfResult<Vec<Arc<dyn ExecutionPlan>>> {
        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = vec![];
        if !files.is_empty() {
            let target = state.config().target_partitions().max(1);
            inputs.push(self.file_scan(
                state,
                schema,
                files,
                target,
                projection,
                physical,
                limit,
                narrow_time,
            )?);
        }
        let mem_batches: Vec<RecordBatch> = mem
            .iter()
            .map(|b| storage::adapt_batch(&b.batch, schema))
            .collect::<crate::Result<Vec<_>>>()
            .map_err(DataFusionError::from)?;
        if !mem_batches.is_empty() || inputs.is_empty() {
            let mut m =
                MemorySourceConfig::try_new(&[mem_batches], schema.clone(), projection.cloned())?;
            m = m.with_limit(limit);
            inputs.push(DataSourceExec::from_data_source(m));
        }
        Ok(inputs)
    }

    /// Readers of chunk files whose footers (with page indexes) come from the
    /// runtime's metadata cache.
    fn reader_factory(&self, state: &dyn Session) -> DfResult<Arc<IndexedReaderFactory>> {
        let runtime = state.runtime_env();
        Ok(Arc::new(IndexedReaderFactory(
            CachedParquetFileReaderFactory::new(
                runtime.object_store(self.engine.store_url())?,
                runtime.cache_manager.get_file_metadata_cache(),
            ),
        )))
    }

    /// A scan of `files`: those whose columns are kept decoded are sliced from
    /// memory ([`CachedScanExec`]), the others read from Parquet ([`Self::parquet_scan`])
    /// and, when asked for a second time, decoded into the cache in the background.
    #[allow(clippy::too_many_arguments)]
    fn file_scan(
        &self,
        state: &dyn Session,
        schema: &SchemaRef,
        files: &[&FileMeta],
        partitions: usize,
        projection: Option<&Vec<usize>>,
        physical: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        limit: Option<usize>,
        narrow_time: bool,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let cache = self.engine.decoded();
        // A scan that reads no column (count(*)) needs only the row counts: Parquet's.
        if !decoded_allowed(state, cache) || projection.is_some_and(|p| p.is_empty()) {
            return self.parquet_scan(
                state,
                schema,
                files,
                partitions,
                projection,
                physical,
                limit,
                narrow_time,
            );
        }
        let (wanted, read) = decoded_reads(schema, projection, physical);
        let names: Vec<&str> = read
            .iter()
            .map(|i| schema.field(*i).name().as_str())
            .collect();
        let (hit, miss, load) = cached_scan::split(cache, files, &names);
        if !load.is_empty()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let factory: Arc<dyn ParquetFileReaderFactory> = self.reader_factory(state)?;
            let (cache, schema) = (cache.clone(), schema.clone());
            handle.spawn(async move {
                for (file, columns) in load {
                    cached_scan::load(
                        cache.clone(),
                        factory.clone(),
                        schema.clone(),
                        file,
                        columns,
                    )
                    .await;
                }
            });
        }
        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = vec![];
        if !hit.is_empty() {
            let output: Vec<usize> = (0..wanted.len()).collect();
            inputs.push(Arc::new(CachedScanExec::try_new(
                schema, hit, &names, &output, physical, limit, partitions, None,
            )?));
        }
        if !miss.is_empty() {
            inputs.push(self.parquet_scan(
                state,
                schema,
                &miss,
                partitions,
                projection,
                physical,
                limit,
                narrow_time,
            )?);
        }
        match inputs.len() {
            1 => Ok(inputs.remove(0)),
            _ => UnionExec::try_new(inputs),
        }
    }

    /// `files` as one [`CachedScanExec`] that keeps the rows `exact` is true for
    /// itself, when every file's columns are kept decoded (None otherwise, noting
    /// nothing: the caller's [`Self::file_scan`] counts the request). Planning a
    /// FilterExec and a projection above a scan costs more than a small scan.
    #[allow(clippy::too_many_arguments)]
    fn cached_filtered(
        &self,
        state: &dyn Session,
        schema: &SchemaRef,
        files: &[&FileMeta],
        projection: Option<&Vec<usize>>,
        physical: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        exact: &Expr,
        limit: Option<usize>,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let cache = self.engine.decoded();
        if !decoded_allowed(state, cache) || files.is_empty() {
            return Ok(None);
        }
        // `physical` holds every filter, `exact` among them: its columns are read.
        let (wanted, read) = decoded_reads(schema, projection, physical);
        let names: Vec<&str> = read
            .iter()
            .map(|i| schema.field(*i).name().as_str())
            .collect();
        let mut hits = Vec::with_capacity(files.len());
        for f in files {
            match cache.get(&f.path, &names) {
                Some(columns) => hits.push(cached_scan::CachedFile { file: f, columns }),
                None => return Ok(None),
            }
        }
        let read_schema = DFSchema::try_from(schema.project(&read)?)?;
        let filter = state.create_physical_expr(exact.clone(), &read_schema)?;
        let output: Vec<usize> = (0..wanted.len()).collect();
        let partitions = state.config().target_partitions().max(1);
        Ok(Some(Arc::new(CachedScanExec::try_new(
            schema,
            hits,
            &names,
            &output,
            physical,
            limit,
            partitions,
            Some(filter),
        )?)))
    }

    /// A Parquet scan of `files` spread over `partitions` file groups. File footers
    /// and page indexes come from the runtime's metadata cache (chunk files never
    /// change: a rewrite gets a new path). `narrow_time`: the predicate's time range
    /// is a small share of the files' and their leading sort column is not pinned
    /// (see [`narrow_time_filter`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn parquet_scan(
        &self,
        state: &dyn Session,
        schema: &SchemaRef,
        files: &[&FileMeta],
        partitions: usize,
        projection: Option<&Vec<usize>>,
        physical: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
        limit: Option<usize>,
        narrow_time: bool,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut source = ParquetSource::new(schema.clone());
        let physical = physical.map(|p| nan_safe(p, schema)).transpose()?;
        let physical = physical.as_ref();
        if let Some(p) = physical {
            source = source.with_predicate(p.clone());
        }
        let reader = self.reader_factory(state)?;
        // The page index only serves the predicate. With filter pushdown the reader
        // decodes the predicate's columns first and the others only for the rows
        // that pass: a selective filter over wide rows (TSBS high-cpu: every column
        // where usage_user > 90) decodes a fraction of them. Over narrow rows the
        // row filter's set-up costs more than it saves (measured: single-groupby
        // 11% slower), so only scans that read several other columns use it. Nor
        // does it pay when the predicate names only the series key and time: files
        // are sorted by them, so the page index already narrowed the read to the
        // rows that match (TSBS single-groupby-5-8-1 was 15% slower with it) --
        // unless the time range is a small share of pages that span a whole series'
        // day (TSBS iot stationary-trucks: 10 minutes of a fleet's trucks decoded
        // 357,000 rows of five columns for 2,500 matches).
        let pushdown = physical.is_some_and(|p| {
            let read: BTreeSet<usize> = datafusion::physical_expr::utils::collect_columns(p)
                .iter()
                .map(|c| c.index())
                .collect();
            let others = match projection {
                Some(cols) => cols.iter().filter(|c| !read.contains(c)).count(),
                None => schema.fields().len().saturating_sub(read.len()),
            };
            let sorted_by = |i: &usize| {
                let name = schema.field(*i).name();
                self.table.sort_series().contains(name)
                    || self.table.time_column.as_ref() == Some(name)
            };
            narrow_time || (others >= PUSHDOWN_MIN_OTHER_COLUMNS && !read.iter().all(sorted_by))
        });
        let source = source
            .with_enable_page_index(physical.is_some())
            .with_pushdown_filters(pushdown)
            // A narrow window is most selective: the time conjuncts (first in the
            // predicate) go first, so the series' strings decode only for their rows.
            .with_reorder_filters(pushdown && !narrow_time)
            // Chunk files carry no bloom filters (min/max statistics do the pruning).
            .with_bloom_filter_on_read(false)
            .with_parquet_file_reader_factory(reader);
        let mut groups: Vec<Vec<PartitionedFile>> =
            vec![vec![]; partitions.min(files.len()).max(1)];
        for (i, f) in files.iter().enumerate() {
            let n = groups.len();
            groups[i % n].push(PartitionedFile::new(f.path.clone(), f.bytes));
        }
        let mut builder =
            FileScanConfigBuilder::new(self.engine.store_url().clone(), Arc::new(source))
                .with_projection_indices(projection.cloned())?
                .with_limit(limit);
        for g in groups {
            builder = builder.with_file_group(g.into());
        }
        Ok(DataSourceExec::from_data_source(builder.build()))
    }

    /// Scan of a line-protocol table where some sources overlap in time: rows outside
    /// the overlapping `dirty` ranges pass straight through, rows inside are merged
    /// (last write wins) by a [`DedupExec`] that reads the sources in arrival order.
    #[allow(clippy::too_many_arguments)]
    fn dedup_input(
        &self,
        state: &dyn Session,
        table: &TableDef,
        schema: &SchemaRef,
        files: &[&FileMeta],
        mem: &[&MemBatch],
        dirty: &[(i64, i64)],
        projection: Option<&Vec<usize>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        use datafusion::physical_expr::expressions::NotExpr;
        let tcol = table.time_column.clone().unwrap_or_default();
        let inside = in_ranges(schema, &tcol, dirty)?;
        let outside: Arc<dyn datafusion::physical_expr::PhysicalExpr> =
            Arc::new(NotExpr::new(inside.clone()));

        // Rows outside every dirty range.
        let pass = UnionExec::try_new(self.plain_inputs(
            state,
            schema,
            files,
            mem,
            None,
            Some(&outside),
            None,
            false,
        )?)?;
        let pass: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(outside, pass)?);

        // Rows inside: every overlapping source, oldest first.
        let touches = |lo: i64, hi: i64| dirty.iter().any(|(a, b)| lo <= *b && *a <= hi);
        let mut children: Vec<Arc<dyn ExecutionPlan>> = vec![];
        for f in files {
            let (lo, hi) = file_time_range(table, f);
            if touches(lo, hi) {
                let scan =
                    self.parquet_scan(state, schema, &[f], 1, None, Some(&inside), None, false)?;
                children.push(Arc::new(FilterExec::try_new(inside.clone(), scan)?));
            }
        }
        let mem_dirty: Vec<RecordBatch> = mem
            .iter()
            .filter(|b| touches(b.min_time, b.max_time))
            .map(|b| storage::adapt_batch(&b.batch, schema))
            .collect::<crate::Result<Vec<_>>>()
            .map_err(DataFusionError::from)?;
        if !mem_dirty.is_empty() {
            let m = MemorySourceConfig::try_new(&[mem_dirty], schema.clone(), None)?;
            let scan = DataSourceExec::from_data_source(m);
            children.push(Arc::new(FilterExec::try_new(inside.clone(), scan)?));
        }
        let keys = storage::dedup::key_indices(table, schema).unwrap_or_default();
        let merged: Arc<dyn ExecutionPlan> = Arc::new(DedupExec::new(
            schema.clone(),
            keys,
            !table.merges_fields(),
            children,
        ));
        let both = UnionExec::try_new(vec![pass, merged])?;
        match projection {
            None => Ok(both),
            Some(cols) => select_columns(both, cols),
        }
    }
}

/// Whether this session's scans may use the decoded-columns cache.
fn decoded_allowed(state: &dyn Session, cache: &crate::storage::decoded::DecodedColumns) -> bool {
    cache.enabled()
        && state
            .config()
            .get_extension::<DecodedScans>()
            .is_none_or(|d| d.0)
}

/// The columns a decoded scan emits (`projection`, all when None) and those it
/// reads: these and the columns `physical` looks at (pruning, a row filter).
fn decoded_reads(
    schema: &SchemaRef,
    projection: Option<&Vec<usize>>,
    physical: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
) -> (Vec<usize>, Vec<usize>) {
    let wanted: Vec<usize> = match projection {
        Some(p) => p.clone(),
        None => (0..schema.fields().len()).collect(),
    };
    let mut read = wanted.clone();
    if let Some(p) = physical {
        for c in datafusion::physical_expr::utils::collect_columns(p) {
            if !read.contains(&c.index()) {
                read.push(c.index());
            }
        }
    }
    (wanted, read)
}

/// The columns `cols` (by position) of `input`'s rows.
pub(crate) fn select_columns(
    input: Arc<dyn ExecutionPlan>,
    cols: &[usize],
) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_expr::expressions::Column as PCol;
    use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
    let schema = input.schema();
    let exprs = cols
        .iter()
        .map(|i| {
            let name = schema.field(*i).name().clone();
            ProjectionExpr {
                expr: Arc::new(PCol::new(&name, *i)),
                alias: name,
            }
        })
        .collect::<Vec<_>>();
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

/// `predicate` (over `schema`) with every conjunct that reads a float column `c`
/// widened by `OR isnan(c)`. Parquet's min/max statistics leave NaN out, so pruning
/// row groups and pages on a float comparison could drop NaN rows that match it
/// (NaN equals NaN and sorts above every number, as in PostgreSQL); pruning cannot
/// reason about `isnan`, so such conjuncts keep every page, while the row filter
/// still evaluates them (exactly, with the scan's caller filtering again).
fn nan_safe(
    predicate: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    schema: &SchemaRef,
) -> DfResult<Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    use arrow::datatypes::DataType;
    use datafusion::physical_expr::expressions::BinaryExpr;
    use datafusion::physical_expr::utils::{collect_columns, conjunction, split_conjunction};
    use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
    let mut out: Vec<Arc<dyn PhysicalExpr>> = vec![];
    let mut changed = false;
    for part in split_conjunction(predicate) {
        let mut floats: Vec<_> = collect_columns(part)
            .into_iter()
            .filter(|c| {
                matches!(
                    schema.field(c.index()).data_type(),
                    DataType::Float16 | DataType::Float32 | DataType::Float64
                )
            })
            .collect();
        floats.sort_by_key(|c| c.index());
        let mut e = part.clone();
        for c in floats {
            let nan = ScalarFunctionExpr::try_new(
                datafusion::functions::math::isnan(),
                vec![Arc::new(c)],
                schema,
                Arc::new(datafusion::config::ConfigOptions::default()),
            )?;
            e = Arc::new(BinaryExpr::new(
                e,
                datafusion::logical_expr::Operator::Or,
                Arc::new(nan),
            ));
            changed = true;
        }
        out.push(e);
    }
    Ok(if changed {
        conjunction(out)
    } else {
        predicate.clone()
    })
}

/// Whether scans may read columns kept decoded (`sundial.decoded_scans`); missing:
/// they may. A session-config extension.
#[derive(Debug)]
pub struct DecodedScans(pub bool);

/// The changes the session's open transaction made to table `id` (none outside one).
/// Tables a statement reads as they were at one moment, their files only (the
/// memtable flushed before): an UPDATE reads the rows it replaces from exactly the
/// files its deletion rewrites. A session-config extension.
#[derive(Debug, Default)]
pub struct PinnedFiles(pub std::collections::HashMap<u64, Arc<TableDef>>);

/// An INSERT whose rows the SQL layer takes instead of having them written
/// (ON CONFLICT and RETURNING decide what is written). A session-config extension.
#[derive(Debug, Default)]
pub struct CapturedInsert(pub parking_lot::Mutex<Option<RecordBatch>>);

pub(crate) fn staged_ops(state: &dyn Session, id: u64) -> Vec<crate::engine::tx::StagedOp> {
    state
        .config()
        .get_extension::<Staging>()
        .map(|s| s.ops_for(id))
        .unwrap_or_default()
}

/// Whether `e` reads the time column and nothing else (and gives the same answer each
/// time): the filters the scan applies itself.
pub(crate) fn is_time_filter(table: &TableDef, e: &Expr) -> bool {
    let Some(tc) = &table.time_column else {
        return false;
    };
    let refs = e.column_refs();
    !refs.is_empty() && refs.iter().all(|c| &c.name == tc) && !e.is_volatile()
}

/// The largest share of the files' time span a time filter may cover for their
/// scan to apply it while decoding.
const PUSHDOWN_MAX_TIME_SHARE: f64 = 0.05;

/// Whether `filters` keep a small share (≤ [`PUSHDOWN_MAX_TIME_SHARE`]) of the time
/// spanned by `files` while not pinning the series key's leading column to values
/// (`= v`, `IN (...)`). Files are sorted by series then time, so a page spans one
/// or a few series over their whole time range: a pinned leading column narrows the
/// read through the page index, a narrow time window alone does not.
pub(crate) fn narrow_time_filter(table: &TableDef, filters: &[Expr], files: &[&FileMeta]) -> bool {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let (lo, hi) = time_bounds(table, filters);
    if files.is_empty() || (lo == i64::MIN && hi == i64::MAX) {
        return false;
    }
    let (a, b) = files.iter().fold((i64::MAX, i64::MIN), |(a, b), f| {
        let (x, y) = file_time_range(table, f);
        (a.min(x), b.max(y))
    });
    if a > b || covered(lo, hi, a, b) > PUSHDOWN_MAX_TIME_SHARE {
        return false;
    }
    // Without a series key, files are in time order and the page index narrows.
    let Some(first) = table.sort_series().first().cloned() else {
        return false;
    };
    let is_first = |e: &Expr| matches!(e, Expr::Column(c) if c.name == first);
    !filters.iter().any(|e| match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => is_first(left) || is_first(right),
        Expr::InList(l) => !l.negated && is_first(&l.expr),
        _ => false,
    })
}

pub(crate) use crate::storage::file_time_range;

/// The time range (microseconds, inclusive) that `filters` allow, from comparisons
/// of the time column with timestamp literals; unbounded where they say nothing.
fn time_bounds(table: &TableDef, filters: &[Expr]) -> (i64, i64) {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    let Some(tc) = &table.time_column else {
        return (lo, hi);
    };
    for e in filters {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
            continue;
        };
        let (op, other) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), o) if &c.name == tc => (*op, o),
            (o, Expr::Column(c)) if &c.name == tc => match op.swap() {
                Some(op) => (op, o),
                None => continue,
            },
            _ => continue,
        };
        let Expr::Literal(v, _) = other else {
            continue;
        };
        let micros = match v.cast_to(&arrow::datatypes::DataType::Timestamp(
            arrow::datatypes::TimeUnit::Microsecond,
            None,
        )) {
            Ok(ScalarValue::TimestampMicrosecond(Some(m), _)) => m,
            _ => continue,
        };
        match op {
            Operator::Gt | Operator::GtEq => lo = lo.max(micros),
            Operator::Lt | Operator::LtEq => hi = hi.min(micros),
            Operator::Eq => {
                lo = lo.max(micros);
                hi = hi.min(micros);
            }
            _ => {}
        }
    }
    (lo, hi)
}

/// The share of a source spanning `a..=b` that the range `lo..=hi` covers, assuming
/// its rows are spread evenly over its span.
fn covered(lo: i64, hi: i64, a: i64, b: i64) -> f64 {
    if b < lo || a > hi || lo > hi {
        return 0.0;
    }
    if a >= lo && b <= hi {
        return 1.0;
    }
    let span = (b as f64 - a as f64) + 1.0;
    let inside = (hi.min(b) as f64 - lo.max(a) as f64) + 1.0;
    (inside / span).clamp(0.0, 1.0)
}

/// How many columns besides the predicate's a Parquet scan must read for the
/// predicate to be applied while decoding (see `HypertableProvider::parquet_scan`).
const PUSHDOWN_MIN_OTHER_COLUMNS: usize = 3;

/// Most separate dirty ranges a scan filters by.
const MAX_DIRTY_RANGES: usize = 64;

/// Time ranges where two sources (files, memtable batches) overlap, or where one
/// memtable batch may repeat a point: only rows there can be duplicates. Files hold
/// no duplicates of their own (flush merges them). Sorted and disjoint.
pub(crate) fn dirty_ranges(
    table: &TableDef,
    files: &[&FileMeta],
    mem: &[&MemBatch],
) -> Vec<(i64, i64)> {
    let mut ranges: Vec<(i64, i64)> = files
        .iter()
        .map(|f| file_time_range(table, f))
        .chain(mem.iter().map(|b| (b.min_time, b.max_time)))
        .collect();
    let mut dirty: Vec<(i64, i64)> = mem
        .iter()
        .filter(|b| b.dups)
        .map(|b| (b.min_time, b.max_time))
        .collect();
    ranges.sort_unstable();
    let mut reach: Option<i64> = None;
    for (lo, hi) in ranges {
        if let Some(r) = reach
            && lo <= r
        {
            dirty.push((lo, hi.min(r)));
        }
        reach = Some(reach.map_or(hi, |r| r.max(hi)));
    }
    dirty.sort_unstable();
    // Many separate ranges would make a deep OR predicate: cover them with one range
    // instead (a wider range only merges more rows than needed).
    if dirty.len() > MAX_DIRTY_RANGES {
        let lo = dirty.iter().map(|r| r.0).min().unwrap_or(i64::MIN);
        let hi = dirty.iter().map(|r| r.1).max().unwrap_or(i64::MAX);
        return vec![(lo, hi)];
    }
    let mut merged: Vec<(i64, i64)> = vec![];
    for (lo, hi) in dirty {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// Turns a stored `DEFAULT` (a literal, `now()` or `current_timestamp`) into an expression.
pub fn default_expr(sql: &str, dt: &arrow::datatypes::DataType) -> crate::Result<Expr> {
    use datafusion::sql::sqlparser::ast::{Expr as AstExpr, UnaryOperator, Value};
    let parsed = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(sql)
    .and_then(|mut p| p.parse_expr())
    .map_err(|e| crate::Error::Parse(e.to_string()))?;
    let unsupported = || {
        crate::Error::NotSupported(format!(
            "DEFAULT {sql}: only constants, now() and current_timestamp are supported"
        ))
    };
    let (neg, inner) = match &parsed {
        AstExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => (true, expr.as_ref()),
        other => (false, other),
    };
    let text = match inner {
        AstExpr::Value(v) => match &v.value {
            Value::Null => return Ok(Expr::Literal(ScalarValue::try_from(dt)?, None)),
            Value::Number(n, _) => {
                if neg {
                    format!("-{n}")
                } else {
                    n.clone()
                }
            }
            Value::SingleQuotedString(s) => s.clone(),
            Value::Boolean(b) => b.to_string(),
            _ => return Err(unsupported()),
        },
        AstExpr::Function(f)
            if ["now", "current_timestamp"]
                .contains(&f.name.to_string().to_ascii_lowercase().as_str()) =>
        {
            return Ok(datafusion::functions::expr_fn::now());
        }
        AstExpr::Identifier(i) if i.value.eq_ignore_ascii_case("current_timestamp") => {
            return Ok(datafusion::functions::expr_fn::now());
        }
        _ => return Err(unsupported()),
    };
    let v = ScalarValue::Utf8(Some(text.clone()))
        .cast_to(dt)
        .map_err(|_| {
            crate::Error::sql(
                "22P02",
                format!("invalid DEFAULT value {text} for type {dt}"),
            )
        })?;
    Ok(Expr::Literal(v, None))
}

/// For each file, whether its statistics prove that `pred` is true on every row:
/// `NOT pred` cannot match, and the columns `pred` reads hold no NULL (where `pred`
/// would be NULL rather than true).
pub fn files_all_match<'a>(
    state: &dyn Session,
    schema: &SchemaRef,
    pred: &Expr,
    files: impl IntoIterator<Item = &'a FileMeta>,
) -> DfResult<Vec<bool>> {
    all_match(state, schema, pred, &FileStats::new(schema, files))
}

/// For each container of `stats`, whether its statistics prove `pred` true on every
/// row (see [`files_all_match`]).
pub(crate) fn all_match(
    state: &dyn Session,
    schema: &SchemaRef,
    pred: &Expr,
    stats: &impl PruningStatistics,
) -> DfResult<Vec<bool>> {
    use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
    let df_schema = Arc::new(DFSchema::try_from(schema.as_ref().clone())?);
    let ctx = SimplifyContext::builder()
        .with_schema(df_schema.clone())
        .build();
    // Simplifying pushes the NOT down to comparisons the pruning predicate understands.
    let pred = datafusion::logical_expr::expr_rewriter::unnormalize_col(pred.clone());
    let negated = ExprSimplifier::new(ctx).simplify(datafusion::logical_expr::not(pred.clone()))?;
    let negated = state.create_physical_expr(negated, &df_schema)?;
    let survivors = PruningPredicateBuilder::new()
        .with_file_schema(schema.clone())
        .build(negated);
    let mut all = prune(survivors.as_deref(), stats);
    for all in &mut all {
        *all = !*all;
    }
    for c in pred.column_refs() {
        let nulls = stats
            .null_counts(c)
            .map(|a| a.as_primitive::<UInt64Type>().clone());
        for (i, all) in all.iter_mut().enumerate() {
            *all &= nulls
                .as_ref()
                .is_some_and(|n| n.is_valid(i) && n.value(i) == 0);
        }
    }
    Ok(all)
}

/// For each file, whether its statistics allow a row matching `pred` (true = read it).
/// The files of `t` a deletion predicate may match (by statistics), each with
/// whether every row matches: `logical` is the predicate, `pred` its physical form.
pub fn files_to_delete_from<'a>(
    state: &dyn Session,
    t: &'a TableDef,
    logical: &Expr,
    pred: &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
) -> crate::Result<Vec<(&'a FileMeta, bool)>> {
    let schema = t.schema();
    let may = files_may_match(&schema, pred.clone(), &t.files);
    let all = files_all_match(state, &schema, logical, &t.files)?;
    Ok(t.files
        .iter()
        .enumerate()
        .filter(|(i, _)| may[*i])
        .map(|(i, f)| (f, all[i]))
        .collect())
}

pub fn files_may_match(
    schema: &SchemaRef,
    pred: Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    files: &[FileMeta],
) -> Vec<bool> {
    let pruning = PruningPredicateBuilder::new()
        .with_file_schema(schema.clone())
        .build(pred);
    prune(pruning.as_deref(), &FileStats::new(schema, files))
}

fn prune(pred: Option<&PruningPredicate>, stats: &impl PruningStatistics) -> Vec<bool> {
    match pred {
        Some(p) => p
            .prune(stats)
            .unwrap_or_else(|_| vec![true; stats.num_containers()]),
        None => vec![true; stats.num_containers()],
    }
}

#[async_trait]
impl TableProvider for HypertableProvider {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    /// Filters on the time column alone are applied by the scan itself (exactly), so
    /// a file whose statistics prove every row is in range is read without its time
    /// column and without a filter. Other filters prune files and stay above the scan.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|e| {
                if is_time_filter(&self.table, e) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let ops = staged_ops(state, self.table.id);
        if ops.is_empty() {
            return self.scan_stored(state, projection, filters, limit).await;
        }
        // Inside a transaction that changed this table: the stored rows its
        // deletions leave, plus the rows it inserted.
        let table = self
            .engine
            .view(self.table.id)
            .ok_or_else(|| crate::Error::UndefinedTable(self.table.name.clone()))?
            .table;
        let schema = table.schema();
        let folded = staged::fold(state, &table, &ops)?;
        let mut base = self.scan_stored(state, None, filters, None).await?;
        if let Some(deleted) = &folded.deleted {
            let keep = state.create_physical_expr(
                staged::keep_filter(deleted),
                &staged::qualified_schema(&table)?,
            )?;
            base = Arc::new(FilterExec::try_new(keep, base)?);
        }
        let mem = MemorySourceConfig::try_new(&[folded.inserts], schema.clone(), None)?;
        let mut mine: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(mem);
        if let Some(f) = conjunction(filters.to_vec()) {
            let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
            mine = Arc::new(FilterExec::try_new(
                state.create_physical_expr(f, &df_schema)?,
                mine,
            )?);
        }
        let all = UnionExec::try_new(vec![base, mine])?;
        match projection {
            Some(cols) => select_columns(all, cols),
            None => Ok(all),
        }
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(crate::Error::NotSupported(format!("{insert_op} is not supported")).into());
        }
        let sink = TableSink {
            table: self.table.clone(),
            engine: self.engine.clone(),
            schema: self.table.schema(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

impl HypertableProvider {
    /// A scan of what is stored (files and memtables), without a session's staged
    /// changes.
    async fn scan_stored(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let pinned = state
            .config()
            .get_extension::<PinnedFiles>()
            .and_then(|p| p.0.get(&self.table.id).cloned());
        let view = match pinned {
            Some(table) => crate::write::TableView { table, mem: vec![] },
            None => self
                .engine
                .view(self.table.id)
                .ok_or_else(|| crate::Error::UndefinedTable(self.table.name.clone()))?,
        };
        self.scan_view(state, view, &[], projection, filters, limit)
    }

    /// A scan of the files and memtable batches of `view` (one moment's view of the
    /// table, so that a caller that reads part of it another way sees the same files)
    /// but for the files marked in `skip` (by position in the table's file list).
    pub(crate) fn scan_view(
        &self,
        state: &dyn Session,
        view: crate::write::TableView,
        skip: &[bool],
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let table = view.table;
        let schema = table.schema();
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        // Time conjuncts first: a row filter that keeps the predicate's order (see
        // `parquet_scan`) applies them before decoding the other columns.
        let (on_time, others): (Vec<Expr>, Vec<Expr>) = filters
            .iter()
            .cloned()
            .partition(|e| is_time_filter(&table, e));
        let physical = match conjunction(on_time.into_iter().chain(others)) {
            Some(e) => Some(state.create_physical_expr(e, &df_schema)?),
            None => None,
        };
        let table_stats = self.engine.file_stats().for_table(&table);
        let (mut keep_files, keep_mem) =
            kept_sources(state, &table, &view.mem, filters, &table_stats)?;
        // Files answered elsewhere were not pruned: EXPLAIN counts them as kept.
        let not_pruned = keep_files.iter().filter(|k| **k).count();

        let mut all_chunks = BTreeSet::new();
        let mut kept_chunks = BTreeSet::new();
        for (f, keep) in table.files.iter().zip(&keep_files) {
            all_chunks.insert(f.chunk_start);
            if *keep {
                kept_chunks.insert(f.chunk_start);
            }
        }
        for ((start, _), keep) in view.mem.iter().zip(&keep_mem) {
            all_chunks.insert(*start);
            if *keep {
                kept_chunks.insert(*start);
            }
        }
        for (keep, skip) in keep_files.iter_mut().zip(skip) {
            *keep &= !*skip;
        }
        let (files, mem) = kept(&table, &view.mem, &keep_files, &keep_mem);

        let dirty = match storage::dedup::key_indices(&table, &schema) {
            Some(_) => dirty_ranges(&table, &files, &mem),
            None => vec![],
        };
        // The time filters this scan applies itself (see `supports_filters_pushdown`),
        // and the others, which only prune.
        let (exact, rest): (Vec<Expr>, Vec<Expr>) = filters
            .iter()
            .cloned()
            .partition(|e| is_time_filter(&table, e));
        let (exact, rest) = (conjunction(exact), conjunction(rest));
        let input = match (&exact, dirty.is_empty()) {
            (None, true) => UnionExec::try_new(self.plain_inputs(
                state,
                &schema,
                &files,
                &mem,
                projection,
                physical.as_ref(),
                limit,
                false,
            )?)?,
            (Some(exact), true) => {
                // Files entirely inside the range need neither the filter nor its columns.
                let whole: Vec<bool> = if files.is_empty() {
                    vec![]
                } else {
                    all_match(state, &schema, exact, &table_stats)?
                        .into_iter()
                        .zip(&keep_files)
                        .filter(|(_, k)| **k)
                        .map(|(w, _)| w)
                        .collect()
                };
                let (inside, partly): (Vec<_>, Vec<_>) =
                    files.iter().zip(whole).partition(|(_, w)| *w);
                let inside: Vec<&FileMeta> = inside.into_iter().map(|(f, _)| *f).collect();
                let partly: Vec<&FileMeta> = partly.into_iter().map(|(f, _)| *f).collect();
                let mut inputs = vec![];
                if !inside.is_empty() {
                    // Every row group matches every filter on time: no predicate, so
                    // no per-file pruning work and no page index to read.
                    let target = state.config().target_partitions().max(1);
                    let rest = rest
                        .map(|e| state.create_physical_expr(e, &df_schema))
                        .transpose()?;
                    inputs.push(self.file_scan(
                        state,
                        &schema,
                        &inside,
                        target,
                        projection,
                        rest.as_ref(),
                        limit,
                        false,
                    )?);
                }
                let cached = match mem.is_empty() {
                    true => self.cached_filtered(
                        state,
                        &schema,
                        &partly,
                        projection,
                        physical.as_ref(),
                        exact,
                        limit,
                    )?,
                    false => None,
                };
                if let Some(scan) = cached {
                    inputs.push(scan);
                } else if !partly.is_empty() || !mem.is_empty() || inputs.is_empty() {
                    // Read the filter's columns too, filter, then drop them again.
                    let wanted: Vec<usize> = match projection {
                        Some(p) => p.clone(),
                        None => (0..schema.fields().len()).collect(),
                    };
                    let mut read: BTreeSet<usize> = wanted.iter().copied().collect();
                    for c in exact.column_refs() {
                        read.insert(schema.index_of(&c.name)?);
                    }
                    let read: Vec<usize> = read.into_iter().collect();
                    let scanned = UnionExec::try_new(self.plain_inputs(
                        state,
                        &schema,
                        &partly,
                        &mem,
                        Some(&read),
                        physical.as_ref(),
                        None,
                        narrow_time_filter(&table, filters, &partly),
                    )?)?;
                    let read_schema = DFSchema::try_from(schema.project(&read)?)?;
                    let pred = state.create_physical_expr(exact.clone(), &read_schema)?;
                    let filtered: Arc<dyn ExecutionPlan> =
                        Arc::new(FilterExec::try_new(pred, scanned)?);
                    let positions: Vec<usize> = wanted
                        .iter()
                        .filter_map(|c| read.iter().position(|r| r == c))
                        .collect();
                    inputs.push(select_columns(filtered, &positions)?);
                }
                UnionExec::try_new(inputs)?
            }
            (exact, false) => {
                let merged =
                    self.dedup_input(state, &table, &schema, &files, &mem, &dirty, None)?;
                let merged = match exact {
                    Some(e) => Arc::new(FilterExec::try_new(
                        state.create_physical_expr(e.clone(), &df_schema)?,
                        merged,
                    )?),
                    None => merged,
                };
                match projection {
                    Some(cols) => select_columns(merged, cols)?,
                    None => merged,
                }
            }
        };
        Ok(Arc::new(HypertableScanExec {
            table: table.name.clone(),
            chunks_scanned: kept_chunks.len(),
            chunks_pruned: all_chunks.len() - kept_chunks.len(),
            files_scanned: files.len(),
            files_pruned: table.files.len() - not_pruned,
            input,
        }))
    }
}

/// Which of `table`'s files and memtable chunks (`mem`) the statistics allow a row
/// matching `filters` in. Line-protocol tables merge duplicate points at read time:
/// a file may only be skipped on what identifies a point (tags, time), never on a
/// field value an older copy of the point might have differently.
pub(crate) fn kept_sources(
    state: &dyn Session,
    table: &TableDef,
    mem: &[(i64, Vec<MemBatch>)],
    filters: &[Expr],
    table_stats: &impl PruningStatistics,
) -> DfResult<(Vec<bool>, Vec<bool>)> {
    let schema = table.schema();
    let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
    let safe: Vec<Expr> = if table.dedups() {
        let series = table.sort_series();
        let keys: Vec<&String> = series.iter().chain(table.time_column.iter()).collect();
        filters
            .iter()
            .filter(|e| e.column_refs().iter().all(|c| keys.contains(&&c.name)))
            .cloned()
            .collect()
    } else {
        filters.to_vec()
    };
    let prune_on = match conjunction(safe) {
        Some(e) => Some(state.create_physical_expr(e, &df_schema)?),
        None => None,
    };
    let pruning = prune_on.and_then(|p| {
        PruningPredicateBuilder::new()
            .with_file_schema(schema.clone())
            .build(p)
    });
    let keep_files = prune(pruning.as_deref(), table_stats);
    // Memtable chunks: only the time range of the chunk is known.
    let mem_meta: Vec<FileMeta> = mem
        .iter()
        .map(|(start, batches)| mem_chunk_meta(table, *start, batches))
        .collect();
    let keep_mem = prune(pruning.as_deref(), &FileStats::new(&schema, &mem_meta));
    Ok((keep_files, keep_mem))
}

/// The files of `table` and the batches of the memtable chunks `mem` marked kept.
pub(crate) fn kept<'a>(
    table: &'a TableDef,
    mem: &'a [(i64, Vec<MemBatch>)],
    keep_files: &[bool],
    keep_mem: &[bool],
) -> (Vec<&'a FileMeta>, Vec<&'a MemBatch>) {
    let files = table
        .files
        .iter()
        .zip(keep_files)
        .filter(|(_, k)| **k)
        .map(|(f, _)| f)
        .collect();
    let batches = mem
        .iter()
        .zip(keep_mem)
        .filter(|(_, k)| **k)
        .flat_map(|((_, b), _)| b.iter())
        .collect();
    (files, batches)
}

/// Statistics of an in-memory chunk: its time range, nothing else.
fn mem_chunk_meta(table: &TableDef, start: i64, batches: &[MemBatch]) -> FileMeta {
    let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
    let mut stats = vec![];
    if let (Some(tc), Some(iv)) = (&table.time_column, table.chunk_interval_micros) {
        let dt = table.column(tc).map(|c| c.sql_type.to_arrow());
        if let Some(dt) = dt {
            let lo = micros_to_string(start, &dt);
            let hi = micros_to_string(start.saturating_add(iv - 1), &dt);
            if let (Some(lo), Some(hi)) = (lo, hi) {
                stats.push(crate::catalog::ColumnStats {
                    column: tc.clone(),
                    min: Some(lo),
                    max: Some(hi),
                    null_count: Some(0),
                    sum: None,
                });
            }
        }
    }
    // Columns without statistics must not be treated as all-NULL.
    for c in &table.columns {
        if Some(&c.name) != table.time_column.as_ref() {
            stats.push(crate::catalog::ColumnStats {
                column: c.name.clone(),
                min: None,
                max: None,
                null_count: None,
                sum: None,
            });
        }
    }
    FileMeta {
        chunk_end: None,
        id: 0,
        chunk_start: start,
        path: String::new(),
        rows,
        bytes: 0,
        raw_bytes: None,
        sorted_by: None,
        stats,
    }
}

fn micros_to_string(micros: i64, dt: &arrow::datatypes::DataType) -> Option<String> {
    use arrow::array::TimestampMicrosecondArray;
    use arrow::compute::cast;
    let arr: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![micros]));
    let typed = cast(&arr, dt).ok()?;
    let s = cast(&typed, &arrow::datatypes::DataType::Utf8).ok()?;
    s.as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .map(|a| a.value(0).to_string())
}

/// Sends the rows of an INSERT into the write path.
#[derive(Debug)]
struct TableSink {
    table: Arc<TableDef>,
    engine: Arc<Engine>,
    schema: SchemaRef,
}

impl DisplayAs for TableSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SundialSink: table={}", self.table.name)
    }
}

#[async_trait]
impl DataSink for TableSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        // Use the newest definition: ALTER TABLE may have run since planning.
        let table = self
            .engine
            .view(self.table.id)
            .map(|v| v.table)
            .ok_or_else(|| crate::Error::UndefinedTable(self.table.name.clone()))?;
        // Gather the statement's rows and write them as one record: all or nothing.
        let mut batches = vec![];
        while let Some(b) = data.next().await {
            batches.push(b?);
        }
        if batches.is_empty() {
            return Ok(0);
        }
        let schema = batches[0].schema();
        let batch = arrow::compute::concat_batches(&schema, &batches)?;
        // ON CONFLICT and RETURNING: the SQL layer takes the rows and writes them.
        if let Some(c) = context.session_config().get_extension::<CapturedInsert>() {
            let n = batch.num_rows() as u64;
            *c.0.lock() = Some(batch);
            return Ok(n);
        }
        // Inside a transaction block the rows wait for COMMIT.
        if let Some(staging) = context.session_config().get_extension::<Staging>()
            && staging.in_block()
        {
            return staging.insert(&table, batch).map_err(DataFusionError::from);
        }
        self.engine
            .write(&table, batch)
            .await
            .map_err(DataFusionError::from)
    }
}

/// Wraps a table scan and states, in EXPLAIN, how many chunks and files it pruned.
#[derive(Debug)]
pub struct HypertableScanExec {
    pub table: String,
    pub chunks_scanned: usize,
    pub chunks_pruned: usize,
    pub files_scanned: usize,
    pub files_pruned: usize,
    input: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for HypertableScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "HypertableScanExec: table={}, chunks_scanned={}, chunks_pruned={}, files_scanned={}, files_pruned={}",
            self.table,
            self.chunks_scanned,
            self.chunks_pruned,
            self.files_scanned,
            self.files_pruned
        )
    }
}

impl ExecutionPlan for HypertableScanExec {
    fn name(&self) -> &str {
        "HypertableScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("HypertableScanExec needs a child".into()))?;
        Ok(Arc::new(HypertableScanExec {
            table: self.table.clone(),
            chunks_scanned: self.chunks_scanned,
            chunks_pruned: self.chunks_pruned,
            files_scanned: self.files_scanned,
            files_pruned: self.files_pruned,
            input,
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}
