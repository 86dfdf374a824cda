//! Query-time merging of duplicate points in line-protocol tables: `DedupExec`
//! reads the sources that overlap in time (oldest first), and returns one row per
//! series and time with the newest non-NULL value of every field.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

use super::leaf::leaf_plan_methods;
use crate::storage::dedup::dedup_sort;

/// `time` lies in one of `ranges` (inclusive bounds, microseconds).
pub fn in_ranges(
    schema: &SchemaRef,
    time_col: &str,
    ranges: &[(i64, i64)],
) -> DfResult<Arc<dyn PhysicalExpr>> {
    let idx = schema.index_of(time_col)?;
    let dt = schema.field(idx).data_type().clone();
    let col: Arc<dyn PhysicalExpr> = Arc::new(Column::new(time_col, idx));
    let lit = |v: i64| -> DfResult<Arc<dyn PhysicalExpr>> {
        let s = ScalarValue::TimestampMicrosecond(Some(v), None).cast_to(&dt)?;
        Ok(Arc::new(Literal::new(s)))
    };
    let mut out: Option<Arc<dyn PhysicalExpr>> = None;
    for (lo, hi) in ranges {
        let ge: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(col.clone(), Operator::GtEq, lit(*lo)?));
        let le: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(col.clone(), Operator::LtEq, lit(*hi)?));
        let both: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(ge, Operator::And, le));
        out = Some(match out {
            None => both,
            Some(prev) => Arc::new(BinaryExpr::new(prev, Operator::Or, both)),
        });
    }
    out.ok_or_else(|| DataFusionError::Internal("no dirty ranges".into()))
}

/// Merges the rows of its children (oldest source first) by series key and time.
#[derive(Debug)]
pub struct DedupExec {
    schema: SchemaRef,
    keys: Vec<usize>,
    /// The latest row of a key wins whole (else field by field).
    whole_rows: bool,
    children: Vec<Arc<dyn ExecutionPlan>>,
    props: Arc<PlanProperties>,
}

impl DedupExec {
    pub fn new(
        schema: SchemaRef,
        keys: Vec<usize>,
        whole_rows: bool,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Self {
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        DedupExec {
            schema,
            keys,
            whole_rows,
            children,
            props,
        }
    }
}

impl DisplayAs for DedupExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DedupExec: sources={}", self.children.len())
    }
}

impl ExecutionPlan for DedupExec {
    fn name(&self) -> &str {
        "DedupExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    // The sources stay hidden from the optimizer: their partition and batch order
    // is the arrival order the merge depends on, which repartitioning would change.
    leaf_plan_methods!();

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "DedupExec has one partition, asked for {partition}"
            )));
        }
        let children = self.children.clone();
        let schema = self.schema.clone();
        let keys = self.keys.clone();
        let whole_rows = self.whole_rows;
        let fut = async move {
            let mut batches = vec![];
            for child in children {
                let n = child.properties().partitioning.partition_count();
                for p in 0..n {
                    let mut s = child.execute(p, context.clone())?;
                    while let Some(b) = s.next().await {
                        let b = b?;
                        if b.num_rows() > 0 {
                            batches.push(b);
                        }
                    }
                }
            }
            let all = arrow::compute::concat_batches(&schema, &batches)?;
            dedup_sort(&all, &keys, whole_rows).map_err(DataFusionError::from)
        };
        let stream = futures::stream::once(fut);
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}
