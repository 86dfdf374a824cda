//! Compaction: merges the Parquet files of one chunk into one large file, streaming
//! (each file is already sorted, so a k-way merge needs one batch per file in
//! memory). Line-protocol tables lose their duplicate points here for good.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column as PCol;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;

use super::{StatsAccumulator, dedup, file_path, writer_props};
use crate::catalog::{FileMeta, TableDef};
use crate::engine::Engine;
use crate::error::Result;

/// How long replaced files stay on disk for queries that planned with them.
const DELETE_DELAY: Duration = Duration::from_secs(30);

/// Compacts every chunk with more than one file; with `only_cold`, only chunks
/// that have no rows in memory (nothing written since the last flush). Returns the
/// number of chunks compacted.
pub async fn compact_all(engine: &Engine, only_cold: bool) -> Result<usize> {
    let _one = engine.compact_lock.lock().await;
    let manifest = engine.catalog.snapshot();
    let mut done = 0;
    for (db, d) in &manifest.databases {
        for t in d.tables.values() {
            // Files cut with different chunk intervals stay apart.
            let mut starts: Vec<(i64, Option<i64>)> = t
                .files
                .iter()
                .map(|f| (f.chunk_start, f.chunk_end))
                .collect();
            starts.sort_unstable();
            starts.dedup();
            let hot: Vec<i64> = match engine.writer.view(t.id) {
                Some(v) => v.mem.iter().map(|(s, _)| *s).collect(),
                None => continue,
            };
            for (start, end) in starts {
                let n = t
                    .files
                    .iter()
                    .filter(|f| f.chunk_start == start && f.chunk_end == end)
                    .count();
                if n < 2 || (only_cold && hot.contains(&start)) {
                    continue;
                }
                if engine.shutdown.is_cancelled() {
                    return Ok(done);
                }
                compact_chunk(engine, db, t, start, end).await?;
                done += 1;
            }
        }
    }
    Ok(done)
}

/// Merges the files of chunk `start` of `table` into one.
async fn compact_chunk(
    engine: &Engine,
    db: &str,
    table: &TableDef,
    start: i64,
    end: Option<i64>,
) -> Result<()> {
    let files: Vec<&FileMeta> = table
        .files
        .iter()
        .filter(|f| f.chunk_start == start && f.chunk_end == end)
        .collect();
    let schema = table.schema();
    let keys: Vec<usize> = match dedup::key_indices(table, &schema) {
        Some(k) => k,
        None => table.time_index().into_iter().collect(),
    };
    let ordering =
        LexOrdering::new(keys.iter().map(|i| {
            PhysicalSortExpr::new_default(Arc::new(PCol::new(schema.field(*i).name(), *i)))
        }));
    // One partition per file, oldest first: the merge breaks ties by partition, so
    // copies of a point come out in arrival order.
    let source = ParquetSource::new(schema.clone());
    let mut builder = FileScanConfigBuilder::new(engine.store_url.clone(), Arc::new(source));
    for f in &files {
        builder =
            builder.with_file_group(vec![PartitionedFile::new(f.path.clone(), f.bytes)].into());
    }
    if let Some(o) = &ordering {
        builder = builder.with_output_ordering(vec![o.clone()]);
    }
    let scan = DataSourceExec::from_data_source(builder.build());
    let plan: Arc<dyn ExecutionPlan> = match ordering {
        Some(o) => {
            Arc::new(SortPreservingMergeExec::new(o, scan).with_round_robin_repartition(false))
        }
        None => scan,
    };
    let ctx = Arc::new(TaskContext::default().with_runtime(engine.runtime.clone()));
    let mut stream = plan.execute(0, ctx)?;

    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(
        &mut buf,
        schema.clone(),
        Some(writer_props(
            table,
            super::COMPACT_ZSTD_LEVEL,
            files.iter().map(|f| f.rows).sum(),
        )),
    )?;
    let mut stats = StatsAccumulator::new(schema.clone())?;
    let mut rows = 0u64;
    let dedups = table.dedups();
    // Rows of the last point seen, which the next batch may continue.
    let mut carry: Option<arrow::array::RecordBatch> = None;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let out = if dedups {
            let all = match carry.take() {
                Some(c) => arrow::compute::concat_batches(&schema, [&c, &batch])?,
                None => batch,
            };
            let merged = dedup::dedup_sort(&all, &keys)?;
            let n = merged.num_rows();
            if n == 0 {
                continue;
            }
            carry = Some(merged.slice(n - 1, 1));
            merged.slice(0, n - 1)
        } else {
            batch
        };
        if out.num_rows() > 0 {
            stats.update(&out)?;
            rows += out.num_rows() as u64;
            writer.write(&out)?;
        }
    }
    if let Some(c) = carry {
        stats.update(&c)?;
        rows += c.num_rows() as u64;
        writer.write(&c)?;
    }
    writer.close()?;

    let id = engine.catalog.update(|m| Ok(m.alloc_id()))?;
    let path = file_path(db, table.id, start, id);
    let bytes = buf.len() as u64;
    engine.store.put(&path, PutPayload::from(buf)).await?;
    let meta = FileMeta {
        id,
        chunk_start: start,
        chunk_end: end,
        path: path.to_string(),
        rows,
        bytes,
        stats: stats.finish()?,
    };
    let old: Vec<u64> = files.iter().map(|f| f.id).collect();
    let swapped = engine.writer.replace_files(table.id, &old, meta);
    match swapped {
        Ok(()) => {
            engine
                .writer
                .stats
                .compactions
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                table = %table.name,
                chunk = start,
                files = old.len(),
                rows,
                bytes,
                "compacted chunk"
            );
            delete_later(
                engine.store.clone(),
                files.iter().map(|f| f.path.clone()).collect(),
            );
            Ok(())
        }
        Err(e) => {
            let _ = engine.store.delete(&path).await;
            Err(e)
        }
    }
}

/// Deletes replaced or dropped files once queries that planned with them are done.
pub fn delete_later(store: Arc<dyn object_store::ObjectStore>, paths: Vec<String>) {
    tokio::spawn(async move {
        tokio::time::sleep(DELETE_DELAY).await;
        for p in paths {
            if let Err(e) = store
                .delete(&object_store::path::Path::from(p.as_str()))
                .await
            {
                tracing::warn!(path = %p, error = %e, "could not delete chunk file");
            }
        }
    });
}

/// Runs compaction of cold chunks in the background until shutdown.
pub async fn run_compactor(engine: Arc<Engine>) {
    loop {
        tokio::select! {
            _ = engine.shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {},
        }
        if let Err(e) = compact_all(&engine, true).await {
            tracing::error!(error = %e, "background compaction failed");
        }
    }
}
