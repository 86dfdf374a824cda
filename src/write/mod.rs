//! The write path: validate a batch against its table, append it to the WAL
//! (acknowledged once durable), make it visible in the memtable, and flush
//! memtables to Parquet chunk files (the engine's flusher calls it when they pass
//! a size or age bound).

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{cast, take_record_batch};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use object_store::ObjectStore;
use parking_lot::{Mutex, RwLock};

use crate::catalog::{Catalog, FileEdit, FileMeta, TableDef};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::storage;
use crate::wal::{Replayed, Wal};

pub mod checks;

const KIND_WRITE: u8 = 1;
/// Rows for several tables written as one record: a committed transaction.
const KIND_TX: u8 = 2;

/// Rows of one chunk held in memory: a list of batches in arrival order.
type ChunkBatches = BTreeMap<i64, Vec<MemBatch>>;

/// One written batch in a memtable, with what scans need to know about it.
#[derive(Debug, Clone)]
pub struct MemBatch {
    pub batch: RecordBatch,
    /// Time range of the rows (microseconds); the whole range for tables without time.
    pub min_time: i64,
    pub max_time: i64,
    /// Whether two rows of the batch may be the same point (line-protocol tables).
    pub dups: bool,
}

impl MemBatch {
    fn new(table: &TableDef, batch: RecordBatch) -> Result<MemBatch> {
        let (min_time, max_time) = match time_values(table, &batch)? {
            Some(t) if !t.is_empty() => (
                t.iter().copied().min().unwrap_or(i64::MIN),
                t.iter().copied().max().unwrap_or(i64::MAX),
            ),
            _ => (i64::MIN, i64::MAX),
        };
        let dups = match storage::dedup::key_indices(table, &batch.schema()) {
            Some(keys) => storage::dedup::may_have_duplicates(&batch, &keys)?,
            None => false,
        };
        Ok(MemBatch {
            batch,
            min_time,
            max_time,
            dups,
        })
    }
}

#[derive(Default)]
struct MemState {
    active: HashMap<u64, ChunkBatches>,
    /// Being written to Parquet; still visible to queries until the catalog has the files.
    frozen: Option<Arc<HashMap<u64, ChunkBatches>>>,
    /// Bytes of `active`.
    bytes: usize,
    /// Bytes of `frozen`: still held until its files are in the catalog.
    frozen_bytes: usize,
    oldest: Option<Instant>,
}

/// Counters for benchmarks and `/metrics`.
#[derive(Debug, Default)]
pub struct WriteStats {
    pub rows_written: AtomicU64,
    pub flushes: AtomicU64,
    pub flushed_bytes: AtomicU64,
    pub flushed_files: AtomicU64,
    pub compactions: AtomicU64,
}

/// A consistent view of one table for a query: catalog files plus memtable rows.
pub struct TableView {
    pub table: Arc<TableDef>,
    /// `(chunk_start, batches)` not yet in Parquet, in arrival order.
    pub mem: Vec<(i64, Vec<MemBatch>)>,
}

/// Owns the memtables and the path from a write to a Parquet file.
pub struct WriteService {
    catalog: Arc<Catalog>,
    wal: Wal,
    store: Arc<dyn ObjectStore>,
    mem: RwLock<MemState>,
    /// Writers hold it shared across WAL append + memtable insert; a flush takes it
    /// exclusively to freeze memtables at a known WAL sequence number.
    gate: tokio::sync::RwLock<()>,
    /// Makes "catalog gains files" and "frozen memtable disappears" one step for readers.
    visibility: RwLock<()>,
    flush_lock: tokio::sync::Mutex<()>,
    flush_size: usize,
    flush_age: Duration,
    pub notify: tokio::sync::Notify,
    pub stats: WriteStats,
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for WriteService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteService").finish_non_exhaustive()
    }
}

impl WriteService {
    pub fn new(
        catalog: Arc<Catalog>,
        wal: Wal,
        store: Arc<dyn ObjectStore>,
        config: &Config,
    ) -> WriteService {
        WriteService {
            catalog,
            wal,
            store,
            mem: RwLock::new(MemState::default()),
            gate: tokio::sync::RwLock::new(()),
            visibility: RwLock::new(()),
            flush_lock: tokio::sync::Mutex::new(()),
            flush_size: config.flush_size as usize,
            flush_age: config.flush_age,
            notify: tokio::sync::Notify::new(),
            stats: WriteStats::default(),
            last_error: Mutex::new(None),
        }
    }

    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// Validates `batch` for `table`, makes it durable and visible; returns rows written.
    pub async fn write(&self, table: &TableDef, batch: RecordBatch) -> Result<u64> {
        if batch.num_rows() == 0 {
            return Ok(0);
        }
        let batch = validate(table, &batch)?;
        let parts = split_by_chunk(table, &batch)?
            .into_iter()
            .map(|(start, b)| Ok((start, MemBatch::new(table, b)?)))
            .collect::<Result<Vec<_>>>()?;
        let payload = encode_payload(table.id, &batch)?;
        self.wait_for_memtable_room().await;
        {
            let _g = self.gate.read().await;
            self.wal.append(&payload).await?;
            self.insert_mem(table.id, parts);
        }
        let rows = batch.num_rows() as u64;
        self.stats.rows_written.fetch_add(rows, Ordering::Relaxed);
        if self.mem.read().bytes >= self.flush_size {
            self.notify.notify_one();
        }
        Ok(rows)
    }

    /// Makes the rows of a committed transaction (batches already validated, for
    /// possibly several tables) durable as one WAL record and visible at once: after
    /// a crash either all of them come back or none. Returns rows written.
    pub async fn write_many(&self, writes: &[(Arc<TableDef>, RecordBatch)]) -> Result<u64> {
        let writes: Vec<&(Arc<TableDef>, RecordBatch)> =
            writes.iter().filter(|(_, b)| b.num_rows() > 0).collect();
        if writes.is_empty() {
            return Ok(0);
        }
        let mut parts = Vec::with_capacity(writes.len());
        let mut payload = vec![KIND_TX];
        payload.extend_from_slice(&(writes.len() as u32).to_le_bytes());
        let mut rows = 0u64;
        for (table, batch) in &writes {
            let batch = storage::adapt_batch(batch, &table.schema())?;
            rows += batch.num_rows() as u64;
            let one = encode_payload(table.id, &batch)?;
            payload.extend_from_slice(&(one.len() as u64).to_le_bytes());
            payload.extend_from_slice(&one);
            let p = split_by_chunk(table, &batch)?
                .into_iter()
                .map(|(start, b)| Ok((start, MemBatch::new(table, b)?)))
                .collect::<Result<Vec<_>>>()?;
            parts.push((table.id, p));
        }
        self.wait_for_memtable_room().await;
        {
            let _g = self.gate.read().await;
            self.wal.append(&payload).await?;
            let _v = self.visibility.write();
            for (id, p) in parts {
                self.insert_mem(id, p);
            }
        }
        self.stats.rows_written.fetch_add(rows, Ordering::Relaxed);
        if self.mem.read().bytes >= self.flush_size {
            self.notify.notify_one();
        }
        Ok(rows)
    }

    /// Replaces or removes files and adds new ones for several tables in one
    /// catalog step (a committed transaction that deletes rows).
    pub fn commit_files(&self, changes: &[crate::catalog::FilesChange]) -> Result<()> {
        let _v = self.visibility.write();
        self.catalog.commit_files(changes)
    }

    /// Back-pressure: while memtables, the one being flushed included, hold twice the
    /// flush size (their part of the memory budget), writers wait for the flush.
    async fn wait_for_memtable_room(&self) {
        let cap = self.flush_size.saturating_mul(2);
        loop {
            {
                let mem = self.mem.read();
                if mem.bytes + mem.frozen_bytes <= cap {
                    return;
                }
            }
            self.notify.notify_one();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn insert_mem(&self, table_id: u64, parts: Vec<(i64, MemBatch)>) {
        let mut mem = self.mem.write();
        let added: usize = parts
            .iter()
            .map(|(_, b)| b.batch.get_array_memory_size())
            .sum();
        let chunks = mem.active.entry(table_id).or_default();
        for (start, b) in parts {
            chunks.entry(start).or_default().push(b);
        }
        mem.bytes += added;
        mem.oldest.get_or_insert_with(Instant::now);
    }

    /// Re-applies WAL records read at start-up.
    pub fn replay(&self, records: Vec<Replayed>) -> Result<usize> {
        let manifest = self.catalog.snapshot();
        let mut n = 0;
        let decoded = records.iter().map(|r| {
            decode_record(&r.payload)
                .map_err(|e| Error::Wal(format!("record {} cannot be decoded: {e}", r.seq)))
        });
        for rec in decoded {
            for (table_id, batches) in rec? {
                n += self.replay_one(&manifest, table_id, batches)?;
            }
        }
        Ok(n)
    }

    fn replay_one(
        &self,
        manifest: &crate::catalog::Manifest,
        table_id: u64,
        batches: Vec<RecordBatch>,
    ) -> Result<usize> {
        let mut n = 0;
        {
            let Some((_, table)) = manifest.table_by_id(table_id) else {
                return Ok(0); // table dropped since
            };
            let schema = table.schema();
            for b in batches {
                let b = storage::adapt_batch(&b, &schema)?;
                n += b.num_rows();
                let parts = split_by_chunk(table, &b)?
                    .into_iter()
                    .map(|(start, b)| Ok((start, MemBatch::new(table, b)?)))
                    .collect::<Result<Vec<_>>>()?;
                self.insert_mem(table_id, parts);
            }
        }
        Ok(n)
    }

    /// A consistent snapshot of `table_id` for a scan.
    pub fn view(&self, table_id: u64) -> Option<TableView> {
        let _v = self.visibility.read();
        let manifest = self.catalog.snapshot();
        let (_, table) = manifest.table_by_id(table_id)?;
        let mem = self.mem.read();
        let mut chunks: BTreeMap<i64, Vec<MemBatch>> = BTreeMap::new();
        let sources = mem
            .frozen
            .iter()
            .filter_map(|f| f.get(&table_id))
            .chain(mem.active.get(&table_id));
        for src in sources {
            for (start, batches) in src {
                chunks
                    .entry(*start)
                    .or_default()
                    .extend(batches.iter().cloned());
            }
        }
        Some(TableView {
            table: table.clone(),
            mem: chunks.into_iter().collect(),
        })
    }

    /// Removes or replaces files of a table in one catalog step (compaction,
    /// DELETE, drop_chunks, TRUNCATE); the caller deletes the old objects once
    /// readers are done with them.
    /// `invalidated`: the time ranges whose rows changed (none for compaction).
    /// `dropped`: the time ranges whose chunks were dropped (drop_chunks).
    pub fn edit_files(
        &self,
        table_id: u64,
        edits: &[FileEdit],
        invalidated: &[crate::catalog::cagg::Range],
        dropped: &[crate::catalog::cagg::Range],
    ) -> Result<()> {
        let _v = self.visibility.write();
        self.catalog
            .edit_files(table_id, edits, invalidated, dropped)
    }

    /// Drops the memtable rows of a table (DROP TABLE).
    pub fn forget_table(&self, table_id: u64) {
        let mut mem = self.mem.write();
        mem.active.remove(&table_id);
    }

    /// Bytes held by memtables, the one being flushed included.
    pub fn memtable_bytes(&self) -> usize {
        let mem = self.mem.read();
        mem.bytes + mem.frozen_bytes
    }

    /// Whether a size or age bound says it is time to flush.
    pub fn should_flush(&self) -> bool {
        let mem = self.mem.read();
        mem.bytes >= self.flush_size
            || mem
                .oldest
                .map(|t| t.elapsed() >= self.flush_age)
                .unwrap_or(false)
    }

    /// Writes every memtable to Parquet, records the files in the catalog and trims
    /// the WAL. Returns the number of files written.
    pub async fn flush_all(&self) -> Result<usize> {
        let _one_at_a_time = self.flush_lock.lock().await;
        let (frozen, seq) = {
            let _g = self.gate.write().await;
            let mut mem = self.mem.write();
            if mem.active.is_empty() {
                return Ok(0);
            }
            let frozen = Arc::new(std::mem::take(&mut mem.active));
            mem.frozen = Some(frozen.clone());
            mem.frozen_bytes = mem.bytes;
            mem.bytes = 0;
            mem.oldest = None;
            (frozen, self.wal.last_seq())
        };
        let result = self.write_frozen(&frozen, seq).await;
        match &result {
            Ok(_) => {
                *self.last_error.lock() = None;
                self.wal.checkpoint(seq).await?;
            }
            Err(e) => {
                // Put the rows back so nothing is lost; the WAL still has them too.
                tracing::error!(error = %e, "flush failed; rows stay in memory and WAL");
                *self.last_error.lock() = Some(e.to_string());
                let mut mem = self.mem.write();
                let frozen = mem.frozen.take();
                mem.frozen_bytes = 0;
                if let Some(f) = frozen {
                    for (tid, chunks) in f.iter() {
                        let dst = mem.active.entry(*tid).or_default();
                        for (start, batches) in chunks {
                            let v = dst.entry(*start).or_default();
                            let mut merged = batches.clone();
                            merged.append(v);
                            *v = merged;
                        }
                    }
                }
                mem.bytes = mem
                    .active
                    .values()
                    .flat_map(|c| c.values())
                    .flatten()
                    .map(|b| b.batch.get_array_memory_size())
                    .sum();
                mem.oldest.get_or_insert_with(Instant::now);
            }
        }
        result
    }

    async fn write_frozen(&self, frozen: &HashMap<u64, ChunkBatches>, seq: u64) -> Result<usize> {
        let manifest = self.catalog.snapshot();
        let n_chunks: usize = frozen.values().map(|c| c.len()).sum();
        let first_id = self.catalog.alloc_ids(n_chunks as u64)?;
        let mut next_id = first_id;
        let mut new_files: Vec<(u64, FileMeta)> = vec![];
        for (table_id, chunks) in frozen {
            let Some((db, table)) = manifest.table_by_id(*table_id) else {
                continue;
            };
            let schema = table.schema();
            for (start, batches) in chunks {
                let adapted = batches
                    .iter()
                    .map(|b| storage::adapt_batch(&b.batch, &schema))
                    .collect::<Result<Vec<_>>>()?;
                let batch = arrow::compute::concat_batches(&schema, &adapted)?;
                let meta = storage::write_chunk_file(
                    &self.store,
                    self.catalog.data_dir(),
                    db,
                    table,
                    *start,
                    next_id,
                    &batch,
                )
                .await?;
                next_id += 1;
                self.stats
                    .flushed_bytes
                    .fetch_add(meta.bytes, Ordering::Relaxed);
                new_files.push((*table_id, meta));
            }
        }
        let count = new_files.len();
        // What the flushed rows cover leaves the WAL for the catalog in the same
        // step: continuous aggregates over these tables must see it changed.
        let mut invalidated = vec![];
        for (table_id, chunks) in frozen {
            let mut ranges = vec![];
            for b in chunks.values().flatten() {
                crate::catalog::cagg::add_range(&mut ranges, (b.min_time, b.max_time));
            }
            invalidated.extend(ranges.into_iter().map(|r| (*table_id, r)));
        }
        {
            let _v = self.visibility.write();
            self.catalog.add_files(new_files, seq, &invalidated)?;
            let mut mem = self.mem.write();
            mem.frozen = None;
            mem.frozen_bytes = 0;
        }
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .flushed_files
            .fetch_add(count as u64, Ordering::Relaxed);
        Ok(count)
    }
}

/// Casts `batch` to the table schema and checks NOT NULL and CHECK constraints.
pub fn validate(table: &TableDef, batch: &RecordBatch) -> Result<RecordBatch> {
    let batch = conform(table, batch)?;
    checks::enforce(table, &batch)?;
    Ok(batch)
}

/// Casts `batch` to the table schema and checks NOT NULL constraints (what
/// [`validate`] does before the CHECKs).
pub fn conform(table: &TableDef, batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = table.schema();
    let mut cols = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        let col = match batch.schema().index_of(f.name()) {
            Ok(j) => batch.column(j).clone(),
            Err(_) if batch.num_columns() == schema.fields().len() => batch.column(i).clone(),
            Err(_) => arrow::array::new_null_array(f.data_type(), batch.num_rows()),
        };
        let col = if col.data_type() != f.data_type() {
            storage::cast_column(&col, f.data_type())?
        } else {
            col
        };
        let col = if matches!(f.data_type(), DataType::Binary) {
            decode_bytea_hex(&col)?
        } else {
            col
        };
        let col = match table.columns.get(i).map(|c| &c.sql_type) {
            Some(crate::catalog::SqlType::Varchar(Some(n))) => limit_length(&col, *n as usize)?,
            Some(t) if t.json().is_some() => json_input(&col, t.json())?,
            _ => col,
        };
        let must = !f.is_nullable() || table.time_column.as_deref() == Some(f.name().as_str());
        if must && col.null_count() > 0 {
            return Err(Error::sql(
                "23502",
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    f.name(),
                    table.name
                ),
            ));
        }
        cols.push(col);
    }
    Ok(RecordBatch::try_new(schema, cols)?)
}

/// `json` and `jsonb` columns take text that parses as JSON (22P02 otherwise);
/// `jsonb` keeps it normalized, as PostgreSQL stores it.
fn json_input(
    col: &arrow::array::ArrayRef,
    kind: Option<crate::json::Kind>,
) -> Result<arrow::array::ArrayRef> {
    let (Some(arr), Some(kind)) = (col.as_string_opt::<i32>(), kind) else {
        return Ok(col.clone());
    };
    let out: arrow::array::StringArray = arr
        .iter()
        .map(|v| v.map(|v| kind.input(v)).transpose())
        .collect::<Result<_>>()?;
    Ok(Arc::new(out))
}

/// `character varying(n)`: longer values fail (22001) unless what is past `n`
/// characters is spaces, which are cut off (PostgreSQL's rule).
fn limit_length(col: &arrow::array::ArrayRef, n: usize) -> Result<arrow::array::ArrayRef> {
    let Some(arr) = col.as_string_opt::<i32>() else {
        return Ok(col.clone());
    };
    let long = |v: &str| v.len() > n && v.chars().count() > n;
    if !arr.iter().flatten().any(long) {
        return Ok(col.clone());
    }
    let mut out = arrow::array::StringBuilder::with_capacity(arr.len(), arr.value_data().len());
    for v in arr.iter() {
        match v {
            Some(v) if long(v) => {
                let cut = v.char_indices().nth(n).map_or(v.len(), |(i, _)| i);
                if !v[cut..].chars().all(|c| c == ' ') {
                    return Err(Error::sql(
                        "22001",
                        format!("value too long for type character varying({n})"),
                    ));
                }
                out.append_value(&v[..cut]);
            }
            other => out.append_option(other),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// PostgreSQL reads bytea text input `\\x0102ff` as hex: SQL literals reach us as the
/// bytes of that text, so values in that form are decoded here.
fn decode_bytea_hex(col: &arrow::array::ArrayRef) -> Result<arrow::array::ArrayRef> {
    let arr = col.as_binary::<i32>();
    let is_hex = |v: &[u8]| {
        v.len() >= 2
            && &v[..2] == b"\\x"
            && v[2..].len().is_multiple_of(2)
            && v[2..].iter().all(u8::is_ascii_hexdigit)
    };
    if !arr.iter().flatten().any(is_hex) {
        return Ok(col.clone());
    }
    let hex = |c: u8| match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    };
    let out: arrow::array::BinaryArray = arr
        .iter()
        .map(|v| {
            v.map(|v| {
                if is_hex(v) {
                    v[2..]
                        .chunks(2)
                        .map(|p| hex(p[0]) * 16 + hex(p[1]))
                        .collect::<Vec<u8>>()
                } else {
                    v.to_vec()
                }
            })
        })
        .collect();
    Ok(Arc::new(out))
}

/// Microsecond time values of the partitioning column.
fn time_values(table: &TableDef, batch: &RecordBatch) -> Result<Option<Vec<i64>>> {
    let Some(ti) = table.time_index() else {
        return Ok(None);
    };
    let col = batch.column(ti);
    let micros = cast(col, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    let arr = micros.as_primitive::<TimestampMicrosecondType>();
    Ok(Some(arr.values().to_vec()))
}

/// Splits a batch into one batch per chunk.
pub fn split_by_chunk(table: &TableDef, batch: &RecordBatch) -> Result<Vec<(i64, RecordBatch)>> {
    let Some(times) = time_values(table, batch)? else {
        return Ok(vec![(0, batch.clone())]);
    };
    if !table.is_hypertable() || times.is_empty() {
        return Ok(vec![(0, batch.clone())]);
    }
    let first = table.chunk_start(times[0]);
    if times.iter().all(|t| table.chunk_start(*t) == first) {
        return Ok(vec![(first, batch.clone())]);
    }
    let mut groups: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    for (i, t) in times.iter().enumerate() {
        groups
            .entry(table.chunk_start(*t))
            .or_default()
            .push(i as u32);
    }
    groups
        .into_iter()
        .map(|(start, idx)| {
            let idx = UInt32Array::from(idx);
            Ok((start, take_record_batch(batch, &idx)?))
        })
        .collect()
}

fn encode_payload(table_id: u64, batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(batch.get_array_memory_size() / 2 + 64);
    out.push(KIND_WRITE);
    out.extend_from_slice(&table_id.to_le_bytes());
    {
        let mut w = StreamWriter::try_new(&mut out, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(out)
}

/// The `(table id, batches)` of one WAL record: one table, or a transaction's several.
fn decode_record(p: &[u8]) -> Result<Vec<(u64, Vec<RecordBatch>)>> {
    if p.first() != Some(&KIND_TX) {
        return Ok(vec![decode_payload(p)?]);
    }
    let bad = || Error::Wal("truncated transaction record".into());
    let count = u32::from_le_bytes(p.get(1..5).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    let mut at = 5usize;
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = u64::from_le_bytes(
            p.get(at..at + 8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        ) as usize;
        at += 8;
        let one = p.get(at..at.saturating_add(len)).ok_or_else(bad)?;
        out.push(decode_payload(one)?);
        at += len;
    }
    Ok(out)
}

fn decode_payload(p: &[u8]) -> Result<(u64, Vec<RecordBatch>)> {
    if p.len() < 9 || p[0] != KIND_WRITE {
        return Err(Error::Wal("unknown record kind".into()));
    }
    let table_id = u64::from_le_bytes(p[1..9].try_into().unwrap_or([0; 8]));
    let reader = StreamReader::try_new(Cursor::new(&p[9..]), None)?;
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((table_id, batches))
}
