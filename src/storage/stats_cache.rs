//! The min/max/null-count arrays that chunk pruning reads, built from the catalog's
//! file statistics (kept as text). Turning them into arrays costs time in proportion
//! to the number of files, so for a table's files they are cached per table version
//! (one `Arc<TableDef>` of the catalog), column by column on demand.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, Weak};

use arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use arrow::datatypes::SchemaRef;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::{Column, ScalarValue};
use parking_lot::Mutex;

use crate::catalog::{FileMeta, TableDef};
use crate::storage;

/// The min (or max) of column `i` of `schema` in each of `files`.
fn bounds<'a>(
    files: impl Iterator<Item = &'a FileMeta>,
    schema: &SchemaRef,
    i: usize,
    max: bool,
) -> Option<ArrayRef> {
    let field = schema.field(i);
    let values: Vec<Option<&str>> = files
        .map(|f| {
            let st = f.stats.iter().find(|s| &s.column == field.name())?;
            if max {
                st.max.as_deref()
            } else {
                st.min.as_deref()
            }
        })
        .collect();
    storage::stats_array(&values, field.data_type())
}

/// The NULL count of column `i` of `schema` in each of `files`; a column added after
/// a file was written is all NULL in it.
fn null_counts<'a>(
    files: impl Iterator<Item = &'a FileMeta>,
    schema: &SchemaRef,
    i: usize,
) -> ArrayRef {
    let name = schema.field(i).name();
    Arc::new(UInt64Array::from_iter(files.map(
        |f| match f.stats.iter().find(|s| &s.column == name) {
            Some(st) => st.null_count,
            None => Some(f.rows),
        },
    )))
}

/// [`PruningStatistics`] of any list of files (or memtable chunks described as
/// files), built when asked and not kept.
pub struct FileStats<'a> {
    schema: SchemaRef,
    files: Vec<&'a FileMeta>,
}

impl<'a> FileStats<'a> {
    pub fn new(schema: &SchemaRef, files: impl IntoIterator<Item = &'a FileMeta>) -> Self {
        FileStats {
            schema: schema.clone(),
            files: files.into_iter().collect(),
        }
    }
}

impl PruningStatistics for FileStats<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        let i = self.schema.index_of(&column.name).ok()?;
        bounds(self.files.iter().copied(), &self.schema, i, false)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        let i = self.schema.index_of(&column.name).ok()?;
        bounds(self.files.iter().copied(), &self.schema, i, true)
    }

    fn num_containers(&self) -> usize {
        self.files.len()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let i = self.schema.index_of(&column.name).ok()?;
        Some(null_counts(self.files.iter().copied(), &self.schema, i))
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(Arc::new(UInt64Array::from_iter_values(
            self.files.iter().map(|f| f.rows),
        )))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

/// Statistics arrays of every file of one table version, in the table's file order.
#[derive(Debug)]
struct Arrays {
    table: Weak<TableDef>,
    schema: SchemaRef,
    mins: Vec<OnceLock<Option<ArrayRef>>>,
    maxs: Vec<OnceLock<Option<ArrayRef>>>,
    nulls: Vec<OnceLock<ArrayRef>>,
    rows: ArrayRef,
}

/// The cache, one entry per table id (the latest version asked for).
#[derive(Debug, Default)]
pub struct StatsCache {
    tables: Mutex<HashMap<u64, Arc<Arrays>>>,
}

impl StatsCache {
    /// Pruning statistics over all files of `table` (a catalog snapshot's table).
    pub fn for_table(&self, table: &Arc<TableDef>) -> TableStats {
        let mut tables = self.tables.lock();
        // Entries of dropped tables go when the cache is next consulted.
        tables.retain(|_, a| a.table.strong_count() > 0);
        let arrays = match tables.get(&table.id) {
            Some(a) if std::ptr::eq(a.table.as_ptr(), Arc::as_ptr(table)) => a.clone(),
            _ => {
                let schema = table.schema();
                let n = schema.fields().len();
                let a = Arc::new(Arrays {
                    table: Arc::downgrade(table),
                    schema,
                    mins: (0..n).map(|_| OnceLock::new()).collect(),
                    maxs: (0..n).map(|_| OnceLock::new()).collect(),
                    nulls: (0..n).map(|_| OnceLock::new()).collect(),
                    rows: Arc::new(UInt64Array::from_iter_values(
                        table.files.iter().map(|f| f.rows),
                    )),
                });
                tables.insert(table.id, a.clone());
                a
            }
        };
        TableStats {
            arrays,
            table: table.clone(),
        }
    }
}

/// [`PruningStatistics`] of one table version's files, built from the cache.
pub struct TableStats {
    arrays: Arc<Arrays>,
    table: Arc<TableDef>,
}

impl TableStats {
    fn col(&self, column: &Column) -> Option<usize> {
        self.arrays.schema.index_of(&column.name).ok()
    }

    fn bound(&self, column: &Column, max: bool) -> Option<ArrayRef> {
        let i = self.col(column)?;
        let cell = if max {
            &self.arrays.maxs[i]
        } else {
            &self.arrays.mins[i]
        };
        cell.get_or_init(|| bounds(self.table.files.iter(), &self.arrays.schema, i, max))
            .clone()
    }
}

impl PruningStatistics for TableStats {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.bound(column, false)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.bound(column, true)
    }

    fn num_containers(&self) -> usize {
        self.table.files.len()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let i = self.col(column)?;
        Some(
            self.arrays.nulls[i]
                .get_or_init(|| null_counts(self.table.files.iter(), &self.arrays.schema, i))
                .clone(),
        )
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        Some(self.arrays.rows.clone())
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ColumnDef, ColumnStats, FileMeta, SqlType};
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    fn file(id: u64, min: i64, max: i64) -> FileMeta {
        FileMeta {
            id,
            chunk_start: 0,
            chunk_end: None,
            path: format!("f{id}"),
            rows: 10,
            bytes: 100,
            raw_bytes: None,
            sorted_by: None,
            stats: vec![ColumnStats {
                column: "n".into(),
                min: Some(min.to_string()),
                max: Some(max.to_string()),
                null_count: Some(1),
                sum: None,
            }],
        }
    }

    fn table(files: Vec<FileMeta>, columns: &[&str]) -> Arc<TableDef> {
        Arc::new(TableDef {
            id: 7,
            name: "t".into(),
            columns: columns
                .iter()
                .map(|c| ColumnDef {
                    name: c.to_string(),
                    sql_type: SqlType::Int8,
                    nullable: true,
                    default: None,
                    identity: None,
                })
                .collect(),
            time_column: None,
            chunk_interval_micros: None,
            files,
            series_key: vec![],
            line_protocol: false,
            retention: None,
            lp_columns: false,
            cagg: None,
            invalidations: vec![],
            dropped: vec![],
            keys: vec![],
            checks: vec![],
            foreign_keys: vec![],
            compression: None,
        })
    }

    fn ints(a: Option<ArrayRef>) -> Vec<Option<i64>> {
        a.expect("array")
            .as_primitive::<Int64Type>()
            .iter()
            .collect()
    }

    #[test]
    fn arrays_follow_the_table_version() {
        let cache = StatsCache::default();
        let v1 = table(vec![file(1, 5, 9), file(2, 20, 30)], &["n"]);
        let s = cache.for_table(&v1);
        assert_eq!(
            ints(s.min_values(&Column::from_name("n"))),
            [Some(5), Some(20)]
        );
        assert_eq!(
            ints(s.max_values(&Column::from_name("n"))),
            [Some(9), Some(30)]
        );
        assert_eq!(s.num_containers(), 2);

        // A new version of the table (another file, another column) gets new arrays;
        // the added column has no statistics in the files, so every row is NULL.
        let v2 = table(
            vec![file(1, 5, 9), file(2, 20, 30), file(3, -4, 0)],
            &["n", "m"],
        );
        let s = cache.for_table(&v2);
        assert_eq!(
            ints(s.min_values(&Column::from_name("n"))),
            [Some(5), Some(20), Some(-4)]
        );
        assert!(s.min_values(&Column::from_name("m")).expect("m").is_null(0));
        let nulls = s.null_counts(&Column::from_name("m")).expect("nulls");
        assert_eq!(
            nulls
                .as_primitive::<arrow::datatypes::UInt64Type>()
                .values(),
            &[10, 10, 10]
        );
        assert_eq!(
            s.null_counts(&Column::from_name("n"))
                .expect("nulls")
                .as_primitive::<arrow::datatypes::UInt64Type>()
                .values(),
            &[1, 1, 1]
        );
    }

    #[test]
    fn entries_of_dropped_tables_are_removed() {
        let cache = StatsCache::default();
        let v1 = table(vec![file(1, 5, 9)], &["n"]);
        let _ = cache.for_table(&v1);
        drop(v1);
        let other = Arc::new(TableDef {
            id: 8,
            ..(*table(vec![], &["n"])).clone()
        });
        let _ = cache.for_table(&other);
        assert_eq!(cache.tables.lock().len(), 1);
    }
}
