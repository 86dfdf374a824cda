//! Rewrites of chunk files, one routine for every kind: compaction merges a
//! chunk's sorted files into one (line-protocol tables lose duplicate points here
//! for good), DELETE writes a file again without the rows it removes. Both read the
//! old files, write one new file, allocate its id and upload it; the caller swaps
//! it into the catalog.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_expr::expressions::Column as PCol;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use futures::StreamExt;
use object_store::ObjectStore;
use parquet::arrow::ArrowWriter;

use super::{
    COMPACT_ZSTD_LEVEL, FLUSH_ZSTD_LEVEL, StatsAccumulator, dedup, file_path, writer_props,
};
use crate::catalog::{Catalog, FileMeta, TableDef};
use crate::error::Result;

/// How long replaced files stay on disk for queries that planned with them.
pub const DELETE_DELAY: Duration = Duration::from_secs(30);

/// What a rewrite does to the rows of its input files.
pub enum Rewrite<'a> {
    /// Merge the files (each sorted) into one sorted file; points written twice
    /// keep the last write (compaction).
    Merge,
    /// Keep the rows where the predicate is not true (DELETE).
    DeleteWhere(&'a Arc<dyn PhysicalExpr>),
    /// Merge the files into one sorted by the table's current sort order
    /// (`compress_chunk`: files written under other settings are put in order).
    Resort,
}

/// Where chunk files live and what reads them.
pub struct FileStore<'a> {
    pub store: &'a Arc<dyn ObjectStore>,
    pub url: &'a ObjectStoreUrl,
    pub runtime: &'a Arc<RuntimeEnv>,
    /// Allocates the new file's id.
    pub catalog: &'a Catalog,
}

/// The outcome of [`rewrite`].
pub struct Rewritten {
    /// The uploaded file; `None` when no row is left, or DELETE removed none.
    pub file: Option<FileMeta>,
    pub rows_kept: u64,
    pub rows_removed: u64,
}

/// Rewrites `files` (all of one chunk of `table` in database `db`) into one new
/// file as `how` says, uploads it and returns its catalog entry.
pub async fn rewrite(
    fs: &FileStore<'_>,
    db: &str,
    table: &TableDef,
    files: &[&FileMeta],
    how: Rewrite<'_>,
) -> Result<Rewritten> {
    let Some(first) = files.first() else {
        return Ok(Rewritten {
            file: None,
            rows_kept: 0,
            rows_removed: 0,
        });
    };
    let (chunk_start, chunk_end) = (first.chunk_start, first.chunk_end);
    let schema = table.schema();
    // A table that merges duplicates keeps its files in key order: sorting it
    // again is merging it.
    let how = match how {
        Rewrite::Resort if table.dedups() => Rewrite::Merge,
        other => other,
    };
    let merge = matches!(how, Rewrite::Merge | Rewrite::Resort);
    let resort = matches!(how, Rewrite::Resort);
    let keys: Vec<usize> = match dedup::key_indices(table, &schema) {
        Some(k) => k,
        None => table.time_index().into_iter().collect(),
    };
    let spec = super::sort_spec(table, &schema);
    let signature = super::sort_signature(table);
    // Files all in the table's current order merge into that order.
    let in_order = table.dedups()
        || files
            .iter()
            .all(|f| f.sorted_by.as_deref() == Some(signature.as_str()));
    let sorted_by = match &how {
        Rewrite::Resort => Some(signature.clone()),
        Rewrite::Merge if in_order => Some(signature.clone()),
        Rewrite::Merge => None,
        Rewrite::DeleteWhere(_) => first.sorted_by.clone(),
    };
    let ordering = if resort || (merge && in_order) {
        LexOrdering::new(spec.iter().map(|(i, o)| {
            PhysicalSortExpr::new(Arc::new(PCol::new(schema.field(*i).name(), *i)), *o)
        }))
    } else {
        LexOrdering::new(keys.iter().map(|i| {
            PhysicalSortExpr::new_default(Arc::new(PCol::new(schema.field(*i).name(), *i)))
        }))
    };
    let source = ParquetSource::new(schema.clone());
    let mut builder = FileScanConfigBuilder::new(fs.url.clone(), Arc::new(source));
    let part = |f: &FileMeta| PartitionedFile::new(f.path.clone(), f.bytes);
    let merge_sorted = !resort && ordering.is_some() && files.len() > 1;
    if merge_sorted {
        // One partition per file, oldest first: the merge breaks ties by partition,
        // so copies of a point come out in arrival order.
        for f in files {
            builder = builder.with_file_group(vec![part(f)].into());
        }
    } else {
        // One partition that reads every file in order: the plan runs partition 0.
        builder = builder.with_file_group(files.iter().map(|f| part(f)).collect::<Vec<_>>().into());
    }
    if let Some(o) = ordering.as_ref().filter(|_| !resort) {
        builder = builder.with_output_ordering(vec![o.clone()]);
    }
    let scan = DataSourceExec::from_data_source(builder.build());
    let plan: Arc<dyn ExecutionPlan> = match ordering {
        // A full sort, spilling within the runtime's memory budget.
        Some(o) if resort => Arc::new(datafusion::physical_plan::sorts::sort::SortExec::new(
            o, scan,
        )),
        Some(o) if merge_sorted => {
            Arc::new(SortPreservingMergeExec::new(o, scan).with_round_robin_repartition(false))
        }
        _ => scan,
    };
    let ctx = Arc::new(TaskContext::default().with_runtime(fs.runtime.clone()));
    let mut stream = plan.execute(0, ctx)?;

    let level = if merge {
        COMPACT_ZSTD_LEVEL
    } else {
        FLUSH_ZSTD_LEVEL
    };
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(
        &mut buf,
        schema.clone(),
        Some(writer_props(
            table,
            level,
            files.iter().map(|f| f.rows).sum(),
        )),
    )?;
    let mut stats = StatsAccumulator::new(schema.clone())?;
    let (mut kept, mut removed) = (0u64, 0u64);
    let mut emit = |out: &RecordBatch| -> Result<()> {
        if out.num_rows() > 0 {
            stats.update(out)?;
            kept += out.num_rows() as u64;
            writer.write(out)?;
        }
        Ok(())
    };
    let dedups = merge && table.dedups();
    // Rows of the last point seen, which the next batch may continue.
    let mut carry: Option<RecordBatch> = None;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        match &how {
            Rewrite::Merge if dedups => {
                let all = match carry.take() {
                    Some(c) => arrow::compute::concat_batches(&schema, [&c, &batch])?,
                    None => batch,
                };
                let merged = dedup::dedup_sort(&all, &keys, !table.merges_fields())?;
                let n = merged.num_rows();
                if n == 0 {
                    continue;
                }
                carry = Some(merged.slice(n - 1, 1));
                emit(&merged.slice(0, n - 1))?;
            }
            Rewrite::Merge | Rewrite::Resort => emit(&batch)?,
            Rewrite::DeleteWhere(pred) => {
                let n = batch.num_rows();
                let hit = pred.evaluate(&batch)?.into_array(n)?;
                let hit = hit.as_boolean();
                let keep: BooleanArray = (0..n)
                    .map(|i| Some(!(hit.is_valid(i) && hit.value(i))))
                    .collect();
                let out = arrow::compute::filter_record_batch(&batch, &keep)?;
                removed += (n - out.num_rows()) as u64;
                emit(&out)?;
            }
        }
    }
    if let Some(c) = carry {
        emit(&c)?;
    }
    writer.close()?;
    if kept == 0 || (!merge && removed == 0) {
        return Ok(Rewritten {
            file: None,
            rows_kept: kept,
            rows_removed: removed,
        });
    }
    let id = fs.catalog.alloc_ids(1)?;
    let path = file_path(db, table.id, chunk_start, id);
    let bytes = buf.len() as u64;
    super::put_durable(fs.store, fs.catalog.data_dir(), &path, buf).await?;
    Ok(Rewritten {
        file: Some(FileMeta {
            id,
            chunk_start,
            chunk_end,
            path: path.to_string(),
            rows: kept,
            bytes,
            raw_bytes: Some(stats.raw_bytes()),
            sorted_by,
            stats: stats.finish()?,
        }),
        rows_kept: kept,
        rows_removed: removed,
    })
}
