//! Unique keys: which rows of a write carry PRIMARY KEY or UNIQUE values that
//! stored rows (files and memtable) or an earlier row of the same write hold.
//! Writers of a keyed table take its key lock across the check and the write, so
//! two writes never both find one key free.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use super::Engine;
use crate::catalog::{KeyDef, TableDef};
use crate::error::{Error, Result};

/// What a key check found, per row of the write.
#[derive(Debug, Default)]
pub struct KeyCheck {
    /// The row's key is held by a stored row.
    pub existing: Vec<bool>,
    /// An earlier row of the same write has the row's key.
    pub repeated: Vec<bool>,
}

impl KeyCheck {
    /// The first row that conflicts, if any.
    pub fn first_conflict(&self) -> Option<usize> {
        (0..self.existing.len()).find(|i| self.existing[*i] || self.repeated[*i])
    }
}

/// The key columns of `batch` (by name) as `types`.
fn key_columns(batch: &RecordBatch, key: &KeyDef, types: &[DataType]) -> Result<Vec<ArrayRef>> {
    key.columns
        .iter()
        .zip(types)
        .map(|(c, t)| {
            let i = batch
                .schema()
                .index_of(c)
                .map_err(|_| Error::UndefinedColumn(c.clone()))?;
            let a = batch.column(i);
            Ok(if a.data_type() == t {
                a.clone()
            } else {
                arrow::compute::cast(a, t)?
            })
        })
        .collect()
}

fn key_rows(
    conv: &RowConverter,
    batch: &RecordBatch,
    key: &KeyDef,
    types: &[DataType],
) -> Result<Rows> {
    Ok(conv.convert_columns(&key_columns(batch, key, types)?)?)
}

/// Oldest and newest value of the time column `col` in `batch` (microseconds).
fn time_span(batch: &RecordBatch, col: &str) -> Result<Option<(i64, i64)>> {
    let Ok(i) = batch.schema().index_of(col) else {
        return Ok(None);
    };
    let micros = arrow::compute::cast(
        batch.column(i),
        &DataType::Timestamp(TimeUnit::Microsecond, None),
    )?;
    let p = micros.as_primitive::<TimestampMicrosecondType>();
    Ok(arrow::compute::min(p).zip(arrow::compute::max(p)))
}

impl Engine {
    /// The lock writers of keyed table `table_id` hold across check and write.
    pub async fn lock_keys(&self, table_id: u64) -> tokio::sync::OwnedMutexGuard<()> {
        let m = self
            .key_locks
            .lock()
            .entry(table_id)
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone();
        m.lock_owned().await
    }

    /// Which rows of `batch` (rows for `t`, its schema's columns) carry a value of
    /// `key` that stored rows hold or an earlier row of `batch` has. Rows with a
    /// NULL in the key conflict with nothing (PostgreSQL's rule). Only stored rows
    /// within the batch's time range are read: files by their time statistics,
    /// memtable batches by their time range.
    pub async fn find_keys(
        &self,
        t: &TableDef,
        key: &KeyDef,
        batch: &RecordBatch,
    ) -> Result<KeyCheck> {
        let n = batch.num_rows();
        let mut out = KeyCheck {
            existing: vec![false; n],
            repeated: vec![false; n],
        };
        if n == 0 {
            return Ok(out);
        }
        let types: Vec<DataType> = key
            .columns
            .iter()
            .map(|c| {
                t.column(c)
                    .map(|d| d.sql_type.to_arrow())
                    .ok_or_else(|| Error::UndefinedColumn(c.clone()))
            })
            .collect::<Result<_>>()?;
        let conv = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        let cols = key_columns(batch, key, &types)?;
        let rows = conv.convert_columns(&cols)?;
        let has_null = |i: usize| cols.iter().any(|c| c.is_null(i));
        let mut wanted: HashMap<&[u8], usize> = HashMap::with_capacity(n);
        for (i, r) in rows.iter().enumerate() {
            if has_null(i) {
                continue;
            }
            if wanted.contains_key(r.data()) {
                out.repeated[i] = true;
            } else {
                wanted.insert(r.data(), i);
            }
        }
        if wanted.is_empty() {
            return Ok(out);
        }
        let span = match t.time_column.as_ref().filter(|c| key.columns.contains(c)) {
            Some(tc) => time_span(batch, tc)?,
            None => None,
        };
        let (lo, hi) = span.unwrap_or((i64::MIN, i64::MAX));
        let Some(view) = self.view(t.id) else {
            return Err(Error::UndefinedTable(t.name.clone()));
        };
        let mut found: HashSet<usize> = HashSet::new();
        let mut look = |stored: &Rows| {
            for r in stored.iter() {
                if let Some(i) = wanted.get(r.as_ref()) {
                    found.insert(*i);
                }
            }
        };
        for (_, batches) in &view.mem {
            for mb in batches {
                if mb.max_time < lo || mb.min_time > hi {
                    continue;
                }
                look(&key_rows(&conv, &mb.batch, key, &types)?);
            }
        }
        let table = &view.table;
        let files: Vec<_> = table
            .files
            .iter()
            .filter(|f| {
                let (a, b) = crate::storage::file_time_range(table, f);
                b >= lo && a <= hi
            })
            .collect();
        if !files.is_empty() {
            let schema = table.schema();
            let projection: Vec<usize> = key
                .columns
                .iter()
                .map(|c| {
                    schema
                        .index_of(c)
                        .map_err(|_| Error::UndefinedColumn(c.clone()))
                })
                .collect::<Result<_>>()?;
            let mut stream = self.read_files(table, &files, Some(projection))?;
            while let Some(b) = stream.next().await {
                look(&key_rows(&conv, &b?, key, &types)?);
            }
        }
        for i in found {
            out.existing[i] = true;
        }
        Ok(out)
    }
}

impl Engine {
    /// The rows of `files` of `table` in order, one stream (`projection`: the
    /// columns to read, by position in the table's schema).
    pub(crate) fn read_files(
        &self,
        table: &TableDef,
        files: &[&crate::catalog::FileMeta],
        projection: Option<Vec<usize>>,
    ) -> Result<datafusion::execution::SendableRecordBatchStream> {
        let source = ParquetSource::new(table.schema()).with_bloom_filter_on_read(false);
        let builder = FileScanConfigBuilder::new(self.store_url().clone(), Arc::new(source))
            .with_projection_indices(projection)?
            .with_file_group(
                files
                    .iter()
                    .map(|f| PartitionedFile::new(f.path.clone(), f.bytes))
                    .collect::<Vec<_>>()
                    .into(),
            );
        let scan = DataSourceExec::from_data_source(builder.build());
        let ctx = Arc::new(TaskContext::default().with_runtime(self.runtime.clone()));
        Ok(scan.execute(0, ctx)?)
    }
}

/// PostgreSQL's `Key (a, b)=(x, y)` text of row `row` of `batch` for `key`.
pub fn key_text(batch: &RecordBatch, key: &KeyDef, row: usize) -> String {
    let names: Vec<String> = key.columns.iter().map(|c| quote_ident(c)).collect();
    let values: Vec<String> = key
        .columns
        .iter()
        .map(|c| match batch.schema().index_of(c) {
            Ok(i) => crate::write::checks::value_text(batch.column(i), row),
            Err(_) => String::new(),
        })
        .collect();
    format!("Key ({})=({})", names.join(", "), values.join(", "))
}

/// A column name as PostgreSQL prints it in messages (quoted when it must be).
fn quote_ident(name: &str) -> String {
    const RESERVED: &[&str] = &[
        "time",
        "timestamp",
        "user",
        "order",
        "group",
        "table",
        "select",
        "from",
        "where",
        "interval",
        "char",
        "character",
        "date",
        "default",
        "end",
        "limit",
        "offset",
        "to",
        "value",
        "values",
        "check",
        "column",
        "primary",
        "unique",
        "references",
        "all",
        "and",
        "or",
        "not",
        "null",
        "true",
        "false",
        "case",
        "when",
        "then",
        "else",
        "as",
    ];
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain && !RESERVED.contains(&name) {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}
