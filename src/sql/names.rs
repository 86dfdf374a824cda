//! Result column names as PostgreSQL assigns them: the alias, else the column or
//! function name, else `?column?` (DataFusion would name columns by expression).

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem, SetExpr};

/// Separates a PostgreSQL column name from the suffix that keeps a rewritten
/// select item's alias unique (see `sql::keep_rewritten_names`).
pub const UNIQUE_MARK: &str = "#sundial";

/// Names of the top-level result columns, or `None` when they cannot be known
/// from the text alone (`*`).
pub fn query_names(q: &Query) -> Option<Vec<String>> {
    set_names(&q.body)
}

fn set_names(body: &SetExpr) -> Option<Vec<String>> {
    match body {
        SetExpr::Select(sel) if matches!(sel.projection.as_slice(), [SelectItem::Wildcard(_)]) => {
            derived_names(sel)
        }
        SetExpr::Select(sel) => sel
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::UnnamedExpr(e) => Some(expr_name(e)),
                SelectItem::ExprWithAlias { alias, .. } => Some(if alias.quote_style.is_some() {
                    match alias.value.split_once(UNIQUE_MARK) {
                        Some((name, _)) => name.to_string(),
                        None => alias.value.clone(),
                    }
                } else {
                    alias.value.to_ascii_lowercase()
                }),
                _ => None,
            })
            .collect(),
        SetExpr::SetOperation { left, .. } => set_names(left),
        SetExpr::Query(q) => query_names(q),
        _ => None,
    }
}

/// `SELECT * FROM (subquery) [AS t (columns)]`: the subquery's names, renamed by the
/// alias's column list.
fn derived_names(sel: &datafusion::sql::sqlparser::ast::Select) -> Option<Vec<String>> {
    use datafusion::sql::sqlparser::ast::TableFactor;
    let [from] = sel.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Derived {
        subquery, alias, ..
    } = &from.relation
    else {
        return None;
    };
    let mut names = query_names(subquery)?;
    if let Some(a) = alias {
        for (n, c) in names.iter_mut().zip(&a.columns) {
            *n = ident(&c.name);
        }
    }
    Some(names)
}

fn ident(i: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

/// PostgreSQL's name for an unaliased select-list expression.
pub fn expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => ident(i),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident).unwrap_or_default(),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(ident)
            .unwrap_or_else(|| "?column?".into()),
        Expr::Cast {
            expr, data_type, ..
        } => match expr.as_ref() {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Function(_) => {
                expr_name(expr)
            }
            _ => pg_type_name(&data_type.to_string()),
        },
        Expr::Nested(inner) => expr_name(inner),
        Expr::Case { .. } => "case".into(),
        // Functions sqlparser has its own syntax for, named as PostgreSQL names them.
        Expr::Floor { .. } => "floor".into(),
        Expr::Ceil { .. } => "ceil".into(),
        Expr::Substring { .. } => "substring".into(),
        Expr::Position { .. } => "position".into(),
        Expr::Trim { .. } => "btrim".into(),
        Expr::Overlay { .. } => "overlay".into(),
        Expr::AtTimeZone { .. } => "timezone".into(),
        Expr::Interval(_) => "interval".into(),
        Expr::Array(_) => "array".into(),
        Expr::TypedString(t) => pg_type_name(&t.data_type.to_string()),
        Expr::Extract { .. } => "extract".into(),
        Expr::Exists { .. } => "exists".into(),
        Expr::Subquery(q) => query_names(q)
            .and_then(|n| n.into_iter().next())
            .unwrap_or_else(|| "?column?".into()),
        _ => "?column?".into(),
    }
}

fn pg_type_name(t: &str) -> String {
    let l = t.to_ascii_lowercase();
    let base = l.split('(').next().unwrap_or(&l).trim();
    match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "double precision" | "float8" | "double" => "float8",
        "real" | "float4" => "float4",
        "boolean" | "bool" => "bool",
        "timestamptz" | "timestamp with time zone" => "timestamptz",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "character varying" | "varchar" => "varchar",
        "numeric" | "decimal" => "numeric",
        other => return other.to_string(),
    }
    .to_string()
}

/// Applies PostgreSQL names to a result schema when the counts match.
pub fn rename(schema: SchemaRef, names: Option<&[String]>) -> SchemaRef {
    match names {
        Some(n) if n.len() == schema.fields().len() => Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .zip(n)
                .map(|(f, name)| f.as_ref().clone().with_name(name))
                .collect::<Vec<_>>(),
        )),
        // `SELECT *` over a subquery: its items' own names, without the suffix that
        // kept them unique (`int8#sundial1` is `int8`).
        _ if schema
            .fields()
            .iter()
            .any(|f| f.name().contains(UNIQUE_MARK)) =>
        {
            Arc::new(Schema::new_with_metadata(
                schema
                    .fields()
                    .iter()
                    .map(|f| {
                        let name = f.name().split(UNIQUE_MARK).next().unwrap_or_default();
                        f.as_ref().clone().with_name(name)
                    })
                    .collect::<Vec<_>>(),
                schema.metadata().clone(),
            ))
        }
        _ => schema,
    }
}

/// Gives select items whose PostgreSQL names repeat an earlier name an alias of their
/// own, because DataFusion rejects duplicate projection names that PostgreSQL allows.
pub fn alias_duplicates(q: &mut Query) {
    let SetExpr::Select(sel) = q.body.as_mut() else {
        return;
    };
    let mut seen = std::collections::HashSet::new();
    for (i, item) in sel.projection.iter_mut().enumerate() {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let name = expr_name(e);
                if !seen.insert(name) {
                    let e = std::mem::replace(
                        e,
                        Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
                    );
                    *item = SelectItem::ExprWithAlias {
                        expr: e,
                        alias: datafusion::sql::sqlparser::ast::Ident::new(format!(
                            "__sundial_col{i}"
                        )),
                    };
                }
            }
            // `SELECT time AS "time", extract(epoch from time) AS "time"` (Grafana)
            SelectItem::ExprWithAlias { alias, .. } if !seen.insert(ident(alias)) => {
                *alias = datafusion::sql::sqlparser::ast::Ident::new(format!("__sundial_col{i}"));
            }
            _ => {}
        }
    }
}

/// Aliases select items of any `SELECT` (subqueries and set-operation branches too)
/// whose PostgreSQL name repeats an earlier item's, as `name#sundial<i>` (read back as
/// `name`): DataFusion rejects `SELECT pubname, NULL, NULL` in a `UNION` branch.
pub fn mark_duplicates(sel: &mut datafusion::sql::sqlparser::ast::Select) {
    distinguish_casts(sel);
    let mut seen = std::collections::HashSet::new();
    // DataFusion's names of unaliased items: its names leave casts out, so
    // `SELECT 1, 1::int8` (PostgreSQL: `?column?`, `int8`) would clash there.
    let mut df_seen = std::collections::HashSet::new();
    for (i, item) in sel.projection.iter_mut().enumerate() {
        let (name, expr, df_clash) = match item {
            SelectItem::UnnamedExpr(e) => {
                let clash = !df_seen.insert(without_casts(e));
                (expr_name(e), e, clash)
            }
            SelectItem::ExprWithAlias { alias, expr } => (ident(alias), expr, false),
            _ => continue,
        };
        if seen.insert(name.clone()) && !df_clash {
            continue;
        }
        let e = std::mem::replace(
            expr,
            Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
        );
        *item = SelectItem::ExprWithAlias {
            expr: e,
            alias: datafusion::sql::sqlparser::ast::Ident::with_quote(
                '"',
                format!("{name}{UNIQUE_MARK}{i}"),
            ),
        };
    }
}

/// An expression's text with its casts left out, as DataFusion names it.
fn without_casts(e: &Expr) -> String {
    use datafusion::sql::sqlparser::ast::VisitMut;
    let mut stripped = e.clone();
    let _ = stripped.visit(&mut StripCasts);
    stripped.to_string()
}

/// Replaces every cast by its operand.
struct StripCasts;

impl datafusion::sql::sqlparser::ast::VisitorMut for StripCasts {
    type Break = ();
    fn post_visit_expr(&mut self, e: &mut Expr) -> std::ops::ControlFlow<()> {
        if let Expr::Cast { expr, .. } = e {
            let inner = std::mem::replace(
                expr.as_mut(),
                Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
            );
            *e = inner;
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// Function calls of a select list that differ only in casts of their arguments
/// (`sum(reqs), sum(reqs::float8)`) would get the same DataFusion name (its names
/// leave casts out) and be refused as duplicates: each later one gets its casts
/// wrapped in `pg_cast_id` (an identity function) once more than the one before.
fn distinguish_casts(sel: &mut datafusion::sql::sqlparser::ast::Select) {
    use datafusion::sql::sqlparser::ast::{VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    struct Wrap(usize);
    impl VisitorMut for Wrap {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            if matches!(e, Expr::Cast { .. }) {
                for _ in 0..self.0 {
                    let inner = std::mem::replace(
                        e,
                        Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
                    );
                    *e = crate::sql::call("pg_cast_id", vec![inner]);
                }
            }
            ControlFlow::Continue(())
        }
    }
    // stripped text -> the distinct full texts with casts, in order
    let mut seen: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut plain: std::collections::HashSet<String> = Default::default();
    let mut depth = vec![0usize; sel.projection.len()];
    // Aggregates of HAVING are planned beside the select list's: `SELECT
    // sum(lat::numeric) … HAVING sum(lat) > 0` clashes as well.
    let mut having_calls: Vec<(String, String)> = vec![];
    if let Some(h) = &sel.having {
        let _ = datafusion::sql::sqlparser::ast::visit_expressions(h, |e| {
            if let Expr::Function(_) = e {
                having_calls.push((without_casts(e), e.to_string()));
            }
            ControlFlow::<()>::Continue(())
        });
    }
    for (key, full) in &having_calls {
        if key == full {
            plain.insert(key.clone());
        }
    }
    for (i, item) in sel.projection.iter().enumerate() {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        let Expr::Function(_) = e else { continue };
        let full = e.to_string();
        let key = without_casts(e);
        if key == full {
            plain.insert(key);
            continue;
        }
        let variants = seen.entry(key).or_default();
        let k = match variants.iter().position(|v| *v == full) {
            Some(k) => k,
            None => {
                variants.push(full);
                variants.len() - 1
            }
        };
        depth[i] = k + 1;
    }
    for (i, item) in sel.projection.iter_mut().enumerate() {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        if depth[i] == 0 {
            continue;
        }
        let key = without_casts(e);
        let clash = plain.contains(&key) || seen.get(&key).is_some_and(|v| v.len() > 1);
        // The first variant with casts needs no wrapping unless a cast-free one clashes.
        let n = if plain.contains(&key) {
            depth[i]
        } else {
            depth[i] - 1
        };
        if clash && n > 0 {
            let _ = e.visit(&mut Wrap(n));
        }
    }
    // A call with casts in HAVING whose cast-free form is selected: one wrapping
    // more than any select-list variant of it.
    if let Some(h) = sel.having.as_mut() {
        let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(h, |e| {
            if let Expr::Function(_) = e {
                let full = e.to_string();
                let key = without_casts(e);
                if key != full && plain.contains(&key) {
                    let n = seen.get(&key).map_or(0, |v| v.len()) + 1;
                    // Post-order: the wrapped casts are not visited again.
                    let _ = e.visit(&mut Wrap(n));
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
}
