//! The compression API on Sundial's storage, where every chunk file is already
//! compressed, columnar Parquet: compressing a chunk merges its files into one,
//! sorted by the table's segmentby/orderby (or key), at the compaction's ZSTD
//! level; the policy job does that for chunks older than its threshold.

use super::Engine;
use crate::catalog::{CompressPolicy, FileMeta, TableDef};
use crate::error::{Error, Result};
use crate::storage::rewrite::{self, FileStore, Rewrite};

/// A chunk's compression state and sizes, as `chunk_compression_stats` shows them.
#[derive(Debug, Clone)]
pub struct ChunkCompression {
    pub chunk_start: i64,
    /// Compressed by `compress_chunk` or the policy (and not decompressed since):
    /// TimescaleDB's `is_compressed`, which stays true when rows arrive later.
    pub compressed: bool,
    /// Compressed, and rows arrived since (TimescaleDB's partial chunk): compressing
    /// it again merges them in.
    pub partial: bool,
    /// Arrow size of the chunk's stored rows (uncompressed).
    pub raw_bytes: u64,
    /// Bytes of its files on disk.
    pub disk_bytes: u64,
}

/// Arrow size of a file's rows: recorded when written, else estimated from its
/// bytes on disk (files written before the size was kept).
fn raw_bytes(f: &FileMeta) -> u64 {
    f.raw_bytes.unwrap_or(f.bytes)
}

impl Engine {
    /// Per chunk of `t` (by start): whether it is compressed and its sizes.
    pub fn chunk_compression(&self, t: &TableDef) -> Vec<ChunkCompression> {
        let view = self.view(t.id);
        let table = view.as_ref().map_or(t, |v| &v.table);
        let in_memory: Vec<i64> = view
            .as_ref()
            .map(|v| {
                v.mem
                    .iter()
                    .filter(|(_, b)| b.iter().any(|b| b.batch.num_rows() > 0))
                    .map(|(s, _)| *s)
                    .collect()
            })
            .unwrap_or_default();
        let compressed = table
            .compression
            .as_ref()
            .filter(|c| c.enabled)
            .map(|c| c.compressed_chunks.clone())
            .unwrap_or_default();
        let signature = crate::storage::sort_signature(table);
        self.chunk_starts(table)
            .into_iter()
            .map(|start| {
                let files: Vec<&FileMeta> = table
                    .files
                    .iter()
                    .filter(|f| f.chunk_start == start)
                    .collect();
                let flagged = compressed.contains(&start);
                // Rows since compression: in memory, or in more than the one sorted file.
                let merged = files.len() <= 1
                    && files
                        .iter()
                        .all(|f| f.sorted_by.as_deref() == Some(signature.as_str()));
                ChunkCompression {
                    chunk_start: start,
                    compressed: flagged,
                    partial: flagged && (in_memory.contains(&start) || !merged),
                    raw_bytes: files.iter().map(|f| raw_bytes(f)).sum(),
                    disk_bytes: files.iter().map(|f| f.bytes).sum(),
                }
            })
            .collect()
    }

    /// `compress_chunk`: the chunk's rows (memtable flushed first) end in one file
    /// sorted by the table's current order. Returns false when the chunk changed
    /// meanwhile (the caller may try again).
    pub async fn compress_chunk(&self, db: &str, table_id: u64, chunk_start: i64) -> Result<bool> {
        self.flush().await?;
        let _one = self.compact_lock.lock().await;
        let m = self.catalog.snapshot();
        let Some((_, t)) = m.table_by_id(table_id) else {
            return Err(Error::UndefinedTable(format!("table id {table_id}")));
        };
        let files: Vec<&FileMeta> = t
            .files
            .iter()
            .filter(|f| f.chunk_start == chunk_start)
            .collect();
        if files.is_empty() {
            self.catalog
                .set_chunk_compressed(table_id, chunk_start, true)?;
            return Ok(true);
        }
        // One group per chunk interval the files were cut with (they stay apart).
        let mut ends: Vec<Option<i64>> = files.iter().map(|f| f.chunk_end).collect();
        ends.sort_unstable();
        ends.dedup();
        for end in ends {
            let group: Vec<&FileMeta> = files
                .iter()
                .copied()
                .filter(|f| f.chunk_end == end)
                .collect();
            let fs = FileStore {
                runtime: &self.compaction_runtime,
                ..self.file_store()
            };
            let out = rewrite::rewrite(&fs, db, t, &group, Rewrite::Resort).await?;
            let mut edits: Vec<crate::catalog::FileEdit> =
                group.iter().map(|f| (f.id, None)).collect();
            let new_path = out.file.as_ref().map(|f| f.path.clone());
            if let Some(first) = edits.first_mut() {
                first.1 = out.file;
            }
            match self.writer.edit_files(t.id, &edits, &[], &[]) {
                Ok(()) => {
                    self.delete_later(group.iter().map(|f| f.path.clone()).collect());
                }
                Err(e) => {
                    if let Some(p) = new_path {
                        self.delete_later(vec![p]);
                    }
                    return match e {
                        Error::Catalog(_) => Ok(false),
                        other => Err(other),
                    };
                }
            }
        }
        self.catalog
            .set_chunk_compressed(table_id, chunk_start, true)?;
        tracing::info!(table = %t.name, chunk = chunk_start, files = files.len(), "compressed chunk");
        Ok(true)
    }

    /// The compression policy of `t`: every chunk whose end is older than the
    /// threshold and not yet compressed (or partial) is compressed. Records the run's end in
    /// [`Engine::jobs`].
    pub async fn run_compression(&self, db: &str, t: &TableDef, p: &CompressPolicy) -> Result<()> {
        let now = chrono::Utc::now().timestamp_micros();
        let after = p.after_micros.or(p.created_before_micros).unwrap_or(0);
        let older = now.saturating_sub(after);
        let mut done = 0;
        let result = async {
            for c in self.chunk_compression(t) {
                if (c.compressed && !c.partial) || t.chunk_end(c.chunk_start) > older {
                    continue;
                }
                self.compress_chunk(db, t.id, c.chunk_start).await?;
                done += 1;
            }
            Ok::<(), Error>(())
        }
        .await;
        self.jobs.finished(p.job_id, result.is_ok(), done);
        result
    }
}
