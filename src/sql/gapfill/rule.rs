//! The analyzer rule that plans gap filling: over an aggregate grouped by
//! `time_bucket_gapfill(...)` it groups by `time_bucket(...)` instead and puts a
//! `GapFill` node above the aggregate (and its HAVING), and turns the select list's
//! `locf(x)` / `interpolate(x)` into columns that node fills.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Expr, Extension, LogicalPlan, Operator, Projection, ScalarUDF,
};
use datafusion::optimizer::AnalyzerRule;

use super::exec::{Fill, FillCol, GapFill, Seed};
use super::misplaced;
use crate::error::Error;

/// See the module documentation.
#[derive(Debug)]
pub struct HandleGapFill;

impl AnalyzerRule for HandleGapFill {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let done = plan.transform_up_with_subqueries(plan_gapfill)?;
        // Nodes above keep the schemas they were built with: filled columns are
        // nullable now (else `count(*) IS NULL` above would fold to false).
        let plan = if done.transformed {
            done.data
                .transform_up_with_subqueries(|p| Ok(Transformed::yes(p.recompute_schema()?)))?
                .data
        } else {
            done.data
        };
        // What no aggregate took is an error now, not when a row reaches it.
        plan.apply_with_subqueries(|p| {
            p.apply_expressions(|e| {
                e.apply(|e| {
                    if let Some(name) = marker(e) {
                        return Err(misplaced(name).into());
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "handle_gapfill"
    }
}

/// The marker function `e` calls, if any.
fn marker(e: &Expr) -> Option<&'static str> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    ["time_bucket_gapfill", "locf", "interpolate"]
        .into_iter()
        .find(|n| f.func.name() == *n)
}

fn unsupported(msg: impl Into<String>) -> datafusion::error::DataFusionError {
    Error::sql("0A000", msg).into()
}

/// `e` without the casts around it.
fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => strip(&c.expr),
        Expr::TryCast(c) => strip(&c.expr),
        Expr::Alias(a) => strip(&a.expr),
        other => other,
    }
}

fn is_null(e: &Expr) -> bool {
    matches!(strip(e), Expr::Literal(v, _) if v.is_null())
}

/// A text literal naming a time zone.
fn zone_literal(e: &Expr) -> Option<String> {
    match strip(e) {
        Expr::Literal(
            ScalarValue::Utf8(Some(t))
            | ScalarValue::Utf8View(Some(t))
            | ScalarValue::LargeUtf8(Some(t)),
            _,
        ) if crate::sql::functions::time_bucket::parse_zone(t).is_ok() => Some(t.clone()),
        _ => None,
    }
}

/// Rewrites one projection over an aggregate grouped by `time_bucket_gapfill`.
fn plan_gapfill(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    let LogicalPlan::Projection(proj) = &plan else {
        return Ok(Transformed::no(plan));
    };
    // Projection -> [Window | Filter]* -> Filter* (HAVING) -> Aggregate.
    let mut above: Vec<LogicalPlan> = vec![];
    let mut cur = proj.input.as_ref();
    let agg = loop {
        match cur {
            LogicalPlan::Window(w) => {
                above.push(cur.clone());
                cur = w.input.as_ref();
            }
            LogicalPlan::Filter(f) => {
                above.push(cur.clone());
                cur = f.input.as_ref();
            }
            LogicalPlan::Aggregate(a) => break a,
            _ => return Ok(Transformed::no(plan)),
        }
    };
    let calls: Vec<usize> = agg
        .group_expr
        .iter()
        .enumerate()
        .filter(|(_, e)| marker(strip(e)) == Some("time_bucket_gapfill"))
        .map(|(i, _)| i)
        .collect();
    let bucket = match calls.as_slice() {
        [] => return Ok(Transformed::no(plan)),
        [one] => *one,
        _ => {
            return Err(unsupported(
                "multiple time_bucket_gapfill calls are not supported",
            ));
        }
    };
    if agg
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)))
    {
        return Err(unsupported(
            "time_bucket_gapfill with GROUPING SETS, ROLLUP or CUBE is not supported",
        ));
    }
    // HAVING stays below the gap filling (TimescaleDB fills what HAVING removed).
    let having_count = above
        .iter()
        .rev()
        .take_while(|p| matches!(p, LogicalPlan::Filter(_)))
        .count();
    let having: Vec<LogicalPlan> = above.split_off(above.len() - having_count);

    // The call: width, ts [, zone] [, start, finish].
    let Expr::ScalarFunction(call) = strip(&agg.group_expr[bucket]) else {
        return Ok(Transformed::no(plan));
    };
    let args = call.args.clone();
    let (zone, start, finish) = match args.len() {
        2 => (None, None, None),
        3 => match zone_literal(&args[2]) {
            Some(z) => (Some(z), None, None),
            None => (None, Some(args[2].clone()), None),
        },
        4 => match zone_literal(&args[2]) {
            Some(z) => (Some(z), Some(args[3].clone()), None),
            None => (None, Some(args[2].clone()), Some(args[3].clone())),
        },
        _ => {
            let z = zone_literal(&args[2]).ok_or_else(|| {
                unsupported("time_bucket_gapfill: the time zone must be a literal zone name")
            })?;
            (Some(z), Some(args[3].clone()), Some(args[4].clone()))
        }
    };
    let ts = args[1].clone();
    let start = match start.filter(|e| !is_null(e)) {
        Some(e) => Some(e),
        None => bound_from_where(&agg.input, &ts, true),
    };
    let finish = match finish.filter(|e| !is_null(e)) {
        Some(e) => Some(e),
        None => bound_from_where(&agg.input, &ts, false),
    };
    let missing = |what: &str| {
        Error::sql(
            "0A000",
            format!(
                "missing time_bucket_gapfill argument: could not infer {what} from WHERE clause. Hint: Specify start and finish as arguments or in the WHERE clause."
            ),
        )
    };
    let start = start.ok_or_else(|| missing("start"))?;
    let finish = finish.ok_or_else(|| missing("finish"))?;

    // Group by time_bucket(...) under the gapfill call's name.
    let (qualifier, field) = agg.schema.qualified_field(bucket);
    let mut tb_args = vec![args[0].clone(), ts.clone()];
    if let Some(z) = &zone {
        tb_args.push(Expr::Literal(ScalarValue::Utf8(Some(z.clone())), None));
    }
    let time_bucket = Arc::new(ScalarUDF::new_from_impl(
        crate::sql::functions::time_bucket::TimeBucket::default(),
    ));
    let mut group_expr = agg.group_expr.clone();
    group_expr[bucket] = Expr::ScalarFunction(ScalarFunction::new_udf(time_bucket, tb_args))
        .alias_qualified(qualifier.cloned(), field.name());
    let new_agg = LogicalPlan::Aggregate(Aggregate::try_new(
        agg.input.clone(),
        group_expr,
        agg.aggr_expr.clone(),
    )?);
    let mut input = new_agg;
    for f in having.into_iter().rev() {
        input = f.with_new_exprs(f.expressions(), vec![input])?;
    }
    let keys: Vec<usize> = (0..agg.group_expr.len()).filter(|i| *i != bucket).collect();

    // locf / interpolate of the select list: each argument becomes a column.
    let mut found: Vec<Expr> = vec![];
    for e in &proj.expr {
        e.apply(|x| {
            if matches!(marker(x), Some("locf" | "interpolate")) && !found.contains(x) {
                found.push(x.clone());
                return Ok(TreeNodeRecursion::Jump);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    let width_in = input.schema().fields().len();
    let mut inner: Vec<Expr> = input
        .schema()
        .iter()
        .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
        .collect();
    let mut fills = vec![];
    for (i, call) in found.iter().enumerate() {
        let Expr::ScalarFunction(f) = call else {
            continue;
        };
        let name = f.func.name();
        let arg = |k: usize| f.args.get(k).filter(|e| !is_null(e)).cloned();
        let value = arg(0).ok_or_else(|| unsupported(format!("{name}() needs a value")))?;
        if name == "interpolate" {
            let t = datafusion::logical_expr::ExprSchemable::get_type(&value, input.schema())?;
            if !t.is_numeric() && !t.is_null() {
                return Err(Error::sql(
                    "42883",
                    format!("function interpolate({t}) does not exist: it interpolates numbers"),
                )
                .into());
            }
        }
        inner.push(value.alias(format!("__gapfill_{i}")));
        let seed = |e: Option<Expr>| e.map(|e| seed_of(e, input.schema(), &keys)).transpose();
        let (kind, prev, next) = if name == "locf" {
            let skip_nulls = match arg(2).as_ref().map(strip) {
                None => false,
                Some(Expr::Literal(ScalarValue::Boolean(Some(b)), _)) => *b,
                Some(_) => {
                    return Err(unsupported(
                        "locf: treat_null_as_missing must be a boolean constant",
                    ));
                }
            };
            (Fill::Locf { skip_nulls }, seed(arg(1))?, None)
        } else {
            (Fill::Interpolate, seed(arg(1))?, seed(arg(2))?)
        };
        fills.push(FillCol {
            col: width_in + i,
            kind,
            prev,
            next,
        });
    }
    let input = LogicalPlan::Projection(Projection::try_new(inner, Arc::new(input))?);
    let node = GapFill::try_new(
        input,
        bucket,
        keys,
        args[0].clone(),
        start,
        finish,
        zone,
        fills,
    )?;
    let mut input = LogicalPlan::Extension(Extension {
        node: Arc::new(node),
    });
    for p in above.into_iter().rev() {
        input = p.with_new_exprs(p.expressions(), vec![input])?;
    }
    let names = NamePreserver::new_for_projection();
    let mut exprs = vec![];
    for e in &proj.expr {
        let saved = names.save(e);
        let replaced = e
            .clone()
            .transform_down(|x| match found.iter().position(|c| *c == x) {
                Some(i) => Ok(Transformed::new(
                    Expr::Column(Column::from_name(format!("__gapfill_{i}"))),
                    true,
                    TreeNodeRecursion::Jump,
                )),
                None => Ok(Transformed::no(x)),
            })?
            .data;
        exprs.push(saved.restore(replaced));
    }
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(exprs, Arc::new(input))?,
    )))
}

/// A `prev` / `next` argument: outer references must be group keys (`keys` of the
/// aggregate's output `schema`).
fn seed_of(e: Expr, schema: &datafusion::common::DFSchema, keys: &[usize]) -> DfResult<Seed> {
    let mut outer: Vec<(Column, usize)> = vec![];
    let mut bad: Option<Column> = None;
    let mut note = |c: &Column| {
        if outer.iter().any(|(o, _)| o == c) {
            return;
        }
        let key = keys.iter().copied().find(|k| {
            let (q, f) = schema.qualified_field(*k);
            f.name() == &c.name && (c.relation.is_none() || q == c.relation.as_ref())
        });
        match key {
            Some(k) => outer.push((c.clone(), k)),
            None => bad = Some(c.clone()),
        }
    };
    e.apply(|x| {
        match x {
            Expr::OuterReferenceColumn(_, c) => note(c),
            Expr::ScalarSubquery(sq) => {
                for o in &sq.outer_ref_columns {
                    if let Expr::OuterReferenceColumn(_, c) = o {
                        note(c);
                    }
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if let Some(c) = bad {
        return Err(Error::sql(
            "42803",
            format!(
                "column \"{}\" must appear in the GROUP BY clause or be used in an aggregate function",
                c.flat_name()
            ),
        )
        .into());
    }
    Ok(Seed { expr: e, outer })
}

/// The bound of `ts` the WHERE clause under the aggregate gives: `ts >= x` / `ts > x`
/// (start) or `ts < x` / `ts <= x` (finish), or BETWEEN.
fn bound_from_where(plan: &LogicalPlan, ts: &Expr, start: bool) -> Option<Expr> {
    let ts = strip(ts);
    let constant = |e: &Expr| {
        e.column_refs().is_empty()
            && !e
                .exists(|x| {
                    Ok(matches!(
                        x,
                        Expr::ScalarSubquery(_) | Expr::OuterReferenceColumn(..)
                    ))
                })
                .unwrap_or(true)
    };
    // WHERE conjuncts: filters, and those already pushed into the scan.
    let mut terms: Vec<&Expr> = vec![];
    let mut cur = plan;
    loop {
        match cur {
            LogicalPlan::Filter(f) => {
                terms.extend(split_conjunction(&f.predicate));
                cur = f.input.as_ref();
            }
            LogicalPlan::TableScan(t) => {
                for f in &t.filters {
                    terms.extend(split_conjunction(f));
                }
                break;
            }
            _ => break,
        }
    }
    for t in terms {
        match t {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (col_left, other) = if strip(left) == ts {
                    (true, right.as_ref())
                } else if strip(right) == ts {
                    (false, left.as_ref())
                } else {
                    continue;
                };
                let is_start = match (op, col_left) {
                    (Operator::GtEq | Operator::Gt, true)
                    | (Operator::LtEq | Operator::Lt, false) => true,
                    (Operator::Lt | Operator::LtEq, true)
                    | (Operator::Gt | Operator::GtEq, false) => false,
                    _ => continue,
                };
                if is_start == start && constant(other) {
                    return Some(other.clone());
                }
            }
            Expr::Between(b) if !b.negated && strip(&b.expr) == ts => {
                let e = if start { &b.low } else { &b.high };
                if constant(e) {
                    return Some(e.as_ref().clone());
                }
            }
            _ => {}
        }
    }
    None
}
