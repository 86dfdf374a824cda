//! Scans of chunk files whose columns are kept decoded ([`DecodedColumns`]): the
//! predicate prunes granules by their min/max as the page index would, and the kept
//! row ranges are zero-copy slices of the kept arrays: no read, no decompression.
//! Files not kept are read from Parquet as before and loaded in the background once
//! asked for twice, so a dashboard's second refresh decodes nothing.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::ParquetFileReaderFactory;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::future::BoxFuture;
use futures::{FutureExt, TryStreamExt};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};

use super::leaf::leaf_plan_methods;
use crate::catalog::FileMeta;
use crate::storage::decoded::{DecodedColumn, DecodedColumns, GRANULE_ROWS, granule_span};

/// Rows per batch a cached scan emits (DataFusion's default batch size).
const BATCH_ROWS: usize = 8192;

/// A file the cache serves: its kept columns in the scan's read order.
pub struct CachedFile<'a> {
    pub file: &'a FileMeta,
    pub columns: Vec<Arc<DecodedColumn>>,
}

/// Files the cache serves, files to read from Parquet, and loads to start (file and
/// its columns).
pub type Split<'a> = (
    Vec<CachedFile<'a>>,
    Vec<&'a FileMeta>,
    Vec<(FileMeta, Vec<String>)>,
);

/// Splits `files` into those whose `columns` are all kept (with the columns) and the
/// others, noting the others' request so a second one loads them; the loads to start
/// are returned as (file, columns).
pub fn split<'a>(cache: &DecodedColumns, files: &[&'a FileMeta], columns: &[&str]) -> Split<'a> {
    let (mut hit, mut miss, mut load) = (vec![], vec![], vec![]);
    if !cache.enabled() {
        return (hit, files.to_vec(), load);
    }
    for f in files {
        match cache.get(&f.path, columns) {
            Some(cols) => hit.push(CachedFile {
                file: f,
                columns: cols,
            }),
            None => {
                let wanted = cache.wanted(&f.path, columns);
                if !wanted.is_empty() {
                    load.push(((*f).clone(), wanted));
                }
                miss.push(*f);
            }
        }
    }
    (hit, miss, load)
}

/// Decodes `columns` of `file` (every row, in file order, cast to the types of
/// `schema`, the table's) and keeps them in `cache`.
pub async fn load(
    cache: Arc<DecodedColumns>,
    factory: Arc<dyn ParquetFileReaderFactory>,
    schema: SchemaRef,
    file: FileMeta,
    columns: Vec<String>,
) {
    // One load at a time: loads are background work beside the queries.
    static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let _permit = GATE.acquire().await;
    match decode(factory, &schema, &file, &columns).await {
        Ok(arrays) => {
            for (name, values) in columns.iter().zip(arrays) {
                cache.insert(&file.path, name, DecodedColumn::new(values));
            }
        }
        Err(e) => {
            tracing::debug!(path = %file.path, error = %e, "columns not kept decoded");
            cache.loaded(&file.path, &columns);
        }
    }
}

async fn decode(
    factory: Arc<dyn ParquetFileReaderFactory>,
    schema: &SchemaRef,
    file: &FileMeta,
    columns: &[String],
) -> DfResult<Vec<ArrayRef>> {
    let pf = PartitionedFile::new(file.path.clone(), file.bytes);
    let mut reader =
        IndexedReader(factory.create_reader(0, pf, None, &ExecutionPlanMetricsSet::new())?);
    let options = ArrowReaderOptions::new();
    let footer = reader.get_metadata(Some(&options)).await?;
    let meta = ArrowReaderMetadata::try_new(footer, options)?;
    let file_schema = meta.schema().clone();
    let mut roots = Vec::with_capacity(columns.len());
    for c in columns {
        roots.push(file_schema.index_of(c)?);
    }
    let mask = ProjectionMask::roots(meta.parquet_schema(), roots);
    let stream = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta)
        .with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()?;
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let want = schema.field_with_name(c)?.data_type();
        let parts: Vec<ArrayRef> = batches
            .iter()
            .map(|b| {
                let a = b.column(b.schema().index_of(c)?).clone();
                if a.data_type() == want {
                    Ok(a)
                } else {
                    Ok(arrow::compute::cast(&a, want)?)
                }
            })
            .collect::<DfResult<_>>()?;
        let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
        out.push(if refs.is_empty() {
            arrow::array::new_empty_array(want)
        } else {
            arrow::compute::concat(&refs)?
        });
    }
    Ok(out)
}

/// Reads chunk files through the runtime's metadata cache, asking for the page index
/// with every footer: DataFusion's opener asks for the footer alone, the cache then
/// keeps footers without indexes, and every pruned scan read and parsed the page
/// index again past the cache.
#[derive(Debug)]
pub(crate) struct IndexedReaderFactory(pub(crate) CachedParquetFileReaderFactory);

impl ParquetFileReaderFactory for IndexedReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        partitioned_file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> DfResult<Box<dyn AsyncFileReader + Send>> {
        let inner = self.0.create_reader(
            partition_index,
            partitioned_file,
            metadata_size_hint,
            metrics,
        )?;
        Ok(Box::new(IndexedReader(inner)))
    }
}

/// A file reader whose footers come with their page index (see
/// [`IndexedReaderFactory`]).
pub(crate) struct IndexedReader(Box<dyn AsyncFileReader + Send>);

impl AsyncFileReader for IndexedReader {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, parquet::errors::Result<bytes::Bytes>> {
        self.0.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<bytes::Bytes>>> {
        self.0.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let options = options
            .cloned()
            .unwrap_or_default()
            .with_page_index_policy(PageIndexPolicy::Optional);
        async move { self.0.get_metadata(Some(&options)).await }.boxed()
    }
}

/// Granule statistics of one cached file for [`PruningPredicate`].
struct GranuleStats<'a> {
    names: &'a [&'a str],
    columns: &'a [Arc<DecodedColumn>],
    granules: usize,
    rows: usize,
}

impl GranuleStats<'_> {
    fn column(&self, c: &Column) -> Option<&DecodedColumn> {
        let i = self.names.iter().position(|n| *n == c.name)?;
        Some(&self.columns[i])
    }
}

impl PruningStatistics for GranuleStats<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.column(column)?.mins.clone()
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.column(column)?.maxs.clone()
    }

    fn num_containers(&self) -> usize {
        self.granules
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        Some(self.column(column)?.null_counts.clone())
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        let counts: Vec<u64> = (0..self.granules)
            .map(|g| granule_span(g, self.rows).1 as u64)
            .collect();
        Some(Arc::new(arrow::array::UInt64Array::from(counts)))
    }

    fn contained(
        &self,
        _column: &Column,
        _values: &std::collections::HashSet<ScalarValue>,
    ) -> Option<BooleanArray> {
        None
    }
}

/// The scan; see the module documentation.
#[derive(Debug)]
pub struct CachedScanExec {
    schema: SchemaRef,
    /// Per file, the output columns.
    files: Vec<Vec<ArrayRef>>,
    /// Per partition, the (file, first row, rows) pieces it emits.
    parts: Vec<Vec<(usize, usize, usize)>>,
    granules_kept: usize,
    granules: usize,
    rows: usize,
    limit: Option<usize>,
    /// Rows the scan keeps itself: the predicate over the kept columns (the
    /// schema `read`), then the positions of the output columns among them.
    filter: Option<Arc<RowFilter>>,
    props: Arc<PlanProperties>,
}

/// A predicate a [`CachedScanExec`] applies to its rows (see `filter`).
#[derive(Debug)]
struct RowFilter {
    predicate: Arc<dyn PhysicalExpr>,
    read: SchemaRef,
    output: Vec<usize>,
}

impl RowFilter {
    /// The rows of `columns` (the kept columns, `len` rows) the predicate keeps,
    /// as the output columns.
    fn apply(&self, columns: Vec<ArrayRef>, len: usize) -> DfResult<RecordBatch> {
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(len));
        let batch = RecordBatch::try_new_with_options(self.read.clone(), columns, &options)?;
        let mask = self.predicate.evaluate(&batch)?.into_array(len)?;
        let mask = arrow::array::AsArray::as_boolean_opt(mask.as_ref()).ok_or_else(|| {
            DataFusionError::Internal("a scan filter did not give booleans".into())
        })?;
        let kept = arrow::compute::filter_record_batch(&batch, mask)?;
        Ok(kept.project(&self.output)?)
    }
}

impl CachedScanExec {
    /// A scan of `files` (their columns named `read`, of which `output` are emitted,
    /// as positions in `read`) keeping the granules `predicate` (over the table's
    /// schema `table_schema`) may match, over at most `partitions` partitions. With
    /// `filter` (over the `read` columns) the scan keeps only the rows it is true
    /// for, so that no FilterExec and projection need planning above it.
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        table_schema: &SchemaRef,
        files: Vec<CachedFile<'_>>,
        read: &[&str],
        output: &[usize],
        predicate: Option<&Arc<dyn PhysicalExpr>>,
        limit: Option<usize>,
        partitions: usize,
        filter: Option<Arc<dyn PhysicalExpr>>,
    ) -> DfResult<CachedScanExec> {
        let fields: Vec<_> = output
            .iter()
            .map(|i| table_schema.field_with_name(read[*i]).cloned())
            .collect::<Result<_, _>>()?;
        let schema: SchemaRef = Arc::new(arrow::datatypes::Schema::new(fields));
        let pruning = match predicate {
            Some(p) => PruningPredicateBuilder::new()
                .with_file_schema(table_schema.clone())
                .build(p.clone()),
            None => None,
        };
        let (mut granules_kept, mut granules, mut rows) = (0, 0, 0);
        let mut pieces = vec![];
        let mut out_files = Vec::with_capacity(files.len());
        for (fi, f) in files.iter().enumerate() {
            let n = f.columns.first().map_or(0, |c| c.values.len());
            let count = n.div_ceil(GRANULE_ROWS);
            let keep = match &pruning {
                Some(p) => p.prune(&GranuleStats {
                    names: read,
                    columns: &f.columns,
                    granules: count,
                    rows: n,
                })?,
                None => vec![true; count],
            };
            granules += count;
            // Runs of kept granules, cut into batches.
            let mut g = 0;
            while g < count {
                if !keep[g] {
                    g += 1;
                    continue;
                }
                let first = g;
                while g < count && keep[g] {
                    g += 1;
                }
                granules_kept += g - first;
                let start = first * GRANULE_ROWS;
                let end = (g * GRANULE_ROWS).min(n);
                rows += end - start;
                let mut at = start;
                while at < end {
                    let len = BATCH_ROWS.min(end - at);
                    pieces.push((fi, at, len));
                    at += len;
                }
            }
            out_files.push(match &filter {
                Some(_) => f.columns.iter().map(|c| c.values.clone()).collect(),
                None => output
                    .iter()
                    .map(|i| f.columns[*i].values.clone())
                    .collect::<Vec<_>>(),
            });
        }
        let filter = match filter {
            Some(predicate) => {
                let fields: Vec<_> = read
                    .iter()
                    .map(|n| table_schema.field_with_name(n).cloned())
                    .collect::<Result<_, _>>()?;
                Some(Arc::new(RowFilter {
                    predicate,
                    read: Arc::new(arrow::datatypes::Schema::new(fields)),
                    output: output.to_vec(),
                }))
            }
            None => None,
        };
        // Small scans stay in one partition; larger ones spread over the cores.
        let n = if rows > 4 * BATCH_ROWS && limit.is_none() {
            partitions.clamp(1, pieces.len().max(1))
        } else {
            1
        };
        let mut parts = vec![vec![]; n];
        for (i, p) in pieces.into_iter().enumerate() {
            parts[i % n].push(p);
        }
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(n),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(CachedScanExec {
            schema,
            files: out_files,
            parts,
            granules_kept,
            granules,
            rows,
            limit,
            filter,
            props,
        })
    }
}

impl DisplayAs for CachedScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "CachedScanExec: decoded files={}, granules={}/{}, rows={}",
            self.files.len(),
            self.granules_kept,
            self.granules,
            self.rows
        )?;
        if let Some(l) = self.limit {
            write!(f, ", limit={l}")?;
        }
        if let Some(r) = &self.filter {
            write!(f, ", filter={}", r.predicate)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for CachedScanExec {
    fn name(&self) -> &str {
        "CachedScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    leaf_plan_methods!();

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let pieces = self.parts.get(partition).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!("CachedScanExec has no partition {partition}"))
        })?;
        let files = self.files.clone();
        let schema = self.schema.clone();
        let filter = self.filter.clone();
        let mut left = self.limit.unwrap_or(usize::MAX);
        let batches = pieces.into_iter().filter_map(move |(f, start, len)| {
            if left == 0 {
                return None;
            }
            let batch = match &filter {
                None => {
                    let len = len.min(left);
                    let columns = files[f].iter().map(|a| a.slice(start, len)).collect();
                    RecordBatch::try_new_with_options(
                        schema.clone(),
                        columns,
                        &arrow::array::RecordBatchOptions::new().with_row_count(Some(len)),
                    )
                    .map_err(DataFusionError::from)
                }
                Some(r) => {
                    let columns = files[f].iter().map(|a| a.slice(start, len)).collect();
                    r.apply(columns, len).map(|b| {
                        let n = b.num_rows().min(left);
                        b.slice(0, n)
                    })
                }
            };
            match batch {
                Ok(b) if b.num_rows() == 0 => None,
                Ok(b) => {
                    left -= b.num_rows();
                    Some(Ok(b))
                }
                Err(e) => {
                    left = 0;
                    Some(Err(e))
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        )))
    }
}
