//! The `GapFill` logical node and `GapFillExec`: over aggregate rows sorted by group
//! keys and bucket, it streams every bucket from start to finish for each group,
//! the missing ones with NULLs, the last value (`locf`) or a linear interpolation.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, RecordBatch, RecordBatchOptions,
    TimestampMicrosecondArray, new_null_array,
};
use arrow::compute::interleave;
use arrow::datatypes::{DataType, Schema, SchemaRef, TimeUnit, TimestampMicrosecondType};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, LogicalPlan, LogicalPlanBuilder, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, OrderingRequirements, Partitioning, PhysicalExpr,
    PhysicalSortExpr,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, PlanProperties,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::StreamExt;

use crate::error::Error;
use crate::sql::functions::time_bucket::{bucket, from_local, parse_zone, to_local};

/// How a filled column gets its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum Fill {
    /// The previous bucket's value; NULL values are skipped if `skip_nulls`.
    Locf { skip_nulls: bool },
    /// Linear between the neighbouring buckets that have values.
    Interpolate,
}

/// A `prev` / `next` argument; `outer` maps its references to the outer query to
/// group-key columns, whose values it is evaluated with, group by group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Seed {
    pub expr: Expr,
    pub outer: Vec<(Column, usize)>,
}

/// A column of the node's input filled by `locf` or `interpolate`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FillCol {
    pub col: usize,
    pub kind: Fill,
    pub prev: Option<Seed>,
    pub next: Option<Seed>,
}

/// The logical node: input rows are the aggregate's (plus fill columns).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GapFill {
    input: Arc<LogicalPlan>,
    bucket: usize,
    keys: Vec<usize>,
    width: Expr,
    start: Expr,
    finish: Expr,
    zone: Option<String>,
    fills: Vec<FillCol>,
    schema: DFSchemaRef,
}

impl PartialOrd for GapFill {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (
            self.bucket,
            &self.keys,
            &self.width,
            &self.start,
            &self.finish,
        )
            .partial_cmp(&(
                other.bucket,
                &other.keys,
                &other.width,
                &other.start,
                &other.finish,
            ))
    }
}

impl GapFill {
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        input: LogicalPlan,
        bucket: usize,
        keys: Vec<usize>,
        width: Expr,
        start: Expr,
        finish: Expr,
        zone: Option<String>,
        fills: Vec<FillCol>,
    ) -> DfResult<GapFill> {
        // Filled rows have NULL values where the aggregate had none (count(*)).
        let fields = input
            .schema()
            .iter()
            .enumerate()
            .map(|(i, (q, f))| {
                let keep = i == bucket || keys.contains(&i);
                (
                    q.cloned(),
                    Arc::new(f.as_ref().clone().with_nullable(f.is_nullable() || !keep)),
                )
            })
            .collect::<Vec<_>>();
        let schema = Arc::new(DFSchema::new_with_metadata(
            fields,
            input.schema().metadata().clone(),
        )?);
        Ok(GapFill {
            input: Arc::new(input),
            bucket,
            keys,
            width,
            start,
            finish,
            zone,
            fills,
            schema,
        })
    }
}

impl UserDefinedLogicalNodeCore for GapFill {
    fn name(&self) -> &str {
        "GapFill"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![self.input.as_ref()]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![self.width.clone(), self.start.clone(), self.finish.clone()]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let name = |i: usize| self.schema.field(i).name().clone();
        write!(
            f,
            "GapFill: bucket={}, keys=[{}], width={}, range=[{}, {})",
            name(self.bucket),
            self.keys
                .iter()
                .map(|k| name(*k))
                .collect::<Vec<_>>()
                .join(", "),
            self.width,
            self.start,
            self.finish
        )?;
        if let Some(z) = &self.zone {
            write!(f, ", zone={z}")?;
        }
        for c in &self.fills {
            let kind = match c.kind {
                Fill::Locf { .. } => "locf",
                Fill::Interpolate => "interpolate",
            };
            write!(f, ", {kind}({})", name(c.col))?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(&self, exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        let (Ok([width, start, finish]), Ok([input])) = (
            <[Expr; 3]>::try_from(exprs),
            <[LogicalPlan; 1]>::try_from(inputs),
        ) else {
            return Err(DataFusionError::Internal(
                "GapFill takes three expressions and one input".into(),
            ));
        };
        GapFill::try_new(
            input,
            self.bucket,
            self.keys.clone(),
            width,
            start,
            finish,
            self.zone.clone(),
            self.fills.clone(),
        )
    }
}

/// Plans `GapFill` nodes as [`GapFillExec`].
#[derive(Debug)]
pub struct GapFillPlanner;

#[async_trait]
impl ExtensionPlanner for GapFillPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        planning_ctx: &PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(g) = node.as_any().downcast_ref::<GapFill>() else {
            return Ok(None);
        };
        let [input] = physical_inputs else {
            return Err(DataFusionError::Internal("GapFill has one input".into()));
        };
        let state = session
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Internal("GapFill needs a SessionState".into()))?;
        let empty = DFSchema::empty();
        let phys = |e: &Expr| planner.create_physical_expr(e, &empty, session, planning_ctx);
        let zone = match &g.zone {
            Some(z) => Some(parse_zone(z)?),
            None => None,
        };
        Ok(Some(Arc::new(GapFillExec::new(
            input.clone(),
            Spec {
                bucket: g.bucket,
                keys: g.keys.clone(),
                width: phys(&g.width)?,
                start: phys(&g.start)?,
                finish: phys(&g.finish)?,
                zone,
                fills: g.fills.clone(),
                state: Arc::new(state.clone()),
            },
            Arc::new(g.schema.as_arrow().clone()),
        ))))
    }
}

/// What the exec needs of the node.
#[derive(Debug, Clone)]
struct Spec {
    bucket: usize,
    keys: Vec<usize>,
    width: Arc<dyn PhysicalExpr>,
    start: Arc<dyn PhysicalExpr>,
    finish: Arc<dyn PhysicalExpr>,
    zone: Option<chrono_tz::Tz>,
    fills: Vec<FillCol>,
    /// Plans and runs the `prev` / `next` arguments.
    state: Arc<SessionState>,
}

/// Streams the filled rows; one partition, input sorted by keys and bucket.
#[derive(Debug)]
pub struct GapFillExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Spec,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
}

impl GapFillExec {
    fn new(input: Arc<dyn ExecutionPlan>, spec: Spec, schema: SchemaRef) -> GapFillExec {
        let mut eq = EquivalenceProperties::new(schema.clone());
        if let Some(o) = LexOrdering::new(sort_exprs(&spec, &schema)) {
            eq.add_ordering(o);
        }
        let props = Arc::new(PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        GapFillExec {
            input,
            spec,
            schema,
            props,
        }
    }
}

/// Keys then bucket, ascending, NULLs first.
fn sort_exprs(spec: &Spec, schema: &Schema) -> Vec<PhysicalSortExpr> {
    spec.keys
        .iter()
        .chain(std::iter::once(&spec.bucket))
        .map(|i| PhysicalSortExpr {
            expr: Arc::new(datafusion::physical_expr::expressions::Column::new(
                schema.field(*i).name(),
                *i,
            )),
            options: arrow::compute::SortOptions {
                descending: false,
                nulls_first: true,
            },
        })
        .collect()
}

impl DisplayAs for GapFillExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let name = |i: usize| self.schema.field(i).name().clone();
        write!(
            f,
            "GapFillExec: bucket={}, keys=[{}], range=[{}, {})",
            name(self.spec.bucket),
            self.spec
                .keys
                .iter()
                .map(|k| name(*k))
                .collect::<Vec<_>>()
                .join(", "),
            self.spec.start,
            self.spec.finish
        )
    }
}

impl ExecutionPlan for GapFillExec {
    fn name(&self) -> &str {
        "GapFillExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        let input = self.input.schema();
        vec![
            LexOrdering::new(sort_exprs(&self.spec, &input))
                .map(|o| OrderingRequirements::new(o.into())),
        ]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(
            &Arc<dyn PhysicalExpr>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        for e in [&self.spec.width, &self.spec.start, &self.spec.finish] {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("GapFillExec has one child".into()))?;
        Ok(Arc::new(GapFillExec::new(
            input,
            self.spec.clone(),
            self.schema.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "GapFillExec has one partition, asked for {partition}"
            )));
        }
        let mut input = self.input.execute(0, context.clone())?;
        let spec = self.spec.clone();
        let schema = self.schema.clone();
        let mut builder = RecordBatchReceiverStreamBuilder::new(schema.clone(), 2);
        let tx = builder.tx();
        let reservation = MemoryConsumer::new("GapFillExec").register(context.memory_pool());
        let batch_size = context.session_config().batch_size().max(1);
        builder.spawn(async move {
            let range = Range::evaluate(&spec)?;
            let mut filler = Filler::new(spec, range, schema, batch_size, reservation)?;
            let mut carry: Option<RecordBatch> = None;
            while let Some(b) = input.next().await {
                let b = b?;
                if b.num_rows() == 0 {
                    continue;
                }
                let unit = match carry.take() {
                    Some(c) => arrow::compute::concat_batches(&b.schema(), &[c, b])?,
                    None => b,
                };
                let out = filler.unit(unit, false).await?;
                carry = out.carry;
                for batch in out.batches {
                    if tx.send(Ok(batch)).await.is_err() {
                        return Ok(());
                    }
                }
            }
            let mut out = match carry.take() {
                Some(c) => filler.unit(c, true).await?,
                None => Output::default(),
            };
            out.batches.extend(filler.finish().await?);
            for batch in out.batches {
                if tx.send(Ok(batch)).await.is_err() {
                    return Ok(());
                }
            }
            Ok(())
        });
        Ok(builder.build())
    }
}

/// The buckets: first bucket start and step, in the zone's wall clock if any.
struct Range {
    /// Months, days and nanoseconds; with `integer`, the width in the time's units.
    width: (i32, i32, i64),
    /// Integer time (`time_bucket_gapfill(10, t)`): buckets and bounds are numbers.
    integer: bool,
    start: i64,
    finish: i64,
    zone: Option<chrono_tz::Tz>,
}

fn one_row() -> DfResult<RecordBatch> {
    Ok(RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?)
}

fn scalar(e: &Arc<dyn PhysicalExpr>) -> DfResult<ScalarValue> {
    let v = e.evaluate(&one_row()?)?;
    match v {
        datafusion::logical_expr::ColumnarValue::Scalar(s) => Ok(s),
        datafusion::logical_expr::ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0),
    }
}

/// An integer argument (integer time) as a number.
fn int_bound(v: ScalarValue, what: &str) -> DfResult<i64> {
    if v.is_null() {
        return Err(Error::sql(
            "22004",
            format!("invalid time_bucket_gapfill argument: {what} cannot be NULL"),
        )
        .into());
    }
    match v.cast_to(&DataType::Int64) {
        Ok(ScalarValue::Int64(Some(n))) => Ok(n),
        _ => Err(Error::sql("22023", format!("invalid time_bucket_gapfill {what}: {v}")).into()),
    }
}

/// A bound as µs since the epoch.
fn micros(v: ScalarValue, what: &str) -> DfResult<i64> {
    let v = match v {
        ScalarValue::Utf8(Some(mut t))
        | ScalarValue::Utf8View(Some(mut t))
        | ScalarValue::LargeUtf8(Some(mut t)) => {
            crate::interval::complete_seconds(&mut t);
            ScalarValue::Utf8(Some(t))
        }
        ScalarValue::TimestampMicrosecond(Some(m), _) => return Ok(m),
        other => other,
    };
    if v.is_null() {
        return Err(Error::sql(
            "22004",
            format!("invalid time_bucket_gapfill argument: {what} cannot be NULL"),
        )
        .into());
    }
    match v.cast_to(&DataType::Timestamp(
        TimeUnit::Microsecond,
        Some("UTC".into()),
    )) {
        Ok(ScalarValue::TimestampMicrosecond(Some(m), _)) => Ok(m),
        _ => Err(Error::sql("22023", format!("invalid time_bucket_gapfill {what}: {v}")).into()),
    }
}

impl Range {
    fn evaluate(spec: &Spec) -> DfResult<Range> {
        let width = scalar(&spec.width)?;
        if width.data_type().is_integer() {
            let w = int_bound(width, "width")?;
            if w <= 0 {
                return Err(Error::sql("22023", "period must be greater than 0").into());
            }
            return Ok(Range {
                width: (0, 0, w),
                integer: true,
                start: int_bound(scalar(&spec.start)?, "start")?,
                finish: int_bound(scalar(&spec.finish)?, "finish")?,
                zone: None,
            });
        }
        let width = match width {
            ScalarValue::IntervalMonthDayNano(Some(v)) => (v.months, v.days, v.nanoseconds),
            _ => {
                return Err(Error::sql(
                    "22023",
                    "time_bucket_gapfill: the width must be an interval",
                )
                .into());
            }
        };
        if width.0 < 0 || width.1 < 0 || width.2 < 0 || width == (0, 0, 0) {
            return Err(Error::sql("22023", "period must be greater than 0").into());
        }
        Ok(Range {
            width,
            integer: false,
            start: micros(scalar(&spec.start)?, "start")?,
            finish: micros(scalar(&spec.finish)?, "finish")?,
            zone: spec.zone,
        })
    }

    fn to_utc(&self, local: i64) -> DfResult<i64> {
        match &self.zone {
            Some(tz) => from_local(tz, local),
            None => Ok(local),
        }
    }

    /// The first bucket (local time).
    fn first(&self) -> DfResult<i64> {
        if self.integer {
            // TimescaleDB's integer time_bucket: floor to a multiple of the width.
            let w = self.width.2;
            return self.start.div_euclid(w).checked_mul(w).ok_or_else(|| {
                Error::sql("22003", "time_bucket_gapfill: start out of range").into()
            });
        }
        let local = match &self.zone {
            Some(tz) => to_local(tz, self.start)?,
            None => self.start,
        };
        let (m, d, n) = self.width;
        bucket(m, d, n, local, None, 0)
    }

    /// The bucket after `b` (local time).
    fn next(&self, b: i64) -> DfResult<i64> {
        if self.integer {
            // Past the largest value: no more buckets fit before any finish.
            return Ok(b.checked_add(self.width.2).unwrap_or(i64::MAX));
        }
        let (m, d, n) = self.width;
        let out_of_range = || DataFusionError::from(Error::sql("22008", "timestamp out of range"));
        let next = if m != 0 {
            chrono::DateTime::from_timestamp_micros(b)
                .ok_or_else(out_of_range)?
                .checked_add_months(chrono::Months::new(m.unsigned_abs()))
                .ok_or_else(out_of_range)?
                .timestamp_micros()
        } else {
            b.checked_add(d as i64 * 86_400_000_000 + n / 1000)
                .ok_or_else(out_of_range)?
        };
        if next <= b {
            return Err(Error::sql("22023", "period must be greater than 0").into());
        }
        Ok(next)
    }
}

/// Where a value of an output row comes from: (source array, row).
type Src = (usize, usize);

/// The last value of a `locf` column.
#[derive(Clone)]
enum Last {
    None,
    /// A row of the current unit.
    Row(usize),
    /// A one-row array (from an earlier unit or the seed).
    Value(ArrayRef),
}

/// The group being filled.
struct Group {
    key: OwnedRow,
    /// The group's last row of an earlier unit (its key values), one row.
    rep: Option<RecordBatch>,
    /// The group's last row in the current unit.
    last_row: Option<usize>,
    /// Next bucket to emit (local time); None after finish.
    cursor: Option<i64>,
    locf: Vec<Last>,
    /// Interpolation: last point, and the seed after the range.
    prev: Vec<Option<(i64, f64)>>,
    next_seed: Vec<Option<(i64, f64)>>,
}

/// Rows planned for one output batch.
#[derive(Default)]
struct Plan {
    times: Vec<Option<i64>>,
    /// Source of key columns: 0 = unit, 1.. = `reps`.
    keys: Vec<Src>,
    reps: Vec<RecordBatch>,
    /// Real row of the unit, or a gap.
    real: Vec<Option<usize>>,
    /// Per fill column: (0, row) unit, (1, 0) NULL, (2 + k, 0) `extra[k]`,
    /// (COMPUTED, k) interpolated value k.
    fill: Vec<Vec<Src>>,
    extra: Vec<Vec<ArrayRef>>,
    computed: Vec<Vec<Option<f64>>>,
}

const COMPUTED: usize = usize::MAX;

#[derive(Default)]
struct Output {
    batches: Vec<RecordBatch>,
    carry: Option<RecordBatch>,
}

struct Filler {
    spec: Spec,
    range: Range,
    schema: SchemaRef,
    batch_size: usize,
    reservation: MemoryReservation,
    converter: RowConverter,
    group: Option<Group>,
    /// Seeds that do not depend on the group, evaluated once.
    constant_seeds: std::collections::HashMap<(usize, bool), ScalarValue>,
    seen_rows: bool,
}

impl Filler {
    fn new(
        spec: Spec,
        range: Range,
        schema: SchemaRef,
        batch_size: usize,
        reservation: MemoryReservation,
    ) -> DfResult<Filler> {
        // Without keys, one constant column stands for the one group's key.
        let fields = if spec.keys.is_empty() {
            vec![SortField::new(DataType::Boolean)]
        } else {
            spec.keys
                .iter()
                .map(|k| SortField::new(schema.field(*k).data_type().clone()))
                .collect()
        };
        let converter = RowConverter::new(fields)?;
        Ok(Filler {
            spec,
            range,
            schema,
            batch_size,
            reservation,
            converter,
            group: None,
            constant_seeds: Default::default(),
            seen_rows: false,
        })
    }

    fn key_rows(&self, unit: &RecordBatch) -> DfResult<Rows> {
        let cols: Vec<ArrayRef> = if self.spec.keys.is_empty() {
            vec![Arc::new(arrow::array::BooleanArray::from(vec![
                true;
                unit.num_rows()
            ]))]
        } else {
            self.spec
                .keys
                .iter()
                .map(|k| unit.column(*k).clone())
                .collect()
        };
        Ok(self.converter.convert_columns(&cols)?)
    }

    /// Fills rows of `unit`; with interpolation, keeps back the rows after the last
    /// group's last complete row (their next value is not known yet) unless `last`.
    async fn unit(&mut self, unit: RecordBatch, last: bool) -> DfResult<Output> {
        self.seen_rows = true;
        let n = unit.num_rows();
        let rows = self.key_rows(&unit)?;
        let times = bucket_times(unit.column(self.spec.bucket))?;
        let floats: Vec<Option<ArrayRef>> = self
            .spec
            .fills
            .iter()
            .map(|f| match f.kind {
                Fill::Interpolate => {
                    arrow::compute::cast(unit.column(f.col), &DataType::Float64).ok()
                }
                Fill::Locf { .. } => None,
            })
            .collect();
        let interp: Vec<usize> = (0..self.spec.fills.len())
            .filter(|i| self.spec.fills[*i].kind == Fill::Interpolate)
            .collect();
        let complete = |i: usize| {
            times[i].is_some()
                && interp
                    .iter()
                    .all(|c| floats[*c].as_ref().is_some_and(|a| a.is_valid(i)))
        };
        // Start of the last group.
        let mut s = n;
        while s > 0 && (s == n || rows.row(s - 1) == rows.row(n - 1)) {
            s -= 1;
        }
        let cut = if last || interp.is_empty() {
            n
        } else {
            (s..n).rev().find(|i| complete(*i)).unwrap_or(s)
        };
        // Next row with a value, per interpolated column, within the group.
        let mut next_valid: Vec<Vec<Option<usize>>> = vec![vec![]; self.spec.fills.len()];
        for c in &interp {
            let Some(a) = &floats[*c] else { continue };
            let mut v = vec![None; n];
            let mut nxt: Option<usize> = None;
            for i in (0..n).rev() {
                if i + 1 < n && rows.row(i) != rows.row(i + 1) {
                    nxt = None;
                }
                if a.is_valid(i) && times[i].is_some() {
                    nxt = Some(i);
                }
                v[i] = nxt;
            }
            next_valid[*c] = v;
        }
        let mut out = Output::default();
        let mut plan = self.new_plan();
        for i in 0..cut {
            let same = self
                .group
                .as_ref()
                .is_some_and(|g| g.key.row() == rows.row(i));
            if !same {
                if let Some(g) = self.group.take() {
                    self.finish_group(g, &unit, &mut plan, &mut out)?;
                }
                let g = self.start_group(&unit, i, rows.row(i).owned()).await?;
                self.group = Some(g);
            }
            let Some(mut g) = self.group.take() else {
                continue;
            };
            if let Some(t) = times[i] {
                while let Some(c) = g.cursor {
                    let cu = self.range.to_utc(c)?;
                    if cu >= self.range.finish || cu > t {
                        break;
                    }
                    g.cursor = Some(self.range.next(c)?);
                    if cu == t {
                        break;
                    }
                    self.gap(
                        &mut g,
                        &mut plan,
                        cu,
                        (0, i),
                        |c| next_valid[c].get(i).copied().flatten(),
                        &times,
                        &floats,
                    )?;
                    self.flush_if_full(&mut plan, &unit, &mut out)?;
                }
            }
            // The real row.
            plan.times.push(times[i]);
            plan.keys.push((0, i));
            plan.real.push(Some(i));
            for (c, f) in self.spec.fills.iter().enumerate() {
                let valid = unit.column(f.col).is_valid(i);
                match f.kind {
                    Fill::Locf { skip_nulls } => {
                        if valid || !skip_nulls {
                            g.locf[c] = Last::Row(i);
                            plan.fill[c].push((0, i));
                        } else {
                            let src = last_src(&g.locf[c], &mut plan, c);
                            plan.fill[c].push(src);
                        }
                    }
                    Fill::Interpolate => {
                        let fv = floats[c].as_ref().filter(|a| a.is_valid(i));
                        match (fv, times[i]) {
                            (Some(a), Some(t)) => {
                                let v = a.as_primitive::<arrow::datatypes::Float64Type>().value(i);
                                g.prev[c] = Some((t, v));
                                plan.fill[c].push((0, i));
                            }
                            (_, Some(t)) => {
                                let next = next_valid[c]
                                    .get(i + 1)
                                    .copied()
                                    .flatten()
                                    .filter(|j| rows.row(*j) == rows.row(i))
                                    .and_then(|j| point(&times, &floats, c, j))
                                    .or(g.next_seed[c]);
                                let k = plan.computed[c].len();
                                plan.computed[c].push(lerp(g.prev[c], next, t));
                                plan.fill[c].push((COMPUTED, k));
                            }
                            (_, None) => plan.fill[c].push((0, i)),
                        }
                    }
                }
            }
            g.last_row = Some(i);
            self.group = Some(g);
            self.flush_if_full(&mut plan, &unit, &mut out)?;
        }
        // A group that ends at the cut is complete.
        if cut < n
            && let Some(g) = self.group.take()
        {
            if g.key.row() == rows.row(cut) {
                self.group = Some(g);
            } else {
                self.finish_group(g, &unit, &mut plan, &mut out)?;
            }
        }
        self.flush(&mut plan, &unit, &mut out)?;
        // Values the next unit refers to.
        if let Some(g) = self.group.as_mut() {
            if let Some(r) = g.last_row.take() {
                g.rep = Some(unit.slice(r, 1));
            }
            for (c, f) in self.spec.fills.iter().enumerate() {
                if let Last::Row(r) = g.locf[c] {
                    g.locf[c] = Last::Value(unit.column(f.col).slice(r, 1));
                }
            }
        }
        if cut < n {
            let rest = unit.slice(cut, n - cut);
            self.reservation.try_resize(rest.get_array_memory_size())?;
            out.carry = Some(rest);
        } else {
            self.reservation.free();
        }
        Ok(out)
    }

    /// Fills the last group up to finish; with no rows and no keys, the one group.
    async fn finish(&mut self) -> DfResult<Vec<RecordBatch>> {
        let empty = RecordBatch::new_empty(self.schema.clone());
        let mut out = Output::default();
        let mut plan = self.new_plan();
        if let Some(g) = self.group.take() {
            self.finish_group(g, &empty, &mut plan, &mut out)?;
        } else if !self.seen_rows && self.spec.keys.is_empty() {
            // One all-NULL row stands for the group (it has no keys to read); its
            // schema is all nullable, the bucket's included.
            let schema = Arc::new(Schema::new(
                self.schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect::<Vec<_>>(),
            ));
            let nulls = RecordBatch::try_new(
                schema.clone(),
                schema
                    .fields()
                    .iter()
                    .map(|f| new_null_array(f.data_type(), 1))
                    .collect(),
            )?;
            let rows = self.key_rows(&nulls)?;
            let mut g = self.start_group(&nulls, 0, rows.row(0).owned()).await?;
            g.rep = Some(nulls);
            g.last_row = None;
            self.finish_group(g, &empty, &mut plan, &mut out)?;
        }
        self.flush(&mut plan, &empty, &mut out)?;
        Ok(out.batches)
    }

    fn new_plan(&self) -> Plan {
        let k = self.spec.fills.len();
        Plan {
            fill: vec![vec![]; k],
            extra: vec![vec![]; k],
            computed: vec![vec![]; k],
            ..Default::default()
        }
    }

    /// A group starting at row `i` of `unit`: its seeds and first bucket.
    async fn start_group(
        &mut self,
        unit: &RecordBatch,
        i: usize,
        key: OwnedRow,
    ) -> DfResult<Group> {
        let k = self.spec.fills.len();
        let mut g = Group {
            key,
            rep: None,
            last_row: None,
            cursor: Some(self.range.first()?),
            locf: vec![Last::None; k],
            prev: vec![None; k],
            next_seed: vec![None; k],
        };
        for c in 0..k {
            let f = self.spec.fills[c].clone();
            let dt = self.schema.field(f.col).data_type().clone();
            if let Some(s) = &f.prev {
                let v = self.seed(s, unit, i, (c, false)).await?;
                match f.kind {
                    Fill::Locf { .. } => {
                        if !v.is_null() {
                            g.locf[c] = Last::Value(v.cast_to(&dt)?.to_array_of_size(1)?);
                        }
                    }
                    Fill::Interpolate => g.prev[c] = seed_point(&v)?,
                }
            }
            if let Some(s) = &f.next {
                let v = self.seed(s, unit, i, (c, true)).await?;
                g.next_seed[c] = seed_point(&v)?;
            }
        }
        Ok(g)
    }

    /// Evaluates a seed with the group's key values (row `i` of `unit`).
    async fn seed(
        &mut self,
        s: &Seed,
        unit: &RecordBatch,
        i: usize,
        id: (usize, bool),
    ) -> DfResult<ScalarValue> {
        if s.outer.is_empty()
            && let Some(v) = self.constant_seeds.get(&id)
        {
            return Ok(v.clone());
        }
        let mut values = vec![];
        for (c, k) in &s.outer {
            values.push((c.clone(), ScalarValue::try_from_array(unit.column(*k), i)?));
        }
        let expr = bind_outer(s.expr.clone(), &values)?;
        let plan = LogicalPlanBuilder::empty(true)
            .project(vec![expr.alias("seed")])?
            .build()?;
        let physical = self.spec.state.create_physical_plan(&plan).await?;
        let batches =
            datafusion::physical_plan::collect(physical, self.spec.state.task_ctx()).await?;
        let v = match batches.iter().find(|b| b.num_rows() > 0) {
            Some(b) => ScalarValue::try_from_array(b.column(0), 0)?,
            None => ScalarValue::Null,
        };
        if s.outer.is_empty() {
            self.constant_seeds.insert(id, v.clone());
        }
        Ok(v)
    }

    /// One missing bucket `t` of group `g`; `key` is where its key values are.
    #[allow(clippy::too_many_arguments)]
    fn gap(
        &self,
        g: &mut Group,
        plan: &mut Plan,
        t: i64,
        key: Src,
        next_row: impl Fn(usize) -> Option<usize>,
        times: &[Option<i64>],
        floats: &[Option<ArrayRef>],
    ) -> DfResult<()> {
        plan.times.push(Some(t));
        plan.keys.push(key);
        plan.real.push(None);
        for (c, f) in self.spec.fills.iter().enumerate() {
            match f.kind {
                Fill::Locf { .. } => {
                    let src = last_src(&g.locf[c], plan, c);
                    plan.fill[c].push(src);
                }
                Fill::Interpolate => {
                    let next = next_row(c)
                        .and_then(|j| point(times, floats, c, j))
                        .or(g.next_seed[c]);
                    let k = plan.computed[c].len();
                    plan.computed[c].push(lerp(g.prev[c], next, t));
                    plan.fill[c].push((COMPUTED, k));
                }
            }
        }
        Ok(())
    }

    /// The buckets after the group's last row, up to finish.
    fn finish_group(
        &mut self,
        mut g: Group,
        unit: &RecordBatch,
        plan: &mut Plan,
        out: &mut Output,
    ) -> DfResult<()> {
        let mut key = match (g.last_row, &g.rep) {
            (Some(r), _) => (0, r),
            (None, Some(rep)) => {
                plan.reps.push(rep.clone());
                (plan.reps.len(), 0)
            }
            (None, None) => (0, 0),
        };
        while let Some(c) = g.cursor {
            let cu = self.range.to_utc(c)?;
            if cu >= self.range.finish {
                break;
            }
            g.cursor = Some(self.range.next(c)?);
            self.gap(&mut g, plan, cu, key, |_| None, &[], &[])?;
            if plan.times.len() >= self.batch_size {
                self.flush(plan, unit, out)?;
                // Sources of the next batch: the group's key row again, and the
                // locf values (rows of the unit stay valid).
                if key.0 != 0 {
                    if let Some(rep) = &g.rep {
                        plan.reps.push(rep.clone());
                    }
                    key = (plan.reps.len(), 0);
                }
            }
        }
        Ok(())
    }

    fn flush_if_full(&self, plan: &mut Plan, unit: &RecordBatch, out: &mut Output) -> DfResult<()> {
        if plan.times.len() >= self.batch_size {
            self.flush(plan, unit, out)?;
        }
        Ok(())
    }

    /// Builds the planned rows into a batch.
    fn flush(&self, plan: &mut Plan, unit: &RecordBatch, out: &mut Output) -> DfResult<()> {
        let m = plan.times.len();
        if m == 0 {
            return Ok(());
        }
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for (c, field) in self.schema.fields().iter().enumerate() {
            let dt = field.data_type();
            let unit_col = if unit.num_rows() > 0 {
                unit.column(c).clone()
            } else {
                new_null_array(dt, 1)
            };
            let col: ArrayRef = if c == self.spec.bucket && dt.is_integer() {
                let arr = arrow::array::Int64Array::from(plan.times.clone());
                arrow::compute::cast(&arr, dt)?
            } else if c == self.spec.bucket {
                let arr = TimestampMicrosecondArray::from(plan.times.clone());
                match dt {
                    DataType::Timestamp(TimeUnit::Microsecond, tz) => {
                        Arc::new(arr.with_timezone_opt(tz.clone()))
                    }
                    other => arrow::compute::cast(&arr, other)?,
                }
            } else if self.spec.keys.contains(&c) {
                let mut sources: Vec<&dyn Array> = vec![unit_col.as_ref()];
                for r in &plan.reps {
                    sources.push(r.column(c).as_ref());
                }
                interleave(&sources, &plan.keys)?
            } else if let Some(fc) = self.spec.fills.iter().position(|f| f.col == c) {
                let null = new_null_array(dt, 1);
                let computed: Option<ArrayRef> = match self.spec.fills[fc].kind {
                    Fill::Interpolate => Some(from_floats(&plan.computed[fc], dt)?),
                    Fill::Locf { .. } => None,
                };
                let mut sources: Vec<&dyn Array> = vec![unit_col.as_ref(), null.as_ref()];
                for e in &plan.extra[fc] {
                    sources.push(e.as_ref());
                }
                let base = sources.len();
                if let Some(a) = &computed {
                    sources.push(a.as_ref());
                }
                let idx: Vec<Src> = plan.fill[fc]
                    .iter()
                    .map(|(s, r)| if *s == COMPUTED { (base, *r) } else { (*s, *r) })
                    .collect();
                interleave(&sources, &idx)?
            } else {
                let null = new_null_array(dt, 1);
                let idx: Vec<Src> = plan
                    .real
                    .iter()
                    .map(|r| match r {
                        Some(i) => (0, *i),
                        None => (1, 0),
                    })
                    .collect();
                interleave(&[unit_col.as_ref(), null.as_ref()], &idx)?
            };
            cols.push(col);
        }
        out.batches
            .push(RecordBatch::try_new(self.schema.clone(), cols)?);
        *plan = self.new_plan();
        Ok(())
    }
}

/// Where a `locf` column's last value is, in `plan`'s sources for column `c`.
fn last_src(last: &Last, plan: &mut Plan, c: usize) -> Src {
    match last {
        Last::None => (1, 0),
        Last::Row(r) => (0, *r),
        Last::Value(a) => {
            let k = match plan.extra[c].iter().position(|e| Arc::ptr_eq(e, a)) {
                Some(k) => k,
                None => {
                    plan.extra[c].push(a.clone());
                    plan.extra[c].len() - 1
                }
            };
            (2 + k, 0)
        }
    }
}

/// (time, value) of row `j` of interpolated column `c`.
fn point(
    times: &[Option<i64>],
    floats: &[Option<ArrayRef>],
    c: usize,
    j: usize,
) -> Option<(i64, f64)> {
    let a = floats.get(c)?.as_ref()?;
    let t = (*times.get(j)?)?;
    a.is_valid(j).then(|| {
        (
            t,
            a.as_primitive::<arrow::datatypes::Float64Type>().value(j),
        )
    })
}

fn lerp(prev: Option<(i64, f64)>, next: Option<(i64, f64)>, t: i64) -> Option<f64> {
    let ((t0, v0), (t1, v1)) = (prev?, next?);
    if t1 == t0 {
        return None;
    }
    let (t0, t1, t) = (t0 as f64, t1 as f64, t as f64);
    Some(v0 + (v1 - v0) * (t - t0) / (t1 - t0))
}

/// Interpolated values in the column's type; integers are rounded, as PostgreSQL
/// rounds when interpolating them.
fn from_floats(v: &[Option<f64>], dt: &DataType) -> DfResult<ArrayRef> {
    if matches!(dt, DataType::Decimal128(..) | DataType::Decimal256(..)) {
        // Through the shortest text of each float: 2.5, not 2.4999999999999998.
        let text: arrow::array::StringArray = v.iter().map(|x| x.map(|f| f.to_string())).collect();
        return Ok(arrow::compute::cast(&text, dt)?);
    }
    let round = matches!(dt, DataType::Int16 | DataType::Int32 | DataType::Int64);
    let arr: ArrayRef = Arc::new(Float64Array::from(
        v.iter()
            .map(|x| x.map(|f| if round { f.round() } else { f }))
            .collect::<Vec<_>>(),
    ));
    Ok(arrow::compute::cast(&arr, dt)?)
}

/// Bucket column values as µs since the epoch (integer time: the numbers).
fn bucket_times(col: &ArrayRef) -> DfResult<Vec<Option<i64>>> {
    if col.data_type().is_integer() {
        let a = arrow::compute::cast(col, &DataType::Int64)?;
        return Ok(a
            .as_primitive::<arrow::datatypes::Int64Type>()
            .iter()
            .collect());
    }
    let a = match col.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => col.clone(),
        _ => arrow::compute::cast(col, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
    };
    Ok(a.as_primitive::<TimestampMicrosecondType>()
        .iter()
        .collect())
}

/// A `(time, value)` seed record as µs and a float.
fn seed_point(v: &ScalarValue) -> DfResult<Option<(i64, f64)>> {
    let ScalarValue::Struct(st) = v else {
        if v.is_null() {
            return Ok(None);
        }
        return Err(Error::sql(
            "42804",
            "interpolate: prev and next must be (time, value) records",
        )
        .into());
    };
    if st.num_columns() != 2 || st.is_null(0) {
        return Ok(None);
    }
    let t = bucket_times(st.column(0))?;
    let v = arrow::compute::cast(st.column(1), &DataType::Float64)?;
    let v = v.as_primitive::<arrow::datatypes::Float64Type>();
    match (t.first().copied().flatten(), v.is_valid(0)) {
        (Some(t), true) => Ok(Some((t, v.value(0)))),
        _ => Ok(None),
    }
}

/// `e` with its references to the outer query replaced by the group's values.
fn bind_outer(e: Expr, values: &[(Column, ScalarValue)]) -> DfResult<Expr> {
    let lookup = |c: &Column| {
        values
            .iter()
            .find(|(o, _)| o == c)
            .map(|(_, v)| Expr::Literal(v.clone(), None))
    };
    let bind_plan = |p: LogicalPlan| -> DfResult<LogicalPlan> {
        p.transform_up_with_subqueries(|node| {
            node.map_expressions(|x| {
                x.transform(|y| match &y {
                    Expr::OuterReferenceColumn(_, c) => match lookup(c) {
                        Some(l) => Ok(Transformed::yes(l)),
                        None => Ok(Transformed::no(y)),
                    },
                    _ => Ok(Transformed::no(y)),
                })
            })
        })
        .map(|t| t.data)
    };
    e.transform(|x| match x {
        Expr::ScalarSubquery(sq) if !sq.outer_ref_columns.is_empty() => {
            let plan = bind_plan(sq.subquery.as_ref().clone())?;
            Ok(Transformed::yes(Expr::ScalarSubquery(
                datafusion::logical_expr::Subquery {
                    subquery: Arc::new(plan),
                    outer_ref_columns: vec![],
                    spans: sq.spans.clone(),
                },
            )))
        }
        Expr::OuterReferenceColumn(_, ref c) => match lookup(c) {
            Some(l) => Ok(Transformed::yes(l)),
            None => Ok(Transformed::no(x)),
        },
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}
