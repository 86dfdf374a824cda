//! Aggregates answered from file statistics: `count(*)`, `count(c)`, `min(c)`,
//! `max(c)`, and `sum(c)` / `avg(c)` of float8 columns, without GROUP BY over a
//! hypertable filtered on time alone. Files wholly
//! inside the filter (for line-protocol tables: overlapping no other source, so no
//! row of theirs is merged away) give their row count, null counts, min/max and sums
//! from the catalog; the rest (files the filter cuts, memtable rows) is aggregated as
//! usual, and one aggregate over both parts gives the answer.

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, new_null_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, ScalarValue};
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    Aggregate, AggregateUDF, Expr, LogicalPlan, Projection, TableProviderFilterPushDown,
    TableScanBuilder, TableType,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

use super::provider::{
    HypertableProvider, all_match, dirty_ranges, file_time_range, is_time_filter, kept_sources,
    staged_ops,
};
use super::variant::{hypertable_of, leaf_plan_methods, one_partition};
use crate::catalog::{FileMeta, TableDef};
use crate::storage;

/// The optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct StatsAnswers;

/// One aggregate of the query, as the parts compute it.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// `count(*)`: rows.
    Rows,
    /// `count(c)`: rows where column `c` (by position in the table) is not NULL.
    NonNull(usize),
    /// `min(c)` / `max(c)`.
    Min(usize),
    Max(usize),
    /// The sum of a float8 column's non-NULL values (NULL when there is none).
    Sum(usize),
}

impl OptimizerRule for StatsAnswers {
    fn name(&self) -> &str {
        "sundial_stats_answers"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(agg) = &plan else {
            return Ok(Transformed::no(plan));
        };
        match rewrite(agg)? {
            Some(p) => Ok(Transformed::yes(p)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// One aggregate of the query, in terms of the parts.
enum Agg {
    /// `count(..)`: the sum of a count part (0 when there is no part).
    Count(Part),
    /// `min(c)` / `max(c)`, combined by the query's own function.
    Extreme(Part, Arc<AggregateUDF>),
    /// `sum(c)` of a float8 column: the sum of the parts' sums.
    Sum(usize),
    /// `avg(c)` of a float8 column: the sum of the sums over the sum of the counts.
    Avg(usize),
}

/// The aggregate `e` in terms of parts, when the statistics can serve it.
fn agg_of(e: &Expr, table: &TableDef) -> Option<Agg> {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    let Expr::AggregateFunction(AggregateFunction { func, params }) = e else {
        return None;
    };
    if params.distinct
        || params.filter.is_some()
        || !params.order_by.is_empty()
        || params.null_treatment.is_some()
    {
        return None;
    }
    let column = |e: &Expr| -> Option<usize> {
        let Expr::Column(c) = e else { return None };
        table.columns.iter().position(|col| col.name == c.name)
    };
    let supported = |i: usize| storage::stats_supported(&table.columns[i].sql_type.to_arrow());
    let float8 = |i: usize| table.columns[i].sql_type.to_arrow() == DataType::Float64;
    match (func.name(), params.args.as_slice()) {
        ("count", [Expr::Literal(v, _)]) if !v.is_null() => Some(Agg::Count(Part::Rows)),
        ("count", [a]) => Some(Agg::Count(Part::NonNull(column(a)?))),
        ("min", [a]) => {
            let i = column(a).filter(|i| supported(*i))?;
            Some(Agg::Extreme(Part::Min(i), func.clone()))
        }
        ("max", [a]) => {
            let i = column(a).filter(|i| supported(*i))?;
            Some(Agg::Extreme(Part::Max(i), func.clone()))
        }
        ("sum", [a]) => Some(Agg::Sum(column(a).filter(|i| float8(*i))?)),
        ("avg", [a]) => Some(Agg::Avg(column(a).filter(|i| float8(*i))?)),
        _ => None,
    }
}

/// The position of `p` in `parts`, added when new.
fn part_index(parts: &mut Vec<Part>, p: Part) -> usize {
    match parts.iter().position(|q| *q == p) {
        Some(i) => i,
        None => {
            parts.push(p);
            parts.len() - 1
        }
    }
}

/// `Aggregate(no groups; count/min/max/sum/avg) <- TableScan(hypertable, time
/// filters)` as `Projection <- Aggregate(of the parts) <- TableScan(parts)`.
fn rewrite(agg: &Aggregate) -> DfResult<Option<LogicalPlan>> {
    if !agg.group_expr.is_empty() || agg.aggr_expr.is_empty() {
        return Ok(None);
    }
    let LogicalPlan::TableScan(scan) = agg.input.as_ref() else {
        return Ok(None);
    };
    let Some(table) = hypertable_of(scan) else {
        return Ok(None);
    };
    if scan.fetch.is_some() || !scan.filters.iter().all(|f| is_time_filter(&table, f)) {
        return Ok(None);
    }
    let mut aggs = vec![];
    for e in &agg.aggr_expr {
        let Some(a) = agg_of(e, &table) else {
            return Ok(None);
        };
        aggs.push(a);
    }
    let schema = table.schema();
    // The query's own types: the rewrite must not change them.
    for (i, a) in aggs.iter().enumerate() {
        let ty = match a {
            Agg::Count(_) => DataType::Int64,
            Agg::Extreme(Part::Min(c) | Part::Max(c), _) => schema.field(*c).data_type().clone(),
            Agg::Extreme(..) => return Ok(None),
            Agg::Sum(_) | Agg::Avg(_) => DataType::Float64,
        };
        if agg.schema.field(i).data_type() != &ty {
            return Ok(None);
        }
    }
    // The parts, each once, and how the outer aggregate combines each.
    let sum = datafusion::functions_aggregate::sum::sum_udaf();
    let mut parts: Vec<Part> = vec![];
    let mut combine: Vec<Arc<AggregateUDF>> = vec![];
    let mut uses: Vec<Vec<usize>> = vec![];
    for a in &aggs {
        let wanted: Vec<(Part, Arc<AggregateUDF>)> = match a {
            Agg::Count(p) => vec![(p.clone(), sum.clone())],
            Agg::Extreme(p, f) => vec![(p.clone(), f.clone())],
            Agg::Sum(c) => vec![(Part::Sum(*c), sum.clone())],
            Agg::Avg(c) => vec![
                (Part::Sum(*c), sum.clone()),
                (Part::NonNull(*c), sum.clone()),
            ],
        };
        let mut at = vec![];
        for (p, f) in wanted {
            let before = parts.len();
            let i = part_index(&mut parts, p);
            if i == before {
                combine.push(f);
            }
            at.push(i);
        }
        uses.push(at);
    }
    let fields: Vec<Field> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let ty = match p {
                Part::Rows | Part::NonNull(_) => DataType::Int64,
                Part::Min(c) | Part::Max(c) => schema.field(*c).data_type().clone(),
                Part::Sum(_) => DataType::Float64,
            };
            Field::new(format!("__sundial_part_{i}"), ty, true)
        })
        .collect();
    let inner = source_as_provider(&scan.source)?;
    // The source schema also holds the table's columns (after the parts), so that the
    // filters' columns resolve: re-simplifying a plan kept with parameters unwraps
    // `CAST(time AS ..) >= literal` as the first optimization of its text did. The
    // scan projects the parts only.
    let source_schema = Arc::new(Schema::new(
        fields
            .iter()
            .cloned()
            .chain(inner.schema().fields().iter().map(|f| f.as_ref().clone()))
            .collect::<Vec<_>>(),
    ));
    let provider = StatsProvider {
        inner,
        table_name: table.name.clone(),
        parts: parts.clone(),
        schema: Arc::new(Schema::new(fields.clone())),
        source_schema,
    };
    let parts_scan = LogicalPlan::TableScan(
        TableScanBuilder::new(
            scan.table_name.clone(),
            provider_as_source(Arc::new(provider)),
        )
        .with_projection(Some((0..fields.len()).collect()))
        .with_filters(scan.filters.clone())
        .build()?,
    );
    let mut outer = vec![];
    for (i, (f, func)) in fields.iter().zip(&combine).enumerate() {
        let col = Expr::Column(Column::new(Some(scan.table_name.clone()), f.name()));
        outer.push(
            Expr::AggregateFunction(AggregateFunction::new_udf(
                func.clone(),
                vec![col],
                false,
                None,
                vec![],
                None,
            ))
            .alias(format!("__sundial_combined_{i}")),
        );
    }
    let combined = Aggregate::try_new(Arc::new(parts_scan), vec![], outer)?;
    let part = |i: usize| Expr::Column(Column::from_name(format!("__sundial_combined_{i}")));
    // No part at all (nothing matched): a count is 0, not NULL.
    let count = |i: usize| {
        datafusion::functions::expr_fn::coalesce(vec![
            part(i),
            Expr::Literal(ScalarValue::Int64(Some(0)), None),
        ])
    };
    let mut exprs = vec![];
    for (i, (a, at)) in aggs.iter().zip(&uses).enumerate() {
        let value = match a {
            Agg::Count(_) => count(at[0]),
            Agg::Extreme(..) | Agg::Sum(_) => part(at[0]),
            // The sum is NULL exactly when the count is 0.
            Agg::Avg(_) => Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                Box::new(part(at[0])),
                datafusion::logical_expr::Operator::Divide,
                Box::new(Expr::Cast(datafusion::logical_expr::Cast::new(
                    Box::new(count(at[1])),
                    DataType::Float64,
                ))),
            )),
        };
        let (q, f) = agg.schema.qualified_field(i);
        exprs.push(value.alias_qualified(q.cloned(), f.name()));
    }
    let projection = Projection::try_new(exprs, Arc::new(LogicalPlan::Aggregate(combined)))?;
    Ok(Some(LogicalPlan::Projection(projection)))
}

/// The parts of a query's aggregates over one hypertable: a row per file answered
/// from its statistics, and a row aggregated from everything else.
#[derive(Debug)]
struct StatsProvider {
    inner: Arc<dyn TableProvider>,
    table_name: String,
    parts: Vec<Part>,
    /// The parts, which a scan produces.
    schema: SchemaRef,
    /// The parts, then the table's columns (which the filters name; never scanned).
    source_schema: SchemaRef,
}

/// The rows a scan of `provider` with `filters` is estimated to read: a hypertable's
/// (alone or under a statistics answer, counted as if read) from its sources' time
/// ranges, another table's from its statistics; `None` when unknown.
pub fn estimated_scan_rows(provider: &Arc<dyn TableProvider>, filters: &[Expr]) -> Option<u64> {
    let any = provider.as_ref() as &dyn std::any::Any;
    let any = match any.downcast_ref::<StatsProvider>() {
        Some(s) => s.inner.as_ref() as &dyn std::any::Any,
        None => any,
    };
    if let Some(h) = any.downcast_ref::<HypertableProvider>() {
        return Some(h.estimated_rows(filters));
    }
    let stats = provider.statistics()?;
    stats.num_rows.get_value().map(|n| *n as u64)
}

#[async_trait]
impl TableProvider for StatsProvider {
    fn schema(&self) -> SchemaRef {
        self.source_schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        self.inner.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let h = (self.inner.as_ref() as &dyn std::any::Any)
            .downcast_ref::<HypertableProvider>()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Internal(
                    "statistics answer over a table that is not a hypertable".into(),
                )
            })?;
        let table = h.table().clone();
        let schema = table.schema();
        // The columns the parts read (the time column when none: a scan yields rows).
        let mut read: Vec<usize> = vec![];
        for p in &self.parts {
            if let Part::NonNull(c) | Part::Min(c) | Part::Max(c) | Part::Sum(c) = p
                && !read.contains(c)
            {
                read.push(*c);
            }
        }
        if read.is_empty() {
            read.push(
                table
                    .time_column
                    .as_ref()
                    .and_then(|t| schema.index_of(t).ok())
                    .unwrap_or(0),
            );
        }
        let (rest, answered) = if !staged_ops(state, table.id).is_empty() {
            // A transaction's own changes: everything is read, through the scan that
            // shows them.
            let plan = self.inner.scan(state, Some(&read), filters, None).await?;
            (plan, None)
        } else {
            let view = h.engine().view(table.id).ok_or_else(|| {
                datafusion::error::DataFusionError::from(crate::Error::UndefinedTable(
                    table.name.clone(),
                ))
            })?;
            let stats = h.engine().file_stats().for_table(&view.table);
            let chosen = answerable(state, &view, filters, &self.parts, &stats)?;
            let batch = self.stats_batch(&view.table, &chosen)?;
            let files = chosen.iter().filter(|c| **c).count();
            let rows: u64 = view
                .table
                .files
                .iter()
                .zip(&chosen)
                .filter(|(_, c)| **c)
                .map(|(f, _)| f.rows)
                .sum();
            let plan = h.scan_view(state, view, &chosen, Some(&read), filters, None)?;
            let exec = FileStatsExec {
                table: self.table_name.clone(),
                files,
                rows,
                props: one_partition(batch.schema()),
                batch,
            };
            (plan, Some(exec))
        };
        let rest = self.aggregate(rest, &read)?;
        let all: Arc<dyn ExecutionPlan> = match answered {
            Some(exec) => UnionExec::try_new(vec![Arc::new(exec), rest])?,
            None => rest,
        };
        match projection {
            Some(cols) if cols.iter().all(|c| *c < self.parts.len()) => {
                if cols.len() == self.parts.len() && cols.iter().enumerate().all(|(i, c)| i == *c) {
                    Ok(all)
                } else {
                    super::provider::select_columns(all, cols)
                }
            }
            _ => Err(datafusion::error::DataFusionError::Internal(
                "a statistics-parts scan projects its parts only".into(),
            )),
        }
    }
}

/// Which of the table's files give their part of the answer from statistics: read by
/// the query, wholly inside its filters, overlapping no other source of a table that
/// merges duplicates, and with the statistics every part needs.
fn answerable(
    state: &dyn Session,
    view: &crate::write::TableView,
    filters: &[Expr],
    parts: &[Part],
    stats: &crate::storage::stats_cache::TableStats,
) -> DfResult<Vec<bool>> {
    let table = &view.table;
    if table.files.is_empty() {
        return Ok(vec![]);
    }
    let schema = table.schema();
    let (kept, _) = kept_sources(state, table, &view.mem, filters, stats)?;
    let whole = match conjunction(filters.to_vec()) {
        Some(f) => all_match(state, &schema, &f, stats)?,
        None => vec![true; table.files.len()],
    };
    let dirty = if table.dedups() {
        let files: Vec<&FileMeta> = table.files.iter().collect();
        let mem: Vec<&crate::write::MemBatch> =
            view.mem.iter().flat_map(|(_, b)| b.iter()).collect();
        dirty_ranges(table, &files, &mem)
    } else {
        vec![]
    };
    Ok(table
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (lo, hi) = file_time_range(table, f);
            kept[i]
                && whole[i]
                && !dirty.iter().any(|(a, b)| lo <= *b && *a <= hi)
                && parts.iter().all(|p| file_part(table, f, p).is_some())
        })
        .collect())
}

/// What file `f` holds for part `p`, from its statistics: a count, or the min/max as
/// text (`None` inside when the column is all NULL there); `None` when unknown.
fn file_part(table: &TableDef, f: &FileMeta, p: &Part) -> Option<FilePart> {
    let column = |c: usize| &table.columns[c].name;
    // A column added after the file was written is all NULL in it.
    let stat = |c: usize| f.stats.iter().find(|s| &s.column == column(c));
    let nulls = |c: usize| match stat(c) {
        Some(s) => s.null_count,
        None => Some(f.rows),
    };
    match p {
        Part::Rows => Some(FilePart::Count(f.rows)),
        Part::NonNull(c) => Some(FilePart::Count(f.rows.checked_sub(nulls(*c)?)?)),
        Part::Min(c) | Part::Max(c) => {
            let all_null = nulls(*c)? == f.rows;
            if all_null {
                return Some(FilePart::Value(None));
            }
            let s = stat(*c)?;
            let v = if matches!(p, Part::Min(_)) {
                s.min.clone()
            } else {
                s.max.clone()
            };
            Some(FilePart::Value(Some(v?)))
        }
        Part::Sum(c) => {
            if nulls(*c)? == f.rows {
                return Some(FilePart::Sum(None));
            }
            let v: f64 = stat(*c)?.sum.as_deref()?.parse().ok()?;
            Some(FilePart::Sum(Some(v)))
        }
    }
}

enum FilePart {
    Count(u64),
    Value(Option<String>),
    Sum(Option<f64>),
}

impl StatsProvider {
    /// One row per chosen file with its parts.
    fn stats_batch(&self, table: &TableDef, chosen: &[bool]) -> DfResult<RecordBatch> {
        let files: Vec<&FileMeta> = table
            .files
            .iter()
            .zip(chosen)
            .filter(|(_, c)| **c)
            .map(|(f, _)| f)
            .collect();
        let mut columns: Vec<ArrayRef> = vec![];
        for (i, p) in self.parts.iter().enumerate() {
            let ty = self.schema.field(i).data_type();
            let parts: Vec<Option<FilePart>> =
                files.iter().map(|f| file_part(table, f, p)).collect();
            let col: ArrayRef = match p {
                Part::Rows | Part::NonNull(_) => {
                    Arc::new(Int64Array::from_iter(parts.iter().map(|v| match v {
                        Some(FilePart::Count(n)) => i64::try_from(*n).ok(),
                        _ => None,
                    })))
                }
                Part::Sum(_) => Arc::new(arrow::array::Float64Array::from_iter(parts.iter().map(
                    |v| match v {
                        Some(FilePart::Sum(v)) => *v,
                        _ => None,
                    },
                ))),
                Part::Min(_) | Part::Max(_) => {
                    let texts: Vec<Option<&str>> = parts
                        .iter()
                        .map(|v| match v {
                            Some(FilePart::Value(Some(s))) => Some(s.as_str()),
                            _ => None,
                        })
                        .collect();
                    match storage::stats_array(&texts, ty) {
                        Some(a) => a,
                        None if files.is_empty() => new_null_array(ty, 0),
                        None => {
                            return Err(datafusion::error::DataFusionError::Internal(format!(
                                "statistics of {} do not read as {ty}",
                                table.name
                            )));
                        }
                    }
                }
            };
            columns.push(col);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// The parts of the rows `input` yields (the columns `read`, in that order).
    fn aggregate(
        &self,
        input: Arc<dyn ExecutionPlan>,
        read: &[usize],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        use datafusion::physical_expr::expressions::{Column as PCol, Literal};
        let input_schema = input.schema();
        let mut exprs = vec![];
        for (i, p) in self.parts.iter().enumerate() {
            let arg = |c: &usize| -> DfResult<Arc<dyn PhysicalExpr>> {
                let at = read.iter().position(|r| r == c).unwrap_or(0);
                Ok(Arc::new(PCol::new(input_schema.field(at).name(), at)))
            };
            let (func, args): (Arc<AggregateUDF>, Vec<Arc<dyn PhysicalExpr>>) = match p {
                Part::Rows => (
                    datafusion::functions_aggregate::count::count_udaf(),
                    vec![Arc::new(Literal::new(ScalarValue::Int64(Some(1))))],
                ),
                Part::NonNull(c) => (
                    datafusion::functions_aggregate::count::count_udaf(),
                    vec![arg(c)?],
                ),
                Part::Min(c) => (
                    datafusion::functions_aggregate::min_max::min_udaf(),
                    vec![arg(c)?],
                ),
                Part::Max(c) => (
                    datafusion::functions_aggregate::min_max::max_udaf(),
                    vec![arg(c)?],
                ),
                Part::Sum(c) => (
                    datafusion::functions_aggregate::sum::sum_udaf(),
                    vec![arg(c)?],
                ),
            };
            exprs.push(Arc::new(
                AggregateExprBuilder::new(func, args)
                    .schema(input_schema.clone())
                    .alias(self.schema.field(i).name())
                    .build()?,
            ));
        }
        let filters = vec![None; exprs.len()];
        let partial = Arc::new(AggregateExec::try_new(
            AggregateMode::Partial,
            PhysicalGroupBy::new_single(vec![]),
            exprs.clone(),
            filters.clone(),
            input,
            input_schema.clone(),
        )?);
        let one = Arc::new(CoalescePartitionsExec::new(partial));
        Ok(Arc::new(AggregateExec::try_new(
            AggregateMode::Final,
            PhysicalGroupBy::new_single(vec![]),
            exprs,
            filters,
            one,
            input_schema,
        )?))
    }
}

/// The parts of the files answered from their statistics, one row per file.
#[derive(Debug)]
struct FileStatsExec {
    table: String,
    files: usize,
    rows: u64,
    batch: RecordBatch,
    props: Arc<PlanProperties>,
}

impl DisplayAs for FileStatsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "FileStatsExec: table={}, files_answered_from_statistics={}, rows={}",
            self.table, self.files, self.rows
        )
    }
}

impl ExecutionPlan for FileStatsExec {
    fn name(&self) -> &str {
        "FileStatsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    leaf_plan_methods!();

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let batch = self.batch.clone();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            batch.schema(),
            futures::stream::iter([Ok(batch)]),
        )))
    }
}
