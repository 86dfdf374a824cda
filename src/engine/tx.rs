//! Writes a session stages inside an explicit transaction block: inserted batches
//! and deletions, in statement order, with savepoint marks. Nothing here is
//! visible to other sessions; the SQL layer applies the lot at COMMIT.

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::logical_expr::Expr;
use parking_lot::Mutex;

use crate::catalog::TableDef;
use crate::error::Result;

/// One staged change.
#[derive(Debug, Clone)]
pub enum StagedOp {
    /// Rows for `table`, already validated against it.
    Insert {
        table: Arc<TableDef>,
        batch: RecordBatch,
    },
    /// Rows of table `table_id` where `pred` is true go away (`TRUNCATE`: `true`).
    /// Columns in `pred` are qualified by the table name.
    Delete { table_id: u64, pred: Expr },
}

impl StagedOp {
    /// The table the change is for.
    pub fn table_id(&self) -> u64 {
        match self {
            StagedOp::Insert { table, .. } => table.id,
            StagedOp::Delete { table_id, .. } => *table_id,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    in_block: bool,
    ops: Vec<StagedOp>,
}

/// The staged writes of one session (shared with its query context, whose scans
/// show them to the session itself and whose INSERT sink adds to them).
#[derive(Debug, Default)]
pub struct Staging {
    inner: Mutex<Inner>,
}

impl Staging {
    /// Whether an explicit transaction block is open.
    pub fn in_block(&self) -> bool {
        self.inner.lock().in_block
    }

    /// Opens a block (no-op when one is open).
    pub fn begin(&self) {
        self.inner.lock().in_block = true;
    }

    /// Closes the block, returning what it staged.
    pub fn finish(&self) -> Vec<StagedOp> {
        let mut g = self.inner.lock();
        g.in_block = false;
        std::mem::take(&mut g.ops)
    }

    /// Number of staged changes (a savepoint's mark).
    pub fn mark(&self) -> usize {
        self.inner.lock().ops.len()
    }

    /// Forgets the changes staged after `mark` (ROLLBACK TO SAVEPOINT).
    pub fn rollback_to(&self, mark: usize) {
        self.inner.lock().ops.truncate(mark);
    }

    /// Stages rows for `table`, checked as a direct write would check them (NOT
    /// NULL, types, the time column); returns the number of rows.
    pub fn insert(&self, table: &Arc<TableDef>, batch: RecordBatch) -> Result<u64> {
        if batch.num_rows() == 0 {
            return Ok(0);
        }
        let batch = crate::write::validate(table, &batch)?;
        crate::write::split_by_chunk(table, &batch)?;
        let n = batch.num_rows() as u64;
        self.inner.lock().ops.push(StagedOp::Insert {
            table: table.clone(),
            batch,
        });
        Ok(n)
    }

    /// Stages the deletion of the rows of `table_id` where `pred` is true.
    pub fn delete(&self, table_id: u64, pred: Expr) {
        self.inner
            .lock()
            .ops
            .push(StagedOp::Delete { table_id, pred });
    }

    /// The staged changes of one table, in order (empty outside a block).
    pub fn ops_for(&self, table_id: u64) -> Vec<StagedOp> {
        let g = self.inner.lock();
        g.ops
            .iter()
            .filter(|o| o.table_id() == table_id)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::lit;

    #[test]
    fn savepoint_marks_cut_the_op_list() {
        let s = Staging::default();
        s.begin();
        s.delete(1, lit(true));
        let m = s.mark();
        s.delete(2, lit(true));
        assert_eq!(s.ops_for(2).len(), 1);
        s.rollback_to(m);
        assert!(s.ops_for(2).is_empty());
        assert_eq!(s.ops_for(1).len(), 1);
        assert!(s.in_block());
        assert_eq!(s.finish().len(), 1);
        assert!(!s.in_block());
    }
}
