//! The newest k time buckets without reading every row (TSBS groupby-orderby-limit:
//! `SELECT time_bucket('1 minute', time) AS minute, max(v) FROM t WHERE time < X
//! GROUP BY minute ORDER BY minute DESC LIMIT 5`). An optimizer rule gives such a
//! query a scan that reads only the newest time window, widening it (×4) until it
//! holds k whole buckets; rows of the bucket the window cuts are left out, so every
//! bucket the aggregate sees is complete and its top k are the query's answer.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator, Sort};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

use super::provider::HypertableProvider;
use super::variant::{ScanVariant, hypertable_of, leaf_plan_methods, one_partition, rewire_scans};

/// Largest k served.
const MAX_K: usize = 10_000;

/// The optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct NewestBuckets;

impl OptimizerRule for NewestBuckets {
    fn name(&self) -> &str {
        "sundial_newest_buckets"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let LogicalPlan::Sort(sort) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let Some((bucket, k)) = target(sort) else {
            return Ok(Transformed::no(plan));
        };
        rewire_scans(plan, || NewestBucketsScan {
            bucket: bucket.clone(),
            k,
        })
    }
}

/// `Sort(bucket DESC, fetch k)` over an aggregate grouping by one time bucket of a
/// hypertable scan filtered on time alone: the bucket expression and k.
fn target(sort: &Sort) -> Option<(Expr, usize)> {
    let k = sort.fetch.filter(|k| (1..=MAX_K).contains(k))?;
    let first = sort.expr.first()?;
    if first.asc {
        return None;
    }
    let Expr::Column(by) = &first.expr else {
        return None;
    };
    // The sort may sit above or below the projection naming the bucket.
    let (agg, name) = match sort.input.as_ref() {
        LogicalPlan::Aggregate(a) => (a, by.name.clone()),
        LogicalPlan::Projection(p) => {
            let LogicalPlan::Aggregate(a) = p.input.as_ref() else {
                return None;
            };
            let i = p
                .schema
                .fields()
                .iter()
                .position(|f| f.name() == &by.name)?;
            let inner = match &p.expr[i] {
                Expr::Alias(al) => al.expr.as_ref(),
                e => e,
            };
            let Expr::Column(c) = inner else {
                return None;
            };
            (a, c.name.clone())
        }
        _ => return None,
    };
    let [g] = agg.group_expr.as_slice() else {
        return None;
    };
    if agg.schema.field(0).name() != &name {
        return None;
    }
    let LogicalPlan::TableScan(scan) = agg.input.as_ref() else {
        return None;
    };
    let table = hypertable_of(scan)?;
    let time = table.time_column.clone()?;
    let micros = table.column(&time).is_some_and(|c| {
        matches!(
            c.sql_type.to_arrow(),
            DataType::Timestamp(TimeUnit::Microsecond, _)
        )
    });
    if !micros || scan.fetch.is_some() {
        return None;
    }
    // Filters on time alone: the window's rows are all the rows of its buckets.
    let time_only = scan.filters.iter().all(|f| {
        let refs = f.column_refs();
        !refs.is_empty() && refs.iter().all(|c| c.name == time) && !f.is_volatile()
    });
    // Buckets that floor their time (`time_bucket`, `date_trunc`): a bucket starts at
    // or before each of its rows, so rows at or after a bucket start hold it whole.
    let g = match g {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    let Expr::ScalarFunction(f) = g else {
        return None;
    };
    let floors = matches!(f.func.name(), "time_bucket" | "date_trunc");
    let args_ok = f.args.iter().all(|a| match a {
        Expr::Column(c) => c.name == time,
        Expr::Literal(..) => true,
        _ => false,
    }) && f.args.iter().any(|a| matches!(a, Expr::Column(_)));
    (time_only && floors && args_ok).then(|| {
        (
            datafusion::logical_expr::expr_rewriter::unnormalize_col(g.clone()),
            k,
        )
    })
}

/// A hypertable seen through the newest window that holds `k` whole buckets.
#[derive(Debug)]
struct NewestBucketsScan {
    bucket: Expr,
    k: usize,
}

#[async_trait]
impl ScanVariant for NewestBucketsScan {
    async fn scan(
        &self,
        h: &HypertableProvider,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(session) = state.as_any().downcast_ref::<SessionState>() else {
            return Ok(None);
        };
        let table = h.table().clone();
        let Some(time) = table.time_column.clone() else {
            return Ok(None);
        };
        let schema = table.schema();
        let out_schema = match projection {
            Some(p) => Arc::new(schema.project(p)?),
            None => schema.clone(),
        };
        let (Ok(time_at), Some((lo, hi))) = (
            out_schema.index_of(&time),
            h.time_span(filters.iter().filter_map(|f| upper_bound(f, &time)).min()),
        ) else {
            return Ok(None);
        };
        let df_schema = DFSchema::try_from(out_schema.as_ref().clone())?;
        let bucket = state.create_physical_expr(self.bucket.clone(), &df_schema)?;
        let tz = match schema.field_with_name(&time)?.data_type() {
            DataType::Timestamp(_, tz) => tz.clone(),
            _ => return Ok(None),
        };
        // First window: the buckets of the k newest bucket starts if none is empty.
        let width = bucket_width(&bucket, &out_schema, time_at, hi).unwrap_or(60_000_000);
        let start = bucket_at(&bucket, &out_schema, time_at, hi).unwrap_or(hi);
        let span = (hi - start).saturating_add(width.saturating_mul(self.k as i64 - 1));
        let props = one_partition(out_schema.clone());
        Ok(Some(Arc::new(NewestBucketsExec {
            table: table.name.clone(),
            inner: Arc::new(h.clone()),
            session: Arc::new(session.clone()),
            projection: projection.cloned(),
            filters: filters.to_vec(),
            time,
            tz,
            bucket,
            k: self.k,
            lo,
            hi,
            span: span.max(1),
            schema: out_schema,
            props,
        })))
    }
}

/// `c` when `e` is `time < c` or `time <= c` (either way round) for a timestamp
/// literal `c`, in microseconds.
fn upper_bound(e: &Expr, time: &str) -> Option<i64> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        return None;
    };
    let (op, other) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), o) if c.name == time => (*op, o),
        (o, Expr::Column(c)) if c.name == time => (op.swap()?, o),
        _ => return None,
    };
    let Expr::Literal(v, _) = other else {
        return None;
    };
    let micros = match v {
        ScalarValue::TimestampMicrosecond(Some(m), _) => *m,
        _ => return None,
    };
    match op {
        Operator::Lt => Some(micros - 1),
        Operator::LtEq => Some(micros),
        _ => None,
    }
}

/// The bucket `expr` puts time `t` in, in microseconds.
fn bucket_at(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    time_at: usize,
    t: i64,
) -> Option<i64> {
    let cols = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i == time_at {
                ScalarValue::TimestampMicrosecond(Some(t), None)
                    .cast_to(f.data_type())
                    .and_then(|v| v.to_array())
            } else {
                Ok(arrow::array::new_null_array(f.data_type(), 1))
            }
        })
        .collect::<DfResult<Vec<_>>>()
        .ok()?;
    let batch = RecordBatch::try_new(schema.clone(), cols).ok()?;
    let v = expr.evaluate(&batch).ok()?.into_array(1).ok()?;
    let v = cast(&v, &DataType::Timestamp(TimeUnit::Microsecond, None)).ok()?;
    let v = cast(&v, &DataType::Int64).ok()?;
    let p = v.as_primitive::<Int64Type>();
    p.is_valid(0).then(|| p.value(0))
}

/// The length of the bucket before the one holding `t`.
fn bucket_width(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    time_at: usize,
    t: i64,
) -> Option<i64> {
    let b = bucket_at(expr, schema, time_at, t)?;
    let before = bucket_at(expr, schema, time_at, b - 1)?;
    (b > before).then_some(b - before)
}

/// Reads the rows of the newest window holding `k` whole buckets (widening it until
/// it does, or until it covers every row), without the rows of the bucket it cuts.
#[derive(Debug)]
pub struct NewestBucketsExec {
    table: String,
    inner: Arc<dyn TableProvider>,
    session: Arc<SessionState>,
    projection: Option<Vec<usize>>,
    filters: Vec<Expr>,
    time: String,
    tz: Option<Arc<str>>,
    bucket: Arc<dyn PhysicalExpr>,
    k: usize,
    lo: i64,
    hi: i64,
    span: i64,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
}

impl DisplayAs for NewestBucketsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "NewestBucketsExec: table={}, newest {} buckets of {}, first window {} s",
            self.table,
            self.k,
            self.bucket,
            self.span / 1_000_000
        )
    }
}

impl ExecutionPlan for NewestBucketsExec {
    fn name(&self) -> &str {
        "NewestBucketsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    leaf_plan_methods!();

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "NewestBucketsExec has one partition, asked for {partition}"
            )));
        }
        let inner = self.inner.clone();
        let session = self.session.clone();
        let projection = self.projection.clone();
        let filters = self.filters.clone();
        let time = self.time.clone();
        let tz = self.tz.clone();
        let bucket = self.bucket.clone();
        let (k, lo, hi, mut span) = (self.k, self.lo, self.hi, self.span);
        let schema = self.schema.clone();
        let fut = async move {
            loop {
                let from = hi.saturating_sub(span);
                let whole = from <= lo;
                let mut fs = filters.clone();
                if !whole {
                    fs.push(Expr::Column(time.as_str().into()).gt_eq(Expr::Literal(
                        ScalarValue::TimestampMicrosecond(Some(from), tz.clone()),
                        None,
                    )));
                }
                let plan = inner
                    .scan(session.as_ref(), projection.as_ref(), &fs, None)
                    .await?;
                let batches = datafusion::physical_plan::collect(plan, context.clone()).await?;
                if whole {
                    return arrow::compute::concat_batches(&schema, &batches)
                        .map_err(DataFusionError::from);
                }
                // Keep the rows of the buckets that start inside the window.
                let mut kept = vec![];
                let mut starts = std::collections::BTreeSet::new();
                for b in &batches {
                    let v = bucket.evaluate(b)?.into_array(b.num_rows())?;
                    let v = cast(&v, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
                    let v = cast(&v, &DataType::Int64)?;
                    let v = v.as_primitive::<Int64Type>();
                    let mask: BooleanArray = (0..v.len())
                        .map(|i| Some(v.is_valid(i) && v.value(i) >= from))
                        .collect();
                    for i in 0..v.len() {
                        if v.is_valid(i) && v.value(i) >= from {
                            starts.insert(v.value(i));
                        }
                    }
                    kept.push(filter_record_batch(b, &mask)?);
                }
                if starts.len() >= k {
                    return arrow::compute::concat_batches(&schema, &kept)
                        .map_err(DataFusionError::from);
                }
                span = span.saturating_mul(4);
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(fut),
        )))
    }
}
