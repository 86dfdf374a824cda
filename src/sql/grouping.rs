//! GROUP BY keys as PostgreSQL has them. DataFusion's planner adds the columns a
//! GROUP BY key determines (functional dependencies) as further keys, matching keys
//! by name; a cast's name is its operand's, so `GROUP BY k::date` over a grouped
//! subquery keyed by `k` grouped by every column of it too. This rule takes such
//! keys out again.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchema};
use datafusion::config::ConfigOptions;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// See the module documentation.
#[derive(Debug)]
pub struct ImpliedKeys;

impl AnalyzerRule for ImpliedKeys {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        let done = plan.transform_up_with_subqueries(|p| {
            let LogicalPlan::Aggregate(a) = &p else {
                return Ok(Transformed::no(p));
            };
            let keep = kept_keys(a);
            if keep.len() == a.group_expr.len() {
                return Ok(Transformed::no(p));
            }
            let agg = Aggregate::try_new(a.input.clone(), keep, a.aggr_expr.clone())?;
            Ok(Transformed::yes(LogicalPlan::Aggregate(agg)))
        })?;
        if !done.transformed {
            return Ok(done.data);
        }
        // The nodes above were built on the old aggregate's schema.
        Ok(done
            .data
            .transform_up_with_subqueries(|p| Ok(Transformed::yes(p.recompute_schema()?)))?
            .data)
    }

    fn name(&self) -> &str {
        "implied_group_keys"
    }
}

/// `a`'s keys without those the planner appended for a dependency it matched only
/// through a same-named non-column key (a cast).
fn kept_keys(a: &Aggregate) -> Vec<Expr> {
    let schema: &DFSchema = a.input.schema();
    let names = schema.field_names();
    let plain = |i: usize| {
        let col = Expr::Column(Column::from(schema.qualified_field(i)));
        a.group_expr.contains(&col)
    };
    let named = |i: usize| {
        a.group_expr
            .iter()
            .any(|g| g.schema_name().to_string() == names[i])
    };
    let mut wrong: Vec<usize> = vec![];
    let mut right: Vec<usize> = vec![];
    for d in schema.functional_dependencies().iter() {
        if !d.source_indices.iter().all(|i| named(*i)) {
            continue;
        }
        if d.source_indices.iter().all(|i| plain(*i)) {
            right.extend(d.target_indices.iter().copied());
        } else {
            wrong.extend(d.target_indices.iter().copied());
        }
    }
    wrong.retain(|i| !right.contains(i));
    if wrong.is_empty() {
        return a.group_expr.clone();
    }
    // The planner appends the targets after the written keys, in index order.
    let mut keys = a.group_expr.clone();
    let mut targets: Vec<usize> = wrong;
    targets.sort_unstable();
    targets.dedup();
    for i in targets.into_iter().rev() {
        let col = Expr::Column(Column::from(schema.qualified_field(i)));
        if keys.last() == Some(&col) {
            keys.pop();
        }
    }
    keys
}

/// The rule, for the analyzer's first rules.
pub fn rule() -> Arc<dyn AnalyzerRule + Send + Sync> {
    Arc::new(ImpliedKeys)
}
