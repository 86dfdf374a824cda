//! Correlated "top n per key" subqueries in FROM, TimescaleDB's documented
//! latest-row-per-device idiom:
//! `FROM devices d [LEFT JOIN] LATERAL (SELECT .. FROM t WHERE t.k = d.k [AND ..]
//! ORDER BY time DESC LIMIT n) l [ON true]`. DataFusion cannot run a correlated
//! LIMIT; this analyzer rule turns it into a join with the subquery's rows
//! numbered per key (`row_number() OVER (PARTITION BY t.k ORDER BY ..) <= n`).
//! The scalar form in a select list, `(SELECT v FROM t WHERE t.k = d.k ORDER BY
//! time DESC LIMIT 1)`, becomes a left join the same way. Other correlations
//! (`WHERE q.time <= t.time ORDER BY q.time DESC LIMIT 1`, an as-of lookup) number
//! the outer rows and keep the first n joined rows per outer row.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, ScalarValue};
use datafusion::error::Result;
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr::BinaryExpr;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    Expr, ExprFunctionExt, FetchType, JoinType, LogicalPlan, LogicalPlanBuilder, Operator,
    SkipType, col, lit,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule; see the module documentation.
#[derive(Debug, Default)]
pub struct LateralTopN;

impl AnalyzerRule for LateralTopN {
    fn name(&self) -> &str {
        "sundial_lateral_top_n"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::Join(_) => rewrite_join(node),
                LogicalPlan::Projection(_) => rewrite_scalar(node),
                other => Ok(Transformed::no(other)),
            })?
            .data)
    }
}

const KEY: &str = "__sundial_lateral_k";
const RN: &str = "__sundial_lateral_rn";
/// The outer row number of [`top_n_per_row`].
const RID: &str = "__sundial_lateral_row";

fn is_true(e: &Expr) -> bool {
    matches!(e, Expr::Literal(ScalarValue::Boolean(Some(true)), _))
}

fn rewrite_join(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Join(j) = &node else {
        return Ok(Transformed::no(node));
    };
    let plain = j.on.is_empty() && j.filter.as_ref().is_none_or(is_true);
    let join_type = match j.join_type {
        JoinType::Inner if plain => JoinType::Inner,
        JoinType::Left if plain => JoinType::Left,
        _ => return Ok(Transformed::no(node)),
    };
    let LogicalPlan::SubqueryAlias(sa) = j.right.as_ref() else {
        return Ok(Transformed::no(node));
    };
    let LogicalPlan::Subquery(sq) = sa.input.as_ref() else {
        return Ok(Transformed::no(node));
    };
    let Some((inner, keys, _)) = top_n_per_key(&sq.subquery)? else {
        // Not correlated by equalities alone: number the outer rows instead.
        let Some((plan, _)) =
            top_n_per_row(j.left.as_ref(), &sq.subquery, join_type, sa.alias.table())?
        else {
            return Ok(Transformed::no(node));
        };
        let cols: Vec<Expr> = j.schema.columns().into_iter().map(Expr::Column).collect();
        let out = LogicalPlanBuilder::from(plan).project(cols)?.build()?;
        return Ok(Transformed::yes(out));
    };
    let right = LogicalPlanBuilder::from(inner)
        .alias(sa.alias.clone())?
        .build()?;
    let on: Vec<Expr> = keys
        .iter()
        .enumerate()
        .map(|(i, outer)| {
            Expr::Column(outer.clone()).eq(Expr::Column(Column::new(
                Some(sa.alias.clone()),
                format!("{KEY}{i}"),
            )))
        })
        .collect();
    let joined = LogicalPlanBuilder::from(j.left.as_ref().clone())
        .join_on(right, join_type, on)?
        .build()?;
    // Keep the join's columns exactly as they were (the key columns go again).
    let cols: Vec<Expr> = j.schema.columns().into_iter().map(Expr::Column).collect();
    let out = LogicalPlanBuilder::from(joined).project(cols)?.build()?;
    Ok(Transformed::yes(out))
}

/// A correlated subquery of the form `Limit n (Sort (Filter ..))`, with optional
/// projections above the sort and below it.
struct Shape<'a> {
    n: usize,
    above: Option<&'a datafusion::logical_expr::Projection>,
    sort: &'a datafusion::logical_expr::Sort,
    below: Option<&'a datafusion::logical_expr::Projection>,
    filter: &'a datafusion::logical_expr::Filter,
}

fn shape(plan: &LogicalPlan) -> Result<Option<Shape<'_>>> {
    let LogicalPlan::Limit(limit) = plan else {
        return Ok(None);
    };
    let (Ok(SkipType::Literal(0)), Ok(FetchType::Literal(Some(n)))) =
        (limit.get_skip_type(), limit.get_fetch_type())
    else {
        return Ok(None);
    };
    let (above, sort) = match limit.input.as_ref() {
        LogicalPlan::Sort(s) => (None, s),
        LogicalPlan::Projection(p) => match p.input.as_ref() {
            LogicalPlan::Sort(s) => (Some(p), s),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    if sort.fetch.is_some_and(|f| f < n) {
        return Ok(None);
    }
    let (below, filter) = match sort.input.as_ref() {
        LogicalPlan::Filter(f) => (None, f),
        LogicalPlan::Projection(p) => match p.input.as_ref() {
            LogicalPlan::Filter(f) => (Some(p), f),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    if filter
        .input
        .exists(|p| Ok(p.expressions().iter().any(|e| e.contains_outer())))?
    {
        return Ok(None);
    }
    Ok(Some(Shape {
        n,
        above,
        sort,
        below,
        filter,
    }))
}

/// `Limit n (Sort (Filter with t.k = outer.k ...)))`, with projections around the
/// sort, as a plan of the top `n` rows per key (its key columns `KEY<i>` added),
/// and the outer columns the keys must equal.
fn top_n_per_key(plan: &LogicalPlan) -> Result<Option<(LogicalPlan, Vec<Column>, u64)>> {
    let Some(Shape {
        n,
        above,
        sort,
        below,
        filter,
    }) = shape(plan)?
    else {
        return Ok(None);
    };
    let mut outer = vec![];
    let mut inner = vec![];
    let mut rest = vec![];
    for c in split_conjunction(&filter.predicate) {
        match c {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => match (left.as_ref(), right.as_ref()) {
                (Expr::OuterReferenceColumn(_, o), i) | (i, Expr::OuterReferenceColumn(_, o))
                    if !i.contains_outer() =>
                {
                    outer.push(o.clone());
                    inner.push(i.clone());
                }
                _ if c.contains_outer() => return Ok(None),
                _ => rest.push(c.clone()),
            },
            _ if c.contains_outer() => return Ok(None),
            _ => rest.push(c.clone()),
        }
    }
    if outer.is_empty() {
        return Ok(None);
    }
    let mut base = LogicalPlanBuilder::from(filter.input.as_ref().clone());
    if let Some(p) = conjunction(rest) {
        base = base.filter(p)?;
    }
    // The sort's input columns plus the keys, numbered per key in the sort's order.
    let mut exprs: Vec<Expr> = match below {
        Some(p) => p.expr.clone(),
        None => filter
            .input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect(),
    };
    let key_cols: Vec<Expr> = (0..inner.len()).map(|i| col(format!("{KEY}{i}"))).collect();
    for (i, e) in inner.into_iter().enumerate() {
        exprs.push(e.alias(format!("{KEY}{i}")));
    }
    let keyed = base.project(exprs)?.build()?;
    let keyed_cols: Vec<Expr> = keyed
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let numbered = row_number()
        .partition_by(key_cols.clone())
        .order_by(sort.expr.clone())
        .build()?
        .alias(RN);
    let top = LogicalPlanBuilder::from(keyed)
        .window(vec![numbered])?
        .filter(col(RN).lt_eq(lit(n as u64)))?;
    let out: Vec<Expr> = match above {
        Some(p) => p.expr.iter().cloned().chain(key_cols).collect(),
        None => keyed_cols,
    };
    let plan = top.project(out)?.build()?;
    Ok(Some((plan, outer, n as u64)))
}

/// Any other correlation (`q.time <= t.time`): `outer`'s rows are numbered, joined
/// with the subquery's rows on the correlated predicates, and the first `n` per
/// outer row (in the subquery's order) kept. Returns the plan with `outer`'s columns
/// and then the subquery's, these qualified by `alias`; `None` when the subquery
/// has another shape.
fn top_n_per_row(
    outer: &LogicalPlan,
    plan: &LogicalPlan,
    join_type: JoinType,
    alias: &str,
) -> Result<Option<(LogicalPlan, usize)>> {
    let Some(Shape {
        n,
        above,
        sort,
        below,
        filter,
    }) = shape(plan)?
    else {
        return Ok(None);
    };
    let mut on = vec![];
    let mut rest = vec![];
    for c in split_conjunction(&filter.predicate) {
        if c.contains_outer() {
            on.push(
                c.clone()
                    .transform_up(|e| {
                        Ok(match e {
                            Expr::OuterReferenceColumn(_, c) => Transformed::yes(Expr::Column(c)),
                            other => Transformed::no(other),
                        })
                    })?
                    .data,
            );
        } else {
            rest.push(c.clone());
        }
    }
    if on.is_empty() {
        return Ok(None);
    }
    let mut base = LogicalPlanBuilder::from(filter.input.as_ref().clone());
    if let Some(p) = conjunction(rest) {
        base = base.filter(p)?;
    }
    if let Some(p) = below {
        // The projection under the sort, plus the columns the join predicates use.
        let mut exprs = p.expr.clone();
        for c in filter.input.schema().columns() {
            if !p.schema.has_column(&c) && on.iter().any(|e| e.column_refs().contains(&c)) {
                exprs.push(Expr::Column(c));
            }
        }
        base = base.project(exprs)?;
    }
    let base = base.build()?;
    let outer_cols: Vec<Expr> = outer
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let inner_out: Vec<Expr> = match (above, below) {
        (Some(p), _) => p.expr.clone(),
        (None, Some(p)) => p.schema.columns().into_iter().map(Expr::Column).collect(),
        (None, None) => base
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect(),
    };
    let width = inner_out.len();
    let numbered_outer = LogicalPlanBuilder::from(outer.clone())
        .window(vec![row_number().alias(RID)])?
        .build()?;
    let per_row = row_number()
        .partition_by(vec![col(RID)])
        .order_by(sort.expr.clone())
        .build()?
        .alias(RN);
    let top = LogicalPlanBuilder::from(numbered_outer)
        .join_on(base, join_type, on)?
        .window(vec![per_row])?
        .filter(col(RN).lt_eq(lit(n as u64)))?;
    let names = plan.schema().fields().iter().map(|f| f.name().clone());
    let out: Vec<Expr> = outer_cols
        .into_iter()
        .chain(
            inner_out
                .into_iter()
                .zip(names)
                .map(|(e, name)| e.alias_qualified(Some(alias), name)),
        )
        .collect();
    Ok(Some((top.project(out)?.build()?, width)))
}

/// A select list's correlated `(SELECT v ... ORDER BY .. LIMIT 1)`: a left join
/// with the first row per key, the subquery replaced by its column.
fn rewrite_scalar(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Projection(p) = &node else {
        return Ok(Transformed::no(node));
    };
    if !p.expr.iter().any(|e| {
        e.exists(|x| Ok(matches!(x, Expr::ScalarSubquery(_))))
            .unwrap_or(false)
    }) {
        return Ok(Transformed::no(node));
    }
    let mut input = p.input.as_ref().clone();
    let mut exprs = Vec::with_capacity(p.expr.len());
    let mut changed = false;
    let mut k = 0;
    for e in &p.expr {
        let new = e.clone().transform_up(|x| {
            let Expr::ScalarSubquery(sq) = x else {
                return Ok(Transformed::no(x));
            };
            let want = sq
                .subquery
                .schema()
                .fields()
                .first()
                .map(|f| f.name().clone());
            let found = match top_n_per_key(&sq.subquery)? {
                Some((inner, keys, 1))
                    if inner.schema().fields().first().map(|f| f.name()) == want.as_ref() =>
                {
                    Some((inner, keys))
                }
                _ => None,
            };
            let Some(value) = want else {
                return Ok(Transformed::no(Expr::ScalarSubquery(sq)));
            };
            let alias = format!("__sundial_scalar{k}");
            let Some((inner, keys)) = found else {
                // Another correlation (`q.time <= t.time`): per outer row.
                return match top_n_per_row(&input, &sq.subquery, JoinType::Left, &alias)? {
                    Some((plan, 1)) if shape(&sq.subquery)?.is_some_and(|s| s.n == 1) => {
                        k += 1;
                        input = plan;
                        changed = true;
                        Ok(Transformed::yes(Expr::Column(Column::new(
                            Some(alias.as_str()),
                            value,
                        ))))
                    }
                    _ => Ok(Transformed::no(Expr::ScalarSubquery(sq))),
                };
            };
            k += 1;
            let right = LogicalPlanBuilder::from(inner)
                .alias(alias.as_str())?
                .build()?;
            let on: Vec<Expr> = keys
                .iter()
                .enumerate()
                .map(|(i, outer)| {
                    Expr::Column(outer.clone()).eq(Expr::Column(Column::new(
                        Some(alias.as_str()),
                        format!("{KEY}{i}"),
                    )))
                })
                .collect();
            input = LogicalPlanBuilder::from(input.clone())
                .join_on(right, JoinType::Left, on)?
                .build()?;
            changed = true;
            Ok(Transformed::yes(Expr::Column(Column::new(
                Some(alias.as_str()),
                value,
            ))))
        })?;
        exprs.push(if new.transformed {
            let (q, f) = p.schema.qualified_field(exprs.len());
            let name = f.name().clone();
            match q {
                Some(q) => new.data.alias_qualified(Some(q.clone()), name),
                None => new.data.alias(name),
            }
        } else {
            new.data
        });
    }
    if !changed {
        return Ok(Transformed::no(node));
    }
    let out = LogicalPlanBuilder::from(input).project(exprs)?.build()?;
    Ok(Transformed::yes(out))
}

/// Registered after DataFusion's analyzer rules (the plan is typed by then).
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(LateralTopN)
}
