//! Last-write-wins merging for line-protocol tables: rows with the same series key
//! (tag columns) and time become one row whose every field is the newest non-NULL
//! value, as InfluxDB keeps duplicate points. Used by flush, compaction and scans.

use std::collections::HashSet;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, SortField};
use datafusion::common::hash_utils::{RandomState, create_hashes};

use crate::catalog::TableDef;
use crate::error::{Error, Result};

/// Positions in `schema` of the series key columns then the time column, for a
/// table that merges duplicate points; `None` for append tables.
pub fn key_indices(table: &TableDef, schema: &arrow::datatypes::Schema) -> Option<Vec<usize>> {
    if !table.dedups() {
        return None;
    }
    let series = table.sort_series();
    let mut keys = Vec::with_capacity(series.len() + 1);
    for name in series.iter().chain(table.time_column.iter()) {
        keys.push(schema.index_of(name).ok()?);
    }
    Some(keys)
}

/// Whether two rows of `batch` may share the key columns `keys` (tags then time).
/// Hash collisions answer `true`, which only costs a merge that finds nothing.
pub fn may_have_duplicates(batch: &RecordBatch, keys: &[usize]) -> Result<bool> {
    let n = batch.num_rows();
    if n < 2 {
        return Ok(false);
    }
    let cols: Vec<ArrayRef> = keys.iter().map(|i| batch.column(*i).clone()).collect();
    let mut hashes = vec![0u64; n];
    create_hashes(&cols, &RandomState::with_seed(0), &mut hashes)
        .map_err(|e| Error::Internal(format!("hashing series keys: {e}")))?;
    let mut seen = HashSet::with_capacity(n);
    Ok(!hashes.iter().all(|h| seen.insert(*h)))
}

/// Sorts `batch` by `keys` (series columns then time) and merges rows with equal
/// keys: for every other column the value of the latest row (highest position in
/// `batch`) that is not NULL wins, or with `whole_rows` the latest row. Rows are
/// assumed to be in arrival order.
pub fn dedup_sort(batch: &RecordBatch, keys: &[usize], whole_rows: bool) -> Result<RecordBatch> {
    let order = DedupOrder::new(batch, keys)?;
    order.take(batch, keys, 0..order.len(), whole_rows)
}

/// Where the rows of [`dedup_sort`]'s answer come from, so that a large batch can
/// be written out a slice at a time instead of copied whole.
pub struct DedupOrder {
    /// Row positions sorted by key; equal keys stay in arrival order.
    order: Vec<u32>,
    /// `[start, end)` ranges of `order` with one key; `None` when every key differs.
    runs: Option<Vec<(u32, u32)>>,
}

impl DedupOrder {
    pub fn new(batch: &RecordBatch, keys: &[usize]) -> Result<DedupOrder> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(DedupOrder {
                order: vec![],
                runs: None,
            });
        }
        // Sort through the row format: one memcmp per comparison instead of a
        // column-by-column comparison of every tag; the stable sort keeps arrival order.
        let fields = keys
            .iter()
            .map(|i| SortField::new(batch.schema().field(*i).data_type().clone()))
            .collect();
        let conv = RowConverter::new(fields)?;
        let key_cols: Vec<ArrayRef> = keys.iter().map(|i| batch.column(*i).clone()).collect();
        let rows = conv.convert_columns(&key_cols)?;
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));

        let mut runs: Vec<(u32, u32)> = Vec::new();
        let mut start = 0;
        for i in 1..=order.len() {
            if i == order.len() || rows.row(order[i] as usize) != rows.row(order[start] as usize) {
                runs.push((start as u32, i as u32));
                start = i;
            }
        }
        let runs = (runs.len() != n).then_some(runs);
        Ok(DedupOrder { order, runs })
    }

    /// Rows of the answer.
    pub fn len(&self) -> usize {
        match &self.runs {
            Some(r) => r.len(),
            None => self.order.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows `range` of the answer, taken from `batch` (the batch it was made for);
    /// `whole_rows`: the latest row of a key wins whole, else field by field.
    pub fn take(
        &self,
        batch: &RecordBatch,
        keys: &[usize],
        range: std::ops::Range<usize>,
        whole_rows: bool,
    ) -> Result<RecordBatch> {
        let Some(runs) = &self.runs else {
            // No duplicates: a plain sort.
            let idx = UInt32Array::from(self.order[range].to_vec());
            return Ok(arrow::compute::take_record_batch(batch, &idx)?);
        };
        let order = &self.order[..];
        let mut out = Vec::with_capacity(batch.num_columns());
        for (c, col) in batch.columns().iter().enumerate() {
            let is_key = whole_rows || keys.contains(&c);
            let idx: UInt32Array = runs[range.clone()]
                .iter()
                .map(|&(s, e)| {
                    let (s, e) = (s as usize, e as usize);
                    let last = order[e - 1];
                    if is_key || col.null_count() == 0 {
                        return last;
                    }
                    order[s..e]
                        .iter()
                        .rev()
                        .copied()
                        .find(|r| col.is_valid(*r as usize))
                        .unwrap_or(last)
                })
                .collect();
            out.push(take(col.as_ref(), &idx, None)?);
        }
        Ok(RecordBatch::try_new(batch.schema(), out)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(host: &[&str], t: &[i64], a: &[Option<f64>], b: &[Option<i64>]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", DataType::Utf8, true),
            Field::new("time", DataType::Int64, false),
            Field::new("a", DataType::Float64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(host.to_vec())),
                Arc::new(Int64Array::from(t.to_vec())),
                Arc::new(Float64Array::from(a.to_vec())),
                Arc::new(Int64Array::from(b.to_vec())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn merges_field_by_field_last_write_wins() {
        let b = batch(
            &["x", "y", "x", "x"],
            &[1, 1, 1, 2],
            &[Some(24.0), Some(5.0), Some(15.0), None],
            &[Some(7), None, None, Some(9)],
        );
        assert!(may_have_duplicates(&b, &[0, 1]).unwrap());
        let out = dedup_sort(&b, &[0, 1], false).unwrap();
        assert_eq!(out.num_rows(), 3);
        let a = out
            .column(2)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        let bb = out.column(3).as_any().downcast_ref::<Int64Array>().unwrap();
        // (x,1): a from the later row, b kept from the first
        assert_eq!(a.value(0), 15.0);
        assert_eq!(bb.value(0), 7);
        // (x,2)
        assert!(a.is_null(1));
        assert_eq!(bb.value(1), 9);
        // (y,1)
        assert_eq!(a.value(2), 5.0);
    }

    #[test]
    fn no_duplicates_only_sorts() {
        let b = batch(&["y", "x"], &[1, 1], &[Some(1.0), Some(2.0)], &[None, None]);
        assert!(!may_have_duplicates(&b, &[0, 1]).unwrap());
        let out = dedup_sort(&b, &[0, 1], false).unwrap();
        let h = out
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(h.value(0), "x");
        assert_eq!(out.num_rows(), 2);
    }
}
