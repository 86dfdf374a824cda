//! Decoded columns of chunk files, kept in memory by (file path, column) so that a
//! query over recently read data decodes nothing: each entry holds the whole column
//! as one Arrow array plus min/max per granule of [`GRANULE_ROWS`] rows, which a scan
//! prunes with as a Parquet page index would. Chunk files never change (a rewrite
//! writes a new path); the cache is bounded by bytes and drops the least recently used.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, PrimitiveArray, UInt32Array, UInt64Array,
};
use arrow::datatypes::{
    ArrowNativeTypeOp, DataType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, TimeUnit, TimestampMicrosecondType,
};
use lru::LruCache;
use parking_lot::Mutex;

/// Rows per granule: the unit a cached scan keeps or skips (a TimescaleDB compressed
/// batch holds 1,000 rows of one series).
pub const GRANULE_ROWS: usize = 1024;

/// The most memory the cache may take, whatever the budget.
const MAX_BYTES: u64 = 512 * 1024 * 1024;

/// Columns (file, column) asked for once and not cached: a second request loads them.
const SEEN_KEYS: usize = 4096;

/// A column of one file, decoded.
#[derive(Debug)]
pub struct DecodedColumn {
    /// Every row of the file, in file order, in the table's type for the column.
    pub values: ArrayRef,
    /// Per granule: the smallest and largest value (NULL when unknown or all NULL);
    /// `None` for types without an order kept here.
    pub mins: Option<ArrayRef>,
    pub maxs: Option<ArrayRef>,
    /// Per granule: NULL values.
    pub null_counts: ArrayRef,
}

impl DecodedColumn {
    /// `values` with its granule statistics.
    pub fn new(values: ArrayRef) -> DecodedColumn {
        let granules = values.len().div_ceil(GRANULE_ROWS);
        let null_counts: Vec<u64> = (0..granules)
            .map(|g| {
                let (start, len) = granule_span(g, values.len());
                values.slice(start, len).null_count() as u64
            })
            .collect();
        let (mins, maxs) = match extremes(&values) {
            Some((a, b)) => (Some(a), Some(b)),
            None => (None, None),
        };
        DecodedColumn {
            values,
            mins,
            maxs,
            null_counts: Arc::new(UInt64Array::from(null_counts)),
        }
    }

    /// Memory the entry takes.
    pub fn bytes(&self) -> usize {
        self.values.get_array_memory_size()
            + self.mins.as_ref().map_or(0, |a| a.get_array_memory_size())
            + self.maxs.as_ref().map_or(0, |a| a.get_array_memory_size())
            + self.null_counts.get_array_memory_size()
    }
}

/// First row and length of granule `g` of a column of `rows` rows.
pub fn granule_span(g: usize, rows: usize) -> (usize, usize) {
    let start = g * GRANULE_ROWS;
    (start, GRANULE_ROWS.min(rows.saturating_sub(start)))
}

/// Per granule the smallest and largest value of `values`, as arrays of its type.
fn extremes(values: &ArrayRef) -> Option<(ArrayRef, ArrayRef)> {
    let (lo, hi) = match values.data_type() {
        DataType::Int16 => arg_extremes(values.as_primitive::<Int16Type>()),
        DataType::Int32 => arg_extremes(values.as_primitive::<Int32Type>()),
        DataType::Int64 => arg_extremes(values.as_primitive::<Int64Type>()),
        DataType::Float32 => arg_extremes(values.as_primitive::<Float32Type>()),
        DataType::Float64 => arg_extremes(values.as_primitive::<Float64Type>()),
        DataType::Date32 => arg_extremes(values.as_primitive::<Date32Type>()),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            arg_extremes(values.as_primitive::<TimestampMicrosecondType>())
        }
        DataType::Utf8 => {
            let a = values.as_string::<i32>();
            arg_by(a.len(), |i| a.is_valid(i), |i, j| a.value(i) < a.value(j))
        }
        _ => return None,
    };
    let take = |idx: Vec<Option<u32>>| {
        arrow::compute::take(values.as_ref(), &UInt32Array::from(idx), None).ok()
    };
    Some((take(lo)?, take(hi)?))
}

fn arg_extremes<T: ArrowPrimitiveType>(
    a: &PrimitiveArray<T>,
) -> (Vec<Option<u32>>, Vec<Option<u32>>) {
    let v = a.values();
    arg_by(a.len(), |i| a.is_valid(i), |i, j| v[i].is_lt(v[j]))
}

/// Per granule the positions of the smallest and largest valid value under `less`
/// (a total order: NaN above every number, as Arrow's comparisons).
fn arg_by(
    rows: usize,
    valid: impl Fn(usize) -> bool,
    less: impl Fn(usize, usize) -> bool,
) -> (Vec<Option<u32>>, Vec<Option<u32>>) {
    let granules = rows.div_ceil(GRANULE_ROWS);
    let mut lo = Vec::with_capacity(granules);
    let mut hi = Vec::with_capacity(granules);
    for g in 0..granules {
        let (start, len) = granule_span(g, rows);
        let (mut min, mut max): (Option<usize>, Option<usize>) = (None, None);
        for i in start..start + len {
            if !valid(i) {
                continue;
            }
            if min.is_none_or(|m| less(i, m)) {
                min = Some(i);
            }
            if max.is_none_or(|m| less(m, i)) {
                max = Some(i);
            }
        }
        lo.push(min.map(|i| i as u32));
        hi.push(max.map(|i| i as u32));
    }
    (lo, hi)
}

/// Key of an entry: file path and column name.
type Key = (String, String);

/// The cache; see the module documentation.
#[derive(Debug)]
pub struct DecodedColumns {
    inner: Mutex<Inner>,
    limit: usize,
}

#[derive(Debug)]
struct Inner {
    entries: LruCache<Key, Arc<DecodedColumn>>,
    bytes: usize,
    /// Asked for once, not loaded: a second request loads.
    seen: LruCache<Key, ()>,
    /// Being loaded now.
    loading: HashSet<Key>,
    hits: u64,
    misses: u64,
}

/// Counters for EXPLAIN and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub hits: u64,
    pub misses: u64,
}

impl DecodedColumns {
    /// A cache taking at most `limit` bytes (and never over 512 MiB).
    pub fn with_limit(limit: u64) -> DecodedColumns {
        DecodedColumns {
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
                seen: LruCache::new(NonZeroUsize::new(SEEN_KEYS).unwrap_or(NonZeroUsize::MIN)),
                loading: HashSet::new(),
                hits: 0,
                misses: 0,
            }),
            limit: limit.min(MAX_BYTES) as usize,
        }
    }

    /// The cache's part of the queries' memory: a quarter, at most 512 MiB.
    pub fn share_of(query_memory: u64) -> u64 {
        (query_memory / 4).min(MAX_BYTES)
    }

    /// Whether the cache may hold anything.
    pub fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// The columns `columns` of the file at `path`, when all are kept (each becomes
    /// the most recently used); `None` otherwise.
    pub fn get(&self, path: &str, columns: &[&str]) -> Option<Vec<Arc<DecodedColumn>>> {
        let mut g = self.inner.lock();
        let mut out = Vec::with_capacity(columns.len());
        for c in columns {
            match g.entries.get(&(path.to_string(), c.to_string())) {
                Some(e) => out.push(e.clone()),
                None => {
                    g.misses += 1;
                    return None;
                }
            }
        }
        g.hits += 1;
        Some(out)
    }

    /// Notes a scan of `columns` of `path` that the cache could not serve, and
    /// returns those to load now: the ones asked for before, not kept, not being
    /// loaded (each is then marked loading until [`DecodedColumns::loaded`]).
    pub fn wanted(&self, path: &str, columns: &[&str]) -> Vec<String> {
        if !self.enabled() {
            return vec![];
        }
        let mut g = self.inner.lock();
        let mut out = vec![];
        for c in columns {
            let key = (path.to_string(), c.to_string());
            if g.entries.contains(&key) || g.loading.contains(&key) {
                continue;
            }
            if g.seen.pop(&key).is_some() {
                g.loading.insert(key);
                out.push(c.to_string());
            } else {
                g.seen.put(key, ());
            }
        }
        out
    }

    /// Keeps `column` of `path` (dropping the least recently used entries to make
    /// room; an entry larger than a quarter of the cache is not kept).
    pub fn insert(&self, path: &str, column: &str, value: DecodedColumn) {
        let size = value.bytes();
        let key = (path.to_string(), column.to_string());
        let mut g = self.inner.lock();
        g.loading.remove(&key);
        if size > self.limit / 4 {
            return;
        }
        if let Some(old) = g.entries.pop(&key) {
            g.bytes = g.bytes.saturating_sub(old.bytes());
        }
        while g.bytes + size > self.limit {
            match g.entries.pop_lru() {
                Some((_, old)) => g.bytes = g.bytes.saturating_sub(old.bytes()),
                None => break,
            }
        }
        g.bytes += size;
        g.entries.put(key, Arc::new(value));
    }

    /// Ends a load of `columns` of `path` that kept nothing (an error).
    pub fn loaded(&self, path: &str, columns: &[String]) {
        let mut g = self.inner.lock();
        for c in columns {
            g.loading.remove(&(path.to_string(), c.clone()));
        }
    }

    /// Drops every column kept for the file at `path` (deleted: never read again).
    pub fn forget(&self, path: &str) {
        let mut g = self.inner.lock();
        let keys: Vec<Key> = g
            .entries
            .iter()
            .filter(|(k, _)| k.0 == path)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(old) = g.entries.pop(&k) {
                g.bytes = g.bytes.saturating_sub(old.bytes());
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let g = self.inner.lock();
        CacheStats {
            entries: g.entries.len(),
            bytes: g.bytes,
            hits: g.hits,
            misses: g.misses,
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, StringArray};

    use super::*;

    #[test]
    fn granule_extremes_follow_the_values() {
        let v: Vec<Option<f64>> = (0..2500)
            .map(|i| match i {
                5 => None,
                2000 => Some(f64::NAN),
                _ => Some((i % 1000) as f64),
            })
            .collect();
        let c = DecodedColumn::new(Arc::new(Float64Array::from(v)));
        let mins = c.mins.as_ref().unwrap().as_primitive::<Float64Type>();
        let maxs = c.maxs.as_ref().unwrap().as_primitive::<Float64Type>();
        assert_eq!(mins.len(), 3);
        assert_eq!((mins.value(0), maxs.value(0)), (0.0, 999.0));
        // Row 2000 (granule 1) is NaN: above every number.
        assert_eq!(mins.value(1), 1.0);
        assert!(maxs.value(1).is_nan(), "NaN sorts above every number");
        assert_eq!((mins.value(2), maxs.value(2)), (48.0, 499.0));
        let nulls = c.null_counts.as_primitive::<arrow::datatypes::UInt64Type>();
        assert_eq!(nulls.values().to_vec(), vec![1, 0, 0]);

        let s = DecodedColumn::new(Arc::new(StringArray::from(vec![
            Some("b"),
            None,
            Some("a"),
        ])));
        assert_eq!(s.mins.as_ref().unwrap().as_string::<i32>().value(0), "a");
        assert_eq!(s.maxs.as_ref().unwrap().as_string::<i32>().value(0), "b");
        let all_null = DecodedColumn::new(Arc::new(Int64Array::from(vec![None::<i64>; 3])));
        assert!(all_null.mins.as_ref().unwrap().is_null(0));
    }

    #[test]
    fn loads_on_the_second_request_and_drops_the_least_recent() {
        let col = |n: i64| DecodedColumn::new(Arc::new(Int64Array::from(vec![n; 1000])));
        let size = col(0).bytes();
        let c = DecodedColumns::with_limit((size * 4) as u64);
        assert!(
            c.wanted("f1", &["a"]).is_empty(),
            "first request: noted only"
        );
        assert_eq!(c.wanted("f1", &["a"]), vec!["a".to_string()]);
        assert!(c.wanted("f1", &["a"]).is_empty(), "being loaded");
        c.insert("f1", "a", col(1));
        assert!(c.get("f1", &["a"]).is_some());
        assert!(c.get("f1", &["a", "b"]).is_none());
        for f in ["f2", "f3", "f4"] {
            c.insert(f, "a", col(2));
        }
        assert!(c.get("f1", &["a"]).is_some(), "f1 is now the most recent");
        // A fifth entry needs room: f2 (least recently used) goes.
        c.insert("f5", "a", col(5));
        assert!(c.get("f2", &["a"]).is_none());
        assert!(c.get("f1", &["a"]).is_some());
        assert!(c.stats().bytes <= size * 4);
        c.forget("f1");
        assert!(c.get("f1", &["a"]).is_none());
        assert_eq!(c.stats().bytes, size * 3);
        assert_eq!(c.stats().entries, 3);
    }
}
