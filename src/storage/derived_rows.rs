//! Rows derived from one chunk file, kept by the file's path: the newest rows of
//! each series, which latest-value queries read instead of the whole file. Chunk
//! files never change (a rewrite writes a new path), so an entry stays right for as
//! long as its file exists; the cache is bounded by the memory its rows take.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use parking_lot::Mutex;

/// The most memory the kept rows may take, whatever the budget.
const MAX_BYTES: usize = 256 * 1024 * 1024;

/// Derived rows per (file path, what was derived).
#[derive(Debug)]
pub struct DerivedRows {
    inner: Mutex<Inner>,
    /// Memory the kept rows may take; past it the cache starts over.
    limit: usize,
}

impl Default for DerivedRows {
    fn default() -> Self {
        DerivedRows::with_limit(MAX_BYTES)
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<(String, String), RecordBatch>,
    bytes: usize,
}

impl DerivedRows {
    /// A cache whose rows take at most `limit` bytes (and never over 256 MiB).
    pub fn with_limit(limit: usize) -> DerivedRows {
        DerivedRows {
            inner: Mutex::default(),
            limit: limit.min(MAX_BYTES),
        }
    }

    /// The cache's part of the queries' memory: an eighth, at most 256 MiB.
    pub fn share_of(query_memory: u64) -> u64 {
        (query_memory / 8).min(MAX_BYTES as u64)
    }

    /// The rows kept for `path` under `what`, if any.
    pub fn get(&self, path: &str, what: &str) -> Option<RecordBatch> {
        self.inner
            .lock()
            .entries
            .get(&(path.to_string(), what.to_string()))
            .cloned()
    }

    /// Whether rows are kept for `path` under `what`.
    pub fn contains(&self, path: &str, what: &str) -> bool {
        self.inner
            .lock()
            .entries
            .contains_key(&(path.to_string(), what.to_string()))
    }

    /// Keeps `rows` for `path` under `what`.
    pub fn insert(&self, path: &str, what: &str, rows: RecordBatch) {
        let size = rows.get_array_memory_size();
        let mut g = self.inner.lock();
        if g.bytes + size > self.limit {
            g.entries.clear();
            g.bytes = 0;
        }
        g.bytes += size;
        if let Some(old) = g.entries.insert((path.to_string(), what.to_string()), rows) {
            g.bytes = g.bytes.saturating_sub(old.get_array_memory_size());
        }
    }

    /// Number of entries (for tests and EXPLAIN).
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;

    use super::*;

    #[test]
    fn keeps_rows_by_path_and_kind() {
        let c = DerivedRows::default();
        let b = RecordBatch::try_from_iter([(
            "v",
            Arc::new(Int64Array::from(vec![1, 2])) as arrow::array::ArrayRef,
        )])
        .unwrap();
        assert!(c.get("a", "x").is_none());
        c.insert("a", "x", b.clone());
        assert_eq!(c.get("a", "x").map(|r| r.num_rows()), Some(2));
        assert!(c.get("a", "y").is_none());
        assert!(c.get("b", "x").is_none());
        c.insert("a", "x", b.slice(0, 1));
        assert_eq!(c.get("a", "x").map(|r| r.num_rows()), Some(1));
        assert_eq!(c.len(), 1);
    }
}
