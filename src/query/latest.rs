//! Newest rows per series without reading every row. An optimizer rule finds the
//! queries that only need each series' newest rows — `DISTINCT ON (tags) ... ORDER
//! BY tags, time DESC`, `last(v, time)` / `max(time)` `GROUP BY tags`, `row_number()
//! OVER (PARTITION BY tags ORDER BY time DESC) <= n` (what LATERAL ... LIMIT n
//! becomes) and `ORDER BY time DESC LIMIT k` — and gives them a scan that reads, per
//! source, only its newest rows per series: derived once per immutable chunk file
//! and kept, computed for memtable batches. The query's own operators then run on
//! those rows, so the answer is the one the full scan gives.

use std::fmt;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{cast, concat_batches, take_record_batch};
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Expr, Filter, LogicalPlan, Operator, Projection, Sort, SortExpr,
    WindowFunctionDefinition,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

use super::provider::{HypertableProvider, dirty_ranges, kept, kept_sources, select_columns};
use super::variant::{ScanVariant, hypertable_of, leaf_plan_methods, one_partition, rewire_scans};
use crate::storage;
use crate::storage::derived_rows::DerivedRows;

/// Largest `n` (rows per series, or `LIMIT k`) the rule serves.
const MAX_N: usize = 10_000;

/// The optimizer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct LatestRows;

impl OptimizerRule for LatestRows {
    fn name(&self) -> &str {
        "sundial_latest_rows"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let target = match &plan {
            LogicalPlan::Aggregate(a) => aggregate_target(a),
            LogicalPlan::Filter(f) => window_target(f),
            LogicalPlan::Sort(s) => sort_target(s),
            _ => None,
        };
        let Some(Target {
            input,
            keys,
            time,
            n,
        }) = target
        else {
            return Ok(Transformed::no(plan));
        };
        let Some(unit) = latest_unit(input, keys, time)? else {
            return Ok(Transformed::no(plan));
        };
        rewire_scans(plan, || NewestRowsScan {
            unit: unit.clone(),
            n,
        })
    }
}

/// A node whose answer depends only on the newest `n` rows per `keys` of `input`
/// (by the column `time`, names as `input` has them).
struct Target<'a> {
    input: &'a LogicalPlan,
    keys: Vec<String>,
    time: String,
    n: usize,
}

/// The name of a plain column expression.
fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Column(c) => Some(c.name.clone()),
        _ => None,
    }
}

/// `order` is the keys in any direction, then `time` in direction `asc` (then
/// anything); returns the time column's name.
fn time_order(order: &[SortExpr], keys: &[String], asc: bool) -> Option<String> {
    let first = order
        .iter()
        .find(|s| column_name(&s.expr).is_none_or(|c| !keys.contains(&c)))?;
    let time = column_name(&first.expr)?;
    (first.asc == asc).then_some(time)
}

/// `Aggregate` grouping by columns whose every aggregate is `first_value(.. ORDER BY
/// time DESC)`, `last_value(.. ORDER BY time)` or `max(time)`.
fn aggregate_target(a: &Aggregate) -> Option<Target<'_>> {
    let keys: Vec<String> = a
        .group_expr
        .iter()
        .map(column_name)
        .collect::<Option<_>>()?;
    let mut time: Option<String> = None;
    for e in &a.aggr_expr {
        let inner = match e {
            Expr::Alias(al) => al.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
            return None;
        };
        if params.distinct
            || params.null_treatment.is_some()
            || params.args.iter().any(not_row_wise)
        {
            return None;
        }
        let t = match func.name() {
            "first_value" => time_order(&params.order_by, &keys, false)?,
            "last_value" => time_order(&params.order_by, &keys, true)?,
            "max" if params.order_by.is_empty() => column_name(params.args.first()?)?,
            _ => return None,
        };
        // `last(v, time)` is `first_value(v ORDER BY time DESC) FILTER (WHERE time IS
        // NOT NULL)`: the filter holds on every row.
        if let Some(f) = &params.filter {
            match f.as_ref() {
                Expr::IsNotNull(c) if column_name(c).as_deref() == Some(t.as_str()) => {}
                Expr::Literal(ScalarValue::Boolean(Some(true)), _) => {}
                _ => return None,
            }
        }
        if time.as_ref().is_some_and(|prev| prev != &t) {
            return None;
        }
        time = Some(t);
    }
    Some(Target {
        input: a.input.as_ref(),
        keys,
        time: time?,
        n: 1,
    })
}

/// `Filter(rn <= n [AND …])` over a `Window` computing only `rn = row_number() OVER
/// (PARTITION BY keys ORDER BY time DESC)`.
fn window_target(f: &Filter) -> Option<Target<'_>> {
    // Projections that only pass columns on may sit between the filter and the
    // window (LATERAL's rewrite keeps one).
    let mut below = f.input.as_ref();
    let mut renames: Vec<&Projection> = vec![];
    while let LogicalPlan::Projection(p) = below {
        if !p.expr.iter().all(|e| passed_column(e).is_some()) {
            return None;
        }
        renames.push(p);
        below = p.input.as_ref();
    }
    let LogicalPlan::Window(w) = below else {
        return None;
    };
    let [e] = w.window_expr.as_slice() else {
        return None;
    };
    let inner = match e {
        Expr::Alias(al) => al.expr.as_ref(),
        other => other,
    };
    let Expr::WindowFunction(wf) = inner else {
        return None;
    };
    let WindowFunction { fun, params } = wf.as_ref();
    let WindowFunctionDefinition::WindowUDF(udf) = fun else {
        return None;
    };
    if udf.name() != "row_number" || params.filter.is_some() {
        return None;
    }
    let keys: Vec<String> = params
        .partition_by
        .iter()
        .map(column_name)
        .collect::<Option<_>>()?;
    let time = time_order(&params.order_by, &keys, false)?;
    let mut rn = w.schema.fields().last()?.name().clone();
    for p in renames.iter().rev() {
        rn = p.expr.iter().find_map(|e| {
            let (name, from) = passed_column(e)?;
            (from == rn).then_some(name)
        })?;
    }
    // Other conjuncts (`rn <= 1 AND fuel_state < 0.1`, an outer filter pushed down
    // to the window) only see the rows the bound keeps.
    let n = datafusion::logical_expr::utils::split_conjunction(&f.predicate)
        .into_iter()
        .filter_map(|c| rank_bound(c, &rn))
        .min()?;
    (n <= MAX_N).then_some(Target {
        input: w.input.as_ref(),
        keys,
        time,
        n,
    })
}

/// A projection expression that is a column, maybe renamed: (output name, column).
fn passed_column(e: &Expr) -> Option<(String, String)> {
    match e {
        Expr::Column(c) => Some((c.name.clone(), c.name.clone())),
        Expr::Alias(a) => match a.expr.as_ref() {
            Expr::Column(c) => Some((a.name.clone(), c.name.clone())),
            _ => None,
        },
        _ => None,
    }
}

/// `n` when `pred` is `rn <= n`, `rn < n + 1` or `rn = n` (or the same mirrored).
fn rank_bound(pred: &Expr, rn: &str) -> Option<usize> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = pred else {
        return None;
    };
    let (op, lit) = match (column_name(left), column_name(right)) {
        (Some(c), _) if c == rn => (*op, right.as_ref()),
        (_, Some(c)) if c == rn => (op.swap()?, left.as_ref()),
        _ => return None,
    };
    let Expr::Literal(v, _) = lit else {
        return None;
    };
    let ScalarValue::Int64(Some(v)) = v.cast_to(&DataType::Int64).ok()? else {
        return None;
    };
    let n = match op {
        Operator::LtEq | Operator::Eq => v,
        Operator::Lt => v - 1,
        _ => return None,
    };
    usize::try_from(n).ok().filter(|n| *n >= 1)
}

/// `ORDER BY time DESC .. LIMIT k`.
fn sort_target(s: &Sort) -> Option<Target<'_>> {
    let k = s.fetch?;
    let first = s.expr.first()?;
    let time = column_name(&first.expr)?;
    (!first.asc && (1..=MAX_N).contains(&k)).then_some(Target {
        input: s.input.as_ref(),
        keys: vec![],
        time,
        n: k,
    })
}

/// An expression evaluated on each row by itself.
fn not_row_wise(e: &Expr) -> bool {
    e.is_volatile()
        || e.contains_outer()
        || e.exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::AggregateFunction(_)
                    | Expr::WindowFunction(_)
            ))
        })
        .unwrap_or(true)
}

/// Whether `e` is `time > c` or `time >= c` (either side) for a constant `c`: rows
/// kept by it are newer than rows it drops, so it may be applied after picking the
/// newest rows.
fn is_lower_time_bound(e: &Expr, time: &str) -> bool {
    if let Expr::IsNotNull(c) = e {
        return column_name(c).as_deref() == Some(time);
    }
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        return false;
    };
    let (op, other) = match (column_name(left), column_name(right)) {
        (Some(c), _) if c == time => (*op, right.as_ref()),
        (_, Some(c)) if c == time => match op.swap() {
            Some(op) => (op, left.as_ref()),
            None => return false,
        },
        _ => return false,
    };
    matches!(op, Operator::Gt | Operator::GtEq)
        && other.column_refs().is_empty()
        && !not_row_wise(other)
}

/// Follows `plan` (projections, filters, aliases) down to one hypertable scan and
/// returns the columns whose newest rows decide the answer (the series key of a
/// line-protocol table, else `keys`), when every filter on the way keeps the answer:
/// it reads only those columns, or is a lower bound on time.
fn latest_unit(
    plan: &LogicalPlan,
    keys: Vec<String>,
    time: String,
) -> DfResult<Option<Vec<String>>> {
    // Names followed down: the keys, the time column, then the filters' columns.
    let k = keys.len();
    let mut tracked: Vec<String> = keys;
    tracked.push(time);
    let mut conds: Vec<Vec<usize>> = vec![];
    let mut node = plan;
    let scan = loop {
        match node {
            LogicalPlan::Projection(p) => {
                for name in tracked.iter_mut() {
                    let at: Vec<usize> = p
                        .schema
                        .fields()
                        .iter()
                        .enumerate()
                        .filter(|(_, f)| f.name() == name)
                        .map(|(i, _)| i)
                        .collect();
                    let [i] = at.as_slice() else {
                        return Ok(None);
                    };
                    let base = match &p.expr[*i] {
                        Expr::Alias(a) => column_name(&a.expr),
                        e => column_name(e),
                    };
                    match base {
                        Some(b) => *name = b,
                        None => return Ok(None),
                    }
                }
                node = p.input.as_ref();
            }
            LogicalPlan::SubqueryAlias(a) => node = a.input.as_ref(),
            LogicalPlan::Filter(f) => {
                for c in split_conjunction(&f.predicate) {
                    if !classify(c, &mut tracked, &mut conds, k) {
                        return Ok(None);
                    }
                }
                node = f.input.as_ref();
            }
            LogicalPlan::TableScan(s) => {
                if s.fetch.is_some() {
                    return Ok(None);
                }
                for c in &s.filters {
                    if !classify(c, &mut tracked, &mut conds, k) {
                        return Ok(None);
                    }
                }
                break s;
            }
            _ => return Ok(None),
        }
    };
    let Some(table) = hypertable_of(scan) else {
        return Ok(None);
    };
    if table.time_column.as_deref() != Some(tracked[k].as_str()) {
        return Ok(None);
    }
    let keys = &tracked[..k];
    if keys.iter().any(|c| table.column(c).is_none()) {
        return Ok(None);
    }
    let unit: Vec<String> = if table.dedups() {
        let series = table.sort_series();
        if !keys.iter().all(|c| series.contains(c)) {
            return Ok(None);
        }
        series
    } else {
        let mut u: Vec<String> = vec![];
        for c in keys {
            if !u.contains(c) {
                u.push(c.clone());
            }
        }
        u
    };
    let kept = conds
        .iter()
        .all(|cols| cols.iter().all(|i| unit.contains(&tracked[*i])));
    Ok(kept.then_some(unit))
}

/// Records filter conjunct `c`: a lower bound on time (tracked at `time`) needs
/// nothing; otherwise its columns are tracked and must turn out to be series
/// columns. `false` when `c` cannot be moved after picking the newest rows at all.
fn classify(c: &Expr, tracked: &mut Vec<String>, conds: &mut Vec<Vec<usize>>, time: usize) -> bool {
    if is_lower_time_bound(c, &tracked[time]) {
        return true;
    }
    if not_row_wise(c) {
        return false;
    }
    let mut cols = vec![];
    for r in c.column_refs() {
        let i = match tracked.iter().position(|t| t == &r.name) {
            Some(i) => i,
            None => {
                tracked.push(r.name.clone());
                tracked.len() - 1
            }
        };
        if i == time {
            return false;
        }
        cols.push(i);
    }
    conds.push(cols);
    true
}

/// A hypertable seen through its newest `n` rows per `unit` (per source).
#[derive(Debug)]
struct NewestRowsScan {
    unit: Vec<String>,
    n: usize,
}

#[async_trait]
impl ScanVariant for NewestRowsScan {
    async fn scan(
        &self,
        h: &HypertableProvider,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let engine = h.engine();
        let view = engine
            .view(h.table().id)
            .ok_or_else(|| crate::Error::UndefinedTable(h.table().name.clone()))?;
        let table = view.table.clone();
        let schema = table.schema();
        let stats = engine.file_stats().for_table(&table);
        let (keep_files, keep_mem) = kept_sources(state, &table, &view.mem, filters, &stats)?;
        let unit: Vec<usize> = self
            .unit
            .iter()
            .map(|c| schema.index_of(c))
            .collect::<Result<_, _>>()?;
        let tc = table.time_column.clone().unwrap_or_default();
        let time = schema.index_of(&tc)?;
        // Entries are kept for a power of two rows per series: nearby `n` share them.
        let per = self.n.next_power_of_two();
        let what = format!("newest {per} by {}", self.unit.join(","));
        let cache = engine.derived_rows().clone();
        let mut sources = vec![];
        let (mut cached, mut files) = (0, 0);
        for (f, keep) in table.files.iter().zip(&keep_files) {
            if !*keep {
                continue;
            }
            files += 1;
            match cache.get(&f.path, &what) {
                Some(rows) => {
                    cached += 1;
                    sources.push(Source::Rows(storage::adapt_batch(&rows, &schema)?));
                }
                None => sources.push(Source::File {
                    path: f.path.clone(),
                    read: h.parquet_scan(state, &schema, &[f], 1, None, None, None, false)?,
                }),
            }
        }
        let mut mem_batches = 0;
        for ((_, batches), keep) in view.mem.iter().zip(&keep_mem) {
            if *keep {
                for b in batches {
                    mem_batches += 1;
                    sources.push(Source::Mem(storage::adapt_batch(&b.batch, &schema)?));
                }
            }
        }
        // Sources that overlap in time (or a memtable batch holding a point twice) may
        // hold one point twice: only then do the picked rows need merging.
        let (kept_files, kept_mem) = kept(&table, &view.mem, &keep_files, &keep_mem);
        let overlapping = !dirty_ranges(&table, &kept_files, &kept_mem).is_empty();
        let dedup = storage::dedup::key_indices(&table, &schema)
            .filter(|_| overlapping)
            .map(|k| (k, !table.merges_fields()));
        let props = one_partition(schema.clone());
        let exec: Arc<dyn ExecutionPlan> = Arc::new(LatestRowsExec {
            table: table.name.clone(),
            unit_names: self.unit.clone(),
            schema: schema.clone(),
            unit,
            time,
            per,
            dedup,
            what,
            cache,
            sources,
            files,
            cached,
            files_pruned: table.files.len() - files,
            mem_batches,
            props,
        });
        // The filters (those the table applies exactly among them) run on the rows
        // picked; the rule let only filters through that may.
        let exec = match conjunction(filters.to_vec()) {
            Some(f) => {
                let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
                Arc::new(FilterExec::try_new(
                    state.create_physical_expr(f, &df_schema)?,
                    exec,
                )?)
            }
            None => exec,
        };
        Ok(Some(match projection {
            Some(cols) => select_columns(exec, cols)?,
            None => exec,
        }))
    }
}

/// Where one source's newest rows come from.
#[derive(Debug)]
enum Source {
    /// Kept from an earlier query.
    Rows(RecordBatch),
    /// To be derived by reading the whole file (once), then kept.
    File {
        path: String,
        read: Arc<dyn ExecutionPlan>,
    },
    /// A memtable batch.
    Mem(RecordBatch),
}

/// Reads the newest `per` rows per `unit` of each source (oldest source first),
/// merges duplicate points of line-protocol tables, and returns those rows.
#[derive(Debug)]
pub struct LatestRowsExec {
    table: String,
    unit_names: Vec<String>,
    schema: SchemaRef,
    unit: Vec<usize>,
    time: usize,
    per: usize,
    /// Key columns and whether the latest row wins whole, for tables that merge.
    dedup: Option<(Vec<usize>, bool)>,
    what: String,
    cache: Arc<DerivedRows>,
    sources: Vec<Source>,
    files: usize,
    cached: usize,
    files_pruned: usize,
    mem_batches: usize,
    props: Arc<PlanProperties>,
}

impl DisplayAs for LatestRowsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "LatestRowsExec: table={}, newest={} per ({}), files={} (rows kept for {}), files_pruned={}, memtable_batches={}{}",
            self.table,
            self.per,
            self.unit_names.join(", "),
            self.files,
            self.cached,
            self.files_pruned,
            self.mem_batches,
            if self.dedup.is_some() {
                ", merging overlapping sources"
            } else {
                ""
            },
        )
    }
}

impl ExecutionPlan for LatestRowsExec {
    fn name(&self) -> &str {
        "LatestRowsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    // The file reads stay hidden from the optimizer: they run once, whole, and only
    // when a file's rows are not kept yet.
    leaf_plan_methods!();

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "LatestRowsExec has one partition, asked for {partition}"
            )));
        }
        let schema = self.schema.clone();
        let (unit, time, per) = (self.unit.clone(), self.time, self.per);
        let dedup = self.dedup.clone();
        let what = self.what.clone();
        let cache = self.cache.clone();
        let mut work = vec![];
        for s in &self.sources {
            work.push(match s {
                Source::Rows(b) => Source::Rows(b.clone()),
                Source::Mem(b) => Source::Mem(b.clone()),
                Source::File { path, read } => Source::File {
                    path: path.clone(),
                    read: read.clone(),
                },
            });
        }
        let out_schema = schema.clone();
        let fut = async move {
            let mut parts = Vec::with_capacity(work.len());
            for s in work {
                match s {
                    Source::Rows(b) => parts.push(b),
                    Source::Mem(b) => parts.push(mem_newest(&b, &unit, time, per, &what)?),
                    Source::File { path, read } => {
                        let mut acc: Option<RecordBatch> = None;
                        let n = read.properties().partitioning.partition_count();
                        for p in 0..n {
                            let mut stream = read.execute(p, context.clone())?;
                            while let Some(b) = stream.next().await {
                                let b = newest(&b?, &unit, time, per)?;
                                acc = Some(match acc {
                                    None => b,
                                    Some(a) => {
                                        let both = concat_batches(&schema, [&a, &b])?;
                                        newest(&both, &unit, time, per)?
                                    }
                                });
                            }
                        }
                        let rows = acc.unwrap_or_else(|| RecordBatch::new_empty(schema.clone()));
                        cache.insert(&path, &what, rows.clone());
                        parts.push(rows);
                    }
                }
            }
            let all = concat_batches(&schema, &parts)?;
            match dedup {
                Some((keys, whole)) => {
                    storage::dedup::dedup_sort(&all, &keys, whole).map_err(DataFusionError::from)
                }
                None => Ok(all),
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            out_schema,
            futures::stream::once(fut),
        )))
    }
}

/// [`newest`] of a memtable batch, remembered while the batch lives: memtable
/// batches never change, and a busy memtable holds many, most of them already seen
/// by the previous query. An entry is found by the address of the batch's first
/// column and holds a weak reference to it, so it can never be taken for another
/// batch's (the address stays taken while the weak reference exists).
fn mem_newest(
    batch: &RecordBatch,
    unit: &[usize],
    time: usize,
    n: usize,
    what: &str,
) -> DfResult<RecordBatch> {
    type Entry = (std::sync::Weak<dyn Array>, String, RecordBatch);
    static SEEN: std::sync::LazyLock<
        parking_lot::Mutex<std::collections::HashMap<usize, Vec<Entry>>>,
    > = std::sync::LazyLock::new(Default::default);
    let Some(first) = batch.columns().first() else {
        return newest(batch, unit, time, n);
    };
    let addr = Arc::as_ptr(first) as *const u8 as usize;
    {
        let mut seen = SEEN.lock();
        seen.retain(|_, v| {
            v.retain(|(w, _, _)| w.strong_count() > 0);
            !v.is_empty()
        });
        if let Some(v) = seen.get(&addr)
            && let Some((_, _, rows)) = v.iter().find(|(w, w_what, _)| {
                w_what == what && w.upgrade().is_some_and(|a| Arc::ptr_eq(&a, first))
            })
            && rows.schema() == batch.schema()
        {
            return Ok(rows.clone());
        }
    }
    let rows = newest(batch, unit, time, n)?;
    SEEN.lock().entry(addr).or_default().push((
        Arc::downgrade(first),
        what.to_string(),
        rows.clone(),
    ));
    Ok(rows)
}

/// The rows of `batch` among the newest `n` of their `unit` value (by column
/// `time`), ties at the n-th time included, in their order in `batch`.
pub fn newest(batch: &RecordBatch, unit: &[usize], time: usize, n: usize) -> DfResult<RecordBatch> {
    let rows = batch.num_rows();
    if rows <= n {
        return Ok(batch.clone());
    }
    let times: ArrayRef = cast(batch.column(time), &DataType::Int64)?;
    let times = times.as_primitive::<Int64Type>();
    let t = |i: usize| {
        if times.is_valid(i) {
            times.value(i)
        } else {
            i64::MIN
        }
    };
    // The group of each row.
    let (groups, count) = if unit.is_empty() {
        (vec![0u32; rows], 1)
    } else {
        let fields = unit
            .iter()
            .map(|i| SortField::new(batch.schema().field(*i).data_type().clone()))
            .collect();
        let conv = RowConverter::new(fields)?;
        let cols: Vec<ArrayRef> = unit.iter().map(|i| batch.column(*i).clone()).collect();
        let keyed = conv.convert_columns(&cols)?;
        let mut ids: std::collections::HashMap<&[u8], u32> = std::collections::HashMap::new();
        let mut groups = Vec::with_capacity(rows);
        for i in 0..rows {
            let next = ids.len() as u32;
            groups.push(*ids.entry(keyed.row(i).data()).or_insert(next));
        }
        let count = ids.len();
        drop(ids);
        (groups, count)
    };
    // The n-th newest time of each group.
    let mut per_group: Vec<Vec<i64>> = vec![vec![]; count];
    for (i, g) in groups.iter().enumerate() {
        per_group[*g as usize].push(t(i));
    }
    let floor: Vec<i64> = per_group
        .into_iter()
        .map(|mut ts| {
            if ts.len() <= n {
                i64::MIN
            } else {
                let (_, nth, _) = ts.select_nth_unstable_by(n - 1, |a, b| b.cmp(a));
                *nth
            }
        })
        .collect();
    let keep: UInt32Array = (0..rows)
        .filter(|i| t(*i) >= floor[groups[*i] as usize])
        .map(|i| i as u32)
        .collect();
    if keep.len() == rows {
        return Ok(batch.clone());
    }
    Ok(take_record_batch(batch, &keep)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn batch(hosts: &[&str], times: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "host",
                Arc::new(StringArray::from(hosts.to_vec())) as ArrayRef,
            ),
            (
                "time",
                Arc::new(Int64Array::from(times.to_vec())) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    fn pairs(b: &RecordBatch) -> Vec<(String, i64)> {
        let h = b.column(0).as_string::<i32>();
        let t = b.column(1).as_primitive::<Int64Type>();
        (0..b.num_rows())
            .map(|i| (h.value(i).to_string(), t.value(i)))
            .collect()
    }

    #[test]
    fn keeps_the_newest_rows_of_each_group_with_ties() {
        let b = batch(&["a", "b", "a", "b", "a", "c"], &[1, 5, 3, 5, 2, 0]);
        let one = newest(&b, &[0], 1, 1).unwrap();
        assert_eq!(
            pairs(&one),
            vec![
                ("b".into(), 5),
                ("a".into(), 3),
                ("b".into(), 5),
                ("c".into(), 0)
            ]
        );
        let two = newest(&b, &[0], 1, 2).unwrap();
        assert_eq!(
            pairs(&two),
            vec![
                ("b".into(), 5),
                ("a".into(), 3),
                ("b".into(), 5),
                ("a".into(), 2),
                ("c".into(), 0)
            ]
        );
        let all = newest(&b, &[], 1, 2).unwrap();
        assert_eq!(pairs(&all), vec![("b".into(), 5), ("b".into(), 5)]);
    }
}
