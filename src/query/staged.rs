//! A transaction's staged changes to one table as a scan must show them: the rows
//! it inserted that its later deletions left, and which stored rows its deletions
//! hide. The SQL layer's COMMIT applies the same result.

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, or};

use crate::catalog::TableDef;
use crate::engine::tx::StagedOp;

/// What a table's staged changes come to.
#[derive(Debug, Default)]
pub struct Folded {
    /// Inserted rows still there (in the table's current schema).
    pub inserts: Vec<RecordBatch>,
    /// Stored rows where this is true are deleted (`None`: no deletion).
    pub deleted: Option<Expr>,
}

/// The table's schema with its columns qualified by the table name, which is how
/// staged deletion predicates name them.
pub fn qualified_schema(table: &TableDef) -> DfResult<DFSchema> {
    DFSchema::try_from_qualified_schema(table.name.as_str(), &table.schema())
}

/// Applies `ops` (one table's, in statement order) to nothing but themselves: a
/// deletion removes the rows inserted before it and hides the stored rows it matches.
pub fn fold(state: &dyn Session, table: &TableDef, ops: &[StagedOp]) -> DfResult<Folded> {
    let schema = table.schema();
    let df_schema = qualified_schema(table)?;
    let mut out = Folded::default();
    for op in ops {
        match op {
            StagedOp::Insert { batch, .. } => {
                let b = crate::storage::adapt_batch(batch, &schema)?;
                out.inserts.push(b);
            }
            StagedOp::Delete { pred, .. } => {
                let phys = state.create_physical_expr(pred.clone(), &df_schema)?;
                let mut kept = Vec::with_capacity(out.inserts.len());
                for b in out.inserts.drain(..) {
                    let v = phys.evaluate(&b)?.into_array(b.num_rows())?;
                    let matched = v
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .cloned()
                        .unwrap_or_else(|| BooleanArray::from(vec![false; b.num_rows()]));
                    // Deleted where the predicate is true; NULL keeps the row.
                    let keep: BooleanArray =
                        matched.iter().map(|m| Some(m != Some(true))).collect();
                    let b = filter_record_batch(&b, &keep)?;
                    if b.num_rows() > 0 {
                        kept.push(b);
                    }
                }
                out.inserts = kept;
                out.deleted = Some(match out.deleted.take() {
                    Some(prev) => or(prev, pred.clone()),
                    None => pred.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// The filter that keeps the stored rows `deleted` does not match.
pub fn keep_filter(deleted: &Expr) -> Expr {
    Expr::Not(Box::new(Expr::IsTrue(Box::new(deleted.clone()))))
}
