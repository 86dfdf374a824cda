//! `create_hypertable(…, migrate_data => true)`: a plain table's rows move into
//! time chunks. The rows are read from its files, cut by chunk and written as new
//! chunk files; the table becomes a hypertable and swaps its files in one catalog
//! step, so a crash leaves the plain table or the hypertable, never half of each.

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use futures::StreamExt;

use super::Engine;
use crate::catalog::{FileMeta, TableDef};
use crate::error::{Error, Result};

impl Engine {
    /// Makes plain table `table` a hypertable on `column` with chunks of
    /// `interval_micros`, moving its rows into chunks. The whole table is read
    /// into memory once. Returns the table id.
    pub async fn migrate_to_hypertable(
        &self,
        db: &str,
        table: &str,
        column: &str,
        interval_micros: i64,
    ) -> Result<u64> {
        self.flush().await?;
        let t = self.catalog.snapshot().table(db, table)?.clone();
        if t.is_hypertable() {
            return Err(Error::sql(
                "TS110",
                format!("table \"{table}\" is already a hypertable"),
            ));
        }
        // The hypertable the rows go to.
        let mut hyper: TableDef = (*t).clone();
        let col = hyper
            .columns
            .iter_mut()
            .find(|c| c.name == column)
            .ok_or_else(|| Error::UndefinedColumn(column.to_string()))?;
        crate::catalog::check_time_column(col)?;
        col.nullable = false;
        crate::catalog::check_keys_partitioned(&hyper.keys, column)?;
        hyper.time_column = Some(column.to_string());
        hyper.chunk_interval_micros = Some(interval_micros);
        hyper.files = vec![];
        let schema = t.schema();
        let mut by_chunk: BTreeMap<i64, Vec<RecordBatch>> = BTreeMap::new();
        if !t.files.is_empty() {
            let files: Vec<&FileMeta> = t.files.iter().collect();
            let mut stream = self.read_files(&t, &files, None)?;
            while let Some(b) = stream.next().await {
                let b = crate::write::validate(&hyper, &b?)?;
                for (start, part) in crate::write::split_by_chunk(&hyper, &b)? {
                    by_chunk.entry(start).or_default().push(part);
                }
            }
        }
        let mut written: Vec<FileMeta> = vec![];
        let result = async {
            for (start, parts) in &by_chunk {
                let batch = arrow::compute::concat_batches(&schema, parts)?;
                let id = self.catalog.alloc_ids(1)?;
                let meta = crate::storage::write_chunk_file(
                    &self.store,
                    self.catalog.data_dir(),
                    db,
                    &hyper,
                    *start,
                    id,
                    &batch,
                )
                .await?;
                written.push(meta);
            }
            let old: Vec<u64> = t.files.iter().map(|f| f.id).collect();
            let in_memory = self.view(t.id).is_some_and(|v| !v.mem.is_empty());
            if in_memory {
                return Err(Error::Changed(format!(
                    "rows were written to \"{table}\" while it was migrated"
                )));
            }
            self.catalog.migrate_hypertable(
                db,
                table,
                column,
                interval_micros,
                &old,
                written.clone(),
            )
        }
        .await;
        match result {
            Ok(id) => {
                self.delete_later(t.files.iter().map(|f| f.path.clone()).collect());
                tracing::info!(table, chunks = by_chunk.len(), "migrated rows into chunks");
                Ok(id)
            }
            Err(e) => {
                self.delete_later(written.iter().map(|f| f.path.clone()).collect());
                Err(e)
            }
        }
    }
}
