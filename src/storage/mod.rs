//! Chunk files: object-store paths, sorting a chunk's rows, writing them as ZSTD
//! Parquet with statistics and page index, and the per-column min/max/null-count
//! statistics the catalog keeps for pruning.

use std::sync::Arc;

use arrow::array::AsArray;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::compute::{SortColumn, SortOptions, cast, lexsort_to_indices, take_record_batch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::catalog::{ColumnStats, FileMeta, SqlType, TableDef};
use crate::error::Result;

pub mod decoded;
pub mod dedup;
pub mod derived_rows;
pub mod rewrite;
pub mod stats_cache;

/// Rows per Parquet row group: small enough for row-group pruning inside a file and
/// for DataFusion to read one chunk's file on both cores.
pub const ROW_GROUP_ROWS: usize = 64 * 1024;

/// Object-store path of a chunk file. The database name is one path part whatever
/// it holds: `/`, `..`, control characters and `%` are percent-encoded, so a name
/// from the network never leaves its directory or lands in another database's.
pub fn file_path(db: &str, table_id: u64, chunk_start: i64, file_id: u64) -> ObjectPath {
    use object_store::path::PathPart;
    ObjectPath::from_iter([
        PathPart::from("data"),
        PathPart::from(db),
        PathPart::from(table_id.to_string()),
        PathPart::from(chunk_start.to_string()),
        PathPart::from(format!("{file_id:020}.parquet")),
    ])
}

/// Rows of a sorted batch handed to the Parquet writer at a time by a flush.
const WRITE_SLICE_ROWS: usize = 64 * 1024;

/// The order a flush writes a batch in.
enum Sorted {
    /// Series then time, duplicates merged (line-protocol tables); with the keys.
    Dedup(dedup::DedupOrder, Vec<usize>, bool),
    /// Time order (other tables); `None` keeps the batch's order.
    Time(Option<arrow::array::UInt32Array>, usize),
}

impl Sorted {
    fn len(&self) -> usize {
        match self {
            Sorted::Dedup(o, _, _) => o.len(),
            Sorted::Time(_, n) => *n,
        }
    }

    fn take(&self, batch: &RecordBatch, range: std::ops::Range<usize>) -> Result<RecordBatch> {
        match self {
            Sorted::Dedup(o, keys, whole) => o.take(batch, keys, range, *whole),
            Sorted::Time(Some(idx), _) => Ok(take_record_batch(
                batch,
                &idx.slice(range.start, range.len()),
            )?),
            Sorted::Time(None, _) => Ok(batch.slice(range.start, range.len())),
        }
    }
}

/// The positions of `batch`'s rows in time order (`None`: already in it, or no time).
fn time_order(table: &TableDef, batch: &RecordBatch) -> Result<Sorted> {
    let n = batch.num_rows();
    let spec = sort_spec(table, &batch.schema());
    if spec.is_empty() || n < 2 {
        return Ok(Sorted::Time(None, n));
    }
    let cols: Vec<SortColumn> = spec
        .iter()
        .map(|(i, o)| SortColumn {
            values: batch.column(*i).clone(),
            options: Some(*o),
        })
        .collect();
    Ok(Sorted::Time(Some(lexsort_to_indices(&cols, None)?), n))
}

/// The sort order a table's files get now, as text (`hostname,time`, `time DESC`):
/// a file whose rows follow it needs no re-sort.
pub fn sort_signature(table: &TableDef) -> String {
    let schema = table.schema();
    sort_spec(table, &schema)
        .iter()
        .map(|(i, o)| {
            let mut s = schema.field(*i).name().clone();
            if o.descending {
                s.push_str(" DESC");
            }
            if o.nulls_first != o.descending {
                s.push_str(if o.nulls_first {
                    " NULLS FIRST"
                } else {
                    " NULLS LAST"
                });
            }
            s
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The order of a table's files (columns of `schema` with their direction): the
/// key of a table that merges duplicates; else `compress_segmentby`, then
/// `compress_orderby`, then time ascending where orderby does not name it.
pub fn sort_spec(table: &TableDef, schema: &arrow::datatypes::Schema) -> Vec<(usize, SortOptions)> {
    let asc = SortOptions::default();
    if let Some(k) = dedup::key_indices(table, schema) {
        return k.into_iter().map(|i| (i, asc)).collect();
    }
    let mut out: Vec<(usize, SortOptions)> = vec![];
    let mut push = |name: &str, o: SortOptions| {
        if let Ok(i) = schema.index_of(name)
            && !out.iter().any(|(j, _)| *j == i)
        {
            out.push((i, o));
        }
    };
    for c in table.sort_series() {
        push(&c, asc);
    }
    if let Some(c) = &table.compression {
        for o in &c.orderby {
            push(
                &o.column,
                SortOptions {
                    descending: o.desc,
                    nulls_first: o.nulls_first,
                },
            );
        }
    }
    if let Some(tc) = &table.time_column {
        push(tc, asc);
    }
    out
}

/// Rows per data page: a narrow query (one series, one hour) decodes the pages its
/// page-index pruning keeps, so smaller pages decode less. Measured on TSBS cpu-only
/// (BENCHMARKS.md): 20,000 → 8,192 cut a one-host-one-hour query's server CPU by a
/// fifth for 5% more bytes; 4,096 cost wide scans 7% and 12% more bytes.
pub const PAGE_ROWS: usize = 8192;

/// ZSTD level of files written by a flush (fast: it is on the ingest path).
pub const FLUSH_ZSTD_LEVEL: i32 = 3;
/// ZSTD level of compacted files (background work, written once, read often).
pub const COMPACT_ZSTD_LEVEL: i32 = 9;

/// Rows per row group of a file of `rows` rows: at most [`ROW_GROUP_ROWS`], and all
/// groups the same size (no short last group), so a scan that splits the file
/// between cores gives each the same work.
pub fn row_group_rows(rows: u64) -> usize {
    let groups = rows.div_ceil(ROW_GROUP_ROWS as u64).max(1);
    (rows.div_ceil(groups) as usize).max(1)
}

/// Parquet writer settings for a table's chunk files of about `rows` rows.
pub fn writer_props(table: &TableDef, zstd_level: i32, rows: u64) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(zstd_level).unwrap_or_default(),
        ))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(row_group_rows(rows)))
        .set_data_page_row_count_limit(PAGE_ROWS);
    // Sorted timestamps delta-encode to a few bits a row and decode fast.
    if let Some(tc) = &table.time_column {
        let col = ColumnPath::from(tc.as_str());
        b = b
            .set_column_dictionary_enabled(col.clone(), false)
            .set_column_encoding(col, Encoding::DELTA_BINARY_PACKED);
    }
    // Line-protocol files are sorted by series then time: each series' values are a
    // run, so integers delta-encode to a few bits and floats compress best split
    // into byte streams. Tags keep dictionary encoding (long runs of one value).
    if table.dedups() {
        for c in &table.columns {
            let col = ColumnPath::from(c.name.as_str());
            let enc = match c.sql_type {
                SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => Encoding::DELTA_BINARY_PACKED,
                SqlType::Float4 | SqlType::Float8 => Encoding::BYTE_STREAM_SPLIT,
                _ => continue,
            };
            b = b
                .set_column_dictionary_enabled(col.clone(), false)
                .set_column_encoding(col, enc);
        }
    }
    b.build()
}

/// Stores `buf` at `path` through the object store, then makes it durable on the
/// local file system under `root`: the file and every directory from its own up to
/// `root` (new chunk directories included) are fsynced, so a manifest that names the
/// file, and a WAL trimmed after it, never outlive it in an OS crash.
pub async fn put_durable(
    store: &Arc<dyn ObjectStore>,
    root: &std::path::Path,
    path: &object_store::path::Path,
    buf: Vec<u8>,
) -> Result<()> {
    store.put(path, PutPayload::from(buf)).await?;
    let root = root.to_path_buf();
    let local = root.join(path.as_ref());
    tokio::task::spawn_blocking(move || -> Result<()> {
        std::fs::File::open(&local)
            .and_then(|f| f.sync_all())
            .map_err(|e| crate::Error::io(format!("cannot sync {}", local.display()), e))?;
        let mut dir = local.parent();
        while let Some(d) = dir {
            crate::catalog::sync_dir(d)?;
            if d == root.as_path() || !d.starts_with(&root) {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    })
    .await
    .map_err(|e| crate::Error::Internal(format!("file sync task failed: {e}")))?
}

/// Deletes chunk files under `data/` that the catalog does not name: files a crash
/// left behind (written but never committed, or replaced by compaction or
/// drop_chunks and not yet deleted). Runs at start-up, before anything writes. As a
/// guard against deleting live data, nothing is deleted when a file the catalog
/// names is missing from the listing, when the catalog names no file at all, or when
/// the listing fails. Returns how many files were deleted.
pub async fn sweep_orphans(
    store: &Arc<dyn ObjectStore>,
    referenced: &std::collections::HashSet<String>,
) -> Result<usize> {
    use futures::TryStreamExt;
    let listed: Vec<object_store::ObjectMeta> = match store
        .list(Some(&ObjectPath::from("data")))
        .try_collect()
        .await
    {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list chunk files; leaving unreferenced files in place");
            return Ok(0);
        }
    };
    let names: std::collections::HashSet<String> =
        listed.iter().map(|m| m.location.to_string()).collect();
    if let Some(missing) = referenced.iter().find(|p| !names.contains(*p)) {
        tracing::warn!(file = %missing,
            "a chunk file the catalog names is not on disk; leaving unreferenced files in place");
        return Ok(0);
    }
    // A catalog that names no file beside chunk files on disk is more likely a lost
    // or replaced manifest than a data directory whose every file is garbage.
    if referenced.is_empty() && names.iter().any(|n| n.ends_with(".parquet")) {
        tracing::warn!(
            "the catalog names no chunk file but data/ holds some; leaving them in place"
        );
        return Ok(0);
    }
    let mut deleted = 0;
    for m in listed {
        let p = m.location.to_string();
        if p.ends_with(".parquet") && !referenced.contains(&p) {
            store.delete(&m.location).await?;
            tracing::info!(file = %p, "deleted a chunk file the catalog does not name");
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// Deletes, under `dir` (the data directory's `data/`), the staging files of chunk
/// writes a crash interrupted: object_store writes `<name>#<n>` and renames it into
/// place when complete, and its listing never shows them, so `sweep_orphans` cannot.
/// Only at start-up, before any write. Returns how many were deleted.
pub fn sweep_staging(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut deleted = 0;
    for e in entries.flatten() {
        let path = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            deleted += sweep_staging(&path);
            continue;
        }
        let name = e.file_name();
        let name = name.to_string_lossy();
        let staged = name
            .rsplit_once('#')
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if staged {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(file = %path.display(), "deleted the staging file of an interrupted chunk write");
                    deleted += 1;
                }
                Err(err) => {
                    tracing::warn!(file = %path.display(), error = %err, "cannot delete a staging file")
                }
            }
        }
    }
    deleted
}

/// Writes one sorted chunk file, durably, and returns its catalog entry.
pub async fn write_chunk_file(
    store: &Arc<dyn ObjectStore>,
    root: &std::path::Path,
    db: &str,
    table: &TableDef,
    chunk_start: i64,
    file_id: u64,
    batch: &RecordBatch,
) -> Result<FileMeta> {
    // Line-protocol tables: by series then time, one row per point (last write wins);
    // long runs of one series compress far better than time order. The sorted rows
    // go to the writer a slice at a time, so the flush never holds a sorted copy of
    // the whole batch beside it.
    let order = match dedup::key_indices(table, &batch.schema()) {
        Some(keys) => Sorted::Dedup(
            dedup::DedupOrder::new(batch, &keys)?,
            keys,
            !table.merges_fields(),
        ),
        None => time_order(table, batch)?,
    };
    let rows = order.len();
    let mut buf = Vec::with_capacity(batch.get_array_memory_size() / 8 + 1024);
    let mut stats = StatsAccumulator::new(batch.schema())?;
    {
        let mut w = ArrowWriter::try_new(
            &mut buf,
            batch.schema(),
            Some(writer_props(table, FLUSH_ZSTD_LEVEL, rows as u64)),
        )?;
        for at in (0..rows).step_by(WRITE_SLICE_ROWS) {
            let slice = order.take(batch, at..(at + WRITE_SLICE_ROWS).min(rows))?;
            stats.update(&slice)?;
            w.write(&slice)?;
        }
        w.close()?;
    }
    let path = file_path(db, table.id, chunk_start, file_id);
    let bytes = buf.len() as u64;
    put_durable(store, root, &path, buf).await?;
    // Rows cut into chunks before a chunk-interval change can reach past the current
    // interval: record the wider end so drop_chunks never drops newer rows with them.
    let chunk_end = match (table.time_index(), table.chunk_interval_micros) {
        (Some(i), Some(iv)) if rows > 0 => {
            let micros = arrow::compute::cast(
                batch.column(i),
                &arrow::datatypes::DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Microsecond,
                    None,
                ),
            )?;
            let micros = arrow::compute::cast(&micros, &arrow::datatypes::DataType::Int64)?;
            let max = arrow::compute::max(micros.as_primitive::<arrow::datatypes::Int64Type>());
            max.filter(|m| *m >= chunk_start.saturating_add(iv))
                .map(|m| m.saturating_add(1))
        }
        _ => None,
    };
    Ok(FileMeta {
        chunk_end,
        id: file_id,
        chunk_start,
        path: path.to_string(),
        rows: rows as u64,
        bytes,
        raw_bytes: Some(stats.raw_bytes()),
        sorted_by: Some(sort_signature(table)),
        stats: stats.finish()?,
    })
}

/// Min, max and null count of every column, gathered batch by batch.
pub struct StatsAccumulator {
    schema: SchemaRef,
    cols: Vec<(Option<(MinAccumulator, MaxAccumulator)>, u64)>,
    /// Arrow bytes of the rows seen (their uncompressed size).
    raw_bytes: u64,
    /// Per column: the sum of a float8 column's values so far.
    sums: Vec<Option<f64>>,
}

impl StatsAccumulator {
    pub fn new(schema: SchemaRef) -> Result<StatsAccumulator> {
        let cols = schema
            .fields()
            .iter()
            .map(|f| {
                let acc = if stats_supported(f.data_type()) {
                    Some((
                        MinAccumulator::try_new(f.data_type())?,
                        MaxAccumulator::try_new(f.data_type())?,
                    ))
                } else {
                    None
                };
                Ok((acc, 0))
            })
            .collect::<Result<Vec<_>>>()?;
        let sums = vec![None; schema.fields().len()];
        Ok(StatsAccumulator {
            schema,
            cols,
            sums,
            raw_bytes: 0,
        })
    }

    /// Arrow bytes of the rows seen so far.
    pub fn raw_bytes(&self) -> u64 {
        self.raw_bytes
    }

    pub fn update(&mut self, batch: &RecordBatch) -> Result<()> {
        self.raw_bytes += batch
            .columns()
            .iter()
            .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
            .sum::<u64>();
        for (i, (acc, nulls)) in self.cols.iter_mut().enumerate() {
            let col = batch.column(i);
            *nulls += col.null_count() as u64;
            if let Some(v) = float_sum(col) {
                self.sums[i] = Some(self.sums[i].unwrap_or(0.0) + v);
            }
            if let Some((min, max)) = acc {
                min.update_batch(std::slice::from_ref(col))?;
                max.update_batch(std::slice::from_ref(col))?;
            }
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<Vec<ColumnStats>> {
        let mut out = vec![];
        let sums = std::mem::take(&mut self.sums);
        for ((f, (acc, nulls)), sum) in self
            .schema
            .fields()
            .iter()
            .zip(self.cols.iter_mut())
            .zip(sums)
        {
            let (min, max) = match acc {
                Some((lo, hi)) => (
                    scalar_text(lo.evaluate()?, f.data_type())?,
                    scalar_text(hi.evaluate()?, f.data_type())?,
                ),
                None => (None, None),
            };
            out.push(ColumnStats {
                column: f.name().clone(),
                min,
                max,
                null_count: Some(*nulls),
                sum: sum.map(|v| format!("{v:e}")),
            });
        }
        Ok(out)
    }
}

fn scalar_text(value: datafusion::common::ScalarValue, dt: &DataType) -> Result<Option<String>> {
    if value.is_null() {
        return Ok(None);
    }
    let arr = value.to_array()?;
    let s = cast(&arr, &DataType::Utf8)?;
    let s = s
        .as_any()
        .downcast_ref::<StringArray>()
        .map(|a| a.value(0).to_string());
    if matches!(dt, DataType::Float32 | DataType::Float64) {
        // NaN sorts above everything in Arrow but not in SQL comparisons: no stats then.
        return Ok(s.filter(|s| !s.eq_ignore_ascii_case("nan")));
    }
    Ok(s)
}

/// The sum of a float8 column's non-NULL values; `None` for other columns and when
/// every value is NULL.
fn float_sum(col: &ArrayRef) -> Option<f64> {
    let a = col.as_any().downcast_ref::<arrow::array::Float64Array>()?;
    arrow::compute::sum(a)
}

/// Whether min/max statistics are kept for columns of type `dt`.
pub fn stats_supported(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Boolean
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(_, _)
            | DataType::Decimal256(_, _)
            | DataType::Utf8
            | DataType::Date32
            | DataType::Timestamp(_, _)
    )
}

/// Turns stored min/max strings back into an array of the column's type.
pub fn stats_array(values: &[Option<&str>], dt: &DataType) -> Option<ArrayRef> {
    let strings: ArrayRef = Arc::new(StringArray::from(values.to_vec()));
    cast(&strings, dt).ok()
}

/// `c` as a column of type `dt`: Arrow's cast, except that floats become decimals
/// as PostgreSQL converts them (through their significant digits: a line-protocol
/// `0.1` into a `numeric` column is `0.1`).
pub fn cast_column(c: &ArrayRef, dt: &DataType) -> Result<ArrayRef> {
    if matches!(c.data_type(), DataType::Float32 | DataType::Float64)
        && matches!(dt, DataType::Decimal128(..) | DataType::Decimal256(..))
    {
        return crate::numeric_text::float_to_decimal(c, dt);
    }
    Ok(cast(c, dt)?)
}

/// Adapts a batch written under an older schema (fewer columns, other types) to
/// `schema`, matching columns by name and filling missing ones with NULLs.
pub fn adapt_batch(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let cols = schema
        .fields()
        .iter()
        .map(|f| match batch.schema().index_of(f.name()) {
            Ok(i) => {
                let c = batch.column(i);
                if c.data_type() == f.data_type() {
                    Ok(c.clone())
                } else {
                    cast_column(c, f.data_type())
                }
            }
            Err(_) => Ok(arrow::array::new_null_array(
                f.data_type(),
                batch.num_rows(),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &opts,
    )?)
}

/// Time range of a file from its statistics; unbounded when unknown.
pub fn file_time_range(table: &TableDef, f: &FileMeta) -> (i64, i64) {
    let unknown = (i64::MIN, i64::MAX);
    let Some(tc) = &table.time_column else {
        return unknown;
    };
    let Some(col) = table.column(tc) else {
        return unknown;
    };
    let Some(st) = f.stats.iter().find(|s| &s.column == tc) else {
        return unknown;
    };
    let vals = [st.min.as_deref(), st.max.as_deref()];
    let micros = stats_array(&vals, &col.sql_type.to_arrow()).and_then(|a| {
        arrow::compute::cast(
            &a,
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
        )
        .ok()
    });
    match micros {
        Some(a) => {
            use arrow::array::AsArray;
            let p = a.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
            let lo = if arrow::array::Array::is_valid(p, 0) {
                p.value(0)
            } else {
                i64::MIN
            };
            let hi = if arrow::array::Array::is_valid(p, 1) {
                p.value(1)
            } else {
                i64::MAX
            };
            (lo, hi)
        }
        None => unknown,
    }
}
