//! Stored view definitions back as queries and plans, and which views depend on a
//! relation (plain views and continuous aggregates share both): DROP refuses, or
//! with CASCADE drops, the dependents.

use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{self, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{Session, args, names};
use crate::error::{Error, Result};

/// An expression from SQL text Sundial wrote itself.
pub(crate) fn parse_expr(sql: &str) -> Result<ast::Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| Error::Parse(e.to_string()))
}

/// A stored definition back as a query (it was normalized before it was stored).
pub(crate) fn parse_query(sql: &str) -> Result<Box<ast::Query>> {
    let mut stmts =
        Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| Error::Parse(e.to_string()))?;
    match (stmts.pop(), stmts.is_empty()) {
        (Some(Statement::Query(q)), true) => Ok(q),
        _ => Err(Error::Internal(format!(
            "stored view is not one query: {sql}"
        ))),
    }
}

/// The view's plan, its columns renamed to `columns`.
pub(crate) async fn plan_view(
    state: &SessionState,
    mut query: Box<ast::Query>,
    columns: &[String],
) -> Result<LogicalPlan> {
    names::alias_duplicates(&mut query);
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(Statement::Query(query))))
        .await?;
    let fields = plan.schema().columns();
    if columns.len() > fields.len() {
        return Err(Error::sql(
            "42601",
            "CREATE VIEW specifies more column names than columns",
        ));
    }
    let exprs: Vec<Expr> = fields
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let name = columns.get(i).cloned().unwrap_or_else(|| c.name.clone());
            Expr::Column(c).alias(name)
        })
        .collect();
    Ok(LogicalPlanBuilder::from(plan).project(exprs)?.build()?)
}

/// The views whose definitions name relation `name`.
fn dependents(s: &Session, name: &str) -> Result<Vec<String>> {
    use std::ops::ControlFlow;
    let m = s.engine.catalog().snapshot();
    let mut out = vec![];
    for v in m.database(&s.db)?.views.values() {
        let Ok(q) = parse_query(&v.sql) else { continue };
        let names = ast::visit_relations(&q, |r| {
            if args::table_name(r).is_ok_and(|t| t == name) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        if names.is_break() && v.name != name {
            out.push(v.name.clone());
        }
    }
    Ok(out)
}

/// Whether views depend on relation `name`.
pub fn dependents_exist(s: &Session, name: &str) -> Result<bool> {
    Ok(!dependents(s, name)?.is_empty())
}

/// Before relation `name` (a `kind`) is dropped: the views that depend on it are
/// dropped too with CASCADE, else the drop is refused (2BP01), as in PostgreSQL.
pub fn release(s: &Session, name: &str, kind: &str, cascade: bool) -> Result<()> {
    let deps = dependents(s, name)?;
    if deps.is_empty() {
        return Ok(());
    }
    if !cascade {
        return Err(Error::sql(
            "2BP01",
            format!(
                "cannot drop {kind} {name} because other objects depend on it (view {}); \
                 use DROP ... CASCADE to drop the dependent objects too",
                deps.join(", view ")
            ),
        ));
    }
    let m = s.engine.catalog().snapshot();
    let views = &m.database(&s.db)?.views;
    for d in deps {
        let cagg = views.get(&d).is_some_and(|v| v.cagg.is_some());
        release(s, &d, if cagg { "materialized view" } else { "view" }, true)?;
        if cagg {
            s.engine.drop_cagg(&s.db, &d)?;
        } else {
            s.engine.catalog().drop_view(&s.db, &d, true)?;
        }
    }
    Ok(())
}

/// The column names of a view over `query` whose plan has `width` columns named
/// `planned`: `CREATE … VIEW v (a, b)` first, then the query's own PostgreSQL names,
/// then the plan's. `what` names the statement in the error for too many names.
pub(crate) fn column_names(
    explicit: &[ast::ViewColumnDef],
    query: &ast::Query,
    planned: &[String],
    what: &str,
) -> Result<Vec<String>> {
    let explicit: Vec<String> = explicit.iter().map(|c| c.name.value.clone()).collect();
    if explicit.len() > planned.len() {
        return Err(Error::sql(
            "42601",
            format!("{what} specifies more column names than columns"),
        ));
    }
    let own = names::query_names(query).unwrap_or_default();
    let columns: Vec<String> = planned
        .iter()
        .enumerate()
        .map(|(i, p)| explicit.get(i).or(own.get(i)).unwrap_or(p).clone())
        .collect();
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = columns.iter().find(|c| !seen.insert(c.as_str())) {
        return Err(Error::sql(
            "42701",
            format!("column \"{dup}\" specified more than once"),
        ));
    }
    Ok(columns)
}
